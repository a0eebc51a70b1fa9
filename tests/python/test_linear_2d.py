"""A linear over a matrix runs as ``addmm`` over its weight transposed once per state
version, in calls without autograd (issue 20, item 5; runtime/linear_2d.py).

ATen's ``linear`` is ``addmm(bias, x, weight.t())`` for a matrix, so every result is bit
for bit eager's and the interpreter's; the transposed weight follows every recorded write
of the weight, and any other input (another rank, a torch function mode) runs ``linear``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

from .graph_helpers import loaded, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Head(nn.Module):
    """A pooler and a classifier: linears over matrices, with and without a bias (three:
    enough for a fold of their own, ``linear_2d.ALONE``)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.Linear(16, 16)
        self.hidden = nn.Linear(16, 16)
        self.out = nn.Linear(16, 5, bias=False)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(torch.tanh(self.pool(x[:, 0])))))


def _inputs(batch: int, seed: int) -> torch.Tensor:
    return torch.randn(batch, 3, 16, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("reload", [False, True])
def test_linears_over_matrices_run_as_addmm_and_mm_bit_for_bit(reload, tmp_path):
    torch.manual_seed(0)
    model = Head().eval()
    traced = tracebridge.trace(model, _inputs(2, 0))
    fast = loaded(traced, tmp_path) if reload else traced
    code = fast._methods["forward"].no_grad_code
    assert "op_addmm" in code and "op_mm" in code and "op_linear" in code  # the fallback
    plain = loaded(traced, tmp_path, runtime="interpreter")
    with torch.no_grad():
        for batch, seed in [(2, 1), (1, 2), (7, 3), (2, 4)]:
            x = _inputs(batch, seed)
            assert same_bits(fast(x), model(x))
            assert same_bits(fast(x), plain(x))


@pytest.mark.parametrize("write", ["copy", "load_state_dict", "data", "to"])
def test_the_transposed_weight_follows_every_recorded_write(write):
    torch.manual_seed(0)
    model = Head().eval()
    traced = tracebridge.trace(model, _inputs(2, 0))
    x = _inputs(2, 1)
    with torch.no_grad():
        assert same_bits(traced(x), model(x))
        new = torch.randn(16, 16)
        if write == "copy":
            model.pool.weight.copy_(new)
        elif write == "load_state_dict":
            model.load_state_dict({**model.state_dict(), "pool.weight": new})
        elif write == "data":
            model.pool.weight.data = new
        else:
            model.to(torch.float64)
            x = x.double()
        assert same_bits(traced(x), model(x))


def test_with_autograd_and_under_a_mode_the_linear_runs(tmp_path):
    torch.manual_seed(0)
    model = Head().eval()
    traced = tracebridge.trace(model, _inputs(2, 0))
    assert "op_addmm" not in traced.code  # with autograd: the linears as traced
    x = _inputs(3, 1).requires_grad_()
    y = traced(x)
    assert same_bits(y, model(x))
    (grad,) = torch.autograd.grad(y.sum(), x)
    (expected,) = torch.autograd.grad(model(x).sum(), x)
    assert same_bits(grad, expected)
    seen = []

    class Record(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        got = traced(x)
    with torch.no_grad():
        assert same_bits(got, model(x))
    assert "linear" in seen and "addmm" not in seen and "mm" not in seen


def test_an_input_of_another_rank_than_traced_runs_the_linear():
    """A file may say a matrix where the call brings more dimensions (shapes in a file are
    what it says, not checked per node): the code's test sends it to ``linear``."""
    torch.manual_seed(0)
    layers = [nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(16, 4)).eval()
    x = torch.randn(2, 3, 16)
    traced = tracebridge.trace(model, x)
    method = traced._methods["forward"]
    values = {v.id: v for v in method.graph.inputs}
    values.update({v.id: v for n in method.graph.nodes for v in n.outputs})
    for node in method.graph.nodes:
        if node.op == "linear":
            values[node.args[0].id].shape = [6, 16]  # the file's claim: a matrix
    method._compiled.clear()
    assert "op_addmm" in method.no_grad_code
    with torch.no_grad():
        assert same_bits(traced(x), model(x))


def test_one_head_alone_stays_a_linear():
    """A graph that folds nothing else: a fold's own call would cost what one addmm saves."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 4)).eval()
    traced = tracebridge.trace(model, torch.randn(2, 3, 4))
    code = traced._methods["forward"].no_grad_code
    assert "op_addmm" not in code and "folded" not in code


class RepeatedInput(nn.Module):
    """Linears over a value that repeats an earlier one (read as the first, runtime/cse.py)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 4), nn.Linear(16, 4), nn.Linear(16, 4)

    def forward(self, x):
        first, again = torch.tanh(x[:, 0]), torch.tanh(x[:, 0])
        return self.a(first) + self.b(again) * self.c(again)


def test_a_linear_over_a_repeated_value_keeps_its_test():
    torch.manual_seed(0)
    model = RepeatedInput().eval()
    traced = tracebridge.trace(model, _inputs(2, 0))
    code = traced._methods["forward"].no_grad_code
    lines = [line for line in code.splitlines() if "op_addmm" in line and "=" in line]
    assert len(lines) == 3 and all("ndim == 2" in line for line in lines)
    with torch.no_grad():
        for batch, seed in [(2, 1), (5, 2)]:
            x = _inputs(batch, seed)
            assert same_bits(traced(x), model(x))


class VectorWeight(nn.Module):
    """``linear`` with a vector weight is ``matmul``'s matrix-vector product, not ``mm``."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return nn.functional.linear(x, self.w)


def test_a_vector_weight_keeps_its_linear():
    # Found by review 9: rewritten as mm(x, t(w)), every call without autograd failed.
    torch.manual_seed(0)
    model = VectorWeight()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    with torch.no_grad():
        x = torch.randn(5, 4)
        assert same_bits(traced(x), model(x))


class TenTimes(torch.Tensor):
    """A weight whose type defines ``linear`` itself (as quantised weights do)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is nn.functional.linear:
            with torch._C.DisableTorchFunctionSubclass():
                plain = [a.as_subclass(torch.Tensor) for a in args]
                return nn.functional.linear(*plain, **(kwargs or {})) * 10
        return super().__torch_function__(func, types, args, kwargs)


@pytest.mark.parametrize("part", ["weight", "bias"])
def test_a_weight_or_bias_of_a_subclass_gets_its_own_linear(part):
    # Found by review 9: the addmm bypassed the subclass's linear (ten times off, silently).
    torch.manual_seed(0)
    model = nn.Linear(4, 3).eval()
    setattr(model, part, nn.Parameter(TenTimes(getattr(model, part).detach().clone())))
    traced = tracebridge.trace(model, torch.randn(2, 4))
    with torch.no_grad():
        x = torch.randn(2, 4)
        assert same_bits(traced(x).as_subclass(torch.Tensor), model(x).as_subclass(torch.Tensor))
