"""Split a graph into subgraphs a backend compiles and the rest, which the runtime runs.

Note: the rules, in one place.
  * A subgraph is a contiguous run of supported nodes, in graph order. ``prim.state`` nodes
    neither join nor break a run: they have no inputs, so the partitioned graph reads them
    just before the subgraph and passes the tensors in (``.to()``, ``load_state_dict`` and
    training keep working). ``prim.guard`` and every unsupported node end a run.
  * Because the graph is in execution order, a run's inputs are values defined before it
    (graph inputs, state, earlier nodes) and its outputs are the values it defines that a
    later node or the graph's result uses; nothing else escapes.
  * Size arithmetic (``prim.size``, ``scalar.*``) may sit inside a run, so that
    ``x.view(x.size(0), -1)`` does not split it, but a run never ends with it (the sizes a
    guard needs are computed by the runtime, not returned by compiled code) and it does not
    count towards ``min_subgraph_size``.
  * A run with fewer than ``min_subgraph_size`` tensor ops stays on the runtime: a call into
    a compiled function costs more than it saves on one op.
  * A subgraph is stored by the indices of its nodes, so a saved artifact recompiles the
    same partition even if a later tracebridge supports more ops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ArtifactError
from ..ir import Graph, Node, Ref, refs_in
from ..ir.analysis import output_ids, uses, value_table
from ..runtime.codegen import CodeGen, compile_function

STRUCTURAL = ("prim.state", "prim.guard")


@dataclass
class Subgraph:
    """One compiled partition: its name, node indices, and boundary values (by id)."""

    name: str
    nodes: list[int]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    hoisted: list[int] = field(default_factory=list)  # prim.state nodes read before it

    @property
    def span(self) -> tuple[int, int]:
        return self.nodes[0], self.nodes[-1] + 1

    def to_json(self) -> dict:
        return {"name": self.name, "range": list(self.span), "nodes": list(self.nodes)}


@dataclass
class Coverage:
    """What the backend takes, counted over the graph's op nodes (state reads and guards
    are not ops). ``supported`` nodes the backend can compile; ``compiled`` those that
    ended up in a subgraph (a supported run shorter than ``min_subgraph_size`` is not)."""

    backend: str
    total: int = 0
    supported: int = 0
    compiled: int = 0
    unsupported: dict[str, int] = field(default_factory=dict)  # op -> count
    subgraphs: list[str] = field(default_factory=list)
    too_small: list[list[int]] = field(default_factory=list)  # runs left on the runtime

    @property
    def ratio(self) -> float:
        return self.supported / self.total if self.total else 1.0

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "total": self.total,
            "supported": self.supported,
            "compiled": self.compiled,
            "unsupported": dict(self.unsupported),
            "subgraphs": list(self.subgraphs),
        }

    def __str__(self) -> str:
        lines = [
            f"{self.backend}: {self.supported}/{self.total} ops supported "
            f"({100 * self.ratio:.0f}%), {self.compiled} compiled in "
            f"{len(self.subgraphs)} subgraph(s)"
        ]
        for op, count in sorted(self.unsupported.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  not supported: {op} x{count}")
        for run in self.too_small:
            lines.append(f"  too small to compile: nodes {run}")
        return "\n".join(lines)


def find_runs(
    graph: Graph, supports: Callable[[Node], bool], guards_split: bool = True
) -> list[list[int]]:
    """Maximal runs of supported nodes (indices), skipping over ``prim.state``; a guard
    ends a run unless ``guards_split`` is false (a whole graph checks guards inside)."""
    runs, current = [], []
    for index, node in enumerate(graph.nodes):
        if node.op == "prim.state" or (node.op == "prim.guard" and not guards_split):
            continue
        if node.op != "prim.guard" and supports(node):
            current.append(index)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _is_shape(node: Node) -> bool:
    return node.op.startswith(("prim.", "scalar."))


def boundary(graph: Graph, sub: Subgraph) -> Subgraph:
    """Fill in a subgraph's inputs, outputs and hoisted state reads from its node list."""
    members = set(sub.nodes)
    defined: set[int] = set()
    inputs: list[int] = []
    for index in sub.nodes:
        node = graph.nodes[index]
        for ref in refs_in((node.args, node.kwargs)):
            if ref.id not in defined and ref.id not in inputs:
                inputs.append(ref.id)
        defined.update(v.id for v in node.outputs)
    readers = uses(graph)
    returned = output_ids(graph)
    used_after = {
        value_id
        for value_id, at in readers.items()
        if value_id in returned or any(i not in members for i in at)
    } | returned
    outputs = [v.id for i in sub.nodes for v in graph.nodes[i].outputs if v.id in used_after]
    start, end = sub.span
    hoisted = [i for i in range(start, end) if graph.nodes[i].op == "prim.state"]
    return Subgraph(sub.name, list(sub.nodes), inputs, outputs, hoisted)


