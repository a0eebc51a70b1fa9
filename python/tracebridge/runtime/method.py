"""A callable method: takes the user's (nested) arguments, runs the graph, rebuilds outputs."""

from __future__ import annotations

import contextlib
import threading
import weakref

import torch

from ..check.specialise import CUT_GRAPH, SIZE_ONE_GUARD
from ..errors import BindingError, GuardError, TraceError
from ..ir import Graph, pytree
from ..ir.analysis import fused_without_autograd
from ..ir.ops import draws_random
from ..ir.pytree import is_tensor
from . import concat_linear, cse, folding, generators, linear_2d, support
from .binding import bind_to_trace, binding_error, traced_parameters, with_defaults
from .codegen import CodeGen, compile_function
from .concat_linear import AsTraced
from .interpreter import Interpreter


class _GuardSwitch(threading.local):
    """Per thread: whether ``guards_disabled`` is on. A class attribute gives every thread
    the default, so reading it never raises: ``getattr(threading.local(), "off", False)``
    raised and caught an AttributeError on every call (a few microseconds per call)."""

    off = False
    recorded = False


_local = _GuardSwitch()
_grad_enabled = torch.is_grad_enabled
_autocast = torch._C._is_any_autocast_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
# nn.MultiheadAttention's and TransformerEncoderLayer's switch for their fused path: off,
# eager takes their other path, which the first graph of a Specialised holds.
_fast_path_enabled = torch.backends.mha.get_fastpath_enabled
_has_torch_function = torch._C._has_torch_function

# How many threads are inside ``guards_disabled`` now. A call reads this module global
# first and the thread-local switch only when it is not 0: a thread-local read costs a
# call about as much as the rest of its dispatch. Changed under a lock (entering and
# leaving the block), read without one: a thread's own entry is counted before its calls.
_threads_off = 0
_threads_off_lock = threading.Lock()


@contextlib.contextmanager
def _switched_on(flag: str, count: str):
    """Turn this thread's switch ``flag`` (of ``_local``) on for a block, counting the thread
    in the module global ``count`` (``_threads_off``, ``_threads_recorded``), which a call
    reads before the switch itself."""
    previous = getattr(_local, flag)
    with _threads_off_lock:
        globals()[count] += 1
    setattr(_local, flag, True)
    try:
        yield
    finally:
        setattr(_local, flag, previous)
        with _threads_off_lock:
            globals()[count] -= 1


def guards_disabled():
    """Within this block, traced calls skip their guards (for speed; at your own risk).

    >>> with tracebridge.guards_disabled():  # doctest: +SKIP
    ...     y = traced(x)
    """
    return _switched_on("off", "_threads_off")


# How many threads are inside ``as_recorded`` now (read as ``_threads_off`` is).
_threads_recorded = 0


def as_recorded():
    """Within this block, calls without autograd run the graph as recorded, as calls with it
    do: no batch norm folded into its convolution (runtime/folding.py). Note: why. The fold
    agrees with eager only to rounding (as ``torch.jit.freeze``'s), and a trace check
    compares the recording with the code: under ``torch.no_grad()`` with one thread,
    timm's efficientnetv2_rw_t differed by 4.5e-5 relative through its 40 folded
    convolutions, and the check refused a trace that was right."""
    return _switched_on("recorded", "_threads_recorded")


def guards_active(method: Method) -> bool:
    """Whether a call of ``method`` now checks guards (object switch and block switch)."""
    return method.check_guards and not (_threads_off and _local.off)


def _simple_spec(spec: dict, n: int) -> bool:
    args, kwargs = spec["c"]
    return (
        args["t"] == "tuple"
        and len(args["c"]) == n
        and all(c["t"] == "leaf" for c in args["c"])
        and not kwargs["keys"]
    )


