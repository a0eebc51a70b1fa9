"""Dispatch: how a call into PyTorch reaches the tracer and becomes a node or a descent.

Invariant: every call the recording mode sees is either recorded as one op of the op set,
handled as a conversion to a Python value, descended into (a Python composite), or refused
with an UnsupportedOpError naming the user's line.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch.overrides import TorchFunctionMode

from ..errors import UnsupportedOpError
from ..ir import ops as opset
from ..ir import pytree
from ..ir.program import Ref, refs_in
from ..source import OWN_DIR as _OWN_DIR
from ..source import TORCH_DIR as _TORCH_DIR
from . import autocast, cache_values, caches, torch_generators
from .carried_reads import unwatched
from .numbers import _Traced

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer

# torch's own, bound before a recording replaces it: the user's reads are guarded
# (trace/patches.py), the recorder's own are not the user's decisions
_default_dtype = torch.get_default_dtype

# --- the recording mode ----------------------------------------------------------------


class _RecordingMode(TorchFunctionMode):
    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return unwatched(self.tracer.dispatch, func, args, kwargs or {})


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


def _plain_numbers(data):
    """``data`` with every traced number replaced by its value (lists, tuples, dicts)."""
    if isinstance(data, _Traced):
        return data._concrete()
    if isinstance(data, (list, tuple)):
        plain = [_plain_numbers(x) for x in data]
        return plain if isinstance(data, list) else tuple(plain)
    if isinstance(data, dict):
        return {k: _plain_numbers(v) for k, v in data.items()}
    return data


def _has_traced_float(data) -> bool:
    """Whether a traced float is among ``data`` (lists, tuples, dicts): the numbers
    PyTorch's parser hands on where it takes only a tensor (trace/numbers.py, SymFloat)."""
    if isinstance(data, _Traced):
        return isinstance(data, float)
    if isinstance(data, (list, tuple)):
        return any(_has_traced_float(x) for x in data)
    if isinstance(data, dict):
        return any(_has_traced_float(x) for x in data.values())
    return False


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


# The argument kinds that take a number as it is: by whether the number is an int.
_NUMBER_KINDS = {
    True: frozenset({"int", "scalar", "dim", "index", "any"}),
    False: frozenset({"float", "scalar", "any"}),
}


def _packed_varargs(name: str, func, args: tuple) -> tuple:
    """``args`` of a call as the op's function takes them.

    A Tensor method folded into a function op (``FOLDED_METHODS``) may take its sizes or dims
    as varargs (``x.flip(0, 1)``, ``x.broadcast_to(2, 3)``, ``x.squeeze(0, 1)``) or as one
    bare int (``x.flip(0)``), where the function takes one list (``torch.flip(x, (0, 1))``)
    and refuses the other forms: recorded as they came, the node would fail when it runs.
    They are recorded as the list. A single int stays as it is where the function takes it
    too (``torch.squeeze(x, 0)``), so such nodes are unchanged.
    """
    info = opset.info(name)
    if info is None or info.varargs is None or name.startswith("Tensor."):
        return args
    if getattr(torch._C.TensorBase, getattr(func, "__name__", ""), None) is not func:
        return args  # the function itself, which takes no varargs
    at = info.varargs[0]
    spread = args[at:]
    if not spread or not all(isinstance(a, int) and not isinstance(a, bool) for a in spread):
        return args
    if len(spread) == 1 and at < len(info.args) and info.varargs[1] in info.args[at]:
        return args
    return (*args[:at], list(spread))


# Exceptions that Python's own protocols catch (``hasattr``, ``getattr`` with a default,
# iteration; a TypeError of a comparison operator, which torch turns into NotImplemented
# so that ``x == "mean"`` is False): raised by a call, they say nothing of which path the
# code takes. A TypeError depends on the arguments' types, which the trace's structure
# fixes, never on sizes or values.
_PROTOCOL_EXCEPTIONS = (AttributeError, StopIteration, TypeError)


