"""A norm's check of one value per channel runs only where one read allows it to fail.

``F.group_norm`` (always) and ``F.batch_norm`` (in training) multiply sizes in Python and
raise ``ValueError`` where the product is 1; the trace records the reads, the products
and a guard. The generated code now runs them only where ``x.numel()`` (a product of
every size) or one size multiplied in directly allows a product of 1
(runtime/unit_products.py). These tests check that the refusals stay eager's (type and
words) at trace time and at the call, traced, loaded from a file and interpreted; that
results are eager's bit for bit over other sizes; and where the skip applies and where
it does not.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge.errors import GuardError
from tracebridge.runtime import unit_products

pytestmark = pytest.mark.usefixtures("quiet_warnings")

EAGER_WORDS = "Expected more than 1 value per channel when training"


def _runtimes(traced, tmp_path):
    """The traced object, its file loaded by the code generator and by the interpreter."""
    path = tmp_path / "m.tb"
    tracebridge.save(traced, path)
    return {
        "traced": traced,
        "loaded": tracebridge.load(path),
        "interpreter": tracebridge.load(path, runtime="interpreter"),
    }


def _eager_error(fn, *args):
    with pytest.raises(Exception) as caught:
        fn(*args)
    return caught.value


def _group_norm_stack() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.GroupNorm(4, 8), nn.SiLU(), nn.GroupNorm(2, 8), nn.GroupNorm(8, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-1, 1)
    return model.eval()


def test_group_norm_code_tests_numel_and_results_stay_eager_s(tmp_path):
    model = _group_norm_stack()
    runs = _runtimes(tracebridge.trace(model, torch.randn(1, 8, 4, 4)), tmp_path)
    code = runs["loaded"].code
    # groups 4, 2 and 8: a product of 1 needs numel at most 2 * g - 1
    for bound in (7, 3, 15):
        assert f".numel() <= {bound}:" in code
    shapes = [(1, 8, 4, 4), (3, 8, 5, 7), (2, 8, 1, 1), (1, 8, 2, 1), (1, 8, 1, 2), (0, 8, 3, 3)]
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            for shape in shapes:
                x = torch.randn(shape)
                want = model(x)
                for name, fn in runs.items():
                    got = fn(x)
                    assert torch.equal(got, want), (name, shape, grad)


def test_one_value_per_group_raises_eager_s_error_at_trace_and_at_call(tmp_path):
    model = _group_norm_stack()
    one = torch.randn(1, 8, 1, 1)  # GroupNorm(8, 8): one value per group
    err = _eager_error(model, one)
    assert isinstance(err, ValueError) and EAGER_WORDS in str(err)
    with pytest.raises(ValueError, match=EAGER_WORDS):
        tracebridge.trace(model, one)
    runs = _runtimes(tracebridge.trace(model, torch.randn(1, 8, 4, 4)), tmp_path)
    messages = set()
    for name, fn in runs.items():
        for grad in (False, True):
            with torch.set_grad_enabled(grad), pytest.raises(GuardError) as caught:
                fn(one)
            assert isinstance(caught.value, ValueError), name
            assert EAGER_WORDS in str(caught.value), name
            messages.add(str(caught.value))
    assert len(messages) == 1  # the same refusal, traced, loaded and interpreted


def _uneven_groups(x):
    return F.group_norm(x, 2)


def test_a_bad_group_count_keeps_eager_s_errors_in_eager_s_order(tmp_path):
    """3 channels in 2 groups: with one value per group eager's ValueError comes first
    (1 * 3 // 2 == 1), otherwise aten's RuntimeError; the trace gives the same."""
    runs = _runtimes(tracebridge.trace(_uneven_groups, torch.randn(1, 4, 3, 3)), tmp_path)
    assert ".numel() <= 3:" in runs["loaded"].code
    one = torch.randn(1, 3, 1, 1)
    uneven = torch.randn(1, 3, 2, 2)
    assert isinstance(_eager_error(_uneven_groups, one), ValueError)
    eager_uneven = _eager_error(_uneven_groups, uneven)
    assert isinstance(eager_uneven, RuntimeError)
    assert "divisible by num_groups" in str(eager_uneven)
    with pytest.raises(ValueError, match=EAGER_WORDS):
        tracebridge.trace(_uneven_groups, one)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        tracebridge.trace(_uneven_groups, uneven)
    for name, fn in runs.items():
        with pytest.raises(GuardError) as caught:
            fn(one)
        assert isinstance(caught.value, ValueError) and EAGER_WORDS in str(caught.value), name
        with pytest.raises(RuntimeError, match="divisible by num_groups") as caught:
            fn(uneven)
        assert not isinstance(caught.value, GuardError), name


def test_batch_norm_in_training_tests_one_size_and_keeps_its_refusal(tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).train()
    twin = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).train()
    twin.load_state_dict(model.state_dict())
    traced = tracebridge.trace(twin, torch.randn(2, 3, 6, 6))
    twin.load_state_dict(model.state_dict())
    path = tmp_path / "bn.tb"
    tracebridge.save(traced, path)
    loaded = tracebridge.load(path)
    loaded.load_state_dict(model.state_dict())
    assert ".shape[3] == 1:" in loaded.code  # N * H * W: the width decides first
    for shape in [(1, 3, 6, 6), (2, 3, 1, 1), (1, 3, 4, 1), (3, 3, 5, 2)]:
        x = torch.randn(shape)
        want = model(x)
        got = loaded(x)
        assert torch.equal(got, want), shape
        for key, value in model.state_dict().items():
            assert torch.equal(loaded.state_dict()[key], value), (shape, key)
    one = torch.randn(1, 3, 1, 1)
    err = _eager_error(model, one)
    assert isinstance(err, ValueError) and EAGER_WORDS in str(err)
    before = {k: v.clone() for k, v in loaded.state_dict().items()}
    with pytest.raises(GuardError) as caught:
        loaded(one)
    assert isinstance(caught.value, ValueError) and EAGER_WORDS in str(caught.value)
    for key, value in before.items():  # a refused call writes nothing (transaction.py)
        assert torch.equal(loaded.state_dict()[key], value), key