class Method:
    """One graph, ready to call. ``state_slots`` maps state names to ``(dict, key)`` slots;
    ``methods`` are the program's graphs by name (for ``support.node_callable``).

    A Method may be called from many threads at once: a call keeps its values in locals,
    and the function for each guard setting is made once, under a lock."""

    def __init__(
        self,
        name: str,
        graph: Graph,
        state_slots: dict,
        runtime: str = "codegen",
        methods: dict[str, Graph] | None = None,
    ):
        if runtime not in ("codegen", "interpreter"):
            raise ValueError(f"runtime must be 'codegen' or 'interpreter', not {runtime!r}")
        self.name = name
        self.graph = graph
        self.runtime = runtime
        self.check_guards = True
        self._slots = state_slots
        self._n_inputs = len(graph.inputs)
        self._simple = _simple_spec(graph.in_spec, self._n_inputs)
        # The number of positional tensors a call passes straight to the function (-1: a
        # call always goes through ``_leaves``, its inputs being nested or keywords).
        self._direct_arity = self._n_inputs if self._simple else -1
        # Groups of inputs a call must not pass one tensor to (check/input_identity.py):
        # where there are any, every call goes through ``_leaves`` and is checked there.
        self._distinct = bool(graph.distinct_inputs)
        if self._distinct:
            self._direct_arity = -1
        # How many arguments the example passed by position: a call that passes another
        # number is bound to the traced parameters first (runtime/binding.py).
        self._positional = len(graph.in_spec["c"][0]["c"]) if graph.in_spec else 0
        # Whether the example passed numbers (or other constants): known once, not walked
        # again on each call that goes through ``_leaves``.
        self._typed_spec = _has_constants(graph.in_spec)
        self._methods = methods if methods is not None else {name: graph}
        self._compiled: dict[tuple[bool, bool], object] = {}
        # Keys whose function runs concatenated linears and may run again as traced
        # when it raises (runtime/concat_linear.py), and those functions as traced.
        self._retry: set[tuple[bool, bool]] = set()
        self._plain: dict[tuple[bool, bool], object] = {}
        self._lock = threading.Lock()

    # Whether the graph was read from a file (set by the traced object from its program):
    # an op's failure then names the file as a possible cause (support.op_failed). True
    # where nobody says, as a method made elsewhere (a backend's) may run a loaded graph.
    from_file = True
    # Whether the method belongs to a frozen program (``tracebridge.freeze``,
    # runtime/frozen.py): its code then checks neither the folded values' state nor the
    # state's types on each call. Set before the first call (the code is made then).
    frozen = False
    # A loaded object's seal (runtime/sealed.py), shared by its methods, or None: while
    # intact, the code checks neither the folded values' state nor the state's types.
    # Set before the first call (the code is made then).
    seal = None

    def codegen(self, guards: bool = True) -> CodeGen:
        """The code generator for this method (a subclass may return its own)."""
        return CodeGen(self.graph, self._slots, self.name, guards, self._methods, fold=True)

    def _fused_graph(self, concat: bool = True) -> Graph:
        """The graph calls without autograd run: each convolution with an evaluation-mode
        batch norm after it folded into one (runtime/folding.py), and (``concat``) linears
        that read one input as one linear (runtime/concat_linear.py), where the graph
        never turns gradients on (the concatenated weights are folded only there), and
        there linears over matrices as ``addmm`` over their folded transposed weights
        (runtime/linear_2d.py)."""
        graph = folding.fuse_conv_bn(self.graph, self._slots)
        if not cse.grad_stays_off(graph):
            return graph
        if concat:
            graph = concat_linear.fuse(graph)
        return linear_2d.rewrite(graph)

    def _fused_codegen(self, guards: bool, concat: bool = True) -> CodeGen | None:
        """The code generator for calls without autograd, where it differs
        (:meth:`_fused_graph`); None where the graph is the same or a subclass makes its
        own code."""
        if type(self).codegen is not Method.codegen:
            return None
        graph = self._fused_graph(concat)
        if graph is self.graph:
            return None
        return CodeGen(graph, self._slots, self.name, guards, self._methods, fold=True)

    @property
    def no_grad_code(self) -> str:
        """The generated Python that a call without autograd runs (under
        ``torch.no_grad()`` or ``torch.inference_mode()``): ``.code`` less what only
        holds without gradients -- repeats computed once, batch norms folded into their
        convolutions, projections of one input run as one linear.

        >>> print(traced._methods["forward"].no_grad_code)  # doctest: +SKIP
        """
        gen = self._fused_codegen(True) or self.codegen(True)
        gen.common = True
        return compile_function(gen).code

    @property
    def code(self) -> str:
        """The generated Python, for reading: ``ast.unparse`` of the function that a call
        made now runs (with autograd, or under ``torch.no_grad()`` :attr:`no_grad_code`),
        with the file's locations and names as escaped comments."""
        if not _grad_enabled():
            return self.no_grad_code
        return compile_function(self.codegen(True)).code

    def _make(self, key: tuple[bool, bool], concat: bool = True):
        try:
            return self._made(key, concat)
        except TraceError:
            raise
        except Exception as exc:  # the generator's own failure, not the inputs'
            raise TraceError(
                f"method {self.name!r}: tracebridge could not generate the code that runs "
                f"this program ({type(exc).__name__}: {exc}). This is a fault in tracebridge, "
                "not in the inputs or the traced code: please report it with the program "
                "(save it). runtime='interpreter' (trace or load) runs the program without "
                "generated code meanwhile."
            ) from exc

    def _made(self, key: tuple[bool, bool], concat: bool):
        guards, no_grad = key
        if self.runtime == "codegen":
            fused = self._fused_codegen(guards, concat) if no_grad else None
            gen = fused or self.codegen(guards)
            gen.frozen = self.frozen
            seal = self.seal
            if seal is not None and seal.intact and not no_grad:
                # Calls with autograd give results whose grad_fn reaches the state: the
                # parameters (AccumulateGrad.variable), and any state tensor saved for
                # backward where an input requires grad (``grad_fn._saved_other``, a
                # saved-tensors hook; prober23a F5): made at the first such call, which
                # breaks it.
                seal.break_()
            gen.seal = seal
            gen.common = no_grad  # repeated nodes once, where no gradient flows (runtime/cse.py)
            concatenated = fused is not None and concat_linear.concatenates(fused.graph)
            if concatenated and concat_linear.rerunnable(fused.graph):
                self._retry.add(key)  # a call that raises runs again as traced
            return compile_function(gen).function
        return Interpreter(self.graph, self._slots, guards, self._methods, self.name)

    def _as_traced(self, key: tuple[bool, bool], args, kwargs):
        """A call again, by the code without concatenated linears (runtime/concat_linear.py):
        after the code with them raised, the graph's own ops give their result or error."""
        fn = self._plain.get(key)
        if fn is None:
            with self._lock:
                fn = self._plain.get(key)
                if fn is None:
                    fn = self._plain[key] = self._make(key, concat=False)
        if len(args) == self._direct_arity and not kwargs:
            return fn(*args)
        return fn(*self._leaves(args, kwargs))

    def _function(self, key: tuple[bool, bool]):
        fn = self._compiled.get(key)
        if fn is None:
            with self._lock:  # threads racing on a first call share one function
                fn = self._compiled.get(key)
                if fn is None:
                    fn = self._compiled[key] = self._make(key)
        return fn

    def __call__(self, *args, **kwargs):
        # One function per guard setting and autograd need (a call without autograd may
        # run convolutions with their batch norms folded in). The common call (tensors in
        # the traced order) runs here, without another Python frame in between: every
        # lookup here is paid on each call of a loaded artifact (see guards_disabled).
        try:
            key = (
                self.check_guards and not (_threads_off and _local.off),
                not _grad_enabled()
                and not (_threads_recorded and _local.recorded)
                and not _autocast()  # folded norms would round once where eager rounds twice
                # a dispatch mode sees (and may change) the ops eager runs, not the fused ones
                and not _dispatch_modes(),
            )
            fn = self._compiled.get(key) or self._function(key)
            if len(args) == self._direct_arity and not kwargs:
                if _has_torch_function(args):  # a subclass or a mode: look closer
                    refuse_overriding_inputs(self, args)
                return fn(*args)
            leaves = self._leaves(args, kwargs)
            if _has_torch_function(leaves):
                refuse_overriding_inputs(self, leaves)
            if self._distinct:
                refuse_one_tensor(self.graph, self.name, leaves)
            return fn(*leaves)
        except TraceError:
            raise
        except Exception as exc:
            if self._retry and key in self._retry or isinstance(exc, AsTraced):
                try:
                    return self._as_traced(key, args, kwargs)
                except TraceError:
                    raise
                except Exception as again:
                    raise self.failure(again) from again
            raise self.failure(exc) from exc

    def failure(self, exc: BaseException) -> TraceError:
        """The error a call raises where an op raised ``exc``: a state entry the graph reads
        gone or None since tracing, named; else the op's failure (any op may fail on what
        a file asks for; callers catch TraceError for all)."""
        changed = support.changed_state(self.name, self.graph, self._slots, exc)
        return changed if changed is not None else support.op_failed(self.name, exc, self.from_file)

    def _leaves(self, args, kwargs) -> list:
        """The input tensors of a call whose arguments are nested (or given by keyword),
        in the traced order."""
        if len(args) != self._positional:
            # A parameter passed by keyword where the trace had it by position, or the
            # other way (runtime/binding.py): only then is the count another.
            graph = self.graph
            bound = bind_to_trace(
                args, kwargs, graph.in_spec, graph.arg_names, graph.positional_only
            )
            if bound is not None:
                args, kwargs = bound
        leaves, spec = pytree.flatten((args, kwargs), is_tensor)
        typed = self._typed_spec
        if not same_spec(spec, self.graph.in_spec, typed):
            # Keys, not their order, identify a keyword argument; a dict input whose keys
            # come in another order is refused below, once the keys are known to be its.
            ordered = _in_key_order((args, kwargs), self.graph.in_spec)
            leaves, given = pytree.flatten(ordered, is_tensor)
            if same_spec(given, self.graph.in_spec, typed):
                graph = self.graph
                refuse_reordered(
                    self.name,
                    spec,
                    kwargs,
                    graph.in_spec,
                    graph.var_keywords,
                    graph.arg_names,
                    graph.any_order,
                )
            spec = given
        if not same_spec(spec, self.graph.in_spec, typed):
            graph = self.graph
            defaults = graph.defaults
            if graph.keyword_defaults:  # keyword-only ones the example left out
                defaults = {**graph.keyword_defaults, **defaults}
            filled = with_defaults(
                args, kwargs, graph.in_spec, graph.arg_names, defaults, graph.positional_only
            )
            if filled is not None:  # once: a filled call changes no more
                return self._leaves(*filled)
            self._refuse_arguments(args, kwargs, spec)
        return leaves

    def _refuse_arguments(self, args: tuple, kwargs: dict, spec: dict):
        """Raise the error of a call whose arguments (``spec``) are not the traced ones."""
        graph = self.graph
        takes = traced_parameters(graph.in_spec, graph.arg_names, describe, graph.positional_only)
        refused = binding_error(
            self.name,
            args,
            kwargs,
            graph.arg_names,
            graph.positional_only,
            graph.var_keywords,
            graph.in_spec,
            graph.defaults,
        )
        if refused is not None:
            raise BindingError(f"{refused}; the trace takes {takes}")
        raise TraceError(
            f"{self.name}() was called with arguments shaped differently from the example "
            f"inputs it was traced with: {mismatch(graph.in_spec, spec)}; expected "
            f"{describe(graph.in_spec)}, got {describe(spec)}; the trace takes {takes}"
        )


