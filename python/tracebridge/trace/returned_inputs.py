"""A conversion that gave back its own input when traced: one object, two names.

Note: why the two names need a guard only sometimes. ``h = x.contiguous()`` of a contiguous
``x`` is ``x`` itself: from then on the trace sees one tensor, and binds it to the
conversion's result, so every later use of ``x`` *and* of ``h`` reads the conversion
(trace/dispatch.py keeps the call for the calls where it copies). Which Python name the
code used cannot be seen. On a call where the conversion copies (a transposed or
channels-last ``x``, a conjugate view, another device), eager's two names differ, and the
trace is right only where nothing can tell them apart:

* values: ``contiguous()``, ``to(memory_format=...)``, ``resolve_conj()``,
  ``resolve_neg()``, a move to another device keep them (``x = x.contiguous()`` then reads:
  the common case, kept general, no guard);
* a conversion that may change values or dtype (``x.to(y)``, ``x.type_as(y)``,
  ``x.to(dtype, memory_format=...)``) is guarded at once to give its input back: the
  dtypes of ``x`` and ``y`` are guarded as they were, as ``x.to(dtype)`` is
  (trace/noops.py, ``guard_returned_input``);
* a later write into the tensor (or into anything sharing its memory) tells them apart:
  eager writes only the copy, or only ``x``. The conversion is then guarded to give its
  input back on every call (``x.is_contiguous()``, ``not x.is_conj()``, the device...),
  at the conversion's line; a call where it would copy raises ``GuardError``;
* so does a read, on the tensor itself, of what the conversion changes: its strides,
  contiguity or storage offset after a layout conversion, its conjugate or negative bit
  after ``resolve_conj()`` / ``resolve_neg()``.

The guard reads the conversion's input (its own value), so it says whether the call gave
the input back, whatever the code did since. What stays open, as the names cannot be
seen: a read of the layout of a view made from the tensor, or of a result computed from
it (``x + 1`` follows ``x``'s layout in eager), is taken as made from the conversion
(Longformer's ``x = x.contiguous().view(...)`` then ``x.stride()``, kept general); and
reads of ``x.device`` after ``x.to(y)`` are not guarded (a literal device would tie the
trace to the tracing machine): on a call where ``x`` and ``y`` lie on different devices,
later reads of ``x`` read the moved tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedOpError
from ..ir import ops as opset
from ..ir.program import Ref
from .numbers import SymInt

if TYPE_CHECKING:  # the tracer imports this module
    from collections.abc import Callable

    from .tracer import Tracer

# Ops that write into tensors other than their first argument (check/state_writes.py,
# WRITTEN_ARGUMENTS: a norm's running statistics); every tensor they take counts here.
_WRITES_OTHERS = frozenset(
    {"batch_norm", "native_batch_norm", "instance_norm", "fused_moving_avg_obs_fake_quant"}
)
# The 4-d and 5-d channels-last dimension orders (c10's is_channels_last_strides_*).
_CHANNELS_LAST_ORDER = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}
_CHANNELS_LAST_FORMAT = {4: torch.channels_last, 5: torch.channels_last_3d}


@dataclass(eq=False)  # entries are told apart by identity: a tensor field has no truth value
class _Returned:
    """A conversion that gave back its input: the object, the input's own value, and the
    guards (by what they tell apart: ``layout``, ``conj``, ``neg``, ``device``) that make
    the conversion give it back on every call, not yet recorded."""

    tensor: torch.Tensor
    source: Ref
    checks: dict[str, Callable[[], None]] = field(default_factory=dict)


def _storage(tensor: torch.Tensor):
    """The address of a tensor's storage (None where it has none: sparse, nested)."""
    try:
        with torch._C.DisableTorchFunction():
            return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


