"""Text made from traced numbers: a size formatted for a message stays general.

Note: formatting a size is not a decision.
  timm checks ``_assert(H % p == 0, f"Input height ({H}) should be divisible by ...")``:
  the f-string formats the traced ``H``. Fixing ``H`` there would tie the trace to the
  example's image size, though the text only ever reaches a message. So formatting a
  traced number (``str``, ``repr``, ``format``, f-strings, ``%s``, ``str.format``) gives
  its current value, with a guard only where the text may decide something out of the
  trace's sight. Where the text is the formatting expression's own value (``str(n)``,
  ``f"{n}"``, ``"{}".format(n)``), it remembers where it came from: :class:`SymStr`
  records the guard when a decision reads it (compared, hashed, a dict key, tested with
  ``if``, ``int()`` of it, one of its methods). But C code reads a ``str``'s characters
  without asking it (``re``, ``int(s, 10)``, ``"".join``, ``json``, ``"12".__eq__(s)``),
  and Python joins the pieces of an f-string, a ``%`` or a ``str.format`` with text
  around the field into new plain text that cannot remember. So the tracer reads the
  source expression that formats the number (the instruction's position in the caller's
  code, found in its AST) and follows the text up to what uses it (:func:`_verdict`):
  unguarded are text that only reaches a message -- an assertion, a warning, a log call,
  ``print``, a call named so whose result is dropped, ``raise``, the message of
  ``assert`` -- and remembering text whose every use guards as it reads; through a local
  variable, every read of it in the function counts; remembering text returned is judged
  by the caller's use of the call. Anything else (a container, an attribute, a call
  argument, a global) is guarded where it is made. A message raised or warned is read
  back only by a ``try`` or a ``with`` around it, here or in a caller: the call stack at
  the time says (:func:`_may_be_caught`). Text made by the message call itself
  (``print(n)``, ``print(x)``) or inside the standard library's ``logging`` and
  ``warnings`` (``log.info("%s", x)`` formats later, in ``logging``) is a message too.
  ``'%d' % n`` reads the number in C without asking it: that text cannot remember, and
  where it goes anywhere but to a message the number is guarded where it is read
  (trace/unseen_reads.py, with :func:`shown_only`). A log call, a warning or ``print``
  is a message only where what receives the text keeps nothing -- logging's own handlers
  writing to a real file, warnings' stock ``showwarning`` -- looked up when the text is
  made (trace/message_sinks.py). Text whose every use is a lookup or a store of a memo
  the tracer traces through (``key = f"{B}x{N}"``; ``if key not in self.masks``) is no
  decision either: the memo's entries are set aside for the recording, so that its
  lookups miss as a traced number's do (trace/caches.py's ``text_keyed_memo``).

  A tensor formatted as text (``str(x)``, ``repr``, ``format``, f-strings, ``%s``) shows
  its values: the text's source is then a :class:`TensorText`, which guards the tensor's
  values (``x.tolist()``) and dtype when the text decides; a 0-dim tensor formatted with
  ``format`` reads as its traced ``.item()`` (trace/conversions.py). Sources are anything
  with ``_tracer`` and ``_fix_text(reason)``: traced numbers and tensor texts.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import gc
import inspect
import linecache
import logging
import os
import re
import string
import sys
import threading
import types
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedOpError
from ..source import OWN_DIR
from .message_sinks import (
    describe_filter,
    formatted_for_showing,
    level_of_call,
    logger_named,
    loggers_keep_nothing,
    shown_warning_keeps_nothing,
    stream_out_of_reach,
    warning_ignored,
    warning_may_raise,
)

if TYPE_CHECKING:
    from .tracer import Tracer

# Words of a called name (the last attribute or the plain name, split at ``_`` and at
# capitals) that make a dropped call's text arguments messages (see _message_call).
_MESSAGE_WORDS = frozenset(
    """assert check warn warning warnings print log logger logging debug info error
    exception critical fatal fail""".split()
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


def _version_of(tensor: torch.Tensor) -> int:
    """The tensor's version counter, read by the tracer itself (not the user's read, which
    is refused: trace/conversions.py)."""
    with torch._C.DisableTorchFunction():
        return tensor._version


class TensorText:
    """A tensor whose values were formatted into text: the text's source. When the text
    decides, the tensor's values and dtype are guarded (once) at the deciding line."""

    __slots__ = ("_tracer", "_tensor", "_version", "_fixed")

    def __init__(self, tracer: Tracer, tensor: torch.Tensor):
        self._tracer, self._tensor = tracer, tensor
        self._version = _version_of(tensor)  # an in-place write after formatting is refused
        self._fixed = False

    def _fix_text(self, reason: str) -> None:
        if self._fixed:
            return
        self._fixed = True
        if _version_of(self._tensor) != self._version:
            raise UnsupportedOpError(
                f"text formatted from the traced tensor {self._tracer._name(self._tensor)} "
                f"decides a branch at {self._tracer.location() or 'unknown location'}, but "
                "the tensor was written in place after it was formatted: the trace cannot "
                "guard the values the text shows. Format the tensor where the text is used, "
                "or decide on the tensor itself (torch.where) rather than on its text"
            )
        self._tracer.guard_values(self._tensor, reason)


class SymStr(str):
    """Text formatted from traced values: reads as plain text, and records the guards on
    its sources (the numbers or tensors it shows) the first time a decision depends on it."""

    def __new__(cls, text: str, sources: tuple):
        obj = str.__new__(cls, text)
        obj._sources = tuple(sources)
        obj._fixed = False
        return obj

    def fix(self) -> str:
        """Guard every number this text shows (once), and return the plain text."""
        if not self._fixed:
            self._fixed = True
            for source in self._sources:
                if source._tracer.is_active():
                    source._fix_text("formatted into text that decided a branch")
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


def formatted(source, text: str, depth: int = 2, frame=None, obj=None) -> str:
    """The text of ``source`` (a traced number or a :class:`TensorText`) formatted by the
    caller ``depth`` frames up (or by ``frame``): a :class:`SymStr`, with a guard recorded
    now only if the caller builds it into text that cannot remember its origin and that is
    not a message.

    ``obj`` is the object formatted, for ``__repr__``: a container's repr (``str([n])``,
    ``f"{x.shape}"``) calls its items' ``__repr__`` from C and joins their text into new
    text, so the text is kept only where the caller's expression names ``obj`` itself.
    ``__str__`` and ``__format__`` are called on the object the expression formats."""
    return formatted_from((source,), text, frame or sys._getframe(depth), obj)


@lru_cache(maxsize=4096)
def _positions(code) -> tuple:
    """Each instruction's source span. Python 3.10 has none: every formatted size is then
    guarded where it is made, and every hash of a size is a decision, as before."""
    positions = getattr(code, "co_positions", None)
    return tuple(positions()) if positions is not None else ()


