"""The bridge to the PyTorch 2 stack: a traced method as a ``torch.fx.GraphModule``.

Note: what carries over, and how.
  * State. Every ``prim.state`` node is a ``get_attr`` of the GraphModule, and the
    attribute IS the traced object's tensor (the same ``nn.Parameter`` or buffer object,
    installed under its state name, ``layer1.0.conv1.weight``): nothing is copied, so a
    training step through the GraphModule trains the traced module (and the module it was
    traced from), and BatchNorm statistics update on the real buffers.
  * Sizes. ``prim.size`` becomes ``x.size(i)``, scalar ops become ``operator`` calls, so
    the graph holds no size from the example inputs: it runs at any shape the trace runs
    at, and ``torch.compile``/``torch.export`` see symbolic sizes (``dynamic_shapes``
    gives ``torch.export`` one dynamic dimension per input symbol).
  * Guards. Each ``prim.guard`` is a call of a small checking function inside the graph.
    Run eagerly (or under ``torch.compile``, where Dynamo turns the comparison into a
    guard of its own, so a call that breaks it recompiles and takes the raising branch),
    a failed guard raises :class:`~tracebridge.GuardError` with the trace's message. Under
    ``torch.export`` (AOTInductor, ONNX), where a Python ``if`` on a symbolic size would
    fix that size, a guard on sizes becomes ``torch._check``: a runtime assertion of the
    exported program (a ``RuntimeError`` there, not a GuardError); a guard on tensor
    *data* (``bool(t)``) cannot be expressed there and fails the export.
  * Inputs and outputs. The GraphModule takes the flat input tensors (the leaves of the
    traced call's arguments, in order) and returns a flat tuple of the output leaves; the
    nesting is kept in ``gm.meta["tracebridge"]`` (:class:`BridgeInfo`), and
    :func:`flatten_inputs` / :func:`unflatten_outputs` / :func:`call` go between the two.

  * Checks at the call (fx_checks.py): the runtime's input checks (rank and kind of dtype
    of each input), the mode of a graph that depends on it, and state the traced module
    holds anew; under ``torch.export`` the dtype and rank stay checked in the exported
    program, and every size guard is an explicit assertion there.

What does not carry over: the size-1 specialisations of a method (check/specialise.py) --
the GraphModule is the method's main graph, so a call that only a specialisation serves
raises GuardError -- and, in an exported program, autocast (docs/deploy.md).
"""

from __future__ import annotations

import builtins
import contextvars
import keyword
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from ..check.state_writes import writes_by_node
from ..errors import BindingError, GuardError, TraceError
from ..ir import GeneratorRef, Graph, Node, Program, Ref, pytree
from ..ir.ops import VARIADIC_OUTPUTS
from ..ir.program import AUTOGRAD_FUNCTION, map_literal
from ..ir.pytree import is_tensor
from ..runtime import support
from . import fx_checks, fx_signature
from .fused_paths import EXPORTED_FORMS, exportable

META_KEY = "tracebridge"
# The GraphModule's attribute holding its fx_checks.CallCheck.
CALL_CHECK = "_tb_call_check"

# Ops written as plain Python on sizes: the op table's bounded versions check
# ``isinstance(x, int)`` (a symbolic size is not an int), so these are what they compute
# on symbols, and FX prints them as operators.
_OPERATORS: dict[str, Callable] = {
    "scalar.add": operator.add,
    "scalar.sub": operator.sub,
    "scalar.mul": operator.mul,
    "scalar.truediv": operator.truediv,
    "scalar.floordiv": operator.floordiv,
    "scalar.mod": operator.mod,
    "scalar.neg": operator.neg,
    "scalar.abs": operator.abs,
    "scalar.eq": operator.eq,
    "scalar.ne": operator.ne,
    "scalar.lt": operator.lt,
    "scalar.le": operator.le,
    "scalar.gt": operator.gt,
    "scalar.ge": operator.ge,
    "scalar.and": operator.and_,
    "scalar.or": operator.or_,
    "scalar.rshift": operator.rshift,
    "scalar.xor": operator.xor,
    "scalar.invert": operator.invert,
    "scalar.ceil": math.ceil,
    "scalar.floor": math.floor,
    "scalar.trunc": math.trunc,
}
# prim ops that are tensor methods: ``x.size(i)`` and friends in the FX graph.
_METHODS = {
    "prim.size": "size",
    "prim.numel": "numel",
    "prim.item": "item",
    "prim.tolist": "tolist",
    "prim.stride": "stride",
    "prim.is_contiguous": "is_contiguous",
    "prim.storage_offset": "storage_offset",
    "prim.is_inference": "is_inference",
    "prim.is_neg": "is_neg",
    "prim.is_conj": "is_conj",
}
_ATTRIBUTES = {
    "prim.dtype": "dtype",
    "prim.device": "device",
    "prim.requires_grad": "requires_grad",
    "prim.is_leaf": "is_leaf",
}


def _sym_int(x):
    """``int(x)`` that keeps a symbolic size symbolic (``int()`` would fix it)."""
    return int(x) if isinstance(x, torch.Tensor) else torch.sym_int(x)


def _sym_float(x):
    return float(x) if isinstance(x, torch.Tensor) else torch.sym_float(x)


def _length(x):
    """``len(x)``; of a tensor, its first size, kept symbolic."""
    return x.shape[0] if isinstance(x, torch.Tensor) else len(x)


