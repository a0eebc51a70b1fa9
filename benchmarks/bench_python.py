"""Side-by-side benchmarks: tracebridge against eager PyTorch, torch.jit.trace, torch.export.

Run from the repository root:

    .venv/bin/python benchmarks/bench_python.py            # all models, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/bench_python.py --quick    # a few models, fewer repeats
    .venv/bin/python benchmarks/bench_python.py --write    # also write benchmarks/RESULTS.md

It measures, on the conformance zoo (tests/python/models.py):
  1. trace time: tracebridge.trace(check_trace=True) vs torch.jit.trace(check_trace=True) vs
     torch.export.export;
  2. per-call latency at batch 1 and 32: eager vs the *loaded* tracebridge artifact (codegen
     runtime) vs the torch.jit.trace'd module, and the loaded artifact with its guards off
     (``tracebridge.guards_disabled()``, entered once around a block of calls);
  3. save time, load time and file size: tracebridge.save/load vs torch.jit.save/load.

Note: how it measures. Every number is the median over many repeats; within a repeat the
contenders run one after another in a shuffled order, so that a slow spell of the machine
(thermal, another process) falls on all of them alike instead of on whichever ran last. Each
contender is warmed up first (torch.jit's profiling executor optimises only after a few calls).
Latency is measured under ``torch.no_grad()`` by default, as for inference; ``--grad`` measures
with autograd on. ``--threads 1`` (the default) pins torch to one thread, which gives the most
stable per-call figures on a small machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import tracebridge  # noqa: E402
from models import CASES, Case  # noqa: E402

QUICK_MODELS = ["mlp", "resnet", "transformer", "tiny_gpt"]
# Multi-method modules go through trace_module; the latency table is about forward.
SKIP = {"two_methods"}
BATCHES = (1, 32)


# --------------------------------------------------------------------------- timing


Contender = Callable[[], Any]

# The clock every figure is read from (see --clock); a list so that main() can set it.
CLOCK: list[Callable[[], float]] = [time.perf_counter]
# The statistic over repeats (see --stat): the median, or the minimum (the figure least
# disturbed by other processes on a shared machine).
STAT: list[Callable[[list[float]], float]] = [statistics.median]
TRACE_NO_GRAD: list[bool] = [False]  # see --trace-no-grad


@dataclass
class Within:
    """A contender that runs inside a context (entered once per block, not once per call)."""

    fn: Contender
    context: Callable[[], contextlib.AbstractContextManager]

    def __call__(self) -> Any:
        with self.context():
            return self.fn()


def _time_block(fn: Contender, n: int) -> float:
    """Seconds per call over a block of ``n`` calls."""
    context = fn.context() if isinstance(fn, Within) else contextlib.nullcontext()
    call = fn.fn if isinstance(fn, Within) else fn
    with context:
        start = CLOCK[0]()
        for _ in range(n):
            call()
        return (CLOCK[0]() - start) / n


def _calls_per_block(fns: dict[str, Contender], target_s: float) -> int:
    """Enough calls that the slowest contender's block takes about ``target_s``."""
    slowest = max(_time_block(fn, 1) for fn in fns.values())
    return max(1, min(1000, int(target_s / max(slowest, 1e-7))))


def _medians(fns: dict[str, Contender], repeats: int, n: int) -> dict[str, float]:
    """Median seconds per call of each contender over ``repeats`` blocks of ``n`` calls, the
    contenders in a new random order in every repeat."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for _ in range(repeats):
        random.shuffle(order)
        for key in order:
            samples[key].append(_time_block(fns[key], n))
    return {k: STAT[0](v) for k, v in samples.items()}


def interleaved(
    fns: dict[str, Contender], repeats: int, warmup: int = 3, target_s: float = 0.01
) -> dict[str, float]:
    """Per-call latency: warmed up, in blocks long enough to read a clock over."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    return _medians(fns, repeats, _calls_per_block(fns, target_s))


def interleaved_once(fns: dict[str, Contender], repeats: int) -> dict[str, float]:
    """One call per sample, for operations too slow to block (tracing, saving, loading)."""
    return _medians(fns, repeats, 1)


# --------------------------------------------------------------------------- contenders


@dataclass
class Cell:
    """One measured figure or the reason there is none."""

    seconds: float | None = None
    note: str = ""

    def ms(self) -> str:
        return self._fmt(1e3)

    def us(self) -> str:
        return self._fmt(1e6)

    def _fmt(self, scale: float) -> str:
        if self.seconds is None:
            return self.note or "n/a"
        value = self.seconds * scale
        text = f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"
        return text + self.note


