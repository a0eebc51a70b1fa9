"""Tensors formatted as text (trace/text.py, TensorText): printed or logged, nothing is
guarded or recorded; compared, hashed or branched on, the values are guarded where the text
decides, so a call with other values is refused, never silently wrong.
"""

from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import GuardError
from tracebridge.errors import UnsupportedOpError

from .graph_helpers import loaded as saved_and_loaded

HERE = os.path.basename(__file__)
log = logging.getLogger("tracebridge.test_trace_tensor_text")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _ops(traced) -> list[str]:
    return [node.op for node in traced.program.methods["forward"].nodes]


# --- text that only reaches a message: no guard, no node ------------------------------------


def plain(x):
    return (x * 2).sum(0)


def printed(x):
    y = x * 2
    print(y)
    print(f"y = {y}, shape {y.shape}")
    return y.sum(0)


def logged(x):
    y = x * 2
    log.warning("y is %s (%r)", y, y)
    log.warning(f"y is {y}")
    return y.sum(0)


def asserted(x):
    y = x * 2
    assert y.dim() == 2, f"bad {y} of {y.shape[0]} rows"
    warnings.warn("y is %s" % y, stacklevel=2)  # noqa: UP031
    return y.sum(0)


@pytest.mark.parametrize("fn", [printed, logged, asserted], ids=lambda f: f.__name__)
def test_text_that_only_reaches_a_message_guards_and_records_nothing(fn, tmp_path, capsys):
    traced = tracebridge.trace(fn, torch.ones(3, 2))
    assert traced.guards == []
    assert _ops(traced) == _ops(tracebridge.trace(plain, torch.ones(3, 2)))
    loaded = saved_and_loaded(traced, tmp_path)
    for x in (torch.randn(3, 2), torch.randn(5, 4)):  # other values, other shapes
        assert torch.equal(traced(x), fn(x))
        assert torch.equal(loaded(x), traced(x))


def test_printing_a_traced_tensor_prints_its_values(capsys):
    tracebridge.trace(printed, torch.tensor([[1.5, 2.5]]), check_trace=False)
    out = capsys.readouterr().out
    assert "tensor([[3., 5.]])" in out
    assert "y = tensor([[3., 5.]]), shape torch.Size([1, 2])" in out  # as eager prints it


def test_logging_a_traced_tensor_logs_its_values(caplog):
    with caplog.at_level(logging.WARNING, logger=log.name):
        tracebridge.trace(logged, torch.tensor([[1.5, 2.5]]), check_trace=False)
    assert "y is tensor([[3., 5.]]) (tensor([[3., 5.]]))" in caplog.text


# --- text that decides: the values are guarded at the deciding line ---------------------------


class Compared(nn.Module):
    def forward(self, x):
        text = str(x)
        if text == "tensor([1, 2])":  # the text decides
            return x * 2
        return x + 1


class Keyed(nn.Module):
    """Text as a dict key: hashing reads it."""

    def __init__(self):
        super().__init__()
        self.table = {"tensor([1, 2])": 2, "tensor([3, 4])": 3}

    def forward(self, x):
        return x * self.table.get(repr(x), 0)


class Joined(nn.Module):
    """Text joined into new text that Python builds and compares: guarded where it is made."""

    def forward(self, x):
        key = f"mask={x}"
        return x * 2 if key.endswith("2])") else x - 1


class Percent(nn.Module):
    def forward(self, x):
        return x * 2 if ("%s" % x) in ("tensor([1, 2])",) else x - 1  # noqa: UP031


class ScalarText(nn.Module):
    """A 0-dim tensor's text: ``str`` shows ``tensor(...)``, not the item."""

    def forward(self, x):
        total = x.sum()
        return x * 2 if str(total) == "tensor(3)" else x - 1


