"""The tracer: run the user's code once on example inputs and record what it does.

Note: how recording works.
  * A ``TorchFunctionMode`` sees every call into PyTorch's Python API. A call whose
    function is in the op set becomes one node; it runs for real (with the mode off), and
    each tensor it returns is mapped, by identity, to a new SSA value.
  * A Python composite that PyTorch routes through ``__torch_function__`` (``F.relu``,
    ``F.batch_norm``, ``Tensor.__iter__``) is not an op: we run a copy of it whose
    ``has_torch_function*`` checks answer False, with the mode on, so the builtins it
    calls are recorded and aliases fold by themselves.
  * Tensors are looked up by identity: inputs, then the module's parameters and buffers
    (bound by path, read through ``prim.state``), then anything else, which becomes a
    named constant with a warning.
  * Sizes are ``SymInt``s: ``int`` subclasses (PyTorch's argument parser accepts them
    without a hook) whose arithmetic is recorded, so ``x.view(x.size(0), -1)`` stays
    general. Turning a traced value into a Python value (``bool``, ``int``, a comparison
    used by ``if``, ``range``) records a ``prim.guard`` at the user's line.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import linecache
import math
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from . import opset, pytree
from .errors import TraceError, TracerWarning, UnsupportedOpError
from .ir import DTYPE_NAMES, Graph, Node, Ref, StateEntry, Value, refs_in

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(__file__) + os.sep
# Frames in these files are never "the user's line": PyTorch, tracebridge, contextlib, and
# reticulate's Python shims (an R function traced from R calls in through them).
_INTERNAL_DIRS = (_TORCH_DIR, _OWN_DIR, contextlib.__file__, os.path.dirname(np.__file__))
_INTERNAL_PARTS = (os.sep + "rpytools" + os.sep,)


def is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


# --- traced Python numbers ------------------------------------------------------------


class _Traced:
    """Mixin for traced numbers: a concrete value, the tracer, and how to name the value."""

    __slots__ = ()

    def _binop(self, other, op, reflected=False):
        if op == "mul" and isinstance(other, (list, tuple, str, bytes)):
            # ``n * [x]`` repeats a sequence: its length is fixed in the trace.
            count = self._tracer.specialize(self, "int")
            return other * count
        return self._tracer.scalar_op(op, (other, self) if reflected else (self, other))

    def _compare(self, other, op):
        return self._tracer.scalar_compare(op, self, other)

    __add__ = lambda s, o: s._binop(o, "add")  # noqa: E731
    __radd__ = lambda s, o: s._binop(o, "add", True)  # noqa: E731
    __sub__ = lambda s, o: s._binop(o, "sub")  # noqa: E731
    __rsub__ = lambda s, o: s._binop(o, "sub", True)  # noqa: E731
    __mul__ = lambda s, o: s._binop(o, "mul")  # noqa: E731
    __rmul__ = lambda s, o: s._binop(o, "mul", True)  # noqa: E731
    __truediv__ = lambda s, o: s._binop(o, "truediv")  # noqa: E731
    __rtruediv__ = lambda s, o: s._binop(o, "truediv", True)  # noqa: E731
    __floordiv__ = lambda s, o: s._binop(o, "floordiv")  # noqa: E731
    __rfloordiv__ = lambda s, o: s._binop(o, "floordiv", True)  # noqa: E731
    __mod__ = lambda s, o: s._binop(o, "mod")  # noqa: E731
    __rmod__ = lambda s, o: s._binop(o, "mod", True)  # noqa: E731
    __pow__ = lambda s, o: s._binop(o, "pow")  # noqa: E731
    __rpow__ = lambda s, o: s._binop(o, "pow", True)  # noqa: E731
    __eq__ = lambda s, o: s._compare(o, "eq")  # noqa: E731
    __ne__ = lambda s, o: s._compare(o, "ne")  # noqa: E731
    __lt__ = lambda s, o: s._compare(o, "lt")  # noqa: E731
    __le__ = lambda s, o: s._compare(o, "le")  # noqa: E731
    __gt__ = lambda s, o: s._compare(o, "gt")  # noqa: E731
    __ge__ = lambda s, o: s._compare(o, "ge")  # noqa: E731
    __lshift__ = lambda s, o: s._binop(o, "lshift")  # noqa: E731
    __rlshift__ = lambda s, o: s._binop(o, "lshift", True)  # noqa: E731
    __rshift__ = lambda s, o: s._binop(o, "rshift")  # noqa: E731
    __rrshift__ = lambda s, o: s._binop(o, "rshift", True)  # noqa: E731
    __and__ = lambda s, o: s._binop(o, "and")  # noqa: E731
    __rand__ = lambda s, o: s._binop(o, "and", True)  # noqa: E731
    __or__ = lambda s, o: s._binop(o, "or")  # noqa: E731
    __ror__ = lambda s, o: s._binop(o, "or", True)  # noqa: E731
    __xor__ = lambda s, o: s._binop(o, "xor")  # noqa: E731
    __rxor__ = lambda s, o: s._binop(o, "xor", True)  # noqa: E731

    def bit_length(self):
        return self._tracer.specialize(self, "int").bit_length()

    def bit_count(self):
        return self._tracer.specialize(self, "int").bit_count()

    def to_bytes(self, *args, **kwargs):
        return self._tracer.specialize(self, "int").to_bytes(*args, **kwargs)

    def as_integer_ratio(self):
        value = self._concrete()
        return self._tracer.specialize(self, type(value).__name__).as_integer_ratio()

    def __divmod__(self, other):
        return (self // other, self % other)

    def __rdivmod__(self, other):
        return (other // self, other % self)

    def __invert__(self):
        return self._tracer.scalar_op("invert", (self,))

    def __round__(self, ndigits=None):
        return self._tracer.scalar_op("round", (self,) if ndigits is None else (self, ndigits))

    def __trunc__(self):
        return self._tracer.scalar_op("trunc", (self,))

    def __str__(self):
        # Text made from a size can flow anywhere (int(f"{n}"), dict keys): fix it.
        return str(self._tracer.specialize(self, type(self._concrete()).__name__))

    def __format__(self, spec):
        return format(self._tracer.specialize(self, type(self._concrete()).__name__), spec)

    def __neg__(self):
        return self._tracer.scalar_op("neg", (self,))

    def __abs__(self):
        return self._tracer.scalar_op("abs", (self,))

    def __bool__(self):
        return self._tracer.specialize(self, "bool")

    def __int__(self):
        return self._tracer.specialize(self, "int")

    def __float__(self):
        return self._tracer.specialize(self, "float")

    def __index__(self):
        return self._tracer.specialize(self, "int")

    def __hash__(self):
        # Hashing means a set or dict lookup: which entry it finds depends on the value.
        return hash(self._tracer.specialize(self, type(self._concrete()).__name__))

    def __reduce__(self):
        return (type(self._concrete()), (self._concrete(),))

    def __new__(cls, value, tracer: Tracer, ref: Ref | None, desc: str, lazy=None):
        obj = cls._base.__new__(cls, value)
        obj._tracer, obj._ref, obj._desc, obj._lazy = tracer, ref, desc, lazy
        return obj

    def _concrete(self):
        """The plain number, read without a guard (for the tracer's own use)."""
        return type(self)._unwrap(self)

    def __repr__(self):
        return repr(self._concrete())  # for debugging output only: no guard


class SymInt(_Traced, int):
    """An int whose value was computed from traced tensors (a size, an ``.item()``)."""

    _base = int
    _unwrap = int.__int__

    def __ceil__(self):
        return self

    __floor__ = __trunc__ = __ceil__

    def __round__(self, ndigits=None):
        return self if ndigits is None or ndigits >= 0 else _Traced.__round__(self, ndigits)


class SymFloat(_Traced, float):
    """A float computed from traced values (``t.item()``, ``x.size(-1) ** -0.5``)."""

    _base = float
    _unwrap = float.__float__

    def __ceil__(self):
        return self._tracer.scalar_op("ceil", (self,))

    def __floor__(self):
        return self._tracer.scalar_op("floor", (self,))


class SymSize(tuple):
    """What ``x.shape`` and ``x.size()`` return while tracing: a tuple of SymInts."""

    def numel(self):
        result = 1
        for dim in self:
            result = result * dim
        return result


# --- the recording mode ----------------------------------------------------------------


class _RecordingMode(TorchFunctionMode):
    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.tracer.dispatch(func, args, kwargs or {})


def _no_torch_function(*args, **kwargs):
    return False


_PATCHED_GLOBALS = {
    "has_torch_function": _no_torch_function,
    "has_torch_function_unary": _no_torch_function,
    "has_torch_function_variadic": _no_torch_function,
}
_patched_copies: dict[Callable, Callable] = {}


def _without_dispatch(func: types.FunctionType) -> Callable:
    """A copy of ``func`` whose ``has_torch_function*`` checks answer False."""
    copy = _patched_copies.get(func)
    if copy is None:
        namespace = dict(func.__globals__)
        namespace.update(_PATCHED_GLOBALS)
        namespace["torch"] = torch
        copy = types.FunctionType(
            func.__code__, namespace, func.__name__, func.__defaults__, func.__closure__
        )
        copy.__kwdefaults__ = func.__kwdefaults__
        _patched_copies[func] = copy
    return copy


_FROM_PYTHON_DATA = frozenset({"tensor", "as_tensor", "asarray", "Tensor.new_tensor"})


def _dispatching_function() -> types.FunctionType | None:
    """The Python function that called ``handle_torch_function`` (found on the stack)."""
    frame = sys._getframe(2)
    overrides = os.path.join(_TORCH_DIR, "overrides.py")
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_OWN_DIR) and filename != overrides:
            candidate = frame.f_globals.get(frame.f_code.co_name)
            if isinstance(candidate, types.FunctionType) and candidate.__code__ is frame.f_code:
                return candidate
            return None
        frame = frame.f_back
    return None


