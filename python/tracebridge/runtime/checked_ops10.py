"""Checked implementations of op-set 10: the everyday ops whose result is sized by a
product of sizes, or by strides, that an argument of a file decides (torch 2.13, CPU):

* ``vander(x, N)`` makes ``len(x) * N`` elements, ``N`` an argument (as ``linalg.vander``);
* ``pdist(x)`` of an ``[n, m]`` input makes ``n * (n - 1) / 2`` distances (an ``[n, 1]``
  expanded view of nothing asks for ``n**2 / 2``);
* ``pad_sequence`` makes ``count * longest * rest`` elements from sequences that may be
  expanded views of nothing;
* ``empty_strided(size, stride)`` allocates the storage its strides reach
  (``1 + sum((size - 1) * stride)`` elements: ``empty_strided([2], [2**40])`` asks for a
  terabyte for two elements), and runs zero-filled like ``empty``: the whole storage is
  zeroed, so a later view (``as_strided``) of the gaps between strided elements reads
  zeros, never memory the process freed before.

PyTorch's own checks cover the rest (the shapes, ``N >= 0``, ``p >= 0``, negative sizes
and strides); each function bounds the bytes first (``checked_ops._bytes_ok``), so a limit
hit is tracebridge's error naming the node, never the allocator's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .checked_ops import _bytes_ok, _is_tensor, _need


def vander(x, N=None, increasing=False):
    """``torch.vander`` after bounding its ``len(x) * N`` elements.

    >>> vander(torch.tensor([2, 3]), 3).tolist()
    [[4, 2, 1], [9, 3, 1]]
    """
    _need(_is_tensor(x), "vander: x must be a tensor")
    _need(
        N is None or (type(N) is int and N >= 0),
        lambda: f"vander: N must be None or an int of at least 0, not {N!r}",
    )
    columns = x.numel() if N is None else N
    exact = x.dtype.is_floating_point or x.dtype.is_complex
    _bytes_ok("vander", x.numel() * columns, x.dtype if exact else torch.int64)  # ints widen
    return torch._C._VariableFunctions.vander(x, N, increasing)


def pdist(input, p=2.0):
    """``torch.pdist`` after bounding its ``n * (n - 1) / 2`` distances."""
    _need(_is_tensor(input), "pdist: input must be a tensor")
    _need(input.dim() == 2, lambda: f"pdist: input must be 2-d, not {input.dim()}-d")
    rows = input.size(0)
    _bytes_ok("pdist", rows * max(rows - 1, 0) // 2, input.dtype)
    return torch._C._VariableFunctions.pdist(input, p)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """``nn.utils.rnn.pad_sequence``'s kernel after bounding its padded result."""
    _need(
        isinstance(sequences, (list, tuple)) and all(map(_is_tensor, sequences)),
        "pad_sequence: sequences must be a list of tensors",
    )
    _need(len(sequences) > 0, "pad_sequence: sequences must not be empty")
    _need(
        all(s.dim() >= 1 for s in sequences),
        "pad_sequence: each sequence must have at least one dimension (its steps)",
    )
    longest = max(s.size(0) for s in sequences)
    rest = sequences[0].shape[1:].numel()
    _bytes_ok("pad_sequence", len(sequences) * longest * rest, sequences[0].dtype)
    return torch._C._nn.pad_sequence(sequences, batch_first, padding_value, padding_side)


def empty_strided(size, stride, **kwargs):
    """``torch.empty_strided`` with its storage bounded and zero-filled (as ``empty`` is).

    >>> empty_strided((2, 3), (1, 2)).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    sizes, strides = _ints("size", size), _ints("stride", stride)
    _need(
        len(sizes) == len(strides),
        lambda: f"empty_strided: {len(sizes)} sizes but {len(strides)} strides",
    )
    _need(
        all(s >= 0 for s in sizes) and all(s >= 0 for s in strides),
        lambda: f"empty_strided: sizes {sizes} and strides {strides} must be >= 0",
    )
    numel = 1
    for s in sizes:
        numel *= s
    storage = 0 if numel == 0 else 1 + sum((s - 1) * t for s, t in zip(sizes, strides))
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    # The storage it allocates, and the elements it presents (a stride of 0 presents more
    # than it holds, as an expand does: a later op may materialise them).
    _bytes_ok("empty_strided", storage, dtype)
    _bytes_ok("empty_strided", numel, dtype)
    out = torch._C._VariableFunctions.empty_strided(sizes, strides, **kwargs)
    with torch.no_grad():
        out.as_strided((storage,), (1,), out.storage_offset()).zero_()
    return out


def _ints(name: str, value) -> list[int]:
    _need(
        isinstance(value, (list, tuple, torch.Size)),
        lambda: f"empty_strided: {name} must be a list of ints",
    )
    found = []
    for v in value:
        if _is_tensor(v) and v.numel() == 1 and not v.is_floating_point():
            v = int(v)
        _need(
            isinstance(v, int) and not isinstance(v, bool),
            f"empty_strided: {name} must hold ints, not {type(v).__name__}",
        )
        found.append(v)
    return found


CHECKED: dict[str, Callable] = {
    "vander": vander,
    "pdist": pdist,
    "pad_sequence": pad_sequence,
    "empty_strided": empty_strided,
}
