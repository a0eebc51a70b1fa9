"""The GraphModule of to_graph_module takes the calls the traced callable takes, bound as
Python binds them (export/fx_signature.py), and holds the state the traced module holds,
registered as it registers it (``state_dict()`` has the original's keys)."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import BindingError, GuardError, TraceError
from tracebridge.export import fx as bridge

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class MaskBias(nn.Module):
    def forward(self, x, mask=None, bias=None):
        y = x if mask is None else x * mask
        return y if bias is None else y + bias


def _loaded(traced):
    buffer = io.BytesIO()
    traced.save(buffer)
    buffer.seek(0)
    return tracebridge.load(buffer)


def _inputs():
    torch.manual_seed(0)
    return torch.rand(2, 3), torch.rand(2, 3), torch.rand(2, 3)


def test_keywords_traced_out_of_the_signatures_order_bind_by_the_signature():
    """Traced ``m(x, bias=b, mask=k)``: the graph's inputs are x, bias, mask; the plain
    flat forward took ``gm(x, k, b)`` as bias=k (silently wrong)."""
    x, k, b = _inputs()
    model = MaskBias()
    traced = tracebridge.trace(model, (x,), example_kwarg_inputs={"bias": b, "mask": k})
    for obj in (traced, _loaded(traced)):
        gm = tracebridge.to_graph_module(obj)
        assert bridge.info(gm).signature == "x, mask=None, bias=None"
        want = model(x, k, b)
        assert torch.equal(gm(x, k, b)[0], want)
        assert torch.equal(gm(x, bias=b, mask=k)[0], want)
        assert torch.equal(gm(mask=k, x=x, bias=b)[0], want)
        assert torch.equal(bridge.call(gm, x, k, b), want)
        # the flat form keeps the graph's order, for export
        flat = tracebridge.to_graph_module(obj, flat=True)
        assert torch.equal(flat(x, b, k)[0], want)
        assert torch.equal(bridge.call(flat, x, k, b), want)


def test_a_parameter_the_example_did_not_pass_takes_only_its_default():
    x, k, b = _inputs()
    model = MaskBias()
    traced = tracebridge.trace(model, (x,), example_kwarg_inputs={"bias": b})
    for obj in (traced, _loaded(traced)):  # the file records the defaults
        gm = tracebridge.to_graph_module(obj)
        want = model(x, bias=b)
        assert torch.equal(gm(x, bias=b)[0], want)
        assert torch.equal(gm(x, None, b)[0], want)  # its default, given: the traced call
        for args, kwargs in (((x, b), {}), ((x, k, b), {}), ((x,), {"mask": k, "bias": b})):
            with pytest.raises(TraceError, match="argument 'mask' was not passed when the"):
                gm(*args, **kwargs)  # Python binds mask here, which the trace never saw
        with pytest.raises(TraceError, match="argument 'bias' is NoneType where the trace"):
            gm(x)  # bias=None, its default, where the trace took a tensor


def scaled(x, mask=None, scale=2.0):
    y = x * scale
    return y if mask is None else y * mask


def test_numbers_and_none_are_fixed_and_defaults_are_the_callables_own():
    """A number the example passed is fixed; a parameter left out takes the callable's
    own default (recorded in the file), which must be what the trace was made with:
    ``scaled(x)`` scales by 2.0, so a trace made with 3.0 refuses it."""
    x, _, _ = _inputs()
    by_three = tracebridge.trace(scaled, (x, None, 3.0))
    for obj in (by_three, _loaded(by_three)):
        gm = tracebridge.to_graph_module(obj)
        assert bridge.info(gm).signature == "x, mask=None, scale=2.0"
        want = scaled(x, None, 3.0)
        assert torch.equal(gm(x, None, 3.0)[0], want)
        assert torch.equal(gm(x, scale=3.0)[0], want)
        with pytest.raises(TraceError, match="argument 'scale' is 2.0 where the trace was"):
            gm(x)  # scaled(x) is x * 2.0: not the trace
        with pytest.raises(TraceError, match="argument 'scale' is 3 where"):
            gm(x, scale=3)  # an int is another number: x * 3 is not x * 3.0 for every dtype
    by_default = tracebridge.trace(scaled, (x, None, 2.0))
    gm = tracebridge.to_graph_module(by_default)
    for call in (lambda: gm(x), lambda: gm(x, None), lambda: gm(x=x, scale=2.0)):
        assert torch.equal(call()[0], scaled(x))


def test_a_default_no_file_holds_must_be_passed():
    x, k, _ = _inputs()
    fixed = torch.ones(3)

    def weighted(x, *, w=fixed):
        return x * w

    traced = tracebridge.trace(weighted, (x,), example_kwarg_inputs={"w": k})
    assert traced.program.methods["forward"].defaults == {"w": None}
    gm = tracebridge.to_graph_module(_loaded(traced))
    assert torch.equal(gm(x, w=k)[0], x * k)
    with pytest.raises(TraceError, match="argument 'w' was left out, and its default is not"):
        gm(x)
    # A positional parameter with a default binds by the signature too: Python's own
    # TypeError would say that 'w' is required, which the user's callable does not say.
    positional = tracebridge.to_graph_module(tracebridge.trace(lambda x, w=fixed: x * w, (x, k)))
    assert bridge.info(positional).signature == "x, w=<a default the trace does not hold>"
    with pytest.raises(TraceError, match="argument 'w' was left out, and its default is not"):
        positional(x)


def test_positional_only_and_keyword_only_parameters_keep_their_kinds():
    x, k, b = _inputs()

    def diff(x, /, y, *, k):
        return (x - y) * k

    traced = tracebridge.trace(diff, (x, b), example_kwarg_inputs={"k": k})
    for obj in (traced, _loaded(traced)):
        gm = tracebridge.to_graph_module(obj)
        assert bridge.info(gm).signature == "x, /, y, *, k"
        want = diff(x, b, k=k)
        assert torch.equal(gm(x, b, k=k)[0], want)
        assert torch.equal(gm(x, y=b, k=k)[0], want)
        with pytest.raises(TypeError, match="positional-only arguments passed as keyword"):
            gm(x=x, y=b, k=k)
        with pytest.raises(TypeError, match="positional argument"):
            gm(x, b, k)
        with pytest.raises(BindingError, match="positional-only arguments passed as keyword"):
            bridge.call(tracebridge.to_graph_module(obj, flat=True), x=x, y=b, k=k)


def test_var_keywords_keep_their_order_rule():
    x, p, q = _inputs()

    def total(x, **extra):
        return x + 2 * extra["p"] + 3 * extra["q"]

    gm = tracebridge.to_graph_module(
        tracebridge.trace(total, (x,), example_kwarg_inputs={"p": p, "q": q})
    )
    assert bridge.info(gm).signature == "x, **kwargs"
    assert torch.equal(gm(x, p=p, q=q)[0], total(x, p=p, q=q))
    with pytest.raises(GuardError, match="in another order"):
        gm(x, q=q, p=p)
    with pytest.raises(TraceError, match="keyword argument 'r' was not passed"):
        gm(x, p=p, q=q, r=q)


def pair_sum(pair, scale):
    return pair["a"] * scale + pair["b"]


def test_a_container_argument_is_taken_whole():
    a, b, s = _inputs()
    pair = {"a": a, "b": b}
    gm = tracebridge.to_graph_module(tracebridge.trace(pair_sum, (pair, s), strict=False))
    assert bridge.info(gm).signature == "pair, scale"
    want = pair_sum(pair, s)
    assert torch.equal(gm(pair, s)[0], want)
    assert torch.equal(gm(scale=s, pair=pair)[0], want)
    with pytest.raises(GuardError, match="holding its keys in the order"):
        gm({"b": b, "a": a}, s)
    with pytest.raises(TraceError, match="shaped differently"):
        gm({"a": a}, s)


def test_the_signature_form_compiles_copies_and_runs_in_an_interpreter():
    x, k, b = _inputs()
    model = MaskBias()
    traced = tracebridge.trace(model, (x,), example_kwarg_inputs={"bias": b, "mask": k})
    gm = tracebridge.to_graph_module(traced)
    want = model(x, k, b)
    assert torch.equal(copy.deepcopy(gm)(x, k, b)[0], want)
    assert torch.equal(torch.fx.Interpreter(gm).run(x, k, b)[0], want)
    torch._dynamo.reset()
    compiled = torch.compile(gm, fullgraph=True)
    torch.testing.assert_close(compiled(x, mask=k, bias=b)[0], want)
    torch._dynamo.reset()
    buffer = io.BytesIO()
    torch.save(tracebridge.to_graph_module(traced, flat=True), buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert torch.equal(again(x, b, k)[0], want)  # the flat inputs, in the traced order
    assert bridge.info(again).signature is None  # meta is kept: bridge.call, the backends
    assert torch.equal(bridge.call(again, x, mask=k, bias=b), want)


def _pickled(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_a_pickled_signature_form_binds_as_the_original():
    """torch.fx pickles a GraphModule's code and traces it again with its own code
    generator: the copy took the flat inputs (``x, bias, mask`` here), so a call of the
    original's form gave the mask to bias. The copy keeps the signature, and pickles
    again the same way."""
    x, k, b = _inputs()
    model = MaskBias()
    traced = tracebridge.trace(model, (x,), example_kwarg_inputs={"bias": b, "mask": k})
    gm = tracebridge.to_graph_module(traced)
    want = model(x, k, b)
    copies = [_pickled(gm)]
    copies.append(_pickled(copies[0]))
    for again in copies:
        assert bridge.info(again).signature == bridge.info(gm).signature
        assert torch.equal(again(x, k, b)[0], want)
        assert torch.equal(again(x, bias=b, mask=k)[0], want)
        assert torch.equal(copy.deepcopy(again)(x, k, b)[0], want)
        with pytest.raises(TraceError, match="argument 'bias' is NoneType where the trace"):
            again(x, k)
        with pytest.raises(GuardError):  # the checks stay: another rank
            again(x[0], k, b)
    assert torch.equal(gm(x, k, b)[0], want)  # pickling left the original as it was


def test_a_pickled_signature_form_keeps_defaults_and_kinds():
    x, k, _ = _inputs()
    fixed = torch.ones(3)

    def weighted(x, /, scale=2.0, *, w=fixed):
        return x * w * scale

    traced = tracebridge.trace(weighted, (x,), example_kwarg_inputs={"w": k})
    again = _pickled(tracebridge.to_graph_module(_loaded(traced)))
    assert torch.equal(again(x, w=k)[0], weighted(x, w=k))
    with pytest.raises(TraceError, match="argument 'w' was left out, and its default is not"):
        again(x)
    with pytest.raises(TypeError, match="positional-only"):
        again(x=x, w=k)

    def uses(torch, self=None, k=None):  # forward takes *args, **kwargs (can_spell)
        return torch * k

    spelled_out = tracebridge.to_graph_module(
        tracebridge.trace(uses, (x,), example_kwarg_inputs={"k": k})
    )
    again = _pickled(spelled_out)
    assert "*_tb_args, **_tb_kwargs" in again.code
    assert torch.equal(again(torch=x, k=k)[0], x * k)


def test_a_plain_signature_keeps_the_plain_code():
    net = nn.Linear(3, 2)
    x = torch.rand(4, 3)
    gm = tracebridge.to_graph_module(tracebridge.trace(net, x))
    assert torch.equal(gm(input=x)[0], net(input=x))
    pair = tracebridge.to_graph_module(tracebridge.trace(lambda a, b: a * b, (x, x)))
    assert bridge.info(pair).signature is None  # forward(self, a, b) binds as the lambda
    assert "tracebridge_bind" not in pair.code
    torch.save(pair, io.BytesIO())  # and pickles as before


def test_a_tensor_parameter_with_a_default_is_bound_by_the_signature():
    """Traced ``m(x, y)`` of ``forward(self, x, y=None)``: ``gm(x)`` is a call the user's
    forward takes, so it is told why the trace cannot take it (it gives y its default, None,
    where the example passed a tensor), not Python's "missing argument 'y'"."""
    x, y, _ = _inputs()
    gm = tracebridge.to_graph_module(tracebridge.trace(MaskBias(), (x, y)))
    assert "tracebridge_bind" in gm.code
    assert torch.equal(gm(x, y)[0], x * y)
    assert torch.equal(gm(x, mask=y)[0], x * y)
    with pytest.raises(TraceError, match="argument 'mask' is NoneType where the trace was made"):
        gm(x)


