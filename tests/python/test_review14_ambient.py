"""Ambient state read at trace time is checked at call time (review 14).

* An autocast region around ``tracebridge.trace`` is the caller's: it is set aside while
  recording, and the caller's autocast applies to the traced ops on each call, so one
  trace is right inside and outside autocast (trace/autocast.py).
* ``torch.is_autocast_enabled(d)`` / ``torch.get_autocast_dtype(d)`` read by the traced
  code, and regions the code opens itself, are guarded on the caller's autocast (op-set
  8: ``prim.autocast_enabled``, ``prim.autocast_dtype``; trace/autocast_state.py).
* Python's ``random`` drawn in traced code refuses to be used (trace/python_random.py).

Each case runs in process and after save and load."""

from __future__ import annotations

import json
import numbers
import random
import shutil
from random import gauss as imported_gauss

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import ArtifactError, GuardError, UnsupportedOpError
from tracebridge.ir import ops as opset
from tracebridge.runtime.support import PRIM_FUNCTIONS

from .graph_helpers import rewrite_nodes
from .r_reader import run_r

BF16, FP16 = torch.bfloat16, torch.float16
pytestmark = pytest.mark.filterwarnings("ignore::tracebridge.errors.TracerWarning")


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).eval()


def _autocast(dtype):
    return torch.autocast("cpu", dtype=dtype)


def _both(traced, tmp_path):
    """The traced object, and the same after save and load."""
    path = tmp_path / "t.tb"
    traced.save(path)
    return [traced, tracebridge.load(path)]


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# --- an autocast region around the trace is the caller's --------------------------------


def test_trace_made_under_autocast_is_right_outside_and_inside(tmp_path):
    """(Without the check, a trace made under autocast is recorded in it, for calls under
    it only: test_review14_followups.py.)"""
    net = _net()
    with _autocast(BF16):
        traced = tracebridge.trace(net, (torch.randn(3, 4),))
    for t in _both(traced, tmp_path):
        x = torch.randn(5, 4)
        _same(t(x), net(x))  # float32, as eager outside autocast (was bfloat16)
        for dtype in (BF16, FP16):
            with _autocast(dtype):
                _same(t(x), net(x))  # the caller's autocast applies, as to eager code


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_trace_made_under_autocast_is_right_outside_and_inside(tmp_path):
    net = _net().cuda()
    with torch.autocast("cuda", dtype=FP16):
        traced = tracebridge.trace(net, (torch.randn(3, 4, device="cuda"),))
    for t in _both(traced, tmp_path):
        x = torch.randn(5, 4, device="cuda")
        got, want = t(x), net(x)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want)
        with torch.autocast("cuda", dtype=FP16):
            got, want = t(x), net(x)
        assert got.dtype == want.dtype == FP16
        torch.testing.assert_close(got, want)


def test_trace_made_under_autocast_records_no_ambient_casts():
    net = _net()
    x = torch.randn(3, 4)
    with _autocast(BF16):
        inside = tracebridge.trace(net, (x,))
    assert "Tensor.to" not in inside.graph and "bf16" not in inside.graph
    outside = tracebridge.trace(net, (x,))

    def ops(t):
        return [n.op for n in t.program.methods["forward"].nodes]

    assert ops(inside) == ops(outside)


def test_caller_autocast_is_back_after_tracing():
    with _autocast(FP16):
        tracebridge.trace(_net(), (torch.randn(2, 4),))
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == FP16
    assert not torch.is_autocast_enabled("cpu")


# --- reads of the caller's autocast -------------------------------------------------------


def _branches(x):
    return x + 1 if torch.is_autocast_enabled("cpu") else x - 1


def _to_autocast_dtype(x):
    return x.to(torch.get_autocast_dtype("cpu"))


def test_is_autocast_enabled_read_is_guarded(tmp_path):
    x = torch.randn(3, 4)
    outside = tracebridge.trace(_branches, (x,))
    with _autocast(BF16):
        inside = tracebridge.trace(_branches, (x,))
    for t in _both(outside, tmp_path):
        _same(t(x), _branches(x))
        with _autocast(FP16), pytest.raises(GuardError, match=r"is_autocast_enabled\('cpu'\)"):
            t(x)  # was x - 1 where eager gives x + 1
    for t in _both(inside, tmp_path):
        with _autocast(BF16):
            _same(t(x), _branches(x))
        with pytest.raises(GuardError, match="traced under"):
            t(x)


def test_get_autocast_dtype_read_is_guarded(tmp_path):
    x = torch.randn(3, 4)
    with _autocast(BF16):
        traced = tracebridge.trace(_to_autocast_dtype, (x,))
    assert "prim.autocast_dtype" in traced.graph
    for t in _both(traced, tmp_path):
        with _autocast(BF16):
            _same(t(x), _to_autocast_dtype(x))
        with _autocast(FP16), pytest.raises(GuardError, match=r"get_autocast_dtype\('cpu'\)"):
            t(x)  # was bfloat16 where eager gives float16


