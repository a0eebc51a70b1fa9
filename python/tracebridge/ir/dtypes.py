"""The one dtype table: every dtype a file may name, with its spellings and properties.

Each row gives the name in ``program.json`` (``float32``), the short form printed in graph
types (``f32``), the safetensors code (``F32``; ``None`` where the format cannot store
it), the size of one element in bytes, and its kind (``floating``, ``complex``,
``integer``, ``bool``: a runtime checks the kind of an input, not its exact dtype).
``shared_ir/dtypes.json`` is generated from this table; R reads that file.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class DType(NamedTuple):
    name: str
    short: str
    safetensors: str | None
    itemsize: int
    kind: str
    torch: torch.dtype


TABLE: tuple[DType, ...] = (
    DType("float32", "f32", "F32", 4, "floating", torch.float32),
    DType("float64", "f64", "F64", 8, "floating", torch.float64),
    DType("float16", "f16", "F16", 2, "floating", torch.float16),
    DType("bfloat16", "bf16", "BF16", 2, "floating", torch.bfloat16),
    DType("int64", "i64", "I64", 8, "integer", torch.int64),
    DType("int32", "i32", "I32", 4, "integer", torch.int32),
    DType("int16", "i16", "I16", 2, "integer", torch.int16),
    DType("int8", "i8", "I8", 1, "integer", torch.int8),
    DType("uint8", "u8", "U8", 1, "integer", torch.uint8),
    DType("bool", "b8", "BOOL", 1, "bool", torch.bool),
    DType("complex64", "c64", "C64", 8, "complex", torch.complex64),
    # Version 1 of the format cannot store complex128 state (no safetensors code).
    DType("complex128", "c128", None, 16, "complex", torch.complex128),
)

BY_NAME = {d.name: d for d in TABLE}
DTYPE_NAMES = {d.torch: d.name for d in TABLE}  # torch.dtype -> name
DTYPES = {d.name: d.torch for d in TABLE}  # name -> torch.dtype
DTYPE_SHORT = {d.name: d.short for d in TABLE}
ST_CODES = {d.name: d.safetensors for d in TABLE if d.safetensors}  # name -> "F32"
FROM_ST = {code: name for name, code in ST_CODES.items()}
ITEMSIZE = {d.name: d.itemsize for d in TABLE}
KIND = {d.name: d.kind for d in TABLE}


def to_json() -> dict:
    """The table as ``shared_ir/dtypes.json`` holds it.

    >>> to_json()["float32"]
    {'short': 'f32', 'safetensors': 'F32', 'itemsize': 4, 'kind': 'floating'}
    """
    return {
        d.name: {
            "short": d.short,
            "safetensors": d.safetensors,
            "itemsize": d.itemsize,
            "kind": d.kind,
        }
        for d in TABLE
    }
