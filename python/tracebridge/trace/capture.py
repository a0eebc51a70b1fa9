"""Drive the tracer: flatten the example inputs, run the code once, collect the outputs.

Tracing leaves the model as it found it: parameters, buffers (BatchNorm statistics), the
global random-number state, every ``training`` flag and the Python state the module holds
(its attributes; plain objects and class attributes: trace/python_state.py) are restored
afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import random
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable

import torch

from ..errors import TraceError, TracerWarning, UnsupportedOpError
from ..ir import Graph, StateEntry, pytree
from ..ir.pytree import is_tensor
from ..source import raised_at, source_line
from . import (
    autocast,
    autocast_state,
    cache_values,
    carried_reads,
    global_effects,
    input_containers,
    key_reads,
    message_sinks,
    module_memos,
    numpy_generators,
    own_hooks,
    param_writes,
    python_state,
    rebound_buffers,
    torch_generators,
    warm_caches,
)
from .integers import stand_ins_in_modules_of
from .numbers import number_given_for_tensor
from .text import SymStr
from .tracer import SymFloat, SymInt, Tracer, recording


def state_index(module: torch.nn.Module | None) -> dict[int, tuple[str, str, torch.Tensor]]:
    """``id(tensor) -> (path, kind, tensor)`` for a module's parameters and buffers."""
    index: dict[int, tuple[str, str, torch.Tensor]] = {}
    if module is None:
        return index
    for name, param in module.named_parameters(remove_duplicate=False):
        index.setdefault(id(param), (name, "parameter", param))
    for name, buf in module.named_buffers(remove_duplicate=False):
        if buf is not None:
            index.setdefault(id(buf), (name, "buffer", buf))
    # Plain tensor attributes are not state, but their path makes a good constant name.
    for prefix, mod in module.named_modules(remove_duplicate=False):
        for attr, value in vars(mod).items():
            if isinstance(value, torch.Tensor) and not attr.startswith("_"):
                path = f"{prefix}.{attr}" if prefix else attr
                index.setdefault(id(value), (path, "attribute", value))
    return index


def _clear_mode_caches(modes: list[tuple[torch.nn.Module, bool]], flags: list) -> None:
    """Let modules whose ``train()`` clears a cache (timm's LeViT caches attention biases
    computed from parameters in eval mode) clear it, then put every flag back: each
    recording starts from the same state, and no tensor made while tracing stays cached."""
    custom = [m for m, _ in modes if type(m).train is not torch.nn.Module.train]
    for module in custom:
        with contextlib.suppress(Exception):
            type(module).train(module, True)
    _restore_modes(modes, flags)


def _restore_modes(modes, flags) -> None:
    """Every ``training`` flag and every parameter's ``requires_grad`` as they were (a
    ``train()`` may also freeze or unfreeze parameters)."""
    for module, mode in modes:
        module.training = mode
    for param, flag in flags:
        if param.requires_grad != flag:
            param.requires_grad_(flag)


_MISSING = object()
_TABLE_TYPES = (dict, OrderedDict)
_OWN_TABLES = frozenset({"_parameters", "_buffers", "_modules"})


def _fingerprint(table: dict) -> tuple[list, list]:
    """Which object each name of ``table`` holds: its keys and their values' ids, read in C
    (the objects are kept alive by the snapshot, so an id cannot be reused meanwhile)."""
    return list(table), list(map(id, table.values()))


def _tensors_of(mods: list[torch.nn.Module], table: str) -> list[torch.Tensor]:
    """``module.parameters()`` (``table`` "_parameters") or ``module.buffers()``
    ("_buffers") of the module whose ``modules()`` are ``mods``, read from the tables as
    those do (each tensor once, in that order), without walking the tree again."""
    seen: set[int] = set()
    found = []
    for mod in mods:
        for tensor in (vars(mod).get(table) or {}).values():
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                found.append(tensor)
    return found


