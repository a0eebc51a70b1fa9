"""Batch-inference throughput of one artifact: one process, Ray Data and Spark.

    make bench-scale                              # in .venv-scale (make scale-setup)
    .venv-scale/bin/python benchmarks/bench_scale.py --count 2000 --size 64 --workers 2

A ResNet-18-like model (torchvision's layout: 7x7 stem, four stages of two basic blocks,
64-512 channels, about 11.7 M parameters) is traced and saved to bytes; the same bytes run
over ``--count`` random images:

* one process: ``tracebridge.load`` and batches of 64 on ``--workers`` torch threads;
* Ray Data: ``examples/ray_batch_inference.py`` (``--workers`` actors of one thread each,
  the artifact shipped once through the object store);
* Spark: ``examples/spark_batch_inference.py`` (``local[--workers]``, ``mapInPandas``, the
  artifact broadcast).

Each figure is images per second over the whole call (shipping the data and the artifact,
loading it on every worker, inference, and collecting the ordered results); cluster start-up
(``ray.init``, the JVM) is outside the timing. Every engine's results are checked against
the single process's before its figure is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "python"))

from scale_common import artifact_bytes, images  # noqa: E402

import tracebridge  # noqa: E402
from resnet_like import ResNet18Like  # noqa: E402


def one_process(data: bytes, pixels: np.ndarray, workers: int) -> np.ndarray:
    torch.set_num_threads(workers)
    model = tracebridge.load(data, progress=False)
    out = []
    with torch.inference_mode():
        for start in range(0, len(pixels), 64):
            out.append(model(torch.from_numpy(pixels[start : start + 64])).numpy())
    return np.concatenate(out)


def run_ray(data: bytes, pixels: np.ndarray, workers: int):
    import ray
    from ray_batch_inference import init, predict

    init(workers)
    try:
        predict(data, pixels[: 2 * workers], workers)  # actors and workers warm
        return _timed(lambda: predict(data, pixels, workers))
    finally:
        ray.shutdown()


def run_spark(data: bytes, pixels: np.ndarray, workers: int):
    from spark_batch_inference import predict, session

    spark = session(workers)
    try:
        predict(spark, data, pixels[: 2 * workers])  # the JVM and Python workers warm
        return _timed(lambda: predict(spark, data, pixels))
    finally:
        spark.stop()


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="images (default 2000)")
    parser.add_argument("--size", type=int, default=64, help="image side (default 64)")
    parser.add_argument("--workers", type=int, default=2, help="workers / threads (default 2)")
    parser.add_argument("--engines", default="one,ray,spark", help="comma-separated subset")
    opts = parser.parse_args()
    torch.manual_seed(0)
    pixels = images(opts.count, opts.size)
    data = artifact_bytes(ResNet18Like().eval(), torch.from_numpy(pixels[:2]))
    print(
        f"ResNet-18-like, {opts.count} images of 3x{opts.size}x{opts.size}, "
        f"{opts.workers} workers, artifact {len(data) / 2**20:.1f} MiB, torch {torch.__version__}"
    )
    reference, seconds = _timed(lambda: one_process(data, pixels, opts.workers))
    rows = [("one process", seconds)]
    engines = {"ray": ("Ray Data", run_ray), "spark": ("Spark", run_spark)}
    for key in opts.engines.split(","):
        if key not in engines:
            continue
        label, run = engines[key]
        try:
            got, seconds = run(data, pixels, opts.workers)
        except ImportError as exc:
            print(f"{label}: not installed ({exc}); make scale-setup")
            continue
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)  # same, in order
        rows.append((label, seconds))
    print("| engine | seconds | images/s |\n| --- | --- | --- |")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.1f} | {opts.count / seconds:.0f} |")


if __name__ == "__main__":
    main()
