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
  message of ``assert`` -- needs no guard, nor does text kept in a local variable whose
  every read in the function reaches a message (``msg = f"..."; _assert(ok, msg)``) or is
  never read; text going anywhere else is guarded where it is made, as before. Text
  made by the message call itself (``print(n)``, ``print(x)``) or inside the standard
  library's ``logging`` and ``warnings`` (``log.info("%s", x)`` formats later, in
  ``logging``) is a message too. ``'%d' % n`` reads the number in C
  without asking it: that text is never traced (nor guarded), as in eager Python.

  A tensor formatted as text (``str(x)``, ``repr``, ``format``, f-strings, ``%s``) shows
  its values: the text's source is then a :class:`TensorText`, which guards the tensor's
  values (``x.tolist()``) and dtype when the text decides; a 0-dim tensor formatted with
  ``format`` reads as its traced ``.item()`` (trace/conversions.py). Sources are anything
  with ``_tracer`` and ``_fix_text(reason)``: traced numbers and tensor texts.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import logging
import os
import re
import string
import sys
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedOpError
from ..source import OWN_DIR, parsed_source

if TYPE_CHECKING:
    from .tracer import Tracer

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


def formatted_from(sources: tuple, text: str, frame, obj=None) -> str:
    """:func:`formatted` of text that shows several traced values (``torch.Size``)."""
    if not sources[0]._tracer.is_active():
        return text
    result = SymStr(text, sources)
    if not frame.f_code.co_filename.startswith(OWN_DIR) and _text_is_lost(frame, obj):
        for source in sources:
            source._fix_text("formatted into text that may decide a branch")
        result._fixed = True  # guarded already: a decision on it adds no second guard
    return result


_MESSAGE_MODULES = (os.path.dirname(logging.__file__) + os.sep, warnings.__file__)


def _text_is_lost(frame, obj=None) -> bool:
    """Whether the text made at ``frame``'s current instruction may decide something the
    trace cannot see: it is joined into new text that does not reach a message."""
    if frame.f_code.co_filename.startswith(_MESSAGE_MODULES):
        return False  # logging formats its record's message late, inside its own code
    code = frame.f_code
    positions = _positions(code)
    index = frame.f_lasti // 2
    if index >= len(positions):
        return True
    fate, formatted_expr = _fate_at(code.co_filename, positions[index])
    if fate == "kept" and obj is not None:
        return not _names_object(frame, formatted_expr, obj)
    return fate == "lost"


@lru_cache(maxsize=4096)
def _positions(code) -> tuple:
    """Each instruction's source span. Python 3.10 has none: every formatted size is then
    guarded where it is made, and every hash of a size is a decision, as before."""
    positions = getattr(code, "co_positions", None)
    return tuple(positions()) if positions is not None else ()


@lru_cache(maxsize=4096)
def _fate_at(filename: str, position: tuple) -> tuple[str, ast.AST | None]:
    """Where the text made at ``position`` goes: ``("message", None)``, ``("kept", the
    expression formatted)`` (the expression's value is the text itself), or ``("lost",
    None)``."""
    tree = _parsed(filename)
    node = tree.get(position) if tree is not None else None
    if node is None:
        return ("lost", None)
    if isinstance(node, ast.Call) and _is_message_call(node.func):
        return ("message", None)  # print(n): the call itself turns its argument into text
    if _reaches_message(node):
        return ("message", None)
    formatted_expr = _kept_expression(node)
    if formatted_expr is not None:
        return ("kept", formatted_expr)
    return ("lost", None)


def _kept_expression(node: ast.AST) -> ast.AST | None:
    """The expression formatted, where ``node``'s value is the very object the formatted
    value's ``__str__``/``__format__``/``__repr__`` made; else None."""
    if isinstance(node, ast.JoinedStr):
        only = node.values[0] if len(node.values) == 1 else None
        return only.value if isinstance(only, ast.FormattedValue) else None
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
                if len(parts) == 1 and parts[0][0] == "" and parts[0][1] is not None:
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


def _reaches_message(node: ast.AST, following: frozenset = frozenset()) -> bool:
    """Walk up through text-building expressions to what consumes the text; into a local
    variable, through every read of it (``following``: the locals being followed)."""
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None:
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue, ast.BinOp, ast.Lambda)):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if _percent_arguments(parent):
            # "n = %s" % (n,): Python compiles it as an f-string whose instruction is at
            # the argument's own position, inside the tuple: the text goes where the % goes.
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Call):
            if child is parent.func:  # "...{}".format(n): the call builds more text
                child, parent = parent, getattr(parent, "_tb_parent", None)
                continue
            if _is_message(parent, strict=bool(following)):
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
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and (
            child is parent.value
        ):
            return _local_reaches_only_messages(parent, following)
        return isinstance(parent, ast.Raise)
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


