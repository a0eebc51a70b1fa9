"""A repeated node is shared only in calls without autograd (runtime/cse.py,
``CodeGen.share_repeats``): autograd sums the gradients of one shared result in another
order than those of two, so calls with autograd run every node and give eager's
gradients bit for bit."""

from __future__ import annotations

import dis

import torch

import tracebridge

from .graph_helpers import loaded


def twice(x):
    return (x * 0.3).sin() + torch.mul(x, 0.3).cos()  # mul(x, 0.3) twice


def test_gradients_are_eager_s_bit_for_bit(tmp_path):
    module = loaded(tracebridge.trace(twice, (torch.randn(4, 6),)), tmp_path)
    torch.manual_seed(3)
    for _ in range(5):
        x = torch.randn(4, 6) * 30
        ours = x.clone().requires_grad_()
        theirs = x.clone().requires_grad_()
        (g_ours,) = torch.autograd.grad(module(ours).sum(), ours)
        (g_theirs,) = torch.autograd.grad(twice(theirs).sum(), theirs)
        assert torch.equal(g_ours, g_theirs)


def _mul_calls(function) -> int:
    """How many times the generated function loads a ``mul`` to call it."""
    return sum(
        1
        for ins in dis.get_instructions(function)
        if ins.opname == "LOAD_FAST" and str(ins.argval).startswith("op_mul")
    )


def test_calls_without_autograd_share_the_repeat(tmp_path):
    module = loaded(tracebridge.trace(twice, (torch.randn(4, 6),)), tmp_path)
    x = torch.randn(4, 6)
    with torch.no_grad():
        assert torch.equal(module(x), twice(x))
    method = module._forward
    assert _mul_calls(method._function((True, True))) == 1  # guards on, no autograd
    assert _mul_calls(method._function((True, False))) == 2  # with autograd
