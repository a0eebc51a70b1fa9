"""Instructions a call runs, counted by valgrind's callgrind: a figure no other job moves.

Note: why count. The machine the benchmarks run on is shared (load 3-15): a model's time
moves by 5-10% between runs, more than most runtime changes win. Callgrind counts the
instructions the calls execute, the same on a busy machine and a quiet one; it does not
see what a cache miss costs (the per-call state check's cold cost: benchmarks/state_checks.py),
so the two answer different questions. This script saves each model once (the loaded
tracebridge artifact, ``torch.jit.trace`` of the model, the inputs), then runs, in a child
process under ``valgrind --tool=callgrind --instr-atstart=no``, a few warm-up calls and
``--calls`` counted ones (instrumentation switched on and off around them by callgrind's
client requests, from a tiny library built here with the system's C compiler and
``valgrind/callgrind.h``), and prints the instructions per call of each contender:
``tb`` (the code on ``PYTHONPATH``), ``old`` (``--old``: another checkout's ``python/``
folder, loading the same file) and ``jit``. ``--top`` also lists the functions whose
counts differ most between tracebridge and torch.jit (``callgrind_annotate``).

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/call_instructions.py \\
        --zoo mobilenet_v3_small --bench resnet --old /work/main/python --top 20

One thread, ``torch.no_grad()``, batch 1 (the zoo's first input set cut to batch 1; the
bench models' ``make_inputs(1)``). Under callgrind a call runs 50-100x slower: a
mobilenet takes a minute or two per contender.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
"""


def helper_library(folder: str) -> str:
    """The client-request library, built in ``folder``."""
    source, library = os.path.join(folder, "cg.c"), os.path.join(folder, "libcg.so")
    with open(source, "w") as f:
        f.write(_HELPER)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("call_instructions: no C compiler (cc) to build the helper")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", library, source], check=True)
    return library


def save(kind: str, name: str, folder: str) -> None:
    """Trace ``name`` (a zoo or bench model) with both tools and save both and its inputs."""
    import torch

    import tracebridge

    torch.set_num_threads(1)
    if kind == "zoo":
        sys.path.insert(0, HERE)
        import zoo_env  # noqa: F401 - before torchvision
        from zoo_models import all_cases
        from zoo_speed import _batch_one

        case = {c.name: c for c in all_cases()}[name]
        torch.manual_seed(0)
        model = case.build().eval()
        inputs = _batch_one(case.inputs()[0])
    else:
        sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
        from models import CASES

        case = CASES[name]()
        model = case.model
        inputs = tuple(case.make_inputs(1) if case.make_inputs else case.example_inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracebridge.trace(model, inputs).save(os.path.join(folder, "model.tb"))
        jit = torch.jit.trace(copy.deepcopy(model), inputs, check_trace=False)
    torch.jit.save(jit, os.path.join(folder, "jit.pt"))
    torch.save(inputs, os.path.join(folder, "inputs.pt"))


def child(folder: str, which: str, calls: int, library: str) -> None:
    """Run under callgrind: warm-up calls, then ``calls`` counted ones."""
    import ctypes

    import torch

    torch.set_num_threads(1)
    if which == "jit":
        fn = torch.jit.load(os.path.join(folder, "jit.pt"))
    else:
        import tracebridge

        fn = tracebridge.load(os.path.join(folder, "model.tb"))
    inputs = torch.load(os.path.join(folder, "inputs.pt"))
    cg = ctypes.CDLL(library)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(5):
            fn(*inputs)
        cg.cg_start()
        for _ in range(calls):
            fn(*inputs)
        cg.cg_stop()


def counted(folder: str, which: str, calls: int, library: str, path: str) -> tuple[float, str]:
    """Instructions per call of contender ``which`` and its callgrind output file."""
    out = os.path.join(folder, f"{which}.cg")
    env = dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0")
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        folder,
        which,
        str(calls),
        library,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or not found:
        raise SystemExit(f"call_instructions: {which} failed:\n{done.stderr[-2000:]}")
    dumps = [f for f in os.listdir(folder) if f.startswith(f"{which}.cg")]
    return int(found.group(1)) / calls, os.path.join(folder, max(dumps))


def by_function(dump: str, calls: int) -> dict[str, float]:
    """Instructions per call of each function (self cost) in a callgrind dump."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", dump], capture_output=True, text=True
    ).stdout
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            name = re.sub(r" \[[^\]]*\]$", "", m.group(2))[:120]
            out[name] = out.get(name, 0.0) + int(m.group(1).replace(",", "")) / calls
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", action="append", default=[], help="zoo model name")
    parser.add_argument("--bench", action="append", default=[], help="bench model name")
    parser.add_argument("--old", help="another checkout's python/ folder, counted as 'old'")
    parser.add_argument("--calls", type=int, default=5, help="counted calls per contender")
    parser.add_argument("--top", type=int, default=0, help="functions that differ most")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        folder, which, calls, library = args.child
        child(folder, which, int(calls), library)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("call_instructions: valgrind is not installed")
    path = os.environ.get("PYTHONPATH", os.path.join(ROOT, "python"))
    with tempfile.TemporaryDirectory() as scratch:
        library = helper_library(scratch)
        for kind, name in [("zoo", n) for n in args.zoo] + [("bench", n) for n in args.bench]:
            folder = os.path.join(scratch, re.sub(r"\W+", "_", name))
            os.makedirs(folder)
            save(kind, name, folder)
            contenders = {"tb": ("tb", path), "jit": ("jit", path)}
            if args.old:
                contenders["old"] = ("old", args.old)
            counts, dumps = {}, {}
            for key, (which, where) in contenders.items():
                run_as = "jit" if which == "jit" else which
                counts[key], dumps[key] = counted(folder, run_as, args.calls, library, where)
            line = ", ".join(f"{k} {v:,.0f}" for k, v in counts.items())
            ratios = f"tb/jit {counts['tb'] / counts['jit']:.3f}"
            if "old" in counts:
                ratios += f", tb/old {counts['tb'] / counts['old']:.4f}"
            print(f"{name}: instructions a call: {line} ({ratios})", flush=True)
            if args.top:
                a, b = by_function(dumps["tb"], args.calls), by_function(dumps["jit"], args.calls)
                for fn in sorted(set(a) | set(b), key=lambda f: -abs(a.get(f, 0) - b.get(f, 0)))[
                    : args.top
                ]:
                    print(f"  {a.get(fn, 0) - b.get(fn, 0):>+12,.0f}  {fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
