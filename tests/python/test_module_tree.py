"""A traced module refuses a call once its module tree is not the one its graphs were
recorded from: a sub-module replaced, added or removed, or in another mode than the graph
the call runs was recorded with (runtime/module_tree.py). The traced module's own
train()/eval() switch its sub-modules, as Module.train() does."""

import pickle

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import ArtifactError, GuardError, TraceError
from tracebridge.runtime.module_tree import mode_reading_paths

from .graph_helpers import rewrite_document

X = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))


def _eval_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Dropout(0.0), nn.ReLU())
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    return model.eval()


def _traced_and_loaded(model, tmp_path):
    traced = tracebridge.trace(model, torch.randn(4, 3))
    path = tmp_path / "m.tb"
    traced.save(path)
    return traced, tracebridge.load(path)


def test_only_sub_modules_that_read_their_mode_are_watched():
    model = _eval_model()
    # the batch norm reads self.training; Linear and ReLU do not; a dropout of
    # probability 0 gives the same values in both modes
    assert mode_reading_paths(model) == {"1": False}
    model[2].p = 0.5
    assert mode_reading_paths(model) == {"1": False, "2": False}


def test_a_sub_module_switched_on_its_own_is_refused(tmp_path):
    model = _eval_model()
    traced, loaded = _traced_and_loaded(model, tmp_path)
    modes = {"forward": {"": False, "1": False}}
    assert traced.program.module_modes == loaded.program.module_modes == modes
    model[1].train()  # fine-tuning one batch norm: eager now uses batch statistics
    with pytest.raises(TraceError, match=r"sub-module '1' is in training mode") as info:
        traced(X)
    assert not isinstance(info.value, GuardError)
    assert "Put it back (.eval())" in str(info.value)
    model[1].eval()
    assert torch.equal(traced(X), model(X))  # back as traced: runs again
    loaded._modules["1"].train()  # a loaded module's sub-modules are watched alike
    with pytest.raises(TraceError, match="recorded with it in evaluation mode"):
        loaded(X)
    loaded._modules["1"].eval()
    torch.testing.assert_close(loaded(X), model(X))


def test_the_original_switched_as_a_whole_is_refused_where_the_graph_differs():
    model = _eval_model()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    expected = model(X)
    model.train()  # the shared batch norm now trains: the evaluation graph would not
    with pytest.raises(TraceError, match="sub-module '1' is in training mode"):
        traced(X)
    traced.eval()  # switches the sub-modules, as Module.eval() does
    assert not model[1].training and model.training  # the original's own flag stays
    assert torch.equal(traced(X), expected)


class _ModeBranch(nn.Module):
    """Reads its mode, for nothing that changes the result."""

    def forward(self, x):
        return x * 2 if self.training or not self.training else x


def test_a_graph_the_other_mode_records_alike_serves_the_whole_tree_in_it():
    model = nn.Sequential(nn.Linear(3, 3), _ModeBranch()).eval()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    assert traced.program.module_modes["forward"] == {"": False, "1": False}
    assert "forward" not in traced.program.mode_bound
    model.train()  # every watched sub-module in the other mode: the same graph
    torch.testing.assert_close(traced(X), model(X))
    model[1].eval()
    model[0].train()
    model.add_module("2", _ModeBranch().train())  # now mixed: refused (added, first)
    with pytest.raises(TraceError, match="added"):
        traced(X)


def test_a_replaced_sub_module_is_refused(tmp_path):
    model = _eval_model()
    traced, loaded = _traced_and_loaded(model, tmp_path)
    model[3] = nn.Tanh()  # on the original: eager now runs the Tanh
    with pytest.raises(TraceError, match=r"sub-module '3' .* was replaced .*now Tanh"):
        traced(X)
    setattr(loaded, "3", nn.Tanh())
    with pytest.raises(TraceError, match="was replaced"):
        loaded(X)


def test_a_deeper_replacement_and_an_addition_are_refused():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), nn.Linear(3, 2)).eval()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    model[0][1] = nn.GELU()
    with pytest.raises(TraceError, match=r"sub-module '0.1' .* replaced .*GELU"):
        traced(X)
    model[0][1] = traced_relu = nn.ReLU()  # another ReLU object is still another module
    with pytest.raises(TraceError, match="replaced"):
        traced(X)
    assert traced_relu is model[0][1]
    other = tracebridge.trace(model, torch.randn(4, 3))
    assert torch.equal(other(X), model(X))
    model.add_module("extra", nn.Identity())
    with pytest.raises(TraceError, match=r"sub-module 'extra' .* was added"):
        other(X)


def test_a_removed_sub_module_is_refused_once_the_tree_is_walked():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2)).eval()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    del model[1]
    model.add_module("new", nn.Identity())  # any registration makes the next call look
    with pytest.raises(TraceError, match=r"sub-module .[12]. .* was (removed|replaced)"):
        traced(X)


def test_unrelated_registrations_cost_one_walk_and_change_nothing():
    model = _eval_model()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    nn.Sequential(nn.Linear(2, 2))  # registers sub-modules elsewhere
    assert torch.equal(traced(X), model(X))
    assert torch.equal(traced(X), model(X))


def test_other_methods_check_the_tree_too():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(x)

        def other(self, x):
            return self.bn(x) * 2

    torch.manual_seed(0)
    model = Two().eval()
    traced = tracebridge.trace_module(
        model, {"forward": torch.randn(4, 3), "other": torch.randn(4, 3)}
    )
    torch.testing.assert_close(traced.other(X), model.other(X))
    model.bn.train()  # the root stays in evaluation: switched on its own
    with pytest.raises(TraceError, match="sub-module 'bn'"):
        traced.other(X)


