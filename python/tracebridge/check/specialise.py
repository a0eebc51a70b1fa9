"""Size specialisation: a trace made at batch size 2 also serves batch size 1 and length 1.

Note: why and how.
  Library code decides on sizes (``is_causal = q_len > 1``, ``if emb.shape[0] !=
  positions.shape[0]``). A trace made at batch size 2 guards those decisions, so a call at
  size 1 fails a guard although the model itself serves it -- and size 1 is the commonest
  serving case. So where a graph guards a comparison of sizes, the code is traced again on
  the example inputs with one of their sizes cut to 1 (every dimension of that size in
  every input: a batch or a sequence is shared by the inputs, so sizes that are equal in
  the example inputs are taken to be one size, as torch.export's duck sizing does), provided
  the real code runs on them (on the meta device, code that runs there only on its traced
  path -- transformers' masks read values otherwise -- is judged by the recording alone:
  ``_runs_only_traced``). A graph that differs from the first is kept as a
  *specialisation*: guarded at its start on the sizes that are 1 (so it never serves a call
  where they are not), stored beside the first graph in the same program (its
  ``specialised`` field lists them), and tried by the runtime, in order, when the first
  graph's guards refuse a call. A call that no graph serves raises the first graph's
  GuardError. Graphs that write in place (state updates, a cache, an input) get
  specialisations too: a graph that refuses a call puts back what it wrote before the
  refusal (runtime/transaction.py), so the next graph starts from the state the call found.

  Sizes also decide together: an encoder-decoder asks ``q_len > 1`` of the source and of the
  target, so a call with both at 1 passes neither graph cut at one of them (each guards the
  other length). So after the single cuts, every combination of the sizes whose single cut
  gave a specialisation (the first JOINT of them) is cut together and kept when its graph
  differs from the first graph and from those kept for part of the combination (which
  serve it already). Bound: at most PROBES + 2**JOINT - JOINT - 1 = 16 traces (and as many
  eager runs), and only where sizes specialise; and the graphs of a method take at most
  BUDGET JSON containers in program.json (half of what a reader accepts: a large model's
  specialisations must not make a file that no reader loads). Probes run single cuts first,
  batch first, so where the budget runs out, what is kept serves the commonest calls.
  Specialisations are tried most sizes cut
  first, so a call with several sizes at 1 reaches the graph traced with all of them at 1
  before one traced with some (whose guards would refuse it anyway). Every graph checks all
  its guards, so whichever serves a call, its assumptions hold for that call.

  Residues decide too: transformers' LongT5 pads a sequence to a multiple of its block
  only ``if x.shape[dim] % block_len != 0``, so a trace at length 8 refuses 12 although
  padding by 0 would be right (torch.jit.trace, which bakes the branch, is right there by
  luck). Where a guarded comparison reads a rounded size (``%``, ``//``, ``ceil``,
  ``floor``), the code is also traced with a size cut by 1 and by 2
  (FLIPS sizes at most, every dimension of that size, as above, never below 2), and a
  graph that differs from those kept is kept after the size-1 graphs. It needs no guard
  at its start: traced at an ordinary size, it is exactly as general as the first graph,
  and its own guards hold it to the residues it was traced with.

  Thresholds decide as well: VITS pads a table by ``max(length - 5, 0)`` only ``if
  pad_length > 0``, so a trace at length 8 refuses length 5 although eager serves it (and
  torch.jit.trace, which traces the pad amount and bakes the branch, is right there). So
  the graph's guarded comparisons of sizes are evaluated, from the scalar ops the graph
  recorded, with the example's size read as each smaller size (down to 2, SCAN of them;
  every traced size equal to it reads as the new one, as above); where their outcomes
  differ from the example's, the code is traced again at the nearest such size, one per
  distinct set of outcomes (THRESHOLDS per size, FLIPS sizes), kept as the residue graphs
  are: its own guards hold it to the sizes it serves.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

from ..ir import Graph, Node, Ref, Value, graph_to_json, pytree
from ..ir import ops as opset
from ..ir.pytree import is_tensor
from ..trace.message_sinks import shown_nowhere
from .compare import on_meta
from .program import LIMITS, json_containers
from .verify import first_difference

PROBES = 5  # sizes cut alone, at most, batch first
FLIPS = 3  # sizes cut by 1 and by 2 where a guard reads a rounded size: 6 more traces
THRESHOLDS = 2  # sizes a size is cut to where guarded comparisons flip below it, at most
SCAN = 64  # sizes below the example's at which those comparisons are evaluated, at most
JOINT = 4  # sizes cut together, at most: 2**JOINT - JOINT - 1 = 11 more traces
# A method's first graph and its specialisations take at most this many JSON objects and
# arrays in program.json, half of what a reader accepts, so that the file stays loadable
# with other methods beside it; a specialisation that does not fit is not kept.
BUDGET = LIMITS["containers"] // 2
# The end of what a specialisation's own guards check: a refusal by one of them says only
# that the graph is for other sizes, so the runtime reports another graph's refusal.
SIZE_ONE_GUARD = "(a graph specialised for size 1)"
# How the guards of a graph traced at cut sizes (residues, thresholds) name their graph.
CUT_GRAPH = "(in the graph traced with the example's"
_COMPARISONS = frozenset(f"scalar.{op}" for op in ("eq", "ne", "lt", "le", "gt", "ge"))
_ROUNDING = frozenset(f"scalar.{op}" for op in ("mod", "floordiv", "ceil", "floor"))
# Thresholds are orderings: a size compared for equality (a value the code fixes) has one
# other outcome per size, and a graph for each would serve that size alone.
_ORDERINGS = frozenset(f"scalar.{op}" for op in ("lt", "le", "gt", "ge"))


def compares_sizes(graph: Graph) -> bool:
    """Whether ``graph`` decides on sizes: a guard checks the result of a comparison of
    traced numbers, or an op's number of results (``unbind``) is fixed."""
    producers = {v.id: n for n in graph.nodes for v in n.outputs}
    for node in graph.nodes:
        if node.op in opset.VARIADIC_OUTPUTS:
            return True
        if node.op != "prim.guard" or not node.args or not isinstance(node.args[0], Ref):
            continue
        producer = producers.get(node.args[0].id)
        if producer is not None and producer.op in _COMPARISONS:
            return True
    return False


