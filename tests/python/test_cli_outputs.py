"""``tracebridge run -o OUT.safetensors`` writes the documented tensors only (prober21d
F2): ``output0``, ``output1``, ..., without the artifact writer's ``#padN`` alignment
tensors; an inputs file from the safetensors library (docs/cli.md's recipe) is read."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.artifact import parse_safetensors
from tracebridge.frontends import cli

safetensors_torch = pytest.importorskip("safetensors.torch")


class ThreeOutputs(nn.Module):
    def forward(self, x):
        return x.sum(1), x.max(), x.argmax(-1), x.half()[:1]


def test_run_writes_only_the_outputs(tmp_path, capsys):
    x = torch.randn(3, 7)
    model = str(tmp_path / "m.tb")
    tracebridge.trace(ThreeOutputs(), x).save(model)
    inputs = str(tmp_path / "x.safetensors")
    safetensors_torch.save_file({"input0": x}, inputs)  # the library's file, as documented
    out = str(tmp_path / "y.safetensors")
    assert cli.main(["run", model, "--inputs", inputs, "-o", out]) == 0
    capsys.readouterr()
    loaded = safetensors_torch.load_file(out)
    assert sorted(loaded) == ["output0", "output1", "output2", "output3"]
    with open(out, "rb") as handle:
        parsed = parse_safetensors(handle.read(), out)
    for i, tensor in enumerate(ThreeOutputs()(x)):
        assert torch.equal(loaded[f"output{i}"], tensor)
        assert torch.equal(parsed[f"output{i}"], tensor)


def test_the_writer_keeps_each_tensor_aligned_to_its_element_size():
    tensors = {
        "output0": torch.ones(3, dtype=torch.uint8),
        "output1": torch.arange(3, dtype=torch.float64),
        "output2": torch.tensor(True),
        "output3": torch.ones(5, dtype=torch.float16),
    }
    blob = cli.user_safetensors_bytes(tensors)
    import json

    length = int.from_bytes(blob[:8], "little")
    assert (8 + length) % 8 == 0
    header = json.loads(blob[8 : 8 + length])
    assert list(header) == list(tensors)  # in the order given, no fillers
    for name, entry in header.items():
        assert entry["data_offsets"][0] % tensors[name].element_size() == 0
    for name, tensor in safetensors_torch.load(blob).items():
        assert torch.equal(tensor, tensors[name])
