"""Programs without weights: traced on the meta device, saved without tensor data, and
bound at load to safetensors checkpoints (one file, a list, a Hugging Face sharded index)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
import torch
import torch.nn as nn
from safetensors.torch import save_file

import tracebridge


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)
        self.register_buffer("scale", torch.full((16,), 0.5))

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x)))) * self.scale


def _eager() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block(), nn.Linear(16, 3)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    return model


def _meta_program(tmp_path):
    with torch.device("meta"):
        meta = nn.Sequential(Block(), Block(), nn.Linear(16, 3)).eval()
    traced = tracebridge.trace(meta, torch.empty(2, 5, 16, device="meta"), check_trace=False)
    path = tmp_path / "program.tb"
    traced.save(path)
    return path


def test_meta_traced_program_saves_without_tensor_data(tmp_path):
    path = _meta_program(tmp_path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        assert archive.getinfo("tensors.safetensors").file_size < 100
    assert doc["tensors"]["count"] == 0
    assert sorted(doc["tensors"]["external"]) == sorted(_eager().state_dict())
    count = len(_eager().state_dict())
    with pytest.raises(
        tracebridge.ArtifactError, match=rf"no data for {count} state tensors.*weights="
    ):
        tracebridge.load(path)


def test_meta_program_plus_weights_equals_eager(tmp_path):
    model = _eager()
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    loaded = tracebridge.load(_meta_program(tmp_path), weights=tmp_path / "model.safetensors")
    for shape in ((2, 5, 16), (1, 9, 16)):
        x = torch.randn(shape)
        assert torch.equal(loaded(x), model(x))


def _sharded(tmp_path, model):
    state = model.state_dict()
    names = list(state)
    shards = {
        "model-00001-of-00002.safetensors": names[:5],
        "model-00002-of-00002.safetensors": names[5:],
    }
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, tmp_path / file)
    index = {
        "metadata": {"total_size": 0},
        "weight_map": {k: f for f, ks in shards.items() for k in ks},
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return [tmp_path / f for f in shards]


def test_weights_from_a_list_and_from_a_sharded_index(tmp_path):
    model = _eager()
    files = _sharded(tmp_path, model)
    program = _meta_program(tmp_path)
    x = torch.randn(3, 4, 16)
    assert torch.equal(tracebridge.load(program, weights=files)(x), model(x))
    index = tmp_path / "model.safetensors.index.json"
    assert torch.equal(tracebridge.load(program, weights=index)(x), model(x))
    assert torch.equal(tracebridge.load(program, weights=str(index))(x), model(x))


def test_missing_extra_and_misshaped_weights_are_listed(tmp_path):
    state = _eager().state_dict()
    del state["0.up.weight"]
    del state["1.scale"]
    state["2.bias"] = torch.zeros(4)
    state["head.weight"] = torch.zeros(1)
    save_file(state, tmp_path / "bad.safetensors")
    with pytest.raises(tracebridge.ArtifactError) as info:
        tracebridge.load(_meta_program(tmp_path), weights=tmp_path / "bad.safetensors")
    message = str(info.value)
    assert "missing (2): 0.up.weight, 1.scale" in message
    assert "not in the program (1): head.weight" in message
    assert "wrong dtype or shape (1): 2.bias: F32[4]" in message
    assert "float32[3]" in message


def test_wrong_dtype_and_duplicates_across_files_refused(tmp_path):
    state = _eager().state_dict()
    program = _meta_program(tmp_path)
    half = {k: v.half() if k == "2.weight" else v for k, v in state.items()}
    save_file(half, tmp_path / "half.safetensors")
    with pytest.raises(tracebridge.ArtifactError, match=r"2\.weight: F16\[3, 16\]"):
        tracebridge.load(program, weights=tmp_path / "half.safetensors")
    save_file(state, tmp_path / "a.safetensors")
    save_file({"2.bias": state["2.bias"]}, tmp_path / "b.safetensors")
    with pytest.raises(tracebridge.ArtifactError, match=r"'2\.bias' is in both"):
        tracebridge.load(program, weights=[tmp_path / "a.safetensors", tmp_path / "b.safetensors"])


def test_bad_weights_arguments(tmp_path):
    program = _meta_program(tmp_path)
    with pytest.raises(tracebridge.ArtifactError, match="no such file"):
        tracebridge.load(program, weights=tmp_path / "nope.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(tracebridge.ArtifactError, match="not a readable safetensors file"):
        tracebridge.load(program, weights=tmp_path / "junk.safetensors")
    (tmp_path / "index.json").write_text('{"weight_map": {"a": "../../etc/passwd"}}')
    with pytest.raises(tracebridge.ArtifactError, match="not a file name beside the index"):
        tracebridge.load(program, weights=tmp_path / "index.json")
    with pytest.raises(tracebridge.ArtifactError, match="weights= takes"):
        tracebridge.load(program, weights=42)


def test_weights_replace_stored_state(tmp_path):
    model = _eager()
    x = torch.randn(2, 3, 16)
    traced = tracebridge.trace(model, x)
    traced.save(tmp_path / "full.tb")
    other = _eager()
    with torch.no_grad():
        other[2].weight.mul_(2)
    save_file(other.state_dict(), tmp_path / "other.safetensors")
    loaded = tracebridge.load(tmp_path / "full.tb", weights=tmp_path / "other.safetensors")
    assert torch.equal(loaded(x), other(x))


def test_validate_and_inspect_describe_a_program_without_weights(tmp_path, capsys):
    from tracebridge.frontends.cli import main

    path = str(_meta_program(tmp_path))
    assert main(["validate", path]) == 0
    assert "valid tracebridge artifact" in capsys.readouterr().out
    assert main(["inspect", path]) == 0
    assert "0.up.weight" in capsys.readouterr().out


class TiedLM(nn.Module):
    """A language model whose output layer shares the embedding's matrix (tied weights)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.mix = nn.Linear(6, 6)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids))))


