"""Graph recording: SSA values for tensors, nodes, state and constants, guards, warnings.

Invariant: each tensor the traced code sees maps by identity to exactly one SSA value
(an input, a state read, a constant or an op result), and nodes are appended in
execution order, so the graph is in topological order by construction.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Any

import torch

from ..errors import TracerWarning, UnsupportedOpError
from ..ir import pytree
from ..ir.program import DTYPE_NAMES, Node, Ref, StateEntry, Value
from ..source import SOURCE_LIMIT, source_line, user_location
from . import torch_generators
from .numbers import _Traced
from .text import SymStr

# The Python types that PyTorch takes for dtypes (``torch.ones(n, dtype=bool)``,
# ``x.to(float)``), as it reads them.
_PYTHON_DTYPES = {
    bool: torch.bool,
    int: torch.int64,
    float: torch.float64,
    complex: torch.complex128,
}


# PyTorch's checks whose branch, taken, raises: (module, function) -> the exception's type
# and eager's words (less the sizes it formats). A guard recorded on such a branch keeps
# them at the start of its description (``[raises ValueError: words] what``: a description,
# so that every reader takes the file; shared_ir/SPEC.md section 8), and a call that fails
# it raises an error of that type too, as eager does: a training loop that skips a batch
# of one with ``except ValueError`` goes on with the trace as with the code (prober21b M6).
EAGER_RAISES = {
    ("torch.nn.functional", "_verify_batch_size"): (
        "ValueError",
        "Expected more than 1 value per channel when training",
    ),
    ("torch.nn.functional", "_verify_spatial_size"): (
        "ValueError",
        "Expected more than 1 spatial element when training",
    ),
}


def _eager_raises() -> tuple[str, str] | None:
    """The type and words of the exception that the PyTorch check now deciding a branch
    raises on its other side (:data:`EAGER_RAISES`), or None: read from the calling
    frames, at trace time only."""
    frame = sys._getframe(2)
    for _ in range(12):  # the check's frame is a few calls above the recorder
        if frame is None:
            return None
        found = EAGER_RAISES.get((frame.f_globals.get("__name__"), frame.f_code.co_name))
        if found is not None:
            return found
        frame = frame.f_back
    return None


class Recorder:
    """The tracer's recording methods (mixed into :class:`Tracer`)."""

    # -- values ------------------------------------------------------------------------

    def _new_value(
        self, kind="Tensor", tensor: torch.Tensor | None = None, name=None, shape=None
    ) -> Value:
        value = Value(id=self._next_id, kind=kind, name=name)
        self._next_id += 1
        if tensor is not None:
            value.dtype = DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
            if shape is None:
                # Read without the recording mode: a value's shape is plain ints, never
                # traced sizes (a constant captured at the output is read while recording).
                with torch._C.DisableTorchFunction():
                    shape = tuple(tensor.shape)
            value.shape = list(shape)
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
        for value in node.outputs:
            self._producers[value.id] = node  # trace/noops.py reads where a value came from
        self.note_reads(node)  # trace/inplace.py
        if loc and loc not in self.graph.sources:
            # The line's text goes into the artifact: a runtime quotes it in messages
            # without opening the file a loaded graph names.
            self.graph.sources[loc] = source_line(loc)[:SOURCE_LIMIT]
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
        if torch._C._functorch.is_functorch_wrapped_tensor(tensor):
            # A function transform's own tensor (torch.vmap's batched view, torch.func.grad's
            # tracking wrapper) reached an op: the recorder sees the transform's inside, not
            # a value a graph can hold (kept, it was stale after the weights changed, and
            # the file could not be written).
            raise UnsupportedOpError(
                f"cannot trace a torch.func transform (torch.vmap, torch.func.grad, jacrev...) "
                f"at {self.location() or 'an unknown location'}: its function runs on "
                "wrapped tensors that no graph can record. Write the batched computation "
                "with ordinary ops (broadcasting, einsum, bmm), or keep the transform outside "
                "the traced code"
            )
        name = attribute or f"const{len(self._constants)}"
        self._constants[name] = StateEntry("constant", tensor)
        if attribute:
            self.warn(
                f"the tensor attribute '{attribute}' is not a parameter or buffer: it is "
                "stored in the trace as a constant; use register_buffer() so that it moves "
                "with .to() and is saved in state_dict()"
            )
        elif isinstance(tensor, torch.nn.Parameter):
            self.warn(
                f"a parameter of shape {list(tensor.shape)} of a module the traced code "
                f"calls but does not own (a global model?) is stored in the trace as "
                f"'{name}': writes into it are followed, a new tensor in its place "
                "(load_state_dict(assign=True)) is refused in this process and unknown to a "
                "saved file. Trace the module itself, or an nn.Module that holds it"
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
        if isinstance(obj, SymStr):
            return obj.fix()  # an op's behaviour depends on the text: fix the sizes in it
        if obj is None or isinstance(obj, (bool, str, complex)) or obj is Ellipsis:
            return obj
        if isinstance(obj, torch.Size):  # traced sizes in it are refs (trace/patches.py)
            return tuple(self.encode(d) for d in obj)
        if isinstance(obj, (int, float)):
            return obj
        if isinstance(obj, type) and obj in _PYTHON_DTYPES:
            obj = _PYTHON_DTYPES[obj]  # ``dtype=bool``: PyTorch reads a Python type as a dtype
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
        if type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray":
            # An array (BigBird's block plan: torch.tensor(np.stack(...))) is a constant of
            # the trace with its own shape and dtype; .item() would drop both, and fails on
            # more than one element.
            return self.tensor_ref(torch.from_numpy(obj.copy()))
        if type(obj).__module__ == "numpy" and hasattr(obj, "item"):
            return obj.item()  # a numpy scalar (np.float32(2.0)) is a number
        if isinstance(obj, torch.Generator):  # a random op's generator= (a kept one)
            return torch_generators.reference(obj, self.location())
        raise UnsupportedOpError(
            f"an argument of type {type(obj).__name__} cannot be recorded "
            f"(at {self.location() or 'unknown location'}); pass tensors, numbers, "
            "dtypes, devices or (nested) lists and tuples of them"
        )

    # -- scalars, sizes and guards -----------------------------------------------------------

    def guard(self, ref: Ref, expect, what: str, kind: str, loc: str | None) -> None:
        raises = _eager_raises() if kind == "branch" and expect is False else None
        if raises is not None:  # eager's exception, in the description (SPEC section 8)
            what = f"[raises {raises[0]}: {raises[1]}] {what}"
        self._emit("prim.guard", [ref], {"expect": expect, "what": what, "kind": kind}, loc=loc)

    # -- source locations and warnings --------------------------------------------------------

    def location(self) -> str | None:
        """The user's ``file:line`` making the current call (see :func:`source.user_location`)."""
        return user_location()

    def warn(self, message: str) -> None:
        loc = self.location()
        if loc is None:
            self._give_warning(message, None)
            return
        key = (loc, message.split(";")[0][:40])
        if key in self._warned:
            return
        self._warned.add(key)
        self._give_warning(message, loc)

    def _give_warning(self, message: str, loc: str | None) -> None:
        if self._held_warnings is not None:
            if not _ignored_now(message, loc):  # a filter set where it is made still holds
                self._held_warnings.append((message, loc))
            return
        if loc is None:
            warnings.warn(message, TracerWarning, stacklevel=3)
            return
        filename, _, line = loc.rpartition(":")
        warnings.warn_explicit(
            message,
            TracerWarning,
            filename,
            int(line),
            module=os.path.splitext(os.path.basename(filename))[0],
        )

    @contextlib.contextmanager
    def warnings_held(self):
        """Hold the trace's warnings while the user's code runs, and give them when it has
        returned. Given at once, a warning would meet the filters and the catching the
        code set up for its own (``simplefilter("error")`` around a ``warnings.warn``):
        raised into its ``except``, or kept in its record, it changed what the code did.
        A recording that fails gives them without letting one replace its error."""
        self._held_warnings, held = [], self._held_warnings
        failed = True
        try:
            yield
            failed = False
        finally:
            given, self._held_warnings = self._held_warnings, held
            for message, loc in given:
                if not failed:
                    self._give_warning(message, loc)
                    continue
                with contextlib.suppress(Warning):
                    self._give_warning(message, loc)


def _ignored_now(message: str, loc: str | None) -> bool:
    """Whether the filters in force now ignore a TracerWarning of ``message`` given at
    ``loc``, as ``warnings.warn_explicit`` would decide (the first filter that applies):
    held warnings are given later, outside the ``catch_warnings`` that may ignore them
    (tracebridge's own, or the code's)."""
    filename, lineno, module = "", 0, ""
    if loc is not None:
        filename, _, line = loc.rpartition(":")
        lineno = int(line) if line.isdigit() else 0
        module = os.path.splitext(os.path.basename(filename))[0]
    for action, text, category, module_pattern, filter_line in warnings.filters:
        if (
            (text is None or text.match(message))
            and issubclass(TracerWarning, category)
            and (module_pattern is None or module_pattern.match(module))
            and (filter_line == 0 or filter_line == lineno)
        ):
            return action == "ignore"
    return False
