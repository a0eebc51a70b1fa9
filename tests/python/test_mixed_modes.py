"""A module whose sub-modules are in mixed training modes, traced with respect_mode=True.

A model fine-tuned with its batch norms frozen (``model.train(); model.bn.eval()``) and a
model evaluated with one dropout left on (Monte Carlo dropout: ``net.eval(); net[1].train()``)
were recorded with every sub-module switched to the model's mode: the frozen batch norm ran
on batch statistics and moved its running statistics, silently. The graph of the model's
own mode now keeps the sub-modules' modes as they are; ``train()`` and ``eval()`` of the
traced module switch to graphs with every sub-module in that mode, as ``Module.train`` does.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import TraceError, TracerWarning


class FrozenNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.linear(x)))


def _model():
    torch.manual_seed(0)
    model = FrozenNorm()
    model.bn.running_mean.uniform_()
    model.bn.running_var.uniform_(0.5, 2.0)
    return model


def _same_draws(fn, *args):
    torch.manual_seed(3)
    return fn(*args)


def test_a_frozen_batch_norm_stays_frozen_in_the_training_graph(tmp_path):
    model = _model()
    model.train()
    model.bn.eval()
    reference = copy.deepcopy(model)
    x = torch.randn(6, 4)
    with pytest.warns(TracerWarning, match="sub-modules in the other mode \\(bn\\)"):
        traced = tracebridge.trace(model, (x,), respect_mode=True)
    path = tmp_path / "frozen.tb"
    traced.save(str(path))
    for runner in (traced, tracebridge.load(str(path))):
        other = torch.randn(5, 4)
        torch.testing.assert_close(
            _same_draws(runner, other), _same_draws(reference, other), rtol=0, atol=0
        )
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean, rtol=0, atol=0)
    assert model.training and not model.bn.training  # the user's modes are left as they were


def test_eval_runs_every_sub_module_in_evaluation_and_train_the_modes_traced():
    model = _model()
    model.train()
    model.bn.eval()
    x = torch.randn(6, 4)
    with pytest.warns(TracerWarning, match=r"eval\(\) on the traced module runs a graph"):
        traced = tracebridge.trace(model, (x,), respect_mode=True)
    as_traced = copy.deepcopy(model)
    reference = copy.deepcopy(model).eval()
    traced.eval()
    torch.testing.assert_close(traced(x), reference(x), rtol=0, atol=0)
    traced.train()  # switches every sub-module, as Module.train() does: the batch norm too
    with pytest.raises(TraceError, match="sub-module 'bn' is in training mode"):
        traced(x)  # the training graph has it frozen: refused until it is frozen again
    model.bn.eval()  # frozen again, as eager code does after train()
    torch.testing.assert_close(_same_draws(traced, x), _same_draws(as_traced, x), rtol=0, atol=0)


def test_a_dropout_left_on_in_an_evaluated_model_is_recorded_on():
    model = _model().eval()
    model.drop.train()  # Monte Carlo dropout
    x = torch.randn(6, 4)
    with pytest.warns(TracerWarning, match="sub-modules in the other mode \\(drop\\)"):
        traced = tracebridge.trace(model, (x,), respect_mode=True)
    torch.testing.assert_close(_same_draws(traced, x), _same_draws(model, x), rtol=0, atol=0)
    assert not torch.equal(_same_draws(traced, x), model.linear(x))  # dropout did drop


def test_uniform_modes_trace_without_a_warning(recwarn):
    model = _model().eval()
    tracebridge.trace(model, (torch.randn(6, 4),), respect_mode=True)
    assert not [w for w in recwarn if issubclass(w.category, TracerWarning)]