class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight  # tied: two names, one tensor
        self.register_buffer("inv_freq", torch.rand(3), persistent=False)
        self.register_buffer("scale", torch.tensor(2.0))
        self.unused = nn.Parameter(torch.ones(2))  # read by no graph
        self.register_buffer("cache", torch.zeros(4), persistent=False)  # nor this

    def forward(self, ids):
        return self.head(self.embed(ids) * self.inv_freq * self.scale)


def test_state_dict_has_the_original_modules_keys():
    model = Stateful().eval()
    ids = torch.randint(0, 5, (2, 4))
    traced = tracebridge.trace(model, ids)
    gm = tracebridge.to_graph_module(traced)
    assert sorted(gm.state_dict()) == sorted(model.state_dict())
    assert "inv_freq" not in gm.state_dict() and "inv_freq" in dict(gm.named_buffers())
    assert gm.get_parameter("unused") is model.unused
    assert gm.get_parameter("head.weight") is gm.get_parameter("embed.weight")
    gm.load_state_dict(model.state_dict())  # strict: nothing missing or unexpected
    torch.testing.assert_close(gm(ids)[0], model(ids))
    # Set anew on the traced module, a non-persistent buffer stays non-persistent.
    model.inv_freq = torch.rand(3)
    torch.testing.assert_close(gm(ids)[0], model(ids))
    assert sorted(gm.state_dict()) == sorted(model.state_dict())
    # The flat form, for export, holds what the method reads.
    flat = tracebridge.to_graph_module(traced, flat=True)
    assert "unused" not in dict(flat.named_parameters())
    assert "inv_freq" not in flat.state_dict()


