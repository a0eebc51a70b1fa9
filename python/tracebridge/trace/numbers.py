"""Traced Python numbers: sizes and scalars whose arithmetic is recorded.

Invariant: a traced number always holds the concrete value the trace saw, and every use
that turns it into a plain Python value goes through the tracer (recorded or guarded).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedOpError
from ..ir.program import Ref
from ..source import raised_at, source_line, user_location
from .caches import cache_lookup, miss_hash
from .text import formatted, formatted_from

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer


class _Traced:
    """Mixin for traced numbers: a concrete value, the tracer, and how to name the value."""

    __slots__ = ()

    def _binop(self, other, op, reflected=False):
        if op == "mul" and isinstance(other, (list, tuple, str, bytes)):
            # ``n * [x]`` repeats a sequence: its length is fixed in the trace.
            count = self._tracer.specialize(self, "int")
            return other * count
        return self._tracer.scalar_op(op, (other, self) if reflected else (self, other))

    def _compare(self, other, op):
        return self._tracer.scalar_compare(op, self, other)

    __add__ = lambda s, o: s._binop(o, "add")  # noqa: E731
    __radd__ = lambda s, o: s._binop(o, "add", True)  # noqa: E731
    __sub__ = lambda s, o: s._binop(o, "sub")  # noqa: E731
    __rsub__ = lambda s, o: s._binop(o, "sub", True)  # noqa: E731
    __mul__ = lambda s, o: s._binop(o, "mul")  # noqa: E731
    __rmul__ = lambda s, o: s._binop(o, "mul", True)  # noqa: E731
    __truediv__ = lambda s, o: s._binop(o, "truediv")  # noqa: E731
    __rtruediv__ = lambda s, o: s._binop(o, "truediv", True)  # noqa: E731
    __floordiv__ = lambda s, o: s._binop(o, "floordiv")  # noqa: E731
    __rfloordiv__ = lambda s, o: s._binop(o, "floordiv", True)  # noqa: E731
    __mod__ = lambda s, o: s._binop(o, "mod")  # noqa: E731
    __rmod__ = lambda s, o: s._binop(o, "mod", True)  # noqa: E731
    __pow__ = lambda s, o, m=None: s._binop(o, "pow") if m is None else modular_pow(s, o, m)  # noqa: E731
    __rpow__ = lambda s, o: s._binop(o, "pow", True)  # noqa: E731
    __eq__ = lambda s, o: s._compare(o, "eq")  # noqa: E731
    __ne__ = lambda s, o: s._compare(o, "ne")  # noqa: E731
    __lt__ = lambda s, o: s._compare(o, "lt")  # noqa: E731
    __le__ = lambda s, o: s._compare(o, "le")  # noqa: E731
    __gt__ = lambda s, o: s._compare(o, "gt")  # noqa: E731
    __ge__ = lambda s, o: s._compare(o, "ge")  # noqa: E731
    __lshift__ = lambda s, o: s._binop(o, "lshift")  # noqa: E731
    __rlshift__ = lambda s, o: s._binop(o, "lshift", True)  # noqa: E731
    __rshift__ = lambda s, o: s._binop(o, "rshift")  # noqa: E731
    __rrshift__ = lambda s, o: s._binop(o, "rshift", True)  # noqa: E731
    __and__ = lambda s, o: s._binop(o, "and")  # noqa: E731
    __rand__ = lambda s, o: s._binop(o, "and", True)  # noqa: E731
    __or__ = lambda s, o: s._binop(o, "or")  # noqa: E731
    __ror__ = lambda s, o: s._binop(o, "or", True)  # noqa: E731
    __xor__ = lambda s, o: s._binop(o, "xor")  # noqa: E731
    __rxor__ = lambda s, o: s._binop(o, "xor", True)  # noqa: E731

    def bit_length(self):
        return self._tracer.specialize(self, "int").bit_length()

    def bit_count(self):
        return self._tracer.specialize(self, "int").bit_count()

    def to_bytes(self, *args, **kwargs):
        return self._tracer.specialize(self, "int").to_bytes(*args, **kwargs)

    def as_integer_ratio(self):
        value = self._concrete()
        return self._tracer.specialize(self, type(value).__name__).as_integer_ratio()

    def __divmod__(self, other):
        return (self // other, self % other)

    def __rdivmod__(self, other):
        return (other // self, other % self)

    def __invert__(self):
        return self._tracer.scalar_op("invert", (self,))

    def __round__(self, ndigits=None):
        if ndigits is None:
            return self._tracer.scalar_op("round", (self,))
        # round(v, 2) rounds the decimal digits (correctly rounded, in C): no op of the set
        # computes that, so the value is guarded (a call with another raises GuardError).
        value = self._tracer.specialize(self, type(self._concrete()).__name__, "rounded")
        if isinstance(ndigits, _Traced):
            ndigits = self._tracer.specialize(ndigits, "int", "the digits of round()")
        return round(value, ndigits)

    # The number itself, as Python gives it (float's own would be a plain constant).
    def __pos__(self):
        return self

    def conjugate(self):
        return self

    real = property(conjugate)
    imag = property(lambda self: type(self._concrete())(0))

    def __trunc__(self):
        return self._tracer.scalar_op("trunc", (self,))

    def __str__(self):
        # Text is not a decision: it remembers this number and guards it only when a
        # decision reads it (trace/text.py says when text is guarded where it is made).
        return formatted(self, str(self._concrete()))

    def __format__(self, spec):
        return formatted(self, format(self._concrete(), spec))

    def _fix_text(self, reason: str) -> None:
        """Text showing this number decides (trace/text.py): guard the number's value."""
        self._tracer.specialize(self, type(self._concrete()).__name__, reason=reason)

    def __neg__(self):
        return self._tracer.scalar_op("neg", (self,))

    def __abs__(self):
        return self._tracer.scalar_op("abs", (self,))

    def __bool__(self):
        # ``bool(n)`` is ``n != 0``: the guard states that, not n's value, so that
        # ``if not all(x.shape)`` (transformers' LongT5: "is any size 0?") holds for
        # every non-empty input instead of fixing each size.
        return self._tracer.scalar_compare("ne", self, 0, warn=False)

    def __int__(self):
        return self._tracer.specialize(self, "int")

    def __float__(self):
        return self._tracer.specialize(self, "float")

    def __index__(self):
        return self._tracer.specialize(self, "int")

    def __hash__(self):
        # Hashing means a set or dict lookup: which entry it finds depends on the value --
        # unless the lookup is a cache's, which only saves time (trace/caches.py).
        cache = cache_lookup()
        tracer = self._tracer
        if cache is not None and tracer.is_active() and tracer.through_cache(cache, number=self):
            return miss_hash(self)
        return hash(self._tracer.specialize(self, type(self._concrete()).__name__))

    # A number is immutable: its copy is itself, still traced (``copy.deepcopy`` of a
    # shape list before editing it). Pickled, its value is read (bytes that a later
    # comparison decides on): guarded.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (type(self._concrete()), self.__getnewargs__())

    def __getnewargs__(self):
        value = self._concrete()
        return (self._tracer.specialize(self, type(value).__name__, "pickled"),)

    def __new__(
        cls, value=0, tracer: Tracer | None = None, ref: Ref | None = None, desc="", lazy=None
    ):
        if tracer is None:
            # ``type(n)(v)`` (statistics converts its result so): what int(v) / float(v)
            # give, a plain number; a traced ``v`` is guarded by its __int__ / __float__.
            return cls._base(value)
        obj = cls._base.__new__(cls, value)
        obj._tracer, obj._ref, obj._desc, obj._lazy = tracer, ref, desc, lazy
        return obj

    def _concrete(self):
        """The plain number, read without a guard (for the tracer's own use)."""
        return type(self)._unwrap(self)

    def __repr__(self):
        # Containers call their items' __repr__ from C (``str([n, 2])``): see formatted's obj.
        return formatted(self, repr(self._concrete()), obj=self)


