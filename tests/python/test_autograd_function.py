"""Custom ``torch.autograd.Function`` (issue 12 item 5): one node with a traced forward and
backward graph, rebuilt by the runtime, so gradients are the function's own, in process,
after save and load, and in R's checker; what cannot be traced is refused at trace time."""

from __future__ import annotations

import copy
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.artifact import read_json
from tracebridge.check.program import check_program
from tracebridge.errors import GuardError, UnsupportedOpError

from .test_check_program import python_document_verdict, python_verdict, r_verdicts, write

HERE = os.path.basename(__file__)


class RoundSTE(torch.autograd.Function):
    """Straight-through estimator: round forward, identity gradient."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class QuantNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return RoundSTE.apply(self.lin(x) * 4) * 0.25


class SavedExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class ScaledMul(torch.autograd.Function):
    """Two tensor inputs and a number; the second input gets no gradient (None)."""

    @staticmethod
    def forward(ctx, x, w, scale):
        ctx.scale = scale
        ctx.w = w
        return x * w * scale, x + scale

    @staticmethod
    def backward(ctx, grad_prod, grad_sum):
        return grad_prod * ctx.w * ctx.scale + grad_sum, None, None


def _grads(fn, params, *inputs):
    """Outputs and gradients (inputs, then parameters) of ``sum(outputs)``."""
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    for p in params:
        p.grad = None
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.sum() for o in outs).backward()
    grads = [t.grad for t in inputs] + [
        p.grad.clone() if p.grad is not None else None for p in params
    ]
    for p in params:
        p.grad = None
    return [o.detach() for o in outs], grads


def _same(a, b):
    outs_a, grads_a = a
    outs_b, grads_b = b
    assert all(torch.equal(x, y) for x, y in zip(outs_a, outs_b))
    assert len(grads_a) == len(grads_b)
    for x, y in zip(grads_a, grads_b):
        assert (x is None) == (y is None)
        if x is not None:
            assert torch.equal(x, y), (x, y)


@pytest.fixture
def net():
    torch.manual_seed(0)
    return QuantNet()


def test_straight_through_gradients_match_eager(net, tmp_path):
    x = torch.randn(5, 4, requires_grad=True)
    traced = tracebridge.trace(net, x)
    params = list(net.parameters())
    eager = _grads(net, params, x)
    # The recorded gradient is the function's own (identity), not round's (zero).
    assert eager[1][0].abs().sum() > 0
    _same(_grads(traced, params, x), eager)
    other = torch.randn(2, 4, requires_grad=True)
    _same(_grads(traced, params, other), _grads(net, params, other))
    path = tmp_path / "ste.tb"
    traced.save(path)
    for runtime in ("codegen", "interpreter"):
        loaded = tracebridge.load(path, runtime=runtime)
        loaded.load_state_dict(net.state_dict())
        lparams = list(loaded.parameters())
        _same(_grads(loaded, lparams, other), _grads(net, params, other))
    # The subgraphs are graphs of the program, reached through the node, not by name.
    assert traced.methods == ["forward"]
    assert len(traced.program.methods) == 3
    assert "prim.autograd_function" in traced.graph
    check_program(read_json(path)[0], "ste.tb")


def test_saved_tensor_and_second_derivative():
    def f(x):
        return SavedExp.apply(x * 2)

    x = torch.randn(3, 2, requires_grad=True)
    traced = tracebridge.trace(f, x)
    _same(_grads(traced, [], x), _grads(f, [], x))
    for fn in (traced, f):
        xx = x.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(fn(xx).sum(), xx, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), xx)
        if fn is traced:
            got = (g.detach(), gg)
        else:
            want = (g.detach(), gg)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_two_inputs_a_number_and_a_none_gradient(tmp_path):
    def f(x, w):
        prod, total = ScaledMul.apply(x, w, 0.5)
        return prod + total

    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    traced = tracebridge.trace(f, (x, w))
    eager = _grads(f, [], x, w)
    assert eager[1][1] is None  # w gets no gradient
    _same(_grads(traced, [], x, w), eager)
    traced.save(tmp_path / "two.tb")
    _same(_grads(tracebridge.load(tmp_path / "two.tb"), [], x, w), eager)


class _Linear(torch.autograd.Function):
    """Parameters as arguments, saved inputs, and ctx.needs_input_grad in the backward."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = grad @ w
        if ctx.needs_input_grad[1]:
            gw = grad.t() @ x
        if ctx.needs_input_grad[2]:
            gb = grad.sum(0)
        return gx, gw, gb


