"""Compiled artifacts that load without recompiling: AOTInductor packages in the artifact.

Note: the steps, and who trusts what.
  1. ``compile_package``: the traced method becomes a GraphModule (``export/fx.py``), which
     ``torch.export`` exports with the trace's symbolic dimensions dynamic, and
     ``torch._inductor.aoti_compile_and_package`` compiles to a ``.pt2`` package: native
     code and the weights, loadable from Python and from C++ (``examples/cpp/``).
  2. ``save_compiled``: the artifact as ``save`` writes it, plus that package as the
     member ``compiled.pt2``, tied to the device kind, the exact torch build, the platform
     and the program's digest (``artifact/compiled.py``, shared_ir/SPEC.md section 9).
  3. ``load_compiled``: a package is native code, so running it is the user's explicit
     choice (``trust_compiled_code=True``). By default the file is loaded as any artifact
     (safe from anyone: the member is never opened) and runs on the plain runtime; when
     the package does not suit this process (another torch, device or platform, or a
     program changed since), it runs on the plain runtime as well. Either way the result
     says which: ``compiled_form`` is ``"aot"`` or ``"runtime"`` (``"recompiled"`` for a
     file of ``tracebridge.compile``), ``compiled_reason`` says why, and a
     :class:`CompiledCodeWarning` is issued when a package was there but unused.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
import time
import warnings
from typing import Any, NoReturn

import torch
from torch.nn.modules import module as _module_hooks

from .. import api, artifact
from ..artifact import compiled as member
from ..artifact import devices
from ..artifact.container import COMPILED_MEMBER
from ..errors import ArtifactError, TraceError
from ..export import fx
from ..ir import pytree
from ..ir.program import graph_from_json
from .aot_context import ADVICE, PlainWatch, ServeRule, fixed_read
from .api import load_compiled as recompile

RUNTIME = "runtime"
AOT = "aot"
RECOMPILED = "recompiled"
AOTI_CHECK_INPUTS = "AOTI_RUNTIME_CHECK_INPUTS"
# Inductor options of every package (none today: ``aot_inductor.check_lowerbound=False``
# was tried, and let a call below a guard's range run the other branch's code).
PACKAGE_CONFIGS: dict = {}
# The reads of a call that the package serves at once (grad mode off, no autocast, no
# global module hook).
_grad_enabled = torch.is_grad_enabled
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_level = torch._C._functorch.maybe_current_level
_any_autocast = torch._C._is_any_autocast_enabled


class InputCheck:
    """The checks of a call's flat inputs before they reach a package.

    Note: why. A package runs on the raw memory of its inputs with the dtype, rank, fixed
    sizes and strides it was compiled for, and checks none of them unless asked (the
    trial in benchmarks/deploy_trial.py: a float64 input, a wider fixed dimension, an
    extra dimension or a transposed input each gave garbage, silently). This is the
    runtime's rule for a traced method (each input's rank and dtype; each fixed size;
    one size per symbol), stricter on dtype (exactly the traced one: the package has no
    kernels for another); a non-contiguous input is made contiguous, as the package
    expects its inputs."""

    def __init__(self, graph, method: str):
        from ..ir import DTYPES

        self.method = method
        self.inputs = [
            (v.name or f"input {i}", DTYPES.get(v.dtype or ""), list(v.shape or []))
            for i, v in enumerate(graph.inputs)
        ]

    def __call__(self, flat: list) -> list:
        sizes: dict[str, tuple[int, str]] = {}
        out = []
        for x, (name, dtype, shape) in zip(flat, self.inputs):
            where = f"{self.method}: input {name!r}"
            if not isinstance(x, torch.Tensor):
                raise TraceError(f"{where} must be a tensor, not {type(x).__name__}")
            if dtype is not None and x.dtype != dtype:
                raise TraceError(
                    f"{where} is {x.dtype}, but the AOTInductor package was compiled for "
                    f"{dtype}: convert it (x.to({dtype})), or use .fallback"
                )
            if x.dim() != len(shape):
                raise TraceError(
                    f"{where} has {x.dim()} dimensions, but the trace has {len(shape)} "
                    f"({_shown(shape)})"
                )
            for d, (want, got) in enumerate(zip(shape, x.shape)):
                if isinstance(want, int) and got != want:
                    raise TraceError(
                        f"{where} has size {got} in dimension {d}, where the trace has the "
                        f"fixed size {want} ({_shown(shape)})"
                    )
                if isinstance(want, str):
                    seen = sizes.setdefault(want, (got, f"{name!r} dimension {d}"))
                    if seen[0] != got:
                        raise TraceError(
                            f"{where} has size {got} in dimension {d}, but the trace has "
                            f"one size {want} there and at {seen[1]}, which is {seen[0]}"
                        )
            out.append(x if x.is_contiguous() else x.contiguous())
        return out


def _shown(shape: list) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class CompiledCodeWarning(UserWarning):
    """A file's compiled package was not used: the plain runtime runs it instead."""


