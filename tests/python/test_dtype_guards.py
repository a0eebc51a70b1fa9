"""A dtype that Python code reads from a traced tensor is guarded (docs/divergence.md, "dtypes").

A runtime accepts any dtype of the kind an input was traced with, and ``torch.dtype`` cannot
be hooked, so a decision on ``x.dtype`` (a branch, ``torch.finfo(x.dtype).min``,
``element_size()``) would otherwise be baked silently. Each read records one guard
``prim.dtype(t) == <traced dtype>`` per traced value; constants are not guarded.
"""

from __future__ import annotations

import re
import shutil
import warnings

import pytest
import torch
from torch import nn

import tracebridge

HAS_R = shutil.which("Rscript") is not None


def dtype_branch(x):
    if x.dtype == torch.float16:
        x = x.float()
    return x * 2


def finfo_mask(x, keep):
    # Hugging Face's extended attention mask: the masked positions get the dtype's minimum.
    return x + (1.0 - keep) * torch.finfo(x.dtype).min


def ones_like_input(x):
    return torch.ones(x.shape[0], dtype=x.dtype)


def by_element_size(x):
    return x * x.element_size()


def reads_dtype_three_times(x):
    wide = x.dtype in (torch.float32, torch.float64)
    small = x.dtype == torch.float16
    return x.to(x.dtype) * (2 if wide else 3 if small else 4)


def _trace(fn, *example, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        inputs = example[0] if len(example) == 1 else example
        return tracebridge.trace(fn, inputs, check_trace=False, **kwargs)


def _dtype_guards(traced, method: str = "forward") -> list:
    graph = traced.program.methods[method]
    return [n for n in graph.guards if ".dtype" in str(n.kwargs["what"])]


def _assert_names_dtype_and_line(error, what: str, expect: str, seen: str, line: str):
    message = str(error)
    assert re.match(
        rf"the trace assumed {re.escape(what)} == torch\.{expect}, but now it is "
        rf"torch\.{seen}\n  assumption made at {re.escape(__file__)}:\d+: ",
        message,
    ), message
    assert line in message
    assert error.location.startswith(__file__ + ":")


def test_a_branch_on_the_dtype_is_guarded():
    traced = _trace(dtype_branch, torch.rand(3))
    assert len(_dtype_guards(traced)) == 1
    other = torch.rand(5)
    assert torch.equal(traced(other), dtype_branch(other))  # any size, same dtype: right
    with pytest.raises(tracebridge.GuardError) as info:
        traced(torch.rand(3).half())  # eager would take the other branch (float32 result)
    _assert_names_dtype_and_line(
        info.value, "x.dtype", "float32", "float16", "if x.dtype == torch.float16:"
    )


def test_a_branch_on_the_dtype_is_guarded_in_check_trace_too():
    traced = tracebridge.trace(dtype_branch, torch.rand(3).half())
    assert traced(torch.rand(4).half()).dtype == torch.float32
    with pytest.raises(tracebridge.GuardError, match="x.dtype == torch.float16, but now it is"):
        traced(torch.rand(3))


def test_finfo_min_mask_is_guarded():
    """torch.finfo(x.dtype).min of a float32 trace is not float16's: a float16 call is
    refused, not given float32's minimum (which overflows to -inf in float16)."""
    x, keep = torch.rand(2, 4), torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    traced = _trace(finfo_mask, x, keep)
    x2, keep2 = torch.rand(3, 6), torch.randint(0, 2, (3, 6)).float()
    assert torch.equal(traced(x2, keep2), finfo_mask(x2, keep2))
    with pytest.raises(tracebridge.GuardError) as info:
        traced(x2.half(), keep2.half())
    _assert_names_dtype_and_line(
        info.value, "x.dtype", "float32", "float16", "torch.finfo(x.dtype).min"
    )


def test_one_guard_per_traced_value_however_often_it_is_read():
    traced = _trace(reads_dtype_three_times, torch.rand(3))
    guards = _dtype_guards(traced)
    assert len(guards) == 1
    assert guards[0].kwargs["expect"] is torch.float32
    dtype_nodes = [n for n in traced.program.methods["forward"].nodes if n.op == "prim.dtype"]
    assert len(dtype_nodes) == 1  # the guard and the .to() argument share one read


def test_a_dtype_passed_to_an_op_stays_a_reference():
    """torch.ones(n, dtype=x.dtype): the op takes the call's dtype (a prim.dtype node), and
    the read is guarded too, since code may have compared the same read (see the Note in
    trace/conversions.py). With guards off, the op follows the call's dtype."""
    traced = _trace(ones_like_input, torch.rand(3))
    assert traced(torch.rand(5)).shape == (5,)
    with pytest.raises(tracebridge.GuardError, match=r"x\.dtype == torch\.float32"):
        traced(torch.rand(5, dtype=torch.float64))
    with tracebridge.guards_disabled():
        assert traced(torch.rand(5, dtype=torch.float64)).dtype == torch.float64


def test_element_size_is_guarded():
    traced = _trace(by_element_size, torch.rand(3))
    assert torch.equal(traced(torch.ones(2)), torch.full((2,), 4.0))
    with pytest.raises(tracebridge.GuardError) as info:
        traced(torch.ones(2, dtype=torch.float64))  # eager: 8.0
    _assert_names_dtype_and_line(
        info.value, "x.dtype (element_size())", "float32", "float64", "x.element_size()"
    )


class CastToWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, x):
        if self.weight.dtype == torch.float64:
            return x.double() * self.weight
        return x * self.weight