def decides_on_residues(graph: Graph) -> bool:
    """Whether a guard of ``graph`` checks a comparison that reads a rounded size (``L % 3
    != 0``, ``ceil(h / 2) * 2 != h``): a nearby size may take the other path. A loop over
    ``L // 4`` is not probed: each count would be one more graph, and a call no graph
    serves would be refused with the count of the graph tried last."""
    producers = {v.id: n for n in graph.nodes for v in n.outputs}

    def reads_rounding(ref: Ref, seen: set) -> bool:
        node = producers.get(ref.id)
        if node is None or not node.op.startswith("scalar.") or ref.id in seen:
            return False
        seen.add(ref.id)
        if node.op in _ROUNDING:
            return True
        return any(isinstance(a, Ref) and reads_rounding(a, seen) for a in node.args)

    for node in graph.nodes:
        if node.op != "prim.guard" or not node.args or not isinstance(node.args[0], Ref):
            continue
        producer = producers.get(node.args[0].id)
        compared = producer is not None and producer.op in _COMPARISONS
        if compared and reads_rounding(node.args[0], set()):
            return True
    return False


def threshold_cuts(graph: Graph, size: int) -> list[int]:
    """Sizes below ``size`` at which ``graph``'s guarded comparisons of traced sizes take
    other outcomes than at ``size`` (every traced size equal to ``size`` read as the
    smaller one; see the note above): the nearest size for each distinct set of outcomes,
    at most THRESHOLDS, nearest first."""
    shapes: dict[int, list] = {v.id: v.example or v.shape or [] for v in graph.inputs}
    producers: dict[int, str] = {}
    steps = []  # the nodes that compute or check sizes, in order
    for node in graph.nodes:
        for value in node.outputs:
            producers[value.id] = node.op
            if value.kind == "Tensor" and isinstance(value.shape, list):
                shapes[value.id] = value.shape
        if node.op == "prim.size" or node.op in opset.SCALAR_OPS or node.op == "prim.guard":
            steps.append(node)

    def outcomes(at: int) -> tuple:
        known: dict[int, object] = {}
        seen = []
        for node in steps:
            args = [known.get(a.id) if isinstance(a, Ref) else a for a in node.args]
            if node.op == "prim.guard":
                ref = node.args[0] if node.args else None
                if isinstance(ref, Ref) and producers.get(ref.id) in _ORDERINGS:
                    seen.append(args[0])
                continue
            if node.op == "prim.size":
                shape = shapes.get(node.args[0].id) if isinstance(node.args[0], Ref) else None
                dim = node.args[1] if len(node.args) > 1 else None
                if not shape or type(dim) is not int or not -len(shape) <= dim < len(shape):
                    continue
                got = shape[dim]
                value = at if got == size else got
            elif any(type(a) not in (int, float, bool) for a in args):
                continue
            else:
                try:
                    value = opset.SCALAR_OPS[node.op](*args)
                except (ArithmeticError, ValueError, opset.ScalarRangeError):
                    continue
            if type(value) in (int, float, bool) and len(node.outputs) == 1:
                known[node.outputs[0].id] = value
        return tuple(seen)

    example = outcomes(size)
    found: dict[tuple, int] = {}
    for at in range(size - 1, max(1, size - 1 - SCAN), -1):
        other = outcomes(at)
        if other != example and other not in found:
            found[other] = at
            if len(found) >= THRESHOLDS:
                break
    return list(found.values())


