"""JSON as both readers of an artifact parse it, so that they can never disagree.

Python's ``json`` takes the last of two equal keys, accepts ``NaN`` and ``Infinity`` and a
byte-order mark; R's parser takes the first key and refuses the rest. An artifact's JSON
is read here with those differences closed: duplicate keys, non-finite constants, a BOM
and text that is not UTF-8 are refused, in Python and in R alike (``R/artifact-read.R``).

Note: the grammar (SPEC section 1.1) is RFC 8259 with the parts where two parsers may
read one text differently taken out, each refused with a message that names it:

* whitespace is space, tab, LF and CR only, and no other control character may appear
  raw (R's parser takes form feed and vertical tab for whitespace);
* an integer has at most 4,300 digits (Python's own limit, which a program may change:
  checked here whatever it is; R reads longer ones);
* a string holds no ``\\u0000`` (R strings cannot: two keys differing after it would be
  one key in R), no ``\\u001f`` (R's reader marks integers past 32 bits with it, so a
  string could pass for an integer there) and no lone surrogate escape (RFC 8259 leaves
  their meaning open; R reads two different ones as one character).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import ArtifactError

MAX_INT_DIGITS = 4300
# A control byte that is not JSON whitespace (tab, LF, CR): refused anywhere in the text.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_ESCAPED_BACKSLASH = re.compile(rb"\\\\")
_NUL = re.compile(rb"\\u0000")
_UNIT_SEPARATOR = re.compile(rb"\\u001[fF]")
_SURROGATE_PAIR = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


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


def _integer(where: str):
    def parse(token: str) -> int:
        if len(token.lstrip("-")) > MAX_INT_DIGITS:
            raise ArtifactError(
                f"{where} is not valid JSON for tracebridge (an integer of "
                f"{len(token.lstrip('-')):,} digits; at most {MAX_INT_DIGITS} digits are read)"
            )
        return int(token)

    return parse


def check_grammar(raw: bytes, where: str) -> None:
    """Refuse what RFC 8259 allows or leaves open but the two readers would read apart:
    control bytes other than JSON whitespace, ``\\u0000`` and lone surrogate escapes.
    (Integers of more than 4,300 digits are refused while parsing.)"""
    control = _CONTROL.search(raw)
    if control:
        raise ArtifactError(
            f"{where} is not valid JSON (control character 0x{control.group()[0]:02x} at byte "
            f"{control.start()}; JSON allows only space, tab, LF and CR between tokens)"
        )
    if b"\\u" not in raw:
        return
    # Escapes are read left to right: an escaped backslash is taken out first, so that the
    # text \\u0000 (a backslash, then "u0000") is not taken for the escape \u0000.
    text = _ESCAPED_BACKSLASH.sub(b"", raw)
    if _NUL.search(text):
        raise ArtifactError(
            f"{where} is not valid JSON for tracebridge (a string holds U+0000, written "
            "\\u0000, which R strings cannot hold)"
        )
    if _UNIT_SEPARATOR.search(text):
        raise ArtifactError(
            f"{where} is not valid JSON for tracebridge (a string holds U+001F, written "
            "\\u001f, which R's reader uses to mark integers past 32 bits)"
        )
    if _SURROGATE.search(_SURROGATE_PAIR.sub(b"", text)):
        raise ArtifactError(
            f"{where} is not valid JSON for tracebridge (a string holds a lone surrogate "
            "escape such as \\ud800, which is no character)"
        )


def loads_strict(raw: bytes, where: str) -> Any:
    """Parse ``raw`` (UTF-8 JSON) strictly; every fault is an ArtifactError naming ``where``."""
    raw = bytes(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(
            f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    if text.startswith("\ufeff"):
        raise ArtifactError(f"{where} starts with a byte-order mark; write plain UTF-8")
    check_grammar(raw, where)
    try:
        return json.loads(
            text,
            object_pairs_hook=_pairs(where),
            parse_constant=_constant,
            parse_int=_integer(where),
        )
    except RecursionError:
        raise ArtifactError(f"{where} nests too deeply to be read") from None
    except ValueError as exc:
        if isinstance(exc, ArtifactError):
            raise
        raise ArtifactError(f"{where} is not valid JSON ({exc})") from None