def test_a_parameter_dtype_read_is_guarded_by_its_name():
    """Parameters change dtype with module.double(): their dtype reads are guarded too."""
    module = CastToWeight()
    traced = _trace(module, torch.rand(3))
    assert [g.kwargs["what"] for g in _dtype_guards(traced)] == ["weight.dtype"]
    module.double()
    with pytest.raises(tracebridge.GuardError, match=r"weight\.dtype == torch\.float32, but"):
        traced(torch.rand(3))


def test_a_constant_dtype_read_is_not_guarded():
    table = torch.arange(3, dtype=torch.int64)

    def use_table(x):
        return x + table.to(x.dtype if table.dtype == torch.float16 else torch.float32)

    traced = _trace(use_table, torch.rand(3))
    assert _dtype_guards(traced) == []
    assert torch.equal(traced(torch.zeros(3)), torch.tensor([0.0, 1.0, 2.0]))


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_save_and_load_keep_the_dtype_guard(tmp_path, runtime):
    path = tmp_path / "branch.tb"
    _trace(dtype_branch, torch.rand(3)).save(path)
    loaded = tracebridge.load(path, runtime=runtime)
    assert torch.equal(loaded(torch.ones(4)), torch.full((4,), 2.0))
    with pytest.raises(tracebridge.GuardError) as info:
        loaded(torch.rand(3).half())
    _assert_names_dtype_and_line(
        info.value, "x.dtype", "float32", "float16", "if x.dtype == torch.float16:"
    )


@pytest.mark.skipif(not HAS_R, reason="R is not installed")
def test_r_reads_a_file_with_a_dtype_guard(tmp_path):
    """R's base-R reader accepts the guard (prim.dtype and a dtype literal) and lists it."""
    from .r_reader import run_r

    path = tmp_path / "branch.tb"
    _trace(dtype_branch, torch.rand(3)).save(path)
    out = run_r(
        'info <- jit_inspect(args[[2]], quiet = TRUE)\ncat(info$guards$text, sep = "\\n")\n',
        path,
    )
    assert out.strip().splitlines() == ["x.dtype == float32"]


@pytest.mark.parametrize(
    ("what", "fn"),
    [
        ("type()", lambda x: x * 2 if x.type() == "torch.FloatTensor" else x),
        ("itemsize", lambda x: x * x.itemsize),
        ("nbytes", lambda x: x * x.nbytes),
    ],
)
def test_other_reads_of_the_dtype_are_guarded(what, fn):
    traced = _trace(fn, torch.ones(3))
    other = torch.ones(5)
    assert torch.equal(traced(other), fn(other))  # nbytes follows the size
    with pytest.raises(tracebridge.GuardError, match=rf"x\.dtype \({re.escape(what)}\) =="):
        traced(torch.ones(3, dtype=torch.float64))


def test_type_with_a_dtype_is_a_conversion_not_a_read():
    traced = _trace(lambda x: x.type(torch.float64) * 2, torch.ones(3))
    assert _dtype_guards(traced) == []
    assert traced(torch.ones(2)).dtype == torch.float64


def test_the_graph_module_bridge_keeps_the_dtype_guard():
    from tracebridge.export.fx import to_graph_module

    module = to_graph_module(_trace(dtype_branch, torch.rand(3)))
    assert torch.equal(module(torch.ones(4))[0], torch.full((4,), 2.0))
    with pytest.raises(tracebridge.GuardError, match=r"x\.dtype == torch\.float32, but now"):
        module(torch.rand(3).half())


def kept_dtype_and_a_literal(x):
    d = x.dtype  # kept, never compared
    return x.sum().to(d) + torch.zeros(2, dtype=torch.float32)


def test_a_literal_dtype_equal_to_a_read_one_is_safe():
    """torch.float32 is one object: after ``d = x.dtype`` read float32, the literal in
    ``torch.zeros(2, dtype=torch.float32)`` is recorded as x's dtype too (the tracer cannot
    tell them apart). Unguarded, a float64 call gave float64 where eager gives float32; the
    guard on the read refuses that call."""
    traced = _trace(kept_dtype_and_a_literal, torch.rand(3))
    assert "zeros(2, dtype=%0)" in traced.graph
    x = torch.rand(3, dtype=torch.float64)
    assert kept_dtype_and_a_literal(x).dtype == torch.float32
    with tracebridge.guards_disabled():
        assert traced(x).dtype == torch.float64  # what an unguarded trace returned
    with pytest.raises(tracebridge.GuardError, match=r"x\.dtype == torch\.float32"):
        traced(x)
