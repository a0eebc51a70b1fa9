"""AOTInductor packages in the artifact (backends/aot.py): compiled once, saved, loaded in a
fresh process without recompiling when the user trusts compiled code, and never opened
when they do not; a package that does not suit the process falls back to the runtime and
says why; the same package runs from C++ (examples/cpp/).

Note: cost. One AOTInductor compile of a tiny CNN takes about 45 s on two busy CPU cores,
so every test here shares one package, compiled once per test session even under xdist
(a file lock in the session's shared temporary folder); the C++ example's build takes
about 50 s more, where g++ and the torch headers are present.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from torch import nn

import tracebridge
from tracebridge.artifact import compiled as member
from tracebridge.backends import aot

from .conftest import run_fresh_python
from .r_reader import run_r

ROOT = Path(__file__).resolve().parents[2]
# traced at batch 1: the package must still take any batch (compile_package's examples
# make a symbolic size of 1 into 2, which torch.export would otherwise fix)
SHAPE = (1, 3, 16, 16)


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ).eval()


@pytest.fixture(scope="session")
def compiled_file(tmp_path_factory) -> Path:
    """The small CNN's artifact with its AOTInductor package (compiled once per session)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this session's folder, shared by its workers
    path = shared / "small_cnn_aot.tb"
    with FileLock(str(shared / "small_cnn_aot.lock")):
        if not path.exists():
            traced = tracebridge.trace(small_cnn(), torch.rand(*SHAPE))
            tracebridge.save_compiled(traced, path)
    return path


