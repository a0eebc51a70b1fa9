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

Note: what runs without the bound (:func:`needs_bound`, :func:`kernel_covering`). A
result that a literal argument can make at most a constant times what the operands give
is what the kernel makes of the caller's input and the file's own weights (both bounded
already), as for any op without such an argument; only an argument that the file can make
arbitrarily large needs the bound. So:

* a convolution whose padding is at most 1 adds at most two elements to each dimension;
* a convolution whose padding ``p`` is covered by its weight's kernel ``k`` (``dilation *
  (k - 1) >= 2 * p`` along each dimension: ResNet's 7x7 stem with padding 3, ConvNeXt's
  7x7 depthwise convolutions, MobileNet's 5x5 ones with padding 2) makes an output no
  larger along any dimension than its input, whatever the stride: ``(L + 2p - dilation *
  (k - 1) - 1) // stride + 1 <= L``. A crafted padding of ``2**28`` would need a kernel
  (or a dilation, itself a literal the output formula takes back) that large, and the
  output is still at most the input's extent. The kernel is the weight's, read on every
  call (about 0.3 us, against 2-3 us for the bound's key), since the weight may be the
  caller's or state replaced after load: a smaller kernel, or a weight of a tensor
  subclass, goes through the bound as before;
* an adaptive pool whose output size is literal ints of at most :data:`POOL_CELLS`
  elements per row (a global pool: one): PyTorch refuses an input with an empty
  non-batch dimension, so the result is at most that many times the input.

Any other literal padding, output size or length (and any computed one) is bounded at
the call as above.

The ops whose checked implementation already bounds its result from its operands
(:data:`OWN_BOUND`: ``diag_embed``, ``one_hot``, ``stft``, ``repeat_interleave``, ...) keep
that check alone. A meta run that raises (arguments the op refuses) does not pass the
key: the kernel then runs and refuses the arguments itself, as in eager PyTorch.
"""

from __future__ import annotations

import math
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
            if a.ndim == 0 and _is_int_scalar(a):  # a size given as a tensor: its value
                out.append((_size_of(a),))
                continue
            out.append(a.shape)
            out.append(a.dtype)
        elif kind in _SCALARS or (kind is tuple and _INTS.issuperset(map(type, a))):
            out.append(a)
        elif kind is list and _INTS.issuperset(map(type, a)):  # no generator's frame
            out.append(tuple(a))
        else:
            out.append(_key_of(a))
    return tuple(out)


_Tensor = torch.Tensor
_INTS = frozenset({int})
_SCALARS = frozenset({int, float, bool, str, type(None), torch.dtype})  # _key_of: themselves


def _key_of(value):
    """A hashable stand-in for an argument: a tensor's shape and dtype, a number itself; in
    a list, a one-element integer tensor is a size given as a tensor (its value)."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_size_of(v) if _is_int_scalar(v) else _key_of(v) for v in value)
    raise TypeError  # a layout, a device, a memory format: no key, checked every call


_PLAIN_TYPES = frozenset(_PLAIN)


def _kwargs_key(kwargs: dict) -> tuple:
    """The key of a call's keyword arguments: ``_key_of(tuple(kwargs.items()))``, the
    pairs themselves where every value is of a plain type (an FFT's ``n=`` and ``dim=``,
    a padding's ``mode=``), the same tuple without its dozen Python frames (Autoformer's
    auto-correlation: three FFTs a layer)."""
    items = tuple(kwargs.items())
    for _, value in items:
        if type(value) not in _PLAIN_TYPES:
            return _key_of(items)
    return items


def _is_int_scalar(value) -> bool:
    """Whether ``value`` is a 0-d integer tensor: a size a module keeps as a buffer
    (``padding_total = torch.tensor(6)`` in EnCodec), which an op's list of ints reads
    through ``__index__`` as eager PyTorch does."""
    return (
        isinstance(value, torch.Tensor)
        and value.ndim == 0
        and not value.dtype.is_floating_point
        and not value.dtype.is_complex
        and value.dtype is not torch.bool
    )


def _size_of(value) -> int:
    """The int a 0-d integer tensor gives as a size (``TypeError`` where it has no value
    to read: a meta or fake tensor under ``torch.export``)."""
    try:
        return value.__index__()
    except (RuntimeError, NotImplementedError) as exc:
        raise TypeError from exc


def _sizes_as_ints(args: tuple) -> tuple:
    """``args`` with the 0-d integer tensors inside its lists as the ints the kernel reads
    from them, so the bounds (and the meta run, where a meta tensor has no value) see
    the sizes themselves."""
    return tuple(
        type(a)(_size_of(v) if _is_int_scalar(v) else v for v in a)
        if isinstance(a, (list, tuple)) and any(_is_int_scalar(v) for v in a)
        else _size_of(a)
        if i and _is_int_scalar(a)  # a size itself given as a tensor (an FFT's ``n``)
        else a
        for i, a in enumerate(args)
    )


def _kwargs_as_ints(kwargs: dict) -> dict:
    """``kwargs`` with its 0-d integer tensors, and those inside its lists, as ints."""
    return dict(zip(kwargs, _sizes_as_ints((None, *kwargs.values()))[1:], strict=True))


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
_ADAPTIVE_POOLS = frozenset(op for op in SCALED_OPS if op.startswith("adaptive_"))
# The most elements per (batch, channel) a literal adaptive pool size may ask for and run
# without the bound: 64 covers torchvision's 7x7 and 6x6 heads and every global pool.
POOL_CELLS = 64
_PLAIN_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})


