"""The text form of a graph (``.graph``). Grammar, in shared_ir/SPEC.md:

    graph    := "graph " NAME "(" inputs ") {" NEWLINE stmt* "  return " expr NEWLINE "}"
    stmt     := "  " targets " = " OP "(" args ")" [ "  # " LOC ] NEWLINE
              | "  guard " VALUE " == " LITERAL "  # " TEXT NEWLINE
    targets  := VALUE ":" TYPE | "(" targets, ... ")" | "_"

Values are named only here: inputs and state by their names (``%x``, ``%conv.weight``),
the rest ``%0, %1, ...`` in order of definition, so the text is stable and diffs well.
Every line passes through :func:`printable`: text from a file (a ``loc``, a guard's
description) never reaches a terminal with its control characters or bidirectional marks.
"""

from __future__ import annotations

import math
import os

import torch

from . import pytree
from .printable import printable
from .program import GeneratorRef, Graph, Node, Ref, Value, fold_literal


class Printer:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.names: dict[int, str] = {}
        self.values: dict[int, Value] = {}
        self._counter = 0

    def define(self, value: Value, named: bool = False) -> str:
        if named and value.name:
            name = f"%{value.name}"
        else:
            name = f"%{self._counter}"
            self._counter += 1
        self.names[value.id] = name
        self.values[value.id] = value
        return name

    def literal(self, arg) -> str:
        return fold_literal(arg, self._leaf, self._container)

    def _leaf(self, arg) -> str:
        if isinstance(arg, Ref):
            return self.names.get(arg.id, f"%?{arg.id}")
        if isinstance(arg, float) and not math.isfinite(arg):
            return str(arg)
        if arg is Ellipsis:
            return "..."
        if isinstance(arg, (torch.dtype, torch.memory_format, torch.layout)):
            return str(arg).replace("torch.", "")
        if isinstance(arg, torch.device):
            return f"device({str(arg)!r})"
        if isinstance(arg, GeneratorRef):
            return f"generator({arg.name!r})"
        return repr(arg)

    @staticmethod
    def _container(arg, items: list) -> str:
        if isinstance(arg, list):
            return "[" + ", ".join(items) + "]"
        if isinstance(arg, dict):
            return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
        if isinstance(arg, slice):
            parts = [
                "" if p is None else text for p, text in zip((arg.start, arg.stop, arg.step), items)
            ]
            return ":".join(parts[:2] if arg.step is None else parts)
        return pytree.tuple_text(items)

    def targets(self, node: Node) -> str:
        if node.out_spec is None:
            return ""
        outputs = iter(node.outputs)

        def leaf() -> str:
            value = next(outputs)
            return f"{self.define(value, named=node.op == 'prim.state')}: {value.type_str()}"

        text = pytree.fold_spec(
            node.out_spec, leaf, lambda _spec, items: pytree.tuple_text(items), lambda _: "_"
        )
        return text + " = "

    def node(self, node: Node) -> str:
        loc = f"  # {_short(node.loc)}" if node.loc else ""
        if node.op == "prim.guard":
            what = node.kwargs.get("what", "")
            expect = node.kwargs.get("expect")
            return (
                f"  guard {self.literal(node.args[0])} == {self.literal(expect)}"
                f"  # {what}, at {_short(node.loc)}"
            )
        args = [self.literal(a) for a in node.args]
        args += [f"{k}={self.literal(v)}" for k, v in node.kwargs.items()]
        return f"  {self.targets(node)}{node.op}({', '.join(args)}){loc}"

    def outputs(self) -> str:
        outputs = iter(self.graph.outputs)
        return pytree.render(
            self.graph.out_spec,
            lambda: self.literal(next(outputs)),
            lambda spec, items: spec["name"] + pytree.tuple_text(items),
        )

    def print(self, name: str) -> str:
        inputs = ", ".join(
            f"{self.define(v, named=True)}: {v.type_str()}" for v in self.graph.inputs
        )
        lines = [f"graph {name}({inputs}) {{"]
        lines += [self.node(n) for n in self.graph.nodes]
        lines.append(f"  return {self.outputs()}")
        lines.append("}")
        return "\n".join(printable(line) for line in lines)


def _short(loc: str | None) -> str:
    """``file.py:12`` of a ``loc``, escaped to print (:func:`printable`)."""
    if not loc:
        return "?"
    path, _, line = loc.rpartition(":")
    return printable(f"{os.path.basename(path)}:{line}")


def graph_text(graph: Graph, name: str = "forward") -> str:
    """The text form of ``graph``."""
    return Printer(graph).print(name)
