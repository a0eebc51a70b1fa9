"""Latency of a loaded tracebridge artifact and of torch.jit.trace on the zoo, against eager.

Run from the repository root, in an environment with the zoo's packages
(``requirements-zoo.txt``):

    .venv/bin/python benchmarks/zoo_speed.py --json /tmp/zoo_speed.json        # the whole zoo
    .venv/bin/python benchmarks/zoo_speed.py --json /tmp/zoo_speed.json --resume --write
    .venv/bin/python benchmarks/zoo_speed.py --only bert --only "timm vit_tiny" --no-grad

For each model: trace it on its first input set cut to batch 1 (tracebridge without
``check_trace``, which changes no graph; torch.jit.trace likewise), save and reload the
artifact, check that the loaded artifact and the TorchScript module give eager's output on
that input, then time eager, the loaded artifact and the TorchScript module under
``torch.no_grad()``, one thread, in interleaved single calls (each contender in a new random
order every round), and keep each one's minimum (the figure least disturbed by other
processes on a shared machine) and its ratio to eager.

The whole zoo runs in bounded time: each model gets ``--budget`` seconds of timed rounds
(between ``--min-rounds`` and ``--rounds`` rounds), and building, tracing, saving and loading
get ``--limit`` seconds. A model that a tool refuses, or gets wrong at the timed input, keeps
a note saying so and stays out of the median. Results go to ``--json`` after every model
(``--resume`` skips the models already there, so an interrupted run goes on; ``--again``
measures them again and keeps each contender's minimum over both runs); the summary is
the median ratio to eager over the models both tools ran right, the figure issue 20
compares, and ``--write`` puts the table into ``benchmarks/RESULTS.md``.

``--frozen`` adds two contenders: ``tracebridge.freeze`` of the loaded artifact (no
per-call state checks, runtime/frozen.py) and ``torch.jit.freeze`` of the torch.jit
module. They stay out of the main median (its set of models is the same with or without
them); the summary gives all four tools' medians over the models all four ran right.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from results_md import write_results  # noqa: E402
from zoo import compare, seeded, short, time_limit  # noqa: E402

TOOLS = ("tracebridge", "jit")
FROZEN = ("tracebridge_frozen", "jit_frozen")  # with --frozen
TAG = "zoo_speed"


def reloaded(traced):
    """``traced`` saved to a temporary file and loaded again: the artifact a user runs."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.tb")
        traced.save(path)
        return tracebridge.load(path)


def _batch_one(inputs: tuple) -> tuple:
    """The first input set cut to batch 1 (every tensor's first dimension)."""
    return tuple(x[:1] if isinstance(x, torch.Tensor) and x.dim() else x for x in inputs)


def timed(fns: dict, rounds: int, min_rounds: int = 1, budget: float | None = None) -> tuple:
    """Minimum seconds per call of each contender over interleaved single calls, and the
    number of rounds run: ``rounds``, or fewer when ``budget`` seconds (estimated from the
    warm-up calls) would not hold them, but never fewer than ``min_rounds``."""
    clock = time.perf_counter
    best = {k: float("inf") for k in fns}
    order = list(fns)
    warm_start = clock()
    for fn in fns.values():
        for _ in range(3):
            fn()
    if budget is not None:
        per_round = (clock() - warm_start) / 3
        rounds = max(min_rounds, min(rounds, int(budget / max(per_round, 1e-9))))
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            start = clock()
            fns[key]()
            best[key] = min(best[key], clock() - start)
    return best, rounds


def _trace_tools(
    model, inputs: tuple, no_grad: bool, entry: dict, jit_copy: bool = False, frozen: bool = False
) -> dict:
    """Each tool's callable (the tracebridge one saved and reloaded); a refusal is noted in
    ``entry`` under the tool's name. ``jit_copy``: torch.jit traces a deep copy of
    ``model``, so that it shares no weights with eager, as the reloaded artifact does
    (see :func:`parse`). ``frozen``: each tool's frozen module too (:data:`FROZEN`)."""
    grad_mode = torch.no_grad() if no_grad else contextlib.nullcontext()
    runners = {}
    for tool in TOOLS:
        try:
            with warnings.catch_warnings(), grad_mode:
                warnings.simplefilter("ignore")
                if tool == "tracebridge":
                    runners[tool] = reloaded(tracebridge.trace(model, inputs, check_trace=False))
                else:
                    source = copy.deepcopy(model) if jit_copy else model
                    runners[tool] = torch.jit.trace(source, inputs, check_trace=False, strict=False)
        except Exception as exc:
            entry[tool] = f"refused: {short(exc)[:200]}"
    if frozen:
        freezers = {"tracebridge_frozen": tracebridge.freeze, "jit_frozen": torch.jit.freeze}
        for tool, source in zip(FROZEN, TOOLS):
            if source not in runners:
                entry[tool] = f"not run: {source} refused"
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    runners[tool] = freezers[tool](runners[source])
            except Exception as exc:
                entry[tool] = f"refused: {short(exc)[:200]}"
    return runners