def _conv_literals(node) -> tuple[list[int], list[int]] | None:
    """A plain convolution node's padding and dilation, per spatial dimension, where both
    are literal ints (a padding of "same"/"valid" is none of them: None)."""
    d = _dims_of(node.op)
    padding = node.args[4] if len(node.args) > 4 else node.kwargs.get("padding", 0)
    dilation = node.args[5] if len(node.args) > 5 else node.kwargs.get("dilation", 1)
    if isinstance(padding, str):
        return None
    pads, dilations = _per_dim(padding, d), _per_dim(dilation, d)
    if pads is None or dilations is None:
        return None
    return pads, dilations


def needs_bound(node) -> bool:
    """Whether a node runs through :func:`bounded`: one of :data:`SCALED_OPS`, but not

    * a convolution whose padding is written as at most 1 (or as "same"/"valid"), the
      padding of most 3x3 convolutions: it adds at most two elements to a dimension, as
      the kernel does on operands the caller and the file's weights give, and the hot
      path of a convolutional network keeps no check;
    * an adaptive pool whose output size is written as ints (or None: the input's own
      size) of at most :data:`POOL_CELLS` elements together: PyTorch refuses an input
      with an empty non-batch dimension, so each (batch, channel) row of the result holds
      at most that many times the input's row (a global pool: one element).

    A convolution with a larger literal padding still runs through :func:`bounded`, whose
    first test passes it on at once where the weight's kernel covers the padding
    (:func:`kernel_covering`)."""
    if node.op not in SCALED_OPS:
        return False
    if node.op in _CONVOLUTIONS:
        padding = node.args[4] if len(node.args) > 4 else node.kwargs.get("padding", 0)
        if isinstance(padding, str):
            return False
        pads = padding if isinstance(padding, (list, tuple)) else [padding]
        if all(type(p) is int and 0 <= p <= 1 for p in pads):
            return False
    if node.op in _ADAPTIVE_POOLS:
        size = node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size")
        sizes = size if isinstance(size, (list, tuple)) else [size]
        literal = sizes and all(s is None or (type(s) is int and s >= 0) for s in sizes)
        if literal and _prod(s for s in sizes if s is not None) <= POOL_CELLS:
            return False
    return True


