"""A loaded artifact does no per-call work that cannot change its result (issue 20, item 5).

Each pattern here was found by reading a zoo model's generated code against the graph
torch.jit runs; each test checks, on a small module with the pattern, that the leaner call
gives eager's outputs bit for bit, and that what still has to be done is done.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError
from tracebridge.runtime import Method
from tracebridge.runtime.transaction import Transaction

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _loaded(module: nn.Module, inputs: tuple, tmp_path, name: str = "m.tb"):
    traced = tracebridge.trace(module, inputs, check_trace=False)
    traced.save(tmp_path / name)
    return tracebridge.load(tmp_path / name)


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


class NormThenBranch(nn.Module):
    """LeViT's ``linear -> flatten -> batch_norm -> reshape_as``, then a decision on the
    result (a guard after the batch norm, as in any model that checks its sizes later)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 6)
        self.norm = nn.BatchNorm1d(6)

    def forward(self, x):
        y = self.linear(x)
        y = self.norm(y.flatten(0, 1)).reshape_as(y)
        if y.sum() > -1e9:
            return y.relu()
        return y


def _trained_norm() -> NormThenBranch:
    module = NormThenBranch()
    with torch.no_grad():
        module.norm.running_mean.uniform_(-1, 1)
        module.norm.running_var.uniform_(0.5, 2)
    return module


def test_a_batch_norm_in_evaluation_mode_is_not_copied_back_on_every_call(tmp_path):
    # Eval batch norm reads its running statistics and writes nothing: a call that a later
    # guard refuses has nothing to put back, so the call is not a transaction (which
    # cloned every running statistic of the model on every call: 46 clones in LeViT).
    module = _trained_norm().eval()
    x = torch.randn(2, 5, 8)
    loaded = _loaded(module, (x,), tmp_path)
    assert type(loaded._methods["forward"]) is Method
    for shape in ((2, 5, 8), (1, 3, 8), (4, 7, 8)):
        x = torch.randn(shape)
        with torch.no_grad():
            assert _bitwise(loaded(x), module(x))
        assert _bitwise(loaded(x), module(x))
    stats = {k: v.clone() for k, v in loaded.state_dict().items()}
    loaded(torch.randn(3, 2, 8))
    assert all(torch.equal(v, stats[k]) for k, v in loaded.state_dict().items())


def test_a_batch_norm_in_training_mode_still_puts_its_statistics_back(tmp_path):
    module = _trained_norm().train()
    traced = tracebridge.trace(module, (torch.randn(2, 5, 8),), check_trace=False)
    assert isinstance(traced._methods["forward"], Transaction)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(GuardError):
        traced(torch.randn(1, 1, 8))  # batch norm refuses one value per channel
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())


def _repeated(x, like):
    # Autoformer's auto-correlation: a weight per delay repeated to the values' sizes.
    return x.view(-1, 1, 1).repeat(2, like.shape[1], like.shape[2]) * 3


def _tiled(x, like):
    return torch.tile(x, (like.shape[0], like.shape[1])) + 1


@pytest.mark.parametrize("fn", [_repeated, _tiled], ids=["repeat", "tile"])
def test_a_repeat_of_traced_sizes_bounds_its_bytes_inline(tmp_path, fn):
    x, like = torch.randn(3), torch.randn(2, 4, 5)
    traced = tracebridge.trace(fn, (x, like), check_trace=False)
    traced.save(tmp_path / "r.tb")
    loaded = tracebridge.load(tmp_path / "r.tb")
    with torch.no_grad():
        code = loaded.code
    assert "numel() *" in code, "the byte bound is tested inline"
    for x, like in [(torch.randn(3), torch.randn(2, 4, 5)), (torch.randn(1), torch.randn(3, 1, 7))]:
        with torch.no_grad():
            assert _bitwise(loaded(x, like), fn(x, like))
        assert _bitwise(loaded(x, like), fn(x, like))
    # Sizes whose product passes the limit are refused before any allocation, by the
    # checked call, with and without autograd; an empty input allocates nothing either way.
    huge = torch.empty(1).expand(1 << 20, 1 << 20, 1 << 20)
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(tracebridge.TraceError, match="bytes"):
            loaded(torch.randn(3), huge)
    with torch.no_grad():
        assert loaded(torch.randn(0), huge).numel() == 0
    # A tensor subclass takes the checked call, which gives the kernel's result.
    param = nn.Parameter(torch.randn(3))
    with torch.no_grad():
        assert _bitwise(loaded(param, like), fn(param, like))


