"""Traced with distinct tensors, called with one tensor twice by code that tests identity
(prober21b F3's other half): the call is refused, naming the parameters, where the trace
would have answered with the path for distinct tensors. Code that gives the same results
either way (nn.MultiheadAttention) keeps serving both calls."""

from __future__ import annotations

import importlib

import pytest
import torch

import tracebridge
from tracebridge import TraceError


def attend(query, key):
    if query is key:  # a self-attention fast path with other results
        return query * 3
    return query + key


class Attention(torch.nn.Module):
    def forward(self, query, key, mask=None):
        return attend(query, key)


@pytest.mark.parametrize("loaded", [False, True])
def test_one_tensor_twice_is_refused_where_the_code_tests_identity(tmp_path, loaded):
    x, y = torch.randn(3), torch.randn(3)
    traced = tracebridge.trace(attend, (x, y))
    if loaded:
        tracebridge.save(traced, tmp_path / "f.tb")
        traced = tracebridge.load(tmp_path / "f.tb")
    assert torch.equal(traced(x, y), attend(x, y))
    assert torch.equal(traced(x, x.clone()), attend(x, x.clone()))  # equal, distinct
    with pytest.raises(TraceError) as info:
        traced(x, x)  # eager: x * 3; the trace held x + x
    text = str(info.value)
    assert "the same tensor object as 'query' and 'key'" in text
    assert "key=query.clone()" in text and "if query is key:" in text
    with pytest.raises(TraceError, match="same tensor"):
        traced(key=x, query=x)  # by keyword too


def test_a_module_method_is_refused_too_and_other_inputs_are_free():
    model = Attention()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    traced = tracebridge.trace(model, (x, y))
    assert traced.program.methods["forward"].distinct_inputs == [[0, 1]]
    with pytest.raises(TraceError, match="'query' and 'key'"):
        traced(x, x)
    assert torch.equal(traced(y, x), model(y, x))


def test_code_with_the_same_results_for_one_tensor_keeps_serving_both_calls():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q, k, v = (torch.randn(2, 5, 8) for _ in range(3))
    traced = tracebridge.trace(mha, (q, k, v))
    assert traced.program.methods["forward"].distinct_inputs == []
    torch.testing.assert_close(traced(q, q, q)[0], mha(q, q, q)[0])

    def plain(a, b):
        return a * b

    traced = tracebridge.trace(plain, (q, k))
    assert traced.program.methods["forward"].distinct_inputs == []
    assert torch.equal(traced(q, q), q * q)


def test_a_path_that_raises_only_for_one_tensor_marks_the_group():
    def strict(a, b):
        if a is b:
            raise ValueError("pass two tensors")
        return a - b

    traced = tracebridge.trace(strict, (torch.ones(2), torch.zeros(2)))
    x = torch.ones(2)
    with pytest.raises(TraceError, match="same tensor object as 'a' and 'b'"):
        traced(x, x)


def test_a_file_names_only_groups_of_inputs():
    check = importlib.import_module("tracebridge.check.program")
    program = tracebridge.trace(attend, (torch.randn(3), torch.randn(3))).program
    check.check_program(program)
    graph = program.methods["forward"]
    for bad in ([[0]], [[0, 0]], [[0, 2]], [[0, -1]], [0, 1], [["0", 1]]):
        graph.distinct_inputs = bad
        with pytest.raises(tracebridge.ArtifactError, match="distinct_inputs"):
            check.check_program(program)


def test_the_identity_runs_are_part_of_the_check():
    """``check_trace=False`` skips the two runs per group (a trace without its check runs
    the code once, as torch.jit.trace's does) and records no group; the check records it."""
    x, y = torch.randn(3), torch.randn(3)
    unchecked = tracebridge.trace(attend, (x, y), check_trace=False)
    assert unchecked.program.methods["forward"].distinct_inputs in (None, [])
    checked = tracebridge.trace(attend, (x, y))
    assert checked.program.methods["forward"].distinct_inputs == [[0, 1]]
    model = Attention()
    unchecked = tracebridge.trace(model, (x, y), check_trace=False)
    assert unchecked.program.methods["forward"].distinct_inputs in (None, [])


def encoder_decoder(query, key, value):
    if key is value:  # one projection for key and value (another weight's path)
        return query + key * 3
    return query + key + value


def mixed(query, key, value):
    if query is key and key is not value:
        return query * 5
    return query + key + value


@pytest.mark.parametrize("loaded", [False, True])
def test_a_test_of_a_pair_within_three_inputs_marks_that_pair(tmp_path, loaded):
    """``query is key and key is not value``: one tensor at all three positions and distinct
    ones take the same path, so only the pair's own run tells; ``key is value`` is told
    by one tensor at all three already, and marks the whole group."""
    q, k, v = (torch.randn(3) for _ in range(3))
    traced = tracebridge.trace(encoder_decoder, (q, k, v))
    assert traced.program.methods["forward"].distinct_inputs == [[0, 1, 2]]
    traced = tracebridge.trace(mixed, (q, k, v))
    assert traced.program.methods["forward"].distinct_inputs == [[0, 1]]
    if loaded:
        tracebridge.save(traced, tmp_path / "f.tb")
        traced = tracebridge.load(tmp_path / "f.tb")
    assert torch.equal(traced(q, k, v), mixed(q, k, v))
    assert torch.equal(traced(q, k, k), mixed(q, k, k))  # the pair (key, value) is free
    with pytest.raises(TraceError, match="same tensor object as 'query' and 'key'"):
        traced(q, q, v)  # eager: q * 5; the trace held q + q + v
    with pytest.raises(TraceError, match="'query' and 'key'"):
        traced(q, q, q)  # the same path as distinct, but refused with the pair: safe


def test_a_pair_of_a_group_of_four_is_found_and_larger_groups_try_one_tensor_only():
    def two_pairs(a, b, c, d):
        if c is d and a is not b:
            return a - c
        return a + b + c + d

    inputs = tuple(torch.randn(2) for _ in range(4))
    traced = tracebridge.trace(two_pairs, inputs)
    assert traced.program.methods["forward"].distinct_inputs == [[2, 3]]
    a, b, c, _ = inputs
    with pytest.raises(TraceError, match="'c' and 'd'"):
        traced(a, b, c, c)
    assert torch.equal(traced(a, a, c, inputs[3]), two_pairs(a, a, c, inputs[3]))

    def five(a, b, c, d, e):
        return a - e if d is e and a is not b else a + b + c + d + e

    traced = tracebridge.trace(five, tuple(torch.randn(2) for _ in range(5)))
    assert traced.program.methods["forward"].distinct_inputs == []  # documented limit
