"""Round trips between R and Python, for real.

R runs in this process through rpy2; the R package calls the Python core through
reticulate (the same interpreter). One way: an R ``nn_module`` is traced with
``jit_trace`` and saved with ``jit_save``; a fresh Python process that never starts R
loads it with ``tracebridge.load`` and must reproduce the R eager result. The other way:
Python traces and saves; R loads with ``jit_load`` and runs on R arrays (column-major,
1-based), and the numbers must agree with Python eager.

Note: values cross between the languages as plain arrays. R arrays are column-major, so a
NumPy array goes to R as ``array(a.ravel(order="F"), dim = a.shape)`` and comes back with
``reshape(dim, order="F")``; R's element ``x[i, j, k]`` is Python's ``x[i-1, j-1, k-1]``.

Skipped (with the reason) when R, rpy2 or the R package in ``.Rlib`` is missing.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge

ROOT = Path(__file__).resolve().parents[2]
RLIB = ROOT / ".Rlib"


# Note: the GIL. rpy2 releases Python's GIL while R runs. R's garbage collector then
# finalises reticulate's Python objects (tensors, modules) without the GIL, and reticulate
# 1.28 does not take it there: the process aborts ("PyThreadState_Get: ... the GIL is
# released") or segfaults, depending on when R collects. So R code is not evaluated by
# rpy2 directly: rpy2 calls an R function that calls into Python, which calls back into R
# (reticulate's own path, GIL held) to evaluate the code and collect the garbage. rpy2
# itself only starts R and moves plain arrays and strings in and out.
_R_EVAL = """
.tb_eval <- function(code) {
  if (inherits(code, "python.builtin.object")) code <- reticulate::py_to_r(code)
  .tb_value <<- NULL
  value <- eval(parse(text = code), envir = globalenv())
  # only plain R data goes back to rpy2: nothing that holds a Python object
  plain <- !is.environment(value) && !inherits(value, "python.builtin.object") &&
    !(is.list(value) && any(vapply(unclass(value), is.environment, logical(1))))
  .tb_value <<- if (plain) value else NULL
  rm(value)
  invisible(gc(verbose = FALSE))
  NULL
}
.tb_py_eval <- reticulate::r_to_py(.tb_eval)
.tb_run <- function(code) {
  reticulate::py_call(.tb_py_eval, code)
  .tb_value
}
"""


class RSession:
    """R in this process: ``r(code)`` evaluates R code (GIL held, see the note above) and
    returns plain R data as an rpy2 object; ``globalenv`` and ``ro`` are rpy2's."""

    def __init__(self, ro):
        self.ro = ro
        self.globalenv = ro.globalenv
        ro.r(_R_EVAL)
        self._run = ro.r[".tb_run"]

    def r(self, code: str):
        return self._run(code)


def _start_r() -> RSession:
    """Start R in this process with the R package loaded, or skip saying why not."""
    if shutil.which("R") is None:
        pytest.skip("R is not installed")
    if not (RLIB / "tracebridge" / "DESCRIPTION").exists():
        pytest.skip(f"the R package is not installed in {RLIB} (run `make setup`)")
    libs = os.environ.get("R_LIBS", "")
    if str(RLIB) not in libs.split(os.pathsep):
        os.environ["R_LIBS"] = os.pathsep.join(p for p in (str(RLIB), libs) if p)
    os.environ.setdefault("TRACEBRIDGE_PYTHON", sys.executable)
    try:
        import rpy2.rinterface as ri
        import rpy2.robjects as ro
    except Exception as e:  # rpy2 missing, or R's shared library not found
        pytest.skip(f"rpy2 cannot start R: {e}")
    # R's finaliser would run at exit after Python has released the GIL, and abort; the
    # OS reclaims everything anyway.
    atexit.unregister(ri.endr)
    ok = ro.r('isTRUE(suppressMessages(requireNamespace("tracebridge", quietly = TRUE)))')
    if not ok[0]:
        pytest.skip("the R package tracebridge does not load")
    ro.r("suppressPackageStartupMessages(library(tracebridge))")
    return RSession(ro)


@pytest.fixture(scope="module")
def r() -> RSession:
    return _start_r()


def to_r(r: RSession, a: np.ndarray):
    """A NumPy array as an R array with the same shape and the same element at each index."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        data = r.ro.FloatVector(a.ravel(order="F").astype(float))
    else:
        data = r.ro.IntVector(a.ravel(order="F").astype(int))
    return r.ro.r["array"](data, dim=r.ro.IntVector(a.shape))


def from_r(r: RSession, value) -> np.ndarray:
    """An R vector or array as a NumPy array of the same shape."""
    flat = np.array(list(value))
    dims = r.ro.r["dim"](value)
    if dims is r.ro.NULL:
        return flat
    return flat.reshape(tuple(dims), order="F")


def r_tensor(r: RSession, name: str) -> np.ndarray:
    """The R variable ``name`` (a torch_tensor) as a NumPy array, through as_array()."""
    return from_r(r, r.r(f"as_array({name})"))


def run_without_r(code: str) -> dict:
    """Run ``code`` in a fresh interpreter that must never start R; return its JSON output."""
    guard = textwrap.dedent("""
        import json as _json, sys as _sys
        _maps = open("/proc/self/maps").read() if _sys.platform == "linux" else ""
        _r_started = "rpy2" in _sys.modules or "libR.so" in _maps
        print("@@" + _json.dumps({"result": RESULT, "r_started": _r_started}))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + guard],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("@@"))
    out = json.loads(line[2:])
    assert out["r_started"] is False, "the loading process started R"
    return out["result"]


