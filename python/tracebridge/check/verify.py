"""Check a trace against the real code (``check_trace``); the file rules are ``program``.

``check_trace`` does, for each check input (the example inputs when none are given):

1. trace again and compare the two graphs structurally (op by op, references by position);
   a difference raises :class:`TracingCheckError` showing the first diverging node of
   each graph with its source line;
2. run the original code and the trace on the same input from the same random-number
   state, and compare every tensor output within ``check_tolerance``;
3. when no check inputs are given, also try the example inputs with another batch size
   (dimension 0 grown by one): if the real code accepts it, the trace must either give
   the same result or refuse the call with a GuardError, else the trace specialised a
   size and the error says on which line; and each other dimension grown by one
   (check/dims.py: a size that Python arithmetic baked into a constant);
4. for a module, where a call changes a plain Python attribute of it, call the code and
   the trace twice and compare the second results (check/repeated.py).

On the meta device (a model traced without its weights) every step runs, but tensors hold
no values: outputs are compared by structure, shape and dtype only, and the checks that
need inputs with other values (constants that may depend on the inputs, state kept in
Python between calls) have none to try. One TracerWarning says so (``_warn_on_meta``).

Nothing about the model changes: everything runs inside ``capture.preserved``.
"""

from __future__ import annotations

import difflib
import re
import warnings

import torch

from ..errors import GuardError, OpError, TraceError, TracerWarning, TracingCheckError
from ..ir import Graph, Node, Ref, pytree
from ..ir.analysis import fused_without_autograd
from ..ir.printer import Printer
from ..ir.pytree import is_tensor
from ..source import raised_at, source_line, warn_at_user_line
from ..trace.capture import capture_again, enter_mode, preserved, state_index
from ..trace.own_hooks import global_hooks, global_hooks_skip
from .cached_calls import check_cached_values
from .compare import NON_DETERMINISM, compare_outputs, fresh, on_meta, rolled
from .dims import check_other_sizes
from .input_identity import method_words, refuse_identity_paths
from .meta_state import state_read
from .repeated import check_repeated
from .state_growth import check_after_longer

# --- structural comparison --------------------------------------------------------------------


# The recorder names a tensor made outside the graph ``const<k>``, k counting every
# constant of the trace (a module traced in both modes counts over both recordings).
_CONSTANT_NAME = re.compile(r"const\d+")


def _canonical(graph: Graph) -> list[tuple]:
    order = {v.id: f"in{i}" for i, v in enumerate(graph.inputs)}
    constants: dict[str, str] = {}
    rows = []
    for index, node in enumerate(graph.nodes):
        for k, value in enumerate(node.outputs):
            order[value.id] = f"n{index}.{k}"
        # A guard's description names values after the inputs; it is not structure.
        kwargs = {k: v for k, v in node.kwargs.items() if k != "what"}
        args = node.args
        constant = args[0] if node.op == "prim.state" and args else None
        if isinstance(constant, str) and _CONSTANT_NAME.fullmatch(constant):
            # By order of first use: a trace made again counts its constants from 0.
            args = (constants.setdefault(constant, f"const#{len(constants)}"), *args[1:])
        rows.append((node.op, _norm(args, order), _norm(kwargs, order)))
    return rows


_LEAVES = frozenset({int, float, bool, str, type(None)})


def _norm(obj, order):
    if type(obj) in _LEAVES:  # most of a long literal list
        return repr(obj)
    if isinstance(obj, Ref):
        return ("ref", order.get(obj.id, "?"))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_norm(x, order) for x in obj))
    if isinstance(obj, dict):
        return tuple(sorted((str(k), _norm(v, order)) for k, v in obj.items()))
    if isinstance(obj, slice):
        return ("slice", _norm((obj.start, obj.stop, obj.step), order))
    return repr(obj)


def first_difference(a: Graph, b: Graph) -> int | None:
    """Index of the first node where two graphs differ, or None if they are the same."""
    ca, cb = _canonical(a), _canonical(b)
    for index, (x, y) in enumerate(zip(ca, cb)):
        if x != y:
            return index
    if len(ca) != len(cb):
        return min(len(ca), len(cb))
    return None