class TwoLayersConvertTheirMask(nn.Module):
    """BigBird's layers: each converts the same mask to its hidden state's dtype (a value
    read per layer, with its guard) and builds ``1 - mask`` and a product from it."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(2))

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x)
            m = mask.to(x.dtype)
            x = x * (1.0 - m) + (m * -1e4)
        return x


def _count_calls(code: str, op: str) -> int:
    return sum(f"# {op}," in line for line in code.splitlines())


def test_a_dtype_fixed_by_its_guard_lets_repeated_conversions_run_once(tmp_path):
    module = TwoLayersConvertTheirMask()
    x, mask = torch.randn(3, 6), (torch.rand(3, 6) > 0.5).long()
    loaded = _loaded(module, (x, mask), tmp_path)
    with torch.no_grad():
        code = loaded.code
    # The second layer's conversion, ``1 - m`` and product read the first layer's.
    assert _count_calls(code, "Tensor.to") == 1
    assert _count_calls(code, "rsub") == 1
    assert _count_calls(loaded.code, "rsub") == 2, "with autograd every node runs"
    for x, mask in [
        (torch.randn(3, 6), (torch.rand(3, 6) > 0.5).long()),
        (torch.randn(5, 6), torch.ones(5, 6, dtype=torch.long)),
    ]:
        with torch.no_grad():
            assert _bitwise(loaded(x, mask), module(x, mask))
        assert _bitwise(loaded(x, mask), module(x, mask))
    # Another dtype is refused (here by the linear before the guard), never computed.
    with torch.no_grad(), pytest.raises(tracebridge.TraceError):
        loaded(torch.randn(3, 6, dtype=torch.float64), mask)


def _widened_mask(x, mask):
    blocks = torch.einsum("bi,bj->bij", mask, mask)
    blocks.unsqueeze_(1)  # BigBird widens its band mask in place
    scaled = blocks * 2
    return x * (1.0 - mask) + scaled.sum((1, 2)) * (1.0 - mask)


def test_a_reshape_in_place_does_not_keep_repeats_of_what_shares_its_memory(tmp_path):
    x, mask = torch.randn(2, 4), (torch.rand(2, 4) > 0.5).float()
    traced = tracebridge.trace(_widened_mask, (x, mask), check_trace=False)
    traced.save(tmp_path / "w.tb")
    loaded = tracebridge.load(tmp_path / "w.tb")
    with torch.no_grad():
        code = loaded.code
    assert _count_calls(code, "rsub") == 1
    for x, mask in [
        (torch.randn(2, 4), (torch.rand(2, 4) > 0.5).float()),
        (torch.randn(3, 5), (torch.rand(3, 5) > 0.5).float()),
    ]:
        with torch.no_grad():
            assert _bitwise(loaded(x, mask), _widened_mask(x, mask))


def _reads_around_a_reshape(x):
    y = x + 1
    before = y.sum(0)
    y.unsqueeze_(0)
    after = y.sum(0)  # the same op on the same tensor, with other sizes: not a repeat
    return before, after


def test_a_value_reshaped_in_place_is_never_taken_for_a_repeat(tmp_path):
    x = torch.randn(4, 3)
    traced = tracebridge.trace(_reads_around_a_reshape, (x,), check_trace=False)
    traced.save(tmp_path / "r.tb")
    loaded = tracebridge.load(tmp_path / "r.tb")
    with torch.no_grad():
        for x in (torch.randn(4, 3), torch.randn(2, 5)):
            got, want = loaded(x), _reads_around_a_reshape(x)
            assert all(_bitwise(a, b) for a, b in zip(got, want))
            assert got[0].shape != got[1].shape


def _made_then_reshaped(x):
    m = x.clone()
    m.unsqueeze_(0)
    n = x.clone()  # equal to the clone reshaped above: not merged into it
    w = x.view(-1).view(2, -1)
    w.transpose_(0, 1)
    e = x.view(-1).view(2, -1).sum(-1)  # nor into the view transposed above
    return m * 2, n * 2, w.sum(-1), e


def test_a_node_whose_result_is_reshaped_in_place_is_never_a_repeat_of_a_later_one(tmp_path):
    # Was merged: n was the clone widened to (1, 2, 6) in place, e the transposed view's
    # sum, silently (check_trace=False; the check saw it on the example).
    x = torch.randn(4, 3)
    traced = tracebridge.trace(_made_then_reshaped, (x,), check_trace=False)
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    with torch.no_grad():
        for x in (torch.randn(4, 3), torch.randn(2, 5)):
            got, want = loaded(x), _made_then_reshaped(x)
            assert [g.shape for g in got] == [w.shape for w in want]
            assert all(_bitwise(a, b) for a, b in zip(got, want))


def _converted_twice(x, mask):
    a = mask.to(x.dtype)
    b = mask.to((x * 2).dtype)
    return (1.0 - a) * x + (1.0 - b)


def test_a_dtype_guard_still_refuses_another_dtype(tmp_path):
    x, mask = torch.randn(3), torch.tensor([1, 0, 1])
    traced = tracebridge.trace(_converted_twice, (x, mask), check_trace=False)
    traced.save(tmp_path / "d.tb")
    loaded = tracebridge.load(tmp_path / "d.tb")
    with torch.no_grad():
        assert _count_calls(loaded.code, "rsub") == 1
        assert _bitwise(loaded(x, mask), _converted_twice(x, mask))
        with pytest.raises(GuardError, match="dtype"):
            loaded(x.double(), mask)


class ResampledPositions(nn.Module):
    """timm's position table, a value of state alone, resampled to the image's size."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 4, 6, 6))

    def forward(self, x):
        table = (self.pos * 0.5).float()  # folded: literals and state only
        table = nn.functional.interpolate(table, size=x.shape[-2:], mode="bicubic")
        return x + table.permute(0, 1, 3, 2)