def _kept_expression(node: ast.AST) -> ast.AST | None:
    """The expression formatted, where ``node``'s value is the very object the formatted
    value's ``__str__``/``__format__``/``__repr__`` made; else None."""
    if isinstance(node, ast.JoinedStr):
        only = node.values[0] if len(node.values) == 1 else None
        if not isinstance(only, ast.FormattedValue):
            return None
        spec = only.format_spec
        if spec is not None and any(isinstance(v, ast.FormattedValue) for v in spec.values):
            return None  # f"{7:>{n}}": n is formatted into the spec, then 7 by it
        return only.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in ("str", "repr", "format") and len(node.args) >= 1:
            return node.args[0]
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        # "{}".format(n) and "{:>4}".format(n) return the field's own text.
        template = node.func.value
        if node.func.attr == "format" and isinstance(template, ast.Constant) and node.args:
            with contextlib.suppress(ValueError, TypeError):
                parts = list(string.Formatter().parse(template.value))
                if (
                    len(parts) == 1
                    and parts[0][0] == ""
                    and parts[0][1] is not None
                    and "{" not in (parts[0][2] or "")  # "{:{}}".format(7, n): n is a spec
                ):
                    return node.args[0]
    return None


def _names_object(frame, expr: ast.AST, obj) -> bool:
    """Whether ``expr`` is a name (or a name's plain attribute) bound to ``obj`` in
    ``frame``: read without running code (no property, no ``__getattr__``)."""
    if isinstance(expr, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if expr.id in scope:
                return scope[expr.id] is obj
        return False
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        for scope in (frame.f_locals, frame.f_globals):
            if expr.value.id in scope:
                found = getattr(scope[expr.value.id], "__dict__", {}).get(expr.attr, None)
                return found is obj
    return False


def _percent_format(node: ast.AST) -> bool:
    """Whether ``node`` is ``"literal" % ...``: text formatted by ``%``."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mod)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
    )


def _percent_arguments(node: ast.AST) -> bool:
    """Whether ``node`` is the tuple of arguments of ``"literal %s" % (...)``."""
    parent = getattr(node, "_tb_parent", None)
    return isinstance(node, ast.Tuple) and _percent_format(parent) and parent.right is node


def formatted_from(sources: tuple, text: str, frame, obj=None) -> str:
    """:func:`formatted` of text that shows several traced values (``torch.Size``)."""
    if not sources[0]._tracer.is_active():
        return text
    if frame.f_code.co_filename.startswith(OWN_DIR):
        return SymStr(text, sources)
    _REASONS.text = None
    verdict = _judged(frame, obj)
    memos = _memo_conditions(verdict) if verdict is not None else []
    if memos:
        verdict = _memo_verdict(verdict, memos, sources, frame)
    if verdict is None:
        reason = _reason("formatted into text that may decide a branch")
        for source in sources:
            source._fix_text(reason)
        for cache in _caches_given(frame):
            sources[0]._tracer.went_through(cache)
        return text  # guarded already: plain text, for any use (sys.intern, C APIs)
    if verdict & (READS | RETURNED):
        return SymStr(text, sources)  # a use that guards as it reads it
    # Only messages: plain text, so that a message hashed out of sight (the warnings
    # registry, transformers' warning_once cache) or given to torch._assert guards nothing.
    return text


def _memo_verdict(verdict: frozenset, memos: list, sources: tuple, frame) -> frozenset | None:
    """The verdict of text used as a key of memos (see :func:`_memo_use`): as if only
    messages took it where each memo is one the tracer traces through with text keys
    (trace/caches.py: its lookups then miss, as for a traced number); else a lookup that
    guards as it hashes remembering text, or None."""
    from .caches import text_keyed_memo  # caches reads this module's parsed sources

    rest = verdict - frozenset(memos)
    tracer = sources[0]._tracer
    plain = all(not isinstance(s, TensorText) for s in sources)
    made = _key_made_here(frame, tracer) if plain else None
    if made is not None and all(
        text_keyed_memo(frame, tuple(map(int, c.split(":")[1:5])), tracer, *made) for c in memos
    ):
        return rest
    if all(c.endswith(":kept") for c in memos):
        return rest | READS
    return None


def _size_read(expr: ast.AST) -> tuple[ast.AST, int] | None:
    """``(tensor expression, dim)`` of ``t.shape[k]`` or ``t.size(k)`` (``k`` a literal)."""
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Attribute)
        and expr.value.attr == "shape"
        and isinstance(expr.slice, ast.Constant)
        and type(expr.slice.value) is int
    ):
        return expr.value.value, expr.slice.value
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "size"
        and len(expr.args) == 1
        and not expr.keywords
        and isinstance(expr.args[0], ast.Constant)
        and type(expr.args[0].value) is int
    ):
        return expr.func.value, expr.args[0].value
    return None


def _key_made_here(frame, tracer) -> tuple[str, tuple] | None:
    """``(text, numbers)``: the whole text the expression being formatted at ``frame``
    makes (``f"{B}x{N}"``, ``"%sx%s" % (B, N)``, ``str(n)``) and the traced numbers it
    shows, where every field is a name (or a plain attribute) bound to a traced number, or
    a tensor's size by a literal dim, formatted without a conversion or with a literal
    spec: a memo's checks then know
    which sizes each key holds (trace/memo_tables.py). None where it cannot be told
    without running code."""
    position = _position_of(frame)
    node = (_parsed(frame.f_code.co_filename) or {}).get(position) if position else None
    parent = getattr(node, "_tb_parent", None)
    if isinstance(node, ast.JoinedStr) or _percent_format(node):
        pass  # f"{n}": the instruction's own span is the whole text's
    elif isinstance(parent, ast.FormattedValue) or _percent_arguments(parent):
        node = parent._tb_parent
    elif _percent_format(parent) and node is parent.right:
        node = parent
    elif isinstance(parent, ast.Call) and parent.args and node is parent.args[0]:
        node = parent  # str(n)
    numbers = []

    def number(expr):
        found = _callee(expr, frame.f_locals, frame.f_globals)
        sized = _size_read(expr)
        if sized is not None:  # x.shape[1], x.size(1): the tracer's number for that size
            tensor = _callee(sized[0], frame.f_locals, frame.f_globals)
            if isinstance(tensor, torch.Tensor) and tracer._lookup(tensor) is not None:
                found = tracer.size_of(tensor, sized[1])
        if not (hasattr(found, "_tracer") and hasattr(found, "_concrete")):
            raise LookupError
        numbers.append(found)
        return found._concrete()

    try:
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                    continue
                spec = value.format_spec
                if value.conversion != -1 or not (
                    spec is None or all(isinstance(v, ast.Constant) for v in spec.values)
                ):
                    return None
                spec_text = "".join(v.value for v in spec.values) if spec is not None else ""
                parts.append(format(number(value.value), spec_text))
            return "".join(parts), tuple(numbers)
        if _percent_format(node):
            items = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return node.left.value % tuple(number(item) for item in items), tuple(numbers)
        if isinstance(node, ast.Call) and _kept_expression(node) is node.args[0]:
            func = node.func
            if isinstance(func, ast.Name) and func.id == "str" and len(node.args) == 1:
                return str(number(node.args[0])), tuple(numbers)
    except (LookupError, TypeError, ValueError):
        return None
    return None


_MESSAGE_MODULES = (os.path.dirname(logging.__file__) + os.sep, warnings.__file__)
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

# --- verdicts: where text may go ------------------------------------------------------------
# Note: what the source shows and what the call stack adds.
#   The walk up from the expression that makes the text (:func:`_verdict`) gives ``None``
#   where the text may reach code that reads it out of the trace's sight (C code given a
#   plain or a remembering text, a container, an attribute, a global), else the
#   conditions under which it does not: none (it only reaches messages, or reads of a
#   remembering text that guard as they read), ``caught`` (it reaches an exception, an
#   assertion or a warning, read back only by a ``try`` or a ``with`` around it, here
#   or in a caller), ``returned`` (remembering text returned: the caller's use of the
#   call decides); ``reads`` marks a use that guards as it reads the remembering text
#   (text that only reaches messages is given as plain text). The conditions are judged
#   on the frames of the call stack when the text is made (:func:`_holds`).
FINE: frozenset = frozenset()
CAUGHT = frozenset({"caught:"})  # "caught:<kind>": kind "" when it is not known


def _caught(kind: str) -> frozenset:
    """The condition of a message that goes out as ``kind``: an exception's class name
    (``AssertionError``), ``Warning``, ``print``; "" for one that may be anything."""
    return frozenset({"caught:" + kind})


def _caught_kinds(verdict: frozenset) -> set[str]:
    return {c[len("caught:") :] for c in verdict if c.startswith("caught:")}


RETURNED = frozenset({"returned"})
READS = frozenset({"reads"})  # a use that guards as it reads: the text must remember
_RETURN_DEPTH = 8  # callers followed for text returned
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _judged(frame, obj=None) -> frozenset | None:
    """The verdict of the text made at ``frame``'s current instruction, where it holds on
    the call stack; None where the text may decide something the trace cannot see (see
    the note above :data:`FINE`)."""
    if frame.f_code.co_filename.startswith(_MESSAGE_MODULES):
        # logging formats its record's message late, inside its own code: a message where
        # the handlers it reaches keep nothing (trace/message_sinks.py)
        return FINE if formatted_for_showing(frame, _MESSAGE_MODULES) else None
    position = _position_of(frame)
    if position is None:
        return None
    verdict, formatted_expr = _fate_at(frame.f_code.co_filename, position)
    if (
        formatted_expr is not None
        and obj is not None
        and not _names_object(frame, formatted_expr, obj)
    ):
        # a container's repr joins its items' text in C: new text, as Python joins it
        verdict = _fate_at(frame.f_code.co_filename, position, joined=True)[0]
    return verdict if _holds(verdict, frame, position, 0) else None


def _position_of(frame) -> tuple | None:
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if index >= len(positions) or None in positions[index]:
        return None
    return positions[index]


def _holds(verdict: frozenset | None, frame, position: tuple, depth: int) -> bool:
    """Whether text whose walk gave ``verdict`` at ``frame`` (at ``position``) decides
    nothing out of the trace's sight, given the frames that called it."""
    if verdict is None:
        return False
    if depth and any(c.endswith(":joined") for c in _memo_conditions(verdict)):
        return False  # a caller's memo, judged only where the text is made
    kinds = _caught_kinds(verdict)
    if kinds and _may_be_caught(frame, position, kinds):
        return False
    filename = frame.f_code.co_filename
    for condition in verdict:
        if condition.startswith("sink:") and not _sink_holds(
            filename, condition, frame.f_locals, frame.f_globals, 0
        ):
            return False
    if "returned" in verdict:
        caller = _user_caller(frame)
        if caller is None:
            return True  # returned to the tracer: a result of the trace, guarded there
        if caller is _UNKNOWN or depth >= _RETURN_DEPTH:
            return False
        at = _position_of(caller)
        if at is None:
            return False
        node = (_parsed(caller.f_code.co_filename) or {}).get(at)
        if not isinstance(node, ast.Call):
            return False
        if _calls_directly(node, caller, frame.f_code):
            verdict = _verdict_of_call(caller.f_code.co_filename, at)
        elif _joins_a_map_of(node, caller, frame.f_code):
            verdict = _verdict_of_call(caller.f_code.co_filename, at, joined=True)
        else:
            return False  # C code in between (re.sub, sorted, map) takes the text
        return _holds(verdict, caller, at, depth + 1)
    return True


def _joins_a_map_of(call: ast.Call, caller, code) -> bool:
    """Whether ``call``, the caller's current instruction, is ``sep.join(map(f, ...))``
    with ``f`` the function of ``code``: join takes each text ``f`` returns and makes new
    text of them, which goes where the join goes (``log.info(", ".join(map(fmt, dims)))``)."""
    if not (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "join"
        and len(call.args) == 1
        and not call.keywords
        and isinstance(call.args[0], ast.Call)
    ):
        return False
    mapped = call.args[0]
    if _callee(mapped.func, caller.f_locals, caller.f_globals) is not map or not mapped.args:
        return False
    function = ast.Call(func=mapped.args[0], args=[], keywords=[])
    return _calls_directly(function, caller, code)


# --- message calls: what the callee is ---------------------------------------------------
# Note: a name is not a sink.
#   ``rec.log(text)`` reads as a log call, but ``rec`` may be the user's object that keeps
#   the text and compares it later. So a call taken for a message by its name is looked
#   up when the text is made, without running code (names in the frame, attributes in
#   ``__dict__`` or on the class): PyTorch's, ``warnings``' and ``logging``'s callables
#   and ``print`` are sinks; a Python function is one where the parameter the text is
#   given to only reaches messages in its source (timm's fallback ``_assert(cond, msg)``
#   asserts it); anything else (a C function, a class, a callable the look-up cannot
#   find without running code) is a sink only by one of the standard names.
# (tracebridge's: the stand-ins of torch's checks the trace puts in place.)
_SINK_MODULES = (
    "torch",
    "logging",
    "warnings",
    "_warnings",
    "transformers.utils.logging",
    "tracebridge",
)
_UNRESOLVED = object()


def _sink_holds(filename: str, condition: str, local_names, global_names, depth: int) -> bool:
    *span, argument = condition.split(":")[1:]
    call = (_parsed(filename) or {}).get(tuple(map(int, span)))
    if not isinstance(call, ast.Call):
        return False
    callee = _callee(call.func, local_names, global_names)
    if callee is _UNRESOLVED:
        return False  # get_helper().log(text): what it does with the text is not known
    if callee is print:
        return _printed_where_nothing_keeps(call)
    logged = logging_call_keeps_nothing(call, callee, local_names, global_names)
    if logged is not None:
        return logged
    if _from_module(callee, ("warnings", "_warnings")):
        return _warned_where_nothing_keeps(call, local_names, global_names, filename)
    if _from_sink_module(callee):
        return True
    function, bound = _python_function(callee)
    if function is None or depth >= 3 or argument == "?":
        return False
    code = function.__code__
    params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if argument.isdigit():
        at = int(argument) + bound
        parameter = params[at] if at < code.co_argcount else None
    else:
        parameter = argument if argument in params else None
    node = _def_of(code) if parameter is not None else None
    if node is None:
        return False
    verdict = _parameter_verdict(node, parameter)
    if verdict is None or "returned" in verdict or "reads" in verdict:
        return False
    if _memo_conditions(verdict):
        return False  # a key of the helper's own dict
    # Its own calls are looked up in its globals, with ``self`` bound where it is a method
    # and the modules it imports itself (``import torch`` in transformers' checks).
    own = _imported_in(node)
    if bound:
        own[params[0]] = callee.__self__
    return all(
        _sink_holds(code.co_filename, c, own, function.__globals__, depth + 1)
        for c in verdict
        if c.startswith("sink:")
    )


def _imported_in(function: ast.AST) -> dict:
    """The modules ``function`` imports by ``import name`` or ``import name as other``
    that are loaded already: the names they bind there (a look-up runs no code, so a
    module not loaded yet is not one)."""
    found = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module = sys.modules.get(alias.name)
                if module is not None and (alias.asname or "." not in alias.name):
                    found[alias.asname or alias.name] = module
    return found


_LOGGER = object()  # what logging.getLogger(...) returns, where the call is in the line


def _from_sink_module(callee) -> bool:
    return _from_module(callee, _SINK_MODULES)


def _from_module(callee, modules: tuple) -> bool:
    target = getattr(callee, "__func__", callee)
    target = getattr(target, "__wrapped__", target)  # transformers' warning_once (lru_cache)
    module = getattr(target, "__module__", None) or ""
    inside = any(module == m or module.startswith(m + ".") for m in modules)
    return inside and not isinstance(target, type)


_LOGGING_MODULES = ("logging", "transformers.utils.logging")


def _loggers_of(call: ast.Call, callee, local_names, global_names) -> list | bool | None:
    """The loggers a logging call logs on: the logger (or logging's adapter) whose method
    it is, the root for logging's functions (``logging.warning``); None where the source
    does not show which: every logger is then looked at; False for an adapter of the
    user's, which sees the text itself."""
    owner = getattr(callee, "__self__", None)
    if owner is None and isinstance(call.func, ast.Attribute):
        made = call.func.value
        owner = _callee(made, local_names, global_names)
        if owner is _LOGGER and not made.keywords and len(made.args) <= 1:
            name = _callee(made.args[0], local_names, global_names) if made.args else None
            if isinstance(made.args[0] if made.args else None, ast.Constant):
                name = made.args[0].value
            if name is None or isinstance(name, str):
                owner = logger_named(name)  # logging.getLogger(__name__).info(...)
    if isinstance(owner, logging.LoggerAdapter):
        if type(owner) is not logging.LoggerAdapter:
            return False  # an adapter of the user's: its own process() or log() sees the text
        owner = owner.logger
    if isinstance(owner, logging.Logger):
        return [owner]
    if owner is logging or isinstance(callee, types.FunctionType) and owner is None:
        return [logging.getLogger()]
    return None


def _logged_level(call: ast.Call, local_names, global_names) -> int:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "log" and call.args:
        level = _callee(call.args[0], local_names, global_names)
        if isinstance(call.args[0], ast.Constant):
            level = call.args[0].value
        return level if type(level) is int else 0
    return level_of_call(name)


def _printed_where_nothing_keeps(call: ast.Call) -> bool:
    """``print`` without ``file=`` writes to the current ``sys.stdout``, which the code
    may have replaced by a buffer it reads back; ``file=sys.stderr`` likewise."""
    where = next((k.value for k in call.keywords if k.arg == "file"), None)
    if where is None:
        return stream_out_of_reach(sys.stdout)
    if isinstance(where, ast.Attribute) and where.attr in ("stdout", "stderr"):
        return stream_out_of_reach(getattr(sys, where.attr))
    return True  # file=io.StringIO(): made in the call, read by no one


def _warned_where_nothing_keeps(call: ast.Call, local_names, global_names, filename) -> bool:
    """``warnings.warn(text, category)``: ignored by the filters, or shown where nothing
    keeps it (trace/message_sinks.py)."""
    category = next((k.value for k in call.keywords if k.arg == "category"), None)
    if category is None and len(call.args) > 1:
        category = call.args[1]
    kind = UserWarning if category is None else _callee(category, local_names, global_names)
    if not (isinstance(kind, type) and issubclass(kind, Warning)):
        kind = None
    warned_from = line = None  # the code that warns (in ``filename``), where no stacklevel
    level = next((k.value for k in call.keywords if k.arg == "stacklevel"), None)
    at_this_frame = level is None or (isinstance(level, ast.Constant) and level.value == 1)
    if at_this_frame and len(call.args) < 3:
        warned_from, line = global_names.get("__name__"), call.lineno
    head = _literal_head(call.args[0]) if call.args else ""
    raising = warning_may_raise(kind, warned_from, head, line)
    if raising is not None:
        # an exception a handler may read, or a pattern that picks by the text
        _REASONS.text = (
            f"formatted into the text of the warning at {filename}:{call.lineno}, which "
            f"the filter {describe_filter(raising)} may raise as an exception for the code "
            "to read"
        )
        return False
    return warning_ignored(kind) or shown_warning_keeps_nothing(sys._getframe(1))


def _literal_head(text: ast.AST) -> str:
    """The characters a message's text begins with whatever the numbers formatted into it
    are: its leading literal text (``f"rows {n}"``, ``"rows %d" % n``,
    ``"rows {}".format(n)``, ``"rows " + str(n)``); '' where the source does not show."""
    if isinstance(text, ast.Constant) and isinstance(text.value, str):
        return text.value
    if isinstance(text, ast.JoinedStr):
        head = ""
        for part in text.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            head += part.value
        return head
    if _percent_format(text):
        return text.left.value.split("%")[0]
    if isinstance(text, ast.BinOp) and isinstance(text.op, ast.Add):
        left = _literal_head(text.left)
        whole = isinstance(text.left, ast.Constant) and isinstance(text.left.value, str)
        return left + _literal_head(text.right) if whole else left
    if (
        isinstance(text, ast.Call)
        and isinstance(text.func, ast.Attribute)
        and text.func.attr == "format"
        and isinstance(text.func.value, ast.Constant)
        and isinstance(text.func.value.value, str)
    ):
        return text.func.value.value.split("{")[0]
    return ""


# Why text was taken to decide (a filter that may raise its warning), for the warning that
# says so: set by the judgement of a message call, taken where the text is fixed.
_REASONS = threading.local()


def _reason(default: str) -> str:
    reason = getattr(_REASONS, "text", None)
    _REASONS.text = None
    return reason or default


def _python_function(callee) -> tuple:
    """``(function, 1 if self is bound else 0)`` of a Python function or method."""
    if isinstance(callee, types.MethodType):
        return (
            (callee.__func__, 1) if isinstance(callee.__func__, types.FunctionType) else (None, 0)
        )
    if isinstance(callee, types.FunctionType):
        return callee, 0
    return None, 0


def _callee(expr: ast.AST, local_names, global_names):
    """The object ``expr`` names, read without running code (no property, no
    ``__getattr__``); a function found on an instance's class comes bound."""
    if isinstance(expr, ast.Name):
        for names in (local_names, global_names, vars(builtins)):
            if expr.id in names:
                return names[expr.id]
        return _UNRESOLVED
    if isinstance(expr, ast.Attribute):
        owner = _callee(expr.value, local_names, global_names)
        if owner is _UNRESOLVED:
            return _UNRESOLVED
        if isinstance(owner, types.ModuleType):
            return vars(owner).get(expr.attr, _UNRESOLVED)
        own = getattr(owner, "__dict__", None)
        if isinstance(own, dict) and expr.attr in own:
            return own[expr.attr]
        if owner is _LOGGER:
            return _LOGGER  # logging.getLogger(__name__).info: a logger's method
        found = inspect.getattr_static(owner, expr.attr, _UNRESOLVED)
        if isinstance(found, types.FunctionType) and not isinstance(owner, type):
            return types.MethodType(found, owner)
        if isinstance(found, (staticmethod, classmethod)):
            return found.__func__
        return found
    if isinstance(expr, ast.Call):
        made_by = _callee(expr.func, local_names, global_names)
        module = getattr(made_by, "__module__", None) or ""
        if module.startswith(("logging", "transformers.utils.logging")):
            return _LOGGER  # a logger made by logging.getLogger / transformers' get_logger
    return _UNRESOLVED


def _parameter_verdict(function: ast.AST, parameter: str) -> frozenset | None:
    """The verdicts of every read of ``parameter`` in ``function``, joined, as text that
    does not remember (a function that reads frames or rebinds it as global: None)."""
    return _reads_verdict(
        function, parameter, lambda node, following: _verdict(node, False, following)
    )


def _calls_directly(call: ast.Call, caller, code) -> bool:
    """Whether ``call``, the caller's current instruction, calls the function of ``code``
    itself (through its wrappers, or an ``nn.Module``'s call of its forward): not a C
    function that called it (``re.sub(pattern, convert, text)``), which takes what it
    returns."""
    callee = _callee(call.func, caller.f_locals, caller.f_globals)
    if isinstance(callee, torch.nn.Module):
        callee = type(callee).forward
    for _ in range(8):
        target = getattr(callee, "__func__", callee)
        if getattr(target, "__code__", None) is code:
            return True
        callee = getattr(target, "__wrapped__", None)
        if callee is None:
            return False
    return False


@lru_cache(maxsize=4096)
def _verdict_of_call(filename: str, position: tuple, joined: bool = False) -> frozenset | None:
    """Where the remembering text a call at ``position`` returns goes (``joined``: the
    new text it makes of the text it is given)."""
    node = (_parsed(filename) or {}).get(position)
    return _verdict(node, kept=not joined) if node is not None else None


_UNKNOWN = object()  # a caller whose use of the text cannot be read


def _user_caller(frame):
    """The frame that called ``frame``'s function, past ``nn.Module``'s call machinery:
    None where that is tracebridge (the traced function returned), ``_UNKNOWN`` where it
    is another frame of PyTorch."""
    caller = frame.f_back
    while caller is not None and caller.f_code.co_filename.startswith(_TORCH_DIR):
        if caller.f_code.co_name not in ("_call_impl", "_wrapped_call_impl"):
            return _UNKNOWN
        caller = caller.f_back
    if caller is None or caller.f_code.co_filename.startswith(OWN_DIR):
        return None
    return caller


def _may_be_caught(frame, position: tuple, kinds: set[str]) -> bool:
    """Whether a message of one of ``kinds`` sent at ``frame``'s current instruction may
    be caught and read: the instruction, or the call in a calling frame (PyTorch's and
    tracebridge's frames aside; the walk ends at tracebridge), is inside a catch that
    reads it (:func:`_inside_a_catch`)."""
    at: object = position
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(OWN_DIR):
            return False
        if not filename.startswith(_TORCH_DIR):
            if at is None:
                return True
            node = (_parsed(filename) or {}).get(at)
            if node is None or _inside_a_catch(node, kinds):
                return True
        frame = frame.f_back
        at = _position_of(frame) if frame is not None else None
    return False


def _inside_a_catch(node: ast.AST, kinds: set[str]) -> bool:
    """Whether a message of one of ``kinds`` (see :func:`_caught`) sent at ``node`` may
    be read back in its function: ``node`` sits in the body of a ``try`` with a handler
    that can catch that kind and reads what it caught, or of a ``with`` whose context
    records it (``catch_warnings(record=True)``, ``redirect_stdout``, ``pytest.raises``).
    Other context managers (``no_grad``, ``sdpa_kernel``, a lock, a file) read nothing."""
    if not kinds:
        return False
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None and not isinstance(parent, (*_DEFS, ast.Lambda, ast.ClassDef)):
        trying = isinstance(parent, ast.Try) or type(parent).__name__ == "TryStar"
        if trying and child in parent.body:
            for handler in parent.handlers:
                if _reads_the_exception(handler) and any(_catches(handler, k) for k in kinds):
                    return True
        if isinstance(parent, (ast.With, ast.AsyncWith)) and child in parent.body:
            for item in parent.items:
                if any(_records(item.context_expr, k) for k in kinds):
                    return True
        child, parent = parent, getattr(parent, "_tb_parent", None)
    return False


def _names_in(expr: ast.AST | None) -> list[str]:
    if isinstance(expr, ast.Tuple):
        return [name for e in expr.elts for name in _names_in(e)]
    if isinstance(expr, ast.Attribute):
        return [expr.attr]
    return [expr.id] if isinstance(expr, ast.Name) else ["?"]


def _catches(handler: ast.ExceptHandler, kind: str) -> bool:
    """Whether ``except <types>`` may catch a message sent as ``kind``."""
    if kind == "print":
        return False
    if handler.type is None:
        return True
    raised = getattr(builtins, kind, None) if kind not in ("", "Warning") else None
    if kind == "Warning":
        raised = Warning  # where a filter turns warnings into errors
    if not (isinstance(raised, type) and issubclass(raised, BaseException)):
        return True  # a class of the user's, or not known: any handler may catch it
    bases = {c.__name__ for c in raised.__mro__}
    for name in _names_in(handler.type):
        known = getattr(builtins, name, None)
        if name in bases or not (isinstance(known, type) and issubclass(known, BaseException)):
            return True  # one of its classes, or a class of the user's (a base, maybe)
    return False


# Context managers that record what passes through them, by the kind they record.
_RECORDING_CONTEXTS = {
    "print": frozenset({"redirect_stdout", "redirect_stderr"}),
    "Warning": frozenset({"catch_warnings", "warns", "assertWarns", "assertWarnsRegex"}),
}
_RAISES_CONTEXTS = frozenset({"raises", "assertRaises", "assertRaisesRegex"})


def _records(context: ast.AST, kind: str) -> bool:
    func = context.func if isinstance(context, ast.Call) else context
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    recorded = isinstance(context, ast.Call) and any(k.arg == "record" for k in context.keywords)
    if name == "catch_warnings" and not recorded:
        return False  # catch_warnings() alone puts the filters back: it records nothing
    if kind in _RECORDING_CONTEXTS:
        return name in _RECORDING_CONTEXTS[kind]
    return name in _RAISES_CONTEXTS


def _reads_the_exception(handler: ast.ExceptHandler) -> bool:
    """Whether an ``except`` clause may read what it caught: it names it (``as err``), or
    its body asks for it (``sys.exc_info()``, ``traceback``, ``logger.exception``)."""
    if handler.name is not None:
        return True
    return any(
        (isinstance(n, ast.Attribute) and n.attr in _READS_EXCEPTIONS)
        or (isinstance(n, ast.Name) and n.id in _READS_EXCEPTIONS)
        for n in ast.walk(handler)
    )


_READS_EXCEPTIONS = frozenset(
    "exc_info exception format_exc print_exc format_exception traceback raise_from".split()
)


@lru_cache(maxsize=4096)
def _fate_at(
    filename: str, position: tuple, joined: bool = False
) -> tuple[frozenset | None, ast.AST | None]:
    """``(verdict, the expression formatted)`` for the text made at ``position``: the
    expression where the text made is that expression's own (``str(n)``, ``f"{n}"``: it
    remembers), else None (Python joins it into new text). ``joined``: the verdict of
    the expression's value as new plain text, whatever it is."""
    tree = _parsed(filename)
    node = tree.get(position) if tree is not None else None
    if node is None:
        return (None, None)
    parent = getattr(node, "_tb_parent", None)
    operand = (  # the value of a field or a %-argument: Python formats it right there
        isinstance(parent, (ast.FormattedValue, ast.JoinedStr))
        or _percent_arguments(parent)
        or (_percent_format(parent) and node is parent.right)
    )
    if isinstance(node, ast.Call) and not operand:
        message = _message_call(node, strict=False)
        if message is not None:
            return (message, None)  # print(n): the call itself turns its argument into text
    formatted_expr = _kept_expression(node)
    if formatted_expr is None and isinstance(node, ast.Call) and not operand:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("format", "join")):
            return (None, None)  # made inside the callee, for its own use
    return (_verdict(node, kept=formatted_expr is not None and not joined), formatted_expr)