def _node_line(graph: Graph, index: int) -> tuple[str, Node | None]:
    printer = Printer(graph)
    for v in graph.inputs:
        printer.define(v, named=True)
    text = [printer.node(n) for n in graph.nodes]
    if index >= len(text):
        return "(graph ends here)", None
    return text[index].strip(), graph.nodes[index]


def divergence_message(expected: Graph, got: Graph, index: int, label: str) -> str:
    line_a, node_a = _node_line(expected, index)
    line_b, node_b = _node_line(got, index)
    parts = [
        f"the trace is not stable {label}: the graphs differ at node {index}",
        f"  traced with the example inputs: {line_a}",
    ]
    if node_a is not None and node_a.loc:
        parts.append(f"      at {node_a.loc}: {source_line(node_a.loc)}")
    parts.append(f"  traced with the check inputs:   {line_b}")
    if node_b is not None and node_b.loc:
        parts.append(f"      at {node_b.loc}: {source_line(node_b.loc)}")
    text_a = [Printer(expected).node(n) for n in expected.nodes[max(0, index - 2) : index + 3]]
    text_b = [Printer(got).node(n) for n in got.nodes[max(0, index - 2) : index + 3]]
    diff = list(difflib.unified_diff(text_a, text_b, "example", "check", lineterm="", n=1))
    if diff:
        parts.append("  diff (value names are local to each excerpt):")
        parts += ["    " + d for d in diff[2:12]]
    parts.append(
        "  the code takes a different path or bakes in a value that depends on the "
        "input: make that value a tensor operation, or trace with representative "
        "inputs and pass check_trace=False if the difference is expected"
    )
    return "\n".join(parts)


# --- runs of the code and the trace ---------------------------------------------------------


def _run_same_rng(eager_fn, traced_fn, args, kwargs, module):
    """Run both from the same RNG state and model state; the model is left unchanged."""
    rng = torch.get_rng_state()
    eager_args, eager_kwargs = fresh(args, kwargs)
    traced_args, traced_kwargs = fresh(args, kwargs)
    with preserved(module):
        expected = eager_fn(*eager_args, **eager_kwargs)
    torch.set_rng_state(rng)
    with preserved(module):
        got = traced_fn(*traced_args, **traced_kwargs)
    return expected, got


def perturbed(args: tuple, kwargs: dict):
    """The example inputs with dimension 0 of every batch-like tensor grown by one."""
    leaves, spec = pytree.flatten((args, kwargs), is_tensor)
    if not leaves or leaves[0].dim() == 0:
        return None
    batch = leaves[0].shape[0]
    grown = [
        torch.cat([t, t[:1]]) if t.dim() > 0 and t.shape[0] == batch and batch > 0 else t
        for t in leaves
    ]
    new_args, new_kwargs = pytree.unflatten(grown, spec)
    return new_args, new_kwargs, batch


def _check_one(
    eager_fn,
    traced_method,
    reference: Graph,
    args,
    kwargs,
    tolerance,
    module,
    retrace,
    label,
    constants=frozenset(),
):
    _check_structure(reference, args, kwargs, retrace, label)
    expected, got = _run_same_rng(eager_fn, traced_method, args, kwargs, module)
    hint = _constants_hint(reference, constants)
    compare_outputs(expected, got, tolerance, label, hint or NON_DETERMINISM)


