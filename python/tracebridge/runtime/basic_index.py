"""A basic index that one view op makes: ``x[:, :, k]`` as ``select(x, 2, k)``, ``x[:, None]``
as ``unsqueeze(x, 1)``, in calls without autograd.

Note: why, and why it is the same.
  Long-document attention (BigBird, Longformer) picks blocks with ``x[:, :, k]`` dozens of
  times per layer; masks are widened with ``m[:, None]``. ``Tensor.__getitem__`` parses its
  index in Python's C API and then runs, for each element, the op that element stands
  for: a full slice ``:`` runs nothing, an int ``k`` runs ``select``, ``None`` runs
  ``unsqueeze``, ``...`` skips the dimensions it covers (torch/csrc/autograd/
  python_variable_indexing.cpp, ``applySlicing``). An index made of full slices and one int
  or one ``None`` therefore runs exactly one ``select`` or ``unsqueeze``, at the dimension
  its position names; calling that op directly skips the parsing (about 0.4 us of 1.9,
  torch 2.13, one thread). The result is the same view (sizes, strides, offset, storage,
  version counter), and where the index does not fit the tensor both forms raise an
  ``IndexError`` (the messages differ; the runtime reports either as the node's error).

  * Only an index of full slices (``slice(None, None, None)``) and exactly one int (a
    literal, never a bool, or a traced int) or one ``None``, and at most one ``...``.
    Without an ellipsis before it, the int or ``None`` ends the index (an ellipsis may
    follow it) and its position counts from the front: ``x[:, :, k]`` is
    ``select(x, 2, k)``. With one, the ellipsis stands first and the position counts from
    the back: ``x[..., k, :]`` is ``select(x, -2, k)``, ``x[..., None]`` is
    ``unsqueeze(x, -1)``; the pick must follow the ellipsis (``x[..., :, k]`` needs one
    dimension more than ``select(x, -1, k)``). Then a tensor of too few dimensions makes
    both forms raise: a full slice after ``select(x, 1, k)``'s position
    (``x[:, k, :]``) would ask for one more dimension than the op needs, so it keeps the
    call. An index of only full slices is an alias (``__getitem__`` makes one), not a
    view op: it stays a call.
  * Only a plain ``torch.Tensor`` outside torch function modes and autocast (``_plain``,
    runtime/scalars.py): a subclass or a mode sees ``__getitem__`` as traced.
  * Only in the function for calls without autograd (``CodeGen.no_autograd``), as the
    other rewrites of the generated code, so that a graph with gradients records the
    nodes eager records.
  ``tests/python/test_basic_index.py`` holds both forms to the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Node, Ref

_FULL = slice(None, None, None)


@dataclass(frozen=True)
class SingleView:
    """The one view op a basic index runs: ``op(tensor, dim, *extra)``."""

    op: str  # "select" or "unsqueeze"
    tensor: Ref
    dim: int
    index: object  # the int (a literal or a Ref) for select; None for unsqueeze


def _is_full(element) -> bool:
    return type(element) is slice and element == _FULL


def _is_int(element, kinds: dict[int, str]) -> bool:
    if isinstance(element, Ref):
        return kinds.get(element.id) == "int"
    return type(element) is int


def single_view(node: Node, kinds: dict[int, str]) -> SingleView | None:
    """The view op ``node`` (a ``getitem``) runs, when its index makes exactly one (the
    module Note), else None."""
    if node.op != "getitem" or node.kwargs or len(node.args) != 2 or len(node.outputs) != 1:
        return None
    tensor, index = node.args
    if not isinstance(tensor, Ref) or kinds.get(tensor.id) != "Tensor":
        return None
    elements = list(index) if type(index) is tuple else [index]
    picks = [i for i, e in enumerate(elements) if e is None or _is_int(e, kinds)]
    ellipses = [i for i, e in enumerate(elements) if e is Ellipsis]
    if len(picks) != 1 or len(ellipses) > 1:
        return None
    at = picks[0]
    if any(not _is_full(e) for i, e in enumerate(elements) if i != at and e is not Ellipsis):
        return None
    # Where the tensor's rank fits neither form, both raise: so no full slice may stand
    # where it would ask for a dimension the op does not (``x[:, k, :]`` needs three,
    # ``select(x, 1, k)`` two). An ellipsis before the pick stands first and the pick
    # counts from the back; without one, or with one after it, the pick counts from the
    # front and ends the index (but for that ellipsis).
    if ellipses and ellipses[0] < at:
        if ellipses[0] != 0 or at != 1:
            return None  # ``x[..., :, k]`` needs two dimensions, ``select(x, -1, k)`` one
        dim = at - len(elements)
    else:
        if at != len(elements) - 1 - len(ellipses):
            return None
        dim = at
    element = elements[at]
    if element is None:
        return SingleView("unsqueeze", tensor, dim, None)
    return SingleView("select", tensor, dim, element)
