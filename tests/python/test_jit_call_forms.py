"""torch.jit.trace's call forms run with only the import changed (prober17's P4): example and
check inputs read by torch.jit's rules (a dict is one argument, any iterable a tuple), calls
bound by position or by keyword as Python binds them (traced and loaded), and
``traced.forward.code`` / ``.graph`` as TorchScript's ScriptMethod has them."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError, TracingCheckError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _loaded(traced):
    buffer = io.BytesIO()
    traced.save(buffer)
    buffer.seek(0)
    return tracebridge.load(buffer)


def combine(d):
    return d["a"] * 2 + d["b"]


def pick(d):
    if d["a"].sum() > 0:  # a guard on the data
        return d["a"].relu()
    return d["a"].sigmoid()


class Masked(nn.Module):
    def forward(self, x, mask=None):
        return x if mask is None else x * mask

    def scaled(self, x, scale):
        return x * scale


class TakesDict(nn.Module):
    def forward(self, d):
        return d["a"] - d["b"]


# --- example_inputs and check_inputs, by torch.jit's rules ------------------------------------


def test_a_dict_example_is_the_one_argument_as_in_torch_jit():
    d = {"a": torch.randn(3), "b": torch.randn(3)}
    traced = tracebridge.trace(combine, d)
    jitted = torch.jit.trace(combine, d, strict=False)
    other = {"a": torch.randn(5), "b": torch.randn(5)}
    for fn in (traced, _loaded(traced)):
        assert torch.equal(fn(other), combine(other))
        torch.testing.assert_close(fn(other), jitted(other))
    module = tracebridge.trace(TakesDict(), d)
    assert torch.equal(_loaded(module)(other), other["a"] - other["b"])
    by_method = tracebridge.trace_module(TakesDict(), {"forward": d})
    assert torch.equal(by_method(other), other["a"] - other["b"])


def test_lists_and_other_iterables_are_the_arguments():
    a, b = torch.randn(3), torch.randn(3)

    def add(x, y):
        return x + y

    for example in ([a, b], (t for t in (a, b)), iter([a, b])):
        traced = tracebridge.trace(add, example)
        assert torch.equal(traced(b, a), b + a)


@pytest.mark.parametrize(
    "example, words",
    [
        ("ab", "not str: to trace with one such input v, pass (v,)"),
        (3.0, "not float: to trace with one such input v, pass (v,)"),
    ],
)
def test_what_is_no_example_is_refused_with_what_to_pass(example, words):
    with pytest.raises(TraceError) as info:
        tracebridge.trace(lambda x: x * 2, example)
    assert "example_inputs must be a tensor, a dict, or a tuple or list of inputs" in str(
        info.value
    )
    assert words in str(info.value)


def test_a_numpy_example_is_refused_naming_from_numpy():
    np = pytest.importorskip("numpy")
    with pytest.raises(TraceError, match=r"not ndarray \(an array: pass torch.from_numpy\(a\)"):
        tracebridge.trace(lambda x: x * 2, np.ones(3))


def test_dict_check_inputs_are_one_argument_and_are_checked():
    """A check input that takes the other branch is caught: the dict reached the code as
    its one argument (read as keywords, the call would have failed instead)."""
    positive = {"a": torch.ones(3), "b": torch.ones(3)}
    tracebridge.trace(
        pick, positive, check_inputs=[{"a": torch.full((4,), 2.0), "b": torch.ones(4)}]
    )
    with pytest.raises(TracingCheckError):
        tracebridge.trace(pick, positive, check_inputs=[{"a": -torch.ones(3), "b": torch.ones(3)}])
    module = TakesDict()
    tracebridge.trace(module, positive, check_inputs=[positive, (positive,)])


def test_with_keyword_examples_a_dict_check_input_is_keywords():
    x = torch.randn(2, 3)
    traced = tracebridge.trace(
        Masked(),
        example_kwarg_inputs={"x": x, "mask": torch.ones(2, 3)},
        check_inputs=[{"x": torch.randn(4, 3), "mask": torch.rand(4, 3)}],
    )
    assert torch.equal(traced(x=x, mask=x), x * x)

    def scale(x, k):
        return x * k

    tracebridge.trace(
        scale,
        example_kwarg_inputs={"x": x, "k": x},
        check_inputs=[{"x": torch.randn(5, 3), "k": torch.randn(5, 3)}],
    )


def test_trace_module_is_kwarg_reads_a_value_that_is_not_a_dict_as_positional():
    x = torch.randn(2, 3)
    inputs = {"forward": {"x": x}, "scaled": (x, x)}
    checks = [{"forward": {"x": torch.randn(4, 3)}, "scaled": (torch.randn(1, 3), x[:1])}]
    traced = tracebridge.trace_module(
        Masked(), inputs, example_inputs_is_kwarg=True, check_inputs=checks
    )
    assert torch.equal(traced(x=x), x)
    assert torch.equal(traced.scaled(x, x), x * x)


def test_a_check_entry_of_trace_module_missing_a_method_is_named():
    x = torch.randn(2, 3)
    with pytest.raises(TraceError, match=r"check_inputs\[0\] has no inputs for method 'scaled'"):
        tracebridge.trace_module(
            Masked(), {"forward": x, "scaled": (x, x)}, check_inputs=[{"forward": x}]
        )


# --- calls bound by position or by keyword -----------------------------------------------------


def _every_spelling(fn, x, mask):
    """The calls Python binds to forward(x, mask): each gives x * mask."""
    expected = x * mask
    for call in (
        lambda: fn(x, mask),
        lambda: fn(x, mask=mask),
        lambda: fn(x=x, mask=mask),
        lambda: fn(mask=mask, x=x),
    ):
        assert torch.equal(call(), expected)


def test_keyword_traced_module_takes_positional_calls_as_torch_jit_does():
    x, mask = torch.randn(2, 3), torch.rand(2, 3)
    traced = tracebridge.trace(Masked(), example_kwarg_inputs={"x": x, "mask": mask})
    jitted = torch.jit.trace(Masked(), example_kwarg_inputs={"x": x, "mask": mask})
    y, m = torch.randn(4, 3), torch.rand(4, 3)
    torch.testing.assert_close(traced(y, m), jitted(y, m))
    for fn in (traced, _loaded(traced)):
        _every_spelling(fn, y, m)


def test_positionally_traced_module_takes_keyword_calls():
    x, mask = torch.randn(2, 3), torch.rand(2, 3)
    traced = tracebridge.trace(Masked(), (x, mask))
    for fn in (traced, _loaded(traced)):
        _every_spelling(fn, x, mask)
    only_x = tracebridge.trace(Masked(), (x,))
    for fn in (only_x, _loaded(only_x)):
        assert torch.equal(fn(x=x), x)


def test_mixed_examples_take_every_spelling():
    x, mask = torch.randn(2, 3), torch.rand(2, 3)
    traced = tracebridge.trace(Masked(), (x,), example_kwarg_inputs={"mask": mask})
    for fn in (traced, _loaded(traced)):
        _every_spelling(fn, x, mask)


def test_trace_module_methods_bind_too():
    x, s = torch.randn(2, 3), torch.randn(2, 3)
    inputs = {"forward": {"x": x}, "scaled": {"x": x, "scale": s}}
    traced = tracebridge.trace_module(Masked(), inputs, example_inputs_is_kwarg=True)
    for fn in (traced, _loaded(traced)):
        assert torch.equal(fn(x), x)
        assert torch.equal(fn.scaled(x, s), x * s)
        assert torch.equal(fn.scaled(x, scale=s), x * s)
        assert torch.equal(fn.forward(x), x)


def test_respect_mode_graphs_bind_too():
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            return self.body(x)

    wrap = Wrap().eval()
    x = torch.randn(2, 3)
    traced = tracebridge.trace(wrap, example_kwarg_inputs={"x": x}, respect_mode=True)
    with torch.no_grad():
        assert torch.equal(traced(x), wrap(x))
        assert torch.equal(_loaded(traced)(x), wrap(x))


def test_functions_bind_by_name_both_ways():
    def scale(x, k):
        return x * k

    x, k = torch.randn(3), torch.randn(3)
    by_position = tracebridge.trace(scale, (x, k))
    by_keyword = tracebridge.trace(scale, example_kwarg_inputs={"x": x, "k": k})
    for traced in (by_position, by_keyword):
        for fn in (traced, _loaded(traced)):
            assert torch.equal(fn(x, k), x * k)
            assert torch.equal(fn(x, k=k), x * k)
            assert torch.equal(fn(k=k, x=x), x * k)


def test_var_keywords_keep_their_rule():
    def total(x, **extra):
        return x + sum(extra.values())

    x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
    traced = tracebridge.trace(total, (x,), example_kwarg_inputs={"a": a, "b": b})
    assert torch.equal(traced(x=x, a=a, b=b), total(x, a=a, b=b))
    with pytest.raises(tracebridge.GuardError, match="in another order"):
        traced(x, b=b, a=a)
    with pytest.raises(TraceError, match="the trace takes \\(x: Tensor, a: Tensor, b: Tensor\\)"):
        traced(x, a, b)  # **extra takes no positions


def test_wrong_calls_are_refused_naming_the_parameters():
    x, mask = torch.randn(2, 3), torch.rand(2, 3)
    traced = tracebridge.trace(Masked(), example_kwarg_inputs={"x": x})
    for fn in (traced, _loaded(traced)):
        with pytest.raises(TraceError) as info:
            fn(x, mask)  # mask was not traced
        message = str(info.value)
        assert (
            "the call has 2 positional arguments where the trace was made with 0 "
            "(and the keyword arguments ['x'])"
        ) in message
        assert message.endswith("the trace takes (x: Tensor)")
        with pytest.raises(tracebridge.BindingError, match="missing 1 required positional"):
            fn()
        with pytest.raises(TraceError, match=r"keyword arguments are \['y'\] where"):
            fn(y=x)
    positional = tracebridge.trace(Masked(), (x,))
    for fn in (positional, _loaded(positional)):
        with pytest.raises(TraceError) as info:
            fn(x, x=x)
        assert str(info.value) == (
            "forward() got multiple values for argument 'x' (by position and by keyword); "
            "the trace takes (x: Tensor)"
        )


def _python_refusal(fn, *args, **kwargs) -> str:
    with pytest.raises(TypeError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_positional_only_parameters_refuse_keywords_as_python_does():
    def diff(x, /, y):
        return x - y

    class Diff(nn.Module):
        def forward(self, x, /, y):
            return x - y

    a, b = torch.randn(3), torch.randn(3)
    for original in (diff, Diff()):
        traced = tracebridge.trace(original, (a, b))
        assert traced.program.methods["forward"].positional_only == 1
        for fn in (traced, _loaded(traced)):
            assert torch.equal(fn(a, b), a - b)
            assert torch.equal(fn(a, y=b), a - b)
            for args, kwargs in (((), {"x": a, "y": b}), ((a,), {"x": b}), ((a, b), {"x": a})):
                expected = _python_refusal(original, *args, **kwargs)
                assert "positional-only arguments passed as keyword arguments: 'x'" in expected
                with pytest.raises(tracebridge.BindingError) as info:
                    fn(*args, **kwargs)
                assert isinstance(info.value, TypeError) and isinstance(info.value, TraceError)
                assert str(info.value) == (
                    "forward() got some positional-only arguments passed as keyword "
                    "arguments: 'x'; the trace takes (x: Tensor, /, y: Tensor)"
                )


def test_missing_and_extra_arguments_raise_pythons_type_error():
    """A call Python would refuse to bind (an argument left out that has no default,
    one too many) raises Python's TypeError, traced and loaded, as a BindingError."""

    class Scaled(nn.Module):
        def forward(self, x, y=None, *, scale=2.0):
            return x * scale if y is None else (x + y) * scale

    def weighted(x, *, w):
        return x * w

    a, b = torch.randn(3), torch.randn(3)
    model, traced = Scaled(), tracebridge.trace(Scaled(), a)
    kw_traced = tracebridge.trace(weighted, (a,), example_kwarg_inputs={"w": b})
    cases = [
        (traced, (), {}, "forward() missing 1 required positional argument: 'x'"),
        (traced, (a, b, a), {}, "forward() takes 2 positional arguments but 3 were given"),
        (kw_traced, (a,), {}, "forward() missing 1 required keyword-only argument: 'w'"),
    ]
    assert "missing 1 required positional argument: 'x'" in _python_refusal(model)
    assert "missing 1 required keyword-only argument: 'w'" in _python_refusal(weighted, a)
    for fn, args, kwargs, message in cases:
        for each in (fn, _loaded(fn)):
            with pytest.raises(tracebridge.BindingError) as info:
                each(*args, **kwargs)
            assert isinstance(info.value, TypeError) and isinstance(info.value, TraceError)
            assert str(info.value).startswith(message + "; the trace takes (")
    # a *args parameter's entries are never required: leaving one out is another shape
    spread = tracebridge.trace(lambda x, *rest: x + rest[0], (a, b))
    for args in ((a,), (a, b, b)):  # Python binds both: another shape of the trace's
        with pytest.raises(TraceError, match="shaped differently") as info:
            spread(*args)
        assert not isinstance(info.value, TypeError)


