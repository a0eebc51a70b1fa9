"""tracebridge.compile: partitioning, coverage, compiling, checking, embedding, reloading.

Most tests use the ``reference`` backend (no compiler); the seed examples run on the
default ``inductor`` backend (a few tiny models: its first compile takes tens of seconds).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import artifact, backends
from tracebridge.backends import (
    Backend,
    BackendError,
    CompiledFunction,
    CompiledModule,
    ReferenceBackend,
    load_compiled,
    opsets,
    register_backend,
)
from tracebridge.backends.aot import CompiledCodeWarning

if not hasattr(tracebridge, "compile"):  # until tracebridge/__init__.py re-exports it
    tracebridge.compile = backends.compile


class SmallCNN(nn.Module):
    """Stands in for torchvision's resnet50 in the seed's last example."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        x = x.mean(dim=(2, 3))
        if x.shape[0] > 0:  # a guard: it must stay outside every subgraph
            x = x * 2
        return self.fc(x.view(x.size(0), -1)).softmax(-1)


class WithCumsum(nn.Module):
    """cumsum is not in the inductor op set: it splits the graph in two."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        y = torch.relu(self.a(x)) * 2
        y = torch.cumsum(y, 1)
        return torch.tanh(self.b(y)) + 1


def _cnn():
    torch.manual_seed(0)
    model = SmallCNN()
    with torch.no_grad():  # non-trivial running statistics
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _ref(model, inputs, **kwargs):
    return tracebridge.compile(model, inputs, backend="reference", **kwargs)


# --- the seed's examples, with torch.neuron.trace -> tracebridge.compile (inductor) -------


def test_seed_tracing_a_function():
    def foo(x, y):
        return 2 * x + y

    # Run `foo` with the provided inputs and record the tensor operations
    traced_foo = tracebridge.compile(foo, (torch.rand(3), torch.rand(3)))

    x, y = torch.rand(5), torch.rand(5)
    assert isinstance(traced_foo, CompiledFunction)
    torch.testing.assert_close(traced_foo(x, y), 2 * x + y)
    # inductor compiles whole graphs: one torch.compile of the traced GraphModule
    assert traced_foo.coverage.subgraphs == ["inductor_graph"]
    assert traced_foo.coverage.compiled == 2


def test_seed_tracing_an_existing_module():
    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()  # noqa: UP008 - as in the seed
            self.conv = nn.Conv2d(1, 1, 3)

        def forward(self, x):
            return self.conv(x)

    n = Net()
    n.eval()
    example_forward_input = torch.rand(1, 1, 3, 3)

    # Trace a specific method and construct a module with a single `forward` method
    module = tracebridge.compile(n.forward, example_forward_input)
    x = torch.rand(2, 1, 5, 5)
    torch.testing.assert_close(module(x), n(x))

    # Trace a module (implicitly traces `forward`)
    module = tracebridge.compile(n, example_forward_input)
    assert isinstance(module, CompiledModule)
    torch.testing.assert_close(module(x), n(x))
    # One conv is below min_subgraph_size: supported, but left on the runtime.
    assert (module.coverage.supported, module.coverage.compiled) == (1, 0)
    assert module.coverage.too_small == [[2]]
    assert "conv2d(" in module.graph and "backend." not in module.graph


def test_seed_pretrained_module_save_and_load(tmp_path):
    model = _cnn()
    model.eval()
    image = torch.rand(2, 3, 16, 16)

    model_neuron = tracebridge.compile(model, example_inputs=[image])
    model_neuron.save(tmp_path / "resnet50_neuron.pt")

    loaded = load_compiled(tmp_path / "resnet50_neuron.pt")
    batch = torch.rand(3, 3, 16, 16)
    with torch.no_grad():
        expected = model(batch)
        torch.testing.assert_close(model_neuron(batch), expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loaded(batch), expected, rtol=1e-4, atol=1e-5)
    # One graph, guard inside (it no longer splits the graph in two), nothing left eager.
    assert loaded.coverage.subgraphs == ["inductor_graph"]
    assert loaded.program.backend["methods"]["forward"]["whole_graph"] == {"eager_nodes": []}
    assert loaded.fc.weight is loaded._methods["forward"].graph_module.fc.weight


def test_compile_again_after_the_first_compiles_worker_thread_ended():
    """The warm-up compiles in a worker thread that ends with it. On torch 2.11 without a
    CUDA device, the fake CUDA guard that thread's FakeTensorMode installed died with it,
    and the second compile here crashed the process (fake_cuda_guard.py)."""
    model = _cnn()
    image = torch.rand(2, 3, 16, 16)
    first = tracebridge.compile(model, example_inputs=[image])
    with torch.no_grad():
        batch = torch.rand(3, 3, 16, 16)
        torch.testing.assert_close(first(batch), model(batch), rtol=1e-4, atol=1e-5)
        second = tracebridge.compile(model, example_inputs=[image])
        torch.testing.assert_close(second(batch), model(batch), rtol=1e-4, atol=1e-5)
        batch = torch.rand(4, 3, 16, 16)  # a new size: the first recompiles, here
        torch.testing.assert_close(first(batch), model(batch), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("caller", ["main", "thread"])
def test_compile_worker_leaves_torchs_fake_cuda_guard_alive(caller):
    """The crash above without a compiler, in a child process (a segmentation fault fails
    this test, not the session): FakeTensorMode entered in compile workers that end, their
    freed memory reused, then entered in the main thread; compiling from the main thread,
    or from threads of the caller's own that end as well."""
    script = (
        "import sys, threading, torch\n"
        "from torch._subclasses.fake_tensor import FakeTensorMode\n"
        "from tracebridge.backends.api import _in_worker\n"
        "def fake():\n"
        "    with FakeTensorMode():\n"
        "        torch.empty(2)\n"
        "    junk = [bytearray(n) for n in range(8, 200)] * 10  # reuses freed blocks\n"
        "def compiles():\n"
        "    for _ in range(3):\n"
        "        _in_worker(fake, 'inductor', None)\n"
        "for _ in range(2):\n"
        "    if sys.argv[1] == 'main':\n"
        "        compiles()\n"
        "    else:\n"
        "        caller = threading.Thread(target=compiles)\n"
        "        caller.start()\n"
        "        caller.join()\n"
        "fake()\n"
        "print('alive')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", script, caller], capture_output=True, text=True, env=env, timeout=300
    )
    assert (done.returncode, done.stdout) == (0, "alive\n"), done.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_inductor_on_cuda():
    model = _cnn().cuda()
    image = torch.rand(4, 3, 16, 16, device="cuda")
    compiled = tracebridge.compile(model, image, check_tolerance=1e-3)
    batch = torch.rand(7, 3, 16, 16, device="cuda")
    with torch.no_grad():
        got = compiled(batch)
        assert got.device.type == "cuda"
        torch.testing.assert_close(got, model(batch), rtol=1e-3, atol=1e-4)


