"""Process-wide settings of torch that traced code reads are read again on every call and
guarded (op-set 9, ``prim.setting``): ``torch.get_num_threads()``, the float32 matmul
precision, deterministic algorithms, ``torch.cuda.is_available()``,
``torch.distributed.is_initialized()``, the default dtype, torch.backends' cudnn and
mkldnn flags and the attention backends' switches. Each was a constant of the trace before: a call
under another setting took the traced branch, silently."""

import contextlib
import json
import shutil

import pytest
import torch

import tracebridge
from tracebridge.errors import ArtifactError, GuardError
from tracebridge.ir import ops

from .graph_helpers import rewrite_nodes
from .r_reader import ROOT, run_r

X = torch.ones(3)


@contextlib.contextmanager
def _setting(setter, value, getter):
    before = getter()
    setter(value)
    try:
        yield
    finally:
        setter(before)


def _threads(n):
    return _setting(torch.set_num_threads, n, torch.get_num_threads)


def _precision(p):
    return _setting(torch.set_float32_matmul_precision, p, torch.get_float32_matmul_precision)


def _deterministic(on):
    return _setting(
        torch.use_deterministic_algorithms, on, torch.are_deterministic_algorithms_enabled
    )


def scaled_by_threads(x):
    return x * torch.get_num_threads()


def by_precision(x):
    return x * 2 if torch.get_float32_matmul_precision() == "highest" else x - 1


def by_determinism(x):
    return x.cumsum(0) if torch.are_deterministic_algorithms_enabled() else x + 1


def by_anomaly(x):
    return x * 2 if torch.is_anomaly_enabled() else x


def by_nan_check(x):
    return x.nan_to_num() if torch.is_anomaly_check_nan_enabled() else x - 1


@contextlib.contextmanager
def _anomaly(on, check_nan=True):
    with torch.autograd.set_detect_anomaly(on, check_nan=check_nan):
        yield


def by_default_dtype(x):
    return torch.zeros(3, dtype=torch.get_default_dtype()) + x.to(torch.get_default_dtype())


def _default_dtype(dtype):
    return _setting(torch.set_default_dtype, dtype, torch.get_default_dtype)


def by_cudnn(x):
    return x + 1 if torch.backends.cudnn.enabled else x - 1


def by_mkldnn(x):
    return x * 5 if torch.backends.mkldnn.enabled else x


def _flag(module, on):
    return _setting(lambda v: setattr(module, "enabled", v), on, lambda: module.enabled)


def by_cudnn_determinism(x):
    return x * 3 if torch.backends.cudnn.deterministic else x


def by_tf32_matmul(x):
    return x * 2 if torch.backends.cuda.matmul.allow_tf32 else x


def _flag_named(module, name, on):
    return _setting(lambda v: setattr(module, name, v), on, lambda: getattr(module, name))


def by_math_attention(x):
    return x * 7 if torch.backends.cuda.math_sdp_enabled() else x


def by_default_device(x):
    return x * 2 if torch.get_default_device().type == "meta" else x


@contextlib.contextmanager
def _default_device(device):
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


def by_fastpath(x):
    return x * 4 if torch.backends.mha.get_fastpath_enabled() else x


def _fastpath(on):
    return _setting(
        torch.backends.mha.set_fastpath_enabled, on, torch.backends.mha.get_fastpath_enabled
    )


def by_opt_einsum(x):
    return x * 6 if torch.backends.opt_einsum.enabled else x


def by_einsum_strategy(x):
    return x * 8 if torch.backends.opt_einsum.strategy == "greedy" else x


def by_warn_always(x):
    return x * 9 if torch.is_warn_always_enabled() else x


def _warn_always(on):
    return _setting(torch.set_warn_always, on, torch.is_warn_always_enabled)


def by_cuda(x):
    return x.to("cuda") if torch.cuda.is_available() else x * 3