def _program_json(path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json"))


def test_package_is_an_optional_member_tied_to_its_program(compiled_file):
    doc = _program_json(compiled_file)
    entry = doc["compiled"]
    assert entry["member"] == "compiled.pt2" and entry["format"] == "aotinductor"
    assert entry["device"] == "cpu" and entry["torch"] == torch.__version__
    assert entry["digest"] == member.program_digest(doc)
    with zipfile.ZipFile(compiled_file) as archive:
        assert archive.getinfo("compiled.pt2").file_size == entry["size"]


def test_trusted_load_in_a_fresh_process_runs_the_package(compiled_file, tmp_path):
    """Load, first call (timed, reported, not asserted), and two batch sizes."""
    out = tmp_path / "out.pt"
    done = run_fresh_python(
        f"""
        import sys, time
        start = time.perf_counter()
        import torch, tracebridge
        imported = time.perf_counter()
        m = tracebridge.load_compiled({str(compiled_file)!r}, trust_compiled_code=True)
        torch.set_grad_enabled(False)  # the package serves calls without autograd
        x1 = torch.linspace(-1, 1, 1 * 3 * 16 * 16).reshape(1, 3, 16, 16)
        y1 = m(x1)
        first = time.perf_counter()
        x7 = torch.linspace(-1, 1, 7 * 3 * 16 * 16).reshape(7, 3, 16, 16)
        paid = sorted(n for n in ("torch._inductor", "torch._dynamo") if n in sys.modules)
        torch.save(
            {{"form": m.compiled_form, "y1": y1, "y7": m(x7), "imported": paid}}, {str(out)!r}
        )
        print(f"import {{imported - start:.3f}} s, load + first call {{first - imported:.3f}} s")
        """,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    print(done.stdout)  # the measured load + first call time (pytest -s shows it)
    got = torch.load(out)
    assert got["form"] == "aot"
    assert got["imported"] == []  # neither inductor nor Dynamo: the C++ loader only
    net = small_cnn()
    for batch, key in ((1, "y1"), (7, "y7")):
        x = torch.linspace(-1, 1, batch * 3 * 16 * 16).reshape(batch, 3, 16, 16)
        torch.testing.assert_close(got[key], net(x), rtol=1e-5, atol=1e-5)


def test_trusted_load_pays_only_for_the_package(compiled_file, monkeypatch):
    """One check of the document, no GraphModule, and the plain object (weights, runtime)
    loaded only when something asks for it: the call runs the package alone."""
    from tracebridge import artifact
    from tracebridge.artifact import archive

    opened = []
    real_open = archive.open_artifact

    def counted(path):
        opened.append(path)
        return real_open(path)

    for where in (artifact, archive):  # read_member imports it from archive
        monkeypatch.setattr(where, "open_artifact", counted)
    loads = []
    real_load = tracebridge.api.load
    monkeypatch.setattr(
        tracebridge.api, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k)
    )
    monkeypatch.setattr(
        tracebridge.export.fx, "to_graph_module", lambda *a, **k: pytest.fail("built a GraphModule")
    )
    m = tracebridge.load_compiled(compiled_file, trust_compiled_code=True)
    x = torch.rand(3, 3, 16, 16)
    with torch.no_grad():  # grad mode would run the plain program (test_aot_context.py)
        torch.testing.assert_close(m(x), small_cnn()(x))
    assert m.compiled_form == "aot" and len(opened) == 1 and loads == []
    assert m.program.kind == "module" and len(loads) == 1  # the plain object, on first use
    assert m.fallback is m.fallback and len(loads) == 1  # loaded once


@pytest.mark.parametrize("accepts", [4, 3, 1])
def test_the_cpp_loader_of_other_torch_versions(monkeypatch, accepts):
    """The C++ loader's constructor took the model name alone (torch 2.6), then the
    threading arguments, then a device index (2.8 on, 2.11 included): each form loads
    the package without importing inductor."""
    made = []

    class Loader:
        def __init__(self, path, *arguments):
            if len(arguments) != accepts:
                raise TypeError("incompatible constructor arguments")
            made.append(arguments)

        def run(self, flat):
            return [flat[0] * 2]

    monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", Loader)
    run = aot._package_runner("unused.pt2")
    assert len(made) == 1 and made[0][0] == "model"
    torch.testing.assert_close(run([torch.ones(2)])[0], torch.full((2,), 2.0))


def test_a_package_of_a_method_the_program_lacks_is_refused():
    doc = {"methods": {"forward": {}}, "dispatch": {}, "training": False}
    with pytest.raises(tracebridge.ArtifactError, match="f.tb: the compiled package is of method"):
        aot._method_graph(doc, "encode", "f.tb")
    routed = {"methods": {}, "dispatch": {"forward": {"train": "t", "eval": "e"}}}
    with pytest.raises(tracebridge.ArtifactError, match="method 'e', which the program"):
        aot._method_graph(routed, "forward", "f.tb")  # eval mode: the eval graph


def test_untrusted_load_never_opens_the_package(compiled_file, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the compiled member was read without trust")

    monkeypatch.setattr(member, "read_member", refuse)
    with pytest.warns(aot.CompiledCodeWarning, match="trust_compiled_code=True"):
        m = tracebridge.load_compiled(compiled_file)
    assert m.compiled_form == "runtime" and "native code" in m.compiled_reason
    x = torch.rand(5, 3, 16, 16)
    torch.testing.assert_close(m(x), small_cnn()(x))
    plain = tracebridge.load(compiled_file)  # load itself ignores the member
    torch.testing.assert_close(plain(x), small_cnn()(x))


@pytest.mark.parametrize(
    "patch, reason",
    [
        (lambda mp: mp.setattr(torch, "__version__", "0.0.1"), "compiled with torch"),
        (lambda mp: mp.setattr(member, "this_platform", lambda: "plan9-mips"), "compiled for"),
        (lambda mp: mp.setattr(member, "program_digest", lambda doc: "0" * 64), "digest"),
    ],
    ids=["torch", "platform", "digest"],
)
def test_a_package_that_does_not_suit_falls_back_and_says_why(
    compiled_file, monkeypatch, patch, reason
):
    patch(monkeypatch)
    with pytest.warns(aot.CompiledCodeWarning, match=reason):
        m = tracebridge.load_compiled(compiled_file, trust_compiled_code=True)
    assert m.compiled_form == "runtime" and reason in m.compiled_reason
    x = torch.rand(3, 3, 16, 16)
    torch.testing.assert_close(m(x), small_cnn()(x))


def test_a_package_for_another_device_falls_back(compiled_file):
    with pytest.warns(aot.CompiledCodeWarning, match="compiled for cpu, and the program is to run"):
        m = tracebridge.load_compiled(compiled_file, trust_compiled_code=True, map_location="meta")
    assert m.compiled_form == "runtime"


def test_a_corrupt_package_is_refused(compiled_file, tmp_path):
    broken = tmp_path / "broken.tb"
    data = bytearray(compiled_file.read_bytes())
    with zipfile.ZipFile(compiled_file) as archive:
        info = archive.getinfo("compiled.pt2")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + info.file_size // 2] ^= 0xFF
    broken.write_bytes(bytes(data))
    with pytest.raises(tracebridge.ArtifactError, match="CRC|checksum"):
        tracebridge.load_compiled(broken, trust_compiled_code=True)


def test_a_file_without_a_package_loads_on_the_runtime(tmp_path):
    path = tmp_path / "plain.tb"
    tracebridge.trace(small_cnn(), torch.rand(*SHAPE)).save(path)
    m = tracebridge.load_compiled(path, trust_compiled_code=True)
    assert m.compiled_form == "runtime" and "no compiled package" in m.compiled_reason
    with pytest.raises(tracebridge.TraceError, match="holds no compiled package"):
        aot.extract_package(path, tmp_path / "x.pt2")


def test_a_file_of_tracebridge_compile_is_recompiled(tmp_path):
    path = tmp_path / "partitioned.tb"
    tracebridge.compile(lambda x: (x * 2).relu(), torch.rand(3), backend="reference").save(path)
    m = tracebridge.load_compiled(path)
    assert m.compiled_form == "recompiled" and "recompiles" in m.compiled_reason
    torch.testing.assert_close(m(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 4.0]))


def test_an_untrusted_package_of_a_compiled_model_recompiles(compiled_file, tmp_path):
    """tracebridge.compile's object saved with a package: without trust, its backend
    recompiles the partitions (the package, here another model's, is never opened)."""
    package = aot.extract_package(compiled_file, tmp_path / "other.pt2")
    compiled = tracebridge.compile(lambda x: (x * 2).relu(), torch.rand(3), backend="reference")
    path = tmp_path / "both.tb"
    tracebridge.save_compiled(compiled, path, package=package)
    with pytest.warns(aot.CompiledCodeWarning, match="recompiles"):
        m = tracebridge.load_compiled(path)
    assert m.compiled_form == "recompiled" and "native code" in m.compiled_reason
    torch.testing.assert_close(m(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 4.0]))