def _check_perturbed(
    eager_fn, traced_method, reference: Graph, args, kwargs, tolerance, module, retrace
):
    grown = perturbed(args, kwargs)
    if grown is None:
        return
    new_args, new_kwargs, batch = grown
    # preserved() puts the RNG state back, so both runs draw the same random numbers.
    try:
        with preserved(module):
            a, k = fresh(new_args, new_kwargs)
            expected = eager_fn(*a, **k)
    except Exception as exc:  # the real code does not accept another batch size
        _warn_if_answered(traced_method, new_args, new_kwargs, module, batch, exc)
        return
    try:
        with preserved(module):
            a, k = fresh(new_args, new_kwargs)
            got = traced_method(*a, **k)
    except GuardError:
        return  # the trace knows its limits: it refuses instead of answering wrongly
    except Exception as exc:
        other = _not_a_size_failure(exc, batch)
        if other is not None:
            raise other  # noqa: B904 - the exception itself, with its own traceback
        what = f"the trace fails ({type(exc).__name__}: {exc})"
        raise TracingCheckError(
            _specialised(reference, retrace, new_args, new_kwargs, batch, what)
        ) from None
    try:
        compare_outputs(expected, got, tolerance, f"with batch size {batch + 1}", "")
    except TracingCheckError as exc:
        raise TracingCheckError(
            _specialised(reference, retrace, new_args, new_kwargs, batch, str(exc))
        ) from None


def _constants_used(reference: Graph, constants) -> list[Node]:
    return [n for n in reference.nodes if n.op == "prim.state" and n.args[0] in constants]


def _constants_hint(reference: Graph, constants) -> str:
    """What to say where outputs differ and the trace keeps constants: the likely cause."""
    used = _constants_used(reference, constants)
    if not used:
        return ""
    places = "; ".join(
        f"'{n.args[0]}' first used at {n.loc}: {source_line(n.loc)}".rstrip(": ")
        for n in used
        if n.loc
    )
    return (
        "\n  the trace keeps a tensor that may depend on the inputs as a constant "
        f"({places or ', '.join(n.args[0] for n in used)}): a constant holds the value it "
        "had when traced, so one made from the inputs by code the tracer cannot see (a "
        "TorchScript function or module from torch.jit.script, a function transform such as "
        "torch.vmap, a C++ extension) or written "
        "by the code (a global tensor changed in place) gives the example's values for "
        "every input. Trace the Python code it was made from (a module before scripting "
        "it), or pass the tensor as an input"
    )


def _check_constants(
    eager_fn, traced_method, reference: Graph, constants, args, kwargs, tolerance, module
) -> None:
    """A tensor the trace keeps as a constant (not a parameter, buffer or input) must not
    depend on the inputs. It does where it was made by code the tracer cannot see -- a
    TorchScript function or module, a C++ extension -- from the inputs: the trace would
    give the example's answer for every input of the same shapes. Checked by running the
    code and the trace on inputs whose values moved (same shapes): only where the trace
    keeps such a constant."""
    moved = rolled(args, kwargs) if _constants_used(reference, constants) else None
    if moved is None:
        return
    new_args, new_kwargs = moved
    try:
        with preserved(module):
            a, k = fresh(new_args, new_kwargs)
            expected = eager_fn(*a, **k)
    except Exception:
        return  # the code does not accept these values: nothing to compare
    try:
        with preserved(module):
            a, k = fresh(new_args, new_kwargs)
            got = traced_method(*a, **k)
    except GuardError:
        return  # another path: the trace refuses instead of answering wrongly
    label = "on the example inputs with their values moved"
    compare_outputs(expected, got, tolerance, label, _constants_hint(reference, constants))


# What an op raises where a size the trace was made with does not fit the call (a shape
# mismatch, an index out of range): the trace failing so at batch size 3 where the code
# runs is a trace that does not generalise.
_SIZE_FAILURES = (RuntimeError, IndexError, ValueError)


