"""tracebridge: trace PyTorch code once, check it, run it from Python and R.

The data flow, one package per stage (imports only point down this list)::

    trace/ -> ir/ -> check/ -> runtime/ -> artifact/ -> api.py -> export/ -> backends/ -> frontends/

``errors``, ``source`` and ``version`` are leaves every stage may use; see
docs/architecture.md.

>>> import torch, tracebridge
>>> traced = tracebridge.trace(lambda x: torch.relu(x) * 2, torch.tensor([-1.0, 1.0]))
>>> traced(torch.tensor([3.0, -3.0]))
tensor([6., 0.])

``tracebridge.to_graph_module(traced)`` is the bridge to the PyTorch 2 stack: the traced
graph as a ``torch.fx.GraphModule`` over the traced module's own tensors, for
``torch.compile``, ``torch.export`` and ONNX (docs/deploy.md); ``tracebridge.export_onnx``
writes it as an ONNX model.

>>> gm = tracebridge.to_graph_module(traced)
>>> gm(torch.tensor([3.0, -3.0, 1.0]))
(tensor([6., 0., 2.]),)
"""

from .api import (  # noqa: E402
    FrozenFunction,
    FrozenModule,
    TracedFunction,
    TracedMethod,
    TracedModule,
    freeze,
    load,
    save,
    trace,
    trace_module,
)
from .backends import compile  # noqa: E402
from .backends.aot import load_compiled, save_compiled  # noqa: E402
from .errors import (  # noqa: E402
    ArtifactError,
    BindingError,
    GuardError,
    GuardValueError,
    OpError,
    TraceError,
    TracerWarning,
    TracingCheckError,
    UnsupportedOpError,
)
from .export import export_onnx, to_graph_module  # noqa: E402
from .runtime import guards_disabled, invalidate_caches, pass_through  # noqa: E402
from .version import __version__  # noqa: E402,F401

__all__ = [
    "ArtifactError",
    "BindingError",
    "FrozenFunction",
    "FrozenModule",
    "GuardError",
    "GuardValueError",
    "OpError",
    "TraceError",
    "TracedFunction",
    "TracedMethod",
    "TracedModule",
    "TracerWarning",
    "TracingCheckError",
    "UnsupportedOpError",
    "compile",
    "export_onnx",
    "freeze",
    "guards_disabled",
    "invalidate_caches",
    "load",
    "load_compiled",
    "pass_through",
    "save",
    "save_compiled",
    "to_graph_module",
    "trace",
    "trace_module",
]
