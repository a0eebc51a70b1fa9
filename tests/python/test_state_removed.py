"""A state entry removed or set to None after tracing: every call names it and says to
trace again, with and without autograd (runtime/support.py, changed_state)."""

import io
import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import prune

import tracebridge
from tracebridge.errors import OpError, TraceError


@pytest.mark.parametrize("grad", [False, True])
def test_remove_weight_norm_after_tracing_names_the_gone_entry(grad):
    model = nn.Linear(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm's deprecation
        nn.utils.weight_norm(model)
        traced = tracebridge.trace(model, torch.randn(2, 4))
        nn.utils.remove_weight_norm(model)
    with torch.set_grad_enabled(grad), pytest.raises(OpError) as info:
        traced(torch.randn(5, 4))
    message = str(info.value)
    assert "'weight_v'" in message and "gone from its module" in message
    assert "trace again" in message and "inputs do not suit" not in message


def test_prune_remove_after_tracing_names_the_gone_entry():
    model = nn.Linear(4, 3)
    prune.l1_unstructured(model, "weight", amount=0.5)
    traced = tracebridge.trace(model, torch.randn(2, 4))
    prune.remove(model, "weight")
    with torch.no_grad(), pytest.raises(OpError, match="'weight_orig' .* gone from its module"):
        traced(torch.randn(5, 4))


@pytest.mark.parametrize("grad", [False, True])
def test_running_statistics_set_to_none_are_named(grad):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    traced = tracebridge.trace(model, torch.randn(1, 3, 8, 8))
    model[1].track_running_stats = False
    model[1].running_mean = None
    model[1].running_var = None
    with torch.set_grad_enabled(grad), pytest.raises(OpError) as info:
        traced(torch.randn(2, 3, 8, 8))
    assert "'1.running_mean'" in str(info.value) and "NoneType now" in str(info.value)


def test_a_failure_with_the_state_in_place_still_blames_the_inputs():
    traced = tracebridge.trace(nn.Linear(4, 3), torch.randn(2, 4))
    with pytest.raises(Exception) as info:
        traced(torch.randn(2, 4, dtype=torch.float64).to(torch.int64))
    assert "gone from its module" not in str(info.value)


@pytest.mark.parametrize("change", ["prune", "bias_none"])
def test_saving_after_the_state_changed_names_the_entry(change):
    model = nn.Sequential(nn.Linear(3, 3))
    traced = tracebridge.trace(model, torch.randn(2, 3))
    if change == "prune":
        prune.l1_unstructured(model[0], "weight", 0.5)
    else:
        model[0].bias = None
    name, now = ("'0.weight'", "gone") if change == "prune" else ("'0.bias'", "None now")
    with pytest.raises(TraceError, match=f"cannot save: the state entry {name} .* {now}"):
        traced.save(io.BytesIO())


def test_a_lazy_module_not_run_yet_is_named_with_what_to_do():
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.LazyLinear(4))
    with pytest.raises(TraceError, match=r"parameter '2.weight' of LazyLinear is not initialised"):
        tracebridge.trace(model, torch.randn(2, 3))
    model(torch.randn(2, 3))  # its first call gives it a shape: then it traces
    traced = tracebridge.trace(model, torch.randn(2, 3))
    x = torch.randn(4, 3)
    torch.testing.assert_close(traced(x), model(x))
