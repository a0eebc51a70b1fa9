"""A conversion that gave back its own input when traced (trace/returned_inputs.py): on every
call the trace serves, both names mean what they mean in eager, or the call raises
GuardError naming the conversion's line; in memory and after save/load. The common case,
``x = x.contiguous()`` then reads of values, stays general: no guard."""

from __future__ import annotations

import warnings

import pytest
import torch

import tracebridge


def _traced(fn, example, tmp_path, check_trace=True):
    """The trace of ``fn`` in memory and loaded back from a file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        traced = tracebridge.trace(fn, example, check_trace=check_trace)
    path = tmp_path / "f.tb"
    traced.save(path)
    return [traced, tracebridge.load(path)]


def _expect(fn, runs, make_args, outcome):
    """Each of ``runs`` on fresh ``make_args()``: eager's result (and eager's inputs after
    the call), or GuardError naming this file where ``outcome`` is "guard"."""
    for run in runs:
        if outcome == "guard":
            args = make_args()
            before = [a.clone() for a in args]
            with pytest.raises(tracebridge.GuardError) as info:
                run(*args)
            assert __file__ + ":" in str(info.value)
            for a, b in zip(args, before):  # refused before any write into the inputs
                assert torch.equal(a, b)
            continue
        eager_args, traced_args = make_args(), make_args()
        expected = fn(*eager_args)
        got = run(*traced_args)
        for e, g in zip(
            expected if isinstance(expected, tuple) else (expected,),
            got if isinstance(got, tuple) else (got,),
        ):
            assert e.dtype == g.dtype and torch.allclose(e, g)
        for e, g in zip(eager_args, traced_args):
            assert torch.equal(e, g)


def _nchw():
    return (torch.arange(96.0).reshape(2, 3, 4, 4),)


def _channels_last():
    return (torch.arange(96.0).reshape(2, 3, 4, 4).to(memory_format=torch.channels_last),)


def _transposed():
    return (torch.arange(96.0).reshape(2, 3, 4, 4).transpose(2, 3),)


def contiguous_then_write(x):
    shortcut = x
    h = x.contiguous()
    h.mul_(0.5)
    return h + shortcut


def test_contiguous_then_write_refuses_a_call_where_it_copies(tmp_path):
    runs = _traced(contiguous_then_write, _nchw(), tmp_path)
    _expect(contiguous_then_write, runs, _nchw, "right")
    _expect(contiguous_then_write, runs, _channels_last, "guard")
    _expect(contiguous_then_write, runs, _transposed, "guard")


def contiguous_then_write_through_view(x):
    h = x.contiguous()
    h.view(-1)[0] = 100.0
    return x.sum()


def earlier_view_written(x):
    v = x[0]
    h = x.contiguous()
    v.mul_(2)
    return x.sum() + h.sum()


@pytest.mark.parametrize("fn", [contiguous_then_write_through_view, earlier_view_written])
def test_a_write_into_shared_memory_tells_the_names_apart(tmp_path, fn):
    runs = _traced(fn, _nchw(), tmp_path)
    _expect(fn, runs, _nchw, "right")
    _expect(fn, runs, _transposed, "guard")


def to_channels_last_then_write(x):
    y = x.to(memory_format=torch.channels_last)
    y.zero_()
    return x.sum()


def test_to_memory_format_then_write(tmp_path):
    runs = _traced(to_channels_last_then_write, _channels_last(), tmp_path)
    _expect(to_channels_last_then_write, runs, _channels_last, "right")
    _expect(to_channels_last_then_write, runs, _nchw, "guard")


def test_to_memory_format_guard_follows_suggest_memory_format(tmp_path):
    """A channels-last-contiguous tensor whose strides do not suggest channels-last (C = 1
    in NCHW order) is copied by eager's to(memory_format=channels_last): refused."""
    runs = _traced(to_channels_last_then_write, _channels_last(), tmp_path)
    one_channel = lambda: (torch.ones(2, 1, 4, 4),)  # noqa: E731
    assert torch.ones(2, 1, 4, 4).is_contiguous(memory_format=torch.channels_last)
    _expect(to_channels_last_then_write, runs, one_channel, "guard")


def to_other_then_write(x, y):
    z = x.to(y)
    z.mul_(2)
    return x * 1


def to_other_then_read(a, b):
    c = a.to(b)
    return a * 1, c


def type_as_then_read(a, b):
    c = a.type_as(b)
    return a * 1, c


@pytest.mark.parametrize("fn", [to_other_then_write, to_other_then_read, type_as_then_read])
def test_conversion_to_another_tensors_dtype_is_guarded(tmp_path, fn):
    def same():
        return torch.ones(2), torch.ones(2)

    def other():
        return torch.ones(2), torch.ones(2, dtype=torch.float64)

    runs = _traced(fn, same(), tmp_path)
    _expect(fn, runs, same, "right")
    _expect(fn, runs, other, "guard")


W = torch.randn(4, 4)


def type_as_both_ways(x):
    y = x @ W
    return y.type_as(x), x.type_as(y)


def test_type_as_under_the_callers_autocast_is_guarded(tmp_path):
    runs = _traced(type_as_both_ways, (torch.randn(3, 4),), tmp_path)
    for run in runs:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = torch.randn(3, 4)
            try:
                got = run(x)
            except tracebridge.GuardError as error:
                assert __file__ + ":" in str(error)
                continue
            expected = type_as_both_ways(x)
        assert [g.dtype for g in got] == [e.dtype for e in expected]


