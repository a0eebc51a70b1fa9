"""Traced numbers carried to C code by names, attributes and containers: judged at the line
that reads them, while it runs.

Note: why the line that reads is watched, and not only the line that makes.
  trace/unseen_reads.py follows a traced number from the expression that makes it through
  the caller's source. A number kept somewhere the source cannot follow -- an attribute
  read in another method (``self.n = x.shape[1]`` in one, ``self.table[self.n]`` in
  another), a dict, list or tuple stored and read elsewhere, ``*args``/``**kwargs`` of a
  helper, a global -- reaches C code through an expression that only carries it: a
  name, an attribute, an item. Where it goes cannot be known where it is made; what it
  is can be known where it is read. So while the traced code runs, the tracer watches
  the lines of the user's code (``sys.settrace``; PyTorch, tracebridge, numpy and the
  standard library are not watched: only the code of files that have a place where C
  code may read a number) and, before each line runs, looks at the values its reads
  carry: the index or slice bounds of a subscript, the arguments of a call, the
  operands of a ``%``-format, the right operand of arithmetic and of a comparison
  (whose left may be a float that computes in C). An operand that is such a path (``n``, ``self.n``,
  ``cfg["n"]``, ``args[0]``, ``kw.get("n")``, ``int(p)``, ``min(p, 4)``, a tuple or
  list display of them, ``*p``) is looked up without running code; where it holds a
  traced number, the site is judged as unseen_reads judges it (a list, tuple, string,
  ``range``, numpy array indexed or sliced; a C function outside PyTorch given it; text
  that decides; a float on its left) and the number's value is guarded there, naming
  the line. A number only carried to tensor ops, to PyTorch, to a mapping's key, stays
  general. A read inside a comprehension or a lambda is judged in that frame only.

  The cost: CPython calls the trace function at every Python call, the tracer's own
  included, which would cost about a third of a trace's time; so the watch is set aside
  while the tracer records an op (:func:`unwatched`, around the recording mode's
  ``__torch_function__``) and put back for the user's code the tracer runs itself (a
  custom autograd Function's forward: :func:`rewatched`). A trace function set before
  the watch (a debugger's, coverage's) still gets every event, and the watch is then
  never set aside.

  A user class's ``__len__`` (``__index__``, ``__int__``, ``__float__``, ``__hash__``)
  that returns a traced number to C code (``if obj:``, ``not obj``, ``bool(obj)``,
  ``TABLE[obj]``, ``hash(obj)``) is the same unseen read: its return is watched, and a
  truth test guards ``n > 0`` (or ``n == 0``), anything else the value. The traced
  ``len`` (trace/patches.py) asks ``__len__`` itself and keeps the size general.

  The operand is read before its line runs: a path bound on the same line, before the
  read (``n = self.n; TABLE[n]`` on one line), is judged by its value before the line
  (unseen_reads sees most such numbers where they are made). What neither sees: a
  container or callable found only by calling code (``self.get_table()[self.n]``), and
  C code reached through the Python code of the standard library or PyTorch.
"""

from __future__ import annotations

import ast
import dis
import inspect
import linecache
import os
import re
import sys
import textwrap
import threading
import tokenize
import types
from contextlib import contextmanager
from functools import lru_cache

import torch

from ..source import is_internal, user_frame
from .device_reads import _static_attribute
from .numbers import _Traced
from .python_random import STDLIB
from .text import SymStr, _parsed, _positions, ast_nodes, parse
from .unseen_reads import (
    _ARITHMETIC,
    _MISSING,
    _SWAPPED,
    IDENTITY,
    Site,
    _call_reads,
    _constant_int,
    _format_site,
    _percent_format,
    _resolve,
    _Scope,
    _subscript_reads,
    format_read,
    read_unseen,
)

