"""The fast paths of checked ops keep every bound of the full check (issue 20, item 5).

``as_strided`` (Longformer, LED: ten calls per forward) takes a fast path for plain-int
sizes and strides, and ``_grouped_mm`` (mixture-of-experts models: four calls per
forward) makes its messages only when a check fails. Crafted arguments are still refused
with the full check's messages, and good ones give the kernel's results.
"""

from __future__ import annotations

import random

import pytest
import torch

from tracebridge.runtime import checked_ops, checked_views
from tracebridge.runtime.checked_views import _as_strided_checked, _within_plain, as_strided

# --- as_strided ------------------------------------------------------------------------------


def _same_view(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    assert got.data_ptr() == want.data_ptr()
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    "make, size, stride, offset",
    [
        (lambda s: s[:24], [2, 3, 4], [12, 4, 1], None),
        (lambda s: s[:24], (4, 3), (1, 4), None),  # a transposed view
        (lambda s: s[:24], torch.Size([2, 2]), (12, 1), 10),
        (lambda s: s[10:34], [3, 8], [8, 1], None),  # the input starts at 10
        (lambda s: s[10:34], [2, 2], [1, 1], 31),  # reaches 33, the input's last element
        (lambda s: s[:48].view(6, 8)[:, :4], [6, 2], [8, 2], None),  # a strided input
        (lambda s: s[:24], [0, 5], [1, 1], 90),  # an empty view reads nothing
        (lambda s: s[:24], [3, 1, 2], [0, 0, 1], 5),  # zero strides repeat an element
    ],
)
def test_as_strided_fast_path_gives_the_kernels_view(make, size, stride, offset):
    x = make(torch.arange(100.0))
    assert _within_plain(x, size, stride, offset)
    want = torch.as_strided(x, size, stride, x.storage_offset() if offset is None else offset)
    _same_view(as_strided(x, size, stride, offset), want)


@pytest.mark.parametrize(
    "make, size, stride, offset, words",
    [
        (lambda s: s[10:14], [6], [1], None, "outside the input's own elements"),
        (lambda s: s[10:14], [2], [1], 9, "outside the input's own elements"),
        (lambda s: s[10:14], [2], [1], 13, "outside the input's own elements"),
        (lambda s: s[10:14], [2, 2], [3, 1], 10, "outside the input's own elements"),
        # Within the storage (which PyTorch's own check allows), past the input's last
        # element: a strided input's elements end at 8*5+3 = 43.
        (lambda s: s[:48].view(6, 8)[:, :4], [1], [1], 44, "outside the input's own elements"),
        (lambda s: s[:0], [1], [1], None, "outside the input's own elements"),
        (lambda s: s[:8], [2, -1], [1, 1], None, "must be >= 0"),
        (lambda s: s[:8], [2], [-1], None, "must be >= 0"),
        (lambda s: s[:8], [2, 2], [1], None, "2 sizes but 1 strides"),
        (lambda s: s[:8], [2, True], [1, 1], None, "sizes must be integers"),
        (lambda s: s[:8], [2, 1.0], [1, 1], None, "sizes must be integers"),
        (lambda s: s[:8], [2], [torch.tensor(1.0)], None, "strides must be integers"),
        (lambda s: s[:8], [2], [1], 2.0, "the offset must be integers"),
    ],
)
def test_as_strided_crafted_arguments_are_refused_with_the_full_checks_message(
    make, size, stride, offset, words
):
    x = make(torch.arange(100.0))
    assert not _within_plain(x, size, stride, offset)
    with pytest.raises(ValueError, match=words):
        as_strided(x, size, stride, offset)