class Tracer:
    """Records one call of ``fn`` into a :class:`Graph`.

    ``state`` maps ``id(tensor)`` to ``(name, kind)`` for the parameters and buffers of the
    module being traced; ``constants`` collects captured tensors (shared across methods).
    """

    def __init__(
        self,
        state: dict[int, tuple[str, str, torch.Tensor]],
        constants: dict[str, StateEntry],
        warned: set,
    ):
        self.graph = Graph()
        self._next_id = 0
        self._tensor_values: dict[int, tuple[torch.Tensor, Value, str]] = {}
        self._state = state
        self._state_refs: dict[str, Ref] = {}
        self._constants = constants
        self._dtype_reads: dict[torch.dtype, Callable[[], Ref]] = {}
        self._device_reads: dict[int, tuple[torch.device, Callable[[], Ref]]] = {}
        self._meta_refs: dict[tuple, Ref] = {}
        self._size_cache: dict[tuple[int, int], SymInt] = {}
        self._warned = warned
        self._descending: list = []
        self._grad_entry: tuple[Ref, bool] | None = None
        self._grad_depth = 0
        self.mode = _RecordingMode(self)
        self._handlers = self._special_handlers()

    # -- values ------------------------------------------------------------------------

    def _new_value(
        self, kind="Tensor", tensor: torch.Tensor | None = None, name=None, shape=None
    ) -> Value:
        value = Value(id=self._next_id, kind=kind, name=name)
        self._next_id += 1
        if tensor is not None:
            value.dtype = DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
            value.shape = list(shape) if shape is not None else list(tensor.shape)
        return value

    def _bind_tensor(self, tensor: torch.Tensor, value: Value, desc: str) -> None:
        # The tensor is kept alive so its id() cannot be reused by another tensor.
        self._tensor_values[id(tensor)] = (tensor, value, desc)

    def _lookup(self, tensor: torch.Tensor):
        hit = self._tensor_values.get(id(tensor))
        if hit is not None and hit[0] is tensor:
            return hit
        return None

    def add_input(self, tensor: torch.Tensor, name: str) -> Value:
        rank = tensor.dim()
        first = sum(len(v.shape or []) for v in self.graph.inputs)
        shape = [f"s{first + i}" for i in range(rank)]
        value = self._new_value("Tensor", tensor, name=name, shape=shape)
        value.example = list(tensor.shape)
        self.graph.inputs.append(value)
        self._bind_tensor(tensor, value, name)
        return value

    def _emit(self, op: str, args=(), kwargs=None, outputs=(), out_spec=None, loc=None) -> Node:
        node = Node(
            op=op,
            args=list(args),
            kwargs=dict(kwargs or {}),
            outputs=list(outputs),
            out_spec=out_spec,
            loc=loc,
        )
        self.graph.nodes.append(node)
        return node

    def _value_node(self, op: str, kind: str, args=(), loc: str | None = None) -> Ref:
        """Emit ``op(*args)`` with one non-tensor result (a size, a dtype, a Python bool)."""
        value = self._new_value(kind)
        self._emit(op, list(args), outputs=[value], out_spec=pytree.LEAF, loc=loc)
        return Ref(value.id)

    def _name(self, tensor: torch.Tensor) -> str:
        """How messages name a tensor: its input name or the ops that made it."""
        hit = self._lookup(tensor)
        return hit[2] if hit else "tensor"

    def tensor_ref(self, tensor: torch.Tensor) -> Ref:
        hit = self._lookup(tensor)
        if hit is not None:
            return Ref(hit[1].id)
        entry = self._state.get(id(tensor))
        if entry is not None and entry[2] is tensor:
            if entry[1] == "attribute":
                return self._capture_constant(tensor, entry[0])
            return self._state_ref(entry[0], tensor)
        return self._capture_constant(tensor)

    def _state_ref(self, name: str, tensor: torch.Tensor, loc: str | None = None) -> Ref:
        ref = self._state_refs.get(name)
        if ref is None:
            value = self._new_value("Tensor", tensor, name=name)
            self._emit("prim.state", [name], outputs=[value], out_spec=pytree.LEAF, loc=loc)
            ref = self._state_refs[name] = Ref(value.id)
        return ref

    def _capture_constant(self, tensor: torch.Tensor, attribute: str | None = None) -> Ref:
        for name, entry in self._constants.items():
            if entry.tensor is tensor:
                return self._state_ref(name, tensor)
        name = attribute or f"const{len(self._constants)}"
        self._constants[name] = StateEntry("constant", tensor)
        if attribute:
            self.warn(
                f"the tensor attribute '{attribute}' is not a parameter or buffer: it is "
                "stored in the trace as a constant; use register_buffer() so that it moves "
                "with .to() and is saved in state_dict()"
            )
        else:
            self.warn(
                f"a tensor of shape {list(tensor.shape)} that is neither an input nor a "
                f"parameter or buffer (a closure or global?) is stored in the trace as "
                f"constant '{name}'; pass it as an input or register it as a buffer if it "
                "can change"
            )
        # A captured constant remembers where it was first used: the place to look when
        # its value turns out to depend on the inputs.
        return self._state_ref(name, tensor, loc=self.location())

    def encode(self, obj: Any) -> Any:
        """Turn a call argument into IR: tensors and traced numbers become Refs."""
        if isinstance(obj, torch.Tensor):
            return self.tensor_ref(obj)
        if isinstance(obj, _Traced):
            return self.scalar_ref(obj)
        if obj is None or isinstance(obj, (bool, str, complex)) or obj is Ellipsis:
            return obj
        if isinstance(obj, torch.Size):
            return tuple(int(d) for d in obj)
        if isinstance(obj, (int, float)):
            return obj
        if isinstance(obj, torch.dtype):
            read = self._dtype_reads.get(obj)
            return read() if read is not None else obj
        if isinstance(obj, torch.device):
            read = self._device_reads.get(id(obj))
            return read[1]() if read is not None and read[0] is obj else obj
        if isinstance(obj, (torch.memory_format, torch.layout)):
            return obj
        if isinstance(obj, list):
            return [self.encode(x) for x in obj]
        if isinstance(obj, tuple):
            return tuple(self.encode(x) for x in obj)
        if isinstance(obj, dict):
            return {k: self.encode(v) for k, v in obj.items()}
        if isinstance(obj, slice):
            return slice(self.encode(obj.start), self.encode(obj.stop), self.encode(obj.step))
        if type(obj).__module__ == "numpy" and hasattr(obj, "item"):
            return obj.item()
        raise UnsupportedOpError(
            f"an argument of type {type(obj).__name__} cannot be recorded "
            f"(at {self.location() or 'unknown location'}); pass tensors, numbers, "
            "dtypes, devices or (nested) lists and tuples of them"
        )

    # -- scalars, sizes and guards -----------------------------------------------------------

    def scalar_ref(self, sym: _Traced) -> Ref:
        if sym._tracer is not self:
            raise TraceError("a traced number from another trace was used in this one")
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

    def size_of(self, tensor: torch.Tensor, dim: int) -> SymInt:
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
            return cached
        hit = self._lookup(tensor)
        desc = f"{hit[2]}.shape[{dim}]" if hit else f"size(dim {dim})"
        loc = self.location()

        def materialize():
            return self._value_node("prim.size", "int", [self.tensor_ref(tensor), dim], loc)

        sym = SymInt(shape[dim], self, None, desc, materialize)
        self._size_cache[key] = sym
        return sym

    def scalar_op(self, op: str, operands: tuple):
        concrete = [o._concrete() if isinstance(o, _Traced) else o for o in operands]
        if not all(isinstance(c, (int, float)) for c in concrete):
            return NotImplemented
        result = opset.SCALAR_OPS[f"scalar.{op}"](*concrete)
        symbols = {
            "add": "+",
            "sub": "-",
            "mul": "*",
            "truediv": "/",
            "floordiv": "//",
            "mod": "%",
            "pow": "**",
        }
        descs = [o._desc if isinstance(o, _Traced) else repr(o) for o in operands]
        if op in symbols:
            desc = f"({descs[0]} {symbols[op]} {descs[1]})"
        else:
            desc = f"{op}({', '.join(descs)})"
        value = self._new_value("int" if isinstance(result, int) else "float")
        args = [self.encode(o) for o in operands]
        self._emit(f"scalar.{op}", args, outputs=[value], out_spec=pytree.LEAF, loc=self.location())
        return self._wrap_scalar(result, Ref(value.id), desc)

    def scalar_compare(self, op: str, left, right):
        concrete = [o._concrete() if isinstance(o, _Traced) else o for o in (left, right)]
        if not all(isinstance(c, (int, float)) for c in concrete):
            return NotImplemented
        result = opset.SCALAR_OPS[f"scalar.{op}"](*concrete)
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
        self.guard(Ref(value.id), result, what, "branch", loc)
        if _called_from_user_code():
            # PyTorch's own shape checks compare sizes all the time; only the user's
            # comparisons are decisions worth a warning.
            self.warn(
                f"the comparison {what} of traced values was turned into a Python bool "
                f"({result}); calls where it differs raise GuardError"
            )
        return result

    def specialize(self, sym: _Traced, kind: str):
        """A traced number became a plain Python number: guard on its value."""
        concrete = sym._concrete()
        result = {"bool": bool, "int": int, "float": float}[kind](concrete)
        loc = self.location()
        self.guard(self.scalar_ref(sym), concrete, sym._desc, "value", loc)
        if kind != "bool":
            self.warn(
                f"the traced value {sym._desc} was turned into a Python {kind} "
                f"({result!r}); the trace is valid only while it stays {result!r}"
            )
        return result

    def guard(self, ref: Ref, expect, what: str, kind: str, loc: str | None) -> None:
        self._emit("prim.guard", [ref], {"expect": expect, "what": what, "kind": kind}, loc=loc)

    # -- the dispatcher -------------------------------------------------------------------------

    def dispatch(self, func, args: tuple, kwargs: dict):
        prop = opset.property_name(func)
        if prop is not None:
            return self._on_property(prop, func, args[0])
        handler = self._handlers.get(func)
        if handler is not None:
            return handler(func, *args, **kwargs)
        name = opset.canonical_name(func)
        if name is not None:
            return self.record(name, func, args, kwargs)
        if isinstance(func, types.FunctionType):
            return self._descend(func, args, kwargs)
        label = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        raise UnsupportedOpError(
            f"cannot record a call to {label} at {self.location() or 'unknown location'}: it "
            "is not in tracebridge's op set (it has effects outside tensors, or is not a "
            "tensor operation); move it out of the traced code or compute it beforehand"
        )

    def _descend(self, func, args, kwargs):
        key = (func, tuple(id(a) for a in args))
        if key in self._descending:
            # Re-entered from inside ``func``: a helper of it dispatched under func's public
            # name. Either a C method of the same name does the work (record it), or a
            # Python helper called handle_torch_function (descend into that helper).
            base = getattr(torch._C.TensorBase, func.__name__, None)
            name = opset.canonical_name(base) if base is not None else None
            if name is not None:
                return self.record(name, base, args, kwargs)
            helper = _dispatching_function()
            if helper is not None and helper is not func:
                return self._descend(helper, args, kwargs)
            raise UnsupportedOpError(
                f"cannot record {func.__qualname__} at {self.location()}: it dispatches to "
                "itself in a way the tracer cannot enter"
            )
        self._descending.append(key)
        try:
            with self.mode:
                return _without_dispatch(func)(*args, **kwargs)
        finally:
            self._descending.pop()

    def record(self, name: str, func, args: tuple, kwargs: dict):
        loc = self.location()
        enc_args = [self.encode(a) for a in args]
        enc_kwargs = {k: self.encode(v) for k, v in kwargs.items()}
        result = func(*args, **kwargs)
        if name == "unbind" and isinstance(result, tuple):
            # ``for row in x`` reaches us as unbind (Tensor.__iter__ skips the mode).
            self.warn(
                f"iterating over a tensor (or unbinding it) unrolls the code for its "
                f"{len(result)} slices; a call with another count raises GuardError"
            )
        if name in _FROM_PYTHON_DATA:
            traced = next(refs_in(enc_args), None) is not None
            self.warn(
                f"torch.{name.rsplit('.', 1)[-1]}(...) of Python data: "
                + (
                    "the traced numbers in it are recorded, the rest is fixed in the trace"
                    if traced
                    else "the data is fixed in the trace; if it depends on the "
                    "inputs, build it with tensor operations instead"
                )
            )
        leaves, spec = pytree.flatten(
            result, lambda x: isinstance(x, (torch.Tensor, int, float)) and not isinstance(x, bool)
        )
        outputs = []
        wrapped = []
        desc = self._call_desc(name, args, kwargs)
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                value = self._new_value("Tensor", leaf)
                self._bind_tensor(leaf, value, desc if len(leaves) == 1 else f"%{value.id}")
                outputs.append(value)
                wrapped.append(leaf)
            else:
                kind = "int" if isinstance(leaf, int) else "float"
                value = self._new_value(kind)
                outputs.append(value)
                wrapped.append(self._wrap_scalar(leaf, Ref(value.id), f"{name}(...)"))
        if not leaves and result is None:
            spec = None
        self._emit(name, enc_args, enc_kwargs, outputs, spec, loc)
        if spec is not None and spec["t"] == "leaf" and wrapped and wrapped[0] is not result:
            return wrapped[0]
        if any(isinstance(w, _Traced) for w in wrapped):
            return pytree.unflatten(wrapped, spec)
        return result

    def _call_desc(self, name: str, args: tuple, kwargs: dict) -> str:
        """A short expression for an op's result, for messages: ``gt(sum(x), 0)``."""
        parts = []
        for arg in list(args) + list(kwargs.values()):
            if isinstance(arg, torch.Tensor):
                hit = self._lookup(arg)
                parts.append(hit[2] if hit else "tensor")
            elif isinstance(arg, _Traced):
                parts.append(arg._desc)
            elif isinstance(arg, (int, float, bool, str)) or arg is None:
                parts.append(repr(arg))
            else:
                parts.append("...")
        text = f"{name.rsplit('.', 1)[-1]}({', '.join(parts)})"
        return text if len(text) <= 60 else f"{name.rsplit('.', 1)[-1]}(...)"

    def _on_property(self, prop: str, getter, tensor: torch.Tensor):
        if prop == "shape":
            return self._on_size(getter, tensor)
        if prop == "dtype":
            dtype = tensor.dtype
            self._dtype_reads[dtype] = self._lazy_meta("prim.dtype", tensor, "dtype")
            return dtype
        if prop == "device":
            device = tensor.device
            self._device_reads[id(device)] = (
                device,
                self._lazy_meta("prim.device", tensor, "device"),
            )
            return device
        if prop in opset.TENSOR_OP_PROPERTIES:
            return self.record(f"Tensor.{prop}", getter, (tensor,), {})
        if prop == "requires_grad" and self._is_input(tensor):
            # Whether a caller's input requires grad can change from call to call.
            concrete = getter(tensor)
            loc = self.location()
            ref = self._value_node("prim.requires_grad", "bool", [self.tensor_ref(tensor)], loc)
            self.guard(ref, concrete, f"{self._name(tensor)}.requires_grad", "branch", loc)
            return concrete
        return getter(tensor)

    def _is_input(self, tensor: torch.Tensor) -> bool:
        hit = self._lookup(tensor)
        return hit is not None and any(v.id == hit[1].id for v in self.graph.inputs)

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
            T.storage_offset: concrete,
            T.element_size: concrete,
            T.is_contiguous: self._on_is_contiguous,
            T.is_floating_point: concrete,
            T.is_complex: concrete,
            T.is_signed: concrete,
            T.get_device: concrete,
            T.is_inference: concrete,
            T.is_conj: concrete,
            T.is_neg: concrete,
            T.__repr__: concrete,
            T.__format__: concrete,
            T.__hash__: concrete,
            T.is_same_size: concrete,
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
            handlers[getattr(torch, name)] = concrete
        handlers[torch.numel] = self._on_numel
        handlers[torch._C._set_grad_enabled] = self._on_set_grad_enabled
        return handlers

    def _on_set_grad_enabled(self, func, mode):
        """``torch.no_grad()`` and friends. The switch back at the end of the outermost
        block restores the *caller's* mode, read at run time, not the mode at trace time."""
        if self._grad_entry is None:
            ref = self._value_node("prim.grad_enabled", "bool")
            self._grad_entry = (ref, torch.is_grad_enabled())
            self._grad_depth = 0
        entry_ref, entry_mode = self._grad_entry
        arg = bool(mode)
        if arg == entry_mode and self._grad_depth > 0:
            self._grad_depth -= 1
            if self._grad_depth == 0:
                arg = entry_ref
        elif arg != torch.is_grad_enabled():
            self._grad_depth += 1
        self._emit("set_grad_enabled", [arg], loc=self.location())
        return func(mode)

    def _concrete(self, func, *args, **kwargs):
        return func(*args, **kwargs)

    def _on_stride(self, func, tensor, dim=None):
        """Strides are traced integers, like sizes."""
        with torch._C.DisableTorchFunction():
            strides = tensor.stride()
        rank = len(strides)
        dims = range(rank) if dim is None else [int(dim) % max(rank, 1)]
        loc = self.location()
        out = []
        for d in dims:
            ref = self._value_node("prim.stride", "int", [self.tensor_ref(tensor), d], loc)
            out.append(SymInt(strides[d], self, ref, f"{self._name(tensor)}.stride({d})"))
        return tuple(out) if dim is None else out[0]

    def _on_is_contiguous(self, func, tensor, *args, **kwargs):
        concrete = func(tensor, *args, **kwargs)
        if args or kwargs:  # is_contiguous(memory_format=...): rare, keep it concrete
            return concrete
        loc = self.location()
        ref = self._value_node("prim.is_contiguous", "bool", [self.tensor_ref(tensor)], loc)
        self.guard(ref, concrete, f"{self._name(tensor)}.is_contiguous()", "branch", loc)
        return concrete

    def _on_size(self, func, tensor, dim=None):
        if dim is None:
            return SymSize(self.size_of(tensor, i) for i in range(tensor.dim()))
        return self.size_of(tensor, int(dim))

    def _on_numel(self, func, tensor):
        ref = self._value_node("prim.numel", "int", [self.tensor_ref(tensor)], self.location())
        return SymInt(tensor.numel(), self, ref, f"{self._name(tensor)}.numel()")

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
        return self._wrap_scalar(concrete, ref, desc)

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

    # -- source locations and warnings --------------------------------------------------------

    def location(self) -> str | None:
        """The user's ``file:line`` making the current call: the innermost Python frame
        outside PyTorch and tracebridge, else the line a foreign front end (R) reported."""
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if (
                not filename.startswith(_INTERNAL_DIRS)
                and not filename.startswith("<frozen")
                and not any(part in filename for part in _INTERNAL_PARTS)
            ):
                return f"{filename}:{frame.f_lineno}"
            frame = frame.f_back
        return getattr(_foreign, "location", None)

    def warn(self, message: str) -> None:
        loc = self.location()
        if loc is None:
            warnings.warn(message, TracerWarning, stacklevel=2)
            return
        key = (loc, message.split(";")[0][:40])
        if key in self._warned:
            return
        self._warned.add(key)
        filename, _, line = loc.rpartition(":")
        warnings.warn_explicit(
            message,
            TracerWarning,
            filename,
            int(line),
            module=os.path.splitext(os.path.basename(filename))[0],
        )