class SymInt(_Traced, int):
    """An int whose value was computed from traced tensors (a size, an ``.item()``)."""

    _base = int
    _unwrap = int.__int__

    def __ceil__(self):
        return self

    __floor__ = __trunc__ = __ceil__

    def __round__(self, ndigits=None):
        return self if ndigits is None or ndigits >= 0 else _Traced.__round__(self, ndigits)

    numerator = property(lambda self: self)
    denominator = property(lambda self: 1)


class SymFloat(_Traced, float):
    """A float computed from traced values (``t.item()``, ``x.size(-1) ** -0.5``)."""

    _base = float
    _unwrap = float.__float__

    def is_integer(self):
        # ``(h / 4).is_integer()``: float's own reads the value in C. As a comparison with
        # its floor, what is guarded is the answer, which serves every size that gives it.
        return self._tracer.scalar_compare("eq", self, self.__floor__())

    def hex(self):
        return self._tracer.specialize(self, "float").hex()

    def __ceil__(self):
        return self._tracer.scalar_op("ceil", (self,))

    def __floor__(self):
        return self._tracer.scalar_op("floor", (self,))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # With this, PyTorch's parser takes a traced float where it takes only a tensor
        # (``torch.ceil(h / p)``) and hands the call on, instead of refusing it before any
        # tracer sees it: the recording mode sees it first (trace/dispatch.py,
        # Dispatcher._eager_result). Not on SymInt: the parser would then read an int
        # starting a list of sizes (``x.expand(n, -1)``) as a tensor and refuse the call.
        return numbers_given_as_tensors(func, args, kwargs or {})


