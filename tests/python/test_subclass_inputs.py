"""Inputs of a tensor subclass with a ``__torch_function__`` of its own (prober21b F7).

Eager runs the override for every op; a trace runs its recorded ops, which the override
would see otherwise or not at all: such an input is refused at the call, naming the
argument, its class and the fix, unless the class changes no values (torch's own
``__torch_function__``, turned off as ``nn.Parameter``, torchvision's tv_tensors, or
declared with ``tracebridge.pass_through``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge import TraceError


class Scaled(torch.Tensor):
    """Multiplies every ``Tensor.mul`` result by 10 (prober21b's repro)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.mul and isinstance(out, torch.Tensor):
            with torch._C.DisableTorchFunctionSubclass():
                out = (out * 10).as_subclass(cls)
        return out


class Inherits(torch.Tensor):
    """A subclass that keeps torch's ``__torch_function__``: same values, its own type."""


def f(x):
    return x * 2 + 1


def test_an_overriding_subclass_input_is_refused_naming_it(tmp_path):
    traced = tracebridge.trace(f, torch.ones(3))
    s = torch.ones(3).as_subclass(Scaled)
    assert f(s).as_subclass(torch.Tensor).tolist() == [21.0, 21.0, 21.0]  # eager
    path = tmp_path / "f.tb"
    tracebridge.save(traced, path)
    for callable_ in (traced, tracebridge.load(path)):
        with pytest.raises(TraceError) as info:
            callable_(s)
        text = str(info.value)
        assert "argument 'x'" in text and "Scaled" in text
        assert "x.as_subclass(torch.Tensor)" in text
        assert "tracebridge.pass_through(Scaled)" in text
        # the fix the message gives is right
        assert torch.equal(callable_(s.as_subclass(torch.Tensor)), f(torch.ones(3)))


def test_refused_in_a_container_by_keyword_and_in_a_module():
    def g(pair, *, bias):
        return pair[0] * pair[1] + bias

    ones = torch.ones(2)
    traced = tracebridge.trace(g, ((ones, ones),), example_kwarg_inputs={"bias": ones})
    with pytest.raises(TraceError, match="argument 'bias'.*Scaled"):
        traced((ones, ones), bias=ones.as_subclass(Scaled))
    with pytest.raises(TraceError, match="Scaled"):
        traced((ones, ones.as_subclass(Scaled)), bias=ones)
    lin = torch.nn.Linear(2, 2)
    module = tracebridge.trace(lin, torch.ones(1, 2))
    with pytest.raises(TraceError, match="argument 'input'|input 0"):
        module(torch.ones(1, 2).as_subclass(Scaled))


def test_subclasses_that_change_no_values_run_as_before():
    traced = tracebridge.trace(f, torch.ones(3))
    plain = torch.tensor([1.0, 2.0, 3.0])
    # torch's own __torch_function__: eager's values, eager's type
    out = traced(plain.as_subclass(Inherits))
    assert type(out) is type(f(plain.as_subclass(Inherits))) is Inherits
    assert torch.equal(out.as_subclass(torch.Tensor), f(plain))
    # nn.Parameter turns __torch_function__ off
    weight = torch.nn.Parameter(plain.clone())
    assert torch.equal(traced(weight), f(weight))

    @tracebridge.pass_through
    class Logged(torch.Tensor):
        calls: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    Logged.calls.clear()
    out = traced(plain.as_subclass(Logged))
    assert torch.equal(out.as_subclass(torch.Tensor), f(plain)) and Logged.calls
    with pytest.raises(TypeError, match="torch.Tensor subclass"):
        tracebridge.pass_through(int)


def test_a_plain_call_under_a_function_mode_is_not_refused():
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    traced = tracebridge.trace(f, torch.ones(3))
    with Mode():
        assert torch.equal(traced(torch.ones(3)), f(torch.ones(3)))


_ZOO = Path("/work/venvs/zoo/bin/python")
_SCRIPT = """
import sys
sys.path.insert(0, {bench!r})
import zoo_env  # noqa: F401  (torchvision's ops, before torchvision)
import torch, tracebridge
from torchvision import tv_tensors
f = lambda x: x * 2 + 1
t = tracebridge.trace(f, torch.ones(1, 3, 4, 4))
img = tv_tensors.Image(torch.ones(1, 3, 4, 4))
e, r = f(img), t(img)
assert type(e) is type(r) is torch.Tensor and torch.equal(e, r), (type(e), type(r))
g = lambda b: b + 1
t = tracebridge.trace(g, torch.tensor([[0.0, 0, 2, 2]]))
bb = tv_tensors.BoundingBoxes(torch.tensor([[0.0, 0, 2, 2]]), format="XYXY", canvas_size=(4, 4))
e, r = g(bb), t(bb)
assert type(e) is type(r) is torch.Tensor and torch.equal(e, r), (type(e), type(r))
print("ok")
"""


@pytest.mark.skipif(not _ZOO.exists(), reason="no zoo venv with torchvision")
def test_torchvision_tv_tensors_run_as_eager():
    import subprocess

    root = Path(__file__).resolve().parents[2]
    script = _SCRIPT.format(bench=str(root / "benchmarks"))
    env = {"PYTHONPATH": str(root / "python"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(_ZOO), "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    if "No module named 'torchvision'" in done.stderr:
        pytest.skip("torchvision is not importable")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]
