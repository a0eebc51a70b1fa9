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

from ..errors import ArtifactError


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
    # op-set 10: the unsigned and 8-bit float dtypes that safetensors stores (fp8 weight
    # storage, token ids kept as uint16/uint32), and complex32, which it does not: a graph
    # may compute in complex32, but no state of that dtype can be saved (as complex128).
    DType("uint16", "u16", "U16", 2, "integer", torch.uint16),
    DType("uint32", "u32", "U32", 4, "integer", torch.uint32),
    DType("uint64", "u64", "U64", 8, "integer", torch.uint64),
    DType("float8_e4m3fn", "f8e4m3fn", "F8_E4M3", 1, "floating", torch.float8_e4m3fn),
    DType("float8_e5m2", "f8e5m2", "F8_E5M2", 1, "floating", torch.float8_e5m2),
    DType("float8_e4m3fnuz", "f8e4m3fnuz", "F8_E4M3FNUZ", 1, "floating", torch.float8_e4m3fnuz),
    DType("float8_e5m2fnuz", "f8e5m2fnuz", "F8_E5M2FNUZ", 1, "floating", torch.float8_e5m2fnuz),
    DType("complex32", "c32", None, 4, "complex", torch.complex32),
)
# The op-set version each dtype appeared in, for those added after the first (as ops.py's
# SINCE for ops); dtypes.json carries it as ``since`` on those rows. A file of an older
# op-set version names none of them: its writer knew no such dtype.
SINCE = {
    name: 10
    for name in "uint16 uint32 uint64 float8_e4m3fn float8_e5m2 float8_e4m3fnuz "
    "float8_e5m2fnuz complex32".split()
}

BY_NAME = {d.name: d for d in TABLE}
DTYPE_NAMES = {d.torch: d.name for d in TABLE}  # torch.dtype -> name
DTYPES = {d.name: d.torch for d in TABLE}  # name -> torch.dtype
DTYPE_SHORT = {d.name: d.short for d in TABLE}
ST_CODES = {d.name: d.safetensors for d in TABLE if d.safetensors}  # name -> "F32"
FROM_ST = {code: name for name, code in ST_CODES.items()}
ITEMSIZE = {d.name: d.itemsize for d in TABLE}
KIND = {d.name: d.kind for d in TABLE}


class UnsupportedDtypeError(ArtifactError):
    """A tensor has a dtype that the artifact format does not name."""


def name_of(dtype: torch.dtype, what: str) -> str:
    """The file's name of ``dtype``, or an error naming ``what`` has it (``"state 'w'"``,
    ``"input 'x'"``) and the dtypes the format holds, never a bare KeyError.

    >>> name_of(torch.float8_e4m3fn, "state 'w8'")
    'float8_e4m3fn'
    """
    found = DTYPE_NAMES.get(dtype)
    if found is None:
        raise UnsupportedDtypeError(
            f"{what} has dtype {str(dtype).replace('torch.', '')}, which the tracebridge "
            f"artifact format does not name (it names {', '.join(BY_NAME)}); convert it "
            "before tracing or saving (.to(torch.float32), say), or keep it in process"
        )
    return found


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
            **({"since": SINCE[d.name]} if d.name in SINCE else {}),
        }
        for d in TABLE
    }
