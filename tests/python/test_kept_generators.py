"""torch generators kept by the traced code: a random op's ``generator=`` (gen20).

``torch.rand(n, generator=self.g)`` in a module's forward draws from ``self.g``; the
trace draws from that very generator, so a reseed reaches it and every call gives eager's
numbers; tracing leaves the generator's state as it found it. A generator the trace
cannot keep (made in the call, passed in, reseeded inside the call) is refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import zipfile

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.artifact.archive import safetensors_bytes
from tracebridge.check.program import LIMITS, check_program
from tracebridge.errors import TraceError, UnsupportedOpError
from tracebridge.ir import ops

pytestmark = pytest.mark.usefixtures("quiet_warnings")

GLOBAL_GENERATOR = torch.Generator().manual_seed(11)


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(3)

    def forward(self, x):
        return x + torch.rand(x.shape, generator=self.g)


class EveryDraw(nn.Module):
    """Each random op that takes a generator, drawing from a sub-module's and a global."""

    def __init__(self):
        super().__init__()
        self.noise = torch.Generator().manual_seed(4)

    def forward(self, x):
        g = self.noise
        y = torch.empty_like(x).uniform_(-1, 1, generator=g)
        y = y + torch.randn(x.shape, generator=g) + torch.normal(x, 1.0, generator=g)
        y = y + torch.bernoulli(torch.full_like(x, 0.5), generator=g)
        z = x.clone()
        z.normal_(generator=g)
        z.exponential_(generator=g)
        z.bernoulli_(0.3, generator=g)
        w = torch.randint(0, 10, x.shape, generator=g).float()
        p = torch.poisson(x.abs() + 1, g)
        r = torch.rand_like(x, generator=g) + torch.randn_like(x, generator=g)
        m = torch.multinomial(x.abs() + 0.1, 2, generator=g).float().sum()
        q = torch.randperm(5, generator=g).float().sum()
        rr = x.clone().random_(0, 5, generator=g)
        return y + z + w + p + r + m + q + rr + torch.rand(x.shape, generator=GLOBAL_GENERATOR)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = EveryDraw()

    def forward(self, x):
        return self.inner(x) * 2


def _calls(fn, x, n=3):
    return [fn(x.clone()) for _ in range(n)]


def _assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_trace_draws_from_the_module_generator(runtime):
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2), runtime=runtime)
    m.g.manual_seed(5)
    got = _calls(traced, torch.zeros(3))
    m.g.manual_seed(5)
    want = _calls(m, torch.zeros(3))
    _assert_same(got, want)
    assert not torch.equal(got[0], got[1])  # each call draws on


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_every_random_op_takes_a_kept_generator(runtime):
    m = Outer()
    noise, kept_global = m.inner.noise.get_state(), GLOBAL_GENERATOR.get_state()
    traced = tracebridge.trace(m, torch.ones(3), check_inputs=[(torch.ones(5),)], runtime=runtime)
    # the recording, the checks and the size probes left both generators as they were
    assert torch.equal(m.inner.noise.get_state(), noise)
    assert torch.equal(GLOBAL_GENERATOR.get_state(), kept_global)
    assert sorted(traced.program.generators) == ["generator0", "inner.noise"]
    assert traced.program.generators["inner.noise"] is m.inner.noise
    m.inner.noise.manual_seed(7)
    GLOBAL_GENERATOR.manual_seed(8)
    got = _calls(traced, torch.ones(4))
    m.inner.noise.manual_seed(7)
    GLOBAL_GENERATOR.manual_seed(8)
    want = _calls(m, torch.ones(4))
    _assert_same(got, want)
    GLOBAL_GENERATOR.set_state(kept_global)


def test_a_closure_generator_of_a_traced_function():
    g = torch.Generator().manual_seed(1)

    def f(x):
        return x * torch.randn(x.shape, generator=g)

    traced = tracebridge.trace(f, torch.ones(2))
    assert list(traced.program.generators.values()) == [g]
    g.manual_seed(2)
    got = _calls(traced, torch.ones(3))
    g.manual_seed(2)
    _assert_same(got, _calls(f, torch.ones(3)))


