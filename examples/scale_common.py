"""What the scale-out examples share: a small image model, traced and saved to bytes.

The artifact's bytes are what goes to the workers (by Ray's object store or a Spark
broadcast): every worker loads them once with ``tracebridge.load(data)``, with every check
a file gets, and never needs the model's Python source.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from torch import nn

import tracebridge


class SmallNet(nn.Module):
    """A small image classifier: two convolutions, pooling and a linear layer."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def artifact_bytes(model: nn.Module, example: torch.Tensor) -> bytes:
    """Trace ``model`` (in eval mode) on ``example`` and return the artifact as bytes."""
    traced = tracebridge.trace(model.eval(), example, progress=False)
    buffer = io.BytesIO()
    tracebridge.save(traced, buffer, progress=False)
    return buffer.getvalue()


def images(count: int, size: int = 32, seed: int = 0) -> np.ndarray:
    """``count`` random images, float32, shaped (count, 3, size, size)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count, 3, size, size), dtype=np.float32)


def predict_here(data: bytes, batch: np.ndarray) -> np.ndarray:
    """The reference: the same artifact run in this process."""
    model = tracebridge.load(data)
    with torch.inference_mode():
        return model(torch.from_numpy(batch)).numpy()
