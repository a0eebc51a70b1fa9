"""What the traced code does with a device it read (``x.device``): pass it on, or inspect it.

Note: why a device read is guarded only where the code inspects it.
  A traced program follows its inputs' device: ``torch.zeros(n, device=x.device)`` and
  ``y.to(x.device)`` record the read (``prim.device``), so a trace made on the CPU serves
  CUDA inputs. But code also branches on the device (``if x.device.type == "cpu":``, the
  SDPA ``query.device.type == "cuda"`` checks, ``str(x.device)``): that branch is a
  decision the trace fixed, and a call on another device would run the example's branch
  silently. ``torch.device`` cannot be subclassed or hooked, so what the code does with the
  object cannot be seen when it is used; the tracer reads the caller's source instead (the
  read's position in the caller's code, found in its AST, as trace/text.py does for text):

  - ``passed``: the device only goes into calls (a factory, ``.to()``), a keyword, a
    container or a conditional expression on its way there, a local whose every read
    does, or a parameter of a Python function of the user's (a helper, a method, a
    sub-module's ``forward``, found without running code) whose every read does; or it
    is tested for ``None``: no guard, the program follows the call's device;
  - ``type``: the code reads ``.type`` of it (every inspection is of the type): the
    device's type is guarded (``prim.is_device_type``), so a trace made on ``cuda:0``
    serves ``cuda:1``; where the type is only compared with names (``== "cuda"``,
    ``in ("cuda", "xpu")``), each answer is guarded instead, so a trace made on the meta
    device serves CPU calls of ``if x.device.type == "cuda"``;
  - ``full``: anything else (compared, ``.index``, formatted, hashed, a dict key,
    ``in``, returned, stored, or a line whose source cannot be read): the whole device is
    guarded, as ``x.get_device()`` is.

  What this does not see: a device taken by ``*args`` / ``**kwargs``, or given to a
  function that cannot be found without running code (a callable kept in a dict, a
  ``__getattr__``), is ``passed``; that function's own reads are of a plain
  ``torch.device``, which no hook sees. See docs/devices.md.
"""

from __future__ import annotations

import ast
import inspect
import types

import torch

from ..source import is_internal
from .text import _parsed, _positions, def_node

PASSED, TYPE, FULL = "passed", "type", "full"
_RETURNED = "returned"  # given back to the caller: judged at the caller's line
_RANK = {PASSED: 0, TYPE: 1, FULL: 2}
_CALLERS = 8  # how many returns are followed up the stack before giving up (full)

# Calls that inspect what they are given, though the device is "passed" to them.
_INSPECTING_CALLS = frozenset(
    "str repr format hash bool int len print isinstance getattr hasattr id type".split()
)
# Methods that look a value up: ``table.get(x.device)``, ``devices.index(x.device)``.
_LOOKUPS = frozenset("get setdefault pop index count remove __contains__ __getitem__".split())
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def device_use(frame) -> tuple[str, frozenset]:
    """How the code at ``frame``'s current instruction (a read of ``.device``) uses the
    device (see :func:`_device_use`); ``"full"`` where reading the source fails in a way
    not foreseen: a guard too many is safe, a missing one is not."""
    try:
        return _device_use(frame)
    except Exception:  # noqa: BLE001 - any failure to read the source: the safe answer
        return FULL, frozenset()


def _device_use(frame) -> tuple[str, frozenset]:
    """How the code at ``frame``'s current instruction (a read of ``.device``) uses the
    device: ``"passed"``, ``"type"`` or ``"full"`` (the module Note), and the device type
    names that ``x.device.type`` is compared with (each answer to guard). A device
    returned (``return param.device``, a ``device`` property) is judged where the caller
    uses it."""
    node = _node_at(frame)
    if not (isinstance(node, ast.Attribute) and node.attr == "device"):
        return FULL, frozenset()  # getattr(x, "device"), or a line we cannot place
    uses = _use(node, frozenset(), _Scope.of(frame))
    for _ in range(_CALLERS):
        if _RETURNED not in uses:
            break
        frame = frame.f_back
        caller = (
            _node_at(frame)
            if frame is not None and not is_internal(frame.f_code.co_filename)
            else None
        )
        found = _use(caller, frozenset(), _Scope.of(frame)) if caller else {FULL}
        uses = (uses - {_RETURNED}) | found
    if _RETURNED in uses:
        return FULL, frozenset()
    names = frozenset(u[1] for u in uses if isinstance(u, tuple))
    kinds = [PASSED] + [u for u in uses if not isinstance(u, tuple)]
    return max(kinds, key=_RANK.__getitem__), names