_SYMBOLIC_PRIMS: dict[str, Callable] = {
    "prim.int": _sym_int,
    "prim.float": _sym_float,
    "prim.len": _length,
    "prim.grad_enabled": torch.is_grad_enabled,
}
_DUNDER_OPERATORS = {"__getitem__": operator.getitem, "__setitem__": operator.setitem}
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _exporting() -> bool:
    """Inside ``torch.export`` (and not Dynamo's own ``torch.compile`` tracing)."""
    return torch.compiler.is_exporting()


# The size guards met while ``torch.export`` traces a GraphModule, as (value, expect,
# line), for a caller that must know them: ONNX carries no assertion (export/onnx.py).
EXPORTED_GUARDS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "tracebridge_exported_guards", default=None
)


def make_guard(node: Node, line: str, on_grad_mode: bool = False) -> tuple[Callable, tuple]:
    """The function a guard node calls, and its arguments after the guarded value: raises
    GuardError when ``value`` differs from what the trace saw (see the module Note for how
    it behaves under compile and export). ``on_grad_mode``: the guard is on
    ``torch.is_grad_enabled()``. An exported program serves inference only (ONNX has no
    autograd; an AOT package runs only the calls that need none,
    backends/aot_context.py), and both modes compute the same values there, so
    ``torch.export`` drops it (a fused path recorded under ``torch.no_grad()`` exports in
    the form export/fused_paths.py gives it).

    The function is :func:`tracebridge_guard`, one module-level function with the guard's
    data as literal arguments (not a closure): a GraphModule pickles its code with an
    import of each function it calls, which a closure has not (``torch.save(gm)``)."""
    kwargs = node.kwargs
    data = (
        kwargs.get("expect"),
        kwargs.get("what"),
        kwargs.get("kind"),
        node.loc if isinstance(node.loc, str) else None,
        line,
        on_grad_mode,
    )
    return tracebridge_guard, data


def tracebridge_guard(value, expect, what, kind, loc, line, on_grad_mode=False):
    """A guard of the trace, called in the GraphModule's graph (:func:`make_guard`)."""
    if isinstance(value, fx.Proxy):  # unpickling the GraphModule (fx_checks.CheckTracer)
        return fx_checks._record(
            tracebridge_guard, value, expect, what, kind, loc, line, on_grad_mode
        )
    if on_grad_mode and _exporting():
        return
    if isinstance(value, _SYMBOLIC) and _exporting():
        seen = EXPORTED_GUARDS.get()
        if seen is not None:
            seen.append((value, expect, line))
        if isinstance(expect, bool):
            holds = value if expect else torch.sym_not(value)
        else:
            holds = value == expect
        torch._check(holds)
        # ``torch._check`` of a comparison that export's ranges already decide records
        # nothing, and those ranges start at 2 for a dynamic size without being checked
        # at the call (``ep.module()`` serves sizes 0 and 1): ``q.shape[2] > 1`` held
        # "for every size", and a call at size 1 ran the size->1 path (F3). An explicit
        # assertion stays in the exported program and refuses it.
        fx_checks.assert_in_export(holds, fx_checks.guard_text(what, expect, kind, loc, line))
        return
    if isinstance(expect, bool):
        # A plain ``if`` on the value: on a symbolic one, Dynamo makes it a guard of
        # its own (a size the graph then specialises on, as ``torch.compile`` of the
        # original code does). Not ``value is expect``: to Dynamo a SymBool is a
        # ``bool``, not a ``torch.SymBool``, so that comparison failed under Dynamo,
        # which broke the graph at every guard and compiled the pieces with every size
        # symbolic (issue 16: 1.3x torch.compile); nor ``bool(value) == expect``,
        # a symbolic comparison to Dynamo. An int is no bool (1 is not the branch True).
        if isinstance(value, int) and not isinstance(value, bool):
            holds = False
        elif value:
            holds = expect
        else:
            holds = not expect
    else:
        holds = value == expect
    if not holds:
        # Under Dynamo: a graph break at this call (a function Dynamo does not trace),
        # so it runs eagerly and raises GuardError (a call that breaks a guard
        # recompiles here); under ``fullgraph=True`` Dynamo's error names the trace's
        # guard (fx_checks.fail).
        kwargs = {"what": what, "kind": kind}  # as recorded: guard_message has defaults
        kwargs = {key: item for key, item in kwargs.items() if item is not None}
        node = Node(op="prim.guard", kwargs={**kwargs, "expect": expect}, loc=loc)
        fx_checks.fail(support.guard_message(node, value, line), what or "", loc or "", value)


def make_count_check(node: Node, expected: int, line: str) -> Callable:
    """The function that checks how many results a variadic op gave (``unbind``, ``split``)."""

    def tracebridge_check_count(result):
        return support.check_count(result, expected, node, line)

    return tracebridge_check_count


def _traced_values(inputs) -> bool:
    """Whether a call runs on FakeTensors: ``torch.export`` or Dynamo tracing the graph."""
    from torch._subclasses.fake_tensor import FakeTensor

    if torch.compiler.is_compiling():
        return True
    leaves, _ = pytree.flatten(inputs, is_tensor)
    return any(isinstance(x, FakeTensor) for x in leaves)


