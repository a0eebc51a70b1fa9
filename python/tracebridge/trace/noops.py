"""Conversions that do nothing on every call are not recorded: ``x.to(dtype)`` of a tensor
that has that dtype on every call, ``x.contiguous()`` of a tensor that is contiguous on
every call.

Note: why a recorded no-op may be left out, and when. PyTorch returns the tensor itself from
``Tensor.to`` when there is nothing to convert and from ``Tensor.contiguous`` when it is
contiguous already, so at trace time such a call is visibly a no-op (its result *is* its
input). Left out of the graph, the result stays bound to the input's value, which is what
eager code holds too. That is right for the trace only if the call is a no-op on *every*
call the graph's guards accept, which the trace-time tensors alone do not say (inputs may
come with another dtype of their kind, or another layout). So two facts are kept per value,
each one proven from what is already recorded:

* its dtype is fixed: a guard recorded before checks it (every dtype read is guarded,
  trace/conversions.py), or it is the result of a conversion to a fixed dtype, or of an
  elementwise op whose tensor operands all have that fixed floating dtype (PyTorch's type
  promotion then gives that dtype whatever the sizes; Python numbers do not promote a
  floating tensor);
* it is contiguous: it is the result of ``contiguous()``, or a view that keeps the
  contiguity of a contiguous input (``view``, ``reshape``, ``flatten``, ``unsqueeze``...).

A call that the facts do not prove a no-op is recorded as before. Nothing is learnt or left
out inside an autocast region, where an op's result dtype is not its operands'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..ir.program import Node, Ref
from . import autocast

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer

# Ops whose result has the dtype their tensor operands share, for a floating dtype with any
# real numbers beside them, and for an integer dtype with integers: not on any of
# autocast's lists, so a call under autocast gives the same dtype too.
DTYPE_FOLLOWING = frozenset(
    "add sub mul neg abs min max minimum maximum remainder floor_divide where clamp relu".split()
)
# The same, for a floating dtype only (an integer one would give a float).
FLOAT_FOLLOWING = frozenset("div silu gelu tanh sigmoid".split())
# Ops that autocast runs in float32: their result keeps a float32 operand's dtype even then.
FLOAT32_FOLLOWING = frozenset({"pow", "rsqrt", "sqrt", "exp", "log", "mean", "sum", "softmax"})
# Views and copies of one tensor: the result has their first argument's dtype.
DTYPE_KEEPING = frozenset(
    """getitem Tensor.view Tensor.reshape reshape transpose Tensor.permute permute unsqueeze
    squeeze flatten unflatten Tensor.unflatten Tensor.expand Tensor.expand_as narrow select
    clone Tensor.contiguous masked_fill zeros_like ones_like full_like empty_like Tensor.new_zeros
    Tensor.new_ones Tensor.new_full Tensor.new_empty dropout feature_dropout alpha_dropout
    feature_alpha_dropout""".split()
)
# Comparisons and logical ops: always bool.
BOOL_RESULT = frozenset("eq ne lt le gt ge logical_not logical_and logical_or isnan".split())
# Conversions named after their dtype.
NAMED_CONVERSIONS = {
    "Tensor.float": torch.float32,
    "Tensor.double": torch.float64,
    "Tensor.half": torch.float16,
    "Tensor.bfloat16": torch.bfloat16,
    "Tensor.int": torch.int32,
    "Tensor.long": torch.int64,
    "Tensor.bool": torch.bool,
}
# Views whose result is contiguous whenever their input is (strides are recomputed for the
# new sizes; size-1 dimensions do not count in contiguity).
CONTIGUITY_KEEPING = frozenset(
    {
        "Tensor.view",
        "Tensor.reshape",
        "reshape",
        "flatten",
        "unflatten",
        "Tensor.unflatten",
        "unsqueeze",
        "squeeze",
        "Tensor.view_as",
        "Tensor.reshape_as",
    }
)
_TO_FLAGS = frozenset({"non_blocking"})


# Calls that convert a tensor as another op does, where they give back their tensor
# argument: ``torch.as_tensor(x, dtype=d, device=v)`` is ``x.to(device=v, dtype=d)``
# (prober21b F6: it was recorded, and every later use of ``x`` read the conversion).
_AS_CONVERSION = {"as_tensor": "Tensor.to"}


def _without_device(name: str, args: tuple, enc_args, enc_kwargs):
    """``Tensor.to``'s encoded arguments with the device left out (``x.to(d, dtype)``,
    ``x.to(device=d, dtype=t)``), or None where it names no device."""
    if name != "Tensor.to":
        return None
    if "device" in enc_kwargs:
        return list(enc_args), {k: v for k, v in enc_kwargs.items() if k != "device"}
    if (
        len(args) > 1
        and isinstance(args[1], (torch.device, str, int))
        and not isinstance(args[1], bool)
    ):
        return [enc_args[0], *enc_args[2:]], dict(enc_kwargs)
    return None


def _leaves(obj):
    """The leaves of nested tuples, lists and dicts (an op's arguments)."""
    if isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _leaves(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _leaves(item)
    else:
        yield obj


class NoOps:
    """The tracer's no-op facts and checks (mixed into :class:`Tracer`)."""

    def _facts_init(self) -> None:
        self._fixed_dtypes: dict[int, torch.dtype] = {}  # value id -> dtype on every call
        self._contiguous: set[int] = set()  # value ids contiguous on every call
        self._producers: dict[int, Node] = {}  # value id -> the node that made it

    def know_dtype(self: Tracer, ref: Ref, dtype: torch.dtype) -> None:
        """A guard recorded now checks that value ``ref`` has ``dtype`` on every call."""
        self._fixed_dtypes[ref.id] = dtype

    def _fixed_dtype_of(self: Tracer, obj) -> torch.dtype | None:
        """The dtype a call-time argument is on every call: a literal dtype, or a recorded
        read of a tensor whose dtype is fixed (``x.to(y.dtype)``)."""
        if isinstance(obj, torch.dtype):
            return obj
        if isinstance(obj, Ref):
            node = self._producers.get(obj.id)
            if node is not None and node.op == "prim.dtype" and isinstance(node.args[0], Ref):
                return self._fixed_dtypes.get(node.args[0].id)
        return None

    def _tensor_id(self: Tracer, tensor: torch.Tensor) -> int | None:
        hit = self._lookup(tensor)
        if hit is not None:
            return hit[1].id
        entry = self._state.get(id(tensor))
        if entry is not None and entry[2] is tensor:
            ref = self._state_refs.get(entry[0])
            return ref.id if ref is not None else None
        return None

    def is_noop(self: Tracer, name: str, args: tuple, kwargs: dict, enc_args, enc_kwargs, result):
        """Whether the call just made does nothing on every call the guards accept, so it
        is left out of the graph (see the module's note)."""
        if not args or result is not args[0] or autocast.active():
            return False
        source = self._tensor_id(args[0])
        if source is None:
            return False
        name = _AS_CONVERSION.get(name, name)
        if name == "Tensor.contiguous":
            fmt = enc_args[1] if len(enc_args) > 1 else enc_kwargs.get("memory_format")
            return fmt in (None, torch.contiguous_format) and source in self._contiguous
        target = self._conversion_target(name, enc_args, enc_kwargs)
        return target is not None and self._fixed_dtypes.get(source) == target

    def guard_returned_input(self: Tracer, name: str, args: tuple, enc_args, enc_kwargs, result):
        """Whether a dtype conversion that gave back its own input when traced (and that
        :meth:`is_noop` could not prove a no-op) was made one by a guard on its input's
        dtype, so it is left out of the graph.

        Note: why a guard, not the call. ``y = x.float()`` of a float32 ``x`` gives ``x``
        itself: from then on the trace sees one object, and cannot tell the code's later
        uses of ``x`` from its uses of ``y``. Recorded, every later use would read the
        conversion, and a float64 call would run ``x.double()`` as ``double(float(x))``,
        losing precision without a word (``torch.jit.trace`` does so). So the call's
        input is guarded to have the dtype it had when traced: on every call the guards
        accept, the conversion gives its input back as it did, and a call with another
        dtype raises ``GuardError`` naming the line (trace with an example of that dtype).
        ``contiguous()`` keeps the call: its result has its input's values, so only a
        later write (or a read of its layout) could tell the two apart, and
        trace/returned_inputs.py guards it where one does.
        """
        if not args or result is not args[0] or autocast.active():
            return False
        if self._tensor_id(args[0]) is None:
            return False
        method = name.rsplit(".", 1)[-1]
        name = _AS_CONVERSION.get(name, name)
        moves = False
        if self._conversion_target(name, enc_args, enc_kwargs) is None:
            # ``x.to(device, dtype)``: gave back its input too. The dtype is guarded as
            # below, but the call stays in the graph: on a call where the devices differ
            # it moves the tensor, as ``x.to(device)`` does.
            without = _without_device(name, args, enc_args, enc_kwargs)
            if without is None or self._conversion_target(name, *without) is None:
                return False
            moves = True
        tensor = args[0]
        read = self._lazy_meta("prim.dtype", tensor, "dtype")
        self._guard_dtype(
            tensor, read, f"{self._name_of(tensor)}.dtype ({method}() gave it back when traced)"
        )
        return not moves

    def _conversion_target(self: Tracer, name: str, enc_args, enc_kwargs):
        """The fixed dtype a pure dtype conversion converts to (nothing else changed: no
        device, copy or memory format), or None."""
        if name in NAMED_CONVERSIONS:
            if len(enc_args) > 1 or set(enc_kwargs) - {"memory_format"}:
                return None
            if enc_kwargs.get("memory_format", torch.preserve_format) != torch.preserve_format:
                return None
            return NAMED_CONVERSIONS[name]
        if name != "Tensor.to":
            return None
        rest = list(enc_args[1:])
        if "dtype" in enc_kwargs:
            if rest:
                return None
            dtype = enc_kwargs["dtype"]
        elif rest:
            dtype = rest.pop(0)
        else:
            return None
        flags = rest + [enc_kwargs[k] for k in enc_kwargs if k in _TO_FLAGS]
        if set(enc_kwargs) - _TO_FLAGS - {"dtype"} or len(rest) > 1:
            return None
        if not all(isinstance(f, bool) for f in flags):
            return None
        return self._fixed_dtype_of(dtype)

    def learn(self: Tracer, node: Node, result) -> None:
        """Facts about the output of a recorded node. They are read from the node's own
        arguments (the values it was given), not from the tensors: an op may return its
        input object (an evaluation-mode dropout), which is then bound to the output."""
        if len(node.outputs) != 1 or not isinstance(result, torch.Tensor):
            return
        if autocast.active():
            return
        out = node.outputs[0].id
        dtype = self._result_dtype(node)
        if dtype is not None and dtype == result.dtype:
            self._fixed_dtypes[out] = dtype
        if self._keeps_contiguous(node) and result.is_contiguous():
            self._contiguous.add(out)

    def _kind_of(self: Tracer, ref: Ref) -> str | None:
        """The kind of a recorded value (``Tensor``, ``int``, ``dtype``...), or None."""
        node = self._producers.get(ref.id)
        if node is not None:
            return next((v.kind for v in node.outputs if v.id == ref.id), None)
        return "Tensor" if any(v.id == ref.id for v in self.graph.inputs) else None

    def _result_dtype(self: Tracer, node: Node):
        """The dtype the node's result has on every call the guards accept, or None."""
        name, args, kwargs = node.op, node.args, node.kwargs
        if name in NAMED_CONVERSIONS or name == "Tensor.to":
            return self._conversion_target_any(name, node)
        if name == "Tensor.type_as" and len(args) == 2 and isinstance(args[1], Ref):
            return self._fixed_dtypes.get(args[1].id)
        if kwargs.get("dtype") is not None:
            return self._fixed_dtype_of(kwargs["dtype"])  # a factory, sum(dtype=...)
        if name in BOOL_RESULT:
            return torch.bool
        if name in DTYPE_KEEPING:
            if not args or not isinstance(args[0], Ref):
                return None
            if any(self._is_dtype(a) for a in _leaves((args[1:], kwargs))):
                return None  # a view as another dtype
            return self._fixed_dtypes.get(args[0].id)
        if name not in (DTYPE_FOLLOWING | FLOAT_FOLLOWING | FLOAT32_FOLLOWING):
            return None
        operands = (args[1:], kwargs) if name == "where" else (args, kwargs)  # not the mask
        shared = self._shared_fixed_dtype(operands)
        if shared is None or shared == torch.bool or shared.is_complex:
            return None
        integer = not shared.is_floating_point
        if integer and (name not in DTYPE_FOLLOWING or self._has_float(operands)):
            return None
        if name in FLOAT32_FOLLOWING and shared != torch.float32:
            return None
        return shared

    def _is_dtype(self: Tracer, leaf) -> bool:
        return isinstance(leaf, torch.dtype) or (
            isinstance(leaf, Ref) and self._kind_of(leaf) == "dtype"
        )

    def _has_float(self: Tracer, tree) -> bool:
        """Whether a real non-integer number is among an op's arguments (it would make an
        integer tensor's result floating)."""
        return any(
            isinstance(leaf, float) or (isinstance(leaf, Ref) and self._kind_of(leaf) == "float")
            for leaf in _leaves(tree)
        )

    def _conversion_target_any(self: Tracer, name: str, node: Node):
        """The fixed dtype of a conversion's result, whatever else the call changes."""
        if name in NAMED_CONVERSIONS:
            return NAMED_CONVERSIONS[name]
        if "dtype" in node.kwargs:
            return self._fixed_dtype_of(node.kwargs["dtype"])
        for arg in node.args[1:3]:
            dtype = self._fixed_dtype_of(arg)
            if dtype is not None:
                return dtype
        return None

    def _shared_fixed_dtype(self: Tracer, tree) -> torch.dtype | None:
        """The one fixed dtype of every tensor in ``tree`` (an op's recorded arguments);
        None if one's dtype is not fixed, if they differ, or if a leaf could change the
        result's dtype (a complex number, a dtype). Other leaves (real numbers, dims, flags)
        leave a floating tensor's dtype as it is."""
        shared = None
        for leaf in _leaves(tree):
            if isinstance(leaf, complex) or self._is_dtype(leaf):
                return None
            if isinstance(leaf, Ref) and self._kind_of(leaf) == "Tensor":
                dtype = self._fixed_dtypes.get(leaf.id)
                if dtype is None or (shared is not None and dtype != shared):
                    return None
                shared = dtype
        return shared

    def _keeps_contiguous(self: Tracer, node: Node) -> bool:
        if node.op == "Tensor.contiguous":
            fmt = node.args[1] if len(node.args) > 1 else node.kwargs.get("memory_format")
            return fmt in (None, torch.contiguous_format)
        if node.op not in CONTIGUITY_KEEPING or not node.args:
            return False
        if any(self._is_dtype(a) for a in _leaves((node.args[1:], node.kwargs))):
            return False  # a view as another dtype
        source = node.args[0]
        return isinstance(source, Ref) and source.id in self._contiguous
