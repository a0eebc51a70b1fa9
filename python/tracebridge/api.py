"""The public API: ``trace``, ``trace_module``, ``save``, ``load`` and the traced objects."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import warnings
from collections.abc import Callable
from typing import IO, Any

import torch
from torch import nn
from torch.jit import _trace as _jit_trace
from torch.nn.modules import module as _module_hooks
from torch.nn.utils import parametrize as _parametrize
from torch.utils.hooks import RemovableHandle as _RemovableHandle

from . import artifact
from .artifact import streams
from .check import method_stashes
from .check.compare import fresh
from .check.input_identity import (
    identity_sensitive_groups,
    method_words,
    refuse_identity_paths,
)
from .check.kept_globals import KeptGlobals
from .check.meta_state import warn_meta_non_persistent
from .check.specialise import specialisations
from .check.verify import first_difference
from .errors import GuardError, TraceError, TracerWarning, TracingCheckError
from .ir import Program, StateEntry, pytree
from .ir.analysis import fused_without_autograd
from .ir.ops import VARIADIC_OUTPUTS
from .ir.printer import graph_text
from .ir.program import hoist_subgraphs, subgraph_names
from .progress import stage, state_nbytes, track
from .runtime import Method, generators, module_tree, state_changes, support, torchvision_ops
from .runtime import frozen as frozen_state
from .runtime import sealed as sealed_state
from .runtime.generators import Slots
from .runtime.method import Specialised, as_recorded, for_mode, guards_active
from .runtime.module_tree import REGISTRATIONS as _REGISTRATIONS
from .runtime.module_tree import ModesWatch, TreeWatch, mode_reading_paths
from .runtime.shapes import symbolize
from .runtime.transaction import state_replaced, transactional
from .trace import autocast, cache_values, called_modules, torch_generators
from .trace.capture import bound_method as _bound
from .trace.capture import (
    capture,
    capture_again,
    enter_mode,
    numpy_rng_kept,
    old_objects_set_aside,
    preserved,
    state_index,
)
from .trace.example_inputs import as_args as _as_args
from .trace.example_inputs import as_call, function_checks, module_checks
from .trace.library import FAST_PATH_MODULES
from .trace.memo_tables import kept as memos_kept
from .trace.message_sinks import shown_nowhere
from .trace.own_hooks import GLOBAL, GLOBAL_HOOK_TABLES, global_hooks, user_hooks
from .trace.own_hooks import HOOK_TABLES as _HOOK_TABLES


def _describe_guard(name: str, node) -> str:
    return (
        f"{name}: {node.kwargs.get('what')} == {node.kwargs.get('expect')!r} (at {node.loc or '?'})"
    )


def _variant_names(program: Program) -> set[str]:
    """The size-1 specialisations of every method (check/specialise.py) and the graphs of
    custom autograd functions: reached only through the method or node that uses them,
    never by name."""
    specialised = {name for names in program.specialised.values() for name in names}
    return specialised | subgraph_names(program)


def _add_specialisations(program: Program, name: str, graphs: list) -> None:
    names = []
    first = program.methods[name]
    for graph in graphs:
        # eager's fused path, or sizes
        kind = "no_grad" if fused_without_autograd(graph, first) else "size1"
        names.append(f"{name}__{kind}_{len(names)}")
        program.methods[names[-1]] = graph
    if names:
        program.specialised[name] = names


class _Traced:
    """What a traced function and a traced module share."""

    _tb_program: Program
    _methods: dict[str, Method]

    @property
    def program(self) -> Program:
        """The traced program (graphs, state, settings). Its state entries are the state
        tensors themselves: reading it breaks a loaded object's seal (runtime/sealed.py)."""
        found = self.__dict__
        seal = found.get("_tb_seal")
        if seal is not None and seal.intact:
            seal.break_()
        return found["_tb_program"]

    @program.setter
    def program(self, program: Program) -> None:
        seal = self.__dict__.get("_tb_seal")
        if seal is not None and seal.intact:
            seal.break_()
        self.__dict__["_tb_program"] = program

    def _make_methods(self, slots: dict, runtime: str) -> None:
        hoist_subgraphs(self._tb_program)  # graphs of specialisations added since it was made
        graphs = self._tb_program.methods
        self._methods = {
            name: Method(name, g, slots, runtime, graphs) for name, g in graphs.items()
        }
        for method in self._methods.values():
            method.from_file = self._tb_program.from_file  # what an op's failure blames

    def _chain_specialisations(self) -> None:
        """Each method with size-1 specialisations tries them when its guards refuse a call
        (after ``_make_methods``, which compiled objects override). First, a graph that
        writes in place and may refuse a call puts its writes back when it does
        (runtime/transaction.py), so that the next graph of a chain starts from the state
        the call found; every other method stays the runtime's own."""
        slots, graphs = self._state_slots(), self._tb_program.methods
        for name, method in self._methods.items():
            self._methods[name] = transactional(method, graphs[name], slots, graphs)
        for name, others in self._tb_program.specialised.items():
            chain = [self._methods[name]] + [self._methods[o] for o in others]
            self._methods[name] = Specialised(chain, slots)

    @property
    def guards(self) -> list[str]:
        """Every assumption the trace made, in words, with its source line: the guards, and
        the ops whose number of results the trace fixed (``unbind``, ``split``, ...)."""
        out = []
        variants = _variant_names(self._tb_program)  # alternatives, tried when these refuse
        for name, graph in self._tb_program.methods.items():
            if name in variants:
                continue
            for node in graph.nodes:
                if node.op == "prim.guard":
                    out.append(_describe_guard(name, node))
                elif node.op in VARIADIC_OUTPUTS and node.out_spec and "c" in node.out_spec:
                    count = len(node.out_spec["c"])
                    out.append(
                        f"{name}: {node.op}(...) gives {count} results (at {node.loc or '?'})"
                    )
        return out

    @property
    def check_guards(self) -> bool:
        """Whether calls check guards (default True). Set False to skip them for speed."""
        return all(m.check_guards for m in self._methods.values())

    @check_guards.setter
    def check_guards(self, on: bool) -> None:
        for m in self._methods.values():
            m.check_guards = bool(on)

    def _symbolize(self) -> None:
        """Label intermediate shapes with input symbols, once, when first shown
        (it runs the graph on meta tensors, which costs a one-time import of PyTorch's
        meta kernels: not a price to pay on every trace)."""
        if getattr(self, "_symbolic", False):
            return
        slots = self._state_slots().items()
        state = {name: sealed_state.peek(table, key) for name, (table, key) in slots}
        for graph in self._tb_program.methods.values():
            if all(v.example is not None for v in graph.inputs):
                symbolize(graph, state, self._tb_program.methods)
        self._symbolic = True

    def save(
        self,
        path: str | os.PathLike | IO[bytes],
        *,
        language: str | None = None,
        progress: bool | None = None,
    ) -> None:
        """Save to one file that :func:`tracebridge.load` and R's ``jit_load`` read.

        ``path`` is a file name (written atomically) or a binary file-like object such as
        ``io.BytesIO()`` (written at its position).

        ``language`` is the source language recorded in the file (``"python"`` or ``"r"``);
        by default, the language the trace was made from (``program.language``).
        Intermediate shapes are written as the sizes seen at trace time: labelling them
        with input symbols runs the graph (see runtime/shapes.py), so only display does.
        ``progress``: a progress bar on a terminal for large files (see :func:`trace`).
        The file holds the program only: to embed a compiled AOTInductor package that
        ``load_compiled(path, trust_compiled_code=True)`` runs without recompiling, save
        with :func:`tracebridge.save_compiled` (or, for a ``tracebridge.compile`` object,
        ``.save(path, compiled_package=True)``).
        """
        program = self._program_for_saving()
        with track("saving", total=state_nbytes(self), unit="B", progress=progress):
            streams.write_to(program, path, language=language or program.language)

    # Note: pickling. A traced object pickles as its artifact without the tensors' data,
    # and its state tensors by name, as torch pickles tensors; it unpickles through
    # ``load`` with every check a file gets, binding those tensors by name, dtype and shape
    # (``load(weights=...)``): the program of a pickle is exactly as safe as a file's (no
    # more: pickle itself runs code, so unpickle only what you trust). The tensors travel
    # as tensors so that ``torch.multiprocessing`` shares them as it shares an nn.Module's
    # (its queues put CPU tensors in shared memory: a write in one process is the other's,
    # the Hogwild pattern); a plain pickle copies them. ``copy.deepcopy`` writes the whole
    # artifact and loads it (the methods hold locks and generated code, which neither
    # pickle nor deep-copy): an independent module; ``copy.copy`` shares, as nn.Module's.

    def __reduce__(self):
        data, tensors = _pickled_program(self._program_for_saving())
        return _from_pickle, (data, _pickle_state(self), tensors)

    def __deepcopy__(self, memo: dict):
        data = streams.to_bytes(self._program_for_saving())
        copied = _from_pickle(data, _pickle_state(self))
        memo[id(self)] = copied
        return copied

    def __copy__(self):
        # As nn.Module's copy.copy (and torch.jit's): a new object over the same tables --
        # parameters, buffers, sub-modules, methods -- so a write through either reaches
        # both (prober23a F2: it took __reduce__'s road, an independent deep copy).
        copied = type(self).__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied


class TracedFunction(_Traced):
    """A traced standalone function. Call it like the original.

    >>> import torch, tracebridge
    >>> f = tracebridge.trace(lambda x, y: 2 * x + y, (torch.rand(3), torch.rand(3)))
    >>> f(torch.ones(3), torch.ones(3))
    tensor([3., 3., 3.])
    """

    def __init__(
        self,
        program: Program,
        name: str = "forward",
        runtime: str = "codegen",
        sealed: bool = False,
    ):
        self._tb_program = program
        self.__name__ = name
        self._constants = {k: e.tensor for k, e in program.state.items()}
        self._generators = dict(program.generators)  # the code's own, or a file's copies
        seal = None
        if sealed and _sealable(program, runtime):  # loaded: runtime/sealed.py
            seal = self.__dict__["_tb_seal"] = sealed_state.seal_table(self, "_constants")
        self._make_methods(self._state_slots(), runtime)
        self._chain_specialisations()
        _give_seal(self._methods, seal)
        self._forward = self._methods["forward"]

    # The modes of the modules the function called, for a trace made in this process.
    _tb_modes: ModesWatch | None = None
    # ... and their forward hooks and children (see _CalledTree)
    _tb_called: _CalledTree | None = None

    def __call__(self, *args, **kwargs):
        modes = self._tb_modes
        if modes is not None:
            modes.check()
            self._tb_called.check()
        return self._forward(*args, **kwargs)

    @property
    def graph(self) -> str:
        """The text form of the traced graph (grammar in shared_ir/SPEC.md)."""
        self._symbolize()
        return graph_text(self._tb_program.methods["forward"], self.__name__)

    @property
    def code(self) -> str:
        """The Python code generated from the graph."""
        return self._forward.code

    @property
    def inlined_graph(self) -> str:
        """torch.jit's name: the same as :attr:`graph`, which calls nothing to inline."""
        return self.graph

    def _state_slots(self) -> dict:
        return Slots(
            {k: (self._constants, k) for k in self._tb_program.state},
            {k: (self._generators, k) for k in self._generators},
        )

    def _program_for_saving(self) -> Program:
        self._tb_program.state = {
            k: StateEntry(e.kind, sealed_state.peek(self._constants, k))
            for k, e in self._tb_program.state.items()
        }
        return self._tb_program

    def __repr__(self) -> str:
        return f"<tracebridge.TracedFunction {self.__name__}>"


class TracedMethod:
    """A traced method of a TracedModule, bound to it: callable, with graph and code (as
    TorchScript's ScriptMethod): ``traced.encode``, and ``traced.forward`` too."""

    __slots__ = ("_module", "name")

    def __init__(self, module: TracedModule, name: str):
        self._module, self.name = module, name

    # As a bound method has them: the module and the method's name (``trace`` of one
    # traces that method of the module, as for any module's bound method).
    @property
    def __self__(self) -> TracedModule:
        return self._module

    @property
    def __name__(self) -> str:
        return self.name

    def __call__(self, *args, **kwargs):
        module = self._module
        module._watch()
        # Routed and mode-checked as forward is: a method recorded in one mode refuses a
        # call in the other, and under respect_mode each mode runs its own graph.
        try:
            result = module._method_for(self.name)(*args, **kwargs)
        except GuardError as exc:
            explained = module._state_changed(exc, module._routed(self.name))
            if explained is None:
                raise
            raise explained from None
        backward = module.__dict__.get("_tb_backward")
        return _refuse_backward(result, backward) if backward else result

    @property
    def graph(self) -> str:
        """The text form of this method's graph (grammar in shared_ir/SPEC.md): under
        respect_mode, the graph of the module's current mode."""
        module = self._module
        module._symbolize()
        name = module._routed(self.name)
        return graph_text(module._tb_program.methods[name], name)

    @property
    def code(self) -> str:
        """The Python code generated from this method's graph (under respect_mode, the
        graph of the module's current mode)."""
        module = self._module
        return module._methods[module._routed(self.name)].code

    @property
    def inlined_graph(self) -> str:
        """torch.jit's name: the same as :attr:`graph`, which calls nothing to inline."""
        return self.graph

    def __repr__(self) -> str:
        return f"<traced method {self.name} of {self._module._get_name()}>"


