"""Devices across save and load: the saved device is restored as ``torch.jit.load`` restores
it, ``map_location`` overrides (``torch.load``'s forms), and a device the machine lacks is a
clear error. The CPU runs everything here: a file "saved from" a device this machine lacks
is made by recording a fake device string at save; CUDA tests skip without CUDA."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.artifact import devices

ABSENT = "cuda:63"  # no machine has 64 GPUs; CUDA or not, this device is absent
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Linear(8, 2)).eval()


def _program_json(path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json"))


@pytest.fixture
def absent_device_file(tmp_path, monkeypatch):
    """A module artifact whose state says it was saved from ``ABSENT``, and its eager result."""
    net = _net()
    x = torch.rand(3, 4)
    traced = tracebridge.trace(net, x)
    path = tmp_path / "gpu.tb"
    with monkeypatch.context() as patch:
        patch.setattr(devices, "saved_device", lambda tensor: ABSENT)
        traced.save(path)
    return path, x, net(x)


def test_cpu_file_records_no_device_and_loads_on_cpu(tmp_path):
    net = _net()
    x = torch.rand(3, 4)
    path = tmp_path / "cpu.tb"
    tracebridge.trace(net, x).save(path)
    assert all("device" not in entry for entry in _program_json(path)["state"].values())
    loaded = tracebridge.load(path)
    assert all(p.device.type == "cpu" for p in loaded.parameters())
    torch.testing.assert_close(loaded(x), net(x))


def test_saved_device_is_recorded_per_state_entry(absent_device_file):
    path, _, _ = absent_device_file
    state = _program_json(path)["state"]
    assert state and all(entry["device"] == ABSENT for entry in state.values())


def test_absent_saved_device_is_a_clear_error(absent_device_file):
    path, _, _ = absent_device_file
    with pytest.raises(tracebridge.ArtifactError) as info:
        tracebridge.load(path)
    message = str(info.value)
    assert ABSENT in message and "map_location='cpu'" in message
    assert str(path) in message


@pytest.mark.parametrize(
    "where", ["cpu", torch.device("cpu"), {ABSENT: "cpu"}], ids=["str", "device", "dict"]
)
def test_map_location_overrides_the_saved_device(absent_device_file, where):
    path, x, expected = absent_device_file
    loaded = tracebridge.load(path, map_location=where)
    assert all(t.device.type == "cpu" for t in loaded.state_dict().values())
    torch.testing.assert_close(loaded(x), expected)


def test_map_location_dict_keeps_devices_it_does_not_name(tmp_path):
    net = _net()
    path = tmp_path / "cpu.tb"
    tracebridge.trace(net, torch.rand(3, 4)).save(path)
    loaded = tracebridge.load(path, map_location={"cuda:0": "meta"})
    assert all(p.device.type == "cpu" for p in loaded.parameters())


def test_map_location_moves_to_the_meta_device(tmp_path):
    const = torch.ones(3)
    f = tracebridge.trace(lambda x: x + const, torch.rand(3), check_trace=False)
    path = tmp_path / "f.tb"
    f.save(path)
    loaded = tracebridge.load(path, map_location="meta")
    assert loaded(torch.rand(3, device="meta")).device.type == "meta"


def test_map_location_to_an_absent_device_is_a_clear_error(tmp_path):
    path = tmp_path / "cpu.tb"
    tracebridge.trace(_net(), torch.rand(3, 4)).save(path)
    with pytest.raises(tracebridge.ArtifactError, match=r"map_location asks for device 'cuda:63'"):
        tracebridge.load(path, map_location=ABSENT)


def test_map_location_of_another_type_is_a_clear_error(tmp_path):
    path = tmp_path / "cpu.tb"
    tracebridge.trace(_net(), torch.rand(3, 4)).save(path)
    with pytest.raises(tracebridge.ArtifactError, match="map_location takes a device"):
        tracebridge.load(path, map_location=lambda storage, loc: storage)
    with pytest.raises(tracebridge.ArtifactError, match="not a device"):
        tracebridge.load(path, map_location="gpu please")


def test_a_malformed_device_string_is_refused_on_save(tmp_path, monkeypatch):
    traced = tracebridge.trace(_net(), torch.rand(3, 4))
    monkeypatch.setattr(devices, "saved_device", lambda tensor: "cuda 0; rm -rf")
    with pytest.raises(tracebridge.ArtifactError, match="schema"):
        traced.save(tmp_path / "bad.tb")


def test_function_constants_follow_the_saved_device(tmp_path, monkeypatch):
    const = torch.arange(3.0)
    f = tracebridge.trace(lambda x: x * const, torch.rand(3), check_trace=False)
    path = tmp_path / "f.tb"
    monkeypatch.setattr(devices, "saved_device", lambda tensor: ABSENT)
    f.save(path)
    with pytest.raises(tracebridge.ArtifactError, match="map_location='cpu'"):
        tracebridge.load(path)
    torch.testing.assert_close(tracebridge.load(path, map_location="cpu")(torch.ones(3)), const)


@needs_cuda
def test_cuda_file_loads_back_onto_cuda(tmp_path):
    net = _net().cuda()
    x = torch.rand(3, 4, device="cuda")
    path = tmp_path / "gpu.tb"
    tracebridge.trace(net, x).save(path)
    assert {e["device"] for e in _program_json(path)["state"].values()} == {"cuda:0"}
    loaded = tracebridge.load(path)
    assert all(p.device.type == "cuda" for p in loaded.parameters())
    torch.testing.assert_close(loaded(x), net(x))
    on_cpu = tracebridge.load(path, map_location="cpu")
    torch.testing.assert_close(on_cpu(x.cpu()), net(x).cpu())


@needs_cuda
def test_cpu_file_maps_onto_cuda(tmp_path):
    net = _net()
    x = torch.rand(3, 4)
    path = tmp_path / "cpu.tb"
    tracebridge.trace(net, x).save(path)
    loaded = tracebridge.load(path, map_location={"cpu": "cuda:0"})
    torch.testing.assert_close(loaded(x.cuda()).cpu(), net(x))
