"""The traced objects: symbolic sizes, training, devices and dtypes, modes, structures."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tracebridge


class Flatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 2)

    def forward(self, x):
        return self.fc(x.view(x.size(0), -1)) * x.shape[1]


def test_symbolic_batch_size_needs_no_retrace():
    model = Flatten()
    traced = tracebridge.trace(model, torch.rand(2, 3, 4))
    for batch in (1, 5, 17):
        x = torch.rand(batch, 3, 4)
        torch.testing.assert_close(traced(x), model(x))
    assert "prim.size(%x, 0)" in traced.graph
    assert traced.guards == []


def test_len_and_size_arithmetic_are_recorded():
    def f(x):
        half = len(x) // 2
        return x[:half] + x[half : half * 2]

    traced = tracebridge.trace(f, torch.rand(4, 3))
    x = torch.rand(10, 3)
    torch.testing.assert_close(traced(x), f(x))


def test_item_in_arithmetic_follows_the_data():
    def f(x):
        return x / x.abs().max().item()

    traced = tracebridge.trace(f, torch.tensor([1.0, -4.0]))
    x = torch.tensor([3.0, 0.5, -1.0])
    torch.testing.assert_close(traced(x), f(x))


def test_gradients_reach_shared_parameters_and_optimizer_trains_original():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    traced = tracebridge.trace(model, torch.rand(2, 3))
    x, y = torch.rand(6, 3), torch.rand(6, 1)
    F.mse_loss(model(x), y).backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    F.mse_loss(traced(x), y).backward()
    for expected, p in zip(eager_grads, model.parameters()):
        torch.testing.assert_close(p.grad, expected)
    before = model[0].weight.detach().clone()
    torch.optim.SGD(traced.parameters(), lr=0.1).step()
    assert not torch.equal(before, model[0].weight)


def test_double_and_state_dict():
    model = Flatten()
    traced = tracebridge.trace(model, torch.rand(2, 3, 4))
    assert list(traced.state_dict()) == list(model.state_dict())
    traced.double()
    x = torch.rand(3, 3, 4, dtype=torch.float64)
    assert traced(x).dtype == torch.float64
    state = {k: torch.zeros_like(v) for k, v in traced.state_dict().items()}
    traced.load_state_dict(state)
    assert torch.count_nonzero(traced(x)) == 0


def test_dtype_and_device_from_inputs_are_not_baked_in():
    """The op takes the call's dtype and device; the dtype read is also guarded
    (docs/divergence.md, "Dtypes: every read is guarded"), so another dtype is refused."""

    def f(x):
        return x + torch.ones(x.shape[0], dtype=x.dtype, device=x.device)

    traced = tracebridge.trace(f, torch.rand(3))
    assert "prim.dtype(%x)" in traced.graph and "prim.device(%x)" in traced.graph
    with pytest.raises(tracebridge.GuardError, match=r"x\.dtype == torch\.float32"):
        traced(torch.rand(4, dtype=torch.float64))
    with tracebridge.guards_disabled():
        assert traced(torch.rand(4, dtype=torch.float64)).dtype == torch.float64


def test_batchnorm_statistics_replay_on_real_buffers_and_tracing_changes_nothing():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).train()
    twin = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).train()
    twin.load_state_dict(model.state_dict())
    traced = tracebridge.trace(model, torch.rand(5, 3))
    torch.testing.assert_close(model[1].running_mean, twin[1].running_mean)
    assert model[1].num_batches_tracked.item() == 0
    x = torch.rand(8, 3)
    traced(x)
    twin(x)
    torch.testing.assert_close(model[1].running_mean, twin[1].running_mean)
    assert model[1].num_batches_tracked.item() == 1


def test_respect_mode_dispatches_on_training_flag():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4)).train()
    traced = tracebridge.trace(model, torch.rand(6, 4), respect_mode=True)
    assert traced.methods == ["trainforward", "evalforward"]
    assert model.training  # mode restored
    x = torch.rand(6, 4)
    traced.eval()
    torch.testing.assert_close(traced(x), model.eval()(x))
    assert "dropout(" in traced.trainforward.graph
    assert "False" in traced.evalforward.graph.split("dropout(")[1].split(")")[0]


def test_strict_refuses_list_output_with_advice():
    with pytest.raises(tracebridge.TraceError, match="use a tuple|Return a tuple"):
        tracebridge.trace(lambda x: [x, x + 1], torch.rand(2))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        traced = tracebridge.trace(lambda x: {"a": x, "b": [x * 2]}, torch.rand(2), strict=False)
    out = traced(torch.ones(2))
    assert set(out) == {"a", "b"} and out["b"][0].tolist() == [2.0, 2.0]


def test_nested_inputs_and_kwargs():
    def f(pair, scale=None):
        a, (b, c) = pair
        return a * scale + b - c, None

    traced = tracebridge.trace(
        f,
        ((torch.rand(2), (torch.rand(2), torch.rand(2))),),
        example_kwarg_inputs={"scale": torch.rand(2)},
    )
    args = (torch.ones(3), (torch.ones(3), torch.zeros(3)))
    out, none = traced(args, scale=torch.full((3,), 2.0))
    assert none is None and out.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(tracebridge.TraceError, match="shaped differently"):
        traced((torch.ones(3), torch.ones(3)), scale=torch.ones(3))


def test_wrong_rank_is_a_clear_error():
    traced = tracebridge.trace(Flatten(), torch.rand(2, 3, 4))
    with pytest.raises(tracebridge.GuardError, match="input x has 2 dimensions, but the trace"):
        traced(torch.rand(2, 12))


def test_unsupported_call_names_the_line():
    def g(x):
        return x.apply_(lambda v: v)

    with pytest.raises(tracebridge.UnsupportedOpError, match=r"test_api.py:\d+"):
        tracebridge.trace(g, torch.rand(2))


def test_closure_tensor_becomes_constant_with_warning():
    bias = torch.tensor([1.0, 2.0])
    with pytest.warns(tracebridge.TracerWarning, match="constant 'const0'") as record:
        traced = tracebridge.trace(lambda x: x + bias, torch.rand(2))
    assert record[0].filename == __file__
    assert traced(torch.zeros(2)).tolist() == [1.0, 2.0]


def test_interpreter_and_codegen_agree_including_guards():
    def f(x):
        if x.shape[0] > 2:
            return torch.cumsum(x, 0).split(2)
        return (x,)

    for runtime in ("codegen", "interpreter"):
        traced = tracebridge.trace(f, torch.arange(6.0), runtime=runtime, check_trace=False)
        out = traced(torch.arange(6.0))
        assert [t.tolist() for t in out] == [[0.0, 1.0], [3.0, 6.0], [10.0, 15.0]]
        # length 2 takes the other branch: served by the graph traced where `> 2` flips
        assert [t.tolist() for t in traced(torch.arange(2.0))] == [[0.0, 1.0]]
        with pytest.raises(tracebridge.GuardError, match="gives 3 results, but now it gives 4"):
            traced(torch.arange(8.0))


def test_guards_can_be_disabled():
    def f(x):
        return x * 2 if x.sum() > 0 else x

    traced = tracebridge.trace(f, torch.ones(2), check_trace=False)
    with pytest.raises(tracebridge.GuardError):
        traced(-torch.ones(2))
    with tracebridge.guards_disabled():
        assert traced(-torch.ones(2)).tolist() == [-2.0, -2.0]
    traced.check_guards = False
    assert traced(-torch.ones(2)).tolist() == [-2.0, -2.0]


def test_structseq_output_keeps_its_type_through_save(tmp_path):
    traced = tracebridge.trace(lambda x: torch.max(x, 0), torch.rand(3, 2))
    traced.save(tmp_path / "max.tb")
    for fn in (traced, tracebridge.load(tmp_path / "max.tb")):
        out = fn(torch.tensor([[1.0, 5.0], [3.0, 2.0]]))
        assert type(out).__name__ == "max"
        assert out.values.tolist() == [3.0, 5.0] and out.indices.tolist() == [1, 0]


class NoGradInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        with torch.no_grad():
            frozen = self.lin(x)
        return frozen + self.lin(x)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_no_grad_block_is_replayed_and_caller_mode_restored(runtime):
    model = NoGradInside()
    traced = tracebridge.trace(model, torch.rand(3, 2), runtime=runtime)
    out = traced(torch.rand(4, 2))
    out.sum().backward()
    # Only the second linear call carries gradients, as in eager.
    expected = torch.autograd.grad(model(torch.ones(1, 2)).sum(), model.lin.bias)[0]
    assert torch.equal(model.lin.bias.grad, torch.full((2,), 4.0)) and expected.tolist() == [1, 1]
    with torch.no_grad():
        assert not traced(torch.rand(2, 2)).requires_grad
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()


def test_intermediate_shapes_are_written_with_input_symbols(tmp_path):
    class ConvHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3)
            self.down = nn.Conv2d(4, 4, 3, stride=2)

        def forward(self, x):
            h = self.conv(x)
            return h, self.down(h), h.flatten(1)

    traced = tracebridge.trace(ConvHead(), torch.rand(2, 1, 9, 9))
    text = traced.graph
    assert "%0: f32[s0, 4, s2-2, s3-2] = conv2d(%x" in text  # exact: follows the input
    assert "f32[s0, 4, ?, ?] = conv2d(%0" in text  # (s - 3) // 2 + 1: not linear
    assert "f32[s0, ?] = flatten(%0, 1)" in text  # depends on two symbols
    traced.save(tmp_path / "head.tb")
    # The file carries the sizes seen at trace time (labelling runs the graph, so only
    # display does it) and the inputs' example sizes, from which a reader labels them again.
    stored = tracebridge.artifact.read(tmp_path / "head.tb").methods["forward"]
    assert stored.nodes[2].outputs[0].shape == [2, 4, 7, 7]
    assert stored.inputs[0].example == [2, 1, 9, 9]
    assert tracebridge.load(tmp_path / "head.tb").graph == text


def test_saving_never_runs_the_graph_to_label_shapes(tmp_path, monkeypatch):
    from tracebridge.runtime import shapes

    def refuse(*args, **kwargs):
        raise AssertionError("save ran the shape probes")

    monkeypatch.setattr(shapes, "_probe", refuse)
    traced = tracebridge.trace(nn.Linear(3, 2), torch.rand(4, 3))
    traced.save(tmp_path / "lin.tb")
    first = (tmp_path / "lin.tb").read_bytes()
    traced.save(tmp_path / "lin.tb")  # the same bytes each time: a file is deterministic
    assert (tmp_path / "lin.tb").read_bytes() == first
    assert "f32[4, 2] = linear(%input" in tracebridge.load(tmp_path / "lin.tb").graph


def test_input_of_another_dtype_kind_is_refused_with_advice():
    traced = tracebridge.trace(lambda x: x * 2, torch.rand(3))
    assert traced(torch.rand(3, dtype=torch.float64)).dtype == torch.float64  # same kind
    for runtime in ("codegen", "interpreter"):
        traced = tracebridge.trace(lambda x: x * 2, torch.rand(3), runtime=runtime)
        with pytest.raises(tracebridge.GuardError) as info:
            traced(torch.arange(3))
        assert str(info.value) == (
            "input x has dtype int64, but the trace was made with float32; pass a "
            "floating-point tensor (the traced code may depend on the kind of dtype)"
        )


def test_save_refuses_an_unknown_producer_language(tmp_path):
    traced = tracebridge.trace(lambda x: x + 1, torch.rand(2))
    with pytest.raises(
        tracebridge.ArtifactError, match="language must be 'python' or 'r', not 'julia'"
    ):
        tracebridge.save(traced, tmp_path / "f.tb", language="julia")
    assert not (tmp_path / "f.tb").exists()
    tracebridge.save(traced, tmp_path / "f.tb", language="r")
    doc, _ = tracebridge.artifact.read_json(tmp_path / "f.tb")
    assert doc["producer"]["language"] == "r"


def test_torch_jit_inspection_names_answer(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    traced = tracebridge.trace(net, torch.randn(2, 3))
    loaded = tracebridge.load(traced.save(tmp_path / "n.tb") or tmp_path / "n.tb")
    for module in (traced, loaded):
        assert module.original_name == "Sequential"
        assert module.inlined_graph == module.graph and "linear" in module.graph
    function = tracebridge.trace(torch.sin, torch.randn(2))
    assert function.inlined_graph == function.graph


@pytest.mark.parametrize(
    "args, kwargs, where",
    [
        (
            ({"a": torch.ones(2)}, (torch.ones(2), torch.ones(2)), 3),
            {},
            "argument 3 is 3 where the trace was made with 2",
        ),
        (
            ({"b": torch.ones(2)}, (torch.ones(2), torch.ones(2)), 2),
            {},
            "argument 1 has keys ['b'] where the trace was made with ['a']",
        ),
        (
            ({"a": torch.ones(2)}, (torch.ones(2),), 2),
            {},
            "argument 2 has 1 item where the trace was made with 2",
        ),
        (
            ({"a": torch.ones(2)}, (torch.ones(2), 1.0), 2),
            {},
            "argument 2[1] is 1.0 where the trace was made with a tensor",
        ),
        (({"a": torch.ones(2)},), {}, "missing 2 required positional arguments: 'pair' and 'n'"),
        (
            ({"a": torch.ones(2)},),
            {"z": 1},
            "the call has 1 positional argument where the trace was made with 3",
        ),
    ],
)
def test_a_call_shaped_unlike_the_example_names_the_first_difference(args, kwargs, where):
    def f(d, pair, n):
        return d["a"] * n + pair[0] - pair[1]

    example = ({"a": torch.randn(3)}, (torch.randn(3), torch.randn(3)), 2)
    traced = tracebridge.trace(f, example)
    with pytest.raises(tracebridge.TraceError) as info:
        traced(*args, **kwargs)
    message = str(info.value)
    # what Python itself refuses to bind is its TypeError (a BindingError, a TraceError)
    binding = isinstance(info.value, tracebridge.BindingError)
    assert where in message and (binding or "trace again with this call's arguments" in message)
    assert binding == ("missing" in where)


def test_torch_jit_only_arguments_are_accepted_as_torch_jit_spells_them():
    net = torch.nn.Linear(3, 2)
    x = torch.randn(2, 3)
    with pytest.warns(FutureWarning, match="optimize"):
        traced = tracebridge.trace(net, x, optimize=True, _force_outplace=True, _store_inputs=False)
    assert torch.equal(traced(x), net(x))
    with pytest.raises(TypeError, match="unexpected keyword argument 'chek_trace'"):
        tracebridge.trace(net, x, chek_trace=False)


class _Keywords(torch.nn.Module):
    def forward(self, x, mask=None):
        return x if mask is None else x * mask

    def scaled(self, x, scale):
        return x * scale


def test_trace_module_takes_keyword_inputs_as_torch_jit_does(tmp_path):
    m = _Keywords()
    inputs = {
        "forward": {"x": torch.randn(2, 3), "mask": torch.ones(2, 3)},
        "scaled": {"x": torch.randn(2, 3), "scale": torch.randn(2, 3)},
    }
    check = [
        {
            "forward": {"x": torch.randn(4, 3), "mask": torch.rand(4, 3)},
            "scaled": {"x": torch.randn(1, 3), "scale": torch.randn(1, 3)},
        }
    ]
    traced = tracebridge.trace_module(m, inputs, example_inputs_is_kwarg=True, check_inputs=check)
    loaded = tracebridge.load(traced.save(tmp_path / "k.tb") or tmp_path / "k.tb")
    x, mask = torch.randn(5, 3), torch.rand(5, 3)
    for fn in (traced, loaded):
        assert torch.equal(fn(x=x, mask=mask), x * mask)
        assert torch.equal(fn.scaled(x=x, scale=mask), x * mask)
    # A value that is not a dict is positional, as torch.jit's make_tuple reads it.
    positional = tracebridge.trace_module(m, {"forward": x}, example_inputs_is_kwarg=True)
    assert torch.equal(positional(x), x)
    assert torch.equal(positional(x=x), x)


@pytest.mark.parametrize("example, other", [(2, 2.0), (True, 1), (3.0, 3), (0, False)])
def test_a_number_of_another_type_is_another_call(example, other, tmp_path):
    """2, 2.0 and True are equal in Python but make other results (an int64 or a float
    product, an ``is True`` branch): a call with another type is refused, not run."""

    def scale(x, k):
        return x * k

    traced = tracebridge.trace(scale, (torch.tensor([1, 2]), example))
    loaded = tracebridge.load(traced.save(tmp_path / "s.tb") or tmp_path / "s.tb")
    for fn in (traced, loaded):
        assert torch.equal(fn(torch.tensor([1, 2]), example), scale(torch.tensor([1, 2]), example))
        with pytest.raises(tracebridge.TraceError, match="argument 2 is"):
            fn(torch.tensor([1, 2]), other)


def test_a_nan_argument_is_the_same_call_as_a_nan_example():
    traced = tracebridge.trace(lambda x, v: x + v, (torch.ones(2), float("nan")))
    assert torch.isnan(traced(torch.ones(3), float("nan"))).all()


def test_the_same_tensor_given_twice_traces():
    x = torch.randn(3)
    traced = tracebridge.trace(lambda a, b: a + b, (x, x))
    y = torch.randn(4)
    assert torch.equal(traced(y, y), y + y)