def test_as_strided_0_dim_tensor_sizes_are_read_as_ints():
    x = torch.arange(24.0)
    n = torch.tensor(3)
    got = as_strided(x, [2, n, torch.tensor(4, dtype=torch.int32)], [12, 4, 1], torch.tensor(0))
    _same_view(got, torch.as_strided(x, [2, 3, 4], [12, 4, 1], 0))
    with pytest.raises(ValueError, match="outside the input's own elements"):
        as_strided(x, [torch.tensor(25)], [1])
    with pytest.raises(ValueError, match="outside the input's own elements"):
        as_strided(x[:10], [n, 2], [1, torch.tensor(1)], torch.tensor(8))  # reaches 11
    # A float offset is refused, never read as "the input's own offset".
    with pytest.raises(ValueError, match="the offset must be integers"):
        as_strided(x, [n], [1], torch.tensor(1.0))
    with pytest.raises(ValueError, match="sizes must be integers"):
        as_strided(x, [torch.tensor(True)], [1])
    with pytest.raises(ValueError, match="sizes must be integers"):
        as_strided(x, [torch.tensor([2])], [1])


def test_as_strided_fast_path_decides_as_the_full_check_on_random_views():
    """Random inputs (offset and strided within a storage) and views: the fast path takes
    a view exactly when the full check allows it, and never one it refuses."""
    rng = random.Random(20)
    storage = torch.arange(200.0)
    taken = refused = 0
    for _ in range(3000):
        start = rng.randrange(0, 40)
        rows, cols = rng.randrange(0, 6), rng.randrange(1, 6)
        step = rng.choice([1, 2])
        x = storage[start : start + 60].view(6, 10)[:rows, : cols * step : step]
        dims = rng.randrange(1, 4)
        size = [rng.randrange(0, 5) for _ in range(dims)]
        stride = [rng.randrange(0, 12) for _ in range(dims)]
        offset = rng.choice([None, max(0, start + rng.randrange(-3, 30))])
        fast = _within_plain(x, size, stride, offset)
        try:
            full = _as_strided_checked(x, size, stride, offset)
        except ValueError:
            full = None
        assert fast == (full is not None), (x.shape, x.stride(), start, size, stride, offset)
        if fast:
            _same_view(as_strided(x, size, stride, offset), full)
            taken += 1
        else:
            refused += 1
        # The same view with some sizes, strides or the offset as 0-dim tensors (Longformer).
        wrap = [lambda v: v, torch.tensor, lambda v: torch.tensor(v, dtype=torch.int32)]
        size_t = [rng.choice(wrap)(v) for v in size]
        stride_t = [rng.choice(wrap)(v) for v in stride]
        offset_t = offset if offset is None else rng.choice(wrap)(offset)
        try:
            got = as_strided(x, size_t, stride_t, offset_t)
        except ValueError:
            got = None
        assert (got is None) == (full is None), (size_t, stride_t, offset_t)
        if got is not None:
            _same_view(got, full)
    assert taken > 300 and refused > 300  # both sides of the bound are exercised


# --- _grouped_mm -----------------------------------------------------------------------------


def _offs(*ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32)


def test_grouped_mm_gives_the_kernels_results():
    a2, b3 = torch.randn(8, 4), torch.randn(3, 4, 8)  # rows of 16 bytes
    offs = _offs(2, 2, 8)  # an empty group in the middle
    assert torch.equal(checked_ops.grouped_mm(a2, b3, offs), torch._grouped_mm(a2, b3, offs))
    a3, b3b = torch.randn(3, 6, 4), torch.randn(3, 4, 8)
    assert torch.equal(checked_ops.grouped_mm(a3, b3b), torch._grouped_mm(a3, b3b))
    a2b, b2 = torch.randn(4, 8), torch.randn(8, 4)
    offs2 = _offs(3, 8)
    assert torch.equal(checked_ops.grouped_mm(a2b, b2, offs2), torch._grouped_mm(a2b, b2, offs2))


@pytest.mark.parametrize(
    "offs, words",
    [
        (_offs(4, 6), r"offs \[4, 6\] must be non-decreasing ends from 0 that finish at 8"),
        (_offs(4, 600000), "finish at 8"),
        (_offs(6, 2), "non-decreasing"),
        (_offs(-2, 8), "from 0"),
        (_offs(2, 1, 8), "int32 vector of 2 group ends"),
        (torch.tensor([4, 8]), "int32 vector of 2 group ends"),  # int64
        (_offs(4, 8).view(1, 2), "int32 vector of 2 group ends"),
    ],
)
def test_grouped_mm_crafted_offsets_are_refused(offs, words):
    a, b = torch.randn(8, 4), torch.randn(2, 4, 4)
    with pytest.raises(checked_ops.CheckFailed, match=words):
        checked_ops.grouped_mm(a, b, offs)


