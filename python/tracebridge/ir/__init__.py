"""The IR: what a traced program is, independent of how it was made or will run.

``program`` (the data model: Program, Graph, Node, Value, Ref and the literal codec),
``ops`` (the op table), ``pytree`` (nested inputs and outputs), ``printer`` (the text form).
Everything downstream (check, runtime, artifact, backends, front ends) speaks these types.
"""

from .program import (
    DTYPE_NAMES,
    DTYPE_SHORT,
    DTYPES,
    FORMAT_VERSION,
    LAYOUTS,
    MEMORY_FORMATS,
    OPSET_VERSION,
    GeneratorRef,
    Graph,
    Node,
    Program,
    Ref,
    StateEntry,
    Value,
    decode,
    encode,
    graph_from_json,
    graph_to_json,
    refs_in,
    value_from_json,
    value_to_json,
)

__all__ = [
    "DTYPES",
    "DTYPE_NAMES",
    "DTYPE_SHORT",
    "FORMAT_VERSION",
    "LAYOUTS",
    "MEMORY_FORMATS",
    "OPSET_VERSION",
    "Graph",
    "Node",
    "Program",
    "GeneratorRef",
    "Ref",
    "StateEntry",
    "Value",
    "decode",
    "encode",
    "graph_from_json",
    "graph_to_json",
    "refs_in",
    "value_from_json",
    "value_to_json",
]
