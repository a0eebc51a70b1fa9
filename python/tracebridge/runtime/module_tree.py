"""The module tree a traced module's graphs were recorded from, watched on each call.

A traced module shares its sub-modules with the module it was traced from (or, loaded,
holds the sub-modules its file names), and its graphs read their parameters and buffers
through those sub-modules' own tables. Two changes to the tree would leave a graph running
something other than what the tree now says, with nothing to notice:

* **A sub-module replaced or added** (``model.head = nn.Linear(...)``, timm's
  ``reset_classifier()``, ``model[1] = nn.Tanh()``): the graph still runs the old one's ops
  on the old one's parameters. Every such assignment goes through ``Module.__setattr__`` or
  ``add_module``, which call PyTorch's global module-registration hooks: one of ours counts
  them, so a call compares one counter (tens of nanoseconds) and walks the tree only when it
  moved. (``ModuleList.insert``/``pop``/``del``, which write ``_modules`` directly, are not
  seen.)
* **A sub-module switched to the other mode on its own** (``model.bn.train()`` on an
  evaluation model): the graphs carry the mode each sub-module had when traced, as
  arguments; the traced module's own ``train()``/``eval()`` choose among its graphs and
  never read its sub-modules' flags. A call reads the flags of the sub-modules whose code
  reads ``self.training`` (their classes' code mentions it; a dropout of probability 0 does
  the same in both modes and is left out): as traced, the call runs; switched all together
  (the original's ``model.train()``, which also switches the shared sub-modules) it runs
  too, since the traced module's own mode decides; switched one by one, it is refused.

Both refusals are TraceErrors that name the sub-module and say what to do.
"""

from __future__ import annotations

import operator
import types

from torch import nn
from torch.nn.modules import module as _torch_module

from ..errors import TraceError

# Registrations of sub-modules seen since import: [count]. A list, read by index, so the
# per-call check reads one global and one item.
REGISTRATIONS = [0]
_installed = []
_TRAINING = operator.attrgetter("training")
_FLAG = operator.itemgetter("training")


def _count_registration(module, name, submodule):
    REGISTRATIONS[0] += 1


def _install() -> None:
    """Count every sub-module registration from now on (once per process)."""
    if not _installed:
        _installed.append(
            _torch_module.register_module_module_registration_hook(_count_registration)
        )


def mode_reading_paths(root: nn.Module) -> dict[str, bool]:
    """Path -> training flag of each sub-module of ``root`` (not ``root`` itself) whose
    code may read its own mode, as they are now."""
    return {
        path: bool(module.training)
        for path, module in root.named_modules(remove_duplicate=False)
        if path and _reads_mode(module)
    }


def _reads_mode(module: nn.Module) -> bool:
    if isinstance(module, nn.modules.dropout._DropoutNd) and module.p == 0:
        return False  # the same values in both modes
    return _class_reads_mode(type(module))


_class_reads = {}


def _class_reads_mode(cls: type) -> bool:
    """Whether code of ``cls`` or its bases (below nn.Module) names ``training``."""
    found = _class_reads.get(cls)
    if found is None:
        found = _class_reads[cls] = any(
            _code_names(value, "training", 0)
            for base in cls.__mro__
            if base not in (nn.Module, object) and issubclass(base, nn.Module)
            for value in vars(base).values()
        )
    return found


def _code_names(value, name: str, depth: int) -> bool:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return any(_code_names(f, name, depth) for f in (value.fget, value.fset) if f)
    code = getattr(value, "__code__", value)
    if not isinstance(code, types.CodeType) or depth > 8:
        return False
    return name in code.co_names or any(
        _code_names(c, name, depth + 1) for c in code.co_consts if isinstance(c, types.CodeType)
    )


