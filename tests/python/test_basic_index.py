"""A ``getitem`` whose index runs one view op runs that op in calls without autograd
(runtime/basic_index.py): ``x[:, :, k]`` as ``select``, ``x[:, None]`` as ``unsqueeze``,
the same views as eager and the interpreter on every shape; indexes where the rank could
make the two differ, calls with autograd and subclasses keep ``__getitem__``. And a
``chunk`` whose count the loader bounded runs its kernel without the check."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.ir import Node, Ref, Value
from tracebridge.runtime import basic_index, checked_ops, support

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_view

FULL = slice(None)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _getitem(index) -> Node:
    return Node("getitem", [Ref(0), index], outputs=[Value(id=2, kind="Tensor")])


KINDS = {0: "Tensor", 1: "int", 3: "Tensor"}


@pytest.mark.parametrize(
    "index, op, dim, pick",
    [
        ((FULL, FULL, 0), "select", 2, 0),
        (-1, "select", 0, -1),
        ((FULL, Ref(1)), "select", 1, Ref(1)),
        ((Ellipsis, 3), "select", -1, 3),
        ((Ellipsis, 3, FULL), "select", -2, 3),
        ((FULL, 2, Ellipsis), "select", 1, 2),
        ((FULL, None), "unsqueeze", 1, None),
        (None, "unsqueeze", 0, None),
        ((Ellipsis, None), "unsqueeze", -1, None),
        ((Ellipsis, None, FULL), "unsqueeze", -2, None),
    ],
)
def test_indexes_of_one_view_op(index, op, dim, pick):
    found = basic_index.single_view(_getitem(index), KINDS)
    assert (found.op, found.tensor, found.dim, found.index) == (op, Ref(0), dim, pick)


@pytest.mark.parametrize(
    "index",
    [
        (FULL, 0, FULL),  # the trailing slice asks for a dimension select does not
        (FULL, None, FULL),
        (FULL, Ellipsis, 0),  # the ellipsis not first: the rank each form needs differs
        (0, FULL, Ellipsis, FULL),
        (FULL, FULL),  # an alias, no view op
        Ellipsis,
        (0, 1),  # two ops
        (0, None),
        (Ellipsis, 0, Ellipsis),
        (slice(1, None), 0),  # a slice that runs an op
        (FULL, True),  # a bool is advanced indexing
        (FULL, Ref(3)),  # a tensor index
        [0],
    ],
)
def test_other_indexes_keep_getitem(index):
    assert basic_index.single_view(_getitem(index), KINDS) is None


def picks(x):
    n = x.shape[0] - 1  # a traced int
    return (
        x[:, :, 0],
        x[:, 1],
        x[n],
        x[..., -1],
        x[..., 2, :],
        x[:, None],
        x[..., None],
        x[None],
        x[..., None, :] * 2,
    )


def test_one_view_op_runs_with_the_same_views_on_every_shape(tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(picks, (torch.randn(2, 3, 4, 5),), check_trace=False)
    code = no_grad_code(traced)
    assert code.count("op_select_") == 5 and code.count("op_unsqueeze_") == 4
    assert "op_select_" not in traced.code  # the function with autograd keeps getitem
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    shapes = [(2, 3, 4, 5), (1, 2, 3, 1), (3, 4, 3, 2), (4, 2, 5, 1)]
    with torch.no_grad():
        for shape in shapes:
            for x in (torch.randn(shape), torch.randn(shape[::-1]).permute(3, 2, 1, 0)):
                expected = picks(x)
                for got in (fast(x), plain(x)):
                    assert all(same_view(a, b) for a, b in zip(got, expected, strict=True))


def test_an_index_out_of_range_raises_as_eager(tmp_path):
    fast = loaded(tracebridge.trace(lambda x: x[:, :, 3], (torch.randn(2, 3, 4),)), tmp_path)
    with torch.no_grad():
        assert torch.equal(fast(torch.ones(1, 1, 5)), torch.ones(1, 1))
        with pytest.raises(IndexError):
            torch.randn(2, 3, 2)[:, :, 3]
        with pytest.raises(tracebridge.OpError, match="IndexError"):
            fast(torch.randn(2, 3, 2))


def test_calls_with_autograd_get_eagers_gradients(tmp_path):
    fast = loaded(tracebridge.trace(picks, (torch.randn(2, 3, 4, 5),)), tmp_path)
    x1 = torch.randn(2, 3, 4, 5, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    got, expected = fast(x1), picks(x2)
    assert [a.grad_fn.name() for a in got] == [b.grad_fn.name() for b in expected]
    sum(a.sum() for a in got).backward()
    sum(b.sum() for b in expected).backward()
    assert torch.equal(x1.grad, x2.grad)


def test_subclasses_see_getitem(tmp_path):
    Sub = recording_subclass()
    fast = loaded(tracebridge.trace(picks, (torch.randn(2, 3, 4, 5),)), tmp_path)
    x = torch.randn(2, 3, 4, 5)
    with torch.no_grad():
        got = fast(x.as_subclass(Sub))
    assert Sub.calls.count("__getitem__") == 9 and "select" not in Sub.calls
    for a, b in zip(got, picks(x), strict=True):
        assert torch.equal(a.as_subclass(torch.Tensor), b) and a.stride() == b.stride()


def _chunk(args, kwargs=None) -> Node:
    outputs = [Value(id=10 + i, kind="Tensor") for i in range(2)]
    return Node("chunk", [Ref(0), *args], kwargs or {}, outputs)


def test_a_chunk_of_a_literal_count_runs_its_kernel():
    assert support.node_callable(_chunk([2]), {}) is torch.chunk
    assert support.node_callable(_chunk([2], {"dim": -1}), {}) is torch.chunk
    checked = checked_ops.CHECKED["chunk"]
    limit = checked_ops.LIMITS["results"]
    for node in (
        _chunk([Ref(1)]),  # a count known at the call: checked there
        _chunk([], {"chunks": 2}),
        _chunk([limit + 1]),  # past the limit: the check refuses it
        _chunk([True]),
    ):
        assert support.node_callable(node, {}) is checked
    with pytest.raises(ValueError, match="more than the limit"):
        support.node_callable(_chunk([limit + 1]), {})(torch.zeros(0), limit + 1)


def test_chunks_give_eagers_results(tmp_path):
    def halves(x):
        a, b = x.chunk(2, dim=-1)
        c = torch.chunk(x, x.shape[0], 0)
        return a * b, c[0]

    fast = loaded(tracebridge.trace(halves, (torch.randn(2, 6),)), tmp_path)
    with torch.no_grad():
        for x in (torch.randn(2, 6), torch.randn(2, 4), torch.randn(2, 2)):
            for a, b in zip(fast(x), halves(x), strict=True):
                assert same_view(a, b)


def test_strides_are_read_as_eager_reads_them(tmp_path):
    def strides(x):
        return x.reshape(x.stride(0), -1) * x.stride(-1) + x.stride(1)

    traced = tracebridge.trace(strides, (torch.randn(4, 3),), check_trace=False)
    assert ".stride()[" in traced.code
    fast = loaded(traced, tmp_path)
    for x in (torch.randn(4, 3), torch.randn(6, 2).t(), torch.randn(2, 8)[:, ::2]):
        assert torch.equal(fast(x), strides(x))
