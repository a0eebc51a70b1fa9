"""Conformance: every model of the zoo traces, matches eager, saves, and reloads elsewhere.

For each case of `models.CASES`:
  * the traced object matches eager on the example inputs and on every other input
    (another batch size, another sequence length), with autograd on, under no_grad and under
    inference_mode;
  * the saved artifact loads with both runtimes, which agree bit for bit, and match eager;
  * the saved artifact loads in a fresh Python process that never imports the model code
    (one subprocess per runtime for the whole zoo and the whole run, since importing torch
    costs ~2 s);
  * ``state_dict()`` keys equal the original's; check_trace accepts the other inputs as
    check_inputs; the printed graph and code are stable across traces and a save/load.
And on a few cases: gradients (parameters and input) and optimizer steps through the traced
module reach the original's parameters, a loaded artifact trains, ``.double()`` works,
``respect_mode=True`` follows ``.train()``/``.eval()``, and BatchNorm statistics update exactly
as in eager.

A failure caused by the core is marked ``xfail(strict=True)`` in ``CORE_FAILURES`` with a
one-line reproduction, so that the fix turns it into an XPASS to remove.
"""

from __future__ import annotations

import copy
import dataclasses
import fcntl
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import tracebridge

# The zoo is a plain module beside this file, whether or not tests/python is a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CASES, Case  # noqa: E402

RUNTIMES = ("codegen", "interpreter")

# (test name, case name) -> "core: <one-line minimal repro>". Filled from real failures only.
CORE_FAILURES: dict[tuple[str, str], str] = {}


def _params(test: str, names: Any) -> list[Any]:
    """Parametrise over case names, marking the known core failures of this test."""
    out = []
    for name in names:
        reason = CORE_FAILURES.get((test, name))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


# --------------------------------------------------------------------------- helpers


def _calls(case: Case) -> Iterator[tuple[str, tuple]]:
    """Every (method, inputs) pair that a case is checked on."""
    if case.methods:
        for method, calls in case.methods.items():
            for inputs in calls:
                yield method, inputs
    else:
        for inputs in case.all_inputs:
            yield "forward", inputs


def _run(obj: Any, method: str, inputs: tuple, case: Case) -> Any:
    if case.stochastic:
        torch.manual_seed(case.seed)
    fn = obj if method == "forward" else getattr(obj, method)
    return fn(*inputs)


def _assert_close(actual: Any, expected: Any, case: Case, what: str) -> None:
    torch.testing.assert_close(
        actual, expected, atol=case.atol, rtol=case.rtol, msg=lambda m: f"{what}: {m}"
    )


def _loss(out: Any) -> torch.Tensor:
    return sum((t.float() ** 2).mean() for t in tree_leaves(out) if t.is_floating_point())


_TRACED: dict[str, tuple[Case, Any]] = {}


def _traced(name: str) -> tuple[Case, Any]:
    """A case and its trace, shared by the tests that do not mutate either."""
    if name not in _TRACED:
        case = CASES[name]()
        _TRACED[name] = (case, case.trace())
    return _TRACED[name]


# --------------------------------------------------------------------------- every case


@pytest.mark.parametrize("name", _params("test_matches_eager", CASES))
def test_matches_eager(name: str) -> None:
    case, traced = _traced(name)
    for method, inputs in _calls(case):
        expected = _run(case.model, method, inputs, case)
        actual = _run(traced, method, inputs, case)
        _assert_close(actual, expected, case, f"{name}.{method} on {_shapes(inputs)}")


@pytest.mark.parametrize("name", _params("test_matches_eager_without_autograd", CASES))
def test_matches_eager_without_autograd(name: str) -> None:
    """Under no_grad and inference_mode (as for serving) too, including BatchNorm updates."""
    case, traced = _traced(name)
    for context in (torch.no_grad, torch.inference_mode):
        for method, inputs in _calls(case):
            with context():
                expected = _run(case.model, method, inputs, case)
                actual = _run(traced, method, inputs, case)
            _assert_close(actual, expected, case, f"{context.__name__}, {name}.{method}")


@pytest.mark.parametrize("name", _params("test_state_dict_keys", CASES))
def test_state_dict_keys(name: str) -> None:
    case, traced = _traced(name)
    assert list(traced.state_dict()) == list(case.model.state_dict())