def _size_read_again(x):
    y = F.group_norm(x, 2)
    return y.reshape(x.shape[0], -1) * (x.shape[0] * x.shape[1] // 2)


def test_products_whose_values_are_read_elsewhere_stay_as_recorded(tmp_path):
    runs = _runtimes(tracebridge.trace(_size_read_again, torch.randn(2, 4, 3, 3)), tmp_path)
    assert ".numel() <=" not in runs["loaded"].code  # x.shape[0] is read again after
    for shape in [(2, 4, 3, 3), (1, 4, 1, 1), (5, 6, 2, 3)]:
        x = torch.randn(shape)
        want = _size_read_again(x)
        for name, fn in runs.items():
            assert torch.equal(fn(x), want), (name, shape)
    one = torch.randn(1, 2, 1, 1)
    for fn in runs.values():
        with pytest.raises(ValueError, match=EAGER_WORDS):
            fn(one)


def test_instance_norm_in_training_reads_the_last_size(tmp_path):
    def f(x):
        return F.instance_norm(x, use_input_stats=True)

    runs = _runtimes(tracebridge.trace(f, torch.randn(2, 3, 5, 4)), tmp_path)
    assert ".shape[3] == 1:" in runs["loaded"].code
    for shape in [(1, 3, 5, 4), (2, 3, 1, 2), (2, 3, 3, 1)]:
        x = torch.randn(shape)
        for name, fn in runs.items():
            assert torch.equal(fn(x), f(x)), (name, shape)
    spatial_one = torch.randn(2, 3, 1, 1)
    eager = _eager_error(f, spatial_one)
    assert isinstance(eager, ValueError)
    for name, fn in runs.items():
        with pytest.raises(ValueError) as caught:
            fn(spatial_one)
        assert str(eager).split(",")[0] in str(caught.value), name


def _graph_of(fn, *args):
    return tracebridge.trace(fn, args)._methods["forward"].graph


def test_plan_reads_the_recorded_group_norm_check():
    graph = _graph_of(_uneven_groups, torch.randn(1, 4, 3, 3))
    found = list(unit_products.plan(graph).values())
    assert len(found) == 1
    product = found[0]
    assert product.bound == 3 and product.dim is None
    assert graph.nodes[product.guard].op == "prim.guard"
    assert graph.nodes[product.first].op == "prim.size"
    assert product.tensor == graph.inputs[0].id


def test_plan_leaves_other_guards_alone():
    def branch(x):
        if x.shape[0] * x.shape[1] == 6:  # a product compared with 6, not 1
            return x + 1
        return x - 1

    def sum_of_sizes(x):
        if x.shape[0] + x.shape[1] == 1:  # a sum: a zero size lets the other be 1
            return x + 1
        return x - 1

    def two_tensors(x, y):
        if x.shape[0] * y.shape[0] == 1:  # sizes of two tensors
            return x + 1
        return x - 1

    assert unit_products.plan(_graph_of(branch, torch.randn(2, 3))) == {}
    assert unit_products.plan(_graph_of(sum_of_sizes, torch.randn(2, 3))) == {}
    assert unit_products.plan(_graph_of(two_tensors, torch.randn(2, 3), torch.randn(3))) == {}
