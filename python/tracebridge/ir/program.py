"""The IR: a Program of named methods, each a Graph of Nodes over typed SSA Values.

Note: the data model, in one breath (compare torch.fx's Node):
  * a ``Value`` is a typed SSA atom: an ``id`` and a type (``Tensor`` with dtype and
    example shape, or a scalar kind: ``int``, ``float``, ``bool``, ``dtype``, ``device``).
    Names are made only when printing, so printed graphs are stable and diff well.
  * a ``Node`` is ``(op, args, kwargs, outputs, out_spec, loc)``: ``op`` is a canonical
    name from the op set, ``args``/``kwargs`` hold literals and ``Ref``s to earlier Values,
    exactly as the traced code passed them (aliases folded), and ``out_spec`` says how the
    op's Python result splits into the output Values.
  * three ops are structural (``prim.*``): ``prim.state`` reads a parameter, buffer or
    constant by name; ``prim.guard`` checks an assumption of the trace; ``prim.getitem``
    is not needed: multi-output ops unpack through ``out_spec``.
  * a ``Graph`` has inputs (leaves of the flattened arguments, ``in_spec``), nodes in
    execution order, outputs (``Ref``s or literals, ``out_spec``).
  * a ``Program`` has methods, state metadata, and metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from . import dtypes
from .dtypes import DTYPE_NAMES, DTYPE_SHORT, DTYPES  # noqa: F401 (re-exported)
from .ops import OPSET_VERSION  # noqa: F401 (re-exported)

# Format 2 (this version): mode binding, the source language and the backend partition are
# fields of the program; ``meta`` is display-only. Readers accept format 1 (see artifact/).

FORMAT_VERSION = 2
MEMORY_FORMATS = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "preserve_format": torch.preserve_format,
    "channels_last_3d": torch.channels_last_3d,
}
LAYOUTS = {"strided": torch.strided}


@dataclass(frozen=True)
class Ref:
    """A reference to a Value by id, inside ``args``/``kwargs``/outputs."""

    id: int


@dataclass(frozen=True)
class GeneratorRef:
    """A reference, inside a random op's arguments, to a ``torch.Generator`` the program
    keeps (``Program.generators``) by name: ``torch.rand(n, generator=self.g)`` records
    ``GeneratorRef("g")``. The runtime passes the generator itself, so the graph draws
    from it as eager code does (shared_ir/SPEC.md, section 9, Generators)."""

    name: str


@dataclass
class Value:
    """A typed SSA value. ``kind`` is ``Tensor`` or a scalar kind; tensors carry a dtype
    name and an example shape whose entries are ints or symbols (``"s0"``) for inputs."""

    id: int
    kind: str = "Tensor"
    dtype: str | None = None
    shape: list | None = None
    name: str | None = None  # a hint for printing (inputs, state); never semantic
    example: list | None = field(default=None, compare=False, repr=False)  # trace-time sizes
    # Display only, never written: the shape in input symbols (``s0-2``), found by
    # runtime/shapes.py when a traced graph is first shown. ``shape`` keeps the sizes that
    # files carry, so saving never has to run the model to label them.
    labels: list | None = field(default=None, compare=False, repr=False)

    def type_str(self) -> str:
        if self.kind != "Tensor":
            return self.kind
        short = DTYPE_SHORT.get(self.dtype or "", self.dtype or "?")
        shape = self.labels if self.labels is not None else self.shape
        dims = ", ".join(str(d) for d in (shape or []))
        return f"{short}[{dims}]"


@dataclass
class Node:
    op: str
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    outputs: list[Value] = field(default_factory=list)
    out_spec: dict | None = None  # pytree spec of the op's result; None: no result used
    loc: str | None = None  # user's "file:line" that made this node


@dataclass
class Graph:
    """One traced method."""

    inputs: list[Value] = field(default_factory=list)
    in_spec: dict = field(default_factory=dict)  # spec of (args tuple, kwargs dict)
    nodes: list[Node] = field(default_factory=list)
    outputs: list = field(default_factory=list)  # Refs or literals
    out_spec: dict = field(default_factory=dict)
    arg_names: list[str] = field(default_factory=list)  # the traced callable's parameters
    # How many of ``arg_names`` lead as positional-only (``def f(x, /, y)``: 1), so that a
    # call passing one by keyword is refused as Python refuses it (runtime/binding.py)
    positional_only: int = 0
    # The defaults of the traced callable's parameters that the graph names (``arg_names``
    # and the keyword inputs): name -> a ``none``/``const`` spec, or None for a default no
    # file can hold (a tensor, an object). A call that leaves one out gets it, as in
    # Python (export/fx_signature.py); a parameter not here has no default.
    defaults: dict[str, dict | None] = field(default_factory=dict)
    # The keyword-only parameters with a ``none``/``const`` default that the example left
    # out (``def forward(self, x, *, bias=None)`` traced as ``m(x)``): name -> that spec.
    # A call that gives one its default is the traced call (runtime/binding.py), as a
    # positional-or-keyword parameter's in ``defaults`` is (prober21b M1).
    keyword_defaults: dict[str, dict] = field(default_factory=dict)
    # The keyword inputs that landed in the callable's ``**kwargs``, in the traced order:
    # the code may iterate them, so a call must pass them in this order (runtime/method.py)
    var_keywords: list[str] = field(default_factory=list)
    # The parameters given a dict (and the ``**kwargs`` parameter) whose code reads them
    # only by key (trace/key_reads.py): a call may pass their keys in any order
    any_order: list[str] = field(default_factory=list)
    # Groups of input positions (tensor leaves, traced order) that the example gave
    # distinct tensors and where the code gives other results for one tensor at them
    # (``if query is key:``; check/input_identity.py): a call passing one tensor at two
    # positions of a group is refused (runtime/method.py)
    distinct_inputs: list[list[int]] = field(default_factory=list)
    # loc -> the text of that source line, recorded at trace time for messages: runtimes
    # quote these and never open a file that a loaded graph names
    sources: dict[str, str] = field(default_factory=dict)
    # Graphs this graph's nodes name (the forward and backward of a custom autograd
    # function) while a trace is still being assembled; ``hoist_subgraphs`` moves them into
    # the program's methods. Never stored: in a file, every graph is a method.
    subgraphs: dict[str, Graph] = field(default_factory=dict, compare=False, repr=False)

    @property
    def guards(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "prim.guard"]

    def with_nodes(self, nodes: list[Node]) -> Graph:
        """The same method (inputs, outputs, specs, names, sources) computed by ``nodes``:
        what a rewrite that reorders, replaces or groups nodes gives back."""
        return Graph(
            inputs=self.inputs,
            in_spec=self.in_spec,
            nodes=nodes,
            outputs=self.outputs,
            out_spec=self.out_spec,
            arg_names=self.arg_names,
            positional_only=self.positional_only,
            defaults=self.defaults,
            keyword_defaults=self.keyword_defaults,
            var_keywords=self.var_keywords,
            any_order=self.any_order,
            distinct_inputs=self.distinct_inputs,
            sources=self.sources,
        )


@dataclass
class StateEntry:
    kind: str  # "parameter" | "buffer" | "constant"
    tensor: torch.Tensor
    # False for a buffer registered with ``persistent=False`` (a rotary embedding's
    # ``inv_freq``): left out of ``state_dict()``, so no checkpoint holds it, and a program
    # traced on the meta device must get its values elsewhere (artifact/weights.py).
    persistent: bool = True


@dataclass
class Program:
    kind: str  # "function" | "module"
    methods: dict[str, Graph]
    state: dict[str, StateEntry] = field(default_factory=dict)
    dispatch: dict[str, dict[str, str]] = field(default_factory=dict)  # respect_mode
    training: bool = False
    module_classes: dict[str, str] = field(default_factory=dict)  # path -> class name
    # path -> the module's ``extra_repr()`` (its settings: "1, 4, kernel_size=(3, 3)"), as
    # text for printing only: a loaded module prints like the original, and never runs it.
    module_reprs: dict[str, str] = field(default_factory=dict)
    # module path -> "torch.nn.modules.batchnorm.BatchNorm2d", for torch's own classes: a
    # loaded sub-module answers isinstance() as the original (api.ShownModule)
    module_types: dict[str, str] = field(default_factory=dict)
    # The language the traced code was written in: it fixes the index convention of the
    # graph's inputs (R code uses 1-based indices, Python 0-based).
    language: str = "python"
    # method -> {"training", "op", "loc"}: a method recorded in one mode whose other mode
    # records a different graph; calling it in the other mode raises GuardError.
    mode_bound: dict[str, dict] = field(default_factory=dict)
    # sub-module path -> its training flag when traced, for the sub-modules whose code reads
    # it: a call refuses where one was switched on its own since (runtime/module_tree.py).
    module_modes: dict[str, bool] = field(default_factory=dict)
    # The partition that tracebridge.compile embedded (backend, compiler args, subgraphs).
    backend: dict[str, Any] | None = None
    # method -> the names of its size-1 specialisations (check/specialise.py): graphs kept
    # beside it and tried in order when its guards refuse a call.
    specialised: dict[str, list[str]] = field(default_factory=dict)
    # Other names of a state tensor in the traced module's state_dict() (tied weights: a
    # language model's output layer sharing the embedding's matrix): other name -> state
    # name. Binding a checkpoint (load(weights=...)) accepts the tensor under either.
    aliases: dict[str, str] = field(default_factory=dict)
    # name -> the torch.Generator a random op draws from (``GeneratorRef``): one the traced
    # module keeps (named by its attribute path, ``noise.g``) or one the traced code
    # reaches otherwise (a global, a closure's: ``generator0``). In a trace made in this
    # process they are the code's own objects; in a loaded program, the file's copies.
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    # Display-only: nothing that runs may depend on it (shared_ir/SPEC.md).
    meta: dict[str, Any] = field(default_factory=dict)
    # Never written: whether this program was read from a file (artifact/archive.py). An
    # op that fails names the file as a possible cause only then: an in-process trace
    # has no file that could be corrupt or hostile.
    from_file: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self):
        hoist_subgraphs(self)


# --- graphs that nodes name -------------------------------------------------------------
# Note: a custom ``torch.autograd.Function`` is one node, ``prim.autograd_function``, whose
# keywords ``forward`` and ``backward`` name two graphs of the program's ``methods`` (as a
# size specialisation is a graph there too). They are reached only through that node,
# never called by name.

AUTOGRAD_FUNCTION = "prim.autograd_function"
GRAPH_KEYWORDS = ("forward", "backward")


def referenced_graphs(node: Node) -> list[str]:
    """The names of the graphs ``node`` runs (empty for every op but an autograd function)."""
    if node.op != AUTOGRAD_FUNCTION:
        return []
    return [node.kwargs[k] for k in GRAPH_KEYWORDS if isinstance(node.kwargs.get(k), str)]


def subgraph_names(program: Program) -> set[str]:
    """Every graph of ``program`` that a node runs: not a method a caller reaches by name."""
    return {
        name for g in program.methods.values() for n in g.nodes for name in referenced_graphs(n)
    }


def hoist_subgraphs(program: Program) -> None:
    """Move the graphs that traced nodes name (``Graph.subgraphs``) into the program's
    methods, at every depth. Their names are made from their structure by the tracer, so
    the same function traced twice the same way is one graph."""
    pending = list(program.methods.values())
    while pending:
        graph = pending.pop()
        for name, sub in graph.subgraphs.items():
            if name not in program.methods:
                program.methods[name] = sub
                pending.append(sub)
        graph.subgraphs = {}


# --- literal <-> JSON -------------------------------------------------------------------
# Literals are encoded so that a JSON reader needs no Python: plain JSON for None, bool,
# int, finite float, str and lists; a one-key object for everything else.


def _encode_container(obj: Any, children: list) -> Any:
    if isinstance(obj, list):
        return children
    if isinstance(obj, dict):
        return {"dict": [list(pair) for pair in children]}
    if isinstance(obj, slice):
        return {"slice": children}
    return {"tuple": children}


def encode(obj: Any) -> Any:
    """Encode an argument (literal or Ref, nested) as JSON-able data."""
    return fold_literal(obj, _encode_leaf, _encode_container)


def _encode_leaf(obj: Any) -> Any:
    if isinstance(obj, Ref):
        return {"ref": obj.id}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {"float": repr(obj)}
    if obj is Ellipsis:
        return {"ellipsis": True}
    if isinstance(obj, torch.dtype):
        return {"dtype": dtypes.name_of(obj, "a dtype argument")}
    if isinstance(obj, torch.device):
        return {"device": str(obj)}
    if isinstance(obj, torch.memory_format):
        return {"memory_format": str(obj).replace("torch.", "")}
    if isinstance(obj, torch.layout):
        return {"layout": str(obj).replace("torch.", "")}
    if isinstance(obj, complex):
        return {"complex": [obj.real, obj.imag]}
    if isinstance(obj, GeneratorRef):
        return {"generator": obj.name}
    raise TypeError(f"cannot store a literal of type {type(obj).__name__}: {obj!r}")


def decode(data: Any) -> Any:
    """Inverse of :func:`encode`."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(x) for x in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"malformed literal {data!r}")
    ((tag, body),) = data.items()
    if tag == "ref":
        return Ref(int(body))
    if tag == "float":
        if body not in ("inf", "-inf", "nan"):
            raise ValueError(f"malformed float literal {body!r}")
        return float(body)
    if tag == "tuple":
        return tuple(decode(x) for x in body)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in body}
    if tag == "slice":
        return slice(*(decode(x) for x in body))
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        if body not in DTYPES:
            raise ValueError(f"unknown dtype {body!r}")
        return DTYPES[body]
    if tag == "device":
        return torch.device(body)
    if tag == "memory_format":
        return MEMORY_FORMATS[body]
    if tag == "layout":
        return LAYOUTS[body]
    if tag == "complex":
        return complex(*body)
    if tag == "generator":
        return GeneratorRef(str(body))
    raise ValueError(f"unknown literal tag {tag!r}")


