"""The scale-out examples (examples/ray_batch_inference.py, examples/spark_batch_inference.py)
run locally on two workers and give the single-process results, in row order.

Ray and PySpark need numpy 2, so they live in their own environment (``make scale-setup``
builds .venv-scale; ``make test-scale``, a step of ``make test``, runs this file there).
Elsewhere these tests skip; with TRACEBRIDGE_SCALE=1 (as ``make test-scale`` sets it) a
missing engine, or Java for Spark, is a failure.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

COUNT = 96  # images: enough for several batches on each worker, small enough to be quick
REQUIRED = os.environ.get("TRACEBRIDGE_SCALE") == "1"


def _engine(name: str):
    """The module ``name``: skip without it, unless the engines are required."""
    if REQUIRED:
        return __import__(name)
    return pytest.importorskip(name, reason=f"{name} is in .venv-scale only (make scale-setup)")


@pytest.fixture(scope="module")
def work():
    from scale_common import SmallNet, artifact_bytes, images, predict_here

    torch.manual_seed(0)
    pixels = images(COUNT, size=16, seed=3)
    data = artifact_bytes(SmallNet(), torch.from_numpy(pixels[:2]))
    return data, pixels, predict_here(data, pixels)


def test_ray_data_two_actors_in_order(work):
    ray = _engine("ray")
    from ray_batch_inference import init, predict

    data, pixels, expected = work
    init(workers=2)
    try:
        got = predict(data, pixels, workers=2, batch_size=16)
    finally:
        ray.shutdown()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_spark_map_in_pandas_two_workers_in_order(work):
    _engine("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        message = "Spark needs Java 17 (make scale-setup installs openjdk-17-jre-headless)"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    from spark_batch_inference import predict_frame, session

    data, pixels, expected = work
    spark = session(workers=2)
    try:
        frame = predict_frame(spark, data, pixels)
    finally:
        spark.stop()
    assert list(frame["id"]) == list(range(COUNT))
    got = np.stack(frame["logits"].to_numpy()).astype(np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert 1 <= frame["worker"].nunique() <= 2 and os.getpid() not in set(frame["worker"])
