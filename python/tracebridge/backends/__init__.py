"""Backends: compile the parts of a traced graph that a compiler supports, run the rest on
the torch runtime (the ``torch.neuron.trace`` analogue). See docs/compile.md.

>>> import torch
>>> from tracebridge.backends import compile
>>> f = compile(lambda x: torch.relu(x) * 2, torch.rand(3), backend="reference")
>>> f(torch.tensor([-1.0, 1.0]))
tensor([0., 2.])
"""

from .api import META_KEY, compile, load_compiled
from .base import Backend, BackendError, backend_class, register_backend, registered
from .compiled import CompiledFunction, CompiledModule
from .inductor import InductorBackend
from .partition import Coverage, Subgraph
from .reference import ReferenceBackend

register_backend("inductor", InductorBackend)
register_backend("reference", ReferenceBackend)

__all__ = [
    "META_KEY",
    "Backend",
    "BackendError",
    "CompiledFunction",
    "CompiledModule",
    "Coverage",
    "InductorBackend",
    "ReferenceBackend",
    "Subgraph",
    "backend_class",
    "compile",
    "load_compiled",
    "register_backend",
    "registered",
]
