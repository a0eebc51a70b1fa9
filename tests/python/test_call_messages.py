"""What a traced call says when it fails or refuses (prober21b M2, M6 and the check's
batch probe): the user's op and line, the error's own type and words."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch

import tracebridge
from tracebridge import OpError

from .graph_helpers import traced_by


def add_in_place(a):
    return a.add_(1)  # the line an op failure names


@pytest.mark.parametrize("runtime", ["codegen", "interpreter", "loaded"])
def test_an_op_failure_names_the_op_and_the_users_line_not_generated_code(tmp_path, runtime):
    traced = traced_by(runtime, add_in_place, torch.randn(4, 6), tmp_path)
    with pytest.raises(OpError) as info:
        traced(torch.randn(1, 6).expand(4, 6))  # a write into an expanded tensor
    text = str(info.value)
    assert "an op failed at Tensor.add_, " in text
    assert f"test_call_messages.py:{add_in_place.__code__.co_firstlineno + 1}" in text
    assert "`return a.add_(1)  # the line an op failure names`" in text
    for generated in ("op_Tensor", "_plain", "c0", "in0", "v1 ="):
        assert generated not in text, text
    assert "more than one element of the written-to tensor" in text


class Timeout(Exception):
    """A harness's own exception, as a SIGALRM handler raises it."""


def _alarm():
    raise Timeout("time limit")  # the harness's line


class _AlarmAtBatch3:
    """A traced function whose call at batch size 3 is interrupted inside an op, as
    prober21a's SIGALRM timeout was: the runtime wraps what the op raised in an OpError."""

    def __init__(self, traced):
        self.traced, self.program = traced, traced.program

    def __call__(self, *args, **kwargs):
        if args[0].shape[0] == 3:
            try:
                _alarm()
            except Timeout as exc:
                raise OpError("method 'forward': an op failed at linear", exc) from exc
        return self.traced(*args, **kwargs)


def double(x):
    return x * 2


def test_an_exception_in_the_batch_probe_is_reported_as_itself():
    verify = importlib.import_module("tracebridge.check.verify")
    x = torch.randn(2, 3)
    traced = tracebridge.trace(double, x, check_trace=False)
    with pytest.raises(Timeout, match="time limit") as info:
        verify.check_function(double, _AlarmAtBatch3(traced), (x,), {}, None, 1e-5, True)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "batch size 3" in note and "no finding of the check" in note
    assert "test_call_messages.py" in note and 'raise Timeout("time limit")' in note
    assert "does not generalise" not in str(info.value) + note


def _unit():
    return 1.0


def baked_rows(x):
    # float's C code reads the size: a reshape to the example's batch, without a guard
    return x.reshape(int(_unit() * x.shape[0]), -1)


def test_an_op_failing_on_a_baked_size_still_does_not_generalise():
    with pytest.raises(tracebridge.TracingCheckError, match="does not generalise from batch"):
        tracebridge.trace(baked_rows, torch.randn(4, 2))


def _bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))


@pytest.mark.parametrize("loaded", [False, True])
def test_batch_norm_at_batch_one_in_training_raises_a_value_error_as_eager(tmp_path, loaded):
    model = _bn_model()
    x = torch.randn(1, 3)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        copy.deepcopy(model)(x)  # eager
    traced = tracebridge.trace(model, torch.randn(4, 3))
    if loaded:
        tracebridge.save(traced, tmp_path / "bn.tb")
        traced = tracebridge.load(tmp_path / "bn.tb")
    with pytest.raises(ValueError) as info:  # a loop's `except ValueError:` skips it
        traced(x)
    assert isinstance(info.value, tracebridge.GuardError)  # and it is still a refusal
    assert isinstance(info.value, tracebridge.GuardValueError)
    text = str(info.value)
    assert text.startswith("Expected more than 1 value per channel when training: ")
    assert "assumption made at" in text and "test_call_messages.py" in text
    assert traced(torch.randn(5, 3)).shape == (5, 4)  # other batches are served


def test_instance_norm_and_other_guards_keep_their_type():
    norm = torch.nn.InstanceNorm1d(2, affine=True)
    norm.train()
    traced = tracebridge.trace(norm, torch.randn(2, 2, 5))
    with pytest.raises(ValueError, match="Expected more than 1 spatial element"):
        traced(torch.randn(2, 2, 1))

    def branch(x):
        return x * 2 if x.shape[0] == 2 else x + 1

    traced = tracebridge.trace(branch, torch.randn(3))
    with pytest.raises(tracebridge.GuardError) as info:
        traced(torch.randn(2))
    assert not isinstance(info.value, ValueError)


def test_the_exception_is_kept_in_the_guards_description_that_every_reader_takes():
    """The file says it in the guard's ``what`` (a description: readers made before it
    take the file and raise their GuardError); only ``ValueError`` is ever raised so."""
    check = importlib.import_module("tracebridge.check.program")
    support = importlib.import_module("tracebridge.runtime.support")
    traced = tracebridge.trace(_bn_model(), torch.randn(4, 3))
    doc = check._doc_of(traced.program)
    guards = [n for n in doc["methods"]["forward"]["nodes"] if n["op"] == "prim.guard"]
    assert guards[0]["kwargs"]["what"].startswith(
        "[raises ValueError: Expected more than 1 value per channel when training] "
    )
    assert set(guards[0]["kwargs"]) == {"expect", "what", "kind"}
    check.check_program(traced.program)  # the file as written
    crafted = support.Node(
        "prim.guard", [], {"expect": False, "kind": "branch", "what": "[raises SystemExit: x] y"}
    )
    with pytest.raises(tracebridge.GuardError) as info:
        support.raise_guard(crafted, True)
    assert type(info.value) is tracebridge.GuardError
