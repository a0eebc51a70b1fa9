"""Traced numbers that CPython's C code reads without asking them: guarded where made.

Note: why a traced number is guarded where the code hands it to C.
  A traced size or ``.item()`` is an ``int`` (``float``) subclass, so PyTorch takes it as a
  number and its arithmetic is recorded. But CPython's own C code reads an int subclass's
  value directly, calling none of its methods (``__index__`` included): ``TABLE[n]``,
  ``words[1:n]``, ``lst.pop(n)``, ``lst.insert(n, v)``, ``del lst[n]``, ``bytes(n)``,
  ``chr(n)``, ``struct.pack("i", n)``, ``itertools.islice(it, n)``, ``np.arange(8)[n]``,
  ``"%.1f" % v``. Each such use was the example's choice on every call, silently. No hook
  sees the read, so the tracer reads the caller's source where the number is made (the
  instruction's position in the caller's code, found in its AST, as trace/text.py and
  trace/device_reads.py do) and follows it as device_reads follows a device: through
  ``max``/``min``, conditional expressions, locals (every read of them), unpacking,
  parameters of the user's Python functions, and ``return`` to the caller's line.
  Arithmetic on it makes a new traced number, followed where that one is made. Where it
  reaches one of these, its value is guarded at once, naming the line that reads it:

  - the index or a bound of a slice of something that is not a tensor or a mapping
    (a list, tuple, string, bytes, ``range``, ``torch.Size``, a numpy array), looked up
    in the frame without running code; a user class's Python ``__getitem__`` is followed
    into; a local not yet bound is judged by what the function assigns to it;
  - an argument of a callable implemented in C outside PyTorch (``bytes``, ``chr``,
    ``hex``, ``enumerate``, ``struct.pack``, ``operator.getitem``, numpy, a method of a
    list or string other than those that only store, hash or compare it, a class made
    in C: ``array.array``, ``decimal.Decimal``, ``datetime.timedelta``), also as an
    item of a list, tuple or set display given to it (``array.array("q", [n])``);
  - a ``"literal %d" % ...`` (any numeric conversion) whose text then picks something
    (trace/text.py's ``_decides``): text made in C cannot remember its number;
  - a ``slice(...)`` bound, where the slice object is read by C: ``s.indices(k)``, or the
    index of a list or string (a tensor's index stays general).

  - the right operand of arithmetic whose left is a float, a complex or numpy's
    (``0.5 * n``, ``-math.log(1e4) / n``: the float's own C code computes it, so the
    result is the example's): the value is guarded. Right of such a number in a
    comparison (``3.5 < n``), the comparison C code makes is recorded instead
    (``n > 3.5``): every size that answers alike is served. An int on the left asks
    the traced number first (it is an int subclass), as a plain float asks a traced
    float.

  A size that only goes into tensor ops (``torch.zeros(n)``, ``x.view(n, -1)``,
  ``x[:, :n]``) is a tensor op's argument and stays general. A number stored in an
  attribute or a container and read elsewhere, or passed through ``*args``, is judged
  where it is read instead (trace/carried_reads.py). What neither sees: a callable or
  container found only by running code (``self.get_table()[n]``), C code reached through
  the Python code of the standard library or PyTorch. Those stay as before: the
  example's value.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import math
import operator
import os
import re
import types
import weakref
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..source import OWN_DIR, TORCH_DIR, is_internal
from .device_reads import _static_attribute, _unpacked_into
from .numbers import _Traced
from .text import (
    _parsed,
    _percent_arguments,
    _percent_format,
    _positions,
    def_node,
    logging_call_keeps_nothing,
    plain_text_verdict,
    shown_only,
)

_RETURNED = "returned"
_CALLERS = 4  # returns followed up the stack
_DEPTH = 3  # Python functions followed into, one inside another
_LOCALS = 16  # locals and parameters followed at most


@dataclass(frozen=True)
class Site:
    """A place where C code may read the number: ``kind`` is "subscript" (``expr`` is the
    container), "call" (``expr`` the call, ``arg`` the number's position or keyword),
    "format" (a ``%``-format whose text decides) or "read" (C reads it there whatever the
    objects are: ``slice(n).indices(k)``)."""

    kind: str
    expr: ast.AST | None
    line: int
    arg: int | str | None = None


# --- from the source: where a number made at an instruction goes --------------------------


def _parent(node: ast.AST):
    return getattr(node, "_tb_parent", None)


def source_readable(filename: str) -> bool:
    """Whether the source of ``filename`` can be read and parsed (not ``<string>`` of
    ``exec`` or ``python -c``)."""
    return _parsed(filename) is not None


def _node_at(frame):
    code = frame.f_code
    positions = _positions(code)
    index = frame.f_lasti // 2
    if index >= len(positions) or None in positions[index]:
        return None, None
    tree = _parsed(code.co_filename)
    if tree is None:
        return None, None
    return code.co_filename, tuple(positions[index])


@lru_cache(maxsize=8192)
def sites_at(filename: str, position: tuple, element: int | None, rank: int) -> tuple:
    """The sites the number made at ``position`` of ``filename`` reaches (and
    ``_RETURNED``). ``element``: the number is item ``element`` of a ``torch.Size`` of
    ``rank`` sizes made there (``x.shape``), not the expression's value itself."""
    node = (_parsed(filename) or {}).get(position)
    if node is None:
        augmented = _augmented_assignments(filename).get(position)
        if augmented is not None and isinstance(augmented.target, ast.Name):
            # n += 1: the instruction is the whole statement; the new n is the local's
            return tuple(_reads_of_local(augmented, augmented.target.id, frozenset()))
        return ()
    if element is not None:
        node = _element_of(node, element, rank)
        if node is None:
            return ()
        if isinstance(node, tuple):  # (the unpacking statement, the local)
            return tuple(_reads_of_local(node[0], node[1], frozenset()))
    return tuple(_flow(node, frozenset()))


@lru_cache(maxsize=256)
def _augmented_assignments(filename: str) -> dict:
    """The ``n += ...`` statements of a file by their span (an expression index misses
    them: their instruction's position is the statement's)."""
    found = {}
    for node in (_parsed(filename) or {}).values():
        statement = _parent(node)
        if isinstance(statement, ast.AugAssign) and statement.target is node:
            found[
                (
                    statement.lineno,
                    statement.end_lineno,
                    statement.col_offset,
                    statement.end_col_offset,
                )
            ] = statement
    return found


def _element_of(node: ast.AST, element: int, rank: int):
    """Where item ``element`` of the ``torch.Size`` made by ``node`` goes: the node of
    ``shape[k]`` where ``k`` is that item (or an index the source does not show), the
    unpacking statement and the local it is unpacked into, or None where the code takes
    no such item (or passes the whole size on)."""
    parent = _parent(node)
    if isinstance(parent, ast.Subscript) and parent.value is node:
        if isinstance(parent.slice, ast.Slice):
            # x.shape[1:]: a torch.Size of some of the sizes, followed where it goes
            return parent if _in_slice(parent.slice, element, rank) else None
        k = _constant_int(parent.slice)
        if k is not None and k % max(rank, 1) != element:
            return None
        return parent
    if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == rank:
            item = target.elts[element]
            if not any(isinstance(e, ast.Starred) for e in target.elts) and isinstance(
                item, ast.Name
            ):
                return (parent, item.id)
        if isinstance(target, ast.Name):
            return (parent, target.id)  # shape = x.shape: the whole size, in a local
    if isinstance(parent, (ast.Call, ast.keyword)) and getattr(parent, "func", None) is not node:
        return node  # np.zeros(x.shape): the whole size, an argument
    return None


def _in_slice(index: ast.Slice, element: int, rank: int) -> bool:
    """Whether item ``element`` of ``rank`` sizes is in the slice (True where the source
    does not show its bounds)."""
    bounds = [
        None if b is None else _constant_int(b) for b in (index.lower, index.upper, index.step)
    ]
    if any(
        b is None and e is not None for b, e in zip(bounds, (index.lower, index.upper, index.step))
    ):
        return True
    try:
        return element in range(rank)[slice(*bounds)]
    except ValueError:  # a step of 0: the slice raises
        return False


def _constant_int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


# Conversions of ``%``-formatting that read a number (in C, for an int or float subclass).
_NUMERIC_CONVERSION = re.compile(
    r"%(?:\([^)]*\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diuoxXceEfFgG]"
    r"|%[#0\- +]*(?:\*|\d*\.\*)"  # a width or precision given as an argument: read in C
)
_PASSING = frozenset({"max", "min"})  # give back one of their arguments, the number itself


def _flow(node: ast.AST, following: frozenset, sliced: bool = False) -> set:
    """The sites the value of ``node`` reaches, walking up through expressions that carry
    it unchanged; into a local, through every read of it (``following``: locals on the
    way). ``sliced``: ``node`` is a ``slice`` object holding the number."""
    if isinstance(node, (ast.JoinedStr, ast.FormattedValue)):
        return set()  # the number's text, made by its __format__: trace/text.py's
    child, parent = node, _parent(node)
    while parent is not None:
        if _builds_a_slice(parent, child):
            # slice(n), slice(0, n, 1): the slice keeps the number as it is; followed as it
            child, parent, sliced = parent, _parent(parent), True
            continue
        if sliced and isinstance(parent, ast.Attribute) and child is parent.value:
            if parent.attr in _SLICE_BOUNDS:  # s.stop: gives a bound back (the number, or not)
                child, parent, sliced = parent, _parent(parent), False
                continue
            return {Site("read", parent, parent.lineno)}  # s.indices(k): C reads the bounds
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue)):
            return set()
        if isinstance(parent, ast.Subscript):
            if child is parent.value:
                return set()
            return {Site("subscript", parent.value, parent.lineno)}
        if isinstance(parent, ast.Slice) or (
            isinstance(parent, ast.Tuple)
            and isinstance(_parent(parent), ast.Subscript)
            and _parent(parent).slice is parent
        ):
            child, parent = parent, _parent(parent)
            continue
        if _percent_arguments(parent):
            child, parent = parent, _parent(parent)
            continue
        if isinstance(parent, ast.BinOp):
            if _percent_format(parent) and child is parent.right:
                return _format_site(parent)
            if child is parent.right and isinstance(parent.op, _ARITHMETIC):
                # 0.5 * n: a float's (numpy's) own C code computes it if the left is one
                return {Site("arithmetic", parent.left, parent.lineno)}
            return set()  # arithmetic: a new traced number, followed where it is made
        if isinstance(parent, ast.Compare):
            return _compare_site(parent, child)
        unpacked = _unpacked_into(parent, child)
        if unpacked is not None:
            return _reads_of_local(_parent(parent), unpacked, following)
        if isinstance(parent, ast.IfExp) and child is not parent.test:
            child, parent = parent, _parent(parent)
            continue
        if isinstance(parent, ast.BoolOp):
            child, parent = parent, _parent(parent)
            continue
        if isinstance(parent, ast.NamedExpr) and child is parent.value:
            found = _reads_of_local(parent, parent.target.id, following)
            child, parent = parent, _parent(parent)
            return found | _flow(child, following)
        if isinstance(parent, ast.keyword):
            call = _parent(parent)
            if not isinstance(call, ast.Call) or parent.arg is None:
                return set()
            return {Site("call", call, call.lineno, parent.arg)}
        if isinstance(parent, ast.Call):
            if child is parent.func:
                return set()
            if isinstance(parent.func, ast.Name) and parent.func.id in _PASSING:
                child, parent = parent, _parent(parent)
                continue
            before = parent.args[: [i for i, a in enumerate(parent.args) if a is child][0]]
            at = None if any(isinstance(a, ast.Starred) for a in before) else len(before)
            return {Site("call", parent, parent.lineno, at)}
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and child is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                return _reads_of_local(parent, targets[0].id, following, sliced)
            if len(targets) == 1 and _is_local_attribute(targets[0]):
                # self.n = n: its reads as self.n in this function (not elsewhere: unseen)
                target = targets[0]
                return _reads_of_local(parent, (target.value.id, target.attr), following)
            return set()
        if (
            isinstance(parent, (ast.For, ast.comprehension))
            and child is parent.iter
            and isinstance(parent.target, ast.Name)
        ):
            # for i in range(n, n + 2): the loop's values are traced where a bound is
            return _reads_of_local(parent, parent.target.id, following)
        if isinstance(parent, ast.Return):
            return {_RETURNED}
        if isinstance(parent, (ast.List, ast.Tuple, ast.Set)):
            call = _parent(parent)
            if isinstance(call, ast.Call) and any(a is parent for a in call.args):
                # array.array("q", [n]): a C callable reads the display's items
                return {Site("call", call, call.lineno, IN_DISPLAY)}
        return set()
    return set()