def _node_at(frame) -> ast.AST | None:
    """The expression node of ``frame``'s current instruction, or None."""
    if frame is None:
        return None
    code = frame.f_code
    positions = _positions(code)
    index = frame.f_lasti // 2
    if index >= len(positions) or None in positions[index]:
        return None
    tree = _parsed(code.co_filename)
    return tree.get(tuple(positions[index])) if tree is not None else None


def _use(node: ast.AST, following: frozenset, scope: _Scope) -> set:
    """Where the device made by ``node`` goes, walking up through expressions that carry
    it unchanged; into a local, through every read of it (``following``: locals on the
    way). A set of outcomes: PASSED, TYPE, FULL, or _RETURNED."""
    child, parent = node, getattr(node, "_tb_parent", None)
    while parent is not None:
        if isinstance(parent, ast.Attribute):
            if parent.attr != "type":
                return {FULL}
            names = _compared_names(parent)
            return {("is", n) for n in names} if names else {TYPE}
        unpacked = _unpacked_into(parent, child)
        if unpacked is not None:  # ``n, device = x.shape[0], x.device``
            return _local_use(getattr(parent, "_tb_parent", None), unpacked, following, scope)
        if isinstance(parent, (ast.keyword, ast.Starred)) or (
            isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parent.ctx, ast.Load)
        ):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Dict) and any(child is v for v in parent.values):
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.IfExp) and child is not parent.test:
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.BoolOp):  # ``device or x.device``: the value is passed up
            child, parent = parent, getattr(parent, "_tb_parent", None)
            continue
        if isinstance(parent, ast.Call):
            if child is parent.func:
                return {FULL}
            func = parent.func
            if isinstance(func, ast.Name) and func.id in _INSPECTING_CALLS:
                return {FULL}
            if isinstance(func, ast.Attribute) and func.attr in _LOOKUPS:
                return {FULL}  # a key: which entry it finds depends on the device
            uses = _into_callee(parent, child, following, scope)
            if _RETURNED in uses:  # the helper gives the device back: follow its result
                uses = (uses - {_RETURNED}) | _use(parent, following, scope)
            return uses
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and child is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                return {FULL}
            return _local_use(parent, targets[0].id, following, scope)
        if isinstance(parent, ast.Expr):
            return {PASSED}  # a bare ``x.device`` statement: read and dropped
        if _is_none_test(parent):
            return {PASSED}  # ``if device is None:``: no device is None, whichever it is
        if isinstance(parent, ast.Return) and _in_function(parent):
            return {_RETURNED}
        return {FULL}
    return {FULL}


def _is_none_test(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.Is, ast.IsNot))
        and any(
            isinstance(n, ast.Constant) and n.value is None for n in (node.left, *node.comparators)
        )
    )


def _compared_names(node: ast.AST) -> list | None:
    """The names ``x.device.type`` is compared with, where that is all the code does with
    it (``== "cuda"``, ``!= "cpu"``, ``in ("cuda", "xpu")``), else None: then only each
    answer is guarded, not the type (a trace made on meta serves the CPU, where
    ``x.device.type == "cuda"`` is False as well)."""
    parent = getattr(node, "_tb_parent", None)
    if not isinstance(parent, ast.Compare) or len(parent.ops) != 1:
        return None
    other = parent.comparators[0] if parent.left is node else parent.left
    if isinstance(parent.ops[0], (ast.Eq, ast.NotEq)):
        items = [other]
    elif isinstance(parent.ops[0], (ast.In, ast.NotIn)) and parent.left is node:
        items = other.elts if isinstance(other, (ast.Tuple, ast.List, ast.Set)) else []
    else:
        return None
    names = [i.value for i in items if isinstance(i, ast.Constant)]
    if not items or len(names) != len(items) or not all(isinstance(n, str) for n in names):
        return None
    return names


def _in_function(node: ast.AST) -> bool:
    parent = getattr(node, "_tb_parent", None)
    while parent is not None and not isinstance(parent, (*_DEFS, ast.Lambda, ast.ClassDef)):
        parent = getattr(parent, "_tb_parent", None)
    return isinstance(parent, _DEFS)


def _unpacked_into(parent: ast.AST, child: ast.AST) -> str | None:
    """The local that ``child``, an item of the tuple ``parent``, is assigned to where the
    tuple is unpacked into names at once (``a, device = n, x.device``), else None."""
    if not (isinstance(parent, ast.Tuple) and isinstance(parent.ctx, ast.Load)):
        return None
    assign = getattr(parent, "_tb_parent", None)
    if not (isinstance(assign, ast.Assign) and assign.value is parent and len(assign.targets) == 1):
        return None
    target = assign.targets[0]
    if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) != len(parent.elts):
        return None
    if any(isinstance(e, ast.Starred) for e in (*target.elts, *parent.elts)):
        return None
    item = target.elts[[i for i, e in enumerate(parent.elts) if e is child][0]]
    return item.id if isinstance(item, ast.Name) else None


