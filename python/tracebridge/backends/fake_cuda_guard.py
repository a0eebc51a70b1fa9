"""Keeps torch's fake CUDA device guard owned by a thread that never exits, before
tracebridge compiles in a worker thread (backends/api.py ``_in_worker``).

Note: why. On a machine without a CUDA device, the first ``FakeTensorMode`` that Dynamo
enters installs a no-op CUDA device guard (``torch._C._ensureCUDADeviceGuardSet``) that
torch 2.11 keeps in a ``thread_local`` of the entering thread, while the process-wide guard
registry keeps a pointer to it. When that thread ends, the pointer dangles, and the next
``FakeTensorMode`` in any thread calls through it: a segmentation fault (fixed upstream by
pytorch/pytorch#178950, "Fix use after free in ensureCUDADeviceGuardSet"). Our compile
worker is exactly such a thread: ``tracebridge.compile`` warmed up there, the thread
ended, and the next compile (or ``load_compiled``'s first call) killed the process. Once a
guard is installed, later calls keep it, so installing it first from a thread that lives as
long as the process makes every later one safe. Where torch already fixed it, or a CUDA
device is present, or the build has no fake-guard hook, this does nothing harmful: the
same call ``FakeTensorMode`` makes, made earlier.
"""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_pinned = False
_keeper_stop = threading.Event()  # never set: the keeper thread waits for the process' end


def _fake_mode_installs_guard() -> bool:
    """Whether ``FakeTensorMode`` would install the fake guard (its ``avoid_device_init``:
    no CUDA, XPU or HPU device), so that we never install one it would not."""
    if not hasattr(torch._C, "_ensureCUDADeviceGuardSet"):
        return False
    if torch.xpu._is_compiled():
        return not torch.xpu.is_available()
    hpu = getattr(torch, "hpu", None)
    return not (torch.cuda.is_available() or (hpu is not None and hpu.is_available()))


def _keep_guard(installed: threading.Event) -> None:
    try:
        torch._C._ensureCUDADeviceGuardSet()
    finally:
        installed.set()
    _keeper_stop.wait()


def pin_fake_cuda_guard() -> None:
    """Install the fake CUDA guard from a thread that outlives every compile worker: this
    one when it is the main thread, else a daemon thread kept waiting (a caller's own
    short-lived thread would leave the same dangling pointer as our worker). Once per
    process; a no-op where ``FakeTensorMode`` would install none."""
    global _pinned
    with _lock:
        if _pinned:
            return
        _pinned = True
        if not _fake_mode_installs_guard():
            return
        if threading.current_thread() is threading.main_thread():
            torch._C._ensureCUDADeviceGuardSet()
            return
        installed = threading.Event()
        keeper = threading.Thread(
            target=_keep_guard, args=(installed,), name="tracebridge-cuda-guard", daemon=True
        )
        keeper.start()
        installed.wait()