def _both(fn, tmp_path):
    traced = tracebridge.trace(fn, X)
    traced.save(tmp_path / "f.tb")
    return traced, tracebridge.load(tmp_path / "f.tb")


@pytest.mark.parametrize(
    ("fn", "traced_under", "called_under", "message"),
    [
        (scaled_by_threads, lambda: _threads(2), lambda: _threads(1), r"get_num_threads\(\)"),
        (
            by_precision,
            lambda: _precision("highest"),
            lambda: _precision("medium"),
            r"'highest' as position 0",
        ),
        (
            by_determinism,
            lambda: _deterministic(False),
            lambda: _deterministic(True),
            r"are_deterministic_algorithms_enabled\(\)",
        ),
        # torch.autograd.detect_anomaly() switches a debugging path (prober17)
        (by_anomaly, lambda: _anomaly(False), lambda: _anomaly(True), r"is_anomaly_enabled"),
        (
            by_nan_check,
            lambda: _anomaly(True, check_nan=False),
            lambda: _anomaly(True, check_nan=True),
            r"is_anomaly_check_nan_enabled",
        ),
        # prober19 F6: a dtype the code passes, and torch.backends' flags it branches on
        (
            by_default_dtype,
            lambda: _default_dtype(torch.float32),
            lambda: _default_dtype(torch.float64),
            r"get_default_dtype\(\) \(default_dtype\), torch.float32 as position 0",
        ),
        (
            by_cudnn,
            lambda: _flag(torch.backends.cudnn, True),
            lambda: _flag(torch.backends.cudnn, False),
            r"torch.backends.cudnn.enabled \(cudnn_enabled\)",
        ),
        (
            by_mkldnn,
            lambda: _flag(torch.backends.mkldnn, True),
            lambda: _flag(torch.backends.mkldnn, False),
            r"torch.backends.mkldnn.enabled \(mkldnn_enabled\)",
        ),
        # prober19b F3: cuDNN's and cuBLAS's other flags
        (
            by_cudnn_determinism,
            lambda: _flag_named(torch.backends.cudnn, "deterministic", False),
            lambda: _flag_named(torch.backends.cudnn, "deterministic", True),
            r"torch.backends.cudnn.deterministic \(cudnn_deterministic\)",
        ),
        (
            by_tf32_matmul,
            lambda: _flag_named(torch.backends.cuda.matmul, "allow_tf32", False),
            lambda: _flag_named(torch.backends.cuda.matmul, "allow_tf32", True),
            r"torch.backends.cuda.matmul.allow_tf32 \(cublas_allow_tf32\)",
        ),
        (
            by_math_attention,
            lambda: _setting(
                torch.backends.cuda.enable_math_sdp, True, torch.backends.cuda.math_sdp_enabled
            ),
            lambda: _setting(
                torch.backends.cuda.enable_math_sdp, False, torch.backends.cuda.math_sdp_enabled
            ),
            r"math_sdp_enabled",
        ),
        # prober19b F3 (rest): the default device, MHA's fast path, opt_einsum, warn_always
        (
            by_default_device,
            contextlib.nullcontext,
            lambda: _default_device("meta"),
            r"torch.get_default_device\(\).type \(default_device_type\), 'cpu' as position 0",
        ),
        (
            by_fastpath,
            lambda: _fastpath(True),
            lambda: _fastpath(False),
            r"torch.backends.mha.get_fastpath_enabled\(\) \(mha_fastpath_enabled\)",
        ),
        (
            by_opt_einsum,
            lambda: _flag_named(torch.backends.opt_einsum, "enabled", False),
            lambda: _flag_named(torch.backends.opt_einsum, "enabled", True),
            r"that torch.backends.opt_einsum.enabled \(opt_einsum_enabled\)",
        ),
        (
            by_einsum_strategy,
            lambda: _flag_named(torch.backends.opt_einsum, "strategy", "auto"),
            lambda: _flag_named(torch.backends.opt_einsum, "strategy", "greedy"),
            r"torch.backends.opt_einsum.strategy \(opt_einsum_strategy\), 'auto' as position 1",
        ),
        (
            by_warn_always,
            lambda: _warn_always(False),
            lambda: _warn_always(True),
            r"torch.is_warn_always_enabled\(\) \(warn_always\)",
        ),
    ],
)
def test_a_setting_read_is_guarded_on_every_call(tmp_path, fn, traced_under, called_under, message):
    with traced_under():
        traced, loaded = _both(fn, tmp_path)
        for obj in (traced, loaded):
            assert torch.equal(obj(X), fn(X))  # the same setting: runs
    with called_under():
        for obj in (traced, loaded):
            with pytest.raises(GuardError, match=message) as info:
                obj(X)
            assert info.value.location.endswith(f"test_settings_reads.py:{_line(fn)}")


