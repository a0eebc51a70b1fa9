"""`make demo`: one model traced in Python and run in R, one traced in R and run in Python.

1. Python traces a small CNN (Conv2d, BatchNorm2d, ReLU, pooling, Linear) and saves it to
   ``demo-out/python_cnn.tb`` with an input.
2. R (``Rscript scripts/demo.R demo-out``) loads it with ``jit_load`` and runs it; then it
   defines an ``nn_module``, traces it with ``jit_trace``, saves ``demo-out/r_mlp.tb``, and
   writes its own eager outputs.
3. Python loads the R model with ``tracebridge.load``, runs it, and prints both graphs and a
   table of the differences between the languages.

Run it with ``make demo`` (or ``.venv/bin/python scripts/demo.py`` after ``make setup``).
The exit status is 0 when every output agrees within 1e-5, 1 when one does not, and 2 when
R itself failed. Without R or the R package the R steps are skipped with a message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge.artifact import parse_safetensors, safetensors_bytes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "demo-out"
RLIB = ROOT / ".Rlib"
TOLERANCE = 1e-5


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(h.flatten(1))


def banner(title: str) -> None:
    print(f"\n{'=' * 76}\n{title}\n{'=' * 76}", flush=True)


def write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    path.write_bytes(safetensors_bytes(tensors)[0])


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in parse_safetensors(path.read_bytes(), str(path)).items()}


def python_side() -> torch.Tensor:
    """Trace the CNN, save it with an input for R; return Python's eager output."""
    banner("Python: tracebridge.trace(SmallCNN) -> demo-out/python_cnn.tb")
    torch.manual_seed(0)
    net = SmallCNN()
    with torch.no_grad():  # a few batches so the BatchNorm statistics are not trivial
        for _ in range(3):
            net(torch.randn(8, 1, 8, 8) * 2 + 1)
    net.eval()
    traced = tracebridge.trace(net, torch.randn(2, 1, 8, 8))
    traced.save(OUT / "python_cnn.tb")
    print(traced.graph)
    x = torch.randn(3, 1, 8, 8)  # batch 3, traced at batch 2: the batch size is symbolic
    write_tensors(OUT / "python_cnn.input.safetensors", {"input0": x})
    with torch.no_grad():
        return net(x)


def r_unavailable() -> str | None:
    """Why R can not run here, or None."""
    if shutil.which("Rscript") is None:
        return "Rscript is not on PATH (install R, then run `make setup`)"
    libs = [RLIB, *map(Path, filter(None, os.environ.get("R_LIBS", "").split(os.pathsep)))]
    if not any((lib / "tracebridge" / "DESCRIPTION").exists() for lib in libs):
        return f"the R package is not installed in {RLIB} (run `make setup`)"
    return None


def r_side() -> int:
    """Run scripts/demo.R; its output goes straight to the terminal."""
    banner("R: Rscript scripts/demo.R demo-out")
    env = dict(os.environ)
    env["R_LIBS"] = os.pathsep.join(filter(None, [str(RLIB), env.get("R_LIBS", "")]))
    env.setdefault("TRACEBRIDGE_PYTHON", sys.executable)
    proc = subprocess.run(["Rscript", str(ROOT / "scripts" / "demo.R"), str(OUT)], env=env)
    return proc.returncode


def r_model_in_python() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Load the R-traced module, run it on R's input; return (Python outputs, R outputs)."""
    banner("Python: tracebridge.load('demo-out/r_mlp.tb'), traced in R")
    loaded = tracebridge.load(OUT / "r_mlp.tb")
    print(f"{loaded!r}\nmethods: {loaded.methods}; mode: {'train' if loaded.training else 'eval'}")
    print(loaded.graph)
    x = read_tensors(OUT / "r_mlp.input.safetensors")["input0"]
    with torch.no_grad():
        got = list(loaded(x))
    want = read_tensors(OUT / "r_mlp.r_output.safetensors")
    return got, [want[f"output{i}"] for i in range(len(want))]


def table(rows: list[tuple[str, str, str, str, float]]) -> bool:
    banner("Python vs R: the same artifact, run in the other language")
    head = ("artifact", "output", "shape", "traced in -> run in", "max |diff|", "")
    widths = (16, 16, 9, 22, 11, 4)
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    ok = True
    for artifact, output, shape, route, diff in rows:
        good = diff <= TOLERANCE
        ok &= good
        cells = (artifact, output, shape, route, f"{diff:.2e}", "ok" if good else "FAIL")
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    return ok


def shape_of(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return (a - b).abs().max().item()


def closing(ran_r: bool) -> None:
    banner("Where the files are, and what to try next")
    for path in sorted(OUT.iterdir()):
        print(f"  {path.relative_to(ROOT)}  ({path.stat().st_size:,} bytes)")
    print(f"""
Try next:
  .venv/bin/tracebridge inspect demo-out/r_mlp.tb       # methods, graph, parameters, guards
  .venv/bin/tracebridge validate demo-out/python_cnn.tb # schema, op set, checksums
  .venv/bin/python -c "import tracebridge; m = tracebridge.load('demo-out/r_mlp.tb'); \\
m.train(); print(m.graph)"                               # the training graph (dropout on)
  R_LIBS=.Rlib Rscript -e 'library(tracebridge); m <- jit_load("demo-out/python_cnn.tb"); \\
print(m$graph); m$parameters$conv.weight'
  R_LIBS=.Rlib Rscript -e 'tracebridge::jit_inspect("demo-out/python_cnn.tb")' \
                                                          # base R only: no Python started
  unzip -l demo-out/python_cnn.tb                       # program.json + tensors.safetensors
The artifacts are plain ZIP archives: nothing in them is pickled or executed when loaded.
{"" if ran_r else "(R was skipped: the R half of the demo did not run.)"}""")


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for stale in OUT.iterdir():
        stale.unlink()
    py_out = python_side()
    why = r_unavailable()
    if why is not None:
        banner("R: skipped")
        print(f"The R half of the demo is skipped: {why}.")
        closing(ran_r=False)
        return 0
    if r_side() != 0:
        print("\nThe R half of the demo failed (its output is above).", file=sys.stderr)
        return 2
    got, want = r_model_in_python()
    r_out = read_tensors(OUT / "python_cnn.r_output.safetensors")["output0"]
    rows = [
        (
            "python_cnn.tb",
            "output0",
            shape_of(py_out),
            "Python -> R (jit_load)",
            max_diff(r_out, py_out),
        )
    ]
    for i, name in enumerate(["output0 logits", "output1 probs"]):
        rows.append(
            ("r_mlp.tb", name, shape_of(want[i]), "R -> Python (load)", max_diff(got[i], want[i]))
        )
    ok = table(rows)
    closing(ran_r=True)
    if not ok:
        print(f"\nSome outputs differ by more than {TOLERANCE}.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
