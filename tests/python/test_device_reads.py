"""Branches on a tensor's device are guarded (op-set 9, ``prim.is_device_type``), while a
device the code only passes on keeps following the call's inputs (trace/device_reads.py).

``x.is_cuda``, ``x.is_cpu``, ``x.is_meta`` ... and ``x.device.type == "cpu"`` were
constants of the trace: a trace made on the CPU and called with tensors of another device
(loaded with ``map_location``, or here the meta device, which a CPU-only machine has) ran
the CPU branch, silently. ``x.device == torch.device(...)``, ``str(x.device)`` and
``x.device.index`` guard the whole device, as ``x.get_device()`` does. Meta tensors hold no
values: the dtype of the result shows which branch ran."""

import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import ArtifactError, GuardError
from tracebridge.ir import ops

from .graph_helpers import rewrite_nodes

X = torch.ones(3, dtype=torch.float64)
META = torch.empty(3, dtype=torch.float64, device="meta")


def _both(traced):
    """The traced object and the same after save/load."""
    buf = io.BytesIO()
    traced.save(buf)
    return [traced, tracebridge.load(buf.getvalue())]


def _device_guards(traced) -> list:
    nodes = traced.program.methods["forward"].nodes
    reads = {n.outputs[0].id: n for n in nodes if n.op in ("prim.is_device_type", "prim.device")}
    found = []
    for n in nodes:
        if n.op == "prim.guard" and n.args[0].id in reads:
            read = reads[n.args[0].id]
            found.append((read.op, *read.args[1:], n.kwargs["expect"]))
    return found


def by_device_type(x):
    if x.device.type == "cpu":  # "float64 is slow elsewhere": the other branch halves
        return x * 2
    return (x * 2).half()


def by_is_meta(x):
    return x.half() if x.is_cuda or x.is_meta else x


def by_is_cpu(x):
    return x * 2 if x.is_cpu else x.half()


def by_device_equal(x):
    return x * 2 if x.device == torch.device("cpu") else x.half()


def by_device_text(x):
    return x * 2 if str(x.device) == "cpu" else x.half()


def by_device_fstring(x):
    return x * 2 if f"{x.device}".startswith("cpu") else x.half()


def by_device_index(x):
    return x * 2 if x.device.index is None else x.half()


def by_device_in(x):
    return x * 2 if x.device in (torch.device("cpu"),) else x.half()


def by_device_key(x):
    return x * {torch.device("cpu"): 2.0}.get(x.device, 0.5)


def by_local_device_type(x):
    dev = x.device
    if dev.type == "cpu":
        return x.float()
    return torch.zeros(3, device=dev, dtype=torch.float16) + x


@pytest.mark.parametrize(
    "fn",
    [
        by_device_type,
        by_is_meta,
        by_is_cpu,
        by_device_equal,
        by_device_text,
        by_device_fstring,
        by_device_in,
        by_device_key,
        by_local_device_type,
    ],
)
def test_a_branch_on_the_device_refuses_a_call_on_another_device(fn):
    """Eager takes the other branch on the meta device: the trace raises GuardError there,
    in process and loaded, and still serves CPU calls with other values."""
    assert fn(META).dtype != fn(X).dtype or fn is by_device_key  # the branches differ
    traced = tracebridge.trace(fn, X)
    for t in _both(traced):
        with pytest.raises(GuardError, match="device"):
            t(META)
        other = torch.arange(3.0, dtype=torch.float64)
        torch.testing.assert_close(t(other), fn(other))


def test_the_device_type_guard_names_the_line_and_the_type():
    traced = tracebridge.trace(by_device_type, X)
    with pytest.raises(GuardError) as info:
        traced(META)
    message = str(info.value)
    assert "x.device.type == 'cpu'" in message and 'if x.device.type == "cpu"' in message


