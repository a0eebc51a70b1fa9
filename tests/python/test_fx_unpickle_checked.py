"""A pickled GraphModule whose graph calls tracebridge's checked ops unpickles (prober21d
F6): unpickling traces the code again (fx_checks.CheckTracer), which ran a checked op
on proxies, where its checks refused them (HuBERT's GroupNorm: ``group_norm: input
needs 2+ dimensions``); the op is now kept as the call it was."""

from __future__ import annotations

import importlib
import io
import warnings

import torch

import tracebridge

fx = importlib.import_module("tracebridge.export.fx")


class Grouped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x):
        return self.norm(x.transpose(1, 2))


def test_a_graph_module_calling_a_checked_op_unpickles_and_answers_right():
    module = Grouped().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = tracebridge.to_graph_module(tracebridge.trace(module, torch.randn(2, 5, 4)))
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.target for n in loaded.graph.nodes if n.op == "call_function"] == targets
    for shape in ((2, 5, 4), (3, 7, 4)):
        x = torch.randn(shape)
        torch.testing.assert_close(fx.call(loaded, x), module(x))