def test_a_folded_value_resampled_to_the_input_size_is_memoised_by_size(tmp_path):
    module = ResampledPositions()
    loaded = _loaded(module, (torch.randn(1, 4, 5, 5),), tmp_path)
    with torch.no_grad():
        code = loaded.code
    assert "folded" in code and "memoised by size" in code
    assert "upsample" not in code and "permute" not in code, "not run on every call"

    def check():
        for size in (5, 7, 5, 3):
            x = torch.randn(1, 4, size, size)
            with torch.no_grad():
                assert _bitwise(loaded(x), module(x))
            # Values folded in inference mode have no version to key on: made each call.
            with torch.inference_mode():
                assert _bitwise(loaded(x), module(x))

    check()
    # New state gives new values: a parameter written in place, then a state dict loaded.
    with torch.no_grad():
        loaded.pos.add_(1.0)
        module.pos.add_(1.0)
    check()
    fresh = ResampledPositions()
    loaded.load_state_dict(fresh.state_dict())
    module.load_state_dict(fresh.state_dict())
    check()
    # With autograd the table is made on every call, and gradients reach the parameter.
    x = torch.randn(1, 4, 5, 5)
    loaded(x).sum().backward()
    module(x).sum().backward()
    assert _bitwise(loaded.pos.grad, module.pos.grad)