@pytest.mark.parametrize("kept", ["embed.weight", "head.weight", "both"])
def test_tied_weights_bind_under_any_of_their_names(tmp_path, kept):
    torch.manual_seed(0)
    model = TiedLM().eval()
    with torch.device("meta"):
        meta = TiedLM().eval()
    traced = tracebridge.trace(
        meta, torch.zeros(2, 4, dtype=torch.long, device="meta"), check_trace=False
    )
    assert traced.program.aliases == {"head.weight": "embed.weight"}
    traced.save(tmp_path / "lm.tb")
    # Checkpoint writers keep one name of a shared tensor, not always the module's first.
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    if kept != "both":
        del weights["head.weight" if kept == "embed.weight" else "embed.weight"]
    save_file(weights, tmp_path / "lm.safetensors")
    loaded = tracebridge.load(tmp_path / "lm.tb", weights=tmp_path / "lm.safetensors")
    ids = torch.randint(0, 11, (3, 7))
    assert torch.equal(loaded(ids), model(ids))


def test_a_loaded_model_takes_the_originals_state_dict_with_its_tied_names(tmp_path):
    """Found by a prober: a loaded model's state_dict() lacked the tied name, so
    load_state_dict(original.state_dict()) refused it as unexpected."""
    torch.manual_seed(0)
    model = TiedLM().eval()
    ids = torch.randint(0, 11, (2, 5))
    tracebridge.trace(model, ids).save(tmp_path / "lm.tb")
    loaded = tracebridge.load(tmp_path / "lm.tb")
    assert list(loaded.state_dict()) == list(model.state_dict())
    assert loaded.head.weight is loaded.embed.weight  # one tensor, as in the original
    assert len(list(loaded.parameters())) == len(list(model.parameters()))
    with torch.no_grad():
        model.embed.weight.mul_(3)
    loaded.load_state_dict(model.state_dict())
    other = torch.randint(0, 11, (3, 7))
    assert torch.equal(loaded(other), model(other))
    loaded.save(tmp_path / "again.tb")  # the tie is written once, as before
    again = tracebridge.load(tmp_path / "again.tb")
    assert again.program.aliases == {"head.weight": "embed.weight"}
    assert torch.equal(again(other), model(other))