# Where text kept in a local may go and still be only a message: the exact names of the
# calls that print, log, warn or assert (not any name that merely contains "check").
_SINKS = frozenset(
    "_assert _assert_async print debug info warning warn error exception critical fatal log".split()
)


def _is_message(call: ast.Call, strict: bool) -> bool:
    """A call that only shows the text it is given: an exception built for ``raise`` right
    there (one kept as an object may be read back), else a call named as printing, logging,
    warning or checking do -- by its exact name (``_SINKS``) for text kept in a local."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name.endswith(_MESSAGE_SUFFIXES):
        return isinstance(getattr(call, "_tb_parent", None), ast.Raise)
    return name in _SINKS if strict else _is_message_call(func)


# Names through which code reads a function's locals or frames by name, out of the reach of
# a look at its source: a function that mentions one keeps its text guarded.
_READS_FRAMES = frozenset(
    "locals vars eval exec globals _getframe currentframe f_locals tb_frame".split()
)


def _local_reaches_only_messages(assign: ast.stmt, following: frozenset = frozenset()) -> bool:
    """``msg = f"... {H} ..."`` (or ``msg += ...``) inside a function: the text reaches only
    messages when the name is a plain local of the function and every read of it, anywhere
    in the function (its nested functions too), passes it to a message -- a call named
    exactly as printing, logging, warning or asserting does (``_assert(cond, msg)``,
    ``print``, ``log.warning``), ``raise E(msg)``, the message of ``assert`` -- or into
    another such local. What else the name is bound to does not matter: only a read can take
    the text anywhere. A name read for anything else (compared, returned, stored, a key), a
    class attribute, a module-level name, and any function that catches what it raises or
    warns (``try``, ``with``) or reads frames or locals by name keep the text lost, as
    before."""
    targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        return False
    name = targets[0].id
    function = getattr(assign, "_tb_parent", None)
    while function is not None and not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        if isinstance(function, (ast.ClassDef, ast.Lambda)):
            return False  # a class attribute: read as Key.msg, never as a name
        function = getattr(function, "_tb_parent", None)
    if function is None:
        return False  # a global: any code may read it
    if name in following:
        return True  # a cycle of locals passing the text on: judged by the reads outside it
    following = following | {name}
    for node in ast.walk(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return False
        # A message caught and read back (try/except, catch_warnings) decides after all.
        if isinstance(node, (ast.Try, ast.With, ast.AsyncWith)) or type(node).__name__ == "TryStar":
            return False
        if (isinstance(node, ast.Name) and node.id in _READS_FRAMES) or (
            isinstance(node, ast.Attribute) and node.attr in _READS_FRAMES
        ):
            return False
        if (
            isinstance(node, ast.Name)
            and node.id == name
            and isinstance(node.ctx, ast.Load)
            and not _reaches_message(node, following)
        ):
            return False
    return True


# A %-conversion of an integer that Python formats in C without calling a method of the
# value (``%d``, ``%5i``, ``%(n)x``, ``%c``); ``%s``, ``%r``, ``%f`` call ``__str__``,
# ``__repr__``, ``__float__``, which the traced number answers.
_INT_CONVERSION = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diuoxXc]")
_SIZE_METHODS = frozenset({"size", "numel", "nelement", "dim", "item", "tolist"})


def unseen_int_format(code, lasti: int | None = None) -> int | None:
    """The line, in the function of ``code``, of a ``"literal %d" % (...)`` whose operands
    are sizes (``x.shape``, ``x.size()``, ``len(x)``, ``numel``, ``item``, or a local
    assigned from one) and whose text picks something (:func:`_decides`), where the size
    read by the instruction at ``lasti`` (a frame's ``f_lasti``: its source span, from
    ``co_positions``) is one of those operands or feeds one; else None. Without a position
    (Python 3.10), any such text in the function counts. A size read elsewhere in that
    function (``x.shape[0]`` next to ``"blocks_%d" % len(self.blocks)``, a plain int) is
    not refused."""
    found = _unseen_int_format(code.co_filename, code.co_firstlineno, code.co_name)
    if found is None:
        return None  # the common case, cached: no instruction positions read
    positions = _positions(code) if lasti is not None else ()
    position = positions[lasti // 2] if lasti is not None and lasti // 2 < len(positions) else None
    if position is None or None in position:
        return found[0]
    line, end_line, col, end_col = position
    for at, span in found[1]:
        if (span[0], span[2]) <= (line, col) and (end_line, end_col) <= (span[1], span[3]):
            return at
    return None


def _span(node: ast.AST) -> tuple:
    return (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)


@lru_cache(maxsize=4096)
def _unseen_int_format(filename: str, firstlineno: int, name: str) -> tuple | None:
    """``(line of the first such text, (its line, span) of what feeds each)``: the formats'
    operands and the values assigned to the locals they read (:func:`unseen_int_format`)."""
    function = _function_node(filename, firstlineno, name)
    if function is None:
        return None
    tainted: set[str] = set()
    assigned: dict[str, list] = {}  # local -> the values assigned to it that mention sizes
    changed = True
    while changed:  # locals assigned from sizes, and from such locals
        changed = False
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if not _mentions_size(value, tainted):
                continue
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name) and leaf.id not in tainted:
                        tainted.add(leaf.id)
                        assigned.setdefault(leaf.id, []).append(value)
                        changed = True
    index = _parsed(filename) or {}
    first, spans = None, []
    for node in ast.walk(function):
        if not (
            _percent_format(node)
            and _INT_CONVERSION.search(node.left.value)
            and _mentions_size(node.right, tainted)
        ):
            continue
        placed = index.get(_span(node))  # the same node in the index, which knows its parents
        if placed is None or _reaches_message(placed):
            continue
        enclosing = placed
        while enclosing is not None and not isinstance(enclosing, _DEFS):
            enclosing = getattr(enclosing, "_tb_parent", None)
        if enclosing is not None and _decides(placed, enclosing):
            first = node.lineno if first is None else min(first, node.lineno)
            spans.extend((node.lineno, span) for span in _feeding(node.right, assigned))
    return None if first is None else (first, tuple(spans))


def _feeding(expr: ast.AST, assigned: dict) -> list:
    """The spans of ``expr`` and of the values assigned to the size locals it reads, and
    theirs in turn."""
    spans, todo, seen = [_span(expr)], [expr], set()
    while todo:
        for leaf in ast.walk(todo.pop()):
            if isinstance(leaf, ast.Name) and leaf.id in assigned and leaf.id not in seen:
                seen.add(leaf.id)
                for value in assigned[leaf.id]:
                    spans.append(_span(value))
                    todo.append(value)
    return spans


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOKUPS = frozenset({"get", "setdefault", "pop", "__contains__", "__getitem__"})
_NAME_CALLS = {"getattr": 1, "hasattr": 1, "setattr": 1, "delattr": 1, "hash": 0}


def _decides(node: ast.AST, function: ast.AST, following: frozenset = frozenset()) -> bool:
    """Whether the text ``node`` makes picks something: a key or index (``d[text]``,
    ``d.get(text)``, ``{text: ...}``), a name (``getattr(self, text)``), a comparison or
    a test, directly or through a local read so. Text stored or passed on elsewhere is
    left as it was (untraced, as eager Python has it)."""
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None:
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue, ast.BinOp)) or (
            _percent_arguments(parent)
        ):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Attribute) or (
            isinstance(parent, ast.Call) and child is parent.func
        ):
            child, parent = parent, getattr(parent, "_tb_parent", None)  # text.strip()
            continue
        break
    if parent is None:
        return False
    if isinstance(parent, ast.Subscript):
        return child is parent.slice
    if isinstance(parent, (ast.Compare, ast.If, ast.While, ast.IfExp, ast.BoolOp)):
        return True
    if isinstance(parent, ast.Dict):
        return any(child is k for k in parent.keys)
    if isinstance(parent, ast.Call) and child in parent.args:
        func = parent.func
        at = parent.args.index(child)
        if isinstance(func, ast.Name) and _NAME_CALLS.get(func.id) == at:
            return True
        return isinstance(func, ast.Attribute) and func.attr in _LOOKUPS and at == 0
    if isinstance(parent, ast.Assign) and child is parent.value:
        names = [t.id for t in parent.targets if isinstance(t, ast.Name)]
        for name in names:
            if name in following:
                continue
            for read in ast.walk(function):
                if (
                    isinstance(read, ast.Name)
                    and read.id == name
                    and isinstance(read.ctx, ast.Load)
                    and _decides(read, function, following | {name})
                ):
                    return True
    return False


def _mentions_size(expr: ast.AST, tainted: set) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in tainted:
            return True
        if isinstance(node, ast.Attribute) and node.attr == "shape":
            return True
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _SIZE_METHODS:
                return True
            if isinstance(func, ast.Name) and func.id == "len":
                return True
    return False


@lru_cache(maxsize=256)
def _functions(filename: str) -> tuple:
    tree = parsed_source(filename)
    if tree is None:
        return ()
    return tuple(
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )


def _function_node(filename: str, firstlineno: int, name: str):
    """The ``def`` whose code starts at ``firstlineno`` (its first decorator's line)."""
    for node in _functions(filename):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        if node.name == name and first == firstlineno:
            return node
    return None


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
