"""An ``unbind`` whose input has the node's count along its dimension runs as the kernel
itself (runtime/unbinds.py): the same results as eager and the interpreter, with and
without autograd; the checked op and its count guard wherever a check could fail."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

import tracebridge
from tracebridge.errors import GuardError, TraceError

from .graph_helpers import loaded, no_grad_code, recording_subclass, rewrite_nodes, same_bits

KERNEL = "op_unbind_kernel_"

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def heads(x):
    """timm's attention: the projection split into q, k and v by one unbind."""
    b, n, _ = x.shape
    q, k, v = x.reshape(b, n, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
    return q * 2 + k, v


def last(x):
    a, b = x.unbind(-1)
    return a - b


def _runners(fn, example, tmp_path):
    traced = tracebridge.trace(fn, (example,), check_trace=False)
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    return traced, fast, plain


@pytest.mark.parametrize("grad", [False, True])
def test_the_kernel_gives_eagers_results(tmp_path, grad):
    traced, fast, plain = _runners(heads, torch.randn(1, 5, 24), tmp_path)
    assert no_grad_code(traced).count(KERNEL) == 1 and traced.code.count(KERNEL) == 1
    for shape in [(1, 5, 24), (3, 1, 24), (2, 7, 24)]:
        x = torch.randn(shape).requires_grad_(grad)
        for dtype in (torch.float32, torch.float64):
            x = x.detach().to(dtype).requires_grad_(grad)
            with torch.set_grad_enabled(grad):
                expected = heads(x)
                for runner in (fast, plain):
                    got = runner(x)
                    assert all(same_bits(g, e) for g, e in zip(got, expected))
                    assert [g.requires_grad for g in got] == [e.requires_grad for e in expected]
    x = torch.randn(2, 3, 24, requires_grad=True)
    sum(t.sum() for t in fast(x)).backward()
    want = x.detach().clone().requires_grad_(True)
    sum(t.sum() for t in heads(want)).backward()
    assert same_bits(x.grad, want.grad)


def test_a_negative_dimension_and_views_of_a_transposed_input(tmp_path):
    traced, fast, plain = _runners(last, torch.randn(3, 2), tmp_path)
    assert KERNEL in no_grad_code(traced)
    for x in (torch.randn(4, 2), torch.randn(2, 4).t(), torch.randn(0, 2)):
        with torch.no_grad():
            assert same_bits(fast(x), last(x)) and same_bits(plain(x), last(x))


def test_another_count_is_refused_by_the_count_guard(tmp_path):
    """The size along the dimension is not the node's count: the checked op runs and the
    count guard refuses the call, as it did before."""
    _, fast, plain = _runners(last, torch.randn(3, 2), tmp_path)
    for runner in (fast, plain):
        with torch.no_grad(), pytest.raises(GuardError):
            runner(torch.randn(3, 3))


def test_subclasses_and_modes_see_the_unbind(tmp_path):
    _, fast, _ = _runners(last, torch.randn(3, 2), tmp_path)
    Sub = recording_subclass()
    x = torch.randn(3, 2)
    with torch.no_grad():
        got = fast(x.as_subclass(Sub))
    assert "unbind" in Sub.calls
    assert same_bits(got.as_subclass(torch.Tensor), last(x))

    seen = []

    class Recording(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Recording():
        got = fast(x)
    assert "unbind" in seen and same_bits(got, last(x))


def test_a_crafted_dimension_fails_as_in_the_interpreter(tmp_path):
    """A file whose unbind names a dimension the input lacks: the inline test does not
    hold (``x.ndim > d``), so the checked op runs and fails as the interpreter's does."""
    traced = tracebridge.trace(last, (torch.randn(3, 2),), check_trace=False)
    path = tmp_path / "m.tb"
    traced.save(path)
    rewrite_nodes(path, "unbind", lambda node: node["args"].__setitem__(1, 5))
    for runtime in ("codegen", "interpreter"):
        runner = tracebridge.load(path, runtime=runtime)
        with torch.no_grad(), pytest.raises(TraceError, match="unbind"):
            runner(torch.randn(3, 2))
