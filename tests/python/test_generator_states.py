"""A generator's saved state is checked field by field before ``set_state`` (prober21c F9:
a CPU state with ``left = next = 624`` passed torch's own check, and each draw then read
past the generator's memory into the model's output)."""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.artifact import generators
from tracebridge.artifact.archive import describe, safetensors_bytes

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(3)

    def forward(self, x):
        return x + torch.rand(x.shape, generator=self.g, dtype=torch.float64).float()


def _draws(g: torch.Generator, step: int) -> None:
    """Move ``g`` along its stream by ops that draw differently (32-bit words, 64-bit
    doubles, the cached normal samples)."""
    kind = step % 5
    if kind == 0:
        torch.rand(step % 700 + 1, generator=g)
    elif kind == 1:
        torch.randn(step % 3 + 1, generator=g, dtype=torch.float64)
    elif kind == 2:
        torch.normal(0.0, 1.0, (1,), generator=g)
    elif kind == 3:
        torch.randint(0, 7, (step % 1300 + 1,), generator=g)
    else:
        torch.rand(step % 5 + 1, generator=g, dtype=torch.float64)


def test_states_of_real_generators_at_many_points_all_pass():
    for seed in (0, 1, 3, 2**32 + 7, 2**63 - 1):
        g = torch.Generator().manual_seed(seed)
        assert generators.cpu_state_problem(g.get_state().numpy().tobytes()) is None
        for step in range(400):
            _draws(g, step)
            data = g.get_state().numpy().tobytes()
            assert generators.cpu_state_problem(data) is None, (seed, step)
    g = torch.Generator()
    g.seed()
    assert generators.cpu_state_problem(g.get_state().numpy().tobytes()) is None
    assert generators.cpu_state_problem(torch.get_rng_state().numpy().tobytes()) is None


def _with(data: bytes, fmt: str, offset: int, *values) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def test_crafted_cpu_states_are_refused():
    g = torch.Generator().manual_seed(3)
    torch.rand(10, generator=g)
    good = g.get_state().numpy().tobytes()
    assert generators.cpu_state_problem(good) is None
    for crafted, words in [
        (_with(good, "<i", 8, 624)[:16] + struct.pack("<Q", 624) + good[24:], "left=624, next=624"),
        (_with(_with(good, "<i", 8, 2), "<Q", 16, 624), "left=2, next=624"),
        (_with(_with(good, "<i", 8, 300), "<Q", 16, 300), "left=300, next=300"),
        (_with(_with(good, "<i", 8, 1), "<Q", 16, 1), "left=1, next=1"),
        (_with(_with(good, "<i", 8, 624), "<Q", 16, 2**32 + 1), "next=4294967297"),
        (_with(good, "<i", 8, 0), "left=0"),
        (_with(good, "<i", 8, -5), "left=-5"),
        (_with(good, "<i", 12, 0), "'seeded' field is 0"),
        (_with(good, "<i", 12, 2), "'seeded' field is 2"),
        (_with(good, "<Q", 24 + 8 * 100, 2**32), "does not fit 32 bits"),
        (_with(good, "<i", 5040, 2), "neither 0 nor 1"),
        (_with(good, "<B", 5052, 7), "neither 0 nor 1"),
        (_with(good, "<d", 5024, float("nan")), "not finite"),
        (_with(good, "<f", 5048, float("inf")), "not finite"),
        (good[:5048], "5048 bytes"),
        (good + b"\0" * 8, "5064 bytes"),
    ]:
        problem = generators.cpu_state_problem(crafted)
        assert problem is not None and words in problem, (words, problem)


def test_cuda_states_are_bounded():
    ok = struct.pack("<Qq", 2**64 - 1, 4 * 10**6)
    assert generators.cuda_state_problem(ok) is None
    assert generators.cuda_state_problem(struct.pack("<Qq", 5, 0)) is None
    assert "Philox offset -4" in generators.cuda_state_problem(struct.pack("<Qq", 5, -4))
    assert "Philox offset 6" in generators.cuda_state_problem(struct.pack("<Qq", 5, 6))
    assert "8 bytes" in generators.cuda_state_problem(struct.pack("<Q", 5))


def _crafted_file(tmp_path, state: bytes) -> str:
    m = Noisy()
    path = tmp_path / "g.tb"
    tracebridge.save(tracebridge.trace(m, torch.zeros(1300)), path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
    blob, _ = safetensors_bytes(
        {"#generator.g": torch.frombuffer(bytearray(state), dtype=torch.uint8)}
    )
    doc["tensors"] = {"sha256": hashlib.sha256(blob).hexdigest(), "count": 0}
    crafted = tmp_path / "crafted.tb"
    with zipfile.ZipFile(crafted, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", blob)
    return crafted


def test_a_file_with_left_and_next_624_is_refused_at_load(tmp_path):
    g = torch.Generator().manual_seed(3)
    torch.rand(10, generator=g)
    good = g.get_state().numpy().tobytes()
    # torch itself takes this state (each field is in its range apart):
    torch.Generator().set_state(
        torch.frombuffer(
            bytearray(_with(_with(good, "<i", 8, 624), "<Q", 16, 624)), dtype=torch.uint8
        )
    )
    crafted = _crafted_file(tmp_path, _with(_with(good, "<i", 8, 624), "<Q", 16, 624))
    with pytest.raises(
        tracebridge.ArtifactError, match=r"generator 'g'.*left=624, next=624.*read past"
    ):
        tracebridge.load(crafted)
    with pytest.raises(tracebridge.ArtifactError, match=r"left=624, next=624"):
        describe(crafted)


def test_a_file_with_a_real_state_loads_and_draws_as_the_generator(tmp_path):
    g = torch.Generator().manual_seed(3)
    torch.rand(1000, generator=g)
    loaded = tracebridge.load(_crafted_file(tmp_path, g.get_state().numpy().tobytes()))
    want = torch.rand(1300, generator=g, dtype=torch.float64).float()
    torch.testing.assert_close(loaded(torch.zeros(1300)), want, rtol=0, atol=0)