def _cut_sizes(args: tuple, kwargs: dict) -> list[int]:
    """The sizes above 1 of the example inputs, up to PROBES, dimension 0 first."""
    leaves, _ = pytree.flatten((args, kwargs), is_tensor)
    order = [leaf.shape[0] for leaf in leaves if leaf.dim() > 0]
    order += [size for leaf in leaves for size in leaf.shape[1:]]
    return list(dict.fromkeys(s for s in order if s > 1))[:PROBES]


def cut_to_one(args: tuple, kwargs: dict, sizes) -> tuple[tuple, dict, list]:
    """The example inputs with every dimension whose size is in ``sizes`` cut to 1:
    ``(args, kwargs, [(input index, dim), ...])``."""
    return cut_to(args, kwargs, dict.fromkeys(sizes, 1))


def cut_to(args: tuple, kwargs: dict, sizes: dict[int, int]) -> tuple[tuple, dict, list]:
    """The example inputs with every dimension whose size is a key of ``sizes`` cut to its
    value (the first elements kept): ``(args, kwargs, [(input index, dim), ...])``."""
    leaves, spec = pytree.flatten((args, kwargs), is_tensor)
    cut, dims = [], []
    for i, leaf in enumerate(leaves):
        piece = leaf.detach()
        for d in range(leaf.dim()):
            if leaf.shape[d] in sizes:
                piece = piece.narrow(d, 0, sizes[leaf.shape[d]])
                dims.append((i, d))
        piece = piece.clone()
        cut.append(piece.requires_grad_() if leaf.requires_grad else piece)
    new_args, new_kwargs = pytree.unflatten(cut, spec)
    return new_args, new_kwargs, dims


def size_one_probes(args: tuple, kwargs: dict) -> list[tuple[tuple, dict, list]]:
    """The example inputs with one of their sizes cut to 1 in every dimension that has it:
    ``(args, kwargs, [(input index, dim), ...])`` for up to PROBES sizes, dimension 0
    first."""
    return [cut_to_one(args, kwargs, {size}) for size in _cut_sizes(args, kwargs)]


def _containers(graph: Graph) -> int:
    """The JSON objects and arrays ``graph`` takes in program.json, as a reader counts them
    (every ``{`` and ``[``)."""
    return json_containers(json.dumps(graph_to_json(graph), default=str).encode())


def guarded_at_size_one(graph: Graph, dims: list[tuple[int, int]]) -> Graph:
    """``graph`` with guards at its start: each dimension in ``dims`` is 1."""
    next_id = 1 + max(
        [v.id for v in graph.inputs] + [v.id for n in graph.nodes for v in n.outputs] + [-1]
    )
    head = []
    for index, dim in dims:
        value = graph.inputs[index]
        size = Value(id=next_id, kind="int")
        next_id += 1
        head.append(
            Node(op="prim.size", args=[Ref(value.id), dim], outputs=[size], out_spec=pytree.LEAF)
        )
        head.append(
            Node(
                op="prim.guard",
                args=[Ref(size.id)],
                kwargs={
                    "expect": 1,
                    "what": f"{value.name}.shape[{dim}] {SIZE_ONE_GUARD}",
                    "kind": "value",
                },
            )
        )
    graph.nodes = head + graph.nodes
    return graph