def _attributes(mods: list[torch.nn.Module]) -> list[tuple]:
    """Each sub-module's attributes (``mods``: ``module.modules()``), its parameter, buffer
    and module tables and its other dicts, as they are now (shallow: which object each name
    holds)."""
    saved = []
    kinds = python_state.container_kinds()
    kept_contents = python_state.kept_contents
    for mod in mods:
        attrs = dict(vars(mod))
        # The parameter, buffer and module tables, and any dict the code fills (a cache
        # keyed on shapes), get their entries back too; so do a list, a set, a deque, a
        # Counter or a numpy array the code adds to (a history of calls: tracing and its
        # checks call the model many times). Hook
        # tables are OrderedDicts: a library that installs hooks lazily on the first call
        # and marks the module as hooked (transformers' output capturing) must lose both,
        # or the next call installs them twice and every hidden state is recorded twice.
        # An empty table (most hook tables) is kept as None: nothing to copy.
        tables = {}
        others = {}
        for k, v in attrs.items():
            kind = type(v)
            if kind is dict or kind is OrderedDict:
                tables[k] = (dict(v), _fingerprint(v)) if v else None
            elif isinstance(v, kinds) and (kept := kept_contents(v)) is not None:
                others[k] = kept
        saved.append((mod, attrs, _fingerprint(attrs), tables, others))
    return saved


def _restore_attributes(saved: list[tuple]) -> list[str]:
    """Put back every attribute the traced code set on a module: a cache rebuilt for a
    longer sequence (``register_buffer`` again), a size kept on ``self``. A traced size
    left on the module would leak into the next trace, and the model must stay as the
    user had it. Runs for every recording and check: unchanged modules cost two list
    comparisons. Returns the attributes whose contents refused to be put back."""
    failed = []
    for mod, attrs, fingerprint, tables, others in saved:
        current = vars(mod)
        if _fingerprint(current) != fingerprint:
            for key in [k for k in current if k not in attrs]:
                del current[key]
            for key, value in attrs.items():
                if current.get(key, _MISSING) is not value:
                    current[key] = value
        for name, kept in tables.items():
            table = current.get(name)
            if type(table) not in _TABLE_TYPES:
                continue
            if kept is None:  # it was empty
                if table:
                    own_hooks.note_installed(mod, name, {}, table)
                    table.clear()
                continue
            content, before = kept
            if _fingerprint(table) != before:
                own_hooks.note_installed(mod, name, content, table)
                table.clear()
                table.update(content)
        for name, kept in others.items():
            value = attrs[name]
            if python_state.contents_changed(value, kept):
                try:
                    python_state.put_back(value, kept)
                except Exception:
                    failed.append(f"{type(mod).__name__}.{name}")
    return failed


def _plain_tensors(
    mods: list[torch.nn.Module], params: list[torch.Tensor]
) -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """Tensors a sub-module (``mods``: ``module.modules()``) holds outside its parameter
    and buffer tables -- a plain
    attribute (``self.calls = torch.zeros(())``), an item of a dict, list or tuple
    attribute, an attribute of a plain object it holds -- each with a copy: code that
    writes into one in place (a call counter, a running statistic kept by hand) has it put
    back like a buffer (tracing runs the code many times, eager use once). A Parameter
    held so (not registered: in a plain list) is such a tensor too; registered ones
    (``params``) are copied when written (trace/param_writes.py)."""
    registered = {id(p) for p in params}
    found: dict[int, torch.Tensor] = {}
    plain_object = python_state.plain_object
    for mod in mods:
        for key, value in vars(mod).items():
            if key in _OWN_TABLES:
                continue  # buffers are copied above; parameters are weights
            if isinstance(value, dict):
                items = list(value.values())
            elif isinstance(value, (list, tuple)):
                items = list(value)
            elif plain_object(value):
                items = list(vars(value).values())  # ``self.helper.t``
            else:
                items = [value]
            for item in items:
                if isinstance(item, torch.Tensor) and id(item) not in registered:
                    found.setdefault(id(item), item)
    kept = []
    for tensor in found.values():
        if tensor.is_inference() or tensor.is_meta:
            continue  # no version to follow, or no values: nothing to put back
        kept.append((tensor, tensor._version, tensor.detach().clone()))
    return kept