def test_a_function_that_calls_a_module_keeping_a_generator():
    model = Noisy()

    def f(x):
        return model(x) * 2

    traced = tracebridge.trace(f, torch.zeros(2))
    assert list(traced.program.generators.values()) == [model.g]
    model.g.manual_seed(4)
    got = _calls(traced, torch.zeros(3))
    model.g.manual_seed(4)
    _assert_same(got, _calls(f, torch.zeros(3)))


def test_the_graph_names_the_generator():
    traced = tracebridge.trace(Noisy(), torch.zeros(2))
    assert "rand(" in traced.graph and "generator=generator('g')" in traced.graph


def test_the_global_generator_passed_by_name_is_the_global_generator():
    class Default(nn.Module):
        def forward(self, x):
            return x + torch.rand(x.shape, generator=torch.default_generator)

    m = Default()
    traced = tracebridge.trace(m, torch.zeros(2))
    assert traced.program.generators == {}
    torch.manual_seed(0)
    got = _calls(traced, torch.zeros(2))
    torch.manual_seed(0)
    _assert_same(got, _calls(m, torch.zeros(2)))


def test_a_generator_set_anew_on_the_module_is_the_one_drawn_from():
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2))
    m.g = torch.Generator().manual_seed(9)  # what eager code reads from now on
    got = _calls(traced, torch.zeros(2))
    m.g = torch.Generator().manual_seed(9)
    _assert_same(got, _calls(m, torch.zeros(2)))
    m.g = None  # eager then draws from the global generator
    torch.manual_seed(1)
    got = _calls(traced, torch.zeros(2))
    torch.manual_seed(1)
    _assert_same(got, _calls(m, torch.zeros(2)))


