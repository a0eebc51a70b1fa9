"""Checked implementations: ops whose PyTorch kernel trusts an argument that a file controls.

Note: why these ops. The op set is the safety boundary (shared_ir/SPEC.md, section Ops),
so no op may run a kernel on arguments it does not check itself. Public ops such as
``batch_norm``, ``gru_cell`` or ``layer_norm`` check their arguments in PyTorch; the ops
below do not, or not all of them (torch 2.13, CPU):

* ``native_batch_norm`` reads (and in training mode writes) ``weight``, ``bias`` and the
  running statistics by the input's channel count, whatever their length;
* ``_weight_norm`` reads ``g`` by ``v``'s size along ``dim`` (a one-element ``g`` for a
  4096-row ``v`` aborted the process);
* ``grid_sampler`` takes its modes as integers and, for one out of range, returns memory
  it never wrote;
* ``_grouped_mm`` trusts its offsets: offsets short of the rows leave rows unwritten,
  offsets past them read past the operand;
* the flat-weight RNN ops (``gru``, ``lstm``, ``rnn_tanh``, ``rnn_relu``) trust the shapes of
  their weights (a one-row weight crashed the process, short biases are read past their
  end);
* ``embedding_bag`` reads ``indices[offsets[i]]`` for any offset;
* circular padding (``_pad_circular``, ``pad`` in circular mode) with a negative pad on one
  side and a large one on the other returns memory it never wrote.

Each function here checks every shape relation and enum the kernel relies on, exactly as
the public op or module would (``nn.GRU``'s ``check_forward_args``, ``F.batch_norm``), and
only then runs the kernel; a violation is a ``ValueError`` that the runtime turns into a
tracebridge ``OpError`` naming the node. Ops whose result size comes from values, or from
a product of sizes (``bincount``, ``one_hot``, ``outer``, ``kron``, ``cartesian_prod``,
``diag_embed``) check the bytes they would allocate first (``LIMITS['alloc_bytes']``), so a
limit hit is tracebridge's error, never the allocator's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..check.program import LIMITS, SECTIONED_OPS
from .memo import keep_newest

# The largest single allocation (bytes) that a size taken from a value, or a product of
# sizes, may ask for at a call (shared_ir/SPEC.md, section Limits; the checker applies the
# same number at load to sizes the file holds).
ALLOC_BYTES = LIMITS["alloc_bytes"]

# Integer enums of ops that take their modes as integers (declared in ops.json, checked at
# load by check/program.py and at every call here).
GRID_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


class CheckFailed(ValueError):
    """An argument that the op's kernel would trust is wrong; raised before the kernel runs."""


def _need(ok: bool, message: str | Callable[[], str]) -> None:
    """Raise CheckFailed unless ``ok``. ``message`` may be a function that makes it: on a
    hot path (a recurrent layer's checks run on every call) formatting shapes into a
    message that is almost never shown costs more than the checks themselves."""
    if not ok:
        raise CheckFailed(message() if callable(message) else message)


def _checked_symbolic(numel) -> bool:
    """Whether a symbolic element count (torch.compile, torch.export) is past the
    allocation limit at 16 bytes an element. Under torch.export it is not checked: the
    comparison would be a guard of the exported program, ``1024*s0 <= 2**30``, which
    bounds the batch (``torch.export`` then serves sizes up to 2**20 only, and an ONNX
    file, which cannot state a bound, fixes it at the example's: RoBERTa's ``expand``
    of its token-type buffer, prober21d F5). The allocation limit is this runtime's;
    the exported program runs elsewhere. Under torch.compile the guard stays: a size past
    it recompiles, and the call is checked again."""
    if torch.compiler.is_exporting():
        return False
    return bool(numel * 16 > ALLOC_BYTES)


def _bytes_ok(op: str, numel: int, dtype: torch.dtype) -> None:
    size = numel * _itemsize(dtype)
    _need(
        size <= ALLOC_BYTES,
        lambda: (
            f"{op} would allocate {size} bytes, more than the limit of {ALLOC_BYTES} for a "
            "size taken from a value or a product of sizes (shared_ir/SPEC.md, section Limits)"
        ),
    )


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _optional_vector(op: str, name: str, t, length: int) -> None:
    if t is None:
        return
    _need(_is_tensor(t), f"{op}: {name} must be a tensor or None")
    _need(
        t.dim() == 1 and t.numel() == length,
        f"{op}: {name} must be a vector of {length} elements (one per channel), "
        f"not of shape {tuple(t.shape)}",
    )


# --- normalization ----------------------------------------------------------------------------


def native_batch_norm(
    input, weight, bias, running_mean, running_var, training, momentum, eps, *rest
):
    """``torch.native_batch_norm`` after ``F.batch_norm``'s checks: every per-channel
    tensor has exactly one element per channel (``input.size(1)``)."""
    _need(_is_tensor(input) and input.dim() >= 2, "native_batch_norm: input needs 2+ dimensions")
    channels = input.size(1)
    for name, t in (
        ("weight", weight),
        ("bias", bias),
        ("running_mean", running_mean),
        ("running_var", running_var),
    ):
        _optional_vector("native_batch_norm", name, t, channels)
    if not training:
        _need(
            running_mean is not None and running_var is not None,
            "native_batch_norm: evaluation mode needs running_mean and running_var",
        )
    return torch.native_batch_norm(
        input, weight, bias, running_mean, running_var, training, momentum, eps, *rest
    )


def group_norm(input, num_groups, *rest, **kwargs):
    """``torch.group_norm`` after checking the group count against the channels: PyTorch
    accepts any count for an input with no channels and allocates statistics for each
    group (2**31 groups were killed for memory)."""
    _need(_is_tensor(input) and input.dim() >= 2, "group_norm: input needs 2+ dimensions")
    channels = input.size(1)
    _need(
        type(num_groups) is int and 1 <= num_groups <= max(channels, 1),
        lambda: (  # made only on failure: a poolformer runs a group norm per block
            f"group_norm: num_groups must be between 1 and the {channels} channels, "
            f"not {num_groups!r}"
        ),
    )
    return torch.group_norm(input, num_groups, *rest, **kwargs)


def weight_norm(v, g, dim=0):
    """``torch._weight_norm`` after checking that ``g`` has the shape of
    ``norm_except_dim(v, 2, dim)``: ``v.size(dim)`` at ``dim`` and 1 elsewhere (one element
    for ``dim=-1``, the whole tensor).

    >>> weight_norm(torch.ones(3, 2), torch.full((3, 1), 2.0), 0)[0].tolist()
    [1.4142135381698608, 1.4142135381698608]
    """
    _need(_is_tensor(v) and _is_tensor(g), "_weight_norm: v and g must be tensors")
    _need(isinstance(dim, int) and -1 <= dim < v.dim(), f"_weight_norm: dim {dim} out of range")
    _need(v.dim() >= 1, "_weight_norm: v needs at least one dimension")
    _need(v.dtype == g.dtype and v.is_floating_point(), "_weight_norm: v and g: one float dtype")
    if dim == -1:
        _need(g.numel() == 1, f"_weight_norm: g must have one element, not {g.numel()}")
    else:
        want = [1] * v.dim()
        want[dim] = v.size(dim)
        _need(
            list(g.shape) == want,
            f"_weight_norm: g must have shape {tuple(want)} for v of shape {tuple(v.shape)} "
            f"and dim {dim}, not {tuple(g.shape)}",
        )
    return torch._weight_norm(v, g, dim)


# --- resampling -------------------------------------------------------------------------------


