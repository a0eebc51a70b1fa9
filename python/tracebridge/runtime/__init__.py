"""Runtimes: turn a Graph into something callable.

``codegen`` (the default) writes a Python function from the graph once and calls torch
directly, so a traced call costs what eager code costs. ``interpreter`` walks the nodes
one by one; it is slower but easy to step through, and gives identical results.
"""

from __future__ import annotations

from . import optimizer_steps  # noqa: F401 - its hook drops kept values after a step
from .folding import invalidate_caches
from .method import Method, guards_disabled, pass_through

__all__ = ["Method", "guards_disabled", "invalidate_caches", "pass_through"]
