"""Check that a value a functools cache hands the code is not changed by the code.

Why: a traced size in a cache's key misses (trace/caches.py), so the trace computes the
cached value on every call. Eager computes it once per key and hands the same object to
every later call: where the code changes it after the lookup -- appends to a cached list,
writes into a cached numpy array (``a = table(n); a += 1``), which no recorded op shows
-- the second eager call differs from the trace's. (A tensor written in place by a
recorded op is refused when recorded: trace/cache_values.py.) So where the recording went
through a functools cache, the code is called twice from the caches as the trace found
them, the trace twice too, and the second results must agree; where they do not, the
trace is refused, naming the caches.
"""

from __future__ import annotations

from ..errors import GuardError
from ..trace import cache_values
from ..trace.capture import preserved
from .compare import compare_outputs, fresh


def check_cached_values(eager_fn, traced_method, args, kwargs, tolerance, module, label) -> None:
    """Raise :class:`TracingCheckError` where the code's second call gets a cached value
    its first call changed, and so differs from the trace's second call."""
    caches = cache_values.used()
    if not caches:
        return
    cache_values.put_back_all()
    try:
        with preserved(module):
            a, k = fresh(args, kwargs)
            eager_fn(*a, **k)
            # Tensors and numbers only (a rotary table): nothing Python code could change
            # unseen, and a write into a tensor was refused when recorded. Done.
            if not cache_values.holds_mutable(caches):
                return
            a, k = fresh(args, kwargs)
            expected = eager_fn(*a, **k)
    finally:
        cache_values.put_back_all()
    try:
        with preserved(module):
            for _ in range(2):
                a, k = fresh(args, kwargs)
                got = traced_method(*a, **k)
    except GuardError:
        return  # the trace refuses the second call: no wrong answer
    names = ", ".join(getattr(c, "__qualname__", "a cache") for c in caches[:3])
    hint = (
        f"\n  the functools cache(s) {names} hand the code's second call what its first "
        "call stored, and the code changes that value after the lookup (a cached list "
        "appended to, a cached array written in place): eager returns the changed value on "
        "every later call with the key, a trace computes it afresh. Change a copy of the "
        "cached value, or take the cache away"
    )
    compare_outputs(expected, got, tolerance, f"{label}, called a second time", hint)
