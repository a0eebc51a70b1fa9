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
  moved. ``del model[1]``, ``Sequential.pop`` and ``ModuleList.insert`` write the tables of
  sub-modules directly: a call also compares the sizes of those tables (one C-level pass
  over the modules that have sub-modules).
* **A sub-module switched to the other mode on its own** (``model.bn.train()`` on an
  evaluation model): the graphs carry the mode each sub-module had when traced, as
  arguments; the traced module's own ``train()``/``eval()`` choose among its graphs and
  never read its sub-modules' flags. A call reads the flags of the sub-modules whose code
  reads ``self.training`` (their classes' code mentions it; a dropout of probability 0 does
  the same in both modes and is left out): as traced, the call runs; switched all together
  (the original's ``model.train()``, which also switches the shared sub-modules) it runs
  too, since the traced module's own mode decides; switched one by one, it is refused. A
  tree recorded in mixed modes (batch norms frozen in a training model) that is now all in
  the traced module's own mode (unfrozen since) is refused too: that mode's graphs carry
  the frozen ones.

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
    """Whether code of ``cls`` or its bases (below nn.Module, mixins included) names
    ``training``: in its functions, the functions they wrap (a decorated ``forward``) and
    the module-level helpers they call (``drop_path(self, x)`` reading ``m.training``)."""
    found = _class_reads.get(cls)
    if found is None:
        seen: set = set()
        found = _class_reads[cls] = any(
            _code_names(value, "training", 0, None, seen)
            for base in cls.__mro__
            if base not in (nn.Module, object)
            for value in vars(base).values()
        )
    return found


# How many calls deep a module-level helper is followed (``forward`` -> helper -> helper).
_HELPER_DEPTH = 2


def _code_names(value, name: str, hops: int, namespace: dict | None, seen: set) -> bool:
    """Whether the code of ``value`` (a function, code object, property or static or
    class method) names ``name``, or the code of a function it wraps or a module-level
    function it calls (outside torch, up to ``_HELPER_DEPTH`` calls deep) does."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return any(
            _code_names(f, name, hops, namespace, seen) for f in (value.fget, value.fset) if f
        )
    if isinstance(value, types.FunctionType):
        wrapped = value.__dict__.get("__wrapped__")  # functools.wraps
        if wrapped is not None and _code_names(wrapped, name, hops, None, seen):
            return True
        namespace, value = value.__globals__, value.__code__
    if not isinstance(value, types.CodeType) or (value, hops) in seen or len(seen) > 4096:
        return False
    seen.add((value, hops))
    if name in value.co_names:
        return True
    if any(
        _code_names(c, name, hops, namespace, seen)
        for c in value.co_consts
        if isinstance(c, types.CodeType)
    ):
        return True
    if namespace is None or hops >= _HELPER_DEPTH:
        return False
    helpers = (namespace.get(n) for n in value.co_names)
    return any(
        _code_names(f, name, hops + 1, None, seen)
        for f in helpers
        if isinstance(f, types.FunctionType) and not (f.__module__ or "").startswith("torch")
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
        "mixed",
        "tables",
        "sizes",
    )

    def __init__(
        self,
        root: nn.Module,
        expected: dict[str, bool],
        owner: nn.Module,
        traced_mode: bool | None = None,
    ):
        _install()
        # Whose flag switches the tree as a whole: the module traced (its train() and eval()
        # switch the sub-modules it shares with the traced one), or a loaded module itself.
        self.owner = owner
        self.modules = dict(root.named_modules(remove_duplicate=False))
        self.modules.pop("", None)
        self.seen = REGISTRATIONS[0]
        self.expected = {p: f for p, f in expected.items() if p in self.modules}
        self.mode_modules = tuple(self.modules[p] for p in self.expected)
        # The traced mode, where the graphs of that mode were recorded with sub-modules in
        # the other one (batch norms frozen in a training model): a tree all in that mode
        # since is not those graphs' (see _check_modes). None where they were not.
        mixed = traced_mode is not None and any(f != traced_mode for f in self.expected.values())
        self.mixed = traced_mode if mixed else None
        # Whose flags say the tree was switched as a whole: the owner and the watched
        # sub-modules (the others' flags change no graph; a large model has many more).
        self.every = (owner, *self.mode_modules)
        # The sub-module tables of the modules that have sub-modules, and their sizes: a
        # sub-module removed or inserted without a registration (del model[1],
        # Sequential.pop, ModuleList.insert write the table itself) changes a size.
        self.tables = tuple(m._modules for m in (root, *self.modules.values()) if m._modules)
        self.sizes = tuple(map(len, self.tables))
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
        if REGISTRATIONS[0] != self.seen or tuple(map(len, self.tables)) != self.sizes:
            self._check_identity(root)
        if (self.evals and any(map(self.read, self.evals))) or (
            self.trains and not all(map(self.read, self.trains))
        ):
            self._check_modes(root)

    def check_tree(self, root: nn.Module) -> None:
        """Raise where a sub-module of ``root`` was replaced, added or removed (what a
        save needs: the graphs and the state it writes must be one model)."""
        if REGISTRATIONS[0] != self.seen or tuple(map(len, self.tables)) != self.sizes:
            self._check_identity(root)

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

    def _check_modes(self, root: nn.Module) -> None:
        modes = set(map(_TRAINING, self.every))
        if len(modes) == 1 and not (root.training == self.mixed and self.mixed in modes):
            # The whole tree switched together (the original's train() or eval()): the
            # traced module's own mode decides which graph runs, as documented. (Read on
            # each call while it stays so: one C-level pass over the watched modules.) Not where
            # the tree is all in the traced module's own mode and that mode's graphs were
            # recorded in mixed modes: a model traced with its batch norms frozen and
            # unfrozen since (model.bn.train()) is all in training mode, as the traced
            # module is, and those graphs still normalise by the running statistics.
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