def _autograd_function(node: Node, methods: dict[str, Graph]) -> Callable:
    """The callable of a custom autograd function's node (``prim.autograd_function``).

    Note: why two. The runtime's callable runs the function's graphs as runtime methods,
    which keep what their first call made. Exported first (``torch.export``, ONNX, an AOT
    package), that first call ran on FakeTensors, and every later eager call of the
    GraphModule returned FakeTensors (BLOOM's GELU in the deploy trial: export_onnx's check
    failed with ``DataDependentOutputException``). A call on traced values gets a callable
    of its own, made for it and dropped after it."""
    real = support.node_callable(node, methods)

    def tracebridge_autograd_function(inputs, **keywords):
        if _traced_values(inputs):
            return support.node_callable(node, methods)(inputs, **keywords)
        return real(inputs, **keywords)

    return tracebridge_autograd_function


@dataclass
class BridgeInfo:
    """What the GraphModule's flat signature leaves out, in ``gm.meta["tracebridge"]``.

    ``in_spec``/``out_spec`` are the traced call's nesting (tracebridge pytree specs);
    ``input_shapes`` each input's sizes, an int or an input symbol (``"s0"``) per dimension;
    ``example_shapes`` the sizes the trace was made with; ``input_dtypes`` their dtypes.
    """

    method: str
    in_spec: dict
    out_spec: dict
    input_names: list[str]
    input_shapes: list[list]
    example_shapes: list[list | None]
    input_dtypes: list[torch.dtype | None]
    state: dict[str, str] = field(default_factory=dict)  # state name -> attribute path
    var_keywords: list[str] = field(default_factory=list)  # the graph's, in traced order
    arg_names: list[str] = field(default_factory=list)  # the graph's, to bind calls
    positional_only: int = 0
    defaults: dict = field(default_factory=dict)
    # The traced parameters ``forward`` takes (``x, /, mask=None``), or None where it
    # takes the flat inputs (fx_signature.py)
    signature: str | None = None


class _Builder:
    """Builds the FX graph of one traced graph, one short method per kind of node."""

    def __init__(
        self,
        graph: Graph,
        name: str,
        methods: dict[str, Graph],
        targets: dict,
        eager: Callable[[Callable], Callable] | None = None,
        eager_nodes: frozenset[int] = frozenset(),
        checks: bool = False,
    ):
        self.graph = graph
        self.checks = checks  # the call and input checks of fx_checks.py first
        self.name = name
        self.methods = methods
        self.targets = targets  # state name -> attribute path in the GraphModule
        self.eager = eager  # wraps the callables of ``eager_nodes`` (a compiler's opt-out)
        self.eager_nodes = eager_nodes
        self.fx = fx.Graph()
        self.env: dict[int, fx.Node] = {}
        self.where = name
        self.grad_mode_reads = {
            value.id
            for node in graph.nodes
            if node.op == "prim.grad_enabled"
            for value in node.outputs
        }

    def ref(self, ref: Ref) -> fx.Node:
        node = self.env.get(ref.id)
        if node is None:
            raise TraceError(
                f"{self.where} uses value {ref.id}, which is not defined before it; the "
                "program is corrupt (tracebridge validate lists every problem)"
            )
        return node

    def literal(self, arg):
        return map_literal(arg, self._leaf)

    def _leaf(self, x):
        if isinstance(x, Ref):
            return self.ref(x)
        if isinstance(x, GeneratorRef):
            raise TraceError(
                f"{self.where}: a random op draws from the generator {x.name!r} that the "
                "traced code keeps; a GraphModule (and so torch.compile, torch.export, "
                "AOTInductor and ONNX) does not hold generators: run the traced module "
                "itself, or draw the noise outside and pass it in as an input"
            )
        return x

    def arguments(self, node: Node) -> tuple[tuple, dict]:
        for key in node.kwargs:
            if not (isinstance(key, str) and key.isidentifier()):
                raise TraceError(
                    f"{self.where}: keyword {str(key)[:40]!r} is not a Python name, so it "
                    "cannot be an FX keyword argument; the program is corrupt"
                )
        return (
            tuple(self.literal(a) for a in node.args),
            {k: self.literal(v) for k, v in node.kwargs.items()},
        )

    def line(self, node: Node) -> str:
        return support.source_of(self.graph, node.loc)

    # -- nodes ----------------------------------------------------------------------------

    def build(self) -> fx.Graph:
        support.check_graph(self.graph, self.name)
        for index, value in enumerate(self.graph.inputs):
            self.env[value.id] = self.fx.placeholder(_input_name(value.name, index))
        if self.checks:
            self.add_checks()
        for index, node in enumerate(self.graph.nodes):
            self.where = f"{self.name}: node {index} ({node.op})"
            if node.op == "prim.state":
                self.state(node)
            elif node.op == "prim.guard":
                self.guard(node)
            elif index in self.eager_nodes and self.eager is not None:
                self.op(node, self.eager)
            else:
                self.op(node)
        self.where = f"{self.name}: the outputs"
        outputs = tuple(self.literal(o) for o in self.graph.outputs)
        self.fx.output(outputs)
        return self.fx

    def add_checks(self) -> None:
        """The mode/state check, then the input check, whose results the graph reads
        (under export they carry the rank check: fx_checks.py)."""
        training = self.fx.get_attr("training")
        check = self.fx.get_attr(CALL_CHECK)
        self.fx.call_function(fx_checks.tracebridge_check_call, (check, training))
        if not self.graph.inputs:
            return
        inputs = [self.env[value.id] for value in self.graph.inputs]
        spec = fx_checks.input_spec(self.graph)
        checked = self.fx.call_function(fx_checks.tracebridge_check_inputs, (spec, *inputs))
        for index, (value, placeholder) in enumerate(zip(self.graph.inputs, inputs)):
            self.env[value.id] = self.fx.create_node(
                "call_function",
                operator.getitem,
                (checked, index),
                name=f"{placeholder.name}_checked",
            )

    def state(self, node: Node) -> None:
        name = node.args[0] if node.args else None
        if name not in self.targets:
            raise TraceError(f"{self.where}: reads state {name!r}, which the program lacks")
        self.bind(node, self.fx.get_attr(self.targets[name]))

    def guard(self, node: Node) -> None:
        value = self.literal(node.args[0])
        on_grad_mode = isinstance(node.args[0], Ref) and node.args[0].id in self.grad_mode_reads
        guard, data = make_guard(node, self.line(node), on_grad_mode)
        self.fx.call_function(guard, (value, *data))

    def op(self, node: Node, wrap: Callable[[Callable], Callable] | None = None) -> None:
        args, kwargs = self.arguments(node)
        if wrap is not None:
            fn = _OPERATORS.get(node.op) or support.node_callable(node, self.methods)
            result = self.fx.call_function(wrap(fn), args, kwargs)
        elif node.op in _METHODS:
            result = self.fx.call_method(_METHODS[node.op], args, kwargs)
        elif node.op in _ATTRIBUTES and len(args) == 1:
            result = self.fx.call_function(getattr, (args[0], _ATTRIBUTES[node.op]))
        else:
            fn = _OPERATORS.get(node.op) or _SYMBOLIC_PRIMS.get(node.op)
            if fn is None and node.op == AUTOGRAD_FUNCTION:
                fn = _autograd_function(node, self.methods)
            if fn is None:
                fn = support.node_callable(node, self.methods)
            if node.op in EXPORTED_FORMS:
                fn = exportable(node.op, fn)
            if getattr(fn, "__objclass__", None) is torch._C.TensorBase:
                # A method of the C tensor class (``Tensor.view``, ``__getitem__``): FX
                # names it as ``x.view(...)`` or ``operator.getitem``.
                result = self._tensor_method(fn.__name__, args, kwargs)
            else:
                result = self.fx.call_function(fn, args, kwargs)
        spec = node.out_spec
        if node.op in VARIADIC_OUTPUTS and spec and spec.get("t") in ("tuple", "list"):
            check = make_count_check(node, len(spec["c"]), self.line(node))
            result = self.fx.call_function(check, (result,))
        if spec is not None and (node.outputs or spec.get("t") == "leaf"):
            self.bind(node, result)

    def _tensor_method(self, name: str, args: tuple, kwargs: dict) -> fx.Node:
        if name in _DUNDER_OPERATORS and not kwargs:
            return self.fx.call_function(_DUNDER_OPERATORS[name], args)
        return self.fx.call_method(name, args, kwargs)

    def bind(self, node: Node, result: fx.Node) -> None:
        """Name the node's output values: the result itself, or ``getitem`` chains into it
        along the node's out_spec."""
        outputs = iter(node.outputs)

        def walk(spec: dict, at: fx.Node) -> None:
            kind = spec["t"]
            if kind == "leaf":
                self.env[next(outputs).id] = at
            elif kind in ("tuple", "list", "namedtuple", "dict"):
                keys = spec["keys"] if kind == "dict" else range(len(spec["c"]))
                for key, child in zip(keys, spec["c"]):
                    if pytree.count_leaves(child):
                        walk(child, self.fx.call_function(operator.getitem, (at, key)))

        walk(node.out_spec, result)


