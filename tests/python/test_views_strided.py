"""``as_strided`` joins trees of views (runtime/views.py), with the integer arithmetic on
the sizes and strides the tree reads, and 0-dim integer tensors as sizes (read as ints
for the key): Longformer's chunking (``view`` to chunks, then ``as_strided`` with
``stride // 2`` and ``2 * n - 1``) runs as one ``as_strided`` of its base per key. The
first call with a key runs the checked ``as_strided``: a view outside its input's
elements is refused on every call."""

from __future__ import annotations

import re

import pytest
import torch

import tracebridge

from .graph_helpers import loaded, no_grad_code, same_view

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def chunk(hidden):
    """Longformer's ``_chunk`` (window 2): overlapping chunks of the sequence."""
    chunks = torch.div(hidden.size(1), 4, rounding_mode="trunc")  # a 0-dim tensor
    hidden = hidden.view(hidden.size(0), chunks, 4, hidden.size(2))
    size = list(hidden.size())
    size[1] = size[1] * 2 - 1
    stride = list(hidden.stride())
    stride[1] = stride[1] // 2
    chunked = hidden.as_strided(size=size, stride=stride)
    return chunked * 1.0, chunked


def test_longformer_chunks_run_as_one_as_strided_per_key(tmp_path):
    traced = tracebridge.trace(chunk, (torch.randn(1, 8, 3),), check_trace=False)
    code = no_grad_code(traced)
    assert "views: Tensor.view, as_strided" in code and "op_as_strided" not in code
    assert "op_as_strided" not in traced.code  # also with autograd (as traced when needed)
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for _ in range(2):  # the second round from the cache
            for n, d in ((8, 3), (12, 3), (4, 5), (16, 1)):
                x = torch.randn(2, n, d)
                expected = chunk(x)
                for got in (fast(x), plain(x)):
                    assert all(same_view(a, b) for a, b in zip(got, expected, strict=True))


def test_with_autograd_the_chunks_get_eagers_gradients(tmp_path):
    fast = loaded(tracebridge.trace(chunk, (torch.randn(1, 8, 3),)), tmp_path)
    x1 = torch.randn(2, 12, 3, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    (fast(x1)[0] * 3).sum().backward()
    (chunk(x2)[0] * 3).sum().backward()
    assert torch.equal(x1.grad, x2.grad)


def corner(x):
    return x.as_strided((x.size(1), 2), (1, x.size(0)))


def test_a_view_outside_the_input_is_refused_on_every_call(tmp_path):
    traced = tracebridge.trace(corner, (torch.randn(2, 3),), check_trace=False)
    assert "views: as_strided" in no_grad_code(traced)
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 3)
            assert same_view(fast(x), corner(x))
            for _ in range(2):  # (1, 3) reaches element 3 of 0..2: refused each time
                with pytest.raises(tracebridge.OpError, match="outside the input's own"):
                    fast(torch.randn(1, 3))


def by_count(x, k):
    y = x.view(k, -1)  # k: a 0-dim integer tensor, an input of the graph
    return y.as_strided((y.size(0), 2), (y.stride(0), 1)) + 0


def test_a_0_dim_size_is_part_of_the_key_by_its_value(tmp_path):
    traced = tracebridge.trace(by_count, (torch.randn(4, 6), torch.tensor(2)), check_trace=False)
    assert "views: Tensor.view, as_strided" in no_grad_code(traced)
    fast = loaded(traced, tmp_path)
    x = torch.randn(4, 6)
    with torch.no_grad():
        for k in (2, 3, 4, 2, 6, 3):  # one base shape, other counts: other views
            for dtype in (torch.int64, torch.int32, torch.uint8):  # uint8: run as traced
                count = torch.tensor(k, dtype=dtype)
                assert same_view(fast(x, count), by_count(x, count))
        with pytest.raises(tracebridge.OpError, match="invalid for input of size 24"):
            fast(x, torch.tensor(5))


def offset_one(x):
    return torch.as_strided(x, (x.shape[0], 1), (x.shape[1], 1), 1)  # offset for x alone


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_view_input_with_its_own_storage_offset_is_named_as_the_cause(runtime, tmp_path):
    """prober18 F12: a call whose input is a view into a larger storage (a slice of a
    batch) reaches, with a literal offset, elements of that storage outside the input,
    which eager reads and a trace never does. The error says so and what to pass; an
    in-process trace does not blame a hostile artifact (there is none), a loaded one may."""
    traced = tracebridge.trace(offset_one, (torch.randn(4, 3),), runtime=runtime)
    view = torch.randn(10, 12)[2:8, 3:6]  # storage offset 27, of 120 elements
    line = offset_one.__code__.co_firstlineno + 1
    for fn, from_file in ((traced, False), (loaded(traced, tmp_path, runtime=runtime), True)):
        with pytest.raises(tracebridge.OpError) as info:
            fn(view)
        message = str(info.value)
        # the op and the user's line (in the generated line, or the interpreter's node)
        assert re.search(rf"as_strided[ ,(]+\S*test_views_strided\.py:{line}\b", message)
        assert "reach storage elements 1..16, outside the input's own elements 27..89" in message
        assert "the input is a view at storage offset 27 into a storage of 120 elements" in message
        assert "`.clone()`" in message and "`.storage_offset() + k`" in message
        assert ("corrupt or hostile" in message) == from_file, message
        # The bounds stay: a tensor of its own runs, as eager does on it.
        own = view.clone()
        torch.testing.assert_close(fn(own), offset_one(own))


def test_an_op_failing_in_an_in_process_trace_names_no_artifact(tmp_path):
    traced = tracebridge.trace(lambda x: x.view(2, -1), (torch.randn(4),))
    with pytest.raises(tracebridge.OpError) as info:
        traced(torch.randn(3))
    assert str(info.value).endswith("the inputs do not suit the traced program (sizes, values)")
    with pytest.raises(tracebridge.OpError, match="corrupt or hostile"):
        loaded(traced, tmp_path)(torch.randn(3))