def test_a_refused_specialisation_puts_the_generator_back():
    class Squeeze(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.Generator().manual_seed(0)

        def forward(self, x):
            r = torch.rand(x.shape, generator=self.g)
            if x.shape[0] == 1:  # a size-1 batch takes another graph, after the draw
                return (x + r) * 2
            return x + r

    m = Squeeze()
    state = m.g.get_state()
    traced = tracebridge.trace(m, torch.zeros(3, 2))
    assert torch.equal(m.g.get_state(), state)  # (the size-1 probe drew too)
    assert traced.program.specialised
    for batch in (1, 4, 1):
        m.g.manual_seed(batch)
        got = _calls(traced, torch.zeros(batch, 2), 2)
        m.g.manual_seed(batch)
        _assert_same(got, _calls(m, torch.zeros(batch, 2), 2))


def test_a_generator_made_in_the_call_is_refused():
    class Made(nn.Module):
        def forward(self, x):
            g = torch.Generator().manual_seed(0)
            return x + torch.rand(x.shape, generator=g)

    with pytest.raises(UnsupportedOpError, match=r"cannot keep \(at .*test_kept_generators"):
        tracebridge.trace(Made(), torch.zeros(2))


def test_a_generator_passed_in_is_refused():
    class Given(nn.Module):
        def forward(self, x, g):
            return x + torch.rand(x.shape, generator=g)

    with pytest.raises(TraceError, match="type Generator.*keep it as an attribute"):
        tracebridge.trace(Given(), (torch.zeros(2), torch.Generator()))


class ReseedBefore(Noisy):
    def forward(self, x):
        self.g.manual_seed(0)  # the same noise on every call
        return x + torch.rand(x.shape, generator=self.g)


class ReseedAfter(Noisy):
    def forward(self, x):
        y = x + torch.rand(x.shape, generator=self.g)
        self.g.manual_seed(3)
        return y


@pytest.mark.parametrize(
    ("cls", "when"), [(ReseedBefore, "before the draw at"), (ReseedAfter, "after its last draw")]
)
def test_a_state_set_in_the_call_is_refused(cls, when):
    m = cls()
    state = m.g.get_state()
    with pytest.raises(UnsupportedOpError, match=f"generator self.g {when}"):
        tracebridge.trace(m, torch.zeros(2))
    assert torch.equal(m.g.get_state(), state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_generator():
    class CudaNoisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.Generator(device="cuda").manual_seed(3)

        def forward(self, x):
            return x + torch.randn(x.shape, generator=self.g, device=x.device)

    m = CudaNoisy()
    state = m.g.get_state()
    traced = tracebridge.trace(m, torch.zeros(2, device="cuda"))
    assert torch.equal(m.g.get_state(), state)
    m.g.manual_seed(5)
    got = _calls(traced, torch.zeros(3, device="cuda"))
    m.g.manual_seed(5)
    _assert_same(got, _calls(m, torch.zeros(3, device="cuda")))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_generator_saved_and_loaded(tmp_path):
    class CudaNoisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.Generator(device="cuda").manual_seed(3)

        def forward(self, x):
            return x * torch.rand(x.shape, generator=self.g, device=x.device)

    m = CudaNoisy()
    traced = tracebridge.trace(m, torch.ones(2, device="cuda"))
    m.g.manual_seed(6)
    loaded = tracebridge.load(_saved(traced, tmp_path))
    assert loaded.g.device.type == "cuda"
    _assert_same(
        _calls(loaded, torch.ones(3, device="cuda")), _calls(m, torch.ones(3, device="cuda"))
    )


# --- save and load ------------------------------------------------------------------------


def _saved(traced, tmp_path, name="g.tb"):
    path = tmp_path / name
    tracebridge.save(traced, path)
    return path


def test_a_loaded_module_draws_from_its_saved_generators(tmp_path):
    m = Outer()
    traced = tracebridge.trace(m, torch.ones(3))
    m.inner.noise.manual_seed(7)
    GLOBAL_GENERATOR.manual_seed(8)
    loaded = tracebridge.load(_saved(traced, tmp_path))
    # each where the original keeps it (a global's on the root), in its state at save time
    assert torch.equal(loaded.inner.noise.get_state(), m.inner.noise.get_state())
    assert torch.equal(loaded.generator0.get_state(), GLOBAL_GENERATOR.get_state())
    assert loaded.inner.noise is not m.inner.noise
    _assert_same(_calls(loaded, torch.ones(4)), _calls(m, torch.ones(4)))
    loaded.inner.noise.manual_seed(1)
    loaded.generator0.manual_seed(2)
    m.inner.noise.manual_seed(1)
    GLOBAL_GENERATOR.manual_seed(2)
    _assert_same(_calls(loaded, torch.ones(2)), _calls(m, torch.ones(2)))


def test_the_file_holds_each_generator_and_its_state(tmp_path):
    m = Noisy()
    path = _saved(tracebridge.trace(m, torch.zeros(2)), tmp_path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        header = _safetensors_header(archive.read("tensors.safetensors"))
    assert doc["generators"] == {"g": {"device": "cpu"}}
    assert header["#generator.g"]["dtype"] == "U8"
    assert header["#generator.g"]["shape"] == list(m.g.get_state().shape)
    assert doc["tensors"]["count"] == 0  # (no state tensor: the generator's is apart)
    node = next(n for n in doc["methods"]["forward"]["nodes"] if n["op"] == "rand")
    assert node["kwargs"]["generator"] == {"generator": "g"}


def test_a_loaded_function_draws_from_its_saved_generator(tmp_path):
    g = torch.Generator().manual_seed(1)

    def f(x):
        return x + torch.rand(x.shape, generator=g)

    traced = tracebridge.trace(f, torch.zeros(2))
    g.manual_seed(4)
    loaded = tracebridge.load(_saved(traced, tmp_path))
    (name,) = loaded.program.generators
    assert torch.equal(loaded.program.generators[name].get_state(), g.get_state())
    _assert_same(_calls(loaded, torch.zeros(3)), _calls(f, torch.zeros(3)))


def test_saving_a_module_without_its_generator_is_refused(tmp_path):
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2))
    m.g = None
    with pytest.raises(tracebridge.ArtifactError, match="generator 'g'.*NoneType"):
        tracebridge.save(traced, tmp_path / "none.tb")


def _safetensors_header(blob: bytes) -> dict:
    size = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8 : 8 + size])


