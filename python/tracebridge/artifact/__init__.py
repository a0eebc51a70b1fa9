"""The artifact: one file (a ZIP of ``program.json`` and ``tensors.safetensors``), read and
written here and nowhere else. ``archive`` holds the container and the JSON codec."""

from .archive import (
    PROGRAM_MEMBER,
    TENSORS_MEMBER,
    check_document,
    parse_safetensors,
    program_from_json,
    program_to_json,
    read,
    read_json,
    safetensors_bytes,
    write,
)

__all__ = [
    "PROGRAM_MEMBER",
    "TENSORS_MEMBER",
    "check_document",
    "parse_safetensors",
    "program_from_json",
    "program_to_json",
    "read",
    "read_json",
    "safetensors_bytes",
    "write",
]
