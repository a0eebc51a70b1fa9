"""Traced and loaded objects pickle through their artifact bytes and their state tensors,
and deep-copy through their artifact; save and load take file-like objects and bytes
(python/tracebridge/artifact/streams.py)."""

from __future__ import annotations

import copy
import io
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import tracebridge
from tracebridge.errors import ArtifactError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CASES, Case  # noqa: E402

try:
    import cloudpickle
except ImportError:  # optional: Ray's and Spark's pickler
    cloudpickle = None

ROUND_TRIPS = {
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
    "deepcopy": copy.deepcopy,
}
if cloudpickle is not None:
    ROUND_TRIPS["cloudpickle"] = lambda obj: pickle.loads(cloudpickle.dumps(obj))


def _outputs(obj: Any, case: Case) -> list:
    calls = [(m, i) for m, inputs in case.methods.items() for i in inputs] or [
        ("forward", i) for i in case.all_inputs
    ]
    out = []
    for method, inputs in calls:
        if case.stochastic:
            torch.manual_seed(case.seed)
        fn = obj if method == "forward" else getattr(obj, method)
        out.append(fn(*inputs))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_every_conformance_model_round_trips(name: str) -> None:
    """pickle, copy.deepcopy and cloudpickle of the traced and of the loaded module give a
    module with the same results, bit for bit, in the same mode."""
    case = CASES[name]()
    traced = case.trace(check_trace=False)
    expected = _outputs(traced, case)
    loaded = tracebridge.load(_artifact_bytes(traced))
    for label, obj in (("traced", traced), ("loaded", loaded)):
        for how, round_trip in ROUND_TRIPS.items():
            again = round_trip(obj)
            assert type(again) is type(obj)
            assert again.training == obj.training
            assert list(again.state_dict()) == list(obj.state_dict())
            torch.testing.assert_close(
                _outputs(again, case), expected, atol=0, rtol=0, msg=f"{how} of {label} {name}"
            )


def _artifact_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    tracebridge.save(obj, buffer)
    return buffer.getvalue()


def test_a_copy_shares_nothing_with_the_original() -> None:
    net = torch.nn.Linear(3, 2)
    traced = tracebridge.trace(net, torch.rand(4, 3))
    copied = copy.deepcopy(traced)
    with torch.no_grad():
        copied.weight.zero_()
    assert net.weight.abs().sum() > 0 and traced.weight is net.weight


@pytest.mark.parametrize("loaded", [False, True])
def test_a_shallow_copy_shares_the_state_as_a_module_copy_does(loaded) -> None:
    """prober23a F2: ``copy.copy`` was a deep copy; nn.Module's and torch.jit's share."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).eval()
    x = torch.randn(3, 4)
    traced = tracebridge.trace(net, x)
    if loaded:
        traced = tracebridge.load(_artifact_bytes(traced))
    copied = copy.copy(traced)
    assert type(copied) is type(traced) and copied is not traced
    assert getattr(copied, "0").weight is getattr(traced, "0").weight
    with torch.no_grad():
        traced(x)
        getattr(copied, "0").weight.mul_(2.0)
        if loaded:  # the same write on the reference (a fresh trace shares net's weight)
            net[0].weight.mul_(2.0)
        torch.testing.assert_close(traced(x), net(x))
        torch.testing.assert_close(copied(x), net(x))
    function = tracebridge.trace(lambda a: a * 2 + 1, torch.ones(2))
    assert torch.equal(copy.copy(function)(torch.ones(2)), torch.full((2,), 3.0))


def test_runtime_guards_flag_and_name_survive_pickling() -> None:
    def double(x):
        return x * 2

    f = tracebridge.trace(double, torch.rand(3), runtime="interpreter")
    f.check_guards = False
    again = pickle.loads(pickle.dumps(f))
    assert again.__name__ == "double" and not again.check_guards
    assert again._forward.runtime == "interpreter"
    torch.testing.assert_close(again(torch.ones(2)), torch.full((2,), 2.0))


def test_unpickling_goes_through_the_loaders_checks() -> None:
    """A pickle carries the artifact's bytes (its program, the state described) and the
    state tensors by name; flipped bits in the program are refused by load's checks exactly
    as in a file, and a state tensor that does not fit the program is refused by name."""
    traced = tracebridge.trace(torch.nn.Linear(3, 2), torch.rand(4, 3))
    data = pickle.dumps(traced)
    at = data.index(b'"methods"')
    bad = bytearray(data)
    bad[at + 2] ^= 0xFF
    with pytest.raises(ArtifactError, match="CRC-32|sha256"):
        pickle.loads(bytes(bad))
    build, (artifact_bytes, state, tensors) = traced.__reduce__()
    assert set(tensors) == {"weight", "bias"} and tensors["weight"] is traced.weight
    with pytest.raises(ArtifactError, match=r"weight: float32\[3, 3\].*needs float32\[2, 3\]"):
        build(artifact_bytes, state, {**tensors, "weight": torch.zeros(3, 3)})
    with pytest.raises(ArtifactError, match=r"missing \(1\): bias"):
        build(artifact_bytes, state, {"weight": tensors["weight"]})
    with pytest.raises(ArtifactError, match="maps to str"):
        build(artifact_bytes, state, {**tensors, "bias": "zeros"})


def test_a_pickle_made_before_the_tensors_travelled_apart_still_loads() -> None:
    """Pickles of earlier versions held the whole artifact, state data included."""
    from tracebridge.api import _from_pickle, _pickle_state

    traced = tracebridge.trace(torch.nn.Linear(3, 2), torch.rand(4, 3))
    old = _from_pickle(
        tracebridge.api.streams.to_bytes(traced._program_for_saving()), _pickle_state(traced)
    )
    x = torch.rand(5, 3)
    assert torch.equal(old(x), traced(x))


@pytest.mark.parametrize("loaded", [False, True])
def test_torch_multiprocessing_shares_the_state_as_it_shares_a_modules(loaded) -> None:
    """torch.multiprocessing's pickler puts CPU tensors in shared memory, so a module sent
    to a worker shares its weights with the sender (the Hogwild pattern): a write in one
    process is the other's. A traced or loaded object's state travels as tensors and is
    shared the same way, and no fold keeps a value of memory another process may write
    (prober24a F2: the worker's copy never saw the sender's writes)."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers torch's reductions on it

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 2),
    ).eval()
    x = torch.randn(2, 3, 6, 6)
    sent = tracebridge.trace(net, x)
    if loaded:
        sent = tracebridge.load(_artifact_bytes(sent))
    with torch.no_grad():
        sent(x)  # folds made on the sender's side before it is sent
    received = pickle.loads(bytes(ForkingPickler.dumps(sent)))  # what a worker unpickles
    assert getattr(received, "0").weight.is_shared()
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(received(x), net(x))
        getattr(sent, "0").weight.mul_(2.0)  # the sender writes the shared weight
        net[0].weight.mul_(2.0)
        torch.testing.assert_close(received(x), net(x))
        getattr(received, "1").running_var.add_(1.0)  # and the worker writes back
        net[1].running_var.add_(1.0)
        torch.testing.assert_close(sent(x), net(x))
        torch.testing.assert_close(received(x), net(x))


