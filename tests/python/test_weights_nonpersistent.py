"""Non-persistent buffers (``register_buffer(..., persistent=False)``: a rotary embedding's
``inv_freq``, position ids) in a program traced on the meta device and bound at load to a
checkpoint, which never holds them: the file marks them, the trace warns where they are
meta, a load names them with advice that works, and materialised ones load from the file."""

from __future__ import annotations

import json
import warnings
import zipfile

import pytest
import torch
import torch.nn as nn
from safetensors.torch import save_file

import tracebridge
from tracebridge.check.program import check_program
from tracebridge.errors import ArtifactError


class Rotary(nn.Module):
    """Like a Hugging Face rotary embedding: a table computed in __init__, not saved."""

    def __init__(self, dim: int = 4):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        angles = positions[:, None] * self.inv_freq.to(x.device)[None, :]
        return torch.cat([angles.cos(), angles.sin()], -1)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.rotary = Rotary(4)
        self.head = nn.Linear(4, 10)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, ids):
        h = self.emb(ids)
        h = h * self.rotary(h)[None] * self.scale
        return self.head(h)


def _checkpoint(tmp_path) -> tuple[nn.Module, str]:
    torch.manual_seed(0)
    real = TinyLM().eval()
    path = str(tmp_path / "model.safetensors")
    save_file({k: v.contiguous() for k, v in real.state_dict().items()}, path)
    assert "rotary.inv_freq" not in real.state_dict()  # what a checkpoint never holds
    return real, path


def _trace_meta(tmp_path, materialise: bool):
    with torch.device("meta"):
        meta = TinyLM().eval()
    if materialise:
        meta.rotary = Rotary(4)  # the owner of the buffer built on the CPU
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(meta, torch.zeros(2, 3, dtype=torch.long, device="meta"))
    path = tmp_path / f"program{int(materialise)}.tb"
    traced.save(path)
    told = [str(w.message) for w in record if "non-persistent buffers" in str(w.message)]
    return path, told