class ReturnedInputs:
    """The tracer's bookkeeping of conversions that gave back their input (mixed into
    :class:`Tracer`; see the module's note)."""

    def _returned_init(self) -> None:
        self._returned: list[_Returned] = []

    # -- the conversions ------------------------------------------------------------------

    def note_returned_input(self: Tracer, name: str, args: tuple, kwargs: dict, result) -> None:
        """Called for a recorded call whose result is its first argument, before the result
        is bound to the call's value: a conversion of the kinds above is guarded at once
        (dtypes) or remembered (what a later write or read would tell apart)."""
        if not args or result is not args[0] or not isinstance(result, torch.Tensor):
            return
        tensor = args[0]
        if self._tensor_id(tensor) is None:
            return  # a constant of the trace: the same on every call
        source = self.tensor_ref(tensor)
        method = name.rsplit(".", 1)[-1]
        what = f"{self._name_of(tensor)}"
        note = f"({method}() gave it back when traced, and the code then tells the two apart)"
        loc = self.location()
        checks: dict[str, Callable[[], None]] = {}
        if name == "Tensor.contiguous":
            fmt = args[1] if len(args) > 1 else kwargs.get("memory_format", torch.contiguous_format)
            checks["layout"] = lambda: self._guard_contiguous(source, fmt, what, note, loc)
        elif name in ("Tensor.cpu", "Tensor.cuda"):
            checks["device"] = lambda: self._guard_device(source, tensor, what, note, loc)
        elif name in ("Tensor.to", "Tensor.type_as", "Tensor.type"):
            self._conversion_checks(name, args, kwargs, source, checks, (what, note, loc))
        else:
            return
        if checks:
            self._returned.append(_Returned(tensor, source, checks))

    def note_resolved(self: Tracer, tensor: torch.Tensor, bit: str) -> None:
        """``resolve_conj()`` / ``resolve_neg()`` (``bit``: ``conj`` or ``neg``) gave back
        ``tensor``, whose bit is not set (trace/library.py records nothing for it): a later
        write into it, or a read of the bit, guards that the bit stays unset."""
        if self._tensor_id(tensor) is None:
            return
        source = self.tensor_ref(tensor)
        what = self._name_of(tensor)
        note = f"(resolve_{bit}() gave it back when traced, and the code then tells the two apart)"
        loc = self.location()
        check = lambda: self._guard_bit(f"prim.is_{bit}", source, what, note, loc)  # noqa: E731
        self._returned.append(_Returned(tensor, source, {bit: check}))

    def _conversion_checks(
        self: Tracer, name: str, args: tuple, kwargs: dict, source: Ref, checks: dict, where
    ) -> None:
        """``to``/``type_as``/``type`` that gave back their input: the dtypes they read are
        guarded now (values and dtype would differ); a device and a memory format are
        remembered."""
        tensor = args[0]
        what, note, loc = where
        rest = list(args[1:])
        others = [a for a in rest if isinstance(a, torch.Tensor)]
        # (a string names a device, except the type's name ``type()`` takes)
        dtype_named = "dtype" in kwargs or any(
            isinstance(a, (torch.dtype, type)) or (isinstance(a, str) and a.startswith("torch."))
            for a in rest
        )
        if others or dtype_named:
            method = name.rsplit(".", 1)[-1]
            self._guard_unfixed_dtype(tensor, f"{what}.dtype ({method}() gave it back when traced)")
            for other in others:
                self._guard_unfixed_dtype(other, f"{self._name_of(other)}.dtype ({method}(...))")
        device_named = bool(others) or "device" in kwargs or name == "Tensor.type"
        device_named = device_named or any(
            isinstance(a, (torch.device, int)) and not isinstance(a, bool) for a in rest
        )
        device_named = device_named or any(
            isinstance(a, str) and not a.startswith("torch.") for a in rest
        )
        if device_named:
            references = [tensor, *others]
            checks["device"] = lambda: self._guard_devices(source, references, what, note, loc)
        fmt = kwargs.get("memory_format", torch.preserve_format)
        if fmt is not torch.preserve_format:
            with torch._C.DisableTorchFunction():  # as they are now, at the conversion
                layout = (tuple(tensor.shape), tensor.stride())
            checks["layout"] = lambda: self._guard_suggested_format(source, layout, fmt, what)

    def _guard_unfixed_dtype(self: Tracer, tensor: torch.Tensor, what: str) -> None:
        """Guard ``tensor``'s dtype as traced, unless it has that dtype on every call
        already (trace/noops.py: a softmax with ``dtype=``, a guarded read)."""
        vid = self._tensor_id(tensor)
        if vid is not None and self._fixed_dtypes.get(vid) == tensor.dtype:
            return
        self._guard_dtype(tensor, self._lazy_meta("prim.dtype", tensor, "dtype"), what)

    # -- what tells the two names apart ---------------------------------------------------

    def before_write(self: Tracer, name: str, args: tuple, kwargs: dict) -> None:
        """Called before an op is recorded: if it writes into memory a remembered
        conversion's object shares, every guard of that conversion is recorded now."""
        if not self._returned:
            return
        if opset.is_inplace(name):
            written = [args[0]] if args and isinstance(args[0], torch.Tensor) else []
        elif name in _WRITES_OTHERS or opset.info(name) is None:
            written = list(_tensors((args, kwargs)))
        else:
            return
        places = {_storage(t) for t in written} - {None, 0}  # (0: no memory, meta)
        if not places:
            return
        for entry in list(self._returned):  # (settled entries leave the list)
            if _storage(entry.tensor) in places:
                self._settle(entry, set(entry.checks))

    def before_read(self: Tracer, tensor: torch.Tensor, kind: str) -> None:
        """Called where the code reads what a conversion changes (``layout``: strides,
        contiguity, storage offset; ``conj``/``neg``: the bits) of ``tensor``: where it is
        a remembered conversion's object, that conversion is guarded now."""
        for entry in list(self._returned):
            if entry.tensor is tensor and kind in entry.checks:
                self._settle(entry, {kind})

    def _settle(self: Tracer, entry: _Returned, kinds: set) -> None:
        for kind in kinds:
            check = entry.checks.pop(kind, None)
            if check is not None:
                check()
        if not entry.checks:
            self._returned.remove(entry)

    # -- the guards ------------------------------------------------------------------------

    def _guard_contiguous(self: Tracer, source: Ref, fmt, what: str, note: str, loc) -> None:
        if fmt in (None, torch.contiguous_format):
            ref = self._value_node("prim.is_contiguous", "bool", [source], loc)
            self.guard(ref, True, f"{what}.is_contiguous() {note}", "branch", loc)
            return
        ref = self._value_node("prim.is_contiguous_as", "bool", [source, fmt], loc)
        text = f"{what}.is_contiguous(memory_format={fmt}) {note}"
        self.guard(ref, True, text, "branch", loc)

    def _guard_bit(self: Tracer, op: str, source: Ref, what: str, note: str, loc) -> None:
        ref = self._value_node(op, "bool", [source], loc)
        self.guard(ref, False, f"{what}.{op.removeprefix('prim.')}() {note}", "branch", loc)

    def _guard_device(self: Tracer, source: Ref, tensor, what: str, note: str, loc) -> None:
        ref = self._value_node("prim.device", "device", [source], loc)
        self.guard(ref, tensor.device, f"{what}.device {note}", "value", loc)

    def _guard_devices(self: Tracer, source: Ref, tensors: list, what: str, note: str, loc):
        """The devices of the converted tensor and of the tensors naming the target, as
        traced (all one device: the call gave its input back)."""
        self._guard_device(source, tensors[0], what, note, loc)
        for other in tensors[1:]:
            if self._tensor_id(other) is None:
                continue  # a constant stays where it is
            ref = self._value_node("prim.device", "device", [self.tensor_ref(other)], loc)
            self.guard(ref, other.device, f"{self._name_of(other)}.device {note}", "value", loc)

    def _guard_suggested_format(self: Tracer, source: Ref, layout, fmt, what: str) -> None:
        """``to(memory_format=fmt)`` gives its input back where the memory format its
        strides suggest is ``fmt`` (c10's ``suggest_memory_format``): computed here on the
        input's traced sizes and strides (``layout``: their values at the conversion),
        each comparison guarded as it came out."""
        shape, strides = layout
        loc = self.location()

        def traced(op: str, values, name: str) -> list:
            refs = [self._value_node(op, "int", [source, d], loc) for d in range(len(values))]
            return [
                SymInt(v, self, ref, f"{what}.{name}({d})")
                for d, (v, ref) in enumerate(zip(values, refs))
            ]

        sizes, steps = traced("prim.size", shape, "size"), traced("prim.stride", strides, "stride")
        suggested = torch.contiguous_format
        if len(shape) in _CHANNELS_LAST_ORDER and _strides_like_channels_last(sizes, steps):
            suggested = _CHANNELS_LAST_FORMAT[len(shape)]
        if suggested != fmt:  # not reached: the call gave its input back when traced
            raise UnsupportedOpError(
                f"cannot trace {what}.to(memory_format={fmt}) at {loc}: it gave back its "
                f"input, which its strides {list(strides)} do not explain; call "
                "contiguous(memory_format=...) instead"
            )


def _strides_like_channels_last(sizes: list, strides: list) -> bool:
    """c10's ``is_channels_last_strides_2d_s4`` / ``_3d_s5`` on traced numbers: each
    comparison becomes a guard where Python reads it."""
    if strides[1] == 0:
        return False
    low = 0
    for d in _CHANNELS_LAST_ORDER[len(sizes)]:
        if sizes[d] == 0:
            return False
        if strides[d] < low:
            return False
        if d == 0 and low == strides[1]:
            return False
        low = strides[d]
        if sizes[d] > 1:
            low = low * sizes[d]
    return True