def _device_of(obj, examples: tuple) -> torch.device:
    """Where the package will run: the traced state's device, else the inputs'."""
    program = obj.program if hasattr(obj, "program") else obj
    for entry in program.state.values():
        return entry.tensor.device
    for x in examples:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def compile_package(
    obj,
    package_path: str | os.PathLike,
    *,
    method: str = "forward",
    example_inputs: Any = None,
    inductor_configs: dict | None = None,
) -> str:
    """Compile ``obj``'s ``method`` (a traced function or module, or a loaded artifact)
    into an AOTInductor package at ``package_path``; returns the path. The dimensions the
    trace left symbolic stay dynamic; ``example_inputs`` (the traced call's arguments)
    default to random inputs of the trace's example sizes, a symbolic size of 0 or 1 made 2
    (``torch.export`` would fix a dimension whose example is 0 or 1: pass examples whose
    dynamic sizes are at least 2).

    >>> import torch, tracebridge, tempfile, os
    >>> f = tracebridge.trace(lambda x: x.relu() * 2, torch.rand(2, 3))
    >>> path = compile_package(f, os.path.join(tempfile.mkdtemp(), "f.pt2"))  # doctest: +SKIP
    >>> torch._inductor.aoti_load_package(path)(torch.ones(5, 3))  # doctest: +SKIP
    (tensor([[2., 2., 2.], ...]),)
    """
    gm = fx.to_graph_module(obj, method, flat=True)  # export takes the flat inputs
    if example_inputs is None:
        tries = [fx.example_inputs(gm, _widened(gm)), fx.example_inputs(gm)]
    else:
        tries = [tuple(fx.flatten_inputs(gm, *api._as_args(example_inputs)))]
    device = _device_of(obj, tries[0])
    for attempt, examples in enumerate(tries):
        examples = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in examples)
        try:
            exported = torch.export.export(
                gm, examples, dynamic_shapes=fx.dynamic_shapes(gm), strict=False
            )
            break
        except Exception as exc:
            if attempt + 1 < len(tries):
                continue  # the widened sizes broke a guard: export at the trace's own
            _export_failed(method, exc)
    inductor = importlib.import_module("torch._inductor")  # seconds: only compiling needs it
    with torch.no_grad():
        return inductor.aoti_compile_and_package(
            exported,
            package_path=os.fspath(package_path),
            inductor_configs={**PACKAGE_CONFIGS, **(inductor_configs or {})},
        )


def _widened(gm) -> list[list[int]]:
    """The trace's example sizes with each symbolic size of 0 or 1 made 2: ``torch.export``
    fixes a dimension whose example size is 0 or 1, and the trace left it free."""
    meta = fx.info(gm)
    return [
        [
            2 if isinstance(sym, str) and size in (0, 1) else size
            for sym, size in zip(shape, example)
        ]
        for shape, example in zip(meta.input_shapes, meta.example_shapes)
    ]


