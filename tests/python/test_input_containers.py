"""Code that changes a container it was given (a dict, a list, a dataclass: an item set,
added, removed or reordered) is refused at trace time, naming the argument, the key or
index and the line, and the example's containers are left as they were
(trace/input_containers.py): a call of the trace would never change the caller's container
(prober20b F6). Writes into the tensors they hold are replayed, as before; an input
reshaped in place is replayed too, and the recording leaves the example's shape as it
was."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def at(text: str) -> str:
    """A pattern for ``at file:line`` of the line of this file that holds ``text``."""
    lines = Path(__file__).read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if text in line and "at(" not in line)
    return re.escape(f" at {__file__}:{number}:")


def step(x, state):  # a streaming model keeping its running state in the caller's dict
    h = state["h"] * 0.5 + x
    state["h"] = h
    return h * 2


def test_a_value_set_in_an_input_dict_is_refused_and_the_dict_left_as_it_was():
    state = {"h": torch.zeros(2)}
    kept = state["h"]
    with pytest.raises(
        TraceError,
        match=r"step\(\) changes its input dict 'state' \(key 'h' set\)" + at('state["h"] = h'),
    ) as info:
        tracebridge.trace(step, (torch.ones(2), state), strict=False)
    assert "return the new value instead" in str(info.value).lower()
    assert list(state) == ["h"] and state["h"] is kept
    assert torch.equal(kept, torch.zeros(2))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 3)

    def forward(self, batch):  # "batch dict in, outputs added, returned"
        batch["logits"] = self.fc(batch["x"])
        return batch


def test_the_batch_dict_style_is_refused_by_name_not_as_a_call_shaped_differently():
    batch = {"x": torch.ones(4, 2)}
    for check_trace in (True, False):
        with pytest.raises(
            TraceError, match=r"forward\(\) changes its input dict 'batch' \(key 'logits' added\)"
        ) as info:
            tracebridge.trace(Head(), (batch,), strict=False, check_trace=check_trace)
        assert "shaped differently" not in str(info.value)
        assert list(batch) == ["x"]


def test_list_items_replaced_added_or_removed_are_refused_and_put_back():
    def replace(xs):
        xs[0] = xs[0] * 3
        return xs[0] + 1

    def append(x, acc):
        acc.append(x * 2)
        return x + 1

    def pop(xs):
        return xs.pop() * 2

    first, second = torch.ones(2), torch.zeros(2)
    xs = [first, second]
    with pytest.raises(
        TraceError, match=r"input list 'xs' \(index 0 set\)" + at("xs[0] = xs[0] * 3")
    ):
        tracebridge.trace(replace, (xs,))
    assert xs[0] is first and xs[1] is second and len(xs) == 2
    acc: list = []
    with pytest.raises(
        TraceError, match=r"input list 'acc' \(item added at index 0\)" + at("acc.append(x * 2)")
    ):
        tracebridge.trace(append, (torch.ones(2), acc))
    assert acc == []
    with pytest.raises(
        TraceError, match=r"input list 'xs' \(item removed at index 1\)" + at("return xs.pop() * 2")
    ):
        tracebridge.trace(pop, (xs,))
    assert xs[0] is first and xs[1] is second and len(xs) == 2


def test_a_key_removed_or_the_keys_reordered_are_refused():
    def pop(d):
        return d.pop("a") * 2

    def reorder(d):
        value = d.pop("a")
        d["a"] = value
        return value + 1

    a, b = torch.ones(2), torch.zeros(2)
    d = {"a": a, "b": b}
    with pytest.raises(TraceError, match=r"input dict 'd' \(key 'a' removed\)"):
        tracebridge.trace(pop, (d,))
    assert list(d) == ["a", "b"] and d["a"] is a and d["b"] is b
    with pytest.raises(TraceError, match=r"input dict 'd' \(its keys reordered\)"):
        tracebridge.trace(reorder, (d,))
    assert list(d) == ["a", "b"] and d["a"] is a


def test_a_nested_container_a_keyword_input_and_a_dataclass_field():
    def nested(s):
        s["layers"][0] = s["layers"][0] + 1
        return s["layers"][0]

    def keyword(x, cache=None):
        cache["k"] = x * 2
        return x + 1

    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        y: torch.Tensor | None = None

    def field(batch):
        batch.y = batch.x * 2
        return batch.x + 1

    layer = torch.ones(2)
    s = {"layers": [layer]}
    with pytest.raises(
        TraceError, match=r"changes the list s\['layers'\] of its input 's' \(index 0 set\)"
    ):
        tracebridge.trace(nested, (s,))
    assert s["layers"][0] is layer
    cache: dict = {}
    with pytest.raises(TraceError, match=r"input dict 'cache' \(key 'k' added\)"):
        tracebridge.trace(keyword, (torch.ones(2),), example_kwarg_inputs={"cache": cache})
    assert cache == {}
    batch = Batch(torch.ones(2))
    with pytest.raises(TraceError, match=r"input Batch 'batch' \(field 'y' set\)"):
        tracebridge.trace(field, (batch,))
    assert batch.y is None


def _store(state, value):
    state["h"] = value  # in a helper: the line that made the value is named


def test_a_change_made_in_a_helper_names_the_line_that_made_the_value():
    def outer(x, state):
        h = x * 2
        _store(state, h)
        return h

    state: dict = {}
    with pytest.raises(TraceError, match=r"input dict 'state' \(key 'h' added\)" + at("h = x * 2")):
        tracebridge.trace(outer, (torch.ones(2), state))
    assert state == {}


def test_a_container_changed_and_put_back_by_the_code_is_traced():
    def scratch(xs):
        xs.append(xs[0] * 2)
        out = xs[-1] + 1
        xs.pop()
        return out

    xs = [torch.ones(2)]
    traced = tracebridge.trace(scratch, (xs,))
    assert len(xs) == 1
    call = [torch.full((3,), 2.0)]
    torch.testing.assert_close(traced(call), scratch([call[0]]))
    assert len(call) == 1


def test_writes_into_the_tensors_of_an_input_dict_are_still_replayed(tmp_path):
    def streaming(x, state):
        state["h"].mul_(0.5).add_(x)
        return state["h"] * 2

    traced = tracebridge.trace(streaming, (torch.ones(2), {"h": torch.zeros(2)}))
    traced.save(tmp_path / "s.tb")
    for runner in (traced, tracebridge.load(tmp_path / "s.tb")):
        eager_state, traced_state = {"h": torch.zeros(3)}, {"h": torch.zeros(3)}
        for _ in range(3):
            torch.testing.assert_close(
                runner(torch.ones(3), traced_state), streaming(torch.ones(3), eager_state)
            )
        torch.testing.assert_close(traced_state["h"], eager_state["h"])
        torch.testing.assert_close(traced_state["h"], torch.full((3,), 1.75))


@pytest.mark.parametrize(
    "reshape, example, call",
    [
        (lambda x: x.unsqueeze_(0), torch.ones(3), torch.arange(4.0)),
        (lambda x: x.squeeze_(), torch.ones(1, 3), torch.arange(5.0).view(1, 5)),
        (lambda x: x.t_(), torch.ones(2, 3), torch.arange(20.0).view(4, 5)),
    ],
)
def test_an_input_reshaped_in_place_keeps_the_example_s_shape_and_is_served(
    reshape, example, call, tmp_path
):
    def f(x):
        reshape(x)
        return x * 2 + x.shape[0]

    shape, stride = example.shape, example.stride()
    traced = tracebridge.trace(f, (example,))  # the check ran on the example as given
    assert example.shape == shape and example.stride() == stride
    traced.save(tmp_path / "r.tb")
    for runner in (traced, tracebridge.load(tmp_path / "r.tb")):
        mine, theirs = call.clone(), call.clone()
        torch.testing.assert_close(runner(mine), f(theirs))
        assert mine.shape == theirs.shape and mine.stride() == theirs.stride()