class _Scale(torch.autograd.Function):
    """The setup_context form, with a number kept on ctx and a gradient of its own."""

    @staticmethod
    def forward(x, k):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.k * 3, None


class _Sin(torch.autograd.Function):
    """A custom function called inside another's forward, and a once_differentiable
    backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _Scale.apply(x, 2.0).sin()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class _Layers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.b = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return _Sin.apply(_Linear.apply(x, self.w, self.b)) + _Scale.apply(x, 1.5).sum()


def test_parameters_nested_functions_and_setup_context(tmp_path):
    torch.manual_seed(0)
    net = _Layers()
    x = torch.randn(5, 4, requires_grad=True)
    traced = tracebridge.trace(net, x)
    # Whether an input requires grad is not a decision of the traced code: no guard.
    assert "prim.requires_grad" not in traced.graph
    params = list(net.parameters())
    traced.save(tmp_path / "layers.tb")
    loaded = tracebridge.load(tmp_path / "layers.tb")
    loaded.load_state_dict(net.state_dict())
    for inputs in (x, torch.randn(7, 4, requires_grad=True), torch.randn(2, 4)):
        eager = _grads(net, params, inputs)
        _same(_grads(traced, params, inputs), eager)
        _same(_grads(loaded, list(loaded.parameters()), inputs), eager)


class _SortValues(torch.autograd.Function):
    """Values and indices; the indices are marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        values, indices = x.sort(-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        return torch.zeros_like(grad_values).scatter(-1, indices, grad_values * 3)


def test_non_differentiable_outputs(tmp_path):
    def f(x):
        values, indices = _SortValues.apply(x * 1.0)
        return values * indices.to(values.dtype), indices

    x = torch.randn(3, 5, requires_grad=True)
    traced = tracebridge.trace(f, x)
    assert "non_differentiable=[1]" in traced.graph
    traced.save(tmp_path / "sort.tb")
    loaded = tracebridge.load(tmp_path / "sort.tb")
    for fn in (traced, loaded):
        assert not fn(x)[1].requires_grad
        for inputs in (x, torch.randn(4, 5, requires_grad=True)):
            outs, grads = _grads(lambda t: f(t)[0], [], inputs)
            got = _grads(lambda t, fn=fn: fn(t)[0], [], inputs)
            _same(got, (outs, grads))


def test_inference_trace_keeps_the_node_and_trains_later():
    net = QuantNet()
    x = torch.randn(2, 4)
    with torch.no_grad():
        traced = tracebridge.trace(net, x)
    params = list(net.parameters())
    _same(_grads(traced, params, x), _grads(net, params, x))


class _Sizes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.rows = x.shape[0]
        return x.sum(0)

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(ctx.rows, grad.shape[0])


def test_a_size_kept_on_ctx_stays_traced(tmp_path):
    def f(x):
        return _Sizes.apply(x)

    x = torch.randn(3, 2, requires_grad=True)
    traced = tracebridge.trace(f, x)
    traced.save(tmp_path / "sizes.tb")
    loaded = tracebridge.load(tmp_path / "sizes.tb")
    for inputs in (x, torch.randn(5, 2, requires_grad=True)):
        _same(_grads(traced, [], inputs), _grads(f, [], inputs))
        _same(_grads(loaded, [], inputs), _grads(f, [], inputs))
    backward = traced.program.methods[
        next(n for n in traced.program.methods if n.startswith("autograd__Sizes_backward"))
    ]
    assert [n.op for n in backward.nodes][:1] == ["prim.item"]


# --- refused at trace time ---------------------------------------------------------------

GLOBAL = torch.ones(3)


class _Item(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * grad.sum().item()


class _Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _TooMany(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class _Global(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * GLOBAL


class _Branch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad if bool(grad.sum() > 0) else -grad


class _AutogradInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            y = x.detach().requires_grad_()
            (g,) = torch.autograd.grad((y**2).sum(), y)
        return grad * g


class _RawMemory(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * (x.data_ptr() % 2)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _NotTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, 3

    @staticmethod
    def backward(ctx, grad, _):
        return grad


@pytest.mark.parametrize(
    "fn, words",
    [
        (_Item, ["tensor data into a Python value", "prim.item"]),
        (_Branch, ["tensor data into a Python value", "prim.bool"]),
        (_Dirty, ["mark_dirty"]),
        (_TooMany, ["returns 2 gradients for 1 arguments"]),
        (_Global, ["neither an argument of apply nor saved"]),
        (_NotTensor, ["something other than tensors"]),
        (_RawMemory, ["tracing its forward and backward failed", "data_ptr"]),
        (_AutogradInside, ["cannot record torch.autograd.grad", f"{HERE}:"]),
    ],
)
def test_untraceable_functions_are_refused_where_a_gradient_can_flow(fn, words):
    def f(x):
        return fn.apply(x)

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(f, x)
    message = str(info.value)
    assert f"{fn.__module__}.{fn.__qualname__}.apply at" in message
    assert f"{HERE}:" in message
    assert "Never a wrong gradient" in message
    for word in words:
        assert word in message, message


def test_untraceable_function_without_gradient_is_recorded_with_a_guard():
    def f(x):
        return _Item.apply(x)

    x = torch.randn(3)
    with torch.no_grad():
        traced = tracebridge.trace(f, x)
        assert torch.equal(traced(x), f(x))
    assert "prim.autograd_function" not in traced.graph
    with pytest.raises(GuardError, match="has its own backward"):
        traced(x)


# --- the checker, in Python and R ----------------------------------------------------------


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> dict:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ag") / "ste.tb"
    tracebridge.trace(QuantNet(), torch.randn(2, 4)).save(path)
    with zipfile.ZipFile(path) as archive:
        return {
            "path": path,
            "doc": json.loads(archive.read("program.json")),
            "tensors": archive.read("tensors.safetensors"),
        }


def _node(doc):
    return next(
        n for n in doc["methods"]["forward"]["nodes"] if n["op"] == "prim.autograd_function"
    )


def chain(doc: dict, levels: int) -> None:
    """Make the custom function's forward graph call itself through ``levels`` copies, each
    a custom function node whose forward is the next copy (the last one rounds)."""
    node = _node(doc)
    fwd, bwd = node["kwargs"]["forward"], node["kwargs"]["backward"]
    base = doc["methods"][fwd]
    below = fwd
    for level in range(levels):
        graph = copy.deepcopy(base)
        graph["nodes"] = [
            {
                "op": "prim.autograd_function",
                "args": [[{"ref": base["inputs"][0]["id"]}]],
                "kwargs": {"forward": below, "backward": bwd, "saved": 0, "function": "m.F"},
                "outputs": copy.deepcopy(base["nodes"][-1]["outputs"]),
                "out_spec": {"t": "leaf"},
                "loc": "m.py:1",
            }
        ]
        below = f"autograd_chain_{level}"
        doc["methods"][below] = graph
    node["kwargs"]["forward"] = below


def test_custom_functions_nest_up_to_the_depth_limit(artifact):
    doc = copy.deepcopy(artifact["doc"])
    chain(doc, 8)
    check_program(doc, "chain.tb")


def crafted(doc: dict) -> dict[str, dict]:
    """Mutations of a file with a custom function node, each refused by both checkers."""
    names = list(doc["methods"])
    fwd, bwd = _node(doc)["kwargs"]["forward"], _node(doc)["kwargs"]["backward"]
    assert names == ["forward", fwd, bwd]
    cases = {}

    def mutate(name, edit):
        d = copy.deepcopy(doc)
        edit(d)
        cases[name] = d

    def self_reference(d):
        graph = d["methods"][bwd]
        grad = graph["inputs"][0]
        graph["nodes"].append(
            {
                "op": "prim.autograd_function",
                "args": [[{"ref": grad["id"]}]],
                "kwargs": {"forward": bwd, "backward": bwd, "saved": 0, "function": "m.F"},
                "outputs": [{"id": 99, "kind": "Tensor", "dtype": "float32", "shape": [2, 3]}],
                "out_spec": {"t": "leaf"},
                "loc": "m.py:1",
            }
        )

    mutate("ag_deep_chain", lambda d: chain(d, 70))
    mutate("ag_missing_graph", lambda d: d["methods"].pop(bwd))
    mutate("ag_wrong_name", lambda d: _node(d)["kwargs"].update(forward="nothere"))
    mutate("ag_wrong_arity", lambda d: _node(d)["kwargs"].update(saved=2))
    mutate("ag_inputs_arity", lambda d: _node(d)["args"][0].append(_node(d)["args"][0][0]))
    mutate("ag_self_reference", self_reference)
    mutate("ag_reads_state", lambda d: _node(d)["kwargs"].update(forward="forward"))
    mutate("ag_not_a_list", lambda d: _node(d).update(args=[_node(d)["args"][0][0]]))
    mutate("ag_no_saved", lambda d: _node(d)["kwargs"].pop("saved"))
    mutate("ag_nested_out", lambda d: d["methods"][fwd].update(out_spec={"t": "leaf"}))
    mutate("ag_non_diff_range", lambda d: _node(d)["kwargs"].update(non_differentiable=[1]))
    mutate("ag_non_diff_twice", lambda d: _node(d)["kwargs"].update(non_differentiable=[0, 0]))
    return cases


def test_checker_refuses_crafted_custom_function_files(artifact):
    check_program(artifact["doc"], "good.tb")
    expected = {
        "ag_missing_graph": "is not a graph of the file",
        "ag_wrong_name": "'nothere' is not a graph of the file",
        "ag_wrong_arity": "has 1 outputs, not 3",
        "ag_inputs_arity": "has 1 inputs, not 2",
        "ag_self_reference": "reaches itself",
        "ag_deep_chain": "graphs nest more than 64 levels",
        "ag_reads_state": "reads state",
        "ag_not_a_list": "must be tensors",
        "ag_no_saved": "needs a count of 'saved' values",
        "ag_nested_out": "must return a flat tuple",
        "ag_non_diff_range": "non_differentiable must list distinct positions",
        "ag_non_diff_twice": "non_differentiable must list distinct positions",
    }
    cases = crafted(artifact["doc"])
    assert set(cases) == set(expected)
    for name, doc in cases.items():
        with pytest.raises(tracebridge.ArtifactError) as info:
            check_program(doc, f"{name}.tb")
        assert expected[name] in str(info.value), str(info.value)
        assert "[rule: " in str(info.value)


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_leaves_custom_function_rules_to_python(artifact, tmp_path):
    """The graph rules of custom functions are execution rules, Python's alone (one
    checker): R's reader shows every crafted file, as Python's document rules accept it,
    and Python's full checker (which jit_load runs) refuses each."""
    cases = {"ag_good": artifact["doc"], **crafted(artifact["doc"])}
    paths = [write(tmp_path / f"{n}.tb", d, artifact["tensors"]) for n, d in cases.items()]
    r_verdict = r_verdicts(paths, tmp_path)
    for path in paths:
        want = "accept" if path.stem == "ag_good" else "refuse"
        assert python_verdict(path) == want, path.stem
        assert python_document_verdict(path) == "accept", path.stem
        assert r_verdict[path.name] == "accept", (path.stem, r_verdict[path.name])


def test_artifact_for_r(tmp_path):
    """The artifact R's test loads (tests/testthat/test-autograd-function.R) is made by the
    same code: its gradient is the straight-through one."""
    torch.manual_seed(0)
    net = QuantNet()
    traced = tracebridge.trace(net, torch.randn(2, 4))
    path = Path(tmp_path) / "ste.tb"
    traced.save(path)
    x = torch.ones(2, 4, requires_grad=True)
    tracebridge.load(path)(x).sum().backward()
    assert torch.allclose(x.grad, net.lin.weight.sum(0).expand(2, 4))
