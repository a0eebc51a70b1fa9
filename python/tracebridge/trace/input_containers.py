"""The containers a recorded call is given: changes to them are refused, and undone.

Note: why a change to an input's container is refused.
  A trace replays tensor operations, and writes into tensors (``x.add_(1)``,
  ``x[mask] = 0``: the input's memory is the caller's, and the graph writes it again on
  every call). A dict, a list or a dataclass the caller passes is not a tensor: the graph
  reads the tensors it holds and never writes the container itself. Code that changes one
  (a streaming model that keeps its running state in the dict the caller owns,
  ``state["h"] = h``; ``cache.append(k)``; ``batch["logits"] = head(x); return batch``)
  changes the caller's container in eager, and a call of the trace leaves it as it was:
  silently wrong from the second step on (prober20b F6). Worse, the recording is the one
  run that changes the example's own containers, so every check after it ran on what the
  recording left (an example dict with an extra key) and failed naming a call the user
  never made. So each recording compares the containers of its inputs, item by item and
  by identity, before and after the run, puts them back as they were, and refuses a
  change naming the argument, the key or index and, where it finds it, the line. Only the
  containers the inputs are made of are read (a walk of the example, twice per
  recording), never the objects they hold.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import torch

from ..errors import TraceError

# Methods that change a list or a dict in place (what a line that changes one calls).
_CHANGING_METHODS = frozenset(
    """append extend insert pop remove clear sort reverse update setdefault popitem
    __setitem__ __delitem__""".split()
)


@dataclasses.dataclass
class _Kept:
    """One mutable container of the inputs, as it was before the run."""

    container: Any
    path: str  # how the code names it: ``state``, ``batch['inputs'][0]``
    argument: str  # the argument it is (or is in)
    items: list  # [(key, value)] in order (a list's keys are its indices)


def _kind(container) -> str:
    if isinstance(container, list):
        return "list"
    if isinstance(container, dict):
        return "dict"
    return type(container).__name__


def _items(container) -> list:
    if isinstance(container, list):
        return list(enumerate(container))
    if isinstance(container, dict):
        return list(dict.items(container))
    fields = [f.name for f in dataclasses.fields(container)]
    found = getattr(container, "__dict__", None)
    names = list(found) if isinstance(found, dict) else fields
    return [(name, getattr(container, name)) for name in names if hasattr(container, name)]


def _walk(value, path: str, argument: str, kept: list, seen: set) -> None:
    if isinstance(value, torch.Tensor) or id(value) in seen:
        return
    if isinstance(value, (list, dict)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        seen.add(id(value))
        items = _items(value)
        kept.append(_Kept(value, path, argument, items))
    elif isinstance(value, tuple):
        items = list(enumerate(value))
    else:
        return
    dataclass = not isinstance(value, (list, dict, tuple))
    for key, item in items:
        _walk(item, f"{path}.{key}" if dataclass else f"{path}[{key!r}]", argument, kept, seen)


class Watched:
    """The mutable containers of a call's inputs, kept to be compared after the run."""

    def __init__(self, args: tuple, kwargs: dict, arg_names: list[str]):
        self.kept: list[_Kept] = []
        seen: set[int] = set()
        named = list(zip(arg_names, args)) + list(kwargs.items())
        for name, value in named:
            _walk(value, str(name), str(name), self.kept, seen)

    def changes(self) -> list[tuple[_Kept, str, Any]]:
        """(container, what changed in words, the key) for each container the run changed."""
        found = []
        for kept in self.kept:
            now = _items(kept.container)
            if _same(now, kept.items):
                continue
            found.append((kept, *_what_changed(kept, now)))
        return found

    def restore(self) -> None:
        """Put every container back as it was (the same objects, in the same order)."""
        for kept in self.kept:
            container = kept.container
            if isinstance(container, list):
                container[:] = [value for _, value in kept.items]
            elif isinstance(container, dict):
                if not _same(list(dict.items(container)), kept.items):
                    dict.clear(container)
                    dict.update(container, kept.items)
            else:
                found = getattr(container, "__dict__", None)
                for name in list(found) if isinstance(found, dict) else []:
                    if name not in dict(kept.items):
                        del found[name]
                for name, value in kept.items:
                    if getattr(container, name, _MISSING) is not value:
                        object.__setattr__(container, name, value)

    def refuse_changes(self, function: Callable, function_name: str, tracer=None) -> None:
        """Raise :class:`TraceError` where the run changed a container (the module's note;
        :meth:`restore` puts them back, whatever the run did)."""
        changed = self.changes()
        if not changed:
            return
        kept, what, key = changed[0]
        where = _changing_line(function, kept, key) or _stored_at(tracer, kept, key)
        at = f" at {where}" if where else ""
        kind = _kind(kept.container)
        what_of = (
            f"its input {kind} {kept.argument!r}"
            if kept.path == kept.argument
            else f"the {kind} {kept.path} of its input {kept.argument!r}"
        )
        raise TraceError(
            f"{function_name} changes {what_of} ({what}){at}: "
            f"a trace cannot replay changes to its arguments' containers (a call of the trace "
            f"would leave the caller's {kind} as it was, where the code changes it; the "
            "example inputs are left as they were before tracing). Return the new value "
            "instead (or, for a tensor the caller keeps, write into it in place: "
            "state['h'].copy_(h), which a trace replays)"
        )