def test_grouped_mm_checks_the_offsets_on_every_call():
    """No verdict is kept per offs tensor: ends written into the same tensor, even through
    ``.data`` (which leaves its version as it was), are checked again."""
    a, b = torch.randn(8, 4), torch.randn(2, 4, 4)
    offs = _offs(4, 8)
    checked_ops.grouped_mm(a, b, offs)
    version = offs._version
    offs.data[1] = 6
    assert offs._version == version
    with pytest.raises(checked_ops.CheckFailed, match="finish at 8"):
        checked_ops.grouped_mm(a, b, offs)
    offs[1] = 8
    checked_ops.grouped_mm(a, b, offs)
    offs[0] = 9
    with pytest.raises(checked_ops.CheckFailed, match="non-decreasing"):
        checked_ops.grouped_mm(a, b, offs)


@pytest.mark.parametrize(
    "a, b, words",
    [
        (
            torch.randn(8, 4),
            torch.randn(2, 5, 4),
            r"inner sizes differ \(\(8, 4\) and \(2, 5, 4\)\)",
        ),
        (torch.randn(8), torch.randn(2, 4, 4), "operands are 2-d or 3-d"),
        (torch.randn(2, 3, 4), torch.randn(3, 4, 4), "the groups of the two operands differ"),
    ],
)
def test_grouped_mm_shape_errors_keep_their_messages(a, b, words):
    with pytest.raises(checked_ops.CheckFailed, match=words):
        checked_ops.grouped_mm(a, b, None if a.dim() == b.dim() == 3 else _offs(4, 8))


def _checked_verdict(a, b, offs):
    """What the full check (every form, each check with its message) makes of a call:
    the kernel's result, or the message it raises."""
    try:
        return checked_ops._grouped_mm_checked(a, b, offs, None, None)
    except checked_ops.CheckFailed as exc:
        return str(exc)


def test_grouped_mm_the_experts_form_agrees_with_the_full_check():
    """The form mixture-of-experts layers call (2-d rows, 3-d experts, int32 ends) is
    checked in one expression: on good and crafted ends alike, it returns what the full
    check returns and raises what it raises."""
    rng = random.Random(0)
    taken = refused = 0
    for _ in range(400):
        rows, groups = rng.randint(0, 9), rng.randint(1, 4)
        a, b = torch.randn(rows, 4), torch.randn(groups, 4, 4)  # rows of 16 bytes
        ends = sorted(rng.randint(0, rows) for _ in range(groups))
        if rng.random() < 0.5:  # crafted: short, long, negative, decreasing, too many
            i = rng.randrange(groups)
            ends[i] += rng.choice([-rows - 2, -1, 1, rows + 3])
            if rng.random() < 0.2:
                ends.append(rows)
        offs = torch.tensor(ends, dtype=torch.int32)
        want = _checked_verdict(a, b, offs)
        if isinstance(want, str):
            with pytest.raises(checked_ops.CheckFailed) as raised:
                checked_ops.grouped_mm(a, b, offs=offs, bias=None, out_dtype=None)
            assert str(raised.value) == want
            refused += 1
        else:
            got = checked_ops.grouped_mm(a, b, offs=offs, bias=None, out_dtype=None)
            assert got.dtype == want.dtype and torch.equal(got, want)
            assert torch.equal(got, torch._grouped_mm(a, b, offs))
            taken += 1
    assert taken > 100 and refused > 100  # both sides are exercised