# --- partitioning and coverage --------------------------------------------------------------


def test_partition_keeps_guards_and_state_outside():
    compiled = _ref(_cnn(), torch.rand(2, 3, 16, 16))
    text = compiled.graph
    assert text.count("backend.reference_subgraph_") == 2
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "reference_subgraph_0" in line)
    guard = next(i for i, line in enumerate(lines) if line.strip().startswith("guard"))
    second = next(i for i, line in enumerate(lines) if "reference_subgraph_1" in line)
    assert first < guard < second
    # State is read by the runtime and passed in, so it is hoisted before the subgraph.
    assert "%conv1.weight" in lines[first] and "%fc.weight" in lines[second]
    assert not any("= conv2d(" in line for line in lines)
    # The sizes the guard checks are computed by the runtime, after subgraph 0.
    assert "(%0: f32[2, 16],) = backend" in lines[first]
    assert "= prim.size(%0, 0)" in lines[first + 1]
    cov = compiled.coverage
    assert (cov.total, cov.supported, cov.compiled, cov.unsupported) == (13, 13, 11, {})


def test_shape_general_and_shares_parameters():
    model = _cnn()
    compiled = _ref(model, torch.rand(2, 3, 16, 16))
    batch = torch.rand(5, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(compiled(batch), model(batch))
        model.fc.bias.add_(1.0)  # state is read on every call
        torch.testing.assert_close(compiled(batch), model(batch))
    assert compiled.fc.weight is model.fc.weight
    with pytest.raises(tracebridge.GuardError, match="dimensions"):
        compiled(torch.rand(3, 16, 16))


def test_to_double_after_compiling():
    model = _cnn()
    compiled = _ref(model, torch.rand(2, 3, 8, 8))
    compiled.double()
    batch = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        assert compiled(batch).dtype == torch.float64
        torch.testing.assert_close(compiled(batch), model(batch))


def test_unsupported_op_splits_and_is_reported():
    torch.manual_seed(1)
    model = WithCumsum().eval()
    compiled = _ref(model, torch.rand(3, 4))
    cov = compiled.coverage
    assert cov.unsupported == {"cumsum": 1}
    assert (cov.total, cov.supported) == (7, 6)
    assert cov.subgraphs == ["reference_subgraph_0", "reference_subgraph_1"]
    assert "not supported: cumsum x1" in str(cov)
    assert "  %" in compiled.graph and "= cumsum(" in compiled.graph
    x = torch.rand(6, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_all_ops_argument_and_min_subgraph_size():
    model = WithCumsum().eval()
    whole = _ref(model, torch.rand(3, 4), compiler_args=["--all-ops"])
    assert whole.coverage.subgraphs == ["reference_subgraph_0"]
    assert whole.coverage.compiled == 7
    none = _ref(model, torch.rand(3, 4), min_subgraph_size=100)
    assert none.coverage.subgraphs == [] and none.coverage.compiled == 0
    assert len(none.coverage.too_small) == 2
    assert "backend." not in none.graph
    x = torch.rand(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(none(x), model(x))
        torch.testing.assert_close(whole(x), model(x))


def test_structured_outputs_and_check_inputs():
    def f(x, y):
        s = x + y
        return s, (torch.relu(s) * 3, torch.sigmoid(1 - y))

    compiled = _ref(
        f, (torch.rand(2, 3), torch.rand(2, 3)), check_inputs=[(torch.rand(4, 3), torch.rand(4, 3))]
    )
    x, y = torch.rand(5, 3), torch.rand(5, 3)
    got, want = compiled(x, y), f(x, y)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1][0], want[1][0])
    torch.testing.assert_close(got[1][1], want[1][1])
    assert compiled.coverage.unsupported == {}


def test_verbose_prints_coverage_before_compiling(capsys):
    _ref(lambda x: torch.relu(x) + 1, torch.rand(3), verbose=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "reference: 2/2 ops supported (100%), 2 compiled in 1 subgraph(s)"
    assert out[1].startswith("compiled reference_subgraph_0 in ")


def test_workdir_gets_partition_report_and_sources(tmp_path):
    _ref(WithCumsum().eval(), torch.rand(3, 4), compiler_workdir=tmp_path / "work")
    report = (tmp_path / "work" / "partition.txt").read_text()
    assert report.startswith("reference: 6/7 ops supported")
    assert "backend.reference_subgraph_1(" in report
    source = (tmp_path / "work" / "reference_subgraph_0.py").read_text()
    assert source.startswith("def reference_subgraph_0(") and "op_linear_" in source


# --- arguments, modes, errors ------------------------------------------------------------------


def test_training_module_is_returned_as_is_with_warning():
    model = _cnn().train()
    with pytest.warns(tracebridge.TracerWarning, match=r"training mode.*\.eval\(\)"):
        same = tracebridge.compile(model, torch.rand(2, 3, 8, 8), backend="reference")
    assert same is model
    with pytest.warns(tracebridge.TracerWarning, match="training mode"):
        method = tracebridge.compile(model.forward, torch.rand(2, 3, 8, 8))
    assert method == model.forward


def test_compiler_args_errors():
    with pytest.raises(BackendError, match="unrecognized arguments: --fast"):
        _ref(lambda x: x + 1, torch.rand(2), compiler_args=["--fast"])
    with pytest.raises(BackendError, match="list of strings"):
        _ref(lambda x: x + 1, torch.rand(2), compiler_args="--all-ops")
    with pytest.raises(BackendError, match="invalid choice"):
        tracebridge.compile(lambda x: x + 1, torch.rand(2), ["--mode", "turbo"])
    with pytest.raises(BackendError, match="unknown backend 'tpu'.*inductor, reference"):
        tracebridge.compile(lambda x: x + 1, torch.rand(2), backend="tpu")
    with pytest.raises(BackendError, match="identifier"):
        register_backend("no-dash", ReferenceBackend)
    with pytest.raises(BackendError, match="Backend subclass"):
        register_backend("thing", object)


def test_inductor_args_parse():
    args = backends.InductorBackend.parse_args(
        ["--mode", "max-autotune-no-cudagraphs", "--no-dynamic", "--fullgraph"]
    )
    assert (args.mode, args.dynamic, args.fullgraph) == ("max-autotune-no-cudagraphs", False, True)
    assert backends.InductorBackend.parse_args(["--dynamic"]).dynamic is True


class _Broken(ReferenceBackend):
    """Compiles into something slightly wrong, to exercise the check."""

    def compile(self, subgraph_fn, example_inputs, args, workdir):
        def wrong(*inputs):
            return tuple(o + 1e-2 if o.is_floating_point() else o for o in subgraph_fn(*inputs))

        return wrong if "subgraph_1" in subgraph_fn.__name__ else subgraph_fn


class _Slow(ReferenceBackend):
    def compile(self, subgraph_fn, example_inputs, args, workdir):
        time.sleep(3.0)
        return subgraph_fn


class _Failing(ReferenceBackend):
    def compile(self, subgraph_fn, example_inputs, args, workdir):
        raise RuntimeError("no C compiler")


register_backend("broken", _Broken)
register_backend("slow", _Slow)
register_backend("failing", _Failing)


def test_check_trace_names_the_subgraph():
    model = WithCumsum().eval()
    with pytest.raises(tracebridge.TracingCheckError, match="broken_subgraph_1"):
        tracebridge.compile(model, torch.rand(3, 4), backend="broken")
    unchecked = tracebridge.compile(model, torch.rand(3, 4), backend="broken", check_trace=False)
    x = torch.rand(2, 4)
    with torch.no_grad():
        assert not torch.allclose(unchecked(x), model(x))
    loose = tracebridge.compile(model, torch.rand(3, 4), backend="broken", check_tolerance=1.0)
    assert loose.coverage.compiled == 6


def test_compiler_timeout_raises_timeout_expired():
    start = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        tracebridge.compile(
            lambda x: x * 2 + 1, torch.rand(2), backend="slow", compiler_timeout=0.2
        )
    assert time.perf_counter() - start < 2.5


def test_compiler_failure_is_a_backend_error():
    with pytest.raises(BackendError, match="failed to compile failing_subgraph_0.*no C compiler"):
        tracebridge.compile(lambda x: x * 2 + 1, torch.rand(2), backend="failing")


# --- embedding in the artifact and reloading --------------------------------------------------


def test_save_embeds_partition_and_reloads(tmp_path):
    model = _cnn()
    compiled = _ref(model, torch.rand(2, 3, 16, 16), compiler_args=["--all-ops"])
    path = tmp_path / "cnn_neuron.pt"
    compiled.save(path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        doc = json.loads(archive.read("program.json"))
    assert sorted(names) == ["program.json", "tensors.safetensors"]  # no code, no pickle
    meta = doc["backend"]  # a field of the program (format 2), not display-only meta
    assert meta["name"] == "reference" and meta["compiler_args"] == ["--all-ops"]
    subgraphs = meta["methods"]["forward"]["subgraphs"]
    assert [s["name"] for s in subgraphs] == ["reference_subgraph_0", "reference_subgraph_1"]
    assert subgraphs[0]["range"] == [subgraphs[0]["nodes"][0], subgraphs[0]["nodes"][-1] + 1]
    nodes = doc["methods"]["forward"]["nodes"]
    assert all(
        nodes[i]["op"] not in ("prim.guard", "prim.state") for s in subgraphs for i in s["nodes"]
    )

    loaded = load_compiled(path)
    assert isinstance(loaded, CompiledModule)
    assert loaded.graph == compiled.graph
    batch = torch.rand(4, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), model(batch))
        # The artifact stays an ordinary one: tracebridge.load runs it uncompiled.
        torch.testing.assert_close(tracebridge.load(path)(batch), model(batch))


def test_function_round_trip_and_recompile_on_first_use(tmp_path):
    calls = []

    class Counting(ReferenceBackend):
        def compile(self, subgraph_fn, example_inputs, args, workdir):
            calls.append(example_inputs is None)
            return subgraph_fn

    register_backend("counting", Counting)
    f = tracebridge.compile(
        lambda x, y: torch.tanh(x @ y) * 2, (torch.rand(2, 3), torch.rand(3, 4)), backend="counting"
    )
    assert calls == [False]  # compiled once, warmed on the example inputs
    f.save(tmp_path / "f.tb")
    loaded = load_compiled(tmp_path / "f.tb")
    assert calls == [False]  # nothing compiled at load ...
    x, y = torch.rand(3, 3), torch.rand(3, 5)
    torch.testing.assert_close(loaded(x, y), torch.tanh(x @ y) * 2)
    loaded(x, y)
    assert calls == [False, True]  # ... but once, at the first call


def test_load_compiled_refuses_plain_and_corrupt_artifacts(tmp_path):
    plain = tracebridge.trace(lambda x: x * 2, torch.rand(2))
    plain.save(tmp_path / "plain.tb")
    with pytest.raises(tracebridge.ArtifactError, match="not saved by tracebridge.compile"):
        load_compiled(tmp_path / "plain.tb")

    compiled = _ref(WithCumsum().eval(), torch.rand(3, 4))
    compiled.save(tmp_path / "ok.tb")
    program = artifact.read(tmp_path / "ok.tb")
    subgraph = program.backend["methods"]["forward"]["subgraphs"][0]
    subgraph["nodes"] = subgraph["nodes"][:1] + subgraph["nodes"][2:]  # a hole
    artifact.write(program, tmp_path / "holed.tb")
    with pytest.raises(tracebridge.ArtifactError, match="not contiguous"):
        load_compiled(tmp_path / "holed.tb")
    cumsum = next(i for i, n in enumerate(program.methods["forward"].nodes) if n.op == "cumsum")
    subgraph["nodes"] = [cumsum]
    artifact.write(program, tmp_path / "unsupported.tb")
    with pytest.raises(BackendError, match="cumsum"):
        load_compiled(tmp_path / "unsupported.tb")


def test_op_set_data_names_real_ops():
    from tracebridge.ir import ops as opset

    unknown = sorted(
        name for name in opsets.SUPPORTED | set(opsets.CONDITIONAL) if not opset.is_known(name)
    )
    assert unknown == []


def test_dropout_in_eval_is_supported_and_in_training_is_not():
    from tracebridge.ir import Node

    backend = ReferenceBackend(ReferenceBackend.parse_args([]))
    assert backend.supports(Node("dropout", args=[None, 0.5, False]))
    assert not backend.supports(Node("dropout", args=[None, 0.5, True]))
    assert not backend.supports(Node("prim.guard"))


def test_custom_backend_interface():
    class OnlyAdd(Backend):
        def supports(self, node):
            return node.op == "add"

        def compile(self, subgraph_fn, example_inputs, args, workdir):
            return subgraph_fn

    register_backend("only_add", OnlyAdd)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = tracebridge.compile(lambda x: (x + 1 + 2) * 3 + 4, torch.rand(2), backend="only_add")
    assert f.coverage.subgraphs == ["only_add_subgraph_0"]
    assert (f.coverage.supported, f.coverage.total) == (3, 4)
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 16.0))