@pytest.mark.parametrize(
    ("flag", "device_type"),
    [
        ("is_cuda", "cuda"),
        ("is_cpu", "cpu"),
        ("is_meta", "meta"),
        ("is_mps", "mps"),
        ("is_xpu", "xpu"),
    ],
)
def test_each_device_flag_is_read_at_call_time_and_guarded(flag, device_type):
    def fn(x):
        return x * 2 if getattr(x, flag) else x - 1

    on_cpu = device_type == "cpu"
    for t in _both(tracebridge.trace(fn, X)):
        assert _device_guards(t) == [("prim.is_device_type", device_type, on_cpu)]
        torch.testing.assert_close(t(X + 1), fn(X + 1))


def test_the_device_type_is_read_inline_by_the_generated_code():
    """The generated code reads ``x.device.type == 'cpu'`` as an expression (no function
    frame per read), and the read still decides: a tensor on another device type is
    refused by its guard, in process and loaded."""
    for t in _both(tracebridge.trace(by_device_type, X)):
        assert ".device.type == 'cpu'  # prim.is_device_type" in t.code
        assert "op_prim_is_device_type" not in t.code
        torch.testing.assert_close(t(X + 1), by_device_type(X + 1))
        with pytest.raises(tracebridge.GuardError):
            t(torch.ones(3, device="meta"))


def test_the_type_alone_is_guarded_where_only_the_type_is_read():
    """``x.device.type`` guards the type, not the index: a trace made on ``cuda:0`` serves
    ``cuda:1``; a device compared whole is guarded whole."""
    assert _device_guards(tracebridge.trace(by_device_type, X)) == [
        ("prim.is_device_type", "cpu", True)
    ]
    for fn in (by_device_equal, by_device_index, by_device_key):
        assert _device_guards(tracebridge.trace(fn, X)) == [("prim.device", torch.device("cpu"))]


def passed_to_factories(x):
    device = x.device
    kwargs = {"device": x.device, "dtype": x.dtype}
    n, unpacked = x.shape[0], x.device  # transformers' masking_utils unpacks so
    y = torch.ones(3, **kwargs) + torch.arange(n, device=device) + torch.zeros(n, device=unpacked)
    return y.to(x.device) + _helper(device if x.dim() else None)


def _helper(device):
    return torch.zeros(3, device=device, dtype=torch.float64)


class WithDeviceProperty(nn.Module):
    """transformers' ``PreTrainedModel.device``: the first parameter's device, returned."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3).double()

    @property
    def device(self):
        for p in self.parameters():
            return p.device
        return None

    def forward(self, x):
        return self.lin(x) + torch.ones(3, device=self.device, dtype=x.dtype)


class BranchOnDeviceProperty(WithDeviceProperty):
    def forward(self, x):
        if self.device.type == "cpu":
            return self.lin(x) * 2
        return self.lin(x).half()


def test_a_device_only_passed_on_follows_the_inputs():
    """Factories, ``.to()``, a helper and a kwargs dict: no guard, a meta call runs on meta."""
    for t in _both(tracebridge.trace(passed_to_factories, X)):
        assert _device_guards(t) == []
        out = t(META)
        assert out.device.type == "meta" and out.shape == (3,)
        torch.testing.assert_close(t(X * 3), passed_to_factories(X * 3))


def test_a_device_returned_by_a_property_is_judged_where_the_caller_uses_it():
    model = WithDeviceProperty()
    assert _device_guards(tracebridge.trace(model, X)) == []
    model = BranchOnDeviceProperty()
    for t in _both(tracebridge.trace(model, X)):
        assert _device_guards(t) == [("prim.is_device_type", "cpu", True)]
    traced = tracebridge.trace(model, X)
    model.to("meta")  # the traced module shares the parameters: now on meta
    with pytest.raises(GuardError, match="lin.weight.device.type"):
        traced(META)


def test_torchs_own_device_reads_are_not_guarded():
    """Library code of PyTorch reads devices all the time: only the user's reads decide."""
    traced = tracebridge.trace(lambda x: torch.nn.functional.normalize(x, dim=0) * 2, X)
    assert _device_guards(traced) == []


