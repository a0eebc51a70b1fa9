"""Run artifacts in a child process whose allocator fills memory with a canary byte.

Used by ``test_op_contract.py``: ``python canary_child.py JOBS.json`` loads each job's file,
calls it ``calls`` times on ``ones(shape)`` and prints one line per job, ``JOB <i> <json>``,
with ``stage`` ``load`` or ``call`` (tracebridge's error, with its message) or ``ok`` (with
``same``: the calls gave identical outputs, ``canary``: an output holds the canary pattern,
``changed``: state entries the calls changed). Any other exception is ``stage: raw``. The
parent (``run_batch``) sets ``MALLOC_PERTURB_``: glibc then fills fresh allocations with
``~PERTURB`` and freed memory with ``PERTURB``, so memory no kernel wrote shows in an output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PERTURB = 0xA5
CANARIES = (bytes([PERTURB]) * 4, bytes([PERTURB ^ 0xFF]) * 4)
# Outputs larger than this are described, not copied (a stride-0 view of 2**40 elements is
# legal and small; its copy would not be).
VIEW_BYTES = 1 << 28


def _leaves(x) -> list:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _leaves(y)]
    return []


def _digest(out) -> list:
    """Each output tensor's bytes (as hex, capped) and whether they hold a canary word."""
    import torch

    found = []
    for t in _leaves(out):
        if t.device.type != "cpu" or t.numel() == 0:  # no data to show (meta, empty)
            found.append((f"{t.device.type}{list(t.shape)}", False))
            continue
        if t.numel() * t.element_size() > VIEW_BYTES:  # a wide view of few elements
            found.append((f"view{list(t.shape)}{list(t.stride())}", False))
            continue
        flat = torch.empty_like(t, memory_format=torch.contiguous_format)
        flat.copy_(t.detach().resolve_conj().resolve_neg())
        raw = flat.reshape(-1).view(torch.uint8).numpy().tobytes()
        step = max(t.element_size(), 4)
        canary = t.element_size() >= 4 and any(
            raw[i : i + 4] in CANARIES for i in range(0, len(raw) - 3, step)
        )
        found.append((raw.hex()[:4000], bool(canary)))
    return found


def _state(module) -> dict:
    get = getattr(module, "state_dict", None)
    return {k: v.detach().clone() for k, v in get().items()} if get else {}


def _with_grad(module, shape) -> list:
    """The outputs of a call with autograd on an input that requires grad, and the input's
    gradient of the sum of the floating outputs (``job["grad"]``: backward graphs run)."""
    import torch

    x = torch.ones(shape, requires_grad=True)
    outputs = _leaves(module(x))
    total = sum(t.sum() for t in outputs if t.requires_grad and t.is_floating_point() and t.numel())
    grads = list(torch.autograd.grad(total, x, allow_unused=True)) if torch.is_tensor(total) else []
    return [t.detach() for t in outputs] + [g for g in grads if g is not None]


def run_job(job: dict) -> dict:
    import torch

    import tracebridge

    try:
        module = tracebridge.load(job["path"])
    except tracebridge.ArtifactError as exc:
        return {"stage": "load", "error": "ArtifactError", "message": str(exc)}
    before = _state(module)
    results = []
    for _ in range(job.get("calls", 2)):
        try:
            if job.get("grad"):
                results.append(_digest(_with_grad(module, job.get("shape", [3]))))
                continue
            with torch.no_grad():
                results.append(_digest(module(torch.ones(job.get("shape", [3])))))
        except tracebridge.TraceError as exc:
            return {"stage": "call", "error": type(exc).__name__, "message": str(exc)}
        except RuntimeError as exc:
            if "TracedFunctionBackward" not in str(exc):
                raise
            # autograd's own check of what a custom function's backward returned
            return {"stage": "call", "error": "autograd", "message": str(exc)}
    changed = [k for k, v in _state(module).items() if not torch.equal(v, before[k])]
    return {
        "stage": "ok",
        "same": all(r == results[0] for r in results),
        "canary": any(c for r in results for _, c in r),
        "changed": changed,
    }


def main(path: str) -> None:
    jobs = json.loads(Path(path).read_text())
    for i, job in enumerate(jobs):
        print(f"START {i}", flush=True)
        try:
            outcome = run_job(job)
        except Exception as exc:  # not tracebridge's error: the test reports it
            outcome = {"stage": "raw", "error": type(exc).__name__, "message": str(exc)[:500]}
        print(f"JOB {i} {json.dumps(outcome)}", flush=True)


def address_space_limit(extra: int) -> int:
    """An address-space cap ``extra`` bytes above what this process maps now (torch
    imported): a CUDA build of torch maps gigabytes of libraries at import, so a fixed cap
    that suits the CPU wheel would fail every child there before it loads a file."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024 + extra
    return extra


def _address_space(limit: int | None):
    """A ``preexec_fn`` that caps the child's address space at ``limit`` bytes (and writes
    no core file), or None."""
    if limit is None:
        return None

    def cap():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return cap


def run_batch(
    jobs: list[dict], workdir: Path, timeout: float = 600, memory_bytes: int | None = None
) -> list[dict]:
    """Each job's outcome, running them in as few child processes as crashes allow: a
    child that dies marks its current job ``stage: crash`` and the rest go on in a new one.
    ``memory_bytes``: the children's address-space limit (an allocation past it fails)."""
    outcomes: list[dict | None] = [None] * len(jobs)
    start = 0
    env = dict(os.environ, MALLOC_PERTURB_=str(PERTURB))
    while start < len(jobs):
        listing = workdir / f"jobs-{start}.json"
        listing.write_text(json.dumps(jobs[start:]))
        try:
            done = subprocess.run(
                [sys.executable, __file__, str(listing)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                preexec_fn=_address_space(memory_bytes),
            )
            stdout, returncode, stderr = done.stdout, done.returncode, done.stderr
        except subprocess.TimeoutExpired as exc:  # a job that runs on: marked, and skipped
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            returncode, stderr = "timeout", f"no result in {timeout} s"
        last = -1
        for line in stdout.splitlines():
            if line.startswith("JOB "):
                _, index, text = line.split(" ", 2)
                outcomes[start + int(index)] = json.loads(text)
                last = int(index)
        if returncode == 0:
            break
        crashed = start + last + 1
        if crashed < len(jobs):
            outcomes[crashed] = {
                "stage": "crash" if returncode != "timeout" else "hang",
                "returncode": returncode,
                "message": stderr[-1500:],
            }
        start = crashed + 1
    return [o or {"stage": "missing"} for o in outcomes]


if __name__ == "__main__":
    main(sys.argv[1])
