"""Generated code takes a dead value's variable name again (``CodeGen.free``): a function
has about as many locals as values live at once, so a long forward reads every local
without CPython's ``EXTENDED_ARG`` prefix (an index past 255), and gives eager's results."""

from __future__ import annotations

import dis

import pytest
import torch

import tracebridge

from .graph_helpers import loaded, same_bits


def long_chain(x, w):
    # 400 ops, a handful live at once; a skip connection keeps one value across the chain
    first = x
    for _ in range(100):
        x = torch.tanh(x @ w + 1.0) * 0.5
    return x + first, x.sum()


def _functions(traced) -> list:
    method = traced._methods["forward"]
    return [method._function(key) for key in ((False, False), (True, True))]


def test_a_long_forward_has_few_locals_and_no_extended_arg(tmp_path):
    x, w = torch.randn(3, 4), torch.randn(4, 4) / 4
    traced = tracebridge.trace(long_chain, (x, w), check_trace=False)
    fast = loaded(traced, tmp_path)
    for fn in _functions(fast):
        code = fn.__code__
        assert code.co_nlocals < 120, code.co_nlocals
        assert not any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(code))
    for shape in ((3, 4), (1, 4), (7, 4)):
        x = torch.randn(*shape)
        with torch.no_grad():
            got, want = fast(x, w), long_chain(x, w)
        assert all(same_bits(a, b) for a, b in zip(got, want, strict=True))
        got = fast(x.requires_grad_(), w)
        want = long_chain(x, w)
        assert all(same_bits(a.detach(), b.detach()) for a, b in zip(got, want, strict=True))


def rows_and_guards(a):
    # Bailing-hybrid's linear attention: each row from the rows before it, through slices
    # (one literal slice object per node in the file); and a guard per step
    a = a.clone()
    for i in range(1, a.shape[-1]):
        if a.shape[-1] > i:  # a guard on the size, each step
            row = a[..., i, :i].clone()
            a[..., i, :i] = row + (row.unsqueeze(-1) * a[..., :i, :i]).sum(-2)
    return a


def test_equal_slices_and_guard_records_take_no_local_each(tmp_path):
    x = torch.randn(2, 40, 40) / 40
    traced = tracebridge.trace(rows_and_guards, (x,), check_trace=False)
    assert traced.code.count("# guard") >= 39
    fast = loaded(traced, tmp_path)
    for fn in _functions(fast):
        code = fn.__code__
        assert not any(name.startswith("G") for name in code.co_varnames)
        assert code.co_nlocals < 200, code.co_nlocals
        assert not any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(code))
    with torch.no_grad():
        assert same_bits(fast(x), rows_and_guards(x))
        other = torch.randn(3, 40, 40) / 40
        assert same_bits(fast(other), rows_and_guards(other))
        with pytest.raises(tracebridge.GuardError, match="unrolled a Python loop"):
            fast(torch.randn(2, 30, 30))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, n = x.shape[0], x.shape[1]
        if n * 2 > 3:  # a guard on Python ints
            x = x + 1
        y = self.fc(self.norm(x)).reshape(b, n, 2, 4)
        return y.transpose(1, 2).reshape(b * 2, -1), y.sum()


def _deletes_of_kept_values(fn) -> tuple[int, int, int]:
    """(state and size reads, deletes, deletes of a name while it holds such a read) in
    the source of generated function ``fn``, read line by line."""
    import linecache
    import re

    holds: dict[str, bool] = {}  # name -> whether it holds state or a Python number now
    reads = deletes = wrong = 0
    for line in linecache.getlines(fn.__code__.co_filename):
        code = line.split("#")[0].strip()
        if code.startswith("del "):
            names = [n.strip() for n in code[4:].split(",")]
            deletes += len(names)
            wrong += sum(holds.get(n, False) for n in names)
            continue
        found = re.match(r"(v\d+) = ", code)
        if found:
            kept = "_state_get(" in code or "# prim.size" in line or "# scalar." in line
            reads += kept
            holds[found.group(1)] = kept
    return reads, deletes, wrong


@pytest.mark.parametrize("grad", [False, True])
def test_state_and_python_numbers_are_not_deleted(tmp_path, grad):
    # a del frees nothing for state (its table holds it) or a Python number: the code
    # deletes only tensors it made, and gives eager's bits with its names taken again
    torch.manual_seed(0)
    net = Block().eval()
    x = torch.randn(2, 3, 8)
    fast = loaded(tracebridge.trace(net, x), tmp_path)
    for shape in ((2, 3, 8), (1, 5, 8), (3, 1, 8)):
        y = torch.randn(*shape)
        with torch.set_grad_enabled(grad):
            got, want = fast(y), net(y)
        assert all(same_bits(a.detach(), b.detach()) for a, b in zip(got, want, strict=True))
    for fn in _functions(fast):
        reads, deletes, wrong = _deletes_of_kept_values(fn)
        assert reads >= 4 and deletes >= 3 and wrong == 0, (reads, deletes, wrong)
