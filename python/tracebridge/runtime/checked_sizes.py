"""Results that an integer argument enlarges, bounded in bytes before the kernel runs.

Note: why a result's shape, at the call. ``ir/ops.py`` declares every integer argument of
every op (``INT_CLASSES``). One of class ``scale`` enlarges the result beyond what the
operands hold, together with their shapes: ``conv1d(x, w, padding=[2**28])`` of a
three-element ``x`` made 2 GiB, ``fft2(x, s=[2**14, 2**14])`` 2 GiB, ``fftn`` with three
such sizes asked for 35 TiB, ``diag(x, 2**15)`` 4 GiB (prober21c F1-F4). The loader bounds
each literal by ``literal_numel`` and counts results whose operands the file decides
(``check/budget.py``); where an operand is the caller's, only the call knows the result's
shape. So a node of such an op (:data:`SCALED_OPS`) runs through :func:`bounded`: the op
first runs on meta tensors of its operands' shapes and dtypes (PyTorch's own shape
function: no data, no allocation), and a result of more than ``ALLOC_BYTES`` bytes (a view
counts the elements it shows: ``Tensor.unfold``'s overlapping windows) is refused with
``CheckFailed`` (the runtime's ``OpError``, naming the node) before the kernel runs. A
node remembers the last :data:`KEEP` keys that passed (the shapes and dtypes of its
tensors and its other arguments), so a model that calls a padded convolution on one input
size pays a dictionary lookup, not the shape function, on every call after the first.

The ops whose checked implementation already bounds its result from its operands
(:data:`OWN_BOUND`: ``diag_embed``, ``one_hot``, ``stft``, ``repeat_interleave``, ...) keep
that check alone. A meta run that raises (arguments the op refuses) does not pass the
key: the kernel then runs and refuses the arguments itself, as in eager PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ir import ops as opset
from .checked_ops import ALLOC_BYTES, CheckFailed

# Ops whose checked implementation bounds their result's bytes from their operands itself
# (runtime/checked_ops.py, checked_numeric.py, checked_ops10.py, checked_views.py), or whose
# size arguments the runtime bounds with the input's elements (``sized_guard``: repeat).
OWN_BOUND = frozenset(
    """diag_embed diagflat one_hot bincount stft istft _pad_packed_sequence combinations
    vander linalg.vander repeat_interleave Tensor.repeat tile""".split()
)
# The ops that have an argument of class ``scale`` (ir/ops.py) and no bound of their own.
SCALED_OPS = (
    frozenset(name for name, info in opset.OPS.items() if "scale" in info.ints.values()) - OWN_BOUND
)
KEEP = 8  # keys remembered per node: a server sees a few input sizes, not thousands
_META = torch.device("meta")
_PLAIN = (int, float, bool, str, type(None), torch.dtype)


def _key(args: tuple):
    """The key of a call's positional arguments: :func:`_key_of` of each, with the common
    cases first (a tensor, an int, a list of ints: a convolution's arguments)."""
    out = []
    for a in args:
        kind = type(a)
        if kind is _Tensor:
            out.append(a.shape)
            out.append(a.dtype)
        elif kind is int or a is None or (kind is tuple and all(type(x) is int for x in a)):
            out.append(a)
        elif kind is list and all(type(x) is int for x in a):
            out.append(tuple(a))
        else:
            out.append(_key_of(a))
    return tuple(out)


_Tensor = torch.Tensor


def _key_of(value):
    """A hashable stand-in for an argument: a tensor's shape and dtype, a number itself."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(map(_key_of, value))
    raise TypeError  # a layout, a device, a memory format: no key, checked every call


def _on_meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty(value.shape, dtype=value.dtype, device=_META)
    if isinstance(value, (list, tuple)):
        return type(value)(map(_on_meta, value))
    return value


def _largest(result) -> tuple[int, tuple]:
    """The most bytes one tensor of ``result`` (a tensor, or a tuple of them) holds, and its
    shape."""
    if isinstance(result, torch.Tensor):
        return result.numel() * result.dtype.itemsize, tuple(result.shape)
    best: tuple[int, tuple] = (0, ())
    if isinstance(result, (list, tuple)):
        for item in result:
            best = max(best, _largest(item))
    return best


def result_bytes(op: str, args: tuple, kwargs: dict) -> tuple[int, tuple] | None:
    """The bytes of the largest tensor ``op`` makes from ``args``/``kwargs`` and its shape,
    from the op's shape function on meta tensors; None where the op refuses the arguments
    there (its kernel refuses them too)."""
    kernel = opset.impl_of(op)
    try:
        # no autograd, and no torch function mode of the caller's: it sees the call itself
        with torch.no_grad(), torch._C.DisableTorchFunction():
            return _largest(kernel(*_on_meta(args), **_on_meta(kwargs)))
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError):
        return None


_CONVOLUTIONS = frozenset({"conv1d", "conv2d", "conv3d"})


def needs_bound(node) -> bool:
    """Whether a node runs through :func:`bounded`: one of :data:`SCALED_OPS`, but not a
    convolution whose padding is written as at most 1 (or as "same"/"valid"), the padding
    of most 3x3 convolutions: it adds at most two elements to a dimension, as the kernel
    does on operands the caller and the file's weights give, and the hot path of a
    convolutional network keeps no check."""
    if node.op not in SCALED_OPS:
        return False
    if node.op in _CONVOLUTIONS:
        padding = node.args[4] if len(node.args) > 4 else node.kwargs.get("padding", 0)
        if isinstance(padding, str):
            return False
        pads = padding if isinstance(padding, (list, tuple)) else [padding]
        if all(type(p) is int and 0 <= p <= 1 for p in pads):
            return False
    return True


def bounded(op: str, fn: Callable) -> Callable:
    """``fn`` (the callable of one node of ``op``) preceded by the bound of its result's
    bytes (module Note), remembered for the last :data:`KEEP` keys that passed."""
    passed: dict = {}

    def run(*args, **kwargs):
        try:
            key = _key(args) if not kwargs else (_key(args), _key_of(tuple(kwargs.items())))
        except TypeError:
            key = None
        if key is None or key not in passed:
            found = result_bytes(op, args, kwargs)
            if found is not None:
                size, shape = found
                if size > ALLOC_BYTES:
                    raise CheckFailed(
                        f"{op} would make a result of shape {list(shape)[:8]} ({size} bytes), "
                        f"more than the limit of {ALLOC_BYTES} for one allocation "
                        "(shared_ir/SPEC.md, section Limits): an integer argument (a padding, "
                        "an FFT length, an offset, an output size) enlarges it past what its "
                        "operands hold"
                    )
                if key is not None:
                    if len(passed) >= KEEP:
                        del passed[next(iter(passed))]
                    passed[key] = None
        return fn(*args, **kwargs)

    run.bounds = fn  # the callable it passes each call on to, unchanged
    run.__name__ = f"bounded_{op.replace('.', '_')}"
    run.__doc__ = f"``{op}``, its result bounded in bytes before the kernel runs."
    return run