def test_an_alias_does_not_hide_a_missing_tensor(tmp_path):
    with torch.device("meta"):
        meta = TiedLM().eval()
    traced = tracebridge.trace(
        meta, torch.zeros(2, 4, dtype=torch.long, device="meta"), check_trace=False
    )
    traced.save(tmp_path / "lm.tb")
    weights = {k: v for k, v in TiedLM().state_dict().items() if not k.endswith(".weight")}
    save_file(weights, tmp_path / "lm.safetensors")
    with pytest.raises(tracebridge.ArtifactError, match=r"missing \(2\): embed.weight, mix"):
        tracebridge.load(tmp_path / "lm.tb", weights=tmp_path / "lm.safetensors")


# --- shards an index may name (issue 17 item 5) ---------------------------------------------


def _index_naming(tmp_path, shard: str):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"0.up.weight": shard}}))
    return index


_OPEN_IN_CHILD = """
import sys
import tracebridge
from tracebridge.artifact.weights import open_weights
try:
    open_weights(sys.argv[1])
    print("opened")
except tracebridge.ArtifactError as exc:
    print(exc)
"""


def _refused_quickly(index, *words):
    """open_weights on ``index`` in a child process: it must refuse within seconds. A child,
    because a shard opened inside the safetensors library blocks with the GIL held."""
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_IN_CHILD, str(index)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    for word in words:
        assert word in done.stdout, done.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_named_as_a_shard_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "model-00001.safetensors"
    os.mkfifo(fifo)
    index = _index_naming(tmp_path, fifo.name)
    _refused_quickly(index, "is a FIFO, not a regular file", "nothing was opened")
    with pytest.raises(tracebridge.ArtifactError, match="is a FIFO"):
        tracebridge.load(_meta_program(tmp_path), weights=index)


def _refused(index, *words):
    from tracebridge.artifact.weights import open_weights

    with pytest.raises(tracebridge.ArtifactError) as info:
        open_weights(index)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_a_directory_or_device_named_as_a_shard_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    _refused(_index_naming(tmp_path, "sub"), "'sub' is a directory, not a regular file")
    if os.path.exists("/dev/zero"):
        (tmp_path / "zero.safetensors").symlink_to("/dev/zero")
        _refused(_index_naming(tmp_path, "zero.safetensors"), "leads out of the index's folder")
        inner = tmp_path / "inner"
        inner.mkdir()
        os.symlink("/dev/null", inner / "null")
        (inner / "shard.safetensors").symlink_to(inner / "null")
        index = inner / "model.safetensors.index.json"
        index.write_text(json.dumps({"weight_map": {"a": "shard.safetensors"}}))
        _refused(index, "leads out of the index's folder")


def test_a_symlinked_shard_is_not_followed_out_of_the_folder(tmp_path):
    model = _eager()
    outside = tmp_path / "outside"
    outside.mkdir()
    save_file(model.state_dict(), outside / "real.safetensors")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(outside / "real.safetensors")
    index = _index_naming(folder, "model.safetensors")
    _refused(
        index,
        "'model.safetensors' is a link that leads out of the index's folder",
        "pass the shard files themselves as a list",
    )
    # The user may still name the linked file (their choice, not the file's) ...
    x = torch.randn(2, 5, 16)
    program = _meta_program(tmp_path)
    assert torch.equal(
        tracebridge.load(program, weights=[folder / "model.safetensors"])(x), model(x)
    )
    # ... and a link that stays inside the folder is followed.
    (folder / "model.safetensors").unlink()
    save_file(model.state_dict(), folder / "blob")
    (folder / "model.safetensors").symlink_to(folder / "blob")
    index.write_text(
        json.dumps({"weight_map": {k: "model.safetensors" for k in model.state_dict()}})
    )
    assert torch.equal(tracebridge.load(program, weights=index)(x), model(x))