def test_a_loaded_file_gives_the_same_keys():
    model = Stateful().eval()
    ids = torch.randint(0, 5, (2, 4))
    loaded = _loaded(tracebridge.trace(model, ids))
    gm = tracebridge.to_graph_module(loaded)
    assert sorted(gm.state_dict()) == sorted(model.state_dict())
    torch.testing.assert_close(gm(ids)[0], model(ids))


def test_parameter_names_that_would_hide_a_name_of_the_code_bind_all_the_same():
    """``def forward(self, torch, ...)`` would hide the module the code calls: such a
    GraphModule's forward takes ``*args, **kwargs`` and binds them as Python binds the
    traced callable's parameters."""
    x, k, _ = _inputs()

    def uses(torch, self=None, k=None):  # names the generated code needs
        return torch * k

    gm = tracebridge.to_graph_module(tracebridge.trace(uses, (x,), example_kwarg_inputs={"k": k}))
    assert bridge.info(gm).signature == "torch, self=None, k=None"
    assert "*_tb_args, **_tb_kwargs" in gm.code
    want = uses(x, k=k)
    for args, kwargs in (((x,), {"k": k}), ((x, None, k), {}), ((), {"k": k, "torch": x})):
        assert torch.equal(gm(*args, **kwargs)[0], want)
        assert torch.equal(bridge.call(gm, *args, **kwargs), want)
    with pytest.raises(TraceError, match="argument 'self' was not passed when the trace"):
        gm(x, k)  # binds self=k in Python
    with pytest.raises(BindingError, match="multiple values for argument 'torch'"):
        gm(x, torch=x, k=k)


def test_a_var_keyword_the_trace_read_must_be_passed():
    x, p, _ = _inputs()

    def total(x, **extra):
        return x * 2 if extra["double"] else x + extra["p"]

    gm = tracebridge.to_graph_module(
        tracebridge.trace(total, (x,), example_kwarg_inputs={"double": True, "p": p})
    )
    assert torch.equal(gm(x, double=True, p=p)[0], total(x, double=True, p=p))
    with pytest.raises(TraceError, match="keyword argument 'double' \\(taken by \\*\\*kwargs\\)"):
        gm(x, p=p)
    with pytest.raises(TraceError, match="argument 'double' is False where the trace"):
        gm(x, double=False, p=p)