def _renormed_weights(mods: list[torch.nn.Module]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The weights that ``nn.Embedding(max_norm=...)`` and ``nn.EmbeddingBag(max_norm=...)``
    renormalise in place on every call (op-set 7 records that write), with a copy to put
    back: tracing and its checks call the model, eager use did not."""
    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    return [
        (m.weight, m.weight.detach().clone())
        for m in mods
        if isinstance(m, kinds) and m.max_norm is not None
    ]


_heap_lock = threading.Lock()
_heap_traces = [0]  # traces under way in the process with the old objects set aside


@contextlib.contextmanager
def old_objects_set_aside():
    """Run a whole trace with the objects that existed before it out of the garbage
    collector's sight (``gc.freeze``), and give them back after (``gc.unfreeze``).

    Note: why. A trace makes many objects (graphs, the recordings of its checks and
    probes, parsed sources), so Python's collector runs often, and every so often a full
    collection visits every object of the process: with a transformers model and its
    libraries loaded, that is a million objects and 0.3 to 0.5 s a collection, more than
    torch.jit.trace takes for the whole model (a ViT's trace: 0.7 s, 0.3 s set aside).
    The objects made during the trace are collected as before; old garbage waits until
    the trace ends. Left alone where the collector is off or the process froze objects
    of its own (a server before it forks): unfreezing would give those back too."""
    with _heap_lock:
        entered = _heap_traces[0] > 0 or (gc.isenabled() and not gc.get_freeze_count())
        if entered:
            if _heap_traces[0] == 0:
                gc.freeze()
            _heap_traces[0] += 1
    try:
        yield
    finally:
        if entered:
            with _heap_lock:
                _heap_traces[0] -= 1
                if _heap_traces[0] == 0:
                    gc.unfreeze()


@contextlib.contextmanager
def numpy_rng_kept(func: Callable | None = None):
    """Run a whole trace and then put back numpy's global generator, where numpy is
    imported: model code may draw from it (a random mask), and tracing with its checks
    runs the code many times where eager use ran it once. (Once per trace, not per
    :func:`preserved` block: reading its state costs about 100 us.) The generators
    ``func`` keeps are put back too, and a recording that draws from a numpy one is
    refused (trace/numpy_generators.py); its random ops may draw from a torch one
    (trace/torch_generators.py). One search finds both kinds."""
    numpy = sys.modules.get("numpy")
    state = numpy.random.get_state() if numpy is not None else None
    reached = None
    if func is not None:
        kinds = (*numpy_generators.kinds(), torch.Generator)
        reached = numpy_generators.reachable(func, kinds)
    try:
        with (
            numpy_generators.kept(func, reached) if func is not None else contextlib.nullcontext(),
            torch_generators.kept(func, reached) if func is not None else contextlib.nullcontext(),
        ):
            yield
    finally:
        if state is not None:
            numpy.random.set_state(state)


@contextlib.contextmanager
def preserved(module: torch.nn.Module | None):
    """Run a block and then put back the RNG states (CPU, every CUDA device, Python's
    global generator, the torch generators the traced code keeps), the
    module's attributes, buffers, parameters and modes."""
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    # Model code may also draw from Python's generator (a random layer drop); tracing runs
    # it several times, eager use once. (numpy's global generator is left alone: reading
    # its state costs about 100 times more, and this runs for every recording and check:
    # numpy_rng_kept() puts it back once per trace.)
    py_rng = random.getstate()
    generators = torch_generators.snapshot()  # the generators the code keeps (self.g)
    saved_buffers, saved_params, modes, flags, attributes, plain = [], [], [], [], [], []
    renormed: list[tuple[torch.Tensor, torch.Tensor]] = []
    reachable = None
    if module is not None:
        mods = list(module.modules())  # one walk of the tree serves every table below
        attributes = _attributes(mods)
        reachable = python_state.Reachable(module)
        saved_buffers = [(b, b.detach().clone()) for b in _tensors_of(mods, "_buffers")]
        parameters = _tensors_of(mods, "_parameters")
        plain = _plain_tensors(mods, parameters)
        saved_params = [(p, p._version) for p in parameters]
        renormed = _renormed_weights(mods)
        modes = [(m, m.training) for m in mods]
        flags = [(p, p.requires_grad) for p in parameters]
        _clear_mode_caches(modes, flags)
    params = [p for p, _ in saved_params]
    copied: dict = {}
    try:
        # a parameter the code writes is copied before its first write (the tracer sees
        # it) or here, where it was seen written before: trace/param_writes.py
        with param_writes.block(params) as copied:
            yield
    finally:
        _clear_mode_caches(modes, flags)
        # training flags are attributes: put back too
        failed = _restore_attributes(attributes)
        if reachable is not None:
            failed += reachable.restore()
        if failed:
            _warn_left_changed(failed)
        torch.set_rng_state(rng)
        random.setstate(py_rng)
        torch_generators.restore(generators)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        with torch.no_grad():
            for buf, copy in saved_buffers:
                if buf.shape == copy.shape:
                    buf.copy_(copy)
            for tensor, version, copy in plain:
                if tensor._version != version and tensor.shape == copy.shape:
                    tensor.copy_(copy)  # only where written: it may view a parameter
        with torch.no_grad():
            for weight, copy in renormed:
                weight.copy_(copy)
        put_back = {id(weight) for weight, _ in renormed} | {id(t) for t, _, _ in plain}
        put_back |= set(copied)
        changed = [
            p for p, version in saved_params if p._version != version and id(p) not in put_back
        ]
        if changed:
            _warn_unseen_writes(module, changed)


def _warn_left_changed(names: list[str]) -> None:
    """Python state a run of the code changed that could not be put back, by name."""
    warnings.warn(
        f"running the traced code changed {', '.join(names[:5])}"
        f"{' ...' if len(names) > 5 else ''}, which tracebridge could not put back (the "
        "object refused): tracing ran the code several times, so they stay moved by those "
        "runs. Set them back by hand if eager use reads them",
        TracerWarning,
        stacklevel=4,
    )


def _warn_unseen_writes(module: torch.nn.Module, changed: list[torch.Tensor]) -> None:
    """Parameters written where no tracer saw the write (no copy was made): said by name;
    copied before every later run (trace/param_writes.py)."""
    param_writes.note_unseen(changed)
    ids = {id(p) for p in changed}
    names = [n for n, p in module.named_parameters() if id(p) in ids]
    warnings.warn(
        f"the traced code changed parameter(s) {', '.join(names[:5])}"
        f"{' ...' if len(names) > 5 else ''} in place where tracebridge did not see the "
        "write, so it could not undo it: they stay changed (later runs of the trace put "
        "them back). Reload their values if this run should not have moved them",
        TracerWarning,
        stacklevel=4,
    )


def _alias(tensor: torch.Tensor) -> torch.Tensor:
    alias = tensor.detach()
    return alias.requires_grad_() if tensor.requires_grad else alias


def capture(fn: Callable, args: tuple, kwargs: dict, **options) -> Graph:
    """Record one call ``fn(*args, **kwargs)``; returns its Graph. Where the recording met
    a warm one-entry cache keyed on a size, it is made again with the key set aside
    (trace/warm_caches.py)."""
    constants = options.get("constants")
    before = dict(constants) if constants is not None else {}
    graph, tracer = _capture_once(fn, args, kwargs, **options)
    if not tracer.cache_keys:
        return graph
    added = {k: v for k, v in (constants or {}).items() if k not in before}
    for key in added:  # the cached table the first recording read, as a constant
        del constants[key]
    try:
        with warm_caches.set_aside(tracer.cache_keys):
            return _capture_once(fn, args, kwargs, **options)[0]
    except Exception:  # noqa: BLE001 - the first recording stands, its guards named
        if constants is not None:
            constants.update(added)
        return graph


def _capture_once(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    names_from: Callable | None = None,
    state: dict | None = None,
    constants: dict[str, StateEntry] | None = None,
    strict: bool = True,
    warned: set | None = None,
    one_object: bool = False,
) -> tuple[Graph, Tracer]:
    """Record one call ``fn(*args, **kwargs)``; returns its Graph and the tracer.
    ``one_object``: a tensor passed twice stays one object, as the caller gave it (only to
    compare with the general recording: check/input_identity.py)."""
    tracer = Tracer(
        state or {},
        constants if constants is not None else {},
        warned if warned is not None else set(),
    )
    graph = tracer.graph
    graph.arg_names = argument_names(names_from or fn, len(args))
    graph.positional_only = positional_only_count(names_from or fn)
    graph.defaults = parameter_defaults(names_from or fn, graph.arg_names, kwargs)
    graph.keyword_defaults = keyword_only_defaults(names_from or fn, kwargs)
    graph.var_keywords = var_keyword_names(names_from or fn, args, kwargs)
    graph.any_order = key_reads.order_free_parameters(
        names_from or fn, graph.arg_names, args, kwargs
    )
    try:
        leaves, graph.in_spec = pytree.flatten((tuple(args), dict(kwargs)), is_tensor)
    except TypeError as exc:
        hint = ""
        if "type Generator" in str(exc):
            hint = (
                "; a torch.Generator cannot be an input of a trace: keep it as an attribute "
                "of the module (self.g), whose draws the trace records"
            )
        raise TraceError(f"example inputs: {exc}{hint}") from None
    # A parameter or buffer passed as an input is an input: the code may also read it as
    # state (self.w), and by identity the two would be one value. And one tensor passed
    # twice (f(x, x)) is two inputs: by identity, every op on the first read the last,
    # and the graph served every call with that one (a - b gave zeros), silently. Such an
    # input is a detached alias (same storage), so inputs and state reads stay apart, and
    # the code sees two tensors, as in a call that passes two (where that changes what
    # the code does, the trace is refused: check/input_identity.py).
    seen: set[int] = set()
    distinct = []
    for leaf in leaves:
        repeated = (id(leaf) in seen and not one_object) or (state and id(leaf) in state)
        seen.add(id(leaf))
        distinct.append(_alias(leaf) if repeated else leaf)
    if any(a is not b for a, b in zip(distinct, leaves)):
        leaves = distinct
        args, kwargs = pytree.unflatten(leaves, graph.in_spec)
    for leaf, name in zip(leaves, leaf_names(graph.arg_names, args, kwargs)):
        tracer.add_input(leaf, name)
    containers = input_containers.Watched(args, kwargs, graph.arg_names)
    layouts = input_containers.Layouts(leaves)
    try:
        generators = numpy_generators.states()
        # the dicts its module's methods fill as memos (forward is traced as the module)
        owner = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
        memos = module_memos.watch(owner)
        with tracer.warnings_held(), torch_generators.recording():
            graph = _record(tracer, fn, args, kwargs, strict)
        containers.refuse_changes(names_from or fn, _function_name(names_from or fn), tracer)
        numpy_generators.refuse_draws(generators)
        tracer.memo_tables.check(tracer)
        module_memos.check(tracer, memos)
        return graph, tracer
    finally:
        containers.restore()
        layouts.restore()
        tracer.memo_tables.restore()
        cache_values.restore(tracer.caches_used)
        tracer.finished = True


def _module_of(fn: Callable) -> torch.nn.Module | None:
    """The module a recording runs a method of (a module: itself), or None."""
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def _function_name(fn: Callable) -> str:
    """How a message names the traced function: ``forward`` for a module."""
    if isinstance(fn, torch.nn.Module):
        return "forward"
    name = getattr(fn, "__name__", None)
    return f"{name}()" if name and name.isidentifier() else "the traced function"


def _fixed_texts(result):
    """``result`` with each text formatted from traced values (:class:`~.text.SymStr`) made
    plain text, its numbers guarded; ``result`` itself where it holds none."""
    if isinstance(result, SymStr):
        return result.fix()
    if type(result) in (tuple, list):
        fixed = [_fixed_texts(item) for item in result]
        if any(a is not b for a, b in zip(fixed, result)):
            return type(result)(fixed)
    if type(result) is dict:
        fixed = {key: _fixed_texts(value) for key, value in result.items()}
        if any(fixed[key] is not value for key, value in result.items()):
            return fixed
    return result


def _record(tracer: Tracer, fn: Callable, args: tuple, kwargs: dict, strict: bool) -> Graph:
    graph = tracer.graph
    # The caller's autocast is set aside: see trace/autocast.py's second note.
    with (
        autocast.set_aside(),
        recording(tracer),
        stand_ins_in_modules_of(fn),
        rebound_buffers.watched(tracer) as rebound,
        own_hooks.global_hooks_skip(fn if isinstance(fn, torch.nn.Module) else None),
        own_hooks.backward_hooks_set_aside(_module_of(fn)),
        carried_reads.watched(tracer),
    ):
        autocast_state.ambient_guards(tracer)
        try:
            result = fn(*args, **kwargs)
        except TypeError as exc:
            refusal = number_given_for_tensor(exc) or _call_refused(fn, args, kwargs, exc)
            if refusal is None:
                _note_where(exc)
                raise
            raise refusal from exc
        except TraceError:
            raise
        except Exception as exc:
            _note_where(exc)
            raise
        _refuse_caught_failures(tracer)
        if tracer.identity_refusals:
            raise UnsupportedOpError(tracer.identity_refusals[0])
        global_effects.refuse_put_back_states(tracer)
        # Text made from traced numbers that is returned is the example's: its numbers
        # are guarded (prober17: it reached the graph as an object no file can hold)
        result = _fixed_texts(result)
        tracer.settle_unseen_reads()
        rebound_buffers.record_writes(rebound)
        try:
            out_leaves, graph.out_spec = pytree.flatten(
                result, lambda x: isinstance(x, (torch.Tensor, SymInt, SymFloat)), sizes=True
            )
        except TypeError as exc:
            raise TraceError(
                f"the traced code returned something tracebridge cannot store: {exc}"
            ) from None
        if pytree.contains_mutable(graph.out_spec):
            if strict:
                raise TraceError(
                    "the traced code returns a list or dict; with strict=True outputs must be "
                    "tensors or (nested) tuples. Return a tuple, or pass strict=False if the "
                    "container's structure never changes"
                )
            tracer.warn(
                "the output contains a list or dict (strict=False): its structure is "
                "fixed at trace time"
            )
        graph.outputs = [tracer.encode(x) for x in out_leaves]
    return graph


def _refuse_caught_failures(tracer: Tracer) -> None:
    """Refuse a trace whose code caught an error of a call it made (``try: a @ b except
    RuntimeError: a @ b.T``) and returned.

    Note: control flow by an exception.
      A call that raises records nothing, so the graph holds the path the code took after
      the error and no node that says the call failed: a call of the trace where it would
      succeed (other shapes, a positive definite matrix) takes that path too, silently. A
      guard cannot stand for it (whether an op raises is not a value the graph computes),
      so the trace is refused, naming the call. Calls made inside another (a composite of
      torch's that tries one kernel and falls back, the tracer's own handlers) are not
      the code's own: only those that reached the traced code count. Errors that leave
      the traced function are the caller's, as in eager.
    """
    if not tracer.failed_calls:
        return
    label, where, exc = tracer.failed_calls[0]
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    raise UnsupportedOpError(
        f"the call to {label} at {where or 'unknown location'} raised ({reason}) and the "
        "traced code caught the error and went on: a trace records the path taken after "
        "the error with nothing that says the call failed (control flow by an exception, "
        "which the trace cannot guard), so every call would take that path, also where "
        "the call succeeds. Test the condition explicitly instead (a shape check such as "
        "`if a.shape[-1] == b.shape[0]:`, or a value check such as "
        "`torch.linalg.cholesky_ex(m).info == 0`, which the trace guards), or move the "
        "try/except out of the traced code"
    )


_MODULE_CALLS = frozenset({"__call__", "_wrapped_call_impl", "_call_impl"})


def _call_refused(fn: Callable, args: tuple, kwargs: dict, exc: TypeError) -> TraceError | None:
    """The error to raise where ``fn`` could not even be called with these inputs (its
    signature does not take them: the TypeError names no line of the user's code), or
    None where its code ran and raised."""
    # nn.Module's call takes anything: its forward decides.
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module) and fn.__name__ in _MODULE_CALLS:
        fn = owner.forward
    elif isinstance(fn, torch.nn.Module):
        fn = fn.forward
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as refused:
        kinds = ", ".join(type(a).__name__ for a in args) or "none"
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        return TraceError(
            f"cannot call {name} with the inputs given: {refused} (positional inputs: "
            f"{kinds}; keyword inputs: {sorted(kwargs) or 'none'}). example_inputs is the "
            "tuple of positional arguments (a list is read as that tuple too): pass one "
            "input that is itself a list or tuple as (that_list,), and keyword arguments "
            "with example_kwarg_inputs"
        )
    except ValueError:  # no signature to read (a builtin): the TypeError says enough
        return None
    return None


def _note_where(exc: BaseException) -> None:
    """Name, in a note on ``exc``, the line of the traced code that raised it while it was
    recorded (the model's own error, as ``RuntimeError: The size of tensor a (4) must
    match ...``, says what but not where), and the one way the recording differs from an
    eager call: library code sees ``torch.jit.is_tracing()`` answer True."""
    loc = raised_at(exc)
    if loc is None or not hasattr(exc, "add_note"):
        return
    line = source_line(loc).strip()
    exc.add_note(
        f"tracebridge: the traced code raised this at {loc}"
        + (f" (`{line}`)" if line else "")
        + " while it was recorded on the example inputs. Recording runs the code as an "
        "eager call does, except that library code sees torch.jit.is_tracing() answer "
        "True: if the eager call succeeds on these inputs, the path the library keeps for "
        "tracers is the likely cause"
    )


def capture_again(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    module: torch.nn.Module | None = None,
    mode: bool | None = None,
    state: dict | None = None,
    strict: bool = True,
    names_from: Callable | None = None,
    one_object: bool = False,
) -> Graph:
    """A second recording, made only to compare with the first (check_trace, the other
    training mode): the model is left as it was, ``mode`` (if given) is the training flag
    to record in, constants are its own, and warnings are silent (the first trace gave
    them). The code's own warnings meet the filters as the user set them, as in the first
    recording and in eager calls: an "error" filter raises them into the code's handlers,
    and decides whether a size in their text is guarded (message_sinks.shown_nowhere)."""
    with preserved(module), message_sinks.shown_nowhere():
        enter_mode(module, mode)
        return capture(
            fn,
            args,
            kwargs,
            names_from=names_from,
            state=state,
            constants={},
            strict=strict,
            warned=set(),
            one_object=one_object,
        )


def enter_mode(module: torch.nn.Module | None, mode: bool | None) -> None:
    """Put ``module`` in training mode ``mode`` to record or run it (None: as it is). Its
    own mode leaves it as the user set it, sub-modules included (a model fine-tuned with
    its batch norms frozen: ``model.train(); model.bn.eval()``); the other mode is set on
    every sub-module, as ``Module.train`` sets it."""
    if mode is not None and mode != module.training:
        module.train(mode)


def bound_method(mod: torch.nn.Module, name: str) -> Callable:
    """The callable that runs method ``name`` of ``mod`` as eager code would call it."""
    if name == "forward":
        return mod  # through __call__, so forward hooks run as in eager use
    fn = getattr(mod, name, None)
    if fn is None or not callable(fn):
        raise TraceError(f"{type(mod).__name__} has no method {name!r} to trace")
    return fn


def argument_names(fn: Callable, count: int) -> list[str]:
    """Names for the positional parameters of ``fn`` (``x``, ``y``), padded as needed."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        names = [p.name for p in params]
    except (TypeError, ValueError):
        names = []
    var = None
    with contextlib.suppress(TypeError, ValueError):
        var = next(
            (
                p.name
                for p in inspect.signature(fn).parameters.values()
                if p.kind == p.VAR_POSITIONAL
            ),
            None,
        )
    while len(names) < count:
        names.append(f"{var or 'arg'}{len(names)}")
    return names[: max(count, len(names))]


def positional_only_count(fn: Callable) -> int:
    """How many leading parameters of ``fn`` are positional-only (``def f(x, /, y)``: 1);
    0 where it has none or no signature."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in parameters if p.kind == p.POSITIONAL_ONLY)


def parameter_defaults(fn: Callable, arg_names: list[str], kwargs: dict) -> dict:
    """The defaults of ``fn``'s parameters among ``arg_names`` and the keywords given:
    name -> ``{"t": "none"}`` or ``{"t": "const", "v": ...}`` (a bool, an int, a finite
    float or a string), or None for another default (a tensor, an object), which no file
    holds. A parameter without a default is left out."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    named = set(arg_names) | set(kwargs)
    out: dict[str, dict | None] = {}
    for p in parameters:
        if p.name not in named or p.default is p.empty:
            continue
        value = p.default
        if value is None:
            out[p.name] = {"t": "none"}
        elif _holdable(value):
            out[p.name] = {"t": "const", "v": value}
        else:
            out[p.name] = None
    return out


def keyword_only_defaults(fn: Callable, kwargs: dict) -> dict:
    """The keyword-only parameters of ``fn`` that ``kwargs`` leaves out and whose default
    a file holds (None, a bool, an int, a finite float, a string): name -> its spec
    (``Graph.keyword_defaults``).

    >>> def f(x, *, bias=None, scale=2.0, w=object()): pass
    >>> keyword_only_defaults(f, {"scale": 1.0})
    {'bias': {'t': 'none'}}
    """
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    out: dict[str, dict] = {}
    for p in parameters:
        if p.kind != p.KEYWORD_ONLY or p.name in kwargs or p.default is p.empty:
            continue
        if p.default is None:
            out[p.name] = {"t": "none"}
        elif _holdable(p.default):
            out[p.name] = {"t": "const", "v": p.default}
    return out


def _holdable(value) -> bool:
    """Whether a file holds ``value`` as a constant (check/program.py's rule for
    ``defaults``)."""
    kind = type(value)
    if kind is int:
        return -(2**63) <= value < 2**64
    if kind is float:
        return math.isfinite(value)
    return kind is bool or (kind is str and len(value) <= 4096)


def var_keyword_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """The names of ``kwargs`` that land in the ``**kwargs`` parameter of ``fn`` (a
    module: its forward), in the order given; [] where it has none or no signature."""
    if not kwargs:
        return []
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(fn, "__name__", "") in _MODULE_CALLS:
        fn = owner.forward
    elif isinstance(fn, torch.nn.Module):
        fn = fn.forward
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        return []
    # As Python binds a keyword: to the parameter of that name unless it is positional-only
    # (not ``Signature.bind``, which refuses such a name instead of putting it in
    # ``**kwargs``: ``def f(x=None, /, **kw)`` called ``f(x=1)``)
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [str(k) for k in kwargs if k not in named]


def leaf_names(arg_names: list[str], args: tuple, kwargs: dict) -> list[str]:
    """A readable name for each tensor leaf of the inputs (``x``, ``pair_0``, ``mask``)."""
    names: list[str] = []
    for name, arg in list(zip(arg_names, args)) + list(kwargs.items()):
        leaves, _ = pytree.flatten(arg, is_tensor)
        if len(leaves) == 1 and isinstance(arg, torch.Tensor):
            names.append(name)
        else:
            names.extend(f"{name}_{i}" for i in range(len(leaves)))
    return names
