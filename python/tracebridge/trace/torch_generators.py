"""torch generators the traced code keeps: a random op's ``generator=`` argument.

Note: why a kept generator is recorded by name, and which ones are.
  ``torch.rand(n, generator=self.g)`` draws from ``self.g``, and the next call draws
  further on from where this one left it. A graph that holds the generator (as
  torch.jit.trace holds it, as a constant) draws what eager draws, call after call, and a
  reseed of ``self.g`` reaches it. So the generators the code can reach without running
  code are found once per trace (:func:`kept`): each attribute of the traced module or a
  sub-module that is a generator, named by its path (``noise.g``), then the places that
  trace/numpy_generators.py looks into for numpy's (a global, a closure's variable, a
  class attribute, a list attribute), named ``generator0``, ``generator1``, ...; a random
  op's generator is recorded as a ``GeneratorRef`` to that name, and the program keeps the
  generator under it (``Program.generators``). A generator the search does not find was
  made during the call (a new one each call, which a graph cannot make) or passed in as
  an argument: refused, naming it and the line. ``torch.default_generator`` is the
  global generator, which an op without ``generator=`` draws from: recorded so.
  Tracing runs the code several times (the recording, the checks, the size probes);
  every block that runs it puts the generators back (:func:`snapshot`, :func:`restore`,
  from capture.preserved), and the trace leaves each as it found it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from ..errors import UnsupportedOpError
from ..ir import GeneratorRef
from . import numpy_generators
from .helpers import active_tracer


@dataclass
class Kept:
    """The generators one trace can record: id -> (name, generator, label for messages),
    and those its graphs name (``used``, name -> generator: ``Program.generators``)."""

    names: dict[int, tuple[str, torch.Generator, str]] = field(default_factory=dict)
    used: dict[str, torch.Generator] = field(default_factory=dict)
    states: list[tuple[torch.Generator, torch.Tensor]] = field(default_factory=list)
    # While a recording runs: id -> each generator's state after the last draw the
    # trace recorded from it (or as the recording began): see :func:`recording`
    last: dict[int, torch.Tensor] | None = None
    # ... and the CPU global generator's state after the last draw from it (see
    # :func:`_same_global_state`), with whether the recording drew from it at all
    global_last: torch.Tensor | None = None
    global_drawn: bool = False


# One per trace under way (a trace inside a trace, R's nested calls, stacks them).
_TRACES: list[Kept] = []


def _module_of(func) -> torch.nn.Module | None:
    if isinstance(func, torch.nn.Module):
        return func
    owner = getattr(func, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def found_in(func, reached: list | None = None) -> Kept:
    """The generators ``func``'s code can reach by name, named (see the module Note).
    ``reached``: what numpy_generators.reachable found for these and maybe other kinds
    (one search serves numpy's generators too)."""
    kept = Kept()
    module = _module_of(func)
    taken: set[str] = set()
    if module is not None:
        for prefix, mod in module.named_modules(remove_duplicate=False):
            for key, value in list(vars(mod).items()):
                if type(value) is torch.Generator and id(value) not in kept.names:
                    name = f"{prefix}.{key}" if prefix else key
                    label = f"self.{name}"
                    kept.names[id(value)] = (name, value, label)
                    taken.add(name)
    if reached is None:
        reached = numpy_generators.reachable(func, (torch.Generator,))
    if module is None:  # a function's: also those of the modules it calls by name
        reached = [*reached, *_in_called_modules(func)]
    for label, value in reached:
        if type(value) is not torch.Generator or id(value) in kept.names or _is_default(value):
            continue
        index = sum(1 for name, _, _ in kept.names.values() if name.startswith("generator"))
        while f"generator{index}" in taken or (
            module is not None and hasattr(module, f"generator{index}")
        ):
            index += 1
        name = f"generator{index}"
        taken.add(name)
        kept.names[id(value)] = (name, value, label)
    return kept


def _in_called_modules(func) -> list[tuple[str, torch.Generator]]:
    """(label, generator) of the generators that the modules a traced function names (a
    global or closure variable: ``lambda x: model(x)``) keep as attributes, at any depth."""
    fn = getattr(func, "__func__", func)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names = dict.fromkeys(code.co_names)
    places = {n: fn.__globals__[n] for n in names if n in getattr(fn, "__globals__", {})}
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell
            places[name] = cell.cell_contents
    found = []
    for name, value in places.items():
        if isinstance(value, torch.nn.Module):
            for prefix, mod in value.named_modules(remove_duplicate=False):
                for key, item in list(vars(mod).items()):
                    if type(item) is torch.Generator:
                        found.append((f"{name}.{prefix + '.' if prefix else ''}{key}", item))
    return found


def _is_default(generator) -> bool:
    """Whether ``generator`` is one of torch's global generators (CPU or a CUDA device's)."""
    if generator is torch.default_generator:
        return True
    # (a tuple that CUDA fills when it starts; asking torch.cuda.is_available() here would
    # be read by the trace as the code's own question)
    return any(generator is g for g in torch.cuda.default_generators)


@contextlib.contextmanager
def kept(func, reached: list | None = None):
    """Run a whole trace of ``func``: the random ops may draw from the generators it
    keeps; each is put back as the trace found it at the end. ``reached``: see
    :func:`found_in`."""
    found = found_in(func, reached) if func is not None else Kept()
    found.states = [(g, g.get_state()) for _, g, _ in found.names.values()]
    _TRACES.append(found)
    try:
        yield found
    finally:
        del _TRACES[next(i for i, k in enumerate(_TRACES) if k is found)]
        restore(found.states)


def used() -> dict[str, torch.Generator]:
    """name -> generator of those the current trace's graphs name (``Program.generators``:
    the dict itself, which recordings made later still fill)."""
    return _TRACES[-1].used if _TRACES else {}


def snapshot() -> list[tuple[torch.Generator, torch.Tensor]]:
    """The states of the current trace's generators (for :func:`restore`)."""
    if not _TRACES:
        return []
    return [(g, g.get_state()) for _, g, _ in _TRACES[-1].names.values()]


def restore(states: list[tuple[torch.Generator, torch.Tensor]]) -> None:
    for generator, state in states:
        generator.set_state(state)


def reference(generator, where: str | None) -> GeneratorRef | None:
    """What a random op's ``generator=`` argument records: None for the global generator
    (what the op draws from without the argument), a GeneratorRef for a kept one; any
    other is refused."""
    if generator is torch.default_generator:
        return None
    at = f" (at {where})" if where else ""
    if _is_default(generator):
        raise UnsupportedOpError(
            f"a random op draws from a CUDA device's global generator, passed as "
            f"generator={generator!r}{at}: leave generator= out (the op then draws from the "
            "global generator of its device), or keep a generator of your own as an "
            "attribute of the module"
        )
    found = _TRACES[-1].names.get(id(generator)) if _TRACES else None
    if found is None:
        raise UnsupportedOpError(
            f"a random op draws from a torch.Generator (its argument 'generator') that the "
            f"trace cannot keep{at}: it is "
            "neither an attribute of the traced module (or of a sub-module, or of a module "
            "the traced function names) nor a global or closure variable of the traced "
            "code, so it was made during the call (a new "
            "generator on every call, which a graph cannot make) or passed in as an "
            "argument. Keep the generator as an attribute of the module (self.g = "
            "torch.Generator().manual_seed(0) in __init__) and draw from that"
        )
    name, generator, _ = found
    kept = _TRACES[-1]
    kept.used[name] = generator
    return GeneratorRef(name)


# Note: a state the code sets. Eager code may reseed its generator inside the call
# (``self.g.manual_seed(0)`` for the same noise on every call) or put a state back
# (``set_state``); no op the trace records does that (a Generator's methods reach no
# torch function mode), so a graph would draw on from where the last call left the
# generator: silently other numbers from the second call on. A recording therefore
# starts each kept generator from a state of its own (the trace's starting state moved
# on by one draw, which no seed gives), and the state before each recorded draw and at
# the end must be the one the recorded draws left: a state set by the code shows there.


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():  # (inside a recording: not the code's op)
        return a.shape == b.shape and bool(torch.equal(a, b))


@contextlib.contextmanager
def recording():
    """Run one recording: the kept generators start from a moved state and every state
    the code sets on one is refused (see the Note above)."""
    kept = _TRACES[-1] if _TRACES else None
    if kept is None or kept.last is not None:
        yield
        return
    kept.last, kept.global_drawn = {}, False
    kept.global_last = torch.default_generator.get_state()
    with torch._C.DisableTorchFunction():
        for _, generator, _ in kept.names.values():
            torch.empty(1, device=generator.device).uniform_(generator=generator)
            kept.last[id(generator)] = generator.get_state()
    try:
        yield
        for _, generator, label in kept.names.values():
            _same_as_drawn(kept, generator, label, "after its last draw")
        if kept.global_drawn:
            _same_global_state(kept, "after its last draw")
    finally:
        kept.last = kept.global_last = None


@contextlib.contextmanager
def drawing(args: tuple, kwargs: dict, where: str | None):
    """Record a random op: in a recording, its generator must be as the draws before left
    it, and the state the op leaves is the one the next draw starts from."""
    kept = _TRACES[-1] if _TRACES else None
    watched = []
    if kept is not None and kept.last is not None:
        for value in (*args, *kwargs.values()):
            if type(value) is torch.Generator and id(value) in kept.names:
                watched.append(kept.names[id(value)])
    for _, generator, label in watched:
        _same_as_drawn(kept, generator, label, f"before the draw at {where or '?'}")
    from_global = kept is not None and kept.last is not None and _draws_globally(args, kwargs)
    if from_global:
        _same_global_state(kept, f"before the draw at {where or '?'}")
    yield
    for _, generator, _ in watched:
        kept.last[id(generator)] = generator.get_state()
    if from_global:
        kept.global_last, kept.global_drawn = torch.default_generator.get_state(), True


def _draws_globally(args: tuple, kwargs: dict) -> bool:
    """Whether a random op draws from the CPU global generator: no generator named (or
    that one), and no CUDA tensor among its arguments (a CUDA op draws from its device's
    generator, whose seeding is refused: trace/global_effects.py)."""
    generator = kwargs.get("generator")
    if generator is None:
        generator = next((a for a in args if type(a) is torch.Generator), None)
    if generator is not None and generator is not torch.default_generator:
        return False
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if any(t.is_cuda for t in tensors):
        return False
    device = kwargs.get("device")
    return device is None or torch.device(device).type == "cpu"


def _same_global_state(kept: Kept, when: str) -> None:
    """Refuse where the CPU global generator is not as the recorded draws left it: code
    that reseeds or puts it back through ``torch.default_generator`` (its methods reach
    no torch function mode, and no function to replace), or an op that draws without
    being known to (then the trace could not repeat it either)."""
    if _equal(torch.default_generator.get_state(), kept.global_last):
        return
    tracer = active_tracer()
    put_back = getattr(tracer, "rng_put_back", None)
    if put_back:  # the code's own torch.set_rng_state: named where it was called
        when = f"with torch.set_rng_state at {put_back[0] or '?'}, {when}"
    raise UnsupportedOpError(
        f"the traced code sets the state of torch's global random generator {when} "
        "(torch.default_generator.manual_seed, set_state or seed, or an op that draws "
        "random numbers where tracebridge does not know it does): a trace records the "
        "random ops, not a state set on the generator, so every call would draw other "
        "numbers than the code. Seed outside the call (before calling the traced "
        "module), or pass the noise in as an input"
    )


def _same_as_drawn(kept: Kept, generator, label: str, when: str) -> None:
    if _equal(generator.get_state(), kept.last[id(generator)]):
        return
    raise UnsupportedOpError(
        f"the traced code sets the state of the generator {label} {when} (manual_seed, "
        "set_state, seed or graphsafe_set_state in the call): a trace records the random "
        "ops that draw from a generator, not a state set on it, so from the second call "
        "on it would draw other numbers than the code. Seed the generator outside the "
        "call (before calling the traced module), or pass the noise in as an input"
    )