# --- R -> Python --------------------------------------------------------------------------

R_CONV_NET = """
torch_manual_seed(7)
ConvNet <- nn_module("ConvNet",
  initialize = function() {
    self$conv <- nn_conv1d(3, 5, 3, padding = 1)
    self$norm <- nn_layer_norm(5)
    self$fc <- nn_linear(5, 2)
  },
  forward = function(x) {
    h <- torch_relu(self$conv(x))              # (batch, 5, length)
    h <- self$norm(h$transpose(2, 3))          # 1-based dims: swap channels and length
    self$fc(torch_mean(h, dim = 2))            # mean over the length
  }
)
net <- ConvNet()
net$eval()
traced <- jit_trace(net, torch_randn(2, 3, 6), respect_mode = FALSE)
jit_save(traced, path)
x <- torch_randn(4, 3, 9)                      # another batch size and length
y <- net(x)
"""


def test_r_module_runs_in_python_without_r(r, tmp_path):
    path = tmp_path / "r_convnet.tb"
    r.globalenv["path"] = str(path)
    r.r(R_CONV_NET)
    x, y = r_tensor(r, "x"), r_tensor(r, "y")
    assert x.shape == (4, 3, 9) and y.shape == (4, 2)
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    got = run_without_r(f"""
        import numpy as np, torch, tracebridge
        m = tracebridge.load({str(path)!r})
        x = torch.from_numpy(np.load({str(tmp_path / "x.npy")!r}))
        with torch.no_grad():
            RESULT = m(x).tolist()
    """)
    np.testing.assert_allclose(np.array(got), y, rtol=1e-5, atol=1e-6)


def test_r_module_graph_is_shape_general(r, tmp_path):
    path = tmp_path / "r_convnet.tb"
    r.globalenv["path"] = str(path)
    r.r(R_CONV_NET)
    loaded = tracebridge.load(path)
    assert loaded.methods == ["forward"]
    assert "conv1d(" in loaded.graph and "layer_norm(" in loaded.graph
    # Python shapes are R shapes: the same tensor, indexed from 0 instead of 1.
    x = torch.from_numpy(r_tensor(r, "x").astype(np.float32))
    assert x[1, 2, 3].item() == pytest.approx(r.r("as_array(x)[2, 3, 4]")[0], rel=1e-6)
    for batch, length in [(1, 4), (3, 11)]:
        out = loaded(torch.randn(batch, 3, length))
        assert out.shape == (batch, 2)


def test_r_artifact_says_it_was_made_in_r(r, tmp_path):
    path = tmp_path / "r_convnet.tb"
    r.globalenv["path"] = str(path)
    r.r(R_CONV_NET)
    doc, _ = tracebridge.artifact.read_json(path)
    assert doc["producer"]["language"] == "r"


def test_r_respect_mode_module_follows_train_and_eval_in_python(r, tmp_path):
    path = tmp_path / "r_bn.tb"
    r.globalenv["path"] = str(path)
    r.r("""
    torch_manual_seed(11)
    BN <- nn_module("BN",
      initialize = function() {
        self$fc <- nn_linear(4, 6)
        self$bn <- nn_batch_norm1d(6)
      },
      forward = function(x) torch_tanh(self$bn(self$fc(x)))
    )
    bn <- BN()
    for (i in 1:3) bn(torch_randn(8, 4) + 1)
    bn$eval()
    traced <- jit_trace(bn, torch_randn(5, 4))     # respect_mode = TRUE is the default
    jit_save(traced, path)
    x <- torch_randn(6, 4)
    y_eval <- bn(x)
    bn$train()
    y_train <- bn(x)
    """)
    x = r_tensor(r, "x").astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    got = run_without_r(f"""
        import numpy as np, torch, tracebridge
        m = tracebridge.load({str(path)!r})
        x = torch.from_numpy(np.load({str(tmp_path / "x.npy")!r}))
        methods = m.methods
        with torch.no_grad():
            m.eval()
            y_eval = m(x).tolist()
            m.train()
            y_train = m(x).tolist()
        RESULT = {{"methods": methods, "eval": y_eval, "train": y_train}}
    """)
    assert sorted(got["methods"]) == ["evalforward", "trainforward"]
    np.testing.assert_allclose(np.array(got["eval"]), r_tensor(r, "y_eval"), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(got["train"]), r_tensor(r, "y_train"), rtol=1e-5, atol=1e-6)
    assert not np.allclose(got["eval"], got["train"], atol=1e-3), "modes must differ"


