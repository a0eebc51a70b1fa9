"""Zoo models whose warm calls still ask PyTorch's shape function for a result's bytes.

Note: why. ``runtime/checked_sizes.py`` bounds the result of an op with a ``scale``
argument (a padding, an FFT length) before its kernel runs, and remembers the keys that
passed: a model pays the shape function (meta tensors, 10-20 us) on its first call with a
size, then a dictionary lookup. An argument the bound cannot key or read (session 22:
EnCodec's paddings kept as 0-d integer tensors) makes every call pay it. This traces each
zoo model at batch 1, saves and loads it, and counts the shape function's calls over
three warm calls; a model printed here pays it on every call.

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/shape_function_calls.py
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from tracebridge.runtime import checked_sizes  # noqa: E402
from zoo import time_limit  # noqa: E402
from zoo_models import all_cases  # noqa: E402
from zoo_speed import _batch_one  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    only = set(sys.argv[1:])
    shape_function = checked_sizes.result_bytes
    calls: collections.Counter = collections.Counter()

    def counted(op, args, kwargs):
        found = shape_function(op, args, kwargs)
        calls[op if found is not None else f"{op} (refused on meta)"] += 1
        return found

    checked_sizes.result_bytes = counted
    paying = 0
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.tb")
        for case in all_cases():
            if only and case.name not in only:
                continue
            try:
                with time_limit(120):
                    torch.manual_seed(0)
                    model = case.build().eval()
                    inputs = _batch_one(case.inputs()[0])
                    tracebridge.trace(model, inputs, check_trace=False).save(path)
                    loaded = tracebridge.load(path)
                    with torch.no_grad():
                        for _ in range(2):
                            loaded(*inputs)
                        calls.clear()
                        for _ in range(3):
                            loaded(*inputs)
            except Exception as exc:  # a model the harness cannot run: said, not counted
                print(f"{case.name}: not run ({type(exc).__name__}: {str(exc)[:100]})")
                continue
            if calls:
                paying += 1
                print(f"{case.name}: {dict(calls)} over 3 warm calls", flush=True)
    print(f"{paying} model(s) ask the shape function on warm calls")


if __name__ == "__main__":
    main()
