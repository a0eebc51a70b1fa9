"""A trusted load's package serves a call only where it computes what the plain program
would (backends/aot_context.py): under the caller's autocast, with autograd wanted, after
the plain object's weights or modes changed, the call runs on the plain program, with one
CompiledCodeWarning per reason; under torch.no_grad() the package runs, the plain object
never loaded.

Note: cost. One AOTInductor compile (about 20 s on two busy cores) per module: every test
loads the same file (a load is a tenth of a second)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import tracebridge
from tracebridge.backends import aot
from tracebridge.backends.aot_context import PlainWatch, ServeRule

WIDTH = 8


def small_net() -> nn.Module:
    """Linear, batch norm, dropout: its modes differ; its state has buffers and parameters."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 4)
    )
    with torch.no_grad():  # running statistics that are not 0 and 1
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    return net.eval()


@pytest.fixture(scope="module")
def compiled_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("aot_context") / "net.tb"
    tracebridge.save_compiled(tracebridge.trace(small_net(), torch.rand(3, WIDTH)), path)
    return path


@pytest.fixture
def loaded(compiled_file):
    return tracebridge.load_compiled(compiled_file, trust_compiled_code=True)


def _inputs(batch: int = 5) -> torch.Tensor:
    return torch.linspace(-2, 2, batch * WIDTH).reshape(batch, WIDTH)


def _calls_plain(m, x, match: str, **kwargs):
    """``m(x)``, which must run on the plain program and warn once with ``match``."""
    with pytest.warns(aot.CompiledCodeWarning, match=match):
        out = m(x, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot.CompiledCodeWarning)  # once per reason
        m(x, **kwargs)
    return out


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_a_call_without_autograd_runs_the_package_alone(loaded, context):
    x = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot.CompiledCodeWarning)
        with context():
            out = loaded(x)
    assert loaded.compiled_form == "aot" and loaded._fallback is None  # never loaded
    torch.testing.assert_close(out, small_net()(x), rtol=1e-5, atol=1e-5)


def test_autograd_wanted_runs_the_plain_program(loaded):
    """The package records no autograd: with grad mode on and the (saved) parameters
    requiring grad the plain program runs, and gradients reach the input as in eager code."""
    net = small_net()
    x = _inputs().requires_grad_()
    out = _calls_plain(loaded, x, r"grad mode is on .* torch\.no_grad\(\)")
    assert out.requires_grad
    out.square().sum().backward()
    got, x.grad = x.grad, None
    net(x).square().sum().backward()
    torch.testing.assert_close(got, x.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", aot.CompiledCodeWarning)
        out = loaded(x)  # the plain calls changed nothing: the package again
    assert loaded._watch.changed() is None
    torch.testing.assert_close(out, net(x), rtol=1e-5, atol=1e-5)


def test_an_input_requiring_grad_runs_the_plain_program(loaded):
    """Parameters frozen (the remedy the warning names), the package serves grad mode;
    an input requiring grad still takes the plain program."""
    loaded.requires_grad_(False)  # reaches the plain object's parameters
    x = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot.CompiledCodeWarning)
        out = loaded(x)  # grad mode on, nothing requires grad: the package
    assert not out.requires_grad
    torch.testing.assert_close(out, small_net()(x), rtol=1e-5, atol=1e-5)
    wanted = x.clone().requires_grad_()
    out = _calls_plain(loaded, wanted, r"an input requires grad")
    assert out.requires_grad and out.grad_fn is not None


def test_autocast_runs_the_plain_program(loaded):
    net = small_net()
    x = _inputs()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = _calls_plain(loaded, x, r"autocast is on for cpu")
        want = net(x)
    assert out.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(out, want)


@pytest.mark.parametrize(
    "change", ["load_state_dict", "in_place", "assign", "data", "through_data"]
)
def test_changed_weights_run_the_plain_program(loaded, change):
    net = small_net()
    new = {
        k: torch.full_like(v, 0.25) for k, v in net.state_dict().items() if v.is_floating_point()
    }
    new["1.running_var"] = torch.full((WIDTH,), 2.0)
    if change == "load_state_dict":
        loaded.load_state_dict(new, strict=False)
    elif change == "assign":
        loaded.load_state_dict(new, strict=False, assign=True)
    else:
        for name, tensor in loaded.named_parameters():
            if change == "in_place":
                with torch.no_grad():
                    tensor.copy_(new[name])
            elif change == "through_data":  # no version moves: runtime/data_writes.py
                tensor.data.copy_(new[name])
            else:
                tensor.data = new[name].clone()
        for name, tensor in loaded.named_buffers():
            if name in new:
                with torch.no_grad():
                    tensor.copy_(new[name])
    net.load_state_dict(new, strict=False)
    x = _inputs()
    with torch.no_grad():
        out = _calls_plain(loaded, x, r"changed since it was loaded .* save_compiled again")
        torch.testing.assert_close(out, net(x), rtol=1e-5, atol=1e-5)