# Names the generated code reads as globals or builtins (``torch.float32``, ``getattr``):
# an input of that name would hide them in ``forward`` (a function's parameter ``torch``
# made ``torch.float32`` an attribute of the input tensor).
_CODE_NAMES = frozenset(dir(builtins)) | {"self", "torch", "operator", "math", "inf", "nan"}


def _input_name(name: str | None, index: int) -> str:
    text = _identifier(name, f"in{index}")
    if text in _CODE_NAMES or keyword.iskeyword(text) or text.startswith("tracebridge_"):
        return f"{text}_in"
    return text


def _identifier(name: str | None, fallback: str) -> str:
    text = "".join(c if c.isascii() and c.isalnum() else "_" for c in (name or ""))
    return text if text and not text[0].isdigit() else fallback


def _install(
    root: nn.Module, name: str, tensor: torch.Tensor, index: int | None, persistent: bool = True
) -> str | None:
    """Put ``tensor`` (the object itself) on ``root`` at the path ``name``; a name that
    cannot be a module path there (an empty part, a clash with a module attribute such
    as ``training``) goes under ``_tb_state`` (as ``s{index}``; index None: nowhere).
    Returns the path used. ``persistent``: whether a buffer is in ``state_dict()`` (as
    the traced module registered it)."""
    parts = name.split(".")
    if not all(parts) or not _free_path(root, parts):
        return None if index is None else _install_aside(root, tensor, index, persistent)
    module = root
    for part in parts[:-1]:
        if part not in module._modules:
            module.add_module(part, nn.Module())
        module = module._modules[part]
    _register(module, parts[-1], tensor, persistent)
    return name


