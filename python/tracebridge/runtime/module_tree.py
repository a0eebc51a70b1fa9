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
* **A sub-module in another mode than the graph was recorded with** (``model.bn.train()``
  on an evaluation model; a frozen batch norm switched by ``train()``): the graphs carry
  the mode each sub-module had when recorded, as arguments; the traced module's own
  ``train()``/``eval()`` choose among its graphs (and switch its sub-modules, as
  ``Module.train()`` does). A call reads the flags of the sub-modules whose code reads
  ``self.training`` (their classes' code mentions it; a dropout of probability 0 does the
  same in both modes and is left out) and compares them with the ones the graph it runs
  was recorded with (``Program.module_modes``, per graph). Where they differ it is refused,
  except where every one is in the other mode and that mode was found to record the same
  graph when traced.

* **A sub-module's code swapped on the instance** (``model.block.forward = other``, a
  monkey-patch; ``model.block.__class__ = Other``): the graph still runs the code it
  recorded (prober20b F11). No registration hook sees these, and comparing each
  sub-module's class and ``__dict__`` on every call costs about 0.1 us a module, so
  ``nn.Module.__setattr__`` and ``__delattr__`` are wrapped (once, with the registration
  hook) to move the same counter when the name set is ``forward`` or ``__class__``: the
  call's check stays one compare, and the walk it triggers compares each sub-module's
  class and instance ``forward`` with those of trace time. Not seen: a class's own
  ``forward`` replaced (``Block.forward = f``: it reaches every instance, traced or not),
  ``object.__setattr__`` called directly.