def _scalar_outputs(graph) -> list[tuple[int, type]]:
    """``(position, int | float | bool)`` of each output the trace returns as a Python
    number (a size, a count): the package gives it back as a 0-dim tensor."""
    kinds = {"int": int, "float": float, "bool": bool}
    values = {v.id: v for v in graph.inputs}
    values.update((v.id, v) for node in graph.nodes for v in node.outputs)
    found = []
    for index, output in enumerate(graph.outputs):
        value = values.get(getattr(output, "id", None))
        if value is not None and value.kind in kinds:
            found.append((index, kinds[value.kind]))
    return found


def _export_failed(method: str, exc: Exception) -> NoReturn:
    first = str(exc).splitlines()[0] if str(exc) else ""
    # The hint names the cause only where the exception says it is a guard on data.
    data_guard = "DataDependent" in type(exc).__name__ or "data-dependent" in first
    cause = "a guard on tensor data (if x.sum() > 0) has no exported form: " if data_guard else ""
    raise TraceError(
        f"torch.export could not export method {method!r} for an AOTInductor package: "
        f"{type(exc).__name__}: {first}; {cause}keep using the plain artifact "
        "(tracebridge.save) or tracebridge.compile for this model"
    ) from exc


def save_compiled(
    obj,
    path: str | os.PathLike,
    *,
    method: str = "forward",
    example_inputs: Any = None,
    package: str | os.PathLike | None = None,
    language: str | None = None,
) -> None:
    """Save ``obj`` (a traced function or module) as ``save`` does, with an AOTInductor
    package of ``method`` in the file, for :func:`load_compiled` to run without
    recompiling. ``package``: an already compiled package (from :func:`compile_package`
    on the same object); by default it is compiled here (tens of seconds on a CPU), on
    ``example_inputs`` (the traced call's arguments; by default tensors of the trace's own
    sizes, see :func:`compile_package`). ``language``: the producer language written in the
    file (``"python"`` or ``"r"``; by default the traced program's own).

    >>> import torch, tracebridge, tempfile, os
    >>> net = torch.nn.Linear(3, 2).eval()
    >>> traced = tracebridge.trace(net, torch.rand(4, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "net.tb")
    >>> tracebridge.save_compiled(traced, path)  # doctest: +SKIP
    >>> tracebridge.load_compiled(path, trust_compiled_code=True).compiled_form  # doctest: +SKIP
    'aot'
    """
    if not isinstance(obj, (api.TracedFunction, api.TracedModule)):
        raise TraceError(
            f"save_compiled() takes a TracedFunction or TracedModule, not "
            f"{type(obj).__name__}; trace it first with tracebridge.trace"
        )
    _warn_unservable(obj, method)
    workdir = tempfile.mkdtemp(prefix="tracebridge-aot-")
    try:
        if package is None:
            package = compile_package(
                obj,
                os.path.join(workdir, COMPILED_MEMBER),
                method=method,
                example_inputs=example_inputs,
            )
        device = _device_of(obj, ())
        program = obj._program_for_saving()
        artifact.write(
            program,
            path,
            language=language or program.language,
            compiled={"package": package, "device": device.type, "method": method},
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _warn_unservable(obj, method: str) -> None:
    """Before the compile: a warning where the package could never serve a call (the
    traced code reads the call's context, see aot_context.fixed_read), which the load
    would only say after the compile was spent (prober24a F3)."""
    from ..ir.program import graph_to_json

    methods = obj.program.methods
    try:
        routed = obj._method_for(method).name if isinstance(obj, api.TracedModule) else method
    except Exception:  # noqa: BLE001 - the compile names what is wrong with ``method``
        return
    doc = {"methods": {name: graph_to_json(graph) for name, graph in methods.items()}}
    fixed = fixed_read(doc, routed)
    if fixed is not None:
        warnings.warn(
            f"tracebridge.save_compiled: the package of {method!r} will serve no call: the "
            f"traced code reads the call's context ({fixed}), which the plain program "
            "checks on every call and a package would fix at its compile; a trusted load "
            "of the file runs the plain program. Save with .save() to skip the compile, or "
            "trace code that does not read it",
            CompiledCodeWarning,
            stacklevel=3,
        )


class AOTCompiled:
    """A loaded artifact that runs its AOTInductor package. It calls like the traced
    object; everything else (``graph``, ``code``, ``program``, parameters) is the plain
    loaded object's, which ``fallback`` holds.

    The package serves a call only where it computes what the plain object would
    (backends/aot_context.py): outside autocast for its device type; with grad mode off
    (``torch.no_grad()``, ``torch.inference_mode()``), or nothing requiring grad (inputs,
    parameters); and, once the plain object was loaded, while its weights and modes are
    those it was loaded with (the package holds the weights and the mode's graph it was
    compiled with), and without forward hooks (on it or global: the package runs none).
    Every other call runs on the plain object, which follows autocast,
    autograd, ``load_state_dict`` and ``.train()`` (or raises GuardError), with one
    :class:`CompiledCodeWarning` per reason saying why and what to do.

    Note: what a load pays. The package holds the weights it was compiled with, so
    running it needs neither the program's weights nor its runtime: the plain object is
    loaded (every check of ``tracebridge.load``, the weights mapped and their checksum
    verified) when ``fallback`` or one of its attributes is first used, not at load. With
    one check of the document and no GraphModule (the call's nesting comes from the
    method's specs), a load is the package's bytes checked and the C++ loader's
    ``dlopen``: 0.05-0.2 s, where it was the file opened and checked three times, loaded,
    and a GraphModule built (about 0.3 s for a 4-layer transformer, over a second on a
    busy machine). A call under ``torch.no_grad()`` or ``inference_mode()`` with the plain
    object never loaded reads five flags (grad mode, autocast, the function and dispatch
    mode stacks, the functorch level: about 0.5 us) and three attributes before the
    package runs; once it is loaded, its state and modes are compared too (about 0.3 us per state
    tensor and module).
    """

    compiled_form = AOT
    compiled_reason = "the file's AOTInductor package runs (trust_compiled_code=True)"

    def __init__(self, runner, load_fallback, graph, method: str, rule: ServeRule):
        self._runner = runner
        self._check = InputCheck(graph, method)
        self._rule = rule
        self._watch: PlainWatch | None = None  # made when the plain object is loaded
        self._warned: set[str] = set()  # the reasons a call went to the plain object
        self._checks_armed = False  # the package has read AOTI_RUNTIME_CHECK_INPUTS
        in_spec, out_spec = graph.in_spec, graph.out_spec
        self._load_fallback = load_fallback
        self._fallback = None
        self._in_spec, self._out_spec = in_spec, out_spec
        self._var_keywords = list(graph.var_keywords)
        self._arg_names, self._positional_only = list(graph.arg_names), graph.positional_only
        self._defaults = dict(graph.defaults)
        self._single = out_spec.get("t") == "leaf"
        self._scalars = _scalar_outputs(graph)
        self.method = method

    @property
    def fallback(self):
        """The plain loaded object (loaded at the first use, see the Note)."""
        if self._fallback is None:
            plain = self._load_fallback()
            self._watch = PlainWatch(plain)  # its state and modes as the package has them
            self._fallback = plain
        return self._fallback

    def __call__(self, *args, **kwargs):
        flat = fx.flatten_by_spec(
            self._in_spec,
            args,
            kwargs,
            self._var_keywords,
            self.method,
            self._arg_names,
            self._positional_only,
            self._defaults,
        )
        if (
            _grad_enabled()
            or _any_autocast()
            or self._watch is not None
            or _module_hooks._global_forward_hooks
            or _module_hooks._global_forward_pre_hooks
            or _function_modes()
            or _dispatch_modes()
            or _functorch_level() is not None
        ):
            why = self._rule.why_plain(flat, self._watch)
            if why is not None:
                reason, words = why
                return self._plain_call(reason, ADVICE[reason].format(**words), args, kwargs)
        flat = self._check(flat)
        try:
            out = self._runner(flat) if self._checks_armed else self._first_run(flat)
        except RuntimeError as exc:  # the package's own input checks (AOTI_RUNTIME_CHECK_INPUTS)
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            if "input_handles[" in first:
                # Outside the sizes the package serves (a batch of 1 where export made
                # the lower bound 2, a size a guard's range excludes): the plain program
                # serves it, or refuses it with the trace's own GuardError.
                why = f"outside what the package was compiled for ({first})"
                return self._plain_call("sizes", why, args, kwargs)
            raise TraceError(
                f"the AOTInductor package of {self.method!r} refused the call: {first}. The "
                "package serves the sizes torch.export kept dynamic and the ranges the "
                "trace's guards allow; call .fallback (the plain program) for other calls, "
                "or compile a package on inputs like these (save_compiled(example_inputs=...))"
            ) from exc
        if self._scalars:
            out = list(out)
            for index, kind in self._scalars:
                if isinstance(out[index], torch.Tensor) and out[index].dim() == 0:
                    out[index] = kind(out[index].item())
        return out[0] if self._single else pytree.unflatten(list(out), self._out_spec)

    def _plain_call(self, reason: str, why: str, args, kwargs):
        """The call on the plain program, with one warning per ``reason``."""
        if reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(
                f"tracebridge: the AOTInductor package of {self.method!r} does not serve this "
                f"call, which runs on the plain program: {why}",
                CompiledCodeWarning,
                stacklevel=3,
            )
        plain = self.fallback
        if self.method != "forward":
            plain = getattr(plain, self.method)
        return plain(*args, **kwargs)

    def _first_run(self, flat):
        """The package's first run, with its own input checks on. Note: why only here.
        AOTInductor reads ``AOTI_RUNTIME_CHECK_INPUTS`` once, into a static of the
        package's library, at its first run; set for that run and put back after, the
        checks stay on for this package and the variable does not leak into the user's
        process environment (its child processes, other C++ packages). A value the user
        set is left as it is."""
        with _environment(AOTI_CHECK_INPUTS, "1"):
            try:
                return self._runner(flat)
            finally:
                self._checks_armed = True

    def __getattr__(self, name: str):
        if name.startswith("_"):  # not found above: never the fallback's private state
            raise AttributeError(name)
        return getattr(self.fallback, name)

    # Names this object holds itself; every other public name is the plain object's.
    _OWN = frozenset({"method", "compiled_form", "compiled_reason"})

    def __setattr__(self, name: str, value) -> None:
        # ``m.scale = nn.Parameter(...)``, ``m.conv = other``: set on the object the package
        # stands for, whose watch then sees it (the call runs there, or raises its
        # TraceError), as it sees a change made through ``m.conv.weight`` (prober23a F7:
        # it landed on this wrapper, which neither the package nor the plain object reads).
        if name.startswith("_") or name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.fallback, name, value)

    def __delattr__(self, name: str) -> None:
        if name.startswith("_") or name in self._OWN:
            object.__delattr__(self, name)
        else:
            delattr(self.fallback, name)

    def __copy__(self):
        # As a module's copy: a new object over the same plain object (loaded now, so that
        # both share it) and the same package.
        self.fallback  # noqa: B018 - loads it
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied

    def __reduce_ex__(self, protocol):
        raise TraceError(
            "an object of tracebridge.load_compiled runs a loaded AOTInductor package (a "
            "C++ library in this process), which cannot be pickled or deep-copied: load "
            "the file again (tracebridge.load_compiled(path, ...)) where you need another, "
            "or pickle the plain program (obj.fallback), which pickles as its file"
        )

    def __deepcopy__(self, memo):
        return self.__reduce_ex__(2)

    def __repr__(self) -> str:
        return f"<tracebridge.AOTCompiled {self.method} of {self.fallback!r}>"