_foreign = threading.local()


def set_foreign_location(location: str | None) -> None:
    """For front ends in other languages: the ``file:line`` of their code that is running
    now (R reports it before each op while tracing), used where no Python frame is the
    user's. ``None`` or ``""`` clears it."""
    _foreign.location = location or None


def _called_from_user_code() -> bool:
    """Whether the code that made the current comparison is the user's (not PyTorch's)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIR):
        frame = frame.f_back
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return not filename.startswith(_INTERNAL_DIRS) and not any(
        part in filename for part in _INTERNAL_PARTS
    )


def source_line(loc: str | None) -> str:
    """The text of the user's source line at ``loc`` (``file:line``), or ''."""
    if not loc:
        return ""
    filename, _, line = loc.rpartition(":")
    try:
        return linecache.getline(filename, int(line)).strip()
    except ValueError:
        return ""


# --- builtins that need to see traced sizes ----------------------------------------------

_original_len = builtins.len
_original_range = builtins.range
_patch_lock = threading.Lock()
_patch_depth = 0  # how many threads are tracing: the builtins stay patched while any is


class _ActiveTracers(threading.local):
    def __init__(self):
        self.stack: list[Tracer] = []


_tracers = _ActiveTracers()  # per thread: another thread's len() is never recorded


def _traced_len(obj):
    active = _tracers.stack
    if active and isinstance(obj, torch.Tensor) and obj.dim() > 0:
        return active[-1].size_of(obj, 0)
    return _original_len(obj)