def test_an_attribute_set_on_the_compiled_object_is_the_plain_objects(loaded):
    """prober23a F7: ``m.fc = other`` landed on the wrapper, which neither the package nor
    the plain object reads, and calls went on with the old layer silently. It is set on
    the plain object, whose call refuses the replaced sub-module; a copy shares it; a
    pickle says what to do."""
    import copy
    import pickle

    shared = copy.copy(loaded)
    assert shared.fallback is loaded.fallback
    setattr(loaded, "4", nn.Linear(WIDTH, 4))
    assert getattr(loaded.fallback, "4") is getattr(loaded, "4")
    with (
        torch.no_grad(),
        pytest.raises(tracebridge.TraceError, match=r"sub-module '4' .* replaced"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", aot.CompiledCodeWarning)
        loaded(_inputs())
    for how in (pickle.dumps, copy.deepcopy):
        with pytest.raises(tracebridge.TraceError, match="load the file again"):
            how(loaded)


def test_another_mode_runs_the_plain_program_until_set_back(loaded):
    """``train()`` reaches the plain object, which refuses (traced without respect_mode);
    ``eval()`` brings the package back. A sub-module's flag counts as the root's."""
    x = _inputs()
    with torch.no_grad():
        loaded.train()
        refused = pytest.raises(tracebridge.GuardError)
        with pytest.warns(aot.CompiledCodeWarning, match=r"evaluation: .* \.eval\(\)"), refused:
            loaded(x)
        loaded.eval()
        with warnings.catch_warnings():
            warnings.simplefilter("error", aot.CompiledCodeWarning)
            torch.testing.assert_close(loaded(x), small_net()(x), rtol=1e-5, atol=1e-5)
        loaded.get_submodule("3").train()  # the dropout alone
        assert loaded._rule.why_plain([x], loaded._watch)[0] == "modes"
        with pytest.raises(tracebridge.TraceError, match="sub-module '3' is in training"):
            loaded(x)


def test_the_serving_rule_reads_the_files_requires_grad():
    """Before the plain object is loaded, the state's ``requires_grad`` as saved decides
    (a frozen model's package serves grad mode); once loaded, its tensors' own flags."""
    frozen = {"state": {"w": {"requires_grad": False}, "b": {"requires_grad": False}}}
    trainable = {"state": {"w": {"requires_grad": True}}}
    x = torch.rand(2)
    assert ServeRule(frozen, "cpu").why_plain([x], None) is None
    assert ServeRule(trainable, "cpu").why_plain([x], None)[0] == "grad"
    with torch.no_grad():
        assert ServeRule(trainable, "cpu").why_plain([x.requires_grad_()], None) is None
    traced = tracebridge.trace(nn.Linear(2, 2), torch.rand(3, 2))
    watch = PlainWatch(traced)
    assert ServeRule(frozen, "cpu").why_plain([torch.rand(2)], watch)[0] == "grad"
    traced.requires_grad_(False)
    assert ServeRule(trainable, "cpu").why_plain([torch.rand(2)], watch) is None


def _reads_grad_mode(x):
    return x * 2 if torch.is_grad_enabled() else x * 3


def test_a_program_reading_the_calls_context_loads_on_the_plain_program(compiled_file, tmp_path):
    """The package holds the answer its export gave to ``torch.is_grad_enabled()``; the
    plain program guards it. (The package stored is another program's: the load gives
    the plain program before any package code could run.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(_reads_grad_mode, torch.rand(3, 4))
    package = aot.extract_package(compiled_file, tmp_path / "any.pt2")
    path = tmp_path / "reads.tb"
    with pytest.warns(aot.CompiledCodeWarning, match=r"will serve no call.*prim\.grad_enabled at "):
        tracebridge.save_compiled(traced, path, package=package)  # said before a compile
    with pytest.warns(aot.CompiledCodeWarning, match=r"reads the call's context \(prim\.grad"):
        m = tracebridge.load_compiled(path, trust_compiled_code=True)
    assert m.compiled_form == "runtime" and "prim.grad_enabled" in m.compiled_reason
    x = torch.ones(3, 4)
    torch.testing.assert_close(m(x), x * 2)
    with torch.no_grad(), pytest.raises(tracebridge.GuardError):
        m(x)  # traced with grad mode on: refused, never x * 2


def _doc(traced) -> dict:
    """The part of a file's document that ``fixed_read`` reads."""
    from tracebridge.ir.program import graph_to_json

    return {"methods": {name: graph_to_json(g) for name, g in traced.program.methods.items()}}


class _Rotary(nn.Module):
    """As transformers' LlamaRotaryEmbedding: a forward decorated ``@torch.no_grad()``."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv", torch.linspace(0.1, 1.0, 4))

    @torch.no_grad()
    def forward(self, x):
        return (x[..., :4] * self.inv).cos()


class _WithRotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.rot, self.fc = _Rotary(), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x) * self.rot(x)


class _ReadsGradMode(nn.Module):
    def forward(self, x):
        with torch.no_grad():
            y = x.cos()
        return y * 2 if torch.is_grad_enabled() else y * 3


def test_a_no_grad_block_does_not_stop_the_package():
    """prober24a F3: a ``@torch.no_grad()`` sub-module forward (every HF rotary embedding)
    made a saved package never serve: "reads the call's context (prim.grad_enabled at ?)".
    The read only restores the caller's mode; a read used otherwise still stops it, and
    names its line."""
    from tracebridge.backends.aot_context import fixed_read

    traced = tracebridge.trace(_WithRotary().eval(), torch.rand(3, 8))
    assert fixed_read(_doc(traced), "forward") is None
    traced = tracebridge.trace(_ReadsGradMode(), torch.rand(3, 8))
    read = fixed_read(_doc(traced), "forward")
    assert read.startswith("prim.grad_enabled at ") and "test_aot_context.py:" in read


def test_a_fused_variant_reading_grad_mode_does_not_stop_the_package():
    """nn.TransformerEncoderLayer's graph with autograd reads nothing of the context; the
    fused variant that reads grad mode is the plain program's own."""
    from tracebridge.backends.aot_context import fixed_read

    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    traced = tracebridge.trace(layer, torch.rand(2, 5, 16))
    doc = _doc(traced)
    assert len(doc["methods"]) > 1
    assert fixed_read(doc, "forward") is None
    variant = next(name for name in doc["methods"] if name != "forward")
    assert fixed_read(doc, variant).startswith("prim.grad_enabled at ")


def test_hooks_run_on_the_plain_program(loaded):
    """The package runs no hook: one on the loaded object, or a global one, takes the
    plain program, which runs it; one on a sub-module is refused, as the plain call does."""
    x = _inputs()
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: out * 0)
    try:
        with torch.no_grad():
            out = _calls_plain(loaded, x, r"forward hook is registered")
    finally:
        handle.remove()
    assert torch.count_nonzero(out) == 0
    handle = loaded.register_forward_hook(lambda mod, args, out: out + 1)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), small_net()(x) + 1, rtol=1e-5, atol=1e-5)
        handle.remove()
        torch.testing.assert_close(loaded(x), small_net()(x), rtol=1e-5, atol=1e-5)
        loaded.get_submodule("0").register_forward_hook(lambda mod, args, out: out * 0)
        with pytest.raises(tracebridge.TraceError, match="sub-module '0' .* other hooks"):
            loaded(x)


