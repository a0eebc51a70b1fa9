"""Dict inputs and ``**kwargs`` read only by key accept their keys in any order (prober20b
m12); those the code iterates still refuse another order, naming the argument and both
orders (trace/key_reads.py). The graph's ``any_order`` is kept in the file, so a loaded
artifact answers the same.
"""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class KwargsByKey(nn.Module):
    def forward(self, **kw):
        scale = kw["scale"] if "scale" in kw else 1.0  # noqa: SIM401 - `in` is the subject
        return kw["a"] * 2 + kw.get("b") * scale + len(kw)


class DictByKey(nn.Module):
    def forward(self, x, batch):
        return x + batch["a"] * 2 - batch.get("b")


class DictIterated(nn.Module):
    def forward(self, x, batch):
        return x + torch.cat([v * (i + 1) for i, v in enumerate(batch.values())]).sum()


class KwargsIterated(nn.Module):
    def forward(self, **kw):
        return torch.stack(list(kw.values())).cumsum(0)


class KwargsPassedOn(nn.Module):
    def forward(self, **kw):
        return self.inner(**kw)

    def inner(self, **kw):
        return torch.stack([kw[k] for k in kw]).cumsum(0)


class NestedIterated(nn.Module):
    """The outer dict is read by key; the inner one is iterated: its order still counts."""

    def forward(self, batch):
        inner = batch["inner"]
        return batch["x"] + torch.stack(list(inner.values())).cumsum(0).sum()


def _three(model, *args, tmp_path, **kwargs):
    traced = tracebridge.trace(model, args, example_kwarg_inputs=kwargs or None)
    path = tmp_path / "m.tb"
    tracebridge.save(traced, path)
    return traced, tracebridge.load(path), tracebridge.load(path, runtime="interpreter")


a, b = torch.randn(3), torch.randn(3)


def test_kwargs_read_by_key_take_any_order(tmp_path):
    model = KwargsByKey()
    runners = _three(model, tmp_path=tmp_path, a=a, b=b)
    for run in runners:
        torch.testing.assert_close(run(b=b, a=a), model(b=b, a=a))
        torch.testing.assert_close(run(a=a, b=b), model(a=a, b=b))


def test_a_dict_read_by_key_takes_any_order(tmp_path):
    model = DictByKey()
    x = torch.randn(3)
    runners = _three(model, x, {"a": a, "b": b}, tmp_path=tmp_path)
    for run in runners:
        torch.testing.assert_close(run(x, {"b": b, "a": a}), model(x, {"b": b, "a": a}))
        torch.testing.assert_close(run(x, batch={"b": b, "a": a}), model(x, {"b": b, "a": a}))


@pytest.mark.parametrize("keyword", [False, True])
def test_an_iterated_dict_still_refuses_another_order(tmp_path, keyword):
    model = DictIterated()
    x = torch.randn(3)
    runners = _three(model, x, {"a": a, "b": b}, tmp_path=tmp_path)
    for run in runners:
        with pytest.raises(GuardError) as info:
            run(x, batch={"b": b, "a": a}) if keyword else run(x, {"b": b, "a": a})
        message = str(info.value)
        assert "['b', 'a']" in message and "['a', 'b']" in message
        assert "batch" in message or "argument 2" in message
        torch.testing.assert_close(run(x, {"a": a, "b": b}), model(x, {"a": a, "b": b}))


@pytest.mark.parametrize("model", [KwargsIterated(), KwargsPassedOn()], ids=type)
def test_iterated_kwargs_still_refuse_another_order(tmp_path, model):
    runners = _three(model, tmp_path=tmp_path, a=a, b=b)
    for run in runners:
        with pytest.raises(GuardError, match=r"\['b', 'a'\].*\['a', 'b'\]"):
            run(b=b, a=a)
        torch.testing.assert_close(run(a=a, b=b), model(a=a, b=b))


def test_a_dict_inside_a_free_dict_keeps_its_order(tmp_path):
    model = NestedIterated()
    batch = {"x": torch.randn(3), "inner": {"p": a, "q": b}}
    runners = _three(model, batch, tmp_path=tmp_path)
    for run in runners:
        outer_swapped = {"inner": {"p": a, "q": b}, "x": batch["x"]}
        torch.testing.assert_close(run(outer_swapped), model(outer_swapped))
        with pytest.raises(GuardError, match="'q', 'p'"):
            run({"x": batch["x"], "inner": {"q": b, "p": a}})


def test_the_file_names_the_free_parameters_and_an_older_file_refuses(tmp_path):
    traced = tracebridge.trace(DictByKey(), (torch.randn(3), {"a": a, "b": b}))
    path = tmp_path / "m.tb"
    tracebridge.save(traced, path)
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith("program.json")]
        program = json.loads(archive.read(names[0]))
    assert program["methods"]["forward"]["any_order"] == ["batch"]
    # a file without the field (made before it) refuses another order, as it did
    loaded = tracebridge.load(path)
    loaded._methods["forward"].graph.any_order = []
    with pytest.raises(GuardError, match="holding its keys in the order"):
        loaded(torch.randn(3), {"b": b, "a": a})
