"""Write the Python half of the golden vectors (fixed seeds), then merge the manifest.

Each vector is a small artifact ``NAME.tb`` plus one or more cases. A case is a pair of
safetensors files: ``NAME[.case].inputs.safetensors`` (tensors ``input0``, ``input1``, ...
in flattened order) and ``NAME[.case].expected.safetensors`` (``output0``, ... in the
flattened order of the outputs), or, for a guard case, inputs only and the error the call
must raise. For a ``trace_module`` vector with several methods the names carry the method:
``forward.input0``, ``encode.output0``. Expected outputs come from the eager model, never
from the trace, so a vector checks the recording as well as the format.

``manifest.json`` lists every vector with its producer language, methods, cases and
tolerance. This script rewrites only the entries whose producer is Python; ``generate.R``
does the same for the R half, so the two can run in any order.

Note: compatibility. The committed files are format version 1 and are the format's
compatibility test: later versions of tracebridge must keep loading them unchanged. Do not
regenerate them when the format changes; add new vectors (a new name, or a ``v2_`` prefix)
and keep the old ones.

Run from the repository root::

    .venv/bin/python shared_ir/vectors/generate.py
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge.artifact import safetensors_bytes
from tracebridge.ir.pytree import flatten

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
FLOAT_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    blob, _ = safetensors_bytes(tensors)
    path.write_bytes(blob)


def named(prefix: str, values, method: str | None = None) -> dict[str, torch.Tensor]:
    """``{"input0": t0, ...}`` (or ``"encode.input0"``) in flattened order."""
    leaves, _ = flatten(values, _is_tensor)
    head = f"{method}." if method else ""
    return {f"{head}{prefix}{i}": t.detach().clone() for i, t in enumerate(leaves)}


class Vector:
    """Collects the files and manifest entry of one vector."""

    def __init__(self, name: str, description: str, covers: list[str]):
        self.name, self.description, self.covers = name, description, covers
        self.cases: list[dict] = []
        self.methods: list[str] = []
        self.kind = ""

    def save(self, traced) -> None:
        tracebridge.save(traced, HERE / f"{self.name}.tb")
        self.methods = list(traced.program.methods)
        self.kind = traced.program.kind

    def case(
        self,
        label: str,
        inputs: dict[str, torch.Tensor],
        expected: dict[str, torch.Tensor] | None = None,
        *,
        mode: str | None = None,
        raises: str | None = None,
        note: str = "",
    ) -> None:
        stem = self.name if label == "" else f"{self.name}.{label}"
        write_tensors(HERE / f"{stem}.inputs.safetensors", inputs)
        entry: dict = {"label": label or "default", "inputs": f"{stem}.inputs.safetensors"}
        if expected is not None:
            write_tensors(HERE / f"{stem}.expected.safetensors", expected)
            entry["expected"] = f"{stem}.expected.safetensors"
        if mode:
            entry["mode"] = mode
        if raises:
            entry["raises"] = raises
        if note:
            entry["note"] = note
        self.cases.append(entry)

    def entry(self) -> dict:
        return {
            "name": self.name,
            "producer": "python",
            "artifact": f"{self.name}.tb",
            "kind": self.kind,
            "methods": self.methods,
            "description": self.description,
            "covers": self.covers,
            "tolerance": FLOAT_TOLERANCE,
            "cases": self.cases,
        }


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded(seed))


def eager(module: nn.Module, *args, mode: str | None = None):
    """Run a copy, so that the state that was saved is not changed by the run."""
    mod = copy.deepcopy(module)
    if mode is not None:
        mod.train(mode == "train")
    with torch.no_grad():
        return mod(*args)


# --- the vectors ------------------------------------------------------------------------


def softplus_gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.softplus(x) * torch.sigmoid(y) + x.mean(dim=-1, keepdim=True)


def py_function() -> Vector:
    v = Vector(
        "py_function", "A plain function of two tensors: softplus, sigmoid, mean.", ["function"]
    )
    x, y = randn(3, 5, seed=1), randn(3, 5, seed=2)
    v.save(tracebridge.trace(softplus_gate, (x, y)))
    x2, y2 = randn(4, 7, seed=3), randn(4, 7, seed=4)
    v.case("", named("input", (x2, y2)), named("output", softplus_gate(x2, y2)))
    return v


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.head(x.flatten(1))


def py_cnn_bn() -> Vector:
    v = Vector(
        "py_cnn_bn",
        "Conv2d + BatchNorm2d (running statistics from three training "
        "batches) + ReLU + max-pool + Linear, traced in eval mode.",
        ["cnn", "batchnorm"],
    )
    torch.manual_seed(10)
    net = ConvBN()
    with torch.no_grad():
        for s in range(3):
            net(randn(4, 3, 8, 8, seed=20 + s) * 2 + 0.5)
    net.eval()
    v.save(tracebridge.trace(net, randn(2, 3, 8, 8, seed=11)))
    x = randn(3, 3, 8, 8, seed=12)
    v.case("", named("input", (x,)), named("output", eager(net, x)))
    return v


class LSTMHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor):
        out, (h, c) = self.lstm(x)
        return self.head(out), (h, c)


def py_lstm() -> Vector:
    v = Vector(
        "py_lstm",
        "nn.LSTM (batch_first) + Linear head; returns (logits, (h, c)).",
        ["lstm", "tuple_output"],
    )
    torch.manual_seed(30)
    net = LSTMHead().eval()
    v.save(tracebridge.trace(net, randn(2, 5, 4, seed=31)))
    x = randn(2, 5, 4, seed=32)
    v.case("", named("input", (x,)), named("output", eager(net, x)))
    return v


class DictTuple(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor):
        z = self.proj(x)
        return {"logits": z * scale, "parts": (z.relu(), z.sum(dim=1)), "probs": z.softmax(-1)}


def py_dict_tuple() -> Vector:
    v = Vector(
        "py_dict_tuple",
        "Two inputs; a dict output holding a tensor, a tuple of two "
        "tensors and another tensor (strict=False). Flattened order: logits, parts[0], "
        "parts[1], probs.",
        ["dict_output", "tuple_output"],
    )
    torch.manual_seed(40)
    net = DictTuple().eval()
    x, s = randn(2, 5, seed=41), torch.tensor([0.5, 2.0, -1.0])
    v.save(tracebridge.trace(net, (x, s), strict=False))
    x2, s2 = randn(4, 5, seed=42), torch.tensor([1.5, -0.5, 3.0])
    v.case("", named("input", (x2, s2)), named("output", eager(net, x2, s2)))
    return v


class BNBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def py_respect_mode() -> Vector:
    v = Vector(
        "py_respect_mode",
        "Linear + BatchNorm1d + ReLU + Linear traced with "
        "respect_mode=True: trainforward (batch statistics) and evalforward (running "
        "statistics); forward follows train()/eval(). No dropout, so both are "
        "deterministic.",
        ["respect_mode", "batchnorm"],
    )
    torch.manual_seed(50)
    net = BNBlock()
    with torch.no_grad():
        net(randn(8, 6, seed=51) + 1.0)  # non-trivial running statistics
    net.eval()
    traced = tracebridge.trace(net, randn(4, 6, seed=52), respect_mode=True)
    v.save(traced)
    x = randn(5, 6, seed=53)
    v.case("eval", named("input", (x,)), named("output", eager(net, x, mode="eval")), mode="eval")
    v.case(
        "train",
        named("input", (x,)),
        named("output", eager(net, x, mode="train")),
        mode="train",
        note="batch statistics; the run updates the running statistics",
    )
    return v


def gated(x: torch.Tensor) -> torch.Tensor:
    if x.mean() > 0:  # data-dependent branch: the trace records a guard
        return x * 2 + 1
    return -x


def py_guards() -> Vector:
    v = Vector(
        "py_guards",
        "A data-dependent branch (x.mean() > 0). The trace takes the "
        "positive branch and records a guard; an input with a negative mean must raise "
        "GuardError, never return the wrong branch's result.",
        ["guards"],
    )
    x = randn(3, 4, seed=60).abs() + 0.1
    traced = tracebridge.trace(gated, x, check_trace=False)
    if not traced.guards:
        sys.exit("py_guards: the trace recorded no guard")
    v.save(traced)
    ok = randn(2, 4, seed=61).abs() + 0.2
    v.case("", named("input", (ok,)), named("output", gated(ok)))
    bad = -(randn(2, 4, seed=62).abs() + 0.2)
    v.case(
        "guard",
        named("input", (bad,)),
        raises="GuardError",
        note="input0 has a negative mean: the guard at `if x.mean() > 0` breaks",
    )
    return v


VECTORS = [py_function, py_cnn_bn, py_lstm, py_dict_tuple, py_respect_mode, py_guards]


def merge_manifest(entries: list[dict], producer: str) -> None:
    """Replace this producer's entries in manifest.json, keep the others."""
    doc = {"format": "tracebridge-golden-vectors", "manifest_version": 1, "vectors": []}
    if MANIFEST.exists():
        doc = json.loads(MANIFEST.read_text())
    kept = [e for e in doc["vectors"] if e["producer"] != producer]
    doc["vectors"] = sorted(kept + entries, key=lambda e: e["name"])
    doc["naming"] = (
        "NAME.tb; NAME[.LABEL].inputs.safetensors with input0, input1, ... and "
        "NAME[.LABEL].expected.safetensors with output0, ... in flattened order; "
        "METHOD.input0 / METHOD.output0 when a case calls several methods"
    )
    MANIFEST.write_text(json.dumps(doc, indent=1) + "\n")


def main() -> None:
    torch.use_deterministic_algorithms(True)
    entries = []
    for make in VECTORS:
        vector = make()
        entries.append(vector.entry())
        print(f"wrote {vector.name}: {', '.join(vector.methods)}; {len(vector.cases)} case(s)")
    for entry in entries:
        doc, _ = tracebridge.artifact.read_json(HERE / entry["artifact"])
        entry["format_version"] = doc["format_version"]
    merge_manifest(entries, "python")


if __name__ == "__main__":
    main()
