"""The artifact: one file (a ZIP of ``program.json`` and ``tensors.safetensors``), read and
written here and nowhere else."""

from .archive import (
    check_document,
    describe,
    open_artifact,
    parse_safetensors,
    program_from_json,
    program_to_json,
    read,
    read_json,
    safetensors_bytes,
    verify,
    write,
)
from .container import PROGRAM_MEMBER, TENSORS_MEMBER
from .weights import WeightsArg

__all__ = [
    "PROGRAM_MEMBER",
    "TENSORS_MEMBER",
    "check_document",
    "describe",
    "open_artifact",
    "parse_safetensors",
    "program_from_json",
    "program_to_json",
    "read",
    "read_json",
    "safetensors_bytes",
    "verify",
    "write",
    "WeightsArg",
]
