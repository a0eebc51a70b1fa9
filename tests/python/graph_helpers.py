"""Helpers the runtime and tracer tests share: a traced graph's ops, a save/load round
trip, and a counter of the calls that run a cached block as traced."""

from __future__ import annotations

import tracebridge


def ops_of(traced) -> list[str]:
    """The ops of ``traced``'s forward graph, in order."""
    return [n.op for n in traced.program.methods["forward"].nodes]


def loaded(traced, tmp_path, **load_options):
    """``traced`` saved under ``tmp_path`` and loaded again (``load_options`` go to
    :func:`tracebridge.load`, e.g. ``runtime=``)."""
    path = tmp_path / "m.tb"
    traced.save(path)
    return tracebridge.load(path, **load_options)


def counting(runner) -> list:
    """Record each key a memo or views runner computes as traced (not from its cache)."""
    calls = []
    inner = runner.function

    def counted(*key):
        calls.append(key)
        return inner(*key)

    runner.function = counted
    return calls