def test_a_compiled_object_saves_with_its_package(compiled_file, tmp_path):
    """tracebridge.compile(...).save(path, compiled_package=...) embeds a package (here
    the session's, already compiled): trusted, it runs without recompiling; untrusted,
    the backend recompiles as for any compiled file."""
    package = aot.extract_package(compiled_file, tmp_path / "cnn.pt2")
    compiled = tracebridge.compile(small_cnn(), torch.rand(*SHAPE), backend="reference")
    path = tmp_path / "compiled.tb"
    compiled.save(path, compiled_package=package)
    doc = _program_json(path)
    assert doc["compiled"]["digest"] == member.program_digest(doc) and "backend" in doc
    x = torch.rand(5, 3, 16, 16)
    m = tracebridge.load_compiled(path, trust_compiled_code=True)
    assert m.compiled_form == "aot"
    with torch.no_grad():
        torch.testing.assert_close(m(x), small_cnn()(x))
    assert m._fallback is None  # the package ran
    with pytest.warns(aot.CompiledCodeWarning, match="recompiles"):
        assert tracebridge.load_compiled(path).compiled_form == "recompiled"
    compiled.save(tmp_path / "plain.tb")  # the default: no package
    assert "compiled" not in _program_json(tmp_path / "plain.tb")


def test_a_compiled_object_save_refuses_package_arguments_it_cannot_use(tmp_path):
    compiled = tracebridge.compile(lambda x: x * 2, torch.rand(3), backend="reference")
    with pytest.raises(tracebridge.TraceError, match="pass compiled_package=True with it"):
        compiled.save(tmp_path / "x.tb", example_inputs=(torch.rand(3),))
    with pytest.raises(tracebridge.TraceError, match="writes a file name, not a BytesIO"):
        compiled.save(io.BytesIO(), compiled_package=True)


