"""Conversions: traced values turned into Python values (sizes, scalars, bools), with guards.

Invariant: a traced value never becomes a plain Python value silently: it is either
recorded (sizes and scalar arithmetic stay traced) or guarded at the user's line.
"""

from __future__ import annotations

import sys

import torch

from ..errors import TraceError, UnsupportedOpError
from ..ir import ops as opset
from ..ir import pytree
from ..ir.program import Ref
from ..source import called_from_user_code as _called_from_user_code
from ..source import user_frame
from . import cache_values, warm_caches
from .caches import DictCache, fresh_hash, functools_cache_hashing_tensor
from .device_reads import FULL, TYPE, device_use
from .memo_tables import plain_key
from .numbers import SymFloat, SymInt, SymSize, _Traced
from .short_circuit import settled_without_it
from .text import TensorText, formatted
from .unseen_reads import IDENTITY, made_for_user_code, settle, source_readable, unseen_read

# A tensor's device flags read as properties (``x.is_cuda``): the device type each asks
# about, guarded with prim.is_device_type (op-set 9).
_DEVICE_FLAGS = {
    f"is_{kind}": kind for kind in "cpu cuda meta mps xpu ipu maia mtia vulkan xla".split()
}

# Autograd flags read as properties: the prim op that reads each at call time, and what of
# the property's value it answers (``grad_fn`` is an object: whether there is one).
_AUTOGRAD_FLAGS = {
    "requires_grad": ("prim.requires_grad", bool, "requires_grad"),
    "is_leaf": ("prim.is_leaf", bool, "is_leaf"),
    "grad_fn": ("prim.has_grad_fn", lambda fn: fn is not None, "grad_fn is not None"),
}


