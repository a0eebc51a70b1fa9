"""What one op costs through torch's Python binding against TorchScript's interpreter.

The floor under tracebridge's generated code: it calls each op through the binding torch
gives Python (``torch.layer_norm``, ``Tensor.permute``...), where ``torch.jit`` runs the
same kernel from its C++ interpreter. For each op, a chain of ``--chain`` calls on a small
tensor (batch 1 sizes, where the call costs more than the kernel), as Python code and as a
scripted function, timed side by side (interleaved, minimum over ``--repeats``), per op:

    .venv/bin/python benchmarks/bench_op_overhead.py
    .venv/bin/python benchmarks/bench_op_overhead.py --chain 50 --repeats 400

The difference, ``python - jit``, is what each op of a traced model costs above
torch.jit's interpreter; tracebridge is under torch.jit only where it runs fewer ops
(folding, in-place ops, fused paths), not where it runs the same ones.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import torch

# op -> one step of a chain on ``x`` (shape [1, 17, 32]), keeping ``x``'s shape, as
# Python source with ``torch`` in scope.
STEPS = {
    "layer_norm": "torch.layer_norm(x, (32,), w, b, 1e-6)",
    "linear": "torch.nn.functional.linear(x, W, b)",
    "add": "torch.add(x, x)",
    "mul_ (scalar)": "x.mul_(1.0)",
    "reshape": "x.reshape(1, 17, 32)",
    "permute (x2)": "x.permute(0, 2, 1).permute(0, 2, 1)",
    "gelu": "torch.nn.functional.gelu(x)",
}


def _chained(step: str, length: int, name: str) -> str:
    body = "".join(f"    x = {step}\n" for _ in range(length))
    return (
        "import torch\n\n\n"
        f"def {name}(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, W: torch.Tensor):\n"
        f"{body}    return x\n"
    )


def _load(source: str, folder: Path, name: str):
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def measure(chain: int, repeats: int) -> list[tuple[str, float, float]]:
    x, w, b, W = torch.randn(1, 17, 32), torch.randn(32), torch.randn(32), torch.randn(32, 32)
    rows = []
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        for index, (op, step) in enumerate(STEPS.items()):
            name = f"chain_{index}"
            python = _load(_chained(step, chain, name), Path(folder), name)
            scripted = torch.jit.script(python)
            for _ in range(20):  # the profiling executor settles after a few calls
                python(x.clone(), w, b, W)
                scripted(x.clone(), w, b, W)
            best = {"python": float("inf"), "jit": float("inf")}
            for _ in range(repeats):
                for key, fn in (("python", python), ("jit", scripted)):
                    start = time.perf_counter()
                    fn(x, w, b, W)
                    best[key] = min(best[key], time.perf_counter() - start)
            rows.append((op, best["python"] * 1e6 / chain, best["jit"] * 1e6 / chain))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=40, help="ops per timed call")
    parser.add_argument("--repeats", type=int, default=300, help="interleaved calls per side")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = measure(args.chain, args.repeats)
    print(f"torch {torch.__version__}, 1 thread, minimum over {args.repeats} calls")
    print("\n| op | Python binding (µs/op) | torch.jit (µs/op) | difference (µs) | ratio |")
    print("|---|---|---|---|---|")
    for op, python, jit in rows:
        print(f"| {op} | {python:.2f} | {jit:.2f} | {python - jit:.2f} | {python / jit:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