def _free_path(root: nn.Module, parts: list[str]) -> bool:
    """Whether ``parts`` leads through sub-modules (or names not yet taken) to a name not
    yet taken."""
    module = root
    for part in parts[:-1]:
        child = module._modules.get(part)
        if child is None:
            return not hasattr(module, part)
        module = child
    return not hasattr(module, parts[-1])


def _install_aside(root: nn.Module, tensor: torch.Tensor, index: int, persistent: bool) -> str:
    if "_tb_state" not in root._modules:
        root.add_module("_tb_state", nn.Module())
    _register(root._tb_state, f"s{index}", tensor, persistent)
    return f"_tb_state.s{index}"


def _register(module: nn.Module, leaf: str, tensor: torch.Tensor, persistent: bool = True) -> None:
    if isinstance(tensor, nn.Parameter):
        module.register_parameter(leaf, tensor)
    else:
        module.register_buffer(leaf, tensor, persistent=persistent)


def _referenced_state(graph: Graph) -> list[str]:
    names = []
    for node in graph.nodes:
        if node.op == "prim.state" and node.args and node.args[0] not in names:
            names.append(node.args[0])
    return names


def _resolve(obj, method: str) -> tuple[Program, str, dict, bool]:
    """``(program, graph name, state slots, training)`` for a traced object or a Program."""
    from ..api import TracedFunction, TracedMethod, TracedModule, _FrozenViews  # api is above

    if isinstance(obj, _FrozenViews):
        kind = "module" if isinstance(obj, torch.nn.Module) else "function"
        raise TraceError(
            f"to_graph_module takes the traced {kind}, not its frozen copy (a "
            f"{type(obj).__name__} made by tracebridge.freeze): freezing is a choice of how "
            "this process runs the program, not part of the program. Pass the trace you "
            "froze (to_graph_module(traced)); for a saved file, "
            "to_graph_module(tracebridge.load(path))"
        )
    if isinstance(obj, TracedMethod):
        obj, method = obj._module, obj.name
    if isinstance(obj, Program):
        tensors = {name: entry.tensor for name, entry in obj.state.items()}
        slots = {name: (tensors, name) for name in tensors}
        program, training = obj, obj.training
    elif isinstance(obj, TracedModule):
        program, slots, training = obj.program, obj._state_slots(), obj.training
    elif isinstance(obj, TracedFunction):
        program, slots, training = obj.program, obj._state_slots(), False
    else:
        raise TraceError(
            f"to_graph_module takes a traced function or module (tracebridge.trace, "
            f"tracebridge.load) or a Program, not {type(obj).__name__}; trace it first"
        )
    route = program.dispatch.get(method)
    if route is not None:
        method = route["train" if training else "eval"]
    if method not in program.methods:
        raise TraceError(
            f"to_graph_module: the program has no method {method!r} (it has "
            f"{', '.join(program.methods)}); pass method= one of those"
        )
    bound = program.mode_bound.get(method)
    if bound is not None and bound["training"] != training:
        traced = "training" if bound["training"] else "eval"
        raise GuardError(
            f"{method} was traced in {traced} mode and records another graph in the other "
            f"mode (first at {bound['op']}, {bound.get('loc') or '?'}); call "
            f".{'train' if bound['training'] else 'eval'}() on the traced module before "
            "to_graph_module, or trace with respect_mode=True",
            guard=f"{method}: training == {bound['training']}",
            location=bound.get("loc") or "",
            seen=training,
        )
    return program, method, slots, training


def _in_module_order(obj, persistent: dict[str, bool]) -> dict[str, bool]:
    """``persistent`` (state name -> in ``state_dict()``) in the order the traced module
    lists its parameters, then its buffers, as the original does, so that the
    GraphModule's ``parameters()`` come in the original's order (an optimizer's state or
    ``vector_to_parameters`` carried across would otherwise pair tensors of one shape
    wrongly: prober23a); the program's order for a function or a Program."""
    from ..api import TracedMethod, TracedModule  # api is above

    module = obj._module if isinstance(obj, TracedMethod) else obj
    if not isinstance(module, TracedModule):
        return persistent
    order = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    order += [n for n, _ in module.named_buffers(remove_duplicate=False)]
    rank = {name: i for i, name in reversed(list(enumerate(order)))}
    return dict(sorted(persistent.items(), key=lambda item: rank.get(item[0], len(rank))))


