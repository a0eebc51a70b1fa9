"""The traced call's signature on a GraphModule of :func:`~tracebridge.to_graph_module`.

Note: why a signature, and how. A graph's inputs are the tensor leaves of the traced
call, in the order the example passed them; the plain GraphModule takes exactly those
(``forward(self, x, bias, mask)`` for ``m(x, bias=b, mask=k)``). Called as the original
is called, that binds otherwise than Python: ``gm(x, k, b)`` gave ``k`` to ``bias``
where ``forward(self, x, mask=None, bias=None)`` takes it as ``mask`` (silently wrong), a
number or ``None`` the example passed had no parameter at all, a positional-only
parameter took a keyword. So the GraphModule's ``forward`` gets the parameters of the
traced callable as far as the trace recorded them (``arg_names``, ``positional_only``,
``defaults``, ``in_spec``'s keywords, ``var_keywords``):

* each in its kind and place: positional-only (``/``), positional-or-keyword, then the
  keywords the callable takes by name only (``*``) and those of its ``**kwargs``;
* a tensor parameter is bound to its input; a container (a tuple, a dict) is taken whole
  and flattened by its traced spec (as the runtime takes it);
* a parameter has the callable's own default (the graph's ``defaults``, recorded when
  tracing); a number, string or ``None`` the example passed is fixed, so another value
  -- or a default that is not that value -- is refused; a parameter the example did not
  pass takes only its default. A default no file holds (a tensor) must be passed.

The first lines of ``forward`` bind the call (:func:`tracebridge_bind`) to the graph's
inputs, in their order; the rest of the code is the plain GraphModule's. Where the plain
``forward`` already binds as the original does (every parameter one tensor without a
default, in order, under its own name), the GraphModule keeps the plain code: Python's own
TypeError then refuses what the original refuses. A parameter with a default binds by the
signature, which says why a call leaving it out cannot be served (the example passed a
tensor there), where Python would call it required. ``torch.export``, ONNX and
AOTInductor take the flat inputs: ``to_graph_module(..., flat=True)`` gives that form.
"""

from __future__ import annotations

import inspect
import io
import keyword
import math
import tokenize
from dataclasses import dataclass, field

import torch
from torch import fx

from ..errors import BindingError, TraceError
from ..ir import Graph, pytree
from ..ir.pytree import is_tensor
from ..runtime.method import (
    _in_key_order,
    _refuse_reordered_dict,
    _refuse_reordered_var_keywords,
    describe,
    mismatch,
    same_spec,
)

POSITIONAL_ONLY, POSITIONAL, KEYWORD, VAR_KEYWORD = "/", "", "*", "**"


class _Marker:
    """A default of ``forward`` that stands for no value: ``NOT_PASSED`` (the parameter
    has no default; Python's own def needs one where it follows a parameter with one),
    ``UNKNOWN`` (its default is one no file holds: a tensor, an object)."""

    def __init__(self, text: str, name: str):
        self.text = text
        self.name = name

    def __repr__(self) -> str:
        return self.text

    def __reduce__(self) -> str:
        return self.name  # unpickled as this module's global: ``is`` tests stay true


NOT_PASSED = _Marker("<not passed>", "NOT_PASSED")
UNKNOWN = _Marker("<a default the trace does not hold>", "UNKNOWN")


@dataclass
class Parameter:
    """One parameter of the traced callable: its name, kind, the spec of what the
    example passed (None: not passed), its default in the callable (a value, UNKNOWN,
    or NOT_PASSED where it has none) and the graph inputs its leaves are."""

    name: str
    kind: str
    spec: dict | None
    default: object = NOT_PASSED
    inputs: list[int] = field(default_factory=list)

    @property
    def has_default(self) -> bool:
        return self.default is not NOT_PASSED

    @property
    def recorded(self):
        """The number, string or None the example passed (spec ``none``/``const``)."""
        return None if self.spec["t"] == "none" else self.spec["v"]


