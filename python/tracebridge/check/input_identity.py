"""One tensor passed at several input positions: does the code depend on that identity?

Note: a recording gives each input position a tensor of its own (trace/capture.py: one
tensor passed twice is two inputs, each a detached alias of the caller's), so the graph
stands for calls that pass distinct tensors, and serves a call passing one tensor twice
as it serves two equal ones. That is right unless the code tests the identity of its
inputs (``if query is key:``, a self-attention fast path): the caller's own call, one
tensor twice, then takes another path than the recording did, and the trace gave the
other path's results on its very example (prober21b F3; torch.jit.trace too). So where
the example repeats a tensor, the code runs twice from the same state and random state,
as the caller gave the inputs and with the repeats made distinct: the same results
(nn.MultiheadAttention's packed or split projections, ``a * 2 if a is b else a + b``)
keep the general graph, which is then right for both kinds of call; other results refuse
the trace, naming the parameters and the line where a recording of the caller's call
parts from the general one, with the two ways to trace either path.

Only calls decide here, never graphs: a shortcut that records other ops with the same
results is no reason to refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import torch

from ..errors import TraceError, TracingCheckError
from ..ir import Graph, pytree
from ..ir.pytree import is_tensor
from ..source import source_line
from ..trace.capture import capture_again, enter_mode, leaf_names, preserved
from .compare import compare_outputs, fresh


def repeated_inputs(args: tuple, kwargs: dict) -> list[list[int]]:
    """The tensor leaves of the inputs that are one object, as groups of leaf positions
    (``f(x, x)``: ``[[0, 1]]``); empty where every tensor is passed once.

    >>> x = torch.zeros(2)
    >>> repeated_inputs((x, torch.ones(2)), {"mask": x})
    [[0, 2]]
    """
    leaves, _ = pytree.flatten((tuple(args), dict(kwargs)), is_tensor)
    groups: dict[int, list[int]] = {}
    for position, leaf in enumerate(leaves):
        groups.setdefault(id(leaf), []).append(position)
    return [group for group in groups.values() if len(group) > 1]


def distinct_copy(args: tuple, kwargs: dict, groups: list[list[int]]):
    """The inputs with every repeat of a tensor replaced by a detached alias of it (the
    same storage and values, another object), as a recording sees them."""
    leaves, spec = pytree.flatten((tuple(args), dict(kwargs)), is_tensor)
    for group in groups:
        for position in group[1:]:
            leaf = leaves[position]
            alias = leaf.detach()
            leaves[position] = alias.requires_grad_() if leaf.requires_grad else alias
    return pytree.unflatten(leaves, spec)


def method_words(module: torch.nn.Module, method: str) -> dict[str, str]:
    """``where`` and ``call`` of :func:`refuse_identity_paths` for ``method`` of a module:
    ``Block.encode`` and ``model.encode`` (``model`` for ``forward``)."""
    call = "model" if method == "forward" else f"model.{method}"
    return {"where": f"{type(module).__name__}.{method}", "call": call}


def refuse_identity_paths(
    graph: Graph,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    where: str,
    call: str,
    tolerance: float,
    module: torch.nn.Module | None = None,
    mode: bool | None = None,
    state: dict | None = None,
    names_from: Callable | None = None,
    strict: bool = True,
    label: str = "",
) -> None:
    """Raise :class:`TraceError` where the example passes one tensor at several positions
    and ``fn`` gives other results than for distinct tensors (module Note).

    ``graph`` is the general recording of ``fn(*args, **kwargs)``; ``module`` (in training
    mode ``mode``, None: as it is) is left as it was, and so is the random state; ``state``,
    ``names_from`` and ``strict`` are the recording's; ``where`` names the traced callable
    and ``call`` how the user calls it (``model``, ``model.encode``, ``f``); ``label``
    (``on a check input``) says which call it was, where it is not the example."""
    groups = repeated_inputs(args, kwargs)
    if not groups:
        return
    given_args, given_kwargs = fresh(args, kwargs)  # one copy per object: still repeated
    as_given = _run(fn, module, mode, given_args, given_kwargs)
    try:
        # Aliases of the same copies, as the recording sees them: an in-place write to
        # one input reaches the other in both calls.
        distinct_args, distinct_kwargs = distinct_copy(*fresh(args, kwargs), groups)
        as_distinct = _run(fn, module, mode, distinct_args, distinct_kwargs)
        compare_outputs(as_given, as_distinct, tolerance, "", "")
        return
    except TracingCheckError as exc:
        difference = _reworded(str(exc))
    except Exception as exc:  # the code fails where the tensors are distinct
        difference = f"with distinct tensors the code raises {type(exc).__name__}: {exc}"

    def record_one_object(a, k):
        return capture_again(
            fn,
            *fresh(a, k),
            module=module,
            mode=mode,
            state=state,
            strict=strict,
            names_from=names_from,
            one_object=True,
        )

    names = leaf_names(graph.arg_names, args, kwargs)
    lines = _message(graph.arg_names, args, kwargs, groups, names, where, call, difference)
    lines[2:2] = _parting_lines(graph, args, kwargs, groups, record_one_object)
    if label:  # a check's call: the check's error
        lines[0] = f"{label}: " + lines[0]
        raise TracingCheckError("\n".join(lines)) from None
    raise TraceError("\n".join(lines)) from None


def _run(fn, module, mode, args, kwargs):
    with preserved(module):
        enter_mode(module, mode)
        return fn(*args, **kwargs)


# compare_outputs words a difference between the code and the trace; here both are calls
_REWORDED = (
    ("between the code and the trace", "between the call as given and with distinct tensors"),
    (" in the trace but ", " with distinct tensors but "),
    (" in the code", " as given"),
    (
        "the trace returns a different structure than the code",
        "the two calls return other structures",
    ),
)


def _reworded(text: str) -> str:
    for old, new in _REWORDED:
        text = text.replace(old, new)
    return text.lstrip(": ")


def _quoted(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _message(arg_names, args, kwargs, groups, names, where, call, difference) -> list[str]:
    group = groups[0]
    params = _quoted([names[p] for p in group])
    first = names[group[0]]
    others = ", ".join(f"{names[p]}={first}.clone()" for p in group[1:])
    one = _one_input_call(arg_names, args, kwargs, names, group, call)
    lines = [
        f"{where} was given the same tensor as {params}, and it gives other results for "
        "one tensor than for distinct tensors with the same values: the code tests the "
        f"identity of its inputs (such as `if {first} is {names[group[1]]}:`). A trace "
        "records the path for distinct tensors, and would give its results for this call.",
        f"  {difference}",
    ]
    lines.append(
        "  to trace the path for one tensor, trace a function that passes one input to "
        f"each of them ({one}); to trace the path for distinct tensors, pass distinct "
        f"tensors ({others}): that trace then serves every call as a call with distinct "
        "tensors"
    )
    return lines


def _one_input_call(arg_names, args, kwargs, names, group, call) -> str:
    """``lambda query: model(query, query)``: the call with the group's tensors one input,
    the other inputs as they are named; a general phrase where one of the group is nested
    in a container."""
    leaves, _ = pytree.flatten((tuple(args), dict(kwargs)), is_tensor)
    repeated, first = leaves[group[0]], names[group[0]]
    top = [*zip(arg_names, args), *kwargs.items()]
    if sum(1 for _, value in top if value is repeated) != len(group):
        return f"lambda {first}, ...: {call}(...)"
    params = [first] + [name for name, value in top if value is not repeated]
    given = [first if value is repeated else name for name, value in zip(arg_names, args)]
    given += [f"{k}={first if value is repeated else k}" for k, value in kwargs.items()]
    return f"lambda {', '.join(params)}: {call}({', '.join(given)})"


def _parting_lines(graph, args, kwargs, groups, record_one_object) -> list[str]:
    """Where a recording of the call as given (one object) parts from the general one: the
    node of each, with its source line; nothing where that recording fails or agrees."""
    from .verify import _canonical, _node_line  # verify runs this module's check

    try:
        one = record_one_object(args, kwargs)
    except Exception:
        return []
    # The recording with one object reads each repeat through the group's last input
    # (the tracer binds a tensor to its latest input): compare with every repeat as that.
    rename = {f"in{p}": f"in{group[-1]}" for group in groups for p in group}
    general = [_renamed(row, rename) for row in _canonical(graph)]
    identity = [_renamed(row, rename) for row in _canonical(one)]
    if general == identity:
        return []
    index = next(
        (i for i, (a, b) in enumerate(zip(general, identity)) if a != b),
        min(len(general), len(identity)),
    )
    lines = []
    for label, recorded in (("for one tensor", one), ("for distinct tensors", graph)):
        text, node = _node_line(recorded, index)
        lines.append(f"  the recordings part at node {index}: {label}: {text}")
        if node is not None and node.loc:
            lines.append(f"      at {node.loc}: {source_line(node.loc)}")
    return lines


def _renamed(obj, rename: dict[str, str]):
    if isinstance(obj, tuple):
        if len(obj) == 2 and obj[0] == "ref" and obj[1] in rename:
            return ("ref", rename[obj[1]])
        return tuple(_renamed(x, rename) for x in obj)
    return obj


# How many groups of inputs the probe below runs the code for (two runs each).
MAX_PROBED_GROUPS = 4
# Groups of at most this many inputs are probed pair by pair too (six pairs at most).
MAX_PAIRED = 4


def identity_sensitive_groups(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    tolerance: float,
    module: torch.nn.Module | None = None,
    mode: bool | None = None,
) -> list[list[int]]:
    """The groups of input positions (tensor leaves, in the traced order) that the example
    gives distinct tensors, where the code gives other results for one tensor passed at
    two or more of them than for distinct tensors with the same values: a call passing
    one tensor at two positions of a group must be refused (runtime/method.py,
    ``Graph.distinct_inputs``).

    Note: the other direction of :func:`refuse_identity_paths` (prober21b F3's other half).
    A trace made with distinct tensors (``trace(attn, (q, k))``) holds the path for
    distinct tensors; code that tests identity (``if query is key:``) takes another path
    for ``attn(x, x)``, and the trace gave the distinct path's results. Which inputs a
    caller may pass one tensor to is not known, so the inputs that could be one tensor
    (the same dtype, device, layout and rank) are tried, per group: the code runs with
    distinct aliases of the group's first tensor (the same storage and values, other
    objects) and with one tensor at all of the group's positions, from the same state
    and random state. Where those differ, the whole group is marked. Where they agree,
    a group of three or four also runs with one tensor at each pair of its positions
    and distinct aliases at the others: a test of a mix (``if key is value`` with
    another query, ``q is k and k is not v``) differs only there, and marks that pair.
    Equal results (nn.MultiheadAttention: its packed and split projections agree) add
    nothing to the trace, which then serves every call; other results, or one run
    raising where the other does not, mark. Where both raise, the code does not take
    that tensor there, and nothing is known. At most :data:`MAX_PROBED_GROUPS` groups,
    the first ones, and pairs in groups of at most :data:`MAX_PAIRED` inputs (in a
    larger group only one tensor at all positions is tried); only calls decide, never
    graphs (as above)."""
    leaves, spec = pytree.flatten((tuple(args), dict(kwargs)), is_tensor)
    counts: dict[int, int] = {}
    for leaf in leaves:
        counts[id(leaf)] = counts.get(id(leaf), 0) + 1
    kinds: dict[tuple, list[int]] = {}
    for position, leaf in enumerate(leaves):
        if counts[id(leaf)] > 1 or leaf.layout != torch.strided:
            continue  # one tensor at several positions already: refuse_identity_paths
        key = (leaf.dtype, leaf.device, leaf.dim())
        kinds.setdefault(key, []).append(position)
    groups = [group for group in kinds.values() if len(group) > 1][:MAX_PROBED_GROUPS]
    found: list[list[int]] = []
    for group in groups:
        probe = _IdentityProbe(fn, args, kwargs, group, module, mode, tolerance)
        if probe.differs(group):
            found.append(group)
        elif 2 < len(group) <= MAX_PAIRED:
            found.extend(list(pair) for pair in combinations(group, 2) if probe.differs(pair))
    return found


class _IdentityProbe:
    """Runs of ``fn`` with one tensor at some of a ``group``'s positions, each against the
    run with distinct aliases at all of them (see :func:`identity_sensitive_groups`)."""

    def __init__(self, fn, args, kwargs, group, module, mode, tolerance):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.group, self.module, self.mode, self.tolerance = group, module, mode, tolerance
        self.as_distinct = self._outcome(())

    def _outcome(self, same):
        """The results (or the exception) of a run where the positions in ``same`` hold
        one tensor and the rest of the group distinct aliases of it."""
        leaves, spec = pytree.flatten(fresh(self.args, self.kwargs), is_tensor)
        first = leaves[self.group[0]]

        def alias():
            made = first.detach()
            return made.requires_grad_() if first.requires_grad else made

        shared = alias()
        for position in self.group:
            leaves[position] = shared if position in same else alias()
        a, k = pytree.unflatten(leaves, spec)
        try:
            return _run(self.fn, self.module, self.mode, a, k)
        except Exception as exc:
            return exc

    def differs(self, same) -> bool:
        """Whether one tensor at the positions ``same`` gives other results than distinct
        tensors."""
        as_one, as_distinct = self._outcome(same), self.as_distinct
        raised = [isinstance(o, Exception) for o in (as_one, as_distinct)]
        if all(raised):
            return False
        if any(raised):
            return True
        try:
            compare_outputs(as_one, as_distinct, self.tolerance, "", "")
        except TracingCheckError:
            return True
        return False
