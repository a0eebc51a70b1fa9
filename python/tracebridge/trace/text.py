"""Text made from traced numbers: a size formatted for a message stays general.

Note: formatting a size is not a decision.
  timm checks ``_assert(H % p == 0, f"Input height ({H}) should be divisible by ...")``:
  the f-string formats the traced ``H``. Fixing ``H`` there would tie the trace to the
  example's image size, though the text only ever reaches a message. So formatting a
  traced number (``str``, ``repr``, ``format``, f-strings, ``%s``, ``str.format``) gives
  its current value without a guard, and the text remembers where it came from:
  :class:`SymStr` records the guard when the text is used for control flow (compared,
  hashed, used as a dict key, tested with ``if`` or ``in``, parsed by ``int``, passed
  to an op).

  Python builds some text itself, out of our reach: an f-string with more than one
  part joins its pieces into a new plain ``str``, as do ``%`` and ``str.format`` with
  literal text around the field. That text cannot remember its origin, so the tracer
  reads the source expression that formats the number (the instruction's position in
  the caller's code, found in its AST): text that only reaches a message -- an argument
  of an assertion, a check, a warning, a log call, an exception, ``raise`` or the
  message of ``assert`` -- needs no guard; text going anywhere else is guarded where it
  is made, as before. ``'%d' % n`` reads the number in C without asking it: that text is
  never traced (nor guarded), as in eager Python.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import string
import sys
from functools import lru_cache
from typing import TYPE_CHECKING

from ..source import OWN_DIR

if TYPE_CHECKING:
    from .numbers import _Traced

# Callables whose string arguments are messages: matched against the called name (the
# last attribute or the plain name), lower-cased.
_MESSAGE_WORDS = (
    "assert",
    "check",
    "warn",
    "print",
    "log",
    "debug",
    "info",
    "error",
    "exception",
    "critical",
    "fatal",
    "fail",
)
_MESSAGE_SUFFIXES = ("Error", "Exception", "Warning")

# str methods whose result is more text made from the same value: it stays traced.
_TEXT_METHODS = (
    "__add__",
    "__mod__",
    "__rmod__",
    "__mul__",
    "__rmul__",
    "capitalize",
    "casefold",
    "center",
    "expandtabs",
    "format",
    "ljust",
    "lower",
    "lstrip",
    "replace",
    "rjust",
    "rstrip",
    "strip",
    "swapcase",
    "title",
    "upper",
    "zfill",
)
# str methods that read the text (a decision depends on what it says): guard first.
_READING_METHODS = (
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__hash__",
    "__contains__",
    "__len__",
    "__iter__",
    "__getitem__",
    "count",
    "encode",
    "endswith",
    "find",
    "index",
    "isalnum",
    "isalpha",
    "isascii",
    "isdecimal",
    "isdigit",
    "isidentifier",
    "islower",
    "isnumeric",
    "isprintable",
    "isspace",
    "istitle",
    "isupper",
    "join",
    "partition",
    "removeprefix",
    "removesuffix",
    "rfind",
    "rindex",
    "rpartition",
    "rsplit",
    "split",
    "splitlines",
    "startswith",
    "translate",
)


class SymStr(str):
    """Text formatted from traced numbers: reads as plain text, and records the guards on
    its sources (the numbers it shows) the first time a decision depends on it."""

    def __new__(cls, text: str, sources: tuple[_Traced, ...]):
        obj = str.__new__(cls, text)
        obj._sources = tuple(sources)
        obj._fixed = False
        return obj

    def fix(self) -> str:
        """Guard every number this text shows (once), and return the plain text."""
        if not self._fixed:
            self._fixed = True
            for source in self._sources:
                tracer = source._tracer
                if tracer.is_active():
                    kind = type(source._concrete()).__name__
                    tracer.specialize(
                        source, kind, reason="formatted into text that decided a branch"
                    )
        return str.__str__(self)

    def __str__(self):
        return self

    def __repr__(self):
        return SymStr(str.__repr__(self), self._sources)

    def __format__(self, spec):
        return SymStr(str.__format__(str.__str__(self), spec), self._sources)

    def __radd__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        return SymStr(other + str.__str__(self), _sources_of((other,)) + self._sources)

    def __bool__(self):
        return bool(self.fix())

    def __int__(self):
        return int(self.fix())

    def __float__(self):
        return float(self.fix())

    def __reduce__(self):
        return (str, (str.__str__(self),))


def _sources_of(args) -> tuple:
    found = []
    for arg in args:
        found.extend(getattr(arg, "_sources", ()))
    return tuple(found)


def _text_method(name: str):
    method = getattr(str, name)

    def traced(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        if result is NotImplemented or not isinstance(result, str):
            return result
        return SymStr(result, self._sources + _sources_of(args))

    traced.__name__ = name
    return traced


def _reading_method(name: str):
    method = getattr(str, name)

    def traced(self, *args, **kwargs):
        plain = self.fix()
        args = tuple(a.fix() if isinstance(a, SymStr) else a for a in args)
        return method(plain, *args, **kwargs)

    traced.__name__ = name
    return traced


for _name in _TEXT_METHODS:
    setattr(SymStr, _name, _text_method(_name))
for _name in _READING_METHODS:
    setattr(SymStr, _name, _reading_method(_name))


# --- where text goes: read from the caller's source ---------------------------------------


def formatted(sym: _Traced, text: str, depth: int = 2, frame=None) -> str:
    """The text of ``sym`` formatted by the caller ``depth`` frames up (or by ``frame``): a
    :class:`SymStr`, with a guard recorded now only if the caller builds it into text that
    cannot remember its origin and that is not a message."""
    tracer = sym._tracer
    if not tracer.is_active():
        return text
    frame = frame or sys._getframe(depth)
    if _text_is_lost(frame) and not frame.f_code.co_filename.startswith(OWN_DIR):
        tracer.specialize(
            sym,
            type(sym._concrete()).__name__,
            reason="formatted into text that may decide a branch",
        )
    return SymStr(text, (sym,))


def _text_is_lost(frame) -> bool:
    """Whether the text made at ``frame``'s current instruction may decide something the
    trace cannot see: it is joined into new text that does not reach a message."""
    code = frame.f_code
    positions = _positions(code)
    index = frame.f_lasti // 2
    if index >= len(positions):
        return True
    return _lost_at(code.co_filename, positions[index])


@lru_cache(maxsize=4096)
def _positions(code) -> tuple:
    """Each instruction's source span. Python 3.10 has none: every formatted size is then
    guarded where it is made, and every hash of a size is a decision, as before."""
    positions = getattr(code, "co_positions", None)
    return tuple(positions()) if positions is not None else ()


@lru_cache(maxsize=4096)
def _lost_at(filename: str, position: tuple) -> bool:
    tree = _parsed(filename)
    node = tree.get(position) if tree is not None else None
    if node is None:
        return True
    if _keeps_text(node):
        return False
    return not _reaches_message(node)


def _keeps_text(node: ast.AST) -> bool:
    """The expression's value is the object the number's ``__str__``/``__format__`` made."""
    if isinstance(node, ast.JoinedStr):
        return len(node.values) == 1
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("str", "repr", "format") and len(node.args) >= 1
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        # "{}".format(n) and "{:>4}".format(n) return the field's own text.
        template = node.func.value
        if node.func.attr == "format" and isinstance(template, ast.Constant):
            with contextlib.suppress(ValueError, TypeError):
                parts = list(string.Formatter().parse(template.value))
                return len(parts) == 1 and parts[0][0] == "" and parts[0][1] is not None
    return False


def _reaches_message(node: ast.AST) -> bool:
    """Walk up through text-building expressions to what consumes the text."""
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None:
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue, ast.BinOp, ast.Lambda)):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Call):
            if child is parent.func:  # "...{}".format(n): the call builds more text
                child, parent = parent, getattr(parent, "_tb_parent", None)
                continue
            if _is_message_call(parent.func):
                return True
            if isinstance(parent.func, ast.Attribute) and parent.func.attr in ("format", "join"):
                child, parent = parent, getattr(parent, "_tb_parent", None)
                continue
            return False
        if isinstance(parent, ast.keyword):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Attribute) and parent.attr in ("format", "join"):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Assert):
            return child is parent.msg
        return isinstance(parent, ast.Raise)
    return False


def _is_message_call(func: ast.AST) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    lowered = name.lower()
    return any(word in lowered for word in _MESSAGE_WORDS) or name.endswith(_MESSAGE_SUFFIXES)


@lru_cache(maxsize=256)
def _parsed(filename: str) -> dict | None:
    """Expression nodes of a source file by position, each knowing its parent."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    index = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child._tb_parent = parent
        if isinstance(parent, ast.expr):
            key = (parent.lineno, parent.end_lineno, parent.col_offset, parent.end_col_offset)
            index.setdefault(key, parent)
    return index