def partition(
    graph: Graph, supports: Callable[[Node], bool], backend: str, min_size: int = 2, first: int = 0
) -> tuple[list[Subgraph], Coverage]:
    """The subgraphs to compile and the coverage report, for one graph."""
    coverage = Coverage(backend)
    counts: Counter = Counter()
    for node in graph.nodes:
        if node.op in STRUCTURAL:
            continue
        coverage.total += 1
        if supports(node):
            coverage.supported += 1
        else:
            counts[node.op] += 1
    coverage.unsupported = dict(counts)
    subgraphs = []
    for run in find_runs(graph, supports):
        while run and _is_shape(graph.nodes[run[-1]]):
            run = run[:-1]
        if sum(not _is_shape(graph.nodes[i]) for i in run) < max(1, min_size):
            coverage.too_small.append(run)
            continue
        name = f"{backend}_subgraph_{first + len(subgraphs)}"
        subgraphs.append(boundary(graph, Subgraph(name, run)))
        coverage.compiled += len(run)
    coverage.subgraphs = [s.name for s in subgraphs]
    return subgraphs, coverage


def check_subgraphs(graph: Graph, subgraphs: list[Subgraph]) -> None:
    """Refuse a stored partition that does not fit the graph (corrupt or edited file)."""
    from ..errors import ArtifactError

    seen: set[int] = set()
    for sub in subgraphs:
        if not sub.nodes or sub.nodes != sorted(set(sub.nodes)):
            raise ArtifactError(f"subgraph {sub.name}: node list must be sorted and non-empty")
        for index in sub.nodes:
            if not 0 <= index < len(graph.nodes) or index in seen:
                raise ArtifactError(
                    f"subgraph {sub.name}: node {index} is outside the graph or in two subgraphs"
                )
            if graph.nodes[index].op in STRUCTURAL:
                raise ArtifactError(
                    f"subgraph {sub.name}: node {index} is "
                    f"{graph.nodes[index].op}, which never goes in a subgraph"
                )
            seen.add(index)
        start, end = sub.span
        inside = set(sub.nodes)
        for index in range(start, end):
            if index not in inside and graph.nodes[index].op != "prim.state":
                raise ArtifactError(
                    f"subgraph {sub.name}: nodes {start}..{end - 1} are not "
                    f"contiguous (node {index} is missing)"
                )


# --- building graphs ---------------------------------------------------------------------


def subgraph_graph(graph: Graph, sub: Subgraph) -> Graph:
    """The partition as a Graph of its own: inputs in, a flat tuple of outputs out."""
    table = value_table(graph)
    return Graph(
        inputs=[table[i] for i in sub.inputs],
        in_spec={},
        nodes=[graph.nodes[i] for i in sub.nodes],
        outputs=[Ref(i) for i in sub.outputs],
        out_spec={"t": "tuple", "c": [{"t": "leaf"} for _ in sub.outputs]},
        sources=graph.sources,
    )


def partitioned_graph(graph: Graph, subgraphs: list[Subgraph]) -> Graph:
    """``graph`` with each subgraph replaced by one ``backend.<name>`` node."""
    table = value_table(graph)
    starts = {sub.nodes[0]: sub for sub in subgraphs}
    skip = {i for sub in subgraphs for i in (*sub.nodes, *sub.hoisted)}
    nodes: list[Node] = []
    for index, node in enumerate(graph.nodes):
        sub = starts.get(index)
        if sub is not None:
            nodes.extend(graph.nodes[i] for i in sub.hoisted)
            nodes.append(
                Node(
                    op=f"backend.{sub.name}",
                    args=[Ref(i) for i in sub.inputs],
                    outputs=[table[i] for i in sub.outputs],
                    out_spec={"t": "tuple", "c": [{"t": "leaf"} for _ in sub.outputs]},
                    loc=graph.nodes[sub.nodes[0]].loc,
                )
            )
        if index not in skip:
            nodes.append(node)
    return graph.with_nodes(nodes)


class SubgraphCodeGen(CodeGen):
    """Code for one partition: no rank checks on the inputs (some are sizes, not tensors;
    the method that calls the partition has checked the user's inputs already)."""

    def input_checks(self, params: list[str]) -> None:
        return


class PartitionedCodeGen(CodeGen):
    """Code for the partitioned method: ``backend.*`` nodes call the compiled partitions."""

    def __init__(
        self,
        graph: Graph,
        slots: dict,
        name: str,
        guards: bool,
        functions: dict[str, Callable],
        methods: dict[str, Graph] | None = None,
    ):
        super().__init__(graph, slots, name, guards, methods)
        self.functions = functions

    def callable_for(self, node: Node) -> Callable:
        if not node.op.startswith("backend."):
            return super().callable_for(node)
        if node.op not in self.functions:
            raise ArtifactError(f"{self.name}: no compiled partition for node {node.op!r}")
        return self.functions[node.op]


def generate(gen: CodeGen, filename: str):
    """Compile the function that ``gen`` builds; return ``(code, function)``; ``code``
    is for reading (the function is compiled from the tree, not from this text)."""
    result = compile_function(gen, filename)
    return result.code, result.function