def _in_key_order(obj, spec: dict):
    """``obj`` with every dict's entries in the order ``spec`` lists their keys (when the
    keys are the same); anything else is returned as it is, for the caller to refuse."""
    kind = spec.get("t")
    if kind == "dict" and isinstance(obj, dict) and set(obj) == set(spec["keys"]):
        return {k: _in_key_order(obj[k], c) for k, c in zip(spec["keys"], spec["c"])}
    same_length = isinstance(obj, (tuple, list)) and len(obj) == len(spec.get("c", ()))
    if kind in ("tuple", "list") and same_length:
        return type(obj)(_in_key_order(o, c) for o, c in zip(obj, spec["c"]))
    return obj


def refuse_reordered(
    method: str,
    got: dict,
    kwargs: dict,
    in_spec: dict,
    var_keywords: list[str],
    arg_names: list[str] = (),
    any_order: list[str] = (),
) -> None:
    """Raise :class:`GuardError` where a call whose inputs are the traced ones in another
    order (``got``, its spec in the call's order) passes a dict input, or the keywords
    that land in ``**kwargs``, in another order than traced: code that iterates them
    would see another order in eager. Called only where the call's spec differs from the
    traced one, so a call in the traced order pays nothing. ``any_order`` names the
    parameters (by ``arg_names`` or keyword; the ``**kwargs`` one by its name) whose code
    reads them only by key (trace/key_reads.py): their order is free."""
    free = set(any_order)
    _refuse_reordered_dict(method, got, in_spec, _free_paths(free, arg_names, in_spec))
    if var_keywords and not (free - set(arg_names) - set(in_spec["c"][1]["keys"])):
        _refuse_reordered_var_keywords(method, kwargs, var_keywords)