def test_a_positional_only_name_among_var_keywords_stays_a_keyword():
    """``def f(x=None, /, **extra)`` called ``f(t, x=u)``: Python puts ``x=u`` in ``extra``,
    so a call ``f(t, u)`` (``x`` positional, ``extra`` empty) is not the traced call."""

    def f(w, x=None, /, **extra):
        return w * 2 + extra["x"] if x is None else w + x

    a, b = torch.randn(3), torch.randn(3)
    traced = tracebridge.trace(f, (a,), example_kwarg_inputs={"x": b})
    graph = traced.program.methods["forward"]
    assert (graph.positional_only, graph.var_keywords) == (2, ["x"])
    for fn in (traced, _loaded(traced)):
        assert torch.equal(fn(a, x=b), f(a, x=b))
        with pytest.raises(TraceError, match="shaped differently"):
            fn(a, b)  # binds Python's x, which the trace never saw


def test_a_file_whose_keywords_name_a_positional_only_parameter_is_refused():
    import json
    import zipfile

    from tracebridge.check.program import check_program

    x = torch.randn(2)
    traced = tracebridge.trace(Masked(), (x,), example_kwarg_inputs={"mask": x})
    buffer = io.BytesIO()
    traced.save(buffer)
    with zipfile.ZipFile(buffer) as archive:
        doc = json.loads(archive.read("program.json"))
    graph = doc["methods"]["forward"]
    assert "positional_only" not in graph  # written only where there are some
    check_program(doc)
    graph["positional_only"] = 2
    with pytest.raises(TraceError, match="positional-only parameter 'mask' by keyword"):
        check_program(doc)
    graph["positional_only"] = 3
    with pytest.raises(TraceError, match="positional_only must be a count of arg_names"):
        check_program(doc)
    graph["positional_only"] = -1
    with pytest.raises(TraceError, match="positional_only"):
        check_program(doc)