def test_closure_constant_code_and_save_helpers(tmp_path):
    weight = torch.rand(3)
    with pytest.warns(tracebridge.TracerWarning):
        f = _ref(lambda x: torch.relu(x * weight) + 1, torch.rand(2, 3))
    assert "# backend.reference_subgraph_0" in f.code
    assert list(f.subgraph_code) == ["reference_subgraph_0"]
    assert "op_relu_" in f.subgraph_code["reference_subgraph_0"]
    tracebridge.save(f, tmp_path / "closure.tb")
    loaded = load_compiled(tmp_path / "closure.tb", map_location="cpu")
    x = torch.rand(4, 3)
    torch.testing.assert_close(loaded(x), torch.relu(x * weight) + 1)
    assert "backend.reference_subgraph_0" in loaded.graph


def test_sizes_cross_subgraph_boundaries():
    def f(x):
        n = x.shape[0]
        if n > 2:
            x = x + 1
        return (x * 2).view(n, -1).relu()

    compiled = _ref(f, torch.rand(3, 2, 2))
    lines = compiled.graph.splitlines()
    # The size and the comparison run on the runtime (never a subgraph of size ops only);
    # the size goes into the subgraph as an input.
    assert "= prim.size(%x, 0)" in lines[1] and "guard" in lines[3]
    assert "= backend.reference_subgraph_0(%x, %0)" in lines[4]
    assert compiled.coverage.subgraphs == ["reference_subgraph_0"]
    x = torch.randn(5, 3, 2)
    torch.testing.assert_close(compiled(x), f(x))
    # Batch size 2 takes the other branch: the graph traced where `n > 2` flips serves it.
    x = torch.rand(2, 2, 2)
    torch.testing.assert_close(compiled(x), f(x))