@dataclass
class ModelResult:
    name: str
    trace: dict[str, Cell] = field(default_factory=dict)
    latency: dict[int, dict[str, Cell]] = field(default_factory=dict)
    io: dict[str, Cell] = field(default_factory=dict)
    sizes: dict[str, int | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


def _tracing_mode() -> contextlib.AbstractContextManager:
    """Autograd while tracing: on (the default), or off with --trace-no-grad (inference
    graphs: both tracers then record the fused paths eager takes without autograd)."""
    return torch.no_grad() if TRACE_NO_GRAD[0] else contextlib.nullcontext()


def jit_trace(case: Case, check: bool) -> Any:
    with warnings.catch_warnings(), _tracing_mode():
        warnings.simplefilter("ignore")
        return torch.jit.trace(
            case.model, case.example_inputs, check_trace=check, **case.trace_kwargs
        )


def export(case: Case) -> Any:
    with warnings.catch_warnings(), _tracing_mode():
        warnings.simplefilter("ignore")
        return torch.export.export(case.model, case.example_inputs)


def tb_trace(case: Case) -> Any:
    with warnings.catch_warnings(), _tracing_mode():
        warnings.simplefilter("ignore")
        return tracebridge.trace(
            case.model, case.example_inputs, check_trace=case.check_trace_ok, **case.trace_kwargs
        )


# --------------------------------------------------------------------------- the measurements


def measure_trace(case: Case, result: ModelResult, repeats: int) -> tuple[Any, Any]:
    """Trace times; returns the tracebridge and the torch.jit traced objects (or None)."""
    fns: dict[str, Callable[[], Any]] = {}
    tb = jt = None
    try:
        tb = tb_trace(case)
        fns["tracebridge"] = lambda: tb_trace(case)
    except Exception as exc:
        result.trace["tracebridge"] = Cell(note="error")
        result.errors.append(f"tracebridge.trace: {_short(exc)}")
    jit_check = case.check_trace_ok
    try:
        jt = jit_trace(case, jit_check)
    except Exception as exc:
        # torch.jit.trace's own check refuses some models (its graphs differ between runs on
        # nn.MultiheadAttention): time it without the check, and say so.
        result.errors.append(f"torch.jit.trace(check_trace=True): {_short(exc)}")
        jit_check = False
        try:
            jt = jit_trace(case, False)
        except Exception as exc2:
            result.trace["torch.jit.trace"] = Cell(note="error")
            result.errors.append(f"torch.jit.trace: {_short(exc2)}")
    if jt is not None:
        fns["torch.jit.trace"] = lambda: jit_trace(case, jit_check)
    try:
        export(case)
        fns["torch.export"] = lambda: export(case)
    except Exception as exc:
        result.trace["torch.export"] = Cell(note="error")
        result.errors.append(f"torch.export.export: {_short(exc)}")
    for key, seconds in interleaved_once(fns, repeats).items():
        note = ""
        if key == "torch.jit.trace" and case.check_trace_ok and not jit_check:
            note = " †"
        elif not case.check_trace_ok and key != "torch.export":
            note = " ‡"
        result.trace[key] = Cell(seconds, note)
    return tb, jt


def measure_io(case: Case, tb: Any, jt: Any, result: ModelResult, repeats: int, tmp: Path) -> Any:
    """Save and load times and sizes; returns the tracebridge artifact loaded with codegen."""
    loaded = None
    fns: dict[str, Callable[[], Any]] = {}
    if tb is not None:
        path = str(tmp / f"{case.name}.tb")
        try:
            tracebridge.save(tb, path)
            loaded = tracebridge.load(path, runtime="codegen")
            result.sizes["tracebridge"] = os.path.getsize(path)
            fns["tracebridge save"] = lambda: tracebridge.save(tb, path)
            fns["tracebridge load"] = lambda: tracebridge.load(path, runtime="codegen")
        except Exception as exc:
            result.errors.append(f"tracebridge save/load: {_short(exc)}")
    if jt is not None:
        jpath = str(tmp / f"{case.name}.pt")
        try:
            torch.jit.save(jt, jpath)
            torch.jit.load(jpath)
            result.sizes["torch.jit"] = os.path.getsize(jpath)
            fns["torch.jit save"] = lambda: torch.jit.save(jt, jpath)
            fns["torch.jit load"] = lambda: torch.jit.load(jpath)
        except Exception as exc:
            result.errors.append(f"torch.jit save/load: {_short(exc)}")
    result.io = {k: Cell(v) for k, v in interleaved_once(fns, repeats).items()}
    return loaded


def measure_latency(
    case: Case, loaded: Any, jt: Any, result: ModelResult, repeats: int, grad: bool
) -> None:
    for batch in BATCHES:
        inputs = case.make_inputs(batch)
        fns: dict[str, Callable[[], Any]] = {"eager": lambda inputs=inputs: case.model(*inputs)}
        if loaded is not None:
            fns["tracebridge"] = lambda inputs=inputs: loaded(*inputs)
        if jt is not None:
            fns["torch.jit"] = lambda inputs=inputs: jt(*inputs)
        ctx = contextlib.nullcontext() if grad else torch.no_grad()
        cells: dict[str, Cell] = {}
        with ctx:
            for key in list(fns):
                if key == "eager":
                    continue
                try:
                    fns[key]()
                except Exception as exc:
                    del fns[key]
                    cells[key] = Cell(note="error")
                    result.errors.append(f"{key} at batch {batch}: {_short(exc)}")
            if "tracebridge" in fns and hasattr(tracebridge, "guards_disabled"):
                fns["tracebridge, guards off"] = Within(
                    fns["tracebridge"], tracebridge.guards_disabled
                )
            timed = interleaved(fns, repeats)
        cells.update({k: Cell(v) for k, v in timed.items()})
        result.latency[batch] = cells


# --------------------------------------------------------------------------- tables


def _ratio(a: Cell | None, b: Cell | None) -> str:
    if a is None or b is None or a.seconds is None or b.seconds is None:
        return "n/a"
    return f"{a.seconds / b.seconds:.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _kb(size: int | None) -> str:
    return "n/a" if size is None else f"{size / 1024:.0f}"


def render(results: list[ModelResult], args: argparse.Namespace) -> str:
    out = [
        "## Benchmarks (Python)",
        "",
        f"`{' '.join(['.venv/bin/python', 'benchmarks/bench_python.py', *sys.argv[1:]])}` on "
        f"{platform.machine()} {_cpu_name()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"{'autograd on' if args.grad else 'torch.no_grad()'}, "
        f"{'traced under torch.no_grad(), ' if args.trace_no_grad else ''}"
        f"{'thread CPU time' if args.clock == 'cpu' else 'wall-clock time'}, "
        f"{args.repeats} repeats ({args.stat}), load average {os.getloadavg()[0]:.1f} at the end, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "### Trace time (ms; lower is better)",
        "",
    ]
    rows = []
    for r in results:
        t = r.trace
        rows.append(
            [
                r.name,
                t.get("tracebridge", Cell()).ms(),
                t.get("torch.jit.trace", Cell()).ms(),
                t.get("torch.export", Cell()).ms(),
                _ratio(t.get("tracebridge"), t.get("torch.jit.trace")),
            ]
        )
    out.append(
        _table(
            [
                "model",
                "tracebridge (check_trace)",
                "torch.jit.trace (check_trace)",
                "torch.export",
                "tracebridge / jit",
            ],
            rows,
        )
    )
    notes = " ".join(r.trace.get(k, Cell()).note for r in results for k in r.trace)
    if "†" in notes:
        out += [
            "",
            "† torch.jit.trace's own check fails on this model: timed with check_trace=False.",
        ]
    if "‡" in notes:
        out += ["", "‡ the case expects check_trace to fail: both tracers ran without it."]
    for batch in BATCHES:
        out += ["", f"### Per-call latency at batch {batch} (µs; ratio to eager)", ""]
        rows = []
        guard_col = any("tracebridge, guards off" in r.latency.get(batch, {}) for r in results)
        for r in results:
            cells = r.latency.get(batch, {})
            eager = cells.get("eager")
            row = [
                r.name,
                (eager or Cell()).us(),
                cells.get("tracebridge", Cell()).us(),
                _ratio(cells.get("tracebridge"), eager),
                cells.get("torch.jit", Cell()).us(),
                _ratio(cells.get("torch.jit"), eager),
                _ratio(cells.get("tracebridge"), cells.get("torch.jit")),
            ]
            if guard_col:
                off = cells.get("tracebridge, guards off")
                row += [(off or Cell()).us(), _ratio(cells.get("tracebridge"), off)]
            rows.append(row)
        header = ["model", "eager", "tracebridge (loaded)", "ratio", "torch.jit", "ratio"]
        header += ["tracebridge / jit"]
        if guard_col:
            header += ["tracebridge, guards off", "guard overhead"]
        out.append(_table(header, rows))
    if not any("tracebridge, guards off" in c for r in results for c in r.latency.values()):
        out += ["", "Guard overhead: not measured (this tracebridge has no `guards_disabled()`)."]
    out += ["", "### Save and load (ms) and file size (KiB)", ""]
    rows = []
    for r in results:
        io = r.io
        rows.append(
            [
                r.name,
                io.get("tracebridge save", Cell()).ms(),
                io.get("tracebridge load", Cell()).ms(),
                _kb(r.sizes.get("tracebridge")),
                io.get("torch.jit save", Cell()).ms(),
                io.get("torch.jit load", Cell()).ms(),
                _kb(r.sizes.get("torch.jit")),
            ]
        )
    out.append(
        _table(
            [
                "model",
                "tracebridge save",
                "tracebridge load (codegen)",
                "size",
                "torch.jit save",
                "torch.jit load",
                "size",
            ],
            rows,
        )
    )
    out += ["", "### Targets", ""] + _targets(results)
    errors = [f"- {r.name}: {e}" for r in results for e in r.errors]
    if errors:
        out += ["", "### Errors and fallbacks", "", *errors]
    return "\n".join(out) + "\n"


def _targets(results: list[ModelResult]) -> list[str]:
    lines = []
    for r in results:
        if r.name not in ("resnet", "transformer"):
            continue
        cells = r.latency.get(1, {})
        tb, eager = cells.get("tracebridge"), cells.get("eager")
        if tb and eager and tb.seconds is not None and eager.seconds:
            ratio = tb.seconds / eager.seconds
            verdict = "met" if ratio <= 1.05 else "MISSED"
            lines.append(
                f"- loaded artifact <= 1.05x eager at batch 1, {r.name}: {ratio:.2f}x, {verdict}"
            )
        else:
            lines.append(f"- loaded artifact <= 1.05x eager at batch 1, {r.name}: not measured")
    slower = []
    for r in results:
        tb, jt = r.trace.get("tracebridge"), r.trace.get("torch.jit.trace")
        if jt is not None and "†" in jt.note:
            continue  # torch.jit.trace ran without its check: not the same work
        both = tb and jt and tb.seconds is not None and jt.seconds is not None
        if both and tb.seconds > jt.seconds:
            slower.append(f"{r.name} ({tb.seconds / jt.seconds:.2f}x)")
    measured = sum(
        1
        for r in results
        if r.trace.get("tracebridge", Cell()).seconds is not None
        and "†" not in r.trace.get("torch.jit.trace", Cell()).note
    )
    verdict = "met" if not slower else "MISSED on " + ", ".join(slower)
    lines.append(
        f"- tracing no slower than torch.jit.trace with check_trace=True ({measured} models): "
        f"{verdict}"
    )
    lines.append(_against_jit(results))
    return lines


def _against_jit(results: list[ModelResult]) -> str:
    """Issue 20's goal: the loaded artifact at batch 1 no slower than torch.jit.trace."""
    compared, behind = 0, []
    for r in results:
        cells = r.latency.get(1, {})
        tb, jt = cells.get("tracebridge"), cells.get("torch.jit")
        if not (tb and jt and tb.seconds is not None and jt.seconds is not None):
            continue
        compared += 1
        if tb.seconds > jt.seconds:
            behind.append(f"{r.name} ({tb.seconds / jt.seconds:.2f}x)")
    verdict = "met" if not behind else "MISSED on " + ", ".join(behind)
    return f"- loaded artifact <= torch.jit at batch 1 ({compared} models): {verdict}"


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "CPU"


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few models, fewer repeats")
    parser.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--repeats", type=int, default=None, help="latency repeats per contender")
    parser.add_argument("--grad", action="store_true", help="time calls with autograd on")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default=None,
        help="wall: time.perf_counter; cpu: the calling thread's CPU time, which a busy "
        "machine does not inflate (only meaningful with --threads 1). Default: cpu with one "
        "thread, else wall",
    )
    parser.add_argument("--models", nargs="*", help="model names from the zoo")
    parser.add_argument(
        "--stat", choices=["median", "min"], default="median", help="statistic over repeats"
    )
    parser.add_argument(
        "--trace-no-grad", action="store_true", help="trace under torch.no_grad() (both tracers)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock is None:
        args.clock = "cpu" if torch.get_num_threads() == 1 else "wall"
    CLOCK[0] = time.thread_time if args.clock == "cpu" else time.perf_counter
    STAT[0] = min if args.stat == "min" else statistics.median
    TRACE_NO_GRAD[0] = args.trace_no_grad
    if args.repeats is None:
        args.repeats = 7 if args.quick else 31
    trace_repeats = 3 if args.quick else 9
    names = args.models or (QUICK_MODELS if args.quick else [n for n in CASES if n not in SKIP])
    random.seed(0)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            case = CASES[name]()
            result = ModelResult(name)
            print(f"[bench] {name}: tracing", file=sys.stderr, flush=True)
            tb, jt = measure_trace(case, result, trace_repeats)
            print(f"[bench] {name}: save/load", file=sys.stderr, flush=True)
            loaded = measure_io(case, tb, jt, result, trace_repeats, Path(tmp))
            print(f"[bench] {name}: latency", file=sys.stderr, flush=True)
            measure_latency(case, loaded, jt, result, args.repeats, args.grad)
            results.append(result)
    text = render(results, args)
    print(text)
    if args.write:
        (ROOT / "benchmarks" / "RESULTS.md").write_text(text)
        print(f"[bench] wrote {ROOT / 'benchmarks' / 'RESULTS.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
