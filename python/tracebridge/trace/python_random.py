"""Python's ``random`` module in traced code: its numbers are drawn outside torch, so a
trace cannot draw them again.

Note: why a drawn number refuses to be used, not to be drawn. Old LayerDrop reads
``random.uniform(0, 1) < p`` in forward: recorded, the example's draw would decide every
call (the layer always kept, or always skipped), with no word. But some models draw and
ignore the number outside training (MusicGen's decoder draws before testing
``self.training``), and their evaluation trace is right. So while the traced code runs,
a number drawn from ``random`` (the module's functions or a ``random.Random``'s methods)
is a :class:`DrawnNumber` that raises :class:`UnsupportedOpError` as soon as anything
uses it (compares, computes, converts, formats it), naming the line that drew it and the
line that used it. ``choice``, ``choices``, ``sample`` and ``shuffle`` pick or reorder the
code's own objects, which cannot stand in for themselves: refused where they are called.
Nothing is drawn while tracing, so the generator's state is as it was. Calls made by the
standard library (``tempfile``'s names) are left alone: only the code being traced (the
user's and its libraries') is watched.
"""

from __future__ import annotations

import os
import random
import sys
import sysconfig
from collections.abc import Callable

from ..errors import UnsupportedOpError
from ..source import OWN_DIR, is_internal

# Functions whose result is a number (replaced by a DrawnNumber while tracing).
NUMBERS = (
    "random uniform randint randrange gauss normalvariate betavariate expovariate "
    "gammavariate lognormvariate vonmisesvariate paretovariate weibullvariate triangular "
    "getrandbits"
).split()
# Functions that pick or reorder the code's objects (refused while tracing).
PICKS = "choice choices sample shuffle randbytes".split()

_RANDOM_FILE = random.__file__
STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep  # integers.py too
_REMEDY = (
    "Python's random numbers are drawn outside torch, so the trace cannot draw them again: "
    "every call would reuse the example's draw. Draw with torch (torch.rand(..., "
    "generator=g), torch.bernoulli), whose random ops the trace records, or pass the "
    "number as an input"
)


def _caller():
    """The first frame outside tracebridge and ``random`` itself (None: none)."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(OWN_DIR) or frame.f_code.co_filename == _RANDOM_FILE
    ):
        frame = frame.f_back
    return frame


def _from_traced_code(frame) -> bool:
    """Whether ``frame`` (:func:`_caller`) is the traced code's: neither PyTorch's nor
    the standard library's."""
    if frame is None or is_internal(frame.f_code.co_filename):
        return False
    path = os.path.realpath(frame.f_code.co_filename)
    return not (path.startswith(STDLIB) and "-packages" + os.sep not in path)


def _where() -> str | None:
    """The line of the traced code making the current call (past PyTorch's frames too: a
    drawn number given to ``F.dropout`` is used at the caller's line)."""
    frame = sys._getframe(1)
    while frame is not None and (
        is_internal(frame.f_code.co_filename) or frame.f_code.co_filename == _RANDOM_FILE
    ):
        frame = frame.f_back
    return None if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class DrawnNumber:
    """A number the traced code drew from Python's ``random``: any use of it refuses."""

    __slots__ = ("_what", "_where", "_kind")

    def __init__(self, what: str, where: str | None, kind: type | None = None):
        self._what, self._where, self._kind = what, where, kind

    def _refuse(self, *args, **kwargs):
        used = _where() or "unknown location"
        raise UnsupportedOpError(
            f"cannot record the use at {used} of the number that {self._what} drew at "
            f"{self._where or 'unknown location'}: "
            f"{_NUMPY_REMEDY if self._what.startswith('numpy') else _REMEDY}"
        )

    def __repr__(self) -> str:
        return f"<{self._what} drawn while tracing at {self._where}: unusable in a trace>"

    @property
    def __class__(self):
        # ``isinstance(n, (int, float))`` and ``isinstance(n, numbers.Real)`` ask for the
        # class when the type does not match: an answer of False would send the code down
        # the branch for non-numbers, silently, where eager takes the numbers' one (the
        # number then unused, nothing refuses). Asking is a use. (``type(n)`` and
        # ``isinstance(n, DrawnNumber)`` read the type itself and are left as they are.)
        # A number numpy drew is in hand: its class answers as the number would.
        if self._kind is not None:
            return self._kind
        self._refuse()

    __bool__ = __float__ = __int__ = __index__ = __complex__ = __hash__ = _refuse
    __str__ = __format__ = __round__ = __trunc__ = __floor__ = __ceil__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = __divmod__ = __rdivmod__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _refuse
    __torch_function__ = _refuse  # a torch function given it as an argument


def _replacement(original, name: str, tracing: Callable[[], bool]):
    """``original`` (``random.name`` or ``Random.name``) as the traced code sees it."""
    what = f"random.{name}()"

    def replacement(*args, **kwargs):
        if tracing():
            frame = _caller()
            if _from_traced_code(frame):
                where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                if name in PICKS:
                    raise UnsupportedOpError(f"cannot record {what} at {where}: {_REMEDY}")
                return DrawnNumber(what, where)
        return original(*args, **kwargs)

    replacement.__name__ = getattr(original, "__name__", name)
    replacement.__doc__ = getattr(original, "__doc__", None)
    return replacement


