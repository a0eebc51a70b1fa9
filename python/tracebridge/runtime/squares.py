"""Squares written as products, in calls without autograd.

Note: ``x.pow(2)`` costs half a microsecond more than ``x * x``.
  Llama-style RMSNorm runs ``hidden_states.pow(2).mean(-1, keepdim=True)`` twice per
  layer, T5's layer norm and ALBERT-style variances once. ``pow`` with a Python number
  goes through the argument parser's wrapped number and ``pow_tensor_scalar``'s dispatch
  on the exponent (1.7 us on a small float32 tensor, torch 2.13, one thread) before its
  kernel computes ``base * base`` for an exponent of 2 (the CPU and CUDA kernels both
  special-case it); ``mul(x, x)`` computes the very same product in 1.1. So the generated
  code writes such a node as ``mul(x, x) if _plain and type(x) is Tensor and x.dtype is
  dtype else pow(x, 2)``:
  * Only an exponent of exactly 2 (int or float) and only ``pow`` (``x.pow(2)``,
    ``torch.pow(x, 2)``, ``x ** 2``; not the in-place form).
  * Only float32 and float64, the dtype the tensor had when traced, checked on every
    call: half kernels compute in float (``pow`` and ``mul`` may round differently), and
    integer ``pow`` has overflow rules of its own.
  * Only a plain ``torch.Tensor`` outside torch function modes, dispatch modes and
    autocast (``_plain``, runtime/scalars.py): a subclass or a mode sees ``pow``, as the
    program wrote it.
  * Only in the function for calls without autograd whose graph never turns gradients
    on (``CodeGen.common`` and ``cse.grad_stays_off``): ``pow``'s backward is
    ``grad * 2 * x`` and ``mul(x, x)``'s ``grad * x + grad * x``, which round differently.
  ``tests/python/test_squares.py`` holds both forms to the same bits.
"""

from __future__ import annotations

import torch

from ..ir import Node, Ref

OPS = frozenset({"pow"})  # the op ``x.pow(2)``, ``torch.pow(x, 2)`` and ``x ** 2`` record
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def squared(node: Node, dtype_of) -> tuple[Ref, torch.dtype] | None:
    """``(tensor, dtype)`` for a node that squares a tensor traced with a dtype whose
    square is ``mul(x, x)`` bit for bit, or None. ``dtype_of`` maps a value id to its
    traced dtype name."""
    if node.op not in OPS or node.kwargs or len(node.args) != 2 or len(node.outputs) != 1:
        return None
    tensor, exponent = node.args
    if not isinstance(tensor, Ref) or type(exponent) not in (int, float) or exponent != 2:
        return None
    dtype = DTYPES.get(dtype_of(tensor.id))
    return None if dtype is None else (tensor, dtype)