def _rand_doc(generator, generators=None):
    """A one-node function program ``rand(2, generator=...)``."""
    doc = {
        "format": "tracebridge",
        "format_version": 2,
        "opset_version": ops.OPSET_VERSION,
        "producer": {"name": "tracebridge", "version": "0", "language": "python"},
        "kind": "function",
        "methods": {
            "forward": {
                "inputs": [{"id": 0, "kind": "Tensor", "dtype": "float32", "shape": ["s0"]}],
                "in_spec": {
                    "t": "tuple",
                    "c": [{"t": "tuple", "c": [{"t": "leaf"}]}, {"t": "dict", "keys": [], "c": []}],
                },
                "nodes": [
                    {
                        "op": "rand",
                        "args": [[2]],
                        "kwargs": {"generator": generator},
                        "outputs": [{"id": 1, "kind": "Tensor", "dtype": "float32", "shape": [2]}],
                        "out_spec": {"t": "leaf"},
                        "loc": "model.py:3",
                    }
                ],
                "outputs": [{"ref": 1}],
                "out_spec": {"t": "leaf"},
            }
        },
        "state": {},
    }
    if generators is not None:
        doc["generators"] = generators
    return doc


def _refused(doc, *words):
    with pytest.raises(tracebridge.ArtifactError) as info:
        check_program(doc, "crafted.tb")
    for word in words:
        assert word in str(info.value), str(info.value)


def test_the_checker_takes_a_generator_the_program_keeps():
    check_program(_rand_doc({"generator": "g"}, {"g": {"device": "cpu"}}), "crafted.tb")
    check_program(_rand_doc(None), "crafted.tb")


@pytest.mark.parametrize(
    ("generator", "generators", "words"),
    [
        ({"generator": "h"}, {"g": {"device": "cpu"}}, ["generator 'h'", "does not keep"]),
        ({"generator": "g"}, None, ["generator 'g'", "does not keep"]),
        ("g", {"g": {"device": "cpu"}}, ["argument kinds"]),
        ({"generator": "g"}, {"g": {"device": "meta"}}, ["device"]),
        ({"generator": "g"}, {"g": {}}, ["device"]),
        ({"generator": "g"}, {"g": {"device": "cpu"}, "g.h": {"device": "cpu"}}, ["inside"]),
        ({"generator": "g"}, {"g": {"device": "cpu"}, "_tb_tree": {"device": "cpu"}}, ["_tb"]),
        ({"generator": "g"}, {"g": {"device": "cpu"}, "a.training": {"device": "cpu"}}, ["part"]),
    ],
)
def test_the_checker_refuses_a_generator_it_does_not_keep(generator, generators, words):
    _refused(_rand_doc(generator, generators), *words)


def test_a_generator_is_refused_where_another_argument_is():
    doc = _rand_doc(None, {"g": {"device": "cpu"}})
    doc["methods"]["forward"]["nodes"][0]["args"] = [{"generator": "g"}]
    _refused(doc, "argument kinds")
    doc = _rand_doc(None, {"g": {"device": "cpu"}})
    doc["methods"]["forward"]["outputs"] = [{"generator": "g"}]
    _refused(doc, "a graph output is a generator")


def test_a_generator_without_its_state_or_with_a_wrong_one_is_refused(tmp_path):
    path = _saved(tracebridge.trace(Noisy(), torch.zeros(2)), tmp_path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
    for tensors, words in [
        ({}, "generator 'g' has no state"),
        ({"#generator.g": torch.zeros(10, dtype=torch.uint8)}, "does not fit a cpu generator"),
        ({"#generator.g": torch.zeros(2, 3, dtype=torch.uint8)}, "must be a 1-D U8 entry"),
    ]:
        blob, _ = safetensors_bytes(tensors)
        doc["tensors"] = {"sha256": hashlib.sha256(blob).hexdigest(), "count": 0}
        crafted = tmp_path / "crafted.tb"
        with zipfile.ZipFile(crafted, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr("program.json", json.dumps(doc))
            archive.writestr("tensors.safetensors", blob)
        with pytest.raises(tracebridge.ArtifactError, match=words):
            tracebridge.load(crafted)


def test_a_copy_keeps_a_copy_of_the_generator():
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2)).eval()
    m.g.manual_seed(5)
    frozen = tracebridge.freeze(traced)  # (a copy of the state, the generator's too)
    copied = copy.deepcopy(traced)
    want = _calls(m, torch.zeros(3), 2)
    _assert_same(_calls(frozen, torch.zeros(3), 2), want)
    _assert_same(_calls(copied, torch.zeros(3), 2), want)