# Slots that C code calls and whose answer it reads as a plain number.
_SLOTS = frozenset({"__len__", "__index__", "__int__", "__float__", "__hash__"})
# Instructions that test truth: ``if obj:``, ``while obj``, ``not obj``, ``a and obj``.
_TRUTH = frozenset(
    name
    for name in dis.opmap
    if name.startswith(("POP_JUMP", "JUMP_IF_")) or name in ("UNARY_NOT", "TO_BOOL")
)
_PASSING_CALLS = frozenset({"int", "index", "min", "max"})


# --- from the source: the reads of each line --------------------------------------------


def reads_by_line(code: types.CodeType) -> dict:
    """``{line: ((site, operands, code name), ...)}``: every place in the function of
    ``code`` where C code may read a number, with the operand expressions whose values it
    reads, under each line whose event comes before the read (its own and its
    statement's first).

    Only the function is parsed, not its file (a library's files run to thousands of
    lines, of which a trace runs a few functions); where its block cannot be told from
    the text, the whole file."""
    lines = linecache.getlines(code.co_filename)
    start = _def_line(lines, code.co_firstlineno)
    if start is not None:
        found = _function_reads(code.co_filename, start)
        if found is not None:
            return found
    return _file_reads(code.co_filename)


_DEF = re.compile(r"^(\s*)(async\s+def|def)\s")


def _def_line(lines: list, line: int) -> int | None:
    """The line of the ``def`` whose block holds ``line`` (itself, for a function's code;
    the enclosing one for a lambda's or a comprehension's), else None."""
    if not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    if _DEF.match(text) or text.lstrip().startswith("@"):
        return line
    indent = len(text) - len(text.lstrip())
    for number in range(line - 1, 0, -1):
        match = _DEF.match(lines[number - 1])
        if match and len(match.group(1)) < indent:
            return number
    return None


@lru_cache(maxsize=4096)
def _function_reads(filename: str, start: int) -> dict | None:
    lines = linecache.getlines(filename)
    try:
        block = inspect.getblock(lines[start - 1 :])
        dedented = textwrap.dedent("".join(block))
        tree = parse(dedented)
    except (SyntaxError, ValueError, IndentationError, tokenize.TokenError):
        return None
    ast.increment_lineno(tree, start - 1)
    # columns as in the file, where trace/text.py looks a node's span up (dedent took the
    # same whitespace off every line)
    shift = len(block[0]) - len(dedented.splitlines(keepends=True)[0])
    nodes = ast_nodes(tree, link=True)
    if shift:
        for parent in nodes:
            if getattr(parent, "col_offset", None) is not None:
                parent.col_offset += shift
                if parent.end_col_offset is not None:
                    parent.end_col_offset += shift
    return _reads_by_line(nodes)


@lru_cache(maxsize=64)
def _file_reads(filename: str) -> dict:
    return _reads_by_line((_parsed(filename) or {}).values())


def _reads_by_line(nodes) -> dict:
    found: dict[int, list] = {}
    for node in nodes:
        if not isinstance(node, ast.expr):
            continue
        entries = [(site, _keyed(operands), _code_name(node)) for site, operands in _reads_of(node)]
        for line in {node.lineno, _statement_line(node)} if entries else ():
            found.setdefault(line, []).extend(entries)
    return {line: tuple(entries) for line, entries in found.items()}


_OWN_FRAME = {
    ast.Lambda: "<lambda>",
    ast.GeneratorExp: "<genexpr>",
    # Python 3.12 runs the others in the function's own frame
    **(
        {ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>"}
        if sys.version_info < (3, 12)
        else {}
    ),
}


def _code_name(node: ast.AST) -> str:
    """The name of the code whose frame runs ``node``: a read inside a comprehension or
    a lambda is judged in that frame (where its own names are bound), not in the
    enclosing function's, whose names of the same spelling are others."""
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None:
        owner = getattr(parent, "_tb_parent", None)
        if (
            isinstance(parent, ast.comprehension)
            and child is parent.iter
            and owner.generators[0] is parent
        ):  # the first iterable: evaluated in the enclosing frame
            child, parent = owner, getattr(owner, "_tb_parent", None)
            continue
        if type(parent) in _OWN_FRAME and (type(parent) is not ast.Lambda or child is parent.body):
            return _OWN_FRAME[type(parent)]
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
            child is statement for statement in parent.body
        ):
            return parent.name
        child, parent = parent, owner
    return "<module>"


