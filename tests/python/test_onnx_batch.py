"""The batch of an ONNX file stays dynamic where the trace keeps it so (prober21d F5):
RoBERTa's embeddings expand a token-type buffer to the batch, whose allocation check
(runtime/checked_ops.py) bounded the batch under torch.export; the ONNX exporter then
wrote the example's batch with no word. A size the file fixes where the trace serves
others is named in a warning, also where two inputs must grow together."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

import tracebridge

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed")


class RobertaLikeEmbeddings(torch.nn.Module):
    """RoBERTa's pattern: a token-type buffer expanded to the batch, then sliced."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.words = torch.nn.Embedding(10, 4)
        self.types = torch.nn.Embedding(2, 4)
        self.register_buffer("token_type_ids", torch.zeros(1, 16, dtype=torch.long))

    def forward(self, ids, mask):
        batch, length = ids.shape
        types = self.token_type_ids.expand(batch, -1)[:, :length]
        return (self.words(ids) + self.types(types)) * mask[..., None]


def _export(module, example, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(module, example)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracebridge.export_onnx(traced, path)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _dims(path):
    return [
        [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        for value in onnx.load(str(path)).graph.input
    ]


def _calls():
    for batch, length in ((1, 5), (3, 7), (2, 4)):
        yield torch.randint(0, 10, (batch, length)), torch.ones(batch, length)


def test_an_expanded_buffer_leaves_the_batch_dynamic(tmp_path):
    module = RobertaLikeEmbeddings().eval()
    path = tmp_path / "roberta_like.onnx"
    caught = _export(module, (torch.randint(0, 10, (2, 5)), torch.ones(2, 5)), path)
    assert caught == []
    ids, mask = _dims(path)
    assert isinstance(ids[0], str) and ids[0] == mask[0]  # one batch symbol, as traced
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for call in _calls():
        (got,) = session.run(None, {"ids": call[0].numpy(), "mask": call[1].numpy()})
        torch.testing.assert_close(torch.from_numpy(got), module(*call))


def test_the_allocation_check_adds_no_bound_under_torch_export():
    module = RobertaLikeEmbeddings().eval()
    fx = importlib.import_module("tracebridge.export.fx")
    traced = tracebridge.trace(module, (torch.randint(0, 10, (2, 5)), torch.ones(2, 5)))
    gm = fx.to_graph_module(traced, flat=True)
    exported = torch.export.export(
        gm, fx.example_inputs(gm), dynamic_shapes=fx.dynamic_shapes(gm), strict=False
    )
    from torch.utils._sympy.numbers import int_oo

    ids = [n for n in exported.graph.nodes if n.op == "placeholder"][-2]
    batch = ids.meta["val"].shape[0].node.expr
    assert exported.range_constraints[batch].upper == int_oo  # was 2**26


@pytest.mark.parametrize("shared", [True, False])
def test_a_batch_the_exporter_fixes_is_named_in_a_warning(tmp_path, monkeypatch, shared):
    # With the allocation check bounding the batch again (as before the fix), the file
    # fixes the batch at 2: the warning names the batch, which the trace serves. Before,
    # neither form warned: the exporter wrote the 2 itself (shared: one batch symbol), or
    # the ids' batch grown alone was refused (separate: the mask's batch is another
    # symbol of the trace, as in RoBERTa's trace, and must grow with it).
    checked_ops = importlib.import_module("tracebridge.runtime.checked_ops")
    monkeypatch.setattr(
        checked_ops, "_checked_symbolic", lambda n: bool(n * 16 > checked_ops.ALLOC_BYTES)
    )
    module = RobertaLikeEmbeddings().eval()

    def separate(ids, mask):
        return RobertaLikeEmbeddings.forward(module, ids, mask[: ids.shape[0]])

    path = tmp_path / "bounded.onnx"
    example = (torch.randint(0, 10, (2, 5)), torch.ones(2, 5))
    caught = _export(module if shared else separate, example, path)
    assert _dims(path)[0][0] == 2
    (message,) = [m for m in caught if "made these input dimensions static" in m]
    assert "ids[0] = 2" in message and "bounds it from above" in message