def _line(fn) -> int:
    return fn.__code__.co_firstlineno + 1


def test_the_graph_reads_the_setting_once_per_answer():
    def twice(x):
        return x * torch.get_num_threads() + torch.get_num_threads()

    with _threads(2):
        traced = tracebridge.trace(twice, X)
        assert traced.graph.count("prim.setting('num_threads')") == 1
        assert torch.equal(traced(X), twice(X))


@pytest.mark.skipif(torch.cuda.is_available(), reason="traces the CPU branch")
def test_cuda_availability_is_guarded(tmp_path):
    traced, loaded = _both(by_cuda, tmp_path)
    assert "prim.setting('cuda_available')" in traced.graph
    assert torch.equal(loaded(X), X * 3)


def test_torch_reading_a_setting_for_itself_records_nothing():
    # torch's own code (here: set_num_threads's callers, F.scaled_dot_product_attention)
    # reads settings for itself; only the user's reads are decisions of the traced code.
    def attention(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    traced = tracebridge.trace(attention, torch.rand(1, 2, 4, 8))
    assert "prim.setting" not in traced.graph


@pytest.mark.parametrize("name", ["bogus", "num_threads ", 3])
def test_a_file_naming_another_setting_is_refused_at_load(tmp_path, name):
    with _threads(2):
        traced = tracebridge.trace(scaled_by_threads, X)
    traced.save(tmp_path / "f.tb")
    rewrite_nodes(tmp_path / "f.tb", "prim.setting", lambda node: node.update(args=[name]))
    with pytest.raises(ArtifactError, match="prim.setting|argument"):
        tracebridge.load(tmp_path / "f.tb")


def test_a_backends_flag_is_put_back_as_torch_had_it():
    """The flags are read through the class of torch.backends' modules: after a trace the
    class holds torch's own property again, and setting a flag while tracing sets it."""
    prop = vars(type(torch.backends.cudnn))["enabled"]

    def switch(x):
        torch.backends.cudnn.enabled = False
        torch.backends.cudnn.enabled = True
        return x + 1

    traced = tracebridge.trace(by_cudnn, X)
    assert torch.equal(traced(X), by_cudnn(X))
    tracebridge.trace(switch, X)
    assert vars(type(torch.backends.cudnn))["enabled"] is prop
    assert torch.backends.cudnn.enabled is True


def test_a_default_device_index_is_guarded_too():
    traced = tracebridge.trace(by_default_device, X)
    graph = traced.graph
    assert "prim.setting('default_device_type')" in graph
    assert "prim.setting('default_device_index')" in graph
    index_message = r"get_default_device\(\).index \(-1: none\)"
    with _default_device("cpu:0"), pytest.raises(GuardError, match=index_message):
        traced(X)  # the same type, another index than none
    assert torch.equal(traced(X), X)


def test_opt_einsum_flags_are_put_back_as_torch_had_them():
    """opt_einsum keeps its flags as plain attributes: a recording puts a descriptor on
    its module's class, which goes after the trace; a write while tracing lands where
    torch's own does, and torch.einsum reading the flag for itself is no decision."""
    module = torch.backends.opt_einsum
    before = dict(vars(module))

    def switch(x):
        torch.backends.opt_einsum.enabled = True
        return torch.einsum("i,i->i", x, x) + int(torch.backends.opt_einsum.enabled)

    traced = tracebridge.trace(lambda x: torch.einsum("i,j,k->ijk", x, x, x), X)
    assert "prim.setting" not in traced.graph
    try:
        traced = tracebridge.trace(switch, X)
        assert "enabled" not in vars(type(module))
        assert vars(module)["enabled"] is True
        assert torch.equal(traced(X), X * X + 1)
        module.enabled = False
        with pytest.raises(GuardError, match="opt_einsum_enabled"):
            traced(X)
    finally:
        vars(module).clear()
        vars(module).update(before)


def test_every_setting_has_a_reader_and_a_kind():
    from tracebridge.runtime.support import setting

    for name, kind in ops.SETTINGS.items():
        value = setting(name)
        assert type(value) is (int if kind == "int" else bool), name
    # names are added without a new op-set version (a reader refuses one it does not know)
    assert ops.SINCE["prim.setting"] == 9 <= ops.OPSET_VERSION


def by_the_newer_settings(x):
    device = torch.get_default_device()
    fast = torch.backends.mha.get_fastpath_enabled() and torch.is_warn_always_enabled()
    einsum = torch.backends.opt_einsum.enabled or torch.backends.opt_einsum.strategy == "auto"
    return x * (2 if device.type == "cpu" else 3) + (1 if fast or einsum else 0)


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="needs R")
def test_r_reads_a_file_with_the_newer_settings(tmp_path):
    """R's reader (sourced from R/, as R's tests do) takes a file that reads the settings
    added in session 20 and prints their guards, as Python's loader does."""
    traced = tracebridge.trace(by_the_newer_settings, X)
    traced.save(tmp_path / "f.tb")
    names = {"default_device_type", "default_device_index", "mha_fastpath_enabled"}
    names |= {"warn_always", "opt_einsum_enabled", "opt_einsum_strategy"}
    for name in names:
        assert f"prim.setting('{name}')" in traced.graph
    assert torch.equal(tracebridge.load(tmp_path / "f.tb")(X), by_the_newer_settings(X))
    printed = 'cat(capture.output(print(info)), sep = "\\n")'
    shown = run_r(f"info <- jit_inspect(args[[2]], quiet = TRUE); {printed}", tmp_path / "f.tb")
    for name in names:
        assert f"prim.setting('{name}')" in shown


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="needs R")
def test_r_refuses_a_file_naming_another_setting(tmp_path):
    """R's reader knows the names Python's does (``settings`` of ops.json, generated from
    ops.SETTINGS) and refuses another, naming the method and node, as the SPEC asks of
    every reader; the known ones it takes (test above)."""
    tables = json.loads((ROOT / "shared_ir" / "ops.json").read_text(encoding="utf-8"))
    assert tables["settings"] == ops.SETTINGS
    with _threads(2):
        traced = tracebridge.trace(scaled_by_threads, X)
    names = {"bogus": "'bogus'", "num_threads ": "'num_threads '", "3": "a non-name"}
    refused = 'tryCatch({jit_inspect(f, quiet = TRUE); "taken"}, error = conditionMessage)'
    for index, (name, shown) in enumerate(names.items()):
        path = tmp_path / f"f{index}.tb"
        traced.save(path)
        value = 3 if name == "3" else name
        rewrite_nodes(path, "prim.setting", lambda node, v=value: node.update(args=[v]))
        said = run_r(f"f <- args[[2]]; cat({refused})", path)
        assert "method 'forward', node" in said and "(prim.setting)" in said, said
        assert f"prim.setting reads {shown}, which is not a setting" in said, said
