"""ONNX files at sizes other than the example's (export/onnx_sizes.py): a size that
torch.export fixed, by a guard of the trace or by an op that needs its value, is fixed in
the file (ONNX Runtime refuses other sizes) or warned of; never a wrong answer. Each case
was silently wrong before (prober 16: F4, F6, F7, F8, U6)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import tracebridge
from tracebridge.export import OnnxExportError

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed")


def _export(fn, example, path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(fn, example)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracebridge.export_onnx(traced, path, **kwargs)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _right_or_refused(path, fn, call: tuple) -> str:
    """ONNX Runtime's answer to ``call``: 'right', or 'refused' (an error); never wrong."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), call)}
    try:
        (got,) = session.run(None, feeds)
    except Exception:
        return "refused"
    want = fn(*call)
    got = torch.from_numpy(got)
    assert got.shape == want.shape, f"wrong shape {list(got.shape)}, eager {list(want.shape)}"
    torch.testing.assert_close(got.to(want.dtype), want, atol=1e-5, rtol=1e-5)
    return "right"


def _dims(path, index=0):
    dims = onnx.load(str(path)).graph.input[index].type.tensor_type.shape.dim
    return [d.dim_param or d.dim_value for d in dims]


def _scaled(q):
    return q @ q.transpose(-1, -2) / math.sqrt(q.size(-1))


def test_a_size_export_fixes_for_an_op_is_fixed_in_the_file_with_a_warning(tmp_path):
    # F4: math.sqrt of a size is a constant under torch.export; the file kept the head
    # size dynamic and ONNX Runtime scaled a head size of 9 by 1/sqrt(4).
    path = tmp_path / "sqrt.onnx"
    caught = _export(_scaled, torch.randn(2, 3, 4), path)
    assert _dims(path) == ["s0", "s1", 4]
    assert any("made these input dimensions static" in m and "q[2] = 4" in m for m in caught)
    assert _right_or_refused(path, _scaled, (torch.randn(2, 3, 9),)) == "refused"
    assert _right_or_refused(path, _scaled, (torch.randn(3, 5, 4),)) == "right"


def _rows(x):
    return sum(r * i for i, r in enumerate(x))


def _zip_rows(x, y):
    return torch.stack([a + b for a, b in zip(x, y)])


def test_a_loop_over_rows_fixes_their_count_without_a_warning(tmp_path):
    # F4: enumerate / zip over a tensor (unbind): the trace refuses other counts, the file
    # answered them with the example's rows only.
    path = tmp_path / "rows.onnx"
    caught = _export(_rows, torch.randn(3, 4), path)
    assert _dims(path) == [3, "s1"]
    assert not [m for m in caught if "static" in m]  # the trace refuses other counts too
    assert _right_or_refused(path, _rows, (torch.randn(5, 4),)) == "refused"
    assert _right_or_refused(path, _rows, (torch.randn(3, 7),)) == "right"
    path = tmp_path / "zip.onnx"
    _export(_zip_rows, (torch.randn(3, 4), torch.randn(2, 4)), path)
    assert _right_or_refused(path, _zip_rows, (torch.randn(3, 4), torch.randn(4, 4))) == "refused"


def _bucket(x):
    return torch.bucketize(x, torch.linspace(-1, 1, x.shape[-1]))


def test_linspace_steps_from_a_size(tmp_path):
    path = tmp_path / "bucket.onnx"
    _export(_bucket, torch.randn(3, 4), path)
    assert _right_or_refused(path, _bucket, (torch.randn(5, 6),)) == "refused"
    assert _right_or_refused(path, _bucket, (torch.randn(5, 4),)) == "right"


def _empty_early(x):
    if x.numel() == 0:
        return x.new_zeros(x.shape[1:])
    return x.softmax(0)


def test_a_guard_only_size_zero_breaks_is_named_at_export(tmp_path):
    # F7: `numel() == 0` is False for every size export serves: it was dropped silently,
    # and ONNX Runtime answered an empty batch with shape (0, 2) where the code gives (2,).
    caught = _export(_empty_early, torch.randn(3, 2), tmp_path / "empty.onnx")
    assert any(
        "cannot refuse size 0 or 1" in m and "x[0] at size 0" in m and "numel" in m for m in caught
    ), caught


def _relation(x, y):
    if x.shape[1] == y.shape[1]:
        return x * y
    return x * y.sum()