@pytest.mark.parametrize("name", _params("test_runtimes_agree", CASES))
def test_runtimes_agree(name: str, tmp_path: Path) -> None:
    case, traced = _traced(name)
    path = tmp_path / f"{name}.tb"
    tracebridge.save(traced, str(path))
    loaded = {rt: tracebridge.load(str(path), runtime=rt) for rt in RUNTIMES}
    for method, inputs in _calls(case):
        expected = _run(case.model, method, inputs, case)
        outs = {rt: _run(m, method, inputs, case) for rt, m in loaded.items()}
        where = f"{name}.{method} on {_shapes(inputs)}"
        _assert_close(outs["codegen"], expected, case, f"codegen vs eager, {where}")
        torch.testing.assert_close(
            outs["interpreter"],
            outs["codegen"],
            atol=0,
            rtol=0,
            msg=lambda m, where=where: f"interpreter vs codegen, {where}: {m}",
        )


@pytest.mark.parametrize("name", _params("test_graph_text_is_stable", CASES))
def test_graph_text_is_stable(name: str, tmp_path: Path) -> None:
    """The printed graph and code are the same for a second trace and after a save and load."""
    case, traced = _traced(name)
    again = CASES[name]().trace()
    path = tmp_path / f"{name}.tb"
    tracebridge.save(traced, str(path))
    loaded = tracebridge.load(str(path))
    assert str(traced.graph).strip(), "empty graph text"
    for label, other in (("a second trace", again), ("the loaded artifact", loaded)):
        assert str(other.graph) == str(traced.graph), f"graph text differs for {label}"
        assert _unsealed(other.code) == traced.code, f"code differs for {label}"
    compile(traced.code, f"<{name}.code>", "exec")


def _unsealed(code: str) -> str:
    """``code`` with a sealed loaded object's state reads (``_state_get(S0, 'weight')``,
    dict's own read, which does not break the seal: runtime/sealed.py) written as the
    same read of an unsealed object's (``S0['weight']``)."""
    return re.sub(r"_state_get\((S\d+), ('[^']*')\)", r"\1[\2]", code)


def _shapes(inputs: tuple) -> str:
    return ", ".join(str(tuple(t.shape)) for t in inputs)


# --------------------------------------------------------------------------- a fresh process

# Loads each artifact with only torch and tracebridge imported, runs it on the saved inputs,
# compares with the saved eager outputs, and with the outputs of the in-process trace bit for
# bit (same thread count: kernels split reductions by thread), and prints {case: "ok" |
# error} as JSON.
FRESH_SCRIPT = r"""
import json, sys, torch, tracebridge
manifest_path, runtime, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
results = {}
for entry in json.load(open(manifest_path)):
    try:
        loaded = tracebridge.load(entry["artifact"], runtime=runtime)
        for call in entry["calls"]:
            data = torch.load(call["file"], weights_only=True)
            fn = loaded if call["method"] == "forward" else getattr(loaded, call["method"])
            if entry["seed"] is not None:
                torch.manual_seed(entry["seed"])
            got = fn(*data["inputs"])
            torch.testing.assert_close(
                got, data["expected"], atol=entry["atol"], rtol=entry["rtol"]
            )
            torch.testing.assert_close(
                got, data["in_process"], atol=0, rtol=0, equal_nan=True,
                msg=lambda m: "not bit for bit what the in-process trace computed: " + m,
            )
        results[entry["name"]] = "ok"
    except Exception as exc:
        results[entry["name"]] = f"{type(exc).__name__}: {exc}"[:2000]
leaked = sorted(m for m in sys.modules if m in ("models", "test_conformance"))
results["__leaked_modules__"] = leaked
print(json.dumps(results))
sys.exit(0 if not leaked and all(v == "ok" for k, v in results.items() if k[0] != "_") else 1)
"""


def _run_leaving_state(traced: Any, case: Case, method: str, inputs: tuple) -> Any:
    """The traced call's outputs, with the module's state (BatchNorm statistics in training
    mode) put back afterwards, so that eager's run of the same call starts where it would."""
    model = case.model
    saved = (
        {k: v.detach().clone() for k, v in model.state_dict().items()}
        if isinstance(model, torch.nn.Module)
        else None
    )
    out = _run(traced, method, inputs, case)
    if saved is not None:
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(saved[k])
    return tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, out)


