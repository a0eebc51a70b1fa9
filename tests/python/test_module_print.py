"""A loaded module prints like the original PyTorch module: its sub-modules with their
settings, from the file's module_classes and module_reprs (text, never code)."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import ArtifactError


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.act = nn.ReLU()
        self.body = nn.Sequential(nn.Flatten(), nn.Dropout(0.25), nn.Linear(4 * 6 * 6, 2))

    def forward(self, x):
        return self.body(self.act(self.conv(x)))


def _reloaded(traced):
    buffer = io.BytesIO()
    traced.save(buffer)
    return tracebridge.load(buffer.getvalue())


def test_a_loaded_module_prints_like_the_original():
    net = Net().eval()
    loaded = _reloaded(tracebridge.trace(net, torch.rand(2, 1, 8, 8)))
    lines = repr(loaded).splitlines()
    assert lines[0] == "Net("
    assert lines[1] == "  traced: forward"
    # Everything below the root reads as PyTorch prints the original.
    assert "\n".join(lines[2:]) == "\n".join(repr(net).splitlines()[1:])
    assert "(conv): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1))" in repr(loaded)
    assert "(act): ReLU()" in repr(loaded)  # a module without state is shown too
    assert list(loaded.state_dict()) == list(net.state_dict())


def test_the_root_settings_are_shown():
    loaded = _reloaded(tracebridge.trace(nn.Linear(3, 2), torch.rand(1, 3)))
    assert repr(loaded) == "Linear(in_features=3, out_features=2, bias=True, traced: forward)"


def test_settings_are_stored_as_data():
    traced = tracebridge.trace(Net().eval(), torch.rand(2, 1, 8, 8))
    assert traced.program.module_reprs["conv"] == "1, 4, kernel_size=(3, 3), stride=(1, 1)"
    assert "act" not in traced.program.module_reprs  # ReLU has no settings


class Odd(nn.Module):
    """A module whose extra_repr has control characters and one that raises."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def extra_repr(self):
        return "line one\nline two\x1b[31m"

    def forward(self, x):
        return self.fc(x)


class Broken(nn.Linear):
    def extra_repr(self):
        raise RuntimeError("no")


def test_extra_repr_is_made_one_line_and_failures_are_skipped():
    traced = tracebridge.trace(Odd(), torch.rand(1, 2))
    assert traced.program.module_reprs[""] == "line one line two [31m"
    traced = tracebridge.trace(Broken(2, 2), torch.rand(1, 2))
    assert "" not in traced.program.module_reprs
    assert repr(_reloaded(traced)).startswith("Broken(")


def _doc_with(module_reprs):
    from tracebridge.artifact import program_to_json

    traced = tracebridge.trace(nn.Linear(2, 2), torch.rand(1, 2))
    doc = program_to_json(traced.program)
    doc["module_reprs"] = module_reprs
    return doc


@pytest.mark.parametrize(
    "reprs, message",
    [
        ({"": "a\x1b[2Jb"}, "settings of module '' are not one line of text"),
        ({"": "x" * 5000}, "at most 4096 characters"),
        ({"fc/..": "x"}, "module path name 'fc/..' is not a dotted path"),
    ],
)
def test_the_checker_refuses_bad_settings(reprs, message):
    from tracebridge.artifact import check_document

    with pytest.raises(ArtifactError, match=message):
        check_document(_doc_with(reprs), "m.tb")


def test_a_file_naming_an_attribute_as_a_module_still_loads(tmp_path):
    """module_classes is for printing: a path that is an attribute of every module (or a
    state tensor) is left out, never replaces anything."""
    traced = tracebridge.trace(nn.Linear(2, 2).eval(), torch.rand(1, 2))
    traced.program.module_classes.update({"training": "Evil", "weight": "Evil"})
    loaded = _reloaded(traced)
    assert loaded.training is False and isinstance(loaded.weight, nn.Parameter)


class Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 2)
        )

    def forward(self, x):
        return self.body(x)


def _freeze_norms(model):
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
    return model


def test_a_loaded_sub_module_of_torch_answers_isinstance_as_the_original():
    """The usual fine-tuning loops dispatch on isinstance (prober17): on a loaded module
    they did nothing, and its batch norm trained on where the original's was frozen,
    silently. Now they reach the same modules; a mode the graphs were not recorded in is
    refused, and an initialisation through ``apply`` reaches the weights the graph reads."""
    torch.manual_seed(0)
    net = Frozen()
    loaded = _reloaded(tracebridge.trace(net, torch.rand(2, 3, 8, 8), respect_mode=True))
    kinds = [type(m) for m in net.modules()]
    assert [isinstance(m, k) for m, k in zip(loaded.modules(), kinds)][1:] == [True] * 6
    norm = dict(loaded.named_modules())["body.1"]
    assert isinstance(norm, nn.BatchNorm2d) and not isinstance(norm, nn.Conv2d)
    assert type(norm).__name__ == "ShownModule"  # still a placeholder
    _freeze_norms(loaded)
    assert norm.training is False
    with pytest.raises(tracebridge.TraceError, match="sub-module 'body.1' is in evaluation"):
        loaded(torch.rand(2, 3, 8, 8))
    loaded.eval()

    def zero_linear(m):
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)
            nn.init.ones_(m.bias)

    loaded.apply(zero_linear)
    assert torch.equal(loaded(torch.rand(2, 3, 8, 8)), torch.ones(2, 2))
    assert repr(loaded).splitlines()[2:] == repr(net).splitlines()[1:]


@pytest.mark.parametrize(
    ("named", "loads_as"),
    [
        ("os.system", "refused"),
        ("torch.nn.functional.F", None),  # names nothing torch has
        ("torch.nn.modules.linear.NotThere", None),
        ("torch.nn.functional.linear", None),  # not a class
        ("torch.nn.modules.linear.Linear", nn.Linear),
    ],
)
def test_a_file_naming_module_types_names_torch_classes_only(named, loads_as, tmp_path):
    traced = tracebridge.trace(nn.Sequential(nn.Linear(2, 2)).eval(), torch.rand(1, 2))
    traced.program.module_types["0"] = named
    if loads_as == "refused":  # the checker refuses what is not a torch.nn name
        with pytest.raises(ArtifactError, match="is not a class of torch.nn"):
            _reloaded(traced)
        return
    shown = dict(_reloaded(traced).named_modules())["0"]
    assert shown.__class__ is (loads_as or type(shown))