def test_a_guard_relating_two_inputs_fixes_their_sizes_with_a_warning(tmp_path):
    # F8: export unified the two sizes; ONNX Runtime does not check that inputs agree on
    # a dimension name, and broadcast a y of width 1 where the code takes the other branch.
    path = tmp_path / "relation.onnx"
    caught = _export(_relation, (torch.randn(2, 4), torch.randn(2, 4)), path)
    assert _dims(path, 0) == ["s0", 4] and _dims(path, 1) == ["s0", 4]
    assert any("x[1] = 4, y[1] = 4" in m and "x.shape[1] == y.shape[1]" in m for m in caught)
    call = (torch.randn(2, 4), torch.randn(2, 1))
    assert _right_or_refused(path, _relation, call) == "refused"
    assert _right_or_refused(path, _relation, (torch.randn(5, 4), torch.randn(5, 4))) == "right"


def _repeat_kv(x, y):
    return torch.repeat_interleave(x, y.shape[1] // x.shape[1], dim=1)


def test_repeat_interleave_with_a_count_from_sizes_exports(tmp_path):
    # F6: a raw ValueError under torch.export, and a file that repeated each element once.
    path = tmp_path / "repeat.onnx"
    _export(_repeat_kv, (torch.randn(2, 2, 3), torch.randn(2, 4, 3)), path)
    call = (torch.randn(3, 2, 5), torch.randn(3, 6, 5))
    assert _right_or_refused(path, _repeat_kv, call) == "right"


def test_repeat_interleave_with_a_count_from_sizes_under_torch_export():
    # F6: the checked op refused the symbolic count with a raw ValueError.
    from tracebridge.export import fx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(_repeat_kv, (torch.randn(2, 2, 3), torch.randn(2, 4, 3)))
    gm = tracebridge.to_graph_module(traced)
    program = torch.export.export(
        gm, fx.example_inputs(gm), dynamic_shapes=fx.dynamic_shapes(gm), strict=False
    )
    x, y = torch.randn(3, 2, 5), torch.randn(3, 6, 5)
    torch.testing.assert_close(program.module()(x, y)[0], _repeat_kv(x, y))


def test_a_shape_mismatch_is_not_blamed_on_tolerance(tmp_path, monkeypatch):
    # U6: the check said "raise tolerance=" for outputs of another shape.
    from tracebridge.export import onnx as onnx_export

    with pytest.raises(OnnxExportError, match="shape .* no tolerance explains"):
        onnx_export._compare(
            "f.onnx", [torch.zeros(2, 2).numpy()], [torch.zeros(2, 4)], 1e-4, True, ""
        )


def test_the_check_runs_the_file_at_grown_sizes(tmp_path, monkeypatch):
    # What the analysis misses: a file right at the example's sizes only fails the check.
    from tracebridge.export import onnx_sizes

    monkeypatch.setattr(onnx_sizes, "fix_static_dimensions", lambda *a: None)
    with pytest.raises(OnnxExportError, match=r"at input shapes .*size-dependent"):
        _export(_scaled, torch.randn(2, 3, 4), tmp_path / "unfixed.onnx")


def test_an_exporter_failure_names_its_root(tmp_path):
    # U6: onnxscript wraps the failing op in PassErrors that name only '<... at 0x...>'.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(lambda x: x.chunk(3, -1)[0], torch.randn(2, 9))
    with pytest.raises(OnnxExportError, match=r"\(from .*(?i:split).*chunk or split"):
        tracebridge.export_onnx(traced, tmp_path / "chunk.onnx")


def _padded_mask(x, mask):
    if (padding := x.shape[1] - mask.shape[1]) > 0:  # transformers' masking_utils
        mask = torch.nn.functional.pad(mask, (0, padding))
    return x * mask


def test_a_size_one_that_onnx_runtime_broadcasts_is_named_at_export(tmp_path):
    # The multiply makes export unify the two lengths, which decides the guard; ONNX
    # Runtime broadcasts a mask of length 1 where the trace refuses it (the guard).
    caught = _export(_padded_mask, (torch.randn(2, 8), torch.ones(2, 8)), tmp_path / "m.onnx")
    assert any("cannot refuse size 0 or 1" in m and "mask[1] at size 1" in m for m in caught), (
        caught
    )
