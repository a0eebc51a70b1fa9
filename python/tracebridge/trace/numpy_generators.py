"""numpy random generators the traced code keeps: a draw from one is refused, and every
one is left as the trace found it.

Note: why a kept generator is watched by its state, not by its methods.
  ``np.random.Generator`` and ``np.random.RandomState`` are C types whose methods cannot
  be replaced (numpy's module functions and Python's ``random`` are: trace/python_random.py).
  A draw from one (``self.rng.random()``, ``RNG.integers(0, 3)``) gives the example's
  numbers, which a trace would hold as constants where eager draws new ones on every
  call: silently wrong. So the generators the code can reach without running code -- an
  attribute of the module or a sub-module (also inside a list, tuple or dict attribute, or
  an attribute of a plain object it holds), a global of the module's code or of the
  traced function, a variable its closure holds
  -- are found once per trace (:func:`kept`), and each recording compares their states
  before and after (:func:`refuse_draws`): a state that moved means the code drew, and the
  trace is refused naming the generator. (A draw is refused even where the number goes
  unused; Python's ``random`` is more lenient there because its draws can be replaced.)
  A generator made inside the call from a fixed seed draws the same numbers every call,
  so holding them is right; one made from the operating system's entropy cannot be told
  from it. At the end of the trace, every generator found gets its state back: the
  trace's checks ran the code eagerly, and drew.
"""

from __future__ import annotations

import contextlib
import sys
import types

from ..errors import UnsupportedOpError

_DEPTH = 1  # how deep list, tuple and dict attributes are looked into
# One list per trace under way: (label, generator, its state when the trace began).
_TRACES: list[list[tuple[str, object, object]]] = []


def _kinds() -> tuple[type, ...]:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return ()
    return (numpy.random.Generator, numpy.random.RandomState)


def _state(rng):
    """A copy of ``rng``'s state (what :func:`_set_state` puts back)."""
    if hasattr(rng, "bit_generator"):
        return rng.bit_generator.state
    return rng.get_state(legacy=False)


def _set_state(rng, state) -> None:
    if hasattr(rng, "bit_generator"):
        rng.bit_generator.state = state
    else:
        rng.set_state(state)


def _same(a, b) -> bool:
    """Whether two states are equal (they hold numpy arrays: MT19937's key)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "shape") or hasattr(b, "shape"):
        numpy = sys.modules["numpy"]
        return bool(numpy.array_equal(a, b))
    return a == b


def _items(value, depth: int):
    """``value`` and, ``depth`` levels down, the items of its lists, tuples and dicts and
    the attributes of a plain object (an augmentation object the model holds)."""
    yield "", value
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
    return isinstance(getattr(value, "__dict__", None), dict) and not isinstance(value, kinds)


def _places(func) -> list[tuple[str, dict]]:
    """(label prefix, namespace) where the traced code may keep a generator."""
    import torch  # a module's sub-modules and their classes' globals

    places: list[tuple[str, dict]] = []
    functions = []
    if isinstance(func, torch.nn.Module):
        for prefix, mod in func.named_modules(remove_duplicate=True):
            places.append((f"self.{prefix}." if prefix else "self.", vars(mod)))
            functions.append(getattr(type(mod), "forward", None))
            module = sys.modules.get(type(mod).__module__)
            if module is not None:
                places.append((f"the global {type(mod).__module__}.", vars(module)))
    else:
        owner = getattr(func, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            return _places(owner)
        if owner is not None and isinstance(getattr(owner, "__dict__", None), dict):
            places.append(("self.", vars(owner)))  # a method of another object
        functions.append(getattr(func, "__func__", func))
    for fn in functions:
        if not isinstance(fn, types.FunctionType):
            continue
        places.append((f"the global {fn.__module__}.", fn.__globals__))
        names = fn.__code__.co_freevars
        cells = dict(zip(names, fn.__closure__ or ()))
        closure = {}
        for name, cell in cells.items():
            with contextlib.suppress(ValueError):  # an empty cell
                closure[name] = cell.cell_contents
        places.append((f"the variable {fn.__qualname__}.", closure))
    return places


def found_in(func) -> list[tuple[str, object]]:
    """Each numpy generator the traced code can reach by name, with a label for it
    (``self.rng``, ``the global model.RNG``); numpy's global generator is left to
    trace/python_random.py, whose replacements of numpy's functions draw from it."""
    kinds = _kinds()
    if not kinds:
        return []
    shared = sys.modules["numpy"].random.mtrand._rand
    found: dict[int, tuple[str, object]] = {}
    looked: set[int] = set()  # a module's globals, once for all its classes' sub-modules
    for prefix, namespace in _places(func):
        if id(namespace) in looked:
            continue
        looked.add(id(namespace))
        for name, value in list(namespace.items()):
            for path, item in _items(value, _DEPTH):
                if type(item) in kinds and item is not shared:
                    found.setdefault(id(item), (f"{prefix}{name}{path}", item))
    return list(found.values())


@contextlib.contextmanager
def kept(func):
    """Run a whole trace of ``func``; then put back the state of every numpy generator it
    can reach (its checks ran the code eagerly)."""
    watched = []
    for label, rng in found_in(func):
        with contextlib.suppress(Exception):  # a generator that will not say: not watched
            watched.append((label, rng, _state(rng)))
    _TRACES.append(watched)
    try:
        yield
    finally:
        del _TRACES[next(i for i, b in enumerate(_TRACES) if b is watched)]  # not ==: arrays
        for _, rng, state in watched:
            _set_state(rng, state)


def states() -> list:
    """The states of the generators the current trace watches (for :func:`refuse_draws`)."""
    if not _TRACES:
        return []
    return [(label, rng, _state(rng)) for label, rng, _ in _TRACES[-1]]


def refuse_draws(before: list) -> None:
    """Refuse a recording during which a generator of ``before`` drew; its state is put
    back first."""
    for label, rng, state in before:
        if not _same(_state(rng), state):
            _set_state(rng, state)
            raise UnsupportedOpError(
                f"the traced code drew random numbers from {label} (a numpy "
                f"{type(rng).__name__}): numpy's random numbers are drawn outside torch, so "
                "the trace cannot draw them again: every call would reuse the example's "
                "draw. Draw with torch (torch.rand(..., generator=g), torch.bernoulli), "
                "whose random ops the trace records, or pass the numbers as an input"
            )
