"""A traced result that was a ``torch.Size`` comes back as one (prober21b M5), in the
process and from a file; a tuple the code built from sizes stays a tuple."""

from __future__ import annotations

import importlib

import pytest
import torch

import tracebridge

from .graph_helpers import traced_by


def shapes(x):
    return x.shape, x.size(), x * 2, x.shape[1:], (x.shape[0], x.shape[1]), (x.size(),)


@pytest.mark.parametrize("how", ["codegen", "interpreter", "loaded"])
def test_a_size_output_is_a_torch_size_as_in_eager(tmp_path, how):
    traced = traced_by(how, shapes, torch.ones(3, 4), tmp_path)
    x = torch.ones(5, 2)
    got, expected = traced(x), shapes(x)
    assert [type(g) for g in got] == [type(e) for e in expected]
    assert type(got[5][0]) is torch.Size
    assert got[0] == expected[0] == torch.Size([5, 2]) and got[3] == torch.Size([2])


def test_a_size_input_is_still_the_same_call_as_a_tuple():
    def view(x, shape):
        return x.reshape(shape)

    traced = tracebridge.trace(view, (torch.ones(6), torch.Size([2, 3])))
    assert traced(torch.ones(6), (2, 3)).shape == (2, 3)


def test_a_file_marks_only_tuples_of_sizes():
    check = importlib.import_module("tracebridge.check.program")
    program = tracebridge.trace(lambda x: x.shape, torch.ones(2)).program
    assert program.methods["forward"].out_spec == {"t": "tuple", "size": True, "c": [{"t": "leaf"}]}
    check.check_program(program)
    for bad in (
        {"t": "tuple", "size": 1, "c": [{"t": "leaf"}]},
        {"t": "list", "size": True, "c": [{"t": "leaf"}]},
        {"t": "tuple", "size": True, "c": [{"t": "tuple", "c": [{"t": "leaf"}]}]},
    ):
        program.methods["forward"].out_spec = bad
        with pytest.raises(tracebridge.ArtifactError, match="size"):
            check.check_program(program)