IN_DISPLAY = "<an item of a list, tuple or set given to the call>"
_SLICE_BOUNDS = frozenset({"start", "stop", "step"})


def _builds_a_slice(call: ast.AST, child: ast.AST) -> bool:
    """Whether ``call`` is ``slice(...)`` given ``child`` as a bound. A slice object keeps
    the traced number; where it is a tensor's index the number stays a tensor op's, but
    C reads it unasked in ``s.indices(k)`` and as the index of a list or a string."""
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "slice"
        and any(a is child for a in call.args)
    )


_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
# ``left OP n`` is what ``n SWAPPED left`` asks: the comparison C code makes, recorded.
_SWAPPED = {ast.Lt: "gt", ast.LtE: "ge", ast.Gt: "lt", ast.GtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}


def _compare_site(compare: ast.Compare, child: ast.AST) -> set:
    """``3.5 < n`` (``a < n < b``): where the number is right of a comparison, the
    operand on its left answers first, and a float (numpy) compares in C. ``n is 1``
    (either side, ``is not`` too): CPython compares the objects, asking neither."""
    operands = [compare.left, *compare.comparators]
    at = next((i for i, o in enumerate(operands) if o is child), 0)
    found = set()
    for index, other in ((at - 1, at - 1), (at, at + 1)):
        if 0 <= index < len(compare.ops) and isinstance(compare.ops[index], _IDENTITY_OPS):
            spelled = "is" if isinstance(compare.ops[index], ast.Is) else "is not"
            found.add(Site(IDENTITY, operands[other], compare.lineno, spelled))
    swapped = _SWAPPED.get(type(compare.ops[at - 1])) if at > 0 else None
    if swapped is not None:
        found.add(Site("comparison", operands[at - 1], compare.lineno, swapped))
    return found


