"""Calls whose inputs share memory with each other or with state: the rewrites of calls
without autograd (runtime/cse.py, folding.py, memo.py, ``fuse_conv_bn``) must not move a
read of an input or of state across a write that the caller's aliasing makes reach it
(runtime/caller_memory.py). Each case compares the traced and the reloaded function, under
``torch.no_grad()``, with eager on the same aliased arguments: results, inputs and state."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tracebridge

from .graph_helpers import loaded

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _same(_module):
    z = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    return (z, z)


def _overlapping(_module):
    base = torch.randn(12, generator=torch.Generator().manual_seed(1))
    return (base[:8].view(2, 4), base[4:].view(2, 4))


def _check_function(fn, aliased, tmp_path):
    x = torch.randn(2, 4)
    traced = tracebridge.trace(fn, (x, x.clone()), check_trace=False)
    for runner in (traced, loaded(traced, tmp_path)):
        with torch.no_grad():
            want_args = aliased(None)
            want = fn(*want_args)
            got_args = aliased(None)
            got = runner(*got_args)
        assert torch.equal(got, want)
        assert all(torch.equal(g, w) for g, w in zip(got_args, want_args))


def exp_across_write(a, b):
    y = a.exp()
    b.mul_(0)  # writes a too where the caller passes one tensor twice
    return y - a.exp()


def sum_across_zero(a, b):
    s = b.sum()
    a.zero_()
    return s + b.sum()


def view_across_write(a, b):
    y = a[0] * 2
    b[0].add_(1)
    return y - a[0] * 2


@pytest.mark.parametrize("fn", [exp_across_write, sum_across_zero, view_across_write])
@pytest.mark.parametrize("aliased", [_same, _overlapping], ids=["same", "overlapping"])
def test_repeats_across_a_write_into_an_aliased_input(fn, aliased, tmp_path):
    _check_function(fn, aliased, tmp_path)


class BufferWritten(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.randn(2, 4))

    def forward(self, x):
        y = x * 2
        self.buf.add_(1)  # writes x where x is the buffer
        return y - x * 2


class InputWritten(nn.Module):
    """State read twice (a repeat) and once after the write (a fold's candidate)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 4))

    def forward(self, x):
        y = self.w.exp()
        x.mul_(0.5)  # writes w where x is a view of it
        return y - self.w.exp() + self.w * 2


class BufferPassedIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.ones(4))

    def forward(self, x):
        y = self.b * 2
        x.add_(1)
        return y + self.b * 2


class SizedFromState(nn.Module):
    """A memo block (sizes and a buffer) that must run before the write."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv", torch.rand(4))

    def forward(self, x, y):
        m = torch.arange(x.shape[0], dtype=torch.float32)[:, None] * self.inv
        y.mul_(3)
        return x + m


class ConvNorm(nn.Module):
    """A convolution and its evaluation-mode norm, whose statistics an input may be."""

    def __init__(self, write_between: bool):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)
        self.norm = nn.BatchNorm2d(2)
        self.norm.running_mean.normal_()
        self.write_between = write_between

    def forward(self, x, y):
        if not self.write_between:
            y.mul_(2)
        c = self.conv(x)
        if self.write_between:
            y.mul_(2)
        return self.norm(c)


class ConvNormInnerWrite(nn.Module):
    """A write between a convolution and its norm into what the convolution read."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)
        self.norm = nn.BatchNorm2d(2)
        self.norm.running_mean.normal_()

    def forward(self, x):
        h = x.relu()
        c = self.conv(h)
        h.add_(1)
        return self.norm(c)


