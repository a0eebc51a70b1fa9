"""Index values checked before the kernel where the kernel checks them on the device
(runtime/checked_indices.py): on CUDA an index out of range is a device-side assert, which
ends the process's use of the device. The CPU kernels check the values themselves, so the
checks run on the CPU only where a test asks (``CHECK_ON_CPU``): there they must refuse
exactly what the CPU kernels refuse, and run the rest to the kernel's own results. The
CUDA test at the end runs where a GPU is."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import tracebridge
from tracebridge.runtime import checked_indices
from tracebridge.runtime.checked_ops import CheckFailed
from tracebridge.runtime.support import default_callable

from .conftest import run_fresh_python

X = torch.arange(20.0).view(4, 5)


def t(*values):
    return torch.tensor(values)


def _flat(v: int) -> int:
    """A value near X's 20 elements where ``v`` is near its 4 rows."""
    return v * 5 if abs(v) < 2**40 else v


# op -> a call of the op's implementation with one index value ``v`` in it (X is 4 x 5)
CALLS = {
    "gather": lambda f, v: f(X, 0, t([v] * 5)),
    "scatter": lambda f, v: f(X, 0, t([v] * 5), 1.0),
    "Tensor.scatter_": lambda f, v: f(X.clone(), 0, t([v] * 5), 1.0),
    "scatter_add": lambda f, v: f(X, 1, t([v]), torch.ones(1, 1)),
    "Tensor.scatter_add_": lambda f, v: f(X.clone(), 1, t([v]), torch.ones(1, 1)),
    "scatter_reduce": lambda f, v: f(X, 0, t([v] * 5), torch.ones(1, 5), "amax"),
    "index_select": lambda f, v: f(X, 0, t(v, 0)),
    "index_add": lambda f, v: f(X, 0, t(v), torch.ones(1, 5)),
    "Tensor.index_add_": lambda f, v: f(X.clone(), 1, t(v), torch.ones(4, 1)),
    "index_copy": lambda f, v: f(X, 0, t(v), torch.ones(1, 5)),
    "Tensor.index_copy_": lambda f, v: f(X.clone(), 0, t(v), torch.ones(1, 5)),
    "index_fill": lambda f, v: f(X, 0, t(v), 2.0),
    "Tensor.index_fill_": lambda f, v: f(X.clone(), 1, t(v), 2.0),
    "index_reduce": lambda f, v: f(X, 0, t(v, 1), torch.ones(2, 5), "prod"),
    "Tensor.index_reduce_": lambda f, v: f(X.clone(), 0, t(v), torch.ones(1, 5), "amax"),
    "take": lambda f, v: f(X, t(_flat(v))),
    "put": lambda f, v: f(X, t(_flat(v)), t(1.0)),
    "Tensor.put_": lambda f, v: f(X.clone(), t(_flat(v)), t(1.0), True),
    "take_along_dim": lambda f, v: f(X, t(_flat(v))),
    "embedding": lambda f, v: f(X, t([v, 1])),
    "embedding_bag": lambda f, v: f(X, t(v, 1), t(0)),
    "one_hot": lambda f, v: f(t(v, 0), 4),
    "getitem": lambda f, v: f(X, (slice(None), t(v))),
    "setitem": lambda f, v: f(X.clone(), (Ellipsis, t([v]), slice(None)), 1.0),
    "index_put": lambda f, v: f(X, (t(0), t(v)), t(1.0)),
    "Tensor.index_put_": lambda f, v: f(X.clone(), (t(v),), t(1.0), True),
    "nll_loss": lambda f, v: f(X, t(v, 0, 0, 0), None, 1, -100),
    "nll_loss2d": lambda f, v: f(X.view(1, 4, 5, 1), t([[v]] * 5), None, 1, 3),
    "nll_loss_nd": lambda f, v: f(X, t(v, 0, 0, 0), None, 1, -100),
    "cross_entropy_loss": lambda f, v: f(X, t(v, 0, 0, 0)),
    "max_unpool2d": lambda f, v: f(torch.ones(1, 1, 1, 2), t([[[v, 0]]]), [2, 2]),
    "max_unpool3d": lambda f, v: f(
        torch.ones(1, 1, 1, 1, 2), t([[[[v, 0]]]]), [1, 2, 2], [1, 1, 1], [0, 0, 0]
    ),
    "searchsorted": lambda f, v: f(t(1.0, 2, 3, 4), t(2.0), sorter=t(v, 0, 1, 2)),
    "masked_scatter": lambda f, v: f(X, X > -1, torch.ones(max(20 + v, 0))),
    "Tensor.masked_scatter_": lambda f, v: f(X.clone(), X > 9, torch.ones(max(10 + v, 0))),
}
VALUES = (-(2**63), -(2**40), -6, -5, -4, -3, -1, 0, 3, 4, 5, 2**40, 2**63 - 1)
SMALL = (-11, -3, -1, 0, 3)  # masked_scatter's shortfall of source elements