def _not_a_size_failure(exc: Exception, batch: int) -> BaseException | None:
    """Where the trace's call at batch size ``batch + 1`` raised ``exc``: the exception to
    raise as it is, where it is no op failing on a size (a timeout's exception from a
    signal handler, a refusal of tracebridge's other than a guard, an exception of the
    user's own type), with a note saying where the check met it; None where it is an op's
    failure, which the caller reports as a trace that does not generalise.

    Note: prober21a's harness ran tracing under a SIGALRM timeout; the alarm fired inside
    an op of this probe, and the check reported its exception as "the trace does not
    generalise from batch size 2 to 3", a claim about the user's code that nothing showed."""
    cause = exc.original if isinstance(exc, OpError) and exc.original is not None else exc
    if isinstance(exc, OpError) and isinstance(cause, _SIZE_FAILURES):
        return None
    if not isinstance(exc, TraceError) and isinstance(exc, _SIZE_FAILURES):
        return None
    where = raised_at(cause)
    line = source_line(where) if where else ""
    place = f", raised at {where}" + (f": `{line}`" if line else "") if where else ""
    cause.add_note(
        f"(tracebridge: {type(cause).__name__} raised while trace()'s check ran the trace "
        f"with batch size {batch + 1}, dimension 0 of the example inputs grown by one"
        f"{place}; it is no finding of the check: pass check_trace=False to trace without "
        "the checks)"
    )
    return cause


def _warn_if_answered(traced_method, args, kwargs, module, batch: int, refused) -> None:
    """The code refused batch size ``batch + 1``; the trace must refuse it too. Note: why
    a warning. A trace that answers a call the code refuses followed a decision on a size it
    did not see (a size formatted with ``'%d'`` in a helper function, which Python reads in
    C, then used as a key; a size read by numpy): at other sizes it may answer wrongly, and
    nothing at the call would say so. The code's refusal may also be one the trace need not
    share (a size the model rejects by design, by an op of its own), so it is said, not
    refused; the message names where the code raised."""
    try:
        with preserved(module):
            a, k = fresh(args, kwargs)
            traced_method(*a, **k)
    except Exception:
        return  # the trace refuses it as well
    where = raised_at(refused)
    message = (
        f"with batch size {batch + 1} (dimension 0 of the example inputs grown by one) the "
        f"code raises {type(refused).__name__}: {str(refused)[:200]}"
        f"{f' at {where}' if where else ''}, but the trace answers that call: the code "
        "decided on a size where the trace could not see it (a size formatted with '%d' "
        "in another function, or read by numpy or C code), so calls at other sizes may be "
        "answered wrongly. Use the size itself (an f-string keeps it traced), or check "
        "the trace at the sizes you will call it with (check_inputs=)"
    )
    if where is None:
        warnings.warn(message, TracerWarning, stacklevel=2)
        return
    filename, _, line = where.rpartition(":")  # shown at the line that raised
    warnings.warn_explicit(message, TracerWarning, filename, int(line))


def _specialised(reference, retrace, args, kwargs, batch, what) -> str:
    message = (
        f"the trace does not generalise from batch size {batch} to {batch + 1} "
        f"(dimension 0 of the inputs), though the code does: {what}"
    )
    try:
        graph = retrace(*fresh(args, kwargs))
    except Exception:
        return message
    index = first_difference(reference, graph)
    if index is None:
        # Same structure: then a captured constant must hold the size (numpy, a global).
        index = next(
            (i for i, n in enumerate(reference.nodes) if n.op == "prim.state" and n.loc), None
        )
        if index is None:
            return message
    _, node = _node_line(reference, index)
    where = f"{node.loc}: {source_line(node.loc)}" if node is not None and node.loc else "?"
    op = node.op if node is not None else "?"
    return (
        f"{message}\n  a size was baked into the trace at node {index} ({op}),"
        f" {where}\n  use x.size(0) / x.shape[0] in tensor operations instead of a "
        "Python int, or pass check_trace=False if the model only supports this size"
    )


def _constant_names(program) -> set[str]:
    return {name for name, entry in program.state.items() if entry.kind == "constant"}


def _check_inputs_list(check_inputs, example):
    """The calls to check: ``check_inputs`` (already ``(args, kwargs)`` pairs, read by
    trace/example_inputs.py), or the example's where none were given."""
    return [example] if check_inputs is None else check_inputs


