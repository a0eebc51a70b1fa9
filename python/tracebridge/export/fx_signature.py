"""The traced call's signature on a GraphModule of :func:`~tracebridge.to_graph_module`.

Note: why a signature, and how. A graph's inputs are the tensor leaves of the traced
call, in the order the example passed them; the plain GraphModule takes exactly those
(``forward(self, x, bias, mask)`` for ``m(x, bias=b, mask=k)``). Called as the original
is called, that binds otherwise than Python: ``gm(x, k, b)`` gave ``k`` to ``bias``
where ``forward(self, x, mask=None, bias=None)`` takes it as ``mask`` (silently wrong), a
number or ``None`` the example passed had no parameter at all, a positional-only
parameter took a keyword. So the GraphModule's ``forward`` gets the parameters of the
traced callable as far as the trace recorded them (``arg_names``, ``positional_only``,
``in_spec``'s keywords, ``var_keywords``):

* each in its kind and place: positional-only (``/``), positional-or-keyword, then the
  keywords the callable takes by name only (``*``) and those of its ``**kwargs``;
* a tensor parameter is bound to its input; a container (a tuple, a dict) is taken whole
  and flattened by its traced spec (as the runtime takes it);
* a number, string or ``None`` the trace recorded is the parameter's default, and any
  other value is refused (the trace fixed it); a parameter the example did not pass
  (its default unknown to the trace) may not be passed.

The first lines of ``forward`` bind the call (:func:`tracebridge_bind`) to the graph's
inputs, in their order; the rest of the code is the plain GraphModule's. Where the plain
``forward`` already binds as the original does (every parameter one tensor, in order,
under its own name), the GraphModule keeps the plain code. ``torch.export``, ONNX and
AOTInductor take the flat inputs: ``to_graph_module(..., flat=True)`` gives that form.
"""

from __future__ import annotations

import io
import keyword
import math
import tokenize
from dataclasses import dataclass, field

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


class _NotPassed:
    """The default of a parameter that has none in the trace: passing it is refused."""

    def __repr__(self) -> str:
        return "<not passed>"


NOT_PASSED = _NotPassed()


@dataclass
class Parameter:
    """One parameter of the traced callable: its name, kind, the spec of what the
    example passed (None: not passed) and the graph inputs its leaves are."""

    name: str
    kind: str
    spec: dict | None
    inputs: list[int] = field(default_factory=list)

    @property
    def has_default(self) -> bool:
        return self.spec is None or self.spec["t"] in ("none", "const")

    @property
    def default(self):
        if self.spec is None:
            return NOT_PASSED
        return None if self.spec["t"] == "none" else self.spec["v"]


@dataclass(eq=False)  # hashed by identity: torch.fx keeps a global of it by the object
class Signature:
    """The parameters of a traced call (module Note), and the method's name."""

    method: str
    parameters: list[Parameter]
    var_keywords: list[str]
    n_inputs: int

    def text(self) -> str:
        """The parameter list as Python writes it: ``x, /, mask=None, *, k``."""
        out, seen_keyword = [], False
        for index, p in enumerate(self.parameters):
            if p.kind == VAR_KEYWORD:
                continue
            if p.kind == KEYWORD and not seen_keyword:
                out.append("*")
                seen_keyword = True
            out.append(f"{p.name}=_tb_defaults[{index}]" if self._defaulted(index) else p.name)
            if p.kind == POSITIONAL_ONLY and self._last_of_kind(index):
                out.append("/")
        if self.var_keywords:
            out.append("**kwargs")
        return ", ".join(out)

    def _defaulted(self, index: int) -> bool:
        """Python needs a default on every positional parameter after one with a default:
        a required one there gets NOT_PASSED, refused in :func:`tracebridge_bind`."""
        p = self.parameters[index]
        if p.has_default or p.kind == KEYWORD:
            return p.has_default
        return any(q.has_default for q in self.parameters[:index] if q.kind != KEYWORD)

    def _last_of_kind(self, index: int) -> bool:
        following = self.parameters[index + 1 : index + 2]
        return not following or following[0].kind != POSITIONAL_ONLY

    def defaults(self) -> tuple:
        """Per parameter, its default in ``forward`` (NOT_PASSED where it has none)."""
        return tuple(p.default if p.has_default else NOT_PASSED for p in self.parameters)

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
        if p.spec is None:
            if value is not NOT_PASSED:
                raise TraceError(
                    f"{self.method}(): argument {p.name!r} was not passed when the trace was "
                    "made (the traced code took its default), so the trace cannot take it; "
                    "leave it out, or trace again passing it"
                )
            return
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
        if p.has_default:
            if not _same_constant(value, p.default):
                raise TraceError(
                    f"{self.method}(): argument {p.name!r} is {value!r} where the trace was "
                    f"made with {p.default!r}; numbers, strings and None are fixed in a "
                    "trace: pass what the example passed, or trace again with this value"
                )
            return
        if p.spec["t"] == "leaf":
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
        params.append(Parameter(name, kind, spec))
    while params and params[-1].spec is None:
        params.pop()  # not passed, at the end: a call that passes it is refused anyway
    for name, spec in keywords.items():
        kind = VAR_KEYWORD if name in graph.var_keywords else KEYWORD
        params.append(Parameter(name, kind, spec))
    by_name = {p.name: p for p in params}
    owners = names[: len(traced_args["c"])] + list(traced_kwargs["keys"])
    counter = iter(range(len(graph.inputs)))
    for owner, spec in zip(owners, traced_args["c"] + traced_kwargs["c"]):
        by_name[owner].inputs.extend(next(counter) for _ in range(pytree.count_leaves(spec)))
    return Signature(method, params, list(graph.var_keywords), len(graph.inputs))


