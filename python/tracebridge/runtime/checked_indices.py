"""Checked implementations of the ops that read or write at index values a tensor holds.

Note: why, and where. Every op of the op set that takes index values (``gather``, the
``scatter`` and ``index_*`` families, ``take``/``put``, ``embedding``, ``index_put`` and
``getitem``/``setitem`` with tensor indices, the class targets of ``nll_loss``, ...) has
a CPU kernel that checks each value before it reads or writes, and raises (``IndexError``
or ``RuntimeError``, which the runtime reports as the node's error; each probed, torch
2.13). Their CUDA kernels check on the device instead: an index out of range there is a
device-side assert, which leaves the process's CUDA context unusable (every later CUDA
call of the process fails) -- a file, or a caller's input, would take down every model
the process serves. So where the tensor indexed is on a device other than the CPU (or
``meta``, which holds no values), the values are checked here before the kernel: one
reduction (``aminmax``) and one synchronisation per index tensor, a ``CheckFailed`` (an
``OpError`` naming the node) for a value out of range. On the CPU the kernel's own check
runs, and the wrapper costs one test of the device (``Tensor.is_cpu``).

The ranges are the CPU kernels' ones, so that a file behaves alike on every device:
``[0, size)`` along the op's dimension for ``gather``, ``scatter*``, ``index_select``,
``index_add``, ``index_copy``, ``index_reduce``, ``embedding`` and ``embedding_bag`` (the
weight's rows), ``take_along_dim`` without a dimension (the flattened input); ``[-size,
size)`` for ``index_fill`` and each tensor index of ``index_put``/``getitem``/``setitem``;
``[-numel, numel)`` for ``take`` and ``put``; ``[0, classes)`` or ``ignore_index`` for the
targets of ``nll_loss``/``cross_entropy_loss``; ``[0, num_classes)`` for ``one_hot``;
``[0, plane)`` for ``max_unpool*``'s indices; ``[0, length)`` for ``searchsorted``'s
``sorter``; and ``masked_scatter`` takes at least as many source elements as the mask
chooses. ``take_along_dim`` with a dimension wraps its indices into range (torch 2.13),
as ``embedding_renorm_`` is checked on every device (runtime/checked_numeric.py).

Dtypes: the range of an integer index tensor is checked (any integer width). An index of
another dtype (a float, a bool or ``uint8`` mask) is the kernel's to refuse or to read as
a mask, which it does on the host before anything runs on the device, as it does shapes
that do not fit and dimensions out of range.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ir import ops as opset
from .checked_ops import CheckFailed, _is_tensor, _need

__all__ = ["CHECKED", "CHECK_ON_CPU", "CheckFailed"]

# Whether the values are checked here on the CPU too (tests set it, to run these checks
# where no CUDA device is; the CPU kernels check the same ranges themselves).
CHECK_ON_CPU = False

_INTEGERS = frozenset(
    {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}
    | {getattr(torch, f"uint{b}") for b in (16, 32, 64) if hasattr(torch, f"uint{b}")}
)

_VF = torch._C._VariableFunctions


def _device_checks(t) -> bool:
    """Whether nothing is to be checked here for ``t``: the kernels of its device check
    index values themselves (the CPU's, unless :data:`CHECK_ON_CPU`), or it holds no values
    (``meta``; a fake tensor while ``torch.compile``, ``torch.export`` or ONNX export
    trace a GraphModule of the program, export/fx.py, whose kernels are torch's to check).
    ``is_cpu`` first: it costs a tenth of ``device.type``."""
    if not isinstance(t, torch.Tensor) or t.is_meta or (t.is_cpu and not CHECK_ON_CPU):
        return True
    return _traced(t)


def _traced(t: torch.Tensor) -> bool:
    """Whether ``t`` is a stand-in of a tracer (values unknown) rather than data."""
    from torch._subclasses.fake_tensor import is_fake

    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or is_fake(t)


def _range_ok(op: str, on, what: str, index, low: int, high: int | None, allow=None) -> None:
    """Every value of the integer tensor (or list of ints) ``index`` lies in ``[low,
    high)`` (``high`` None: no upper bound), or equals ``allow``; ``on``: the tensor
    indexed (its device is named in the error)."""
    if isinstance(index, (list, tuple)):
        values = [v for v in _flat(index) if type(v) is int]
        if not values:
            return
        least, most = min(values), max(values)
    elif _is_tensor(index) and index.dtype in _INTEGERS and index.numel():
        found = torch.aminmax(index.detach().reshape(-1))
        least, most = torch.stack(found).tolist()  # one synchronisation
    else:
        return
    if least >= low and (high is None or most < high):
        return
    if allow is not None and _is_tensor(index):
        outside = (index < low) if high is None else (index < low) | (index >= high)
        outside &= index != allow
        if not bool(outside.any()):
            return
        least = most = int(index[outside].reshape(-1)[0])
    bad = least if least < low else most
    span = f"[{low}, {high})" if high is not None else f"[{low}, ...)"
    extra = f" (or {allow})" if allow is not None else ""
    raise CheckFailed(
        f"{op}: {what} holds {bad}, outside {span}{extra}; refused before the kernel runs "
        f"(on {on.device.type}, its kernel checks on the device: a device-side assert that "
        "ends the process's use of the device): pass indices within the size"
    )


def _flat(seq):
    for item in seq:
        if isinstance(item, (list, tuple)):
            yield from _flat(item)
        else:
            yield item


def _arg(args: tuple, kwargs: dict, position: int, name: str, default=None):
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def _size(t, dim) -> int:
    """``t.size(dim)``, a 0-d tensor's one element counted as a dimension of size 1 (a
    dimension out of range is the kernel's error)."""
    if t.dim() == 0:
        return 1
    try:
        return t.size(dim)
    except (IndexError, RuntimeError, TypeError):
        return -1  # no check here: the kernel refuses the dimension on the host


def _checked(op: str, check: Callable[[torch.Tensor, tuple, dict], None]) -> Callable:
    """``op``'s kernel, called after ``check(this, args, kwargs)`` where the kernel of the
    device of ``this`` (the op's first argument, ``self`` or ``input``) checks index
    values on the device (:func:`_device_checks`): the front every op made below shares.
    On the CPU the kernel is called at once; a torch.fx stand-in records the call."""
    kernel = _kernel(op)

    def checked(*args, **kwargs):
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.is_cpu and not CHECK_ON_CPU:
            return kernel(*args, **kwargs)  # the CPU kernel checks
        if _stand_in(first):
            return _as_node(checked, *args, **kwargs)
        this = _arg(args, kwargs, 0, "self", _arg(args, kwargs, 0, "input"))
        if not _device_checks(this):
            check(this, args, kwargs)
        return kernel(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = f"checked_{op.replace('.', '_')}"
    checked.cpu_kernel = kernel  # what a plain CPU tensor first runs (codegen, inline)
    return checked


def _along_dim(op: str, low_is_negative: bool, index_at: int = 2) -> Callable:
    """``op(self, dim, index, ...)``: ``index`` within ``self``'s size along ``dim``
    (``[0, n)``, or ``[-n, n)`` where ``low_is_negative``)."""

    def check(this, args, kwargs):
        dim = _arg(args, kwargs, 1, "dim")
        index = _arg(args, kwargs, index_at, "index")
        n = _size(this, dim) if isinstance(dim, int) else -1
        if n >= 0:
            low = -n if low_is_negative else 0
            _range_ok(op, this, f"index (dimension {dim} of size {n})", index, low, n)

    return _checked(op, check)


def _kernel(op: str) -> Callable:
    return opset.impl_of(op)


def _flat_indices(op: str) -> Callable:
    """``take(self, index)`` and ``put(self, index, source, accumulate)``: ``index`` into
    the flattened ``self``, ``[-numel, numel)``."""

    def check(this, args, kwargs):
        n = this.numel()
        _range_ok(op, this, f"index (into {n} elements)", _arg(args, kwargs, 1, "index"), -n, n)

    return _checked(op, check)


def take_along_dim(input, indices, dim=None):
    """``torch.take_along_dim``: without ``dim``, ``indices`` into the flattened input,
    ``[0, numel)`` (with one, torch wraps each index into range)."""
    if dim is None and not _device_checks(input):
        n = input.numel()
        _range_ok("take_along_dim", input, f"indices (into {n} elements)", indices, 0, n)
    return _VF.take_along_dim(input, indices, dim)


def embedding(weight, indices, *args, **kwargs):
    """``torch.embedding``: ``indices`` within the weight's rows, ``[0, rows)``."""
    if isinstance(weight, torch.Tensor) and weight.is_cpu and not CHECK_ON_CPU:
        return _VF.embedding(weight, indices, *args, **kwargs)  # the CPU kernel checks
    if not _device_checks(weight) and _is_tensor(weight) and weight.dim():
        rows = weight.size(0)
        _range_ok("embedding", weight, f"indices (rows of a weight of {rows})", indices, 0, rows)
    return _VF.embedding(weight, indices, *args, **kwargs)


def embedding_bag_indices(weight, indices) -> None:
    """``embedding_bag``'s ``indices`` within the weight's rows (checked_ops.embedding_bag
    calls this before its kernel)."""
    if not _device_checks(weight) and _is_tensor(weight) and weight.dim():
        rows = weight.size(0)
        what = f"indices (rows of a weight of {rows})"
        _range_ok("embedding_bag", weight, what, indices, 0, rows)


def one_hot_values(input, num_classes) -> None:
    """``one_hot``'s classes: ``[0, num_classes)`` (``num_classes`` -1: not negative); on
    CUDA torch leaves both to the device-side assert of its scatter."""
    if not _device_checks(input):
        high = num_classes if isinstance(num_classes, int) and num_classes > 0 else None
        _range_ok("one_hot", input, "input (class values)", input, 0, high)


def _dims_of_index(x, items) -> list[tuple[object, int]]:
    """``(tensor index, size of the dimension it indexes)`` for each integer tensor (or
    list of ints) among ``items``, an index of ``x`` as ``Tensor.__getitem__`` parses it
    (torch/csrc/autograd/python_variable_indexing.cpp): an int, a slice or an integer
    tensor takes one dimension, ``None`` and a bool none, a bool or uint8 mask as many as
    it has, an ellipsis the ones the rest leave. An index the kernel refuses on the host
    (more dimensions than ``x`` has) is left to it."""

    def takes(item) -> int:
        if item is None or item is Ellipsis or type(item) is bool:
            return 0
        if _is_tensor(item) and item.dtype in (torch.bool, torch.uint8):
            return item.dim()
        return 1

    rank = x.dim()
    named = sum(takes(item) for item in items)
    found, at = [], 0
    for item in items:
        if item is Ellipsis:
            at += max(rank - named, 0)
            continue
        width = takes(item)
        is_index = isinstance(item, (list, tuple)) or (
            _is_tensor(item) and item.dtype not in (torch.bool, torch.uint8)
        )
        if is_index and at < rank:
            found.append((item, x.size(at)))
        at += width
    return found


def _index_items(index) -> tuple:
    """The items of a ``getitem``/``setitem`` index: a tuple's items; a list is one index,
    unless it holds tensors, sequences, slices, ``None`` or an ellipsis (then torch reads
    it as a tuple: ``treatSequenceAsTuple``); anything else is one item."""
    if type(index) is tuple:
        return index
    if (
        isinstance(index, list)
        and len(index) < 32
        and any(
            _is_tensor(i) or isinstance(i, (list, tuple, slice)) or i is None or i is Ellipsis
            for i in index
        )
    ):
        return tuple(index)
    return (index,)


# The kernel each of these runs at once where its first argument is a tensor on the CPU and
# CHECK_ON_CPU is off: the generated code tests that inline and calls it, without the
# function's frame (runtime/codegen.py, ``CodeGen.cpu_first``).
embedding.cpu_kernel = _VF.embedding


def _advanced_ok(op: str, x, items) -> None:
    for item, n in _dims_of_index(x, items):
        _range_ok(op, x, f"a tensor index (a dimension of size {n})", item, -n, n)


_GETITEM = torch.Tensor.__getitem__
_SETITEM = torch.Tensor.__setitem__


def getitem(x, index):
    """``x[index]``: each tensor index within ``[-n, n)`` of the dimension it indexes."""
    if isinstance(x, torch.Tensor):
        if x.is_cpu and not CHECK_ON_CPU:
            return _GETITEM(x, index)  # the CPU kernel checks
    elif _stand_in(x):
        return _as_node(getitem, x, index)
    if not _device_checks(x) and type(index) is not int and type(index) is not slice:
        _advanced_ok("getitem", x, _index_items(index))
    return _GETITEM(x, index)


getitem.cpu_kernel = _GETITEM


def setitem(x, index, value):
    """``x[index] = value``: as :func:`getitem`."""
    if _stand_in(x):
        return _as_node(setitem, x, index, value)
    if not _device_checks(x) and type(index) is not int and type(index) is not slice:
        _advanced_ok("setitem", x, _index_items(index))
    return _SETITEM(x, index, value)


setitem.cpu_kernel = _SETITEM


def _stand_in(x) -> bool:
    """Whether ``x`` is a torch.fx tracer's stand-in for a tensor (a ``Proxy``: a
    GraphModule of the program traced again, by its unpickling or ``symbolic_trace``)."""
    return not isinstance(x, torch.Tensor) and hasattr(x, "tracer")


def _as_node(function, x, *args, **kwargs):
    """The call of ``function`` on the stand-in ``x`` as a node of the graph its tracer
    traces, so that the new graph keeps the check (the kernel alone would be recorded,
    and the indexing slots take only tensors)."""
    return x.tracer.create_proxy("call_function", function, (x, *args), kwargs)


def _index_put(op: str) -> Callable:
    def check(this, args, kwargs):
        indices = _arg(args, kwargs, 1, "indices")
        if isinstance(indices, (list, tuple)):
            # None takes a dimension here (index_put's list has no None-as-new-axis)
            _advanced_ok(op, this, [slice(None) if i is None else i for i in indices])

    return _checked(op, check)


def _class_targets(op: str, ignore_at: int) -> Callable:
    """``nll_loss``-like ops: a class-index target within ``[0, classes)`` or equal to
    ``ignore_index`` (default -100); a floating target (probabilities) has no index."""

    def check(this, args, kwargs):
        if _is_tensor(this) and this.dim():
            target = _arg(args, kwargs, 1, "target")
            ignore = _arg(args, kwargs, ignore_at, "ignore_index", -100)
            classes = this.size(1) if this.dim() >= 2 else this.size(0)
            if isinstance(ignore, int):
                what = f"target (class indices of {classes})"
                _range_ok(op, this, what, target, 0, classes, ignore)

    return _checked(op, check)


def _unpool(op: str, planes: int) -> Callable:
    """``max_unpool2d``/``3d``: each index within its output plane (the product of
    ``output_size``)."""

    def check(this, args, kwargs):
        size = _arg(args, kwargs, 2, "output_size")
        if isinstance(size, (list, tuple)) and len(size) == planes:
            plane = 1
            for s in size:
                plane *= int(s)
            what = f"indices (into an output plane of {plane})"
            _range_ok(op, this, what, _arg(args, kwargs, 1, "indices"), 0, plane)

    return _checked(op, check)


def searchsorted(sorted_sequence, input, **kwargs):
    """``torch.searchsorted``: a ``sorter`` within ``[0, length)`` of the sequence."""
    sorter = kwargs.get("sorter")
    if sorter is not None and not _device_checks(sorted_sequence) and sorted_sequence.dim():
        n = sorted_sequence.size(-1)
        what = f"sorter (positions in a sequence of {n})"
        _range_ok("searchsorted", sorted_sequence, what, sorter, 0, n)
    return _VF.searchsorted(sorted_sequence, input, **kwargs)


def _masked_scatter(op: str) -> Callable:
    """``masked_scatter``: ``source`` holds at least as many elements as the mask chooses
    (broadcast against ``self``)."""

    def check(this, args, kwargs):
        mask = _arg(args, kwargs, 1, "mask")
        source = _arg(args, kwargs, 2, "source")
        if not (_is_tensor(mask) and _is_tensor(source)):
            return
        try:
            shape = torch.broadcast_shapes(this.shape, mask.shape)
        except RuntimeError:
            return  # the kernel refuses the shapes on the host
        if mask.dtype == torch.bool:
            chosen = int(torch.count_nonzero(mask.expand(shape)))
            _need(
                chosen <= source.numel(),
                lambda: (
                    f"{op}: the mask chooses {chosen} elements and source holds "
                    f"{source.numel()}; refused before the kernel runs (on "
                    f"{this.device.type}, its kernel checks on the device: a device-side "
                    "assert): pass a source with as many elements"
                ),
            )

    return _checked(op, check)


_NOT_NEGATIVE = """
gather scatter scatter_add scatter_reduce Tensor.scatter_ Tensor.scatter_add_ index_select
index_add Tensor.index_add_ index_copy Tensor.index_copy_ index_reduce Tensor.index_reduce_
""".split()

CHECKED: dict[str, Callable] = {
    **{op: _along_dim(op, False) for op in _NOT_NEGATIVE},
    **{op: _along_dim(op, True) for op in ("index_fill", "Tensor.index_fill_")},
    **{op: _flat_indices(op) for op in ("take", "put", "Tensor.put_")},
    "take_along_dim": take_along_dim,
    "embedding": embedding,
    "getitem": getitem,
    "setitem": setitem,
    **{op: _index_put(op) for op in ("index_put", "Tensor.index_put_")},
    **{op: _class_targets(op, 4) for op in ("nll_loss", "nll_loss2d", "nll_loss_nd")},
    "cross_entropy_loss": _class_targets("cross_entropy_loss", 4),
    "max_unpool2d": _unpool("max_unpool2d", 2),
    "max_unpool3d": _unpool("max_unpool3d", 3),
    "searchsorted": searchsorted,
    **{op: _masked_scatter(op) for op in ("masked_scatter", "Tensor.masked_scatter_")},
}

# Each check made above is a module attribute under its own name, where pickle looks for
# it: a GraphModule of the program (export/fx.py) calls them, and pickles by name.
for _check in CHECKED.values():
    globals().setdefault(_check.__name__, _check)
