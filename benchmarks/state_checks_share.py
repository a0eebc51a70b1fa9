"""What the per-call state checks cost a loaded artifact in the interleaved zoo benchmark.

Note: a measurement for an API decision, not a mode of the runtime.
  benchmarks/state_checks.py times the checks alone. This times whole calls the way
  benchmarks/zoo_speed.py does (single calls of eager, the loaded artifact and torch.jit,
  interleaved in a random order, one thread, each one's minimum), with one contender more:
  a second load of the same file whose checks are patched out (:func:`unchecked`: the
  fold returns its values without looking at the state, the state's types are taken as
  plain). That second load is what an opt-in frozen mode (``torch.jit.freeze``'s promise:
  the state does not change) would run; it is wrong after any change of the state, so it
  is only ever made here, and its output is checked against the checked load's, bit for
  bit, before timing.

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/state_checks_share.py \\
        --only mobilenet_v3_small --only mnasnet0_5
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from state_checks import checks_of  # noqa: E402
from tracebridge.runtime import folding, lean  # noqa: E402
from zoo_speed import _batch_one, reloaded  # noqa: E402


class _UncheckedFold(folding.Folded):
    """A fold that returns the values it keeps without checking the state they came from."""

    def __call__(self) -> tuple:
        if self.entry is None:
            return folding.Folded.__call__(self)
        return self.entry[5]


class _UncheckedTypes(lean.StateTypes):
    """State types taken as plain without reading them."""

    __slots__ = ()

    def plain(self) -> bool:
        return True


def unsealed(loaded):
    """``loaded`` with its seal broken (runtime/sealed.py), before any call: its code checks
    the state on every call, the checks this measures."""
    seal = loaded.__dict__.get("_tb_seal")
    if seal is not None:
        seal.break_()
    return loaded


def unchecked(loaded, inputs: tuple):
    """``loaded`` (a loaded artifact, called once here) with the state checks of its code
    for calls without autograd patched out: for this measurement only."""
    found = checks_of(unsealed(loaded), inputs)
    if found["fold"] is not None:
        found["fold"].__class__ = _UncheckedFold
    if found["types"] is not None:
        found["types"].__class__ = _UncheckedTypes
    return loaded


def interleaved(fns: dict, rounds: int) -> dict:
    """Minimum microseconds per call of each of ``fns``, single calls in a random order."""
    clock = time.perf_counter
    best = {key: float("inf") for key in fns}
    order = list(fns)
    for run in fns.values():
        for _ in range(3):
            run()
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            start = clock()
            fns[key]()
            best[key] = min(best[key], clock() - start)
    return {key: round(seconds * 1e6, 1) for key, seconds in best.items()}


def measure(model, inputs: tuple, rounds: int) -> dict:
    """Microseconds per call of eager, the loaded artifact, the same without its state
    checks, and torch.jit, under ``torch.no_grad()``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(model, inputs, check_trace=False)
        checked = unsealed(reloaded(traced))
        bare = unchecked(reloaded(traced), inputs)
        scripted = torch.jit.trace(model, inputs, check_trace=False, strict=False)
    with torch.no_grad():
        same = torch.equal(checked(*inputs), bare(*inputs))
        if not same:
            raise AssertionError("the unchecked load's output differs from the checked one's")
        return interleaved(
            {
                "eager": lambda: model(*inputs),
                "tracebridge": lambda: checked(*inputs),
                "unchecked": lambda: bare(*inputs),
                "jit": lambda: scripted(*inputs),
            },
            rounds,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="zoo model name (default: all)")
    parser.add_argument("--rounds", type=int, default=100, help="interleaved calls of each")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from zoo_models import all_cases

    for case in all_cases():
        if args.only and case.name not in args.only:
            continue
        torch.manual_seed(0)
        model = case.build().eval()
        best = measure(model, _batch_one(case.inputs()[0]), args.rounds)
        ratios = {k: best[k] / best["jit"] for k in ("tracebridge", "unchecked")}
        print(
            f"{case.name}: {best} tracebridge / jit {ratios['tracebridge']:.3f}, "
            f"unchecked / jit {ratios['unchecked']:.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