def _outcome(fn, call, v):
    """The result of ``call`` with ``v``, or the class of the error it raised."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # index_reduce is in beta
        try:
            return call(fn, v)
        except CheckFailed:
            return CheckFailed
        except (IndexError, RuntimeError, ValueError):
            return "refused by the kernel"


def _leaves(result) -> list:
    return [] if result is None else list(result) if isinstance(result, tuple) else [result]


def test_every_checked_index_op_has_a_case():
    assert set(CALLS) == set(checked_indices.CHECKED) | {"embedding_bag", "one_hot"}


@pytest.mark.parametrize("op", sorted(CALLS))
def test_the_checks_refuse_exactly_what_the_cpu_kernel_refuses(op, monkeypatch):
    """For each value: the CPU kernel refuses it (its own check) if and only if the check
    refuses it before the kernel, naming the op; a value both take gives the kernel's own
    result through the check."""
    fn, call = default_callable(op), CALLS[op]
    for v in SMALL if "masked_scatter" in op else VALUES:
        monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", False)
        kernel = _outcome(fn, call, v)
        monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
        checked = _outcome(fn, call, v)
        if isinstance(kernel, str):
            assert checked is CheckFailed, (op, v, checked)
            with pytest.raises(CheckFailed, match=f"^{re.escape(op)}: .*refused"):
                call(fn, v)
        else:
            assert checked is not CheckFailed, (op, v)
            for got, want in zip(_leaves(checked), _leaves(kernel), strict=True):
                torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_on_the_cpu_the_kernel_checks_and_nothing_else_runs(monkeypatch):
    """Without ``CHECK_ON_CPU`` a CPU call goes straight to the kernel (its own check)."""

    def never(*args, **kwargs):
        raise AssertionError("checked on the CPU")

    monkeypatch.setattr(checked_indices, "_range_ok", never)
    for op, call in CALLS.items():
        _outcome(default_callable(op), call, 0)


def test_tracers_stand_ins_are_not_checked(monkeypatch):
    """A fake tensor (torch.export, ONNX, torch.compile tracing a GraphModule of the
    program) holds no values: the wrappers pass it to the kernel, and Dynamo traces them
    into one graph; the compiled function's kernels are torch's."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
    gather, getitem = default_callable("gather"), default_callable("getitem")
    with FakeTensorMode():
        x, i = torch.ones(3), t(0, 5)
        assert gather(x, 0, i).shape == getitem(x, i).shape == (2,)
    compiled = torch.compile(
        lambda x, i: gather(x, 0, i) + getitem(x, i), backend="eager", fullgraph=True
    )
    assert compiled(torch.ones(3), t(0, 2)).tolist() == [2.0, 2.0]
    with pytest.raises(CheckFailed):
        gather(torch.ones(3), 0, t(0, 5))


def test_a_tensor_index_is_checked_against_the_dimension_it_indexes(monkeypatch):
    """``getitem``'s index parsed as torch parses it: ints and slices take a dimension,
    ``None`` none, a mask as many as it has, an ellipsis the rest; a list of ints is one
    index, a list holding a tensor a tuple."""
    monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
    getitem = default_callable("getitem")
    x = torch.arange(24.0).view(2, 3, 4)
    ok = [
        (0, t(2)),  # the int takes dimension 0: the tensor indexes the 3
        (None, slice(None), t(-3)),  # None takes none
        (Ellipsis, t(3)),
        (torch.ones(2, 3, dtype=torch.bool), t(3)),  # a mask takes two
        (slice(None), [2, -3]),
        (True, 1),
        [t(1), t(2)],  # a list holding tensors: a tuple
        [1, -2],  # a list of ints: one index
    ]
    for index in ok:
        assert torch.equal(getitem(x, index), x[index]), index
    bad = [(0, t(3)), (None, slice(None), t(-4)), (Ellipsis, t(-5)), (slice(None), [3])]
    for index in [*bad, [t(1), t(3)], [2]]:
        with pytest.raises(CheckFailed, match="getitem: a tensor index"):
            getitem(x, index)


