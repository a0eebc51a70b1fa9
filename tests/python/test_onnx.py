"""ONNX export (tracebridge.export_onnx, `tracebridge onnx`): every conformance model is
exported once, with dynamic dimensions from the trace's symbols, and ONNX Runtime's results
match the trace at three or more shapes. Skipped models are listed with the reason, a real
limit of ONNX, and counted.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.export import OnnxExportError
from tracebridge.frontends import cli

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CASES, Case  # noqa: E402

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed")

# case -> why ONNX cannot hold it (checked below to stay a short, real list; export_onnx
# refuses it with a clear error: test_a_method_that_updates_buffers_is_refused_before_writing)
NOT_EXPORTABLE = {
    "cnn_train": "a training-mode graph: BatchNorm on batch statistics updates its buffers "
    "in place, and an ONNX model is an inference graph without state to update",
}


def _trace(case: Case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return case.trace()


def _calls(case: Case) -> dict[str, list[tuple]]:
    calls = dict(case.methods) if case.methods else {"forward": list(case.all_inputs)}
    for method, inputs in calls.items():
        inputs = list(inputs)
        first = inputs[0]
        factor = 2
        while len({tuple(tuple(t.shape) for t in call) for call in inputs}) < 3:
            # another shape: the first input's batch repeated
            inputs.append((torch.cat([first[0]] * factor), *first[1:]))
            factor += 1
        calls[method] = inputs
    return calls


def _run(path: Path, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(x) for x in session.run(None, feeds)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_conformance_model_runs_in_onnx_runtime(name: str, tmp_path: Path) -> None:
    if name in NOT_EXPORTABLE:
        pytest.skip(f"not exportable to ONNX: {NOT_EXPORTABLE[name]}")
    case = CASES[name]()
    traced = _trace(case)
    for method, calls in _calls(case).items():
        # exported from the largest call: a size-1 dimension of the example (or a 3x3
        # image that a 3x3 kernel takes to 1x1) is one torch.export fixes, and the file
        # then fixes it too (test_onnx_sizes.py), refusing the other calls' sizes
        largest = max(calls, key=lambda call: sum(t.numel() for t in call))
        path = tracebridge.export_onnx(
            traced, tmp_path / f"{name}.{method}.onnx", method=method, example_inputs=largest
        )
        gm = tracebridge.to_graph_module(traced, method)
        shapes = set()
        for call in calls:
            flat = tracebridge.export.flatten_inputs(gm, *call)
            shapes.add(tuple(tuple(t.shape) for t in flat))
            with torch.no_grad():
                expected = list(gm(*flat))
            got = _run(path, flat)
            where = f"{name}.{method} on {[tuple(t.shape) for t in flat]}"
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, msg=where)
        assert len(shapes) >= 3


def test_skipped_models_are_few_and_named() -> None:
    assert set(NOT_EXPORTABLE) <= set(CASES)
    assert len(NOT_EXPORTABLE) <= 1, "every conformance model but a training-mode one exports"


def test_dynamic_dimensions_are_named_after_the_trace(tmp_path: Path) -> None:
    def f(x, y):
        return (x @ y).relu(), x.sum(1)

    traced = tracebridge.trace(f, (torch.rand(3, 4), torch.rand(4, 5)))
    path = tracebridge.export_onnx(traced, tmp_path / "f.onnx")
    model = onnx.load(path)

    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    assert [i.name for i in model.graph.input] == ["x", "y"]
    assert [dims(i) for i in model.graph.input] == [["s0", "s1"], ["s1", "s3"]]
    assert [dims(o) for o in model.graph.output] == [["s0", "s3"], ["s0"]]
    x, y = torch.rand(7, 2), torch.rand(2, 9)
    torch.testing.assert_close(_run(path, [x, y]), list(f(x, y)))


def test_export_from_a_file_and_the_command_line(tmp_path: Path, capsys) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.GELU()).eval()
    tracebridge.save(tracebridge.trace(net, torch.rand(5, 6)), tmp_path / "net.tb")
    assert cli.main(["onnx", str(tmp_path / "net.tb"), "-o", str(tmp_path / "out.onnx")]) == 0
    assert "checked with ONNX Runtime" in capsys.readouterr().out
    x = torch.rand(11, 6)
    with torch.no_grad():
        torch.testing.assert_close(_run(tmp_path / "out.onnx", [x])[0], net(x))
    assert cli.main(["onnx", str(tmp_path / "net.tb"), "--method", "encode"]) == 2
    assert "no method" in capsys.readouterr().err


def test_a_guard_on_data_is_a_clear_error(tmp_path: Path) -> None:
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(f, torch.ones(3))
    with pytest.raises(OnnxExportError, match=r"refused method 'forward'.*guard on tensor data"):
        tracebridge.export_onnx(traced, tmp_path / "f.onnx", example_inputs=(torch.ones(3),))


def test_missing_packages_are_a_clear_error(monkeypatch, tmp_path: Path, capsys) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name)
    )
    traced = tracebridge.trace(lambda x: x + 1, torch.rand(2))
    with pytest.raises(OnnxExportError, match=r"onnxscript.*pip install 'tracebridge\[onnx\]'"):
        tracebridge.export_onnx(traced, tmp_path / "f.onnx")
    traced.save(tmp_path / "f.tb")
    assert cli.main(["onnx", str(tmp_path / "f.tb")]) == 1
    assert "tracebridge[onnx]" in capsys.readouterr().err


class _UnrolledLoop(torch.nn.Module):
    def forward(self, x):  # a Python loop over a size: the trace unrolls it, guards the size
        out = x[:, 0]
        for i in range(1, x.shape[1]):
            out = out + x[:, i] * i
        return out


def test_a_size_the_trace_guards_to_one_value_is_static_in_the_onnx_file(tmp_path):
    # Found by the zoo (funnel): the ONNX file kept the unrolled dimension dynamic and
    # ONNX Runtime answered a call of another length silently wrong.
    traced = tracebridge.trace(_UnrolledLoop(), torch.randn(2, 4))
    path = tracebridge.export_onnx(traced, tmp_path / "loop.onnx")
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["s0", 4]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 4)  # the batch stays dynamic
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert torch.allclose(torch.from_numpy(got), _UnrolledLoop()(x), atol=1e-6)
    with pytest.raises(Exception, match="invalid dimensions"):
        session.run(None, {session.get_inputs()[0].name: torch.randn(2, 6).numpy()})


class _WideBranch(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[1] > 4 else x + 1


def test_a_size_guard_onnx_cannot_state_fixes_the_sizes_it_reads(tmp_path):
    # `x.shape[1] > 4` cannot be written in an ONNX model: with the width left dynamic,
    # ONNX Runtime gave x * 2 for a width of 3, where the code gives x + 1. The width is
    # now fixed at the traced size (ONNX Runtime refuses others), the batch stays dynamic,
    # and a warning says why.
    traced = tracebridge.trace(_WideBranch(), torch.randn(2, 6))
    with pytest.warns(UserWarning, match=r"fixed in the file \(x\[1\] = 6\)"):
        path = tracebridge.export_onnx(traced, tmp_path / "branch.onnx")
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["s0", 6]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.full((3, 6), 3.0)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert torch.equal(torch.from_numpy(got), _WideBranch()(x))
    with pytest.raises(Exception, match="invalid dimensions"):
        session.run(None, {session.get_inputs()[0].name: torch.full((2, 3), 3.0).numpy()})


def test_a_query_whose_mask_allows_no_key_gets_zeros_as_in_eager(tmp_path):
    """torch.onnx.export translates a boolean attention mask as Where + Softmax, which
    gives a query with no allowed key the mean of the values; eager gives zeros. The
    exported file states the zeros (ModernBERT's padded windows, docs/zoo.md)."""

    class Attention(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 4, 8) for _ in range(3))
    mask = torch.ones(2, 2, 4, 4, dtype=torch.bool)
    traced = tracebridge.trace(Attention(), (q, k, v, mask))
    path = tracebridge.export_onnx(traced, tmp_path / "attention.onnx")
    for length in (4, 6):
        q, k, v = (torch.randn(2, 2, length, 8) for _ in range(3))
        mask = torch.rand(2, 2, length, length) > 0.3
        mask[0, :, 1, :] = False  # query 1 of the first row may attend to no key
        want = Attention()(q, k, v, mask)
        assert torch.equal(want[0, :, 1], torch.zeros_like(want[0, :, 1]))
        (got,) = _run(path, [q, k, v, mask])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# --- found by benchmarks/deploy_trial.py ----------------------------------------------------