def test_reload_in_a_fresh_process(tmp_path):
    import numpy

    model = WithCumsum().eval()
    compiled = _ref(model, torch.rand(3, 4))
    compiled.save(tmp_path / "m.tb")
    x = torch.rand(5, 4)
    with torch.no_grad():
        y = model(x)
    numpy.save(tmp_path / "x.npy", x.numpy())
    numpy.save(tmp_path / "y.npy", y.numpy())
    script = (
        "import sys, numpy, torch\n"
        "from tracebridge.backends import load_compiled\n"
        "m = load_compiled(sys.argv[1] + '/m.tb')\n"
        "x, y = (torch.from_numpy(numpy.load(f'{sys.argv[1]}/{n}.npy', allow_pickle=False))\n"
        "        for n in ('x', 'y'))\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(m(x), y)\n"
        "print(m.coverage.subgraphs)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['reference_subgraph_0', 'reference_subgraph_1']"


# --- whole-graph compiling (inductor): modes, guards, eager ops, tolerance -----------------


class _WholeNoCompiler(backends.InductorBackend):
    """A whole-graph backend without a compiler: runs the GraphModule as it is (fast tests
    of the whole-graph path: embedding, reloading, the check)."""

    compiled: list = []

    def compile_graph_module(self, gm, example_inputs, args, workdir):
        self.compiled.append(gm)
        return gm


class _WholeWrong(_WholeNoCompiler):
    def compile_graph_module(self, gm, example_inputs, args, workdir):
        return lambda *inputs: tuple(o + 1e-3 for o in gm(*inputs))


register_backend("whole_plain", _WholeNoCompiler)
register_backend("whole_wrong", _WholeWrong)


def _graph_count() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class WithNoise(WithCumsum):
    """rand_like draws random numbers: inductor leaves it to eager PyTorch (compiled RNG
    draws other numbers), so it splits the compiled graph in two."""

    def forward(self, x):
        y = torch.relu(self.a(x)) * 2
        y = torch.cumsum(y, 1) + torch.rand_like(y)
        return torch.tanh(self.b(y)) + 1


def test_inductor_compiles_around_unsupported_ops_only():
    """Dynamo compiles the graph before and after rand_like (two graphs, one break); every
    other op (cumsum too, outside the partition op set) is in one of them."""
    torch.manual_seed(1)
    model = WithNoise().eval()
    before = _graph_count()
    compiled = tracebridge.compile(model, torch.rand(3, 4))
    assert _graph_count() - before == 2
    entry = compiled.program.backend["methods"]["forward"]
    noise = next(
        i for i, n in enumerate(compiled.program.methods["forward"].nodes) if n.op == "rand_like"
    )
    assert entry == {"subgraphs": [], "whole_graph": {"eager_nodes": [noise]}}
    cov = compiled.coverage
    assert cov.unsupported == {"rand_like": 1} and (cov.total, cov.compiled) == (9, 8)
    x = torch.rand(6, 4)
    with torch.no_grad():
        torch.manual_seed(3)
        expected = model(x)
        torch.manual_seed(3)
        torch.testing.assert_close(compiled(x), expected)


def test_inductor_guards_stay_checked():
    def f(x):
        if x.size(0) < 4:  # traced at 3: larger sizes take the other path, unseen
            return torch.relu(x) * 2 + 1
        return x

    compiled = tracebridge.compile(f, torch.rand(3, 4))
    x = torch.rand(2, 4)
    torch.testing.assert_close(compiled(x), f(x))
    with pytest.raises(tracebridge.GuardError, match=r"x.shape\[0\] < 4"):
        compiled(torch.rand(5, 4))


class GuardedAttention(nn.Module):
    """As nn.MultiheadAttention: a transpose, then guards on the width (``!= 8``, a
    multiple of the heads) before any other op -- the shape of the transformer that ran
    1.3x torch.compile with dynamic sizes (issue 16)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        x = x.transpose(0, 1)
        if x.size(2) != 8 or x.size(2) // 2 * 2 != x.size(2):
            raise ValueError("width")
        q, k, v = self.qkv(x).chunk(3, -1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(0, 1)


def test_inductor_one_graph_when_guards_come_first():
    """Guards do not split a whole graph: the transpose before them is compiled with the
    rest (it was left eager, a graph break at every call), and Dynamo turns each guard
    into a guard of its own instead of breaking the graph there."""
    from torch._dynamo.utils import counters

    # Dynamo's caches and frame states from earlier tests in this process (sizes it has
    # seen for shared code objects) would make it compile other graphs here: start clean.
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GuardedAttention().eval()
    breaks = sum(counters["graph_break"].values())
    before = _graph_count()
    compiled = tracebridge.compile(model, torch.rand(2, 5, 8))
    assert compiled.program.backend["methods"]["forward"]["whole_graph"] == {"eager_nodes": []}
    assert not compiled.coverage.too_small
    assert _graph_count() - before == 1
    assert sum(counters["graph_break"].values()) == breaks
    x = torch.rand(3, 7, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_inductor_modes_on_cpu(mode):
    def f(x, y):
        return torch.tanh(x * y + 1).sum(-1)

    compiled = tracebridge.compile(f, (torch.rand(4, 3), torch.rand(4, 3)), ["--mode", mode])
    x, y = torch.rand(4, 3), torch.rand(4, 3)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert compiled.program.backend["compiler_args"] == ["--mode", mode]


def test_whole_graph_parameters_and_buffers_are_static_inputs(monkeypatch):
    """What CUDA graphs need (reduce-overhead: no copies of the weights per call): in the
    graph Dynamo hands inductor, every parameter and buffer is a static input, as with
    torch.compile(model), and the call's input is not. Inductor is swapped for a probe of
    what it would receive (the GraphModule's forward is what is compiled)."""
    seen = []

    def probe(gm, inputs):
        seen.extend(
            (tuple(t.shape), getattr(t, "_dynamo_static_input_type", None))
            for t in inputs
            if isinstance(t, torch.Tensor)
        )
        return gm.forward

    real = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, backend=None, **kw: real(fn, backend=probe, **kw)
    )
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU()).eval()
    x = torch.rand(5, 3)
    compiled = tracebridge.compile(net, x)
    torch.testing.assert_close(compiled(x), net(x))
    inputs = [kind for shape, kind in seen if shape == (5, 3)]
    weights = [kind for shape, kind in seen if shape != (5, 3)]
    assert inputs == [None] and len(weights) == 6  # weight, bias, BN's four
    assert set(weights) == {"unguarded"}
    torch._dynamo.reset()