def test_older_per_device_reads_are_guarded(tmp_path):
    def f(x):
        return x * 2 if torch.is_autocast_cpu_enabled() else x

    x = torch.randn(3, 4)
    for t in _both(tracebridge.trace(f, (x,)), tmp_path):
        _same(t(x), f(x))
        with _autocast(BF16), pytest.raises(GuardError):
            t(x)


def test_read_of_a_device_names_its_type():
    def f(x):
        return x + 1 if torch.is_autocast_enabled("cuda:0") else x - 1

    traced = tracebridge.trace(f, (torch.randn(3, 4),))
    assert "prim.autocast_enabled('cuda')" in traced.graph


def test_read_inside_the_codes_own_region_answers_for_the_region():
    def f(x):
        with torch.autocast("cpu", dtype=BF16):
            return x + 1 if torch.is_autocast_enabled("cpu") else x - 1

    x = torch.randn(3, 4)
    traced = tracebridge.trace(f, (x,))
    _same(traced(x), f(x))
    reads = [n for n in traced.program.methods["forward"].nodes if n.op == "prim.autocast_enabled"]
    assert len(reads) == 1  # the region's guard on the caller, not one for the read


# --- regions the code opens itself --------------------------------------------------------


def _full_precision(x, lin):
    with torch.autocast("cpu", enabled=False):  # LLaMA's rotary embedding does this
        return lin(x.float())


def _own_bf16(x, lin):
    with torch.autocast("cpu", dtype=BF16):
        return lin(x)


@pytest.mark.parametrize("code", [_full_precision, _own_bf16])
def test_codes_own_region_guards_the_callers_autocast(tmp_path, code):
    lin = nn.Linear(4, 4)

    def f(x):
        return code(x, lin)

    x = torch.randn(3, 4)
    for t in _both(tracebridge.trace(f, (x,)), tmp_path):
        _same(t(x), f(x))
        with _autocast(FP16), pytest.raises(GuardError, match="traced code opens"):
            t(x)  # was float16 where eager gives float32 / bfloat16


def test_region_that_agrees_with_the_callers_autocast_serves_it(tmp_path):
    lin = nn.Linear(4, 4)

    def f(x):
        return _own_bf16(x, lin)

    x = torch.randn(3, 4)
    with _autocast(BF16):
        traced = tracebridge.trace(f, (x,))
    for t in _both(traced, tmp_path):
        with _autocast(BF16):
            _same(t(x), f(x))
        with _autocast(FP16), pytest.raises(GuardError):
            t(x)


def test_code_that_autocast_changes_is_traced_in_the_callers_autocast(tmp_path):
    """``.float()`` gave back its float32 input when recorded without autocast, and under
    it converts a bfloat16 one: such code is traced again in the caller's autocast, its
    casts in the graph, for calls under that autocast only (a GuardError says so)."""
    lin = nn.Linear(4, 4)

    def f(x):
        return lin(x).float() * 2

    with _autocast(BF16):
        traced = tracebridge.trace(f, (torch.randn(3, 4),))
    for t in _both(traced, tmp_path):
        x = torch.randn(5, 4)
        with _autocast(BF16):
            _same(t(x), f(x))
        with pytest.raises(GuardError, match=r"tracebridge.trace ran under this autocast"):
            t(x)
        with _autocast(FP16), pytest.raises(GuardError, match=r"get_autocast_dtype"):
            t(x)


# --- the new prims -------------------------------------------------------------------------


def test_autocast_prims_are_op_set_8_and_read_the_caller():
    for op in ("prim.autocast_enabled", "prim.autocast_dtype"):
        assert opset.SINCE[op] == 8 and op in opset.PRIM_OPS
    with _autocast(FP16):
        assert PRIM_FUNCTIONS["prim.autocast_enabled"]("cpu") is True
        assert PRIM_FUNCTIONS["prim.autocast_dtype"]("cpu") == FP16
    with pytest.raises(ArtifactError, match="device type"):
        PRIM_FUNCTIONS["prim.autocast_enabled"]("meta")


def test_interpreter_checks_the_autocast_guards(tmp_path):
    x = torch.randn(3, 4)
    path = tmp_path / "t.tb"
    tracebridge.trace(_branches, (x,)).save(path)
    loaded = tracebridge.load(path, runtime="interpreter")
    _same(loaded(x), _branches(x))
    with _autocast(BF16), pytest.raises(GuardError):
        loaded(x)