# Bits of a traced exponent: a traced number is at most 2**64 - 1 (ir/ops.py INT_MAX).
_EXPONENT_BITS = 64
# Every step multiplies two numbers below the modulus: within 64 bits up to this one. (A
# traced modulus is a size or an element: the example's is checked.)
_MODULUS_LIMIT = 2**32
# How far the order of a literal base modulo a literal modulus is looked for.
_ORDER_SEARCH = 1024


def _order(base: int, mod: int) -> int | None:
    """The least ``k > 0`` with ``base ** k % mod == 1 % mod`` (up to ``_ORDER_SEARCH``),
    or None: then ``pow(base, e, mod) == pow(base, e % k, mod)`` for every ``e >= 0``."""
    power = 1
    for k in range(1, _ORDER_SEARCH + 1):
        power = (power * base) % mod
        if power == 1 % mod:
            return k
    return None


def modular_pow(base, exp, mod):
    """``pow(base, exp, mod)`` where a traced number is among them: what Python's modular
    power gives for ints with ``exp >= 0`` and ``mod != 0``; the two comparisons that say
    so are guarded (a call with a negative exponent, whose answer is a modular inverse,
    raises GuardError).

    Note: reduced at every step, as Python's own is. ``(base ** exp) % mod`` is the same
    number, but its power leaves the range of traced numbers (``pow(3, 10 * n, 7)`` for
    n = 5 is ``3 ** 50 % 7``): square and multiply keeps every value below ``mod ** 2``.
    A traced exponent is read bit by bit, all of its bits, whatever the example's: a
    branch on a bit would be a guard, and the number of bits another (about five scalar
    nodes per bit). With a literal base and modulus whose powers come back to 1 (the
    base's order), only the exponent modulo that order is, in its few bits.

    >>> modular_pow(3, 2, 5)
    4
    """
    if not all(isinstance(v, int) for v in (base, exp, mod)):
        raise TypeError("pow() 3rd argument not allowed unless all arguments are integers")
    if exp < 0:
        raise UnsupportedOpError(
            "cannot trace pow(base, exp, mod) with a negative exponent at "
            f"{user_location() or 'an unknown location'}: Python answers a modular inverse, "
            "which no op of the set computes; compute it outside the traced code"
        )
    if mod == 0:
        raise ValueError("pow() 3rd argument cannot be 0")
    if abs(int.__int__(mod)) > _MODULUS_LIMIT:
        raise UnsupportedOpError(
            f"cannot trace pow(base, exp, mod) with a modulus of {int.__int__(mod)} at "
            f"{user_location() or 'an unknown location'}: the products of its steps reach "
            "the modulus squared, past the 64-bit integers a trace computes with; use a "
            "modulus of at most 2**32, or compute it outside the traced code"
        )
    traced_exp = isinstance(exp, _Traced)
    bits = _EXPONENT_BITS if traced_exp else int.bit_length(exp)
    if traced_exp and not isinstance(base, _Traced) and not isinstance(mod, _Traced):
        order = _order(base, mod)  # pow(3, 10 * n, 7): 3 ** 6 % 7 == 1, three bits
        if order is not None:
            exp, bits = exp % order, int.bit_length(order - 1)
    result, square = 1 % mod, base % mod
    for i in range(bits):
        bit = (exp >> i) & 1
        if traced_exp:
            result = (result * square**bit) % mod  # square ** 0 is 1: no branch on the bit
        elif bit:
            result = (result * square) % mod
        square = (square * square) % mod
    return result


