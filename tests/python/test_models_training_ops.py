"""Ops that training-time models call (op-set 7): fake quantisation (quantisation-aware
training: ``torch.fake_quantize_per_tensor_affine``, ``..._per_channel_affine`` and
``torch.ao.quantization.FakeQuantize``), and ``nn.Embedding(max_norm=...)``, whose
``F.embedding`` renormalises the weight rows it looks up, in place, on every call: the trace
repeats that write, in process and in a loaded program, as eager does. Each is right on
other shapes in both runtimes after a save and load; a crafted file's bad arguments are
refused at load or before the kernel."""

from __future__ import annotations

import copy
import json
import zipfile

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import checked_numeric as num

from .graph_helpers import rewrite_nodes

RUNTIMES = ("codegen", "interpreter")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _saved(traced, tmp_path, name="m.tb"):
    path = tmp_path / name
    traced.save(path)
    return path


# --- fake quantisation -------------------------------------------------------------------------


class PerTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.05]))
        self.register_buffer("zero_point", torch.tensor([3], dtype=torch.int32))

    def forward(self, x):
        a = torch.fake_quantize_per_tensor_affine(x, 0.1, 2, 0, 255)
        b = torch.fake_quantize_per_tensor_affine(x, self.scale, self.zero_point, -128, 127)
        return a + b


class PerChannel(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.register_buffer("scale", torch.rand(channels) * 0.1 + 0.01)
        self.register_buffer("zero_point", torch.randint(-3, 3, (channels,), dtype=torch.int32))

    def forward(self, x):
        return torch.fake_quantize_per_channel_affine(x, self.scale, self.zero_point, 1, -128, 127)


def _fake_quantize(observer, **kwargs):
    """``torch.ao.quantization.FakeQuantize`` with its observer run once and then off (as a
    QAT model is exported after calibration)."""
    import torch.ao.quantization as tq

    fq = tq.FakeQuantize(observer=observer, **kwargs)
    fq(torch.randn(16, 4))
    fq.disable_observer()
    return fq


def _ao_per_tensor():
    import torch.ao.quantization as tq

    return _fake_quantize(tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255)


def _ao_per_channel():
    import torch.ao.quantization as tq

    return _fake_quantize(
        tq.MovingAveragePerChannelMinMaxObserver,
        quant_min=-128,
        quant_max=127,
        dtype=torch.qint8,
        qscheme=torch.per_channel_symmetric,
        ch_axis=1,
    )


@pytest.mark.parametrize(
    "make", [PerTensor, PerChannel, _ao_per_tensor, _ao_per_channel], ids=lambda m: m.__name__
)
def test_fake_quantisation_is_right_on_other_shapes_in_both_runtimes(make, tmp_path):
    torch.manual_seed(0)
    model = make()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    path = _saved(traced, tmp_path)
    runs = [traced] + [tracebridge.load(path, runtime=rt) for rt in RUNTIMES]
    for rows in (5, 1, 9):
        x = torch.randn(rows, 4) * 3
        for run in runs:
            assert torch.equal(run(x), model(x))


def test_a_calibrated_fake_quantize_with_its_observer_on_updates_it_as_eager():
    """``FakeQuantize`` with the observer on: after one calibration call the observer's
    moving average and the quantisation parameters it writes follow eager on every call."""
    import torch.ao.quantization as tq

    torch.manual_seed(0)
    model = tq.FakeQuantize(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255)
    model(torch.randn(8, 4))
    eager = copy.deepcopy(model)
    traced = tracebridge.trace(model, torch.randn(4, 4))
    for rows in (3, 6, 2):
        x = torch.randn(rows, 4) * rows
        assert torch.equal(traced(x), eager(x))
    for name, value in eager.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name


def test_an_observer_that_never_ran_is_refused_on_the_next_call_not_wrong():
    """Its first call takes another branch (min and max still infinite): the trace guards
    it, so the second call raises GuardError instead of skipping the moving average."""
    import torch.ao.quantization as tq

    model = tq.FakeQuantize(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255)
    traced = tracebridge.trace(model, torch.randn(4, 4))
    traced(torch.randn(4, 4))  # tracing left the observer fresh: the traced branch holds
    with pytest.raises(tracebridge.GuardError, match="is True, but now it is False"):
        traced(torch.randn(4, 4))


def test_fake_quantisation_passes_gradients_as_eager():
    """Quantisation-aware training: the straight-through gradient flows through the trace."""
    model = PerChannel()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    x = (torch.randn(6, 4) * 3).requires_grad_()
    traced(x).sum().backward()
    expected = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    assert torch.equal(x.grad, expected)


def _crafted(tmp_path, model, example, op, edit):
    return rewrite_nodes(_saved(tracebridge.trace(model, example), tmp_path), op, edit)


def _arg(position, value):
    return lambda node: node["args"].__setitem__(position, value)


@pytest.mark.parametrize(
    "make, op, edit, words",
    [
        (
            PerChannel,
            "fake_quantize_per_channel_affine",
            _arg(4, 1.5),
            "argument 4 of fake_quantize_per_channel_affine must be int",
        ),
        (
            PerChannel,
            "fake_quantize_per_channel_affine",
            _arg(3, "1"),
            "argument 3 of fake_quantize_per_channel_affine must be dim",
        ),
        (
            PerTensor,
            "fake_quantize_per_tensor_affine",
            _arg(4, [255]),
            "argument 4 of fake_quantize_per_tensor_affine must be int",
        ),
    ],
)
def test_crafted_quantisation_arguments_are_refused_at_load(make, op, edit, words, tmp_path):
    path = _crafted(tmp_path, make(), torch.randn(3, 4), op, edit)
    with pytest.raises(tracebridge.ArtifactError, match=words):
        tracebridge.load(path)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "edit, words",
    [
        (_arg(4, 200), "`quant_min` should be less than or"),  # quant_min > quant_max
        (_arg(3, 0), "dimensions of scale and zero-point are not consistent"),  # axis 0: 5 rows
        (_arg(3, 7), "Dimension out of range"),
    ],
)
def test_crafted_quantisation_ranges_are_refused_before_the_kernel(edit, words, runtime, tmp_path):
    """The public kernels check these themselves (torch 2.13): the error names the op."""
    path = _crafted(
        tmp_path, PerChannel(), torch.randn(3, 4), "fake_quantize_per_channel_affine", edit
    )
    with pytest.raises(tracebridge.OpError, match=words):
        tracebridge.load(path, runtime=runtime)(torch.randn(5, 4))