_MISSING = object()


def _same(now: list, before: list) -> bool:
    """Whether two item lists hold the same keys, in order, with the same objects."""
    return len(now) == len(before) and all(
        a[0] == b[0] and a[1] is b[1] for a, b in zip(now, before)
    )


def _what_changed(kept: _Kept, now: list) -> tuple[str, Any]:
    """Words for the first change of a container, and the key it is at."""
    before = dict(kept.items) if not isinstance(kept.container, list) else None
    if isinstance(kept.container, list):
        old = [v for _, v in kept.items]
        new = [v for _, v in now]
        for index, (a, b) in enumerate(zip(old, new)):
            if a is not b:
                if len(new) == len(old):
                    return f"index {index} set", index
                grew = "added" if len(new) > len(old) else "removed"
                return f"items {grew} at index {index}", index
        if len(new) > len(old):
            return f"item added at index {len(old)}", len(old)
        return f"item removed at index {len(new)}", len(new)
    after = dict(now)
    word = "key" if isinstance(kept.container, dict) else "field"
    for key, value in now:
        if key not in before:
            return f"{word} {key!r} added", key
        if before[key] is not value:
            return f"{word} {key!r} set", key
    for key, _ in kept.items:
        if key not in after:
            return f"{word} {key!r} removed", key
    return "its keys reordered", None


def _changing_line(function: Callable, kept: _Kept, key) -> str | None:
    """``file:line`` of a statement of ``function`` that changes the argument's container
    (``name[key] = ...``, ``del name[key]``, ``name.append(...)``, ``name.field = ...``),
    one naming ``key`` first; None where its source shows none (the change is made in a
    function it calls, or there is no source)."""
    code, tree = _source_tree(function)
    if tree is None:
        return None
    name = kept.argument
    hits = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, (ast.Subscript, ast.Attribute)) and _rooted_at(target, name):
                hits.append((_names_key(target, key), node.lineno))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _CHANGING_METHODS
            and _rooted_at(node.func.value, name, itself=True)
        ):
            hits.append((any(_is_constant(a, key) for a in node.args), node.lineno))
    if not hits:
        return None
    line = max(hits, key=lambda hit: hit[0])[1]  # one that names the key, else the first
    return f"{code.co_filename}:{code.co_firstlineno + line - 1}"


def _rooted_at(node: ast.AST, name: str, itself: bool = False) -> bool:
    """Whether ``node`` is ``name[...]...`` or ``name.attr...`` (or ``name`` itself)."""
    if not itself:
        if not isinstance(node, (ast.Subscript, ast.Attribute)):
            return False
        node = node.value
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, ast.Name) and node.id == name


def _names_key(target: ast.AST, key) -> bool:
    if isinstance(target, ast.Subscript):
        return _is_constant(target.slice, key)
    return isinstance(target, ast.Attribute) and target.attr == key


def _is_constant(node: ast.AST, key) -> bool:
    return isinstance(node, ast.Constant) and key is not None and node.value == key


@functools.lru_cache(maxsize=256)
def _parsed(code) -> ast.AST | None:
    try:
        lines, _ = inspect.findsource(code)
        first = code.co_firstlineno - 1
        source = textwrap.dedent("".join(inspect.getblock(lines[first:])))
        return ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError, IndexError):
        return None


def _source_tree(function: Callable):
    """(code object, its parsed source) of the function a recording runs (a module: its
    forward); (None, None) where there is no source."""
    if isinstance(function, torch.nn.Module):
        function = type(function).forward
    function = inspect.unwrap(getattr(function, "__func__", function))
    code = getattr(function, "__code__", None)
    if code is None:
        return None, None
    return code, _parsed(code)


def _stored_at(tracer, kept: _Kept, key) -> str | None:
    """The line that made the tensor the run stored under ``key``, where it stored one the
    recording made."""
    if tracer is None or key is None:
        return None
    try:
        value = dict(_items(kept.container)).get(key)
    except TypeError:
        return None
    if not isinstance(value, torch.Tensor):
        return None
    hit = tracer._lookup(value)
    node = tracer._producers.get(hit[1].id) if hit is not None else None
    return node.loc if node is not None and node.loc else None


class Layouts:
    """The sizes and strides of a call's input tensors, put back after the recording.

    Note: an input reshaped in place (``x.unsqueeze_(0)``, ``x.squeeze_()``, ``x.t_()``).
    The graph replays the reshape on the caller's tensor on every call
    (runtime/support.py, ``reshaped_inputs``), as eager does; but the recording is a run
    on the example itself, and the checks after it copy the example: they ran on the
    reshaped example, which the trace refused for its rank, naming a call the user never
    made (prober20b F6). The example gets its layout back (its values, which a write in
    place changed, stay as the one run left them, as after an eager call)."""

    def __init__(self, leaves: list):
        self.kept = [
            (t, t.size(), t.stride(), t.storage_offset())
            for t in leaves
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_nested
        ]

    def restore(self) -> None:
        for tensor, size, stride, offset in self.kept:
            if (tensor.size(), tensor.stride(), tensor.storage_offset()) != (size, stride, offset):
                with torch.no_grad(), torch._C.DisableTorchFunction():
                    tensor.as_strided_(size, stride, offset)
