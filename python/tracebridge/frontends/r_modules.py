"""Module plumbing for the R front end, one Python call per R operation.

An R ``nn_module()`` instance lives in a :class:`~tracebridge.frontends.rbridge.RModule`.
The Python module must not hold the R instance (R and Python would keep each other alive
and neither collector could free them), so it holds an integer key and calls one shared
R dispatcher with it; R finds the instance through a weak reference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .rbridge import new_module


def new_r_module(
    classname: str, arg_names: list[str], key: int, dispatch: Callable[..., Any]
) -> torch.nn.Module:
    """A new RModule for an R instance with ``key``; its forward calls ``dispatch``.

    >>> m = new_r_module("Net", ["x"], 7, lambda key, method, *a: (key, method, a))
    >>> m(1)
    (7, 'forward', (1,))
    """
    module = new_module(classname, arg_names)
    module._r_key = key
    module._r_forward = functools.partial(dispatch, key, "forward")
    return module


def bind_method(module: torch.nn.Module, name: str, dispatch: Callable[..., Any]) -> None:
    """Expose the R method ``name`` of the module's R instance as a Python attribute,
    so that ``trace_module`` finds it with ``getattr``."""
    setattr(module, name, functools.partial(dispatch, module._r_key, name))


def set_forward(module: torch.nn.Module, dispatch: Callable[..., Any]) -> None:
    """Make the RModule's forward call the R ``forward`` of its instance."""
    module._r_forward = functools.partial(dispatch, module._r_key, "forward")