def _keyed(operands: tuple) -> tuple:
    """Each operand as ``(key, expr, name)``: its position or keyword in a call (None
    elsewhere), the expression, and the name it is where it is a bare name (the common
    case, looked up at once)."""
    keyed = []
    for operand in operands:
        key, expr = operand if isinstance(operand, tuple) else (None, operand)
        keyed.append((key, expr, expr.id if isinstance(expr, ast.Name) else None))
    return tuple(keyed)


def _reads_of(node: ast.AST) -> list:
    """The reads ``node`` makes: ``[(site, operands)]``."""
    if _percent_format(node):
        right = node.right
        items = right.elts if isinstance(right, ast.Tuple) else [right]
        operands = [item for item in items if _carrier(item)]
        return [(Site("format", node, node.lineno), tuple(operands))] if operands else []
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, _ARITHMETIC) and _carrier(node.right):
            return [(Site("arithmetic", node.left, node.lineno), (node.right,))]
        return []
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        return [
            (Site("comparison", operands[i - 1], node.lineno, _SWAPPED[type(op)]), (operands[i],))
            for i, op in enumerate(node.ops, start=1)
            if type(op) in _SWAPPED and _carrier(operands[i])
        ] + [
            (Site(IDENTITY, other, node.lineno, "is" if type(op) is ast.Is else "is not"), (kept,))
            for i, op in enumerate(node.ops, start=1)
            if type(op) in (ast.Is, ast.IsNot)
            for kept, other in ((operands[i - 1], operands[i]), (operands[i], operands[i - 1]))
            if _carrier(kept) and _constant_int(other) is not None
        ]
    entry = _read_of(node)
    return [entry] if entry is not None else []


def _read_of(node: ast.AST):
    if isinstance(node, ast.Subscript):
        operands = _index_operands(node.slice)
        if operands:
            return (Site("subscript", node.value, node.lineno), tuple(operands))
        return None
    if isinstance(node, ast.Call):
        operands = []
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                operands += [(None, arg.value)] if _carrier(arg.value) else []
                break  # positions after a *splat are unknown
            if _carrier(arg) or _display_of_carriers(arg):
                operands.append((position, arg))
        for keyword in node.keywords:
            if keyword.arg is not None and (
                _carrier(keyword.value) or _display_of_carriers(keyword.value)
            ):
                operands.append((keyword.arg, keyword.value))
        if operands:
            return (Site("call", node, node.lineno), tuple(operands))
    return None


def _index_operands(index: ast.AST) -> list:
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    operands = []
    for part in parts:
        bounds = (part.lower, part.upper, part.step) if isinstance(part, ast.Slice) else (part,)
        operands += [b for b in bounds if b is not None and _carrier(b)]
    return operands


def _carrier(node: ast.AST) -> bool:
    """Whether ``node`` only carries a value (a path, a call that gives back one of its
    arguments): nothing new is made there, so unseen_reads, which judges where numbers
    are made, does not see it."""
    if _path(node):
        return True
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get":
            return _path(func.value) and 1 <= len(node.args) <= 2  # d.get(k, default)
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return (
            name in _PASSING_CALLS
            and bool(node.args)
            and all(_carrier(a) or isinstance(a, ast.Constant) for a in node.args)
        )
    return False


