"""JSON as both readers of an artifact parse it, so that they can never disagree.

Python's ``json`` takes the last of two equal keys, accepts ``NaN`` and ``Infinity`` and a
byte-order mark; R's parser takes the first key and refuses the rest. An artifact's JSON
is read here with those differences closed: duplicate keys, non-finite constants, a BOM
and text that is not UTF-8 are refused, in Python and in R alike (``R/artifact-read.R``).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ArtifactError


def _pairs(where: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for key, value in pairs:
            if key in out:
                raise ArtifactError(
                    f"{where}: the key {key!r} appears twice in one object (readers could "
                    "take either value); the file was edited or is hostile"
                )
            out[key] = value
        return out

    return hook


def _constant(name: str):
    raise ValueError(f"{name} is not JSON")


def loads_strict(raw: bytes, where: str) -> Any:
    """Parse ``raw`` (UTF-8 JSON) strictly; every fault is an ArtifactError naming ``where``."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(
            f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    if text.startswith("\ufeff"):
        raise ArtifactError(f"{where} starts with a byte-order mark; write plain UTF-8")
    try:
        return json.loads(text, object_pairs_hook=_pairs(where), parse_constant=_constant)
    except RecursionError:
        raise ArtifactError(f"{where} nests too deeply to be read") from None
    except ValueError as exc:
        if isinstance(exc, ArtifactError):
            raise
        raise ArtifactError(f"{where} is not valid JSON ({exc})") from None
