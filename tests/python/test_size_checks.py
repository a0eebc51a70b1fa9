"""Guards on the sizes of values nothing else needs are checked once per size key (issue
20, item 5; runtime/size_checks.py).

EnCodec's ``encode`` returns the codes, then compares the decoded audio's length with the
input's: a guard on the size of a whole decoder. The generated code checks such guards
once per key of sizes (and state versions) instead of computing the decoder on every
call; the results stay bit for bit the interpreter's (which runs every node), a guard
still refuses a size where eager takes another branch, and a check whose outcome data
could change stays inline.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError
from tracebridge.ir import Node, Ref, Value
from tracebridge.runtime import dead_code, size_checks

from .graph_helpers import counting, loaded, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class EncodeThenCheck(nn.Module):
    """EnCodec's pattern: the decoder's output is read only for its length, and that
    length decides a branch (``2L + 2`` is a multiple of 4 only for odd ``L``)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.lstm = nn.LSTM(4, 4, batch_first=True)
        self.decoder = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        codes = self.encoder(x)
        hidden = self.lstm(codes.transpose(1, 2))[0].transpose(1, 2)
        audio = self.decoder(torch.relu(hidden))
        if audio.shape[-1] % 4 == 0:
            return codes * 2
        return codes


def _runners(traced) -> list:
    method = traced._methods["forward"]
    fn = method._function((True, torch.is_grad_enabled() is False))
    return [v for v in fn.__kwdefaults__.values() if isinstance(v, size_checks.SizeChecks)]


def _same_as_interpreter(fast, tmp_path, x):
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    assert same_bits(fast(x), plain(x))


@pytest.mark.parametrize("grad", [False, True])
def test_a_decoder_read_only_for_its_size_runs_once_per_size(grad, tmp_path):
    torch.manual_seed(0)
    model = EncodeThenCheck().eval()
    traced = tracebridge.trace(model, torch.randn(1, 1, 6))
    fast = loaded(traced, tmp_path)
    with torch.set_grad_enabled(grad):
        fast(torch.randn(1, 1, 6))
        (runner,) = _runners(fast)
        calls = counting(runner)
        for length, seed in [(6, 1), (8, 2), (6, 3), (6, 4), (10, 5), (8, 6)]:
            x = torch.randn(1, 1, length, generator=torch.Generator().manual_seed(seed))
            _same_as_interpreter(fast, tmp_path, x)
            with torch.no_grad():
                assert same_bits(fast(x), model(x))
    # Sizes 8 and 10 were new keys (6 passed on the first call); repeats were not checked.
    assert [key[0].shape[-1] for key in calls] == [8, 10]
    code = fast._methods["forward"].no_grad_code if not grad else fast.code
    assert "size checks" in code
    assert "op_conv_transpose1d" not in code and "op_lstm" not in code


def test_the_guard_still_decides_where_eager_takes_the_other_branch(tmp_path):
    torch.manual_seed(0)
    model = EncodeThenCheck().eval()
    fast = loaded(tracebridge.trace(model, torch.randn(1, 1, 6)), tmp_path)
    with torch.no_grad():
        x = torch.randn(1, 1, 6)
        assert same_bits(fast(x), model(x))
        (runner,) = _runners(fast)
        calls = counting(runner)
        for _ in range(2):  # a refused key is never remembered: checked every time
            # (the specialised method would send these sizes to the graph that served
            # them first: forget that, so that the first graph's check runs each time)
            getattr(fast._methods["forward"], "_served", {}).clear()
            odd = torch.randn(1, 1, 5)
            # eager doubles at odd lengths: the size check refuses the trace's branch
            # there, and the call gets eager's result, not the traced branch's
            assert not torch.equal(model(odd), model.encoder(odd))
            assert same_bits(fast(odd), model(odd))
        assert [key[0].shape[-1] for key in calls] == [5, 5]
        assert {key[2][0][-1] for key in runner.passed} == {6}
        with tracebridge.guards_disabled():  # no checks at all: the traced branch
            odd = torch.ones(1, 1, 5)
            assert same_bits(fast(odd), model.encoder(odd))