# --- the default QAT fake quantiser: fused observer and fake quantisation ----------------------


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        import torch.ao.quantization as tq

        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.dequant(torch.relu(self.linear(self.quant(x))))


def _qat(observer_warm: bool = True) -> nn.Module:
    """A model prepared for quantisation-aware training with PyTorch's default x86 config:
    ``FusedMovingAvgObsFakeQuantize`` (per-tensor on activations, per-row on weights)."""
    import torch.ao.quantization as tq

    torch.manual_seed(0)
    model = Tiny().train()
    model.qconfig = tq.get_default_qat_qconfig("x86")
    tq.prepare_qat(model, inplace=True)
    if observer_warm:
        model(torch.randn(8, 4))
    return model


def _observer_state(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_default_qat_model_updates_its_observers_as_eager(mode, runtime, tmp_path):
    model = _qat()
    getattr(model, mode)()
    eager = copy.deepcopy(model)
    path = _saved(tracebridge.trace(model, torch.randn(3, 4)), tmp_path)
    loaded = tracebridge.load(path, runtime=runtime)
    for rows in (5, 2, 7):
        x = torch.randn(rows, 4) * 2
        assert torch.equal(loaded(x), eager(x))
    state = {k: v for k, v in loaded.state_dict().items()}
    for name, value in _observer_state(eager).items():
        assert torch.equal(state[name], value), name


def test_tracing_the_qat_model_leaves_its_observers_as_they_were():
    model = _qat()
    before = _observer_state(model)
    tracebridge.trace(model, torch.randn(3, 4), check_inputs=[(torch.randn(5, 4),)])
    after = _observer_state(model)
    assert all(torch.equal(after[k], v) for k, v in before.items())


def _fused_args(x, rows=None, **changes):
    """Arguments of fused_moving_avg_obs_fake_quant: per-tensor, or per-row with ``rows``."""
    n = 1 if rows is None else rows
    args = {
        "observer_on": torch.tensor([1]),
        "fake_quant_on": torch.tensor([1]),
        "running_min": torch.full((n,), float("inf")),
        "running_max": torch.full((n,), float("-inf")),
        "scale": torch.ones(n),
        "zero_point": torch.zeros(n, dtype=torch.int32),
        "averaging_const": 0.01,
        "quant_min": -128,
        "quant_max": 127,
        "ch_axis": 0 if rows else -1,
        "per_row_fake_quant": rows is not None,
        "symmetric_quant": rows is not None,
    }
    args.update(changes)
    return (x, *args.values())


@pytest.mark.parametrize(
    "args, words",
    [
        # empty per-tensor buffers crashed the process (torch 2.13, CPU)
        (
            _fused_args(torch.randn(4, 5), running_min=torch.ones(0), running_max=torch.ones(0)),
            "a per-tensor observer has one running_min",
        ),
        (
            _fused_args(torch.randn(4, 5), rows=4, scale=torch.ones(1)),
            "a per-row observer has 4 running_min",
        ),
        (
            _fused_args(
                torch.randn(4, 5), rows=4, running_min=torch.tensor([float("inf")]).expand(4)
            ),
            "running_min must be a contiguous torch.float32 tensor",
        ),
        (
            _fused_args(torch.randn(4, 5), zero_point=torch.zeros(1)),
            "zero_point must be a contiguous torch.int32 tensor",
        ),
        (_fused_args(torch.randn(4, 5), rows=4, ch_axis=1), "ch_axis must be 0 for a per-row"),
        (_fused_args(torch.randn(4, 5), ch_axis=-9), "ch_axis must be"),
        (_fused_args(torch.randn(4, 5), averaging_const=2.0), "averaging_const must be a number"),
        (_fused_args(torch.randn(4, 5), quant_min=200), "quant_min and quant_max must be"),
        (_fused_args(torch.randn(4, 5), observer_on=torch.ones(3)), "observer_on must be a one-e"),
        (_fused_args(torch.randn(4, 5).double()), "the input must be a float32 tensor"),
    ],
)
def test_the_checked_fused_quantiser_refuses_what_its_kernel_trusts(args, words):
    with pytest.raises(num.CheckFailed, match=words):
        num.fused_moving_avg_obs_fake_quant(*args)


@pytest.mark.parametrize("rows", [None, 4])
def test_the_checked_fused_quantiser_gives_the_kernels_result(rows):
    x = torch.randn(4, 5)
    mine, theirs = _fused_args(x, rows), _fused_args(x, rows)
    out = num.fused_moving_avg_obs_fake_quant(*mine)
    assert torch.equal(out, torch.fused_moving_avg_obs_fake_quant(*theirs))
    for a, b in zip(mine[3:7], theirs[3:7]):  # the observer buffers it wrote
        assert torch.equal(a, b)


def test_a_crafted_parameter_passed_as_observer_buffer_is_refused_at_load(tmp_path):
    """The fused op writes its running statistics and quantisation parameters: passed a
    parameter (the linear layer's weight) in their place, the file is refused."""

    path = _saved(tracebridge.trace(_qat(), torch.randn(3, 4)), tmp_path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        tensors = archive.read("tensors.safetensors")
    nodes = doc["methods"]["forward"]["nodes"]
    weight_ref = next(
        n["outputs"][0]["id"]
        for n in nodes
        if n["op"] == "prim.state" and n["args"] == ["linear.weight"]
    )
    last = [n for n in nodes if n["op"] == "fused_moving_avg_obs_fake_quant"][-1]
    last["args"][5] = {"ref": weight_ref}  # scale: the linear layer's weight
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", tensors)
    with pytest.raises(tracebridge.ArtifactError, match="writes parameter 'linear.weight'"):
        tracebridge.load(path)


# --- nn.Embedding(max_norm=...) -------------------------------------------------------------------


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(12, 5, max_norm=1.0)
        self.out = nn.Linear(5, 2)

    def forward(self, ids):
        return self.out(self.embed(ids)).sum(-2)


def _twins():
    torch.manual_seed(0)
    model = Lookup()
    with torch.no_grad():
        model.embed.weight.mul_(3)  # most rows past max_norm: the renorm has work to do
    return model, copy.deepcopy(model)


def test_embedding_max_norm_renormalises_the_weight_in_process_as_eager():
    model, eager = _twins()
    traced = tracebridge.trace(model, torch.randint(0, 12, (2, 3)))
    for shape in [(4, 5), (1, 7), (3, 2)]:
        ids = torch.randint(0, 12, shape)
        assert torch.equal(traced(ids), eager(ids))
        # the write reached the module's own weight, as eager's did
        assert torch.equal(model.embed.weight, eager.embed.weight)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_embedding_max_norm_renormalises_a_loaded_program_s_weight(runtime, tmp_path):
    model, eager = _twins()
    path = _saved(tracebridge.trace(model, torch.randint(0, 12, (2, 3))), tmp_path)
    eager_before = copy.deepcopy(eager)
    loaded = tracebridge.load(path, runtime=runtime)
    for shape in [(4, 5), (1, 7), (3, 2)]:
        ids = torch.randint(0, 12, shape)
        assert torch.equal(loaded(ids), eager(ids))
    weight = dict(loaded.named_parameters())["embed.weight"]
    assert torch.equal(weight, eager.embed.weight)
    assert not torch.equal(weight, eager_before.embed.weight)  # the rows did change
    # the file itself is untouched: a fresh load starts from the saved rows
    fresh = dict(tracebridge.load(path, runtime=runtime).named_parameters())["embed.weight"]
    assert torch.equal(fresh, eager_before.embed.weight)


def test_embedding_bag_max_norm_renormalises_as_eager(tmp_path):
    torch.manual_seed(0)
    model = nn.EmbeddingBag(10, 3, max_norm=1.0, mode="mean")
    with torch.no_grad():
        model.weight.mul_(3)
    eager = copy.deepcopy(model)
    traced = tracebridge.trace(model, torch.randint(0, 10, (2, 4)))
    assert torch.equal(model.weight, eager.weight)  # tracing put the rows back
    loaded = tracebridge.load(_saved(traced, tmp_path))
    for shape in [(3, 4), (1, 6)]:
        ids = torch.randint(0, 10, shape)
        assert torch.equal(loaded(ids), eager(ids))
    assert torch.equal(dict(loaded.named_parameters())["weight"], eager.weight)


def test_a_functional_max_norm_renormalises_the_weight_it_is_given(tmp_path):
    """``F.embedding(ids, w, max_norm=1)`` with ``w`` an input writes that input, as eager
    does (inputs are the caller's to have written)."""

    def lookup(ids, weight):
        return torch.nn.functional.embedding(ids, weight, max_norm=1.0).sum(1)

    weight = torch.randn(10, 3) * 3
    traced = tracebridge.trace(lookup, (torch.randint(0, 10, (4,)), weight.clone()))
    loaded = tracebridge.load(_saved(traced, tmp_path))
    mine, theirs, ids = weight.clone(), weight.clone(), torch.randint(0, 10, (6,))
    assert torch.equal(loaded(ids, mine), lookup(ids, theirs))
    assert torch.equal(mine, theirs) and not torch.equal(mine, weight)


def test_embedding_max_norm_trains_as_eager():
    model, eager = _twins()
    traced = tracebridge.trace(model, torch.randint(0, 12, (2, 3)))
    opt_t = torch.optim.SGD(model.parameters(), lr=0.5)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.5)
    for _ in range(3):
        ids = torch.randint(0, 12, (4, 3))
        for opt, fn in ((opt_t, traced), (opt_e, eager)):
            opt.zero_grad()
            fn(ids).pow(2).sum().backward()
            opt.step()
    assert torch.allclose(model.embed.weight, eager.embed.weight, atol=1e-6)


def _renorm_doc(tmp_path, edit):
    model, _ = _twins()
    return _crafted(tmp_path, model, torch.randint(0, 12, (2, 3)), "embedding_renorm_", edit)


@pytest.mark.parametrize(
    "edit, words",
    [
        (_arg(2, "1.0"), "argument 2 of embedding_renorm_ must be float"),
        (_arg(3, None), "argument 3 of embedding_renorm_ must be float"),
    ],
)
def test_crafted_renorm_arguments_are_refused_at_load(edit, words, tmp_path):
    path = _renorm_doc(tmp_path, edit)
    with pytest.raises(tracebridge.ArtifactError, match=words):
        tracebridge.load(path)


def test_a_renorm_of_a_view_of_the_weight_is_a_parameter_write_and_refused(tmp_path):
    """Only the parameter itself (or its detach, as F.embedding passes it) may be
    renormalised: through another view the write could reach other memory."""

    class Transposed(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 4))

        def forward(self, ids):
            with torch.no_grad():
                torch.embedding_renorm_(self.weight.t(), ids, 1.0, 2.0)
            return self.weight.sum()

    with pytest.raises(tracebridge.ArtifactError, match="embedding_renorm_ writes parameter"):
        tracebridge.trace(Transposed(), torch.tensor([1, 2])).save(tmp_path / "t.tb")


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(
    "edit, words",
    [
        (_arg(2, -1.0), "max_norm must be a positive finite number, not -1.0"),
        (_arg(3, 0.0), "norm_type must be a positive finite number"),
    ],
)
def test_crafted_renorm_values_are_refused_before_the_kernel(edit, words, runtime, tmp_path):
    path = _renorm_doc(tmp_path, edit)
    with pytest.raises(tracebridge.OpError, match=words):
        tracebridge.load(path, runtime=runtime)(torch.tensor([[1, 2]]))