def to_graph_module(obj, method: str = "forward", *, flat: bool = False) -> fx.GraphModule:
    """A traced method as a ``torch.fx.GraphModule`` that computes what the trace computes.

    ``obj`` is what :func:`tracebridge.trace`, :func:`tracebridge.trace_module` or
    :func:`tracebridge.load` return (or a ``Program``, whose state tensors it then uses).
    The GraphModule's parameters and buffers are ``obj``'s own tensors (shared, not
    copied), registered as the traced module registers them (``state_dict()`` has its
    keys; a non-persistent buffer is not in it); sizes stay symbolic, so it runs at every
    shape the trace runs at; guards are checked inside the graph (eagerly and under
    ``torch.compile`` a failed one raises GuardError; under ``torch.export`` a size guard
    is ``torch._check``). Its ``forward`` takes the traced call's arguments as the traced
    callable does, by position or by keyword (export/fx_signature.py), and returns a flat
    tuple of the output leaves; :func:`call` gives the nested result. For a module traced
    with ``respect_mode``, ``forward`` is the graph of the module's current mode.

    ``flat=True``: the form ``torch.export``, ONNX and AOTInductor take: ``forward`` takes
    the flat input tensors (the leaves of the traced call's arguments, in the traced
    order: :func:`flatten_inputs`, :func:`example_inputs`, :func:`dynamic_shapes`), and
    holds only the state the method reads. Where every argument of the traced call is one
    tensor, passed in the callable's order, the two forms take the same calls.

    >>> import torch, tracebridge
    >>> net = torch.nn.Linear(3, 2)
    >>> traced = tracebridge.trace(net, torch.rand(4, 3))
    >>> gm = tracebridge.to_graph_module(traced)
    >>> gm.weight is net.weight
    True
    >>> x = torch.rand(7, 3)
    >>> torch.allclose(gm(x)[0], net(x))
    True
    >>> torch.allclose(gm(input=x)[0], net(input=x))
    True
    """
    program, name, slots, training = _resolve(obj, method)
    graph = program.methods[name]
    persistent = {n: e.persistent and e.kind != "constant" for n, e in program.state.items()}
    persistent = _in_module_order(obj, persistent)
    plan = StatePlan(persistent, dict(program.aliases), whole=not flat)
    signature = None if flat else fx_signature.signature_of(graph, name)
    return graph_module(
        graph,
        name,
        slots,
        program.methods,
        training,
        checks=_mode_check(program, method, name, training),
        plan=plan,
        signature=signature,
    )


def _mode_check(program: Program, method: str, name: str, training: bool) -> fx_checks.CallCheck:
    """The GraphModule's :class:`~fx_checks.CallCheck`: its graph's mode, where the
    program records another graph in the other mode (respect_mode, or ``mode_bound``)."""
    if method in program.dispatch:
        advice = (
            f"the program has a graph for each mode: call .{'train' if not training else 'eval'}() "
            "on the traced module and make the GraphModule again (to_graph_module), one per mode"
        )
    elif program.mode_bound.get(name) is not None:
        advice = (
            f"call .{'train' if training else 'eval'}() on it, or trace with respect_mode=True "
            "and make a GraphModule per mode (to_graph_module)"
        )
    else:
        return fx_checks.CallCheck(name, None, "", [])
    label = name if name == method else f"{method} ({name})"
    return fx_checks.CallCheck(label, training, advice, [])


@dataclass
class StatePlan:
    """How a GraphModule holds state (:func:`to_graph_module` holds the traced object's
    whole state, so that ``state_dict()`` has the original's keys): ``persistent``, state
    name -> whether ``state_dict()`` holds it; ``whole``: every state name of
    ``persistent`` is installed, and ``aliases`` (other names of a tied tensor -> its
    state name) too, where False only the state the graph reads."""

    persistent: dict[str, bool]
    aliases: dict[str, str] = field(default_factory=dict)
    whole: bool = True


def graph_module(
    graph: Graph,
    name: str,
    slots: dict,
    methods: dict[str, Graph],
    training: bool = False,
    eager: Callable[[Callable], Callable] | None = None,
    eager_nodes=(),
    checks: fx_checks.CallCheck | None = None,
    plan: StatePlan | None = None,
    signature: fx_signature.Signature | None = None,
) -> fx.GraphModule:
    """The GraphModule of one graph over state ``slots`` (state name -> ``(table, key)``,
    as the runtime reads state): what :func:`to_graph_module` builds. ``eager`` wraps the
    callable of every node whose index is in ``eager_nodes`` (a backend keeps the ops it
    does not support out of its compiler with ``torch._dynamo.disable``). ``checks``:
    the graph checks its mode, state and inputs first (fx_checks.py; what
    :func:`to_graph_module` gives). ``plan``: the state to hold beyond what the graph
    reads (None: only that). ``signature``: ``forward`` takes the traced call's
    arguments (fx_signature.py) where they differ from the flat inputs."""
    root = nn.Module()
    if checks is not None:
        setattr(root, CALL_CHECK, checks)
    persistent = plan.persistent if plan is not None else {}
    read = _referenced_state(graph)
    if plan is not None and plan.whole:  # in the plan's order: the traced module's
        names = list(persistent) + [n for n in read if n not in persistent]
    else:
        names = read
    targets = {}
    for index, state_name in enumerate(names):
        slot = slots.get(state_name)
        if slot is None:
            raise TraceError(
                f"to_graph_module: method {name!r} reads state {state_name!r}, which the "
                "program lacks; the program is corrupt"
            )
        table, key = slot
        keep = persistent.get(state_name, True)
        targets[state_name] = _install(root, state_name, table[key], index, keep)
    tied = _install_aliases(root, plan, slots, targets)
    builder = _Builder(
        graph, name, methods, targets, eager, frozenset(eager_nodes), checks is not None
    )
    code = builder.build()
    if signature is not None:
        placeholders = [n.name for n in code.nodes if n.op == "placeholder"]
        if fx_signature.is_plain(signature, placeholders):
            signature = None  # the flat inputs are the parameters (BridgeInfo says None)
        elif not fx_signature.is_python_names(signature):
            signature = None  # no Python signature has these names: the flat inputs
        else:
            spelled = fx_signature.can_spell(signature, code.python_code("self").src, placeholders)
            code._codegen = fx_signature.SignatureCodeGen(signature, spelled)
    gm = fx.GraphModule(root, code, class_name=_identifier(name, "forward"))
    _adopt(gm, root)
    gm.train(training)
    if checks is not None or signature is not None:
        type(gm).__reduce__ = _reduce  # the class is gm's own (torch.fx)
    if checks is not None:
        gm._tracer_cls = fx_checks.CheckTracer
        for state_name, path in [*targets.items(), *tied]:
            table, key = slots[state_name]
            owner, _, attribute = path.rpartition(".")
            checks.follow(table, key, gm.get_submodule(owner), attribute)
    gm.meta[META_KEY] = BridgeInfo(
        method=name,
        in_spec=graph.in_spec,
        out_spec=graph.out_spec,
        input_names=[v.name or f"in{i}" for i, v in enumerate(graph.inputs)],
        input_shapes=[list(v.shape or []) for v in graph.inputs],
        example_shapes=[list(v.example) if v.example is not None else None for v in graph.inputs],
        input_dtypes=[_dtype(v.dtype) for v in graph.inputs],
        state=targets,
        var_keywords=list(graph.var_keywords),
        arg_names=list(graph.arg_names),
        positional_only=graph.positional_only,
        defaults=dict(graph.defaults),
        signature=signature.text() if signature is not None else None,
    )
    return gm


