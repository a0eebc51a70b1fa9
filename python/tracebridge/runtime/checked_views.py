"""Checked implementations of ``as_strided`` and ``repeat_interleave`` (op-set 4).

Note: why these two run through a check.
  ``as_strided`` makes a view from a size, strides and an offset into its input's
  storage: written by a file, they could reach any element of that storage -- for a
  memory-mapped weight, bytes of the file that belong to no tensor of the graph. The view
  is allowed only within the elements the input itself covers (from its first element to
  its last, as its own sizes and strides reach them), checked here before the kernel
  runs; PyTorch's own check is against the whole storage. A view with more elements than
  its input (strides that overlap, 0 among them) is bounded as an expand is
  (``checked_ops.sized_guard``): its elements at its width within ``ALLOC_BYTES``, since
  the next op reads them all (``as_strided(x, [n], [0]).sum()`` with ``n = 2**40``
  computed at the call ran for hours). ``repeat_interleave`` makes an output whose length
  is the sum of its repeats: the bytes are computed and bounded (``ALLOC_BYTES``) before
  anything is allocated -- the repeats checked one by one first, since their int64 sum
  wraps (``[2**62] * 4`` sums to 0, and the kernel then wrote past the output it
  allocated) -- and an ``output_size`` must be that sum. Both runtimes call these
  (``support.default_callable``); the load-time rules for literal arguments are in
  ``check/views.py`` and ``check/budget.py``.
"""

from __future__ import annotations

import math
import operator

import torch

from ..check.program import LIMITS

# The most bytes one result may take (shared_ir/SPEC.md, section Limits: alloc_bytes).
ALLOC_BYTES = LIMITS["alloc_bytes"]


def _view_fits(input: torch.Tensor, numel: int) -> bool:
    """A view of ``numel`` elements of ``input`` presents no more than its input holds,
    or no more than ``ALLOC_BYTES`` at its width: what a later op may read in full."""
    return numel <= input.numel() or numel * input.element_size() <= ALLOC_BYTES


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """The storage elements ``tensor`` covers: ``[first, last]`` (``last < first`` when
    it has none)."""
    first = tensor.storage_offset()
    if tensor.numel() == 0:
        return first, first - 1
    reach = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return first, first + reach


def _is_index(v) -> bool:
    """An integer, or a 0-dim integer tensor, which eager reads as one (Longformer's sizes
    come from ``torch.div(seq_len, w, rounding_mode="trunc") - 1``, a 0-dim tensor)."""
    if isinstance(v, torch.Tensor):
        return (
            v.dim() == 0
            and not v.is_floating_point()
            and not v.is_complex()
            and (v.dtype != torch.bool)
        )
    return isinstance(v, int) and not isinstance(v, bool)


# Integer dtypes: a 0-dim tensor of one is read as an int without the checks of _is_index.
_INDEX_DTYPES = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


def _ints(value, what: str) -> list[int]:
    items = list(value) if isinstance(value, (list, tuple, torch.Size)) else [value]
    ints = []
    for v in items:
        if type(v) is int:
            ints.append(v)
        elif type(v) is torch.Tensor and v.dtype in _INDEX_DTYPES and v.dim() == 0:
            ints.append(int(v))  # Longformer's sizes: 0-dim tensors, on every call
        elif _is_index(v):
            ints.append(int(v))
        else:
            raise ValueError(f"as_strided: {what} must be integers, not {items!r}")
    return ints


# Containers whose items the fast path reads as they are (torch.Size holds ints only).
_PLAIN = (list, tuple, torch.Size)
_INT_ONLY = frozenset({int})


def _within_plain(input: torch.Tensor, size, stride, storage_offset) -> bool:
    """True when ``size``, ``stride`` and ``storage_offset`` are plain ints (the form most
    calls take: Longformer and LED call it ten times per forward) and the view passes every
    check of :func:`as_strided`; False sends the call to the full check, which raises the
    error. The bounds are the same: sizes and strides >= 0, as many of each, and a
    non-empty view's reach within the input's own elements."""
    if type(size) not in _PLAIN or type(stride) not in _PLAIN or len(size) != len(stride):
        return False
    if not size:
        return False  # a 0-dim view: rare, the full check decides
    # A bool, a 0-dim tensor or anything else than an int: the full check decides.
    if not {*map(type, size), *map(type, stride)} <= _INT_ONLY:
        return False
    if min(size) < 0 or min(stride) < 0:
        return False
    first = input.storage_offset()
    if storage_offset is None:
        offset = first
    elif type(storage_offset) is int:
        offset = storage_offset
    else:
        return False
    if 0 in size:
        return True  # an empty view reads nothing
    numel = input.numel()
    if offset < first or numel == 0 or not _view_fits(input, math.prod(size)):
        return False
    # sum((n - 1) * s) over the dims, for the view and the input (no size is 0 in either).
    reach = offset + sum(map(operator.mul, size, stride)) - sum(stride)
    if input.is_contiguous():
        return reach <= first + numel - 1
    shape, strides = input.shape, input.stride()
    return reach <= first + sum(map(operator.mul, shape, strides)) - sum(strides)


