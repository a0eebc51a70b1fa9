"""numpy random generators the traced code keeps: a draw from one is refused, and every
one is left as the trace found it.

Note: why a kept generator is watched by its state, not by its methods.
  ``np.random.Generator`` and ``np.random.RandomState`` are C types whose methods cannot
  be replaced (numpy's module functions and Python's ``random`` are: trace/python_random.py).
  A draw from one (``self.rng.random()``, ``RNG.integers(0, 3)``) gives the example's
  numbers, which a trace would hold as constants where eager draws new ones on every
  call: silently wrong. So the generators the code can reach without running code -- an
  attribute of the module or a sub-module or their classes (also inside a list, tuple or
  dict attribute, or an attribute of a plain object it holds), a global of the module's
  code or of the traced function, a variable its closure holds, a default argument; one
  step further, a global of a module those globals hold (``helper.rng``), of a function
  they hold (``from helper import jitter``) or a class's attribute; and, anywhere, behind
  a bound method or ``functools.partial`` (``partial(rng.normal, 0, 1)``) -- are found once
  per trace (:func:`kept`), and each recording compares their states before and after
  (:func:`refuse_draws`): a state that moved means the code drew, and the trace is refused
  naming the generator. A Generator's state is its BitGenerator's, which several
  Generators may share (``np.random.Generator(rng.bit_generator)``); the count of children
  its SeedSequence spawned is part of it (``rng.spawn(1)[0]`` draws anew on every call).
  torch's, numpy's and the standard library's namespaces are not looked into (cost). (A
  draw is refused even where the number goes unused; Python's ``random`` is more lenient
  there because its draws can be replaced.)
  A generator made inside the call from a fixed seed draws the same numbers every call,
  so holding them is right; one made from the operating system's entropy cannot be told
  from it. At the end of the trace, every generator found gets its state back: the
  trace's checks ran the code eagerly, and drew.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import sysconfig
import types

from ..errors import UnsupportedOpError
from .python_state import instance_dict

_DEPTH = 1  # how deep list, tuple and dict attributes are looked into
_HOPS = 3  # how many wrappers (a partial of a bound method) are looked through
# One list per trace under way: (label, generator, its state when the trace began).
_TRACES: list[list[tuple[str, object, object]]] = []


def kinds() -> tuple[type, ...]:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return ()
    random = numpy.random
    return (random.Generator, random.RandomState, random.BitGenerator)


def _holder(rng):
    """What keeps ``rng``'s state: a Generator's is its BitGenerator's (several Generators
    may share one: ``np.random.Generator(rng.bit_generator)``); a RandomState's is its own
    (it also keeps a cached normal number)."""
    numpy = sys.modules["numpy"]
    if isinstance(rng, numpy.random.Generator):
        return rng.bit_generator
    return rng


def _seed_sequence(holder):
    """The SeedSequence ``spawn`` counts its children in (None for a RandomState's)."""
    seq = getattr(getattr(holder, "_bit_generator", holder), "seed_seq", None)
    return seq if hasattr(seq, "n_children_spawned") else None


def _state(holder):
    """A copy of ``holder``'s state (what :func:`_set_state` puts back), with the count of
    children spawned from it: ``rng.spawn(1)[0]`` draws anew on every call too."""
    if hasattr(holder, "get_state"):
        state = holder.get_state(legacy=False)
    else:
        state = holder.state
    seq = _seed_sequence(holder)
    return state, seq.n_children_spawned if seq is not None else None


def _set_state(holder, state) -> None:
    state, spawned = state
    if hasattr(holder, "set_state"):
        holder.set_state(state)
    else:
        holder.state = state
    seq = _seed_sequence(holder)
    if seq is not None and spawned is not None and seq.n_children_spawned != spawned:
        # (the count is read-only; SeedSequence's own constructor sets it)
        seq.__init__(
            seq.entropy,
            spawn_key=seq.spawn_key,
            pool_size=seq.pool_size,
            n_children_spawned=spawned,
        )


def _same(a, b) -> bool:
    """Whether two states are equal (they hold numpy arrays: MT19937's key)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") or hasattr(b, "shape"):
        numpy = sys.modules["numpy"]
        return bool(numpy.array_equal(a, b))
    return a == b


def _wrapped(value, hops: int = _HOPS):
    """What a wrapper kept as a value holds: a bound method's object (``rng.normal``), a
    ``functools.partial``'s function and arguments, a few wrappers deep."""
    if not hops:
        return
    kind = type(value)
    inner = ()
    if kind in (types.MethodType, types.BuiltinMethodType):
        owner = value.__self__
        inner = () if owner is None or type(owner) is types.ModuleType else (owner,)
    elif issubclass(kind, functools.partial):
        inner = (value.func, *value.args, *(value.keywords or {}).values())
    for item in inner:
        yield item
        yield from _wrapped(item, hops - 1)


def _items(value, depth: int):
    """``value``, what wrappers of it hold, and, ``depth`` levels down, the items of its
    lists, tuples and dicts and the attributes of a plain object (an augmentation object
    the model holds)."""
    yield "", value
    for inner in _wrapped(value):
        yield "", inner  # (named as the wrapper: where the code keeps it)
        if depth and _plain_object(inner):
            for name, item in list(vars(inner).items()):
                yield f".{name}", item
    if depth and _plain_object(value):
        for name, item in list(vars(value).items()):
            for path, found in _items(item, depth - 1):
                yield f".{name}{path}", found
    elif depth and type(value) in (list, tuple):
        for index, item in enumerate(value):
            for path, found in _items(item, depth - 1):
                yield f"[{index}]{path}", found
    elif depth and type(value) is dict:
        for key, item in list(value.items()):
            for path, found in _items(item, depth - 1):
                yield f"[{key!r}]{path}", found


def _plain_object(value) -> bool:
    """An instance of a user's class (not a module, tensor, class, function or Python
    module)."""
    import torch

    kinds = (torch.nn.Module, torch.Tensor, type, types.FunctionType, types.ModuleType)
    return instance_dict(value) is not None and not isinstance(value, kinds)


def _function_places(fn, leads: bool) -> list[tuple[str, dict, int, bool]]:
    """(label prefix, namespace, depth, whether it leads further: see :func:`_reached`) of
    a function's globals, closure variables and default arguments."""
    closure = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell
            closure[name] = cell.cell_contents
    code = fn.__code__
    positional = code.co_varnames[: code.co_argcount]
    defaults = dict(zip(positional[::-1], (fn.__defaults__ or ())[::-1]))
    defaults.update(fn.__kwdefaults__ or {})
    # (keyed by the label's end: "the default argument g of f")
    defaults = {f"{name} of {fn.__qualname__}": value for name, value in defaults.items()}
    module = fn.__globals__.get("__name__", fn.__module__)  # (wraps() copies __module__)
    places = [(f"the global {module}.", fn.__globals__, _DEPTH, leads)]
    if closure:
        places.append((f"the variable {fn.__qualname__}.", closure, _DEPTH, leads))
    if defaults:
        places.append(("the default argument ", defaults, _DEPTH, False))
    return places


def _places(func) -> list[tuple[str, dict, int, bool]]:
    """(label prefix, namespace, depth, whether it leads further) where the traced code
    keeps its names: its globals and closures lead to the namespaces of
    :func:`_reached`."""
    import torch  # a module's sub-modules and their classes' globals

    places: list[tuple[str, dict, int, bool]] = []
    functions = []
    if isinstance(func, torch.nn.Module):
        classes = set()  # (each class once: vars() makes a new proxy on each call)
        for prefix, mod in func.named_modules(remove_duplicate=True):
            label = f"self.{prefix}." if prefix else "self."
            places.append((label, vars(mod), _DEPTH, False))
            for cls in type(mod).__mro__:  # (class attributes: self.rng may be one)
                if id(cls) not in classes and not _library(cls.__module__):
                    classes.add(id(cls))
                    places.append((f"{cls.__qualname__}.", vars(cls), _DEPTH, False))
            functions.append(getattr(type(mod), "forward", None))
            module = sys.modules.get(type(mod).__module__)
            if module is not None:
                label = f"the global {type(mod).__module__}."
                places.append((label, vars(module), _DEPTH, True))
    else:
        owner = getattr(func, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            return _places(owner)
        if owner is not None and instance_dict(owner) is not None:
            places.append(("self.", vars(owner), _DEPTH, False))  # a method of another object
        functions.append(getattr(func, "__func__", func))
    for fn in functions:
        if isinstance(fn, types.FunctionType):
            places.extend(_function_places(fn, leads=True))
    return places


def _library(name) -> bool:
    """Whether module ``name`` is torch's, numpy's or Python's own: none keeps a numpy
    generator the traced code draws from (numpy's global one is python_random.py's), so
    the namespaces they lead to are not looked at (torch's alone has 1500 names)."""
    return isinstance(name, str) and _library_package(name.partition(".")[0])


@functools.lru_cache(maxsize=1024)
def _library_package(top: str) -> bool:
    if top in ("torch", "numpy"):
        return True
    if top not in sys.stdlib_module_names:
        return False
    # (a user's own module may take a standard name: ``profile``, ``code``)
    where = getattr(sys.modules.get(top), "__file__", None)
    return where is None or where.startswith(sysconfig.get_paths()["stdlib"])


def _reached(namespace: dict, classes: set[int]) -> list[tuple[str, dict, int, bool]]:
    """The namespaces one step from ``namespace``'s values: a module's globals
    (``helper.rng``), a function's globals, closure and defaults (``from helper import
    jitter``), a class's attributes (``Settings.rng``). Looked at for generators only,
    not for further namespaces: the cost stays bounded. (``classes``: the ids of those
    already looked at.)"""
    import torch

    places: list[tuple[str, dict, int, bool]] = []
    for value in list(namespace.values()):
        kind = type(value)
        name = value.__name__ if kind is types.ModuleType else None  # (no proxy's getattr)
        if kind is types.ModuleType and not _library(name):
            places.append((f"the global {name}.", vars(value), _DEPTH, False))
        elif kind is types.FunctionType and not _library(value.__module__):
            places.extend(_function_places(value, leads=False))
        elif (
            issubclass(kind, type)
            and id(value) not in classes  # (vars() makes a new proxy on each call)
            and not issubclass(value, torch.nn.Module)  # (its attributes: self.rng)
            and not _library(getattr(value, "__module__", None))
        ):
            classes.add(id(value))
            with contextlib.suppress(TypeError):  # (a class without a __dict__ proxy)
                places.append((f"the class {value.__qualname__}.", vars(value), _DEPTH, False))
    return places


def found_in(func, reached: list | None = None) -> list[tuple[str, object, object]]:
    """Each numpy generator the traced code can reach by name: (a label for it such as
    ``self.rng`` or ``the global model.RNG``, the generator, what keeps its state: see
    :func:`_holder`); numpy's global generator is left to trace/python_random.py, whose
    replacements of numpy's functions draw from it. ``reached``: what :func:`reachable`
    found for these kinds and maybe others (one search serves torch's generators too)."""
    numpy_kinds = kinds()
    if not numpy_kinds:
        return []
    shared = sys.modules["numpy"].random.mtrand._rand
    shared_ids = {id(shared), id(getattr(shared, "_bit_generator", shared))}
    found: dict[int, tuple[str, object, object]] = {}
    for label, item in reached if reached is not None else reachable(func, numpy_kinds):
        if issubclass(type(item), numpy_kinds) and id(item) not in shared_ids:
            holder = _holder(item)
            found.setdefault(id(holder), (label, item, holder))
    return list(found.values())


def reachable(func, kinds: tuple[type, ...]) -> list[tuple[str, object]]:
    """(label, object) of each object of ``kinds`` that the traced code can reach by name
    (the places of the module Note), in the order found; an object may come more than
    once, under each label. trace/torch_generators.py asks this for torch.Generator."""
    found: list[tuple[str, object]] = []
    looked: set[int] = set()  # each namespace once (a module's, for all its classes)
    places = _places(func)
    classes: set[int] = set()
    index = 0
    while index < len(places):
        prefix, namespace, depth, leads = places[index]
        index += 1
        if id(namespace) in looked:
            continue
        looked.add(id(namespace))
        for name, value in list(namespace.items()):
            if name == "__builtins__":  # (in every module's globals: Python's own names)
                continue
            for path, item in _items(value, depth):
                if issubclass(type(item), kinds):
                    found.append((f"{prefix}{name}{path}", item))
        if leads:
            places.extend(_reached(namespace, classes))
    return found


@contextlib.contextmanager
def kept(func, reached: list | None = None):
    """Run a whole trace of ``func``; then put back the state of every numpy generator it
    can reach (its checks ran the code eagerly). ``reached``: see :func:`found_in`."""
    watched = []
    for label, rng, holder in found_in(func, reached):
        with contextlib.suppress(Exception):  # a generator that will not say: not watched
            watched.append((label, rng, holder, _state(holder)))
    _TRACES.append(watched)
    try:
        yield
    finally:
        del _TRACES[next(i for i, b in enumerate(_TRACES) if b is watched)]  # not ==: arrays
        for _, _, holder, state in watched:
            _set_state(holder, state)


def states() -> list:
    """The states of the generators the current trace watches (for :func:`refuse_draws`)."""
    if not _TRACES:
        return []
    return [(label, rng, holder, _state(holder)) for label, rng, holder, _ in _TRACES[-1]]


def refuse_draws(before: list) -> None:
    """Refuse a recording during which a generator of ``before`` drew (or spawned a
    child); its state is put back first."""
    for label, rng, holder, state in before:
        if not _same(_state(holder), state):
            _set_state(holder, state)
            raise UnsupportedOpError(
                f"the traced code drew random numbers from {label} (a numpy "
                f"{type(rng).__name__}): numpy's random numbers are drawn outside torch, so "
                "the trace cannot draw them again: every call would reuse the example's "
                "draw. Draw with torch (torch.rand(..., generator=g), torch.bernoulli), "
                "whose random ops the trace records, or pass the numbers as an input"
            )
