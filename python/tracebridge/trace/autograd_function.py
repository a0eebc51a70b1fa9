"""Custom ``torch.autograd.Function``s: one node that holds a traced forward and backward.

Note: how ``SomeFunction.apply(*args)`` is recorded.
  * The user's ``forward`` runs once under a tracer of its own (the caller's recording is
    set aside meanwhile), on copies of the tensor arguments, with autograd off as PyTorch
    runs it, and with a ``ctx`` that records what it saves. That gives the *forward
    graph*: inputs are the tensor arguments; outputs are the function's outputs, then the
    values the backward needs (``ctx.save_for_backward`` and tensor attributes of ``ctx``).
  * The user's ``backward`` then runs once under another tracer, on those saved values
    and one gradient per output. That gives the *backward graph*: inputs are the saved
    values then the output gradients; outputs are one gradient (or None) per tensor
    argument.
  * The caller's graph gets one ``prim.autograd_function`` node: its argument is the list
    of tensor arguments, its keywords name the two graphs (stored as graphs of the
    program, named after their structure), the number of saved values and the function's
    name. The runtime rebuilds it as a ``torch.autograd.Function`` of its own
    (runtime/autograd_function.py) that runs the forward graph, saves, and runs the
    backward graph when autograd asks: gradients are the function's own, not autograd's
    gradient of its forward ops.
  * Outputs given to ``ctx.mark_non_differentiable`` are listed by position in the node's
    ``non_differentiable`` keyword, and the runtime marks them the same way.
  * Non-tensor arguments are fixed in the forward graph (a traced size among them is
    guarded first, in the caller's graph). A number set on ``ctx`` that comes from traced
    sizes (``ctx.shape = x.shape``) stays traced: the forward graph returns it as a 0-dim
    tensor among the saved values, and the backward graph reads it back with
    ``prim.item``; other Python values on ``ctx`` are fixed. ``ctx.needs_input_grad``
    reads True for every tensor argument of a floating-point or complex dtype: the
    backward is recorded on its general path and autograd drops the gradients nobody asked
    for.
  * Refused at trace time with an :class:`UnsupportedOpError` naming the function, the line
    and what to do, never recorded with a gradient that could be wrong: a backward that
    reads tensor data into Python (``.item()``, ``bool(t)``, ``t.tolist()``), returns the
    wrong number of gradients or something other than tensors and None, or reads a tensor
    it did not save; ``ctx.mark_dirty``, ``ctx.set_materialize_grads(False)``,
    ``ctx.save_for_forward``; outputs other than tensors; tensors passed inside
    containers; keyword arguments to ``apply``; and any call inside them that the tracer
    cannot record (the refusal quotes it).
  * Where no gradient can flow at trace time (no-grad mode, no tensor argument requires
    grad) and the function cannot be recorded as a node, its forward ops are recorded in
    the caller's graph instead, with a guard that no gradient can flow at call time either
    (the behaviour before this node existed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re

import torch
import torch.utils.checkpoint  # CheckpointFunction (torch imports it today; said, not assumed)
from torch.overrides import _pop_mode_temporarily

from ..errors import UnsupportedOpError
from ..ir import Graph, Ref, pytree
from ..ir.program import AUTOGRAD_FUNCTION
from ..ir.pytree import is_tensor
from .carried_reads import rewatched
from .numbers import _Traced

# ``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)``'s function (see
# ``AutogradFunctions._inline_checkpoint``).
_REENTRANT_CHECKPOINT = torch.utils.checkpoint.CheckpointFunction
# What nn.Module's call puts a module's inputs and outputs through to hang its full backward
# hooks on (see ``AutogradFunctions._hook_passthrough``).
_BACKWARD_HOOK = torch.nn.modules._functions.BackwardHookFunction

# Ops of a backward graph that turn tensor data into Python values: a backward that
# decides on data cannot be one graph.
_DATA_READS = frozenset({"prim.item", "prim.tolist", "prim.bool", "prim.int", "prim.float"})
_FIX = (
    "write its forward and backward with tensor operations on the arguments of apply and "
    "on what ctx.save_for_backward keeps; or, for inference only, trace under "
    "torch.no_grad() with inputs that do not require grad"
)


class UnsupportedFunctionError(UnsupportedOpError):
    """A custom autograd function the trace cannot keep as a node (the message names it,
    its line, the reason and what to do)."""


def function_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class RecordingContext:
    """The ``ctx`` a custom function's forward and backward see while traced: it keeps
    what they save and refuses what a graph cannot express."""

    def __init__(self, refuse, needs_input_grad: tuple):
        self._tb_refuse = refuse
        self._tb_needs = needs_input_grad
        self._tb_saved: tuple = ()
        self._tb_saved_view: tuple | None = None
        self._tb_non_differentiable: tuple = ()
        self.materialize_grads = True

    @property
    def needs_input_grad(self) -> tuple:
        return self._tb_needs

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, torch.Tensor):
                self._tb_refuse(
                    f"ctx.save_for_backward was given a {type(t).__name__}, not a tensor "
                    "(PyTorch takes tensors and None only)"
                )
        self._tb_saved = tensors

    @property
    def saved_tensors(self) -> tuple:
        if self._tb_saved_view is None:
            self._tb_refuse("the forward reads ctx.saved_tensors, which exist only in backward")
        return self._tb_saved_view

    saved_variables = saved_tensors

    def mark_dirty(self, *args) -> None:
        self._tb_refuse(
            "its forward calls ctx.mark_dirty (it writes into an argument in place), which a "
            "traced graph does not replay"
        )

    def mark_non_differentiable(self, *tensors) -> None:
        self._tb_non_differentiable += tensors

    def set_materialize_grads(self, value: bool) -> None:
        if not value:
            self._tb_refuse(
                "its forward calls ctx.set_materialize_grads(False): the backward would see "
                "None gradients, which a traced graph cannot take"
            )

    def save_for_forward(self, *args) -> None:
        self._tb_refuse("its forward calls ctx.save_for_forward (forward-mode AD)")

    def user_attributes(self) -> dict:
        return {
            k: v
            for k, v in vars(self).items()
            if not k.startswith("_tb_") and k != "materialize_grads"
        }


class _SavedNumber:
    """A traced number kept on ``ctx``: the forward graph returns it as a 0-dim tensor."""

    def __init__(self, tensor: torch.Tensor, concrete, desc: str):
        self.tensor, self.concrete, self.desc = tensor, concrete, desc


def _map_leaves(value, leaf):
    """``value`` with every tensor and traced number replaced by ``leaf(x)``, through
    lists, tuples (named ones and sizes too) and dicts."""
    if isinstance(value, (torch.Tensor, _Traced, _SavedNumber)):
        return leaf(value)
    if isinstance(value, list):
        return [_map_leaves(v, leaf) for v in value]
    if isinstance(value, torch.Size):
        return torch.Size([_map_leaves(v, leaf) for v in value])
    if isinstance(value, tuple):
        items = [_map_leaves(v, leaf) for v in value]
        if hasattr(value, "_fields"):
            return type(value)(*items)
        return tuple(items)
    if isinstance(value, dict):
        return {k: _map_leaves(v, leaf) for k, v in value.items()}
    return value


def _has_tensor(value) -> bool:
    found = []
    _map_leaves(value, lambda x: found.append(x) if isinstance(x, torch.Tensor) else None)
    return bool(found)


def structure_key(graph: Graph) -> str:
    """A digest of a graph's structure (ops, arguments by position, input dtypes and ranks,
    outputs), not of its example sizes: a re-trace at other sizes gives the same name, as
    ``check_trace`` compares graphs by structure."""
    order = {v.id: f"in{i}" for i, v in enumerate(graph.inputs)}

    def norm(obj):
        if isinstance(obj, Ref):
            return ["ref", order.get(obj.id, "?")]
        if isinstance(obj, (list, tuple)):
            return [type(obj).__name__, [norm(x) for x in obj]]
        if isinstance(obj, dict):
            return sorted([str(k), norm(v)] for k, v in obj.items())
        if isinstance(obj, slice):
            return ["slice", norm((obj.start, obj.stop, obj.step))]
        return repr(obj)

    rows: list = [[v.dtype, len(v.shape or [])] for v in graph.inputs]
    for index, node in enumerate(graph.nodes):
        for k, value in enumerate(node.outputs):
            order[value.id] = f"n{index}.{k}"
        kwargs = {k: v for k, v in node.kwargs.items() if k != "what"}
        rows.append([node.op, norm(node.args), norm(kwargs), node.out_spec, node.loc])
    rows.append([norm(graph.outputs), graph.out_spec, graph.in_spec])
    text = json.dumps(rows, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def graph_name(cls, role: str, graph: Graph) -> str:
    """A method name for a subgraph: ``autograd_<class>_<role>_<digest>``."""
    label = re.sub(r"[^A-Za-z0-9_]", "_", cls.__name__)[:60] or "function"
    return f"autograd_{label}_{role}_{structure_key(graph)}"


@contextlib.contextmanager
def _untraced():
    """Run eager code with the caller's recording set aside: no mode, and no tracer for the
    patched builtins (``len``, ``torch.is_grad_enabled``) to record into."""
    from .patches import _tracers

    stack = _tracers.stack
    _tracers.stack = []
    try:
        with _pop_mode_temporarily():
            yield
    finally:
        _tracers.stack = stack


@contextlib.contextmanager
def _recording_apart(sub):
    """Record with ``sub`` (inside ``_untraced``), autograd off as PyTorch runs a custom
    function's forward and, by default, its backward."""
    from .patches import recording  # patches imports this stage's library module

    with torch.no_grad(), recording(sub):
        yield


