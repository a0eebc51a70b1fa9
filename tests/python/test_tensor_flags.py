"""Reads of a tensor's flags and of the caller's modes that code branches on (op-set 8).

Each was a constant of the trace before: a call whose tensor differed (an inference tensor,
a view that starts elsewhere in its storage, an input that requires grad, a channels-last
input, a lazy negation) was served with the example's branch, silently. Each is now read
at call time and guarded, or (a storage offset) traced as an integer; a version counter and
a view's base (``x._base``) are refused. Every test compares the traced function with the
Python one on a call unlike the example, in process and after a save and a load.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import tracebridge
from tracebridge import GuardError, UnsupportedOpError


def _loaded(traced, tmp_path):
    path = tmp_path / "model.tb"
    traced.save(str(path))
    return tracebridge.load(str(path))


def _served_right_or_refused(fn, example: tuple, other: tuple, tmp_path, context=None):
    """Trace ``fn`` on ``example``; on ``other`` (under ``context``), the trace and its
    reloaded copy give the Python result or raise GuardError. Returns whether they served."""
    traced = tracebridge.trace(fn, example)
    served = []
    for runner in (traced, _loaded(traced, tmp_path)):
        with context() if context else contextlib.nullcontext():
            expected = fn(*other)
            try:
                got = runner(*other)
            except GuardError:
                served.append(False)
                continue
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        served.append(True)
    assert served[0] == served[1], "the reloaded trace decides as the traced one"
    return served[0]


def _branch(flag):
    return lambda a: a + 1 if flag(a) else a - 1


def test_is_same_size_follows_the_sizes(tmp_path):
    def fn(a, b):
        return a + 1 if a.is_same_size(b) else a - 1

    x = torch.randn(3, 4)
    assert not _served_right_or_refused(
        fn, (x, torch.randn(3, 4)), (x, torch.randn(4, 3)), tmp_path
    )
    assert _served_right_or_refused(fn, (x, torch.randn(3, 4)), (x, torch.randn(3, 4)), tmp_path)
    assert not _served_right_or_refused(
        torch.is_same_size, (x, torch.randn(3, 4)), (x, torch.randn(3, 5)), tmp_path
    )


def test_storage_offset_is_a_traced_integer(tmp_path):
    def fn(a):
        return a * a.storage_offset()

    base = torch.randn(6, 4)
    assert _served_right_or_refused(fn, (torch.randn(3, 4),), (base[1:4],), tmp_path)
    assert _served_right_or_refused(fn, (base[2:5],), (base[1:4],), tmp_path)

    def strided(a):  # as_strided from the input's own offset: a window of the view
        return torch.as_strided(a, (2,), (1,), a.storage_offset() + 1)

    assert _served_right_or_refused(strided, (torch.randn(3, 4),), (base[1:4],), tmp_path)


def test_is_inference_of_an_input_is_guarded(tmp_path):
    with torch.inference_mode():
        inference = torch.randn(3, 4)
    x = torch.randn(3, 4)
    fn = _branch(torch.Tensor.is_inference)
    assert not _served_right_or_refused(fn, (x,), (inference,), tmp_path)
    with torch.inference_mode():
        another = torch.randn(2, 5)
    assert _served_right_or_refused(fn, (inference,), (another,), tmp_path)


def test_is_inference_of_a_result_under_no_grad_is_the_callers_answer(tmp_path):
    """A call without autograd runs the generated code inside inference mode for speed
    (runtime/lean.py): not where the graph asks whether a tensor is an inference tensor."""

    class Doubles(torch.nn.Module):
        def forward(self, a):
            b = a * 2
            return b + 1 if b.is_inference() else b - 1

    x = torch.randn(3, 4)
    assert _served_right_or_refused(Doubles(), (x,), (x,), tmp_path, torch.no_grad)
    assert not _served_right_or_refused(Doubles(), (x,), (x,), tmp_path, torch.inference_mode)


def test_inference_mode_of_the_caller_is_guarded(tmp_path):
    def fn(a):
        return a * 2 + 1 if torch.is_inference_mode_enabled() else a - 1

    x = torch.randn(3, 4)
    assert not _served_right_or_refused(fn, (x,), (x,), tmp_path, torch.inference_mode)
    assert _served_right_or_refused(fn, (x,), (x,), tmp_path, torch.no_grad)


def test_inference_mode_inside_the_codes_own_block_needs_no_guard(tmp_path):
    def fn(a):
        with torch.inference_mode():
            return a + 1 if torch.is_inference_mode_enabled() else a - 1

    traced = tracebridge.trace(fn, (torch.randn(3, 4),))
    assert "is_inference_mode_enabled" not in "\n".join(traced.guards)
    x = torch.randn(2, 5)
    torch.testing.assert_close(traced(x), x + 1)


def test_is_signed_guards_the_dtype(tmp_path):
    fn = _branch(torch.Tensor.is_signed)
    ints = torch.tensor([1, 2, 3])
    assert not _served_right_or_refused(fn, (ints,), (ints.to(torch.uint8),), tmp_path)
    assert _served_right_or_refused(fn, (ints,), (torch.tensor([4, 5]),), tmp_path)


def test_negative_and_conjugate_bits_are_guarded(tmp_path):
    lazy_neg = torch.randn(3, 4, dtype=torch.cfloat).conj().imag
    assert lazy_neg.is_neg()
    x = torch.randn(3, 4)
    assert not _served_right_or_refused(_branch(torch.Tensor.is_neg), (x,), (lazy_neg,), tmp_path)
    z = torch.randn(3, dtype=torch.cfloat)
    conj = _branch(torch.is_conj)
    assert not _served_right_or_refused(conj, (z,), (z.conj(),), tmp_path)


@pytest.mark.parametrize(
    "flag",
    [
        lambda t: t.requires_grad,
        lambda t: t.is_leaf,
        lambda t: t.grad_fn is None,
    ],
    ids=["requires_grad", "is_leaf", "grad_fn"],
)
def test_autograd_flags_of_results_are_guarded(flag, tmp_path):
    def fn(a):
        b = a * 2
        return b + 1 if flag(b) else b - 1

    x = torch.randn(3, 4)
    needs_grad = torch.randn(3, 4, requires_grad=True)
    assert not _served_right_or_refused(fn, (x,), (needs_grad,), tmp_path)
    assert _served_right_or_refused(fn, (x,), (torch.randn(5, 2),), tmp_path)


def test_requires_grad_of_a_parameter_is_guarded():
    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))

        def forward(self, a):
            return a * 2 if self.weight.requires_grad else a * 3

    model = Frozen()
    traced = tracebridge.trace(model, (torch.randn(3, 4),))
    x = torch.randn(2, 4)
    torch.testing.assert_close(traced(x), model(x))
    traced.weight.requires_grad_(False)
    with pytest.raises(GuardError, match="weight.requires_grad"):
        traced(x)


def test_a_version_counter_is_refused_with_its_line():
    with pytest.raises(UnsupportedOpError, match=r"a\._version at .*test_tensor_flags.py"):
        tracebridge.trace(lambda a: a + a._version, (torch.randn(3),))


def _base_is_none(a):
    return a + 1 if a._base is None else a - 1


def _doubled_base(a):
    return a[1:]._base * 2  # an input given as a view has its own base at the call


@pytest.mark.parametrize("fn", [_base_is_none, _doubled_base])
def test_a_views_base_is_refused_with_its_line(fn):
    """``x._base`` was a constant of the trace: ``_base_is_none`` served ``a + 1`` to a view
    (eager: ``a - 1``), and ``_doubled_base`` the input where eager doubles the tensor the
    input is a view of. Whether, and of what, a tensor is a view is the caller's."""
    with pytest.raises(UnsupportedOpError, match=r"\._base at .*test_tensor_flags.py:\d+") as info:
        tracebridge.trace(fn, (torch.randn(4),))
    assert "view" in str(info.value)


