"""What a loaded artifact's per-call state checks cost, with the caches warm and cold.

Note: why a convolutional network is slower than torch.jit in an interleaved benchmark.
  A call without autograd of a loaded artifact first checks the state it kept values
  from (runtime/folding.py, ``Folded``: each source tensor's identity in its slot, its
  version and data pointer; a ResNet's folded batch norms key on six tensors each) and
  the types of the state it reads (runtime/lean.py, ``StateTypes``). Run again and
  again, this is about 0.2 us a tensor. Right after another model ran (as in
  benchmarks/zoo_speed.py, where eager, torch.jit and tracebridge calls interleave),
  each tensor's Python object, ``TensorImpl``, version counter and storage are out of
  the cache, and each check waits on a chain of misses: 0.5-1.5 us a tensor, 2-8% of a
  call of a network with hundreds of small state tensors (densenet121: 961 reads a call,
  0.5-0.8 ms). torch.jit checks nothing; its graph reads only the tensors its ops use.
  This script measures both, per zoo model:

      PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/state_checks.py \\
          --only densenet121 --only mobilenet_v3_small

  "cold" is the median of the check right after a torch.jit call of the same model (its
  own copy of the weights), "warm" the median of the same check again at once.
  ``--passes`` also times the fold check's passes over its sources one by one (slot
  reads; reads and versions; reads and data pointers; all three): each pass reads memory
  of its own (the Python object, the ``TensorImpl`` and version counter, the storage), so
  merging passes moves the cold misses but does not remove them (session 20).
"""

from __future__ import annotations

import argparse
import copy
import json
import operator
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from tracebridge.runtime import folding, lean  # noqa: E402
from zoo_speed import _batch_one, reloaded  # noqa: E402


def checks_of(loaded, inputs: tuple) -> dict:
    """The state checks the code for calls without autograd of ``loaded``'s forward runs
    on each call: ``{"fold": Folded or None, "types": StateTypes or None}`` (the code is
    made by one call under ``torch.no_grad()``)."""
    with torch.no_grad():
        loaded(*inputs)
    method = loaded._methods["forward"]
    function = method._compiled[(True, True)]
    found: dict = {"fold": None, "types": None}
    for value in (function.__kwdefaults__ or {}).values():
        if isinstance(value, folding.Folded):
            found["fold"] = value
        elif isinstance(value, lean.StateTypes):
            found["types"] = value
    return found


def cold_and_warm(check, disturb, rounds: int) -> tuple[float, float]:
    """Median seconds of ``check()`` right after ``disturb()`` and at once again."""
    clock = time.perf_counter
    cold, warm = [], []
    for _ in range(rounds):
        disturb()
        start = clock()
        check()
        cold.append(clock() - start)
        start = clock()
        check()
        warm.append(clock() - start)
    return statistics.median(cold), statistics.median(warm)


def fold_passes(fold) -> dict:
    """The fold check's passes over its sources, each as a function of its own: the slot
    reads alone, then with the versions, with the data pointers, with both."""
    owners, keys, read = fold.owners, fold.keys, operator.getitem
    version, pointer = operator.attrgetter("_version"), torch.Tensor.data_ptr

    def both():
        tensors = list(map(read, owners, keys))
        return list(map(version, tensors)), list(map(pointer, tensors))

    return {
        "reads": lambda: list(map(read, owners, keys)),
        "reads_versions": lambda: list(map(version, map(read, owners, keys))),
        "reads_pointers": lambda: list(map(pointer, map(read, owners, keys))),
        "reads_versions_pointers": both,
    }


def measure(model, inputs: tuple, rounds: int, passes: bool = False) -> dict:
    """Counts and microseconds of ``model``'s state checks, loaded from a saved trace,
    and of a whole call, cold (after a torch.jit call of a copy of ``model``) and warm;
    ``passes``: the fold check's passes too (:func:`fold_passes`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(model, inputs, check_trace=False)
        loaded = reloaded(traced)
        other = torch.jit.trace(copy.deepcopy(model), inputs, check_trace=False, strict=False)
    checks = checks_of(loaded, inputs)
    fold, types = checks["fold"], checks["types"]
    entry = {
        "fold_tensors": len(fold.keys) if fold is not None else 0,
        "type_tensors": len(types.keys) if types is not None else 0,
    }
    timed = {"fold": fold, "types": types.plain if types is not None else None}
    timed["call"] = lambda: loaded(*inputs)
    if passes and fold is not None:
        timed.update(fold_passes(fold))
    with torch.no_grad():
        for name, check in timed.items():
            if check is None:
                continue
            cold, warm = cold_and_warm(check, lambda: other(*inputs), rounds)
            entry[f"{name}_cold_us"] = round(cold * 1e6, 1)
            entry[f"{name}_warm_us"] = round(warm * 1e6, 1)
    checked = entry.get("fold_cold_us", 0) + entry.get("types_cold_us", 0)
    entry["cold_share"] = round(checked / entry["call_cold_us"], 4)
    return entry


def main(argv: list[str] | None = None, cases: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="zoo model name (default: all)")
    parser.add_argument("--rounds", type=int, default=40, help="cold and warm samples")
    parser.add_argument("--passes", action="store_true", help="the fold check's passes too")
    parser.add_argument("--json", help="write the entries here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if cases is None:
        from zoo_models import all_cases

        cases = all_cases()
    if args.only:
        cases = [c for c in cases if c.name in set(args.only)]
    results = {}
    for case in cases:
        torch.manual_seed(0)
        model = case.build().eval()
        entry = measure(model, _batch_one(case.inputs()[0]), args.rounds, args.passes)
        results[case.name] = entry
        print(f"{case.name}: {json.dumps(entry)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
