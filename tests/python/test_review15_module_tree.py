"""Review of the module-tree watch (4bcf62e, runtime/module_tree.py): the calls that reach
a traced module's graphs past ``TracedModule.__call__`` check the tree and the sub-modules'
hooks too, and a tree recorded in mixed modes is not taken for one switched as a whole."""

import functools
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

X = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))


class TwoMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)

    def other(self, x):
        return self.lin(x) * 2


def _plus_100(module, inputs, output):
    return output + 100


@pytest.mark.parametrize("call", ["forward", "other"])
def test_methods_called_by_name_check_the_sub_modules_hooks(call):
    """``traced.other(x)`` and ``traced.forward(x)`` pass ``__call__``: they check the
    hooks of the sub-modules as a call does (a hook added since runs in eager, never in
    the graph)."""
    model = TwoMethods().eval()
    traced = tracebridge.trace_module(model, {"forward": (X,), "other": (X,)})
    torch.testing.assert_close(getattr(traced, call)(X), getattr(model, call)(X))
    model.lin.register_forward_hook(_plus_100)
    with pytest.raises(TraceError, match="sub-module 'lin' of this traced module has other hooks"):
        getattr(traced, call)(X)


def test_forward_called_by_name_checks_the_tree():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval()
    traced = tracebridge.trace(model, X)
    model[1] = nn.Tanh()
    with pytest.raises(TraceError, match="sub-module '1' of this traced module was replaced"):
        traced.forward(X)


def _compiled(model):
    from tracebridge.backends import compile as tb_compile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tb_compile(model, (X,), backend="reference")


def test_a_compiled_module_checks_the_tree_and_the_hooks():
    """CompiledModule's own call (no hooks, forward not mode-bound) goes straight to its
    method: it checks what a traced module's call checks."""
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval()
    compiled = _compiled(model)
    torch.testing.assert_close(compiled(X), model(X))
    model[1] = nn.Tanh()
    with pytest.raises(TraceError, match="sub-module '1' of this traced module was replaced"):
        compiled(X)

    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval()
    compiled = _compiled(model)
    model[1].register_forward_hook(_plus_100)
    with pytest.raises(TraceError, match="sub-module '1' of this traced module has other hooks"):
        compiled(X)


def _frozen_norm_model():
    """A model fine-tuned with its batch norm frozen: training mode, the norm in evaluation."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    model[1].running_mean.uniform_(-1, 1)
    model.train()
    model[1].eval()
    return model


@pytest.mark.parametrize("loaded", [False, True])
def test_a_frozen_norm_unfrozen_since_is_refused(tmp_path, loaded):
    """Traced with the batch norm frozen, then unfrozen (``model.bn.train()``): the tree
    is all in training mode, as the traced module is, but its training graph normalises
    by the running statistics; eager now uses the batch's. Not a tree switched as a
    whole: refused."""
    model = _frozen_norm_model()
    traced = tracebridge.trace(model, X)
    assert traced.program.module_modes == {"forward": {"": True, "1": False}}
    if loaded:
        traced.save(tmp_path / "m.tb")
        traced = tracebridge.load(tmp_path / "m.tb")
        model = traced
    torch.testing.assert_close(traced(X), model(X))  # frozen, as traced
    model._modules["1"].train()
    with pytest.raises(TraceError, match="sub-module '1' is in training mode"):
        traced(X)


def test_a_frozen_norm_model_runs_each_mode_in_the_modes_it_was_recorded_with():
    """The same model evaluated (the traced module's ``eval()``, which switches the shared
    sub-modules) runs the evaluation graph; back in training, the batch norm must be
    frozen again after ``train()``, as eager code does."""
    model = _frozen_norm_model()
    traced = tracebridge.trace(model, X, respect_mode=True)
    traced.eval()
    model.eval()
    torch.testing.assert_close(traced(X), model(X))
    traced.train()  # the batch norm trains too now: not what the training graph holds
    with pytest.raises(TraceError, match="sub-module '1' is in training mode"):
        traced(X)
    model.train()
    model[1].eval()  # frozen again, as traced
    torch.testing.assert_close(traced(X), model(X))


class HalvesInTraining:
    """A mixin that is no nn.Module: its code reads the mode of the module it is mixed in."""

    def drop(self, x):
        return x * 0.5 if self.training else x


class MixedIn(HalvesInTraining, nn.Module):
    def forward(self, x):
        return self.drop(x)


def _passes_through(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class Decorated(nn.Module):
    @_passes_through  # as transformers decorates forwards (can_return_tuple, ...)
    def forward(self, x):
        return x * 0.5 if self.training else x


def _halve_in_training(module, x):
    return x * 0.5 if module.training else x


class CallsAHelper(nn.Module):
    def forward(self, x):
        return _halve_in_training(self, x)


@pytest.mark.parametrize("cls", [MixedIn, Decorated, CallsAHelper])
def test_mode_read_by_a_mixin_a_wrapped_forward_or_a_helper_is_watched(cls):
    """A sub-module whose mode is read by a mixin's code, by the function a decorator
    wraps, or by a module-level helper its forward calls is watched like one whose own
    code reads it: switched on its own, the call is refused."""
    model = nn.Sequential(nn.Linear(3, 3), cls()).eval()
    traced = tracebridge.trace(model, X)
    assert traced.program.module_modes == {"forward": {"": False, "1": False}}
    model[1].train()
    with pytest.raises(TraceError, match="sub-module '1' is in training mode"):
        traced(X)


def test_a_sub_module_removed_without_a_registration_is_seen_at_the_next_one():
    """``del model[1]`` writes the table of sub-modules itself (no registration hook
    runs, and comparing every table's size on each call would cost about a microsecond on
    a ResNet-50): the removal is seen at the next registration anywhere."""
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3)).eval()
    traced = tracebridge.trace(model, X)
    del model[1]
    nn.Linear(2, 2)  # a module made anywhere registers its parameters, not sub-modules
    nn.Sequential(nn.Identity())  # this one registers a sub-module: the next call looks
    with pytest.raises(TraceError, match=r"sub-module '[12]' of this traced module was"):
        traced(X)


@pytest.mark.parametrize("how", ["save", "pickle", "deepcopy"])
def test_a_traced_module_whose_tree_changed_is_not_saved(tmp_path, how):
    """A save reads the state through the tree as it is now: with a sub-module replaced
    since, the file would hold the old graph over the new tree's tensors (ReLU's graph,
    the model now has Tanh) and serve it, silently, once loaded. Refused, as a call is."""
    import copy
    import pickle

    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2)).eval()
    traced = tracebridge.trace(model, X)
    model[1] = nn.Tanh()
    save = {
        "save": lambda: traced.save(tmp_path / "m.tb"),
        "pickle": lambda: pickle.dumps(traced),
        "deepcopy": lambda: copy.deepcopy(traced),
    }[how]
    with pytest.raises(TraceError, match="sub-module '1' of this traced module was replaced"):
        save()