class AutogradFunctions:
    """The tracer's handling of ``Function.apply`` (mixed into the Tracer)."""

    def custom_function(self, cls, apply, args: tuple, kwargs: dict):
        """``SomeFunction.apply(...)`` while tracing: see the note at the top. The user's
        forward (backward, checkpointed function) runs here: its lines are watched
        (trace/carried_reads.py)."""
        with rewatched():
            return self._custom_function(cls, apply, args, kwargs)

    def _custom_function(self, cls, apply, args: tuple, kwargs: dict):
        loc = self.location()
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        with torch._C.DisableTorchFunction():  # a look, not a decision of the traced code
            grad_can_flow = torch._C.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if grad_can_flow and cls is _REENTRANT_CHECKPOINT:
            return self._inline_checkpoint(cls, args, tensors, loc)
        if cls is _BACKWARD_HOOK and not kwargs:
            passed = self._hook_passthrough(apply, args)
            if passed is not None:
                return passed
        try:
            return self._record_function(cls, apply, args, kwargs, loc)
        except UnsupportedFunctionError:
            if grad_can_flow:
                raise
        return self._inline_function(cls, apply, args, kwargs, loc)

    def _hook_passthrough(self, apply, args: tuple):
        """``BackwardHookFunction.apply``: an identity that nn.Module's call puts a module's
        tensors through, to hang the module's full backward hooks on its node. A trace
        never runs module hooks (api.py's note on backward hooks: a backward that would
        skip one raises), so the graph keeps the tensors as they are: no node, and no
        guard that autograd is on, which refused every call without autograd. It runs for
        real (the eager hooks of this recording need its node); its results stand for the
        values of its arguments. None where an argument is not a value of the graph yet."""
        hits = [self._lookup(a) if isinstance(a, torch.Tensor) else None for a in args]
        if not hits or any(hit is None for hit in hits):
            return None
        with _untraced():
            results = apply(*args)
        for result, hit in zip(results, hits):
            if isinstance(result, torch.Tensor) and result is not hit[0]:
                self._bind_tensor(result, hit[1], hit[2])
        return results

    def _refuser(self, name: str, loc: str | None):
        where = loc or "unknown location"

        def refuse(problem: str):
            raise UnsupportedFunctionError(
                f"the custom autograd function {name}.apply at {where} cannot be traced with "
                f"its own gradient: {problem}. Never a wrong gradient: {_FIX}"
            )

        return refuse

    def _record_function(self, cls, apply, args, kwargs, loc):

        name = function_name(cls)
        refuse = self._refuser(name, loc)
        if kwargs:
            refuse(f"apply was called with keyword arguments ({', '.join(kwargs)})")
        plain = []
        for a in args:
            if isinstance(a, _Traced):
                # A traced size passed as a number: the forward graph fixes it, so guard it.
                a = self.specialize(a, type(a._concrete()).__name__)
            elif not isinstance(a, torch.Tensor) and _has_tensor(a):
                refuse(
                    "a tensor is passed inside a container (autograd neither tracks nor "
                    "differentiates it); pass each tensor as an argument of its own"
                )
            plain.append(a)
        positions = [i for i, a in enumerate(plain) if isinstance(a, torch.Tensor)]
        with _untraced():
            needs = tuple(
                isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
                for a in plain
            )
            try:
                return self._record_apart(cls, apply, plain, positions, needs, refuse, loc)
            except UnsupportedFunctionError:
                raise
            except Exception as exc:  # a call the tracer refuses, or one the recording ctx lacks
                text = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
                try:
                    refuse(f"tracing its forward and backward failed: {type(exc).__name__}: {text}")
                except UnsupportedFunctionError as refused:
                    raise refused from exc

    def _record_apart(self, cls, apply, plain, positions, needs, refuse, loc):
        """The forward and backward graphs and the node (the caller's recording is set
        aside: nothing here records into the caller's graph but the node itself)."""
        from .tracer import Tracer

        name = function_name(cls)

        class Sub(Tracer):
            def _capture_constant(self, tensor, attribute=None):
                refuse(
                    f"its code reads a tensor at {self.location() or 'an unknown line'} that "
                    "is neither an argument of apply nor saved with ctx.save_for_backward "
                    "(a global, a closure, a parameter or a tensor kept on another object): "
                    "a trace would fix its value"
                )

        rng = torch.get_rng_state()
        # -- the forward graph --
        fwd = Sub({}, {}, self._warned)
        copies = {}
        for i in positions:
            t = plain[i]
            copy = t.detach().clone()
            if t.requires_grad:
                copy.requires_grad_()
            copies[i] = copy
            fwd.add_input(copy, f"arg{i}")
        call = [copies.get(i, a) for i, a in enumerate(plain)]
        fwd.graph.arg_names = [f"arg{i}" for i in positions]
        _, fwd.graph.in_spec = pytree.flatten((tuple(copies.values()), {}), is_tensor)
        ctx = RecordingContext(refuse, needs)
        custom_setup = getattr(cls, "setup_context", None) is not getattr(
            torch.autograd.function._SingleLevelFunction, "setup_context", None
        )
        with _recording_apart(fwd):
            if custom_setup:
                out = cls.forward(*call)
                cls.setup_context(ctx, tuple(call), out)
            else:
                out = cls.forward(ctx, *call)
            outs = list(out) if isinstance(out, tuple) else [out]
            if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
                refuse(
                    "its forward returns "
                    f"{type(out).__name__ if not isinstance(out, tuple) else 'a tuple'} "
                    "with something other than tensors; return a tensor or a tuple of tensors"
                )
            non_differentiable = []
            for marked in ctx._tb_non_differentiable:
                index = next((k for k, o in enumerate(outs) if o is marked), None)
                if index is None:
                    refuse("ctx.mark_non_differentiable was given a tensor that is not an output")
                non_differentiable.append(index)
            saved = [t for t in ctx._tb_saved if t is not None]
            attributes = ctx.user_attributes()
            attribute_tensors: list[torch.Tensor] = []

            def keep(x):
                if isinstance(x, torch.Tensor):
                    attribute_tensors.append(x)
                    return x
                # A number computed from traced sizes: a 0-dim tensor the forward graph
                # returns, read back as a traced number in the backward graph.
                concrete = x._concrete()
                dtype = torch.int64 if isinstance(concrete, int) else torch.float64
                with torch._C.DisableTorchFunction():  # recorded below, from the traced number
                    number = torch.scalar_tensor(concrete, dtype=dtype)
                value = fwd._new_value("Tensor", number)
                fwd._bind_tensor(number, value, x._desc)
                fwd._emit(
                    "scalar_tensor",
                    [fwd.scalar_ref(x)],
                    {"dtype": dtype},
                    [value],
                    pytree.LEAF,
                    fwd.location(),
                )
                attribute_tensors.append(number)
                return _SavedNumber(number, concrete, x._desc)

            attributes = {k: _map_leaves(v, keep) for k, v in attributes.items()}
            kept = saved + attribute_tensors
            fwd.graph.outputs = [fwd.encode(t) for t in outs + kept]
            _, fwd.graph.out_spec = pytree.flatten(tuple(outs + kept), is_tensor)
        # -- the backward graph --
        bwd = Sub({}, {}, self._warned)
        aliases = {}
        for k, t in enumerate(kept):
            alias = t.detach()
            aliases[id(t)] = alias
            bwd.add_input(alias, f"saved{k}")
        grads = []
        for k, o in enumerate(outs):
            differentiable = o.is_floating_point() or o.is_complex()
            g = torch.ones_like(o) if differentiable else torch.zeros_like(o)
            grads.append(g)
            bwd.add_input(g, f"grad{k}")
        bwd.graph.arg_names = [v.name for v in bwd.graph.inputs]
        _, bwd.graph.in_spec = pytree.flatten((tuple(kept) + tuple(grads), {}), is_tensor)
        bctx = RecordingContext(refuse, needs)
        bctx._tb_saved_view = tuple(None if t is None else aliases[id(t)] for t in ctx._tb_saved)
        own_reads = set()  # the backward graph's reads of saved numbers: not the user's

        def restore(x):
            if isinstance(x, torch.Tensor):
                return aliases[id(x)]
            ref = bwd._value_node(
                "prim.item", type(x.concrete).__name__, [bwd.tensor_ref(aliases[id(x.tensor)])]
            )
            own_reads.add(id(bwd.graph.nodes[-1]))
            return bwd._wrap_scalar(x.concrete, ref, x.desc)

        for key, value in attributes.items():
            setattr(bctx, key, _map_leaves(value, restore))
        with _recording_apart(bwd):
            result = cls.backward(bctx, *grads)
            result = result if isinstance(result, tuple) else (result,)
            if len(result) > len(plain) and all(r is None for r in result[len(plain) :]):
                result = result[: len(plain)]
            if len(result) != len(plain):
                refuse(
                    f"its backward returns {len(result)} gradients for {len(plain)} arguments "
                    "of apply (one per argument, None for those without one)"
                )
            for i, r in enumerate(result):
                if r is not None and (not isinstance(r, torch.Tensor) or i not in copies):
                    what = "a non-tensor argument" if i not in copies else "a tensor argument"
                    refuse(
                        f"its backward returns a {type(r).__name__} as the gradient of "
                        f"argument {i}, {what}: return a tensor for a tensor argument and "
                        "None for the others"
                    )
            bwd.graph.outputs = [
                bwd.encode(result[i]) if result[i] is not None else None for i in positions
            ]
            bwd.graph.out_spec = {"t": "tuple", "c": [pytree.LEAF] * len(positions)}
        for node in bwd.graph.nodes:
            if node.op in _DATA_READS and id(node) not in own_reads:
                refuse(
                    f"its backward turns tensor data into a Python value ({node.op} at "
                    f"{node.loc or 'an unknown line'}), so its gradient would depend on a "
                    "decision made once at trace time"
                )
        # -- the node, run eagerly for the caller's trace --
        torch.set_rng_state(rng)
        real = apply(*plain)
        real_outs = list(real) if isinstance(real, tuple) else [real]
        forward_name = graph_name(cls, "forward", fwd.graph)
        backward_name = graph_name(cls, "backward", bwd.graph)
        self.graph.subgraphs[forward_name] = fwd.graph
        self.graph.subgraphs[backward_name] = bwd.graph
        values = []
        for k, t in enumerate(real_outs):
            value = self._new_value("Tensor", t)
            self._bind_tensor(t, value, f"{cls.__name__}.apply(...)" + (f"[{k}]" if k else ""))
            values.append(value)
        keywords = {
            "forward": forward_name,
            "backward": backward_name,
            "saved": len(kept),
            "function": name,
        }
        if non_differentiable:
            keywords["non_differentiable"] = sorted(set(non_differentiable))
        self._emit(
            AUTOGRAD_FUNCTION,
            [[self.tensor_ref(plain[i]) for i in positions]],
            keywords,
            values,
            pytree.LEAF if not isinstance(real, tuple) else pytree.flatten(real, is_tensor)[1],
            loc,
        )
        return real

    def _inline_checkpoint(self, cls, args, tensors, loc):
        """``checkpoint(fn, *args, use_reentrant=True)`` where a gradient can flow: its
        backward runs ``fn`` again (the RNG as it was) and back-propagates through that, so
        its gradient is autograd's gradient of ``fn``'s ops: they are recorded here, as
        ``use_reentrant=False`` is. What is not kept is the memory saving (the graph keeps
        ``fn``'s intermediate values for backward). Guarded: autograd on and some tensor
        argument requiring grad, since otherwise eager's result has no gradient at all."""
        why = "(torch.utils.checkpoint with use_reentrant=True records its function's ops"
        why += " where a gradient can flow)"
        enabled = self._value_node("prim.grad_enabled", "bool", loc=loc)
        self.guard(enabled, True, f"torch.is_grad_enabled() {why}", "branch", loc)
        flows = None
        for t in tensors:
            ref = self._value_node("prim.requires_grad", "bool", [self.tensor_ref(t)], loc)
            flows = (
                ref if flows is None else self._value_node("scalar.or", "bool", [flows, ref], loc)
            )
        names = ", ".join(self._name(t) for t in tensors)
        self.guard(flows, True, f"any of {names} requires grad {why}", "branch", loc)
        function, _preserve_rng_state, *inputs = args
        return function(*inputs)

    def _inline_function(self, cls, apply, args, kwargs, loc):
        """No gradient can flow now: record the forward's ops in this graph, guarded so
        that no gradient can flow at call time either."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        why = f"(the custom autograd function {cls.__qualname__} has its own backward)"
        if not torch._C.is_grad_enabled():
            ref = self._value_node("prim.grad_enabled", "bool", loc=loc)
            self.guard(ref, False, f"torch.is_grad_enabled() {why}", "branch", loc)
            return apply(*args, **kwargs)
        for t in tensors:
            ref = self._value_node("prim.requires_grad", "bool", [self.tensor_ref(t)], loc)
            self.guard(ref, False, f"{self._name(t)}.requires_grad {why}", "branch", loc)
        # PyTorch runs forward with autograd off (in C++, unseen by the recorder): recorded
        # without that, ops on a parameter inside it would give a result that requires grad
        # where apply's does not. The switch is recorded, as a user's no_grad block is.
        with torch.no_grad():
            return apply(*args, **kwargs)