def _free_paths(free: set, arg_names, in_spec: dict) -> set:
    """The spec paths of the top-level dict inputs named in ``free``: ``(0, i)`` for a
    positional one, ``(1, name)`` for one by keyword."""
    if not free:
        return set()
    positional = len(in_spec["c"][0]["c"])
    paths = {(0, i) for i, name in enumerate(arg_names[:positional]) if name in free}
    return paths | {(1, key) for key in in_spec["c"][1]["keys"] if key in free}


def _refuse_reordered_var_keywords(method: str, kwargs: dict, traced: list[str]) -> None:
    """Raise :class:`GuardError` where the keywords of the call that land in the traced
    callable's ``**kwargs`` come in another order than ``traced``.

    Note: keyword arguments are matched by name, which is right for named parameters. The
    ones a ``**kwargs`` parameter collects form a dict the code may iterate
    (``kw.values()``, ``for k in kw``): in eager it follows the call's order, and the
    trace holds the traced order (``var_keywords`` of the graph, kept in the file)."""
    names = set(traced)
    order = [k for k in kwargs if k in names]
    if order == list(traced):
        return
    raise GuardError(
        f"{method}() was called with the keyword arguments {order}, which the traced code "
        f"takes in its **kwargs, in another order than the trace was made with {list(traced)}: "
        "code that iterates **kwargs (kwargs.values(), kwargs.items(), for k in kwargs) "
        "runs in the call's order in eager, and the trace holds the traced order; pass "
        f"them in the traced order ({', '.join(traced)}), or trace again with this order",
        guard="the order of the keyword arguments in **kwargs",
        seen=order,
    )