def test_export_and_compile_refuse_a_kept_generator(tmp_path):
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2))
    with pytest.raises(TraceError, match="draws from the generator 'g'"):
        tracebridge.to_graph_module(traced)
    with pytest.raises(TraceError, match="draws from the generator 'g'"):
        tracebridge.export_onnx(traced, tmp_path / "noisy.onnx")
    for model in (m.eval(), traced.eval()):  # (compile returns a model in training as it is)
        with pytest.raises(TraceError, match=r"compile\(\) does not take .*\('g'\)"):
            tracebridge.compile(model, (torch.zeros(3),))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_a_cuda_generator_is_refused_without_cuda(tmp_path):
    path = _saved(tracebridge.trace(Noisy(), torch.zeros(2)), tmp_path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
    doc["generators"]["g"]["device"] = "cuda:0"
    blob, _ = safetensors_bytes({"#generator.g": torch.zeros(16, dtype=torch.uint8)})
    doc["tensors"] = {"sha256": hashlib.sha256(blob).hexdigest(), "count": 0}
    crafted = tmp_path / "cuda.tb"
    with zipfile.ZipFile(crafted, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", blob)
    with pytest.raises(tracebridge.ArtifactError, match="saved from cuda:0.*no CUDA device"):
        tracebridge.load(crafted)


# --- map_location and limits -----------------------------------------------------------------


def _crafted_generators(tmp_path, doc, states: dict, name="crafted.tb"):
    """``doc`` (program.json) written with ``states`` (entry -> uint8 tensor) as its
    tensors.safetensors."""
    blob, _ = safetensors_bytes(states)
    doc["tensors"] = {"sha256": hashlib.sha256(blob).hexdigest(), "count": 0}
    crafted = tmp_path / name
    with zipfile.ZipFile(crafted, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", blob)
    return crafted


def _noisy_doc(tmp_path) -> dict:
    path = _saved(tracebridge.trace(Noisy(), torch.zeros(2)), tmp_path)
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json"))


def test_a_cpu_generator_stays_on_the_cpu_whatever_map_location_says(tmp_path):
    """A CPU generator is made on the CPU under every map_location, as ``nn.Module.to()``
    leaves a generator where it is; it draws what the saved one would."""
    m = Noisy()
    path = _saved(tracebridge.trace(m, torch.zeros(2)), tmp_path)
    for where in ("cpu", torch.device("cpu"), {"cpu": "cpu"}, {"cuda:0": "cpu"}):
        loaded = tracebridge.load(path, map_location=where)
        assert loaded.g.device.type == "cpu"
        m.g.manual_seed(3)
        loaded.g.manual_seed(3)
        _assert_same(_calls(loaded, torch.zeros(3)), _calls(m, torch.zeros(3)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
@pytest.mark.parametrize("where", ["cpu", torch.device("cpu"), {"cuda:0": "cpu"}])
def test_a_cuda_generator_mapped_to_the_cpu_is_refused_naming_why(tmp_path, where):
    """map_location moves a CUDA generator within CUDA only: a CUDA state is not a CPU
    generator's, and a CPU generator seeded anew would draw other numbers, silently."""
    doc = _noisy_doc(tmp_path)
    doc["generators"]["g"]["device"] = "cuda:0"
    crafted = _crafted_generators(
        tmp_path, doc, {"#generator.g": torch.zeros(16, dtype=torch.uint8)}
    )
    with pytest.raises(
        tracebridge.ArtifactError,
        match=r"generator 'g' was saved from cuda:0, and map_location sends cuda:0 to cpu: "
        r"a generator cannot change its device type",
    ):
        tracebridge.load(crafted, map_location=where)
    # map_location naming a device this machine lacks: the loader's own message
    with pytest.raises(tracebridge.ArtifactError, match="no CUDA device|does not have"):
        tracebridge.load(crafted, map_location={"cuda:0": "cuda:1"})


def test_map_location_moves_a_cuda_generator_within_cuda(monkeypatch):
    """Where map_location sends a CUDA generator's device: ``{"cuda:1": "cuda:0"}`` makes
    it on cuda:0 (a file saved on a second GPU, loaded on a machine with one). Checked
    here with the devices' availability stood in for (the CUDA test below makes one)."""
    from tracebridge.artifact import devices
    from tracebridge.artifact import generators as kept

    monkeypatch.setattr(devices, "available", lambda d: d.type == "cpu" or d.index in (0, None))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert kept.load_device("g", "cuda:1", {"cuda:1": "cuda:0"}, "f.tb") == "cuda:0"
    assert kept.load_device("g", "cuda:0", None, "f.tb") == "cuda:0"
    assert kept.load_device("g", "cuda:0", "cuda", "f.tb") == "cuda"
    assert kept.load_device("g", "cpu", "cuda:0", "f.tb") == "cpu"
    with pytest.raises(tracebridge.ArtifactError, match="cannot change its device type"):
        kept.load_device("g", "cuda:1", {"cuda:1": "cpu"}, "f.tb")
    with pytest.raises(tracebridge.ArtifactError, match="'cuda:1', which this machine does not"):
        kept.load_device("g", "cuda:1", None, "f.tb")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_generator_follows_map_location_within_cuda(tmp_path):
    class CudaNoisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.Generator(device="cuda").manual_seed(3)

        def forward(self, x):
            return x * torch.rand(x.shape, generator=self.g, device=x.device)

    m = CudaNoisy()
    path = _saved(tracebridge.trace(m, torch.ones(2, device="cuda")), tmp_path)
    loaded = tracebridge.load(path, map_location={"cuda:0": "cuda:0"})
    assert loaded.g.device.type == "cuda"
    m.g.manual_seed(4)
    loaded.g.manual_seed(4)
    x = torch.ones(3, device="cuda")
    _assert_same(_calls(loaded, x), _calls(m, x))
    with pytest.raises(tracebridge.ArtifactError, match="cannot change its device type"):
        tracebridge.load(path, map_location="cpu")


def test_more_generators_than_the_limit_are_refused_before_their_names_are_checked():
    limit = LIMITS["generators"]
    many = {f"g{i}": {"device": "cpu"} for i in range(limit + 1)}
    _refused(_rand_doc({"generator": "g0"}, many), f"{limit + 1} generators, more than {limit}")
    check_program(_rand_doc({"generator": "g0"}, dict(list(many.items())[:limit])), "f.tb")


def test_generator_states_past_the_byte_limit_are_refused(tmp_path):
    """The states' bytes, all together, within ``generator_bytes``: counted from the
    safetensors header, before any state is read."""
    doc = _noisy_doc(tmp_path)
    doc["generators"]["h"] = {"device": "cpu"}
    half = LIMITS["generator_bytes"] // 2
    states = {
        "#generator.g": torch.zeros(half, dtype=torch.uint8),
        "#generator.h": torch.zeros(half + 1, dtype=torch.uint8),
    }
    crafted = _crafted_generators(tmp_path, doc, states)
    with pytest.raises(tracebridge.ArtifactError, match="generators' states take more than"):
        tracebridge.load(crafted)


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="needs R")
def test_r_refuses_generators_past_the_limits(tmp_path):
    """R's reader applies both limits (``limits`` of ops.json): the states' bytes from the
    safetensors header, the count among the document rules."""
    from .r_reader import run_r

    doc = _noisy_doc(tmp_path)
    doc["generators"]["h"] = {"device": "cpu"}
    half = LIMITS["generator_bytes"] // 2
    states = {
        "#generator.g": torch.zeros(half, dtype=torch.uint8),
        "#generator.h": torch.zeros(half + 1, dtype=torch.uint8),
    }
    big = _crafted_generators(tmp_path, doc, states, "big.tb")
    doc = _noisy_doc(tmp_path)
    doc["generators"].update({f"h{i}": {"device": "cpu"} for i in range(LIMITS["generators"])})
    many = _crafted_generators(tmp_path, doc, {}, "many.tb")
    said = run_r(
        'for (f in args[-1]) cat(tryCatch({jit_inspect(f, quiet = TRUE); "taken"}, '
        'error = conditionMessage), "\\n")',
        big,
        many,
    )
    assert "the generators' states take more than 16777216 bytes" in said, said
    assert f"{LIMITS['generators'] + 1} generators, more than {LIMITS['generators']}" in said