class DataDecides(nn.Module):
    """A dead value's data (not its size) decides a branch: the check stays inline."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.decoder = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        codes = self.encoder(x)
        if self.decoder(codes).sum() > 0:
            return codes * 2
        return codes


def test_a_check_that_data_decides_stays_inline(tmp_path):
    torch.manual_seed(0)
    model = DataDecides().eval()
    x = torch.ones(1, 1, 6)
    fast = loaded(tracebridge.trace(model, x), tmp_path)
    with torch.no_grad():
        assert "size checks" not in fast._methods["forward"].no_grad_code
        assert not _runners(fast)
        for sign in (1, -1, 1):  # the branch follows the data, as eager's does
            assert same_bits(fast(x * sign), model(x * sign))


class StateDecides(nn.Module):
    """EnCodec's padding checks: a buffer's value compared with a size, as a tensor."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.register_buffer("limit", torch.tensor(8))

    def forward(self, x):
        codes = self.encoder(x)
        if self.limit * 2 - 8 >= codes.shape[-1]:  # three tensor ops: worth a key
            return codes
        return codes * 2


@pytest.mark.parametrize("write", ["copy", "load_state_dict", "data"])
def test_a_check_on_state_runs_again_after_the_state_changes(write):
    torch.manual_seed(0)
    model = StateDecides().eval()
    x = torch.randn(1, 1, 6)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        assert same_bits(traced(x), model(x))
        (runner,) = _runners(traced)
        calls = counting(runner)
        assert same_bits(traced(x), model(x))
        assert calls == []  # the same key and state version: not checked again
        if write == "copy":
            model.limit.copy_(torch.tensor(6))
        elif write == "load_state_dict":
            model.load_state_dict({**model.state_dict(), "limit": torch.tensor(6)})
        else:  # torch records no write through .data: invalidate_caches() is the way
            model.limit.data.fill_(6)
            tracebridge.invalidate_caches()
        assert torch.equal(model(x), model.encoder(x) * 2)  # eager now doubles
        for _ in range(2):  # the traced branch no longer holds: refused, every time
            with pytest.raises(GuardError, match="self.limit . 2 - 8 >= codes.shape"):
                traced(x)
        assert len(calls) == 2
        model.limit.copy_(torch.tensor(8))  # back, at a new version: checked again
        assert same_bits(traced(x), model(x))
        assert len(calls) == 3


def _planned(model, x):
    traced = tracebridge.trace(model, x)
    graph = dead_code.prune(traced._methods["forward"]._fused_graph())
    return [n for n in size_checks.plan(graph).nodes if isinstance(n, size_checks.SizeCheckNode)]


class GuardBetween(nn.Module):
    """Another check stands between the decoder's two size checks."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.decoder = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        codes = self.encoder(x)
        audio = torch.tanh(self.decoder(torch.relu(codes)))
        if audio.shape[-1] > 100:
            codes = codes + 1
        if x.shape[-1] > 50:  # checked inline, between the two
            codes = codes - 1
        if audio.shape[-1] % 3 == 0:
            codes = codes * 2
        return codes


class WriteBetween(nn.Module):
    """A buffer compared before a write into it, decided after the write."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.register_buffer("limit", torch.tensor(8))

    def forward(self, x):
        codes = self.encoder(x)
        small = self.limit * 2 - 8 >= codes.shape[-1]
        self.limit.add_(0)  # a write the check would see if it ran at the guard
        if small:
            return codes
        return codes * 2