def can_write(signature: Signature, plain_code: str, placeholders: list[str]) -> bool:
    """Whether ``def forward`` can name the parameters as the traced callable does: each
    a Python name other than ``self`` and the names the binding line uses, and none
    that the plain code's body uses for something else (a global such as ``torch``, a
    builtin such as ``getattr``) -- a parameter would hide it there."""
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
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name in reserved:
            return False
        if p.name in body and not own:
            return False
    return True


def is_plain(signature: Signature, placeholders: list[str]) -> bool:
    """Whether ``forward(self, *placeholders)`` binds every call as the signature does."""
    params = signature.parameters
    return (
        len(params) == len(placeholders)
        and all(p.kind == POSITIONAL and p.spec == {"t": "leaf"} for p in params)
        and [p.name for p in params] == placeholders
        and [p.inputs for p in params] == [[i] for i in range(len(params))]
    )


def tracebridge_bind(signature: Signature, values: tuple, extra: dict) -> tuple:
    """The call of a signature-form GraphModule bound to its graph's inputs."""
    return signature.bind(values, extra)


class SignatureCodeGen(fx.graph.CodeGen):
    """FX code generation with the traced signature (module Note): ``def forward`` with
    the traced parameters, then one line that binds them to the graph's inputs."""

    def __init__(self, signature: Signature):
        super().__init__()
        self.signature = signature

    def gen_fn_def(self, free_vars, maybe_return_annotation, *, expanded_def=False) -> str:
        names = [v.split(":")[0].split("=")[0].split("#")[0].strip() for v in free_vars]
        names = [n for n in names if n != "self"]
        sig = self.signature
        values = ", ".join(p.name for p in sig.parameters if p.kind != VAR_KEYWORD)
        extra = "kwargs" if sig.var_keywords else "{}"
        head = f"def {self._func_name}(self, {sig.text()}){maybe_return_annotation}:"
        call = f"tracebridge_bind(_tb_signature, ({values}{',' if values else ''}), {extra})"
        if not names:
            return f"{head}\n    {call}"
        return f"{head}\n    {', '.join(names)}, = {call}"

    def additional_globals(self) -> list[tuple[str, object]]:
        # Globals of the code, not attributes of the GraphModule: the code generator is
        # part of the graph, which a copy (copy.deepcopy) keeps. One object per name:
        # torch.fx names a global after the object, once.
        return [
            ("tracebridge_bind", tracebridge_bind),
            ("_tb_signature", self.signature),
            ("_tb_defaults", self.signature.defaults()),
        ]

    def process_inputs(self, *args):
        """Positional arguments of the signature to the graph's inputs (for
        ``fx.Interpreter``, which runs the graph rather than its code)."""
        params = [p for p in self.signature.parameters if p.kind != VAR_KEYWORD]
        rest = [p.default if p.has_default else NOT_PASSED for p in params[len(args) :]]
        values = [*args, *rest]
        return self.signature.bind(tuple(values), {})