def test_a_file_naming_another_device_type_is_refused_at_load(tmp_path):
    traced = tracebridge.trace(by_device_type, X)
    traced.save(tmp_path / "f.tb")
    rewrite_nodes(
        tmp_path / "f.tb",
        "prim.is_device_type",
        lambda node: node["args"].__setitem__(1, "os.system"),
    )
    with pytest.raises(ArtifactError, match="not a device type"):
        tracebridge.load(tmp_path / "f.tb")
    assert ops.SINCE["prim.is_device_type"] == 9 <= ops.OPSET_VERSION


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_trace_made_on_the_cpu_refuses_cuda_inputs_where_the_code_branches_on_it():
    for t in _both(tracebridge.trace(by_device_type, X)):
        with pytest.raises(GuardError):
            t(X.cuda())
    for t in _both(tracebridge.trace(passed_to_factories, X)):
        torch.testing.assert_close(t(X.cuda()), passed_to_factories(X.cuda()))


def by_cuda_name(x):
    # transformers' SDPA paths: a workaround for one device type, by name
    if x.device.type == "cuda" or x.device.type in ("xpu", "mps"):
        return x.contiguous() * 2
    return x + 1


def by_own_type(x):
    with torch.autocast(x.device.type, enabled=False):
        return x * 2


def test_a_type_compared_with_names_guards_each_answer_not_the_type():
    """Traced on the meta device, ``x.device.type == "cuda"`` is False as on the CPU: the
    trace serves CPU calls (the type itself guarded would refuse them)."""
    traced = tracebridge.trace(by_cuda_name, META, check_trace=False)
    assert sorted(_device_guards(traced)) == [
        ("prim.is_device_type", "cuda", False),
        ("prim.is_device_type", "mps", False),
        ("prim.is_device_type", "xpu", False),
    ]
    for t in _both(traced):
        torch.testing.assert_close(t(X * 3), by_cuda_name(X * 3))
    # the type passed on where it is used whole (autocast's device type): the type guarded
    assert _device_guards(tracebridge.trace(by_own_type, X)) == [
        ("prim.is_device_type", "cpu", True)
    ]


def _is_cuda_device(dev):
    return dev.type == "cuda"


def _identity(dev):
    return dev


def _bias(n, device=None):
    if device is None:  # transformers' T5 compute_bias: no device is None, whichever
        device = torch.device("cpu")
    return torch.arange(n, device=device, dtype=torch.float64)


def decided_in_a_helper(x):
    return x.half() if _is_cuda_device(x.device) else x


def returned_by_a_helper(x):
    dev = _identity(x.device)
    return x * 2 if dev.type == "cpu" else x.half()


def passed_through_helpers(x):
    return x + _bias(3, device=x.device) + _bias(3, _identity(x.device))


class _Head(nn.Module):
    def forward(self, x, device):
        return x * 2 if device.type == "cpu" else x.half()


class DecidedInASubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = _Head()

    def forward(self, x):
        return self.head(x, x.device)


def test_a_device_given_to_a_helper_is_followed_into_it():
    """A helper, a helper's result, a sub-module's forward: the parameter's reads there
    decide; a helper that only makes tensors with it (or tests it for None) guards nothing."""
    for t in _both(tracebridge.trace(decided_in_a_helper, X)):
        assert _device_guards(t) == [("prim.is_device_type", "cuda", False)]
        assert t(META).dtype == decided_in_a_helper(META).dtype
    for fn in (returned_by_a_helper, DecidedInASubmodule()):
        for t in _both(tracebridge.trace(fn, X)):
            assert _device_guards(t) == [("prim.is_device_type", "cpu", True)]
            with pytest.raises(GuardError):
                t(META)
    for t in _both(tracebridge.trace(passed_through_helpers, X)):
        assert _device_guards(t) == []
        assert t(META).device.type == "meta"