@dataclass(eq=False)  # hashed by identity: torch.fx keeps a global of it by the object
class Signature:
    """The parameters of a traced call (module Note), and the method's name."""

    method: str
    parameters: list[Parameter]
    var_keywords: list[str]
    n_inputs: int

    def text(self) -> str:
        """The parameter list as Python shows it: ``x, /, mask=None, *, k``."""
        return self._parameters(lambda index, p: f"{p.name}={p.default!r}" * p.has_default)

    def code(self) -> str:
        """The parameter list of ``def forward``, each default read from ``_tb_defaults``."""
        return self._parameters(
            lambda index, p: f"{p.name}=_tb_defaults[{index}]" * self._defaulted(index)
        )

    def _parameters(self, with_default) -> str:
        out, seen_keyword = [], False
        for index, p in enumerate(self.parameters):
            if p.kind == VAR_KEYWORD:
                continue
            if p.kind == KEYWORD and not seen_keyword:
                out.append("*")
                seen_keyword = True
            out.append(with_default(index, p) or p.name)
            if p.kind == POSITIONAL_ONLY and self._last_of_kind(index):
                out.append("/")
        if self.var_keywords:
            out.append("**kwargs")
        return ", ".join(out)

    def _defaulted(self, index: int) -> bool:
        """Whether ``forward`` gives parameter ``index`` a default: its own (a value or
        UNKNOWN), NOT_PASSED where the example did not pass it, and NOT_PASSED where
        Python needs one (a positional parameter after one with a default), refused in
        :func:`tracebridge_bind` when left out."""

        def needs(p: Parameter) -> bool:
            return p.has_default or p.spec is None

        p = self.parameters[index]
        if needs(p) or p.kind == KEYWORD:
            return needs(p)
        return any(needs(q) for q in self.parameters[:index] if q.kind != KEYWORD)

    def _last_of_kind(self, index: int) -> bool:
        following = self.parameters[index + 1 : index + 2]
        return not following or following[0].kind != POSITIONAL_ONLY

    def defaults(self) -> tuple:
        """Per parameter, its default in ``forward`` (a marker where it has no value)."""
        return tuple(p.default for p in self.parameters)

    def bind_call(self, args: tuple, kwargs: dict) -> tuple:
        """:meth:`bind` of a call's own arguments, bound to the parameters as Python binds
        them (``inspect.Signature.bind``: its TypeError, as a :class:`BindingError`)."""
        named = [p for p in self.parameters if p.kind != VAR_KEYWORD]
        try:
            bound = self._inspect().bind(*args, **kwargs)
        except TypeError as exc:
            raise BindingError(f"{self.method}(): {exc}; the trace takes ({self.text()})") from None
        values = tuple(bound.arguments.get(p.name, p.default) for p in named)
        return self.bind(values, bound.arguments.get("_tb_kwargs", {}))

    def _inspect(self) -> inspect.Signature:
        kinds = {
            POSITIONAL_ONLY: inspect.Parameter.POSITIONAL_ONLY,
            POSITIONAL: inspect.Parameter.POSITIONAL_OR_KEYWORD,
            KEYWORD: inspect.Parameter.KEYWORD_ONLY,
        }
        params = [
            inspect.Parameter(
                p.name,
                kinds[p.kind],
                default=p.default if self._defaulted(i) else inspect.Parameter.empty,
            )
            for i, p in enumerate(self.parameters)
            if p.kind != VAR_KEYWORD
        ]
        if self.var_keywords:
            params.append(inspect.Parameter("_tb_kwargs", inspect.Parameter.VAR_KEYWORD))
        return inspect.Signature(params)

    def bind(self, values: tuple, extra: dict) -> tuple:
        """The graph's input tensors, in order, from the parameters' ``values`` (and the
        ``**kwargs`` dict ``extra``)."""
        leaves: list = [None] * self.n_inputs
        named = [p.name for p in self.parameters if p.kind != VAR_KEYWORD]
        by_name = dict(zip(named, values))
        for p in self.parameters:
            if p.kind == VAR_KEYWORD:
                value = extra.get(p.name, NOT_PASSED)
            else:
                value = by_name[p.name]
            self._take(p, value, leaves)
        if self.var_keywords:
            unknown = [k for k in extra if k not in self.var_keywords]
            if unknown:
                raise TraceError(
                    f"{self.method}(): keyword argument {unknown[0]!r} was not passed when "
                    f"the trace was made, so the trace cannot take it (it takes "
                    f"({self.text()})); leave it out, or trace again passing it"
                )
            _refuse_reordered_var_keywords(self.method, extra, self.var_keywords)
        return tuple(leaves)

    def _take(self, p: Parameter, value, leaves: list) -> None:
        """Check ``value`` (what the call gave ``p``, or its default) against the trace,
        and put its tensors in ``leaves``."""
        if p.spec is None:  # the trace took the callable's default
            if value is NOT_PASSED or value is UNKNOWN:
                return
            if p.default is UNKNOWN or not _same_constant(value, p.default):
                raise TraceError(
                    f"{self.method}(): argument {p.name!r} was not passed when the trace was "
                    "made (the traced code took its default), so the trace cannot take "
                    "another value; leave it out, or trace again passing it"
                )
            return  # its default, given by name: the traced call
        if value is NOT_PASSED and p.kind == VAR_KEYWORD:
            raise TraceError(
                f"{self.method}(): keyword argument {p.name!r} (taken by **kwargs) was passed "
                "when the trace was made, and the traced code read it; pass it"
            )
        if value is NOT_PASSED:
            raise BindingError(
                f"{self.method}() missing 1 required argument: {p.name!r}; the trace takes "
                f"({self.text()})"
            )
        if value is UNKNOWN:
            raise TraceError(
                f"{self.method}(): argument {p.name!r} was left out, and its default is "
                "not one the trace holds (a tensor, an object): pass it, as the example did"
            )
        if p.spec["t"] in ("none", "const"):
            if not _same_constant(value, p.recorded):
                raise TraceError(
                    f"{self.method}(): argument {p.name!r} is {value!r} where the trace was "
                    f"made with {p.recorded!r}; numbers, strings and None are fixed in a "
                    "trace: pass what the example passed, or trace again with this value"
                )
            return
        if p.spec["t"] == "leaf":
            # a torch.fx tracer's stand-in for a tensor: ``symbolic_trace(gm)``
            if not isinstance(value, (torch.Tensor, fx.Proxy)):
                raise TraceError(
                    f"{self.method}(): argument {p.name!r} is {type(value).__name__} where "
                    "the trace was made with a tensor; pass a tensor, or trace again"
                )
            leaves[p.inputs[0]] = value
            return
        flat, got = pytree.flatten(value, is_tensor)
        if not same_spec(got, p.spec):
            flat, given = pytree.flatten(_in_key_order(value, p.spec), is_tensor)
            if same_spec(given, p.spec):
                _refuse_reordered_dict(self.method, _as_call(got), _as_call(p.spec))
            got = given
        if not same_spec(got, p.spec):
            raise TraceError(
                f"{self.method}(): argument {p.name!r} is shaped differently from the "
                f"example's: {mismatch(p.spec, got)}; expected {describe(p.spec)}, got "
                f"{describe(got)}"
            )
        for index, leaf in zip(p.inputs, flat):
            leaves[index] = leaf