All refusals are TraceErrors that name the sub-module and say what to do.
"""

from __future__ import annotations

import operator
import types

from torch import nn
from torch.nn.modules import module as _torch_module
from torch.nn.modules.batchnorm import _BatchNorm

from ..errors import TraceError
from .method import guards_active

# Registrations of sub-modules seen since import: [count]. A list, read by index, so the
# per-call check reads one global and one item.
REGISTRATIONS = [0]
_installed = []
_TRAINING = operator.attrgetter("training")
_FLAG = operator.itemgetter("training")


def _count_registration(module, name, submodule):
    REGISTRATIONS[0] += 1


# Instance attributes whose change changes what calling a module runs (the note above).
_ROUTES = frozenset({"forward", "__class__"})


def _counting(original, name: str):
    if name == "__setattr__":

        def counted(self, name, value):
            if name in _ROUTES:
                REGISTRATIONS[0] += 1
            original(self, name, value)

    else:

        def counted(self, name):
            if name in _ROUTES:
                REGISTRATIONS[0] += 1
            original(self, name)

    counted.__name__, counted.__qualname__ = original.__name__, original.__qualname__
    counted.__doc__, counted.__wrapped__ = original.__doc__, original
    counted.__module__ = original.__module__
    return counted


def count_registrations() -> None:
    """Count every sub-module registration, and every ``forward`` or ``__class__`` set on
    a module, from now on (once per process)."""
    if not _installed:
        _installed.append(
            _torch_module.register_module_module_registration_hook(_count_registration)
        )
        for name in ("__setattr__", "__delattr__"):
            setattr(nn.Module, name, _counting(vars(nn.Module)[name], name))


def route(module: nn.Module) -> tuple:
    """What decides the code a call of ``module`` runs, besides its class's: the class,
    and a ``forward`` set on the instance (or None)."""
    return type(module), module.__dict__.get("forward")


def rerouted(module: nn.Module, before: tuple) -> str | None:
    """Words for how ``module``'s code changed since :func:`route` gave ``before``, or
    None."""
    cls, forward = route(module)
    if cls is not before[0]:
        return (
            f"its class was changed from {before[0].__name__} to {cls.__name__} "
            "(__class__ assigned)"
        )
    if forward is not before[1]:
        done = "set on the instance" if forward is not None else "taken off the instance"
        return f"its forward was {done} (a monkey-patch: module.forward = ...)"
    return None


def mode_reading_paths(root: nn.Module) -> dict[str, bool]:
    """Path -> training flag of each sub-module of ``root`` (not ``root`` itself) whose
    code may read its own mode, as they are now."""
    return {
        path: bool(module.training)
        for path, module in root.named_modules(remove_duplicate=False)
        if path and _reads_mode(module)
    }


def _reads_mode(module: nn.Module) -> bool:
    if isinstance(module, nn.modules.dropout._DropoutNd) and getattr(module, "p", None) == 0:
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


class _GraphModes:
    """The flags one graph was recorded with, as a call reads them: the watched modules'
    own dicts (where Module.train() writes; half the cost of an attribute read), split into
    those recorded in evaluation mode and those recorded in training mode."""

    __slots__ = ("paths", "modules", "flags", "evals", "trains", "read", "other_uniform", "momenta")

    def __init__(self, modules: dict, expected: dict[str, bool], other_uniform: bool | None):
        self.paths = tuple(p for p in expected if p in modules)
        self.modules = tuple(modules[p] for p in self.paths)
        self.flags = tuple(expected[p] for p in self.paths)
        by_dict = all("training" in m.__dict__ for m in self.modules)
        self.read = _FLAG if by_dict else _TRAINING
        where = [(m.__dict__ if by_dict else m, f) for m, f in zip(self.modules, self.flags)]
        self.evals = tuple(d for d, flag in where if not flag)
        self.trains = tuple(d for d, flag in where if flag)
        # Every watched module in this mode gives this graph too (the other mode recorded
        # the same graph when traced), or None.
        self.other_uniform = other_uniform
        # The momentum of each batch norm recorded in training mode, where the graph holds
        # the factor it gave (0.1 as a literal; 1 / num_batches_tracked for None): set
        # anew since (torch.optim.swa_utils.update_bn sets None for its passes), the
        # statistics the graph writes would be other than eager's (prober20b F12).
        self.momenta = tuple(
            (path, m, m.momentum)
            for path, m, flag in zip(self.paths, self.modules, self.flags)
            if flag and isinstance(m, _BatchNorm) and "momentum" in m.__dict__
        )


class TreeWatch:
    """What a call of a traced module checks of its tree (see the module's note).

    ``module_modes`` is graph -> path -> the training flag the graph was recorded with, for
    the sub-modules whose code reads it (``Program.module_modes``); ``same_in_both`` names
    the graphs whose other mode recorded the same graph (not mode-bound)."""

    __slots__ = ("root", "modules", "routes", "seen", "graphs", "traced")

    def __init__(
        self,
        root: nn.Module,
        module_modes: dict[str, dict[str, bool]],
        same_in_both: dict,
        traced: nn.Module | None = None,
    ):
        count_registrations()
        # The tree as the module traced holds it (a loaded module's own): a sub-module
        # replaced there is what eager code would run.
        self.root = root
        self.modules = _tree(root)
        self.routes = {path: route(module) for path, module in self.modules.items()}
        self.seen = REGISTRATIONS[0]
        # A fresh trace's own table of the original's sub-modules (``traced``), watched too:
        # ``traced.layer = other`` replaces one there and not in the original, and the
        # graphs would go on running the old one (prober23a F1).
        self.traced = None if traced is None else (traced, _tree(traced))
        self.graphs = {
            graph: _GraphModes(self.modules, flags, same_in_both.get(graph))
            for graph, flags in module_modes.items()
        }

    def check_tree(self) -> None:
        """Raise where a sub-module of the tree was replaced, added or removed."""
        if REGISTRATIONS[0] != self.seen:
            if self.traced is not None:
                _same_tree(*self.traced, added=True)
            self._check_identity(self.root)

    def check_modes(self, graph: str, method) -> None:
        """Raise where a watched sub-module's flag is not the one ``graph`` was recorded
        with (one C-level pass over a few dicts when they agree), unless ``method``'s
        guards are off (``guards_disabled()``, ``check_guards``), as its mode guard is."""
        modes = self.graphs.get(graph)
        if modes is None:
            return
        # (one frame: a training model's call paid three more here, one per helper)
        read = modes.read
        if (
            (modes.evals and any(map(read, modes.evals)))
            or (modes.trains and not all(map(read, modes.trains)))
        ) and guards_active(method):
            _refuse_modes(graph, modes)
        for path, changed, momentum in modes.momenta:
            if changed.__dict__.get("momentum") != momentum:
                if not guards_active(method):
                    return
                raise TraceError(
                    f"the momentum of batch norm {path!r} is {changed.momentum!r} now, and "
                    f"the graph this call runs ({graph}) was recorded with another: it "
                    "holds the factor its running statistics are updated by "
                    "(torch.optim.swa_utils.update_bn sets None for its passes). Put it "
                    "back, or trace again with this momentum"
                )

    def _check_identity(self, root: nn.Module) -> None:
        now = _same_tree(root, self.modules)
        for path, module in now.items():  # after: a parametrization changes the class too
            how = rerouted(module, self.routes[path])
            if how is not None:
                raise TraceError(
                    f"sub-module {path!r} of this traced module runs other code than when "
                    f"it was traced: {how}. The graphs hold what its code did then and "
                    "run no module's code. Put it back, or trace the model again after "
                    "changing it"
                )
        self.seen = REGISTRATIONS[0]


def _tree(root: nn.Module) -> dict[str, nn.Module]:
    """``root``'s sub-modules by path, the root left out."""
    found = dict(root.named_modules(remove_duplicate=False))
    found.pop("", None)
    return found


def _same_tree(
    root: nn.Module, modules: dict[str, nn.Module], added: bool = False
) -> dict[str, nn.Module]:
    """``root``'s sub-modules now, by path; raise where one of ``modules`` (the tree when
    traced) was replaced or removed, or, unless ``added`` allows it, one was added."""
    now = _tree(root)
    if added:  # a module added to a fresh trace's own table is bookkeeping: no graph runs it
        now = {path: module for path, module in now.items() if path in modules}
    if len(now) < len(modules):
        gone = next(p for p in modules if p not in now)
        raise TraceError(
            f"sub-module {gone!r} of this traced module was removed since it was traced: "
            "the graphs still run it. Trace the model again after changing it"
        )
    for path, module in now.items():
        before = modules.get(path)
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
    return now


def _refuse_modes(graph: str, modes: _GraphModes) -> None:
    if modes.other_uniform is not None and set(map(_TRAINING, modes.modules)) == {
        modes.other_uniform
    }:
        return  # the whole tree in the other mode, which records this same graph
    found = _first_switched(modes.modules, modes.flags)
    if found is not None:
        index, now, then = found
        path, flag = modes.paths[index], modes.flags[index]
        raise TraceError(
            f"sub-module {path!r} is in {now} mode, but the graph this call runs "
            f"({graph}) was recorded with it in {then} mode, and the graph carries "
            "each sub-module's mode as recorded, never reading their flags. Put it "
            f"back (.{'train' if flag else 'eval'}()), or switch the traced module "
            "with its .train()/.eval() (which switch its sub-modules too, as "
            "Module.train() does), or trace again in the modes it is to run in"
        )


def _replaced_error(owner: str, key: str, kind: str) -> TraceError:
    return TraceError(
        f"the traced function read the {kind} {key!r} of a {owner} it called, and that "
        "module holds another tensor under that name now (load_state_dict(assign=True), a "
        "new nn.Parameter, a buffer assigned anew): the function's graph holds the tensors "
        "it read when traced (writes into them it follows). Trace the module itself "
        "(tracebridge.trace(model, ...) reads its state by name), or trace the function "
        "again"
    )


def _first_switched(modules: tuple, flags: tuple) -> tuple[int, str, str] | None:
    """The first module whose flag is not its recorded one: (index, its mode now, the
    recorded mode), the modes in words."""
    for index, (module, flag) in enumerate(zip(modules, flags)):
        if bool(module.training) != flag:
            words = ("training", "evaluation") if module.training else ("evaluation", "training")
            return index, *words
    return None


class ModesWatch:
    """The modes of the modules a traced function called (trace/called_modules.py), for
    those whose code reads its mode: a call refuses once one differs from the recording's.

    And their parameters and buffers that the graph holds (``read``: the ids of the
    program's state tensors): the function's trace holds those tensors themselves, so it
    follows a write into one (an optimizer step, ``load_state_dict``) but not a new tensor
    in its place (``load_state_dict(assign=True)``, a new ``nn.Parameter``), which eager
    code reads from then on. A call refuses once one was replaced (prober17)."""

    __slots__ = ("modules", "flags", "tables", "keys", "tensors", "names")

    def __init__(self, modules: list[nn.Module], read: frozenset[int] = frozenset()):
        watched = [m for m in modules if _reads_mode(m)]
        self.modules = tuple(watched)
        self.flags = tuple(bool(m.training) for m in watched)
        tables, keys, tensors, names = [], [], [], []
        for module in modules:
            for kind in ("_parameters", "_buffers"):
                table = module.__dict__.get(kind) or {}
                for key, tensor in dict.items(table):  # (a seal: runtime/sealed.py)
                    if tensor is not None and id(tensor) in read:
                        tables.append(table)
                        keys.append(key)
                        tensors.append(tensor)
                        names.append((type(module).__name__, key, kind[1:-1]))
        self.tables, self.keys = tuple(tables), tuple(keys)
        self.tensors, self.names = tuple(tensors), tuple(names)

    def check(self) -> None:
        if self.tables and any(
            map(operator.is_not, map(dict.get, self.tables, self.keys), self.tensors)
        ):
            now = map(dict.get, self.tables, self.keys)
            index = next(i for i, t in enumerate(now) if t is not self.tensors[i])
            raise _replaced_error(*self.names[index])
        if tuple(map(_TRAINING, self.modules)) == self.flags:
            return
        found = _first_switched(self.modules, self.flags)
        if found is not None:
            index, now, then = found
            module, flag = self.modules[index], self.flags[index]
            raise TraceError(
                f"the traced function called a {type(module).__name__} in {then} mode, "
                f"and it is in {now} mode now: the graph carries the modes of the modules "
                "it called as they were when traced, and never reads their flags. Put "
                f"the module back (.{'train' if flag else 'eval'}()), or trace the "
                "function again"
            )
