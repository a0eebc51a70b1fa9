"""Batch inference with Ray Data: an actor per worker loads the artifact once.

    python examples/ray_batch_inference.py            # 2 local workers, 512 images

The artifact's bytes go into Ray's object store once (``ray.put``); each actor of the pool
gets them as a constructor argument and loads them with ``tracebridge.load(data)``, which
checks them as it would a file. Ray Data does not keep row order across workers, so every
row carries an ``id`` and the results are sorted by it. (A traced or loaded module also
pickles, through these same bytes: passing ``model`` itself works too.)
"""

from __future__ import annotations

import os
import sys

import numpy as np
import ray
import torch

import tracebridge

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scale_common import SmallNet, artifact_bytes, images  # noqa: E402


class Predictor:
    """One per actor: the model is loaded once, then called on batch after batch."""

    def __init__(self, data: bytes | ray.ObjectRef, threads: int = 1):
        torch.set_num_threads(threads)
        if isinstance(data, ray.ObjectRef):  # shipped once through the object store
            data = ray.get(data)
        self.model = tracebridge.load(data, progress=False)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            logits = self.model(torch.from_numpy(np.ascontiguousarray(batch["image"])))
        return {"id": batch["id"], "logits": logits.numpy()}


def predict(data: bytes, pixels: np.ndarray, workers: int = 2, batch_size: int = 64):
    """Run the artifact ``data`` over ``pixels`` on ``workers`` Ray actors; returns the
    logits in the order of ``pixels``."""
    ds = ray.data.from_items([{"id": i, "image": img} for i, img in enumerate(pixels)])
    out = ds.map_batches(
        Predictor,
        fn_constructor_args=(ray.put(data),),
        concurrency=workers,
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=1,
    )
    rows = out.take_all()
    rows.sort(key=lambda row: row["id"])  # Ray Data keeps no order: the id restores it
    return np.stack([row["logits"] for row in rows])


def init(workers: int = 2) -> None:
    """A local Ray with ``workers`` CPUs, whose workers can import this file's module (on a
    cluster, ship your own module with ``runtime_env`` the same way)."""
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=workers,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )


def main(count: int = 512, workers: int = 2) -> np.ndarray:
    torch.manual_seed(0)
    pixels = images(count)
    data = artifact_bytes(SmallNet(), torch.from_numpy(pixels[:2]))
    started = not ray.is_initialized()
    if started:
        init(workers)
    try:
        logits = predict(data, pixels, workers)
    finally:
        if started:
            ray.shutdown()
    print(f"ray: {len(logits)} images, {workers} workers, first argmax {logits[:5].argmax(1)}")
    return logits


if __name__ == "__main__":
    main()