def _state_doc(path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json"))["state"]


def test_the_file_marks_non_persistent_buffers(tmp_path):
    path, _ = _trace_meta(tmp_path, materialise=True)
    state = _state_doc(path)
    assert state["rotary.inv_freq"]["persistent"] is False
    assert "persistent" not in state["scale"]  # absent means persistent, as before
    assert "persistent" not in state["emb.weight"]


def test_a_meta_non_persistent_buffer_is_named_at_trace_and_at_load(tmp_path):
    _, checkpoint = _checkpoint(tmp_path)
    path, told = _trace_meta(tmp_path, materialise=False)
    assert len(told) == 1
    assert "rotary.inv_freq" in told[0] and "'rotary'" in told[0]
    assert "register_buffer(name, value, persistent=False)" in told[0]
    with pytest.raises(ArtifactError) as refused:
        tracebridge.load(path, weights=checkpoint)
    message = str(refused.value)
    assert "non-persistent buffers with no values (1): rotary.inv_freq" in message
    assert "weights=[checkpoint, 'buffers.safetensors']" in message
    # Only the non-persistent buffer is missing: no advice to pass another checkpoint.
    assert "Pass the checkpoint of the model that was traced" not in message
    assert "missing (" not in message


def test_the_advice_at_load_works_one_more_safetensors_file(tmp_path):
    real, checkpoint = _checkpoint(tmp_path)
    path, _ = _trace_meta(tmp_path, materialise=False)
    extra = str(tmp_path / "buffers.safetensors")
    save_file({"rotary.inv_freq": Rotary(4).inv_freq}, extra)
    loaded = tracebridge.load(path, weights=[checkpoint, extra])
    ids = torch.randint(0, 10, (3, 5))
    torch.testing.assert_close(loaded(ids), real(ids), rtol=0, atol=0)


def test_a_materialised_non_persistent_buffer_loads_from_the_file(tmp_path):
    real, checkpoint = _checkpoint(tmp_path)
    path, told = _trace_meta(tmp_path, materialise=True)
    assert told == []  # nothing to warn of: the file holds the buffer's values
    loaded = tracebridge.load(path, weights=checkpoint)
    for shape in [(3, 5), (1, 2), (2, 7)]:
        ids = torch.randint(0, 10, shape)
        torch.testing.assert_close(loaded(ids), real(ids), rtol=0, atol=0)
    # The loaded module registers it as the original did: state_dict() has the same keys.
    assert sorted(loaded.state_dict()) == sorted(real.state_dict())
    assert "rotary.inv_freq" in dict(loaded.named_buffers())
    loaded.load_state_dict(real.state_dict())  # strict: no key missing or unexpected


def test_a_missing_persistent_weight_is_still_named_beside_a_non_persistent_one(tmp_path):
    real, _ = _checkpoint(tmp_path)
    path, _ = _trace_meta(tmp_path, materialise=False)
    partial = str(tmp_path / "partial.safetensors")
    save_file(
        {k: v.contiguous() for k, v in real.state_dict().items() if k != "head.bias"}, partial
    )
    with pytest.raises(ArtifactError) as refused:
        tracebridge.load(path, weights=partial)
    message = str(refused.value)
    assert "missing (1): head.bias" in message
    assert "non-persistent buffers with no values (1): rotary.inv_freq" in message


def test_the_mark_is_optional_and_checked(tmp_path):
    """Files written before the mark (no ``persistent``) stay valid; a mark that is not a
    boolean is refused (shared_ir/program.schema.json)."""
    path, _ = _trace_meta(tmp_path, materialise=True)
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    doc = json.loads(members["program.json"])
    del doc["state"]["rotary.inv_freq"]["persistent"]
    check_program(doc)
    doc["state"]["rotary.inv_freq"]["persistent"] = "no"
    with pytest.raises(ArtifactError, match="persistent"):
        check_program(doc)


def test_tiny_llama_traced_on_meta_loads_the_hugging_face_checkpoint(tmp_path):
    """The README's flow on a tiny Llama: traced on the meta device with the default
    checks, its rotary embedding (non-persistent inv_freq) built on the CPU, saved, loaded
    with save_pretrained's model.safetensors, called: equal to eager."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
    )
    torch.manual_seed(0)
    real = transformers.LlamaForCausalLM(config).eval()
    real.save_pretrained(tmp_path / "llama", safe_serialization=True)
    with torch.device("meta"):
        meta = transformers.LlamaForCausalLM(config).eval()
    meta.model.rotary_emb = LlamaRotaryEmbedding(config=config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(
            meta, torch.zeros(2, 5, dtype=torch.long, device="meta"), strict=False
        )
    traced.save(tmp_path / "llama.tb")
    loaded = tracebridge.load(tmp_path / "llama.tb", weights=tmp_path / "llama/model.safetensors")
    for shape in [(2, 5), (2, 9), (3, 4), (1, 6)]:
        ids = torch.randint(0, 100, shape)
        out = loaded(ids)
        logits = out["logits"] if isinstance(out, dict) else out[0]
        torch.testing.assert_close(logits, real(ids).logits)


class WithUnreadCache(nn.Module):
    """A non-persistent buffer that forward never reads (a mask cache the traced path
    does not use) beside one it reads."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.rotary = Rotary(4)
        self.register_buffer("mask_cache", torch.ones(8, 8), persistent=False)

    def forward(self, x):
        return self.lin(x) * self.rotary(x)[None]


def test_a_non_persistent_buffer_no_graph_reads_is_not_asked_for(tmp_path):
    torch.manual_seed(0)
    real = WithUnreadCache().eval()
    checkpoint = str(tmp_path / "model.safetensors")
    save_file({k: v.contiguous() for k, v in real.state_dict().items()}, checkpoint)
    with torch.device("meta"):
        meta = WithUnreadCache().eval()
    meta.rotary = Rotary(4)  # the buffer the graph reads, real
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(meta, torch.zeros(2, 3, 4, device="meta"))
    assert not [w for w in record if "non-persistent buffers" in str(w.message)]
    path = tmp_path / "unread.tb"
    traced.save(path)
    state = _state_doc(path)
    assert state["mask_cache"]["persistent"] is False  # still described in the file
    loaded = tracebridge.load(path, weights=checkpoint)
    x = torch.rand(3, 5, 4)
    torch.testing.assert_close(loaded(x), real(x), rtol=0, atol=0)
    # It has no values anywhere, so the loaded module leaves it out; state_dict() never
    # held it, and the module still moves between devices (a meta tensor would not).
    assert "mask_cache" not in dict(loaded.named_buffers())
    assert sorted(loaded.state_dict()) == sorted(real.state_dict())
    loaded.to("cpu").double()
    torch.testing.assert_close(loaded(x.double()), real.double()(x.double()))
    # Saved again, the file holds what the program needs, and loads with nothing else.
    loaded.save(tmp_path / "again.tb")
    assert "mask_cache" not in _state_doc(tmp_path / "again.tb")
    # Given in the weights anyway, it is bound like any state.
    extra = str(tmp_path / "cache.safetensors")
    save_file({"mask_cache": torch.full((8, 8), 2.0)}, extra)
    bound = tracebridge.load(path, weights=[checkpoint, extra])
    assert torch.equal(bound.get_buffer("mask_cache"), torch.full((8, 8), 2.0))


def test_an_unread_meta_buffer_of_a_real_module_needs_no_weights(tmp_path):
    """Traced on the CPU with only the unused cache on meta: the check compares values, and
    the file holds every tensor a call needs, and loads without weights=."""
    torch.manual_seed(0)
    model = WithUnreadCache().eval()
    model.register_buffer("mask_cache", torch.empty(8, 8, device="meta"), persistent=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(model, torch.rand(2, 3, 4))
    # The check compared values: a buffer no call reads does not make the model "meta".
    assert not [w for w in record if "on the meta device" in str(w.message)]
    path = tmp_path / "cpu.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    x = torch.rand(1, 2, 4)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_a_read_meta_buffer_is_still_asked_for_beside_an_unread_one(tmp_path):
    torch.manual_seed(0)
    real = WithUnreadCache().eval()
    checkpoint = str(tmp_path / "model.safetensors")
    save_file({k: v.contiguous() for k, v in real.state_dict().items()}, checkpoint)
    with torch.device("meta"):
        meta = WithUnreadCache().eval()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(meta, torch.zeros(2, 3, 4, device="meta"))
    told = [str(w.message) for w in record if "non-persistent buffers" in str(w.message)]
    assert len(told) == 1 and "rotary.inv_freq" in told[0] and "mask_cache" not in told[0]
    traced.save(tmp_path / "both.tb")
    with pytest.raises(ArtifactError) as refused:
        tracebridge.load(tmp_path / "both.tb", weights=checkpoint)
    message = str(refused.value)
    assert "non-persistent buffers with no values (1): rotary.inv_freq" in message
    assert "mask_cache" not in message
