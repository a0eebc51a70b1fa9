"""The Python half of the R front end.

The R package (``R/`` at the repository root) drives Python torch through reticulate.
This module holds the few helpers that are cheaper or safer to run on the Python side:
converting R arrays to tensors, indexing, formatting tensors the way mlverse torch prints
them, remembering the last exception so that R can turn it into a classed condition, and
:class:`RModule`, the ``torch.nn.Module`` that an R ``nn_module()`` instance lives in.

Note: sizes. While tracing, ``x.size(i)`` returns a traced integer (an ``int`` subclass).
reticulate would convert it to an R number and the trace would lose it. The helpers here
return sizes unconverted; the R side keeps anything that is not a plain ``int`` as a Python
object and hands it back to Python ops, and converts to R only through ``int()`` (which
the tracer records as a guard).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import operator
import warnings
from typing import Any

import numpy as np
import torch

from ..errors import TracerWarning
from ..trace.numbers import _Traced

_last_error: BaseException | None = None  # also set by the R package's src/call.c

_DTYPE_NAMES = {
    torch.float32: "Float",
    torch.float64: "Double",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int64: "Long",
    torch.int32: "Int",
    torch.int16: "Short",
    torch.int8: "Char",
    torch.uint8: "Byte",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}

BINARY_OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "^": operator.pow,
    "%%": operator.mod,
    "%/%": operator.floordiv,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
    "&": operator.and_,
    "|": operator.or_,
}


def call(fn, *args, **kwargs):
    """Call ``fn`` and remember an exception it raises, so R can classify it.

    >>> call(int, "3")
    3
    """
    global _last_error
    try:
        return fn(*args, **kwargs)
    except BaseException as e:
        _last_error = e
        raise


def as_function(fn):
    """``fn`` (an R function made callable) as a Python ``def`` function.

    torch's LambdaLR/MultiplicativeLR ``state_dict()`` keeps ``None`` for a
    function but copies ``__dict__`` of any other callable; the callable made
    in C (src/callback.c) is a builtin without one. As a function it is kept
    as reticulate's is.

    >>> import types
    >>> isinstance(as_function(abs), types.FunctionType), as_function(abs)(-2)
    (True, 2)
    """

    def call_r(*args, **kwargs):
        return fn(*args, **kwargs)

    return call_r


def same(x):
    """``x`` itself: R passes an object through here to have reticulate wrap it (with its
    class vector) after the C call path (R package, src/call.c) returned it.

    >>> same(3)
    3
    """
    return x


def take_last_error() -> BaseException | None:
    """Return and forget the exception remembered by :func:`call`."""
    global _last_error
    e, _last_error = _last_error, None
    return e


def error_info(e: BaseException) -> tuple[str, str, list[str]]:
    """(type name, message, class names of the MRO) of an exception, for R."""
    names = [k.__name__ for k in type(e).__mro__]
    return type(e).__name__, str(e), names


def error_info_by_name(name: str, message: str) -> tuple[str, str, list[str]]:
    """Like :func:`error_info` when R only knows the exception's type name and message
    (as reticulate reports them): tracebridge's own errors and Python's built-in ones are
    found by name, so their classes are those :func:`error_info` gives (the C call path of
    the R package reports the exception itself).

    >>> error_info_by_name("NotImplementedError", "no")[2][:2]
    ['NotImplementedError', 'RuntimeError']
    """
    import builtins
    import re

    from .. import errors

    short = name.rsplit(".", 1)[-1]  # reticulate may give "tracebridge.errors.GuardError"
    message = re.sub(rf"^(?:[\w.]*\.)?{re.escape(short)}: ", "", message.rstrip("\n"))
    cls = getattr(errors, short, None) or getattr(builtins, short, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return short, message, [k.__name__ for k in cls.__mro__]
    return short, message, [short]


def tensor_from_r(a, dtype=None, requires_grad: bool = False) -> torch.Tensor:
    """Make a tensor from an array that came from R (column-major, read-only).

    The shape and the meaning of each index are kept; the memory is copied into
    C order, which torch wants.

    >>> tensor_from_r(np.asfortranarray(np.arange(6.0).reshape(2, 3)))[1, 2].item()
    5.0
    """
    arr = np.ascontiguousarray(np.asarray(a))
    t = torch.from_numpy(arr.copy())
    if dtype is not None:
        t = t.to(dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor_to_r(t: torch.Tensor):
    """A NumPy array that reticulate turns into an R array of the same shape."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
        t = t.to(torch.float32)  # float16, bfloat16, the float8s: numpy lacks most; exact
    elif t.dtype == torch.complex32:
        t = t.to(torch.complex64)
    if t.dtype == torch.int64 and _fits_int32(t):
        # R has no 64-bit integers; as in mlverse torch, longs come back as integers.
        t = t.to(torch.int32)
    return t.numpy()