def _as_call(spec: dict) -> dict:
    """``spec`` as the only positional argument of a call's spec (what the runtime's
    messages walk)."""
    return {"t": "tuple", "c": [{"t": "tuple", "c": [spec]}, {"t": "dict", "keys": [], "c": []}]}


def _same_constant(value, recorded) -> bool:
    if type(value) is not type(recorded):
        return False
    if isinstance(value, float) and math.isnan(value):
        return math.isnan(recorded)
    return value == recorded


def signature_of(graph: Graph, method: str) -> Signature:
    """The traced callable's parameters, as far as ``graph`` records them (module Note)."""
    traced_args, traced_kwargs = graph.in_spec["c"]
    keywords = dict(zip(traced_kwargs["keys"], traced_kwargs["c"]))
    names = list(graph.arg_names)
    while len(names) < len(traced_args["c"]):
        names.append(f"arg{len(names)}")
    params = []
    for index, name in enumerate(names):
        kind = POSITIONAL_ONLY if index < graph.positional_only else POSITIONAL
        if index < len(traced_args["c"]):
            spec = traced_args["c"][index]
        elif kind == POSITIONAL and name in keywords:
            spec = keywords.pop(name)
        else:
            spec = None
        params.append(Parameter(name, kind, spec, _default(graph, name)))
    while params and params[-1].spec is None and not params[-1].has_default:
        params.pop()  # not passed, no default known, at the end: a call cannot pass it
    for name, spec in keywords.items():
        kind = VAR_KEYWORD if name in graph.var_keywords else KEYWORD
        default = NOT_PASSED if kind == VAR_KEYWORD else _default(graph, name)
        params.append(Parameter(name, kind, spec, default))
    by_name = {p.name: p for p in params}
    owners = names[: len(traced_args["c"])] + list(traced_kwargs["keys"])
    counter = iter(range(len(graph.inputs)))
    for owner, spec in zip(owners, traced_args["c"] + traced_kwargs["c"]):
        by_name[owner].inputs.extend(next(counter) for _ in range(pytree.count_leaves(spec)))
    return Signature(method, params, list(graph.var_keywords), len(graph.inputs))