def _plain(obj, reason: str, warn: bool):
    obj.compiled_form = RUNTIME
    obj.compiled_reason = reason
    if warn:
        warnings.warn(
            f"tracebridge.load_compiled: {reason}; running the program on the plain runtime",
            CompiledCodeWarning,
            stacklevel=3,
        )
    return obj


def load_compiled(
    path: str | os.PathLike,
    *,
    trust_compiled_code: bool = False,
    map_location=None,
    runtime: str = "codegen",
):
    """Load an artifact saved by :func:`save_compiled`. With ``trust_compiled_code=True``
    its AOTInductor package (native code) runs, when it suits this process: same torch
    build, platform and device kind, and the program it was compiled from. Otherwise
    (the default: a file from anyone stays safe to load) the program runs on the plain
    runtime. A file saved by ``tracebridge.compile`` (no package, a partition) is
    recompiled by its backend at the first call, as ``backends.load_compiled`` does.
    ``compiled_form`` (``"aot"``, ``"runtime"`` or ``"recompiled"``) and ``compiled_reason``
    on the result say which and why; a :class:`CompiledCodeWarning` says so when a package was
    there but not used. A package serves the calls it computes right: without autocast,
    without autograd wanted (call it under ``torch.no_grad()``), with the weights and
    modes it was compiled with; other calls run on the plain program, with a warning
    (see :class:`AOTCompiled`). ``map_location`` and ``runtime`` are
    :func:`tracebridge.load`'s.

    >>> import torch, tracebridge, tempfile, os
    >>> f = tracebridge.trace(lambda x: x * 2, torch.rand(3))
    >>> path = os.path.join(tempfile.mkdtemp(), "f.tb")
    >>> f.save(path)
    >>> g = tracebridge.load_compiled(path)
    >>> g.compiled_form, g(torch.ones(2))
    ('runtime', tensor([2., 2.]))
    """
    opened = artifact.open_artifact(path)  # every rule of the document, checked once
    try:
        return _load(path, opened, trust_compiled_code, map_location, runtime)
    finally:
        opened.handle.close()