def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """``torch.grid_sampler`` with its integer modes checked (as ``F.grid_sample`` maps its
    string modes): interpolation 0, 1 or 2 (bicubic only for 4-d input), padding 0, 1, 2.

    >>> img, grid = torch.ones(1, 1, 2, 2), torch.zeros(1, 1, 1, 2)
    >>> grid_sampler(img, grid, 0, 0, False).flatten().tolist()
    [1.0]
    >>> try:
    ...     grid_sampler(img, grid, 99, 0, False)
    ... except CheckFailed as exc:
    ...     print(str(exc)[:47])
    grid_sampler: interpolation_mode must be one of
    """
    _need(
        type(interpolation_mode) is int and interpolation_mode in GRID_INTERPOLATION,
        f"grid_sampler: interpolation_mode must be one of {sorted(GRID_INTERPOLATION)} "
        f"({', '.join(GRID_INTERPOLATION.values())}), not {interpolation_mode!r}",
    )
    _need(
        type(padding_mode) is int and padding_mode in GRID_PADDING,
        f"grid_sampler: padding_mode must be one of {sorted(GRID_PADDING)} "
        f"({', '.join(GRID_PADDING.values())}), not {padding_mode!r}",
    )
    _need(_is_tensor(input) and _is_tensor(grid), "grid_sampler: input and grid are tensors")
    _need(
        interpolation_mode != 2 or input.dim() == 4,
        "grid_sampler: bicubic interpolation (2) takes 4-d input only",
    )
    return torch.grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