def scaled(x, mask=None, scale=2.0):
    y = x * scale
    return y if mask is None else y * mask


def test_defaults_bind_as_python_binds_them():
    """The file records the callable's defaults: a call that leaves out a parameter the
    example gave its default, or gives its default to one the example left out, is the
    traced call; any other value is refused (the default 2.0 is not the traced 3.0)."""
    x, mask = torch.randn(2, 3), torch.rand(2, 3)
    same = (
        ((x,), {}),
        ((x, None), {}),
        ((x,), {"mask": None}),
        ((x, None, 2.0), {}),
        ((x,), {"scale": 2.0, "mask": None}),
    )
    for example in ((x,), (x, None), (x, None, 2.0)):
        traced = tracebridge.trace(scaled, example)
        for fn in (traced, _loaded(traced)):
            assert fn.program.methods["forward"].defaults == {
                "mask": {"t": "none"},
                "scale": {"t": "const", "v": 2.0},
            }
            for args, kwargs in same:
                assert torch.equal(fn(*args, **kwargs), scaled(*args, **kwargs))
            for args, kwargs in (((x, mask), {}), ((x, None, 3.0), {}), ((x,), {"scale": 2})):
                with pytest.raises(TraceError, match="shaped differently"):
                    fn(*args, **kwargs)
    by_three = tracebridge.trace(scaled, (x, None, 3.0))
    for fn in (by_three, _loaded(by_three)):
        assert torch.equal(fn(x, scale=3.0), scaled(x, scale=3.0))
        for args, kwargs in same:  # each scales by 2.0 in Python
            with pytest.raises(TraceError, match="shaped differently"):
                fn(*args, **kwargs)


