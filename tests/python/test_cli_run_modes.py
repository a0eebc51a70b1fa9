"""``tracebridge run`` picks the mode of the graph it runs, refuses a ``--mode`` the file
cannot serve with advice a command-line user can follow, and writes a dtype numpy lacks
to ``.npz`` widened (exactly) with a note (prober17's P5)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import artifact
from tracebridge.frontends import cli

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class DropNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.drop = nn.Dropout(0.5)
        self.bn = nn.BatchNorm1d(2)

    def forward(self, x):
        return self.bn(self.drop(self.lin(x)))


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _inputs(path, **tensors) -> str:
    with open(path, "wb") as handle:
        handle.write(artifact.safetensors_bytes(tensors)[0])
    return str(path)


def _outputs(path) -> dict:
    with open(path, "rb") as handle:
        return artifact.parse_safetensors(handle.read(), str(path))


@pytest.fixture
def both_modes(tmp_path):
    """A respect_mode file saved in evaluation mode, and its module."""
    model = DropNorm().eval()
    tracebridge.trace(model, torch.randn(4, 3), respect_mode=True).save(tmp_path / "rm.tb")
    return model, str(tmp_path / "rm.tb")


def test_a_named_training_graph_runs_in_training_mode(both_modes, tmp_path, capsys):
    model, path = both_modes
    x = torch.randn(5, 3)
    inputs = _inputs(tmp_path / "x.safetensors", input0=x)
    out = tmp_path / "y.safetensors"
    code, stdout, err = _run(
        capsys, "run", path, "--inputs", inputs, "--method", "trainforward", "-o", out
    )
    assert (code, err) == (0, ""), err
    assert stdout == f"wrote 1 output of trainforward to {out}\n"
    # The training graph (dropout draws, batch statistics): from the same random state,
    # eager in training mode gives the same values. (A copy: it updates running stats.)
    torch.manual_seed(3)
    code, _, err = _run(
        capsys, "run", path, "--inputs", inputs, "--method", "trainforward", "-o", out
    )
    assert code == 0, err
    torch.manual_seed(3)
    with torch.no_grad():
        expected = copy.deepcopy(model).train()(x)
    torch.testing.assert_close(_outputs(out)["output0"], expected)
    # and the evaluation graph by its name, and by --mode
    for extra in (["--method", "evalforward"], ["--mode", "eval"], []):
        code, _, err = _run(capsys, "run", path, "--inputs", inputs, *extra, "-o", out)
        assert code == 0, err
        with torch.no_grad():
            torch.testing.assert_close(_outputs(out)["output0"], model(x))


def test_a_named_graph_with_the_other_mode_is_refused_with_cli_advice(both_modes, tmp_path, capsys):
    _, path = both_modes
    inputs = _inputs(tmp_path / "x.safetensors", input0=torch.randn(5, 3))
    code, _, err = _run(
        capsys, "run", path, "--inputs", inputs, "--method", "trainforward", "--mode", "eval"
    )
    assert code == 2
    assert "trainforward is the graph of forward in training mode, and --mode eval" in err
    assert "run --method forward --mode eval" in err
    assert ".train()" not in err and ".eval()" not in err


def test_mode_of_a_file_traced_in_one_mode(tmp_path, capsys):
    model = DropNorm().eval()
    path = str(tmp_path / "eval.tb")
    tracebridge.trace(model, torch.randn(4, 3)).save(path)
    x = torch.randn(5, 3)
    inputs = _inputs(tmp_path / "x.safetensors", input0=x)
    code, _, err = _run(capsys, "run", path, "--inputs", inputs, "--mode", "train")
    assert code == 2
    assert "forward was traced in evaluation mode only" in err
    assert "(first at dropout" in err
    assert "Leave out --mode (or pass --mode eval)" in err
    assert "respect_mode=True" in err and ".eval()" not in err and ".train()" not in err
    out = tmp_path / "y.safetensors"
    code, _, err = _run(capsys, "run", path, "--inputs", inputs, "--mode", "eval", "-o", out)
    assert code == 0, err
    with torch.no_grad():
        torch.testing.assert_close(_outputs(out)["output0"], model(x))


def test_a_file_saved_in_the_other_mode_runs_its_traced_mode(tmp_path, capsys):
    """Traced in evaluation mode, saved after .train(): its only graph is the evaluation
    one, and the command runs it (it used to refuse with Python advice)."""
    model = DropNorm().eval()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    traced.train()
    path = str(tmp_path / "saved_train.tb")
    traced.save(path)
    model.eval()
    x = torch.randn(5, 3)
    out = tmp_path / "y.safetensors"
    inputs = _inputs(tmp_path / "x.safetensors", input0=x)
    code, _, err = _run(capsys, "run", path, "--inputs", inputs, "-o", out)
    assert code == 0, err
    with torch.no_grad():
        torch.testing.assert_close(_outputs(out)["output0"], model(x))


def test_a_frozen_batch_norm_runs_as_recorded(tmp_path, capsys):
    """A training model with a frozen batch norm: the training graph runs with the norm
    frozen, as recorded, whichever mode the file was saved in."""
    model = DropNorm()
    model.drop.p = 0.0  # no draws: the result is comparable
    model.train()
    model.bn.eval()
    traced = tracebridge.trace(model, torch.randn(4, 3), respect_mode=True)
    traced.eval()
    path = str(tmp_path / "frozen.tb")
    traced.save(path)
    x = torch.randn(5, 3)
    inputs = _inputs(tmp_path / "x.safetensors", input0=x)
    out = tmp_path / "y.safetensors"
    code, _, err = _run(capsys, "run", path, "--inputs", inputs, "--mode", "train", "-o", out)
    assert code == 0, err
    model.train()
    model.bn.eval()
    with torch.no_grad():
        torch.testing.assert_close(_outputs(out)["output0"], model(x))


def test_npz_output_of_a_dtype_numpy_lacks_is_widened_exactly(tmp_path, capsys):
    def halves(x):
        return x.to(torch.bfloat16), x * 2

    traced = tracebridge.trace(halves, (torch.randn(3),))
    path = str(tmp_path / "bf16.tb")
    traced.save(path)
    x = torch.tensor([1.0, 1.0 / 3.0, -2.5])
    inputs = _inputs(tmp_path / "x.safetensors", input0=x)
    out = tmp_path / "y.npz"
    code, stdout, err = _run(capsys, "run", path, "--inputs", inputs, "-o", out)
    assert code == 0, err
    assert "output0 is bfloat16, which numpy has no type for" in err
    assert "written to .npz as float32 (every value exactly)" in err
    assert ".safetensors file to keep the dtype" in err
    assert stdout == f"wrote 2 outputs of forward to {out}\n"
    with np.load(out) as data:
        assert data["output0"].dtype == np.float32
        expected = x.to(torch.bfloat16).float().numpy()
        assert np.array_equal(data["output0"], expected)
        assert np.array_equal(data["output1"], (x * 2).numpy())
    # .safetensors keeps the dtype
    kept = tmp_path / "y.safetensors"
    code, _, err = _run(capsys, "run", path, "--inputs", inputs, "-o", kept)
    assert (code, err) == (0, "")
    assert _outputs(kept)["output0"].dtype == torch.bfloat16