def test_sizes_the_trace_returns_come_back_as_python_numbers():
    """Found by a prober: the package gives a returned size back as a 0-dim tensor, where
    eager and the plain program give an int."""
    from tracebridge.backends.aot import AOTCompiled

    def f(x):
        return x * 2, x.shape[1], x.shape[0] * x.shape[1]

    graph = tracebridge.trace(f, torch.randn(3, 4)).program.methods["forward"]

    def package(flat):  # what an AOTInductor runner returns: tensors only
        x = flat[0]
        return [x * 2, torch.tensor(x.shape[1]), torch.tensor(x.shape[0] * x.shape[1])]

    compiled = AOTCompiled(package, None, graph, "forward", ServeRule({"state": {}}, "cpu"))
    x = torch.randn(5, 9)
    with torch.no_grad():
        doubled, width, count = compiled(x)
    assert torch.equal(doubled, x * 2)
    assert (width, count) == (9, 45) and type(width) is int and type(count) is int


class _DoubleRelu(TorchDispatchMode):
    """Doubles every relu's output, as a numerics-debugging mode might."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.ops.aten.relu.default else out


class _DoubleReluFunction(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func in (torch.relu, nn.functional.relu) else out


@pytest.mark.parametrize("mode", [_DoubleRelu, _DoubleReluFunction])
def test_a_python_mode_runs_the_plain_program(loaded, mode):
    """prober24a F6: the package served calls under a TorchDispatchMode /
    TorchFunctionMode and ignored the mode (silently off by 0.7)."""
    net, x = small_net(), _inputs()
    with torch.no_grad(), mode():
        want = net(x)
        out = _calls_plain(loaded, x, r"Torch(Dispatch|Function)Mode is active")
    assert (want - small_net()(x)).abs().max() > 0.1  # the mode changes the answer
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_vmap_runs_the_plain_program(loaded):
    """prober24a F6: torch.func.vmap over the package was a TraceError about sizes."""
    net = small_net()
    xs = torch.stack([_inputs(), _inputs() * 0.5, _inputs() - 1])
    with torch.no_grad(), pytest.warns(aot.CompiledCodeWarning, match=r"torch\.func transform"):
        out = torch.func.vmap(loaded)(xs)
    with torch.no_grad():
        torch.testing.assert_close(out, torch.func.vmap(net)(xs), rtol=1e-5, atol=1e-5)