@pytest.mark.parametrize(
    "module, line",
    [
        (Compared(), 'if text == "tensor([1, 2])"'),
        (Keyed(), "self.table.get(repr(x), 0)"),
        (Joined(), 'key = f"mask={x}"'),
        (Percent(), 'x * 2 if ("%s" % x)'),
        (ScalarText(), 'str(total) == "tensor(3)"'),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else "",
)
def test_text_that_decides_guards_the_values_at_the_deciding_line(module, line, tmp_path):
    example = torch.tensor([1, 2])
    traced = tracebridge.trace(module, example)
    loaded = saved_and_loaded(traced, tmp_path)
    for fn in (traced, loaded):
        assert torch.equal(fn(torch.tensor([1, 2])), module(torch.tensor([1, 2])))
        with pytest.raises(GuardError) as info:
            fn(torch.tensor([3, 4]))  # eager takes the other path: refused, not wrong
        message = str(info.value)
        assert HERE in message and line in message
        assert "tolist()" in message or "item()" in message
        with pytest.raises(GuardError):
            fn(torch.tensor([1.0, 2.0]))  # other dtype: the text would read "1., 2."


class Parameter(nn.Module):
    """A parameter's text decides: its values are guarded, so a changed weight is refused."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([2.0]))

    def forward(self, x):
        return x * self.scale if str(self.scale.data) == "tensor([2.])" else x


def test_a_parameter_formatted_into_a_decision_guards_its_values():
    module = Parameter()
    traced = tracebridge.trace(module, torch.ones(3))
    assert torch.equal(traced(torch.ones(3)), module(torch.ones(3)))
    with torch.no_grad():
        module.scale.fill_(3.0)  # traced modules share the parameters
    with pytest.raises(GuardError, match=r"tolist\(\) == \[2\.0\]"):
        traced(torch.ones(3))


class WrittenAfter(nn.Module):
    def forward(self, x):
        y = x * 2
        text = str(y)
        y.add_(1)
        return y if text == "tensor([2., 4.])" else -y


def test_text_deciding_after_its_tensor_was_written_in_place_is_refused_clearly():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(WrittenAfter(), torch.tensor([1.0, 2.0]))
    message = str(info.value)
    assert "written in place after it was formatted" in message
    assert f"{HERE}:" in message and "decides a branch" in message


def test_text_of_a_constant_tensor_guards_nothing():
    table = {"tensor([1, 2])": 2.0}
    constant = torch.tensor([1, 2])  # captured, never an op's argument: not in the graph

    def f(x):
        return x * table[str(constant)]

    traced = tracebridge.trace(f, torch.ones(2))
    assert traced.guards == []
    assert torch.equal(traced(torch.ones(4)), torch.full((4,), 2.0))


# --- sizes printed or logged are messages too ---------------------------------------------------


def test_a_size_printed_or_logged_stays_general(capsys):
    def f(x):
        n = x.shape[0]
        print(n)
        log.warning("rows: %s", n)
        return x.sum(0)

    traced = tracebridge.trace(f, torch.ones(5, 2))
    assert traced.guards == []
    assert "5" in capsys.readouterr().out
    x = torch.randn(7, 2)
    assert torch.equal(traced(x), x.sum(0))


# --- sizes as text: torch.Size reads as eager's, containers' text is guarded ------------------


class SizeText(nn.Module):
    def forward(self, x):
        return x * 2 if str(x.shape) == "torch.Size([5, 2])" else x.sum(0)


class SizesInAList(nn.Module):
    """A list's repr joins its items' text in C: the text cannot remember them."""

    def forward(self, x):
        return x * 2 if f"{[x.shape[0], 2]}" == "[5, 2]" else x.sum(0)


class TensorsInAList(nn.Module):
    def forward(self, x):
        return x * 2 if str([x]).startswith("[tensor([[1.") else x.sum(0)


@pytest.mark.parametrize("module", [SizeText(), SizesInAList(), TensorsInAList()], ids=type)
def test_text_of_a_container_or_a_shape_takes_eager_path_and_is_guarded(module):
    example = torch.ones(5, 2)
    traced = tracebridge.trace(module, example)
    assert torch.equal(traced(example), module(example))
    other = torch.zeros(6, 2)
    with pytest.raises(GuardError) as info:
        traced(other)
    assert HERE in str(info.value)


def test_a_printed_shape_reads_as_eager_prints_it(capsys):
    def f(x):
        print(x.shape, [x.shape[0]], str(x.shape))
        return x.sum(0)

    traced = tracebridge.trace(f, torch.ones(5, 2), check_trace=False)
    assert capsys.readouterr().out == "torch.Size([5, 2]) [5] torch.Size([5, 2])\n"
    assert traced.guards == []
