"""Messages name what the user wrote, never the graph's value ids (prober20a F5).

A guard on a value that came from one output of a multi-output op (``a, b = x.chunk(2)``)
named it ``%1``; it is ``chunk(x, 2)[0]`` now. A module with parameters constructed
inside ``forward`` is refused at its line, with what to do, where the refusal came from
deep inside its initialisation (``cannot record Tensor.normal_``).
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")

_VALUE_ID = re.compile(r"%\d")


class Chunked(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2)
        if a.sum() > 0:
            return b * 2
        return b + 1


class Unbound(nn.Module):
    def forward(self, x):
        values, _ = x.max(dim=1)
        if values[0] > 0:
            return x * 2
        return x - 1


@pytest.mark.parametrize(
    ("model", "named"),
    [(Chunked(), "chunk(x, 2)[0]"), (Unbound(), "max(x, 1)[0]")],
    ids=["chunk", "max"],
)
def test_a_guard_on_one_output_of_several_names_the_call(tmp_path, model, named):
    x = torch.ones(4, 3)
    traced = tracebridge.trace(model, x)
    tracebridge.save(traced, tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    torch.testing.assert_close(loaded(x), model(x))
    for run in (traced, loaded):
        with pytest.raises(GuardError) as info:
            run(-x)
        message = str(info.value)
        assert named in message
        assert not _VALUE_ID.search(message), message


class EmbeddingInForward(nn.Module):
    def forward(self, ids):
        emb = nn.Embedding(100, 8)
        return emb(ids)


class Scale(nn.Module):
    def __init__(this, n):  # noqa: N805 - not named self, on purpose
        super().__init__()
        this.w = nn.Parameter(torch.randn(n))

    def forward(this, x):  # noqa: N805
        return x * this.w


class OwnModuleInForward(nn.Module):
    def forward(self, x):
        return Scale(4)(x)


def test_an_embedding_constructed_in_forward_is_refused_naming_it_and_the_fix():
    with pytest.raises(TraceError) as info:
        tracebridge.trace(EmbeddingInForward(), torch.randint(0, 100, (2, 5)))
    message = str(info.value)
    assert "a module (Embedding) is constructed inside the traced code" in message
    line = EmbeddingInForward.forward.__code__.co_firstlineno + 1
    assert f"test_message_names.py:{line}" in message
    assert "__init__" in message
    assert "normal_" not in message


def test_a_user_module_constructed_in_forward_is_refused_at_the_constructing_line():
    with pytest.raises(TraceError) as info:
        tracebridge.trace(OwnModuleInForward(), torch.randn(2, 4))
    line = OwnModuleInForward.forward.__code__.co_firstlineno + 1
    assert f"test_message_names.py:{line}" in str(info.value)
    assert "(Scale)" in str(info.value)


class StatelessInForward(nn.Module):
    def forward(self, x):
        return nn.ReLU()(x) + nn.Identity()(x)


def test_modules_without_parameters_made_in_forward_are_traced(tmp_path):
    model = StatelessInForward()
    traced = tracebridge.trace(model, torch.randn(2, 4))
    x = torch.randn(3, 4)
    torch.testing.assert_close(traced(x), model(x))


def test_modules_made_outside_a_trace_are_not_refused():
    nn.Embedding(10, 2)  # the hook is in only while tracing
    tracebridge.trace(StatelessInForward(), torch.randn(2, 4))
    nn.Linear(2, 2)