# --- the one traversal of argument literals --------------------------------------------
# Note: arguments nest lists, tuples, dicts (keys and values) and slices around leaves
# (Refs, numbers, strings, dtypes...). Every walker of arguments (the JSON codec, the
# runtimes, the printer, the checks) goes through ``fold_literal``, so a new container kind
# is added here once and reaches every stage.

LITERAL_CONTAINERS = (list, tuple, dict, slice)


def fold_literal(obj: Any, leaf, container):
    """Fold a nested argument bottom-up: ``leaf(x)`` for each leaf, and
    ``container(obj, children)`` for each list/tuple/slice (children: the folded items, for a
    slice its start, stop, step) and dict (children: folded ``(key, value)`` pairs)."""
    if isinstance(obj, (list, tuple)):
        return container(obj, [fold_literal(x, leaf, container) for x in obj])
    if isinstance(obj, dict):
        return container(
            obj,
            [
                (fold_literal(k, leaf, container), fold_literal(v, leaf, container))
                for k, v in obj.items()
            ],
        )
    if isinstance(obj, slice):
        parts = (obj.start, obj.stop, obj.step)
        return container(obj, [fold_literal(x, leaf, container) for x in parts])
    return leaf(obj)


def rebuild(obj: Any, children: list) -> Any:
    """The ``container`` of :func:`fold_literal` that rebuilds the same kind of container."""
    if isinstance(obj, list):
        return children
    if isinstance(obj, dict):
        return dict(children)
    if isinstance(obj, slice):
        return slice(*children)
    if type(obj) is tuple:
        return tuple(children)
    return type(obj)(*children)  # a named tuple