def _default(graph: Graph, name: str):
    """The default of parameter ``name`` as the graph records it (``defaults``)."""
    if name not in graph.defaults:
        return NOT_PASSED
    spec = graph.defaults[name]
    if spec is None:
        return UNKNOWN
    return None if spec["t"] == "none" else spec["v"]


def can_spell(signature: Signature, plain_code: str, placeholders: list[str]) -> bool:
    """Whether ``def forward`` can name the parameters as the traced callable does: none
    is ``self`` or a name the binding line uses, and none is a name that the plain
    code's body uses for something else (a global such as ``torch``, a builtin such as
    ``getattr``), which a parameter would hide there. Where not, ``forward`` takes
    ``*args, **kwargs`` and binds them as Python would (:meth:`Signature.bind_call`)."""
    body = {
        token.string
        for token in tokenize.generate_tokens(io.StringIO(plain_code).readline)
        if token.type == tokenize.NAME
    }
    reserved = {"self", "tracebridge_bind", "_tb_signature", "_tb_defaults"}
    if signature.var_keywords:
        reserved.add("kwargs")
    for p in signature.parameters:
        if p.kind == VAR_KEYWORD:
            continue
        own = len(p.inputs) == 1 and p.spec == {"t": "leaf"} and placeholders[p.inputs[0]] == p.name
        if p.name in reserved or (p.name in body and not own):
            return False
    return True


def is_python_names(signature: Signature) -> bool:
    """Whether every parameter's name is one Python can declare (an identifier, not a
    keyword): those of a Python callable are; a file may say otherwise."""
    return all(
        p.name.isidentifier() and not keyword.iskeyword(p.name) for p in signature.parameters
    )


def is_plain(signature: Signature, placeholders: list[str]) -> bool:
    """Whether ``forward(self, *placeholders)`` binds every call as the signature does."""
    params = signature.parameters
    return (
        len(params) == len(placeholders)
        # A parameter with a default is not plain: Python would take a call that leaves it
        # out, and give it the default the trace did not take (a TypeError naming a
        # parameter the user's forward does not require), where the binding says why.
        and all(
            p.kind == POSITIONAL and p.spec == {"t": "leaf"} and not p.has_default for p in params
        )
        and [p.name for p in params] == placeholders
        and [p.inputs for p in params] == [[i] for i in range(len(params))]
    )


def tracebridge_bind(signature: Signature, values: tuple, extra: dict) -> tuple:
    """The call of a signature-form GraphModule bound to its graph's inputs."""
    return signature.bind(values, extra)