IDENTITY = "identity"  # a site's kind, and the first item of what identity_read finds
_IDENTITY_OPS = (ast.Is, ast.IsNot)
# The ints CPython keeps one object of (its small-int cache): ``v is 1`` of a plain int
# ``v`` is ``v == 1`` for these, and False for any other (a size is a new object).
_CACHED_INTS = range(-5, 257)


def identity_read(site: Site, scope: _Scope):
    """``(file, line, (IDENTITY, c, spelled))`` where the number is compared by identity
    with the int ``c`` of CPython's small-int cache (``x.shape[0] is 1``, ``n is not 0``),
    else None (``n is None``, a bool, an int no size is ever identical to).

    Note: why ``is`` on a traced size needs the tracer.
      ``is`` calls no method of its operands, so the traced number (an object of its own)
      is never the cached ``1`` while tracing, where the eager code's size (a plain int
      from the cache) is where it equals 1: the trace took the "not 1" branch for every
      size, silently (prober20b F7; torch.jit.trace does the same). The tracer answers it
      as eager does: where the number is not ``c``, it guards ``n != c`` (the branch the
      trace took holds for every other size); where it is, it guards the value and gives
      the code the cached int itself, so ``is`` answers True as in eager
      (conversions.py, ``_identity_read``)."""
    other = _constant_int(site.expr)
    if other is None:
        other = _resolve(site.expr, scope)
    if type(other) is not int or other not in _CACHED_INTS:
        return None
    return (scope.filename, site.line, (IDENTITY, other, site.arg))


def computes_in_c(left, expr: ast.AST, scope) -> bool:
    """Whether ``left`` (the value of ``expr``, or _MISSING) is a number whose own C code
    computes ``left OP n`` for an int ``n`` without asking it: a float, a complex, a
    numpy scalar or array -- not an int (Python asks the int subclass first), not a
    traced number, not a tensor. A traced float is asked first by a plain float."""
    if isinstance(scope.number, float) and (
        type(left) is float or (left is _MISSING and _float_expression(expr, scope))
    ):
        return False
    if left is _MISSING:
        return _float_expression(expr, scope)
    if left is _SEQUENCE:  # np.float64(2.0) * n: numpy's; [0] * n: the number's own
        return isinstance(expr, ast.Call) and _numpy_owned(_resolve(expr.func, scope))
    if isinstance(left, (_Traced, bool, int)):
        return False
    return isinstance(left, (float, complex)) or _numpy_owned(type(left))