# While the hook is on: id(the module's function) -> (the function, its replacement), for
# trace/integers.py to rebind ``from random import uniform`` names in the traced modules.
_SWAPPED: dict[int, tuple] = {}


def swapped() -> dict[int, tuple]:
    """The module's functions and their replacements while the replacements are in."""
    return dict(_SWAPPED)


def patcher(tracing: Callable[[], bool]) -> Callable:
    """A hook for trace/patches.py's ``BuiltinPatches``: ``hook(True)`` puts the
    replacements in (the module's functions, ``random.Random``'s and ``SystemRandom``'s
    methods), and
    ``hook(False)`` takes them out, leaving both as they were."""
    names = [n for n in (*NUMBERS, *PICKS) if hasattr(random.Random, n)]
    module_originals = {n: getattr(random, n) for n in names if hasattr(random, n)}
    # random.Random's methods (None: inherited from C), and those SystemRandom (the
    # operating system's numbers) defines over them.
    own = {
        random.Random: {n: random.Random.__dict__.get(n) for n in names},
        random.SystemRandom: {
            n: random.SystemRandom.__dict__[n] for n in names if n in random.SystemRandom.__dict__
        },
    }

    made: dict[tuple, tuple] = {}  # (owner, name) -> (the original, its replacement)

    def replacement_of(owner, n: str, original):
        # made once per original: every recording installs them (a capture's cost)
        pair = made.get((owner, n))
        if pair is None or pair[0] is not original:
            pair = made[(owner, n)] = (original, _replacement(original, n, tracing))
        return pair[1]

    def hook(on: bool) -> None:
        _SWAPPED.clear()
        for n, original in module_originals.items():
            replacement = replacement_of(random, n, original) if on else original
            setattr(random, n, replacement)
            if on:
                _SWAPPED[id(original)] = (original, replacement)
        for cls, methods in own.items():
            for n, method in methods.items():
                if on:
                    setattr(cls, n, replacement_of(cls, n, getattr(cls, n)))
                elif method is None:
                    delattr(cls, n)
                else:
                    setattr(cls, n, method)

    return hook


# numpy's global generator: the module's functions (``np.random.uniform``). A number drawn
# is a DrawnNumber, as Python's are (drawn and left unused, it is no harm); an array cannot
# stand in for itself so: refused where drawn. (The generator's state is put back after
# the trace: trace/capture.py.)
NUMPY_DRAWS = """rand randn random random_sample ranf sample uniform normal standard_normal
randint random_integers choice permutation shuffle beta binomial chisquare dirichlet
exponential f gamma geometric gumbel hypergeometric laplace logistic lognormal logseries
multinomial multivariate_normal negative_binomial noncentral_chisquare noncentral_f pareto
poisson power rayleigh standard_cauchy standard_exponential standard_gamma standard_t
triangular vonmises wald weibull zipf bytes""".split()
_NUMPY_REMEDY = _REMEDY.replace("Python's random numbers", "numpy's random numbers")


def _numpy_replacement(original, name: str, tracing: Callable[[], bool]):
    what = f"numpy.random.{name}()"

    def replacement(*args, **kwargs):
        if tracing():
            frame = _caller()
            if _from_traced_code(frame) and not _numpy_frame(frame):
                where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                drawn = original(*args, **kwargs)
                if getattr(drawn, "ndim", 0) == 0 and isinstance(drawn, (int, float, complex)):
                    return DrawnNumber(what, where, type(drawn))  # refused where it is used
                raise UnsupportedOpError(f"cannot record {what} at {where}: {_NUMPY_REMEDY}")
        return original(*args, **kwargs)

    replacement.__name__ = getattr(original, "__name__", name)
    replacement.__doc__ = getattr(original, "__doc__", None)
    return replacement


def _numpy_frame(frame) -> bool:
    return frame.f_globals.get("__name__", "").split(".")[0] == "numpy"


def numpy_patcher(tracing: Callable[[], bool]) -> Callable:
    """The hook of :func:`patcher` for ``numpy.random``'s module functions (numpy loaded
    or not: only a module the process has imported is patched)."""
    originals: dict[str, object] = {}
    made: dict[str, tuple] = {}  # name -> (the original, its replacement), made once

    def hook(on: bool) -> None:
        module = sys.modules.get("numpy.random")
        if module is None:
            return
        if on:
            for name in NUMPY_DRAWS:
                original = getattr(module, name, None)
                if callable(original):
                    originals[name] = original
                    pair = made.get(name)
                    if pair is None or pair[0] is not original:
                        pair = made[name] = (original, _numpy_replacement(original, name, tracing))
                    replacement = pair[1]
                    setattr(module, name, replacement)
                    _SWAPPED[id(original)] = (original, replacement)
        else:
            for name, original in originals.items():
                setattr(module, name, original)
            originals.clear()

    return hook