def map_literal(obj: Any, leaf) -> Any:
    """``obj`` with every leaf ``x`` replaced by ``leaf(x)`` (containers rebuilt)."""
    return fold_literal(obj, leaf, rebuild)


def leaves_of(obj: Any) -> list:
    """Every leaf of a nested argument, in order."""
    out: list = []
    fold_literal(obj, out.append, lambda _obj, _children: None)
    return out


def refs_in(obj: Any) -> list[Ref]:
    """Every Ref inside a (nested) argument, in order: ``leaves_of`` filtered, walked here
    without building the list of leaves (the tracer asks this of every node it records)."""
    out: list[Ref] = []
    _collect_refs(obj, out)
    return out


# Leaves that hold no Ref, skipped without a call (a node's arguments are mostly these).
_PLAIN_LEAVES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device})


def _collect_refs(obj: Any, out: list) -> None:
    # The containers of fold_literal, in its order (dict: key, then value; slice: start,
    # stop, step); test_program checks the two agree. Exact types first: the tracer and
    # every pass ask this of each node.
    kind = type(obj)
    if kind is Ref:
        out.append(obj)
    elif kind is list or kind is tuple or isinstance(obj, (list, tuple)):
        for item in obj:
            item_kind = type(item)
            if item_kind is Ref:
                out.append(item)
            elif item_kind not in _PLAIN_LEAVES:
                _collect_refs(item, out)
    elif kind is dict or isinstance(obj, dict):
        for key, value in obj.items():
            _collect_refs(key, out)
            _collect_refs(value, out)
    elif isinstance(obj, slice):
        _collect_refs(obj.start, out)
        _collect_refs(obj.stop, out)
        _collect_refs(obj.step, out)
    elif isinstance(obj, Ref):
        out.append(obj)