def test_a_pickled_module_keeps_watching():
    model = _eval_model()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    copy = pickle.loads(pickle.dumps(traced))
    assert copy.program.module_modes == {"forward": {"": False, "1": False}}
    copy._modules["1"].train()
    with pytest.raises(TraceError, match="recorded with it in evaluation mode"):
        copy(X)


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        ({"forward": {"1": "yes"}}, "module_modes"),
        ({"other": {"1": True}}, "does not have"),
        ({"forward": {"a b": True}}, "module path"),
        ({"forward": ["1"]}, "module_modes"),
        (["1"], "module_modes"),
    ],
)
def test_a_file_with_bad_module_modes_is_refused(tmp_path, modes, message):
    traced = tracebridge.trace(_eval_model(), torch.randn(4, 3))
    traced.save(tmp_path / "m.tb")

    def change(doc):
        doc["module_modes"] = modes
        doc["tensors"].pop("sha256", None)

    rewrite_document(tmp_path / "m.tb", change)
    with pytest.raises(ArtifactError, match=message):
        tracebridge.load(tmp_path / "m.tb")


def test_a_file_without_module_modes_loads_and_still_watches_replacements(tmp_path):
    model = _eval_model()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    traced.save(tmp_path / "m.tb")
    rewrite_document(tmp_path / "m.tb", lambda doc: doc.pop("module_modes"))
    loaded = tracebridge.load(tmp_path / "m.tb")
    assert loaded.program.module_modes == {}
    loaded._modules["1"].train()  # not recorded in the file: not read
    torch.testing.assert_close(loaded(X), model(X))
    setattr(loaded, "3", nn.Tanh())
    with pytest.raises(TraceError, match="replaced"):
        loaded(X)


def test_modules_traced_in_training_mode_are_watched_alike():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).train()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    assert traced.program.module_modes == {"forward": {"": True, "1": True}}
    model[1].eval()  # frozen after tracing: eager now uses the running statistics
    with pytest.raises(TraceError, match="sub-module '1' is in evaluation mode"):
        traced(X)


class _FlagAsProperty(nn.Module):
    """A module whose ``training`` is a property over a flag of its own."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)
        assert "training" not in self.__dict__  # Module.__init__ went through the setter

    @property
    def training(self):
        return self.__dict__["_mode"]

    @training.setter
    def training(self, value):
        self.__dict__["_mode"] = value

    def forward(self, x):
        return self.bn(x) * (2 if self.training else 1)


def test_a_training_property_is_read_as_an_attribute():
    torch.manual_seed(0)
    model = nn.Sequential(_FlagAsProperty(), nn.ReLU()).eval()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    assert traced.program.module_modes == {"forward": {"": False, "0": False, "0.bn": False}}
    assert torch.equal(traced(X), model(X))
    model[0].training = True
    with pytest.raises(TraceError, match="sub-module '0' is in training mode"):
        traced(X)


def test_a_module_added_to_the_traced_module_is_not_added_to_the_original():
    model = _eval_model()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    traced.criterion = nn.MSELoss()  # bookkeeping on the traced module
    assert "criterion" not in model._modules
    assert torch.equal(model(X), traced(X))


def test_a_sub_module_replaced_on_the_traced_module_itself_is_refused():
    """prober23a F1: ``traced.layer = other`` replaced it in the traced module's own table,
    not in the original's, and the graphs went on running the old layer silently."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 2))).eval()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    setattr(traced, "0", nn.Linear(3, 3))
    with pytest.raises(TraceError, match=r"sub-module '0' .* was replaced .*now Linear"):
        traced(X)
    setattr(traced, "0", model[0])  # put back: the tree the graphs were recorded with
    assert torch.equal(traced(X), model(X))
    del traced._modules["1"]
    traced.criterion = nn.MSELoss()  # bookkeeping, allowed; a registration: the tree is walked
    with pytest.raises(TraceError, match=r"sub-module '1(.0|.1)?' .* was removed"):
        traced(X)


@pytest.mark.parametrize("how", ["register", "weight_norm", "orthogonal"])
def test_a_loaded_sub_module_refuses_a_parametrization_and_changes_nothing(tmp_path, how):
    """prober23a F3: parametrize on a loaded sub-module raised an AttributeError from inside
    torch (its __class__ has no setter), after the weight was already taken out (and, with
    a right_inverse, rewritten in place). It is refused at parametrize's first read."""
    from torch.nn.utils import parametrize
    from torch.nn.utils.parametrizations import orthogonal, weight_norm

    model = _eval_model()
    _, loaded = _traced_and_loaded(model, tmp_path)
    before = loaded(X)
    weight = getattr(loaded, "0").weight.detach().clone()
    apply = {
        "register": lambda m: parametrize.register_parametrization(m, "weight", nn.Identity()),
        "weight_norm": weight_norm,
        "orthogonal": orthogonal,
    }[how]
    with pytest.raises(TraceError, match=r"sub-module of a loaded module \(Linear\) cannot be"):
        apply(getattr(loaded, "0"))
    assert not parametrize.is_parametrized(getattr(loaded, "0"))
    assert torch.equal(getattr(loaded, "0").weight, weight) and torch.equal(loaded(X), before)
