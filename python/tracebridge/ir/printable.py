"""Text from a file, made safe to print: the one escaping function of every printer.

A field of an artifact (``producer.version``, a node's ``loc``, a guard's description, a
name) is text from whoever wrote the file. Printed raw, a control character drives the
terminal (ESC starts an escape sequence, U+009B is a one-character CSI, BEL rings) and a
bidirectional mark makes text read differently from what it is (U+202E reverses it). Every
printer of file text (``.graph``, ``tracebridge inspect``, DOT and SVG pictures) passes
the text through :func:`printable`; R's ``printable()`` (``R/graph-print.R``) escapes the
same characters the same way, so both print the same text (SPEC section 13).
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; the bidirectional marks, embeddings, overrides and isolates.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character and bidirectional mark written as an escape
    (``\\n``, ``\\x1b``, ``\\x9b``, ``\\u202e``), as Python's ``repr`` writes them; other text is
    unchanged.

    >>> printable("1.0\\x1b[2J\\u202etxt.exe")
    '1.0\\\\x1b[2J\\\\u202etxt.exe'
    """
    return UNSAFE.sub(_escape, text) if UNSAFE.search(text) else text