_INT_MATH = frozenset("floor ceil trunc factorial gcd lcm isqrt comb perm".split())


def _float_expression(expr: ast.AST, scope) -> bool:
    """Whether ``expr`` computes a plain float from literals alone (``-math.log(1e4)``,
    ``2.0 * math.pi``): a value the source shows without running the user's code."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (float, complex))
    if isinstance(expr, ast.UnaryOp):
        return _float_expression(expr.operand, scope)
    if isinstance(expr, ast.BinOp):
        sides = (expr.left, expr.right)
        return any(_float_expression(e, scope) for e in sides) and all(
            _literal_number(e, scope) for e in sides
        )
    if isinstance(expr, ast.Call) and not expr.keywords:
        func = _resolve(expr.func, scope)
        name = getattr(func, "__name__", "")
        return (
            _is_math(func)
            and name not in _INT_MATH
            and all(_literal_number(a, scope) for a in expr.args)
        )
    if isinstance(expr, (ast.Name, ast.Attribute)):
        value = _resolve(expr, scope)
        return isinstance(value, float) and not isinstance(value, _Traced)
    return False


def _literal_number(expr: ast.AST, scope) -> bool:
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float, complex)) and not isinstance(expr.value, bool)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        value = _resolve(expr, scope)
        return isinstance(value, (int, float)) and not isinstance(value, (bool, _Traced))
    return _float_expression(expr, scope)


def _is_math(func) -> bool:
    import math

    from .patches import _TRACED_MATH  # patches imports this module's importers

    return getattr(func, "__module__", None) == "math" or (
        getattr(func, "__name__", None) in _TRACED_MATH
        and _TRACED_MATH[func.__name__] is func
        or vars(math).get(getattr(func, "__name__", None)) is func
    )


def _comparison_read(site: Site, scope: _Scope):
    """``(file, line, (op, left))`` for ``left < n`` where C code compares: the
    comparison to record, which keeps every size that answers alike."""
    left = _resolve(site.expr, scope)
    if not computes_in_c(left, site.expr, scope):
        return None
    here = (scope.filename, site.line)
    if left is _MISSING or _numpy_owned(type(left)) or isinstance(left, complex):
        return here  # a value not in hand, or numpy's: the number's value is guarded
    return (*here, (site.arg, left))


def _format_site(binop: ast.BinOp) -> set:
    if not _NUMERIC_CONVERSION.search(binop.left.value):
        return set()
    function = _enclosing_function(binop)
    verdict = plain_text_verdict(binop) if function is not None else None
    if verdict is None:
        return {Site("format", binop, binop.lineno)}
    if not verdict:
        return set()  # text for messages only: no decision of the trace's
    # text for messages that may be caught or kept: judged when read (format_read), as
    # what catches or keeps messages then (a try around it, a logging handler) says
    return {Site("format", binop, binop.lineno, _MESSAGE)}


_MESSAGE = "message"  # a format site's arg: its text goes only to messages


def format_read(site: Site, scope) -> tuple[str, int] | None:
    """``(file, line)`` where a ``%``-format's text reads the number in C and may
    decide; None where it only reaches messages nothing catches or keeps."""
    if site.arg == _MESSAGE and shown_only(
        site.expr, scope.filename, scope, scope.frame, scope.called_from
    ):
        return None
    return (scope.filename, site.line)


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _enclosing_function(node: ast.AST):
    while node is not None and not isinstance(node, _DEFS):
        node = _parent(node)
    return node


def _reads_of_local(
    statement: ast.AST, name: str | tuple, following: frozenset, sliced: bool = False
) -> set:
    """The sites of every read of the local ``name`` bound at ``statement`` (``sliced``:
    it holds a slice of the number)."""
    function = _enclosing_function(statement)
    if function is None:
        return set()  # a module-level name: read anywhere
    return _reads_in(function, name, following, sliced)


def _is_local_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)


def _reads_in(
    function: ast.AST, name: str | tuple, following: frozenset, sliced: bool = False
) -> set:
    """The sites of every read of the local ``name`` (or ``(local, attribute)``: reads
    of ``local.attribute``) in ``function``."""
    key = (id(function), name)
    if key in following or len(following) >= _LOCALS:
        return set()
    following = following | {key}
    found: set = set()
    for node in ast.walk(function):
        if isinstance(name, str):
            read = isinstance(node, ast.Name) and node.id == name
        else:
            read = _is_local_attribute(node) and (node.value.id, node.attr) == name
        if read and isinstance(node.ctx, ast.Load) and not _shadowed(node, name, function):
            found |= _flow(node, following, sliced)
    return found


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _shadowed(read: ast.AST, name: str | tuple, function: ast.AST) -> bool:
    """Whether ``read`` names another variable of the same spelling: a comprehension's
    target or a parameter of a nested function or lambda, between it and ``function``."""
    local = name if isinstance(name, str) else name[0]
    child, parent = read, _parent(read)
    while parent is not None and parent is not function:
        if isinstance(parent, _COMPREHENSIONS):
            first = parent.generators[0]
            binds = any(
                isinstance(n, ast.Name) and n.id == local
                for generator in parent.generators
                for n in ast.walk(generator.target)
            )
            if binds and child is not first:
                return True
        if isinstance(parent, (ast.Lambda, *_DEFS)) and local in _parameters(parent.args):
            return True
        child, parent = parent, _parent(parent)
    return False


def _parameters(arguments: ast.arguments) -> set:
    names = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    names += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return {a.arg for a in names}


@lru_cache(maxsize=1024)
def parameter_sites(code: types.CodeType, parameter: str) -> tuple:
    """The sites every read of ``parameter`` of the function of ``code`` reaches."""
    node = def_node(code.co_filename, code.co_firstlineno, code.co_name, code)
    if node is None:
        return ()
    return tuple(_reads_in(node, parameter, frozenset()))


# --- at the call: the objects the source names ------------------------------------------


class _Scope:
    """Names the code reads, looked up without running code."""

    def __init__(self, local_names: dict, global_names: dict, filename: str, frame=None):
        self.local_names, self.global_names, self.filename = local_names, global_names, filename
        self.frame = frame  # the running frame whose names these are, if any
        # where these are a Python function's names: the frame whose current line calls it
        self.called_from = None
        self.number = None  # the traced number followed, where known
        self.later: list[Site] = []  # subscripts of its locals not bound yet

    def lookup(self, name: str):
        for names in (self.local_names, self.global_names, vars(builtins)):
            if name in names:
                return names[name]
        return _MISSING


_MISSING = object()
_SEQUENCE = object()  # a list, tuple or string the source builds (a display, a literal)
_TENSOR_ATTRIBUTE = object()  # a method or attribute of a tensor other than its shape
_SEQUENCE_BUILDERS = frozenset(
    {list, tuple, str, bytes, bytearray, sorted, range, reversed, memoryview}
)


def _resolve(expr: ast.AST, scope: _Scope):
    """The object ``expr`` names, read without running code, else _MISSING."""
    if isinstance(expr, ast.Name):
        return scope.lookup(expr.id)
    if isinstance(expr, ast.Attribute):
        owner = _resolve(expr.value, scope)
        if owner is _SEQUENCE or owner is _MISSING:
            owner = _built_kind(expr.value, scope)  # ("a" * 20).replace: a str's method
        if owner is _MISSING or owner is _SEQUENCE:
            return _MISSING
        if isinstance(owner, types.ModuleType):
            return vars(owner).get(expr.attr, _MISSING)
        if isinstance(owner, torch.Tensor):
            # x.shape is a torch.Size (a tuple); anything else of a tensor is PyTorch's
            return _SEQUENCE if expr.attr == "shape" else _TENSOR_ATTRIBUTE
        found = _static_attribute(owner, expr.attr)
        if found is _MISSING and isinstance(owner, torch.nn.Module):
            for table in ("_parameters", "_buffers"):
                entries = vars(owner).get(table)
                if isinstance(entries, dict) and expr.attr in entries:
                    return entries[expr.attr]
        if isinstance(found, (property, types.GetSetDescriptorType, types.MemberDescriptorType)):
            return _MISSING
        return found
    if isinstance(expr, ast.Subscript):
        owner = _resolve(expr.value, scope)
        key = expr.slice.value if isinstance(expr.slice, ast.Constant) else _MISSING
        if type(owner) in (list, tuple, dict) and key is not _MISSING:
            try:
                return owner[key]
            except (LookupError, TypeError):
                return _MISSING
        return _MISSING
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(
        expr, (ast.List, ast.Tuple, ast.ListComp, ast.JoinedStr, ast.GeneratorExp, ast.Set)
    ):
        return _SEQUENCE
    if isinstance(expr, ast.Call):
        func = _resolve(expr.func, scope)
        if _is_builder(func) or _numpy_owned(func):
            return _SEQUENCE
        if (
            isinstance(expr.func, ast.Attribute)
            and expr.func.attr == "get"
            and len(expr.args) == 1
            and isinstance(expr.args[0], ast.Constant)
            and not expr.keywords
        ):
            owner = _resolve(expr.func.value, scope)
            if type(owner) is dict:  # self.cfg.get("s"): a plain dict's entry
                return owner.get(expr.args[0].value, _MISSING)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("size", "stride"):
            owner = _resolve(expr.func.value, scope)
            if isinstance(owner, torch.Tensor) and not expr.args and not expr.keywords:
                return _SEQUENCE  # x.size(): a torch.Size
    return _MISSING


# str methods whose result is a str, and those whose result is a list.
_TO_STR = frozenset(
    """join replace strip lstrip rstrip lower upper title capitalize casefold swapcase center
    ljust rjust zfill format format_map expandtabs removeprefix removesuffix""".split()
)
_TO_LIST = frozenset("split rsplit splitlines".split())


def _built_kind(expr: ast.AST, scope: _Scope):
    """An empty object of the builtin kind the expression ``expr`` builds (a str for
    ``"a" * 20``, an f-string or ``sep.join(...)``; a list for a display or
    ``text.split()``; a tuple, a set), whose methods are its C methods; else _MISSING."""
    if isinstance(expr, (ast.JoinedStr,)):
        return ""
    if isinstance(expr, (ast.List, ast.ListComp)):
        return []
    if isinstance(expr, ast.Tuple):
        return ()
    if isinstance(expr, (ast.Set, ast.SetComp)):
        return set()
    if isinstance(expr, ast.Constant) and isinstance(expr.value, (str, bytes)):
        return type(expr.value)()
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mult, ast.Mod)):
        for side in (expr.left, expr.right):
            kind = _kind_of(side, scope)  # (self.names * 2): an attribute's list
            if kind is not _MISSING:
                return kind
        return _MISSING
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        receiver = _kind_of(expr.func.value, scope)  # self.text.upper(): an attribute's str
        if isinstance(receiver, (str, bytes)):
            if expr.func.attr in _TO_STR:
                return type(receiver)()
            if expr.func.attr in _TO_LIST:
                return [type(receiver)()]  # a list of texts (its items' kind: split()[0])
            if expr.func.attr in _RECODED:
                return _RECODED[expr.func.attr]
    if isinstance(expr, ast.Subscript) and not isinstance(expr.slice, ast.Slice):
        # an item of a built list of texts (text.split()[0]), a character of a text
        container = _kind_of(expr.value, scope)
        if type(container) is str:
            return ""
        if type(container) is list and container and type(container[0]) in (str, bytes):
            return type(container[0])()
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        made = scope.lookup(expr.func.id)
        if made in (str, list, tuple, bytes, bytearray, set, sorted):
            return [] if made is sorted else made()
        if made is getattr and len(expr.args) == 2 and isinstance(expr.args[1], ast.Constant):
            owner = _resolve(expr.args[0], scope)
            found = _MISSING if owner is _MISSING else _static_attribute(owner, expr.args[1].value)
            return _plain_kind(found)
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice):
        return _plain_kind(_resolve(expr.value, scope), _built_kind(expr.value, scope))
    copied = isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
    if copied and expr.func.attr == "copy" and not expr.args:
        return _plain_kind(_resolve(expr.func.value, scope))
    return _MISSING


_PLAIN_SEQUENCES = (list, tuple, str, bytes, bytearray)
_RECODED = {"encode": b"", "decode": ""}  # str.encode gives bytes, bytes.decode a str


def _kind_of(expr: ast.AST, scope: _Scope):
    """:func:`_built_kind` of ``expr``, or the plain kind of what it names (an
    attribute's list or str, a local's)."""
    kind = _built_kind(expr, scope)
    return kind if kind is not _MISSING else _plain_kind(_resolve(expr, scope))


def _plain_kind(*found):
    """An empty object of the first of ``found`` that is a list, tuple, str or bytes
    (exactly those types: a subclass may index in Python), else _MISSING."""
    for value in found:
        if type(value) in _PLAIN_SEQUENCES:
            return type(value)()
    return _MISSING


def _is_builder(func) -> bool:
    func = getattr(func, "stands_for", func)  # the traced range of trace/patches.py
    try:
        return func in _SEQUENCE_BUILDERS
    except TypeError:
        return False


def _numpy_owned(func) -> bool:
    module = getattr(func, "__module__", None) or ""
    return module.split(".")[0] == "numpy"


def _assigned_a_sequence(name: str, expr: ast.AST) -> bool:
    """Whether the function around ``expr`` assigns ``name`` a list, tuple or string the
    source builds: a local not bound yet where the number is made."""
    function = _enclosing_function(expr)
    if function is None:
        return False
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        and _builds_sequence(node.value)
        for node in ast.walk(function)
    )


_BUILDER_NAMES = frozenset(b.__name__ for b in _SEQUENCE_BUILDERS)


def _builds_sequence(value: ast.AST) -> bool:
    if isinstance(value, ast.Constant):
        return isinstance(value.value, (str, bytes))
    if isinstance(value, (ast.List, ast.Tuple, ast.ListComp, ast.JoinedStr)):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in _BUILDER_NAMES
    )


# Methods of Python's containers and text that store, hash, compare or format what they
# are given: the traced number's own methods answer (or hashing guards it).
_STORING = frozenset(
    "append add discard remove count get setdefault update extend __contains__ format "
    "format_map".split()
)
_MAPPINGS = (dict, set, frozenset)
# Builtins that ask the number (its __str__, __hash__, __bool__, comparisons, arithmetic)
# or keep it as it is: not a read in C.
_ASKING = frozenset(
    id(f)
    for f in (
        str, repr, ascii, format, hash, abs, round, divmod, pow, print, isinstance, issubclass,
        id, type, max, min, sum, sorted, bool, int, float, complex, len, list, tuple, set,
        frozenset, dict, zip, iter, next, getattr, setattr, hasattr, delattr, callable, any,
        all, map, filter, slice, super, vars, object, operator.index, math.prod,
        functools.reduce, operator.add, operator.sub, operator.mul, operator.truediv,
        operator.floordiv, operator.mod, operator.pow, operator.neg, operator.pos,
        operator.abs, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
        operator.ge, operator.and_, operator.or_, operator.xor, operator.lshift,
        operator.rshift,
    )
)  # fmt: skip


def _torch_owned(func) -> bool:
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    if isinstance(owner, torch.Tensor) or isinstance(func, torch.nn.Module):
        return True
    names = (
        getattr(func, "__module__", None),
        getattr(owner, "__module__", None) if isinstance(owner, type) else None,
        getattr(type(owner), "__module__", None) if owner is not None else None,
    )
    return any(isinstance(n, str) and n.split(".")[0] == "torch" for n in names)


_C_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
)


def read_unseen(site: Site, scope: _Scope, depth: int = 0) -> tuple[str, int] | None:
    """``(file, line)`` of the site (this one, or one inside a Python function it calls)
    where C code reads the number without asking it; None where the number is asked or
    stays a tensor op's."""
    if site.kind == "read":  # C reads it whatever the objects are (slice.indices)
        return (scope.filename, site.line)
    if site.kind == "format":
        return format_read(site, scope)
    if site.kind == "arithmetic":
        left = _resolve(site.expr, scope)
        return (scope.filename, site.line) if computes_in_c(left, site.expr, scope) else None
    if site.kind == "comparison":
        return _comparison_read(site, scope)
    if site.kind == IDENTITY:
        return identity_read(site, scope)
    if site.kind == "subscript":
        return _subscript_reads(site, _resolve(site.expr, scope), scope, depth)
    return _call_reads(site, _resolve(site.expr.func, scope), scope, depth)