def _refuse_reordered_dict(method: str, got: dict, expected: dict, free=frozenset()) -> None:
    """Raise :class:`GuardError` where a dict input of the call (``got``, a spec in the
    call's order) holds the traced keys in another order.

    Note: the order of a dict is part of what the code sees. Code that iterates a dict
    input (``torch.cat(list(d.values()))``, ``for k, v in d.items()``) was recorded in the
    traced order; in eager it follows the call's, so reading the entries by key in the
    traced order would return another result, silently. Only reached where the call's
    spec differs from the traced one, so a call in the traced order pays nothing. The
    keyword arguments themselves (the dict at ``[1]``) are matched by name."""
    found = _reordered_dict(got, expected, [], free)
    if found is None:
        return
    path, keys, traced = found
    raise GuardError(
        f"{method}() was called with {_path_name(path)}, a dict, holding its keys in the "
        f"order {keys} where the trace was made with {traced}: code "
        "that iterates a dict (d.values(), d.items(), for k in d) runs in the call's order "
        "in eager, and the trace holds the traced order; pass the keys in the traced order, "
        "or trace again with this order",
        guard=f"the order of the keys of {_path_name(path)}",
        seen=keys,
    )


def _reordered_dict(
    got: dict, expected: dict, path: list, free=frozenset()
) -> tuple[list, list, list] | None:
    """The path, the call's keys and the traced keys of the first dict of ``got`` whose
    keys are ``expected``'s in another order (``got`` in the call's order), or None.
    ``free``: the paths (tuples) of dicts whose order the code never reads."""
    children = expected.get("c", ())
    if expected["t"] == "dict":
        reordered = got["keys"] != expected["keys"]
        if reordered and path != [1] and tuple(path) not in free:
            return path, got["keys"], expected["keys"]
        by_key = dict(zip(got["keys"], got["c"]))
        pairs = [(k, by_key[k], c) for k, c in zip(expected["keys"], children)]
    else:
        pairs = list(zip(range(len(children)), got.get("c", ()), children))
    for key, child_got, child in pairs:
        found = _reordered_dict(child_got, child, [*path, key], free)
        if found is not None:
            return found
    return None


def same_spec(got: dict, expected: dict, typed: bool | None = None) -> bool:
    """Whether a call's structure is the traced example's: equal, and every constant of
    the same type (``2``, ``2.0`` and ``True`` are equal in Python but make other results:
    an int64 product, a float one, an ``is True`` branch) -- a NaN the same as a NaN.
    ``typed``: whether ``expected`` holds constants, where the caller knows it already."""
    if got == expected:
        if typed is None:
            typed = _has_constants(expected)
        return not typed or _same_constants(got, expected)
    return _same_constants(got, expected)  # NaN != NaN: equal only by the typed walk


def _has_constants(spec: dict) -> bool:
    return spec["t"] == "const" or any(_has_constants(c) for c in spec.get("c", ()))


def _same_constants(got: dict, expected: dict) -> bool:
    if got["t"] != expected["t"] or got.get("keys") != expected.get("keys"):
        return False
    if expected["t"] == "const":
        a, b = got["v"], expected["v"]
        return type(a) is type(b) and (a == b or (a != a and b != b))
    children, others = expected.get("c", []), got.get("c", [])
    if len(children) != len(others) or {k: v for k, v in got.items() if k != "c"} != {
        k: v for k, v in expected.items() if k != "c"
    }:
        return False
    return all(_same_constants(g, e) for g, e in zip(others, children))


_FIXED = (
    "numbers, strings, None and the structure of containers are fixed in a trace: pass "
    "what the example passed, trace again with this call's arguments, or pass the value "
    "as a tensor"
)


def mismatch(expected: dict, got: dict) -> str:
    """Where a call's arguments first differ from the traced example's, and what to do."""
    found = _first_difference(expected, got, [])
    if found is None:
        return _FIXED
    path, what = found
    if path == [0] and expected["t"] == "tuple" and len(expected.get("c", [])) == 2:
        keywords = expected["c"][1].get("keys") or []
        if keywords:  # traced by keyword: say so beside the count of positional ones
            what += f" (and the keyword arguments {list(keywords)})"
    return f"{_path_name(path)} {what}; {_FIXED}"


def _first_difference(expected: dict, got: dict, path: list) -> tuple[list, str] | None:
    kind, other = expected["t"], got["t"]
    if kind != other:
        return path, f"is {_kind_name(got)} where the trace was made with {_kind_name(expected)}"
    if kind == "const" and not _same_constants(got, expected):
        return path, f"is {got['v']!r} where the trace was made with {expected['v']!r}"
    if kind == "dict" and expected["keys"] != got["keys"]:
        if path == [1]:  # the call's keyword arguments
            made = expected["keys"] or "none"
            return path, f"{got['keys'] or 'none'} where the trace was made with {made}"
        return path, f"has keys {got['keys']} where the trace was made with {expected['keys']}"
    if kind == "namedtuple" and (expected["name"], expected["fields"]) != (
        got["name"],
        got["fields"],
    ):
        return path, f"is {_kind_name(got)} where the trace was made with {_kind_name(expected)}"
    children, others = expected.get("c", []), got.get("c", [])
    if len(children) != len(others):
        items = ("positional argument" if path == [0] else "item") + (
            "" if len(others) == 1 else "s"
        )
        return path, f"has {len(others)} {items} where the trace was made with {len(children)}"
    keys = expected.get("keys") or range(len(children))
    for key, child, other_child in zip(keys, children, others):
        found = _first_difference(child, other_child, [*path, key])
        if found is not None:
            return found
    return None