def value_to_json(v: Value, what: str = "a value of the graph") -> dict:
    data = {"id": v.id, "kind": v.kind}
    if v.kind == "Tensor":
        if v.dtype not in DTYPES:  # the tracer keeps a dtype the format lacks as torch's name
            dtypes.name_of(getattr(torch, str(v.dtype).replace("torch.", ""), None), what)
        data["dtype"] = v.dtype
        data["shape"] = list(v.shape or [])
        if v.example is not None:  # an input's sizes at trace time: labels shapes on display
            data["example"] = list(v.example)
    if v.name:
        data["name"] = v.name
    return data


def value_from_json(d: dict) -> Value:
    return Value(
        id=d["id"],
        kind=d["kind"],
        dtype=d.get("dtype"),
        shape=d.get("shape"),
        name=d.get("name"),
        example=d.get("example"),
    )


def graph_to_json(g: Graph) -> dict:
    return {
        "arg_names": g.arg_names,
        "inputs": [value_to_json(v, f"input {v.name or v.id!r}") for v in g.inputs],
        "in_spec": g.in_spec,
        "nodes": [_node_to_json(n) for n in g.nodes],
        "outputs": encode(list(g.outputs)),
        "out_spec": g.out_spec,
        **({"positional_only": g.positional_only} if g.positional_only else {}),
        **({"defaults": dict(g.defaults)} if g.defaults else {}),
        **({"keyword_defaults": dict(g.keyword_defaults)} if g.keyword_defaults else {}),
        **({"var_keywords": list(g.var_keywords)} if g.var_keywords else {}),
        **({"any_order": list(g.any_order)} if g.any_order else {}),
        **(
            {
                "distinct_inputs": [
                    list(x) if isinstance(x, (list, tuple)) else x for x in g.distinct_inputs
                ]
            }
            if g.distinct_inputs
            else {}
        ),
        **({"sources": lines} if (lines := {k: v for k, v in g.sources.items() if v}) else {}),
    }