class _OnCuda:
    is_cuda = True  # stands for a CUDA tensor where there is no GPU


def test_cuda_graph_modes_warm_up_in_the_callers_thread(monkeypatch):
    """CUDA graph trees live in the thread that made them: a call from another thread
    fails an AssertionError inside inductor (pytorch/pytorch#123177), what
    ``--mode reduce-overhead`` hit on every model when the warm-up ran in the timeout's
    worker thread. With CUDA graphs on a GPU, the warm-up runs in the caller's thread."""
    from tracebridge.backends import api as backends_api
    from tracebridge.backends.inductor import InductorBackend

    def backend(mode):
        return InductorBackend(InductorBackend.parse_args(["--mode", mode]))

    assert backend("reduce-overhead").compiles_in_callers_thread([_OnCuda()])
    assert backend("max-autotune").compiles_in_callers_thread([torch.rand(2), _OnCuda()])
    assert not backend("reduce-overhead").compiles_in_callers_thread([torch.rand(2)])
    assert not backend("default").compiles_in_callers_thread([_OnCuda()])
    assert not backend("max-autotune-no-cudagraphs").compiles_in_callers_thread([_OnCuda()])
    monkeypatch.setattr(InductorBackend, "compiles_in_callers_thread", lambda self, t: True)
    monkeypatch.setattr(
        backends_api, "_in_worker", lambda *a: pytest.fail("warm-up in a worker thread")
    )
    compiled = tracebridge.compile(
        lambda x: torch.tanh(x) * 2, torch.rand(4, 3), ["--mode", "reduce-overhead"]
    )
    x = torch.rand(5, 3)
    torch.testing.assert_close(compiled(x), torch.tanh(x) * 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_inductor_modes_on_cuda(mode):
    model = _cnn().cuda()
    compiled = tracebridge.compile(model, torch.rand(4, 3, 16, 16, device="cuda"), ["--mode", mode])
    graph_module = compiled._methods["forward"].graph_module
    assert graph_module.conv1.weight is model.conv1.weight  # static inputs, not copies
    with torch.no_grad():
        for _ in range(3):  # reduce-overhead records CUDA graphs, then replays them
            batch = torch.rand(4, 3, 16, 16, device="cuda")
            torch.testing.assert_close(compiled(batch), model(batch), rtol=1e-2, atol=1e-3)


def test_whole_graph_shares_parameters_and_reloads(tmp_path):
    model = _cnn()
    compiled = tracebridge.compile(model, torch.rand(2, 3, 8, 8), backend="whole_plain")
    gm = compiled._methods["forward"].graph_module
    assert gm.conv1.weight is model.conv1.weight and gm.bn.running_mean is model.bn.running_mean
    batch = torch.rand(3, 3, 8, 8)
    with torch.no_grad():
        model.fc.bias.add_(1.0)
        torch.testing.assert_close(compiled(batch), model(batch))
    compiled.save(tmp_path / "m.tb")
    seen = len(_WholeNoCompiler.compiled)
    loaded = load_compiled(tmp_path / "m.tb")
    assert len(_WholeNoCompiler.compiled) == seen  # compiled at the first call, not at load
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), model(batch))
    assert len(_WholeNoCompiler.compiled) == seen + 1
    assert loaded.coverage.subgraphs == ["whole_plain_graph"]

    program = artifact.read(tmp_path / "m.tb")
    program.backend["methods"]["forward"]["whole_graph"] = {"eager_nodes": [10**6]}
    artifact.write(program, tmp_path / "bad.tb")
    with pytest.raises(tracebridge.ArtifactError, match="eager_nodes must be a list of node"):
        load_compiled(tmp_path / "bad.tb")