def test_the_base_of_a_captured_constant_is_read():
    base = torch.randn(6)
    constant = base[2:]

    def fn(a):
        return a + constant._base.sum()

    x = torch.randn(3)
    torch.testing.assert_close(tracebridge.trace(fn, (x,))(x), fn(x))


def test_channels_last_contiguity_is_guarded(tmp_path):
    def fn(a):
        return a + 1 if a.is_contiguous(memory_format=torch.channels_last) else a - 1

    x = torch.randn(1, 3, 4, 4)
    channels_last = x.to(memory_format=torch.channels_last)
    assert not _served_right_or_refused(fn, (x,), (channels_last,), tmp_path)
    assert _served_right_or_refused(fn, (channels_last,), (channels_last * 2,), tmp_path)


def test_get_device_guards_the_device(tmp_path):
    traced = tracebridge.trace(lambda a: a + a.get_device(), (torch.randn(3),))
    assert "get_device" in "\n".join(traced.guards)
    x = torch.randn(5)
    torch.testing.assert_close(traced(x), x - 1)


def test_flags_of_a_captured_constant_need_no_guard():
    constant = torch.randn(3)

    def fn(a):
        return a + 1 if constant.is_inference() or constant.requires_grad else a - 1

    traced = tracebridge.trace(fn, (torch.randn(3),))
    assert "is_inference" not in "\n".join(traced.guards)
    assert "requires_grad" not in "\n".join(traced.guards)


def _flags_and_offset(a):
    b = a * 2
    r = b + a.storage_offset()
    asks = a.is_inference() or b.grad_fn is not None or b.is_leaf is False
    return r + 1 if asks or a.is_contiguous(memory_format=torch.channels_last) else r - 1


def test_the_interpreter_and_the_fx_bridge_read_the_flags_alike():
    from tracebridge.export import to_graph_module

    base = torch.randn(8)
    x = base[3:6]
    for runtime in ("codegen", "interpreter"):
        traced = tracebridge.trace(_flags_and_offset, (torch.randn(3),), runtime=runtime)
        torch.testing.assert_close(traced(x), _flags_and_offset(x), rtol=0, atol=0)
        with pytest.raises(GuardError, match=r"grad_fn is not None"):
            traced(torch.randn(3, requires_grad=True))
    module = to_graph_module(tracebridge.trace(_flags_and_offset, (torch.randn(3),)))
    (got,) = module(x)
    torch.testing.assert_close(got, _flags_and_offset(x), rtol=0, atol=0)