def _verdict(node: ast.AST, kept: bool, following: frozenset = frozenset()) -> frozenset | None:
    """Walk up from the expression ``node`` whose value is text to what uses it (see the
    note above :data:`FINE`). ``kept``: the text is the one made (a :class:`SymStr`,
    which guards as a comparison, a hash, a truth test, ``int`` or one of its methods
    reads it: the verdict then says ``reads``); Python joins text in C into new plain
    text, which only a message may take. ``following``: locals whose reads are being
    followed."""
    strict = bool(following)
    found = FINE  # READS once a truth test (``text or ...``) read the remembering text
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None:
        up = getattr(parent, "_tb_parent", None)
        reads = found | READS if kept else None  # where a use guards as it reads
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue)) or _percent_arguments(parent):
            kept = False  # joined into new text by Python
        elif isinstance(parent, ast.BinOp):
            # text + text, text * 3, text % args stay remembering text (SymStr's methods)
            same = isinstance(parent.op, (ast.Add, ast.Mult)) or (
                isinstance(parent.op, ast.Mod) and child is parent.left
            )
            kept = kept and same
        elif isinstance(parent, ast.Attribute):
            if not (isinstance(up, ast.Call) and up.func is parent):
                return None  # a method of the text kept for later
            if kept and parent.attr in _READING_METHODS:
                return reads  # the method guards as it reads
            more_text = kept and parent.attr in _TEXT_METHODS
            if not more_text and parent.attr not in ("format", "join"):
                return None
            kept = more_text
            child, parent = up, getattr(up, "_tb_parent", None)
            continue
        elif isinstance(parent, ast.Call):
            message = _message_call(parent, strict, child)
            if message is not None:
                return found | message
            func = parent.func
            name = getattr(func, "id", None)
            if (
                isinstance(func, ast.Attribute)
                and func.attr in _MEMO_METHODS
                and parent.args
                and child is parent.args[0]
                and not parent.keywords
            ):
                return found | _memo_use(func.value, kept)  # memo.get(key)
            alone = len(parent.args) == 1 and not parent.keywords and child is parent.args[0]
            if alone and name in ("int", "float", "bool", "len", "hash"):
                return reads  # SymStr's own __int__, __float__, __bool__, __len__, __hash__
            if name in _BLIND and parent.args and child is parent.args[0]:
                return found  # callable(msg), isinstance(msg, str): read no character
            if kept and name in ("str", "format") and parent.args and child is parent.args[0]:
                pass  # the same remembering text
            elif isinstance(func, ast.Attribute) and func.attr in ("format", "join"):
                kept = False  # "{}-{}".format(a, text): new text
            else:
                return None  # given to code that may read it unseen
        elif isinstance(parent, ast.keyword):
            if not isinstance(up, ast.Call) or _message_call(up, strict, parent) is None:
                func = getattr(up, "func", None)
                if not (isinstance(func, ast.Attribute) and func.attr == "format"):
                    return None
                kept = False
        elif isinstance(parent, ast.Lambda):  # torch._check(ok, lambda: f"...")
            message = _message_call(up, strict, parent) if isinstance(up, ast.Call) else None
            return found | message if message is not None and child is parent.body else None
        elif isinstance(parent, ast.Assert):
            return found | _caught("AssertionError") if child is parent.msg else reads
        elif isinstance(parent, ast.Raise):
            return found | CAUGHT
        elif isinstance(parent, ast.Compare):
            at = 0 if child is parent.left else 1 + parent.comparators.index(child)
            if at < len(parent.ops) and isinstance(parent.ops[at], (ast.In, ast.NotIn)):
                if at == 0 and len(parent.ops) == 1:
                    return found | _memo_use(parent.comparators[0], kept)  # key not in memo
                return None  # text in a container: a str container reads it in C
            return reads
        elif isinstance(parent, (ast.If, ast.While)):
            return reads if child is parent.test else None
        elif isinstance(parent, ast.IfExp):
            if child is parent.test:
                return reads
        elif isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            return reads
        elif isinstance(parent, ast.BoolOp):
            if reads is None:
                return None  # its truth decides
            found = reads
        elif isinstance(parent, ast.Subscript):
            if child is parent.slice:
                return found | _memo_use(parent.value, kept)  # memo[key], memo[key] = ...
            return reads  # an index of the text: read by SymStr
        elif isinstance(parent, ast.Dict):
            return reads if any(child is k for k in parent.keys) else None
        elif isinstance(parent, (ast.List, ast.Tuple, ast.Set)) or (
            isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp))
            and child is parent.elt
        ):
            container = _container_verdict(parent, following)  # "x".join([a, text])
            return None if container is None else found | container
        elif isinstance(parent, ast.Expr):
            return found  # made and dropped
        elif isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if child is not parent.value:
                return None
            kept = kept and not isinstance(parent, ast.AugAssign)
            local = _local_verdict(parent, kept, following)
            return None if local is None else found | local
        elif isinstance(parent, ast.Return):
            if kept:
                return found | RETURNED
            given = _giver_verdict(parent, following)
            return None if given is None else found | given
        else:
            return None
        child, parent = parent, up
    return None