class TreeWatch:
    """What a call of a traced module checks of its tree (see the module's note).

    ``expected`` is path -> the training flag the graphs were recorded with, for the
    sub-modules whose code reads it (``Program.module_modes``)."""

    __slots__ = (
        "modules",
        "seen",
        "mode_modules",
        "expected",
        "owner",
        "every",
        "evals",
        "trains",
        "read",
    )

    def __init__(self, root: nn.Module, expected: dict[str, bool], owner: nn.Module):
        _install()
        # Whose flag switches the tree as a whole: the module traced (its train() and eval()
        # switch the sub-modules it shares with the traced one), or a loaded module itself.
        self.owner = owner
        self.modules = dict(root.named_modules(remove_duplicate=False))
        self.modules.pop("", None)
        self.seen = REGISTRATIONS[0]
        self.expected = {p: f for p, f in expected.items() if p in self.modules}
        self.mode_modules = tuple(self.modules[p] for p in self.expected)
        self.every = (owner, *self.modules.values())
        # The watched flags, read from the modules' own dicts where Module.train() writes
        # them (half the cost of an attribute read; a class that makes ``training`` a
        # property is read as an attribute): those traced in evaluation mode, and those
        # traced in training mode.
        by_dict = all("training" in m.__dict__ for m in self.mode_modules)
        self.read = _FLAG if by_dict else _TRAINING
        where = [
            (self.modules[p].__dict__ if by_dict else self.modules[p], flag)
            for p, flag in self.expected.items()
        ]
        self.evals = tuple(d for d, flag in where if not flag)
        self.trains = tuple(d for d, flag in where if flag)

    def check(self, root: nn.Module) -> None:
        """Raise where the tree of ``root`` is not the one the graphs were recorded from."""
        if REGISTRATIONS[0] != self.seen:
            self._check_identity(root)
        if (self.evals and any(map(self.read, self.evals))) or (
            self.trains and not all(map(self.read, self.trains))
        ):
            self._check_modes()

    def _check_identity(self, root: nn.Module) -> None:
        now = dict(root.named_modules(remove_duplicate=False))
        now.pop("", None)
        if len(now) < len(self.modules):
            gone = next(p for p in self.modules if p not in now)
            raise TraceError(
                f"sub-module {gone!r} of this traced module was removed since it was traced: "
                "the graphs still run it. Trace the model again after changing it"
            )
        for path, module in now.items():
            before = self.modules.get(path)
            parent, _, leaf = path.rpartition(".")
            if before is None and leaf == "parametrizations":
                raise TraceError(
                    f"sub-module {parent or 'the root'!r} of this traced module was given a "
                    "parametrization since it was traced (torch.nn.utils.parametrize: "
                    "weight_norm, spectral_norm, orthogonal...): its parameters moved under "
                    f"{path!r}, and the graphs read the ones they were recorded with. Trace "
                    "the model again after parametrizing it"
                )
            if before is not module:
                what = "added" if before is None else "replaced"
                raise TraceError(
                    f"sub-module {path!r} of this traced module was {what} since it was "
                    f"traced (now {type(module).__name__}): the graphs run the code and "
                    "parameters of the sub-modules they were recorded with, never the "
                    "module tree itself. Trace the model again after changing it"
                )
        self.seen = REGISTRATIONS[0]

    def _check_modes(self) -> None:
        if len(set(map(_TRAINING, self.every))) == 1:
            # The whole tree switched together (the original's train() or eval()): the
            # traced module's own mode decides which graph runs, as documented. (Read on
            # each call while it stays so: one C-level pass over the modules.)
            return
        flags = tuple(map(_TRAINING, self.mode_modules))
        for path, flag in zip(self.expected, flags):
            if flag != self.expected[path]:
                now, then = ("training", "evaluation") if flag else ("evaluation", "training")
                raise TraceError(
                    f"sub-module {path!r} is in {now} mode, but it was in {then} mode when "
                    "this module was traced, and it was switched on its own (other "
                    "sub-modules were not): the graphs carry each sub-module's mode as "
                    "traced and never read their flags. Put it back "
                    f"(.{'eval' if flag else 'train'}()), switch the whole model together "
                    "(its .train()/.eval(); the traced module's own mode then decides), or "
                    "trace again in the modes it is to run in (respect_mode=True records "
                    "them as they are)"
                )


class ModesWatch:
    """The modes of the modules a traced function called (trace/called_modules.py), for
    those whose code reads its mode: a call refuses once one differs from the recording's."""

    __slots__ = ("modules", "flags")

    def __init__(self, modules: list[nn.Module]):
        watched = [m for m in modules if _reads_mode(m)]
        self.modules = tuple(watched)
        self.flags = tuple(bool(m.training) for m in watched)

    def check(self) -> None:
        if tuple(map(_TRAINING, self.modules)) == self.flags:
            return
        for module, flag in zip(self.modules, self.flags):
            if bool(module.training) != flag:
                now, then = (
                    ("training", "evaluation") if module.training else ("evaluation", "training")
                )
                raise TraceError(
                    f"the traced function called a {type(module).__name__} in {then} mode, "
                    f"and it is in {now} mode now: the graph carries the modes of the modules "
                    "it called as they were when traced, and never reads their flags. Put "
                    f"the module back (.{'train' if flag else 'eval'}()), or trace the "
                    "function again"
                )
