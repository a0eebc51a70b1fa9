"""Checked implementations of the ops whose result sizes the data chooses (op-set 7).

Note: why they are bounded. ``nonzero`` (and ``masked_select``, which runs it on the
broadcast mask) makes one int64 row of ``rank`` indices per true
element, and the ``unique`` family makes int64 inverse indices (one per element) and
counts: for a one-byte input that is eight times (``nonzero`` of a 4-d bool mask, 32 times)
the input's bytes. A file can present many elements cheaply (an expanded view of one
element, bounded at load only by ``literal_numel``), so the bytes these results may take
are counted before the kernel runs, against ``alloc_bytes`` as every size taken from a value
is (shared_ir/SPEC.md, section Limits); a limit hit is tracebridge's error, never the
allocator's. The worst case (every element kept) is counted first, at the cost of one
multiplication; only where it passes the limit is the real count taken (``count_nonzero``),
so a large mask with few true elements still runs. The flags are checked as PyTorch's
Python wrappers would pass them (bools), and a dimension as an int.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .checked_ops import ALLOC_BYTES, CheckFailed, _bytes_ok, _is_tensor, _need

__all__ = ["CHECKED", "CheckFailed"]


def _tensor(op: str, input) -> None:
    _need(_is_tensor(input), lambda: f"{op}: input must be a tensor, not {type(input).__name__}")


def _flags(op: str, **flags) -> None:
    for name, value in flags.items():
        _need(
            type(value) is bool,
            lambda name=name, value=value: f"{op}: {name} must be True or False, not {value!r}",
        )


def _dim(op: str, input, dim) -> None:
    rank = max(input.dim(), 1)
    _need(
        type(dim) is int and -rank <= dim < rank,
        lambda: f"{op}: dim must be an int in [{-rank}, {rank}) for a {input.dim()}-d input",
    )


def nonzero(input):
    """``torch.nonzero`` after bounding its ``[k, rank]`` int64 result: ``k`` is at most
    the input's elements, and is counted only where that worst case passes the limit.

    >>> nonzero(torch.tensor([[True, False], [False, True]])).tolist()
    [[0, 0], [1, 1]]
    """
    _tensor("nonzero", input)
    rank = input.dim()
    if input.numel() * rank * 8 > ALLOC_BYTES:
        kept = int(torch.count_nonzero(input))
        _bytes_ok("nonzero", kept * rank, torch.int64)
    return torch.nonzero(input)


def argwhere(input):
    """``torch.argwhere`` (``nonzero``'s result), bounded as :func:`nonzero` is."""
    _tensor("argwhere", input)
    if input.numel() * input.dim() * 8 > ALLOC_BYTES:
        _bytes_ok("argwhere", int(torch.count_nonzero(input)) * input.dim(), torch.int64)
    return torch.argwhere(input)


def _indices_ok(op: str, count: int, wanted: bool) -> None:
    """Inverse indices and counts: at most ``count`` int64 values each, when asked for."""
    if wanted:
        _bytes_ok(op, count, torch.int64)


def unique2(input, sorted=True, return_inverse=False, return_counts=False):
    """``torch._unique2`` (what ``torch.unique`` runs) after checking its flags and the
    bytes of the inverse indices and counts (one int64 per element at most)."""
    _tensor("_unique2", input)
    _flags("_unique2", sorted=sorted, return_inverse=return_inverse, return_counts=return_counts)
    _bytes_ok("_unique2", input.numel(), input.dtype)
    _indices_ok("_unique2", input.numel(), return_inverse or return_counts)
    return torch._unique2(input, sorted, return_inverse, return_counts)


def unique_dim(input, dim, sorted=True, return_inverse=False, return_counts=False):
    """``torch.unique_dim`` (``torch.unique(x, dim=d)``) after checking ``dim`` and the
    flags, and bounding its copy of the input and its ``size(dim)`` indices and counts."""
    _tensor("unique_dim", input)
    _dim("unique_dim", input, dim)
    _flags("unique_dim", sorted=sorted, return_inverse=return_inverse, return_counts=return_counts)
    _bytes_ok("unique_dim", input.numel(), input.dtype)
    _indices_ok("unique_dim", input.size(dim) if input.dim() else 1, True)
    return torch._C._VariableFunctions.unique_dim(
        input, dim, sorted=sorted, return_inverse=return_inverse, return_counts=return_counts
    )


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """``torch.unique_consecutive`` after checking the flags and ``dim`` and bounding its
    results (at most the input's elements; int64 inverse indices and counts)."""
    op = "unique_consecutive"
    _tensor(op, input)
    _flags(op, return_inverse=return_inverse, return_counts=return_counts)
    if dim is not None:
        _dim(op, input, dim)
    _bytes_ok(op, input.numel(), input.dtype)
    _indices_ok(op, input.numel(), return_inverse or return_counts)
    return torch._C._VariableFunctions.unique_consecutive(
        input, return_inverse=return_inverse, return_counts=return_counts, dim=dim
    )


def masked_select(input, mask):
    """``torch.masked_select`` after bounding what it makes: the mask broadcast against
    the input chooses up to that many elements, and PyTorch's kernel finds them as
    ``nonzero`` does (one int64 per chosen element). Two cheap expanded operands of
    ``[2**16, 1]`` and ``[1, 2**16]`` asked for 32 GiB; the real count is taken only
    where the worst case passes the limit.

    >>> masked_select(torch.tensor([1.0, 2.0]), torch.tensor([True, False])).tolist()
    [1.0]
    """
    op = "masked_select"
    _tensor(op, input)
    _tensor(op, mask)
    _need(mask.dtype == torch.bool, lambda: f"{op}: mask must be bool, not {mask.dtype}")
    try:
        shape = torch.broadcast_shapes(input.shape, mask.shape)
    except RuntimeError as exc:
        raise CheckFailed(f"{op}: input {list(input.shape)} and mask {list(mask.shape)} "
                          f"do not broadcast ({exc})") from None  # fmt: skip
    numel = shape.numel()
    width = 8 + input.element_size()  # an int64 index and the element chosen
    if numel * width > ALLOC_BYTES:
        kept = int(torch.count_nonzero(mask)) * (numel // max(mask.numel(), 1))
        _need(
            kept * width <= ALLOC_BYTES,
            lambda: (
                f"{op} would allocate {kept * width} bytes ({kept} chosen elements and their "
                f"int64 indices), more than the limit of {ALLOC_BYTES} for a size taken from "
                "a value or a product of sizes (shared_ir/SPEC.md, section Limits)"
            ),
        )
    return torch.masked_select(input, mask)


CHECKED: dict[str, Callable] = {
    "masked_select": masked_select,
    "nonzero": nonzero,
    "argwhere": argwhere,
    "_unique2": unique2,
    "unique_dim": unique_dim,
    "unique_consecutive": unique_consecutive,
}
