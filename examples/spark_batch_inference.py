"""Batch inference with Spark: ``mapInPandas`` with the artifact broadcast to the executors.

    python examples/spark_batch_inference.py          # local[2], 512 images (needs Java 17)

The artifact's bytes are broadcast once (``sc.broadcast``); each Python worker loads them
the first time it needs them and keeps the model for the batches that follow (a cache keyed
by the broadcast's id), with every check ``tracebridge.load`` makes of a file. Rows carry an
``id`` and the result is ordered by it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import numpy as np
import pandas as pd
import torch
from pyspark.sql import SparkSession

import tracebridge

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scale_common import SmallNet, artifact_bytes, images  # noqa: E402


def _model(broadcast):
    """The loaded model of this Python worker. A worker (reused across tasks, Spark's
    default) keeps one object per broadcast in its registry and hands it to every task,
    so the model loaded the first time rides on it for the tasks that follow."""
    model = getattr(broadcast, "_tracebridge_model", None)
    if model is None:
        torch.set_num_threads(1)
        model = tracebridge.load(broadcast.value, progress=False)
        broadcast._tracebridge_model = model
        broadcast._tracebridge_loads = getattr(broadcast, "_tracebridge_loads", 0) + 1
    return model


def predict_frame(spark: SparkSession, data: bytes, pixels: np.ndarray) -> pd.DataFrame:
    """Run the artifact ``data`` over ``pixels`` with Spark; returns a frame of ``id``,
    ``logits`` and ``worker`` (the process that computed the row), ordered by ``id``."""
    shape = pixels.shape[1:]
    shared = spark.sparkContext.broadcast(data)
    flat = list(pixels.reshape(len(pixels), -1))
    frame = pd.DataFrame({"id": np.arange(len(pixels)), "image": flat})
    df = spark.createDataFrame(frame, "id long, image array<float>")

    def infer(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        model = _model(shared)
        for batch in batches:
            x = torch.from_numpy(np.stack(batch["image"].to_numpy()).astype(np.float32))
            with torch.inference_mode():
                logits = model(x.view(-1, *shape)).numpy()
            yield pd.DataFrame({"id": batch["id"], "logits": list(logits), "worker": os.getpid()})

    schema = "id long, logits array<float>, worker long"
    return df.mapInPandas(infer, schema).orderBy("id").toPandas()


def predict(spark: SparkSession, data: bytes, pixels: np.ndarray) -> np.ndarray:
    """The logits of ``pixels``, in their order (see ``predict_frame``)."""
    out = predict_frame(spark, data, pixels)
    return np.stack(out["logits"].to_numpy()).astype(np.float32)


def session(workers: int = 2) -> SparkSession:
    """A local Spark session with ``workers`` cores and Arrow batches."""
    # The workers run this Python (the one with torch and tracebridge), not the first
    # python3 on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # ... and can import this file's module (local workers inherit this environment; on a
    # cluster, ship your module with --py-files or spark.submit.pyFiles).
    path = os.environ.get("PYTHONPATH", "")
    if HERE not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, path) if p)
    return (
        SparkSession.builder.master(f"local[{workers}]")
        .appName("tracebridge-batch-inference")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
        .config("spark.ui.enabled", "false")
        # The final orderBy shuffles into 200 partitions by default: one per worker is enough
        # here. A small local driver starts faster with the quick JIT and the serial GC.
        .config("spark.sql.shuffle.partitions", str(workers))
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )


def main(count: int = 512, workers: int = 2) -> np.ndarray:
    torch.manual_seed(0)
    pixels = images(count)
    data = artifact_bytes(SmallNet(), torch.from_numpy(pixels[:2]))
    spark = session(workers)
    try:
        logits = predict(spark, data, pixels)
    finally:
        spark.stop()
    print(f"spark: {len(logits)} images, {workers} workers, first argmax {logits[:5].argmax(1)}")
    return logits


if __name__ == "__main__":
    main()