def test_whole_graph_check_uses_the_default_tolerance():
    def f(x):
        return x * 2 + 1

    with pytest.raises(tracebridge.TracingCheckError, match=r"tolerance 0.0001.*\n.*whole graph"):
        tracebridge.compile(f, torch.rand(3), backend="whole_wrong")
    loose = tracebridge.compile(f, torch.rand(3), backend="whole_wrong", check_tolerance=1e-2)
    assert loose.coverage.compiled == 2
    double = (torch.rand(3, dtype=torch.float64),)
    with pytest.raises(tracebridge.TracingCheckError, match=r"tolerance 1e-07"):
        tracebridge.compile(f, double, backend="whole_wrong")


def test_default_tolerance_table():
    from tracebridge.backends.tolerance import TOLERANCES, default_tolerance

    half = torch.nn.Linear(2, 2).half()
    traced = tracebridge.trace(half, torch.rand(1, 2, dtype=torch.float16))
    assert default_tolerance((torch.rand(1, 2, dtype=torch.float16),), traced) == 1e-2
    assert default_tolerance((torch.arange(3),), None) == TOLERANCES[("cpu", torch.float32)]
    assert TOLERANCES[("cuda", torch.float32)] == 1e-3  # inductor's convolutions vs cuDNN's


def test_partitioned_inductor_artifacts_still_load(tmp_path):
    """A file that an earlier tracebridge saved with inductor partitions (subgraph node
    lists, no whole_graph) loads and compiles those partitions, as before."""
    # the seed's function (test_seed_tracing_a_function): inductor's cache has its kernel
    f = _ref(lambda x, y: 2 * x + y, (torch.rand(3), torch.rand(3)))
    f.save(tmp_path / "old.tb")
    program = artifact.read(tmp_path / "old.tb")
    program.backend["name"] = "inductor"
    program.backend["methods"]["forward"]["subgraphs"][0]["name"] = "inductor_subgraph_0"
    artifact.write(program, tmp_path / "old_inductor.tb")
    loaded = load_compiled(tmp_path / "old_inductor.tb")
    assert loaded.coverage.subgraphs == ["inductor_subgraph_0"]
    assert "backend.inductor_subgraph_0" in loaded.graph
    x, y = torch.rand(5), torch.rand(5)
    torch.testing.assert_close(loaded(x, y), 2 * x + y)