def test_inspect_shows_the_package_without_loading_it(compiled_file, monkeypatch, capsys):
    """tracebridge inspect (text and --json) names the package's device, torch, platform
    and whether its digest matches, from program.json: native code is never touched."""
    from tracebridge.frontends.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("inspect touched the compiled package")

    monkeypatch.setattr(member, "read_member", refuse)
    monkeypatch.setattr(aot, "_package_runner", refuse)
    assert main(["inspect", str(compiled_file), "--no-graph"]) == 0
    text = capsys.readouterr().out
    assert "compiled:   aotinductor package compiled.pt2" in text
    assert f"for:       cpu, torch {torch.__version__}, {member.this_platform()}" in text
    assert "digest:    matches the program" in text and "runs here: yes" in text
    assert main(["inspect", str(compiled_file), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["compiled"]
    assert shown["device"] == "cpu" and shown["torch"] == torch.__version__
    assert shown["digest_matches"] is True and shown["method"] == "forward"
    monkeypatch.setattr(member, "program_digest", lambda doc: "0" * 64)
    assert main(["inspect", str(compiled_file), "--no-graph"]) == 0
    text = capsys.readouterr().out
    assert "digest:    does NOT match the program" in text and "runs here: the program" in text


def test_inspect_of_a_file_without_a_package(tmp_path, capsys):
    from tracebridge.frontends.cli import main

    path = tmp_path / "plain.tb"
    tracebridge.trace(lambda x: x + 1, torch.rand(2)).save(path)
    assert main(["inspect", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled"] is None


def test_a_guard_on_tensor_data_cannot_be_packaged(tmp_path):
    def gated(x):
        return x * 2 if x.sum() > 0 else -x

    traced = tracebridge.trace(gated, torch.ones(3))
    with pytest.raises(tracebridge.TraceError, match="no exported form"):
        aot.compile_package(traced, tmp_path / "gated.pt2")


def test_save_compiled_refuses_what_is_not_traced(tmp_path):
    with pytest.raises(tracebridge.TraceError, match="trace it first"):
        tracebridge.save_compiled(small_cnn(), tmp_path / "x.tb")


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_accepts_a_file_with_a_package(compiled_file):
    out = run_r("doc <- read_program(args[[2]]); cat(doc$compiled$member)", compiled_file)
    assert out.strip() == "compiled.pt2"


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_inspect_shows_the_package_without_opening_it(compiled_file):
    """R's jit_inspect shows the compiled entry as Python's inspect does, from program.json
    alone: R never reads the native code."""
    out = run_r(
        "info <- jit_inspect(args[[2]], quiet = TRUE)\n"
        "cat(info$compiled$member, info$compiled$device, info$compiled$method, sep = '\\n')\n"
        "cat(info$compiled$size > 0, '\\n')\n"
        "print(info, graphs = FALSE)",
        compiled_file,
    )
    lines = out.splitlines()
    assert lines[:4] == ["compiled.pt2", "cpu", "forward", "TRUE "]
    shown = next(line for line in lines if line.startswith("compiled:"))
    assert "package of forward for cpu" in shown and "R never does" in shown


# --- C++ ------------------------------------------------------------------------------------


def _cxx_build_command(source: Path, binary: Path) -> list[str] | None:
    """The plain g++ command of examples/cpp/README.md, or None without g++ or headers."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    base = Path(torch.__file__).parent
    if cxx is None or not (base / "include" / "torch" / "csrc" / "inductor").is_dir():
        return None
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        cxx,
        "-std=c++20",
        "-O1",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{base / 'include'}",
        f"-I{base / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        str(source),
        "-o",
        str(binary),
        f"-L{base / 'lib'}",
        "-Wl,--no-as-needed",  # torch 2.11's loader opens libtorch.so by name at run time
        "-ltorch",
        "-Wl,--as-needed",
        "-ltorch_cpu",
        "-lc10",
        f"-Wl,-rpath,{base / 'lib'}",
    ]


def _parse_outputs(text: str) -> list[torch.Tensor]:
    lines = text.strip().splitlines()
    out = []
    for head, values in zip(lines[::2], lines[1::2]):
        shape = [int(d) for d in head.split("shape")[1].split()]
        out.append(
            torch.tensor([float(v) for v in values.split()], dtype=torch.float64).reshape(shape)
        )
    return out


def test_cpp_example_runs_the_package(compiled_file, tmp_path):
    command = _cxx_build_command(ROOT / "examples" / "cpp" / "run_package.cpp", tmp_path / "run")
    if command is None:
        pytest.skip("no C++ compiler, or the torch wheel has no C++ headers")
    build = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    package = aot.extract_package(compiled_file, tmp_path / "small_cnn.pt2")
    net = small_cnn()
    for shape in ((1, 3, 16, 16), (6, 3, 16, 16)):
        run = subprocess.run(
            [str(tmp_path / "run"), package, *map(str, shape)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        x = torch.linspace(-1, 1, torch.Size(shape).numel()).reshape(shape)
        (got,) = _parse_outputs(run.stdout)
        torch.testing.assert_close(got, net(x).double(), rtol=1e-5, atol=1e-6)
    # From C++ nothing checks a call but the package itself, and only when asked: with
    # AOTI_RUNTIME_CHECK_INPUTS=1 an input of other channels is refused (without it, its
    # memory would be read as 3 channels: docs/aot.md).
    run = subprocess.run(
        [str(tmp_path / "run"), package, "2", "5", "16", "16"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AOTI_RUNTIME_CHECK_INPUTS": "1"},
    )
    assert run.returncode != 0 and "input_handles[0]" in run.stderr + run.stdout


def test_a_call_the_package_was_not_compiled_for_is_refused_not_garbage(compiled_file):
    # Found by benchmarks/deploy_trial.py: a package reads its inputs' raw memory with the
    # dtype, rank and strides it was compiled for and checked none of them: a float64 or a
    # transposed input gave garbage, silently.
    m = tracebridge.load_compiled(compiled_file, trust_compiled_code=True)
    assert m.compiled_form == "aot"
    net = small_cnn()
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():  # calls the package serves (test_aot_context.py)
        with pytest.raises(tracebridge.TraceError, match=r"torch.float64, but the AOTInductor"):
            m(x.double())
        with pytest.raises(tracebridge.TraceError, match=r"has 3 dimensions, but the trace has"):
            m(x[0])
        with pytest.raises(tracebridge.TraceError):
            m(torch.rand(2, 5, 16, 16))  # other channels: the weights fix them
    channels_last = x.to(memory_format=torch.channels_last)
    assert not channels_last.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(m(channels_last), net(x), rtol=1e-5, atol=1e-5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # batch 1 may run on the plain program
            torch.testing.assert_close(m(x[:1]), net(x[:1]), rtol=1e-5, atol=1e-5)


def test_input_check_holds_one_size_per_symbol():
    from tracebridge.ir import Graph, Value

    graph = Graph(
        inputs=[
            Value(1, dtype="float32", shape=["s0", 4], name="x"),
            Value(2, dtype="float32", shape=["s0"], name="y"),
        ]
    )
    check = aot.InputCheck(graph, "forward")
    x, y = torch.rand(3, 4), torch.rand(3)
    assert check([x, y])[1] is y
    with pytest.raises(tracebridge.TraceError, match=r"'y' has size 5 .* one size s0 .* is 3"):
        check([x, torch.rand(5)])
    with pytest.raises(tracebridge.TraceError, match=r"fixed size 4"):
        check([torch.rand(3, 5), y])


def test_packages_are_exported_with_sizes_0_and_1_made_2():
    # A trace at batch 0 was exported at 0, which torch.export fixes: the package refused
    # every other batch (found by benchmarks/deploy_trial.py's zero_size_trace).
    traced = tracebridge.trace(lambda x: x.sum(0) + 1, torch.rand(0, 4))
    gm = tracebridge.to_graph_module(traced)
    assert tracebridge.export.info(gm).input_shapes[0][0] == "s0"
    assert aot._widened(gm)[0][0] == 2
    traced = tracebridge.trace(lambda x: x * 2, torch.rand(1, 4))
    assert aot._widened(tracebridge.to_graph_module(traced))[0][0] == 2


def test_a_call_the_package_does_not_serve_runs_on_the_plain_program():
    # The size_branch case of benchmarks/deploy_trial.py: without the package's own checks
    # a call below a size guard's range ran the other branch's code; with them the package
    # refuses, and the call goes to the plain program (right, or its GuardError).
    def f(x):
        return x.sum(1) if x.shape[0] > 3 else x.mean(1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(f, torch.rand(5, 3))
    graph = traced.program.methods["forward"]

    def runner(flat):
        if flat[0].shape[0] < 4:
            raise RuntimeError("input_handles[0]: dim value is too small at 0, expected it")
        return [flat[0].sum(1)]

    rule = aot.ServeRule({"state": {}}, "cpu")
    m = aot.AOTCompiled(runner, lambda: traced, graph, "forward", rule)
    x = torch.rand(7, 3)
    torch.testing.assert_close(m(x), x.sum(1))
    small = torch.rand(2, 3)
    with pytest.warns(aot.CompiledCodeWarning, match="does not serve this call"):
        try:
            got = m(small)
        except tracebridge.GuardError:
            got = None  # the plain program refuses it: as clear, never the sum
    assert got is None or torch.allclose(got, small.mean(1))

    def broken(flat):
        raise RuntimeError("something else inside the package")

    with pytest.raises(tracebridge.TraceError, match="refused the call: something else"):
        aot.AOTCompiled(broken, lambda: traced, graph, "forward", rule)(x)


def test_the_packages_own_checks_stay_on_without_leaking_the_variable(compiled_file, monkeypatch):
    """AOTI_RUNTIME_CHECK_INPUTS is read once, at a package's first run: it is set for that
    run only, so the package keeps checking and the user's environment (and the child
    processes it starts, such as a C++ server) is left as it was."""
    monkeypatch.delenv("AOTI_RUNTIME_CHECK_INPUTS", raising=False)
    m = tracebridge.load_compiled(compiled_file, trust_compiled_code=True)
    with torch.no_grad():  # calls the package serves
        m(torch.rand(2, 3, 16, 16))
        assert "AOTI_RUNTIME_CHECK_INPUTS" not in os.environ
        with pytest.raises(tracebridge.TraceError):
            m(torch.rand(2, 5, 16, 16))  # other channels: refused before the package
    assert "AOTI_RUNTIME_CHECK_INPUTS" not in os.environ