class OneOp(nn.Module):
    """A check worth less than its key: one tensor op (EnCodec's padding checks)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.register_buffer("limit", torch.tensor(8))

    def forward(self, x):
        codes = self.encoder(x)
        return codes if self.limit >= codes.shape[-1] else codes * 2


@pytest.mark.parametrize("model", [GuardBetween, WriteBetween, OneOp])
def test_checks_stay_inline_where_moving_them_could_change_the_order_or_a_read(model):
    torch.manual_seed(0)
    assert _planned(model().eval(), torch.randn(1, 1, 6)) == []


def test_the_decoder_check_moves_as_one_node():
    torch.manual_seed(0)
    (node,) = _planned(EncodeThenCheck().eval(), torch.randn(1, 1, 6))
    ops = {n.op for n in node.checks.nodes}
    assert {"lstm", "conv_transpose1d", "prim.guard"} <= ops and "conv1d" not in ops


def test_under_a_mode_the_checks_run_on_every_call_and_without_guards_never(tmp_path):
    torch.manual_seed(0)
    model = EncodeThenCheck().eval()
    fast = loaded(tracebridge.trace(model, torch.randn(1, 1, 6)), tmp_path)
    x = torch.randn(1, 1, 6)

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.no_grad():
        fast(x)
        (runner,) = _runners(fast)
        calls = counting(runner)
        with Passing():  # a mode may change what ops make: no key is trusted
            assert same_bits(fast(x), model(x))
            assert same_bits(fast(x), model(x))
        assert len(calls) == 2
        with tracebridge.guards_disabled():
            assert same_bits(fast(x), model(x))
            unguarded = fast._methods["forward"]._function((False, True))
        assert len(calls) == 2
        kept = unguarded.__kwdefaults__.values()
        assert not [v for v in kept if isinstance(v, size_checks.SizeChecks)]


def _chain(*steps) -> tuple[list, dict]:
    """Nodes ``(op, args, kind of the result)`` reading value 1 (an outside tensor) and 9
    (state), ending in a guard on the last result; and the kinds of the values."""
    kinds = {1: "Tensor", 9: "Tensor"}
    nodes = []
    for number, (op, args, kind) in enumerate(steps, start=10):
        kinds[number] = kind
        nodes.append(Node(op, list(args), {}, [Value(number, kind)], {"t": "leaf"}))
    nodes.append(Node("prim.guard", [Ref(number)], {"expect": True}))
    return nodes, kinds


@pytest.mark.parametrize(
    "steps, free",
    [
        # sizes of an outside tensor, through shape-following ops: the key decides
        ([("linear", [Ref(1), Ref(9)], "Tensor"), ("prim.size", [Ref(10), 0], "int")], True),
        (
            [
                ("prim.size", [Ref(1), 0], "int"),
                ("arange", [Ref(10)], "Tensor"),
                ("sum", [Ref(11)], "Tensor"),
                ("prim.item", [Ref(12)], "int"),
            ],
            True,
        ),
        ([("ge", [Ref(9), 3], "Tensor"), ("prim.bool", [Ref(10)], "bool")], True),
        # an outside tensor's data reaching the guard
        ([("sum", [Ref(1)], "Tensor"), ("prim.bool", [Ref(10)], "bool")], False),
        ([("arange", [Ref(1)], "Tensor"), ("prim.size", [Ref(10), 0], "int")], False),
        ([("where", [Ref(1)], "Tensor"), ("prim.size", [Ref(10), 0], "int")], False),
        ([("Tensor.view", [Ref(9), Ref(1)], "Tensor"), ("prim.size", [Ref(10), 0], "int")], False),
        ([("nonzero", [Ref(1)], "Tensor"), ("prim.size", [Ref(10), 0], "int")], False),
        ([("prim.stride", [Ref(1), 0], "int")], False),
        # what no key holds
        ([("prim.grad_enabled", [], "bool")], False),
        ([("rand", [[2]], "Tensor"), ("prim.size", [Ref(10), 0], "int")], False),
    ],
)
def test_only_checks_the_key_decides_are_moved(steps, free):
    nodes, kinds = _chain(*steps)
    assert size_checks._data_free(nodes, kinds, state={9}) is free


class RepeatedKey(nn.Module):
    """The checks read a value that repeats an earlier one: the code without autograd
    reads the first (runtime/cse.py), the check node's key included."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.decoder = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        codes = self.encoder(x)
        a = torch.tanh(codes)
        b = torch.tanh(codes)
        audio = torch.sigmoid(self.decoder(torch.relu(b)))
        if audio.shape[-1] % 4 == 0:
            return a * 2 + b
        return a + b


def test_a_key_that_repeats_an_earlier_value_reads_it(tmp_path):
    torch.manual_seed(0)
    model = RepeatedKey().eval()
    fast = loaded(tracebridge.trace(model, torch.randn(1, 1, 6)), tmp_path)
    with torch.no_grad():
        assert "size checks" in fast._methods["forward"].no_grad_code
        for length in (6, 8, 5, 6):
            x = torch.randn(1, 1, length)
            assert same_bits(fast(x), model(x))