def measure(
    case,
    rounds: int,
    min_rounds: int,
    budget: float,
    limit: int,
    no_grad: bool,
    jit_copy: bool = False,
    frozen: bool = False,
):
    """One model's entry: each tool's status (``right`` or why not), and the minimum
    microseconds per call of eager and of each tool that is right."""
    entry: dict = {"category": case.category}
    started = time.time()
    torch.manual_seed(0)
    with time_limit(limit):
        model = case.build().eval()
        inputs = _batch_one(case.inputs()[0])
        with torch.no_grad():
            seeded(0)  # each contender's checked call draws what eager's drew (vit_mae's mask)
            expected = model(*inputs)
        runners = _trace_tools(model, inputs, no_grad, entry, jit_copy, frozen)
    fns = {"eager": lambda: model(*inputs)}
    for tool, fn in runners.items():
        try:
            with time_limit(limit), torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                seeded(0)
                diff = compare(expected, fn(*inputs), case.tolerance)
        except Exception as exc:
            diff = f"call failed: {short(exc)[:200]}"
        if diff:
            entry[tool] = f"wrong: {diff}" if not diff.startswith("call failed") else diff
            continue
        entry[tool] = "right"
        fns[tool] = lambda fn=fn: fn(*inputs)
    with torch.no_grad(), warnings.catch_warnings(), time_limit(limit + int(4 * budget)):
        warnings.simplefilter("ignore")
        best, entry["rounds"] = timed(fns, rounds, min_rounds, budget)
    for key, seconds in best.items():
        entry[f"{key}_us"] = round(seconds * 1e6, 1)
    entry["seconds"] = round(time.time() - started, 1)
    return entry


def both_right(models: dict) -> dict:
    """The entries that both tools ran right (the ones the median is over)."""
    return {name: e for name, e in models.items() if all(e.get(t) == "right" for t in TOOLS)}


def ratio(entry: dict, tool: str) -> float | None:
    if entry.get(tool) != "right" or not entry.get("eager_us"):
        return None
    return entry[f"{tool}_us"] / entry["eager_us"]


def medians(models: dict) -> dict[str, float]:
    """Median ratio to eager of each tool over the models both ran right, and the median of
    tracebridge's time over torch.jit's."""
    both = both_right(models)
    if not both:
        return {}
    out = {t: statistics.median(ratio(e, t) for e in both.values()) for t in TOOLS}
    out["tracebridge/jit"] = statistics.median(
        e["tracebridge_us"] / e["jit_us"] for e in both.values()
    )
    out["models"] = len(both)
    every = {n: e for n, e in both.items() if all(e.get(t) == "right" for t in FROZEN)}
    if every:  # --frozen: the four tools over the models all four ran right
        for tool in (*TOOLS, *FROZEN):
            out[f"{tool} (frozen set)"] = statistics.median(ratio(e, tool) for e in every.values())
        out["frozen models"] = len(every)
    return out


def _cell(entry: dict, tool: str) -> list[str]:
    r = ratio(entry, tool)
    if r is None:
        return [entry.get(tool, "not run")[:70].replace("|", "/"), ""]
    return [f"{entry[f'{tool}_us']:.0f}", f"{r:.2f}x"]


def table(models: dict) -> str:
    """The per-model table (markdown), worst tracebridge/jit first, then the models that
    are not in the median."""
    lines = [
        "| model | eager (µs) | tracebridge (µs) | ratio | torch.jit (µs) | ratio | tb / jit |",
        "|---|---|---|---|---|---|---|",
    ]
    both = both_right(models)
    order = sorted(both, key=lambda n: -both[n]["tracebridge_us"] / both[n]["jit_us"])
    order += [n for n in models if n not in both]
    for name in order:
        e = models[name]
        if "error" in e:
            lines.append(f"| {name} | {e['error'][:90].replace('|', '/')} ||||||")
            continue
        tb_jit = f"{e['tracebridge_us'] / e['jit_us']:.2f}" if name in both else "not in the median"
        cells = [f"{e['eager_us']:.0f}", *_cell(e, "tracebridge"), *_cell(e, "jit"), tb_jit]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(models: dict) -> str:
    m = medians(models)
    if not m:
        return "no model was run right by both tools"
    line = (
        f"Median ratio to eager over the {m['models']} models both tools ran right: "
        f"tracebridge {m['tracebridge']:.2f}x, torch.jit {m['jit']:.2f}x "
        f"(median tracebridge / torch.jit {m['tracebridge/jit']:.2f})."
    )
    if "frozen models" in m:
        cells = ", ".join(f"{t} {m[f'{t} (frozen set)']:.3f}x" for t in (*TOOLS, *FROZEN))
        line += f" Over the {m['frozen models']} models all four ran right: {cells}."
    return line