def _node_to_json(n: Node) -> dict:
    try:
        return {
            "op": n.op,
            "args": encode(list(n.args)),
            "kwargs": {k: encode(v) for k, v in n.kwargs.items()},
            "outputs": [value_to_json(v, f"the result of {n.op}") for v in n.outputs],
            "out_spec": n.out_spec,
            "loc": n.loc,
        }
    except dtypes.UnsupportedDtypeError as exc:
        where = f" (at {n.loc})" if n.loc else ""
        raise dtypes.UnsupportedDtypeError(
            f"{exc.args[0].replace('a dtype argument', f'an argument of {n.op}')}{where}"
        ) from None


def graph_from_json(d: dict) -> Graph:
    nodes = [
        Node(
            op=n["op"],
            args=decode(n["args"]),
            kwargs={k: decode(v) for k, v in n["kwargs"].items()},
            outputs=[value_from_json(v) for v in n["outputs"]],
            out_spec=n.get("out_spec"),
            loc=n.get("loc"),
        )
        for n in d["nodes"]
    ]
    return Graph(
        inputs=[value_from_json(v) for v in d["inputs"]],
        in_spec=d["in_spec"],
        nodes=nodes,
        outputs=decode(d["outputs"]),
        out_spec=d["out_spec"],
        arg_names=list(d.get("arg_names", [])),
        positional_only=d.get("positional_only", 0),
        defaults=dict(d.get("defaults", {})),
        keyword_defaults=_keyword_defaults(d.get("keyword_defaults")),
        var_keywords=list(d.get("var_keywords", [])),
        any_order=_names(d.get("any_order")),
        distinct_inputs=_groups(d.get("distinct_inputs")),
        sources=_sources(d.get("sources")),
    )


def _keyword_defaults(data) -> dict[str, dict]:
    """A graph's ``keyword_defaults``; older files have none, and a malformed entry is
    left out (a call giving that keyword is refused, as before; the checker reports it)."""
    if not isinstance(data, dict):
        return {}
    return {
        k: v
        for k, v in data.items()
        if isinstance(k, str) and isinstance(v, dict) and v.get("t") in ("none", "const")
    }


def _groups(data) -> list[list[int]]:
    """A graph's ``distinct_inputs``; older files have none (the checker reports a
    malformed one before this reads it)."""
    if not isinstance(data, list):
        return []
    return [[p for p in group if type(p) is int] for group in data if isinstance(group, list)]


def _names(data) -> list[str]:
    """A graph's ``any_order``; older files have none, and a malformed one frees nothing
    (a call in another order is refused, as before)."""
    if not isinstance(data, list):
        return []
    return [n for n in data if isinstance(n, str)]


def _sources(data) -> dict[str, str]:
    """A graph's ``sources``; older files have none, and a malformed table only loses
    message text (the checker reports it)."""
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
