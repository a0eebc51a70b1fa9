"""A sub-module whose code is swapped after tracing is noticed (prober20b F11).

``model.block.forward = other`` (a monkey-patch on the instance) or ``model.block.__class__
= Other`` changes what eager code runs; the graph holds what the old code did. The call's
check stays the one counter compare it was (runtime/module_tree.py): setting ``forward``
or ``__class__`` on a module moves it, and the walk then compares each sub-module's class
and instance ``forward`` with those of trace time.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class Doubled(Block):
    def forward(self, x):
        return self.lin(x) * 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) + 1


def _traced():
    model = Net()
    x = torch.randn(2, 4)
    return model, tracebridge.trace(model, x), x


def test_a_forward_set_on_a_sub_module_is_refused_naming_it():
    model, traced, x = _traced()
    torch.testing.assert_close(traced(x), model(x))
    model.block.forward = lambda x: x - 100
    with pytest.raises(TraceError, match="sub-module 'block'.*forward was set on the instance"):
        traced(x)
    with pytest.raises(TraceError, match="forward was set"):
        traced.forward(x)  # the other way in checks the tree too
    del model.block.forward  # put back: served again, as eager
    torch.testing.assert_close(traced(x), model(x))


def test_a_class_changed_on_a_sub_module_is_refused_naming_it():
    model, traced, x = _traced()
    model.block.__class__ = Doubled
    with pytest.raises(TraceError, match="class was changed from Block to Doubled"):
        traced(x)
    model.block.__class__ = Block
    torch.testing.assert_close(traced(x), model(x))


def test_a_forward_set_before_tracing_and_taken_off_after_is_refused():
    model = Net()
    model.block.forward = lambda x: x * 3
    x = torch.randn(2, 4)
    traced = tracebridge.trace(model, x)
    torch.testing.assert_close(traced(x), model(x))
    del model.block.forward
    with pytest.raises(TraceError, match="taken off the instance"):
        traced(x)


def test_a_deep_sub_module_is_watched_too():
    model, traced, x = _traced()
    model.block.lin.forward = lambda x: x
    with pytest.raises(TraceError, match="sub-module 'block.lin'"):
        traced(x)


def test_a_traced_function_refuses_a_called_module_with_other_code():
    model = Net()
    x = torch.randn(2, 4)
    traced = tracebridge.trace(lambda x: model(x) * 2, x)
    torch.testing.assert_close(traced(x), model(x) * 2)
    model.block.forward = lambda x: x - 100
    with pytest.raises(TraceError, match="a Block that runs other code now"):
        traced(x)
    del model.block.forward
    torch.testing.assert_close(traced(x), model(x) * 2)


def test_a_loaded_module_watches_its_sub_modules(tmp_path):
    model, traced, x = _traced()
    tracebridge.save(traced, tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    torch.testing.assert_close(loaded(x), model(x))
    loaded.block.forward = lambda x: x
    with pytest.raises(TraceError, match="sub-module 'block'"):
        loaded(x)


def test_other_attributes_set_on_sub_modules_are_served():
    model, traced, x = _traced()
    model.block.note = "kept"  # not code: no refusal
    model.block.lin.extra = 3
    torch.testing.assert_close(traced(x), model(x))