# Builtins that read what an object is, never a character of text given them.
_BLIND = frozenset({"callable", "isinstance", "type", "id"})


def _giver_verdict(returned: ast.Return, following: frozenset) -> frozenset | None:
    """Text returned by a function without parameters defined inside another (a message
    given lazily: ``def msg_callable(): return msg``, handed to ``torch._check_with``, as
    transformers' ``torch_compilable_check`` does): where the nested function goes, every
    read of its name in the enclosing function judged as the text would be (a call of
    torch's checks takes it as a message). None elsewhere."""
    function = getattr(returned, "_tb_parent", None)
    if not isinstance(function, ast.FunctionDef) or function.name in following:
        return None
    arguments = function.args
    if arguments.args or arguments.posonlyargs or arguments.kwonlyargs or arguments.vararg:
        return None
    if arguments.kwarg or function.decorator_list:
        return None
    enclosing = getattr(function, "_tb_parent", None)
    while enclosing is not None and not isinstance(enclosing, _DEFS):
        enclosing = getattr(enclosing, "_tb_parent", None)
    if enclosing is None:
        return None
    return _reads_verdict(
        enclosing, function.name, lambda node, seen: _verdict(node, False, seen), following
    )


_MEMO_METHODS = frozenset({"get", "setdefault", "pop"})
_FUNCTOOLS_CACHE = functools._lru_cache_wrapper


