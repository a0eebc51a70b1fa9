"""Tensors made by code the tracer cannot see (TorchScript, C++ extensions) from the inputs.

The tracer records what runs through PyTorch's Python API. A scripted module or function
runs its ops in TorchScript's interpreter, out of its sight: its result reached the trace
as a constant, and where no other check tried another shape (a 1-D input whose size the
code fixes) the trace gave the example's answer for every input -- silently wrong. Now a
scripted function runs its Python original while tracing (recorded like any code), a
scripted module is refused at its call, and for code still out of sight (a C++ extension)
the check runs the code and the trace on the example with its values moved wherever the
trace keeps a constant, and refuses naming the line and the reason.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import TracingCheckError, UnsupportedOpError

HERE = __file__.rsplit("/", 1)[-1]


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class ScriptedInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.jit.script(nn.Linear(3, 3))

    def forward(self, x):
        return self.inner(x).tanh()  # the scripted call


@torch.jit.script
def doubled(x):
    return x * 2


def calls_a_script_function(x):
    return doubled(x) + 1  # the scripted call


def hides_from_the_tracer(x):
    with torch._C.DisableTorchFunction():  # as a C++ extension: no Python API call seen
        y = x * 3
    return y.sin()  # the hidden result used


@pytest.mark.parametrize("example", [torch.randn(3), torch.randn(2, 3)])
def test_a_scripted_module_called_while_tracing_is_refused_at_the_call(example):
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(ScriptedInside(), example)
    message = str(info.value)
    assert "TorchScript module Linear" in message and HERE in message
    assert "before torch.jit.script" in message


def test_a_scripted_function_runs_its_python_original_and_is_recorded(tmp_path):
    traced = tracebridge.trace(calls_a_script_function, torch.randn(4))
    loaded = tracebridge.load(traced.save(tmp_path / "s.tb") or tmp_path / "s.tb")
    assert "mul" in traced.graph  # doubled's own op, recorded
    for x in (torch.randn(4), torch.randn(7)):
        assert torch.equal(traced(x), x * 2 + 1) and torch.equal(loaded(x), x * 2 + 1)
    assert torch.equal(doubled(torch.ones(2)), torch.full((2,), 2.0))  # outside: TorchScript


def test_a_tensor_made_out_of_sight_from_the_inputs_is_refused():
    with pytest.raises(TracingCheckError) as info:
        tracebridge.trace(hides_from_the_tracer, torch.randn(5))
    message = str(info.value)
    assert "may depend on the inputs as a constant" in message
    assert HERE in message and "return y.sin()" in message


TABLE = torch.arange(4.0)


def reads_a_global_table(x):
    return x * TABLE  # a constant that does not depend on the inputs


def test_a_constant_that_does_not_depend_on_the_inputs_is_kept(tmp_path):
    traced = tracebridge.trace(reads_a_global_table, torch.randn(4))
    loaded = tracebridge.load(traced.save(tmp_path / "t.tb") or tmp_path / "t.tb")
    x = torch.randn(4)
    assert torch.equal(traced(x), x * TABLE) and torch.equal(loaded(x), x * TABLE)


def test_the_check_runs_with_check_inputs_too():
    with pytest.raises(TracingCheckError, match="may depend on the inputs as a constant"):
        tracebridge.trace(hides_from_the_tracer, torch.randn(3), check_inputs=[(torch.randn(3),)])


def test_moving_values_leaves_inputs_that_cannot_move():
    from tracebridge.check.compare import rolled as _rolled

    assert _rolled((torch.ones(3), torch.zeros(2)), {}) is None
    (a, b), _ = _rolled((torch.arange(3), torch.ones(2)), {})
    assert a.tolist() == [2, 0, 1] and b.tolist() == [1.0, 1.0]


def test_a_function_transform_out_of_sight_is_refused_too():
    def row_norms(x):
        return torch.vmap(lambda row: row.dot(row))(x)

    # at trace time, naming the line, since session 15 (the check refused it before)
    with pytest.raises(UnsupportedOpError, match="torch.vmap"):
        tracebridge.trace(row_norms, torch.randn(3, 4))


def test_tracing_code_that_loads_dynamo_leaves_torch_compile_working():
    """Dynamo reads its table of builtins once, the first time it needs it. Where that is
    during a trace (traced code loading torch.compile's machinery), the table must still
    name the real ``len`` afterwards, or every later torch.compile / torch.export in the
    process breaks on it. A fresh process, where Dynamo is loaded inside the recording."""
    import os
    import subprocess
    import sys

    code = (
        "import builtins, sys, torch\n"
        "from tracebridge.trace.patches import recording\n"
        "from tracebridge.trace.tracer import Tracer\n"
        "assert 'torch._dynamo.trace_rules' not in sys.modules\n"
        "with recording(Tracer({}, {}, set())):\n"
        "    from torch._dynamo.trace_rules import _builtin_function_ids as ids\n"
        "    ids()  # made while len is replaced\n"
        "assert id(builtins.len) in ids(), 'dynamo lost the real len'\n"
        "f = torch.compile(lambda x: x * len(x), backend='eager', fullgraph=True)\n"
        "assert f(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
