"""A module that uses ``int`` as a value (bound to another name): tracebridge leaves its
``int`` alone (test_trace_int_sizes.py)."""

from __future__ import annotations

import torch

to_int = int


def halves(x: torch.Tensor) -> torch.Tensor:
    height = to_int(x.shape[-1])
    return x[..., : height // 2] * 2
