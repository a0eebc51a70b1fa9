"""The default ``check_tolerance`` of ``tracebridge.compile``: by device and dtype.

Note: why not one number. A compiler reorders reductions, fuses ops and picks other
kernels (inductor's convolutions are not cuDNN's; TF32 matmuls keep 10 bits of mantissa),
so its results differ from eager PyTorch by an amount that depends on the device and on
the precision computed in, not on the model. ``torch.neuron.trace`` documents one
``check_tolerance`` that users raise by hand; here the default is chosen from the least
precise floating dtype and the device of the example inputs and the model's state, and
docs/compile.md lists the table. It is used as both the absolute and the relative
tolerance (``torch.allclose(expected, got, rtol=t, atol=t)``). An explicit
``check_tolerance`` always wins.
"""

from __future__ import annotations

import torch

from ..ir import pytree
from ..ir.pytree import is_tensor

# (device type, dtype) -> tolerance; a device not listed uses the "cuda" row.
TOLERANCES: dict[tuple[str, torch.dtype], float] = {
    ("cpu", torch.float64): 1e-7,
    ("cpu", torch.float32): 1e-4,
    ("cpu", torch.float16): 1e-2,
    ("cpu", torch.bfloat16): 5e-2,
    ("cuda", torch.float64): 1e-6,
    ("cuda", torch.float32): 1e-3,
    ("cuda", torch.float16): 1e-2,
    ("cuda", torch.bfloat16): 5e-2,
}
TF32_TOLERANCE = 1e-2  # float32 on CUDA when the user lets matmuls use TF32
_PRECISION = [torch.float64, torch.float32, torch.float16, torch.bfloat16]  # most precise first


def _tensors(args: tuple, traced) -> list[torch.Tensor]:
    leaves, _ = pytree.flatten(args, is_tensor)
    state = traced._state_slots() if hasattr(traced, "_state_slots") else {}
    return leaves + [table[key] for table, key in state.values()]


def default_tolerance(args: tuple, traced) -> float:
    """The check tolerance for a model traced on ``args`` (``traced`` gives its state).

    >>> import torch
    >>> default_tolerance((torch.rand(2),), None)
    0.0001
    >>> default_tolerance((torch.rand(2, dtype=torch.bfloat16),), None)
    0.05
    """
    tensors = [t for t in _tensors(args, traced) if t.is_floating_point()]
    if not tensors:
        return TOLERANCES[("cpu", torch.float32)]
    on_gpu = [t for t in tensors if t.device.type != "cpu"]
    device = "cuda" if on_gpu else "cpu"
    dtypes = {t.dtype for t in tensors}
    dtype = next((d for d in reversed(_PRECISION) if d in dtypes), torch.float32)
    if device == "cuda" and dtype == torch.float32 and _tf32_allowed():
        return TF32_TOLERANCE
    return TOLERANCES[(device, dtype)]


def _tf32_allowed() -> bool:
    """Matmuls in TF32 (off by default in PyTorch; cuDNN's convolutions use TF32 by default
    in eager and compiled code alike, which the 1e-3 of float32 covers)."""
    return bool(torch.backends.cuda.matmul.allow_tf32)
