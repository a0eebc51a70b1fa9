"""Session 15's prober, the findings fixed in the core: the other methods of a module
traced with ``trace_module`` follow its mode as ``forward`` does, and what a trace never
does again (sub-modules' hooks, globals the recording changed) is said at trace time."""

import copy
import io
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, TraceError, TracerWarning, UnsupportedOpError


class TwoMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x))

    def embed(self, x):
        return self.bn(self.lin(x)) * 2


def _examples():
    g = torch.Generator().manual_seed(0)
    return {"forward": torch.randn(3, 4, generator=g), "embed": torch.randn(3, 4, generator=g)}


def test_respect_mode_records_every_method_in_both_modes(tmp_path):
    torch.manual_seed(0)
    model = TwoMethods().train()
    eager = copy.deepcopy(model)
    traced = tracebridge.trace_module(model, _examples(), respect_mode=True)
    assert traced.program.dispatch["embed"] == {"train": "trainembed", "eval": "evalembed"}
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    x = torch.randn(5, 4)
    for training in (False, True, False):
        for obj in (eager, traced, loaded):
            obj.train(training)
        expected = eager.embed(x)
        torch.testing.assert_close(traced.embed(x), expected)
        torch.testing.assert_close(loaded.embed(x), expected)
    assert model.bn.num_batches_tracked == eager.bn.num_batches_tracked


def test_a_method_recorded_in_one_mode_refuses_the_other(tmp_path):
    torch.manual_seed(0)
    model = TwoMethods().train()
    traced = tracebridge.trace_module(model, _examples())
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    batches = model.bn.num_batches_tracked.clone()
    for obj in (traced, loaded):
        obj.eval()
        with pytest.raises(GuardError, match="embed was traced in training mode"):
            obj.embed(torch.randn(5, 4))
    assert torch.equal(model.bn.num_batches_tracked, batches)  # nothing ran


def test_respect_mode_refuses_a_method_name_it_would_shadow():
    class Clash(TwoMethods):
        def trainembed(self, x):
            return x

    with pytest.raises(TraceError, match="records method 'embed' as 'trainembed'"):
        tracebridge.trace_module(
            Clash(), {**_examples(), "trainembed": torch.randn(3, 4)}, respect_mode=True
        )


ACTIVATIONS = []


def collecting(x):
    h = x * 2
    ACTIVATIONS.append(h.detach())
    return h + 1


def test_a_global_the_recording_changed_is_named():
    ACTIVATIONS.clear()
    with pytest.warns(TracerWarning, match="changed 'ACTIVATIONS' while it was recorded"):
        traced = tracebridge.trace(collecting, torch.ones(3))
    assert len(ACTIVATIONS) == 1  # as the user's one call left it
    traced(torch.ones(3))
    assert len(ACTIVATIONS) == 1  # what the warning says


def test_sub_module_hooks_present_while_tracing_are_named():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    kept = {}
    model[0].register_forward_hook(lambda m, i, o: kept.__setitem__("a", o.detach()))
    with pytest.warns(TracerWarning, match=r"sub-module\(s\) '0' had hooks while tracing"):
        traced = tracebridge.trace(model, torch.ones(2, 3))
    kept.clear()
    traced(torch.ones(2, 3))
    assert kept == {}  # the hook never runs on calls, as the warning says


def test_no_warning_without_side_effects(recwarn):
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    tracebridge.trace(model, torch.ones(2, 3))
    tracebridge.trace(lambda x: x * 2, torch.ones(3))
    assert not [w for w in recwarn if issubclass(w.category, TracerWarning)]


def test_a_function_calling_a_global_model_leaves_its_statistics_as_one_call_did(
    unchecked_programs,  # its batch norm writes constants of the trace: not savable
):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).train()
    eager = copy.deepcopy(model)

    def predict(x):
        return model(x).softmax(-1)

    x = torch.randn(4, 3)
    traced = tracebridge.trace(predict, x)  # records, then checks: the code runs often
    eager(x)
    torch.testing.assert_close(model[1].running_mean, eager[1].running_mean)
    assert model[1].num_batches_tracked == 1
    y = torch.randn(5, 3)
    torch.testing.assert_close(traced(y), eager(y).softmax(-1))
    model.eval()  # the graph has the training-mode batch norm: refused, not run
    with pytest.raises(TraceError, match="called a BatchNorm1d in training mode"):
        traced(y)
    model.train()
    torch.testing.assert_close(traced(y), eager(y).softmax(-1))