def resolve_conj_then_write(x):
    y = x.resolve_conj()
    y.mul_(2)
    return x * 1


def resolve_neg_then_write(x):
    y = x.resolve_neg()
    y.mul_(2)
    return x * 1


def test_resolve_conj_then_write(tmp_path):
    def plain():
        return (torch.tensor([1 + 1j, 2 + 2j]),)

    def conj_view():
        return (torch.tensor([1 + 1j, 2 + 2j]).conj(),)

    runs = _traced(resolve_conj_then_write, plain(), tmp_path)
    _expect(resolve_conj_then_write, runs, plain, "right")
    _expect(resolve_conj_then_write, runs, conj_view, "guard")


def test_resolve_neg_then_write(tmp_path):
    def plain():
        return (torch.tensor([1.0, 2.0]),)

    def neg_view():
        return (torch._neg_view(torch.tensor([1.0, 2.0])),)

    runs = _traced(resolve_neg_then_write, plain(), tmp_path, check_trace=False)
    _expect(resolve_neg_then_write, runs, plain, "right")
    _expect(resolve_neg_then_write, runs, neg_view, "guard")


def contiguous_then_stride(a):
    c = a.contiguous()
    return torch.tensor(a.stride()), c


def test_stride_of_the_original_after_contiguous(tmp_path):
    runs = _traced(contiguous_then_stride, (torch.ones(2, 3),), tmp_path)
    _expect(contiguous_then_stride, runs, lambda: (torch.ones(2, 3),), "right")
    _expect(contiguous_then_stride, runs, lambda: (torch.ones(3, 2).t(),), "guard")


def contiguous_then_reads(x):
    x = x.contiguous()
    return x * 2 + x.sum(), x.view(x.shape[0], -1)


def test_contiguous_then_only_reads_stays_general(tmp_path):
    """The common case: no guard, and a non-contiguous input is served right."""
    runs = _traced(contiguous_then_reads, _nchw(), tmp_path)
    assert runs[0].guards == []
    assert not any(
        node.op.startswith("prim.is_contiguous")
        for node in runs[0].program.methods["forward"].nodes
    )
    for make in (_nchw, _channels_last, _transposed):
        _expect(contiguous_then_reads, runs, make, "right")


def to_channels_last_3d_then_write(x):
    y = x.to(memory_format=torch.channels_last_3d)
    y.add_(1)
    return x.sum()


def test_to_channels_last_3d_then_write(tmp_path):
    def last():
        return (torch.arange(48.0).reshape(1, 3, 2, 2, 4).to(memory_format=torch.channels_last_3d),)

    def plain():
        return (torch.arange(48.0).reshape(1, 3, 2, 2, 4),)

    runs = _traced(to_channels_last_3d_then_write, last(), tmp_path)
    _expect(to_channels_last_3d_then_write, runs, last, "right")
    _expect(to_channels_last_3d_then_write, runs, plain, "guard")


def two_conversions_then_write(x):
    x.contiguous()
    c = x.resolve_conj()
    c.mul_(2)
    return x * 1


def test_one_write_settles_every_conversion_of_the_tensor(tmp_path):
    def plain():
        return (torch.tensor([1 + 1j, 2 + 2j]),)

    def conj_view():  # contiguous: only the conjugate bit tells
        return (torch.tensor([1 + 1j, 2 + 2j]).conj(),)

    runs = _traced(two_conversions_then_write, plain(), tmp_path)
    _expect(two_conversions_then_write, runs, plain, "right")
    _expect(two_conversions_then_write, runs, conj_view, "guard")


def resolve_conj_both(x):
    y = x.resolve_conj()
    y.mul_(2)
    return x * 1, y


def test_resolve_conj_of_a_conjugate_view_copies_as_eager(tmp_path):
    """Traced with a conjugate view, eager's resolve_conj() makes a copy: so does the trace,
    for calls with a conjugate view; a plain tensor (given back by eager) is refused."""

    def conj_view():
        return (torch.tensor([1 + 1j, 2 + 2j]).conj(),)

    runs = _traced(resolve_conj_both, conj_view(), tmp_path)
    _expect(resolve_conj_both, runs, conj_view, "right")
    _expect(resolve_conj_both, runs, lambda: (torch.tensor([1 + 1j, 2 + 2j]),), "guard")


def two_inputs_given_back_then_a_write(a, b):
    a2 = a.contiguous()  # gives back a (remembered)
    b2 = b.contiguous()  # gives back b (remembered)
    b2.add_(1)  # settles b's entry, while a's is still remembered
    return a2 + b2


def test_two_remembered_conversions_then_a_write_into_the_second(tmp_path):
    """Settling one remembered conversion among others compared the entries with ``==``
    (a dataclass's), a tensor against a tensor, whose truth value raised inside the
    tracer (prober22a F4, HF StaticCache decoding); entries are told apart by identity."""

    def inputs():
        return torch.arange(3.0), torch.arange(3.0) + 10

    runs = _traced(two_inputs_given_back_then_a_write, inputs(), tmp_path)
    _expect(two_inputs_given_back_then_a_write, runs, inputs, "right")
