"""In-place arithmetic into a tensor that nothing else can see is recorded out of place.

Note: why, and when it is the same. ``relative_buckets += torch.where(...)`` (the relative
position buckets of T5, MPNet and WavLM) writes into a tensor the code made a line before.
Recorded as ``Tensor.add_``, it is a write into a value that only sizes decide, which
runtime/memo.py must then refuse to keep, and with it every other value of the graph that
only sizes decide (the whole relative position bias, on every call). When no other value
can share the written tensor's memory, the write is just a new value: ``x.add_(y)`` is
recorded as ``add(x, y.expand_as(x))`` and ``x`` stands for that value from then on
(``expand_as`` refuses a ``y`` that does not broadcast to ``x``'s shape, as ``add_`` does,
where ``add`` would make a larger result). Each condition is checked when the call is
recorded, from what the graph says holds on every call:

* ``x`` was made by an op that returns new memory (arithmetic, a factory), not an input,
  state, a view, or a conversion that may return its argument;
* no node has read ``x`` since, so no view of it exists;
* ``x`` and ``y`` have one fixed dtype (trace/noops.py), so ``add`` gives ``x``'s dtype as
  ``add_`` does (a number ``y`` is an int, or ``x`` is floating);
* a tensor ``y`` and ``x`` depend on no input's data (only sizes, state and literals), so
  the extra ``expand_as`` runs in a memoised block, never once per call.

Otherwise the in-place op is recorded as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..ir import ops as opset
from ..ir.program import Ref, refs_in
from . import autocast, param_writes
from .noops import (
    BOOL_RESULT,
    DTYPE_FOLLOWING,
    FLOAT32_FOLLOWING,
    FLOAT_FOLLOWING,
)
from .returned_inputs import _storage as storage

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer

# In-place op -> the out-of-place op recorded for it.
OUT_OF_PLACE = {"Tensor.add_": torch.add, "Tensor.sub_": torch.sub, "Tensor.mul_": torch.mul}
# Ops whose result is always new memory (never an argument or a view of one).
FRESH = (
    DTYPE_FOLLOWING
    | FLOAT_FOLLOWING
    | FLOAT32_FOLLOWING
    | BOOL_RESULT
    | frozenset(
        """arange zeros ones full zeros_like ones_like full_like Tensor.new_zeros
        Tensor.new_ones Tensor.new_full clone cat stack linear matmul masked_fill""".split()
    )
)
# Scalar kinds runtime/memo.py keys on (a value of these kinds keeps a block memoisable).
_KEY_KINDS = frozenset({"int", "bool", "device", "dtype"})


def _broadcasts_into(other: torch.Tensor, x: torch.Tensor) -> bool:
    try:
        return torch.broadcast_shapes(other.shape, x.shape) == x.shape
    except RuntimeError:
        return False


class InPlace:
    """The tracer's out-of-place recording of in-place arithmetic (mixed into
    :class:`Tracer`)."""

    def _inplace_init(self) -> None:
        self._read_ids: set[int] = set()  # values some node has read
        self._input_free: set[int] = set()  # tensors that depend on no input's data
        self._param_places: dict[int, torch.Tensor] | None = None  # storage -> parameter

    def before_param_write(self: Tracer, name: str, args: tuple, kwargs: dict) -> None:
        """Before an op that writes into a parameter's memory (the parameter, a view, its
        ``.data``) runs: have the parameter copied, to be put back when the recording
        ends (trace/param_writes.py)."""
        written = [kwargs["out"]] if isinstance(kwargs.get("out"), torch.Tensor) else []
        # (batch_norm's running statistics are buffers: put back by trace/capture.py)
        if (
            (opset.is_inplace(name) or name == "set_")
            and args
            and isinstance(args[0], torch.Tensor)
        ):
            written.append(args[0])  # set_: not in the op set (refused), but it runs first
        if not written:
            return
        if self._param_places is None:
            params = [t for _, _, t in self._state.values() if isinstance(t, torch.nn.Parameter)]
            self._param_places = {storage(p): p for p in params} if params else {}
            self._param_places.pop(None, None)
            self._param_places.pop(0, None)  # no memory (meta, empty)
        if not self._param_places:
            return
        for tensor in written:
            param = self._param_places.get(storage(tensor))
            if param is not None:
                param_writes.before_write(param)

    def note_reads(self: Tracer, node) -> None:
        """Remember which values ``node`` reads, and whether its results depend on an
        input's data (called for every node recorded)."""
        refs = refs_in((node.args, node.kwargs))
        self._read_ids.update(r.id for r in refs)
        info = opset.info(node.op)
        if node.op == "prim.state":
            free = True
        elif (
            info is None
            or info.flags & {"random", "inplace"}
            or opset.draws_random(node)
            or node.op.startswith("prim.")
        ):
            free = False
        else:
            free = all(r.id in self._input_free or self._scalar_kind(r) in _KEY_KINDS for r in refs)
        if free:
            self._input_free.update(v.id for v in node.outputs if v.kind == "Tensor")

    def _scalar_kind(self: Tracer, ref: Ref) -> str | None:
        node = self._producers.get(ref.id)
        if node is None:
            return None
        for value in node.outputs:
            if value.id == ref.id:
                return value.kind if value.kind != "Tensor" else None
        return None

    def out_of_place(self: Tracer, name: str, func, args: tuple, kwargs: dict):
        """Record the in-place call as its out-of-place op where that is the same on every
        call (see the module's note), run it, and return ``x``; None where it is not."""
        if name not in OUT_OF_PLACE or len(args) < 1 or autocast.active():
            return None
        x = args[0]
        other = args[1] if len(args) > 1 else kwargs.get("other")
        extra = dict(kwargs)
        extra.pop("other", None)
        if len(args) > 2:
            extra["alpha"] = args[2]
        if not isinstance(x, torch.Tensor) or set(extra) - {"alpha"}:
            return None
        if not self._fresh_and_unseen(x) or (x.is_leaf and x.requires_grad):
            return None  # (autograd refuses to write a leaf: let the real call say so)
        if isinstance(other, torch.Tensor) and not _broadcasts_into(other, x):
            return None  # the real call raises its own error
        dtype = self._fixed_dtypes[self._tensor_id(x)]
        alpha = extra.get("alpha", 1)
        if not (self._operand_fits(x, other, dtype) and self._operand_fits(x, alpha, dtype)):
            return None
        with self.mode:
            operand = other.expand_as(x) if isinstance(other, torch.Tensor) else other
            out = OUT_OF_PLACE[name](x, operand, **extra)
        with torch._C.DisableTorchFunction():
            func(*args, **kwargs)  # the write itself, so the traced code sees it
        value = self._lookup(out)[1]
        self._bind_tensor(x, value, self._name(out))
        return x

    def _fresh_and_unseen(self: Tracer, x: torch.Tensor) -> bool:
        """``x`` was made by an op that returns new memory, no node has read it since, and
        its dtype is fixed."""
        hit = self._lookup(x)
        if hit is None:
            return False
        vid = hit[1].id
        node = self._producers.get(vid)
        return (
            node is not None
            and node.op in FRESH
            and len(node.outputs) == 1
            and vid not in self._read_ids
            and vid in self._fixed_dtypes
        )

    def _operand_fits(self: Tracer, x: torch.Tensor, operand, dtype: torch.dtype) -> bool:
        """Whether ``op(x, operand)`` has ``x``'s fixed ``dtype`` on every call (and, for a
        tensor, runs memoised with ``x``)."""
        if isinstance(operand, torch.Tensor):
            vid = self._tensor_id(operand)
            return (
                vid is not None
                and vid in self._input_free
                and self._tensor_id(x) in self._input_free
                and self._fixed_dtypes.get(vid) == dtype
            )
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            return False
        return dtype.is_floating_point or not isinstance(operand, float)