def _subscript_reads(site: Site, container, scope: _Scope, depth: int):
    here = (scope.filename, site.line)
    if container is _MISSING and _built_kind(site.expr, scope) is not _MISSING:
        return here  # ([1] * 30)[n], SC[:][n], getattr(self, "scales")[n]: a built sequence
    if container is _MISSING or container is _TENSOR_ATTRIBUTE:
        expr = site.expr
        if isinstance(expr, ast.Name) and _assigned_a_sequence(expr.id, expr):
            return here
        if isinstance(expr, ast.Name) and scope.frame is not None and container is _MISSING:
            scope.later.append(site)  # a local bound after the number was made: see settle
        return None  # found only by running code: taken as a tensor's (see the Note)
    if container is _SEQUENCE:
        return here
    if isinstance(container, (torch.Tensor, *_MAPPINGS)) or hasattr(container, "keys"):
        return None
    getitem = inspect.getattr_static(type(container), "__getitem__", None)
    if isinstance(getitem, types.FunctionType):
        if is_internal(getitem.__code__.co_filename) and _sliced(site.expr):
            return here  # nn.ModuleList[:n], nn.Sequential[:n]: PyTorch slices a list
        return _into_function(getitem, [container], 1, depth, called_from=scope.frame)
    return here if getitem is not None else None