def _local_use(assign: ast.stmt, name: str, following: frozenset, scope: _Scope) -> set:
    """``device = x.device`` in a function: the uses of every read of the local ``name``
    (a plain local only; a global, a class attribute: ``full``)."""
    function = getattr(assign, "_tb_parent", None)
    while function is not None and not isinstance(function, _DEFS):
        if isinstance(function, (ast.ClassDef, ast.Lambda)):
            return {FULL}
        function = getattr(function, "_tb_parent", None)
    if function is None:
        return {FULL}  # a module-level name: any code may read it
    return _reads_of(function, name, following, scope)


def _reads_of(function: ast.AST, name: str, following: frozenset, scope: _Scope) -> set:
    """The uses of every read of the local ``name`` of ``function``."""
    key = (id(function), name)
    if key in following:
        return {PASSED}  # a cycle of locals: judged by the reads outside it
    if len(following) > _DEPTH:
        return {FULL}
    following = following | {key}
    uses = {PASSED}
    for node in ast.walk(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return {FULL}
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            uses |= _use(node, following, scope)
    return uses


# --- a device passed to a function of the user's: followed into it ----------------------


class _Scope:
    """The names the code being read can reach: a frame's locals and globals, or a
    function's globals (read without running code: no property, no ``__getattr__``)."""

    def __init__(self, local_names: dict, global_names: dict):
        self.local_names, self.global_names = local_names, global_names

    @classmethod
    def of(cls, frame) -> _Scope:
        if frame is None:
            return cls({}, {})
        return cls(frame.f_locals, frame.f_globals)

    def lookup(self, name: str):
        for names in (self.local_names, self.global_names):
            if name in names:
                return names[name]
        return _MISSING


_MISSING = object()
_DEPTH = 24  # locals and parameters followed at most, across helpers


def _into_callee(call: ast.Call, child: ast.AST, following: frozenset, scope: _Scope) -> set:
    """Where a device given to ``call`` goes: into a Python function of the user's (a
    helper, a method, a sub-module's forward), the uses of its parameter there; anything
    else (PyTorch, C code, a callee that cannot be found without running code) takes it
    as a value to use: passed."""
    found = _callee(call.func, scope)
    if found is None:
        return {PASSED}
    function, shift = found
    code = function.__code__
    if is_internal(code.co_filename):
        return {PASSED}
    node = def_node(code.co_filename, code.co_firstlineno, code.co_name, code)
    if node is None:
        return {PASSED}
    args = node.args
    if isinstance(child, ast.keyword):
        names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        parameter = child.arg if child.arg in names else None
    else:
        before = call.args[: [i for i, a in enumerate(call.args) if a is child][0]]
        positional = [a.arg for a in (*args.posonlyargs, *args.args)][shift:]
        index = len(before)
        ok = not any(isinstance(a, ast.Starred) for a in before) and index < len(positional)
        parameter = positional[index] if ok else None
    if parameter is None:
        return {PASSED}  # taken by *args / **kwargs: not followed (as a call into C)
    return _reads_of(node, parameter, following, _Scope({}, function.__globals__))


def _callee(func: ast.AST, scope: _Scope):
    """The Python function ``func`` names, and how many parameters its binding fills
    (``self``), found without running code; else None."""
    shift = 0
    if isinstance(func, ast.Name):
        target = scope.lookup(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = scope.lookup(func.value.id)
        if owner is _MISSING:
            return None
        target = _static_attribute(owner, func.attr)
        if isinstance(target, types.FunctionType) and not isinstance(
            owner, (type, types.ModuleType)
        ):
            shift = 1  # a method looked up on an instance: self is bound
    else:
        return None
    if isinstance(target, staticmethod):
        target, shift = target.__func__, 0
    elif isinstance(target, classmethod):
        target, shift = target.__func__, 1
    elif isinstance(target, torch.nn.Module):
        target, shift = type(target).forward, 1
    if not isinstance(target, types.FunctionType):
        return None
    return target, shift


def _static_attribute(owner, name: str):
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        modules = vars(owner).get("_modules") if hasattr(owner, "__dict__") else None
        return modules.get(name, _MISSING) if isinstance(modules, dict) else _MISSING