def _path(node: ast.AST) -> bool:
    """A name, an attribute of a path, an item of a path by a constant or a path."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _path(node.value)
    if isinstance(node, ast.Subscript):
        return _path(node.value) and (_constant(node.slice) is not _MISSING or _path(node.slice))
    return False


def _constant(node: ast.AST):
    """The value of a literal (``-1`` too), else _MISSING."""
    if isinstance(node, ast.Constant):
        return node.value
    number = _constant_int(node)
    return _MISSING if number is None else number


def _display_of_carriers(node: ast.AST) -> bool:
    return isinstance(node, (ast.Tuple, ast.List)) and any(_carrier(e) for e in node.elts)


def _statement_line(node: ast.AST) -> int:
    while node is not None and not isinstance(node, ast.stmt):
        node = getattr(node, "_tb_parent", None)
    return node.lineno if node is not None else 0


# --- at the line: the values the operands carry ------------------------------------------


_DESCRIPTORS = (
    property,
    types.FunctionType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


def _value(node: ast.AST, scope: _Scope):
    """The value of the path ``node``, looked up without running code, else _MISSING."""
    if isinstance(node, ast.Name):
        return scope.lookup(node.id)
    if isinstance(node, ast.Attribute):
        owner = _value(node.value, scope)
        if owner is _MISSING or isinstance(owner, torch.Tensor):
            return _MISSING
        return _attribute(owner, node.attr)
    if isinstance(node, ast.Subscript):
        owner = _value(node.value, scope)
        key = _value(node.slice, scope)
        if type(owner) not in (list, tuple, dict) or key is _MISSING:
            return _MISSING
        if _hashes_traced(key):
            return _MISSING  # an index of its own: judged as a read where it is
        try:
            return owner[key]
        except (LookupError, TypeError):
            return _MISSING
    return _constant(node)


def _attribute(owner, name: str):
    """``owner.name`` where no code runs to give it: an entry of the instance's
    ``__dict__`` (or of a module's parameters, buffers, sub-modules) that no data
    descriptor of its class shadows, a ``__slots__`` entry, a plain class attribute."""
    if isinstance(owner, types.ModuleType):
        return vars(owner).get(name, _MISSING)
    try:
        instance = object.__getattribute__(owner, "__dict__")
    except AttributeError:
        instance = None
    held = _held_by_class(type(owner), name)
    if type(instance) is dict and held != "data":
        if name in instance:
            return instance[name]
        if held is None and isinstance(owner, torch.nn.Module):  # Module.__getattr__'s
            for table in ("_parameters", "_buffers", "_modules"):
                entries = instance.get(table)
                if entries is not None and name in entries:
                    return entries[name]
    found = _static_attribute(owner, name)  # slower: the class's own attributes
    if isinstance(found, types.MemberDescriptorType) and not isinstance(owner, type):
        try:
            return found.__get__(owner, type(owner))  # a __slots__ entry: C reads it
        except AttributeError:
            return _MISSING
    if isinstance(found, _DESCRIPTORS):
        return _MISSING  # code would run to give the value
    return found


@lru_cache(maxsize=4096)
def _held_by_class(cls: type, name: str) -> str | None:
    """How ``cls`` holds ``name``: "data" (a property, a slot: it answers before the
    instance's ``__dict__``), "other", or None."""
    for klass in cls.__mro__:
        if name in vars(klass):
            held = type(vars(klass)[name])
            return "data" if hasattr(held, "__set__") or hasattr(held, "__delete__") else "other"
    return None


def _carried(node: ast.AST, scope: _Scope) -> list:
    """The traced numbers the operand ``node`` carries: its value, the items of a list or
    tuple it is, those of a display of paths, or of the arguments of a call passing one."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _carried(e, scope)]
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            owner = _value(node.func.value, scope)
            if type(owner) is not dict:
                return []
            key = _value(node.args[0], scope)
            if key is _MISSING or _hashes_traced(key):
                return []
            value = owner.get(key, _MISSING)
            if value is _MISSING and len(node.args) == 2:
                return _carried(node.args[1], scope)
            return _traced_in(value)
        return [n for a in node.args for n in _carried(a, scope)]
    return _traced_in(_value(node, scope))


def _hashes_traced(key) -> bool:
    """Whether looking ``key`` up would hash a traced number or text made from one (a
    tuple of sizes: a memo's key). The watch must not: a hash from the tracer's own frame
    is a decision, and would guard the sizes that the user's lookup keeps general."""
    if isinstance(key, (_Traced, SymStr)):
        return True
    return type(key) in (tuple, frozenset) and any(_hashes_traced(k) for k in key)


def _traced_in(value) -> list:
    if isinstance(value, _Traced):
        return [value]
    if isinstance(value, (list, tuple)) and len(value) <= 16:  # a torch.Size too
        return [v for v in value if isinstance(v, _Traced)]
    return []


def judge_line(frame, entries: tuple) -> None:
    """Guard each traced number that a read of this line hands to C code (module Note)."""
    local_names, global_names = frame.f_locals, frame.f_globals
    code_name = frame.f_code.co_name
    scope = None
    for site, operands, runs_in in entries:
        if runs_in != code_name:
            continue  # a comprehension's or lambda's read: judged in its own frame
        for key, expr, name in operands:
            if name is not None:  # a bare name: most operands, and most hold no number
                value = local_names.get(name, _MISSING)
                if value is _MISSING:
                    value = global_names.get(name, _MISSING)
                if not isinstance(value, (_Traced, list, tuple)):
                    continue
                numbers = _traced_in(value)
            else:
                scope = scope or _Scope(local_names, global_names, frame.f_code.co_filename, frame)
                numbers = _carried(expr, scope)
            for number in numbers:
                tracer = number._tracer
                if not _live(tracer):
                    continue
                scope = scope or _Scope(local_names, global_names, frame.f_code.co_filename, frame)
                scope.number = number
                found = _judged(site, key, scope)
                if found is not None:
                    tracer._guard_read_in_c(number, f"{found[0]}:{found[1]}", *found[2:])


def _judged(site: Site, key, scope: _Scope):
    if site.kind == "format":
        return next(filter(None, (format_read(s, scope) for s in _format_site(site.expr))), None)
    if site.kind in ("arithmetic", "comparison", IDENTITY):
        return read_unseen(site, scope)
    if site.kind == "subscript":
        return _subscript_reads(site, _resolve(site.expr, scope), scope, 0)
    func = _resolve(site.expr.func, scope)
    if _watched_function(func):
        return None  # its own lines are watched: judged where it reads
    return _call_reads(Site("call", site.expr, site.line, key), func, scope, 0)


def _watched_function(func) -> bool:
    func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    return isinstance(code, types.CodeType) and _watched_file(code.co_filename)


# --- the returns of slots that C code calls ------------------------------------------------


def judge_slot_return(frame, value) -> None:
    """A user ``__len__`` (a slot of _SLOTS) gave ``value`` back: guard a traced number
    that C code reads (module Note)."""
    if not isinstance(value, _Traced) or not _live(value._tracer):
        return
    caller = frame.f_back
    if caller is None:
        return
    name = frame.f_code.co_name
    tracer = value._tracer
    lasti = caller.f_lasti
    opname = dis.opname[caller.f_code.co_code[lasti]] if lasti >= 0 else ""
    call = _call_at(caller)
    if isinstance(call, ast.Call):
        if getattr(call.func, "attr", None) == name:
            return  # obj.__len__() called from Python: the number itself, traced
        scope = _Scope(caller.f_locals, caller.f_globals, caller.f_code.co_filename)
        called = _resolve(call.func, scope)
        if getattr(getattr(called, "__func__", called), "__code__", None) is frame.f_code:
            return  # called from Python (the traced len()'s own call): kept traced
    reader = user_frame(caller) or caller  # past the tracer's operator.index, say
    loc = f"{reader.f_code.co_filename}:{reader.f_lineno}"
    truth = opname in _TRUTH or (
        isinstance(call, ast.Call) and getattr(call.func, "id", None) == "bool"
    )
    if truth and name == "__len__" and value._concrete() > 0:
        tracer.scalar_compare("gt", value, 0, warn=False)
        return
    tracer._guard_read_in_c(value, loc)


def _call_at(frame):
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if index >= len(positions) or None in positions[index]:
        return None
    return (_parsed(frame.f_code.co_filename) or {}).get(tuple(positions[index]))


# --- the watch -----------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _watched_file(filename: str) -> bool:
    if is_internal(filename) or filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    return not (path.startswith(STDLIB) and "-packages" + os.sep not in path)


_by_code: dict[int, tuple] = {}


def _local_for(code: types.CodeType):
    """The local trace function for frames of ``code``, or None where nothing in it is
    watched."""
    if not _watched_file(code.co_filename):
        return None
    slot = code.co_name in _SLOTS
    table = reads_by_line(code)
    first = code.co_firstlineno
    last = max((line for _, _, line in code.co_lines() if line is not None), default=first)
    lines = {line: table[line] for line in range(first, last + 1) if line in table}
    if not lines and not slot:
        return None

    def local(frame, event, arg):
        try:
            if event == "line":
                entries = lines.get(frame.f_lineno)
                if entries:
                    judge_line(frame, entries)
            elif event == "return" and slot:
                judge_slot_return(frame, arg)
        except Exception:  # noqa: BLE001, S110 - a read we cannot judge: as before, no guard
            pass
        return local

    return local


def _global(frame, event, arg):
    code = frame.f_code
    hit = _by_code.get(id(code))
    if hit is None or hit[0] is not code:
        try:
            hit = (code, _local_for(code))
        except Exception:  # noqa: BLE001 - a source we cannot read: not watched
            hit = (code, None)
        _by_code[id(code)] = hit
    return hit[1]


def _chained(ours, theirs):
    """A trace function that gives each event to a trace function set before ours (a
    debugger's, coverage's) and to ours."""

    def both(frame, event, arg):
        nonlocal ours, theirs
        if theirs is not None:
            theirs = theirs(frame, event, arg)
        if ours is not None:
            ours = ours(frame, event, arg)
        if ours is None:
            return theirs
        return both if theirs is not None else ours

    return both


_state = threading.local()  # tracers: those whose code is watched in this thread


def _live(tracer) -> bool:
    """Whether ``tracer`` still records: active, or set aside while a custom autograd
    Function's forward is recorded apart (a number of its trace read there is its)."""
    return tracer.is_active() or tracer in getattr(_state, "tracers", ())


def unwatched(fn, *args):
    """``fn(*args)`` with the watch set aside: the tracer's own work (recording an op) is
    not the user's code, and a trace function called for each of its Python calls would
    cost a third of the trace's time."""
    watch = sys.gettrace()
    if watch is not _global:
        return fn(*args)  # not watching, or another trace function runs too (a debugger's)
    sys.settrace(None)
    try:
        return fn(*args)
    finally:
        sys.settrace(watch)


@contextmanager
def rewatched():
    """Inside the tracer's own work (:func:`unwatched`), watch again the user's code it
    runs itself: a custom autograd Function's forward, a checkpointed function."""
    if not getattr(_state, "tracers", None) or sys.gettrace() is not None:
        yield
        return
    sys.settrace(_global)
    try:
        yield
    finally:
        sys.settrace(None)


@contextmanager
def watched(tracer):
    """Watch the lines of the user's code for ``tracer`` while the block runs (module
    Note)."""
    _state.tracers = [*getattr(_state, "tracers", ()), tracer]
    try:
        with _watching():
            yield
    finally:
        _state.tracers = _state.tracers[:-1]


@contextmanager
def _watching():
    previous = sys.gettrace()
    if previous is None:
        tracer = _global
    else:

        def tracer(frame, event, arg):
            ours, theirs = _global(frame, event, arg), previous(frame, event, arg)
            if ours is None or theirs is None:
                return theirs if ours is None else ours
            return _chained(ours, theirs)

    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)
