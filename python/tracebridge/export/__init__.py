"""Export: a traced program as a ``torch.fx.GraphModule``, the one bridge to the PyTorch 2
stack (``torch.compile``, ``torch.export`` and AOTInductor, ONNX). See docs/deploy.md.

>>> import torch, tracebridge
>>> from tracebridge.export import to_graph_module
>>> f = tracebridge.trace(lambda x: torch.relu(x) * x.size(0), torch.rand(3))
>>> to_graph_module(f)(torch.tensor([-1.0, 1.0]))
(tensor([0., 2.]),)
"""

from .fx import (
    BridgeInfo,
    call,
    dynamic_shapes,
    example_inputs,
    flatten_inputs,
    info,
    to_graph_module,
    unflatten_outputs,
)
from .onnx import OnnxExportError, export_onnx

__all__ = [
    "BridgeInfo",
    "OnnxExportError",
    "export_onnx",
    "call",
    "dynamic_shapes",
    "example_inputs",
    "flatten_inputs",
    "info",
    "to_graph_module",
    "unflatten_outputs",
]
