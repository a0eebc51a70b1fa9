"""Elementwise ops that write into a dead operand (runtime/inplace.py): the bits of the
interpreter and eager over dtypes, sizes and special values; the op as recorded wherever
anything else could see the write (a value read twice, returned, from state or an input,
a view, a folded value), wherever the operands could make another result (broadcasting
past the operand, another dtype), and for subclasses, modes and autograd."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import tracebridge
from tracebridge.runtime import inplace

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Block(torch.nn.Module):
    """Every unary op of the table after a fresh value, residual adds, and numbers."""

    def __init__(self, width: int = 37):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x, y):
        h = self.fc(x)
        acts = [
            F.gelu(h * 1.0),
            F.gelu(h * 1.25, approximate="tanh"),
            F.silu(h + 0.0),
            torch.relu(h - 0.5),
            torch.sigmoid(h * 2),
            torch.tanh(h / 3),
            F.hardswish(h * 1.5),
            F.hardsigmoid(h + 1),
            torch.rsqrt(h * h + 1e-6),
            torch.neg(h * 0.5),
            torch.exp(h - 4),
            torch.sqrt(h.abs() + 1),  # abs of a fresh value read once more: not written
            torch.erf(h * 0.7) + torch.log1p((h * 0.1).abs()),
            torch.reciprocal(h + 10).pow(2) + torch.clamp_min(h - 0.1, 0.0).pow(0.5),
            torch.cos(h * 3).expm1() + torch.log((h * h) + 1).sin(),
            F.elu(h * 2.5) + F.elu(h * 3.5, alpha=0.5),
        ]
        s = acts[0]
        for a in acts[1:]:
            s = s + a  # the running sum is fresh and dead after each add
        r = self.norm(s) + x  # residual: the norm's result takes it
        r = r * y  # y broadcasts into r
        return torch.relu(r / 7 - 0.25), h


def _inputs(dtype, rows=3, width=37):
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-40, 3e38])
    x = torch.randn(rows, width)
    x[0, : len(special)] = special
    return x.to(dtype), torch.randn(width).to(dtype)


def _models(tmp_path, dtype):
    torch.manual_seed(0)
    model = Block().to(dtype).eval()
    traced = tracebridge.trace(model, _inputs(dtype), check_trace=False)
    fast = loaded(traced, tmp_path)
    slow = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    return model, fast, slow


def _same(a, b) -> bool:
    return all(same_bits(u, v) for u, v in zip(a, b))


def test_the_no_grad_code_writes_in_place_and_keeps_what_others_read(tmp_path):
    _, fast, _ = _models(tmp_path, torch.float32)
    code = "\n".join(line.split("#")[0] for line in no_grad_code(fast).splitlines())
    made = re.findall(r"op_(\w+?)_inplace_\d+\(", code)
    # 11 activations (or their input arithmetic), 10 sums, the residual, r * y, the last
    assert {"gelu", "silu", "relu", "sigmoid", "tanh", "hardswish", "hardsigmoid"} <= set(made)
    assert {"rsqrt", "neg", "exp", "add", "sub", "mul", "div"} <= set(made)
    assert {"sqrt", "erf", "log1p", "pow", "clamp_min", "expm1", "log", "sin", "elu"} <= set(made)
    assert re.search(r"op_elu_inplace_\d+\(v\d+, 0.5\)", code)
    assert "approximate='tanh'" in code
    # h is read by every activation's arithmetic and returned: never written
    for line in code.splitlines():
        if "_inplace_" in line:
            written = re.search(r"_inplace_\d+\((\w+)", line).group(1)
            assert written not in ("in0", "in1"), line  # inputs are the caller's
    returned = re.search(r"return \((v\d+), (v\d+)\)", code).group(2)
    assert "_inplace_" not in "".join(
        line for line in code.splitlines() if re.search(rf"_inplace_\d+\({returned}\b", line)
    )
    # with autograd, as recorded
    assert not re.search(r"_inplace_\d+\(", fast.code)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_results_are_the_interpreters_and_eagers_bits(dtype, tmp_path):
    model, fast, slow = _models(tmp_path, dtype)
    with torch.no_grad():
        for rows, width in [(3, 37), (1, 37), (8, 37)]:
            args = _inputs(dtype, rows, width)
            expected = model(*args)
            assert _same(fast(*args), expected) and _same(slow(*args), expected)
    # and with autograd (the code that writes nothing in place)
    args = _inputs(dtype)
    assert _same([t.detach() for t in fast(*args)], [t.detach() for t in model(*args)])


def test_an_operand_that_would_broadcast_the_result_runs_as_recorded(tmp_path):
    def f(a, b):
        return (a * 2) + b  # traced with equal shapes; called with b larger

    traced = tracebridge.trace(f, (torch.randn(1, 4), torch.randn(1, 4)), check_trace=False)
    fast = loaded(traced, tmp_path)
    slow = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    code = no_grad_code(fast)
    assert "op_add_inplace_" in code and "except _RuntimeError:" in code
    with torch.no_grad():
        for a, b in [
            (torch.randn(1, 4), torch.randn(3, 4)),  # the result is larger than a * 2
            (torch.randn(2, 4), torch.randn(1, 4)),  # b broadcasts into a * 2
            (torch.randn(2, 4), torch.randn(2, 4, dtype=torch.float64)),  # wider dtype
            (torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 4)),  # another dtype
        ]:
            expected = f(a, b)
            got, reference = fast(a, b), slow(a, b)
            assert same_bits(got, expected) and same_bits(reference, expected)
        with pytest.raises(tracebridge.TraceError, match="size of tensor"):
            fast(torch.randn(2, 4), torch.randn(3, 4))  # eager's error, not another


def test_values_others_can_see_are_never_written(tmp_path):
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(5))
            self.register_buffer("scale", torch.randn(5))

        def forward(self, x):
            a = torch.relu(x)  # x is the caller's
            b = torch.sigmoid(self.w)  # state
            c = x * 2
            d = c.view(5)  # a view of c: c is read twice
            e = torch.tanh(c)
            f = torch.exp(self.scale * 2)  # folded: the cache must stay as computed
            g = x + 1
            return a + b + d + e + f, torch.neg(g), g  # g returned: never written

    model = Shared().eval()
    traced = tracebridge.trace(model, torch.randn(5), check_trace=False)
    fast = loaded(traced, tmp_path)
    code = no_grad_code(fast)
    assert "op_relu_inplace_" not in code
    assert "op_sigmoid_inplace_" not in code
    assert "op_tanh_inplace_" not in code
    assert "op_exp_inplace_" not in code
    assert "op_neg_inplace_" not in code
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5)
            before = x.clone()
            assert _same(fast(x), model(x))
            assert torch.equal(x, before)
        assert _same(fast(x), model(x))  # the folded value was not changed by a call


def test_subclasses_and_modes_see_the_op_as_recorded(tmp_path):
    Recorded = recording_subclass()

    def f(x):
        return torch.relu(x * 2) + 1

    traced = tracebridge.trace(f, torch.randn(4), check_trace=False)
    fast = loaded(traced, tmp_path)
    assert "op_relu_inplace_" in no_grad_code(fast)
    x = torch.randn(4).as_subclass(Recorded)
    Recorded.calls.clear()
    with torch.no_grad():
        out = fast(x)
    assert "relu" in Recorded.calls and "relu_" not in Recorded.calls
    assert same_bits(out.as_subclass(torch.Tensor), f(x).as_subclass(torch.Tensor))

    class Names(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Names() as mode:
        fast(torch.randn(4))
    assert "relu" in mode.seen and "relu_" not in mode.seen


def test_the_table_names_in_place_forms_of_its_own_ops():
    for op, fn in {**inplace.UNARY, **inplace.BINARY}.items():
        assert fn.__name__ == op + "_"
    assert not (set(inplace.UNARY) | set(inplace.BINARY)) - inplace.FRESH


def test_a_residual_read_by_a_norm_before_takes_the_sum(tmp_path):
    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(6)
            self.fc = torch.nn.Linear(6, 6)

        def forward(self, x):
            h = x * 1.5  # fresh
            h = h + self.fc(self.norm(h))  # the norm read h and kept nothing: h takes it
            v = h * 2  # fresh, then a view of it is read after the add below
            w = v.view(-1)
            s = v + h.size(0)  # the view w is still alive: v is not written
            return s, w

    model = Residual().eval()
    traced = tracebridge.trace(model, torch.randn(3, 6), check_trace=False)
    fast = loaded(traced, tmp_path)
    slow = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    code = "\n".join(line.split("#")[0] for line in no_grad_code(fast).splitlines())
    written = re.findall(r"op_\w+?_inplace_\d+\((\w+)", code)
    assert len(written) == 1  # h + fc(norm(h)), not v + size
    with torch.no_grad():
        for x in (torch.randn(3, 6), torch.randn(1, 6), torch.randn(5, 6)):
            expected = model(x)
            assert _same(fast(x), expected) and _same(slow(x), expected)
            s, w = fast(x)
            assert torch.equal(w, (x * 1.5 + model.fc(model.norm(x * 1.5))).mul(2).view(-1))


def test_an_evaluation_dropout_passes_its_value_on(tmp_path):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 6)
            self.drop = torch.nn.Dropout(0.1)

        def forward(self, x):
            h = self.drop(self.fc(x))  # h is the linear's result under another name
            h = h + self.fc(h)  # written in place
            kept = self.drop(h * 2)
            return kept + 1, kept  # returned under the dropout's name: never written

    model = Block().eval()
    traced = tracebridge.trace(model, torch.randn(2, 6), check_trace=False)
    fast = loaded(traced, tmp_path)
    slow = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    code = "\n".join(line.split("#")[0] for line in no_grad_code(fast).splitlines())
    assert len(re.findall(r"op_add_inplace_\d+\(", code)) == 1
    with torch.no_grad():
        for x in (torch.randn(2, 6), torch.randn(4, 6)):
            a, b = fast(x)
            expected = model(x)
            assert _same((a, b), expected) and _same(slow(x), expected)
            assert a is not b and not torch.equal(a, b)


def test_a_parameter_operand_is_plain_and_a_subclass_operand_is_not(tmp_path):
    class Shift(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.shift = torch.nn.Parameter(torch.randn(4))

        def forward(self, x, other):
            return (self.fc(x) + self.shift) * other

    model = Shift().eval()
    example = (torch.randn(2, 4), torch.randn(2, 4))
    traced = tracebridge.trace(model, example, check_trace=False)
    fast = loaded(traced, tmp_path)
    code = no_grad_code(fast)
    assert "op_add_inplace_" in code and "op_mul_inplace_" in code
    Recorded = recording_subclass()
    with torch.no_grad():
        assert same_bits(fast(*example), model(*example))
        other = torch.randn(2, 4).as_subclass(Recorded)
        Recorded.calls.clear()
        got = fast(example[0], other)
        assert "mul" in Recorded.calls and "mul_" not in Recorded.calls
        expected = model(example[0], other)
        assert same_bits(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