# --- benchmarks/bench_gpu.py --------------------------------------------------------------


def _bench_gpu():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_gpu

    return bench_gpu


def test_bench_gpu_has_every_column_and_row_of_the_issue(tmp_path):
    """Issue 16's table: eager, torch.jit.trace, torch.compile per mode, CUDA graph replay,
    the trace, tracebridge.compile per mode, the AOT artifact; GPT-2 with 4 layers in
    bfloat16 at batch 1 and 16 among the rows (building the table needs no GPU)."""
    bench = _bench_gpu()
    modes = ["default", "reduce-overhead", "max-autotune"]
    columns = list(bench.contenders("cuda", modes, str(tmp_path), {}))
    assert columns == [
        "eager",
        "torch.jit.trace",
        *[f"torch.compile {m}" for m in modes],
        "CUDA graph",
        "tracebridge trace",
        *[f"tracebridge.compile {m}" for m in modes],
        "AOT artifact",
    ]
    rows = {(c.name, c.batch, c.dtype) for c in bench.cases("full")}
    assert ("GPT-2-ish 4 layers bf16", 1, torch.bfloat16) in rows
    assert ("GPT-2-ish 4 layers bf16", 16, torch.bfloat16) in rows
    assert {("transformer encoder", 1), ("transformer encoder", 16)} <= {r[:2] for r in rows}
    assert ("MLP 512-2048-2048-10", 16, torch.float32) in rows
    assert ("resnet18-ish", 1, torch.float32) in rows
    assert {c.name for c in bench.cases("quick")} and "CUDA graph" not in bench.contenders(
        "cpu", ["default"], str(tmp_path), {}
    )


def test_bench_gpu_runs_on_the_cpu(capsys):
    """--device cpu --quick: the same code paths on tiny models (two contenders here, to
    keep the test short; the table and the goals' ratios are printed)."""
    bench = _bench_gpu()
    if not torch.cuda.is_available():
        assert bench.main([]) == 0
        assert "CUDA is not available" in capsys.readouterr().out
    argv = ["--device", "cpu", "--quick", "--models", "MLP", "--only", "eager", "jit.trace"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "| model | batch | eager | torch.jit.trace |" in out
    assert "| MLP 64-256-256-10 | 16 |" in out and "AOT load + 1st call (s)" in out


def test_dynamic_default_follows_the_mode():
    """Symbolic sizes by default; torch.compile's own rule in the CUDA graph modes (a graph
    is recorded per size, and symbolic sizes cost host work at every replay); an explicit
    flag always wins."""
    parse = backends.InductorBackend.parse_args
    assert parse([]).dynamic is True
    assert parse(["--mode", "max-autotune-no-cudagraphs"]).dynamic is True
    assert parse(["--mode", "reduce-overhead"]).dynamic is None
    assert parse(["--mode", "max-autotune"]).dynamic is None
    assert parse(["--mode", "reduce-overhead", "--dynamic"]).dynamic is True
    assert parse(["--mode", "reduce-overhead", "--no-dynamic"]).dynamic is False


def _fused_encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def test_lone_ops_between_guards_compile_only_for_cuda_graphs(monkeypatch):
    """nn.TransformerEncoder's fused path under no_grad: one op per layer, each followed by
    dtype and grad-mode guards, so every partition is "too small". Compiled alone a fused
    op gains nothing (on a GPU it ran slower than on the runtime, as under torch.compile):
    it stays on the runtime. A CUDA graph replay pays even for lone ops: with CUDA graphs
    the whole graph is one compile (it ran uncompiled in every mode before)."""
    from tracebridge.backends.inductor import InductorBackend

    model, x = _fused_encoder(), torch.rand(2, 5, 16)
    with torch.no_grad():
        plain = tracebridge.compile(model, x)
        assert "_transformer_encoder_layer_fwd" in str(plain.graph)  # the fused path
        assert plain.coverage.compiled == 0 and plain.coverage.too_small
        monkeypatch.setattr(InductorBackend, "records_cuda_graphs", lambda self, t: True)
        graphed = tracebridge.compile(model, x, ["--mode", "reduce-overhead"])
        assert graphed.coverage.compiled > 0 and len(graphed.coverage.subgraphs) == 1
        for shape in ((2, 5, 16), (3, 7, 16)):
            x = torch.rand(*shape)
            torch.testing.assert_close(graphed(x), model(x), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(plain(x), model(x), atol=1e-5, rtol=1e-5)


def test_records_cuda_graphs_in_the_cuda_graph_modes_on_a_gpu():
    from tracebridge.backends.inductor import InductorBackend

    def backend(mode):
        return InductorBackend(InductorBackend.parse_args(["--mode", mode]))

    assert backend("reduce-overhead").records_cuda_graphs([torch.rand(2), _OnCuda()])
    assert backend("max-autotune").records_cuda_graphs([_OnCuda()])
    assert not backend("reduce-overhead").records_cuda_graphs([torch.rand(2)])
    assert not backend("default").records_cuda_graphs([_OnCuda()])


# --- found by benchmarks/deploy_trial.py ----------------------------------------------------


@pytest.mark.parametrize("backend", ["reference", "whole_plain"])
def test_a_model_that_writes_its_input_compiles_and_leaves_the_example_alone(backend):
    # The warm-up and the check ran on the same tensors, each run adding 1 again: the check
    # refused a right compile ("differs between the code and the trace").
    def f(x):
        x.add_(1)
        return x * 2

    example = torch.rand(3, 4)
    given = example.clone()
    compiled = tracebridge.compile(f, (example,), backend=backend)
    assert torch.equal(example, given + 1)  # the trace's own run, as eager's would
    x = torch.rand(5, 4)
    torch.testing.assert_close(compiled(x.clone()), (x + 1) * 2)


def test_compile_takes_strict_for_dict_outputs():
    def f(x):
        return {"sum": x.sum(1), "max": x.amax(1)}

    with pytest.raises(tracebridge.TraceError, match="strict"):
        tracebridge.compile(f, (torch.rand(3, 4),), backend="whole_plain")
    compiled = tracebridge.compile(f, (torch.rand(3, 4),), backend="whole_plain", strict=False)
    x = torch.rand(6, 4)
    got = compiled(x)
    assert set(got) == {"sum", "max"} and torch.equal(got["sum"], x.sum(1))


@pytest.mark.parametrize("backend", ["whole_plain", "reference"])
def test_a_parameter_set_anew_on_the_original_is_seen_after_compiling(backend):
    # The whole graph held the old Parameter: silently the old weights (the plain trace
    # and the partitions read the module's table at every call and were right).
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3))
    net.eval()
    compiled = tracebridge.compile(net, (torch.rand(4, 6),), backend=backend)
    x = torch.rand(5, 6)
    compiled(x)
    net[0].weight = torch.nn.Parameter(torch.randn(12, 6))
    net[2].register_buffer("unused", torch.zeros(1))  # not state of the trace: ignored
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
        net[0].weight = torch.nn.Parameter(torch.randn(12, 6))
        torch.testing.assert_close(compiled(x), net(x))