def _sliced(container: ast.AST) -> bool:
    subscript = _parent(container)
    return (
        isinstance(subscript, ast.Subscript)
        and subscript.value is container
        and isinstance(subscript.slice, ast.Slice)
    )


# PyTorch's typed constructors of old fill their storage from the numbers in C (where
# torch.tensor([n]) records the number).
_LEGACY_CONSTRUCTORS = tuple(
    getattr(torch, name)
    for name in """BFloat16Tensor BoolTensor ByteTensor CharTensor DoubleTensor FloatTensor
    HalfTensor IntTensor LongTensor ShortTensor""".split()
    if hasattr(torch, name)
)


def _call_reads(site: Site, func, scope: _Scope, depth: int):
    if func is _MISSING and site.kind == "call":
        # logging.getLogger(name).info("%d rows", n): a logger made in the line
        logged = logging_call_keeps_nothing(site.expr, None, scope.local_names, scope.global_names)
        if logged is not None:
            return None if logged else (scope.filename, site.line)
    if func is _MISSING:
        receiver = site.expr.func.value if isinstance(site.expr.func, ast.Attribute) else None
        if isinstance(receiver, ast.Name) and scope.frame is not None:
            scope.later.append(site)  # n = ...; l = [...]; l.insert(n, 0): see settle
        return None
    if any(func is made for made in _LEGACY_CONSTRUCTORS):
        return (scope.filename, site.line)  # torch.LongTensor([h, w]): storage made in C
    if func is _TENSOR_ATTRIBUTE or _torch_owned(func):
        return None
    if func is round and site.arg in (1, "ndigits"):
        return (scope.filename, site.line)  # round(v, n): v's __round__ reads n in C
    try:
        if id(func) in _ASKING or func in _SEQUENCE_BUILDERS - {bytes, bytearray, memoryview}:
            return None
    except TypeError:
        return None
    if _numpy_owned(func):
        return (scope.filename, site.line)  # numpy's Python code hands it to its C code
    call = site.expr
    logged = logging_call_keeps_nothing(call, func, scope.local_names, scope.global_names)
    if logged is not None:
        # log.info("%d rows", n): logging's C code formats it for each handler
        return None if logged else (scope.filename, site.line)
    owner = _resolve(call.func.value, scope) if isinstance(call.func, ast.Attribute) else None
    bound = []
    if isinstance(func, (staticmethod, classmethod)):
        bound = [owner] if isinstance(func, classmethod) else []
        func = func.__func__
    elif isinstance(func, types.MethodType):
        func, bound = func.__func__, [func.__self__]
    elif (
        isinstance(func, types.FunctionType)
        and owner not in (None, _MISSING)
        and not isinstance(owner, (type, types.ModuleType))
        and _method_of_the_class(owner, call.func.attr)
    ):
        bound = [owner]  # a method looked up on an instance: self is bound
    if isinstance(func, types.FunctionType):
        if site.arg == IN_DISPLAY or any(isinstance(a, ast.Starred) for a in call.args):
            return None  # the parameters cannot be matched without running code
        arguments = bound + [_resolve(a, scope) for a in call.args]
        keywords = {k.arg: _resolve(k.value, scope) for k in call.keywords if k.arg}
        at = site.arg if isinstance(site.arg, str) else len(bound) + site.arg
        return _into_function(func, arguments, at, depth, keywords, scope.frame)
    if isinstance(func, _C_CALLABLES) or _c_type(func):
        holder = getattr(func, "__objclass__", None) or type(getattr(func, "__self__", None))
        if holder is not None and issubclass(holder, _MAPPINGS):
            return None  # a key: hashing guards it
        name = getattr(func, "__name__", "")
        if name in _STORING or (name == "index" and site.arg == 0):
            return None
        return (scope.filename, site.line)
    return None  # a Python class, or something else that keeps the number as an object