class LinearWeightWritten(nn.Module):
    """A linear's transposed weight (folded for calls without autograd: runtime/linear_2d.py)
    read again after a write into an input that is the weight; and a second linear of the
    same input (runtime/concat_linear.py)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)

    def forward(self, x, y):
        a = self.first(x)
        y.mul_(2)
        return self.first(x) + a + self.second(x)


MODULE_CASES = {
    "buffer-as-input": (BufferWritten, [(2, 4)], lambda m: (m.buf,)),
    "view-of-parameter": (InputWritten, [(2, 4)], lambda m: (m.w.detach().view(2, 4),)),
    "buffer-passed-in": (BufferPassedIn, [(4,)], lambda m: (m.b,)),
    "linear-weight": (
        LinearWeightWritten,
        [(3, 4), (4, 4)],
        lambda m: (torch.ones(3, 4), m.first.weight),
    ),
    "memo-block": (SizedFromState, [(3, 4), (4,)], lambda m: (torch.ones((3, 4)), m.inv)),
    "conv-norm-write-between": (
        lambda: ConvNorm(True).eval(),
        [(1, 2, 3, 3), (2,)],
        lambda m: (torch.ones((1, 2, 3, 3)), m.norm.running_mean),
    ),
    "conv-norm-write-before": (
        lambda: ConvNorm(False).eval(),
        [(1, 2, 3, 3), (2,)],
        lambda m: (torch.ones((1, 2, 3, 3)), m.norm.running_mean),
    ),
    "conv-norm-inner-write": (
        lambda: ConvNormInnerWrite().eval(),
        [(1, 2, 3, 3)],
        lambda m: (torch.randn(1, 2, 3, 3, generator=torch.Generator().manual_seed(3)),),
    ),
}


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
def test_state_and_inputs_that_share_memory(case, tmp_path):
    make, shapes, aliased = MODULE_CASES[case]
    module = make()
    eager = copy.deepcopy(module)
    traced = tracebridge.trace(module, tuple(torch.randn(s) for s in shapes), check_trace=False)
    reloaded = loaded(traced, tmp_path)
    eager_of_reloaded = copy.deepcopy(module)
    # The traced module shares its state with ``module``; the reloaded one has its own.
    for runner, holder, reference in (
        (traced, module, eager),
        (reloaded, reloaded, eager_of_reloaded),
    ):
        for _ in range(2):  # the second call finds what the first kept (folds, memos)
            with torch.no_grad():
                want_args = aliased(reference)
                want = reference(*want_args)
                got_args = aliased(holder)
                got = runner(*got_args)
            torch.testing.assert_close(got, want)
            for g, w in zip(got_args, want_args):
                torch.testing.assert_close(g, w)
            for (name, g), w in zip(holder.state_dict().items(), reference.state_dict().values()):
                torch.testing.assert_close(g, w, msg=name)


def _no_grad_code(module, example):
    traced = tracebridge.trace(module, example)
    with torch.no_grad():
        return traced.code


class Repeats(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.register_buffer("shift", torch.rand(4))
        self.scale = nn.Parameter(torch.rand(4))

    def forward(self, x):
        return self.norm(x + self.shift) + (x * self.scale).exp() + (x * self.scale).exp()


def test_graphs_that_write_no_caller_memory_keep_their_repeats():
    # Nothing writes an input or state: the repeated product and exp of them run once.
    code = _no_grad_code(Repeats().eval(), (torch.randn(3, 4),))
    assert code.count("# exp,") == 1
    assert code.count("# mul,") == 1


def test_a_write_into_an_input_keeps_repeats_of_made_values():
    # Values the graph makes (not views of an input or state) are still computed once.
    def fn(a, b):
        h = a * 3
        y = h.exp()
        b.mul_(0)
        return y + h.exp()

    code = _no_grad_code(fn, (torch.randn(2, 4), torch.randn(2, 4)))
    assert code.count("# exp,") == 1


def reshapes_the_second(a, b):
    b.unsqueeze_(0)  # reshapes a too where a is b
    return a.new_zeros(a.shape) + 1


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_one_tensor_passed_twice_to_a_graph_that_reshapes_it_in_place(runtime, tmp_path):
    x = torch.randn(2, 4)
    traced = tracebridge.trace(reshapes_the_second, (x, x.clone()), check_trace=False)
    for runner in (traced, loaded(traced, tmp_path, runtime=runtime)):
        for grad in (True, False):
            with torch.set_grad_enabled(grad):
                z = torch.randn(2, 4)
                with pytest.raises(tracebridge.TraceError, match="same tensor object"):
                    runner(z, z)
                a, b = torch.randn(2, 4), torch.randn(2, 4)
                want = reshapes_the_second(a.clone(), b.clone())
                got = runner(a, b)
                assert torch.equal(got, want) and b.shape == (1, 2, 4)