def _fits_int32(t: torch.Tensor) -> bool:
    if t.numel() == 0:
        return True
    return bool(t.min() > -(2**31)) and bool(t.max() < 2**31)


def sizes(t: torch.Tensor) -> list:
    """The sizes of ``t`` as a list; traced integers stay as they are."""
    return list(t.shape)


def plain_sizes(t: torch.Tensor) -> list[int]:
    """The sizes of ``t`` as plain ints (each read records a guard while tracing)."""
    return [int(s) for s in t.shape]


# The same operators with the operands swapped: ``2.5 - n`` is ``n.__rsub__(2.5)``.
_REFLECTED = {
    "+": "__radd__",
    "-": "__rsub__",
    "*": "__rmul__",
    "/": "__rtruediv__",
    "^": "__rpow__",
    "%%": "__rmod__",
    "%/%": "__rfloordiv__",
    "==": "__eq__",
    "!=": "__ne__",
    "<": "__gt__",
    ">": "__lt__",
    "<=": "__ge__",
    ">=": "__le__",
}


def binary(op: str, a, b):
    """Apply the R operator ``op`` (as named by R's ``Ops`` group).

    A plain float on the left of a traced size is handed to the size: Python would run
    ``float.__sub__`` first, which reads the int's value without asking it, and the
    result (``-log(10000) / d``) would be the example's number with no guard
    (docs/divergence.md).
    """
    reflected = _REFLECTED.get(op)
    if reflected and isinstance(a, float) and not isinstance(a, _Traced) and isinstance(b, _Traced):
        result = getattr(b, reflected)(a)
        if result is not NotImplemented:
            return result
    return BINARY_OPS[op](a, b)


# R's Math group on a traced size: the math functions the tracer records (trace/patches.py),
# looked up when called so that the traced versions answer while a trace runs.
R_MATH = {
    "sqrt": "sqrt",
    "exp": "exp",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "floor": "floor",
    "ceiling": "ceil",
    "trunc": "trunc",
}


def r_math(name: str, v):
    """``name(v)`` for R's Math group: recorded where the tracer records it, else the
    value is read (a guard) and R's own function applies."""
    if name == "abs":
        return abs(v)
    return getattr(math, R_MATH[name])(v)


def concrete(v):
    """The plain number of a traced one, read without a guard: for a traced size that R
    code kept after its trace ended (in a global, on a module), where no trace records it.
    """
    return v._concrete() if isinstance(v, _Traced) else v


def to_int(v) -> int:
    """``int(v)``: a traced integer records a guard."""
    return int(v)


def index(t: torch.Tensor, spec: list, setvalue=None, set_: bool = False):
    """Index ``t`` with an R-style spec, already made 0-based by R.

    Each entry is ``None`` (everything), an ``int``, ``("range", start, stop)`` (a
    contiguous slice), a list of ints, or a tensor (an index or a mask).
    """
    key = tuple(_index_key(s) for s in spec)
    if set_:
        t[key] = setvalue
        return t
    return t[key]