@pytest.mark.parametrize(
    "replace",
    [
        lambda m: m.load_state_dict(
            {k: torch.randn_like(v) for k, v in m.state_dict().items()}, assign=True
        ),
        lambda m: setattr(m[0], "weight", nn.Parameter(torch.randn(4, 3))),
    ],
    ids=["load_state_dict_assign", "new_parameter"],
)
def test_a_function_calling_a_global_model_refuses_its_replaced_weights(replace):
    """The function's graph holds the model's tensors (prober17): a write into them is
    followed, a new tensor under the same name, which eager reads, is refused."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).eval()

    def predict(x):
        return model(x).softmax(-1)

    with pytest.warns(TracerWarning, match="Trace the module itself"):
        traced = tracebridge.trace(predict, torch.randn(2, 3))
    x = torch.randn(4, 3)
    with torch.no_grad():
        model[0].weight.mul_(2)  # a write: followed
    torch.testing.assert_close(traced(x), predict(x))
    replace(model)
    with pytest.raises(TraceError, match="holds another tensor under that name now"):
        traced(x)


class _SumOfOuters(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(3, 3))
        self.b = nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        return x @ torch.vmap(torch.outer)(self.a, self.b).sum(0)


@pytest.mark.parametrize(
    "code",
    [
        _SumOfOuters(),
        lambda x: torch.vmap(torch.sin)(x) * 2,
        lambda x: torch.func.grad(lambda t: (t**2).sum())(x),
    ],
    ids=["vmap_of_parameters", "vmap_of_input", "func_grad"],
)
def test_a_function_transform_inside_traced_code_is_refused(code):
    # its function runs on wrapped tensors: kept as constants they were stale after the
    # weights changed, and the file could not be written
    with pytest.raises(UnsupportedOpError, match=r"cannot trace a torch.func transform .* at "):
        tracebridge.trace(code, torch.randn(2, 3))


class _Annotated(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        with torch.profiler.record_function("block"):
            return self.linear(x).relu()


@pytest.mark.parametrize(
    "make", [_Annotated, lambda: nn.DataParallel(nn.Linear(3, 2))], ids=["annotated", "dp"]
)
def test_profiling_annotations_are_recorded_through(make, tmp_path):
    """torch.profiler.record_function changes no result (prober17): it was refused as an
    op of the profiler, and with it every nn.DataParallel, whose forward opens one."""
    torch.manual_seed(0)
    model = make()
    traced = tracebridge.trace(model, torch.randn(4, 3))
    assert "profiler" not in traced.graph
    traced.save(tmp_path / "m.tb")
    x = torch.randn(6, 3)
    for obj in (traced, tracebridge.load(tmp_path / "m.tb")):
        torch.testing.assert_close(obj(x), model(x))
    with torch.profiler.profile() as prof:  # the user's own profiling still sees eager's
        model(x)
    assert any("DataParallel" in e.name or e.name == "block" for e in prof.events())


def test_a_function_calling_an_evaluation_batch_norm_saves(tmp_path):
    """An evaluation-mode batch norm reads its statistics (prober17): the checker counted
    them as written, so a predict() function calling a model with one could not be saved,
    copied nor pickled (a training-mode one still cannot: it writes constants, as the
    test above says)."""
    import pickle

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()

    def predict(x):
        return model(x).mean((2, 3))

    traced = tracebridge.trace(predict, torch.rand(2, 3, 8, 8))
    traced.save(tmp_path / "p.tb")
    x = torch.rand(3, 3, 8, 8)
    for obj in (tracebridge.load(tmp_path / "p.tb"), copy.deepcopy(traced)):
        torch.testing.assert_close(obj(x), predict(x))
    torch.testing.assert_close(pickle.loads(pickle.dumps(traced))(x), predict(x))


def test_an_integer_past_64_bits_says_what_to_do():
    """A power of a size past 64 bits was refused as a corrupt graph (prober17): it is a
    bound of traced integer arithmetic, and the message says how to compute it."""

    def f(x):
        return x * x.shape[0] ** 30

    traced = tracebridge.trace(f, torch.ones(2), check_trace=False)
    with pytest.raises(tracebridge.TraceError, match=r"float\(n\) \*\* 30"):
        traced(torch.ones(5))
    torch.testing.assert_close(traced(torch.ones(3)), f(torch.ones(3)))


def test_text_of_a_size_returned_is_the_examples_and_guarded(tmp_path):
    """``str(x.shape[0])`` among the outputs (prober17) reached the graph as an object no
    runtime could give back: it is the example's text, and another size is refused."""

    def f(x):
        return x * 2, str(x.shape[0])

    traced = tracebridge.trace(f, torch.ones(3), strict=False)
    traced.save(tmp_path / "f.tb")
    for obj in (traced, tracebridge.load(tmp_path / "f.tb")):
        out, text = obj(torch.ones(3))
        assert text == "3" and type(text) is str and torch.equal(out, f(torch.ones(3))[0])
        with pytest.raises(GuardError, match=r"x.shape\[0\] == 3"):
            obj(torch.ones(4))


def test_a_cumulative_batch_norm_in_training_serves_every_later_call():
    """BatchNorm(momentum=None) in training (prober17; ``swa_utils.update_bn`` sets it):
    PyTorch's factor ``1.0 / float(num_batches_tracked)`` is a traced number of the
    buffer (``float`` of a one-element tensor in torch.nn.modules.batchnorm is traced:
    trace/integers.py), so each call averages with its own count, as eager does; it
    was refused at every call after the first."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=None)).train()
    eager = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)  # nothing to warn of
        traced = tracebridge.trace(model, torch.randn(4, 3))
    assert "prim.item" in traced.graph and "scalar.truediv(1.0" in traced.graph
    buffer = io.BytesIO()
    traced.save(buffer)
    buffer.seek(0)
    loaded = tracebridge.load(buffer).train()
    loaded_eager = copy.deepcopy(eager)
    for batch in (6, 2, 9, 5):
        x = torch.randn(batch, 3)
        torch.testing.assert_close(traced(x), eager(x))
        torch.testing.assert_close(loaded(x), loaded_eager(x))
        for name, want in eager[1].state_dict().items():
            torch.testing.assert_close(model[1].state_dict()[name], want)
            held = loaded.state_dict()[f"1.{name}"]
            torch.testing.assert_close(held, loaded_eager[1].state_dict()[name])
    assert int(model[1].num_batches_tracked) == 4  # the trace itself counted no batch