def _caches_given(frame) -> list:
    """The functools caches that the text made at ``frame``'s current instruction is
    given to as an argument, directly (``mask(f"{B}x{N}")``) or through a local of the
    function (``key = f"{B}x{N}"; mask(key)``), found without running code. The text's
    numbers are guarded; the cache is still a cache: what the recording adds to it is
    taken out again (conversions.went_through)."""
    position = _position_of(frame)
    node = (_parsed(frame.f_code.co_filename) or {}).get(position) if position else None
    child, parent = node, getattr(node, "_tb_parent", None)
    while isinstance(parent, (ast.JoinedStr, ast.FormattedValue, ast.BinOp)):
        child, parent = parent, getattr(parent, "_tb_parent", None)
    calls = []
    if isinstance(parent, ast.Call) and any(a is child for a in parent.args):
        calls = [parent]
    elif (
        isinstance(parent, ast.Assign)
        and child is parent.value
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        function = parent
        while function is not None and not isinstance(function, (*_DEFS, ast.Lambda)):
            function = getattr(function, "_tb_parent", None)
        name = parent.targets[0].id
        calls = [
            n
            for n in (ast.walk(function) if function is not None else ())
            if isinstance(n, ast.Call)
            and any(isinstance(a, ast.Name) and a.id == name for a in n.args)
        ]
    found = []
    for call in calls:
        callee = _callee(call.func, frame.f_locals, frame.f_globals)
        if isinstance(callee, _FUNCTOOLS_CACHE):
            found.append(callee)
    return found


def _memo_use(container: ast.AST, kept: bool) -> frozenset:
    """The condition of text used as a key of ``container`` (``key in d``, ``d[key]``,
    ``d.get(key)``): a memo the tracer traces through, looked up when the text is made
    (:func:`_memo_verdict`); else, where the text remembers (``kept``), a lookup that
    guards as it hashes it, or a guard where it is made."""
    span = (container.lineno, container.end_lineno, container.col_offset, container.end_col_offset)
    return frozenset({"memo:" + ":".join(map(str, span)) + (":kept" if kept else ":joined")})


def _memo_conditions(verdict: frozenset) -> list[str]:
    return [c for c in verdict if c.startswith("memo:")]


def _message_call(call: ast.Call, strict: bool, child: ast.AST | None = None) -> frozenset | None:
    """The verdict of text given to ``call`` (as its argument ``child``; None: the call
    formats its arguments itself, ``print(n)``), where it only shows it: an exception
    built for ``raise`` there (one kept as an object may be read back), or a call named
    exactly as printing, logging, warning or asserting do (``_SINKS``), or -- not
    ``strict`` -- a call named with one of those words whose result is dropped
    (``check_shape(x, f"...")`` as a statement; ``catalog_scale(text)``, ``if
    check_cache(text)`` are not messages). Else None. A named call is only a candidate:
    the verdict's ``sink:`` condition has the callee looked up when the text is made
    (:func:`_sink_holds`), since ``rec.log(text)`` may keep the text. Every message may
    be caught: printed under ``redirect_stdout``, raised, warned."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name.endswith(_MESSAGE_SUFFIXES):
        raised = isinstance(getattr(call, "_tb_parent", None), ast.Raise)
        return _caught(name) if raised else None
    if name == "print" and not _printed_out_of_reach(call):
        return None  # print(text, file=buffer): the buffer may be read back
    if name not in _SINKS and name not in _TORCH_CHECKS:
        if strict or not isinstance(getattr(call, "_tb_parent", None), ast.Expr):
            return None
        if not {word.lower() for word in _WORD.findall(name)} & _MESSAGE_WORDS:
            return None
    if isinstance(child, ast.keyword):
        argument = child.arg or "?"
    else:
        at = [i for i, a in enumerate(call.args) if a is child]
        argument = str(at[0]) if at else "?"
    span = (call.lineno, call.end_lineno, call.col_offset, call.end_col_offset)
    return _message_kind(name) | {"sink:" + ":".join(map(str, span)) + ":" + argument}


def _message_kind(name: str) -> frozenset:
    """How a message call named ``name`` sends its text: raised in an AssertionError
    (``_assert``), warned, printed, logged (a handler's business: never caught), or not
    known (a check may raise anything)."""
    words = {word.lower() for word in _WORD.findall(name)}
    if "assert" in words:
        return _caught("AssertionError")
    if words & {"warn", "warning", "warnings"}:
        return _caught("Warning")
    if name == "print":
        return _caught("print")
    if words & {"log", "logger", "logging", "debug", "info", "error", "exception", "critical"}:
        return FINE
    return CAUGHT


def _printed_out_of_reach(call: ast.Call) -> bool:
    """Whether ``print`` writes where the code cannot read it back: standard output or
    error, or a file object made in the call itself (``file=io.StringIO()``)."""
    for keyword in call.keywords:
        if keyword.arg == "file":
            where = keyword.value
            return isinstance(where, ast.Call) or (
                isinstance(where, ast.Attribute) and where.attr in ("stdout", "stderr")
            )
    return True


_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# Where text kept in a local may go and still be only a message: the exact names of the
# calls that print, log, warn or assert (not any name that merely contains "check").
_SINKS = frozenset(
    "_assert _assert_async print debug info warning warn error exception critical fatal log".split()
)
# torch's checks, whose message (text, or a function giving it) is read only to raise:
# transformers' ``torch_compilable_check(cond, msg)`` hands its ``msg`` on to one in a
# ``lambda: msg`` (prober24b F1: 73 vision-language models format their image-token count
# so). Exact names too, and, as any named sink, taken only where the callee looked up
# when the text is made is torch's (:func:`_sink_holds`).
_TORCH_CHECKS = frozenset(
    """_check _check_with _check_value _check_type _check_index _check_not_implemented
    _check_tensor_all _check_tensor_all_with _check_is_size""".split()
)


# Names through which code reads a function's locals or frames by name, out of the reach of
# a look at its source: a function that mentions one keeps its text guarded.
_READS_FRAMES = frozenset(
    "locals vars eval exec globals _getframe currentframe f_locals tb_frame".split()
)


def _local_verdict(assign: ast.stmt, kept, following: frozenset) -> frozenset | None:
    """``name = <text>`` (or ``name += <text>``) inside a function: the verdicts of every
    read of the name, anywhere in the function (its nested functions too), joined; each
    read judged by :func:`_verdict` (``kept`` says whether the text remembers), or by
    ``kept`` itself where it is a function of the read and ``following`` (a container of
    text: :func:`_container_verdict`). Only a plain local can be followed so: a class
    attribute, a global or nonlocal, a name of a function that reads frames or locals by
    name give None, as does a read that reaches an exception or a warning inside a
    ``try`` or a ``with`` that may read it back."""
    targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        return None
    name = targets[0].id
    function = getattr(assign, "_tb_parent", None)
    while function is not None and not isinstance(function, _DEFS):
        if isinstance(function, (ast.ClassDef, ast.Lambda)):
            return None  # a class attribute: read as Key.msg, never as a name
        function = getattr(function, "_tb_parent", None)
    if function is None:
        return None  # a global: any code may read it
    if name in following:
        return FINE  # a cycle of locals passing the text on: judged by the reads outside it
    judge = kept if callable(kept) else (lambda node, seen: _verdict(node, kept, seen))
    return _reads_verdict(function, name, judge, following)


def _reads_verdict(function: ast.AST, name: str, judge, following=frozenset()):
    """Every read of the local ``name`` in ``function`` judged by ``judge(read,
    following)``, joined; None where one may decide out of sight, where the function
    rebinds the name as a global or reads frames or locals by name, or where a read's
    message is caught and read back there."""
    following = following | {name}
    verdict: frozenset = FINE
    for node in ast.walk(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return None
        if (isinstance(node, ast.Name) and node.id in _READS_FRAMES) or (
            isinstance(node, ast.Attribute) and node.attr in _READS_FRAMES
        ):
            return None
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            read = judge(node, following)
            if read is None or _inside_a_catch(node, _caught_kinds(read)):
                return None  # a message caught and read back (try/except, catch_warnings)
            verdict = verdict | read
    return verdict


def _container_verdict(container: ast.AST, following: frozenset) -> frozenset | None:
    """A list, tuple or set of texts (a display, a comprehension, a generator): only
    joined into new text (``"x".join(parts)``), directly or through a local, is it seen;
    the joined text then goes where its walk says."""
    parent = getattr(container, "_tb_parent", None)
    if (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Attribute)
        and parent.func.attr == "join"
        and len(parent.args) == 1
        and parent.args[0] is container
        and not parent.keywords
    ):
        return _verdict(parent, kept=False, following=following)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and container is parent.value:
        return _local_verdict(parent, _container_verdict, following)
    return None


def plain_text_verdict(node: ast.AST) -> frozenset | None:
    """Where the text ``node`` makes in C (``"%d" % n``, which cannot remember its
    number) goes, read from the source alone (:func:`_verdict`): None where it may
    decide (a key, a comparison, a test, ``len`` of it, a container, an argument), empty
    where it only reaches messages, else the conditions :func:`shown_only` judges when
    the code runs (a catch around it, what a log call's handlers keep, a memo)."""
    return _verdict(node, kept=False)


def shown_only(node: ast.AST, filename: str, scope, frame=None, called_from=None) -> bool:
    """Whether the text ``node`` (of ``filename``) makes in C only reaches messages that
    nothing catches or keeps, judged now. ``frame`` runs ``node``'s function; else that
    function is about to be called from ``called_from``'s current line (None: not
    known), with ``scope`` (``local_names``, ``global_names``) its names."""
    verdict = _verdict(node, kept=False)
    if verdict is None or _memo_conditions(verdict):
        return False  # "%d" % n as a memo's key: no text of the trace's to set apart
    kinds = _caught_kinds(verdict)
    if kinds and frame is not None:
        span = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)
        if _may_be_caught(frame, span, kinds):
            return False
    elif kinds and (
        _inside_a_catch(node, kinds)
        or called_from is None
        or _may_be_caught(called_from, _position_of(called_from), kinds)
    ):
        return False
    return all(
        _sink_holds(filename, c, scope.local_names, scope.global_names, 0)
        for c in verdict
        if c.startswith("sink:")
    )


def logging_call_keeps_nothing(call: ast.Call, callee, local_names, global_names) -> bool | None:
    """For a number given to a logging call (``log.info("%d rows", n)``, formatted in
    logging's C code later): whether every handler it reaches keeps nothing; None where
    ``callee`` (None: looked up here) is not logging's."""
    if callee is None:
        callee = _callee(call.func, local_names, global_names)
    if callee is not _LOGGER and not _from_module(callee, _LOGGING_MODULES):
        return None
    loggers = _loggers_of(call, callee, local_names, global_names)
    if loggers is False:
        return False
    return loggers_keep_nothing(loggers, _logged_level(call, local_names, global_names))


def ast_nodes(tree: ast.AST, link: bool = False) -> list[ast.AST]:
    """Every node of ``tree``, in ``ast.walk``'s order (breadth first), as a list; with
    ``link``, each child knows its parent (``_tb_parent``). Note: the first trace of a
    model reads the source of every module its code comes from (transformers: dozens of
    files of thousands of lines), where ``ast.walk``'s generators cost as much as the
    parse itself; this reads each node's fields once, in one loop."""
    nodes = [tree]
    append = nodes.append
    AST, list_ = ast.AST, list
    for parent in nodes:  # grows while it is read: breadth first
        for field in parent._fields:
            try:
                value = getattr(parent, field)
            except AttributeError:
                continue
            if isinstance(value, AST):
                if link:
                    value._tb_parent = parent
                append(value)
            elif isinstance(value, list_):
                for child in value:
                    if isinstance(child, AST):
                        if link:
                            child._tb_parent = parent
                        append(child)
    return nodes


@lru_cache(maxsize=256)
def _parsed(filename: str) -> dict | None:
    """Expression nodes of a source file by position, each knowing its parent."""
    tree = parsed_tree(filename)
    if tree is None:
        return None
    index = {}
    defs = _DEFS_IN[filename] = {}
    for parent in ast_nodes(tree, link=True):
        if isinstance(parent, ast.expr):
            key = (parent.lineno, parent.end_lineno, parent.col_offset, parent.end_col_offset)
            index.setdefault(key, parent)
        elif isinstance(parent, _DEFS):
            first = min([parent.lineno] + [d.lineno for d in parent.decorator_list])
            defs[(parent.name, first)] = parent
        if isinstance(parent, ast.Lambda):
            defs.setdefault(("<lambda>", parent.lineno), []).append(parent)
    return index


def parse(source: str) -> ast.Module:
    """``ast.parse(source)`` with the garbage collector paused. Note: why. A parse makes
    one object per node (tens of thousands for a large module), all kept, none in a
    cycle; each thousand of them counts toward a collection, and in a process holding a
    large model and its libraries every few of those collections is a full one, which
    visits every object of the process. Measured on a transformers decoder's first trace:
    1.46 s to parse its 62 modules with the collector on, 0.43 s with it paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()


@lru_cache(maxsize=64)
def parsed_tree(filename: str) -> ast.Module | None:
    """The syntax tree of a source file as linecache holds it, or None: one parse serves
    every reader of a file (``_parsed``'s index, trace/integers.py's names)."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    try:
        return parse(source)
    except (SyntaxError, ValueError):
        return None


# file -> its defs by (name, first line) and its lambdas by ("<lambda>", line) (a list: a
# line may hold several), from _parsed's tree: one parse serves every reader of a file.
_DEFS_IN: dict[str, dict] = {}


def def_node(filename: str, firstlineno: int, name: str, code=None):
    """The ``def`` (or, given its ``code``, the lambda) whose code starts at
    ``firstlineno``, in the tree :func:`_parsed` indexes (its nodes know their parents)."""
    if _parsed(filename) is None:
        return None
    found = _DEFS_IN.get(filename, {}).get((name, firstlineno))
    if not isinstance(found, list):
        return found
    if code is not None and len(found) > 1:
        params = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        found = [n for n in found if _parameters_of(n) == params]
        if len(found) > 1:
            found = [n for n in found if _holds_position(n, code)]
    return found[0] if len(found) == 1 else None


def _def_of(code) -> ast.AST | None:
    return def_node(code.co_filename, code.co_firstlineno, code.co_name, code)


def _parameters_of(node: ast.Lambda) -> tuple:
    arguments = node.args
    return tuple(a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs)


def _holds_position(node: ast.Lambda, code) -> bool:
    """Whether the first placed instruction of ``code`` lies in ``node``'s body."""
    for line, _end, column, _end_column in code.co_positions():
        if line is not None and column is not None:
            body = node.body
            start, end = (body.lineno, body.col_offset), (body.end_lineno, body.end_col_offset)
            return start <= (line, column) <= end
    return False