def report(results: dict) -> str:
    """The RESULTS.md block: how it was run, the summary line, the table."""
    meta = results.get("_meta", {})
    head = (
        f"`{meta.get('command', 'benchmarks/zoo_speed.py')}` ({meta.get('platform', '')}, "
        f"torch {meta.get('torch', '?')}, 1 thread, minimum of interleaved calls over "
        f"{meta.get('runs', 1)} run(s) (rounds per model in the JSON), load average "
        f"{meta.get('load', '?')} at the start of each run, "
        f"{meta.get('date', '?')}):"
    )
    models = results.get("models", {})
    return f"{head}\n\n{summary(models)}\n\n{table(models)}"


def merged(before: dict | None, now: dict) -> dict:
    """A model measured again (``--again``): each contender's minimum over both runs (the
    same statistic over more rounds), where both runs ran it right; otherwise the new run."""
    if not before or "error" in before or "error" in now:
        return now
    if any(before.get(t) != now.get(t) for t in (*TOOLS, *FROZEN)):
        return now
    out = dict(now)
    for key in now:
        if key.endswith("_us") and key in before:
            out[key] = min(before[key], now[key])
    out["rounds"] = before.get("rounds", 0) + now.get("rounds", 0)
    out["seconds"] = round(before.get("seconds", 0) + now.get("seconds", 0), 1)
    return out


def _save(path: str | None, results: dict) -> None:
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def run(cases: list, args: argparse.Namespace, results: dict) -> dict:
    """Measure every case not in ``results`` yet, saving after each."""
    models = results.setdefault("models", {})
    for case in cases:
        if case.name in models and not args.again:
            continue
        try:
            entry = measure(
                case,
                args.rounds,
                args.min_rounds,
                args.budget,
                args.limit,
                args.no_grad,
                args.jit_copy,
                args.frozen,
            )
        except Exception as exc:
            entry = {"category": case.category, "error": short(exc)[:300]}
        models[case.name] = merged(models.get(case.name), entry)
        _save(args.json, results)
        print(f"{case.name}: {json.dumps(entry)}", flush=True)
    return results


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="zoo model name (default: all)")
    parser.add_argument("--rounds", type=int, default=200, help="most interleaved calls")
    parser.add_argument("--min-rounds", type=int, default=10, help="fewest interleaved calls")
    parser.add_argument("--budget", type=float, default=10.0, help="timing seconds per model")
    parser.add_argument("--limit", type=int, default=300, help="build+trace seconds per model")
    parser.add_argument("--no-grad", action="store_true", help="trace under torch.no_grad()")
    # Note: the reloaded artifact reads weights of its own, and torch.jit.trace's module
    # those of the eager model it traced; in interleaved calls an eager call just before
    # a torch.jit call leaves torch.jit's weights in the cache. A copy traced beside it
    # took longer by a paired median of 2.7% (mobilenet_v3_small), 1.8% (efficientnet_b0),
    # 0 (timm convnext_atto) over 200 rounds. --jit-copy times such a copy.
    parser.add_argument(
        "--jit-copy", action="store_true", help="torch.jit traces a copy: no weights shared"
    )
    parser.add_argument(
        "--frozen", action="store_true", help="also tracebridge.freeze and torch.jit.freeze"
    )
    parser.add_argument("--json", help="per-model results, written after every model")
    parser.add_argument("--resume", action="store_true", help="skip models in --json")
    parser.add_argument(
        "--again", action="store_true", help="measure models in --json again, keep the minimum"
    )
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, cases: list | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    if cases is None:
        from zoo_models import all_cases

        cases = all_cases()
    if args.only:
        known = {c.name: c for c in cases}
        missing = [n for n in args.only if n not in known]
        if missing:
            raise SystemExit(f"zoo_speed: no zoo model named {missing}; see zoo_models.py")
        cases = [known[n] for n in args.only]
    results: dict = {}
    if (args.resume or args.again) and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            results = json.load(f)
    results.setdefault(
        "_meta",
        {
            "command": "benchmarks/zoo_speed.py " + " ".join(argv or sys.argv[1:]),
            "date": datetime.date.today().isoformat(),
            "torch": torch.__version__,
            "platform": f"{os.uname().machine}, {os.cpu_count()} cores",
            "load": f"{os.getloadavg()[0]:.1f}",
        },
    )
    if args.again:  # each run's start load, for the record
        meta = results["_meta"]
        meta["load"] = f"{meta.get('load', '?')}, {os.getloadavg()[0]:.1f}"
        meta["runs"] = meta.get("runs", 1) + 1
    run(cases, args, results)
    print(f"\n{table(results['models'])}\n\n{summary(results['models'])}")
    if args.write:
        write_results(report(results), TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
