"""The backend interface and registry.

A backend says which nodes it takes (``supports``) and turns one partition, given as a
generated Python function over the partition's inputs, into a callable (``compile``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

import torch

from ..errors import TraceError
from ..ir import Node


class BackendError(TraceError):
    """A backend is unknown, got arguments it does not understand, or failed to compile."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises BackendError instead of printing and exiting."""

    def error(self, message):
        raise BackendError(
            f"compiler_args for backend {self.prog!r}: {message}\n{self.format_usage().strip()}"
        )

    def exit(self, status=0, message=None):
        raise BackendError(message or f"compiler_args for backend {self.prog!r} asked to exit")


class Backend:
    """Base class: subclass, set ``name``, implement ``supports`` and ``compile``.

    ``add_arguments`` declares the ``compiler_args`` the backend accepts (argparse style);
    anything else is an error that names the backend and shows its usage.
    """

    name = "backend"
    # True: the backend compiles a whole method's torch.fx.GraphModule at once
    # (``compile_graph_module``, see whole.py) instead of partition functions.
    whole_graph = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Declare accepted compiler arguments (none by default)."""

    @classmethod
    def parse_args(cls, args: Sequence[str] | None) -> argparse.Namespace:
        if args is not None and (
            isinstance(args, str) or not all(isinstance(a, str) for a in args)
        ):
            raise BackendError(
                f"compiler_args must be a list of strings, such as "
                f"['--mode', 'default'], not {args!r}"
            )
        parser = _Parser(prog=cls.name, add_help=False, allow_abbrev=False)
        cls.add_arguments(parser)
        return parser.parse_args(list(args or []))

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def supports(self, node: Node) -> bool:
        raise NotImplementedError

    def compile(
        self,
        subgraph_fn: Callable,
        example_inputs: tuple | None,
        args: argparse.Namespace,
        workdir: str | os.PathLike | None,
    ) -> Callable:
        """Return a callable equivalent to ``subgraph_fn``. ``example_inputs`` are the
        partition's inputs seen while tracing (None when recompiling after ``load``): a
        backend warms up on them so that compiling costs nothing at the first call."""
        raise NotImplementedError

    def compile_graph_module(self, gm, example_inputs: tuple | None, args, workdir) -> Callable:
        """For a ``whole_graph`` backend: a callable equivalent to ``gm`` (a method's
        GraphModule from export/fx.py: flat input tensors in, a tuple of outputs out; the
        nodes the backend does not support are already wrapped to run eagerly). With
        ``example_inputs``, warm up on them (None when recompiling after ``load``)."""
        raise NotImplementedError

    def compiles_in_callers_thread(self, tensors: Sequence[torch.Tensor]) -> bool:
        """Whether the whole-graph warm-up must run in the thread that will call the
        compiled object (not in the worker thread that enforces ``compiler_timeout``):
        state the compiler keeps per thread, such as CUDA graph trees."""
        return False

    def records_cuda_graphs(self, tensors: Sequence[torch.Tensor]) -> bool:
        """Whether calls on ``tensors`` (inputs and state) replay CUDA graphs: then even a
        lone op is worth compiling (the replay saves its launch), where otherwise a run too
        small to fuse stays on the runtime."""
        return False


_REGISTRY: dict[str, type[Backend]] = {}


def register_backend(name: str, cls: type[Backend]) -> None:
    """Make ``cls`` available as ``tracebridge.compile(..., backend=name)``.

    >>> from tracebridge.backends import register_backend, registered, ReferenceBackend
    >>> register_backend("my_reference", ReferenceBackend)
    >>> "my_reference" in registered()
    True
    >>> _REGISTRY.pop("my_reference").__name__  # leave the registry as the tests expect it
    'ReferenceBackend'
    """
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(f"register_backend({name!r}, ...) needs a Backend subclass")
    if not name.isidentifier():
        raise BackendError(
            f"backend name {name!r} must be an identifier (it names graph "
            "nodes such as backend.<name>_subgraph_0)"
        )
    _REGISTRY[name] = cls


def backend_class(name: str) -> type[Backend]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise BackendError(
            f"unknown backend {name!r}; registered backends: {', '.join(sorted(_REGISTRY))}"
        ) from None


def registered() -> list[str]:
    return sorted(_REGISTRY)
