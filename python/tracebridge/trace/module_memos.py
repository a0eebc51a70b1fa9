"""Memos a module's methods fill, whatever their key is made of: refused where the value
a recording stored reads what the key is not known to hold.

Note: why the key's spelling does not decide.
  trace/memo_tables.py checks the entries a recording stored under a traced key: a traced
  number, or text trace/text.py saw made from one (``f"b{B}"``, ``str(B)``). Text made by
  any other way (``"{}".format(B)``, ``repr(B)``, ``"%d" % (B,)``, ``string.Template``,
  a helper method that returns the key) is a plain ``str``: the size was guarded where it
  became text, but the memo was never looked at, and a value that reads another size
  (``memo[key] = full((B, 1), float(N))``) was traced as general in ``N`` while eager keeps
  the first call's value under the key of ``B``: silently wrong (prober19b F5). So the
  check follows the data, not the spelling: each dict that a method of a traced module's
  class, or of a plain object the module holds, fills as a memo (it stores
  ``self.d[key] = ...`` and asks whether ``key`` is there: caches.py's ``_fills``) is
  copied before the recording, and every entry the recording added under a key that
  memo_tables did not check (a plain key, or text whose use text.py did not follow) is
  checked as memo_tables checks its own. A plain key is known to hold no size: a value
  that reads an input's size or data is refused, naming the memo, the size and the line,
  unless a guard fixed that size (the text's guard: every call the trace serves has the
  example's size, and eager's value for the key is then the trace's). A global memo is
  not watched: the trace check's second recording hits it and is refused as unstable.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import textwrap
from types import CodeType, ModuleType

import torch

from ..errors import TraceError
from .caches import _fills, _function_of
from .memo_tables import _DEPTH, _data_source, _refs_of, _traced_by, plain_key
from .python_state import instance_dict
from .text import _parsed, parse


def watch(module) -> list[tuple]:
    """(dict, its entries now, its source label, where it is filled) for each dict of
    ``module`` (and its sub-modules) that a method of its class fills as a memo."""
    if not isinstance(module, torch.nn.Module):
        return []
    watched = []
    for owner in _owners(module):
        stores = {attr: (label, line) for attr, label, line in _memo_stores(type(owner))}
        for attr, table in list(vars(owner).items()):
            if type(table) is dict and attr not in _MODULE_OWN:
                # a dict no method of the class fills may be filled by a function it is
                # given to (``fill(self.memo, B, N)``): found at the check, by the line
                # that made the stored value
                watched.append((table, dict(table), *stores.get(attr, (None, None))))
    return watched


# The attributes every nn.Module has (its parameter, buffer and hook tables).
_MODULE_OWN = frozenset(vars(torch.nn.Module()))


def _owners(module: torch.nn.Module) -> list:
    """The sub-modules, and the plain objects they hold as attributes (a helper that
    keeps the memo: ``self.masks = MaskMaker()``)."""
    owners = list(module.modules())
    for mod in list(owners):
        for value in list(vars(mod).values()):
            if (
                instance_dict(value) is not None
                and not isinstance(value, (torch.nn.Module, torch.Tensor, type, ModuleType))
                and not callable(value)
            ):
                owners.append(value)
    return owners


def check(tracer, watched: list[tuple]) -> None:
    """Refuse an entry a recording stored in a watched memo, under a key memo_tables did
    not check, whose value reads a size or the data of the call the key does not hold."""
    tables = tracer.memo_tables
    for table, before, label, line in watched:
        if id(table) in tables._set_aside:
            continue  # every entry there is checked already
        noted = id(table) in tables._tables
        for key, value in list(dict.items(table)):
            traced = _traced_by(key, tracer, _DEPTH)
            if traced and noted:
                continue  # memo_tables checks what a traced key holds in a dict it noted
            # (a traced key is the recording's: it is not hashed here, which would guard it)
            if not traced and before.get(key, _MISSING) is value:
                continue  # kept from before the recording
            where = (label, line) if label is not None else _memo_store_at(tracer, value)
            source = _data_source(tracer, value, key) if where is not None else None
            if source is None:
                continue
            remedy = (
                "Put every size the value reads in the key (memo[n, c], not memo[n]), or "
                "compute the value on every call"
                if "size" in source and "values decide" not in source
                else "Compute the value on every call, or make it state the model holds "
                "(a buffer set once, before tracing)"
            )
            raise TraceError(
                f"the memo {where[0]} keeps, under the key {plain_key(key)!r}, a value "
                f"computed from {source} (filled at {where[1]}): an eager call reuses the value "
                f"an earlier call stored, a traced call would compute its own. {remedy}"
            )


_MISSING = object()


@functools.lru_cache(maxsize=1024)
def _memo_stores(klass: type) -> tuple[tuple[str, str, str], ...]:
    """(attribute, source label, ``file:line`` of the store) for each attribute of ``self``
    that a method of ``klass`` (outside torch) fills as a memo."""
    found = []
    for owner in klass.__mro__:
        if owner.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        for member in vars(owner).values():
            function = getattr(member, "__func__", member)
            code = getattr(function, "__code__", None)
            if not isinstance(code, CodeType) or not _stores_an_item(code):
                continue  # no ``x[k] = v`` in its code: no memo store to find in its source
            tree = _function_tree(function)
            if tree is None or not tree.args.args:
                continue
            me = tree.args.args[0].arg
            for node in ast.walk(tree):
                for target in node.targets if isinstance(node, ast.Assign) else []:
                    if not _item_of_own(target, me):
                        continue
                    where, key = ast.unparse(target.value), ast.unparse(target.slice)
                    if _fills(tree, where, key):
                        line = code.co_firstlineno + node.lineno - 1
                        found.append((target.value.attr, where, f"{code.co_filename}:{line}"))
    return tuple(dict.fromkeys(found))


# The instructions an assignment to an item (``self.memo[key] = value``) compiles to.
_ITEM_STORES = frozenset(
    dis.opmap[name] for name in ("STORE_SUBSCR", "STORE_SLICE") if name in dis.opmap
)


def _stores_an_item(code: CodeType) -> bool:
    """Whether ``code`` or a function, lambda or comprehension nested in it assigns to an
    item: read from the bytecode, where reading the source (``inspect.getsource``
    tokenizes the file) and parsing it, for every method of every class of a model, was
    most of a transformers model's first recording. Only such a function can hold the
    stores :func:`_memo_stores` looks for."""
    if not _ITEM_STORES.isdisjoint(code.co_code[::2]):
        return True
    return any(isinstance(c, CodeType) and _stores_an_item(c) for c in code.co_consts)


def _item_of_own(target: ast.AST, me: str) -> bool:
    """Whether ``target`` is ``me.attr[key]`` (an entry of the instance's own dict)."""
    return (
        isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Attribute)
        and isinstance(target.value.value, ast.Name)
        and target.value.value.id == me
    )


def _function_tree(function):
    """The parsed definition of ``function``, or None (no source, a lambda)."""
    try:
        tree = parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    first = tree.body[0] if tree.body else None
    return first if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _memo_store_at(tracer, value) -> tuple[str, str] | None:
    """(the memo's source label, ``file:line``) where the line that made ``value`` stores it
    into a memo (``memo[key] = full(...)`` in a function that asks for ``key`` first),
    else None."""
    loc = next(
        (
            node.loc
            for ref in _refs_of(tracer, value, _DEPTH)
            if (node := tracer._producers.get(ref.id)) is not None and node.loc
        ),
        None,
    )
    filename, _, line = (loc or "").rpartition(":")
    index = _parsed(filename) if filename and line.isdigit() else None
    for expr in (index or {}).values():
        if expr.lineno != int(line):
            continue
        statement = expr
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = getattr(statement, "_tb_parent", None)
        function = _function_of(statement) if isinstance(statement, ast.Assign) else None
        for target in statement.targets if function is not None else []:
            if isinstance(target, ast.Subscript):
                where, key = ast.unparse(target.value), ast.unparse(target.slice)
                if _fills(function, where, key):
                    return where, loc
    return None