def torch_class(module: nn.Module) -> str | None:
    """``"torch.nn.modules.batchnorm.BatchNorm2d"`` for a module of one of torch.nn's own
    classes (a file's ``module_types``), None for another class."""
    cls = type(module)
    return (
        f"{cls.__module__}.{cls.__qualname__}" if cls.__module__.startswith("torch.nn.") else None
    )


def _torch_class_named(name: str) -> type | None:
    """The torch.nn class a file's ``module_types`` names, looked up among the modules
    torch has imported (never importing one: a file names, it does not run), or None."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 2, -1):
        found = sys.modules.get(".".join(parts[:cut]))
        if found is not None:
            for part in parts[cut:]:
                found = getattr(found, part, None)
            ok = isinstance(found, type) and issubclass(found, nn.Module)
            return found if ok and found.__module__.startswith("torch.nn.") else None
    return None


class _TracedForward:
    """``TracedModule.forward``: on a traced module, a :class:`TracedMethod`, which calls
    as the bound method did and has ``.code`` and ``.graph`` (``traced.forward.code``, as
    TorchScript's ScriptMethod has); on the class, the function itself (a subclass's own
    ``forward`` is told apart from it by identity, see ``_choose_fast_call``).

    Note: only a call that takes nn.Module's path (hooks on the traced module, or calling
    ``traced.forward(x)`` by name) reads ``forward``; the common call does not
    (``TracedModule.__call__``). The TracedMethod is made once per module and kept (a
    copy of the module, whose ``__dict__`` holds the original's, makes its own)."""

    def __init__(self, function: Callable):
        self.function = function
        self.__doc__ = function.__doc__

    def __get__(self, module, owner=None):
        if module is None:
            return self.function
        found = module.__dict__
        method = found.get("_tb_forward_method")
        if method is None or method._module is not module:
            method = found["_tb_forward_method"] = TracedMethod(module, "forward")
        return method


class ShownModule(nn.Module):
    """A sub-module of a loaded module: it holds the parameters and buffers under its path
    and prints as the original did, ``Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1))``,
    from the file's ``module_classes`` and ``module_reprs`` (text, never code: it is shown,
    not run; the graphs do the computing).

    One of torch.nn's own classes (the file's ``module_types``) answers ``isinstance`` as
    the original: ``for m in model.modules(): if isinstance(m, nn.BatchNorm2d): m.eval()``
    freezes the batch norms of a loaded model as of the original (prober17: it did nothing,
    and the loaded model trained them on, silently). Its ``__class__`` is that class for
    ``isinstance`` alone; its type, its methods and its attributes stay its own (the
    settings are not attributes: ``print`` shows them)."""

    _shown_type: type | None = None

    def __init__(self, class_name: str = "Module", settings: str = "", kind: type | None = None):
        super().__init__()
        self._shown_class, self._shown_settings = class_name, settings
        if kind is not None:
            self._shown_type = kind

    @property
    def __class__(self):
        return self._shown_type or type(self)

    @__class__.setter
    def __class__(self, value):  # torch.nn.utils.parametrize's last step, and any other
        raise _not_parametrized(self)

    def __getattr__(self, name: str):
        # torch.nn.utils.parametrize reads the tensor first, then writes it (``set_`` to its
        # ``right_inverse``) and deletes it before it changes the class: refused at the read,
        # before anything changed (prober23a F3: an AttributeError from inside torch, the
        # weight already gone).
        caller = sys._getframe(0).f_back  # None where C code asks (R, through reticulate)
        if caller is not None and caller.f_code is _REGISTER_PARAMETRIZATION:
            raise _not_parametrized(self)
        return super().__getattr__(name)

    @classmethod
    def of(cls, program: Program, path: str) -> ShownModule:
        """The sub-module at ``path`` as the file describes it."""
        named = program.module_types.get(path)
        return cls(
            program.module_classes.get(path, "Module"),
            program.module_reprs.get(path, ""),
            _torch_class_named(named) if named else None,
        )

    def _get_name(self) -> str:
        return self._shown_class

    def extra_repr(self) -> str:
        return self._shown_settings


_REGISTER_PARAMETRIZATION = _parametrize.register_parametrization.__code__


def _not_parametrized(module: ShownModule) -> TraceError:
    return TraceError(
        f"a sub-module of a loaded module ({module._shown_class}) cannot be parametrized "
        "(torch.nn.utils.parametrize: weight_norm, spectral_norm, orthogonal...): its "
        "graphs hold the computation the module was traced with, and read its parameters "
        "as they are. Nothing was changed. Parametrize the original model and trace it "
        "again (tracebridge.trace), or write the new weights into the loaded one "
        "(load_state_dict)"
    )


def _add_shown_modules(root: nn.Module, program: Program) -> None:
    """Every sub-module the file names in ``module_classes``, in its order (PyTorch's
    registration order, so that printing follows the original), with or without state. A
    path part that is already an attribute of the module is left out: these are for
    printing, and must never replace anything."""
    states = set(program.state)
    for path in program.module_classes:
        if not path:
            continue
        module, prefix = root, ""
        for part in path.split("."):
            prefix = f"{prefix}.{part}" if prefix else part
            if part not in module._modules:
                if hasattr(module, part) or prefix in states:
                    break
                module.add_module(part, ShownModule.of(program, prefix))
            module = module._modules[part]


def _same_in_both(program: Program) -> dict[str, bool]:
    """Graph -> the mode every sub-module may also be in for it: the other mode of the
    one it was recorded in, for a graph whose other mode recorded the same graph (not
    mode-bound, not one of a dispatched pair; runtime/module_tree.py)."""
    routed = {g for route in program.dispatch.values() for g in route.values()}
    return {
        graph: not flags[""]
        for graph, flags in program.module_modes.items()
        if "" in flags and graph not in program.mode_bound and graph not in routed
    }


def _graphs_of_mode(program: Program, training: bool) -> list[str]:
    """The graphs a module in mode ``training`` runs: each method's routed graph."""
    routed = {g for route in program.dispatch.values() for g in route.values()}
    graphs = [route["train" if training else "eval"] for route in program.dispatch.values()]
    return graphs + [g for g in program.methods if g not in routed]


def _named_methods(program: Program) -> frozenset[str]:
    """The methods of ``program`` that a caller reaches by name (``traced.encode``)."""
    return frozenset((set(program.methods) | set(program.dispatch)) - _variant_names(program))


# The entry of the module traced among the sub-modules' hooks (its path, "", as the root)
ROOT_HOOKS = ""


def _child_hooks(root: nn.Module) -> dict[str, tuple]:
    """The module hooks of each sub-module (not ``root``'s own) that has any: path -> the
    hooks' numbers, by kind (not those its traced code installs itself: trace/own_hooks.py);
    and the global module hooks, which every sub-module's call ran, under ``GLOBAL``."""
    found = {}
    if any(global_hooks()):
        found[GLOBAL] = global_hooks()
    for path, module in root.named_modules():
        if path:
            hooks = user_hooks(module)
            if any(hooks):
                found[path] = hooks
    hooked = root.__dict__.get("_tb_hooked_root")
    if hooked is not None:  # kept even where none is left: that is the change to see
        found[ROOT_HOOKS] = user_hooks(hooked)
    return found


def _hook_tables(root: nn.Module) -> tuple[list, list[str], list[int], list[tuple]]:
    """Where ``root``'s sub-modules keep their hook tables (modules and names, to read them
    by one ``map``), the tables' lengths now, and ``(index, first key, last key)`` of each
    that is not empty: what :func:`_same_hooks` compares."""
    modules = [m for path, m in root.named_modules() if path for _ in _HOOK_TABLES]
    hooked = root.__dict__.get("_tb_hooked_root")
    modules += [hooked] * len(_HOOK_TABLES) if hooked is not None else []
    names = list(_HOOK_TABLES) * (len(modules) // len(_HOOK_TABLES))
    modules += [_module_hooks] * len(GLOBAL_HOOK_TABLES)  # removing one takes no number
    names += GLOBAL_HOOK_TABLES
    every = list(map(getattr, modules, names))
    lengths = list(map(len, every))
    ends = [(i, next(iter(t)), next(reversed(t))) for i, t in enumerate(every) if lengths[i]]
    return modules, names, lengths, ends


def _same_hooks(modules: list, names: list[str], lengths: list[int], ends: list[tuple]) -> bool:
    """Whether the sub-modules' hook tables hold the hooks they held when measured, without
    walking the modules: a hook is registered under a number never used before, at the
    end of its table or (``prepend``) at its start, so a table that kept its length and
    both its end keys holds no new hook, hence the same ones. (A sub-module added since is
    not among them: the graph never calls it.)"""
    every = list(map(getattr, modules, names))
    if list(map(len, every)) != lengths:
        return False
    return all(
        next(iter(every[i])) == first and next(reversed(every[i])) == last
        for i, first, last in ends
    )


def _changed_hooks(now: dict, traced: dict) -> list[str]:
    """The paths (and ``GLOBAL``) whose hooks differ from those at trace time in a way the
    graph cannot stand for: a forward hook added or removed (its work is in the graph, or
    is not), a backward hook added (the graph never runs it). A backward hook removed
    since leaves gradients as the graph computes them: not a change (see
    :func:`_backward_hooks`)."""
    empty = ((),) * len(_HOOK_TABLES)
    changed = []
    for path in set(now) | set(traced):
        new, old = now.get(path, empty), traced.get(path, empty)
        if new[:2] != old[:2] or not all(set(n) <= set(o) for n, o in zip(new[2:], old[2:])):
            changed.append(path)
    return sorted(changed)


# Note: backward hooks of sub-modules. A module's backward hooks (full, pre, legacy) change
# or watch the gradients flowing through its call in eager; a trace records forward only
# and never runs a module's hooks (the recording sets backward hooks aside:
# trace/own_hooks.py), so a backward through a call of the trace skips them: gradients
# silently without the hook's clipping or scaling (prober20b F4). Refusing every call
# under autograd would refuse evaluation without ``no_grad`` too; instead, while such a
# hook (or a global module backward hook) present at trace time is still registered, each
# call's outputs that autograd tracks get a tensor hook that raises when a backward
# reaches them, naming the sub-module and the hook. A call without autograd (no_grad,
# inference_mode, nothing that requires grad) is served as before; a hook removed since
# (``handle.remove()``) makes the graph's gradients the eager ones again, and nothing
# raises. Calls of a trace made without such hooks take no part in this (the fast call is
# kept: ``_choose_fast_call``).
_BACKWARD_KINDS = {
    (2, True): "full backward hook (register_full_backward_hook)",
    (2, False): "backward hook (register_backward_hook)",
    (3, None): "backward pre-hook (register_full_backward_pre_hook)",
}


def _backward_hooks(root: nn.Module, hooks: dict) -> tuple[str, ...]:
    """Words for each sub-module of ``root`` (or the global tables) in ``hooks`` (those
    registered now that were at trace time) that has a backward hook: see the note above."""
    found = []
    for path, tables in hooks.items():
        if path == GLOBAL:
            words = _backward_words(None, tables, "every module (global)")
        elif path == ROOT_HOOKS:
            original = root.__dict__["_tb_hooked_root"]
            owner = f"the module it was traced from ({type(original).__name__})"
            words = _backward_words(original, tables, owner)
        else:
            words = _backward_words(root.get_submodule(path), tables, f"sub-module {path!r}")
        if words:
            found.append(words)
    return tuple(found)


def _backward_words(module: nn.Module | None, tables: tuple, owner: str) -> str | None:
    """``the backward pre-hook (register_full_backward_pre_hook) of <owner>`` for the
    backward tables of ``tables`` that are not empty (the global ones: ``module`` None),
    None where both are."""
    if not any(tables[2:]):
        return None
    if module is None:
        full = _module_hooks._global_is_full_backward_hook
    else:
        full = getattr(module, "_is_full_backward_hook", None)
    kinds = [
        _BACKWARD_KINDS[(index, full is not False if index == 2 else None)]
        for index in (2, 3)
        if tables[index]
    ]
    if module is None:
        kinds = [k.replace("(register_", "(register_module_") for k in kinds]
    return f"the {' and the '.join(kinds)} of {owner}"


def _refuse_backward(result: Any, hooks: tuple[str, ...]) -> Any:
    """``result`` with a hook on each output autograd tracks that raises when a backward
    reaches it (see the note on backward hooks); ``result`` itself."""
    if not torch.is_grad_enabled():
        return result
    leaves, _ = pytree.flatten(result, lambda x: isinstance(x, torch.Tensor))
    for tensor in leaves:
        # a leaf (an input returned as it is) is the caller's: no hook of ours goes on it
        if not isinstance(tensor, torch.Tensor) or tensor.grad_fn is None:
            continue
        if getattr(tensor, "_tb_backward_refused", False):
            continue  # the same tensor given again (a kept value): one hook is enough
        tensor.register_hook(functools.partial(_backward_refused, hooks))
        tensor._tb_backward_refused = True
    return result


def _backward_refused(hooks: tuple[str, ...], grad: torch.Tensor) -> None:
    raise TraceError(
        f"a backward through this trace would skip {hooks[0]}"
        f"{' (and more)' if len(hooks) > 1 else ''}, registered when it was traced: a trace "
        "records what forward computes and never runs a module's backward hooks, so the "
        "gradients would not be the eager ones (a hook that clips or scales them). Call "
        "the original module to train with the hook, or remove the hook "
        "(handle.remove()): the trace's gradients are then the eager ones. Calls "
        "without autograd (torch.no_grad()) are served as they are"
    )


class _CalledBackwardHooks:
    """The backward hooks of the modules a traced *function* called (and the global module
    backward hooks), as they were at trace time: :meth:`live` words those still
    registered (see the note on backward hooks)."""

    def __init__(self, modules: list[nn.Module]):
        self.kept = [
            (module, user_hooks(module)[2:]) for module in modules if any(user_hooks(module)[2:])
        ]
        self.global_kept = global_hooks()[2:]

    def __bool__(self) -> bool:
        return bool(self.kept) or any(self.global_kept)

    def live(self) -> tuple[str, ...]:
        """Words for the hooks of trace time still registered (those added since are not
        looked at: a traced function watches no module's hooks otherwise)."""
        found = []
        kept = [(m, t, f"the {type(m).__name__} it called") for m, t in self.kept]
        for module, tables, owner in [*kept, (None, self.global_kept, "every module (global)")]:
            now = user_hooks(module)[2:] if module is not None else global_hooks()[2:]
            still = [tuple(k for k in n if k in set(o)) for n, o in zip(now, tables)]
            words = _backward_words(module, ((), (), *still), owner)
            if words:
                found.append(words)
        return tuple(found)


class _CalledTree:
    """The forward hooks and the children of the modules a traced *function* called, as
    they were at trace time (prober20b F13). Their work is in the graph, as a traced
    module's sub-modules' is (the note on hooks of sub-modules), and a call of the trace
    runs none of them: a forward hook added to or removed from such a module, or a child
    replaced or added (``model[1] = nn.Tanh()``, ``model.append(...)``), gave the old
    answer where eager gives another. A call compares two counters (hooks take a number
    from ``RemovableHandle.next_id``, sub-modules registered are counted by
    runtime/module_tree.py) and the lengths of the few tables that had hooks, and walks
    the modules only when one moved."""

    __slots__ = (
        "modules",
        "hooks",
        "global_hooks",
        "children",
        "hook_stamp",
        "tree_stamp",
        "tables",
        "routes",
    )

    def __init__(self, modules: list[nn.Module]):
        module_tree.count_registrations()
        self.modules = modules
        self.routes = [module_tree.route(m) for m in modules]  # class, instance forward
        self.hooks = [user_hooks(m)[:2] for m in modules]
        self.global_hooks = global_hooks()[:2]
        self.children = [dict(m._modules) for m in modules]
        self.hook_stamp = _RemovableHandle.next_id
        self.tree_stamp = module_tree.REGISTRATIONS[0]
        # (removing a hook takes no number: the tables that had one are measured)
        self.tables = tuple(
            (table, len(table))
            for m in modules
            for name in _HOOK_TABLES[:2]
            if len(table := getattr(m, name))
        )

    def check(self) -> None:
        # (on every call: two compares, and the tables' lengths only where there are any)
        if (
            _RemovableHandle.next_id == self.hook_stamp
            and module_tree.REGISTRATIONS[0] == self.tree_stamp
            and (not self.tables or all(len(t) == n for t, n in self.tables))
        ):
            return
        for module, hooks, children, route in zip(
            self.modules, self.hooks, self.children, self.routes
        ):
            how = module_tree.rerouted(module, route)
            if how is not None:
                raise TraceError(
                    f"the traced function called a {route[0].__name__} that runs other "
                    f"code now: {how}. The graph holds what its code did when traced and "
                    "runs no module itself. Put it back, or trace the function again"
                )
            what = None
            if user_hooks(module)[:2] != hooks:
                what = "forward hooks"
            elif len(module._modules) != len(children) or any(
                module._modules.get(k) is not v for k, v in children.items()
            ):
                what = "sub-modules"
            if what is not None:
                raise TraceError(
                    f"the traced function called a {type(module).__name__} whose {what} "
                    "changed since it was traced (a hook registered or removed, a sub-module "
                    "replaced or added): the graph holds what ran then and runs no module "
                    "itself. Trace the function again after the change"
                )
        if global_hooks()[:2] != self.global_hooks:
            raise TraceError(
                "the global module forward hooks are not those present when this function "
                "was traced: the graph holds what they did then. Trace it again"
            )
        self.hook_stamp = _RemovableHandle.next_id
        self.tree_stamp = module_tree.REGISTRATIONS[0]


class _BackwardRefusing:
    """A traced function's method whose outputs refuse a backward while a backward hook
    of a module it called at trace time is still registered (the note on backward hooks)."""

    def __init__(self, method, hooks: _CalledBackwardHooks):
        self.method, self.hooks = method, hooks

    def __call__(self, *args, **kwargs):
        result = self.method(*args, **kwargs)
        live = self.hooks.live()
        return _refuse_backward(result, live) if live else result

    def __getattr__(self, name: str):
        return getattr(self.method, name)


def _is_state_or_child(found: dict, name: str) -> bool:
    """Whether ``name`` is a parameter, buffer or sub-module in a module's ``__dict__``
    (what nn.Module's ``__getattr__`` finds)."""
    return any(name in found.get(table, ()) for table in ("_parameters", "_buffers", "_modules"))


def _owner(root: nn.Module, path: str) -> tuple[nn.Module, str]:
    *parents, leaf = path.split(".")
    module = root
    for part in parents:
        module = getattr(module, part)
    return module, leaf


# The attributes whose change can change what a call of a traced module runs: the fast
# call (``TracedModule.__call__``) is chosen again when one is set or deleted.
_ROUTING_ATTRIBUTES = frozenset({"forward", "training", "_tb_program", "_methods", "_mode_bound"})


class TracedModule(nn.Module, _Traced):
    """A traced ``nn.Module``. It holds the same sub-modules, parameters and buffers as the
    module it was traced from (shared, not copied), one method per traced method, and
    trains, moves (``.to``, ``.double``) and saves like a module.

    >>> import torch, tracebridge
    >>> net = torch.nn.Linear(3, 2)
    >>> traced = tracebridge.trace(net, torch.rand(4, 3))
    >>> traced.weight is net.weight
    True
    """

    def __init__(
        self,
        program: Program,
        original: nn.Module | None = None,
        runtime: str = "codegen",
        sealed: bool = False,
    ):
        super().__init__()
        self._tb_program = program
        self._class_name = program.module_classes.get("", "Module")
        self._tb_constants: dict[str, torch.Tensor] = {}
        # The generators the graphs draw from that no module of the tree holds as an
        # attribute (a global's), and the tree whose attributes hold the others
        self._tb_generators: dict[str, torch.Generator] = {}
        self.__dict__["_tb_generator_root"] = original if original is not None else self
        if original is not None:
            self._share(original)
        else:
            self._rebuild(program)
        self.training = program.training if original is None else original.training
        seal = None
        if sealed and original is None and _sealable(program, runtime):
            # loaded: its state tables sealed before the methods take their slots
            seal = self.__dict__["_tb_seal"] = sealed_state.seal_modules(self)
        self._make_methods(self._slots(), runtime)
        self._chain_specialisations()
        _give_seal(self._methods, seal)
        self._mode_bound = dict(program.mode_bound)
        # The tree the graphs were recorded from, checked on each call (module_tree.py): the
        # original's (a sub-module replaced there is what eager runs), or a loaded one's own.
        self.__dict__["_tb_tree"] = TreeWatch(
            self if original is None else original,
            program.module_modes,
            _same_in_both(program),
            traced=None if original is None else self,
        )
        # The module traced, whose call this stands for: its hooks at trace time ran
        # inside the recording, so the graph holds what they did, and it never runs one
        # registered since; either change is refused as a sub-module's is (prober20b F10:
        # a root's input-scaling hook removed after tracing went on being applied;
        # prober21b F1: one registered after tracing was not applied).
        if original is not None:
            self.__dict__["_tb_hooked_root"] = original
        # The sub-modules' hooks the graphs were traced with (see the note on hooks); the
        # global ones only for a trace made now (a loaded graph holds none of their work)
        hooks = _child_hooks(self)
        if original is None:
            hooks.pop(GLOBAL, None)
        self.__dict__["_tb_hooks"] = hooks
        self.__dict__["_tb_backward"] = _backward_hooks(self, hooks)
        self._remember_hooks()
        self._choose_fast_call()

    # Note: the fast call. nn.Module's call goes ``_wrapped_call_impl`` -> ``_call_impl`` ->
    # ``forward`` -> ``_method_for`` -> Method: four Python frames and the routing by mode,
    # about a microsecond, which is all a small loaded model costs beyond its ops. What
    # ``forward`` runs depends only on attributes this class sees being set (training,
    # the methods, an instance's own ``forward``), so it is chosen when one changes and
    # kept in ``_tb_fast``; a call goes straight to it when nothing else of nn.Module's
    # call is needed: no hooks (the module's or global), no ``Module.compile()``, no
    # torch.jit trace of a module running (``_slow_forward`` names the scope of each module
    # then, and only then: its test, ``_trace_module_map``, is cheaper to read than the
    # tracing state, a call into C that costs a tenth of a microsecond). Otherwise,
    # and wherever routing has something to say (a mode-bound method in the other mode),
    # the call takes nn.Module's path, unchanged.

    _tb_fast: Method | None = None
    _tb_fast_graph: str | None = None  # the graph name of _tb_fast
    # Note: hooks of sub-modules. A hook on a sub-module runs inside the code the trace
    # recorded, so the graph holds what the hooks present at trace time did, and nothing
    # of a hook added (or removed) later -- on a sub-module the traced module shares with
    # the original, or on a loaded module's sub-modules. Every hook PyTorch registers takes
    # a number from ``RemovableHandle.next_id``: a call compares that one counter with the
    # one seen last (tens of nanoseconds), and only when it moved compares the sub-modules'
    # hooks with those of the trace, refusing the call where they differ.
    # (the counter when last checked, (hook table, its length) of each sub-module that had
    # hooks at trace time): removing a hook takes no number, so those few tables are
    # measured on each call (usually there are none). One attribute: each read costs.
    _tb_hook_check: tuple = (-1, ())
    _tb_hooks: dict | None = None
    _tb_tree: TreeWatch | None = None

    def __call__(self, *args, **kwargs):
        check = self._tb_hook_check
        if _RemovableHandle.next_id != check[0] or (
            check[1] and any(len(t) != n for t, n in check[1])
        ):
            self._check_child_hooks()
        tree = self._tb_tree
        if tree is not None and _REGISTRATIONS[0] != tree.seen:
            tree.check_tree()  # (TreeWatch.check_tree's test, here: a frame less a call)
        method = self._tb_fast
        if (
            method is None
            or self._forward_hooks
            or self._forward_pre_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
            or _module_hooks._global_forward_hooks
            or _module_hooks._global_forward_pre_hooks
            or _module_hooks._global_backward_hooks
            or _module_hooks._global_backward_pre_hooks
            or self._compiled_call_impl is not None
            or _jit_trace._trace_module_map is not None
        ):
            return nn.Module.__call__(self, *args, **kwargs)
        if tree is not None:
            tree.check_modes(self._tb_fast_graph, method)
        try:
            return method(*args, **kwargs)
        except GuardError as exc:
            explained = self._state_changed(exc, self._tb_fast_graph)
            if explained is None:
                raise
            raise explained from None

    def _watch(self) -> None:
        """The checks of ``__call__`` (sub-modules' hooks, the module tree), for the calls
        that do not go through it: another traced method (``traced.encode(x)``),
        ``traced.forward(x)`` itself, a CompiledModule's call. (``__call__`` has them
        inline: a frame less on the common call.)"""
        check = self._tb_hook_check
        if _RemovableHandle.next_id != check[0] or (
            check[1] and any(len(t) != n for t, n in check[1])
        ):
            self._check_child_hooks()
        tree = self._tb_tree
        if tree is not None:
            tree.check_tree()

    def _check_child_hooks(self) -> None:
        """Refuse a call while a sub-module has other module hooks than at trace time (see
        the note above); remember the hook counter once they agree."""
        stamp = _RemovableHandle.next_id
        found = self.__dict__
        tables = found.get("_tb_hook_tables")
        if tables is not None and _same_hooks(*tables):
            self._remember_hooks(stamp)  # the counter moved elsewhere: no walk, no copies
            return
        hooks = _child_hooks(self)
        if found.get("_tb_hooks") is None:
            found["_tb_hooks"] = hooks  # made without __init__: these are the baseline
        if GLOBAL not in found["_tb_hooks"]:
            # None at trace time: the graph holds no global hook's work, and one added
            # since runs on the module's own result only (README, "Hooks")
            hooks.pop(GLOBAL, None)
        changed = _changed_hooks(hooks, found["_tb_hooks"])
        if changed:
            self._refuse_changed_state()  # weight_norm's removal takes its hook with it
            if GLOBAL in changed:
                raise TraceError(
                    "the global module hooks (nn.modules.module.register_module_forward_hook "
                    "and the like) are not those present when this module was traced: the "
                    "graph holds what the hooks at trace time did to each sub-module's "
                    "result and never runs them on sub-modules itself. Trace again with the "
                    "hooks you want in place"
                )
            if changed[0] == ROOT_HOOKS:
                raise TraceError(
                    f"the module this was traced from ({type(self._tb_hooked_root).__name__})"
                    " has other hooks than when it was traced (a hook registered or removed "
                    "since): the graph holds what its hooks at trace time did inside the "
                    "recording and never runs a hook itself. Trace again with the hooks in "
                    "place, or register hooks on the traced module itself (its own hooks run "
                    "on every call)"
                )
            raise TraceError(
                f"sub-module {changed[0]!r} of this traced module has other hooks than when "
                "it was traced (a forward hook registered or removed since, or a backward "
                "hook registered since): the graph holds what the hooks at trace time did "
                "and never runs a module's hooks itself. Trace again with the hooks in "
                "place, or register the hook on the traced module itself (its own hooks "
                "run on every call)"
            )
        backward = _backward_hooks(self, hooks)
        if backward != found.get("_tb_backward"):
            found["_tb_backward"] = backward
            self._choose_fast_call()
        if hooks != found["_tb_hooks"]:
            # a backward hook removed since: measured again, so that the next calls find
            # the tables as they are now and walk nothing (_same_hooks)
            found["_tb_hook_tables"] = _hook_tables(self)
        self._remember_hooks(stamp)

    def _refuse_changed_state(self) -> None:
        """Raise where a state entry a traced method reads is gone or no tensor now: the
        cause a changed hook table often comes with (``remove_weight_norm``,
        ``prune.remove`` remove a hook and the state it computed from), and the one to
        name."""
        for name, method in self._methods.items():
            changed = support.changed_state(name, method.graph, method._slots, None)
            if changed is not None:
                raise changed

    def _remember_hooks(self, stamp: int | None = None) -> None:
        """Keep the hook counter and the lengths of the hook tables of the sub-modules
        that had hooks at trace time, for the check of each call."""
        found = self.__dict__
        if found.get("_tb_hook_tables") is None:
            found["_tb_hook_tables"] = _hook_tables(self)
        modules, names, lengths, ends = found["_tb_hook_tables"]
        tables = tuple((getattr(modules[i], names[i]), lengths[i]) for i, _, _ in ends)
        now = _RemovableHandle.next_id if stamp is None else stamp
        found["_tb_hook_check"] = (now, tables)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _ROUTING_ATTRIBUTES:
            self._choose_fast_call()

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        if name in _ROUTING_ATTRIBUTES:
            self._choose_fast_call()

    def _choose_fast_call(self) -> None:
        """Keep in ``_tb_fast`` the method that ``forward`` runs now when its routing has
        nothing to check (None otherwise: the call then goes through ``forward``)."""
        found = self.__dict__
        ready = all(k in found for k in ("_tb_program", "_methods", "_mode_bound"))
        own_forward = "forward" in found or type(self).forward is not TracedModule.forward
        method = None
        # while a backward hook present at trace time is registered, calls go through
        # ``forward``, which guards their outputs (the note on backward hooks)
        if ready and not own_forward and not found.get("_tb_backward"):
            name = self._routed("forward")
            bound = self._mode_bound.get(name)
            if bound is None or bound["training"] == self.training:
                method = for_mode(self._methods.get(name), self.training)
        found["_tb_fast"] = method
        found["_tb_fast_graph"] = name if method is not None else None
        found["_tb_named"] = None  # the methods reached by name: made again when needed

    def __getattr__(self, name: str):
        # Traced methods are found by name only after every real attribute, so that a
        # file's method named ``eval`` or ``to`` never replaces the module's own; the extra
        # specialisations of a method are reached through it, never by name. A traced
        # method is found before nn.Module's lookup raises (which a method called by name
        # would pay on every call), after the state and children that lookup reads.
        found = self.__dict__
        named = found.get("_tb_named")
        if named is None and "_tb_program" in found:
            named = found["_tb_named"] = _named_methods(found["_tb_program"])
        if named and name in named and not _is_state_or_child(found, name):
            return TracedMethod(self, name)
        return super().__getattr__(name)

    def _share(self, original: nn.Module) -> None:
        # The root's own tables themselves, as a sub-module is shared: a tensor replaced on
        # either (load_state_dict(assign=True), a buffer moved by .to() or .cuda(), an
        # assignment) is the one both use; copied entries kept the old tensor for the
        # traced module (a BatchNorm traced alone then moved trained an orphan copy). The
        # sub-modules are the original's, in a table of the traced module's own: a module
        # added to it for bookkeeping is not added to the original (one replaced on the
        # original is refused: module_tree.py watches the original's tree).
        for name, child in original.named_children():
            self.add_module(name, child)
        self.__dict__["_parameters"] = original._parameters
        self.__dict__["_buffers"] = original._buffers
        self.__dict__["_non_persistent_buffers_set"] = original._non_persistent_buffers_set
        for name, entry in self._tb_program.state.items():
            if entry.kind == "constant":
                self._tb_constants[name] = entry.tensor

    def _rebuild(self, program: Program) -> None:
        _add_shown_modules(self, program)
        for name, entry in program.state.items():
            if entry.kind == "constant":
                self._tb_constants[name] = entry.tensor
                continue
            module, leaf = self._shown_owner(program, name)
            if entry.kind == "parameter":
                module.register_parameter(
                    leaf, nn.Parameter(entry.tensor, requires_grad=entry.tensor.is_floating_point())
                )
            else:
                module.register_buffer(leaf, entry.tensor, persistent=entry.persistent)
        # Each generator where the original held it (``noise.g``), a global's on the root
        # (``generator0``): the graphs draw from these very objects (runtime/generators.py)
        for name, generator in program.generators.items():
            module, leaf = self._shown_owner(program, name)
            module.__dict__[leaf] = generator
        # A tied tensor under its other names too (a language model's output layer sharing
        # the embedding's matrix), the same object, as the original holds it: state_dict()
        # and load_state_dict() then take the original's keys. A name that something of
        # the module already holds, or a private one, is left out (a file may write any
        # name of the grammar; load_state_dict then names it unexpected).
        for alias, target in program.aliases.items():
            owner, leaf = _owner(self, target)
            tensor = owner._parameters.get(leaf, owner._buffers.get(leaf))
            place = self._alias_owner(program, alias)
            if tensor is None or place is None:
                continue
            module, alias_leaf = place
            if isinstance(tensor, nn.Parameter):
                module.register_parameter(alias_leaf, tensor)
            else:
                module.register_buffer(alias_leaf, tensor)
        # The sub-modules in the mode the module was saved in (a new module starts in
        # training mode), as Module.train() sets them; those a graph of that mode was
        # recorded with in the other mode (a frozen batch norm) as recorded.
        recorded = {}
        for graph in _graphs_of_mode(program, program.training):
            recorded.update(program.module_modes.get(graph, {}))
        for path, module in self.named_modules():
            if path:
                module.training = recorded.get(path, program.training)

    def _shown_owner(self, program: Program, name: str) -> tuple[nn.Module, str]:
        """The module that holds state ``name`` of a loaded program, and its leaf name; the
        modules on the way are made (ShownModule) where missing."""
        *parents, leaf = name.split(".")
        module: nn.Module = self
        path = ""
        for part in parents:
            path = f"{path}.{part}" if path else part
            if part not in module._modules:
                module.add_module(part, ShownModule.of(program, path))
            module = module._modules[part]
        return module, leaf

    def _alias_owner(self, program: Program, alias: str) -> tuple[nn.Module, str] | None:
        """Where a tied name of a loaded program goes, as :meth:`_shown_owner` finds state,
        or None where a part of the path is private or already something else of the
        module (a tensor, a method, an attribute)."""
        parts = alias.split(".")
        module: nn.Module = self
        for depth, part in enumerate(parts[:-1]):
            child = module._modules.get(part)
            if child is None:
                if part.startswith("_") or hasattr(module, part):
                    return None
                child = ShownModule.of(program, ".".join(parts[: depth + 1]))
                module.add_module(part, child)
            module = child
        leaf = parts[-1]
        if leaf.startswith("_") or hasattr(module, leaf):
            return None
        return module, leaf

    def _state_slots(self) -> dict:
        return self._slots()

    def _slots(self) -> dict:
        found = self.__dict__.get("_tb_generator_slots")
        if found is None:  # (where each generator is: decided once, by identity)
            root, own = self.__dict__["_tb_generator_root"], self._tb_generators
            found = generators.module_slots(root, self._tb_program.generators, own)
            self.__dict__["_tb_generator_slots"] = found
        slots = Slots({}, found)
        for name, entry in self._tb_program.state.items():
            if entry.kind == "constant":
                slots[name] = (self._tb_constants, name)
                continue
            owner, leaf = _owner(self, name)
            table = owner._parameters if entry.kind == "parameter" else owner._buffers
            if leaf not in table:
                table = owner._buffers if entry.kind == "parameter" else owner._parameters
            slots[name] = (table, leaf)
        return slots

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        state_replaced()  # moved (``.to()``, ``.double()``): sizes decided before may not hold
        for name, tensor in self._tb_constants.items():
            self._tb_constants[name] = fn(tensor)
        return self

    def _get_name(self) -> str:
        return self._class_name

    def extra_repr(self) -> str:
        settings = self._tb_program.module_reprs.get("")
        traced = f"traced: {', '.join(self.methods)}"
        return f"{settings}, {traced}" if settings else traced

    def _routed(self, name: str) -> str:
        """The name of the graph that method ``name`` runs in the current mode."""
        route = self._tb_program.dispatch.get(name)
        return name if route is None else route["train" if self.training else "eval"]

    def _method_for(self, name: str) -> Method:
        name = self._routed(name)
        method = self._methods.get(name)
        if method is None:
            raise TraceError(
                f"this traced module has no method {name!r} (it has "
                f"{', '.join(self._tb_program.methods)}); call one of those"
            )
        bound = self._mode_bound.get(name)
        if bound is not None and bound["training"] != self.training and guards_active(method):
            traced, now = ("training", "eval") if bound["training"] else ("eval", "training")
            raise GuardError(
                f"{name} was traced in {traced} mode, and this module records another graph in "
                f"{now} mode (first at {bound['op']}, {bound['loc'] or '?'}); call "
                f".{'train' if bound['training'] else 'eval'}() first, or trace with "
                "respect_mode=True to keep both graphs",
                guard=f"{name}: training == {bound['training']}",
                location=bound["loc"] or "",
                seen=self.training,
            )
        tree = self.__dict__.get("_tb_tree")
        if tree is not None:  # after the mode-bound refusal, which names the op and line
            tree.check_modes(name, method)
        return for_mode(method, self.training)

    def forward(self, *args, **kwargs):
        self._watch()  # also where forward is called by name, past __call__
        try:
            result = self._method_for("forward")(*args, **kwargs)
        except GuardError as exc:
            explained = self._state_changed(exc, self._routed("forward"))
            if explained is None:
                raise
            raise explained from None
        backward = self.__dict__.get("_tb_backward")
        return _refuse_backward(result, backward) if backward else result

    def _state_changed(self, exc: GuardError, graph_name: str) -> GuardError | None:
        """A refusal told with the state that changed shape since the trace (a buffer the
        code rebuilt lazily in an eager call), or None (runtime/state_changes.py)."""
        graph = self._tb_program.methods.get(graph_name)
        if graph is None:
            return None
        return state_changes.explained(exc, graph, self._tb_program.state, self._slots())

    forward = _TracedForward(forward)

    def train(self, mode: bool = True) -> TracedModule:
        """Set this traced module's mode (which graph ``forward`` runs) and its
        sub-modules', as ``Module.train()`` does. The sub-modules are the original's
        (shared, as a wrapper such as DistributedDataParallel shares them): their flags
        switch for both, the original's own flag stays. A call refuses where a
        sub-module's flag is not the one the graph it runs was recorded with
        (runtime/module_tree.py): a batch norm frozen in a training model must be frozen
        again after ``train()``, as in eager code.

        >>> import torch, tracebridge
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout()).eval()
        >>> traced = tracebridge.trace(net, torch.rand(3, 2), respect_mode=True)
        >>> traced.train().training, net.training, net[1].training
        (True, False, True)
        """
        if not isinstance(mode, bool):
            raise ValueError(f"train() takes a bool, not {type(mode).__name__}")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    @property
    def methods(self) -> list[str]:
        """The names of the traced methods (without the size-1 variants kept beside them)."""
        variants = _variant_names(self._tb_program)
        return [name for name in self._tb_program.methods if name not in variants]

    @property
    def graph(self) -> str:
        """The text form of ``forward`` (the method it runs in the current mode)."""
        method = self._method_for("forward")
        self._symbolize()
        return graph_text(method.graph, method.name)

    @property
    def code(self) -> str:
        """The Python code generated from ``forward`` (the method it runs in this mode)."""
        return self._method_for("forward").code

    @property
    def inlined_graph(self) -> str:
        """torch.jit's name: the same as :attr:`graph`, which calls nothing to inline."""
        return self.graph

    @property
    def original_name(self) -> str:
        """The class name of the module that was traced (torch.jit's ``original_name``).

        >>> import torch, tracebridge
        >>> tracebridge.trace(torch.nn.Linear(2, 2), torch.ones(1, 2)).original_name
        'Linear'
        """
        return self._class_name

    def _program_for_saving(self) -> Program:
        # The state is read through the tree as it is now: a sub-module replaced since
        # would put its tensors under the old graph (a file that serves neither model).
        tree = self._tb_tree
        if tree is not None:
            tree.check_tree()
        slots = self._slots()
        state = {}
        for name, entry in self._tb_program.state.items():
            table, key = slots[name]
            tensor = sealed_state.peek(table, key)
            if not isinstance(tensor, torch.Tensor):
                now = "is gone from its module" if key not in table else "is None now"
                raise TraceError(
                    f"cannot save: the state entry {name!r} that the traced program reads "
                    f"{now} (changed since tracing: weight_norm or pruning applied or "
                    "removed, a parameter set to None...); the trace holds the model as it "
                    "was: trace again after the change, then save"
                )
            state[name] = StateEntry(entry.kind, tensor, entry.persistent)
        self._tb_program.state = state
        self._tb_program.training = self.training
        self._tb_program.generators = generators.current(slots.generators)
        return self._tb_program


# --- trace -------------------------------------------------------------------------------


def _with_progress(fn):
    """Show a progress bar (``progress=``, see :mod:`tracebridge.progress`) while ``fn``
    traces; the recording and the check name their stages on it."""

    @functools.wraps(fn)
    def run(func, *args, progress: bool | None = None, **kwargs):
        what = getattr(func, "__name__", None) or type(func).__name__
        if isinstance(func, nn.Module):
            what = type(func).__name__
        with (
            track(f"tracing {what}", progress=progress),
            old_objects_set_aside(),
            numpy_rng_kept(func),
            memos_kept(),
            cache_values.kept(),
        ):
            if kwargs.get("check_trace", True) is False and torch._C._is_any_autocast_enabled():
                # No check to tell whether the code assumes what the caller's autocast
                # changes: recorded in it, for calls under that autocast only.
                with autocast.kept():
                    return fn(func, *args, progress=progress, **kwargs)
            try:
                return fn(func, *args, progress=progress, **kwargs)
            except GuardError:
                if autocast.keeping() or not torch._C._is_any_autocast_enabled():
                    raise
            # The code assumes what the caller's autocast changes (a dtype that
            # ``.float()`` gave back): traced again in that autocast, for calls under it.
            with autocast.kept():
                return fn(func, *args, progress=progress, **kwargs)

    return run


@_with_progress
def trace(
    func: Callable | nn.Module,
    example_inputs: Any = None,
    *,
    check_trace: bool = True,
    check_inputs: list | None = None,
    check_tolerance: float = 1e-5,
    strict: bool = True,
    example_kwarg_inputs: dict | None = None,
    respect_mode: bool = False,
    runtime: str = "codegen",
    progress: bool | None = None,
    **jit_only,
) -> TracedFunction | TracedModule:
    """Run ``func`` on ``example_inputs``, record its tensor operations, check the recording,
    and return a :class:`TracedFunction` (for a function) or :class:`TracedModule` (for an
    ``nn.Module`` or one of its bound methods). The meaning of the arguments is that of
    ``torch.jit.trace``.

    Args:
        func: a function of tensors, an ``nn.Module`` (its ``forward`` is traced) or a
            bound method of one (``model.encode``).
        example_inputs: the inputs to run ``func`` on while recording, read as
            torch.jit reads them: a tensor or a dict is the one positional input; a tuple
            (or a list, or another iterable) holds the positional inputs, which may be
            nested tuples, lists, dicts and ``None``.
        check_trace: run the check after recording (default ``True``): re-trace and compare
            the graphs, compare outputs with eager ``func`` from the same random state, try
            other sizes of each input dimension, call a module twice where a call changes
            its Python attributes, and leave the model untouched. Raises
            :class:`TracingCheckError` when the recording does not stand for ``func``.
        check_inputs: more inputs to check the trace with, a list of entries each read as
            ``example_inputs`` is (another batch size, another sequence length); with
            ``example_kwarg_inputs``, an entry that is a dict is keyword inputs.
        check_tolerance: the relative and absolute tolerance of the output comparison of
            the check.
        strict: as ``torch.jit.trace``'s: ``False`` allows lists and dicts at the output,
            their structure then fixed at trace time (with a :class:`TracerWarning`).
        example_kwarg_inputs: keyword inputs to run ``func`` with, a dict (traced like the
            positional ones). The result takes each argument by position or by keyword,
            whichever way the example passed it, as Python binds a call.
        respect_mode: for a module, record both its training and its evaluation graph
            (``trainforward`` and ``evalforward``); the result then follows ``.train()`` /
            ``.eval()``. Without it, the module's current mode is recorded, and calling it
            in the other mode raises :class:`GuardError` where that mode would record
            another graph (dropout, batch norm). The graph of the module's current mode
            keeps its sub-modules' modes as they are (a batch norm frozen in a training
            model); the other mode's has every sub-module in that mode, as
            ``Module.train()`` sets them (a :class:`TracerWarning` says so).
        runtime: how the result runs its graphs: ``"codegen"`` (default) generates Python
            code from each graph once, calling torch directly (as fast as eager or faster);
            ``"interpreter"`` walks the graph node by node (slower, for debugging: the same
            results, bit for bit).
        progress: show a progress bar on a terminal while recording and checking (``None``,
            the default: when standard error is a terminal and ``TRACEBRIDGE_PROGRESS`` is
            not ``0``; ``True``: always; ``False``: never).
        **jit_only: ``torch.jit.trace``'s ``optimize``, ``_force_outplace``,
            ``_module_class``, ``_compilation_unit`` and ``_store_inputs`` are accepted, so
            that a call written for torch.jit runs with only the import changed; they
            change nothing here (see :func:`_jit_only_arguments`).

    Returns:
        a :class:`TracedFunction` or a :class:`TracedModule`, which prints, runs, saves
        (:func:`save`), pickles and exposes ``.graph``, ``.code`` and ``.guards``.

    >>> import torch, tracebridge
    >>> def foo(x, y):
    ...     return 2 * x + y
    >>> traced_foo = tracebridge.trace(foo, (torch.rand(3), torch.rand(3)))
    >>> print(traced_foo.graph.splitlines()[0])
    graph foo(%x: f32[s0], %y: f32[s1]) {
    """
    _jit_only_arguments("trace", jit_only)
    _check_options(check_inputs, check_tolerance, runtime)
    args = _as_args(example_inputs)
    if example_kwarg_inputs is not None and not isinstance(example_kwarg_inputs, dict):
        raise TraceError(
            "example_kwarg_inputs must be a dict of keyword name -> input, not "
            f"{type(example_kwarg_inputs).__name__}"
        )
    kwargs = dict(example_kwarg_inputs or {})
    # With keyword examples, a dict of check_inputs is keyword inputs (as in torch.jit).
    keywords = example_kwarg_inputs is not None
    options = dict(
        check_trace=check_trace,
        check_inputs=None,
        check_tolerance=check_tolerance,
        strict=strict,
        runtime=runtime,
    )
    if isinstance(func, nn.Module) or _module_method(func):
        options["check_inputs"] = module_checks(check_inputs, ["forward"], keywords, False)
    if isinstance(func, nn.Module):
        inputs = {"forward": (args, kwargs)}
        return _trace_module(func, inputs, respect_mode=respect_mode, **options)
    if _module_method(func):
        inputs = {"forward": (args, kwargs)}
        return _trace_module(
            func.__self__,
            inputs,
            respect_mode=respect_mode,
            method_alias={"forward": func.__name__},
            **options,
        )
    if not callable(func):
        raise TraceError(f"trace() needs a function or nn.Module, not {type(func).__name__}")
    constants: dict[str, StateEntry] = {}

    def retrace(a, k):
        with preserved(None):
            return capture(func, a, k, constants=constants, strict=strict)

    def run_eager(a, k):
        a, k = fresh(a, k)
        with preserved(None):
            return func(*a, **k)

    stage("recording")
    before = KeptGlobals(func)
    with called_modules.noted() as called:
        graph = retrace(args, kwargs)
    changed_by_the_call = before.changed()
    _warn_of_side_effects(changed_by_the_call, {})
    # The recording was the user's one call: the runs below leave globals, and the buffers
    # of the modules the code called, as it left them.
    kept = KeptGlobals(func)
    kept_buffers = called_modules.KeptBuffers(called)
    try:
        name = getattr(func, "__name__", "forward")
        refuse_identity_paths(
            graph,
            func,
            args,
            kwargs,
            where=name,
            call=name if name.isidentifier() else "f",
            tolerance=check_tolerance,
            strict=strict,
        )
        if check_trace:  # a check: two more runs of the code per group of inputs
            graph.distinct_inputs = identity_sensitive_groups(
                func, args, kwargs, tolerance=check_tolerance
            )
        stage("size-1 variants")
        program = Program(
            kind="function",
            methods={"forward": graph},
            state=constants,
            generators=torch_generators.used(),
        )
        _add_specialisations(
            program, "forward", specialisations(graph, args, kwargs, run_eager, retrace)
        )
        name = name if name.isidentifier() else "forward"
        traced = TracedFunction(program, name=name, runtime=runtime)
        if called:
            read = frozenset(id(e.tensor) for e in program.state.values())
            traced._tb_modes = ModesWatch(called, read)
            traced._tb_called = _CalledTree(called)
            backward = _CalledBackwardHooks(called)
            if backward:
                _warn_of_backward_hooks(backward.live())
                traced._forward = _BackwardRefusing(traced._forward, backward)
        if check_trace:
            from .check.verify import check_function

            stage("checking")
            # The check compares the recording, not the runtime's rewrites (as_recorded).
            with as_recorded(), _naming_state(changed_by_the_call, before):
                checks = function_checks(check_inputs, keywords)
                check_function(func, traced, args, kwargs, checks, check_tolerance, strict)
    finally:
        kept.restore()
        kept_buffers.restore()
    return traced


def _module_method(func) -> bool:
    """Whether ``func`` is a bound method of a module (traced as that module's method)."""
    if isinstance(func, TracedMethod):
        return True
    return inspect.ismethod(func) and isinstance(func.__self__, nn.Module)


# torch.jit.trace's arguments that only TorchScript reads: accepted so that code written
# for torch.jit runs with only the import changed, without effect here.
_JIT_ONLY = {
    "optimize": "deprecated in torch.jit too, and without effect",
    "_force_outplace": "a trace records in-place ops as they run, with the same results",
    "_module_class": "TorchScript's class for the traced module",
    "_compilation_unit": "TorchScript's compilation unit",
    "_store_inputs": "TorchScript keeps the example inputs for its own check",
}


def _check_options(check_inputs, check_tolerance, runtime: str) -> None:
    """Refuse, before anything runs, options that would fail only after recording (or,
    for ``check_inputs`` given as one tensor, be read as a list of its rows)."""
    if runtime not in ("codegen", "interpreter"):
        raise ValueError(f"runtime must be 'codegen' or 'interpreter', not {runtime!r}")
    if isinstance(check_tolerance, bool) or not isinstance(check_tolerance, (int, float)):
        raise TraceError(f"check_tolerance must be a number, not {type(check_tolerance).__name__}")
    if not check_tolerance >= 0:  # NaN too
        raise TraceError(f"check_tolerance must be 0 or more, not {check_tolerance!r}")
    if check_inputs is not None and not isinstance(check_inputs, (list, tuple)):
        raise TraceError(
            "check_inputs must be a list with one entry per check (a tuple of positional "
            f"inputs, a tensor, or a dict of keyword inputs), not {type(check_inputs).__name__}"
            ": to check with one tensor x, pass check_inputs=[(x,)]"
        )


def _jit_only_arguments(where: str, given: dict) -> None:
    """Refuse unknown keywords (with the known ones named); accept torch.jit's own, with a
    warning for ``optimize`` (as torch.jit warns)."""
    unknown = sorted(set(given) - set(_JIT_ONLY))
    if unknown:
        raise TypeError(
            f"{where}() got an unexpected keyword argument {unknown[0]!r}; torch.jit's "
            f"TorchScript-only arguments {sorted(_JIT_ONLY)} are accepted (without effect)"
        )
    if given.get("optimize") is not None:
        warnings.warn(
            "`optimize` is deprecated and has no effect (as in torch.jit.trace)",
            FutureWarning,
            stacklevel=3,
        )


@_with_progress
def trace_module(
    mod: nn.Module,
    inputs: dict[str, Any],
    *,
    check_trace: bool = True,
    check_inputs: list[dict] | None = None,
    check_tolerance: float = 1e-5,
    strict: bool = True,
    respect_mode: bool = False,
    runtime: str = "codegen",
    progress: bool | None = None,
    example_inputs_is_kwarg: bool = False,
    **jit_only,
) -> TracedModule:
    """Trace several methods of ``mod`` into one :class:`TracedModule`, as
    ``torch.jit.trace_module`` does.

    Args:
        mod: the ``nn.Module`` whose methods are traced (shared, not copied).
        inputs: method name -> example inputs of that method (a tensor or a tuple), e.g.
            ``{"forward": x, "encode": (x, mask)}``.
        check_trace: check each method after recording (see :func:`trace`).
        check_inputs: more inputs to check with: a list of dicts shaped like ``inputs``.
        check_tolerance: the tolerance of the check's output comparison.
        strict: ``False`` allows lists and dicts at the outputs (see :func:`trace`).
        respect_mode: record every method in both modes (``trainforward`` and
            ``evalforward``, ``trainencode`` and ``evalencode``...; see :func:`trace`).
        runtime: ``"codegen"`` (default) or ``"interpreter"`` (see :func:`trace`).
        progress: a progress bar on a terminal (see :func:`trace`).
        example_inputs_is_kwarg: as ``torch.jit.trace_module``'s: a value of ``inputs``
            (and of each ``check_inputs`` entry) that is a dict is the keyword inputs of
            that method (without it, a dict is its one positional input).
        **jit_only: ``torch.jit.trace_module``'s TorchScript-only arguments, accepted and
            without effect (see :func:`trace`).

    Returns:
        a :class:`TracedModule` with one traced method per key of ``inputs``.

    >>> import torch, tracebridge
    >>> lin = torch.nn.Linear(3, 3)
    >>> m = tracebridge.trace_module(lin, {"forward": torch.rand(2, 3)})
    >>> m.methods
    ['forward']
    """
    if not isinstance(mod, nn.Module):
        raise TraceError(f"trace_module() needs an nn.Module, not {type(mod).__name__}")
    if not isinstance(inputs, dict) or not inputs:
        raise TraceError("trace_module() needs a dict of method name -> example inputs")
    _jit_only_arguments("trace_module", jit_only)
    _check_options(check_inputs, check_tolerance, runtime)
    keywords = example_inputs_is_kwarg
    prepared = {name: as_call(example, keywords) for name, example in inputs.items()}
    return _trace_module(
        mod,
        prepared,
        check_trace=check_trace,
        check_inputs=module_checks(check_inputs, list(inputs), keywords, per_method=True),
        check_tolerance=check_tolerance,
        strict=strict,
        respect_mode=respect_mode,
        runtime=runtime,
    )


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_level() -> int:
    """The ``stacklevel`` of ``warnings.warn`` (called by its caller) that names the first
    frame outside tracebridge: the user's call of ``trace``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


@contextlib.contextmanager
def _naming_state(changed: list[str], kept: KeptGlobals):
    """A refusal of the check, where the recording (the user's one call) changed Python
    state the code keeps outside the model -- a global, a class's, an object's or a
    function's attribute, its containers: the check's runs started from the state it left,
    so they took other paths or values than the recording. Say which state, and where the
    code writes it, rather than only that the runs differ."""
    try:
        yield
    except TracingCheckError as exc:
        if not changed:
            raise
        named = ", ".join(
            f"{name!r}" + (f" (at {at})" if (at := kept.where(name)) else "")
            for name in changed[:3]
        )
        exc.args = (
            f"{exc.args[0] if exc.args else exc}\n  the recording changed {named}"
            f"{', ...' if len(changed) > 3 else ''}, which the code keeps outside the model: "
            "each call of the code changes it, so the check's runs, which start from the "
            "state the recording left, differ from the recording, and a trace, which holds "
            "the values of the traced call, cannot repeat such a change. Keep that state in "
            "a tensor the model holds (a buffer written in place: the trace records those "
            "writes), or pass it as an input",
            *exc.args[1:],
        )
        raise


def _warn_of_side_effects(changed_globals: list[str], hooks: dict) -> None:
    """Say what a trace will not do again on its calls: change the globals its recording
    changed (a list of activations appended to, a counter), or run the sub-modules' hooks
    present while tracing (their tensor results are in the graph; what else they do, such
    as keeping activations for feature extraction, happens only while tracing)."""
    if changed_globals:
        names = ", ".join(repr(n) for n in changed_globals[:3])
        warnings.warn(
            f"the traced code changed {names}{', ...' if len(changed_globals) > 3 else ''} "
            "while it was recorded: a call of the trace runs its tensor operations only and "
            "never changes them again (a list of activations stays as the recording left "
            "it). Return such values from the traced code instead",
            TracerWarning,
            stacklevel=_caller_level(),
        )
    # (backward hooks alone: _warn_of_backward_hooks)
    hooks = {path: kinds for path, kinds in hooks.items() if any(kinds[:2])}
    if GLOBAL in hooks:
        warnings.warn(
            "global module hooks (nn.modules.module.register_module_forward_hook and the "
            "like) were registered while tracing: what they did to each sub-module's result "
            "is in the graph, and in a saved file, and calls of the trace never run them on "
            "sub-modules (on the traced module's own result they run, as in eager use). A "
            "call after they change is refused in this process. Trace without them unless "
            "their effect belongs in the model",
            TracerWarning,
            stacklevel=_caller_level(),
        )
        hooks = {path: kinds for path, kinds in hooks.items() if path != GLOBAL}
    if hooks:
        paths = ", ".join(repr(p) for p in list(hooks)[:3])
        warnings.warn(
            f"sub-module(s) {paths}{', ...' if len(hooks) > 3 else ''} had hooks while "
            "tracing: what a forward hook computed into a module's result is in the graph, "
            "but calls of the trace never call sub-modules' hooks, so anything else a hook does "
            "(keeping activations, logging, counting) happens only while "
            "tracing. Return those values from forward, or register the hook on the traced "
            "module itself (its own hooks run on every call)",
            TracerWarning,
            stacklevel=_caller_level(),
        )


def _warn_of_backward_hooks(hooks: tuple[str, ...] | None) -> None:
    """Say that a backward through a call of the trace raises while the sub-modules'
    backward hooks present at trace time stay registered (the note on backward hooks)."""
    if hooks:
        warnings.warn(
            f"{hooks[0][0].upper()}{hooks[0][1:]}{' (and more)' if len(hooks) > 1 else ''} was "
            "registered while tracing: a trace never runs module backward hooks, so a "
            "backward through a call of the trace raises while it stays registered "
            "(its gradients would not be the eager ones); calls without autograd are "
            "served, and a saved file holds no hooks. Remove the hook (handle.remove()) for "
            "the trace's gradients, or train with the original module",
            TracerWarning,
            stacklevel=_caller_level(),
        )


def _warn_of_mixed_modes(mod: nn.Module) -> None:
    """Where some sub-module's training flag differs from ``mod``'s (a frozen batch norm in
    a training model, a dropout left on in an evaluated one), the graph of ``mod``'s own
    mode keeps them as they are (trace/capture.py, ``enter_mode``): warn that ``train()``
    and ``eval()`` of the traced module mean what ``Module.train`` means."""
    mixed = [name for name, m in mod.named_modules() if m.training != mod.training]
    if not mixed:
        return
    mode, other = ("training", "eval") if mod.training else ("evaluation", "train")
    warnings.warn(
        f"{type(mod).__name__} is in {mode} mode with sub-modules in the other mode "
        f"({', '.join(mixed[:3])}{', ...' if len(mixed) > 3 else ''}): its {mode} graph is "
        f"recorded with their modes as they are, and {other}() on the traced module runs a "
        "graph with every sub-module in that mode. Like Module.train(), the traced "
        "module's train() and eval() switch every sub-module: put these back in their mode "
        "afterwards, as eager code must (until then a call refuses, naming the sub-module)",
        TracerWarning,
        stacklevel=4,
    )


def record_module(
    mod: nn.Module,
    inputs: dict,
    *,
    strict: bool,
    respect_mode: bool,
    method_alias: dict | None = None,
    after_first_call: Callable[[], None] | None = None,
    tolerance: float = 1e-5,
    identity_probes: bool = True,
) -> Program:
    """Trace each method of ``mod`` (each in both modes when respect_mode);
    ``after_first_call()`` runs once, after the first method is recorded; ``tolerance``
    compares its results where the example passes one tensor twice
    (check/input_identity.py); ``identity_probes`` (the trace's ``check_trace``) runs the
    code again with one tensor at inputs that could take one (``distinct_inputs``)."""
    index = state_index(mod)
    constants: dict[str, StateEntry] = {}
    warned: set = set()
    methods, dispatch, mode_bound = {}, {}, {}
    alias = method_alias or {}

    def record(name, args, kwargs, mode=None, graph_name=None):
        stage(f"recording {name}" + ("" if mode is None else f" ({'train' if mode else 'eval'})"))
        target = _bound(mod, alias.get(name, name))
        others = {m: (_bound(mod, alias.get(m, m)), *inputs[m]) for m in inputs}
        explained = method_stashes.failure_explained(mod, name, others, written)
        with explained if graph_name is not None else contextlib.nullcontext(), preserved(mod):
            enter_mode(mod, mode)
            if graph_name is not None:  # the modes it is recorded with (module_tree.py)
                module_modes[graph_name] = {"": mod.training, **mode_reading_paths(mod)}
            before = method_stashes.attributes(mod)
            graph = capture(
                target,
                args,
                kwargs,
                names_from=getattr(mod, alias.get(name, name)),
                state=index,
                constants=constants,
                strict=strict,
                warned=warned,
            )
            written.setdefault(name, set()).update(method_stashes.rebound(before, mod))
        if after_first_call is not None and not methods:
            after_first_call()
        return graph

    def run_eager(name, mode, args, kwargs):
        with preserved(mod):
            enter_mode(mod, mode)
            args, kwargs = fresh(args, kwargs)
            return _bound(mod, alias.get(name, name))(*args, **kwargs)

    if respect_mode:
        _warn_of_mixed_modes(mod)
    module_modes: dict[str, dict[str, bool]] = {}
    recorded = []  # (graph name, method name, mode, example inputs)
    written: dict[str, set[str]] = {}  # method -> the plain attributes it assigned
    for name, (args, kwargs) in inputs.items():
        if respect_mode:  # every method in both modes, routed by the module's flag
            train, evaluate = f"train{name}", f"eval{name}"
            taken = {train, evaluate} & (set(inputs) | set(methods))
            if taken:
                raise TraceError(
                    f"respect_mode=True records method {name!r} as {train!r} and "
                    f"{evaluate!r}, and {sorted(taken)[0]!r} is also a traced method: "
                    "trace that one without respect_mode, or under another name"
                )
            methods[train] = record(name, *fresh(args, kwargs), mode=True, graph_name=train)
            methods[evaluate] = record(name, *fresh(args, kwargs), mode=False, graph_name=evaluate)
            dispatch[name] = {"train": train, "eval": evaluate}
            recorded += [(train, name, True, args, kwargs)]
            recorded += [(evaluate, name, False, args, kwargs)]
            continue
        methods[name] = record(name, args, kwargs, graph_name=name)
        recorded.append((name, name, None, args, kwargs))
        # Does the other mode record another graph (dropout, batch norm)? Then calling in
        # that mode must not silently run this one.
        try:
            other = capture_again(
                _bound(mod, alias.get(name, name)),
                *fresh(args, kwargs),
                module=mod,
                mode=not mod.training,
                state=index,
                strict=strict,
                names_from=getattr(mod, alias.get(name, name)),
            )
            index_of_change = first_difference(methods[name], other)
        except Exception:
            # The other mode does not even trace (a training-only branch the tracer
            # refuses): this graph is bound to the mode it was traced in.
            index_of_change = 0
        if index_of_change is not None:
            # Name the first differing op that the user's code called (not a state read).
            later = methods[name].nodes[index_of_change:] or methods[name].nodes[-1:]
            node = next((n for n in later if not n.op.startswith("prim.")), later[0])
            mode_bound[name] = {"training": mod.training, "op": node.op, "loc": node.loc}
    for graph_name, name, mode, args, kwargs in recorded:
        target = alias.get(name, name)
        refuse_identity_paths(
            methods[graph_name],
            _bound(mod, target),
            args,
            kwargs,
            **method_words(mod, target),
            tolerance=tolerance,
            module=mod,
            mode=mode,
            state=index,
            names_from=getattr(mod, target),
            strict=strict,
        )
        if identity_probes:  # a check: two more runs of the code per group of inputs
            methods[graph_name].distinct_inputs = identity_sensitive_groups(
                _bound(mod, target), args, kwargs, tolerance=tolerance, module=mod, mode=mode
            )
    method_stashes.refuse_stale_reads(
        methods, {g: n for g, n, *_ in recorded}, constants, written, type(mod).__name__
    )
    # Every parameter and buffer, used or not, so state_dict() keys match the original's.
    state = {}
    transient = _non_persistent(mod)
    for path, kind, tensor in index.values():
        if kind != "attribute":
            state.setdefault(path, StateEntry(kind, tensor, path not in transient))
    state.update(constants)
    classes = {name: type(m).__name__ for name, m in mod.named_modules()}
    reprs = {name: text for name, m in mod.named_modules() if (text := _settings(m))}
    types = {name: kind for name, m in mod.named_modules() if name and (kind := torch_class(m))}
    program = Program(
        kind="module",
        methods=methods,
        state=state,
        dispatch=dispatch,
        training=mod.training,
        module_classes=classes,
        module_reprs=reprs,
        module_types=types,
        mode_bound=mode_bound,
        module_modes=module_modes,
        aliases=_tied_names(mod, index, state),
        generators=torch_generators.used(),
    )
    for graph_name, name, mode, args, kwargs in recorded:
        stage(f"size-1 variants of {graph_name}")
        found = specialisations(
            methods[graph_name],
            args,
            kwargs,
            lambda a, k, name=name, mode=mode: run_eager(name, mode, a, k),
            lambda a, k, name=name, mode=mode: record(name, *fresh(a, k), mode=mode),
        )
        # A fused path is eager's where its module is in evaluation, whatever the root's
        # mode (a wrapper left in training around an encoder put in evaluation).
        evaluating = (
            mode is False
            if mode is not None
            else not mod.training
            or any(isinstance(m, FAST_PATH_MODULES) and not m.training for m in mod.modules())
        )
        if evaluating:
            found += _without_autograd(
                mod,
                methods[graph_name],
                lambda a, k, n=name, m=mode: record(n, a, k, mode=m),
                lambda a, k, n=name, m=mode: run_eager(n, m, a, k),
                args,
                kwargs,
                found,
            )
        _add_specialisations(program, graph_name, found)
    # Constants the specialisations captured are state too.
    program.state.update(constants)
    return program


def _without_autograd(mod: nn.Module, graph, record, run_eager, args, kwargs, found) -> list:
    """The graph a call without autograd records, where it differs from ``graph`` (recorded
    with autograd on) by a module's fused path: ``nn.MultiheadAttention`` and
    ``nn.TransformerEncoderLayer`` in evaluation take it only then, as eager does when
    called so (trace/library.py). It guards that autograd is off, so calls with autograd
    never reach it, and the runtime tries it first for calls without. Then its own size-1
    specialisations (``found``: those of ``graph``, which share the method's budget): the
    fused path at sizes that ``graph``'s specialisations serve with autograd. None
    otherwise."""
    if not torch.is_grad_enabled() or not any(
        isinstance(m, FAST_PATH_MODULES) for m in mod.modules()
    ):
        return []
    try:
        with torch.no_grad(), shown_nowhere():  # the code's warnings meet its filters
            other = record(*fresh(args, kwargs))
    except Exception:
        return []  # not recordable without autograd: calls keep the graph they have
    if not fused_without_autograd(other, graph) or first_difference(graph, other) is None:
        return []
    with torch.no_grad():
        sizes = specialisations(
            other,
            args,
            kwargs,
            run_eager,
            lambda a, k: record(*fresh(a, k)),
            kept=[graph, *found],
        )
    return [other] + [g for g in sizes if fused_without_autograd(g, graph)]


def _settings(module: nn.Module) -> str:
    """``module.extra_repr()`` as one line of text of at most 4,096 characters (what the
    file's ``module_reprs`` holds), or "" when it has none or raises."""
    try:
        text = module.extra_repr()
    except Exception:  # a user's extra_repr that fails must not fail the trace
        return ""
    if not isinstance(text, str):
        return ""
    text = re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()
    return text if len(text) <= 4096 else text[:4093] + "..."


def _non_persistent(mod: nn.Module) -> set[str]:
    """The paths of the buffers registered with ``persistent=False`` (not in state_dict())."""
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, module in mod.named_modules(remove_duplicate=False)
        for name in module._non_persistent_buffers_set
    }


def _tied_names(mod: nn.Module, index: dict, state: dict) -> dict[str, str]:
    """Other names of state tensors in ``mod.state_dict()``: name -> the state name."""
    named = [*mod.named_parameters(remove_duplicate=False)]
    named += [(n, b) for n, b in mod.named_buffers(remove_duplicate=False) if b is not None]
    aliases = {}
    for name, tensor in named:
        first = index.get(id(tensor), (name,))[0]
        if first != name and first in state and name not in state:
            aliases[name] = first
    return aliases


def _refuse_uninitialised(mod: nn.Module) -> None:
    """A lazy module not run yet (``nn.LazyLinear``) holds parameters without a shape:
    named, with what to do, before the recording reads them (torch's own message spoke
    of load_state_dict)."""
    for kind, named in (("parameter", mod.named_parameters), ("buffer", mod.named_buffers)):
        for name, tensor in named(remove_duplicate=False):
            if isinstance(tensor, nn.parameter.UninitializedTensorMixin):
                owner = name.rpartition(".")[0]
                module = type(mod.get_submodule(owner)).__name__
                raise TraceError(
                    f"{kind} {name!r} of {module} is not initialised yet (a lazy module "
                    "takes its shape from its first call): call the model once on an "
                    "example before tracing it"
                )


def _trace_module(
    mod: nn.Module,
    inputs: dict,
    *,
    check_trace: bool,
    check_inputs,
    check_tolerance: float,
    strict: bool,
    respect_mode: bool,
    runtime: str,
    method_alias: dict | None = None,
) -> TracedModule:
    _refuse_uninitialised(mod)
    kept: list[KeptGlobals] = []  # as the first recording (the user's one call) left them
    before = KeptGlobals(mod)
    changed_by_the_call: list[str] = []

    def after_first_call():
        changed_by_the_call[:] = before.changed()
        _warn_of_side_effects(changed_by_the_call, {})
        kept.append(KeptGlobals(mod))

    try:
        program = record_module(
            mod,
            inputs,
            strict=strict,
            respect_mode=respect_mode,
            method_alias=method_alias,
            after_first_call=after_first_call,
            tolerance=check_tolerance,
            identity_probes=check_trace,
        )
        traced = TracedModule(program, original=mod, runtime=runtime)
        _warn_of_side_effects([], traced._tb_hooks or {})
        _warn_of_backward_hooks(traced.__dict__.get("_tb_backward"))
        warn_meta_non_persistent(program)
        if check_trace:
            from .check.verify import check_module

            stage("checking")
            # the recording, not the runtime's rewrites
            with as_recorded(), _naming_state(changed_by_the_call, before):
                check_module(
                    mod,
                    traced,
                    inputs,
                    check_inputs,
                    check_tolerance,
                    strict,
                    respect_mode,
                    method_alias or {},
                )
    finally:
        for globals_kept in kept:
            globals_kept.restore()
    return traced


# --- save / load --------------------------------------------------------------------------


def save(
    obj: TracedFunction | TracedModule,
    path: str | os.PathLike | IO[bytes],
    *,
    language: str | None = None,
    progress: bool | None = None,
) -> None:
    """Save ``obj``, a traced function or module, to ``path``: a file name (one file, any name,
    written atomically) or a binary file-like object (``io.BytesIO()``, a file opened
    ``"wb"``). ``language`` is the source language recorded in the file (``"python"`` or
    ``"r"``; by default the one the trace was made from). ``progress``: a progress bar on
    a terminal while a large file is written (see :func:`trace`).

    >>> import io, torch, tracebridge
    >>> buffer = io.BytesIO()
    >>> tracebridge.save(tracebridge.trace(torch.neg, torch.rand(2)), buffer)
    >>> tracebridge.load(buffer.getvalue())(torch.ones(2))
    tensor([-1., -1.])
    """
    if isinstance(obj, (FrozenModule, FrozenFunction)):
        obj.save(path)
    if not isinstance(obj, (TracedFunction, TracedModule)):
        raise TraceError(
            f"save() takes a TracedFunction or TracedModule, not "
            f"{type(obj).__name__}; trace it first with tracebridge.trace"
        )
    obj.save(path, language=language, progress=progress)


def load(
    path: str | os.PathLike | bytes | IO[bytes],
    runtime: str = "codegen",
    map_location: str | torch.device | dict | None = None,
    *,
    weights: artifact.WeightsArg | None = None,
    verify: bool | None = None,
    progress: bool | None = None,
) -> TracedFunction | TracedModule:
    """Load an artifact written by ``save`` (from Python or R), after checking every rule
    of the format (docs/security.md): a file from anywhere runs only the ops of the op set.

    Args:
        path: a file name, the artifact's bytes (``bytes``, ``bytearray``, ``memoryview``)
            or a binary file-like object (read from its position to its end); all three
            get the same checks.
        runtime: ``"codegen"`` (default, fast) or ``"interpreter"`` (see :func:`trace`).
        map_location: where the state goes (see below); ``None`` restores the devices
            the tensors were saved from.
        weights: safetensors checkpoints, or a dict of tensors by name, to bind the
            state from (see below).
        verify: check the weights' SHA-256 (see below).
        progress: a progress bar on a terminal while a large file is checked (see
            :func:`trace`).

    Devices are restored as ``torch.jit.load`` restores them: each state tensor goes back to
    the device it was saved from (a file saved from ``cuda:0`` loads onto ``cuda:0``).
    ``map_location`` overrides, with ``torch.load``'s forms: a device (``"cpu"``,
    ``torch.device("cuda:1")``) for every tensor, or a dict from saved device to device
    (``{"cuda:0": "cpu"}``). A saved device this machine lacks is an ``ArtifactError``
    that says to pass ``map_location="cpu"``.

    Returns:
        a :class:`TracedFunction` or a :class:`TracedModule` (whichever was saved).

    The state tensors are views of the memory-mapped file (nothing is copied). Until
    anything reads or writes them (an attribute, ``parameters()``, ``state_dict()``,
    ``.to()``, ``program``, a call with autograd: docs/divergence.md, "Sealed state"),
    calls keep the values folded from them without checking the state again
    (runtime/sealed.py). ``weights``
    binds the state by name from safetensors checkpoints instead (a file, a list of files,
    or a sharded ``model.safetensors.index.json``) or from a dict of tensors (a
    ``state_dict()``; the tensors themselves are bound): needed for a program traced on the
    meta device. A tied tensor (an output layer sharing the embedding's matrix) binds under any
    of its names in the traced module's ``state_dict()``. ``verify`` checks the weights'
    SHA-256: ``None`` (default) does so when they are at most 64 MiB, ``True`` always,
    ``False`` never.

    >>> import torch, tracebridge, tempfile, os
    >>> f = tracebridge.trace(torch.relu, torch.rand(3))
    >>> path = os.path.join(tempfile.mkdtemp(), "relu.tb")
    >>> f.save(path)
    >>> tracebridge.load(path)(torch.tensor([-1.0, 2.0]))
    tensor([0., 2.])
    """
    with track("loading", total=streams.size_of(path), unit="B", progress=progress):
        program = streams.read_from(path, weights=weights, verify=verify, map_location=map_location)
    torchvision_ops.require_program(program.methods)  # torchvision.nms needs torchvision here
    # Its state is the loader's, held by no one else: sealed (runtime/sealed.py).
    if program.kind == "function":
        return TracedFunction(program, runtime=runtime, sealed=True)
    return TracedModule(program, runtime=runtime, sealed=True)


def _sealable(program: Program, runtime: str) -> bool:
    """Whether a loaded program's state may be sealed (runtime/sealed.py): generated code,
    and no graph that writes its state or may return memory of it."""
    return runtime == "codegen" and frozen_state.state_stays_fixed(program.methods)


def _give_seal(methods: dict, seal) -> None:
    """Hand ``seal`` to every runtime Method behind ``methods`` (before any call)."""
    if seal is None:
        return
    for method in methods.values():
        for each in frozen_state.runtime_methods(method):
            each.seal = seal


# --- pickling -----------------------------------------------------------------------------


def _pickle_state(obj: TracedFunction | TracedModule) -> dict:
    """What a pickle keeps beside the artifact: how the object runs, not what it computes."""
    any_method = next(iter(obj._methods.values()))
    state = {
        "runtime": any_method.runtime,
        "check_guards": obj.check_guards,
    }
    if isinstance(obj, TracedFunction):
        state["name"] = obj.__name__
    else:
        # (read from the slots, which do not break a seal: runtime/sealed.py)
        found = (sealed_state.peek(table, key) for table, key in obj._slots().values())
        tensors = [t for t in found if isinstance(t, torch.Tensor)]
        if tensors and tensors[0].device.type != "cpu":
            state["device"] = str(tensors[0].device)
    return state


def _pickled_program(program: Program) -> tuple[bytes, dict[str, torch.Tensor]]:
    """The artifact of ``program`` with its state described, not stored (as a program
    traced on the meta device is saved), and the state tensors by name."""
    kept = program.state
    tensors = {name: entry.tensor for name, entry in kept.items()}
    program.state = {
        name: StateEntry(entry.kind, entry.tensor.to("meta"), entry.persistent)
        for name, entry in kept.items()
    }
    try:
        return streams.to_bytes(program), tensors
    finally:
        program.state = kept


def _from_pickle(
    data: bytes, state: dict, tensors: dict | None = None
) -> TracedFunction | TracedModule:
    """Unpickle a traced object: ``load`` of its artifact bytes, with every check, binding
    ``tensors`` (the state by name; None for pickles that stored it in the artifact)."""
    obj = load(
        data,
        runtime=state.get("runtime", "codegen"),
        map_location=state.get("device"),
        weights=tensors,
    )
    if tensors and any(t.is_shared() for t in tensors.values()):
        # Memory another process may write (torch.multiprocessing): no sealed state, whose
        # folds would never see such a write (runtime/sealed.py); folds check per call.
        seal = obj.__dict__.get("_tb_seal")
        if seal is not None:
            seal.break_()
    obj.check_guards = state.get("check_guards", True)
    if isinstance(obj, TracedFunction) and "name" in state:
        obj.__name__ = state["name"]
    return obj


# --- freeze -------------------------------------------------------------------------------

_FIXED_STATE = (
    "the state of a frozen tracebridge module is fixed (its own copy, with the values folded "
    "from it kept without checks): change the unfrozen module and call tracebridge.freeze() "
    "on it again"
)


def freeze(
    obj: TracedFunction | TracedModule, preserved_attrs: list[str] | None = None
) -> FrozenModule | FrozenFunction:
    """A frozen copy of ``obj`` (a traced or loaded module or function), tracebridge's
    ``torch.jit.freeze``: its calls keep the values folded from the state (convolutions
    with their batch norms, transposed weights, masks from tables) without checking the
    state's tensors again on each call -- about 5-15% of a small convnet's call at batch 1.

    The frozen object holds its own copy of the state (``obj`` stays usable, and a change
    to it later does not reach the frozen copy) and hands none of it out for writing:
    ``state_dict()`` gives copies, ``parameters()`` and ``buffers()`` are empty (as a
    frozen scripted module's), and ``load_state_dict``, ``.to()`` (``.cuda()``,
    ``.double()``...), ``.train()`` and ``requires_grad_()`` raise: freeze again from the
    changed original. Every other check of a call runs as before (inputs, guards, the
    module tree); the results are those of the unfrozen module, bit for bit. With autograd
    on, a call runs what it runs unfrozen (no batch norm folded; the values made from
    parameters that require grad made again on each call, as unfrozen): gradients reach
    the inputs, and the frozen copies of the parameters, which nothing shows (train the
    unfrozen module). A frozen object is not saved: save the unfrozen trace, and freeze
    after ``load``.

    A program whose graphs write their state (a counter, a cache filled in place) or may
    return it (``return self.weight``) keeps the per-call checks (runtime/frozen.py):
    ``skips_state_checks`` says which. ``obj`` must be in evaluation mode (``.eval()``),
    as for ``torch.jit.freeze``; ``preserved_attrs`` may name traced methods (all are
    kept), never state, which stays fixed.

    >>> import torch, tracebridge
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    >>> frozen = tracebridge.freeze(tracebridge.trace(net, torch.rand(1, 3, 8, 8)))
    >>> frozen(torch.rand(1, 3, 8, 8)).shape
    torch.Size([1, 4, 6, 6])
    """
    if isinstance(obj, (FrozenModule, FrozenFunction)):
        return obj
    if not isinstance(obj, (TracedFunction, TracedModule)):
        raise TraceError(
            f"freeze() takes a traced or loaded tracebridge module or function, not "
            f"{type(obj).__name__}; trace it first with tracebridge.trace"
        )
    if isinstance(obj, TracedModule) and obj.training:
        raise TraceError(
            "freeze() takes a module in evaluation mode, as torch.jit.freeze does: call "
            ".eval() on the traced module before freezing (a module in training mode writes "
            "its state on each call)"
        )
    for name in preserved_attrs or ():
        if name not in obj._tb_program.methods:
            raise TraceError(
                f"freeze(preserved_attrs=...) names {name!r}, which is no traced method: a "
                f"frozen module keeps every traced method ({', '.join(obj._tb_program.methods)}) "
                "and no state it may change; use the unfrozen module where its state changes"
            )
    return _frozen_from(_fresh_copy(obj))


def _fresh_copy(obj: TracedFunction | TracedModule) -> TracedFunction | TracedModule:
    """A loaded copy of ``obj`` that shares nothing with it (as ``copy.deepcopy``)."""
    return _from_pickle(streams.to_bytes(obj._program_for_saving()), _pickle_state(obj))


def _frozen_from(copied: TracedFunction | TracedModule) -> FrozenModule | FrozenFunction:
    """``copied`` (a fresh loaded copy, no one else's) frozen (see :func:`freeze`)."""
    program = copied._tb_program
    # A module's graphs of training mode never run (train() is refused): a batch norm
    # traced in both modes (respect_mode=True) writes its statistics only there.
    train_only = {route["train"] for route in program.dispatch.values()} - set(
        _graphs_of_mode(program, False)
    )
    run = [name for name in program.methods if name not in train_only]
    fixed = frozen_state.state_stays_fixed(program.methods, run)
    if fixed:
        frozen_state.mark_frozen(copied._methods)
    if isinstance(copied, TracedFunction):
        return FrozenFunction(copied, fixed)
    return FrozenModule(copied, fixed)


def _refuse_saving(what: str):
    raise TraceError(
        f"a frozen tracebridge {what} is not saved or pickled: save the unfrozen trace "
        "(traced.save(path)), and call tracebridge.freeze() on what tracebridge.load() gives"
    )


class _FrozenViews:
    """What a frozen object shows of the traced object it runs (``_tb_frozen``)."""

    _tb_frozen: TracedFunction | TracedModule

    @property
    def graph(self) -> str:
        """The text form of the traced graph (of ``forward``, for a module)."""
        return self._tb_frozen.graph

    @property
    def code(self) -> str:
        """The Python code generated from the graph (of ``forward``, for a module)."""
        return self._tb_frozen.code

    @property
    def guards(self) -> list[str]:
        """Every assumption the trace made, in words (see ``TracedModule.guards``)."""
        return self._tb_frozen.guards

    @property
    def check_guards(self) -> bool:
        """Whether calls check guards (default True); set False to skip them (at your risk)."""
        return self._tb_frozen.check_guards

    @check_guards.setter
    def check_guards(self, on: bool) -> None:
        self._tb_frozen.check_guards = on

    def save(self, *args, **kwargs):
        """Refused: save the unfrozen trace, and freeze what ``load`` gives."""
        _refuse_saving("module" if isinstance(self, nn.Module) else "function")


class FrozenFunction(_FrozenViews):
    """A frozen traced function (:func:`freeze`): called as the traced function is."""

    def __init__(self, traced: TracedFunction, fixed: bool):
        self._tb_frozen = traced
        self.__name__ = traced.__name__
        self.skips_state_checks = fixed  # False: the graphs write or return their state

    def __call__(self, *args, **kwargs):
        return self._tb_frozen(*args, **kwargs)

    def __reduce__(self):
        _refuse_saving("function")

    def __deepcopy__(self, memo: dict):
        return _frozen_from(_fresh_copy(self._tb_frozen))

    def __repr__(self) -> str:
        return f"<tracebridge.FrozenFunction {self.__name__}>"


class FrozenModule(_FrozenViews, nn.Module):
    """A frozen traced module (:func:`freeze`): called, and its traced methods called, as
    the traced module's are; its state is its own and fixed (no parameters, no buffers)."""

    def __init__(self, traced: TracedModule, fixed: bool):
        super().__init__()
        # Not a sub-module: its tensors are no parameters or buffers of this module, which
        # nothing reaches through ``parameters()``, ``.to()`` or ``load_state_dict``.
        self.__dict__["_tb_frozen"] = traced
        self.__dict__["skips_state_checks"] = fixed  # False: the graphs write or return state
        self.training = False

    def __call__(self, *args, **kwargs):
        if (
            self._forward_hooks
            or self._forward_pre_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
            or self._compiled_call_impl is not None
        ):  # its own hooks or Module.compile(): nn.Module's path (global hooks: the copy's)
            return nn.Module.__call__(self, *args, **kwargs)
        return self.__dict__["_tb_frozen"](*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self.__dict__["_tb_frozen"](*args, **kwargs)

    def __getattr__(self, name: str):
        traced = self.__dict__.get("_tb_frozen")
        if traced is not None and name in _named_methods(traced._tb_program):
            return _FrozenMethod(self, TracedMethod(traced, name))
        return super().__getattr__(name)

    @property
    def methods(self) -> list[str]:
        """The names of the traced methods."""
        return self._tb_frozen.methods

    @property
    def original_name(self) -> str:
        """The class name of the module that was traced."""
        return self._tb_frozen.original_name

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """Copies of the frozen state (writing them changes nothing frozen), put into
        ``destination`` (a new dict by default) under ``prefix``; ``keep_vars`` changes
        nothing (they are copies either way)."""
        out = destination if destination is not None else {}
        for name, tensor in self._tb_frozen.state_dict().items():
            out[prefix + name] = tensor.detach().clone()
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Refused (any ``state_dict``, ``strict``, ``assign``): the frozen state is fixed;
        load into the unfrozen module and freeze it again."""
        raise TraceError(f"load_state_dict(): {_FIXED_STATE}")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if any(key.startswith(prefix) for key in state_dict):  # a parent's load_state_dict
            raise TraceError(f"load_state_dict() of a module holding a frozen one: {_FIXED_STATE}")

    def _apply(self, fn, recurse=True):
        raise TraceError(f".to(), .cuda(), .float(), .double() and the like: {_FIXED_STATE}")

    def train(self, mode: bool = True) -> FrozenModule:
        """``mode=False`` (``eval()``) keeps it as it is; ``mode=True`` is refused."""
        if mode:
            raise TraceError(f"train(): a frozen module runs in evaluation mode; {_FIXED_STATE}")
        return self

    def requires_grad_(self, requires_grad: bool = True) -> FrozenModule:
        """Refused (either ``requires_grad``): the frozen state is fixed."""
        raise TraceError(f"requires_grad_(): {_FIXED_STATE}")

    def __reduce__(self):
        _refuse_saving("module")

    def __reduce_ex__(self, protocol):
        _refuse_saving("module")

    def __deepcopy__(self, memo: dict):
        return _frozen_from(_fresh_copy(self._tb_frozen))

    def _get_name(self) -> str:
        return f"Frozen{self._tb_frozen._get_name()}"

    def extra_repr(self) -> str:
        return self._tb_frozen.extra_repr()


class _FrozenMethod:
    """A traced method of a :class:`FrozenModule` (``frozen.encode``): a TracedMethod whose
    ``__self__`` is the frozen module, not the copy it runs (whose state is no one's)."""

    __slots__ = ("_frozen", "_method")

    def __init__(self, frozen: FrozenModule, method: TracedMethod):
        self._frozen, self._method = frozen, method

    def __call__(self, *args, **kwargs):
        return self._method(*args, **kwargs)

    __self__ = property(lambda self: self._frozen)
    __name__ = property(lambda self: self._method.name)
    name = property(lambda self: self._method.name)
    graph = property(lambda self: self._method.graph)
    code = property(lambda self: self._method.code)

    def __repr__(self) -> str:
        return f"<frozen traced method {self._method.name} of {self._frozen._get_name()}>"