def positions(values: list) -> torch.Tensor:
    """0-based positions from R (``x[c(1, 3), ]``) as an index tensor, made by
    ``torch.tensor`` of a list so that a trace records them as the literal they are. The
    tracer's warning about tensors of Python data is for data the code computed; positions
    written in R code are what Python's ``x[[0, 2]]`` is, which gets no warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"torch\.tensor\(\.\.\.\) of Python data", TracerWarning)
        return torch.tensor(values, dtype=torch.int64)


def _index_key(s):
    if s is None:
        return slice(None)
    if isinstance(s, tuple) and len(s) == 3 and s[0] == "range":
        return slice(s[1], s[2])
    if isinstance(s, list):
        return torch.tensor(s, dtype=torch.int64)
    return s


def dict_items(d: dict) -> tuple[list[str], list]:
    """The keys (as strings) and the values of a dict, for R's named lists."""
    return [str(k) for k in d], list(d.values())


def record_fields(x: Any) -> tuple[list[str], list] | None:
    """The field names and values of a dataclass instance or a named tuple (what a traced
    module may return), for R's named lists; None for anything else. The values are the
    objects themselves (``dataclasses.asdict()`` would deep-copy tensors), converted by R.

    >>> import collections
    >>> record_fields(collections.namedtuple("P", "a b")(1, 2))
    (['a', 'b'], [1, 2])
    >>> record_fields((1, 2)) is None
    True
    """
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = [f.name for f in dataclasses.fields(x)]
        return names, [getattr(x, n) for n in names]
    if isinstance(x, tuple) and hasattr(type(x), "_fields"):
        return [str(n) for n in type(x)._fields], list(x)
    return None


def named_tensors(pairs) -> tuple[list[str], list[torch.Tensor]]:
    """Split ``named_parameters()``-style pairs into names and tensors."""
    names, values = [], []
    for name, value in pairs:
        names.append(name)
        values.append(value)
    return names, values


def type_string(t: torch.Tensor) -> str:
    """``CPUFloatType{2,3}``: the footer that mlverse torch prints."""
    device = t.device.type.upper()
    kind = _DTYPE_NAMES.get(t.dtype, str(t.dtype).replace("torch.", ""))
    dims = ",".join(str(int(s)) for s in t.shape)
    return f"{device}{kind}Type{{{dims}}}"


def format_tensor(t: torch.Tensor) -> str:
    """Format a tensor the way mlverse torch (libtorch) prints it.

    >>> print(format_tensor(torch.tensor([0.0, 0.0, 1.0])))
    torch_tensor
     0
     0
     1
    [ CPUFloatType{3} ]
    """
    t = t.detach()
    lines = ["torch_tensor"]
    if t.numel() == 0:
        lines.append(f"[ {type_string(t)} ]")
    elif t.dim() == 0:
        lines.append(_format_values(t.reshape(1))[0].strip())
        lines.append(f"[ {type_string(t)} ]")
    else:
        lines.extend(_format_block(t))
        lines.append(f"[ {type_string(t)} ]")
    suffix = ""
    if t.requires_grad or (t.grad_fn is not None):
        suffix = "[ requires_grad = TRUE ]"
    if suffix:
        lines[-1] = lines[-1] + suffix
    return "\n".join(lines)


def _format_values(flat: torch.Tensor) -> list[str]:
    """Format a 1-d tensor's values with one shared width, as libtorch does."""
    flat = flat.cpu()
    if flat.dtype == torch.bool:
        strs = ["1" if v else "0" for v in flat.tolist()]
    elif flat.dtype.is_floating_point:
        vals = flat.to(torch.float64)
        finite = vals[torch.isfinite(vals)]
        if finite.numel() == 0 or bool((finite == finite.round()).all()):
            big = finite.numel() > 0 and float(finite.abs().max()) >= 1e8
            fmt = "{:.4e}" if big else "{:.0f}"
        else:
            amax = float(finite.abs().max())
            nz = finite[finite != 0]
            amin = float(nz.abs().min()) if nz.numel() else 0.0
            fmt = "{:.4e}" if amax >= 1e5 or (amin and amin < 1e-4) else "{:.4f}"
        strs = [_fmt_float(fmt, v) for v in vals.tolist()]
    else:
        strs = [str(v) for v in flat.tolist()]
    width = max(len(s) for s in strs)
    return [" " + s.rjust(width) for s in strs]


