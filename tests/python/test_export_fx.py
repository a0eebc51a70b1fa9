"""The bridge (tracebridge.export.fx): a traced method as a torch.fx.GraphModule.

On every conformance model and every golden vector, the GraphModule computes what the trace
computes, at every shape the case is checked at (and at a doubled batch for the vectors);
its parameters and buffers are the traced module's own tensors; a guard that the trace
would refuse raises GuardError from the GraphModule too; torch.export of the GraphModule
keeps the traced sizes dynamic.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.export import fx as bridge

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CASES, Case  # noqa: E402
from test_vectors import ENTRIES, VECTORS, by_method, read_tensors  # noqa: E402


def _trace(case: Case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return case.trace()


def _calls(case: Case):
    if case.methods:
        return [(m, inputs) for m, calls in case.methods.items() for inputs in calls]
    return [("forward", inputs) for inputs in case.all_inputs]


def _state(obj) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in obj.state_dict().items()}


def _restore(obj, saved: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, v in obj.state_dict().items():
            v.copy_(saved[k])


@pytest.mark.parametrize("name", sorted(CASES))
def test_conformance_model_matches_trace(name: str) -> None:
    """Same outputs as the trace at every input of the case, and the same state afterwards
    (BatchNorm statistics in training mode update the traced module's buffers)."""
    case = CASES[name]()
    traced = _trace(case)
    for method, inputs in _calls(case):
        gm = tracebridge.to_graph_module(traced, method)
        before = _state(traced)
        torch.manual_seed(case.seed)
        expected = getattr(traced, method)(*inputs)
        after = _state(traced)
        _restore(traced, before)
        torch.manual_seed(case.seed)
        got = bridge.call(gm, *inputs)
        where = f"{name}.{method} on {[tuple(t.shape) for t in inputs]}"
        torch.testing.assert_close(got, expected, atol=case.atol, rtol=case.rtol, msg=where)
        torch.testing.assert_close(_state(traced), after, atol=0, rtol=0, msg=where)


def _doubled(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The inputs with the first one's first dimension doubled (another batch size)."""
    first, *rest = tensors
    return [torch.cat([first, first]) if first.dim() else first, *rest]


def _vector_cases():
    for name, entry in sorted(ENTRIES.items()):
        for case in entry["cases"]:
            yield pytest.param(name, case["label"], id=f"{name}-{case['label']}")


@pytest.mark.parametrize(("name", "label"), list(_vector_cases()))
def test_golden_vector_matches_trace(name: str, label: str) -> None:
    """The committed artifacts: the expected outputs on the stored inputs, the trace's
    result (or its GuardError) on a doubled batch."""
    entry = ENTRIES[name]
    case = next(c for c in entry["cases"] if c["label"] == label)
    loaded = tracebridge.load(VECTORS / entry["artifact"])
    if "mode" in case:
        loaded.train(case["mode"] == "train")
    inputs = by_method(read_tensors(case["inputs"]), "input")
    tol = entry["tolerance"]
    for method, args in inputs.items():
        gm = tracebridge.to_graph_module(loaded, method)
        fn = loaded if method == "forward" else getattr(loaded, method)
        if "raises" in case:
            with pytest.raises(tracebridge.GuardError):
                fn(*args)
            with pytest.raises(tracebridge.GuardError):
                gm(*args)
            continue
        want = by_method(read_tensors(case["expected"]), "output")[method]
        torch.manual_seed(0)
        got = list(gm(*args))
        torch.testing.assert_close(got, want, atol=tol["atol"], rtol=tol["rtol"])
        bigger = _doubled(args)
        try:
            torch.manual_seed(0)
            expected = fn(*bigger)
        except tracebridge.TraceError as refused:
            # The GraphModule refuses what the trace refuses: a guard as GuardError, an
            # op's own error (sizes that do not fit) as that op's error.
            guard = isinstance(refused, tracebridge.GuardError)
            kind = tracebridge.GuardError if guard else Exception
            with pytest.raises(kind):
                gm(*bigger)
            continue
        torch.manual_seed(0)
        torch.testing.assert_close(bridge.call(gm, *bigger), expected, atol=0, rtol=0)


def test_parameters_and_buffers_are_shared() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).train()
    traced = tracebridge.trace(net, torch.rand(5, 3))
    gm = tracebridge.to_graph_module(traced)
    assert gm.get_parameter("0.weight") is net[0].weight
    assert gm.get_buffer("1.running_mean").data_ptr() == net[1].running_mean.data_ptr()
    ours = {n: p.data_ptr() for n, p in gm.named_parameters()}
    assert ours == {n: p.data_ptr() for n, p in net.named_parameters()}

    before = net[0].weight.detach().clone()
    mean_before = net[1].running_mean.clone()
    optimizer = torch.optim.SGD(gm.parameters(), lr=0.1)
    loss = gm(torch.rand(6, 3))[0].pow(2).sum()
    loss.backward()
    optimizer.step()
    assert not torch.equal(net[0].weight, before), "the step did not reach the module"
    assert not torch.equal(net[1].running_mean, mean_before), "statistics not updated"
    assert net[0].weight.grad is not None


def test_sizes_stay_symbolic() -> None:
    def flatten(x):
        return x.view(x.size(0), -1) * x.size(1)

    traced = tracebridge.trace(flatten, torch.rand(2, 3, 4))
    gm = tracebridge.to_graph_module(traced)
    assert "size(0)" in gm.code and "size(1)" in gm.code
    for shape in [(2, 3, 4), (5, 1, 7), (1, 6, 2)]:
        x = torch.rand(shape)
        torch.testing.assert_close(gm(x)[0], flatten(x))


def _branchy(x):
    if x.size(0) > 2:
        return x.relu() * 2
    return x


def test_guard_failure_raises_guard_error() -> None:
    traced = tracebridge.trace(_branchy, torch.rand(3, 4))
    gm = tracebridge.to_graph_module(traced)
    torch.testing.assert_close(gm(torch.rand(5, 4))[0].shape, torch.Size([5, 4]))
    with pytest.raises(tracebridge.GuardError, match=r"x.size\(0\) > 2|x.shape\[0\] > 2"):
        gm(torch.rand(2, 4))


def test_guards_are_dynamo_guards_not_graph_breaks() -> None:
    """Under torch.compile with every size symbolic, a guard on a size becomes a guard of
    Dynamo's (fullgraph compiles: no graph break), so the compiled graph specialises on
    it as torch.compile of the original code does; a call that breaks it recompiles and
    raises GuardError (without fullgraph, where the raise may break the graph)."""
    traced = tracebridge.trace(_branchy, torch.rand(3, 4))
    gm = tracebridge.to_graph_module(traced)
    whole = torch.compile(gm.forward, dynamic=True, fullgraph=True)
    x = torch.rand(6, 4)
    torch.testing.assert_close(whole(x)[0], _branchy(x))
    torch._dynamo.reset()
    split = torch.compile(gm.forward, dynamic=True)
    torch.testing.assert_close(split(x)[0], _branchy(x))
    with pytest.raises(tracebridge.GuardError, match=r"x.shape\[0\] > 2"):
        split(torch.rand(2, 4))
    torch._dynamo.reset()


def test_pytree_structure_is_recoverable() -> None:
    def f(pair, scale):
        a, b = pair["a"], pair["b"]
        return {"sum": a + b, "parts": (a * scale, None, b)}

    args = ({"a": torch.rand(2), "b": torch.rand(2)}, torch.tensor(3.0))
    traced = tracebridge.trace(f, args, strict=False)
    gm = tracebridge.to_graph_module(traced, flat=True)
    flat = bridge.flatten_inputs(gm, *args)
    assert [t.data_ptr() for t in flat] == [
        args[0]["a"].data_ptr(),
        args[0]["b"].data_ptr(),
        args[1].data_ptr(),
    ]
    out = gm(*flat)
    assert isinstance(out, tuple) and len(out) == 3
    torch.testing.assert_close(bridge.unflatten_outputs(gm, out), f(*args))
    torch.testing.assert_close(bridge.call(gm, *args), f(*args))
    with pytest.raises(tracebridge.BindingError, match="missing 1 required positional argument"):
        bridge.call(gm, args[0])
    with pytest.raises(tracebridge.TraceError, match="shaped differently"):
        bridge.call(gm, args[0], args[0])
    # The default form takes the call as f does: the dict whole, flattened inside.
    whole = tracebridge.to_graph_module(traced)
    assert bridge.info(whole).signature == "pair, scale"
    torch.testing.assert_close(bridge.unflatten_outputs(whole, whole(*args)), f(*args))
    torch.testing.assert_close(bridge.call(whole, scale=args[1], pair=args[0]), f(*args))


def test_respect_mode_follows_the_module() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    traced = tracebridge.trace(net, torch.rand(4, 3), respect_mode=True)
    x = torch.rand(4, 3)
    traced.eval()
    torch.testing.assert_close(tracebridge.to_graph_module(traced)(x)[0], net[0](x))
    traced.train()
    gm = tracebridge.to_graph_module(traced)
    assert bridge.info(gm).method == "trainforward" and gm.training


def test_program_with_its_state() -> None:
    net = torch.nn.Linear(3, 2)
    traced = tracebridge.trace(net, torch.rand(4, 3))
    gm = tracebridge.to_graph_module(traced.program)
    x = torch.rand(2, 3)
    torch.testing.assert_close(gm(x)[0], net(x))


def test_errors_say_what_to_do() -> None:
    with pytest.raises(tracebridge.TraceError, match="trace it first"):
        tracebridge.to_graph_module(torch.nn.Linear(2, 2))
    traced = tracebridge.trace(torch.nn.Linear(2, 2), torch.rand(1, 2))
    with pytest.raises(tracebridge.TraceError, match="no method 'encode'.*pass method="):
        tracebridge.to_graph_module(traced, "encode")
    with pytest.raises(tracebridge.TraceError, match="not made by tracebridge.to_graph_module"):
        bridge.info(torch.fx.symbolic_trace(torch.nn.Linear(2, 2)))


def test_a_frozen_copy_is_refused_saying_to_pass_the_trace() -> None:
    """freeze's copy is how this process runs the program: a GraphModule is made from the
    trace it froze (which then gives the same results)."""
    net = torch.nn.Linear(2, 2).eval()
    traced = tracebridge.trace(net, torch.rand(1, 2)).eval()
    function = tracebridge.trace(lambda x: x * 2, torch.rand(3, 2))
    for obj, kind in ((traced, "module"), (function, "function")):
        frozen = tracebridge.freeze(obj)
        with pytest.raises(tracebridge.TraceError) as info:
            tracebridge.to_graph_module(frozen)
        said = str(info.value)
        assert f"takes the traced {kind}, not its frozen copy (a {type(frozen).__name__}" in said
        assert "Pass the trace you froze (to_graph_module(traced))" in said
        x = torch.rand(4, 2)
        torch.testing.assert_close(tracebridge.to_graph_module(obj)(x)[0], frozen(x))


def test_torch_export_keeps_sizes_dynamic() -> None:
    """torch.export of the GraphModule (what AOTInductor and ONNX build on): the traced
    symbols are dynamic dimensions, and a size guard is an assertion of the program."""
    traced = tracebridge.trace(_branchy, torch.rand(3, 4))
    gm = tracebridge.to_graph_module(traced)
    exported = torch.export.export(
        gm, bridge.example_inputs(gm), dynamic_shapes=bridge.dynamic_shapes(gm), strict=False
    )
    for shape in [(3, 4), (8, 2)]:
        x = torch.rand(shape)
        torch.testing.assert_close(exported.module()(x)[0], _branchy(x))
    with pytest.raises(Exception, match=r"x.size\(\)\[0\] >= 3"):
        exported.module()(torch.rand(2, 4))


def test_state_names_that_cannot_be_module_paths_go_aside() -> None:
    """A state name that clashes with a module attribute (``training``) or has an empty
    part still reaches its tensor, the same object, under ``_tb_state``."""
    weight = torch.rand(3)
    program = tracebridge.trace(lambda x: x * 2, torch.rand(3)).program
    graph = program.methods["forward"]
    from tracebridge.ir import Node, Ref, StateEntry, Value

    program.state = {"training": StateEntry("buffer", weight), "a..b": StateEntry("buffer", weight)}
    reads = [
        Node("prim.state", ["training"], outputs=[Value(100, "Tensor", "float32", [3])]),
        Node("prim.state", ["a..b"], outputs=[Value(101, "Tensor", "float32", [3])]),
    ]
    for node in reads:
        node.out_spec = {"t": "leaf"}
    add = Node(
        "add",
        [Ref(100), Ref(101)],
        outputs=[Value(102, "Tensor", "float32", [3])],
        out_spec={"t": "leaf"},
    )
    graph.nodes = reads + [add] + graph.nodes
    graph.outputs = [Ref(102)]
    gm = tracebridge.to_graph_module(program)
    assert bridge.info(gm).state == {"training": "_tb_state.s0", "a..b": "_tb_state.s1"}
    assert gm.get_buffer("_tb_state.s0") is weight
    torch.testing.assert_close(gm(torch.rand(3))[0], weight * 2)


class _HalfGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 0.5


def test_the_graph_module_stays_real_after_torch_export_of_an_autograd_function():
    # Found by benchmarks/deploy_trial.py (BLOOM's GELU): after torch.export of the
    # GraphModule, its eager calls returned FakeTensors (export_onnx's check failed).
    from torch._subclasses.fake_tensor import FakeTensor

    from tracebridge.export import fx

    net = torch.nn.Linear(4, 4).eval()
    traced = tracebridge.trace(lambda x: _HalfGelu.apply(net(x)), torch.rand(3, 4))
    gm = tracebridge.to_graph_module(traced)
    torch.export.export(gm, (torch.rand(3, 4),), dynamic_shapes=fx.dynamic_shapes(gm), strict=False)
    x = torch.rand(5, 4)
    (out,) = gm(x)
    assert not isinstance(out, FakeTensor)
    with torch.no_grad():
        torch.testing.assert_close(out, traced(x))