def _reduce(gm: fx.GraphModule):
    """``__reduce__`` of a GraphModule of :func:`graph_module`. torch.fx's keeps neither
    ``meta`` (its BridgeInfo: :func:`call`, the backends) nor the code generator of a
    ``forward`` that takes the traced call's arguments (fx_signature.py); and it says
    what to do where pickle cannot import what the graph calls (fx_checks.py)."""
    rebuild, args = fx_signature.reduce_flat(gm, fx_checks.reduce_or_say_why)
    return _unpickled, (rebuild, args, dict(gm.meta), fx_signature.pickled_signature(gm))


def _unpickled(rebuild, args, meta: dict, signature: tuple | None) -> fx.GraphModule:
    """The GraphModule that :func:`_reduce` pickled."""
    gm = rebuild(*args)
    gm.meta.update(meta)
    fx_signature.with_signature(gm, signature)
    type(gm).__reduce__ = _reduce  # the class is gm's own (torch.fx)
    return gm


def _adopt(gm: fx.GraphModule, root: nn.Module) -> None:
    """Give ``gm`` the state tree built on ``root`` itself: ``fx.GraphModule`` copies
    only what the graph reads, and registers every tensor it copies as a persistent
    buffer (torch.fx ``_copy_attr``), where the traced module registered some as
    non-persistent and holds state no graph reads."""
    for table in ("_modules", "_parameters", "_buffers"):
        # root's order first (torch.fx copied what the graph reads in the graph's order):
        # parameters() then lists them as the traced module does
        mine, theirs = getattr(gm, table), getattr(root, table)
        ordered = {**theirs, **{k: v for k, v in mine.items() if k not in theirs}}
        mine.clear()
        mine.update(ordered)
    gm._non_persistent_buffers_set.update(root._non_persistent_buffers_set)


def _install_aliases(
    root: nn.Module, plan: StatePlan | None, slots: dict, targets: dict[str, str]
) -> list[tuple[str, str]]:
    """Each tied name of ``plan`` at its own path, the same tensor as its state name's
    (as the traced module holds it: ``state_dict()`` has both keys); a name that cannot
    be a module path there is left out. Returns ``(state name, path)`` per one installed."""
    installed = []
    for alias, target in (plan.aliases if plan is not None and plan.whole else {}).items():
        if target not in targets or alias in targets:
            continue
        table, key = slots[target]
        path = _install(root, alias, table[key], None, plan.persistent.get(target, True))
        if path is not None:
            installed.append((target, path))
    return installed


def _dtype(name: str | None) -> torch.dtype | None:
    from ..ir import DTYPES

    return DTYPES.get(name or "")


def info(gm: fx.GraphModule) -> BridgeInfo:
    """The :class:`BridgeInfo` of a GraphModule made by :func:`to_graph_module`."""
    found = getattr(gm, "meta", {}).get(META_KEY)
    if not isinstance(found, BridgeInfo):
        raise TraceError(
            "this GraphModule was not made by tracebridge.to_graph_module (it has no "
            f"meta[{META_KEY!r}]); make it with to_graph_module"
        )
    return found


def flatten_inputs(gm: fx.GraphModule, *args, **kwargs) -> list[torch.Tensor]:
    """The flat input tensors of ``gm`` (the graph's inputs, in the traced order) for the
    traced call's own arguments, bound by position or by keyword as the runtime binds
    them (runtime/binding.py)."""
    meta = info(gm)
    return flatten_by_spec(
        meta.in_spec,
        args,
        kwargs,
        meta.var_keywords,
        meta.method,
        meta.arg_names,
        meta.positional_only,
        meta.defaults,
    )