def test_grouped_mm_the_experts_form_needs_no_full_check(monkeypatch):
    """Good calls of that form run the kernel without the full check; every other form,
    and a call that breaks a check of that form, still goes through it."""

    def full_check(*args):
        raise AssertionError("the full check ran")

    monkeypatch.setattr(checked_ops, "_grouped_mm_checked", full_check)
    a, b = torch.randn(8, 4), torch.randn(3, 4, 8)
    offs = _offs(2, 2, 8)
    assert torch.equal(checked_ops.grouped_mm(a, b, offs), torch._grouped_mm(a, b, offs))
    others = [
        (a, b, _offs(2, 2, 7)),  # ends short of the rows
        (a, b, torch.tensor([2, 2, 8])),  # int64 ends
        (a, b, _offs(2, 8)),  # one end too few
        (a, torch.randn(3, 8, 8), offs),  # inner sizes differ
        (torch.randn(3, 6, 4), torch.randn(3, 4, 8), None),  # two 3-d operands
    ]
    for x, y, o in others:
        with pytest.raises(AssertionError, match="the full check ran"):
            checked_ops.grouped_mm(x, y, o)
    with pytest.raises(AssertionError, match="the full check ran"):
        checked_ops.grouped_mm(a, b, offs, bias=torch.zeros(8))


class _Marked(torch.Tensor):
    pass


def test_grouped_mm_parameters_take_the_experts_form_and_subclasses_the_full_check(
    monkeypatch,
):
    """Experts' weights are parameters (or folded plain tensors): that form runs the
    kernel at once for them; a tensor subclass anywhere, or ends of a subclass, take the
    full check, which gives the kernel's result too."""
    a, b = torch.randn(8, 4), torch.nn.Parameter(torch.randn(3, 4, 8))
    offs = _offs(2, 2, 8)
    want = torch._grouped_mm(a, b, offs)
    calls = []
    full = checked_ops._grouped_mm_checked

    def counted(*args):
        calls.append(args)
        return full(*args)

    monkeypatch.setattr(checked_ops, "_grouped_mm_checked", counted)
    with torch.no_grad():
        assert torch.equal(checked_ops.grouped_mm(a, b, offs), want) and not calls
        marked = a.as_subclass(_Marked)
        for x, o in ((marked, offs), (a, offs.as_subclass(_Marked))):
            got = checked_ops.grouped_mm(x, b, o)
            assert torch.equal(got.as_subclass(torch.Tensor), want)
        assert len(calls) == 2
        with pytest.raises(checked_ops.CheckFailed, match="non-decreasing"):
            checked_ops.grouped_mm(marked, b, _offs(2, 2, 7))


def test_checked_views_module_is_the_one_the_runtimes_call():
    assert checked_views.CHECKED["as_strided"] is as_strided


# --- sizes bounded at the call ----------------------------------------------------------------

_BASE = torch.ones(3, 4)
_HUGE = 2**40


@pytest.mark.parametrize(
    "op, positions, keys, spread, call",
    [
        ("Tensor.new_ones", [1], [], 1, lambda f, n: f(_BASE, [n, 1, 4])),  # a list: fast path
        ("Tensor.new_ones", [1], [], 1, lambda f, n: f(_BASE, n, 1, 4)),  # spread
        ("Tensor.new_zeros", [1], [], 1, lambda f, n: f(_BASE, (2, n))),
        ("zeros", [0], [], 0, lambda f, n: f(torch.Size([n, 2]))),
        ("zeros", [0], [], 0, lambda f, n: f([torch.tensor(n), 2])),  # a 0-dim tensor
        ("Tensor.new_full", [1], ["size"], None, lambda f, n: f(_BASE, size=[n, 2], fill_value=1)),
        ("Tensor.repeat", [1], [], 1, lambda f, n: f(_BASE, n, 3)),  # times the input's 12
    ],
)
def test_sized_ops_read_every_form_of_size(op, positions, keys, spread, call):
    """Sizes as a list of ints (the fast path), spread, a tuple, a ``torch.Size``, a 0-dim
    tensor or a keyword all reach the bound; good sizes run the op."""
    fn = getattr(torch.Tensor, op[len("Tensor.") :]) if op.startswith("Tensor.") else torch.zeros
    guarded = checked_ops.sized_guard(op, fn, positions, keys, spread)
    assert torch.equal(call(guarded, 2), call(fn, 2))
    with pytest.raises(checked_ops.CheckFailed, match="would allocate"):
        call(guarded, _HUGE)
