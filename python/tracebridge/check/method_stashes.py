"""A tensor that one traced method leaves on the module for another (prober21b F4).

Note: ``encode`` runs ``self.memory = self.enc(src)`` and ``decode`` reads
``self.memory``. A plain attribute is not state: a trace keeps the tensor a method read at
trace time as a constant (trace/recorder.py warns), and a traced method's assignment to a
plain attribute is not replayed, so after ``traced.encode(src2)`` the traced ``decode``
went on with the memory of trace time, silently (torch.jit.trace_module too). Where a
method of one ``trace_module`` assigns a tensor to a plain attribute that a method reads
as such a constant, the trace is refused, naming the attribute, both methods and the line
that reads it; a buffer (``register_buffer``) is the remedy, since a trace reads a buffer
on every call and records an assignment to it as a write (trace/rebound_buffers.py).

Each recording starts from the module as the caller gave it (trace/capture.py puts every
attribute back), so a method that needs another's attribute finds it as it was: ``None``
where the module had not run yet. The code's own error there (``'NoneType' object has no
attribute 'mean'``) is given again as a :class:`TraceError` that says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch

from ..errors import TraceError
from ..ir import Graph
from ..source import raised_at, source_line
from ..trace.capture import preserved
from .compare import fresh

_REMEDY = (
    "register it as a buffer in __init__ (self.register_buffer({name!r}, None, "
    "persistent=False)): a trace reads a buffer on every call, and {writer}'s assignment "
    "then writes it"
)


def attributes(module: torch.nn.Module) -> dict[str, object]:
    """``path -> value`` of every plain attribute of ``module`` and its sub-modules that
    is a tensor or None (not a parameter, buffer or sub-module: those live in their
    tables)."""
    found: dict[str, object] = {}
    for prefix, mod in module.named_modules(remove_duplicate=False):
        for attr, value in vars(mod).items():
            if attr.startswith("_") or not (value is None or isinstance(value, torch.Tensor)):
                continue
            found.setdefault(f"{prefix}.{attr}" if prefix else attr, value)
    return found


def rebound(before: dict[str, object], module: torch.nn.Module) -> set[str]:
    """The paths of plain attributes that now hold another tensor than in ``before``."""
    now = attributes(module)
    return {
        path
        for path, value in now.items()
        if isinstance(value, torch.Tensor) and before.get(path) is not value
    }


def refuse_stale_reads(
    graphs: dict[str, Graph],
    methods: dict[str, str],
    constants: Iterable[str],
    written: dict[str, set[str]],
    owner: str,
) -> None:
    """Refuse a trace where a graph reads, as a constant, a plain attribute that a traced
    method assigns (module Note). ``graphs``: graph name -> graph; ``methods``: graph name
    -> the method it records; ``constants``: the names of the trace's constants (a plain
    attribute's is its path); ``written``: method -> the attribute paths its recording
    assigned; ``owner`` names the module's class."""
    names = set(constants)
    for graph_name, graph in graphs.items():
        reader = methods.get(graph_name, graph_name)
        for node in graph.nodes:
            if node.op != "prim.state" or not node.args or node.args[0] not in names:
                continue
            path = node.args[0]
            writers = sorted(m for m, paths in written.items() if path in paths)
            if not writers:
                continue
            writer = writers[0]
            where = f" at {node.loc} (`{source_line(node.loc).strip()}`)" if node.loc else ""
            who = "itself" if writer == reader else f"{owner}.{writer}"
            raise TraceError(
                f"{owner}.{reader} reads the tensor attribute {path!r}{where}, which "
                f"{who} assigns (self.{path.rsplit('.', 1)[-1]} = ...): a plain attribute "
                f"is not state, so the trace holds the tensor {reader} read at trace time "
                f"as a constant, and a traced {writer} does not assign it: after a call of "
                f"the traced {writer}, {reader} would go on with the old tensor. To keep "
                "it between calls, " + _REMEDY.format(name=path.rsplit(".", 1)[-1], writer=writer)
            )


@contextlib.contextmanager
def failure_explained(
    module: torch.nn.Module,
    method: str,
    others: dict[str, tuple[Callable, tuple, dict]],
    written: dict[str, set[str]],
):
    """Around the recording of ``method``: an error of the code is raised again as the
    :class:`TraceError` of :func:`explain_failure` where that explains it."""
    try:
        yield
    except TraceError:
        raise
    except Exception as exc:
        refusal = explain_failure(exc, module, method, others, written)
        if refusal is None:
            raise
        raise refusal from exc


def explain_failure(
    exc: BaseException,
    module: torch.nn.Module,
    failed: str,
    others: dict[str, tuple[Callable, tuple, dict]],
    written: dict[str, set[str]],
) -> TraceError | None:
    """Where recording method ``failed`` raised and another traced method assigns a plain
    attribute that is None (or missing) now, a :class:`TraceError` saying so (module
    Note); None otherwise. ``others``: method -> ``(callable, args, kwargs)``, run in eager
    (the module left as it was) for those whose assignments ``written`` lacks (not
    recorded yet)."""
    writes = {m: set(paths) for m, paths in written.items() if m != failed}
    for name, (fn, args, kwargs) in others.items():
        if name == failed or name in writes:
            continue
        before = attributes(module)
        try:
            with preserved(module):
                args, kwargs = fresh(args, kwargs)
                fn(*args, **kwargs)
                writes[name] = rebound(before, module)
        except Exception:
            continue
    now = attributes(module)
    unset = [
        (path, m)
        for m, paths in sorted(writes.items())
        for path in sorted(paths)
        if now.get(path) is None
    ]
    if not unset:
        return None
    path, writer = unset[0]
    name = path.rsplit(".", 1)[-1]
    owner = type(module).__name__
    loc = raised_at(exc)
    where = f" at {loc} (`{source_line(loc).strip()}`)" if loc else ""
    return TraceError(
        f"recording {owner}.{failed} raised {type(exc).__name__}: {exc}{where}. The "
        f"attribute {path!r} is None there, and {owner}.{writer}, traced with it, assigns "
        f"it: trace_module records each method from the module as it was given (what one "
        f"method assigns is put back before the next is recorded), and a trace keeps a "
        f"plain attribute it reads as a constant of trace time. To pass a tensor from "
        f"{writer} to {failed}, " + _REMEDY.format(name=name, writer=writer) + f", and "
        f"call {writer} once before tracing so that {failed} has one to read"
    )