def _load(path, opened, trust: bool, map_location, runtime: str):
    doc = opened.doc
    if "compiled" not in doc and "backend" in doc:
        return _recompiled(path, map_location, "the file holds a tracebridge.compile partition")

    def plain():
        return api.load(path, runtime=runtime, map_location=map_location)

    if "compiled" not in doc:
        return _plain(plain(), "the file holds no compiled package", warn=False)
    if not trust:
        why = (
            "the file's compiled package is native code, and trust_compiled_code=True was not "
            "passed (pass it for a file you trust)"
        )
        return _fallback(path, doc, plain(), map_location, why)
    why = member.mismatch(doc, _saved_device(doc, map_location, opened.name))
    if why is not None:
        return _fallback(
            path, doc, plain(), map_location, f"its compiled package cannot run here: {why}"
        )
    method = doc["compiled"].get("method", "forward")
    graph = _method_graph(doc, method, opened.name)
    fixed = fixed_read(doc, _routed(doc, method))
    if fixed is not None:
        why = (
            f"its compiled package cannot serve a call: the traced code reads the call's "
            f"context ({fixed}), which the plain program checks on every call and the "
            "package fixed when it was compiled"
        )
        return _fallback(path, doc, plain(), map_location, why)
    # The package's own input checks (dtype, fixed sizes, the ranges of dynamic ones,
    # strides, device), compiled in by AOTInductor but off unless this variable is set
    # when the package first runs: InputCheck covers what the trace knows, these what
    # torch.export fixed beyond it (a size it specialised, a guard's range).
    runner = _load_package(path, doc, opened)
    rule = ServeRule(doc, torch.device(doc["compiled"].get("device", "cpu")).type)
    return AOTCompiled(runner, plain, graph, method, rule)


