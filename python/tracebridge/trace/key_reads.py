"""Dict inputs and ``**kwargs`` that the traced code reads only by key: any order serves.

Note: why the order of a dict input matters, and when it does not.
  A dict input (``forward(self, batch)``) or the ``**kwargs`` a callable collects is
  flattened in the example's key order, and a call that passes the same keys in another
  order is put back in the traced order before the graph runs. Code that iterates the dict
  (``d.values()``, ``for k in d``, ``list(d)``, ``**d`` into another ``**kwargs``) ran in
  the example's order while tracing and runs in the call's in eager, so such a call is
  refused (runtime/method.py, ``refuse_reordered``). But code that only looks entries up
  (``d["x"]``, ``d.get("mask")``, ``"mask" in d``, ``len(d)``) computes the same whatever
  the order, and the refusal was a false one (prober20b m12). So the function's source is
  read: a parameter whose every use is such a lookup is listed in the graph's
  ``any_order`` (kept in the file: shared_ir/SPEC.md), and a call may pass its keys in any
  order. Any other use (passed on, aliased, iterated, a method other than ``get``, a
  nested function that names it) keeps the order part of the input, as before. Only the
  dict itself is freed: a dict held inside it keeps its own order (its uses are not
  followed).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

import torch


def order_free_parameters(fn: Callable, arg_names: list[str], args: tuple, kwargs: dict):
    """The names of ``fn``'s parameters given a dict (by position or keyword), and of its
    ``**kwargs`` parameter where the call fills it, that its code reads only by key; []
    where the source cannot be read."""
    if not kwargs and not any(type(a) is dict for a in args):
        return []  # nothing to read: the common call pays no parse
    fn = _function_of(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    given = dict(zip(arg_names, args))
    given.update(kwargs)
    candidates = []
    for parameter in signature.parameters.values():
        if parameter.kind == parameter.VAR_KEYWORD:
            named = {
                p.name
                for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            }
            if sum(k not in named for k in kwargs) > 1:
                candidates.append(parameter.name)
        elif type(given.get(parameter.name)) is dict and len(given[parameter.name]) > 1:
            candidates.append(parameter.name)
    if not candidates:
        return []
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (TypeError, ValueError, OSError, SyntaxError, IndentationError):
        return []
    node = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if node is None:
        return []
    return [name for name in candidates if _read_only_by_key(node, name)]


def _function_of(fn: Callable):
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(fn, "__name__", "") in (
        "__call__",
        "_wrapped_call_impl",
        "_call_impl",
    ):
        fn = owner.forward
    elif isinstance(fn, torch.nn.Module):
        fn = fn.forward
    return inspect.unwrap(getattr(fn, "__func__", fn))


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _read_only_by_key(function: ast.AST, name: str) -> bool:
    """Whether every use of ``name`` in ``function`` is a lookup by key: ``name[k]``
    read, ``name.get(...)``, ``k in name`` / ``not in``, ``len(name)``. A store to the name
    (it is another object then), a nested function or class, ``del``, ``global`` or
    ``nonlocal`` of it: not."""
    parents = {}
    for parent in ast.walk(function):
        for child in ast.iter_child_nodes(parent):
            parents[child] = parent
    for node in ast.walk(function):
        nested = node is not function and isinstance(node, _NESTED)
        if nested and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
            return False
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return False
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        if not isinstance(node.ctx, ast.Load) or not _a_lookup(node, parents.get(node), parents):
            return False
    return True


def _a_lookup(node: ast.Name, parent, parents: dict) -> bool:
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return isinstance(parent.ctx, ast.Load) and not isinstance(parent.slice, ast.Slice)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        call = parents.get(parent)
        return parent.attr == "get" and isinstance(call, ast.Call) and call.func is parent
    if isinstance(parent, ast.Compare):
        at = [parent.left, *parent.comparators].index(node)
        return at > 0 and isinstance(parent.ops[at - 1], (ast.In, ast.NotIn))
    if isinstance(parent, ast.Call) and parent.args == [node] and not parent.keywords:
        return isinstance(parent.func, ast.Name) and parent.func.id == "len"
    return False