def test_functional_call_on_a_compiled_module_uses_the_tensors_given():
    """prober23a F9: a plain tensor swapped in for a parameter (functional_call) made the
    rebinding register a buffer beside the parameter, an OpError blaming the inputs."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    net.eval()
    x = torch.rand(3, 4)
    compiled = tracebridge.compile(net, (x,), backend="whole_plain")
    given = {"0.weight": torch.full((4, 4), 0.3)}
    with torch.no_grad():
        got = torch.func.functional_call(compiled, dict(given), (x,))
        torch.testing.assert_close(got, torch.func.functional_call(net, dict(given), (x,)))
        torch.testing.assert_close(compiled(x), net(x))  # its own weights again after


def test_inductor_calls_with_autograd_run_the_plain_program_with_eager_gradients():
    """prober24a F8: grad mode on with parameters that require grad (a model called without
    torch.no_grad()), or through torch.func (functional_call + grad), gave outputs detached
    from the compiled graph (run under no_grad): gradients silently missing or zero. An
    input that requires grad was refused; it now gets its gradient the same way."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    x = torch.randn(3, 4)
    compiled = tracebridge.compile(copy.deepcopy(net), (x,))
    with torch.no_grad(), warnings.catch_warnings():  # the compiled graph: no warning
        warnings.simplefilter("error")
        torch.testing.assert_close(compiled(x), net(x))
    with pytest.warns(CompiledCodeWarning, match=r"plain traced program.*no_grad"):
        out = compiled(x)
    assert out.requires_grad
    out.sum().backward()
    net(x).sum().backward()
    for (name, p), q in zip(compiled.named_parameters(), net.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    params = {k: v.detach().requires_grad_() for k, v in net.named_parameters()}
    want = torch.func.grad(lambda p: torch.func.functional_call(net, p, (x,)).sum())(params)
    got = torch.func.grad(lambda p: torch.func.functional_call(compiled, p, (x,)).sum())(params)
    for name in want:
        assert want[name].abs().sum() > 0
        torch.testing.assert_close(got[name], want[name], msg=name)
    xg = x.clone().requires_grad_()
    net.requires_grad_(False)  # an input alone requiring grad
    compiled.requires_grad_(False)
    (g,) = torch.autograd.grad(compiled(xg).sum(), xg)
    (e,) = torch.autograd.grad(net(xg).sum(), xg)
    torch.testing.assert_close(g, e)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))  # the compiled graph again


class _GroupedExperts(nn.Module):
    """An MoE's experts as transformers runs them: ``torch._grouped_mm`` over tokens
    sorted by expert (float32 on the CPU: the eager kernel takes it, the fake one not)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(2, 8, 4))

    def forward(self, x, expert):
        offs = torch.cumsum(torch.bincount(expert, minlength=2), 0).to(torch.int32)
        return torch._grouped_mm(x.relu(), self.w, offs=offs).sigmoid() * 2


def _grouped_inputs():
    return torch.randn(6, 8), torch.tensor([0, 0, 1, 1, 1, 1])


def test_an_op_whose_fake_kernel_refuses_runs_eagerly_in_the_compiled_graph():
    """prober24a F4: mixtral / qwen2_moe failed to compile (grouped_mm's meta kernel
    demands bfloat16) with an OpError blaming the inputs; the op is left to eager PyTorch."""
    net = _GroupedExperts().eval()
    x, expert = _grouped_inputs()
    compiled = tracebridge.compile(net, (x, expert))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, expert), net(x, expert))
        x2, e2 = torch.randn(9, 8), torch.tensor([0, 1, 1, 0, 0, 1, 1, 1, 0]).sort().values
        torch.testing.assert_close(compiled(x2, e2), net(x2, e2))


def test_a_fake_kernel_refusal_names_the_op_its_line_and_the_kernels_words(monkeypatch):
    monkeypatch.setattr(opsets, "FAKE_KERNEL_REFUSES", {})  # as before: compiled in
    net = _GroupedExperts().eval()
    with pytest.raises(BackendError) as info:
        tracebridge.compile(net, _grouped_inputs())
    message = str(info.value)
    assert "fake (meta) kernel of _grouped_mm at " in message
    assert "test_compile.py:" in message and "BF16" in message
    assert "not the inputs'" in message and "do not suit" not in message