class _TracedRangeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _original_range)


class _traced_range(metaclass=_TracedRangeMeta):  # noqa: N801 - stands in for builtins.range
    """``range`` while tracing: a traced bound fixes the loop's length, so guard on it."""

    def __new__(cls, *args):
        active = _tracers.stack
        if active and any(isinstance(a, _Traced) for a in args):
            tracer = active[-1]
            plain = []
            for a in args:
                if isinstance(a, _Traced):
                    tracer.guard(
                        tracer.scalar_ref(a), a._concrete(), a._desc, "loop", tracer.location()
                    )
                    tracer.warn(
                        f"a Python loop over the traced size {a._desc} is unrolled "
                        f"for {a._concrete()}; calls with another size raise GuardError"
                    )
                    plain.append(a._concrete())
                else:
                    plain.append(a)
            return _original_range(*plain)
        return _original_range(*args)


# math functions read an int's value in C without a hook: while tracing, the ones code
# applies to sizes (math.sqrt(head_dim), math.log2(n)) record a scalar op instead.
_MATH_OPS = ("sqrt", "log", "log2", "log10", "exp", "ceil", "floor", "trunc")
_original_math = {name: getattr(math, name) for name in _MATH_OPS}
_original_is_grad_enabled = torch.is_grad_enabled


def _traced_math(name: str):
    original = _original_math[name]

    def traced(*args):
        active = _tracers.stack
        if active and any(isinstance(a, _Traced) for a in args):
            return active[-1].scalar_op(name, args)
        return original(*args)

    traced.__name__ = name
    traced.__doc__ = original.__doc__
    return traced