@contextlib.contextmanager
def _environment(name: str, value: str):
    """``name`` set to ``value`` for the block, unless the user set it already."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def _saved_device(doc: dict, map_location, name: str) -> torch.device | None:
    """The device the state will be on (``load``'s rule, from the document alone: the
    package is checked against it before any weight is read); None without state."""
    for key, info in doc["state"].items():
        return devices.target(info.get("device") or "cpu", map_location, f"{name}: {key}")
    return None


def _method_graph(doc: dict, method: str, name: str):
    """The graph ``method`` runs in the saved object's mode (as ``to_graph_module``
    resolves it when the package is compiled): only its specs are used."""
    method = _routed(doc, method)
    if method not in doc["methods"]:
        raise ArtifactError(
            f"{name}: the compiled package is of method {method!r}, which the program does "
            "not have; the file is corrupt"
        )
    return graph_from_json(doc["methods"][method])


def _routed(doc: dict, method: str) -> str:
    """The graph that ``method`` runs in the saved object's mode."""
    route = doc.get("dispatch", {}).get(method)
    return method if route is None else route["train" if doc.get("training") else "eval"]


def _fallback(path, doc: dict, plain, map_location, reason: str):
    """The package is not used: a file of ``tracebridge.compile`` recompiles its
    partitions, any other runs on the plain runtime; a warning says which and why."""
    if "backend" not in doc:
        return _plain(plain, reason, warn=True)
    obj = _recompiled(path, map_location, reason)
    warnings.warn(f"tracebridge.load_compiled: {obj.compiled_reason}", CompiledCodeWarning, 3)
    return obj