def test_load_binds_a_state_dict_of_tensors_to_a_program_traced_on_meta(tmp_path: Path) -> None:
    torch.manual_seed(0)
    real = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    with torch.device("meta"):
        meta = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    path = tmp_path / "meta.tb"
    tracebridge.trace(meta, torch.empty(2, 4, device="meta")).save(path)
    loaded = tracebridge.load(path, weights=real.state_dict())
    x = torch.randn(5, 4)
    torch.testing.assert_close(loaded(x), real(x))
    with pytest.raises(ArtifactError, match=r"not in the program \(1\): extra"):
        tracebridge.load(path, weights={**real.state_dict(), "extra": torch.zeros(1)})
    with pytest.raises(ArtifactError, match="meta tensor"):
        tracebridge.load(path, weights=meta.state_dict())


def test_save_and_load_through_file_likes_and_bytes(tmp_path: Path) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()).eval()
    x = torch.rand(5, 3)
    traced = tracebridge.trace(net, x)
    expected = traced(x)
    buffer = io.BytesIO()
    traced.save(buffer)
    data = buffer.getvalue()
    path = tmp_path / "net.tb"
    tracebridge.save(traced, path)
    assert path.read_bytes()[:2] == data[:2] == b"PK"
    with open(path, "wb") as handle:  # a real file object
        tracebridge.save(traced, handle)
    with open(path, "rb") as handle:
        from_file = tracebridge.load(handle)
    for source in (data, bytearray(data), memoryview(data), io.BytesIO(data)):
        torch.testing.assert_close(tracebridge.load(source)(x), expected, atol=0, rtol=0)
    torch.testing.assert_close(from_file(x), expected, atol=0, rtol=0)


def test_clear_errors_for_what_is_not_an_artifact() -> None:
    traced = tracebridge.trace(torch.neg, torch.rand(2))
    with pytest.raises(ArtifactError, match=r"<10 bytes>: .*ZIP"):
        tracebridge.load(b"not an artifact"[:10])
    with pytest.raises(ArtifactError, match="reads a path, bytes or a binary file-like.*int"):
        tracebridge.load(42)
    with pytest.raises(ArtifactError, match="writes to a path or a binary file-like.*list"):
        tracebridge.save(traced, [])
    with pytest.raises(ArtifactError, match="binary mode"):
        tracebridge.save(traced, io.StringIO())
    with pytest.raises(ArtifactError, match="binary mode"):
        tracebridge.load(io.StringIO("PK"))