def _eager_refuses_meta(eager_fn, args, kwargs, module) -> BaseException | None:
    """On the meta device, the error the code raises when run outside the tracer on the
    example inputs, else None. Library code may take another path when no tracer runs
    (transformers' masks read values, ``.item()``, which a meta tensor has not): then no
    check that runs the code can run, and the graphs traced again are all there is."""
    try:
        with preserved(module):
            a, k = fresh(args, kwargs)
            eager_fn(*a, **k)
    except Exception as exc:
        return exc
    return None


def _check_structure(reference: Graph, args, kwargs, retrace, label) -> None:
    """Trace again on ``args`` and compare with ``reference`` node by node."""
    graph = retrace(*fresh(args, kwargs))
    index = first_difference(reference, graph)
    if index is not None:
        raise TracingCheckError(divergence_message(reference, graph, index, label))


def _warn_on_meta(what: str, refused: BaseException | None) -> None:
    """Say, once per trace on the meta device, which checks could not run."""
    if refused is None:
        ran = (
            "so the checks compared each graph traced again, the guards, and the outputs' "
            "structure, shapes and dtypes (at the example's sizes and at other sizes), but "
            "no values. Not run: the comparison of output values with the code, and the "
            "checks that need inputs with other values (a kept constant that depends on "
            "the inputs, Python state kept between calls)"
        )
    else:
        where = raised_at(refused)
        ran = (
            "and the code itself does not run on meta tensors outside the tracer "
            f"({type(refused).__name__}: {str(refused)[:200]}"
            f"{f' at {where}' if where else ''}), so the checks only compared each graph "
            "traced again. Not run: every check that runs the code (outputs' shapes, "
            "dtypes and values; other sizes; a second call)"
        )
    message = (
        f"check_trace of {what} on the meta device: meta tensors hold no values, {ran}. "
        "To check values, load the saved file with its weights (tracebridge.load(path, "
        "weights=...)) and compare a call with the model built with the same weights"
    )
    warn_at_user_line(message, TracerWarning)  # at the user's call of trace()


def check_function(func, traced, args, kwargs, check_inputs, tolerance, strict) -> None:
    reference = traced.program.methods["forward"]
    constants = _constant_names(traced.program)
    meta = on_meta(args, kwargs)

    def retrace(a, k):
        return capture_again(func, a, k, strict=strict)

    refused = _eager_refuses_meta(func, args, kwargs, None) if meta else None
    for a, k in _check_inputs_list(check_inputs, (args, kwargs)):
        label = "on the example inputs" if check_inputs is None else "on a check input"
        if refused is not None:
            _check_structure(reference, a, k, retrace, label)
            continue
        if check_inputs is not None:  # one tensor at two inputs (the example: api.py)
            name = getattr(func, "__name__", "f")
            refuse_identity_paths(
                reference, func, a, k, where=name, call=name, tolerance=tolerance, label=label
            )
        _check_one(func, traced, reference, a, k, tolerance, None, retrace, label, constants)
    if meta:
        _warn_on_meta("a function", refused)
    if refused is not None:
        return
    _check_constants(func, traced, reference, constants, args, kwargs, tolerance, None)
    check_cached_values(func, traced, args, kwargs, tolerance, None, "on the example inputs")
    if check_inputs is None:
        _check_perturbed(func, traced, reference, args, kwargs, tolerance, None, retrace)
        check_other_sizes(func, traced, reference, args, kwargs, tolerance, None, retrace)


def _without_own_global_hooks(eager, mod):
    """``eager``, run without the global module hooks' work on ``mod`` itself, like the
    traced method (calls of the traced module add it through nn.Module's call:
    trace/own_hooks.py); ``eager`` itself where there are none."""
    if not any(global_hooks()[:2]):
        return eager

    def run(*args, **kwargs):
        with global_hooks_skip(mod):
            return eager(*args, **kwargs)

    return run