def _circular_pads_ok(op: str, input, pad) -> None:
    """Circular padding crops by the negative pads first, then wraps the rest around: a
    positive pad may not pass the size left after cropping (PyTorch checks it against the
    uncropped size only, and then returns memory it never wrote: ``pad=[4, -3]`` of a
    length-4 row)."""
    _need(_is_tensor(input), f"{op}: input is a tensor")
    sizes = _ints_in(pad)
    _need(
        len(sizes) % 2 == 0 and len(sizes) // 2 <= input.dim(),
        f"{op}: pad has one (left, right) pair per padded dimension",
    )
    for i in range(len(sizes) // 2):
        left, right = sizes[2 * i], sizes[2 * i + 1]
        size = input.size(input.dim() - 1 - i)
        kept = size - max(-left, 0) - max(-right, 0)
        _need(
            kept >= 0 and max(left, 0) <= kept and max(right, 0) <= kept,
            f"{op}: circular padding ({left}, {right}) of dimension {input.dim() - 1 - i} "
            f"(size {size}) wraps around more than the {max(kept, 0)} elements it keeps",
        )


def pad_circular(input, pad):
    """``_pad_circular`` (what ``F.pad(mode='circular')`` runs) after the pad check."""
    _circular_pads_ok("_pad_circular", input, pad)
    return torch._C._nn._pad_circular(input, pad)


def pad(input, pad, mode="constant", value=None):
    """``torch._C._nn.pad``: in circular mode, the pad check of ``pad_circular`` first."""
    if mode == "circular":
        _circular_pads_ok("pad", input, pad)
    return torch._C._nn.pad(input, pad, mode, value)


def _padding_op(name: str, dims: int) -> Callable:
    """``reflection_pad{1,2,3}d`` / ``replication_pad{1,2,3}d`` after checking that
    ``padding`` holds one (left, right) pair per padded dimension: torch 2.11's
    ``reflection_pad3d`` reads six pads before it counts them (an empty list crashes the
    process), and the others are checked alike so no release's kernel is trusted with it."""
    kernel = getattr(torch._C._nn, name)

    def checked(*args, **kwargs):
        if len(args) > 2:  # the pads as separate ints
            padding = args[1:]
        else:
            padding = args[1] if len(args) == 2 else kwargs.get("padding")
        sizes = _ints_in(padding)
        _need(
            len(sizes) == 2 * dims,
            f"{name}: padding holds {2 * dims} ints, a (left, right) pair per padded "
            f"dimension, not {len(sizes)}",
        )
        return kernel(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = name
    return checked


PADDING_OPS = tuple(f"{kind}_pad{d}d" for kind in ("reflection", "replication") for d in (1, 2, 3))


# --- grouped matrix products ----------------------------------------------------------------


_Tensor = torch.Tensor
_int32 = torch.int32
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_grouped_mm_kernel = torch._grouped_mm


def grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm`` after checking what its CPU kernel trusts: the inner sizes
    agree, and ``offs`` (needed when an operand is 2-d) is a vector of int32 ends, one per
    group, non-decreasing from 0 and ending exactly at the size it splits, so that every
    row of the result is written and no read passes an operand.

    It runs four times per forward of a mixture-of-experts model, so the messages are made
    only when a check fails, and the ends are checked on one short Python list (a list of
    a few ints is non-decreasing when it equals its sorted copy): no torch op per check.
    Caching the verdict per ``offs`` tensor would not be safe: a router writes new ends
    into the same tensor, and a version counter does not see every write (``.data``).

    Note: the form those models call, checked in one expression. Mixtral's and Qwen2-MoE's
    experts call it with the routed rows (2-d), the experts' weights (3-d) and int32 ends:
    that form's checks are one boolean expression here, with no call of ``_need`` (a
    Python frame each, seven of them and three of ``_is_tensor``: about 2 us of 3 a call,
    torch 2.13, one thread). They are the checks of :func:`_grouped_mm_checked` for that
    form, the same relations on the same values; any other form, and any call that breaks
    one of them, goes through :func:`_grouped_mm_checked`, which raises with its message.

    The test reads each operand's sizes once (each read makes a ``torch.Size``) and asks
    for a plain tensor or parameter by type, not by ``isinstance`` (``torch.Tensor``'s
    metaclass check): about 12.7k instructions a call before, under callgrind. A
    subclass takes the full check, which tests the same relations."""
    a, b = self, mat2
    if (
        bias is None
        and type(a) in _PLAIN
        and type(b) in _PLAIN
        and type(offs) is _Tensor
        and a.dim() == 2
        and b.dim() == 3
        and offs.dim() == 1
        and offs.dtype is _int32
    ):
        a_sizes, b_sizes = a.shape, b.shape
        if a_sizes[1] == b_sizes[1] and offs.numel() == b_sizes[0]:  # one end per group
            ends = offs.tolist()
            if not ends or (ends[0] >= 0 and ends[-1] == a_sizes[0] and ends == sorted(ends)):
                return _grouped_mm_kernel(a, b, offs, None, out_dtype)
    return _grouped_mm_checked(a, b, offs, bias, out_dtype)


def _grouped_mm_checked(a, b, offs, bias, out_dtype):
    """:func:`grouped_mm` for every form, each check with its message."""
    _need(_is_tensor(a) and _is_tensor(b), "_grouped_mm: the operands are tensors")
    a_dim, b_dim = a.dim(), b.dim()
    _need(a_dim in (2, 3) and b_dim in (2, 3), "_grouped_mm: operands are 2-d or 3-d")
    _need(
        a.size(-1) == b.size(-2),
        lambda: f"_grouped_mm: inner sizes differ ({tuple(a.shape)} and {tuple(b.shape)})",
    )
    _need(bias is None, "_grouped_mm: bias is not supported by the CPU kernel")
    if a_dim == 3 and b_dim == 3:
        _need(offs is None, "_grouped_mm: two 3-d operands take no offsets")
        _need(a.size(0) == b.size(0), "_grouped_mm: the groups of the two operands differ")
    else:
        _need(_is_tensor(offs), "_grouped_mm: a 2-d operand needs offsets")
        if a_dim == 2 and b_dim == 3:
            groups, split = b.size(0), a.size(0)
        elif a_dim == 3:
            groups, split = a.size(0), b.size(1)
        else:
            groups, split = offs.numel(), a.size(1)
        _need(
            offs.dim() == 1 and offs.dtype == torch.int32 and offs.numel() == groups,
            lambda: f"_grouped_mm: offs must be an int32 vector of {groups} group ends",
        )
        ends = offs.tolist()
        _need(
            not ends or (ends[0] >= 0 and ends[-1] == split and ends == sorted(ends)),
            lambda: (
                f"_grouped_mm: offs {ends[:8]} must be non-decreasing ends from 0 that "
                f"finish at {split}"
            ),
        )
    return torch._grouped_mm(a, b, offs, bias, out_dtype)


# --- recurrent layers with flat weights -------------------------------------------------------

_GATES = {"gru": 3, "lstm": 4, "rnn_tanh": 1, "rnn_relu": 1}


def _rnn(op: str) -> Callable:
    kernel = getattr(torch, op)
    gates = _GATES[op]
    passed = PassedChecks()
    key_of = _lstm_key if op == "lstm" else _rnn_key

    def run(*args, **kwargs):
        try:
            key = None if kwargs else key_of(args)
            seen = key is not None and key in passed.keys
        except Exception:  # not the plain form, not tensors, unhashable: the full check
            key, seen = None, False
        if not seen:
            _check_rnn(op, gates, args, kwargs)
            if key is not None:
                passed.add(key)
        return kernel(*args, **kwargs)

    run.passed = passed  # for tests and for reading

    run.__name__ = f"checked_{op}"
    run.__doc__ = f"``torch.{op}`` after ``nn.RNNBase``'s checks of the flat weights."
    return run


# Note: the recurrent checks, remembered by geometry.
#   ``_check_rnn`` reads nothing but the types of the arguments, the scalar arguments,
#   and the shapes and dtypes of the input, the hidden states and the weights (the input's
#   rank, feature size and batch size only: not its sequence length). A call in the form
#   generated code makes (nine positional arguments, not packed) is keyed by exactly
#   those, so a key that passed once passes again, whatever the tensors' values, and a
#   call whose key was seen skips the check (12 of an LSTM layer's 160 us at batch 1).
#   The key holds no tensor: a weight replaced, resized through ``.data`` or moved to
#   another dtype has another key and is checked again; a write in place (a new version)
#   changes no shape, so the check's outcome cannot change with it. Keys are only ever
#   added after the full check passed; a failing call is checked (and refused) every time.
#   Each op keeps the last :data:`PASSED_KEEP` keys (a few geometries per model).
PASSED_KEEP = 64
_shape = torch._C.TensorBase.shape.__get__  # TypeError for anything but a tensor
_dtype = torch._C.TensorBase.dtype.__get__


class PassedChecks:
    """The keys of calls whose full check passed, the newest :data:`PASSED_KEEP` kept."""

    def __init__(self) -> None:
        self.keys: dict = {}

    def add(self, key) -> None:
        keep_newest(self.keys, key, None, PASSED_KEEP)


def _rnn_key(args: Sequence, hx_key=None) -> tuple | None:
    """The geometry key of ``gru``/``rnn_*(input, hx, params, has_biases, num_layers,
    dropout, train, bidirectional, batch_first)`` (see the Note above); None for any other
    form. Raises for arguments that are not tensors where tensors belong."""
    if len(args) != 9:
        return None
    x, hx, params = args[0], args[1], args[2]
    scalars = args[3:]
    if type(params) is not list and type(params) is not tuple:
        return None
    if hx_key is None:
        hx_key = (_shape(hx), _dtype(hx))
    sizes = _shape(x)
    if len(sizes) != 3:
        return None
    batch = sizes[0] if scalars[5] else sizes[1]  # as _check_rnn reads batch_first
    return (
        type(params),
        tuple(map(_shape, params)),
        tuple(map(_dtype, params)),
        hx_key,
        _dtype(x),
        sizes[2],
        batch,
        tuple(map(type, scalars)),  # 1, 1.0 and True are equal keys, not equal arguments
        scalars,
    )


def _lstm_key(args: Sequence) -> tuple | None:
    """:func:`_rnn_key` for ``lstm``, whose ``hx`` is a pair ``(h, c)``."""
    hx = args[1] if len(args) == 9 else None
    if (type(hx) is not tuple and type(hx) is not list) or len(hx) != 2:
        return None
    h, c = hx
    return _rnn_key(args, (type(hx), _shape(h), _dtype(h), _shape(c), _dtype(c)))


_RNN_NAMES = "input hx params has_biases num_layers dropout train bidirectional batch_first".split()
_PACKED_NAMES = (
    "data batch_sizes hx params has_biases num_layers dropout train bidirectional".split()
)


def _bind(op: str, names: list[str], args: Sequence, kwargs: dict) -> dict:
    """The arguments of a call by the names of the op's schema."""
    _need(len(args) <= len(names), lambda: f"{op}: at most {len(names)} arguments")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise CheckFailed(f"{op}: unexpected argument {key!r}")
        bound[key] = value
    return bound


def _bind_rnn(op: str, args: Sequence, kwargs: dict) -> tuple[dict, bool]:
    """The arguments by name, and whether this is the packed-sequence form (the second
    argument is ``batch_sizes``: for ``lstm`` a tensor where ``hx`` is a list; for the
    others the third is a tensor ``hx`` where it is the weight list)."""
    if "data" in kwargs or "batch_sizes" in kwargs:
        packed = True
    elif op == "lstm":
        packed = len(args) > 1 and _is_tensor(args[1])
    else:
        packed = len(args) > 2 and _is_tensor(args[2])
    names = _PACKED_NAMES if packed else _RNN_NAMES
    bound = _bind(op, names, args, kwargs)
    missing = [n for n in names if n not in bound and n != "batch_first"]
    _need(not missing, lambda: f"{op}: missing arguments {missing}")
    return bound, packed


def _check_rnn(op: str, gates: int, args: Sequence, kwargs: dict) -> None:
    bound, packed = _bind_rnn(op, args, kwargs)
    x = bound["data" if packed else "input"]
    params, layers = bound["params"], bound["num_layers"]
    has_biases, bidirectional = bound["has_biases"], bound["bidirectional"]
    _need(_is_tensor(x) and x.is_floating_point(), lambda: f"{op}: the input is a float tensor")
    _need(
        type(layers) is int and layers >= 1, lambda: f"{op}: num_layers must be a positive integer"
    )
    _need(isinstance(has_biases, bool), lambda: f"{op}: has_biases must be a bool")
    _need(isinstance(bidirectional, bool), lambda: f"{op}: bidirectional must be a bool")
    dropout = bound["dropout"]
    _need(
        isinstance(dropout, (int, float)) and 0 <= dropout <= 1,
        lambda: f"{op}: dropout must be in [0, 1]",
    )
    hx = bound["hx"]
    if op == "lstm":
        _need(
            isinstance(hx, (list, tuple)) and len(hx) == 2 and all(map(_is_tensor, hx)),
            lambda: f"{op}: hx is a pair (h, c) of tensors",
        )
        h, c = hx
    else:
        _need(_is_tensor(hx), lambda: f"{op}: hx is a tensor")
        h = c = hx
    _need(h.dim() == 3 and c.dim() == 3, lambda: f"{op}: hidden states are 3-d")
    directions = 2 if bidirectional else 1
    hidden, real_hidden = c.size(2), h.size(2)
    proj = real_hidden != hidden
    _need(
        not proj or (op == "lstm" and 0 < real_hidden < hidden),
        lambda: f"{op}: h and c differ in size (only an lstm with projections has h smaller)",
    )
    batch = h.size(1)
    for name, t in (("h", h), ("c", c)):
        if not (t.size(0) == layers * directions and t.size(1) == batch and t.dtype == x.dtype):
            raise CheckFailed(
                f"{op}: {name} must have {layers * directions} layers x {batch} batch and the "
                f"input's dtype, not {tuple(t.shape)} {t.dtype}"
            )
    if packed:
        _check_batch_sizes(op, x, bound["batch_sizes"], batch)
    else:
        _need(x.dim() == 3, lambda: f"{op}: the input is 3-d (the runtime batches it)")
        batch_dim = 0 if bound.get("batch_first", False) else 1
        _need(x.size(batch_dim) == batch, lambda: f"{op}: input and hx differ in batch size")
    per = 2 + (2 if has_biases else 0) + (1 if proj else 0)
    _need(
        isinstance(params, (list, tuple)) and all(map(_is_tensor, params)),
        lambda: f"{op}: params is a list of tensors",
    )
    _need(
        len(params) == layers * directions * per,
        lambda: (
            f"{op}: {layers} layers x {directions} directions need {layers * directions * per} "
            f"weights, not {len(params)}"
        ),
    )
    rows = gates * hidden
    for layer in range(layers):
        width = x.size(-1) if layer == 0 else real_hidden * directions
        for direction in range(directions):
            group = params[(layer * directions + direction) * per :][:per]
            want = [(rows, width), (rows, real_hidden)]
            want += [(rows,), (rows,)] if has_biases else []
            want += [(real_hidden, hidden)] if proj else []
            for k, (t, shape) in enumerate(zip(group, want)):
                if not (tuple(t.shape) == shape and t.dtype == x.dtype):
                    raise CheckFailed(
                        f"{op}: weight {k} of layer {layer}, direction {direction} must have "
                        f"shape {shape} and dtype {x.dtype}, not {tuple(t.shape)} {t.dtype}"
                    )


def _check_batch_sizes(op: str, data, batch_sizes, batch: int) -> None:
    _need(data.dim() == 2, lambda: f"{op}: packed data is 2-d")
    _need(
        _is_tensor(batch_sizes) and batch_sizes.dim() == 1 and batch_sizes.dtype == torch.int64,
        lambda: f"{op}: batch_sizes is an int64 vector",
    )
    # Each entry is at least 1 and they add up to the rows: more entries than rows is wrong
    # before any is read (a file's expanded one-element vector would take long to list).
    _need(
        batch_sizes.numel() <= data.size(0),
        lambda: f"{op}: batch_sizes has more entries than the {data.size(0)} rows of data",
    )
    _need(
        batch_sizes.numel() > 0
        and int(batch_sizes[0]) == batch
        and _counts_ok(batch_sizes, 1, None, data.size(0)),
        lambda: (
            f"{op}: batch_sizes must be positive, non-increasing, start at the batch size "
            f"{batch} and add up to the {data.size(0)} rows of data"
        ),
    )


# --- embeddings ------------------------------------------------------------------------------


def embedding_bag(weight, indices, offsets=None, *args, **kwargs):
    # Note: PyTorch's CPU kernel reads indices[offsets[i]] without checking a negative or
    # decreasing offset (torch 2.13: offsets [0, -10**12] crash the process, [0, -7] quote
    # the heap in the error), so the offsets are checked here, where both runtimes call it.
    if isinstance(offsets, torch.Tensor) and offsets.numel() and isinstance(indices, torch.Tensor):
        flat = offsets.reshape(-1)
        if (
            flat.is_floating_point()
            or bool((flat < 0).any())
            or bool((flat[1:] < flat[:-1]).any())
            or int(flat.max()) > indices.numel()
        ):
            raise CheckFailed(
                "embedding_bag: offsets must be non-negative, non-decreasing and at most "
                f"the number of indices ({indices.numel()})"
            )
    from .checked_indices import embedding_bag_indices  # it imports this module

    embedding_bag_indices(weight, indices)
    return torch.embedding_bag(weight, indices, offsets, *args, **kwargs)


# --- sizes from values and products of sizes ------------------------------------------------


def bincount(input, weights=None, minlength=0):
    """``torch.bincount``: its result has ``max(input) + 1`` elements, a size taken from a
    value, so the bytes are checked first."""
    _need(_is_tensor(input), "bincount: input is a tensor")
    if input.numel() and not input.is_floating_point() and input.dtype != torch.bool:
        length = max(int(input.max()) + 1, int(minlength))
        dtype = weights.dtype if _is_tensor(weights) else torch.int64
        _bytes_ok("bincount", length, torch.float64 if dtype.is_floating_point else dtype)
    return torch.bincount(input, weights, minlength)


def one_hot(input, num_classes=-1):
    """``torch.nn.functional.one_hot``: without ``num_classes`` the class count is
    ``max(input) + 1``, a size taken from a value, so the bytes are checked first."""
    _need(_is_tensor(input), "one_hot: input is a tensor")
    classes = num_classes
    if classes == -1 and input.numel() and input.dtype == torch.int64:
        classes = int(input.max()) + 1
    if isinstance(classes, int) and classes > 0:
        _bytes_ok("one_hot", input.numel() * classes, torch.int64)
    from .checked_indices import one_hot_values  # it imports this module

    one_hot_values(input, num_classes)
    return torch._C._nn.one_hot(input, num_classes)


def combinations(input, r=2, with_replacement=False):
    """``torch.combinations``: C(n, r) rows of r (C(n + r - 1, r) with replacement), a
    count that grows fast with r; the bytes are bounded first (in logarithms: the count
    itself may have thousands of digits)."""
    _need(_is_tensor(input) and input.dim() == 1, "combinations: input is a vector")
    _need(type(r) is int and r >= 0, f"combinations: r must be an integer >= 0, not {r!r}")
    n = input.numel()
    top = n + r - 1 if with_replacement else n
    if r and top >= r:
        log_rows = math.lgamma(top + 1) - math.lgamma(r + 1) - math.lgamma(top - r + 1)
        log_bytes = log_rows + math.log(r * _itemsize(input.dtype))
        _need(
            log_bytes <= math.log(ALLOC_BYTES),
            f"combinations would allocate about e^{log_bytes:.0f} bytes, more than the limit "
            f"of {ALLOC_BYTES} for a size taken from a value or a product of sizes "
            "(shared_ir/SPEC.md, section Limits)",
        )
    return torch.combinations(input, r, with_replacement)


def _numel_of(shape) -> int:
    return math.prod(int(s) for s in shape)


def outer(input, vec2):
    _need(_is_tensor(input) and _is_tensor(vec2), "outer: operands are tensors")
    _bytes_ok("outer", input.numel() * vec2.numel(), torch.promote_types(input.dtype, vec2.dtype))
    return torch.outer(input, vec2)


def kron(input, other):
    _need(_is_tensor(input) and _is_tensor(other), "kron: operands are tensors")
    _bytes_ok("kron", input.numel() * other.numel(), torch.promote_types(input.dtype, other.dtype))
    return torch.kron(input, other)


def cartesian_prod(*tensors):
    items = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    _need(all(map(_is_tensor, items)), "cartesian_prod: operands are tensors")
    rows = _numel_of(t.numel() for t in items)
    if items:
        _bytes_ok("cartesian_prod", rows * len(items), items[0].dtype)
    return torch.cartesian_prod(*items)


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    _need(_is_tensor(input), "diag_embed: input is a tensor")
    if input.dim() >= 1 and isinstance(offset, int):
        side = input.size(-1) + abs(offset)
        _bytes_ok("diag_embed", input.numel() // max(input.size(-1), 1) * side * side, input.dtype)
    return torch.diag_embed(input, offset, dim1, dim2)


def _sectioned(op: str) -> Callable:
    kernel = getattr(torch, op)

    def run(*args, **kwargs):
        # The count comes by position or by its keyword (``x.chunk(chunks=2, dim=0)`` in
        # RAFT); ``indices`` (a list) makes as many results as it has items plus one.
        count = args[1] if len(args) > 1 else kwargs.get("chunks", kwargs.get("sections"))
        if count is None:
            count = kwargs.get("tensor_indices_or_sections")
        if _is_tensor(count) and count.dim() == 0 and not count.is_floating_point():
            count = int(count)
        elif _is_tensor(count) and count.dim() == 1:
            count = count.numel() + 1  # indices: one more result than there are
        elif isinstance(count, (list, tuple)):
            count = len(count) + 1
        _need(
            not isinstance(count, int) or count <= LIMITS["results"],
            lambda: (  # made only on failure: chunk and split run in every layer
                f"{op} is asked for {count} results, more than the limit of {LIMITS['results']}"
            ),
        )
        return kernel(*args, **kwargs)

    run.__name__ = f"checked_{op}"
    run.__doc__ = f"``torch.{op}``, its count of results bounded by ``LIMITS['results']``."
    return run


def _size_and_dim(args: tuple, kwargs: dict, names: tuple[str, ...]):
    """The input, the argument at position 1 (or keyword ``names``) and the dimension of a
    call in any of the forms the op table allows (``self``/``input``, ``dim``)."""
    input = args[0] if args else kwargs.get("self", kwargs.get("input"))
    value = args[1] if len(args) > 1 else next((kwargs[n] for n in names if n in kwargs), None)
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    return input, value, dim


def _counted(op: str) -> Callable:
    """``op`` (``unbind``, ``split``) with its count of results bounded first: a size of
    its input (``unbind``: ``size(dim)``; ``split`` by an int: ``ceil(size(dim) / n)``; a
    list of sizes is counted at load). An expanded literal of ``2**24`` elements made
    2**24 tensors, gigabytes of Python objects, before the runtime could compare the
    count with the node's."""
    kernel = getattr(torch._C._VariableFunctions, op)  # the builtin the op table names
    unbinds = op == "unbind"
    most = LIMITS["results"]
    tensor = torch.Tensor

    def run(*args, **kwargs):
        # The common case first: no dimension longer than the limit, no count past it.
        if args and type(args[0]) is tensor and max(args[0].shape, default=0) <= most:
            return kernel(*args, **kwargs)
        if unbinds:
            input = args[0] if args else kwargs.get("self", kwargs.get("input"))
            dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
            size = 1
        else:
            input, size, dim = _size_and_dim(args, kwargs, ("split_size", "split_sizes"))
        if (
            _is_tensor(input)
            and type(size) is int
            and size > 0
            and type(dim) is int
            and -input.dim() <= dim < input.dim()
        ):
            count = -(-input.shape[dim] // size)
            _need(
                count <= most,
                lambda: (
                    f"{op} would make {count} results, more than the limit of "
                    f"{most} (shared_ir/SPEC.md, section Limits): the count is "
                    "a size of its input"
                ),
            )
        return kernel(*args, **kwargs)

    run.__name__ = f"checked_{op}"
    run.__doc__ = f"``torch.{op}``, its count of results bounded by ``LIMITS['results']``."
    return run


# The kernels of the ops above, for nodes whose count the loader bounded (a literal int):
# runtime/support.py calls them directly.
SECTIONED: dict[str, Callable] = {name: getattr(torch, name) for name in SECTIONED_OPS}


# --- fused inference paths -------------------------------------------------------------------
# Note: what these kernels check themselves, and what they do not (torch 2.13, CPU; each
# case is in tests/python/test_op_contract.py). ``_native_multi_head_attention`` and
# ``_transformer_encoder_layer_fwd`` check the query's rank and last size against
# ``embed_dim``, the qkv weight and bias, ``embed_dim % num_heads``, and the mask against
# ``mask_type``; the norms (``layer_norm``) and the projections (``addmm``) check their
# weights and every dtype. Not checked: ``num_heads`` 0 divides by zero (the process dies of
# SIGFPE), and a bias of one element broadcasts over every output feature (a result the
# module could never give). These calls run per layer on every call, so the checks are the
# few comparisons below and a message is formatted only when one fails.


def _heads_ok(op: str, embed_dim, num_heads) -> None:
    if not (type(embed_dim) is int and type(num_heads) is int and min(embed_dim, num_heads) >= 1):
        raise CheckFailed(
            f"{op}: embed_dim and num_heads must be integers >= 1, not {embed_dim!r} and "
            f"{num_heads!r}"
        )


def _biases_ok(op: str, names: str, got: tuple, want: tuple) -> None:
    if got != want:
        raise CheckFailed(
            f"{op}: {names} must be vectors of {', '.join(str(w[0]) for w in want)} "
            f"elements (one per output feature), not of shapes "
            f"{', '.join(str(tuple(g)) for g in got)}"
        )


def check_attention_arguments(embed_dim, num_head, proj_bias) -> None:
    """What ``_native_multi_head_attention``'s kernel does not check (the Note above); the
    exported form of the op (export/fused_paths.py) makes the same checks."""
    op = "_native_multi_head_attention"
    _heads_ok(op, embed_dim, num_head)
    _biases_ok(op, "proj_bias", (proj_bias.shape,), ((embed_dim,),))


def check_encoder_layer_arguments(
    embed_dim, num_heads, proj_bias, ffn_weight_1, ffn_bias_1, ffn_bias_2
) -> None:
    """What ``_transformer_encoder_layer_fwd``'s kernel does not check (the Note above)."""
    op = "_transformer_encoder_layer_fwd"
    _heads_ok(op, embed_dim, num_heads)
    _biases_ok(
        op,
        "proj_bias, ffn_bias_1, ffn_bias_2",
        (proj_bias.shape, ffn_bias_1.shape, ffn_bias_2.shape),
        ((embed_dim,), tuple(ffn_weight_1.shape[:1]), (embed_dim,)),
    )


def native_multi_head_attention(
    query,
    key,
    value,
    embed_dim,
    num_head,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    mask=None,
    need_weights=True,
    average_attn_weights=True,
    mask_type=None,
):
    """``torch._native_multi_head_attention`` (``nn.MultiheadAttention``'s fused inference
    path) after the checks its kernel does not make: ``num_head`` at least 1, and
    ``proj_bias`` one element per feature (see the Note above)."""
    check_attention_arguments(embed_dim, num_head, proj_bias)
    return torch._native_multi_head_attention(
        query,
        key,
        value,
        embed_dim,
        num_head,
        qkv_weight,
        qkv_bias,
        proj_weight,
        proj_bias,
        mask,
        need_weights,
        average_attn_weights,
        mask_type,
    )


def transformer_encoder_layer_fwd(
    src,
    embed_dim,
    num_heads,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    use_gelu,
    norm_first,
    eps,
    norm_weight_1,
    norm_bias_1,
    norm_weight_2,
    norm_bias_2,
    ffn_weight_1,
    ffn_bias_1,
    ffn_weight_2,
    ffn_bias_2,
    mask=None,
    mask_type=None,
):
    """``torch._transformer_encoder_layer_fwd`` (``nn.TransformerEncoderLayer``'s fused
    inference path) after the checks its kernel does not make: ``num_heads`` at least 1,
    and the projection's and the feed-forward layers' biases one element per output
    feature (``(E,)``, ``(F,)`` for a first weight of ``F`` rows, ``(E,)``; see the Note
    above)."""
    check_encoder_layer_arguments(
        embed_dim, num_heads, proj_bias, ffn_weight_1, ffn_bias_1, ffn_bias_2
    )
    return torch._transformer_encoder_layer_fwd(
        src,
        embed_dim,
        num_heads,
        qkv_weight,
        qkv_bias,
        proj_weight,
        proj_bias,
        use_gelu,
        norm_first,
        eps,
        norm_weight_1,
        norm_bias_1,
        norm_weight_2,
        norm_bias_2,
        ffn_weight_1,
        ffn_bias_1,
        ffn_weight_2,
        ffn_bias_2,
        mask,
        mask_type,
    )


def _counts_ok(counts, low: int, high: int | None, total: int | None) -> bool:
    """Whether an int64 vector holds values in ``[low, high]``, non-increasing, adding up
    to ``total``: checked with tensor ops, since a file may give an expanded vector of
    millions of entries that a Python list would take seconds and gigabytes to hold."""
    with torch.no_grad():
        if counts.numel() == 0:
            return total in (None, 0)
        ok = bool((counts >= low).all())
        if high is not None:
            ok = ok and bool((counts <= high).all())
        ok = ok and bool((counts[1:] <= counts[:-1]).all())
        return ok and (total is None or int(counts.sum()) == total)


def _cpu_int64_vector(op: str, name: str, t) -> None:
    _need(
        _is_tensor(t) and t.dim() == 1 and t.dtype == torch.int64 and t.device.type == "cpu",
        lambda: f"{op}: {name} is a CPU int64 vector",
    )


def _lengths_ok(op: str, lengths, batch: int, steps: int) -> None:
    _cpu_int64_vector(op, "lengths", lengths)
    _need(
        lengths.numel() == batch,
        lambda: f"{op}: one length per sequence ({batch}), not {lengths.numel()}",
    )
    with torch.no_grad():
        within = bool(((lengths >= 1) & (lengths <= steps)).all())
    _need(within, lambda: f"{op}: every length is between 1 and the {steps} steps of the input")
    _need(
        _counts_ok(lengths, 1, None, None),  # within the steps: checked just above
        lambda: f"{op}: lengths are sorted in decreasing order",
    )


def pack_padded_sequence(input, lengths, batch_first):
    """``_pack_padded_sequence`` after the checks ``nn.utils.rnn.pack_padded_sequence``
    makes (and what the kernel reads by them: one length per sequence, each within the
    input's steps, sorted)."""
    op = "_pack_padded_sequence"
    _need(_is_tensor(input) and input.dim() >= 2, lambda: f"{op}: the input is at least 2-d")
    _need(isinstance(batch_first, bool), lambda: f"{op}: batch_first is a bool")
    batch, steps = (input.size(0), input.size(1)) if batch_first else input.shape[1::-1]
    _need(batch > 0, lambda: f"{op}: cannot pack an empty batch")
    _lengths_ok(op, lengths, batch, steps)
    return torch._pack_padded_sequence(input, lengths, batch_first)


def pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length):
    """``_pad_packed_sequence`` after checking what its kernel reads by ``batch_sizes``
    (one positive, non-increasing count per step, summing to the packed rows), that
    ``total_length`` covers the steps, and the bytes of the padded result."""
    op = "_pad_packed_sequence"
    _need(_is_tensor(data) and data.dim() >= 1, lambda: f"{op}: the packed data is a tensor")
    _cpu_int64_vector(op, "batch_sizes", batch_sizes)
    _need(
        batch_sizes.numel() <= data.size(0),
        lambda: f"{op}: batch_sizes has more entries than the {data.size(0)} packed rows",
    )
    _need(
        batch_sizes.numel() > 0 and _counts_ok(batch_sizes, 1, None, data.size(0)),
        lambda: f"{op}: batch_sizes must be positive, non-increasing, and sum to the packed rows",
    )
    steps, first = batch_sizes.numel(), int(batch_sizes[0])
    _need(isinstance(batch_first, bool), lambda: f"{op}: batch_first is a bool")
    _need(
        isinstance(padding_value, (int, float)) and not isinstance(padding_value, bool),
        lambda: f"{op}: padding_value is a number",
    )
    _need(
        type(total_length) is int and total_length >= steps,
        lambda: f"{op}: total_length must be at least the {steps} steps",
    )
    _bytes_ok(op, math.prod([total_length, first, *data.shape[1:]]), data.dtype)
    _bytes_ok(op, first, torch.int64)  # the lengths it returns, one per sequence
    return torch._pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length)


_STFT_NAMES = (
    "input n_fft hop_length win_length window normalized onesided return_complex align_to_window"
).split()
_STFT_CENTER_NAMES = (
    "input n_fft hop_length win_length window center pad_mode normalized onesided "
    "return_complex align_to_window"
).split()
_ISTFT_NAMES = (
    "input n_fft hop_length win_length window center normalized onesided length return_complex"
).split()


def _fft_sizes(op: str, bound: dict) -> tuple[int, int]:
    """``n_fft`` and ``hop_length`` (default ``n_fft // 4``) as positive ints."""
    n_fft, hop = bound.get("n_fft"), bound.get("hop_length")
    _need(type(n_fft) is int and n_fft >= 1, lambda: f"{op}: n_fft must be a positive int")
    hop = n_fft // 4 if hop is None else hop
    _need(type(hop) is int and hop >= 1, lambda: f"{op}: hop_length must be a positive int")
    return n_fft, hop


def stft(*args, **kwargs):
    """``stft`` after bounding its bytes, whichever overload PyTorch picks (centred or not,
    frames aligned to the window or not), whatever the window's dtype: at most ``1 + (length
    + n_fft) // hop`` frames of ``n_fft`` complex128 values a signal, for the result and for
    the windowed frames it builds (a file could ask for a tiny hop over a long signal).
    PyTorch checks the rest (``n_fft`` within the signal, the window's length)."""
    center = (
        "center" in kwargs or "pad_mode" in kwargs or (len(args) > 6 and isinstance(args[6], str))
    )
    bound = _bind("stft", _STFT_CENTER_NAMES if center else _STFT_NAMES, args, kwargs)
    signal = bound.get("input")
    _need(_is_tensor(signal) and signal.dim() in (1, 2), "stft: the signal is a 1-d or 2-d tensor")
    n_fft, hop = _fft_sizes("stft", bound)
    frames = 1 + (signal.size(-1) + n_fft) // hop
    batch = signal.size(0) if signal.dim() == 2 else 1
    _bytes_ok("stft", batch * frames * n_fft * 2, torch.float64)
    return torch._C._VariableFunctions.stft(*args, **kwargs)


def istft(*args, **kwargs):
    """``istft`` after bounding its bytes: the frames it transforms back (``frames x n_fft``
    complex128 values at most) and the signal it builds (``n_fft + hop x (frames - 1)``
    samples, or ``length``), each of which a file could make huge."""
    bound = _bind("istft", _ISTFT_NAMES, args, kwargs)
    spectrum = bound.get("input")
    _need(
        _is_tensor(spectrum) and spectrum.dim() in (2, 3),
        "istft: the input is a 2-d or 3-d spectrum",
    )
    n_fft, hop = _fft_sizes("istft", bound)
    length = bound.get("length")
    _need(
        length is None or (type(length) is int and length >= 0),
        "istft: length must be None or a non-negative int",
    )
    frames = spectrum.size(-1)
    samples = max(n_fft + hop * max(frames - 1, 0), length or 0)
    batch = spectrum.size(0) if spectrum.dim() == 3 else 1
    _bytes_ok("istft", batch * max(samples, frames * n_fft) * 2, torch.float64)
    return torch._C._VariableFunctions.istft(*args, **kwargs)


def broadcast_tensors(*tensors):
    """``broadcast_tensors`` after bounding the elements its views present where they grow
    past every input (``[n, 1]`` and ``[1, n]`` present ``n * n``): a later op on them
    allocates that many, as a later op on an expanded view would (``sized_guard``)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])  # the recorded form: one list, as the schema takes it
    _need(all(map(_is_tensor, tensors)), "broadcast_tensors: the arguments are tensors")
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    numel = math.prod(shape)
    if numel > max((t.numel() for t in tensors), default=0):
        _need(
            numel * 16 <= ALLOC_BYTES,
            lambda: (
                f"broadcast_tensors would present {numel} elements, more than a later op may "
                f"allocate under the limit of {ALLOC_BYTES} bytes (shared_ir/SPEC.md, section "
                "Limits)"
            ),
        )
    return torch._C._VariableFunctions.broadcast_tensors(tensors)


_CTC_NAMES = (
    "log_probs targets input_lengths target_lengths blank reduction zero_infinity"
).split()


def _ctc_lengths(name: str, lengths, batch: int, unbatched: bool) -> torch.Tensor:
    """Lengths as PyTorch reads them (a list of ints, or an integer tensor: one per
    sequence, 0-dim for an unbatched call), as a CPU int64 vector."""
    op = "ctc_loss"
    if _is_tensor(lengths):
        _need(
            not lengths.is_floating_point() and not lengths.is_complex()
            and lengths.dtype != torch.bool,
            lambda: f"{op}: {name} must be integers",
        )  # fmt: skip
        _need(
            lengths.dim() == (0 if unbatched else 1) and lengths.device.type != "meta",
            lambda: f"{op}: {name} is {'a 0-dim tensor' if unbatched else 'a vector'} of data",
        )
        with torch.no_grad():
            vector = lengths.reshape(-1).to("cpu", torch.int64)
    else:
        _need(
            isinstance(lengths, (list, tuple))
            and all(type(n) is int for n in lengths),
            lambda: f"{op}: {name} is a list of ints or an integer tensor",
        )  # fmt: skip
        vector = torch.tensor(lengths, dtype=torch.int64)
    _need(
        vector.numel() == batch,
        lambda: f"{op}: {name} has {vector.numel()} entries, one per sequence ({batch})",
    )
    return vector


def ctc_loss(*args, **kwargs):
    """``ctc_loss`` after every check its kernel relies on. PyTorch checks the lengths
    against the sizes, but reads the log-probabilities at the target labels without
    checking them: a label out of ``[0, classes)`` read memory past the tensor. So the
    labels that the lengths select are checked here, with the rest (shapes, dtypes, the
    blank, the reduction enum), and the bytes of the forward variables the kernel allocates
    (``batch x steps x (2 x longest target + 1)``, as many again for the gradient) are
    bounded before it runs."""
    op = "ctc_loss"
    bound = _bind(op, _CTC_NAMES, args, kwargs)
    missing = [n for n in _CTC_NAMES[:4] if n not in bound]
    _need(not missing, lambda: f"{op}: missing arguments {missing}")
    log_probs, targets = bound["log_probs"], bound["targets"]
    blank, reduction = bound.get("blank", 0), bound.get("reduction", 1)
    zero_infinity = bound.get("zero_infinity", False)
    _need(
        _is_tensor(log_probs) and log_probs.dim() in (2, 3) and log_probs.is_floating_point(),
        lambda: f"{op}: log_probs is a float tensor (steps, batch, classes) or (steps, classes)",
    )
    unbatched = log_probs.dim() == 2
    steps, classes = log_probs.size(0), log_probs.size(-1)
    batch = 1 if unbatched else log_probs.size(1)
    _need(
        _is_tensor(targets)
        and not targets.is_floating_point()
        and not targets.is_complex()
        and targets.dtype != torch.bool
        and targets.dim() in ((1,) if unbatched else (1, 2)),
        lambda: f"{op}: targets is an integer tensor, (batch, longest) or concatenated",
    )
    _need(
        "meta" not in (log_probs.device.type, targets.device.type),
        f"{op}: log_probs and targets hold data (not the meta device)",
    )
    _need(type(blank) is int and 0 <= blank < classes, lambda: f"{op}: blank is a class index")
    _need(type(reduction) is int and reduction in (0, 1, 2), f"{op}: reduction is 0, 1 or 2")
    _need(isinstance(zero_infinity, bool), f"{op}: zero_infinity is a bool")
    inputs = _ctc_lengths("input_lengths", bound["input_lengths"], batch, unbatched)
    lengths = _ctc_lengths("target_lengths", bound["target_lengths"], batch, unbatched)
    with torch.no_grad():
        _need(
            bool(((inputs >= 0) & (inputs <= steps)).all()),
            lambda: f"{op}: every input length is between 0 and the {steps} steps",
        )
        _need(bool((lengths >= 0).all()), f"{op}: target lengths are not negative")
        padded = targets.dim() == 2 or unbatched
        if padded:
            width = targets.size(-1)
            _need(
                unbatched or targets.size(0) == batch,
                lambda: f"{op}: targets has one row per sequence ({batch})",
            )
            _need(
                bool((lengths <= width).all()),
                lambda: f"{op}: every target length is within the {width} columns of targets",
            )
            rows = targets.reshape(batch, width).to("cpu")
            used = torch.arange(width).expand(batch, width) < lengths.unsqueeze(1)
            labels = rows[used]
        else:
            _need(
                int(lengths.sum()) == targets.numel(),
                lambda: f"{op}: the target lengths add up to the {targets.numel()} targets",
            )
            labels = targets.to("cpu")
        _need(
            bool(((labels >= 0) & (labels < classes)).all()),
            lambda: f"{op}: every target label is a class index in [0, {classes})",
        )
        longest = int(lengths.max()) if lengths.numel() else 0
    _bytes_ok(op, 2 * batch * steps * (2 * longest + 1), log_probs.dtype)
    return torch._C._VariableFunctions.ctc_loss(*args, **kwargs)


CHECKED: dict[str, Callable] = {
    "embedding_bag": embedding_bag,
    "native_batch_norm": native_batch_norm,
    "_weight_norm": weight_norm,
    "group_norm": group_norm,
    "grid_sampler": grid_sampler,
    "_grouped_mm": grouped_mm,
    **{name: _rnn(name) for name in _GATES},
    "bincount": bincount,
    "one_hot": one_hot,
    "outer": outer,
    "kron": kron,
    "cartesian_prod": cartesian_prod,
    "diag_embed": diag_embed,
    "combinations": combinations,
    "_pad_circular": pad_circular,
    "pad": pad,
    **{name: _padding_op(name, int(name[-2])) for name in PADDING_OPS},
    **{name: _sectioned(name) for name in SECTIONED_OPS},
    "unbind": _counted("unbind"),
    "split": _counted("split"),
    "_native_multi_head_attention": native_multi_head_attention,
    "_transformer_encoder_layer_fwd": transformer_encoder_layer_fwd,
    "_pack_padded_sequence": pack_padded_sequence,
    "_pad_packed_sequence": pad_packed_sequence,
    "stft": stft,
    "istft": istft,
    "broadcast_tensors": broadcast_tensors,
    "ctc_loss": ctc_loss,
}


# --- sizes computed at the call ---------------------------------------------------------------
# Note: sizes written in the file are bounded at load (check/program.py); a size that is a
# value of the graph (``zeros(prim.item(t))``, ``x.expand(n, n)`` with ``n`` computed) is
# known only at the call. Nodes of these ops with such a size run through ``sized_guard``,
# which bounds the bytes (or, for views that expand, the elements a later op would make)
# before the op runs.
SIZED_OPS = frozenset(
    """
zeros ones full empty rand randn randint randperm eye Tensor.new_zeros Tensor.new_ones
Tensor.new_full Tensor.new_empty Tensor.repeat tile Tensor.expand broadcast_to arange
linspace logspace
hann_window hamming_window blackman_window bartlett_window kaiser_window
""".split()
)


def _ints_in(value) -> list[int]:
    if type(value) in _INT_SEQUENCES and all(type(x) is int for x in value):
        return list(value)  # the common case, sizes as literals and traced ints: no recursion
    if isinstance(value, (list, tuple, torch.Size)):
        return [i for x in value for i in _ints_in(x)]
    if _is_tensor(value):
        return _tensor_size(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return []


def _tensor_size(value: torch.Tensor) -> list[int]:
    """A tensor as PyTorch reads it among sizes: one element of an integer dtype, of any
    rank (``torch.zeros([torch.tensor([5]), 3])`` is 5 x 3; counting only 0-dim tensors
    let a one-element vector size an allocation unbounded). PyTorch refuses any other."""
    if value.numel() == 1 and not value.is_floating_point() and not value.is_complex():
        return [int(value)]
    return []


_INT_SEQUENCES = (list, tuple, torch.Size)


def _flat_ints(value) -> list[int]:
    """:func:`_ints_in`, without its recursion for the common flat sequence of ints and
    0-dim integer tensors (Longformer's ``new_zeros((n, m + 1, 2, 5))`` with ``n`` and
    ``m`` tensors: 4.3 us of checks per call before, torch 2.13, one thread)."""
    if type(value) not in _INT_SEQUENCES:
        return _ints_in(value)
    ints = []
    for x in value:
        if type(x) is int:
            ints.append(x)
        elif type(x) is torch.Tensor and x.dim() == 0 and not x.is_floating_point():
            ints.append(int(x))
        else:
            return _ints_in(value)
    return ints


def _range_number(x) -> float | None:
    """An argument of ``arange`` as the number PyTorch reads: bools are 0 and 1, and a
    0-dim tensor is its value (ignored, ``arange(torch.tensor(2**40))`` was unbounded)."""
    if isinstance(x, (int, float)):
        return float(x)
    if _is_tensor(x) and x.dim() == 0 and not x.is_complex():
        return float(x)
    return None


_RANGE_KEYWORDS = frozenset({"start", "end", "step"})


def _range_numel(args: Sequence, kwargs: dict) -> int:
    # The common call first, ``arange(n)`` or ``arange(a, b)`` with ints (positions, masks):
    # the general reading below cost 1.6 us, as much as the kernel.
    if len(args) <= 2 and (not kwargs or _RANGE_KEYWORDS.isdisjoint(kwargs)):
        if len(args) == 1 and type(args[0]) is int:
            return max(args[0], 0)
        if len(args) == 2 and type(args[0]) is int and type(args[1]) is int:
            return max(args[1] - args[0], 0)
    numbers = [n for n in map(_range_number, args) if n is not None]
    start, end, step = 0.0, numbers[0] if numbers else 0.0, 1.0
    if len(numbers) == 1 and "end" in kwargs:
        start = numbers[0]  # ``arange(2, end=7)``: the one number given is the start
    if len(numbers) >= 2:
        start, end = numbers[:2]
        step = numbers[2] if len(numbers) > 2 else 1.0
    start, end, step = (
        _range_number(kwargs.get(k, v)) for k, v in (("start", start), ("end", end), ("step", step))
    )
    if start is None or end is None or step is None:
        return 0  # not a number: PyTorch refuses it itself
    if step == 0 or not all(map(math.isfinite, (start, end, step))):
        return 0  # PyTorch refuses these itself
    return max(math.ceil((end - start) / step), 0)


def sized_guard(
    op: str, fn: Callable, positions: Sequence[int], keys: Sequence[str], spread: int | None
) -> Callable:
    """``fn`` preceded by a check that the sizes given at positions ``positions`` (every
    position from ``spread`` on, when sizes may be spread: ``zeros(n, m)``) and keywords
    ``keys`` of a call ask for at most ``ALLOC_BYTES``. ``Tensor.repeat`` and
    ``tile`` multiply their input's elements; ``arange``'s size is its range's length;
    ``linspace``/``logspace`` take their ``steps``."""

    start = spread if spread is not None else 1 << 30
    # The positions below ``start`` that hold sizes, in order (a call reads only these).
    fixed = sorted(p for p in set(positions) if p < start)
    expands = op in ("Tensor.expand", "broadcast_to")
    repeats = op in ("Tensor.repeat", "tile")

    def sizes_of(args: tuple, kwargs: dict) -> tuple:
        given = args[start:]
        if fixed:
            given = (*(args[i] for i in fixed if i < len(args)), *given)
        if kwargs and keys:
            given = (*given, *(kwargs[key] for key in keys if key in kwargs))
        return given

    def run(*args, **kwargs):
        if op == "arange":
            numel = _range_numel(args, kwargs)
        else:
            numel = 1
            for a in sizes_of(args, kwargs):
                for w in (a,) if type(a) is int else _flat_ints(a):
                    numel *= w if w > 0 else 0
            if repeats and args and _is_tensor(args[0]):
                numel *= args[0].numel()
            if op == "eye" and len(sizes_of(args, kwargs)) == 1:
                numel *= numel  # eye(n) is n x n
        # The widest element a call can ask for is 16 bytes (complex128): only a count
        # past the limit at that width needs the dtype. A symbolic count under
        # torch.export is not checked: the check would bound the size in the exported
        # program (an ONNX file then fixes the batch: _symbolic_under_export).
        if numel * 16 > ALLOC_BYTES if type(numel) is int else _checked_symbolic(numel):
            dtype = kwargs.get("dtype")
            if not isinstance(dtype, torch.dtype):
                dtype = args[0].dtype if args and _is_tensor(args[0]) else torch.float64
            if numel * dtype.itemsize > ALLOC_BYTES:
                _bytes_ok(op, numel, dtype)
        return fn(*args, **kwargs)

    def run_view(*args, **kwargs):
        # An expand is a view: it allocates nothing, so the size it asks for is checked on
        # its result (one C call), before anything can materialise it. A size below -1
        # (-1 keeps the input's) reached the kernel: "numel: integer multiplication overflow".
        for a in sizes_of(args, kwargs):
            for w in (a,) if type(a) is int else _flat_ints(a):
                if w < -1:
                    raise ValueError(
                        f"{op}: size {w} is negative; a size is >= 0, or -1 to keep the "
                        "input's size"
                    )
        out = fn(*args, **kwargs)
        numel = out.numel()
        if numel * 16 > ALLOC_BYTES if type(numel) is int else _checked_symbolic(numel):
            _bytes_ok(op, numel, out.dtype)
        return out

    chosen = run_view if expands else run
    chosen.__name__ = f"sized_{op.replace('.', '_')}"
    return chosen