# C classes that keep their arguments as objects (a partial's arguments, a namespace's
# values): the number stays traced inside them.
_STORING_TYPES = (
    functools.partial,
    types.SimpleNamespace,
    types.MethodType,
    staticmethod,
    classmethod,
    property,
    weakref.ref,
)


def _method_of_the_class(owner, name: str) -> bool:
    """Whether ``owner.name`` is a function of ``owner``'s class, bound to it: a function
    kept on the instance itself (``self.fn = lambda n: ...``, a module's attribute) is
    called as it is."""
    if name in getattr(owner, "__dict__", {}):
        return False
    return isinstance(inspect.getattr_static(type(owner), name, None), types.FunctionType)


def _c_type(func) -> bool:
    """Whether ``func`` is a class whose instances C code makes from its arguments: no
    Python ``__new__``, ``__init__`` or metaclass ``__call__`` on the way (``array.array``,
    ``decimal.Decimal``, ``datetime.timedelta``, ``itertools.repeat``, a Python subclass
    of one that adds neither). A Python class keeps the number as an object."""
    if not isinstance(func, type) or func is object or issubclass(func, _STORING_TYPES):
        return False
    for name in ("__new__", "__init__"):
        found = inspect.getattr_static(func, name, None)
        if isinstance(found, (staticmethod, classmethod)):
            found = found.__func__
        if isinstance(found, types.FunctionType):
            return False
    call = inspect.getattr_static(type(func), "__call__", None)
    return not isinstance(call, types.FunctionType)