@pytest.mark.parametrize("device", ["bogus", "cpu:0", "meta", 3, None])
@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_unknown_autocast_device_is_refused_at_load(tmp_path, device, runtime):
    """A crafted file whose autocast read names no device type torch keeps autocast for
    (SPEC: a reader MUST refuse it): refused by the loader, naming the node and the
    device, not at the first call that reaches the read."""
    path = tmp_path / "t.tb"
    tracebridge.trace(_branches, (torch.randn(3, 4),)).save(path)
    rewrite_nodes(path, "prim.autocast_enabled", lambda n: n.update(args=[device]))
    with pytest.raises(ArtifactError) as info:
        tracebridge.load(path, runtime=runtime)
    message = str(info.value)
    assert "(prim.autocast_enabled)" in message and "save it again" in message
    assert repr(device) in message or json.dumps(device) in message


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_accepts_the_autocast_reads(tmp_path):
    path = tmp_path / "reads.tb"
    with _autocast(BF16):
        tracebridge.trace(_to_autocast_dtype, (torch.randn(3, 4),)).save(path)
    out = run_r(
        "doc <- read_program(args[[2]]); "
        'cat(vapply(doc$methods$forward$nodes, function(n) n$op, ""), sep = " ")',
        path,
    )
    assert "prim.autocast_dtype" in out.split() and "prim.guard" in out.split()


# --- Python's random module ----------------------------------------------------------------


def _layerdrop(x):
    p = random.uniform(0, 1)  # old transformers LayerDrop
    return x if p < 0.3 else x * 2


def test_python_random_number_used_in_traced_code_is_refused():
    state = random.getstate()
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(_layerdrop, (torch.randn(3, 4),))
    message = str(info.value)
    assert "random.uniform()" in message and "torch.rand" in message
    assert message.count("test_review14_ambient.py:") == 2  # the draw's line and the use's
    assert random.getstate() == state  # nothing was drawn


class _DecoderWithLayerDrop(nn.Module):
    """MusicGen's decoder: draws before it tests ``self.training``."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            dropout_probability = random.uniform(0, 1)
            if self.training and dropout_probability < 0.5:
                continue
            x = layer(x)
        return x


def test_number_drawn_and_unused_in_evaluation_traces(tmp_path):
    net = _DecoderWithLayerDrop().eval()
    traced = tracebridge.trace(net, (torch.randn(3, 4),))
    for t in _both(traced, tmp_path):
        x = torch.randn(2, 4)
        _same(t(x), net(x))
    with pytest.raises(UnsupportedOpError, match="random.uniform"):
        tracebridge.trace(_DecoderWithLayerDrop().train(), (torch.randn(3, 4),))


@pytest.mark.parametrize(
    "draw",
    [
        lambda: random.random(),
        lambda: random.randint(0, 9),
        lambda: random.Random(0).random(),
        lambda: random.Random(0).uniform(0, 1),
        lambda: imported_gauss(0, 1),  # bound before tracing: its self.random() is seen
    ],
)
def test_every_way_to_draw_a_number_refuses_its_use(draw):
    def f(x):
        return x * float(draw())

    with pytest.raises(UnsupportedOpError, match="drawn outside torch"):
        tracebridge.trace(f, (torch.randn(3, 4),))


@pytest.mark.parametrize(
    "is_number",
    [
        lambda n: isinstance(n, (int, float)),
        lambda n: isinstance(n, float),
        lambda n: isinstance(n, numbers.Real),
        lambda n: isinstance(n, numbers.Number),
    ],
)
def test_asking_whether_a_drawn_number_is_a_number_is_refused(is_number):
    """A drawn number that answered ``isinstance(n, float)`` with False sent the code
    down the branch for non-numbers (``x``, where eager returns ``x * n``), and there
    nothing used it: silently wrong with ``check_trace=False``. The question is a use."""

    def f(x):
        scale = random.uniform(0.5, 1.5)
        return x * scale if is_number(scale) else x

    with pytest.raises(UnsupportedOpError, match="random.uniform()") as info:
        tracebridge.trace(f, (torch.randn(3, 4),), check_trace=False)
    assert str(info.value).count("test_review14_ambient.py:") == 2  # the draw's and the use's


@pytest.mark.parametrize(
    "pick",
    [
        lambda items: random.choice(items),
        lambda items: random.sample(items, 1)[0],
        lambda items: random.Random(0).choice(items),
    ],
)
def test_picking_the_codes_objects_is_refused(pick):
    def f(x):
        return pick([x, x * 2])

    with pytest.raises(UnsupportedOpError, match="cannot record random"):
        tracebridge.trace(f, (torch.randn(3, 4),))


def test_random_is_as_before_outside_tracing():
    tracebridge.trace(_net(), (torch.randn(2, 4),))
    assert "random" not in random.Random.__dict__
    assert isinstance(random.random(), float) and isinstance(random.Random(1).uniform(0, 1), float)