def _fmt_float(fmt: str, v: float) -> str:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return fmt.format(v)


def _format_block(t: torch.Tensor) -> list[str]:
    cells = _format_values(t.reshape(-1))
    if t.dim() == 1:
        return cells
    nrow, ncol = t.shape[-2], t.shape[-1]
    if t.dim() == 2:
        return _rows(cells, nrow, ncol)
    lines: list[str] = []
    lead = list(t.shape[:-2])
    for k in range(len(cells) // (nrow * ncol)):
        idx, rem = [], k
        for s in reversed(lead):
            idx.append(rem % s)
            rem //= s
        label = ",".join(str(i + 1) for i in reversed(idx))
        if lines:
            lines.append("")
        lines.append(f"({label},.,.) = ")
        lines.extend(_rows(cells[k * nrow * ncol : (k + 1) * nrow * ncol], nrow, ncol))
    return lines


def _rows(cells: list[str], nrow: int, ncol: int) -> list[str]:
    return ["".join(cells[r * ncol : (r + 1) * ncol]) for r in range(nrow)]


class RModule(torch.nn.Module):
    """A ``torch.nn.Module`` whose ``forward`` is an R function.

    R's ``nn_module()`` makes one per instance and registers the R children, parameters
    and buffers on it under their R names, so ``named_parameters()`` gives ``fc1.weight``
    and the tracer binds them by path.
    """

    def __init__(self, classname: str = "RModule"):
        super().__init__()
        self._r_classname = classname
        self._r_forward = None

    def _get_name(self) -> str:
        return self._r_classname

    def forward(self, *args: Any) -> Any:
        if self._r_forward is None:
            raise RuntimeError(f"R module {self._r_classname} has no forward method")
        return self._r_forward(*args)


def tensor_method_names() -> list[str]:
    """Public method names of ``torch.Tensor``, for R's completion of ``x$``."""
    return sorted(n for n in dir(torch.Tensor) if not n.startswith("_"))


def has_state(module: torch.nn.Module, name: str) -> bool:
    """Whether ``name`` is a registered parameter or buffer of ``module``."""
    return name in module._parameters or name in module._buffers


def count_parameters(module: torch.nn.Module) -> int:
    """The number of parameter elements of ``module``."""
    return sum(p.numel() for p in module.parameters())


def kind(obj) -> str:
    """``"module"`` for a traced module, ``"function"`` otherwise."""
    return "module" if isinstance(obj, torch.nn.Module) else "function"


def call_recording_warnings(fn, *args, **kwargs):
    """Like :func:`call`, and return ``(result, [warning messages])`` so R can re-issue
    the warnings as R warnings (tracebridge's TracerWarning among them)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call(fn, *args, **kwargs)
    messages = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result, messages


def state_names(module: torch.nn.Module, what: str) -> tuple[list[str], list]:
    """Names and tensors of ``named_parameters()`` or ``named_buffers()``."""
    pairs = module.named_parameters() if what == "parameters" else module.named_buffers()
    return named_tensors(pairs)


_module_classes: dict[tuple[str, tuple[str, ...]], type] = {}


def _signature(names: list[str], with_self: bool) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(n, kind) for n in (["self"] if with_self else []) + names]
    return inspect.Signature(params)


def call_names(graph) -> tuple[list[str], list[str]]:
    """The names R binds a call's named arguments by, for a traced graph: those of the
    input leaves of its positional arguments (in order), and the keyword arguments it was
    traced with (in the traced order), which R passes on as keywords."""
    from ..ir import pytree

    positional = pytree.count_leaves(graph.in_spec["c"][0]) if graph.in_spec else 0
    names = [v.name or "" for v in graph.inputs[:positional]]
    return names, [str(k) for k in graph.in_spec["c"][1]["keys"]] if graph.in_spec else []


def new_module(classname: str, arg_names: list[str] | None = None) -> RModule:
    """A new :class:`RModule` whose Python class is named after the R class, so that
    printed modules and the artifact's module classes read ``Net``, not ``RModule``;
    ``arg_names`` (the R forward's arguments) name the traced graph's inputs."""
    names = tuple(n for n in (arg_names or []) if n.isidentifier())
    key = (classname, names)
    cls = _module_classes.get(key)
    if cls is None:
        body: dict[str, Any] = {"__module__": "tracebridge.rbridge"}
        if names:

            def forward(self, *args):
                return RModule.forward(self, *args)

            forward.__signature__ = _signature(list(names), with_self=True)
            body["forward"] = forward
        cls = type(classname, (RModule,), body)
        _module_classes[key] = cls
    return cls(classname)


def set_name(fn, name: str, arg_names: list[str] | None = None):
    """Give a callback the R function's name and arguments, which name the traced graph
    and its inputs."""
    if name.isidentifier():
        fn.__name__ = name
    if arg_names and all(n.isidentifier() for n in arg_names):
        fn.__signature__ = _signature(list(arg_names), with_self=False)
    return fn


def set_location(location: str) -> None:
    """R reports the ``file:line`` of the R code running an op while tracing."""
    from ..source import set_foreign_location

    set_foreign_location(location)


def register_source(filename: str, lines: list[str]) -> None:
    """Give Python the lines of R code that has no file (an R function parsed again from
    its deparsed text, named ``<R function NAME>``), so that graph nodes and guard messages
    quote the R line, as they do for code in files."""
    import linecache

    if isinstance(lines, str):
        lines = [lines]
    text = [line + "\n" for line in lines]
    # An entry without a modification time is never checked against the disk.
    linecache.cache[filename] = (sum(len(t) for t in text), None, text, filename)


def to_float(v) -> float:
    """``float(v)``: a traced number records a guard."""
    return float(v)


def autograd_function(forward, backward):
    """``apply`` of a ``torch.autograd.Function`` whose ``forward(ctx, *args)`` and
    ``backward(ctx, *grads)`` are R functions (R's ``autograd_function()``).

    ``forward`` returns a tensor or a list of them (a tuple here); ``backward`` returns
    one gradient (or ``None``) per input of ``forward``, in order.

    >>> def forward(ctx, x):
    ...     save_for_backward(ctx, ["x"], [x])
    ...     return x * x
    >>> def backward(ctx, g):
    ...     return [2 * saved_variables(ctx)["x"] * g]
    >>> x = torch.tensor([3.0], requires_grad=True)
    >>> autograd_function(forward, backward)(x).backward()
    >>> x.grad
    tensor([6.])
    """

    class RFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            out = forward(ctx, *args)
            return tuple(out) if isinstance(out, list) else out

        @staticmethod
        def backward(ctx, *grads):
            out = backward(ctx, *grads)
            return tuple(out) if isinstance(out, (list, tuple)) else out

    # Named as R knows it, in graphs and in the tracer's messages (R/conditions.R).
    RFunction.__module__ = "R"
    RFunction.__name__ = RFunction.__qualname__ = "autograd_function"

    # Looked up on each call, not bound now: while tracing, torch.autograd.Function.apply
    # is the tracer's, which records the function as one node with its own backward.
    def apply(*args):
        return RFunction.apply(*args)

    return apply


def save_for_backward(ctx, names: list[str], values: list) -> None:
    """Keep R's ``ctx$save_for_backward(name = value, ...)`` on ``ctx``: tensors through
    ``ctx.save_for_backward`` (so autograd checks they were not changed in place), the
    other values as they are."""
    if isinstance(names, str):
        names = [names]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    ctx.save_for_backward(*tensors)
    ctx.r_saved = [
        (n, isinstance(v, torch.Tensor), None if isinstance(v, torch.Tensor) else v)
        for n, v in zip(names, values)
    ]


def saved_variables(ctx) -> dict:
    """What :func:`save_for_backward` kept, by name (tensors as ``ctx.saved_tensors``)."""
    tensors = iter(ctx.saved_tensors)
    return {n: next(tensors) if is_tensor else v for n, is_tensor, v in getattr(ctx, "r_saved", [])}


def r_positions(t: torch.Tensor) -> torch.Tensor:
    """R's 1-based positions in an integer tensor as torch's 0-based ones: ``n > 0`` is
    ``n - 1``, a negative one counts from the end as it does in R's ``x[-1]`` and in
    torch (-1 the last), and 0, which names no position, becomes one no dimension has
    (``not_a_position``), so the op that uses it fails instead of reading the last element.
    Tensor ops only, so that a trace records them and they run again on every call.

    >>> r_positions(torch.tensor([1, 3, -1])).tolist()
    [0, 2, -1]
    >>> r_positions(torch.tensor([0]))[0].item() == not_a_position(torch.int64)
    True
    """
    shifted = torch.where(t > 0, t - 1, t)
    if t.dtype not in (torch.int64, torch.int32):  # too narrow for a position none has
        return shifted
    return shifted.masked_fill(t == 0, not_a_position(t.dtype))


def select_positions(t: torch.Tensor, dim: int, positions: torch.Tensor) -> torch.Tensor:
    """``t.index_select(dim, positions)`` where ``positions`` came from :func:`r_positions`:
    a negative entry counts from the end (-1 the last), as it does when writing
    (``x[i] <- v``), which ``index_select`` refuses. Read as ``t[:, ..., positions]`` (one
    op, as fast as ``index_select``, recorded as such while tracing, so a trace holds for
    any position); one past the start and 0's ``not_a_position`` still fail in the op.

    >>> select_positions(torch.tensor([10, 20, 30]), 0, torch.tensor([-1, 0])).tolist()
    [30, 10]
    >>> select_positions(torch.arange(6).reshape(2, 3), 1, torch.tensor([-1])).tolist()
    [[2], [5]]
    """
    if positions.dtype not in (torch.int64, torch.int32):  # uint8 would read as a mask
        return t.index_select(dim, positions)
    try:
        return t[(slice(None),) * dim + (positions,)]
    except IndexError:
        # torch names the index's own dimension (0): say which of `t`'s it is.
        size = t.size(dim)
        bad = positions[(positions >= size) | (positions < -size)]
        if bad.numel() == 0:
            raise
        raise IndexError(
            f"index {int(bad[0])} is out of bounds for dimension {dim} with size {size}"
        ) from None


def not_a_position(dtype: torch.dtype) -> int:
    """The position that 0 becomes in :func:`r_positions` for int64 and int32 (R's
    messages name it 0)."""
    return torch.iinfo(dtype).min // 2


def take_along_positions(t: torch.Tensor, indices: torch.Tensor, dim=None) -> torch.Tensor:
    """``torch.take_along_dim(t, indices, dim)`` of positions :func:`r_positions` shifted,
    an index past the dimension refused. With a ``dim``, torch (2.13) reads each index
    modulo the dimension's size (4 of a size 4 is the first, and so is 0's
    :func:`not_a_position`): R's 0 or a position past the end read an element silently.
    A ``gather`` of the indices from a view of zeros with ``t``'s size along ``dim``
    (nothing allocated but the indices' copy) refuses them first, as ``gather`` does,
    naming the dimension; the result is then torch's own. Tensor ops only, so that a
    trace records the check and it runs on every call.

    >>> x = torch.tensor([[10, 20, 30]])
    >>> take_along_positions(x, torch.tensor([[2, -1]]), 1).tolist()
    [[30, 30]]
    """
    if dim is None or indices.dim() != t.dim() or indices.dtype != torch.int64:
        return torch.take_along_dim(t, indices, dim)  # checked by torch (or refused)
    at = dim + t.dim() if dim < 0 else dim
    if not 0 <= at < t.dim():
        return torch.take_along_dim(t, indices, dim)  # torch's own error
    size = t.size(at)
    within = (indices < 0) & (indices >= -size)
    wrapped = torch.where(within, indices + size, indices)
    zeros = indices.new_zeros(()).expand(*indices.shape[:at], size, *indices.shape[at + 1 :])
    # + its zeros: the check is read by the result, so that a trace keeps it (exact ints).
    return torch.take_along_dim(t, indices + zeros.gather(at, wrapped), dim)