def flatten_by_spec(
    spec: dict,
    args: tuple,
    kwargs: dict,
    var_keywords: list[str] = (),
    method: str = "the GraphModule's method",
    arg_names: list[str] = (),
    positional_only: int = 0,
    defaults: dict | None = None,
) -> list[torch.Tensor]:
    """:func:`flatten_inputs` by the graph's ``in_spec``, ``var_keywords``, ``arg_names``,
    ``positional_only`` and ``defaults`` (no GraphModule needed): a call is bound by
    position, by keyword and to the parameters' defaults as the runtime binds it, and a
    dict input, or the keywords of ``**kwargs``, in another order than traced is refused
    as the runtime refuses it (runtime/method.py, runtime/binding.py)."""
    from ..runtime.binding import bind_to_trace, binding_error, with_defaults
    from ..runtime.method import _in_key_order, describe, mismatch, refuse_reordered, same_spec

    if len(args) != len(spec["c"][0]["c"]):
        bound = bind_to_trace(args, kwargs, spec, list(arg_names), positional_only)
        if bound is not None:
            args, kwargs = bound
    leaves, got = pytree.flatten((args, kwargs), is_tensor)
    if not same_spec(got, spec):
        leaves, given = pytree.flatten(_in_key_order((args, kwargs), spec), is_tensor)
        if same_spec(given, spec):
            refuse_reordered(method, got, kwargs, spec, var_keywords)
        got = given
    filled = (
        None
        if same_spec(got, spec)
        else with_defaults(args, kwargs, spec, list(arg_names), defaults or {}, positional_only)
    )
    if filled is not None:  # once: a filled call changes no more
        names = (var_keywords, method, arg_names, positional_only, defaults)
        return flatten_by_spec(spec, *filled, *names)
    if not same_spec(got, spec):
        refused = binding_error(
            method,
            args,
            kwargs,
            list(arg_names),
            positional_only,
            list(var_keywords),
            spec,
            defaults or {},
        )
        if refused is not None:
            raise BindingError(refused)
        raise TraceError(
            f"the GraphModule's method was called with arguments shaped differently from the "
            f"example inputs it was traced with: {mismatch(spec, got)}; expected "
            f"{describe(spec)}, got {describe(got)}"
        )
    return leaves


def unflatten_outputs(gm: fx.GraphModule, flat) -> Any:
    """The traced call's nested result from ``gm``'s flat outputs."""
    return pytree.unflatten(list(flat), info(gm).out_spec)


def call(gm: fx.GraphModule, *args, **kwargs) -> Any:
    """Call ``gm`` as the traced object is called: nested arguments in, nested result out.

    >>> import torch, tracebridge
    >>> from tracebridge.export import fx
    >>> f = tracebridge.trace(lambda d: {"y": d["x"] * 2}, ({"x": torch.ones(2)},), strict=False)
    >>> fx.call(tracebridge.to_graph_module(f), {"x": torch.ones(3)})
    {'y': tensor([2., 2., 2.])}
    """
    if info(gm).signature is not None:  # forward binds the call itself
        return unflatten_outputs(gm, gm(*args, **kwargs))
    return unflatten_outputs(gm, gm(*flatten_inputs(gm, *args, **kwargs)))


def example_inputs(gm: fx.GraphModule, shapes: list[list[int]] | None = None) -> tuple:
    """Input tensors of the example sizes (or ``shapes``) and dtypes: random floats,
    zeros for integers and bools (valid indices of any embedding). For ``torch.export``
    of a loaded artifact, which keeps the sizes but not the values it was traced with."""
    meta = info(gm)
    out = []
    for index, dtype in enumerate(meta.input_dtypes):
        size = shapes[index] if shapes is not None else meta.example_shapes[index]
        if size is None:
            raise TraceError(
                f"input {meta.input_names[index]!r} has no example sizes in the program "
                "(made by an older tracebridge); pass shapes="
            )
        dtype = dtype or torch.float32
        if dtype.is_floating_point or dtype.is_complex:
            out.append(torch.randn(size, dtype=dtype))
        else:
            out.append(torch.zeros(size, dtype=dtype))
    return tuple(out)


def dynamic_shapes(gm: fx.GraphModule) -> tuple:
    """``torch.export``'s ``dynamic_shapes`` for ``gm``: every dimension the trace left
    symbolic is ``Dim.AUTO`` (export keeps it dynamic unless the graph fixes it: a guard
    on that size, or an op that needs one value), every fixed one static."""
    meta = info(gm)
    return tuple(
        {d: torch.export.Dim.AUTO for d, size in enumerate(shape) if isinstance(size, str)} or None
        for shape in meta.input_shapes
    )


# Normalisations that update their running statistics only when this argument is True.
_STATISTICS_FLAG = {
    "batch_norm": (5, "training"),
    "native_batch_norm": (5, "training"),
    "instance_norm": (5, "use_input_stats"),
}


def _writes_statistics(node: Node) -> bool:
    """Whether a node that may write state does (``batch_norm`` in eval mode, with a
    literal ``training=False``, reads its running statistics and writes nothing)."""
    where = _STATISTICS_FLAG.get(node.op)
    if where is None:
        return True
    position, keyword = where
    flag = node.kwargs.get(keyword, node.args[position] if len(node.args) > position else True)
    return flag is not False


def state_written(graph: Graph, methods: dict[str, Graph]) -> list[str]:
    """The state names a call of ``graph`` updates in place (BatchNorm's running statistics
    in training mode, a buffer the model writes), sorted. A GraphModule shares them with
    the traced module, but an exported program (an ONNX model, an AOTInductor package)
    holds copies, which such updates would leave behind: its exporters refuse them.

    >>> import torch, tracebridge
    >>> bn = torch.nn.BatchNorm1d(2)
    >>> program = tracebridge.trace(bn, torch.rand(3, 2)).program
    >>> state_written(program.methods["forward"], program.methods)
    ['num_batches_tracked', 'running_mean', 'running_var']
    """
    written: set[str] = set()
    for index, roots in writes_by_node(graph, methods):
        if _writes_statistics(graph.nodes[index]):
            written |= {where for kind, where in roots if kind == "state"}
    return sorted(written)
