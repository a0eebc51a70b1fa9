"""Module hooks that the traced code installs on itself while it is recorded.

Note: why. Some libraries install hooks lazily, on a model's first call, and mark the
model as hooked (transformers' output capturing: ``maybe_install_capturing_hooks`` puts a
forward hook on each layer whose outputs a caller asked for, then sets
``_output_capturing_hooks_installed``). Tracing leaves the model as it was
(``capture.preserved``): the flag and the hooks go together, or the next call installs
the hooks again and records every hidden state twice. Those hooks are the model's own
machinery: the recording saw what they did (their effect is inside the call), and the
model's next eager call installs them again. So the traced module's check that its
sub-modules have the hooks they had at trace time (``api._child_hooks``) counts neither
their absence nor their return: a hook whose code the traced code itself installed on
that module during a recording is not the user's. A user's hook, registered from outside,
is still counted.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from torch import nn
from torch.nn.modules import module as _module_hooks

HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
# The hooks every module call runs (``nn.modules.module.register_module_forward_hook``...)
GLOBAL_HOOK_TABLES = tuple(f"_global{name}" for name in HOOK_TABLES)
GLOBAL = "(global module hooks)"  # their entry among the sub-modules' hooks (api._child_hooks)

# module -> the code objects of hooks its traced code installed on it while recorded
_INSTALLED: weakref.WeakKeyDictionary[nn.Module, set] = weakref.WeakKeyDictionary()


def _code(hook: Any) -> Any:
    """What identifies a hook across installations: its function's code (a closure made
    again on each installation is the same code), through ``functools.partial``."""
    return getattr(getattr(hook, "func", hook), "__code__", None)


def note_installed(module: nn.Module, table: str, before: dict, now: dict) -> None:
    """Remember the hooks in ``module``'s hook table ``table`` that the traced code added
    (in ``now``, not in ``before``), before they are taken away again."""
    if table not in HOOK_TABLES:
        return
    codes = {_code(hook) for key, hook in now.items() if key not in before}
    codes.discard(None)
    if codes:
        _INSTALLED.setdefault(module, set()).update(codes)


def user_hooks(module: nn.Module) -> tuple[tuple, ...]:
    """The numbers of ``module``'s hooks by table, leaving out those its traced code
    installed on it itself (see the note above)."""
    own = _INSTALLED.get(module, ())
    return tuple(
        tuple(k for k, hook in (getattr(module, t, None) or {}).items() if _code(hook) not in own)
        if own
        else tuple(getattr(module, t, None) or ())
        for t in HOOK_TABLES
    )


def global_hooks() -> tuple[tuple, ...]:
    """The keys of the global module hooks by table (all empty, usually)."""
    return tuple(tuple(getattr(_module_hooks, table)) for table in GLOBAL_HOOK_TABLES)


@contextlib.contextmanager
def global_hooks_skip(top: nn.Module | None):
    """While recording ``top``'s forward: the global forward hooks run for its sub-modules
    (the graph holds what they did, as for a sub-module's own hooks), not for ``top``
    itself, whose calls run them again: a traced module is called through nn.Module's
    call, which runs the global hooks on its result as eager does on the original's.
    Nothing to do for a function (``top`` None) or where there are none."""
    if top is None or not any(global_hooks()[:2]):
        yield
        return
    tables = [getattr(_module_hooks, t) for t in GLOBAL_HOOK_TABLES[:2]]
    saved = [dict(table) for table in tables]
    for table in tables:
        for key, hook in list(table.items()):
            table[key] = _skipping(hook, top)
    try:
        yield
    finally:
        for table, before in zip(tables, saved):
            for key, hook in before.items():
                if key in table:  # a hook removed meanwhile stays removed
                    table[key] = hook


def _skipping(hook, top: nn.Module):
    def hook_not_on_top(module, *args, **kwargs):
        if module is top:
            return None
        return hook(module, *args, **kwargs)

    return hook_not_on_top


_BACKWARD_TABLES = HOOK_TABLES[2:]


@contextlib.contextmanager
def backward_hooks_set_aside(top: nn.Module | None):
    """While recording ``top``'s forward: its modules' backward hooks (and the global
    module backward hooks) are set aside, each table for an empty one, and put back after.
    They act only when a backward runs, which no recording does; a trace never runs them
    (api.py's note on backward hooks: a backward through a call that would skip one
    raises). Set aside, nn.Module's call does not route the module's tensors through
    ``BackwardHookFunction`` nor read their ``requires_grad`` for it, which the recording
    would keep as guards (a call without autograd was refused where the example's
    activations required grad). Nothing to do for a function (``top`` None) or where
    there are none."""
    if top is None:
        yield
        return
    aside = []
    for module in top.modules():
        found = module.__dict__
        for name in _BACKWARD_TABLES:
            table = found.get(name)
            if table:
                aside.append((found, name, table))
                found[name] = type(table)()
    for name in (f"_global{name}" for name in _BACKWARD_TABLES):
        table = getattr(_module_hooks, name)
        if table:
            aside.append((_module_hooks.__dict__, name, table))
            setattr(_module_hooks, name, type(table)())
    try:
        yield
    finally:
        for found, name, table in reversed(aside):
            table.update(found[name])  # one the recording registered stays (own_hooks notes it)
            found[name] = table