def _traced_is_grad_enabled() -> bool:
    """``torch.is_grad_enabled()`` in the user's code is a decision: guard on it."""
    mode = _original_is_grad_enabled()
    active = _tracers.stack
    if active and _called_from_user_code():
        tracer = active[-1]
        loc = tracer.location()
        ref = tracer._value_node("prim.grad_enabled", "bool", loc=loc)
        tracer.guard(ref, mode, "torch.is_grad_enabled()", "branch", loc)
    return mode


_TRACED_MATH = {name: _traced_math(name) for name in _MATH_OPS}


def _patch(on: bool) -> None:
    builtins.len = _traced_len if on else _original_len
    builtins.range = _traced_range if on else _original_range
    for name in _MATH_OPS:
        setattr(math, name, _TRACED_MATH[name] if on else _original_math[name])
    torch.is_grad_enabled = _traced_is_grad_enabled if on else _original_is_grad_enabled


@contextlib.contextmanager
def recording(tracer: Tracer):
    """Activate ``tracer`` in this thread: its mode, and the traced ``len``, ``range``,
    ``math.*`` and ``torch.is_grad_enabled`` (per thread: other threads see the originals'
    behaviour, as the patched functions look for a tracer of their own thread)."""
    global _patch_depth
    _tracers.stack.append(tracer)
    with _patch_lock:
        _patch_depth += 1
        _patch(True)
    try:
        with tracer.mode:
            yield
    finally:
        _tracers.stack.pop()
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                _patch(False)


def argument_names(fn: Callable, count: int) -> list[str]:
    """Names for the positional parameters of ``fn`` (``x``, ``y``), padded as needed."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        names = [p.name for p in params]
    except (TypeError, ValueError):
        names = []
    var = None
    with contextlib.suppress(TypeError, ValueError):
        var = next(
            (
                p.name
                for p in inspect.signature(fn).parameters.values()
                if p.kind == p.VAR_POSITIONAL
            ),
            None,
        )
    while len(names) < count:
        names.append(f"{var or 'arg'}{len(names)}")
    return names[: max(count, len(names))]


def leaf_names(arg_names: list[str], args: tuple, kwargs: dict) -> list[str]:
    """A readable name for each tensor leaf of the inputs (``x``, ``pair_0``, ``mask``)."""
    names: list[str] = []
    for name, arg in list(zip(arg_names, args)) + list(kwargs.items()):
        leaves, _ = pytree.flatten(arg, is_tensor)
        if _original_len(leaves) == 1 and isinstance(arg, torch.Tensor):
            names.append(name)
        else:
            names.extend(f"{name}_{i}" for i in _original_range(_original_len(leaves)))
    return names