def tracebridge_bind_call(signature: Signature, args: tuple, kwargs: dict) -> tuple:
    """:func:`tracebridge_bind` of a ``forward(self, *args, **kwargs)``."""
    return signature.bind_call(args, kwargs)


def reduce_flat(gm: fx.GraphModule, reduce) -> tuple:
    """``reduce(gm)`` (a GraphModule's ``__reduce__``) of the flat form of ``gm``.
    torch.fx pickles the generated code and traces it again when unpickling, with its
    own code generator, so a signature form's copy would take the flat inputs and bind a
    call of the original's form otherwise (module Note): the flat form is pickled, and
    the unpickler puts the signature back (:func:`with_signature`)."""
    codegen = gm.graph._codegen
    if not isinstance(codegen, SignatureCodeGen):
        return reduce(gm)
    gm.graph._codegen = fx.graph.CodeGen()
    try:
        gm.recompile()  # torch.fx's reduce copies the module's dict, its code included
        return reduce(gm)
    finally:
        gm.graph._codegen = codegen
        gm.recompile()


def pickled_signature(gm: fx.GraphModule) -> tuple | None:
    """What :func:`with_signature` needs to give an unpickled copy ``gm``'s signature."""
    codegen = gm.graph._codegen
    return (codegen.signature, codegen.spelled) if isinstance(codegen, SignatureCodeGen) else None


def with_signature(gm: fx.GraphModule, pickled: tuple | None) -> None:
    """Give the unpickled flat form ``gm`` the signature :func:`pickled_signature` kept."""
    if pickled is not None:
        gm.graph._codegen = SignatureCodeGen(*pickled)
        gm.recompile()


class SignatureCodeGen(fx.graph.CodeGen):
    """FX code generation with the traced signature (module Note): ``def forward`` with
    the traced parameters, then one line that binds them to the graph's inputs."""

    def __init__(self, signature: Signature, spelled: bool = True):
        super().__init__()
        self.signature = signature
        self.spelled = spelled  # False: ``forward(self, *args, **kwargs)`` (can_spell)

    def gen_fn_def(self, free_vars, maybe_return_annotation, *, expanded_def=False) -> str:
        names = [v.split(":")[0].split("=")[0].split("#")[0].strip() for v in free_vars]
        names = [n for n in names if n != "self"]
        sig = self.signature
        if self.spelled:
            values = ", ".join(p.name for p in sig.parameters if p.kind != VAR_KEYWORD)
            extra = "kwargs" if sig.var_keywords else "{}"
            head = f"def {self._func_name}(self, {sig.code()}){maybe_return_annotation}:"
            call = f"tracebridge_bind(_tb_signature, ({values}{',' if values else ''}), {extra})"
        else:
            head = f"def {self._func_name}(self, *_tb_args, **_tb_kwargs){maybe_return_annotation}:"
            call = "tracebridge_bind_call(_tb_signature, _tb_args, _tb_kwargs)"
        if not names:
            return f"{head}\n    {call}"
        return f"{head}\n    {', '.join(names)}, = {call}"

    def additional_globals(self) -> list[tuple[str, object]]:
        # Globals of the code, not attributes of the GraphModule: the code generator is
        # part of the graph, which a copy (copy.deepcopy) keeps. One object per name:
        # torch.fx names a global after the object, once.
        return [
            ("tracebridge_bind", tracebridge_bind),
            ("tracebridge_bind_call", tracebridge_bind_call),
            ("_tb_signature", self.signature),
            ("_tb_defaults", self.signature.defaults()),
        ]

    def process_inputs(self, *args):
        """Positional arguments of the signature to the graph's inputs (for
        ``fx.Interpreter``, which runs the graph rather than its code)."""
        params = [p for p in self.signature.parameters if p.kind != VAR_KEYWORD]
        rest = [p.default for p in params[len(args) :]]
        values = [*args, *rest]
        return self.signature.bind(tuple(values), {})