class SymSize(tuple):
    """What ``x.shape`` and ``x.size()`` return while tracing: a tuple of SymInts, and
    what ``torch.Size(sizes)`` makes of traced sizes (trace/patches.py); as torch.Size,
    a slice of it and a tuple added to it are sizes too, and its ``numel`` is traced."""

    def __getitem__(self, index):
        item = tuple.__getitem__(self, index)
        return SymSize(item) if isinstance(index, slice) else item

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return SymSize(tuple.__add__(self, other))

    def numel(self):
        result = 1
        for dim in self:
            result = result * dim
        return result

    def __repr__(self):
        """``torch.Size([2, 3])``, as eager code sees it (a tuple's ``(2, 3)`` would take
        other paths in code that compares the text); the text remembers every size."""
        text = f"torch.Size([{', '.join(str(int.__int__(d)) for d in self)}])"
        traced = [d for d in self if isinstance(d, _Traced)]
        if not traced:
            return text
        return formatted_from(tuple(traced), text, sys._getframe(1), obj=self)

    __str__ = __repr__


_NAMED = re.compile(r"\b(SymInt|SymFloat)\b")


def number_given_for_tensor(exc: TypeError) -> UnsupportedOpError | None:
    """The refusal to raise for a ``TypeError`` that PyTorch's argument parser raised on a
    traced number (``torch.ceil(h / p)``: "must be Tensor, not SymFloat"), else None.

    Eager PyTorch refuses a Python number there too, so such a line is reached only on a
    path that eager code does not take: behind ``torch.jit.is_tracing()``, which answers
    True to library code while tracebridge traces (trace/library.py), written for
    torch.jit.trace, whose sizes are 0-dim tensors. The parser raises before the tracer
    sees the call, so the message names the line from the traceback and says what to do.
    """
    match = _NAMED.search(str(exc))
    if match is None:
        return None
    loc = raised_at(exc)
    line = source_line(loc).strip() if loc else ""
    kind = (
        "size or a number computed from sizes"
        if match.group(1) == "SymInt"
        else ("number computed from sizes")
    )
    return UnsupportedOpError(
        f"a traced {kind} ({match.group(1)}) is passed where PyTorch takes only a tensor, "
        f"at {loc or 'unknown location'}" + (f" (`{line}`)" if line else "") + f": {exc}. "
        "Eager PyTorch refuses a Python number there too; code reaches such a line on a "
        "path written for torch.jit.trace, whose sizes are 0-dim tensors (behind "
        "`torch.jit.is_tracing()`, which is True for library code while tracebridge "
        "traces). A traced float there is taken as a 0-dim tensor, as torch.jit.trace takes "
        "it; an int cannot be (PyTorch's parser reads an int where a list of sizes may "
        "start). Make the tensor explicitly (torch.tensor(h)), or compute the value with "
        "Python arithmetic (math.sqrt(h))"
    )


def _plain(data):
    """``data`` with traced numbers as their values (in lists and tuples too)."""
    if isinstance(data, _Traced):
        return data._concrete()
    if isinstance(data, (list, tuple)):
        plain = [_plain(x) for x in data]
        return plain if isinstance(data, list) else tuple(plain)
    return data


def numbers_given_as_tensors(func, args: tuple, kwargs: dict):
    """``func`` called as eager code calls it with plain numbers: what a traced number in a
    tensor's place means when no recording mode takes the call (the tracer's own eager run
    of a node, or a traced number kept past its trace). PyTorch's refusal names the traced
    type, so that the tracer's message (:func:`number_given_for_tensor`) can say more."""
    try:
        with torch._C.DisableTorchFunction():
            return func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
    except TypeError as exc:
        kinds = sorted({type(a).__name__ for a in _traced_in((args, kwargs))})
        raise TypeError(f"{exc} (a traced number: {', '.join(kinds)})") from None


def _traced_in(data):
    if isinstance(data, _Traced):
        yield data
    elif isinstance(data, (list, tuple)):
        for item in data:
            yield from _traced_in(item)
    elif isinstance(data, dict):
        for item in data.values():
            yield from _traced_in(item)
