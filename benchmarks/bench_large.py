"""Large-model benchmark: save, load, first call and peak memory of a 512 MiB model
(8 x ``Linear(4096, 4096)``, float32), tracebridge side by side with the ``safetensors``
library and with ``torch.save`` / ``torch.load(mmap=True)``.

Every measurement runs in a fresh subprocess, so that the peak memory of one does not hide
another's: the extra peak is ``ru_maxrss`` after the step minus the resident size just
before it. Loads read a file just written, from the page cache, for every tool alike.

    .venv/bin/python benchmarks/bench_large.py            # print the table
    .venv/bin/python benchmarks/bench_large.py --write    # also update benchmarks/RESULTS.md
    .venv/bin/python benchmarks/bench_large.py --layers 2 # a smaller model (quick look)
    .venv/bin/python benchmarks/bench_large.py --llama7b  # scale check: trace + save a 7B
                                                          # LLaMA on the meta device (needs
                                                          # transformers; not run by CI)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_md import write_results

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("tracebridge", "safetensors", "torch")


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _model(layers: int, device: str = "cpu"):
    import torch

    torch.manual_seed(0)
    with torch.device(device):
        return torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(layers)]).eval()


def _step(fn):
    """Run ``fn``; returns (its result, seconds, extra peak bytes)."""
    import gc

    gc.collect()
    before = _rss()
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    return out, seconds, max(0, _maxrss() - before)


def child(tool: str, step: str, path: str, layers: int) -> dict:
    """One measurement in this (fresh) process."""
    import torch

    import tracebridge

    torch.set_num_threads(1)
    x = torch.randn(1, 4096)
    if tool == "llama7b":
        return llama7b(path)
    if step == "save":
        model = _model(layers)
        if tool == "tracebridge":
            traced = tracebridge.trace(model, x, check_trace=False)
            _, seconds, peak = _step(lambda: traced.save(path))
        elif tool == "safetensors":
            from safetensors.torch import save_file

            state = model.state_dict()
            _, seconds, peak = _step(lambda: save_file(state, path))
        else:
            state = model.state_dict()
            _, seconds, peak = _step(lambda: torch.save(state, path))
        return {"seconds": seconds, "peak": peak, "bytes": os.path.getsize(path)}
    cold = None
    if tool == "tracebridge":
        # The first load in a process also compiles the JSON Schema validator (one-time);
        # the table reports the steady-state load and this cost beside it.
        _, cold, _ = _step(lambda: tracebridge.load(path))
        loaded, seconds, peak = _step(lambda: tracebridge.load(path))
        module = loaded
    else:
        if tool == "safetensors":
            from safetensors.torch import load_file

            state, seconds, peak = _step(lambda: load_file(path))
        else:
            state, seconds, peak = _step(lambda: torch.load(path, mmap=True, weights_only=True))
        module = _model(layers, "meta")
        module.load_state_dict(state, assign=True)
    with torch.no_grad():
        _, first, first_peak = _step(lambda: module(x))
    out = {"seconds": seconds, "peak": peak, "first": first, "first_peak": first_peak}
    return out if cold is None else {**out, "cold": cold}


def llama7b(path: str) -> dict:
    """Trace a 7B LLaMA-architecture model on the meta device and save its program."""
    import importlib

    try:
        importlib.import_module("torchvision")
    except Exception:  # noqa: BLE001 - a broken optional install must not stop transformers
        sys.modules["torchvision"] = None
    import torch
    import transformers
    import transformers.utils.import_utils as iu

    import tracebridge

    # Library code must see a tracer to take its trace-friendly path (issue 12, point 2);
    # on meta tensors the other path reads values, which do not exist.
    iu.is_jit_tracing = lambda: True
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=32000,
        use_cache=False,
    )
    before = _rss()
    start = time.perf_counter()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    with torch.device("meta"):
        model = LlamaForCausalLM(config).eval()
    # The rotary table (inv_freq) is a non-persistent buffer that no checkpoint holds: built
    # on the CPU, the saved program stores it and load(path, weights=...) binds the rest
    # (docs/devices.md, "Tracing on the meta device").
    model.model.rotary_emb = LlamaRotaryEmbedding(config=config)
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    traced = tracebridge.trace(model, ids, check_trace=False, strict=False)
    traced_at = time.perf_counter()
    traced.save(path)
    saved_at = time.perf_counter()
    return {
        "transformers": transformers.__version__,
        "params": sum(p.numel() for p in model.parameters()),
        "trace": traced_at - start,
        "save": saved_at - traced_at,
        "peak": _maxrss(),
        "extra_peak": _maxrss() - before,
        "bytes": os.path.getsize(path),
    }


def llama_table(r: dict) -> str:
    return "\n".join(
        [
            "### Scale check: a 7B LLaMA traced on the meta device",
            "",
            f"`.venv/bin/python benchmarks/bench_large.py --llama7b --write`: transformers "
            f"{r['transformers']}, LlamaForCausalLM {r['params'] / 1e9:.2f} B parameters "
            "(hidden 4096, 32 layers, vocab 32000, `use_cache=False`), initialised on the "
            f"meta device, traced on 16 meta token ids; {time.strftime('%Y-%m-%d')}.",
            "",
            "| init + trace (s) | save (s) | program file (MB) | peak RSS (MiB) "
            "| extra peak over imports (MiB) |",
            "|---|---|---|---|---|",
            f"| {r['trace']:.1f} | {r['save']:.1f} | {r['bytes'] / 1e6:.1f} | "
            f"{r['peak'] / 2**20:.0f} | {r['extra_peak'] / 2**20:.0f} |",
            "",
            "Goal (issue 9): under 60 s and 2 GB. The saved program holds no weights "
            "(`tensors.external` lists them); `load(path, weights=...)` binds a checkpoint.",
        ]
    )


def run_child(tool: str, step: str, path: str, layers: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    cmd = [sys.executable, __file__, "--child", tool, step, path, "--layers", str(layers)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"[bench_large] {tool} {step} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(layers: int, repeats: int) -> dict:
    results: dict = {t: {"save": [], "load": []} for t in TOOLS}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        for _ in range(repeats):
            for tool in TOOLS:
                path = os.path.join(folder, f"model.{tool}")
                results[tool]["save"].append(run_child(tool, "save", path, layers))
                results[tool]["load"].append(run_child(tool, "load", path, layers))
    return results


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def table(results: dict, layers: int, repeats: int) -> str:
    weights = layers * (4096 * 4096 + 4096) * 4
    mib = 1024 * 1024
    st_save = _med(results["safetensors"]["save"], "seconds")
    st_load = _med(results["safetensors"]["load"], "seconds")
    cpu = platform.processor() or platform.machine()
    lines = [
        "### Large model: save, load, first call, peak memory",
        "",
        f"`.venv/bin/python benchmarks/bench_large.py --write`: {layers} x Linear(4096, 4096) "
        f"float32, {weights / mib:.0f} MiB of weights; {cpu}, "
        f"{os.cpu_count()} cores, median of {repeats}, each step in a fresh process; extra peak "
        "= ru_maxrss after the step minus the resident size before it; loads read the file "
        f"just written (page cache); {time.strftime('%Y-%m-%d')}.",
        "",
        "| tool | save (ms) | save / save_file | save peak (x weights) | file (MiB) "
        "| load (ms) | load / load_file | load peak (x weights) | first call (ms) "
        "| peak after first call (x weights) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "tracebridge": "tracebridge save / load",
        "safetensors": "safetensors save_file / load_file",
        "torch": "torch.save / torch.load(mmap=True)",
    }
    for tool in TOOLS:
        save, load = results[tool]["save"], results[tool]["load"]
        s, ld = _med(save, "seconds"), _med(load, "seconds")
        lines.append(
            f"| {names[tool]} | {s * 1e3:.0f} | {s / st_save:.2f}x | "
            f"{_med(save, 'peak') / weights:.2f} | {_med(save, 'bytes') / mib:.1f} | "
            f"{ld * 1e3:.1f} | {ld / st_load:.2f}x | {_med(load, 'peak') / weights:.2f} | "
            f"{_med(load, 'first') * 1e3:.0f} | "
            f"{(_med(load, 'peak') + _med(load, 'first_peak')) / weights:.2f} |"
        )
    tb_save = _med(results["tracebridge"]["save"], "seconds")
    tb = results["tracebridge"]["load"]
    tb_load = _med(tb, "seconds")
    lines += [
        "",
        f"Goals (issue 9): save <= 2x save_file: {tb_save / st_save:.2f}x; save extra peak <= "
        f"0.25x weights: {_med(results['tracebridge']['save'], 'peak') / weights:.2f}x; load <= "
        f"2x load_file + 50 ms: {tb_load * 1e3:.1f} ms vs {(2 * st_load + 0.05) * 1e3:.1f} ms "
        f"(the first load in a process: {_med(tb, 'cold') * 1e3:.0f} ms, with the one-time "
        "schema compilation); "
        "load peak <= 1.25x weights (after the first call): "
        f"{(_med(tb, 'peak') + _med(tb, 'first_peak')) / weights:.2f}x. "
        "tracebridge's save includes fsync and the SHA-256 of the weights; load skips the "
        "checksum above 64 MiB of weights (`load(..., verify=True)` and `tracebridge "
        "validate` check it).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument(
        "--child", nargs=3, metavar=("TOOL", "STEP", "PATH"), help=argparse.SUPPRESS
    )
    parser.add_argument("--llama7b", action="store_true", help="the 7B meta-device scale check")
    args = parser.parse_args(argv)
    if args.llama7b:
        with tempfile.TemporaryDirectory() as folder:
            text = llama_table(run_child("llama7b", "trace", os.path.join(folder, "p.tb"), 0))
        print(text)
        if args.write:
            write_results(text, "bench_large_llama7b")
        return 0
    if args.child:
        print(json.dumps(child(*args.child, args.layers)))
        return 0
    text = table(measure(args.layers, args.repeats), args.layers, args.repeats)
    print(text)
    if args.write:
        write_results(text, "bench_large")
    return 0


if __name__ == "__main__":
    sys.exit(main())
