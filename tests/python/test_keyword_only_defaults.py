"""A keyword-only parameter given its default explicitly is the traced call, as a
positional-or-keyword one is (prober21b M1): in the process and from a file."""

from __future__ import annotations

import importlib

import pytest
import torch

import tracebridge
from tracebridge import TraceError

_TABLE = object()  # a default no file holds


class Masked(torch.nn.Module):
    def forward(self, x, mask=None, *, bias=None, scale=2.0, tag="a"):
        if mask is None and bias is None:
            return x * scale
        return x


@pytest.mark.parametrize("loaded", [False, True])
def test_a_keyword_only_default_passed_explicitly_is_the_traced_call(tmp_path, loaded):
    model = Masked()
    x = torch.randn(2, 3)
    traced = tracebridge.trace(model, x)
    if loaded:
        tracebridge.save(traced, tmp_path / "m.tb")
        traced = tracebridge.load(tmp_path / "m.tb")
    for kwargs in (
        {"mask": None},
        {"bias": None},
        {"scale": 2.0},
        {"tag": "a"},
        {"bias": None, "mask": None},
    ):
        assert torch.equal(traced(x, **kwargs), model(x, **kwargs)), kwargs
    # another value is still refused: the trace holds the path for the default
    for kwargs in ({"bias": torch.ones(3)}, {"scale": 3.0}, {"scale": 2}, {"tag": "b"}):
        with pytest.raises(TraceError):
            traced(x, **kwargs)


def test_the_graph_records_only_holdable_keyword_only_defaults_left_out():
    def f(x, *, bias=None, scale=2.0, table=_TABLE, given=1):
        return x * scale

    traced = tracebridge.trace(f, torch.ones(2), example_kwarg_inputs={"given": 1})
    graph = traced.program.methods["forward"]
    assert graph.keyword_defaults == {"bias": {"t": "none"}, "scale": {"t": "const", "v": 2.0}}


def test_a_file_names_only_keyword_only_parameters_left_out():
    check = importlib.import_module("tracebridge.check.program")
    program = tracebridge.trace(Masked(), torch.randn(2, 3)).program
    check.check_program(program)
    graph = program.methods["forward"]
    for bad in ({"x": {"t": "none"}}, {"bias": None}, {"bias": {"t": "const", "v": [1]}}):
        graph.keyword_defaults = bad
        with pytest.raises(tracebridge.ArtifactError, match="default"):
            check.check_program(program)
