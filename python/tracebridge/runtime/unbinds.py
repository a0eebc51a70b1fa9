"""An ``unbind`` whose count of results the input's size gives: the kernel, tested inline.

Note: ``q, k, v = qkv.unbind(0)`` costs two Python frames around its kernel.
  timm's attention (ViT, DeiT, EVA, CaiT, BEiT, ...) splits its projection with
  ``reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)`` in every block. The op table
  runs ``unbind`` through ``checked_ops._counted`` (its count of results bounded by
  ``LIMITS['results']`` before any tensor is made: a crafted file could ask for 2**24 of
  them), and the generated code checks the count against the node's
  (``support.check_count``, the count guard). Both are Python frames; inside a model call,
  where the kernels before them have pushed the frames' code and data out of the caches,
  the two cost about 4 us per ``unbind`` (timm ViT-tiny and DeiT3 at batch 1, torch 2.13,
  one thread: 9 us of 238 for their two), where the kernel costs 1.5.

  Where ``x.shape[d]`` is the node's count ``n`` both checks hold before the call: the
  kernel makes exactly ``n`` results, and ``n`` (a literal of the file, at most
  ``LIMITS['results']``, the loader's bound on a node's outputs) is within the bound. So
  the generated code writes such a node as ``kernel(x, d) if _plain and type(x) is Tensor
  and x.ndim > d and x.shape[d] == n else check_count(checked_unbind(x, d), n, node)``
  (``x.ndim >= -d`` for a negative ``d``): the same kernel on the same arguments, where
  the checks would pass; the checked op and the count guard wherever they could fail (a
  tensor subclass or a torch function mode, which may answer with another count; another
  size along ``d``). Only for a node of the op table's own implementation, with ``d`` a
  literal int given by position (or none: 0), and a tuple or list of results.
  ``tests/python/test_unbinds.py`` holds both forms to the same results and errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..check.program import LIMITS
from ..ir import Node, Ref

KERNEL = torch._C._VariableFunctions.unbind  # what checked_ops._counted("unbind") calls


@dataclass(frozen=True)
class Unbind:
    """``unbind(tensor, dim)`` of ``count`` results."""

    tensor: Ref
    dim: int
    count: int


def counted(node: Node) -> Unbind | None:
    """The parts of an ``unbind`` node that the generated code may run as its kernel where
    the input's size along ``dim`` is its count, or None."""
    if node.op != "unbind" or node.kwargs or not 1 <= len(node.args) <= 2:
        return None
    spec = node.out_spec or {}
    children = spec.get("c", ())
    if spec.get("t") not in ("tuple", "list") or len(children) != len(node.outputs):
        return None
    if not all(isinstance(c, dict) and c.get("t") == "leaf" for c in children):
        return None
    tensor = node.args[0]
    dim = node.args[1] if len(node.args) == 2 else 0
    count = len(node.outputs)
    if not isinstance(tensor, Ref) or type(dim) is not int or not 1 <= count <= LIMITS["results"]:
        return None
    return Unbind(tensor, dim, count)