def _kind_name(spec: dict) -> str:
    kind = spec["t"]
    if kind == "leaf":
        return "a tensor"
    if kind == "const":
        return repr(spec["v"])
    if kind == "namedtuple":
        return f"a {spec['name']}{tuple(spec['fields'])}"
    names = {"none": "None", "dict": "a dict", "list": "a list", "tuple": "a tuple"}
    return names.get(kind, f"a {kind}")


def _path_name(path: list) -> str:
    """``[0, 2, 'a']`` (args, third argument, key 'a') as ``argument 3['a']``."""
    if not path:
        return "the arguments"
    head, rest = path[0], path[1:]
    if head == 0 and rest:  # positional arguments
        name, rest = f"argument {rest[0] + 1}", rest[1:]
    elif head == 1 and rest:  # keyword arguments
        name, rest = f"keyword argument {rest[0]!r}", rest[1:]
    else:
        name = "the call" if head == 0 else "the call's keyword arguments are"
    return name + "".join(f"[{key!r}]" for key in rest)


def describe(spec: dict) -> str:
    kind = spec["t"]
    if kind == "leaf":
        return "Tensor"
    if kind == "none":
        return "None"
    if kind == "const":
        return repr(spec["v"])
    inner = [describe(c) for c in spec.get("c", [])]
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(spec["keys"], inner)) + "}"
    if kind == "list":
        return "[" + ", ".join(inner) + "]"
    return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"


# The classes whose ``__torch_function__`` only unwraps to (or rewraps as) their class and
# changes no value: torchvision's ``tv_tensors`` (Image, BoundingBoxes, Mask, Video): eager
# returns plain tensors from most ops on them, as the trace does. By module and name, so
# that torchvision is never imported here.
PASS_THROUGH = frozenset({("torchvision.tv_tensors._tv_tensor", "TVTensor")})
# The classes declared with :func:`pass_through`.
_declared: weakref.WeakSet = weakref.WeakSet()


def pass_through(cls: type) -> type:
    """Declare that the tensor subclass ``cls`` has a ``__torch_function__`` that changes
    no values (it logs the calls, checks them, or only unwraps and rewraps): a traced call
    then runs its recorded ops on inputs of ``cls`` (and its subclasses), which ``cls``'s
    ``__torch_function__`` sees, instead of refusing them. Returns ``cls``, so that it
    can be a class decorator.

    >>> @tracebridge.pass_through  # doctest: +SKIP
    ... class Logged(torch.Tensor):
    ...     @classmethod
    ...     def __torch_function__(cls, func, types, args=(), kwargs=None):
    ...         print(func.__name__)
    ...         return super().__torch_function__(func, types, args, kwargs or {})
    """
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)):
        raise TypeError(f"pass_through takes a torch.Tensor subclass, not {cls!r}")
    _declared.add(cls)
    return cls


def overriding_class(tensor) -> type | None:
    """The class whose own ``__torch_function__`` eager runs for every op on ``tensor``
    and may change results with, or None: a plain tensor, a subclass that inherits
    torch's (its results are its class with torch's values), one that turns it off
    (``nn.Parameter``, ``_disabled_torch_function_impl``), or a pass-through
    (:data:`PASS_THROUGH`).

    >>> overriding_class(torch.nn.Parameter(torch.ones(1))) is None
    True
    """
    kind = type(tensor)
    if kind is torch.Tensor or not isinstance(tensor, torch.Tensor):
        return None
    for owner in kind.__mro__:
        if "__torch_function__" in owner.__dict__:
            break
    else:  # pragma: no cover - torch.Tensor defines it
        return None
    if owner is torch.Tensor or owner is torch._C.TensorBase:
        return None
    if kind.__torch_function__ is torch._C._disabled_torch_function_impl:
        return None
    if (owner.__module__, owner.__qualname__) in PASS_THROUGH:
        return None
    if any(klass in _declared for klass in kind.__mro__):
        return None
    return owner