def _into_function(
    func, arguments: list, at: int | str, depth: int, keywords=None, called_from=None
):
    """The read inside the Python function ``func`` that the number is passed to, as
    parameter ``at`` (a position or a keyword); ``arguments`` and ``keywords`` are what
    the call passes (``_MISSING`` where the source does not show it), its locals there.
    ``called_from``: the running frame whose line calls it (None: a call inside a call,
    whose catches are not looked at)."""
    code = func.__code__
    if depth >= _DEPTH or is_internal(code.co_filename):
        return None
    params = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    if isinstance(at, str):
        parameter = at if at in params else None
    else:
        parameter = params[at] if at < code.co_argcount else None
    if parameter is None:
        return None  # taken by *args / **kwargs: not followed
    local_names = {p: a for p, a in zip(params, arguments) if a is not _MISSING}
    local_names.update({k: v for k, v in (keywords or {}).items() if v is not _MISSING})
    local_names.pop(parameter, None)
    scope = _Scope(local_names, func.__globals__, code.co_filename)
    scope.called_from = called_from
    for inner in parameter_sites(code, parameter):
        if inner == _RETURNED:
            continue  # given back: the caller's use was judged where it was made
        found = read_unseen(inner, scope, depth + 1)
        if found is not None:
            return found
    return None


# PyTorch's files that hand a call on and give its result back to their caller.
_PLUMBING = tuple(os.path.join(TORCH_DIR, name) for name in ("overrides.py", "_tensor.py"))


def made_for_user_code(frame):
    """The user's frame that receives a traced number made under ``frame``, or None where
    PyTorch's own Python code made it for itself (``F.batch_norm`` checking the batch size,
    ``multi_head_attention_forward`` reading shapes): PyTorch's reads are PyTorch's."""
    while frame is not None and frame.f_code.co_filename.startswith(OWN_DIR):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.startswith(_PLUMBING):
        frame = frame.f_back
    if frame is None or is_internal(frame.f_code.co_filename):
        return None
    return frame


def unseen_read(
    frame,
    element: int | None = None,
    rank: int = 0,
    later: list | None = None,
    number=None,
    identities: list | None = None,
) -> tuple | None:
    """``(file, line)`` where C code reads the traced number made at ``frame``'s current
    instruction without asking it, or None (see the module Note). ``element``: the number
    is that item of a ``torch.Size`` made there. ``later`` receives ``(frame, site)`` for
    each subscript of a local that is not bound yet: :func:`settle` judges it when the
    trace ends. ``identities`` receives what :func:`identity_read` finds (``n is 1``),
    which does not end the search: another read may need the value guarded."""
    for _ in range(_CALLERS):
        if frame is None or is_internal(frame.f_code.co_filename):
            return None
        filename, position = _node_at(frame)
        if filename is None:
            return None
        sites = sites_at(filename, position, element, rank)
        if not sites:
            return None
        scope = _Scope(frame.f_locals, frame.f_globals, filename, frame)
        scope.number = number
        first = None
        for site in sites:
            if site == _RETURNED or (first is not None and site.kind != IDENTITY):
                continue
            found = read_unseen(site, scope)
            if found is not None and found[2:3] and found[2][0] == IDENTITY:
                if identities is not None:
                    identities.append(found)
            elif found is not None:
                first = found
        if first is not None:
            return first
        if later is not None:
            later.extend((frame, site) for site in scope.later)
        if _RETURNED not in sites or element is not None:
            return None
        frame = frame.f_back
    return None


def settle(frame, site: Site) -> tuple[str, int] | None:
    """For a subscript (or a method call) of a local that was not bound where the number
    was made (``n = x.shape[0]; table = make_table(); table[n]``): ``(file, line)`` where C code
    reads the number, judged from what the local holds when the trace ends (a frame
    that has returned keeps its locals), else None (a tensor, or never bound: the line
    did not run)."""
    filename = frame.f_code.co_filename
    scope = _Scope(frame.f_locals, frame.f_globals, filename)
    if site.kind == "call":  # a method of a local bound after the number was made
        func = _resolve(site.expr.func, scope)
        return None if func is _MISSING else _call_reads(site, func, scope, 0)
    container = scope.local_names.get(site.expr.id, _MISSING)
    if container is _MISSING:
        return None
    return _subscript_reads(site, container, scope, 0)