class Dispatcher:
    """The tracer's dispatch methods (mixed into :class:`Tracer`)."""

    def dispatch(self, func, args: tuple, kwargs: dict):
        """Record, descend into or refuse one call (the module's invariant); a call the
        traced code made itself (not one made inside another) that raises is remembered
        (``failed_calls``: trace/capture.py refuses a trace whose code caught one)."""
        if self._dispatch_depth:
            return self._dispatch(func, args, kwargs)
        self._dispatch_depth += 1
        try:
            return self._dispatch(func, args, kwargs)
        except _PROTOCOL_EXCEPTIONS:
            raise
        except Exception as exc:
            label = opset.canonical_name(func) or _label(func)
            self.failed_calls.append((label, self.location(), exc))
            raise
        finally:
            self._dispatch_depth -= 1

    def _dispatch(self, func, args: tuple, kwargs: dict):
        prop = opset.property_name(func)
        if prop is not None:
            if getattr(func, "__name__", "") == "__set__":
                return self._on_property_set(prop, func, *args)
            return self._on_property(prop, func, args[0])
        handler = self._handlers.get(func)
        if handler is not None:
            return handler(func, *args, **kwargs)
        name = opset.canonical_name(func)
        if name is not None:
            return self.record(name, func, args, kwargs)
        if isinstance(func, types.FunctionType):
            return self._descend(func, args, kwargs)
        where = self.location() or "unknown location"
        attribute = _attribute_read(func)
        if attribute is not None:
            raise UnsupportedOpError(
                f"cannot trace reading the tensor attribute .{attribute} at {where}: "
                + _UNREADABLE.get(attribute, _UNREADABLE[""])
            )
        raise UnsupportedOpError(
            f"cannot record a call to {_label(func)} at {where}: it "
            "is not in tracebridge's op set (shared_ir/opset.md lists the operations a graph "
            "may hold; nothing that reads raw memory, storages or has effects outside "
            "tensors); move it out of the traced code or compute it beforehand"
        )

    def _into_out(self, name: str, func, args: tuple, kwargs: dict):
        """``op(..., out=t)`` (``F.normalize`` in spectral norm's power iteration) as what it
        does where ``t`` already has the result's shape and dtype: the op, then
        ``t.copy_(result)``; ``t`` is returned. Elsewhere eager would resize ``t`` or cast,
        which a copy would not do: refused, saying what to write."""
        out = kwargs["out"]
        rest = {key: value for key, value in kwargs.items() if key != "out"}
        with self.mode:
            result = func(*args, **rest)
            fits = isinstance(result, torch.Tensor) and result.dtype == out.dtype
            # sizes compared as traced: a call where they differ is refused by a guard
            if fits and tuple(result.shape) == tuple(out.shape):
                out.copy_(result)
                return out
        _known_keywords(name, {"out": out}, self.location())  # the refusal, with advice
        return None  # (not reached)

    def _on_property_set(self, prop: str, setter, tensor, value):
        """``t.requires_grad = flag`` is ``t.requires_grad_(flag)``; other tensor
        attributes set in traced code (``.data``, ``.grad``) cannot be recorded."""
        if prop == "requires_grad":
            return self.record(
                "Tensor.requires_grad_", torch.Tensor.requires_grad_, (tensor, value), {}
            )
        raise UnsupportedOpError(
            f"cannot record setting the tensor attribute .{prop} at "
            f"{self.location() or 'unknown location'}: it changes a tensor outside the "
            "graph; compute a new tensor instead, or move it out of the traced code"
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
        except UnsupportedOpError as exc:
            named = _in_the_users_call(exc, func, self.location())
            if len(self._descending) > 1 or named is exc:
                raise
            raise named from exc
        finally:
            self._descending.pop()

    def record(self, name: str, func, args: tuple, kwargs: dict):
        if name in opset.RANDOM_OPS or name in opset.RANDOM_WHEN:  # watched around the draw
            with torch_generators.drawing(args, kwargs, self.location()):
                return self._record(name, func, args, kwargs)
        return self._record(name, func, args, kwargs)

    def _record(self, name: str, func, args: tuple, kwargs: dict):
        self.before_param_write(name, args, kwargs)  # trace/inplace.py
        if self.caches_used:
            cache_values.no_write_into_cached(self.caches_used, name, args, kwargs, self.location)
        written = self.out_of_place(name, func, args, kwargs)  # trace/inplace.py
        if written is not None:
            return written
        if isinstance(kwargs.get("out"), torch.Tensor) and "out" not in _op_keywords(name):
            return self._into_out(name, func, args, kwargs)
        loc = self.location()
        if self.caches_used and name in opset.RANDOM_OPS:
            caches.no_draw_inside(self.caches_used, name, loc)
        packed = (_packed_varargs(name, func, args), _canonical_keywords(name, kwargs))
        if packed[1]:
            _known_keywords(name, packed[1], loc)
        checked = False
        if name in _FROM_PYTHON_DATA:
            # The node holds the traced numbers; the call reads their values. PyTorch reads
            # an int into a floating tensor with __float__, which would guard the value.
            as_recorded = self._numbers_as_tensors(name, *packed)
            result = func(*_plain_numbers(args), **_plain_numbers(kwargs))
        else:
            result, as_recorded, checked = self._eager_result(name, func, args, kwargs, packed)
        enc_args = [self.encode(a) for a in as_recorded[0]]
        enc_kwargs = {k: self.encode(v) for k, v in as_recorded[1].items()}
        if not checked and (as_recorded[0] is not args or as_recorded[1] is not kwargs):
            self._same_as_recorded(name, func, as_recorded, result, loc)
        enc_args, enc_kwargs = autocast.cast_inputs(
            self, func, args, kwargs, enc_args, enc_kwargs, result
        )
        if self.is_noop(name, args, kwargs, enc_args, enc_kwargs, result):
            return result  # the result is the input, on every call the guards accept
        if self.guard_returned_input(name, args, enc_args, enc_kwargs, result):
            return result  # the same, now that a guard fixes the input's dtype (noops.py)
        # A write may tell apart the two names of a conversion that gave back its input;
        # such a conversion's input is bound to its result below (trace/returned_inputs.py).
        self.before_write(name, args, kwargs)
        self.note_returned_input(name, args, kwargs, result)
        if name == "unbind" and isinstance(result, tuple):
            # ``for row in x`` reaches us as unbind (Tensor.__iter__ skips the mode).
            self.warn(
                f"iterating over a tensor (or unbinding it) unrolls the code for its "
                f"{len(result)} slices; a call with another count raises GuardError"
            )
        if name in _FROM_PYTHON_DATA:
            traced = bool(refs_in(enc_args))
            self.warn(
                f"torch.{name.rsplit('.', 1)[-1]}(...) of Python data: "
                + (
                    "the traced numbers in it are recorded, the rest is fixed in the trace"
                    if traced
                    else "the data is fixed in the trace; if it depends on the "
                    "inputs, build it with tensor operations instead"
                )
            )
        # Bools too: ``torch.equal(x, y)`` and ``allclose`` answer a Python bool, which no
        # traced value can stand for (bool has no subclass): it is an output of the node,
        # guarded where it was made. Left in the result as a constant, an ``if`` on it
        # took the traced branch on every call, silently.
        leaves, spec = pytree.flatten(result, lambda x: isinstance(x, (torch.Tensor, int, float)))
        outputs = []
        wrapped = []
        decided: list[tuple] = []  # (value, the bool the trace saw)
        desc = self._call_desc(name, args, kwargs)
        for index, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                value = self._new_value("Tensor", leaf)
                # messages name it by the call that made it, never by a value id (prober20a F5)
                self._bind_tensor(leaf, value, desc if len(leaves) == 1 else f"{desc}[{index}]")
                outputs.append(value)
                wrapped.append(leaf)
            elif isinstance(leaf, bool):
                value = self._new_value("bool")
                outputs.append(value)
                wrapped.append(leaf)
                decided.append((value, leaf))
            else:
                kind = "int" if isinstance(leaf, int) else "float"
                value = self._new_value(kind)
                outputs.append(value)
                wrapped.append(self._wrap_scalar(leaf, Ref(value.id), f"{name}(...)"))
        if not leaves and result is None:
            spec = None
        node = self._emit(name, enc_args, enc_kwargs, outputs, spec, loc)
        self.learn(node, result)
        for value, seen in decided:
            self.guard(Ref(value.id), seen, desc, "value", loc)
            self.warn(
                f"{desc} was used as a Python bool ({seen}); calls where it differs raise "
                "GuardError"
            )
        if spec is not None and spec["t"] == "leaf" and wrapped and wrapped[0] is not result:
            return wrapped[0]
        if any(isinstance(w, _Traced) for w in wrapped):
            return pytree.unflatten(wrapped, spec)
        return result

    def _eager_result(self, name, func, args, kwargs, packed) -> tuple:
        """The call's result, the call as recorded, and whether the result was computed
        from the call as recorded.

        Note: a traced number where PyTorch takes only a tensor.
          PyTorch's parser hands such a call to the recording mode (traced numbers have a
          ``__torch_function__``): ``torch.ceil(h / p)`` on a size, written for
          torch.jit.trace, whose sizes are 0-dim tensors, behind ``torch.jit.is_tracing()``
          (transformers' MobileViT, ``torch_int``). Eager PyTorch refuses a Python number
          there; the trace does what torch.jit.trace does and takes the number as a 0-dim
          tensor of its value of the default dtype, as torch.jit.trace has it there (its
          ``h / p`` of 0-dim int64 sizes is float32) and as a Python float acts in the
          eager branch: with an integer tensor, ``arange(n) * scale`` is float32 (a 0-dim
          float64 tensor made it float64). Recorded as ``scalar_tensor`` of the traced
          number, so the graph stays general in the sizes it came from. Only then: a call
          that eager refuses for another reason (no traced float taken as a tensor) is
          refused.
        """
        try:
            result = func(*args, **kwargs)
        except TypeError:
            if not _has_traced_float((args, kwargs)):
                raise
            as_recorded = self._numbers_as_tensors(name, *packed, _default_dtype())
            if as_recorded[0] is packed[0] and as_recorded[1] is packed[1]:
                raise
            with torch._C.DisableTorchFunction():
                return func(*as_recorded[0], **as_recorded[1]), as_recorded, True
        return result, self._numbers_as_tensors(name, *packed), False

    def _numbers_as_tensors(
        self, name: str, args: tuple, kwargs: dict, floats: torch.dtype = torch.float64
    ) -> tuple[tuple, dict]:
        """``args`` and ``kwargs`` with each number given where the op takes only a tensor
        (``torch.div(x.size(1), 2, rounding_mode="trunc")`` in Longformer) replaced by a
        recorded ``scalar_tensor`` of it: PyTorch turns such a number into a 0-dim tensor
        itself (int64 for an int, float64 for a float: ``floats``), and the op set's
        argument kinds take only a tensor there."""
        info = opset.info(name)
        if info is None:
            return args, kwargs

        def wrap(value, kinds):
            if (
                "tensors" in kinds
                and isinstance(value, (list, tuple))
                and any(isinstance(v, _Traced) for v in value)
            ):
                # ``torch.stack([h, w])`` of sizes, written for torch.jit.trace.
                items = [wrap(v, {"tensor"}) for v in value]
                return items if isinstance(value, list) else tuple(items)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return value
            if "tensor" not in kinds or kinds & _NUMBER_KINDS[isinstance(value, int)]:
                return value
            dtype = torch.int64 if isinstance(value, int) else floats
            with self.mode:
                return torch.scalar_tensor(value, dtype=dtype)

        wrapped = tuple(
            wrap(a, set(info.args[i])) if i < len(info.args) else a for i, a in enumerate(args)
        )
        wrapped_kw = {k: wrap(v, set(info.kwargs.get(k, ()))) for k, v in kwargs.items()}
        changed = any(a is not b for a, b in zip(wrapped, args))
        changed_kw = any(wrapped_kw[k] is not kwargs[k] for k in kwargs)
        return (wrapped if changed else args), (wrapped_kw if changed_kw else kwargs)

    def _same_as_recorded(self, name: str, func, as_recorded, result, loc) -> None:
        """The call as it is recorded (numbers as 0-dim tensors) must give what the call
        gave: PyTorch ranks a number below a 0-dim tensor when it picks the result's dtype
        (``torch.add(2, int32 0-dim)`` is int32, with an int64 0-dim tensor int64), so
        where the two differ the trace refuses the call instead of recording another
        dtype."""
        with torch._C.DisableTorchFunction():
            again = func(*as_recorded[0], **as_recorded[1])
        got, _ = pytree.flatten(again, lambda x: isinstance(x, torch.Tensor))
        want, _ = pytree.flatten(result, lambda x: isinstance(x, torch.Tensor))
        if [(t.dtype, t.shape) for t in got] != [(t.dtype, t.shape) for t in want]:
            raise UnsupportedOpError(
                f"cannot record {name} at {loc or 'unknown location'}: it is given a Python "
                "number where it takes a tensor, and recorded with the number as a 0-dim "
                "tensor it would give another dtype; pass a tensor of the dtype you mean "
                "(torch.tensor(n, dtype=...))"
            )

    def _call_desc(self, name: str, args: tuple, kwargs: dict) -> str:
        """A short expression for an op's result, for messages: ``gt(sum(x), 0)``."""
        parts = []
        for arg in list(args) + list(kwargs.values()):
            if isinstance(arg, torch.Tensor):
                hit = self._lookup(arg)
                parts.append(hit[2] if hit else self._name_of(arg))  # a weight by its path
            elif isinstance(arg, _Traced):
                parts.append(arg._desc)
            elif isinstance(arg, (int, float, bool, str)) or arg is None:
                parts.append(repr(arg))
            else:
                parts.append("...")
        text = f"{name.rsplit('.', 1)[-1]}({', '.join(parts)})"
        return text if len(text) <= 60 else f"{name.rsplit('.', 1)[-1]}(...)"


# PyTorch's argument parser takes NumPy's names for some arguments (python_arg_parser.cpp:
# ``torch.cat(xs, axis=1)``, ``x.sum(axis=0, keepdims=True)``); the op set knows only
# PyTorch's own, so a call by NumPy's name is recorded under PyTorch's.
_NUMPY_KEYWORDS = {
    "axis": "dim",
    "keepdims": "keepdim",
    "x": "input",
    "a": "input",
    "x1": "input",
    "x2": "other",
}


# Keywords of PyTorch's factory bindings and their defaults: given their default, they
# change nothing, so an op the op set lists without them takes the call without them.
_BINDING_DEFAULTS = {
    "requires_grad": (False,),
    "pin_memory": (False, None),
    "layout": (torch.strided, None),
    # ``torch.randn(shape, generator=generator)`` with the caller's default None (UnivNet's
    # noise): the global generator, as without the keyword. (The random ops name it: a
    # generator the code keeps is recorded by name, trace/torch_generators.py.)
    "generator": (None,),
}


def _is_default(value, defaults: tuple) -> bool:
    return any(value is d or (type(value) is type(d) and value == d) for d in defaults)


def _canonical_keywords(name: str, kwargs: dict) -> dict:
    """``kwargs`` with each NumPy alias the op set does not know renamed to PyTorch's name,
    and without ``out=None`` (the default: no op of the set writes into a given tensor);
    the same dict when there is nothing to change, so the recorder sees nothing changed."""
    if kwargs and "out" in kwargs and kwargs["out"] is None:
        kwargs = {key: value for key, value in kwargs.items() if key != "out"}
    if kwargs and any(key in _BINDING_DEFAULTS for key in kwargs):
        # ``torch.zeros(n, requires_grad=False)``: a binding's keyword given its default,
        # which the op set does not name for this op, is the call without it.
        info = opset.info(name)
        if info is not None:
            kwargs = {
                key: value
                for key, value in kwargs.items()
                if key in info.kwargs
                or key not in _BINDING_DEFAULTS
                or not _is_default(value, _BINDING_DEFAULTS[key])
            }
    if not kwargs or not any(key in _NUMPY_KEYWORDS for key in kwargs):
        return kwargs
    info = opset.info(name)
    if info is None:
        return kwargs
    renamed = {}
    for key, value in kwargs.items():
        canonical = _NUMPY_KEYWORDS.get(key)
        if canonical and key not in info.kwargs and canonical in info.kwargs:
            key = canonical
        renamed[key] = value
    return renamed if renamed.keys() != kwargs.keys() else kwargs


def _op_keywords(name: str) -> frozenset:
    info = opset.info(name)
    return frozenset(info.kwargs) if info is not None else frozenset()


def _known_keywords(name: str, kwargs: dict, loc: str | None) -> None:
    """Refuse, at the line that made the call, a keyword the op set does not name for op
    ``name`` (a keyword of a Python binding, not of the op: ``nonzero(as_tuple=...)`` was
    traced and then refused at save): a trace that cannot be saved is never produced."""
    info = opset.info(name)
    if info is None:
        return
    unknown = [key for key in kwargs if key not in info.kwargs]
    if unknown:
        raise UnsupportedOpError(
            f"cannot record {name} at {loc or 'unknown location'} with the keyword "
            f"{unknown[0]!r}: the op set names no such argument of {name} (shared_ir/"
            "opset.md), so no saved graph could hold the call; "
            + _KEYWORD_ADVICE.get(unknown[0], _DEFAULT_ADVICE)
        )


_DEFAULT_ADVICE = (
    "leave it out where its default does the same, or compute this outside the traced code"
)
# What to write instead, for keywords of PyTorch's bindings that no op of the set takes.
_KEYWORD_ADVICE = {
    "out": "an out= tensor is recorded only where it has the result's shape and dtype (here "
    "eager would resize or cast it); write the result where it belongs instead, as "
    "`dest.copy_(op(...))` (an op and an in-place copy, both recorded)",
    "requires_grad": "a tensor made inside the traced code cannot require grad in a saved "
    "graph: make it a parameter of the module (nn.Parameter) or pass it as an input",
}


# Why a tensor attribute that no op stands for cannot be read in traced code.
_UNREADABLE = {
    "grad": (
        "a gradient is not an input the trace can follow (backward() sets it outside the "
        "call, so the trace would keep what it saw, or the branch it took on it, for every "
        "call); pass the gradient as an input, or read it outside the traced code"
    ),
    "": (
        "it is not a value of the tensor's data, shape or type that an op of the set reads "
        "(shared_ir/opset.md), so the trace would keep what it saw for every call; read it "
        "outside the traced code"
    ),
}


def _attribute_read(func) -> str | None:
    """The name of the tensor attribute ``func`` reads (a ``getset_descriptor``'s
    ``__get__`` on a tensor class: ``x.grad``), or None."""
    owner = getattr(func, "__self__", None)
    if type(func).__name__ != "method-wrapper" or getattr(func, "__name__", "") != "__get__":
        return None
    if type(owner).__name__ != "getset_descriptor":
        return None
    cls = getattr(owner, "__objclass__", None)
    if not (isinstance(cls, type) and issubclass(cls, torch._C.TensorBase)):
        return None
    return getattr(owner, "__name__", None)


def _in_the_users_call(exc: UnsupportedOpError, func, where: str | None) -> UnsupportedOpError:
    """A refusal met inside a Python function the traced code called (``Tensor.dim_order``
    refused at its helper ``sym_max``), named as the user wrote the call: the function and
    the user's line first, the internal reason after. A message that already names the
    function is kept as it is."""
    label = _label(func)
    inner = str(exc)
    if label in inner or func.__name__ in inner:
        return exc
    return UnsupportedOpError(
        f"cannot record {label} at {where or 'unknown location'}: tracebridge follows it "
        f"into its Python code and cannot record what it does there ({inner}); move the "
        f"call to {label} out of the traced code, or compute its result beforehand"
    )


def _label(func) -> str:
    """How a user wrote the call: ``torch.ops.torchvision.nms`` for a registered operator
    (whose own qualified name is pybind's record type), else the function's name."""
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch._ops."):
        return f"torch.ops.{module[len('torch._ops.') :]}.{func.__name__}"
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
