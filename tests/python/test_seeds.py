"""The examples of the reference documents (shared/seeds), with only the import changed."""

from __future__ import annotations

import torch
import torch.nn as nn

import tracebridge


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3)

    def forward(self, x):
        return self.conv(x)

    def weighted_kernel_sum(self, weight):
        return weight * self.conv.weight


def test_seed_000_trace_function():
    def foo(x, y):
        return 2 * x + y

    traced_foo = tracebridge.trace(foo, (torch.rand(3), torch.rand(3)))
    assert isinstance(traced_foo, tracebridge.TracedFunction)
    x, y = torch.rand(3), torch.rand(3)
    torch.testing.assert_close(traced_foo(x, y), foo(x, y))
    assert repr(traced_foo) == "<tracebridge.TracedFunction foo>"
    assert traced_foo.graph.splitlines()[0] == "graph foo(%x: f32[s0], %y: f32[s1]) {"


def test_seed_000_trace_module_and_method(capsys):
    model = Net()
    forward_input = torch.rand(1, 1, 3, 3)
    print("Model: ", model)
    module = tracebridge.trace(model.forward, forward_input)
    print("Specific Method: ", module.code)
    print(module.graph)
    module = tracebridge.trace(model, forward_input)
    print(module)
    print("Graph: ", module.graph)
    out = capsys.readouterr().out
    assert "def forward(in0):" in out  # runtime-made names (nothing from a file is code)
    assert "conv2d(%x, %conv.weight, %conv.bias" in out
    assert module.conv is model.conv  # same sub-modules, shared
    torch.testing.assert_close(module(forward_input), model(forward_input))


def test_seed_001_examples():
    def foo(x, y):
        return 2 * x + y

    traced_foo = tracebridge.trace(foo, (torch.rand(3), torch.rand(3)))
    n = Net()
    example_forward_input = torch.rand(1, 1, 3, 3)
    module = tracebridge.trace(n.forward, example_forward_input)
    module = tracebridge.trace(n, example_forward_input)
    torch.testing.assert_close(module(example_forward_input), n(example_forward_input))
    assert traced_foo(torch.ones(2), torch.ones(2)).tolist() == [3.0, 3.0]


def test_seed_003_trace_module_two_methods():
    n = Net()
    example_weight = torch.rand(1, 1, 3, 3)
    example_forward_input = torch.rand(1, 1, 3, 3)
    inputs = {"forward": example_forward_input, "weighted_kernel_sum": example_weight}
    module = tracebridge.trace_module(n, inputs)
    assert module.methods == ["forward", "weighted_kernel_sum"]
    torch.testing.assert_close(
        module.weighted_kernel_sum(example_weight), n.weighted_kernel_sum(example_weight)
    )
    torch.testing.assert_close(module(example_forward_input), n(example_forward_input))
    assert "mul(%weight, %conv.weight)" in module.weighted_kernel_sum.graph