class Conversions:
    """The tracer's conversion methods (mixed into :class:`Tracer`)."""

    def scalar_ref(self, sym: _Traced) -> Ref:
        if sym._tracer is not self:
            raise TraceError(
                f"a traced number of another trace, {sym._desc}, was used in this one at "
                f"{self.location() or 'an unknown location'}: code kept a size from an "
                "earlier trace (a global, a cache, an attribute set while tracing); compute "
                "it from this call's inputs"
            )
        if sym._ref is None:
            sym._ref = sym._lazy()
        return sym._ref

    def _wrap_scalar(self, concrete, ref: Ref | None, desc: str, lazy=None):
        if isinstance(concrete, bool):
            return concrete
        if isinstance(concrete, int):
            return SymInt(concrete, self, ref, desc, lazy)
        if isinstance(concrete, float):
            return SymFloat(concrete, self, ref, desc, lazy)
        return concrete

    def size_of(self, tensor: torch.Tensor, dim: int, of_shape: bool = False) -> SymInt:
        """The traced size ``dim`` of ``tensor``; ``of_shape``: an item of the whole
        ``x.shape`` / ``x.size()`` the code reads now."""
        with torch._C.DisableTorchFunction():
            rank, shape = tensor.dim(), tuple(tensor.shape)
        if not -rank <= dim < max(rank, 1):
            raise IndexError(
                f"Dimension out of range (expected to be in range of "
                f"[{-rank}, {rank - 1}], but got {dim})"
            )
        dim = dim % rank
        key = (id(tensor), dim)
        cached = self._size_cache.get(key)
        if cached is not None and self._lookup(tensor) is not None:
            return self.guard_unseen_read(cached, dim if of_shape else None, rank)
        hit = self._lookup(tensor)
        desc = f"{hit[2]}.shape[{dim}]" if hit else f"size(dim {dim})"
        loc = self.location()

        def materialize():
            return self._value_node("prim.size", "int", [self.tensor_ref(tensor), dim], loc)

        sym = SymInt(shape[dim], self, None, desc, materialize)
        self._size_cache[key] = sym
        return self.guard_unseen_read(sym, dim if of_shape else None, rank)

    def guard_unseen_read(self, sym, element: int | None = None, rank: int = 0):
        """Guard the value of the traced number just made where the user's code hands it
        to C code that reads it without asking (trace/unseen_reads.py), at that line.
        ``element``: the number is that item of a ``torch.Size`` the code reads. Gives
        the number back, or the plain int the code must see where it compares it by
        identity with that int (``n is 1``: unseen_reads.identity_read)."""
        if not isinstance(sym, _Traced):
            return sym
        frame = made_for_user_code(sys._getframe(1))
        if frame is None:
            return sym
        if not source_readable(frame.f_code.co_filename):
            self._warn_blind(frame.f_code.co_filename, "its source cannot be read")
            return sym
        later: list = []
        identities: list = []
        try:
            found = unseen_read(frame, element, rank, later, sym, identities)
        except Exception as exc:  # noqa: BLE001 - a source we cannot follow: no guard, said
            self._warn_blind(frame.f_code.co_filename, f"following it failed ({exc!r:.80})")
            return sym
        self._unseen_later.extend((sym, f, site) for f, site in later)
        if found is not None:
            self._guard_read_in_c(sym, f"{found[0]}:{found[1]}", *found[2:])
        seen = sym
        for filename, line, (_, other, spelled) in identities:
            seen = self._identity_read(sym, f"{filename}:{line}", other, spelled, made=True)
        return seen

    def _identity_read(self, sym, loc: str, other: int, spelled: str, made: bool):
        """``sym is other`` (``spelled``: "is" or "is not") at ``loc``, ``other`` an int of
        CPython's small-int cache, which eager code answers as ``==`` (the note at
        unseen_reads.identity_read). Where ``sym`` is not ``other``, the trace's answer
        (False) holds while ``sym != other``: that is guarded. Where it is, the code must
        see the cached int itself: ``made`` (the number is being made for that code) gives
        it back, with the value guarded; a number kept from earlier (an attribute: ``made``
        False) cannot be swapped, and the trace is refused (``identity_refusals``)."""
        concrete = sym._concrete()
        key = (id(sym), loc, "is")
        if concrete != other:
            if key not in self._unseen_guarded:
                self._unseen_guarded[key] = sym
                value = self._new_value("bool")
                self._emit(
                    "scalar.ne",
                    [self.encode(sym), other],
                    outputs=[value],
                    out_spec=pytree.LEAF,
                    loc=loc,
                )
                self.guard(Ref(value.id), True, f"{sym._desc} != {other}", "branch", loc)
            return sym
        if not made:
            self.identity_refusals.append(
                f"`{sym._desc} {spelled} {other}` at {loc} compares a traced size by identity, "
                f"and the size is {other} here: eager Python answers "
                f"{spelled == 'is'} (CPython keeps one object of each small int), but the "
                "size was kept from earlier (an attribute, a container) as a traced number, "
                f"which is never that object. Write `{'==' if spelled == 'is' else '!='} "
                f"{other}` instead (an identity test of ints is a SyntaxWarning in Python "
                "itself), which the trace records"
            )
            return sym
        if key not in self._unseen_guarded:
            self._unseen_guarded[key] = sym
            self.guard(self.scalar_ref(sym), concrete, sym._desc, "value", loc)
            self.warn(
                f"the traced value {sym._desc} is compared by identity (`{spelled} {other}`) "
                f"at {loc}; the trace is valid only while it stays {other!r} (write "
                f"`{'==' if spelled == 'is' else '!='} {other}` for a trace that guards only "
                "the comparison)"
            )
        return other

    def _warn_blind(self, filename: str, why: str) -> None:
        """Say once per file that sizes its code hands to Python's C code go unguarded
        there: code run by ``exec``, ``python -c`` or a plain REPL has no source to read
        (a notebook's cells do), so a size indexing a list is the example's for every
        call, as torch.jit.trace's would be."""
        if filename in self._unseen_blind:
            return
        self._unseen_blind.add(filename)
        self.warn(
            f"the traced code in {filename} cannot be checked for sizes that Python's C code "
            f"reads without asking ({why}): a size used there to index a list or a string, "
            "or given to a builtin, keeps the example's value on every call, unguarded; "
            "define the traced code in a file (or a notebook cell) for those to be guarded"
        )

    def settle_unseen_reads(self) -> None:
        """When the traced code has returned: guard the numbers that went into a subscript
        of a local bound after they were made, where the local then held a list, a
        tuple, a string (trace/unseen_reads.py, ``settle``)."""
        pending, self._unseen_later = self._unseen_later, []
        for sym, frame, site in pending:
            try:
                found = settle(frame, site)
            except Exception:  # noqa: BLE001 - as in guard_unseen_read
                continue
            if found is not None:
                self._guard_read_in_c(sym, f"{found[0]}:{found[1]}")

    def _guard_read_in_c(self, sym, loc: str, compared: tuple | None = None) -> None:
        """Guard ``sym``'s value, read in C at ``loc``; ``compared``: ``(op, other)``, the
        comparison C code makes there (``3.5 < n``), recorded as ``n op other`` instead,
        which keeps every value that answers alike."""
        key = (id(sym), loc)
        if key in self._unseen_guarded:
            return
        self._unseen_guarded[key] = sym  # kept: an id is unique while its object lives
        if compared is not None and compared[0] == IDENTITY:  # carried_reads: kept earlier
            self._identity_read(sym, loc, compared[1], compared[2], made=False)
            return
        if compared is not None:
            self.scalar_compare(compared[0], sym, compared[1], warn=False)
            return
        concrete = sym._concrete()
        self.guard(self.scalar_ref(sym), concrete, sym._desc, "value", loc)
        self.warn(
            f"the traced value {sym._desc} is read by Python's C code at {loc} (an index, "
            "a slice or an argument of a builtin), which does not ask a traced number; "
            f"the trace is valid only while it stays {concrete!r}"
        )

    def scalar_op(self, op: str, operands: tuple):
        concrete = [o._concrete() if isinstance(o, _Traced) else o for o in operands]
        if not all(isinstance(c, (int, float)) for c in concrete):
            return NotImplemented
        result = opset.SCALAR_OPS[f"scalar.{op}"](*concrete)
        if self._kept_after_the_trace():
            return result
        symbols = {
            "add": "+",
            "sub": "-",
            "mul": "*",
            "truediv": "/",
            "floordiv": "//",
            "mod": "%",
            "pow": "**",
        }
        # A description is for messages: cut long ones, or a value used twice per step
        # (n = n * n) would double its text each time and exhaust memory.
        descs = [_short_desc(o._desc) if isinstance(o, _Traced) else repr(o) for o in operands]
        if op in symbols:
            desc = f"({descs[0]} {symbols[op]} {descs[1]})"
        else:
            desc = f"{op}({', '.join(descs)})"
        value = self._new_value("int" if isinstance(result, int) else "float")
        args = [self.encode(o) for o in operands]
        self._emit(f"scalar.{op}", args, outputs=[value], out_spec=pytree.LEAF, loc=self.location())
        return self.guard_unseen_read(self._wrap_scalar(result, Ref(value.id), desc))

    def scalar_compare(self, op: str, left, right, warn: bool = True):
        concrete = [o._concrete() if isinstance(o, _Traced) else o for o in (left, right)]
        if not all(isinstance(c, (int, float)) for c in concrete):
            return NotImplemented
        result = opset.SCALAR_OPS[f"scalar.{op}"](*concrete)
        if self._kept_after_the_trace():
            return result
        if op in ("eq", "ne"):
            plain = right if isinstance(left, _Traced) else left
            if type(plain) is int:  # a one-entry cache's key? (trace/warm_caches.py)
                warm_caches.note_compared(self, plain)
        value = self._new_value("bool")
        loc = self.location()
        self._emit(
            f"scalar.{op}",
            [self.encode(left), self.encode(right)],
            outputs=[value],
            out_spec=pytree.LEAF,
            loc=loc,
        )
        symbols = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
        descs = [o._desc if isinstance(o, _Traced) else repr(o) for o in (left, right)]
        what = f"{descs[0]} {symbols[op]} {descs[1]}"
        if settled_without_it():
            return result  # ``n > 1 and flag`` with flag False: False either way
        self.guard(Ref(value.id), result, what, "branch", loc)
        if warn and _called_from_user_code():
            # PyTorch's own shape checks compare sizes all the time; only the user's
            # comparisons are decisions worth a warning.
            self.warn(
                f"the comparison {what} of traced values was turned into a Python bool "
                f"({result}); calls where it differs raise GuardError"
            )
        return result

    def specialize(self, sym: _Traced, kind: str, reason: str | None = None):
        """A traced number became a plain Python number: guard on its value. ``reason``
        says why, for the warning (text made from it decided a branch)."""
        concrete = sym._concrete()
        result = {"bool": bool, "int": int, "float": float}[kind](concrete)
        if self._kept_after_the_trace():
            return result
        loc = self.location()
        self.guard(self.scalar_ref(sym), concrete, sym._desc, "value", loc)
        if reason is not None:
            self.warn(
                f"the traced value {sym._desc} was {reason} ({result!r}); the trace is "
                f"valid only while it stays {result!r}"
            )
        elif kind != "bool":
            self.warn(
                f"the traced value {sym._desc} was turned into a Python {kind} "
                f"({result!r}); the trace is valid only while it stays {result!r}"
            )
        return result

    def through_cache(self, cache, what: str = "a traced size", number=None) -> bool:
        """A traced number (``number``, where it is one) is part of a cache key: whether
        the lookup misses (trace/caches.py; a dict that holds entries its code did not
        make decides). A functools cache is remembered, to be emptied when the trace ends."""
        if isinstance(cache, DictCache):
            label = cache.label
            if not self.memo_tables.note(cache, self.location()):
                return False
            if not self._not_a_kept_key(cache, number):
                return False
        elif isinstance(cache, str):
            label = cache  # a cache made for this one call: nothing to empty
        else:
            label = getattr(cache, "__qualname__", "a cache")
            self.went_through(cache)
        self.warn(
            f"{what} is part of a key of the cache {label}: the trace records the "
            "cached function's work instead of a lookup of what an earlier call stored"
        )
        return True

    def went_through(self, cache) -> None:
        """The recording goes through the functools cache ``cache`` with a key of traced
        values: its entries are put back as the trace found them after the recording (a
        second recording, the check's, then misses as the first did: a hit would hand it
        the first one's value as a constant), and a write into what it holds is refused
        (trace/cache_values.py)."""
        if all(c is not cache for c in self.caches_used):
            cache_values.note(cache)
            self.caches_used.append(cache)

    def _not_a_kept_key(self, cache, number) -> bool:
        """A memo that held entries before the trace, under other keys than the example's
        (a value tuned by hand for length 12, beside what the code fills for the others):
        a miss is right only for keys it did not hold. For a traced int key, each such key
        is guarded off (``n != 12``: every other size is served); for any other key, the
        lookup decides (False). The example's own entry is checked against what the code
        computes (trace/memo_tables.py)."""
        kept = self.memo_tables.kept_keys(cache)
        if not kept:
            return True
        if cache.key is not None:
            current = plain_key(cache.key)
        elif number is not None:
            current = number._concrete()
        else:
            return False
        others = [k for k in kept if type(k) is not type(current) or k != current]
        if not others:
            return True  # a memo warmed at the example's key: checked when the recording ends
        if not (isinstance(number, SymInt) and all(type(k) is int for k in others)):
            return False
        for key in others:
            self.scalar_compare("ne", number, key, warn=False)
        return True

    def tensor_hash(self, tensor) -> int:
        """``hash(tensor)`` is its identity, except for the key of a functools cache while
        tracing: there a hash of its own for this trace, which no stored key has, so the
        lookup misses and the cached function's work is recorded (trace/caches.py).
        (``Tensor.__hash__`` skips ``__torch_function__``: trace/patches.py calls this.)"""
        cache = functools_cache_hashing_tensor()
        if cache is None:
            return id(tensor)
        self.through_cache(cache, "a tensor")
        own = self._tensor_hashes.get(id(tensor))
        if own is None or own[0] is not tensor:
            own = self._tensor_hashes[id(tensor)] = (tensor, fresh_hash())
        return own[1]

    def _kept_after_the_trace(self) -> bool:
        """Whether a traced number of this finished recording is used where no recording
        runs in this thread (a size the code kept in a global list, compared after the
        trace): a plain number then. Compared, it added a guard to the finished program,
        which its first call took in (a later call at another size was refused)."""
        from .patches import _tracers  # patches imports the tracer: import late

        return self.finished and not _tracers.stack

    def is_active(self) -> bool:
        """Whether this tracer records in this thread now (text made while tracing may be
        used after the trace ended: then it is plain text)."""
        from .patches import _tracers  # patches imports the tracer: import late

        return self in _tracers.stack

    def _on_property(self, prop: str, getter, tensor: torch.Tensor):
        if prop == "shape":
            return self._on_size(getter, tensor)
        if prop == "dtype":
            dtype = tensor.dtype
            read = self._lazy_meta("prim.dtype", tensor, "dtype")
            self._dtype_reads[dtype] = read
            self._guard_dtype(tensor, read, f"{self._name_of(tensor)}.dtype")
            return dtype
        if prop == "device":
            device = tensor.device
            self._device_reads[id(device)] = (
                device,
                self._lazy_meta("prim.device", tensor, "device"),
            )
            if self._varies(tensor) and _called_from_user_code():
                self._guard_device_use(tensor, device)
            return device
        if prop in _DEVICE_FLAGS and self._varies(tensor) and _called_from_user_code():
            concrete = getter(tensor)
            self._guard_device_type(tensor, _DEVICE_FLAGS[prop], concrete, f".{prop}")
            return concrete
        if prop in ("itemsize", "nbytes"):
            read = self._lazy_meta("prim.dtype", tensor, "dtype")
            self._guard_dtype(tensor, read, f"{self._name_of(tensor)}.dtype ({prop})")
            if prop == "nbytes":  # numel times the (guarded) width: general in size
                return self._on_numel(None, tensor) * tensor.itemsize
            return tensor.itemsize
        if prop in opset.TENSOR_OP_PROPERTIES:
            return self.record(f"Tensor.{prop}", getter, (tensor,), {})
        if prop in _AUTOGRAD_FLAGS and not (
            _called_from_user_code() or (prop == "requires_grad" and self._is_input(tensor))
        ):
            return getter(tensor)  # PyTorch's own bookkeeping (a legacy backward hook)
        if prop in _AUTOGRAD_FLAGS:
            # Whether an input requires grad can change from call to call, and with it
            # whether the results do and have a grad_fn; a parameter is frozen or thawed
            # with requires_grad_(): each read the code makes is a decision, guarded.
            concrete = getter(tensor)
            op, flag, what = _AUTOGRAD_FLAGS[prop]
            self._guard_flag(op, tensor, flag(concrete), f"{self._name_of(tensor)}.{what}")
            return concrete
        if prop == "_version" and self._varies(tensor):
            raise UnsupportedOpError(
                f"cannot trace {self._name_of(tensor)}._version at "
                f"{self.location() or 'an unknown location'}: a version counter counts the "
                "writes made to a tensor before this call, which no trace can follow; "
                "branch on something the inputs carry instead"
            )
        if prop == "_base" and self._varies(tensor):
            # Whether a tensor is a view, and of what, is the caller's: an input may come
            # as a view of a larger tensor on another call. No op reads it at call time.
            raise UnsupportedOpError(
                f"cannot trace {self._name_of(tensor)}._base at "
                f"{self.location() or 'an unknown location'}: the tensor a view was made "
                "from depends on how the caller made the inputs (an input may be a view of "
                "a larger tensor on another call), which no trace can follow; use the "
                "tensor itself, or pass the base as an input"
            )
        return getter(tensor)

    def _is_input(self, tensor: torch.Tensor) -> bool:
        hit = self._lookup(tensor)
        return hit is not None and any(v.id == hit[1].id for v in self.graph.inputs)

    def _varies(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is an input, a result or a parameter or buffer of the trace
        (what it reads may differ at call time), not a constant the trace captured."""
        if self._lookup(tensor) is not None:
            return True
        entry = self._state.get(id(tensor))
        return entry is not None and entry[2] is tensor and entry[1] != "attribute"

    def _guard_flag(self, op: str, tensor: torch.Tensor, concrete: bool, what: str) -> None:
        """Read a flag of ``tensor`` at call time (``op``: a ``prim`` op of one tensor)
        and guard it to be ``concrete``, as the trace saw it."""
        if not self._varies(tensor):
            return  # a constant keeps its flags
        loc = self.location()
        ref = self._value_node(op, "bool", [self.tensor_ref(tensor)], loc)
        self.guard(ref, bool(concrete), what, "branch", loc)

    def _on_flag(self, op: str):
        """A handler for a tensor method that answers a flag code branches on (op-set 8):
        ``is_inference()``, ``is_neg()``, ``is_conj()``; guarded, as the caller's tensor
        may differ (an inference tensor, a lazy conjugate view)."""

        def handler(func, tensor, *args, **kwargs):
            concrete = func(tensor, *args, **kwargs)
            name = op.removeprefix("prim.")
            self.before_read(tensor, name.removeprefix("is_"))  # trace/returned_inputs.py
            self._guard_flag(op, tensor, concrete, f"{self._name_of(tensor)}.{name}()")
            return concrete

        return handler

    def _on_dtype_query(self, func, tensor, *args, **kwargs):
        """``is_signed()`` answers from the dtype, which the input checks do not fix
        (int64 and uint8 are both integers there): guarded like a dtype read."""
        read = self._lazy_meta("prim.dtype", tensor, "dtype")
        name = getattr(func, "__name__", "dtype")
        self._guard_dtype(tensor, read, f"{self._name_of(tensor)}.dtype ({name}())")
        return func(tensor, *args, **kwargs)

    def _on_get_device(self, func, tensor):
        """``get_device()`` is the device's index (-1 on the CPU): guarded like the device
        itself, which a traced program otherwise follows from its inputs."""
        concrete = func(tensor)
        if self._varies(tensor):
            loc = self.location()
            read = self._lazy_meta("prim.device", tensor, "device")()
            what = f"{self._name_of(tensor)}.device (get_device())"
            self.guard(read, tensor.device, what, "value", loc)
        return concrete

    def _guard_device_use(self, tensor: torch.Tensor, device: torch.device) -> None:
        """A read of ``tensor.device`` in the user's code: guarded as the code uses it
        (trace/device_reads.py): its type where only ``.type`` is read, the whole device
        where it is compared, formatted or kept, nothing where it is only passed on; where
        ``.type`` is only compared with names, each answer."""
        use, names = device_use(user_frame(sys._getframe(2)))
        if use != FULL:
            for name in sorted(names):
                if name not in opset.DEVICE_TYPES:
                    use = TYPE  # a name no file may hold: guard the type itself
                    continue
                concrete = device.type == name
                self._guard_device_type(tensor, name, concrete, f".device.type == {name!r}")
        if use == TYPE:
            self._guard_device_type(tensor, device.type, True, f".device.type == {device.type!r}")
        elif use == FULL:
            key = ("guard.device", self._value_key(tensor))
            if key not in self._meta_refs:
                read = self._lazy_meta("prim.device", tensor, "device")()
                self._meta_refs[key] = read
                what = f"{self._name_of(tensor)}.device"
                self.guard(read, device, what, "value", self.location())

    def _guard_device_type(self, tensor, device_type: str, concrete: bool, what: str) -> None:
        """Guard that ``tensor`` is (``concrete``) or is not on a device of ``device_type``
        at call time (``x.is_cuda``, ``x.device.type``: op-set 9), once per tensor."""
        key = ("guard.device_type", self._value_key(tensor), device_type)
        if key in self._meta_refs:
            return
        loc = self.location()
        ref = self._value_node(
            "prim.is_device_type", "bool", [self.tensor_ref(tensor), device_type], loc
        )
        self._meta_refs[key] = ref
        self.guard(ref, bool(concrete), f"{self._name_of(tensor)}{what}", "branch", loc)

    def _value_key(self, tensor: torch.Tensor):
        """What identifies ``tensor`` in the graph: its value, else its state name."""
        hit = self._lookup(tensor)
        if hit is not None:
            return hit[1].id
        entry = self._state.get(id(tensor))
        return entry[0] if entry is not None else id(tensor)

    def _on_is_same_size(self, func, tensor, other):
        """``a.is_same_size(b)`` compares traced sizes: a guard on each size it reads, where
        the example's answer was a constant of the trace."""
        with torch._C.DisableTorchFunction():
            func(tensor, other)  # raises as eager does for a non-tensor
            rank = tensor.dim()
            if rank != other.dim():  # ranks are fixed by the inputs' checks
                return False
        return all(bool(self.size_of(tensor, d) == self.size_of(other, d)) for d in range(rank))

    def _on_storage_offset(self, func, tensor):
        """A tensor's offset in its storage is a traced integer, as its strides are: a view
        given as an input starts elsewhere in its storage on another call."""
        concrete = func(tensor)
        if not self._varies(tensor):
            return concrete
        self.before_read(tensor, "layout")  # trace/returned_inputs.py
        loc = self.location()
        ref = self._value_node("prim.storage_offset", "int", [self.tensor_ref(tensor)], loc)
        return SymInt(concrete, self, ref, f"{self._name(tensor)}.storage_offset()")

    def _guard_dtype(self, tensor: torch.Tensor, read, what: str) -> None:
        """Guard that ``tensor`` has, at call time, the dtype it has now.

        Note: why every dtype read is guarded. A runtime accepts any dtype of the kind
        an input was traced with (SPEC section 4), and parameters change dtype with
        ``module.half()``, so a dtype that Python code saw can differ at call time. What the
        code did with it cannot be seen: ``torch.dtype`` cannot be subclassed or hooked, so
        ``x.dtype == torch.float16``, ``torch.finfo(x.dtype).min`` or ``dtype.itemsize``
        leave no trace. A read that is passed to an op (``torch.ones(n, dtype=x.dtype)``)
        still becomes a ``prim.dtype`` node, so the op follows the call's dtype; but the same
        read may also have been compared before it was passed on, and nothing tells the two
        apart, so it is guarded too; and a later literal of the same dtype (one object) is
        recorded as this read. See docs/divergence.md, "Dtypes: every read is guarded".
        One guard per traced value, however often it is read. A captured constant keeps its
        dtype: no guard.
        """
        hit = self._lookup(tensor)
        if hit is not None:
            key = ("guard.dtype", hit[1].id)
        else:
            entry = self._state.get(id(tensor))
            if entry is None or entry[2] is not tensor or entry[1] == "attribute":
                return  # not an input, a result or a parameter: a constant of the trace
            key = ("guard.dtype", entry[0])
        if key in self._meta_refs:
            return
        self._meta_refs[key] = ref = read()
        self.guard(ref, tensor.dtype, what, "value", self.location())
        read_node = self._producers.get(ref.id)
        if read_node is not None and isinstance(read_node.args[0], Ref):
            self.know_dtype(read_node.args[0], tensor.dtype)  # trace/noops.py

    def _name_of(self, tensor: torch.Tensor) -> str:
        """A tensor's name in messages, a parameter's or buffer's by its path."""
        if self._lookup(tensor) is None:
            entry = self._state.get(id(tensor))
            if entry is not None and entry[2] is tensor:
                return entry[0]
        return self._name(tensor)

    def _on_element_size(self, func, tensor):
        """``element_size()`` is the dtype's width: guarded like a dtype read."""
        read = self._lazy_meta("prim.dtype", tensor, "dtype")
        self._guard_dtype(tensor, read, f"{self._name_of(tensor)}.dtype (element_size())")
        return func(tensor)

    def _on_type(self, func, tensor, *args, **kwargs):
        """``x.type()`` names the dtype (``'torch.FloatTensor'``): guarded like a dtype
        read. ``x.type(dtype)`` converts, and is recorded as the op it is."""
        if args or kwargs.get("dtype") is not None:
            args, kwargs = _tensor_types_named(args, kwargs)
            return self.record("Tensor.type", func, (tensor, *args), kwargs)
        read = self._lazy_meta("prim.dtype", tensor, "dtype")
        self._guard_dtype(tensor, read, f"{self._name_of(tensor)}.dtype (type())")
        return func(tensor, **kwargs)

    def _lazy_meta(self, op: str, tensor: torch.Tensor, kind: str):
        """A dtype or device read: it becomes a node only if an op uses it, once per tensor
        (code reads ``x.dtype`` often, mostly to check it)."""
        loc = self.location()

        def materialize() -> Ref:
            hit = self._lookup(tensor)
            key = (op, hit[1].id if hit is not None else id(tensor))
            ref = self._meta_refs.get(key)
            if ref is None:
                ref = self._meta_refs[key] = self._value_node(
                    op, kind, [self.tensor_ref(tensor)], loc
                )
            return ref

        return materialize

    # -- tensors turned into Python values --------------------------------------------------

    def _special_handlers(self) -> dict:
        T = torch.Tensor
        concrete = self._concrete
        handlers = {
            T.size: self._on_size,
            T.dim: concrete,
            T.ndimension: concrete,
            T.numel: self._on_numel,
            T.nelement: self._on_numel,
            T.stride: self._on_stride,
            T.storage_offset: self._on_storage_offset,
            T.element_size: self._on_element_size,
            T.type: self._on_type,
            T.is_contiguous: self._on_is_contiguous,
            T.is_floating_point: concrete,
            T.is_complex: concrete,
            T.is_signed: self._on_dtype_query,
            T.get_device: self._on_get_device,
            T.is_inference: self._on_flag("prim.is_inference"),
            T.is_conj: self._on_flag("prim.is_conj"),
            T.is_neg: self._on_flag("prim.is_neg"),
            T.__repr__: self._on_repr,
            T.__format__: self._on_format,
            T.__hash__: concrete,
            T.is_same_size: self._on_is_same_size,
            T.item: self._on_item,
            T.tolist: self._on_tolist,
            T.numpy: self._on_tolist,
            T.__bool__: self._to_python(bool),
            T.is_nonzero: self._to_python(bool),
            T.__int__: self._to_python(int),
            T.__index__: self._to_python(int),
            T.__float__: self._to_python(float),
            T.__len__: self._on_len,
        }
        handlers[torch.is_nonzero] = self._to_python(bool)
        # Function forms of the metadata queries behave like the methods.
        for name in (
            "is_floating_point",
            "is_complex",
            "is_signed",
            "is_conj",
            "is_neg",
            "is_inference",
            "is_same_size",
        ):
            handlers[getattr(torch, name)] = handlers[getattr(T, name)]
        handlers[torch.numel] = self._on_numel
        handlers[torch._C._set_grad_enabled] = self._on_set_grad_enabled
        handlers.update(self._library_handlers())
        return handlers

    def _on_set_grad_enabled(self, func, mode):
        """``torch.no_grad()`` and friends. The switch back at the end of the outermost
        block restores the *caller's* mode, read at run time, not the mode at trace time. (The
        mode is read from ``torch._C``: ``torch.is_grad_enabled`` is the traced one while
        tracing, which guards where the user's code asks it, not where this switch does.)"""
        if self._grad_entry is None:
            ref = self._value_node("prim.grad_enabled", "bool", loc=self.location())
            self._grad_entry = (ref, torch._C.is_grad_enabled())
            self._grad_depth = 0
        entry_ref, entry_mode = self._grad_entry
        arg = bool(mode)
        if arg == entry_mode and self._grad_depth > 0:
            self._grad_depth -= 1
            if self._grad_depth == 0:
                arg = entry_ref
        elif arg != torch._C.is_grad_enabled():
            self._grad_depth += 1
        self._emit("set_grad_enabled", [arg], loc=self.location())
        return func(mode)

    def _concrete(self, func, *args, **kwargs):
        return func(*args, **kwargs)

    def _on_stride(self, func, tensor, dim=None):
        """Strides are traced integers, like sizes."""
        self.before_read(tensor, "layout")  # trace/returned_inputs.py
        with torch._C.DisableTorchFunction():
            strides = tensor.stride()
        rank = len(strides)
        dims = range(rank) if dim is None else [self._dimension(dim) % max(rank, 1)]
        loc = self.location()
        out = []
        for d in dims:
            ref = self._value_node("prim.stride", "int", [self.tensor_ref(tensor), d], loc)
            out.append(SymInt(strides[d], self, ref, f"{self._name(tensor)}.stride({d})"))
        return tuple(out) if dim is None else out[0]

    def _on_is_contiguous(self, func, tensor, memory_format=torch.contiguous_format):
        self.before_read(tensor, "layout")  # trace/returned_inputs.py
        concrete = func(tensor, memory_format=memory_format)
        if not self._varies(tensor):
            return concrete
        loc = self.location()
        if memory_format is torch.contiguous_format:
            ref = self._value_node("prim.is_contiguous", "bool", [self.tensor_ref(tensor)], loc)
            what = f"{self._name(tensor)}.is_contiguous()"
        else:  # channels_last and friends (op-set 8)
            args = [self.tensor_ref(tensor), memory_format]
            ref = self._value_node("prim.is_contiguous_as", "bool", args, loc)
            what = f"{self._name(tensor)}.is_contiguous(memory_format={memory_format})"
        self.guard(ref, concrete, what, "branch", loc)
        return concrete

    def _on_size(self, func, tensor, dim=None):
        if dim is None:
            return SymSize(self.size_of(tensor, i, of_shape=True) for i in range(tensor.dim()))
        return self.size_of(tensor, self._dimension(dim))

    def _dimension(self, dim) -> int:
        """A dimension given to ``size``/``stride`` as the int the trace reads there. A
        0-dim tensor (``x.size(t)``, read by ``__index__``) is read as ``.item()`` with a
        guard on its value: read plainly, the trace kept the example's dimension and served
        every other one with it, silently."""
        if isinstance(dim, torch.Tensor):
            with torch._C.DisableTorchFunction():
                concrete = int(dim)  # raises as eager does for a non-integer or a non-scalar
            loc = self.location()
            ref = self._value_node("prim.item", "int", [self.tensor_ref(dim)], loc)
            self.guard(ref, concrete, f"{self._name(dim)}.item()", "value", loc)
            return concrete
        return int(dim)

    def _on_numel(self, func, tensor):
        ref = self._value_node("prim.numel", "int", [self.tensor_ref(tensor)], self.location())
        return self.guard_unseen_read(
            SymInt(tensor.numel(), self, ref, f"{self._name(tensor)}.numel()")
        )

    def _on_item(self, func, tensor):
        concrete = tensor.item()
        kind = {bool: "bool", int: "int", float: "float"}.get(type(concrete))
        if kind is None:
            raise UnsupportedOpError(f".item() of a {tensor.dtype} tensor cannot be traced")
        loc = self.location()
        ref = self._value_node("prim.item", kind, [self.tensor_ref(tensor)], loc)
        desc = f"{self._name(tensor)}.item()"
        if kind == "bool":
            self.guard(ref, concrete, desc, "value", loc)
            self.warn(
                f"{desc} was used as a Python bool ({concrete}); calls where it differs "
                "raise GuardError"
            )
            return concrete
        return self.guard_unseen_read(self._wrap_scalar(concrete, ref, desc))

    def _on_format(self, func, tensor, spec=""):
        """``f"{t}"`` of a 0-dim tensor formats its value (``Tensor.__format__`` calls
        ``item()``): read as ``.item()`` is, a traced number, so the text follows the rules
        of a size's text (trace/text.py): no guard where it only reaches a message, a guard
        where it may decide something. Switch Transformers picks each expert it runs by
        ``self[f"expert_{expert_idx[0]}"]``: baked with no guard, a call that routed its
        tokens to other experts ran the traced ones, silently wrong. A tensor of another
        rank formats as its ``repr``: see :meth:`_on_repr`."""
        with torch._C.DisableTorchFunction():
            scalar = tensor.dim() == 0 and not tensor.is_meta
        if not scalar:
            return self._tensor_text(tensor, func(tensor, spec), None)
        value = self._on_item(torch.Tensor.item, tensor)
        if not isinstance(value, _Traced):
            return format(value, spec)  # a bool: guarded by _on_item
        return formatted(value, format(value._concrete(), spec), frame=_formatting_frame())

    def _on_repr(self, func, tensor, *args, **kwargs):
        """``str(x)``, ``repr(x)``, ``print(x)``, ``'%s' % x``: the text shows the tensor's
        values. It remembers them (trace/text.py): printed or logged, nothing is guarded and
        nothing recorded; compared, hashed or branched on, the values and dtype are guarded
        where the text decides. PyTorch's printing runs with the recording mode off, so its
        own tensor work (``tensor_str``'s abs, max, masked_select) leaves no node."""
        return self._tensor_text(tensor, func(tensor, *args, **kwargs), tensor)

    def _tensor_text(self, tensor, text: str, obj) -> str:
        """``text`` made from ``tensor``'s values: traced when the tensor is a value of the
        trace (an input, a result, a parameter or buffer), plain when it is a constant.
        ``obj``: the tensor where its ``__repr__`` made the text (see text.formatted)."""
        entry = self._state.get(id(tensor))
        traced = self._lookup(tensor) is not None or (entry is not None and entry[2] is tensor)
        if not traced or not isinstance(text, str) or tensor.is_meta:
            return text
        return formatted(TensorText(self, tensor), text, frame=_formatting_frame(), obj=obj)

    def guard_values(self, tensor: torch.Tensor, reason: str) -> None:
        """Guard ``tensor``'s values and dtype at the current line: text made from them
        decides (trace/text.py, :class:`TensorText`)."""
        with torch._C.DisableTorchFunction():
            concrete = tensor.tolist()
        loc = self.location()
        desc = f"{self._name_of(tensor)}.tolist()"
        ref = self._value_node("prim.tolist", "list", [self.tensor_ref(tensor)], loc)
        self.guard(ref, concrete, desc, "value", loc)
        read = self._lazy_meta("prim.dtype", tensor, "dtype")
        self._guard_dtype(tensor, read, f"{self._name_of(tensor)}.dtype (text)")
        self.warn(
            f"the traced tensor {self._name_of(tensor)} was {reason}; the trace is valid "
            "only for calls where it has the same values"
        )

    def _on_tolist(self, func, tensor, *args, **kwargs):
        concrete = tensor.tolist()
        loc = self.location()
        ref = self._value_node("prim.tolist", "list", [self.tensor_ref(tensor)], loc)
        self.guard(ref, concrete, f"{self._name(tensor)}.tolist()", "value", loc)
        self.warn(
            f"a traced tensor was turned into Python data ({func.__name__}); the trace "
            "is valid only for calls where it has the same values"
        )
        return func(tensor, *args, **kwargs)

    def _to_python(self, kind: type):
        op = {bool: "prim.bool", int: "prim.int", float: "prim.float"}[kind]

        def handler(func, tensor):
            concrete = kind(tensor.item()) if tensor.numel() == 1 else func(tensor)
            loc = self.location()
            ref = self._value_node(op, kind.__name__, [self.tensor_ref(tensor)], loc)
            desc = f"{kind.__name__}({self._name(tensor)})"
            self.guard(ref, concrete, desc, "branch" if kind is bool else "value", loc)
            self.warn(
                f"a traced tensor was turned into a Python {kind.__name__} "
                f"({concrete!r}); the trace follows this value only, and calls where "
                "it differs raise GuardError"
            )
            return concrete

        return handler

    def _on_len(self, func, tensor):
        # Reached only when len() was not our patched builtin: the size becomes a plain int.
        return int(self.size_of(tensor, 0))


def _formatting_frame():
    """The frame of the code that formats a tensor: the user's, or a library's (PyTorch's
    and tracebridge's own frames are passed over)."""
    return user_frame(sys._getframe(2))


DESC_LIMIT = 120


def _short_desc(desc: str) -> str:
    """``desc``, or its head and tail around ``...`` when it is longer than DESC_LIMIT."""
    if len(desc) <= DESC_LIMIT:
        return desc
    half = DESC_LIMIT // 2 - 2
    return f"{desc[:half]} ... {desc[-half:]}"


def _tensor_types_named(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``x.type(torch.IntTensor)`` as ``x.type('torch.IntTensor')``: PyTorch reads a tensor
    type class and its name alike (the dtype, and the device for ``torch.cuda.*``), and a
    file holds the name, not the class."""

    def named(value):
        if type(value).__name__ == "tensortype":
            return f"{value.__module__}.{value.__name__}"
        return value

    return tuple(map(named, args)), {k: named(v) for k, v in kwargs.items()}
