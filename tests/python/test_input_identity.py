"""One tensor passed at several input positions (prober21b F3): code that branches on the
identity of its inputs (``if query is key:``, a self-attention fast path) is refused at
trace, naming the parameters and the line, where the trace would have recorded the path
for two tensors and given its results for the caller's call (silently with
check_trace=False, with an unclear check error otherwise); code whose results do not
depend on it (nn.MultiheadAttention's packed or split projections) stays general."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def reloaded(traced):
    buffer = io.BytesIO()
    tracebridge.save(traced, buffer)
    return tracebridge.load(buffer.getvalue())


def self_or_cross(query, key):
    if query is key:  # self-attention: one projection
        return query * 3
    return query + key


class SelfOrCross(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, query, key):
        if query is key:
            return self.proj(query) * 2
        return self.proj(query) - key


@pytest.mark.parametrize("check_trace", [True, False])
def test_a_function_that_branches_on_identity_is_refused_naming_both_parameters(check_trace):
    x = torch.randn(3)
    with pytest.raises(TraceError) as info:
        tracebridge.trace(self_or_cross, (x, x), check_trace=check_trace)
    text = str(info.value)
    assert "'query' and 'key'" in text
    assert "same tensor" in text
    # where the recordings part: the line of each path
    assert "return query * 3" in text and "return query + key" in text
    # what to do: a function of one input, or distinct tensors
    assert "lambda" in text and "clone()" in text


@pytest.mark.parametrize("check_trace", [True, False])
def test_a_module_that_branches_on_identity_is_refused(check_trace):
    m = SelfOrCross()
    x = torch.randn(2, 4)
    with pytest.raises(TraceError) as info:
        tracebridge.trace(m, (x, x), check_trace=check_trace)
    text = str(info.value)
    assert "'query' and 'key'" in text and "SelfOrCross.forward" in text
    assert "self.proj(query) * 2" in text


def test_the_advice_traces_the_identity_path_and_the_general_one():
    m = SelfOrCross()
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    # one tensor twice: a function of one input
    same = tracebridge.trace(lambda v: m(v, v), x)
    for t in (same, reloaded(same)):
        torch.testing.assert_close(t(y), m(y, y))
    # two tensors: the cross path, for calls passing two
    cross = tracebridge.trace(m, (x, x.clone()))
    for t in (cross, reloaded(cross)):
        torch.testing.assert_close(t(x, y), m(x, y))


def test_a_keyword_input_given_the_same_tensor_is_named():
    x = torch.randn(3)
    with pytest.raises(TraceError, match="'query' and 'key'"):
        tracebridge.trace(self_or_cross, (x,), example_kwarg_inputs={"key": x})


def test_an_identity_test_with_the_same_results_stays_general():
    def doubled(a, b):
        if a is b:
            return a * 2  # the same numbers as a + b for one tensor: a shortcut
        return a + b

    x, y = torch.randn(3), torch.randn(3)
    traced = tracebridge.trace(doubled, (x, x))
    for t in (traced, reloaded(traced)):
        torch.testing.assert_close(t(x, y), doubled(x, y))
        torch.testing.assert_close(t(y, y), doubled(y, y))
        torch.testing.assert_close(t(torch.randn(5), torch.randn(5)).shape, torch.Size([5]))


def test_code_that_never_tests_identity_is_traced_as_before():
    x = torch.randn(3)
    traced = tracebridge.trace(lambda a, b: a - b, (x, x))
    y, z = torch.randn(4), torch.randn(4)
    for t in (traced, reloaded(traced)):
        torch.testing.assert_close(t(y, z), y - z)
        torch.testing.assert_close(t(y, y), torch.zeros(4))


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_multihead_attention_traced_as_self_attention_stays_general(grad, training):
    mha = nn.MultiheadAttention(8, 2, batch_first=True).train(training)
    x = torch.randn(2, 5, 8)
    with torch.set_grad_enabled(grad):
        traced = tracebridge.trace(mha, (x, x, x))
        q, k, v = torch.randn(3, 7, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 8)
        y = torch.randn(3, 6, 8)
        for t in (traced, reloaded(traced)):
            t.train(training)
            for args in ((q, k, v), (y, y, y), (q, k, k)):
                got, expected = t(*args), mha(*args)
                for a, b in zip(got, expected):
                    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_a_transformer_decoder_layer_given_the_same_target_and_memory_stays_general():
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    traced = tracebridge.trace(layer, (x, x))
    tgt, memory = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
    for t in (traced, reloaded(traced)):
        torch.testing.assert_close(t(tgt, memory), layer(tgt, memory), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(t(tgt, tgt), layer(tgt, tgt), atol=1e-5, rtol=1e-5)


def test_trace_module_refuses_a_method_that_branches_on_identity():
    class Attend(nn.Module):
        def forward(self, x):
            return x

        def attend(self, query, key, value):
            if query is key and key is value:
                return value.sigmoid()
            return (query * key).softmax(-1) * value

    x = torch.randn(2, 3)
    with pytest.raises(TraceError) as info:
        tracebridge.trace_module(Attend(), {"attend": (x, x, x)})
    text = str(info.value)
    assert "'query', 'key' and 'value'" in text and "Attend.attend" in text


def test_an_in_place_write_to_one_of_two_repeated_inputs_is_not_taken_for_identity():
    def bump(a, b):
        a.add_(1)  # b is the same tensor in the caller's call: it sees the write
        return a + b

    x = torch.randn(3)
    traced = tracebridge.trace(bump, (x.clone(), x.clone()), check_trace=False)
    y = torch.randn(3)
    expected = bump(y.clone(), y.clone())
    torch.testing.assert_close(traced(y.clone(), y.clone()), expected)
    same = tracebridge.trace(bump, (x.clone(),) * 2, check_trace=False)
    z = y.clone()
    torch.testing.assert_close(same(z, z), bump(*(y.clone(),) * 2))


def test_a_check_input_that_repeats_a_tensor_names_the_identity():
    from tracebridge.errors import TracingCheckError

    x, y, z = torch.randn(3), torch.randn(3), torch.randn(4)
    with pytest.raises(TracingCheckError) as info:
        tracebridge.trace(self_or_cross, (x, y), check_inputs=[(z, z)])
    text = str(info.value)
    assert text.startswith("on a check input: ") and "'query' and 'key'" in text
    m = SelfOrCross()
    with pytest.raises(TracingCheckError, match="'query' and 'key'"):
        tracebridge.trace(
            m,
            (torch.randn(2, 4), torch.randn(2, 4)),
            check_inputs=[(torch.ones(3, 4),) * 2],
        )


def test_multihead_attention_checked_with_one_tensor_three_times_stays_general():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    y = torch.randn(3, 6, 8)
    traced = tracebridge.trace(mha, (q, k, v), check_inputs=[(y, y, y), (q, k, v)])
    for a, b in zip(traced(y, y, y), mha(y, y, y)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
