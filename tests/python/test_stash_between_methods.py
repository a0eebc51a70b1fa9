"""A tensor that one traced method leaves on the module for another (prober21b F4):
``encode`` assigns ``self.memory``, ``decode`` reads it. A trace held decode's memory of
trace time as a constant and a traced encode did not assign it, so decode went on with
the old memory, silently; trace_module now refuses, naming the attribute, both methods
and the line, and the remedy it names (a buffer) gives eager's results, saved and loaded
too. Without a memory at trace time, the code's own AttributeError is given again with
the reason."""

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


class EncoderDecoder(nn.Module):
    def __init__(self, as_buffer: bool = False):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dec = nn.Linear(4, 4)
        if as_buffer:
            self.register_buffer("memory", None, persistent=False)
        else:
            self.memory = None

    def encode(self, src):
        self.memory = self.enc(src)  # stashed for decode
        return self.memory

    def decode(self, tgt):
        return self.dec(tgt) + self.memory.mean(0)

    def forward(self, src):
        return self.encode(src)


@pytest.mark.parametrize("check_trace", [True, False])
@pytest.mark.parametrize("order", [("encode", "decode"), ("decode", "encode")])
def test_a_plain_attribute_one_method_assigns_and_another_reads_is_refused(check_trace, order):
    m = EncoderDecoder()
    src, tgt = torch.randn(3, 4), torch.randn(2, 4)
    m.encode(src)  # memory set, as after a first eager call
    examples = {"encode": src, "decode": tgt}
    with pytest.raises(TraceError) as info:
        tracebridge.trace_module(m, {k: examples[k] for k in order}, check_trace=check_trace)
    text = str(info.value)
    assert "EncoderDecoder.decode reads the tensor attribute 'memory'" in text
    assert "EncoderDecoder.encode assigns" in text
    assert "self.memory.mean(0)" in text  # the line that reads it
    assert "register_buffer('memory', None, persistent=False)" in text


def test_an_attribute_of_a_sub_module_is_named_by_its_path():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.kept = torch.zeros(4)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = Cache()

        def forward(self, x):
            self.cache.kept = x.sum(0)
            return x

        def read(self, y):
            return y * self.cache.kept

    with pytest.raises(TraceError, match=r"Model.read reads the tensor attribute 'cache.kept'"):
        tracebridge.trace_module(Model(), {"forward": torch.randn(2, 4), "read": torch.randn(4)})


def test_a_method_that_reads_what_it_assigned_before_is_refused():
    class Running(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = torch.zeros(3)

        def forward(self, x):
            out = x - self.mean  # last call's mean
            self.mean = x.mean(0)
            return out

    with pytest.raises(TraceError, match="Running.forward reads the tensor attribute 'mean'"):
        tracebridge.trace_module(Running(), {"forward": torch.randn(2, 3)}, check_trace=False)


def test_the_remedy_a_buffer_gives_eagers_results_traced_and_loaded():
    m = EncoderDecoder(as_buffer=True)
    src, tgt = torch.randn(3, 4), torch.randn(2, 4)
    m.encode(src)
    traced = tracebridge.trace_module(m, {"encode": src, "decode": tgt})
    loaded = reloaded(traced)
    for t in (traced, loaded):
        for _ in range(2):
            src2 = torch.randn(3, 4) * 10
            m.encode(src2)
            expected = m.decode(tgt)
            t.encode(src2)
            torch.testing.assert_close(t.decode(tgt), expected)


def test_an_attribute_assigned_but_read_by_no_traced_method_is_traced_as_before():
    class Logged(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.last = None

        def forward(self, x):
            out = self.lin(x)
            self.last = out.detach()  # kept for inspection, read by no traced method
            return out

        def twice(self, x):
            return self.lin(x) * 2

    m = Logged()
    x = torch.randn(2, 3)
    traced = tracebridge.trace_module(m, {"forward": x, "twice": x})
    y = torch.randn(5, 3)
    torch.testing.assert_close(traced(y), m(y))
    torch.testing.assert_close(traced.twice(y), m.twice(y))


def test_an_attribute_written_and_then_read_in_the_same_call_is_a_value_of_the_graph():
    class Scratch(nn.Module):
        def __init__(self):
            super().__init__()
            self.tmp = torch.zeros(1)

        def forward(self, x):
            self.tmp = x * 2
            return self.tmp + 1

    m = Scratch()
    traced = tracebridge.trace(m, torch.randn(3))
    y = torch.randn(4)
    for t in (traced, reloaded(traced)):
        torch.testing.assert_close(t(y), y * 2 + 1)


@pytest.mark.parametrize("order", [("encode", "decode"), ("decode", "encode")])
def test_a_stash_that_is_none_at_trace_time_is_explained(order):
    src, tgt = torch.randn(3, 4), torch.randn(2, 4)
    examples = {"encode": src, "decode": tgt}
    with pytest.raises(TraceError) as info:
        tracebridge.trace_module(EncoderDecoder(), {k: examples[k] for k in order})
    text = str(info.value)
    assert "recording EncoderDecoder.decode raised AttributeError" in text
    assert "'memory' is None there, and EncoderDecoder.encode" in text
    assert "self.memory.mean(0)" in text
    assert "register_buffer('memory'" in text and "call encode once before tracing" in text
    assert isinstance(info.value.__cause__, AttributeError)


def test_an_error_unrelated_to_a_stash_is_the_codes_own():
    class Broken(nn.Module):
        def forward(self, x):
            return x

        def bad(self, x):
            return x.no_such_method()

    with pytest.raises(AttributeError, match="no_such_method"):
        tracebridge.trace_module(Broken(), {"forward": torch.randn(2), "bad": torch.randn(2)})