def test_a_loaded_trace_refuses_an_index_out_of_range_naming_the_node(tmp_path, monkeypatch):
    """Through a saved and loaded trace: the error is tracebridge's, at the node, with the
    op and the value; the state an in-place op would write is untouched."""

    class Table(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("counts", torch.zeros(6))

        def forward(self, i):
            self.counts.put_(i, torch.ones_like(i, dtype=torch.float32), accumulate=True)
            return self.counts.index_select(0, i) + self.counts[i]

    traced = tracebridge.trace(Table(), t(0, 1))
    traced.save(tmp_path / "t.tb")
    loaded = tracebridge.load(tmp_path / "t.tb")
    monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
    assert loaded(t(1, 5)).tolist() == [2.0, 2.0]
    for bad in (6, -7, 2**40):
        with pytest.raises(tracebridge.OpError, match=r"put_: index \(into 6 elements\) holds"):
            loaded(t(0, bad))
    assert loaded.counts.tolist() == [0, 1, 0, 0, 0, 1]


def _index_cases() -> dict:
    from .attack_cases import index_family

    ops = set(checked_indices.CHECKED) - {"take_along_dim"}  # with a dim, torch wraps
    cases = {}
    for name, case in index_family().items():
        op, _, value = name.partition(":")
        base = op.removesuffix("_acc")
        if (base in ops or base in ("one_hot",)) and not value.startswith("dtype"):
            cases[name] = (base, case)
    return cases


def test_crafted_files_with_indices_out_of_range_are_refused_before_the_kernel(
    tmp_path, monkeypatch
):
    """attack_cases.index_family's files (an index past the end, negative, 2^40 and
    int64's least): each refused at the call by the check, before the kernel, with the
    op's name: on CUDA none of them reaches a device-side assert."""
    from .test_fuzz import _base_members, build_attack

    bases = {"neg": _base_members(tmp_path, "neg")}
    cases = _index_cases()
    assert len(cases) == 4 * 16
    monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
    for name, (op, case) in cases.items():
        job = build_attack(tmp_path, name, case, bases)
        loaded = tracebridge.load(job["path"])
        with pytest.raises(tracebridge.OpError, match=f"CheckFailed: {op}: .*refused before"):
            loaded(torch.ones(3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_an_index_out_of_range_is_refused_and_the_device_still_works():
    """On CUDA each op's index out of range is tracebridge's error, and the process's
    CUDA context works after it (a device-side assert would have ended it)."""
    result = run_fresh_python(
        """
        import torch, tracebridge
        def f(x, i):
            return (torch.gather(x, 0, i) + x[i] + x.index_select(0, i) + torch.take(x, i)
                    + x.clone().put_(i, x[:2]).sum() + torch.embedding(x.view(3, 1), i)[:, 0])
        traced = tracebridge.trace(f, (torch.ones(3), torch.tensor([0, 1])))
        x = torch.ones(3, device="cuda")
        print(traced(x, torch.tensor([0, 2], device="cuda")).tolist())
        for bad in (3, -4, 2**40):
            try:
                traced(x, torch.tensor([0, bad], device="cuda"))
                print("ran")
            except tracebridge.OpError as exc:
                print("refused", "refused before the kernel runs" in str(exc))
        torch.cuda.synchronize()
        print("alive", float((x * 2).sum()))
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split("\n")
    assert lines[1:4] == ["refused True"] * 3 and lines[4] == "alive 6.0", result.stdout


def test_a_basic_index_runs_the_kernel_and_a_tensor_index_the_check(monkeypatch):
    """Generated code calls the kernel itself where an index holds no tensor and no list
    whatever the file declares (literals, slices, sizes: codegen._basic_index), and the
    check where it does: a slice pays no Python frame, and a tensor index is still checked."""

    def f(x, i):
        return x[:, 1:3].sum() + x[0].sum() + x[:, : x.shape[1] - 1].sum() + x[i].sum()

    traced = tracebridge.trace(f, (X, t(0, 2)))
    bound = traced._methods["forward"]._function((True, True)).__globals__.values()
    assert torch.Tensor.__getitem__ in bound
    assert checked_indices.CHECKED["getitem"] in bound
    monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
    torch.testing.assert_close(traced(X, t(3, 1)), f(X, t(3, 1)))
    with pytest.raises(tracebridge.OpError, match="getitem"):
        traced(X, t(0, 4))


def _indexes(x, i, w):
    return torch.gather(x, 1, i) + x[i[:, 0]] + torch.nn.functional.embedding(i, w).sum(1)


def test_loaded_code_runs_the_cpu_kernel_at_once_and_follows_the_flag(monkeypatch, tmp_path):
    """The generated code makes the checked functions' first test inline (a plain CPU
    tensor, ``CHECK_ON_CPU`` off: the kernel, which checks), reading the flag on every
    call: set after load, the checks refuse an index out of range before the kernel."""
    x, i, w = torch.randn(4, 3), torch.randint(0, 3, (4, 3)), torch.randn(5, 3)
    tracebridge.trace(_indexes, (x, i, w)).save(tmp_path / "f.tb")
    loaded = tracebridge.load(tmp_path / "f.tb")
    with torch.no_grad():
        code = loaded.code
        assert code.count(".is_cpu and (not M") == 3  # gather, getitem, embedding
        torch.testing.assert_close(loaded(x, i, w), _indexes(x, i, w), rtol=0, atol=0)
        bad = i.clone()
        bad[0, 0] = 7
        with pytest.raises(tracebridge.TraceError) as kernel:
            loaded(x, bad, w)
        assert not isinstance(kernel.value.__cause__, CheckFailed)  # the kernel refused
        monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
        torch.testing.assert_close(loaded(x, i, w), _indexes(x, i, w), rtol=0, atol=0)
        with pytest.raises(tracebridge.TraceError) as checked:
            loaded(x, bad, w)
        assert isinstance(checked.value.__cause__, CheckFailed)  # refused before the kernel


def _inverse_permutation(x, perm):
    # a mixture of experts' routing (transformers' integrations/moe.py, which starts from
    # empty_like): the inverse of a permutation, written through a tensor index, then read
    inv = torch.zeros_like(perm)
    inv[perm] = torch.arange(perm.shape[0])
    out = x[perm] * 2.0
    return out[inv]


def test_a_loaded_setitem_runs_the_cpu_kernel_at_once_and_follows_the_flag(monkeypatch, tmp_path):
    """``x[i] = v`` with a tensor index, as getitem: inline, the kernel where the target is
    a plain CPU tensor and ``CHECK_ON_CPU`` is off (it refuses an index out of range
    itself), the checked function where the flag is set after load."""
    x, perm = torch.randn(5, 3), torch.tensor([3, 0, 4, 1, 2])
    tracebridge.trace(_inverse_permutation, (x, perm)).save(tmp_path / "f.tb")
    loaded = tracebridge.load(tmp_path / "f.tb")
    other = torch.tensor([1, 4, 0, 2, 3])
    with torch.no_grad():
        assert "op_setitem" in loaded.code and ".is_cpu and (not M" in loaded.code
        for p in (perm, other):
            torch.testing.assert_close(loaded(x, p), _inverse_permutation(x, p), rtol=0, atol=0)
        bound = loaded._methods["forward"]._function((False, False)).__globals__.values()
        assert torch.Tensor.__setitem__ in bound and checked_indices.setitem in bound
        bad = torch.tensor([1, 4, 0, 2, 9])
        with pytest.raises(tracebridge.TraceError) as kernel:
            loaded(x, bad)
        assert not isinstance(kernel.value.__cause__, CheckFailed)  # the kernel refused
        monkeypatch.setattr(checked_indices, "CHECK_ON_CPU", True)
        torch.testing.assert_close(loaded(x, other), _inverse_permutation(x, other), rtol=0, atol=0)
        with pytest.raises(tracebridge.TraceError) as checked:
            loaded(x, bad)
        assert isinstance(checked.value.__cause__, CheckFailed)  # refused before the kernel
        assert "setitem" in str(checked.value)
