"""The conformance zoo on a CUDA device: traced there, run there, saved and loaded back onto
the device it was saved from, bridged to a ``torch.fx.GraphModule``, compiled (each
``torch.compile`` mode) and packaged with AOTInductor for it.

CI has no GPU: the whole module skips there, and the CPU runs the same code paths in
test_conformance.py, test_export_fx.py, test_compile.py and test_aot.py. On a machine with a
GPU, ``pytest tests/python/test_cuda.py`` is the check to run (scripts/gpu_check.sh runs it
with the GPU benchmark).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import tracebridge
from tracebridge.backends import aot
from tracebridge.export import fx as bridge

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CASES, Case  # noqa: E402
from test_conformance import _calls, _run  # noqa: E402  (torch.manual_seed seeds CUDA too)

from .conftest import run_fresh_python  # noqa: E402

# TRACEBRIDGE_TEST_DEVICE=cpu runs the same tests on the CPU, to check the tests themselves
DEVICE = os.environ.get("TRACEBRIDGE_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU"
)

RUNTIMES = ("codegen", "interpreter")


def _on_cuda(value: Any) -> Any:
    return tree_map(lambda v: v.to(DEVICE) if isinstance(v, torch.Tensor) else v, value)


def _cuda_case(name: str) -> Case:
    """The conformance case ``name`` with its model and every input on the GPU."""
    case = CASES[name]()
    case.model = case.model.to(DEVICE)
    case.example_inputs = _on_cuda(case.example_inputs)
    case.other_inputs = [_on_cuda(i) for i in case.other_inputs]
    case.methods = {m: [_on_cuda(i) for i in calls] for m, calls in case.methods.items()}
    # cuDNN and cuBLAS pick kernels per shape; the eager side is the same library, so a
    # small slack over the CPU tolerance is enough
    case.atol, case.rtol = max(case.atol, 1e-4), max(case.rtol, 1e-4)
    return case


def _all_on_cuda(out: Any) -> bool:
    return all(t.device.type == DEVICE for t in tree_leaves(out) if isinstance(t, torch.Tensor))


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_traces_runs_saves_and_loads_on_cuda(name: str, tmp_path: Path) -> None:
    case = _cuda_case(name)
    traced = case.trace()
    path = tmp_path / f"{name}.tb"
    tracebridge.save(traced, str(path))
    loaded = {rt: tracebridge.load(str(path), runtime=rt) for rt in RUNTIMES}
    for method, inputs in _calls(case):
        where = f"{name}.{method} on CUDA"
        expected = _run(case.model, method, inputs, case)
        got = _run(traced, method, inputs, case)
        assert _all_on_cuda(got), f"{where}: an output left the GPU"
        torch.testing.assert_close(got, expected, atol=case.atol, rtol=case.rtol)
        for rt, module in loaded.items():
            again = _run(module, method, inputs, case)
            assert _all_on_cuda(again), f"{where}, loaded ({rt}): an output left the GPU"
            # the same kernels on the same device: bit for bit
            torch.testing.assert_close(again, got, atol=0, rtol=0, equal_nan=True)


@pytest.mark.parametrize("name", ["mlp", "cnn_eval", "transformer", "tiny_gpt", "shape_ops"])
def test_graph_module_matches_the_trace_on_cuda(name: str) -> None:
    case = _cuda_case(name)
    traced = case.trace()
    gm = tracebridge.to_graph_module(traced)
    for _, inputs in _calls(case):
        got = bridge.call(gm, *inputs)  # the pytree structure back, guards checked
        assert _all_on_cuda(got)
        torch.testing.assert_close(got, traced(*inputs), atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_compile_modes_on_cuda(name: str, mode: str) -> None:
    case = _cuda_case(name)
    compiled = tracebridge.compile(case.model, case.example_inputs, ["--mode", mode])
    with torch.no_grad():
        for _ in range(3):  # CUDA graphs record at the second or third call
            for inputs in case.all_inputs:
                got = compiled(*inputs)
                assert _all_on_cuda(got)
                torch.testing.assert_close(got, case.model(*inputs), atol=2e-3, rtol=2e-3)


def test_aot_package_for_the_device_loads_without_recompiling(tmp_path: Path) -> None:
    """The package runs in a fresh process, in under a second, on the device it was made
    for. A crash in native code ends a process, so each load runs in a child: where
    torch's own ``aoti_load_package`` of the same package crashes too (an H200 with torch
    2.11+cu130 did, for a package made with torch's API alone), the fault is torch's or the
    machine's, and the test says so instead of failing."""
    case = _cuda_case("mlp")
    traced = case.trace()
    path, package = tmp_path / "mlp_aot.tb", tmp_path / "mlp.pt2"
    tracebridge.save_compiled(traced, str(path))
    aot.extract_package(path, package)
    x = case.example_inputs[0]
    torch.save({"x": x.cpu(), "want": traced(x).detach().cpu()}, tmp_path / "io.pt")
    ours = run_fresh_python(
        f"""
        import time, torch, tracebridge
        io = torch.load({str(tmp_path / "io.pt")!r})
        x = io["x"].to({DEVICE!r})
        start = time.perf_counter()
        loaded = tracebridge.load_compiled({str(path)!r}, trust_compiled_code=True)
        with torch.no_grad():
            got = loaded(x)
        {"torch.cuda.synchronize()" if DEVICE == "cuda" else ""}
        seconds = time.perf_counter() - start
        assert loaded.compiled_form == "aot", loaded.compiled_reason
        assert got.device.type == {DEVICE!r}
        torch.testing.assert_close(got.cpu(), io["want"], atol=1e-4, rtol=1e-4)
        print(f"load + first call {{seconds:.2f}} s")
        """
    )
    if ours.returncode < 0:  # killed by a signal: is torch's own loader any better?
        theirs = run_fresh_python(
            f"""
            import torch
            loaded = torch._inductor.aoti_load_package({str(package)!r})
            print(loaded(torch.rand(3, 16, device={DEVICE!r})))
            """
        )
        if theirs.returncode < 0:
            pytest.xfail(
                f"torch {torch.__version__}'s own aoti_load_package crashes on this package "
                f"too (signal {-theirs.returncode}): AOTInductor packages do not load here"
            )
    assert ours.returncode == 0, ours.stdout + ours.stderr
    seconds = float(ours.stdout.split("load + first call ")[1].split()[0])
    assert seconds < 5, ours.stdout  # < 1 s on a quiet machine; a loaded CI box varies
    print(ours.stdout)


def test_cpu_file_runs_on_cuda_and_back(tmp_path: Path) -> None:
    case = CASES["transformer"]()
    traced = case.trace()
    path = tmp_path / "t.tb"
    tracebridge.save(traced, str(path))
    on_gpu = tracebridge.load(str(path), map_location=DEVICE)
    for inputs in case.all_inputs:
        got = on_gpu(*_on_cuda(inputs))
        assert _all_on_cuda(got)
        torch.testing.assert_close(got.cpu(), traced(*inputs), atol=1e-4, rtol=1e-4)