class _Counter(torch.nn.Module):
    """Updates buffers in place in eval mode (a call counter, a running mean)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.calls += 1
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return self.lin(x) + self.running


def test_a_method_that_updates_buffers_is_refused_before_writing(tmp_path: Path) -> None:
    # Was silently wrong: the file answered every call with the buffers' saved values.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(_Counter().eval(), torch.rand(3, 4))
    out = tmp_path / "counter.onnx"
    with pytest.raises(OnnxExportError, match=r"updates state in place: calls at .*running at "):
        tracebridge.export_onnx(traced, out)
    assert not out.exists()
    train = _trace(CASES["cnn_train"]())  # BatchNorm's running statistics in training mode
    with pytest.raises(OnnxExportError, match=r"running_mean.*\.eval\(\)"):
        tracebridge.export_onnx(train, tmp_path / "train.onnx")


def test_random_ops_are_checked_by_shape_and_dtype_with_a_warning(tmp_path: Path) -> None:
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.randn_like(x)

    traced = tracebridge.trace(f, torch.rand(4, 8), check_trace=False)
    with pytest.warns(UserWarning, match=r"draws random numbers \(dropout, randn_like\)"):
        path = tracebridge.export_onnx(traced, tmp_path / "random.onnx")
    assert _run(path, [torch.rand(6, 8)])[0].shape == (6, 8)


def test_float16_is_checked_at_its_own_tolerance(tmp_path: Path) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    torch.manual_seed(0)
    traced = tracebridge.trace(net.half().eval(), torch.randn(4, 6).half())
    path = tracebridge.export_onnx(traced, tmp_path / "half.onnx")  # 1e-4 refused it
    x = torch.randn(7, 6).half()
    torch.testing.assert_close(_run(path, [x])[0], net(x), atol=1e-2, rtol=1e-2)


def test_onnx_runtime_without_a_kernel_is_an_onnx_export_error(tmp_path: Path) -> None:
    net = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.GELU()).double().eval()
    traced = tracebridge.trace(net, torch.randn(4, 6, dtype=torch.float64))
    with pytest.raises(OnnxExportError, match=r"ONNX Runtime cannot run it: .*check=False"):
        tracebridge.export_onnx(traced, tmp_path / "double.onnx")


def test_a_method_that_writes_its_input_is_checked_on_the_values_passed(tmp_path: Path) -> None:
    def f(x):
        x.add_(1)
        return x * 2

    traced = tracebridge.trace(f, torch.rand(3, 4))
    path = tracebridge.export_onnx(traced, tmp_path / "inplace.onnx")  # was refused
    x = torch.rand(5, 4)
    torch.testing.assert_close(_run(path, [x])[0], (x + 1) * 2)


def _size_one_branch(x):
    if x.size(1) > 1:  # a size-1 special case (transformers' q_length > 1)
        return x.cumsum(1) * 2
    return x + 100


def test_a_guard_only_size_one_breaks_is_named_at_export(tmp_path: Path) -> None:
    """Export serves each dynamic size from 2 up and an ONNX model carries no assertion:
    the file answers size 1 with the general branch where the trace takes the other one.
    Nothing can refuse it at run time, so the export says which dimensions, and why."""
    traced = tracebridge.trace(_size_one_branch, torch.ones(2, 4, 3), check_trace=False)
    with pytest.warns(
        UserWarning, match=r"from size 2 up.*x\[1\] at size 0 or 1 \(the guard at `if x.size"
    ):
        tracebridge.export_onnx(traced, tmp_path / "f.onnx")
    times = tracebridge.trace(lambda x: x * x.size(0), torch.ones(4, 3), check_trace=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no guard that size 1 breaks: silent
        tracebridge.export_onnx(times, tmp_path / "g.onnx")
