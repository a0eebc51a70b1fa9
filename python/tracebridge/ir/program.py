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

FORMAT_VERSION = 1
OPSET_VERSION = 1

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}
DTYPE_SHORT = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "b8",
    "complex64": "c64",
    "complex128": "c128",
}
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

    def type_str(self) -> str:
        if self.kind != "Tensor":
            return self.kind
        short = DTYPE_SHORT.get(self.dtype or "", self.dtype or "?")
        dims = ", ".join(str(d) for d in (self.shape or []))
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

    @property
    def guards(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "prim.guard"]


@dataclass
class StateEntry:
    kind: str  # "parameter" | "buffer" | "constant"
    tensor: torch.Tensor


@dataclass
class Program:
    kind: str  # "function" | "module"
    methods: dict[str, Graph]
    state: dict[str, StateEntry] = field(default_factory=dict)
    dispatch: dict[str, dict[str, str]] = field(default_factory=dict)  # respect_mode
    training: bool = False
    module_classes: dict[str, str] = field(default_factory=dict)  # path -> class name
    meta: dict[str, Any] = field(default_factory=dict)


# --- literal <-> JSON -------------------------------------------------------------------
# Literals are encoded so that a JSON reader needs no Python: plain JSON for None, bool,
# int, finite float, str and lists; a one-key object for everything else.


def encode(obj: Any) -> Any:
    """Encode an argument (literal or Ref, nested) as JSON-able data."""
    if isinstance(obj, Ref):
        return {"ref": obj.id}
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {"float": repr(obj)}
    if isinstance(obj, list):
        return [encode(x) for x in obj]
    if isinstance(obj, tuple):
        return {"tuple": [encode(x) for x in obj]}
    if isinstance(obj, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in obj.items()]}
    if isinstance(obj, slice):
        return {"slice": [encode(obj.start), encode(obj.stop), encode(obj.step)]}
    if obj is Ellipsis:
        return {"ellipsis": True}
    if isinstance(obj, torch.dtype):
        return {"dtype": DTYPE_NAMES[obj]}
    if isinstance(obj, torch.device):
        return {"device": str(obj)}
    if isinstance(obj, torch.memory_format):
        return {"memory_format": str(obj).replace("torch.", "")}
    if isinstance(obj, torch.layout):
        return {"layout": str(obj).replace("torch.", "")}
    if isinstance(obj, complex):
        return {"complex": [obj.real, obj.imag]}
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
    raise ValueError(f"unknown literal tag {tag!r}")


def refs_in(obj: Any):
    """Yield every Ref inside a (nested) argument."""
    if isinstance(obj, Ref):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from refs_in(x)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from refs_in(k)
            yield from refs_in(v)
    elif isinstance(obj, slice):
        yield from refs_in((obj.start, obj.stop, obj.step))


def value_to_json(v: Value) -> dict:
    data = {"id": v.id, "kind": v.kind}
    if v.kind == "Tensor":
        data["dtype"] = v.dtype
        data["shape"] = list(v.shape or [])
    if v.name:
        data["name"] = v.name
    return data


def value_from_json(d: dict) -> Value:
    return Value(
        id=d["id"], kind=d["kind"], dtype=d.get("dtype"), shape=d.get("shape"), name=d.get("name")
    )


def graph_to_json(g: Graph) -> dict:
    return {
        "arg_names": g.arg_names,
        "inputs": [value_to_json(v) for v in g.inputs],
        "in_spec": g.in_spec,
        "nodes": [
            {
                "op": n.op,
                "args": encode(list(n.args)),
                "kwargs": {k: encode(v) for k, v in n.kwargs.items()},
                "outputs": [value_to_json(v) for v in n.outputs],
                "out_spec": n.out_spec,
                "loc": n.loc,
            }
            for n in g.nodes
        ],
        "outputs": encode(list(g.outputs)),
        "out_spec": g.out_spec,
    }


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
    )
