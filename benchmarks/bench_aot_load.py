"""Load time of an artifact with an AOTInductor package, in a fresh process.

    python benchmarks/bench_aot_load.py FILE 1,3,16,16       # a file of save_compiled

Imports torch and tracebridge, then times ``load_compiled(FILE, trust_compiled_code=True)``
and the first two calls on a random input of the given shape, in wall time and in the
process's CPU time (steadier than wall time on a shared machine), on one thread, and says
whether the load imported inductor (it should not). docs/aot.md has the figures.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    import torch

    import tracebridge

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)  # with autograd wanted the plain program would run
    imported = time.perf_counter()
    path, shape = argv[0], [int(d) for d in argv[1].split(",")]
    cpu0 = time.process_time()
    model = tracebridge.load_compiled(path, trust_compiled_code=True)
    loaded, cpu1 = time.perf_counter(), time.process_time()
    model(torch.rand(*shape))
    first, cpu2 = time.perf_counter(), time.process_time()
    model(torch.rand(*shape))
    second = time.perf_counter()
    print(
        f"{path}: {model.compiled_form}; import {imported - start:.2f} s; "
        f"load {loaded - imported:.3f} s (CPU {cpu1 - cpu0:.3f} s); "
        f"first call {first - loaded:.3f} s (CPU {cpu2 - cpu1:.3f} s); "
        f"second call {second - first:.3f} s; "
        f"inductor imported: {'torch._inductor' in sys.modules}"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        raise SystemExit(2)
    raise SystemExit(main(sys.argv[1:]))
