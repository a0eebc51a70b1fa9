"""The recurrent layers' checks are remembered by geometry (runtime/checked_ops.py).

A checked ``lstm``/``gru`` call validates its flat weights and hidden states before the
kernel runs (the kernel trusts their shapes). The outcome depends only on the arguments'
types, scalars, and the shapes and dtypes of the tensors, so a call whose key passed once
skips the check; everything the key does not prove is checked again, and a call that
fails is refused every time.
"""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.errors import OpError
from tracebridge.runtime import checked_ops as c


def _call(op: str, batch: int = 2, layers: int = 2):
    cls = torch.nn.LSTM if op == "lstm" else torch.nn.GRU
    torch.manual_seed(0)
    rnn = cls(3, 4, num_layers=layers, batch_first=True)
    x = torch.randn(batch, 5, 3)
    h = torch.zeros(layers, batch, 4)
    hx = (h, h.clone()) if op == "lstm" else h
    weights = list(rnn._flat_weights)
    return rnn, [x, hx, weights, True, layers, 0.0, False, False, True]


@pytest.fixture
def counted(monkeypatch):
    """Count the full checks that run (the real check still runs)."""
    calls = []
    real = c._check_rnn

    def check(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(c, "_check_rnn", check)
    for op in ("lstm", "gru"):
        c.CHECKED[op].passed.keys.clear()
    return calls


@pytest.mark.parametrize("op", ["lstm", "gru"])
def test_a_repeated_call_skips_the_check_and_gives_the_kernels_result(counted, op):
    _, args = _call(op)
    first = c.CHECKED[op](*args)
    again = c.CHECKED[op](*args)
    assert counted == [op]  # checked once, then remembered
    want = getattr(torch, op)(*args)
    assert all(torch.equal(a, b) for a, b in zip(first, want))
    assert all(torch.equal(a, b) for a, b in zip(again, want))
    # another sequence length is the same geometry for the check; another batch is not
    c.CHECKED[op](torch.randn(2, 9, 3), *args[1:])
    assert counted == [op]
    _, other = _call(op, batch=3)
    c.CHECKED[op](*other)
    assert counted == [op, op]


def _short_bias(args):
    args[2][2] = args[2][2][:-1]


def _hidden_of_one_layer(args):
    if isinstance(args[1], tuple):
        args[1] = (args[1][0][:1], args[1][1][:1])
    else:
        args[1] = args[1][:1]


def _input_of_another_batch(args):
    args[0] = args[0][:1]


def _weight_of_another_dtype(args):
    args[2][1] = args[2][1].double()


def _a_number_for_a_weight(args):
    args[2][0] = 3


def _layers_as_a_bool(args):
    args[4] = True  # equal to 1 as a key, but not an int: the full check refuses it


@pytest.mark.parametrize("op", ["lstm", "gru"])
@pytest.mark.parametrize(
    "spoil, message",
    [
        (_short_bias, "must have shape"),
        (_hidden_of_one_layer, "must have 2 layers x 2 batch"),
        (_input_of_another_batch, "input and hx differ in batch size"),
        (_weight_of_another_dtype, "must have shape"),
        (_a_number_for_a_weight, "params is a list of tensors"),
    ],
)
def test_a_crafted_call_is_refused_after_a_good_one_was_remembered(counted, op, spoil, message):
    _, args = _call(op)
    c.CHECKED[op](*args)
    c.CHECKED[op](*args)
    kept = dict(c.CHECKED[op].passed.keys)
    spoil(args)
    for _ in range(2):  # refused every time: a failing call is never remembered
        with pytest.raises(c.CheckFailed, match=message):
            c.CHECKED[op](*args)
    assert c.CHECKED[op].passed.keys == kept


def test_one_layer_named_by_a_bool_is_refused_after_one_named_by_an_int(counted):
    _, args = _call("gru", layers=1)
    c.CHECKED["gru"](*args)
    _layers_as_a_bool(args)
    with pytest.raises(c.CheckFailed, match="num_layers must be a positive integer"):
        c.CHECKED["gru"](*args)


def test_a_weight_resized_through_data_is_checked_again(counted):
    """``.data =`` keeps the object, its version and (for a view) its data pointer: only
    the geometry shows the change, and the geometry is the key."""
    _, args = _call("lstm")
    c.CHECKED["lstm"](*args)
    weight = args[2][0]
    version, pointer = weight._version, weight.data_ptr()
    weight.data = weight.data[:1]
    assert (weight._version, weight.data_ptr()) == (version, pointer)
    with pytest.raises(c.CheckFailed, match="weight 0 of layer 0"):
        c.CHECKED["lstm"](*args)


def test_the_remembered_keys_are_bounded(counted):
    for batch in range(1, c.PASSED_KEEP + 10):
        _, args = _call("gru", batch=batch)
        c.CHECKED["gru"](*args)
    assert len(c.CHECKED["gru"].passed.keys) == c.PASSED_KEEP
    _, args = _call("gru", batch=1)  # pushed out: checked again
    before = len(counted)
    c.CHECKED["gru"](*args)
    assert len(counted) == before + 1


def test_calls_by_keyword_and_packed_sequences_are_always_checked(counted):
    _, args = _call("gru")
    names = "input hx params has_biases num_layers dropout train bidirectional batch_first"
    kwargs = dict(zip(names.split(), args))
    c.CHECKED["gru"](**kwargs)
    c.CHECKED["gru"](**kwargs)
    assert counted == ["gru", "gru"]
    assert not c.CHECKED["gru"].passed.keys


def test_a_loaded_lstm_refuses_a_weight_resized_after_calls(tmp_path, counted):
    torch.manual_seed(0)
    model = torch.nn.LSTM(3, 4, num_layers=2, batch_first=True)
    x = torch.randn(2, 5, 3)
    path = tmp_path / "lstm.tb"
    tracebridge.save(tracebridge.trace(model, x), path)
    loaded = tracebridge.load(path)
    want = model(x)[0]
    assert torch.equal(loaded(x)[0], want)
    checks = len(counted)
    assert torch.equal(loaded(x)[0], want)
    assert len(counted) == checks  # the second call was not checked again
    weight = dict(loaded.named_parameters())["weight_hh_l1"]
    weight.data = weight.data[:, :2]
    with pytest.raises(OpError, match="weight 1 of layer 1"):
        loaded(x)
