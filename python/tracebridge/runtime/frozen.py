"""Frozen programs (``tracebridge.freeze``): code that does not check its state per call.

Note: why a frozen program may skip the state checks, and when it may not.
  A traced or loaded module keeps the values it folds from its state live
  (runtime/folding.py): each call checks every state tensor they read (its identity in
  its slot, its type, version and data pointer) and the state's types (runtime/lean.py), since
  the caller may assign, move, load or write the module's tensors at any time. A frozen
  program holds its own copy of the state, which it never hands out (``state_dict()``
  gives copies, ``.to()`` and ``load_state_dict`` refuse): nothing outside it can reach
  those tensors. Two ways remain for them to change, and a program that has either keeps
  the live checks (:func:`state_stays_fixed` is False, and its methods are not marked):

  - a graph writes its state (a step counter ``self.calls += 1``, a cache filled in
    place, a batch norm in training mode), which moves the version the check keys on;
  - an output may share memory with state (``return self.weight``, a view of a buffer):
    the caller could write into it.

  A loaded object skips the same checks without a copy until its state could have
  reached anyone (runtime/sealed.py), with the same two exclusions.

  Everything else a call checks still runs: the input checks, the guards, the settings,
  the module tree; the default dtype and ``invalidate_caches()`` still key the folded
  values (runtime/folding.py, ``FixedFolded``).
"""

from __future__ import annotations

from ..check.state_writes import VIEW_OPS, written_roots
from ..ir import Graph, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from .caller_memory import MAY_VIEW_ANY
from .folding import _ALIASING


def _may_return_state(graph: Graph) -> bool:
    """Whether an output of ``graph`` may share memory with a state tensor: a read of
    state, or the result of a view, an in-place op, an op that may return an argument or
    an op the table does not know, applied to such a value (conservative: a known op
    outside those makes new memory)."""
    sharing: set[int] = set()
    for node in graph.nodes:
        if node.op == "prim.state":
            sharing.update(v.id for v in node.outputs)
            continue
        info = opset.info(node.op)
        may_alias = (
            info is None
            or node.op in VIEW_OPS
            or node.op in _ALIASING
            or node.op in MAY_VIEW_ANY
            or opset.is_inplace(node.op)
        )
        if may_alias and any(r.id in sharing for r in refs_in((node.args, node.kwargs))):
            sharing.update(v.id for v in node.outputs)
    return bool(output_ids(graph) & sharing)


def state_stays_fixed(methods: dict[str, Graph], run: list[str] | None = None) -> bool:
    """Whether no graph of a program (``methods``: its graphs by name; ``run``: the names
    of those a call may run, all by default) writes its state or returns memory of it
    (module Note): then, with the state its own, a frozen program may keep folded values
    without checking the state again."""
    for name in methods if run is None else run:
        graph = methods[name]
        if any(kind == "state" for kind, _ in written_roots(graph, methods)):
            return False
        if _may_return_state(graph):
            return False
    return True


def runtime_methods(method) -> list:
    """The runtime Methods behind a traced object's method: those of a chain of
    specialisations (runtime/method.py, ``Specialised``) and the one a transaction
    (runtime/transaction.py) wraps."""
    inner = getattr(method, "__dict__", {}).get("_method")
    if inner is not None:
        return runtime_methods(inner)
    chain = getattr(method, "__dict__", {}).get("methods")
    if chain is not None:
        return [m for each in chain for m in runtime_methods(each)]
    return [method]


def mark_frozen(methods: dict) -> None:
    """Make the code of every runtime Method behind ``methods`` (a traced object's
    ``_methods``) the frozen code: set before any call, when the code is made."""
    for method in methods.values():
        for each in runtime_methods(method):
            each.frozen = True
            each._compiled.clear()
            each._plain.clear()
