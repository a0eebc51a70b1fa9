"""A traced size copied (``copy.deepcopy`` of a shape list before editing it), asked
whether it is a torch.Size, or put into a torch.Size built by hand stays traced
(trace/numbers.py, trace/patches.py; prober19 F9): before, the copy was a plain int, and
``torch.Size([n, 4]).numel()`` read the sizes in C, so a branch on either was served for
every size with the example's answer, silently."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch

import tracebridge
from tracebridge import GuardError

from .graph_helpers import loaded as saved_and_loaded


def deep_copied_size(x):
    return x * (5.0 if copy.deepcopy(x.shape[0]) == 12 else 1.0)


def deep_copied_shape_list(x):
    shape = copy.deepcopy(list(x.shape))
    shape[0] = shape[0] * 2
    return x.new_zeros(shape)[: x.shape[0]] + x * (5.0 if shape[0] == 24 else 1.0)


def copied_dict_of_sizes(x):
    return x * (5.0 if copy.copy({"n": x.shape[0]})["n"] == 12 else 1.0)


@dataclasses.dataclass
class Shape:
    n: int
    c: int


def shape_as_dict(x):
    return x * (5.0 if dataclasses.asdict(Shape(*x.shape))["n"] == 12 else 1.0)


def size_of_a_shape(x):
    return x * (5.0 if torch.Size(x.shape).numel() == 48 else 1.0)


def size_by_hand(x):
    return x * (5.0 if torch.Size([x.shape[0], 4]).numel() == 48 else 1.0)


def numel_as_a_factor(x):
    return x * float(torch.Size([x.shape[0], 4]).numel())


def size_slices_and_sums(x):
    shape = torch.Size([x.shape[0], 4])[1:] + (x.shape[0],)
    assert isinstance(shape, torch.Size)
    return x.new_ones(shape).sum() + x


def is_a_size(x):
    return x * 2 if isinstance(x.shape, torch.Size) else x * 3


@pytest.mark.parametrize(
    "fn",
    [
        deep_copied_size,
        deep_copied_shape_list,
        copied_dict_of_sizes,
        shape_as_dict,
        size_of_a_shape,
        size_by_hand,
    ],
)
def test_a_copied_or_rebuilt_size_that_decides_is_guarded(fn, tmp_path):
    traced = tracebridge.trace(fn, torch.ones(2, 4))
    for obj in (traced, saved_and_loaded(traced, tmp_path)):
        for n in (2, 3, 5):
            x = torch.rand(n, 4)
            assert torch.equal(obj(x), fn(x))
        with pytest.raises(GuardError):
            obj(torch.rand(12, 4))


@pytest.mark.parametrize("fn", [numel_as_a_factor, size_slices_and_sums, is_a_size])
def test_a_size_built_by_hand_stays_general(fn, tmp_path):
    traced = tracebridge.trace(fn, torch.ones(2, 4))
    for obj in (traced, saved_and_loaded(traced, tmp_path)):
        for n in (2, 7, 12):
            x = torch.rand(n, 4)
            torch.testing.assert_close(obj(x), fn(x))


def test_a_pickled_size_is_guarded():
    def by_bytes(x):
        return x * (5.0 if pickle.dumps(x.shape[0]) == pickle.dumps(12) else 1.0)

    traced = tracebridge.trace(by_bytes, torch.ones(2, 4))
    assert torch.equal(traced(torch.ones(2, 4)), by_bytes(torch.ones(2, 4)))
    with pytest.raises(GuardError, match="pickle.dumps"):
        traced(torch.ones(12, 4))