def as_strided(input, size, stride, storage_offset=None):
    """``torch.as_strided``, refused unless the view lies within ``input``'s own elements."""
    if isinstance(input, torch.Tensor):
        if _within_plain(input, size, stride, storage_offset):
            return torch.as_strided(input, size, stride, storage_offset)
        # Longformer's sizes hold 0-dim integer tensors: read as ints, the same bounds.
        sizes, strides = _read_ints(size), _read_ints(stride)
        offset = [storage_offset]
        if isinstance(storage_offset, torch.Tensor):
            offset = _read_ints((storage_offset,))  # None, not the input's own, if not an int
        if (
            sizes is not None
            and strides is not None
            and offset is not None
            and _within_plain(input, sizes, strides, offset[0])
        ):
            return torch.as_strided(input, sizes, strides, offset[0])
    return _as_strided_checked(input, size, stride, storage_offset)


def _read_ints(value) -> list[int] | None:
    """``value``'s items as ints when each is an int or a 0-dim integer tensor, else None
    (the full check then gives the error)."""
    if type(value) not in _PLAIN:
        return None
    ints = []
    for v in value:
        if type(v) is int:
            ints.append(v)
        elif type(v) is torch.Tensor and v.dtype in _INDEX_DTYPES and v.dim() == 0:
            ints.append(int(v))
        else:
            return None
    return ints


def _as_strided_checked(input, size, stride, storage_offset=None):
    """The full check of :func:`as_strided`, for every form of its arguments; raises the
    error that names the bound a view breaks."""
    if not isinstance(input, torch.Tensor):
        raise ValueError(f"as_strided: input must be a tensor, not {type(input).__name__}")
    sizes, strides = _ints(size, "sizes"), _ints(stride, "strides")
    if len(sizes) != len(strides):
        raise ValueError(
            f"as_strided: {len(sizes)} sizes but {len(strides)} strides; they must match"
        )
    if any(n < 0 for n in sizes) or any(s < 0 for s in strides):
        raise ValueError(f"as_strided: sizes {sizes} and strides {strides} must be >= 0")
    first, last = _span(input)
    offset = first if storage_offset is None else _ints(storage_offset, "the offset")[0]
    if 0 not in sizes:
        reach = offset + sum((n - 1) * s for n, s in zip(sizes, strides))
        if offset < first or reach > last:
            raise ValueError(
                f"as_strided: sizes {sizes}, strides {strides} and offset {offset} reach "
                f"storage elements {offset}..{reach}, outside the input's own elements "
                f"{first}..{last}; " + _outside_why(input, offset, reach)
            )
        numel = math.prod(sizes)
        if not _view_fits(input, numel):
            raise ValueError(
                f"as_strided: sizes {sizes[:8]} make a view of {numel} elements "
                f"({numel * input.element_size()} bytes at its width) from an input of "
                f"{input.numel()}, more than the limit of {ALLOC_BYTES} bytes that a later "
                "op may read (shared_ir/SPEC.md, section Limits)"
            )
    return torch.as_strided(input, sizes, strides, offset)


def _outside_why(input: torch.Tensor, offset: int, reach: int) -> str:
    """Why a view outside its input is refused, and what to do. Where the input is a view
    into a larger storage (a slice of a batch) and the elements asked for lie in that
    storage, eager reads them: a literal offset written for a tensor of its own (offset 0)
    reads its base's elements there, which a trace never does."""
    try:
        held = input.untyped_storage().nbytes() // input.element_size()
    except Exception:  # a tensor without a storage (a fake or sparse one): no such case
        held = 0
    if offset >= 0 and reach < held:
        return (
            f"the input is a view at storage offset {input.storage_offset()} into a "
            f"storage of {held} elements, which eager's as_strided reads outside the view "
            "and a trace never does: pass the input as a tensor of its own (`.clone()`; "
            "`.contiguous()` keeps a contiguous view as it is), or compute the offset "
            "from it (`.storage_offset() + k`)"
        )
    return "a view may only rearrange its input's elements"