def refuse_overriding_inputs(method, leaves) -> None:
    """Raise :class:`TraceError` where an input tensor (of ``leaves``, the call's tensors
    in the traced order) is of a subclass whose ``__torch_function__`` may change what ops
    give (:func:`overriding_class`); nothing where every input is plain (the call got
    here under a torch function mode).

    Note: why refused. Eager runs the subclass's ``__torch_function__`` for each op of
    the code, with the function the code called (``Tensor.__mul__``, ``torch.mul``,
    ``F.linear``): an override may scale a result, log, or return another type. The
    trace runs its recorded ops, which are not always the functions the code called, so
    the override would see other calls or none (prober21b F7: ``x * 2 + 1`` gave 3 where
    eager gave 21); torch.jit.trace runs a plain tensor's ops too. Subclasses that keep
    torch's ``__torch_function__`` or turn it off, torchvision's tv_tensors, whose
    override only unwraps, and classes declared with :func:`pass_through` are run as
    before: the override sees the recorded ops."""
    for index, leaf in enumerate(leaves):
        owner = overriding_class(leaf)
        if owner is None:
            continue
        values = method.graph.inputs
        name = values[index].name if index < len(values) and values[index].name else ""
        label = f"argument {name!r}" if name else f"input {index}"
        kind = type(leaf)
        raise TraceError(
            f"{method.name}() was given {label} of the tensor subclass {kind.__qualname__} "
            f"({kind.__module__}), whose __torch_function__ ({owner.__qualname__}."
            "__torch_function__) eager runs for every op and may change its results; the "
            "trace runs its recorded ops as on a plain tensor, and would give other results "
            f"silently. Pass a plain tensor ({name or 'x'}.as_subclass(torch.Tensor)), call "
            "the code itself with this subclass, or, where its __torch_function__ changes "
            f"no values (it logs or checks), declare it: tracebridge.pass_through({kind.__name__})"
        )


def refuse_one_tensor(graph: Graph, method: str, leaves) -> None:
    """Raise :class:`TraceError` where a call passes one tensor at two positions of a
    group of ``graph.distinct_inputs`` (``leaves``: the call's tensors, in the traced
    order); nothing otherwise."""
    for group in graph.distinct_inputs:
        seen: dict[int, int] = {}
        for position in group:
            if position >= len(leaves):
                continue
            first = seen.setdefault(id(leaves[position]), position)
            if first == position:
                continue
            names = [v.name or f"input {i}" for i, v in enumerate(graph.inputs)]
            a, b = names[first], names[position]
            raise TraceError(
                f"{method}() was given the same tensor object as {a!r} and {b!r}, and the "
                "trace was made with distinct tensors there; the code gives other results for "
                "one tensor than for distinct ones (it tests their identity, such as `if "
                f"{a} is {b}:`, or changes the shape of one in place), so the trace would "
                "give the results for distinct tensors. Pass "
                f"distinct tensors ({b}={a}.clone()) for those results, or, for the path of "
                "one tensor, trace a function that passes one input to both "
                f"(lambda {a}, ...: model({a}, {a}, ...)) and call that"
            )