# --- Python -> R --------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.conv(x)))
        return self.fc(h.mean(dim=(2, 3)))


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.cls = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor):
        h = torch.tanh(self.body(x))
        return {"logits": self.cls(h), "features": h}


def test_python_module_runs_in_r(r, tmp_path):
    torch.manual_seed(3)
    net = SmallCNN().eval()
    path = tmp_path / "py_cnn.tb"
    tracebridge.trace(net, torch.randn(2, 2, 5, 5)).save(path)
    x = torch.randn(3, 2, 7, 6)
    with torch.no_grad():
        want = net(x).numpy()
    r.globalenv["path"] = str(path)
    r.globalenv["x_r"] = to_r(r, x.numpy())
    r.r("""
    m <- jit_load(path)
    x <- torch_tensor(x_r)
    y <- m(x)
    """)
    assert tuple(r.r("dim(x)")) == (3, 2, 7, 6)
    # R's x[1, 2, 3, 4] is Python's x[0, 1, 2, 3]
    assert r.r("as_array(x)[1, 2, 3, 4]")[0] == pytest.approx(x[0, 1, 2, 3].item(), rel=1e-6)
    got = r_tensor(r, "y")
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_python_parameters_arrive_in_r(r, tmp_path):
    torch.manual_seed(4)
    net = SmallCNN().eval()
    path = tmp_path / "py_cnn.tb"
    tracebridge.trace(net, torch.randn(2, 2, 5, 5)).save(path)
    r.globalenv["path"] = str(path)
    r.r("m <- jit_load(path); params <- m$parameters")
    names = list(r.r("names(params)"))
    assert names == [n for n, _ in net.named_parameters()]
    for i, (name, p) in enumerate(net.named_parameters()):
        got = from_r(r, r.r(f"as_array(params[[{i + 1}]])"))
        np.testing.assert_array_equal(got.astype(np.float32), p.detach().numpy(), err_msg=name)


def test_python_dict_output_is_a_named_list_in_r(r, tmp_path):
    torch.manual_seed(5)
    net = TwoHeads().eval()
    path = tmp_path / "py_heads.tb"
    with pytest.warns(tracebridge.TracerWarning, match="strict=False"):
        tracebridge.trace(net, torch.randn(2, 4), strict=False).save(path)
    x = torch.randn(5, 4)
    with torch.no_grad():
        want = net(x)
    r.globalenv["path"] = str(path)
    r.globalenv["x_r"] = to_r(r, x.numpy())
    r.r("out <- jit_load(path)(torch_tensor(x_r))")
    assert list(r.r("names(out)")) == ["logits", "features"]
    for i, key in enumerate(["logits", "features"]):
        got = from_r(r, r.r(f"as_array(out[[{i + 1}]])"))
        np.testing.assert_allclose(got, want[key].numpy(), rtol=1e-5, atol=1e-6)


def test_python_guard_is_an_r_condition(r, tmp_path):
    def gated(x):
        if x.sum() > 0:
            return x * 3
        return x

    path = tmp_path / "py_gated.tb"
    with pytest.warns(tracebridge.TracerWarning):
        tracebridge.trace(gated, torch.ones(3), check_trace=False).save(path)
    r.globalenv["path"] = str(path)
    got = r.r("""
    f <- jit_load(path)
    ok <- as_array(f(torch_tensor(c(1, 2, 3))))
    cls <- tryCatch({ f(torch_tensor(c(-1, -2, -3))); "no error" },
                    tracebridge_guard_error = function(e) "tracebridge_guard_error")
    list(ok = ok, cls = cls)
    """)
    assert list(got.rx2("ok")) == [3.0, 6.0, 9.0]
    assert got.rx2("cls")[0] == "tracebridge_guard_error"


def test_integer_tokens_cross_with_their_dtype(r, tmp_path):
    torch.manual_seed(6)
    emb = nn.Embedding(10, 3)
    path = tmp_path / "py_emb.tb"
    tracebridge.trace(emb, torch.tensor([[1, 2, 3]])).save(path)
    tokens = np.array([[0, 9, 4], [5, 5, 1]])
    r.globalenv["path"] = str(path)
    r.globalenv["tok_r"] = to_r(r, tokens)
    # Python-made: 0-based ids (R's nn_embedding shifts; a Python graph does not).
    r.r("tok <- torch_tensor(tok_r); out <- jit_load(path)(tok)")
    assert str(r.r("attr(tok$dtype, 'name')")[0]) == "int64"
    got = r_tensor(r, "out")
    np.testing.assert_allclose(
        got, emb(torch.from_numpy(tokens)).detach().numpy(), rtol=1e-6, atol=1e-7
    )