def _recompiled(path, map_location, reason: str):
    """A file saved by ``tracebridge.compile``: its backend recompiles the partitions at
    the first call (``backends.load_compiled``), as before packages existed."""
    obj = recompile(path, map_location=map_location)
    obj.compiled_form = RECOMPILED
    obj.compiled_reason = f"{reason}: its backend recompiles it at the first call"
    return obj


def _document(path) -> dict:
    opened = artifact.open_artifact(path)
    opened.handle.close()
    return opened.doc


def _load_package(path, doc: dict, opened=None):
    """The package's runner: its bytes (checked) in a private temporary file, loaded."""
    data = member.read_member(path, doc, opened)
    workdir = tempfile.mkdtemp(prefix="tracebridge-aot-")
    try:
        package = os.path.join(workdir, COMPILED_MEMBER)
        with open(package, "wb") as f:
            f.write(data)
        return _package_runner(package)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _package_runner(package: str):
    """A function from the flat input list to the flat output list of ``package``.

    Note: why the C++ loader directly. ``torch._inductor.aoti_load_package`` imports all
    of inductor (2.5 s and more on a CPU), where the package needs only the C++ loader
    that ``import torch`` already has: a loaded artifact's first call stays well under a
    second. The public function is the fallback if the binding's signature moves."""
    for arguments in _LOADER_ARGUMENTS:
        try:
            return torch._C._aoti.AOTIModelPackageLoader(package, *arguments).run
        except AttributeError:
            break  # no C++ loader in this build
        except TypeError:
            continue  # another torch's constructor: try the older forms
    compiled = importlib.import_module("torch._inductor").aoti_load_package(package)
    return lambda flat: list(compiled(*flat))


# The C++ loader's constructor over torch versions: (model name, run single-threaded,
# runners, device index) since 2.8 or so (2.11 and 2.13 have it), without the device index
# before, the model name alone in 2.6. One runner, the package's own device (-1).
_LOADER_ARGUMENTS = (("model", False, 1, -1), ("model", False, 1), ("model",))


def extract_package(path: str | os.PathLike, out: str | os.PathLike) -> str:
    """Write the AOTInductor package of artifact ``path`` to ``out`` (a ``.pt2`` file that
    ``torch._inductor.aoti_load_package`` and C++'s ``AOTIModelPackageLoader`` load);
    returns ``out``. The package is checked against its checksum, never run."""
    doc = _document(path)
    if "compiled" not in doc:
        raise TraceError(
            f"{os.fspath(path)}: the file holds no compiled package; save it with "
            "tracebridge.save_compiled"
        )
    with open(out, "wb") as f:
        f.write(member.read_member(path, doc))
    return os.fspath(out)


def timed_first_call(path, *args, **kwargs) -> tuple[Any, float, str]:
    """Load ``path`` with trusted compiled code and call it once: the result, the seconds
    load and call took together, and the compiled form (for benchmarks and tests)."""
    start = time.perf_counter()
    obj = load_compiled(path, trust_compiled_code=True, **kwargs)
    out = obj(*args)
    return out, time.perf_counter() - start, obj.compiled_form