def check_module(mod, traced, inputs, check_inputs, tolerance, strict, respect_mode, alias) -> None:
    from ..trace.capture import bound_method as _bound

    index = state_index(mod)
    constants = _constant_names(traced.program)
    read = [traced.program.state[n].tensor for n in state_read(traced.program)]
    meta = any(on_meta(a, k, read) for a, k in inputs.values())
    refusals: list[BaseException] = []
    for name, (args, kwargs) in inputs.items():
        eager = _without_own_global_hooks(_bound(mod, alias.get(name, name)), mod)
        names_from = getattr(mod, alias.get(name, name))
        modes = [(True, f"train{name}"), (False, f"eval{name}")] if respect_mode else [(None, name)]
        per_method = None
        if check_inputs is not None:
            per_method = [c[name] for c in check_inputs]
        for mode, method_name in modes:
            reference = traced.program.methods[method_name]
            method = traced._methods[method_name]

            def retrace(a, k, mode=mode, eager=eager, names_from=names_from):
                return capture_again(
                    eager,
                    a,
                    k,
                    module=mod,
                    mode=mode,
                    state=index,
                    strict=strict,
                    names_from=names_from,
                )

            with preserved(mod):
                enter_mode(mod, mode)
                refused = _eager_refuses_meta(eager, args, kwargs, mod) if meta else None
                for a, k in _check_inputs_list(per_method, (args, kwargs)):
                    label = f"for {alias.get(name, name)}" + (
                        " on the example inputs" if per_method is None else " on a check input"
                    )
                    if refused is not None:
                        _check_structure(reference, a, k, retrace, label)
                        continue
                    if per_method is not None:  # one tensor at two inputs (the example: api.py)
                        target = alias.get(name, name)
                        refuse_identity_paths(
                            reference,
                            eager,
                            a,
                            k,
                            **method_words(mod, target),
                            tolerance=tolerance,
                            module=mod,
                            mode=mode,
                            label=label,
                        )
                    _check_one(
                        eager, method, reference, a, k, tolerance, mod, retrace, label, constants
                    )
                if refused is not None:
                    refusals.append(refused)
                    continue  # every check below runs the code
                _check_constants(eager, method, reference, constants, args, kwargs, tolerance, mod)
                moved = check_repeated(eager, method, args, kwargs, tolerance, mod, label)
                check_after_longer(eager, method, args, kwargs, tolerance, mod, label, moved)
                check_cached_values(eager, method, args, kwargs, tolerance, mod, label)
                if per_method is None:
                    _check_perturbed(
                        eager, method, reference, args, kwargs, tolerance, mod, retrace
                    )
                    check_other_sizes(
                        eager, method, reference, args, kwargs, tolerance, mod, retrace
                    )
                _check_without_autograd(
                    traced, method_name, eager, args, kwargs, tolerance, mod, retrace, constants
                )
    if meta:
        _warn_on_meta(type(mod).__name__, refusals[0] if refusals else None)


def _check_without_autograd(
    traced, method_name, eager, args, kwargs, tolerance, mod, retrace, constants
) -> None:
    """Check a fused path traced without autograd (api.py's ``_without_autograd``), which
    calls without autograd run, against eager without autograd; where it differs, drop it
    (with a warning): those calls then run the graph checked above, as before."""
    variants = traced.program.specialised.get(method_name, [])
    first = traced.program.methods[method_name]
    fused = [v for v in variants if fused_without_autograd(traced.program.methods[v], first)]
    # The first was traced at the example's sizes; the others are its size-1
    # specialisations, kept or dropped with it.
    for variant in fused[:1]:
        try:
            with torch.no_grad():
                _check_one(
                    eager,
                    traced._methods[method_name],
                    traced.program.methods[variant],
                    args,
                    kwargs,
                    tolerance,
                    mod,
                    retrace,
                    f"for {method_name} without autograd",
                    constants,
                )
        except TracingCheckError as exc:
            warnings.warn(
                f"{method_name}: the fused path traced without autograd is not kept ({exc}); "
                "calls without autograd run the graph traced with it",
                TracerWarning,
                stacklevel=2,
            )
            for name in fused:
                variants.remove(name)
                del traced.program.methods[name]
            if not variants:
                del traced.program.specialised[method_name]
            chain = traced._methods[method_name]
            chain._without_grad = [m for m in chain._without_grad if m.name not in fused]