def test_a_file_without_defaults_binds_as_before():
    """Files written before ``defaults`` (and graphs of callables without a signature)
    know no default: a call must pass what the example passed, as if the parameters had
    none."""
    x = torch.randn(2, 3)
    traced = tracebridge.trace(scaled, (x, None))
    traced.program.methods["forward"].defaults = {}
    loaded = _loaded(traced)
    assert loaded.program.methods["forward"].defaults == {}
    assert torch.equal(loaded(x, None), scaled(x))
    with pytest.raises(tracebridge.BindingError, match="missing 2 required positional"):
        loaded(x)


# --- traced.forward.code and .graph ---------------------------------------------------------


def test_forward_has_code_and_graph_as_a_script_method_has():
    x = torch.randn(2, 3)
    traced = tracebridge.trace(Masked(), (x, x))
    for fn in (traced, _loaded(traced)):
        assert fn.forward.code == fn.code
        assert fn.forward.graph == fn.graph
        assert "mul" in fn.forward.graph
        assert torch.equal(fn.forward(x, x), x * x)
    assert tracebridge.TracedModule.forward is tracebridge.TracedModule.forward


def test_forward_code_follows_the_mode_under_respect_mode():
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).eval()
    traced = tracebridge.trace(model, torch.randn(2, 3), respect_mode=True)
    assert traced.forward.graph.startswith("graph evalforward(")
    assert traced.forward.graph == traced.graph
    traced.train()
    assert traced.forward.graph.startswith("graph trainforward(")
    assert "dropout(%0, 0.5, True)" in traced.forward.graph
    assert traced.forward.code == traced.code


