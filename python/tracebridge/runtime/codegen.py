"""Generate a Python function from a Graph, one short method per construct.

The function takes the flattened input tensors, reads state through ``(dict, key)``
slots bound as globals (so ``.to()``, ``.double()`` and ``load_state_dict`` are seen on
every call), calls each op's torch function directly, checks guards inline, and returns
the outputs in their traced structure.
"""

from __future__ import annotations

import keyword
import math

import torch

from ..ir import Graph, Node, Ref, pytree
from ..ir.analysis import last_uses
from . import support

_TORCH_DTYPE_NAMES = {v: k for k, v in torch.__dict__.items() if isinstance(v, torch.dtype)}


class CodeGen:
    def __init__(self, graph: Graph, slots: dict, name: str, guards: bool):
        self.graph = graph
        self.slots = slots
        self.name = name
        self.guards = guards
        self.globals: dict = {"torch": torch, "_support": support}
        self.names: dict[int, str] = {}
        self.lines: list[str] = []
        self._ops: dict[str, str] = {}

    # -- names ------------------------------------------------------------------------------

    def _bind_global(self, prefix: str, obj) -> str:
        name = f"{prefix}{len(self.globals)}"
        self.globals[name] = obj
        return name

    def _op(self, op: str) -> str:
        if op not in self._ops:
            clean = "".join(c if c.isalnum() else "_" for c in op)
            self._ops[op] = f"op_{clean}"
            self.globals[self._ops[op]] = support.op_function(op)
        return self._ops[op]

    def _input_name(self, value) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in (value.name or ""))
        if not base or base[0].isdigit() or keyword.iskeyword(base) or base in self.globals:
            base = f"in{value.id}"
        while base in self.names.values():
            base += "_"
        return base

    def ref(self, ref: Ref) -> str:
        return self.names[ref.id]

    # -- expressions ------------------------------------------------------------------------

    def expr(self, arg) -> str:
        if isinstance(arg, Ref):
            return self.ref(arg)
        if isinstance(arg, float) and not math.isfinite(arg):
            return f"float({str(arg)!r})"
        if arg is None or isinstance(arg, (bool, int, float, str, complex)):
            return repr(arg)
        if arg is Ellipsis:
            return "..."
        if isinstance(arg, tuple):
            inner = ", ".join(self.expr(a) for a in arg)
            return f"({inner},)" if len(arg) == 1 else f"({inner})"
        if isinstance(arg, list):
            return "[" + ", ".join(self.expr(a) for a in arg) + "]"
        if isinstance(arg, dict):
            return "{" + ", ".join(f"{self.expr(k)}: {self.expr(v)}" for k, v in arg.items()) + "}"
        if isinstance(arg, slice):
            return f"slice({self.expr(arg.start)}, {self.expr(arg.stop)}, {self.expr(arg.step)})"
        if isinstance(arg, torch.dtype):
            return f"torch.{_TORCH_DTYPE_NAMES[arg]}"
        if isinstance(arg, torch.device):
            return f"torch.device({str(arg)!r})"
        if isinstance(arg, (torch.memory_format, torch.layout)):
            return str(arg)
        raise TypeError(f"cannot generate code for a literal {arg!r}")

    def call(self, node: Node) -> str:
        parts = [self.expr(a) for a in node.args]
        parts += [f"{k}={self.expr(v)}" for k, v in node.kwargs.items()]
        return f"{self._op(node.op)}({', '.join(parts)})"

    def targets(self, node: Node) -> str:
        """The assignment target for a node's result, following its out_spec."""
        outputs = iter(node.outputs)

        def build(spec) -> str:
            if spec["t"] == "leaf":
                value = next(outputs)
                self.names[value.id] = f"v{value.id}"
                return f"v{value.id}"
            if spec["t"] in ("none", "const"):
                return "_"
            inner = [build(c) for c in spec["c"]]
            if not inner:
                return "_"
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"

        return build(node.out_spec)

    # -- statements -------------------------------------------------------------------------

    def header(self) -> None:
        params = [self._input_name(v) for v in self.graph.inputs]
        for value, param in zip(self.graph.inputs, params):
            self.names[value.id] = param
        self.lines.append(f"def {self.name}({', '.join(params)}):")
        self.globals["_KIND"] = support.DTYPE_KIND
        for index, (value, param) in enumerate(zip(self.graph.inputs, params)):
            rank = len(value.shape or [])
            test = f"getattr({param}, 'ndim', None) != {rank}"
            kind = support.kind_of(value.dtype)
            if kind is not None:
                test += f" or _KIND.get({param}.dtype) != {kind!r}"
            self.lines.append(f"    if {test}:")
            self.lines.append(f"        _support.bad_input({index}, _graph, {param})")

    def node(self, index: int, node: Node) -> None:
        loc = f"  # {node.loc.rsplit('/', 1)[-1]}" if node.loc else ""
        if node.op == "prim.state":
            self.state(node)
        elif node.op == "prim.guard":
            self.guard(index, node)
        elif node.op in support.PRIM_EXPRESSIONS:
            args = [self.expr(a) for a in node.args]
            expr = support.PRIM_EXPRESSIONS[node.op].format(*args)
            self.lines.append(f"    {self.targets(node)} = {expr}{loc}")
        elif node.op in support.SCALAR_SYMBOLS:
            left, right = (self.expr(a) for a in node.args)
            expr = f"{left} {support.SCALAR_SYMBOLS[node.op]} {right}"
            self.lines.append(f"    {self.targets(node)} = {expr}{loc}")
        else:
            self.op(index, node, loc)

    def state(self, node: Node) -> None:
        name = node.args[0]
        owner, key = self.slots[name]
        holder = self._bind_global("S", owner)
        target = self.targets(node)
        self.lines.append(f"    {target} = {holder}[{key!r}]  # {name}")

    def guard(self, index: int, node: Node) -> None:
        if not self.guards:
            return
        value = self.expr(node.args[0])
        expect = node.kwargs["expect"]
        test = (
            f"{value} is not {expect!r}"
            if isinstance(expect, bool)
            else f"{value} != {self.expr(expect)}"
        )
        guard_node = self._bind_global("G", node)
        self.lines.append(f"    if {test}:")
        self.lines.append(f"        _support.raise_guard({guard_node}, {value})")

    def op(self, index: int, node: Node, loc: str) -> None:
        call = self.call(node)
        if node.out_spec is None or not node.outputs and node.out_spec.get("t") != "leaf":
            self.lines.append(f"    {call}{loc}")
            return
        if node.op in _variadic() and node.out_spec["t"] in ("tuple", "list"):
            count = len(node.out_spec["c"])
            call = f"_support.check_count({call}, {count}, {self._bind_global('N', node)})"
        self.lines.append(f"    {self.targets(node)} = {call}{loc}")

    def output(self) -> None:
        outputs = iter(self.graph.outputs)

        def named(spec, items) -> str:
            cls = pytree.namedtuple_class(spec["name"], spec["fields"])
            return f"{self._bind_global('NT', cls)}({', '.join(items)})"

        text = pytree.render(self.graph.out_spec, lambda: self.expr(next(outputs)), named)
        self.lines.append(f"    return {text}")

    def generate(self) -> str:
        self.globals["_graph"] = self.graph
        self.header()
        start = len(self.lines)
        dead_after = self.last_uses()
        for index, node in enumerate(self.graph.nodes):
            self.node(index, node)
            self.free(dead_after.get(index, ()))
        self.output()
        if any(n.op == "set_grad_enabled" for n in self.graph.nodes):
            self.restore_grad_mode(start)
        return "\n".join(self.lines) + "\n"

    def last_uses(self) -> dict[int, list[int]]:
        """node index -> values whose last use is that node (see ``ir.analysis``)."""
        return last_uses(self.graph)

    def free(self, value_ids) -> None:
        names = [self.names[v] for v in value_ids if v in self.names]
        if names:
            self.lines.append(f"    del {', '.join(sorted(names))}")

    def restore_grad_mode(self, start: int) -> None:
        """The code switches gradients on or off: put the caller's mode back, even on error."""
        body = ["    " + line for line in self.lines[start:]]
        self.lines[start:] = [
            "    _grad_mode = torch.is_grad_enabled()",
            "    try:",
            *body,
            "    finally:",
            "        torch._C._set_grad_enabled(_grad_mode)",
        ]


def _variadic():
    from ..ir.ops import VARIADIC_OUTPUTS

    return VARIADIC_OUTPUTS


def generate(graph: Graph, slots: dict, name: str, guards: bool = True):
    """Return ``(source, function)`` for ``graph``."""
    gen = CodeGen(graph, slots, name, guards)
    source = gen.generate()
    filename = f"<tracebridge:{name}>"
    code = compile(source, filename, "exec")
    namespace = dict(gen.globals)
    exec(code, namespace)  # noqa: S102 - our own generated source, from an allowlisted graph
    # Register the source so tracebacks through generated code show its lines.
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return source, namespace[name]