@pytest.mark.parametrize(
    "call, words",
    [
        (
            lambda: num.embedding_renorm_(torch.randn(5, 3), torch.tensor([-1]), 1.0, 2.0),
            "indices must be within the 5 rows of the weight, not -1",
        ),
        (
            lambda: num.embedding_renorm_(torch.randn(5, 3), torch.tensor([5]), 1.0, 2.0),
            "not 5",
        ),
        (
            lambda: num.embedding_renorm_(torch.randn(5, 3), torch.tensor([1.0]), 1.0, 2.0),
            "indices must be an int64 or int32 tensor",
        ),
        (
            lambda: num.embedding_renorm_(torch.randn(5), torch.tensor([1]), 1.0, 2.0),
            "weight must be a 2-d floating tensor",
        ),
        (
            lambda: num.embedding_renorm_(torch.randn(5, 3), torch.tensor([1]), float("inf"), 2.0),
            "max_norm must be a positive finite number",
        ),
    ],
)
def test_the_checked_renorm_refuses_what_eager_embedding_never_passes(call, words):
    with pytest.raises(num.CheckFailed, match=words):
        call()


def test_the_checked_renorm_gives_the_kernels_result():
    weight = torch.randn(6, 3) * 4
    expected = weight.clone()
    ids = torch.tensor([[0, 2], [2, 5]])
    torch.embedding_renorm_(expected, ids, 1.5, 2.0)
    assert num.embedding_renorm_(weight, ids, 1.5, 2.0) is weight
    assert torch.equal(weight, expected)