def _check_in_fresh_processes(root: Path) -> dict[str, dict[str, str]]:
    """Save every case with its inputs and eager outputs under ``root``, then check them in one
    fresh process per runtime.

    Returns runtime -> case -> "ok" or the error. A case that cannot be traced or saved here
    is reported as such, without a subprocess run for it.
    """
    root.mkdir(parents=True, exist_ok=True)
    manifest, prepared = [], {}
    for name in CASES:
        try:
            case, traced = _traced(name)
            artifact = root / f"{name}.tb"
            tracebridge.save(traced, str(artifact))
        except Exception as exc:
            prepared[name] = f"not saved here: {type(exc).__name__}: {exc}"
            continue
        calls = []
        for i, (method, inputs) in enumerate(_calls(case)):
            in_process = _run_leaving_state(traced, case, method, inputs)
            expected = _run(case.model, method, inputs, case)
            file = root / f"{name}.{i}.pt"
            torch.save(
                {"inputs": list(inputs), "expected": expected, "in_process": in_process}, file
            )
            calls.append({"method": method, "file": str(file)})
        manifest.append(
            {
                "name": name,
                "artifact": str(artifact),
                "calls": calls,
                "atol": case.atol,
                "rtol": case.rtol,
                "seed": case.seed if case.stochastic else None,
            }
        )
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    results = {}
    for runtime in RUNTIMES:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                FRESH_SCRIPT,
                str(root / "manifest.json"),
                runtime,
                str(torch.get_num_threads()),
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
        )
        try:
            by_case = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            by_case = {"__crash__": f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"}
        failed = [k for k, v in by_case.items() if k[0] != "_" and v != "ok"]
        if (proc.returncode != 0) != bool(failed or by_case.get("__leaked_modules__")):
            by_case["__crash__"] = f"exit status {proc.returncode} disagrees with {by_case}"
        results[runtime] = {**prepared, **by_case}
    return results


@pytest.fixture(scope="module")
def fresh_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The fresh-process report (see `_check_in_fresh_processes`), made once per test run."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return _check_in_fresh_processes(tmp_path_factory.mktemp("fresh"))
    # Under pytest-xdist each worker has this fixture; the first to take the lock makes the
    # report in the folder the workers share, the others read it, so that a run starts two
    # subprocesses in all rather than two per worker.
    shared = tmp_path_factory.getbasetemp().parent
    report = shared / "fresh_results.json"
    with open(shared / "fresh_results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not report.exists():
            report.write_text(json.dumps(_check_in_fresh_processes(shared / "fresh")))
    return json.loads(report.read_text())


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", _params("test_fresh_process", CASES))
def test_fresh_process(name: str, runtime: str, fresh_results: dict) -> None:
    by_case = fresh_results[runtime]
    assert "__crash__" not in by_case, by_case.get("__crash__")
    assert by_case["__leaked_modules__"] == []
    assert by_case.get(name) == "ok", by_case.get(name, "missing from the report")


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize(
    "name", _params("test_gradients_match", ["mlp", "cnn_train", "resnet", "tiny_gpt", "lstm"])
)
def test_gradients_match(name: str) -> None:
    case = CASES[name]()
    traced = case.trace()
    (x,) = case.example_inputs
    params = dict(case.model.named_parameters())
    # Float inputs get a gradient too; token ids cannot.
    grad_input = x.is_floating_point()
    x_eager, x_traced = (x.clone().requires_grad_(grad_input) for _ in range(2))

    case.model.zero_grad(set_to_none=True)
    _loss(_run(case.model, "forward", (x_eager,), case)).backward()
    expected = {k: p.grad.clone() for k, p in params.items()}

    case.model.zero_grad(set_to_none=True)
    _loss(_run(traced, "forward", (x_traced,), case)).backward()
    for key, p in params.items():
        assert p.grad is not None, f"no gradient reached the original's {key}"
        _assert_close(p.grad, expected[key], case, f"grad of {key}")
    if grad_input:
        _assert_close(x_traced.grad, x_eager.grad, case, "grad of the input")


@pytest.mark.parametrize(
    "name", _params("test_optimizer_step_updates_original", ["mlp", "cnn_eval"])
)
def test_optimizer_step_updates_original(name: str) -> None:
    case = CASES[name]()
    reference = CASES[name]()
    traced = case.trace()
    (x,) = case.example_inputs
    before = copy.deepcopy(case.model.state_dict())

    opt = torch.optim.SGD(traced.parameters(), lr=0.1)
    _loss(traced(x)).backward()
    opt.step()

    ref_opt = torch.optim.SGD(reference.model.parameters(), lr=0.1)
    _loss(reference.model(x)).backward()
    ref_opt.step()

    for key, p in case.model.named_parameters():
        assert not torch.equal(p, before[key]), f"the step did not change the original's {key}"
        _assert_close(p, reference.model.get_parameter(key), case, f"{key} after one step")
    _assert_close(traced(x), case.model(x), case, "traced vs original after the step")


# Models whose Python code reads a dtype (nn.MultiheadAttention compares its input's dtype
# with its weights'): the trace guards those reads (docs/divergence.md, "Dtypes").
READS_DTYPE = {"transformer"}


@pytest.mark.parametrize("name", _params("test_double", ["mlp", "cnn_eval", "transformer"]))
def test_double(name: str) -> None:
    case = CASES[name]()
    reference = CASES[name]().model.double()
    traced = case.trace()
    assert traced.double() is traced
    if name in READS_DTYPE:
        # A float32 trace refuses a float64 call instead of guessing; a trace of the
        # float64 model serves float64 at every size.
        x = tuple(t.double() for t in case.example_inputs)
        with pytest.raises(tracebridge.GuardError, match=r"x\.dtype == torch\.float32, but now"):
            traced(*x)
        case.example_inputs = x
        traced = case.trace()
    for inputs in case.all_inputs:
        x = tuple(t.double() for t in inputs)
        out = traced(*x)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, reference(*x), atol=1e-10, rtol=1e-10)


def _resnet_train() -> Case:
    case = CASES["resnet"]()
    case.model.train()
    return case


TRAIN_MODE = {"cnn_train": CASES["cnn_train"], "resnet_train": _resnet_train}


@pytest.mark.parametrize("name", _params("test_batchnorm_stats", TRAIN_MODE))
def test_batchnorm_stats(name: str) -> None:
    """Tracing (and its check, where on) leaves the statistics alone; one traced call then
    updates them exactly as one eager call does."""
    eager, case = TRAIN_MODE[name](), TRAIN_MODE[name]()
    assert case.model.training
    start = copy.deepcopy(case.model.state_dict())
    traced = case.trace()
    for key, value in case.model.state_dict().items():
        assert torch.equal(value, start[key]), f"tracing changed {key}"

    (x,) = case.example_inputs
    expected = _run(eager.model, "forward", (x,), eager)
    actual = _run(traced, "forward", (x,), case)
    _assert_close(actual, expected, case, "train-mode output")
    buffers = dict(eager.model.named_buffers())
    for key, value in case.model.named_buffers():
        if key.endswith("num_batches_tracked"):
            assert int(value) == int(start[key]) + 1, f"{key} is {int(value)}"
        _assert_close(value, buffers[key], case, f"buffer {key} after one call")


# --------------------------------------------------------------------------- more of the API


@pytest.mark.parametrize("name", _params("test_check_inputs_accept", CASES))
def test_check_inputs_accept(name: str) -> None:
    """check_trace on the other inputs (other batch sizes, lengths) accepts a correct trace."""
    case = CASES[name]()
    if not case.check_trace_ok:
        pytest.skip("the output is random: check_trace cannot compare two runs")
    if case.methods:
        n_checks = min(len(calls) for calls in case.methods.values()) - 1
        checks = [{m: calls[i + 1] for m, calls in case.methods.items()} for i in range(n_checks)]
    else:
        checks = case.other_inputs
    traced = case.trace(check_trace=True, check_inputs=checks)
    method, inputs = next(_calls(case))
    _assert_close(
        _run(traced, method, inputs, case), _run(case.model, method, inputs, case), case, name
    )


@pytest.mark.parametrize("name", _params("test_respect_mode", ["cnn_eval", "transformer"]))
def test_respect_mode(name: str, tmp_path: Path) -> None:
    """Traced with respect_mode=True, the module follows .train()/.eval() like eager, also after
    a save and load."""
    case, reference = CASES[name](), CASES[name]()
    traced = case.trace(respect_mode=True)
    path = tmp_path / f"{name}.tb"
    tracebridge.save(traced, str(path))
    loaded = tracebridge.load(str(path))
    (x,) = case.example_inputs
    for training in (True, False, True):
        for obj in (traced, loaded, reference.model):
            obj.train(training)
        expected = _run(reference.model, "forward", (x,), _seeded(case))
        for label, obj in (("traced", traced), ("loaded", loaded)):
            actual = _run(obj, "forward", (x,), _seeded(case))
            _assert_close(actual, expected, case, f"{label}, training={training}")


def _seeded(case: Case) -> Case:
    """The case, reseeded before each call: dropout in train mode draws random numbers."""
    return dataclasses.replace(case, stochastic=True)


@pytest.mark.parametrize("name", _params("test_loaded_artifact_trains", ["mlp", "resnet", "lstm"]))
def test_loaded_artifact_trains(name: str, tmp_path: Path) -> None:
    """A loaded artifact has its own parameters, with the original's names, and they train."""
    case, traced = _traced(name)
    path = tmp_path / f"{name}.tb"
    tracebridge.save(traced, str(path))
    loaded = tracebridge.load(str(path))
    eager = copy.deepcopy(case.model)
    (x,) = case.example_inputs
    _loss(eager(x)).backward()
    _loss(loaded(x)).backward()
    params = dict(loaded.named_parameters())
    assert list(params) == [k for k, _ in eager.named_parameters()]
    for key, p in eager.named_parameters():
        assert params[key].grad is not None, f"no gradient for the loaded {key}"
        _assert_close(params[key].grad, p.grad, case, f"grad of loaded {key}")