def _labelled(graph: Graph, how: str) -> Graph:
    """``graph`` whose guards say which graph they belong to: where no graph serves a call,
    the runtime may report a refusal of this one, whose assumptions are not the example's."""
    for node in graph.nodes:
        if node.op == "prim.guard" and isinstance(node.kwargs.get("what"), str):
            node.kwargs = dict(
                node.kwargs,
                what=f"{node.kwargs['what']} {CUT_GRAPH} {how})",
            )
    return graph


def _runs_only_traced(run_eager, args, kwargs) -> bool:
    """Whether the inputs are on the meta device and the code does not run on them outside
    the tracer (library code that reads values when no tracer runs: transformers' masks):
    then no eager run can say which sizes the model serves, and a recording at the cut
    sizes, which runs the code on its traced path, decides alone."""
    if not on_meta(args, kwargs):
        return False
    try:
        with shown_nowhere():
            run_eager(args, kwargs)
    except Exception:
        return True
    return False


def specialisations(
    graph: Graph,
    args: tuple,
    kwargs: dict,
    run_eager: Callable[[tuple, dict], object],
    retrace: Callable[[tuple, dict], Graph],
    kept: list[Graph] | tuple = (),
) -> list[Graph]:
    """Graphs for calls with sizes of 1 that ``graph`` refuses, most specific first, then
    graphs for sizes whose residues take other paths (see the note above). ``kept``: other
    graphs of the method, counted in its BUDGET."""
    ones, residues = compares_sizes(graph), decides_on_residues(graph)
    if not (ones or residues):
        return []
    thresholds = {
        size: threshold_cuts(graph, size)
        for size in [s for s in _cut_sizes(args, kwargs) if s > 2][:FLIPS]
    }
    found: dict[frozenset, tuple[Graph, list]] = {}  # sizes cut -> (graph, dims cut)
    flipped: list[tuple[Graph, list]] = []  # graphs traced at sizes cut by 1 or 2
    used = [_containers(graph) + sum(_containers(g) for g in kept)]
    recording_decides = _runs_only_traced(run_eager, args, kwargs)

    def probe(sizes: frozenset, to: int | None = None) -> Graph | None:
        cuts = {size: 1 if to is None else to for size in sizes}
        new_args, new_kwargs, dims = cut_to(args, kwargs, cuts)
        # The code's warnings meet the user's filters, as in the recording it is compared
        # with: ignored here, an "error" filter's warning took another path than eager's.
        with shown_nowhere():
            try:
                run_eager(new_args, new_kwargs)
            except Exception:
                if not recording_decides:
                    return None  # the model itself does not serve these sizes at 1
            try:
                other = retrace(new_args, new_kwargs)
            except Exception:
                return None  # the tracer cannot record it: calls keep the other guards
        # A graph that one already kept serves these calls too (its guards hold on them):
        # the first graph, or one kept for some of these sizes alone.
        servers = [graph] + [g for cut, (g, _) in found.items() if cut < sizes]
        servers += [g for g, _ in flipped] if to is not None else []
        if any(first_difference(g, other) is None for g in servers):
            return None
        size = _containers(other) + (8 * len(dims) if to is None else 0)  # a size-1 guard: 8
        if used[0] + size > BUDGET:
            return None
        used[0] += size
        if to is None:
            found[sizes] = (other, dims)
        else:
            flipped.append((_labelled(other, f"size {min(sizes)} cut to {to}"), dims))
        return other

    alone = [size for size in _cut_sizes(args, kwargs) if ones and probe(frozenset({size}))]
    joint = alone[:JOINT]
    for count in range(2, len(joint) + 1):
        for sizes in itertools.combinations(joint, count):
            probe(frozenset(sizes))
    # Most sizes cut first: where a call has several sizes at 1, the graph traced with all
    # of them at 1 is tried before one that holds only some (whose guards would refuse).
    ordered = sorted(found.items(), key=lambda item: -len(item[0]))  # stable: probe order
    if residues:
        for size in [s for s in _cut_sizes(args, kwargs) if s > 2][:FLIPS]:
            for to in (size - 1, size - 2):
                if to >= 2:
                    probe(frozenset({size}), to)
    for size, targets in thresholds.items():
        for to in targets:
            if not (residues and to >= size - 2):  # the residue probes tried it already
                probe(frozenset({size}), to)
    return [guarded_at_size_one(g, dims) for _, (g, dims) in ordered] + [g for g, _ in flipped]
