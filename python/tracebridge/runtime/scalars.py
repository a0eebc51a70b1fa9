"""Tensor-scalar arithmetic with the scalar made into a tensor once, at load.

Note: a Python number costs a tensor on every call.
  ``x * 0.5`` hands torch a Python float, which its argument parser wraps into a new
  0-dim double tensor (a "wrapped number") on every call, and TensorIterator then casts it
  to ``x``'s dtype: about 1.6 us of a 2.9 us ``mul`` on a small float32 tensor (torch
  2.13, one thread), where ``x * t`` with a 0-dim float32 tensor ``t`` made once costs
  1.2. ``torch.jit.trace`` keeps the double constant and pays the cast. Transformers
  scale, shift and mix with literals in every layer (attention scaling, GELU's
  polynomial, ``1.0 - mask``, ``variance + eps``), so the generated code passes a 0-dim
  tensor of ``x``'s dtype made at load instead of the literal, where that gives the very
  same result:
  * Only ``add``, ``sub``, ``mul``, ``div`` (and their aliases, ``rsub`` and the in-place
    forms) without other arguments (``alpha``, ``rounding_mode``): their kernels see the
    scalar only through TensorIterator, where a wrapped number and a 0-dim tensor differ
    in type promotion alone, and a 0-dim tensor of ``x``'s own dtype promotes as the
    wrapped number does (to ``x``'s dtype). Other ops have overloads of their own for a
    scalar (``pow`` has fast paths for some exponents), so they keep the literal.
  * Only float32 and float64, checked on every call (``x.dtype is float32``): kernels of
    half and bfloat16 read the wrapped number's double value (``original_scalar_value``),
    which a half constant has lost. Integer tensors promote differently (``int * 0.5``
    follows the default dtype).
  * Only a plain ``torch.Tensor`` and only outside torch function modes, dispatch modes
    and autocast, decided once per call (``_plain``): a subclass, a tracer or a fake-tensor
    mode sees the literal, as the program wrote it.
  Otherwise the call passes the literal. ``tests/python/test_scalar_constants.py`` holds
  both forms to the same bits, dtypes and gradients over values, layouts and scalars
  that include infinities, NaN, signed zeros, subnormals and integers.
"""

from __future__ import annotations

import ast

import torch

from ..ir import Node, Ref

# Ops whose second argument may be a 0-dim tensor instead of a Python number, bit for bit.
OPS = frozenset(
    """add sub subtract mul multiply div divide true_divide rsub
    Tensor.add_ Tensor.sub_ Tensor.subtract_ Tensor.mul_ Tensor.multiply_ Tensor.div_
    Tensor.divide_ Tensor.true_divide_""".split()
)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
_INT_LIMIT = 2**62  # a literal int that a float64 tensor is made from without overflow

PLAIN = "_plain"  # the local the generated code reads: no mode, no autocast this call
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_autocast = torch._C._is_any_autocast_enabled


def plain_call() -> bool:
    """Whether this call runs outside every torch function mode, dispatch mode and
    autocast region (the generated code asks once per call)."""
    return not (_function_modes() or _dispatch_modes() or _autocast())


def tensor_for(node: Node, dtype_of) -> tuple[torch.Tensor, torch.dtype] | None:
    """The 0-dim tensor to pass for ``node``'s scalar, and the dtype its tensor must have
    for that (the one it had when traced), or None where ``node`` keeps its literal.
    ``dtype_of`` maps a value id to its dtype name."""
    if node.op not in OPS or node.kwargs or len(node.args) != 2:
        return None
    tensor, scalar = node.args
    if not isinstance(tensor, Ref) or type(scalar) not in (float, int):
        return None  # bool is not a number here: it promotes as its own category
    if type(scalar) is int and abs(scalar) >= _INT_LIMIT:
        return None
    dtype = DTYPES.get(dtype_of(tensor.id))
    if dtype is None:
        return None
    # A normal tensor, whatever the mode the code is built in (a first call, or a trace,
    # made under torch.inference_mode()): an inference tensor cannot be saved for backward,
    # so every later call with autograd failed on it.
    with torch.inference_mode(False):
        return torch.tensor(scalar, dtype=dtype, device="cpu"), dtype


def operand(tensor: ast.expr, constant: ast.expr, dtype: ast.expr, literal: ast.expr, is_plain):
    """``constant if _plain and type(tensor) is Tensor and tensor.dtype is dtype else
    literal``; ``is_plain`` makes the names of ``type`` and ``Tensor``."""
    type_name, tensor_type = is_plain
    test = ast.BoolOp(
        ast.And(),
        [
            ast.Name(PLAIN, ast.Load()),
            ast.Compare(ast.Call(type_name, [tensor], []), [ast.Is()], [tensor_type]),
            ast.Compare(ast.Attribute(tensor, "dtype", ast.Load()), [ast.Is()], [dtype]),
        ],
    )
    return ast.IfExp(test, constant, literal)