def _repeat_numel(input, repeats, dim) -> int:
    """The elements ``repeat_interleave`` would make, computed without allocating."""
    if isinstance(repeats, torch.Tensor):
        if repeats.dtype not in _INDEX_DTYPES or repeats.dim() > 1:  # no bool: PyTorch has none
            raise ValueError("repeat_interleave: repeats must be an integer tensor of rank 0 or 1")
        if repeats.numel() and int(repeats.min()) < 0:
            raise ValueError("repeat_interleave: repeats must be non-negative")
        # Each count within the bound first: then their int64 sum cannot wrap (a tensor
        # has far fewer than 2**33 elements), where [2**62] * 4 sums to 0.
        if repeats.numel() and int(repeats.max()) > ALLOC_BYTES:
            raise ValueError(
                f"repeat_interleave: a repeat count of {int(repeats.max())} is more than "
                f"the limit of {ALLOC_BYTES} (shared_ir/SPEC.md, section Limits)"
            )
        counts = repeats.reshape(-1)
        per = int(counts.sum()) if counts.numel() != 1 else None
        single = int(counts[0]) if counts.numel() == 1 else None
    else:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be an integer >= 0, not {repeats!r}")
        per, single = None, repeats
    if dim is None:
        length = input.numel()
        rest = 1
    else:
        length = input.shape[_dim_of(input, dim)] if input.dim() else 1
        rest = input.numel() // length if length else 0
    total = single * length if single is not None else per
    return total * rest, total


def _dim_of(input: torch.Tensor, dim) -> int:
    """``dim`` as an index into ``input.shape``, or the error that names it (a file's dim
    past the rank reached ``input.shape[dim]``: ``IndexError: tuple index out of range``)."""
    if isinstance(dim, bool) or not isinstance(dim, (int, torch.Tensor)):
        raise ValueError(f"repeat_interleave: dim must be an integer, not {dim!r}")
    if isinstance(dim, torch.Tensor):
        if not _is_index(dim):
            raise ValueError("repeat_interleave: dim must be an integer, not a tensor of that kind")
        dim = int(dim)
    rank = input.dim()
    if not -rank <= dim < rank:
        raise ValueError(
            f"repeat_interleave: dim {dim} is out of range for an input of rank {rank} "
            f"(dims {-rank}..{rank - 1})"
        )
    return dim


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """``torch.repeat_interleave`` (both forms), its output size bounded before it runs."""
    if isinstance(repeats, torch.SymInt):
        # A count computed from symbolic sizes: only under torch.compile / torch.export
        # (the GraphModule of export/fx.py), which trace shapes, not data; the bound
        # below is for a call on real tensors, and ``int(repeats)`` would fix the sizes.
        # Written as expand + flatten: torch.onnx's translation of a symbolic count
        # repeats each element once (a [2, 2, 3] result for [2, 4, 3]).
        torch._check(repeats >= 0, lambda: "repeat_interleave: repeats must be >= 0")
        if dim is None:
            input, dim = input.reshape(-1), 0
        dim = dim % input.dim()
        shape = list(input.shape)
        expanded = input.unsqueeze(dim + 1).expand(*shape[: dim + 1], repeats, *shape[dim + 1 :])
        return expanded.flatten(dim, dim + 1)
    if repeats is None:  # repeat_interleave(repeats): indices 0..n-1, each repeated
        if not isinstance(input, torch.Tensor):
            raise ValueError("repeat_interleave: the one-argument form takes a tensor")
        numel, total = _repeat_numel(torch.empty(input.numel(), device="meta"), input, None)
    else:
        numel, total = _repeat_numel(input, repeats, dim)
    # The result has the input's dtype (the one-argument form: the repeats' own).
    width = input.element_size() if isinstance(input, torch.Tensor) else 8
    if numel * width > ALLOC_BYTES:
        raise ValueError(
            f"repeat_interleave would make {numel} elements ({numel * width} bytes), more "
            f"than the limit of {ALLOC_BYTES} bytes (shared_ir/SPEC.md, section Limits)"
        )
    if output_size is not None and output_size != total:
        raise ValueError(
            f"repeat_interleave: output_size {output_size} is not the sum of the repeats ({total})"
        )
    if repeats is None:
        return torch.repeat_interleave(input, output_size=output_size)
    return torch.repeat_interleave(input, repeats, dim, output_size=output_size)


CHECKED = {"as_strided": as_strided, "repeat_interleave": repeat_interleave}