def test_tracing_a_traced_method_traces_that_method_of_the_module():
    """``traced.forward`` is a TracedMethod, not a bound method: tracing it still traces
    the module's method (as before it became one), and so does ``traced.scaled``."""
    x = torch.randn(2, 3)
    module = Masked()
    traced = tracebridge.trace_module(module, {"forward": (x, x), "scaled": (x, x)})
    for name in ("forward", "scaled"):
        again = tracebridge.trace(getattr(traced, name), (x, x))
        assert isinstance(again, tracebridge.TracedModule)
        assert torch.equal(again(x, x), getattr(module, name)(x, x))


def test_a_default_given_before_a_keyword_the_trace_took_binds():
    """Traced ``m(x, bias=b)``: ``m(x, None, b)`` gives mask its default and bias by
    position, as Python binds it."""

    class MaskBias(nn.Module):
        def forward(self, x, mask=None, bias=None):
            y = x if mask is None else x * mask
            return y if bias is None else y + bias

    x, b = torch.randn(2, 3), torch.randn(2, 3)
    model = MaskBias()
    traced = tracebridge.trace(model, (x,), example_kwarg_inputs={"bias": b})
    for fn in (traced, _loaded(traced)):
        assert torch.equal(fn(x, None, b), model(x, None, b))
        assert torch.equal(fn(x, mask=None, bias=b), model(x, bias=b))
        with pytest.raises(TraceError, match="shaped differently"):
            fn(x, b)  # Python binds b to mask
        with pytest.raises(TraceError, match="shaped differently"):
            fn(x, x, b)