def _rng_states(slots: dict | None = None) -> tuple:
    """The CPU generator's state, every initialised CUDA device's, and those of the
    generators the graphs draw from (``slots``, runtime/generators.py)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda, generators.states(slots if slots is not None else {})


def _set_rng_states(states: tuple) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state_all(states[1])
    generators.set_states(states[2])


def _plain(args: tuple, kwargs: dict) -> bool:
    """Whether eager's fused paths may run on this call: no torch function mode, and no
    input of a tensor subclass with a ``__torch_function__`` of its own (nn.MultiheadAttention
    and TransformerEncoderLayer ask ``has_torch_function`` and take their general path)."""
    values = (*args, *kwargs.values()) if kwargs else args
    if all(type(v) is torch.Tensor for v in values):
        return not _has_torch_function(values)  # (True under a mode)
    try:
        leaves, _ = pytree.flatten(values, is_tensor)
    except TypeError:
        return False  # the first graph says what is wrong with the inputs
    return not _has_torch_function(tuple(leaves))


_KEY_SCALARS = (int, float, bool, str, type(None))
SERVED_KEYS = 32  # calls' sizes remembered per specialised method (then forgotten at once)


def _sizes_key(args: tuple, kwargs: dict, grad: bool):
    """What decides which graph of a :class:`Specialised` serves a call, as far as sizes
    do: each tensor's type, dtype, device and sizes, each plain number, the keywords'
    names, the grad mode; None for anything else (a container: its leaves are not read
    here)."""
    key: list = [grad]
    for value in args:
        part = _key_part(value)
        if part is None:
            return None
        key.append(part)
    for name, value in kwargs.items():
        part = _key_part(value)
        if part is None:
            return None
        key.append((name, part))
    return tuple(key)


def _key_part(value):
    if isinstance(value, torch.Tensor):
        return type(value), value.dtype, value.device, tuple(value.shape)
    if type(value) in _KEY_SCALARS:
        return type(value), value
    return None


def for_mode(method, training: bool):
    """The method a module's call runs in its mode: in training mode, a
    :class:`Specialised` without the graphs of eager's fused path (traced in evaluation
    without autograd: api.py's ``_without_autograd``), which eager takes only in
    evaluation."""
    if training and isinstance(method, Specialised):
        return method.in_training
    return method


class Specialised:
    """A method with specialisations (check/specialise.py): the first graph, then graphs
    traced with sizes at 1, most sizes first, tried in order when the guards of the ones
    before refuse a call; the first whose guards all hold serves it. A call that none
    serves raises the refusal of the first specialisation made for its sizes at 1 (the
    graph that knew most about the call), else the first graph's. It behaves as the first
    graph's Method otherwise (``graph``, ``code``, ``check_guards``)."""

    def __init__(self, methods: list[Method], slots: dict | None = None):
        self.methods = methods
        self._slots = slots  # (where the generators the graphs draw from are)
        self.name = methods[0].name
        self.graph = methods[0].graph
        self._random = any(draws_random(node) for method in methods for node in method.graph.nodes)
        # Graphs of a fused path traced without autograd (ir/analysis.py's
        # fused_without_autograd, api.py's _without_autograd): tried first by calls
        # without autograd while torch.backends.mha's fast path is on, never by calls
        # with autograd (their guard refuses those).
        first = methods[0].graph
        self._without_grad = [m for m in methods[1:] if fused_without_autograd(m.graph, first)]
        self._with_grad = [m for m in methods[1:] if m not in self._without_grad]
        # What a call in training mode runs (:func:`for_mode`): eager takes no fused path
        # there, with or without autograd.
        self.in_training = self
        # Sizes whose call the first graph refused and a specialisation served: tried there
        # first, so that a refusal late in the first graph (a batch-1 call after a whole
        # vision tower, prober24b F2) is not paid again. Only a shortcut: a graph serves a
        # call only where all its guards hold, and so gives eager's answer whichever
        # serves; where the remembered one refuses, the call goes the whole way.
        self._served: dict = {}
        if self._without_grad:
            rest = [methods[0], *self._with_grad]
            self.in_training = Specialised(rest, slots) if len(rest) > 1 else methods[0]

    def __getattr__(self, name: str):
        # Anything else (a backend's set_functions) is the first graph's.
        if name == "methods":
            raise AttributeError(name)
        return getattr(self.methods[0], name)

    @property
    def check_guards(self) -> bool:
        return self.methods[0].check_guards

    @check_guards.setter
    def check_guards(self, on: bool) -> None:
        for method in self.methods:
            method.check_guards = on

    def __call__(self, *args, **kwargs):
        # A graph that draws random numbers before a guard refuses the call has moved the
        # generators: the graph that serves it must draw what eager would have drawn.
        rng = _rng_states(self._slots) if self._random else None
        grad = _grad_enabled()
        if self._without_grad and not grad and _fast_path_enabled() and _plain(args, kwargs):
            for method in self._without_grad:  # eager's fused path: tried first
                try:
                    return method(*args, **kwargs)
                except GuardError:
                    if rng is not None:
                        _set_rng_states(rng)
                except TraceError as exc:
                    if type(exc) not in (TraceError, BindingError):
                        raise
                    break  # arguments unlike the example's: the first graph names its method
        served = self._served
        # Not under a mode (a tracer records every op a call runs: the refused graph's too,
        # so a shortcut would make two recordings of one call differ). Read only where a
        # size was remembered: the common call pays nothing here.
        if served and not (_function_modes() or _dispatch_modes()):
            known = served.get(_sizes_key(args, kwargs, grad))
            if known is not None and guards_active(known):
                try:
                    return known(*args, **kwargs)
                except GuardError:
                    if rng is not None:
                        _set_rng_states(rng)
        try:
            return self.methods[0](*args, **kwargs)
        except GuardError as refused:
            if not guards_active(self.methods[0]):
                raise
            first = refused
        reported = first
        for method in self._with_grad:  # (those without autograd were tried, or refuse)
            if rng is not None:
                _set_rng_states(rng)
            try:
                result = method(*args, **kwargs)
            except GuardError as exc:
                # A graph for sizes at 1 that refuses past its size-1 guard knew most about
                # the call; a graph traced at cut sizes describes other calls than this one.
                if (
                    reported is first
                    and not exc.guard.endswith(SIZE_ONE_GUARD)
                    and CUT_GRAPH not in exc.guard
                ):
                    reported = exc
                continue
            outside = not (_function_modes() or _dispatch_modes())
            key = _sizes_key(args, kwargs, grad) if outside else None
            if key is not None:
                if len(served) >= SERVED_KEYS:
                    served.clear()
                served[key] = method
            return result
        raise reported from None