class NonzeroByWhere(nn.Module):
    """``where(condition)`` is ``nonzero``: how many indices it gives is the data's."""

    def forward(self, x):
        picked = torch.where(x > 0)[0]
        y = torch.relu(x)
        if picked.shape[0] == 2:
            return y * 2
        return y


class ArangeOfACount(nn.Module):
    """``arange(n)`` with ``n`` a tensor: its length is ``n``'s value, not a size."""

    def forward(self, x):
        steps = torch.arange((x > 0).sum())
        y = torch.relu(x)
        if steps.shape[0] == 2:
            return y * 2
        return y


@pytest.mark.parametrize("model", [NonzeroByWhere(), ArangeOfACount()], ids=type)
def test_sizes_that_data_decides_keep_their_check_inline(model, tmp_path):
    # Found by review 9: the key (x's size) passed at two positives; a call with three
    # positives and the same size got the traced branch (silently wrong).
    traced = tracebridge.trace(model, torch.tensor([1.0, 2.0, -1.0, -3.0]))
    with torch.no_grad():
        assert _runners(traced) == []
        traced(torch.tensor([1.0, 2.0, -1.0, -3.0]))
        three = torch.tensor([1.0, 2.0, 3.0, -3.0])
        with pytest.raises(GuardError, match="shape"):
            traced(three)  # eager takes the other branch here


def test_keys_of_replaced_state_do_not_keep_the_old_tensors_alive():
    # Review 9: each key held the state tensors it was made with; after the model's
    # tensors were replaced (load_state_dict(assign=True), .to()), up to KEEP keys kept
    # the old weights alive.
    torch.manual_seed(0)
    model = StateDecides().eval()
    traced = tracebridge.trace(model, torch.randn(1, 1, 6))
    with torch.no_grad():
        traced(torch.randn(1, 1, 6))
        (runner,) = _runners(traced)
        model.load_state_dict({**model.state_dict(), "limit": torch.tensor(8)}, assign=True)
        x = torch.randn(1, 1, 6)
        assert same_bits(traced(x), model(x))
    held = [t for tensors in runner.passed.values() for t in tensors]
    assert held and all(t is model.limit for t in held)


class SplitThenDecode(nn.Module):
    """EnCodec's quantiser before its decoder: a tensor made first (``zeros`` on the
    codes' device), then the codes split by ``unbind`` (a node whose count of results
    is checked), then a decoder, read only for its length, compared with a buffer."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.decoder = nn.ConvTranspose1d(2, 1, 4, stride=2)
        self.register_buffer("limit", torch.tensor(100))

    def forward(self, x):
        codes = self.encoder(x)
        base = torch.zeros((), device=codes.device)
        first, second = codes.view(1, 2, 2, -1).unbind(1)
        audio = torch.tanh(self.decoder(base + first + second))
        if audio.shape[-1] > self.limit:
            return codes * 2
        return codes


def test_a_count_of_results_before_the_checks_does_not_keep_them_inline(tmp_path):
    # An unbind stood between the checks' first node and their guard; a count of
    # results writes nothing, so the decoder's check (which reads state) still moves.
    torch.manual_seed(0)
    model = SplitThenDecode().eval()
    fast = loaded(tracebridge.trace(model, torch.randn(1, 1, 6)), tmp_path)
    with torch.no_grad():
        code = fast._methods["forward"].no_grad_code
        assert "size checks" in code and "op_conv_transpose1d" not in code
        (runner,) = _runners(fast)
        calls = counting(runner)
        for length in (6, 8, 6, 6):
            x = torch.randn(1, 1, length)
            _same_as_interpreter(fast, tmp_path, x)
            assert same_bits(fast(x), model(x))
        assert [key[0].shape[-1] for key in calls] == [6, 8]  # the first call: a new key
        for module in (fast, model):  # the state changes after load
            module.limit.fill_(10)
        x = torch.randn(1, 1, 6)
        assert torch.equal(model(x), model.encoder(x) * 2)  # eager takes the other branch
        for _ in range(2):  # refused, every time: the key holds the buffer's version
            with pytest.raises(GuardError, match="audio.shape"):
                fast(x)
        for module in (fast, model):
            module.limit.fill_(100)
        assert same_bits(fast(x), model(x))