def kernel_covering(node) -> tuple[int, ...] | None:
    """The least kernel size, per spatial dimension, that covers a plain convolution
    node's literal padding: ``dilation * (k - 1) >= 2 * padding``, where the output is
    ``(L + 2 * padding - dilation * (k - 1) - 1) // stride + 1 <= L`` along that
    dimension, whatever the stride: no larger than the input's own extent, as without
    padding (ResNet's 7x7 stem with padding 3, ConvNeXt's 7x7 depthwise convolutions).
    None for any other node (a padding or dilation that is no literal int)."""
    if node.op not in _CONVOLUTIONS:
        return None
    literals = _conv_literals(node)
    if literals is None:
        return None
    pads, dilations = literals
    if any(p < 0 for p in pads) or any(dl < 1 for dl in dilations):
        return None
    return tuple(-(-2 * p // dl) + 1 for p, dl in zip(pads, dilations))


# --- upper bounds without the shape function -------------------------------------------------
# Note: why not always meta. The first meta call of a process imports PyTorch's Python meta
# registrations (about 500 modules, 1.5 s; ``upsample_bilinear2d``, ``diag`` or ``im2col``
# on meta also import Dynamo: 4 s), a first call a model must not pay for its
# ``AdaptiveAvgPool2d`` or its padded convolutions. So the common families have an upper
# bound of their result's elements here, from their arguments' sizes (a convolution's
# output along a dimension is at most its input plus twice its padding; a transposed one's
# at most ``(L - 1) * stride + dilation * (k - 1) + output_padding + 1``): a call whose
# bound, at 16 bytes an element (the widest), is within ``ALLOC_BYTES`` passes without the
# shape function; one past it (or an argument the bound cannot read) asks the shape
# function for the exact size.


def _arg(args: tuple, kwargs: dict, position: int, name: str, default=None):
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def _per_dim(value, d: int) -> list[int] | None:
    """``value`` (an int, or a list of one or ``d`` ints) as ``d`` ints; None otherwise."""
    if type(value) is int:
        return [value] * d
    if isinstance(value, (list, tuple)) and all(type(v) is int for v in value):
        if len(value) == d:
            return list(value)
        if len(value) == 1:
            return list(value) * d
    return None


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= max(int(v), 0)
    return out


def _shape(x) -> list[int] | None:
    if not isinstance(x, torch.Tensor):
        return None
    shape = list(x.shape)
    return shape if all(type(s) is int for s in shape) else None


# (position, keyword) of each argument of the convolutions, by op
_CONV_ORDER = {
    "plain": {"stride": 3, "padding": 4, "dilation": 5, "groups": 6},
    "transposed": {"stride": 3, "padding": 4, "output_padding": 5, "groups": 6, "dilation": 7},
    "convolution": {
        "stride": 3,
        "padding": 4,
        "dilation": 5,
        "transposed": 6,
        "output_padding": 7,
        "groups": 8,
    },
}
_CONV_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1, "output_padding": 0, "groups": 1}


def _conv_bound(kind: str) -> Callable:
    order = _CONV_ORDER[kind]

    def bound(args: tuple, kwargs: dict) -> int | None:
        x = _shape(_arg(args, kwargs, 0, "input"))
        w = _shape(_arg(args, kwargs, 1, "weight"))
        if x is None or w is None or len(w) < 3:
            return None
        d = len(w) - 2
        given = {n: _arg(args, kwargs, p, n, _CONV_DEFAULTS.get(n)) for n, p in order.items()}
        transposed = kind == "transposed" or (kind == "convolution" and given["transposed"])
        groups = given["groups"]
        if type(groups) is not int or len(x) < d + 1:
            return None
        spatial = x[-d:]
        batch = x[0] if len(x) == d + 2 else 1
        if not transposed:
            padding = given["padding"]
            pads = [0] * d if isinstance(padding, str) else _per_dim(padding, d)
            if pads is None:
                return None
            out = [size + 2 * max(p, 0) for size, p in zip(spatial, pads)]
            return batch * w[0] * _prod(out)
        stride, dilation, extra = (
            _per_dim(given[n], d) for n in ("stride", "dilation", "output_padding")
        )
        if stride is None or dilation is None or extra is None:
            return None
        out = [
            (size - 1) * s + dl * (k - 1) + e + 1
            for size, s, dl, k, e in zip(spatial, stride, dilation, w[2:], extra)
        ]
        return batch * w[1] * groups * _prod(out)

    return bound


def _pad_bound(args: tuple, kwargs: dict) -> int | None:
    shape = _shape(_arg(args, kwargs, 0, "input", kwargs.get("self")))
    if len(args) > 2 and all(type(a) is int for a in args[1:]):
        pads = list(args[1:])  # reflection_pad2d(x, 1, 1, 1, 1): the pads spread
    else:
        pads = _arg(args, kwargs, 1, "pad", kwargs.get("padding"))
    if shape is None or not isinstance(pads, (list, tuple)):
        return None
    if not all(type(p) is int for p in pads) or len(pads) % 2 or len(pads) // 2 > len(shape):
        return None
    for i in range(len(pads) // 2):
        shape[-1 - i] += pads[2 * i] + pads[2 * i + 1]
    return _prod(shape)


def _dims_of(op: str) -> int:
    return next(int(c) for c in op if c.isdigit())


def _resized_bound(op: str) -> Callable:
    """Adaptive pools and upsampling: the input's leading sizes, then the output size (or
    each of the last sizes times its scale factor)."""
    d = _dims_of(op)

    def bound(args: tuple, kwargs: dict) -> int | None:
        shape = _shape(_arg(args, kwargs, 0, "input", kwargs.get("self")))
        if shape is None or len(shape) < d:
            return None
        lead = _prod(shape[:-d])
        size = _per_dim(_arg(args, kwargs, 1, "output_size"), d)
        if size is not None:
            return lead * _prod(size)
        scales = [
            a
            for a in list(args[2:]) + list(kwargs.values())
            if isinstance(a, (list, tuple)) and a and all(type(s) is float for s in a)
        ]
        if len(scales) != 1 or len(scales[0]) != d:
            return None
        return lead * _prod(math.ceil(n * s) for n, s in zip(shape[-d:], scales[0]))

    return bound


def _fft_bound(op: str) -> Callable:
    """The FFTs: the input with the transformed dimensions at their lengths ``n`` or ``s``
    (a one-sided result has about half: counted whole; an inverse one-sided one, without
    a length, twice its input's)."""
    many = op[-1] in "2n"  # fft2, fftn, rfft2, ...: ``s`` and ``dim`` lists
    # the inverse of a one-sided transform makes 2 * (L - 1) from L by default
    twice = "irfft" in op or "hfft" in op

    def bound(args: tuple, kwargs: dict) -> int | None:
        shape = _shape(_arg(args, kwargs, 0, "input", kwargs.get("self")))
        lengths = _arg(args, kwargs, 1, "s" if many else "n")
        dims = _arg(args, kwargs, 2, "dim", (-2, -1) if op[-1] == "2" else None)
        if shape is None or not shape:
            return None
        if lengths is None:
            return _prod(shape) * (2 if twice else 1)
        lengths = [lengths] if type(lengths) is int else lengths
        if not isinstance(lengths, (list, tuple)) or not all(type(n) is int for n in lengths):
            return None
        if dims is None:
            dims = list(range(-len(lengths), 0))
        dims = [dims] if type(dims) is int else dims
        if not isinstance(dims, (list, tuple)) or len(dims) != len(lengths):
            return None
        for dim, n in zip(dims, lengths):
            if type(dim) is not int or not -len(shape) <= dim < len(shape):
                return None
            if n != -1:
                shape[dim] = n
        return _prod(shape) * (2 if twice else 1)

    return bound


UPPER_BOUNDS: dict[str, Callable] = {
    **{f"conv{d}d": _conv_bound("plain") for d in (1, 2, 3)},
    **{f"conv_transpose{d}d": _conv_bound("transposed") for d in (1, 2, 3)},
    "convolution": _conv_bound("convolution"),
    **{
        op: _pad_bound
        for op in (
            "pad constant_pad_nd _pad_circular reflection_pad1d reflection_pad2d "
            "reflection_pad3d replication_pad1d replication_pad2d replication_pad3d"
        ).split()
    },
    **{
        op: _resized_bound(op)
        for op in opset.OPS
        if op.startswith(("adaptive_", "upsample_", "_upsample_"))
    },
    **{op: _fft_bound(op) for op in opset.OPS if op.startswith("fft.") and op in SCALED_OPS},
}


def _symbolic(values) -> bool:
    """Whether a tensor among ``values`` has a size that is not an int: ``torch.export``
    traces the graph (an AOTInductor package, which only a trusting caller loads) with
    symbolic sizes, where no bound can be read and the result is never allocated."""
    for v in values:
        if isinstance(v, torch.Tensor) and any(type(d) is not int for d in v.shape):
            return True
        if isinstance(v, (list, tuple)) and _symbolic(v):
            return True
    return False


def bounded(op: str, fn: Callable, kernel: tuple[int, ...] | None = None) -> Callable:
    """``fn`` (the callable of one node of ``op``) preceded by the bound of its result's
    bytes (module Note), remembered for the last :data:`KEEP` keys that passed. With
    ``kernel`` (a convolution's :func:`kernel_covering`), a call whose weight is a plain
    tensor with a kernel at least that large along every dimension passes at once: its
    padding cannot make the output larger than the input (the weight's shape is read on
    each call: a weight of the caller's, or state replaced since, is tested as it is)."""
    checked = _bounded(op, fn)
    if kernel is None:
        return checked
    rank = len(kernel) + 2
    first, last = kernel[0], kernel[-1]
    middle_at, middle = (3, kernel[1]) if len(kernel) == 3 else (2, first)

    def run(*args, **kwargs):
        w = args[1] if len(args) > 1 else kwargs.get("weight")
        if type(w) in _PLAIN_TENSORS:  # a subclass's shape is its own: the bound reads it
            s = w.shape
            if len(s) == rank and s[2] >= first and s[-1] >= last and s[middle_at] >= middle:
                return fn(*args, **kwargs)
        return checked(*args, **kwargs)

    run.bounds = fn
    run.covering = kernel  # generated code makes the same first test inline (codegen.py)
    run.__name__ = checked.__name__
    run.__doc__ = checked.__doc__
    return run


def _bounded(op: str, fn: Callable) -> Callable:
    passed: dict = {}
    upper = UPPER_BOUNDS.get(op)

    def run(*args, **kwargs):
        try:
            key = _key(args) if not kwargs else (_key(args), _kwargs_key(kwargs))
            known = key in passed
        except TypeError:  # a size that is no int: torch.export's symbolic sizes
            if _symbolic(args) or _symbolic(kwargs.values()):
                return fn(*args, **kwargs)
            key, known = None, False
        if not known:
            sized = _sizes_as_ints(args)
            named = _kwargs_as_ints(kwargs) if kwargs else kwargs
            most = upper(sized, named) if upper is not None else None
            if most is None or most * 16 > ALLOC_BYTES:  # ask the shape function
                found = result_bytes(op, sized, named)
                if found is None:  # refused there: the kernel refuses it too, each call
                    return fn(*args, **kwargs)
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
