"""Op-set 10's everyday ops (prober20b F8: refused where torch.jit.trace records): each is
recorded, saved, loaded and run by both runtimes with eager's values at other sizes; the
crafted files aimed at them are refused at load or at the call, naming the op."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge.check import views
from tracebridge.check.program import LIMITS
from tracebridge.ir import ops

RUNTIMES = ["codegen", "interpreter"]


def reloaded(traced, runtime):
    buffer = io.BytesIO()
    tracebridge.save(traced, buffer)
    return tracebridge.load(buffer.getvalue(), runtime=runtime)


def ops_of(traced) -> set[str]:
    return {n.op for g in traced.program.methods.values() for n in g.nodes}


def _stft_front_end(x):
    """whisper's log_mel_spectrogram builds its window in forward, sized by n_fft."""
    n_fft = 16
    window = torch.hann_window(n_fft).to(x.device)
    spec = torch.stft(x, n_fft, hop_length=4, window=window, return_complex=True)
    return spec.abs() ** 2


def _windows(x):
    n = x.shape[-1]  # a traced size: the window follows the input's length
    return (
        x * torch.hamming_window(n)
        + x * torch.blackman_window(n, periodic=False)
        + x * torch.bartlett_window(n)
        + x * torch.kaiser_window(n, True, 8.0, dtype=torch.float64).float()
    )


def _contrastive(z):
    sim = z @ z.T
    return sim.fill_diagonal_(float("-inf")).softmax(-1)


def _special_tokens(ids):
    return torch.isin(ids, torch.tensor([0, 2])).long().sum(-1)


def _padded(a, b):
    return nn.utils.rnn.pad_sequence([a, b], batch_first=True, padding_value=-1.0)


def _put(x):
    return x.clone().put_(torch.tensor([0, 1]), torch.tensor([9.0, 8.0]), accumulate=True)


def _index_reduce(x):
    index = torch.tensor([0, 2, 0])
    return x.clone().index_reduce_(0, index, torch.ones(3, x.shape[1]) * 3, "amax")


def _strided(x):
    out = torch.empty_strided(x.shape, (1, x.shape[0]))
    return out.copy_(x) * 2


CASES = {
    # name: (function, example, other inputs, ops it records)
    "hann_window_stft": (_stft_front_end, (torch.randn(64),), (torch.randn(80),), {"hann_window"}),
    "windows": (
        _windows,
        (torch.randn(2, 8),),
        (torch.randn(3, 11),),
        {"hamming_window", "blackman_window", "bartlett_window", "kaiser_window"},
    ),
    "fill_diagonal_": (
        _contrastive,
        (torch.randn(4, 3),),
        (torch.randn(6, 3),),
        {"Tensor.fill_diagonal_"},
    ),
    "isin": (
        _special_tokens,
        (torch.randint(0, 5, (2, 6)),),
        (torch.randint(0, 5, (3, 9)),),
        {"isin"},
    ),
    "pad_sequence": (
        _padded,
        (torch.randn(3, 2), torch.randn(5, 2)),
        (torch.randn(7, 2), torch.randn(2, 2)),
        {"pad_sequence"},
    ),
    "pdist": (F.pdist, (torch.randn(4, 3),), (torch.randn(7, 3),), {"pdist"}),
    "gradient": (
        lambda x: torch.gradient(x, dim=-1)[0] + torch.gradient(x, spacing=2.0, edge_order=2)[1],
        (torch.randn(3, 5),),
        (torch.randn(4, 6),),
        {"gradient"},
    ),
    "vander": (lambda x: torch.vander(x, 3), (torch.randn(4),), (torch.randn(6),), {"vander"}),
    "vander_square": (
        lambda x: torch.vander(x, increasing=True),
        (torch.randn(4),),
        (torch.randn(4),),
        {"vander"},
    ),
    "special.erfcx": (torch.special.erfcx, (torch.randn(4),), (torch.randn(9),), {"special.erfcx"}),
    "put_": (_put, (torch.randn(4),), (torch.randn(7),), {"Tensor.put_"}),
    "put": (
        lambda x: x.put(torch.tensor([1]), torch.tensor([5.0])),
        (torch.randn(4),),
        (torch.randn(2),),
        {"put"},
    ),
    "index_reduce_": (
        _index_reduce,
        (torch.randn(3, 2),),
        (torch.randn(4, 5),),
        {"Tensor.index_reduce_"},
    ),
    "empty_strided": (_strided, (torch.randn(3, 4),), (torch.randn(5, 2),), {"empty_strided"}),
    "type_tensortype": (
        lambda x: x.type(torch.IntTensor) + 1,
        (torch.randn(4) * 5,),
        (torch.randn(7) * 9,),
        {"Tensor.type"},
    ),
}


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", CASES)
def test_everyday_op_is_recorded_saved_and_run_as_eager(name, runtime):
    fn, example, other, recorded = CASES[name]
    traced = tracebridge.trace(fn, example, runtime=runtime)
    assert recorded <= ops_of(traced)
    again = reloaded(traced, runtime)
    for inputs in (example, other):
        want = fn(*(t.clone() for t in inputs))
        assert torch.equal(traced(*inputs), want), name
        got = again(*inputs)
        assert got.dtype == want.dtype and torch.equal(got, want), name


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_random_fills_are_flagged_random_and_draw_as_eager(runtime):
    def noise(x):
        a = torch.empty_like(x).log_normal_(0.0, 0.5)
        b = torch.empty_like(x).cauchy_(0.0, 2.0)
        c = torch.empty_like(x).geometric_(0.3)
        return x + a + b + c

    for name in ("Tensor.log_normal_", "Tensor.cauchy_", "Tensor.geometric_"):
        assert "random" in ops.info(name).flags
    traced = tracebridge.trace(noise, torch.randn(4), runtime=runtime)
    again = reloaded(traced, runtime)
    x = torch.randn(6)
    torch.manual_seed(3)
    want = noise(x)
    torch.manual_seed(3)
    assert torch.equal(again(x), want)
    assert not torch.equal(again(x), want)  # the generator moved on, as in eager


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_istft_with_a_window_made_in_forward_round_trips(runtime):
    def round_trip(x):
        window = torch.hann_window(16)
        spec = torch.stft(x, 16, hop_length=4, window=window, return_complex=True)
        return torch.istft(spec, 16, hop_length=4, window=window, length=x.shape[-1])

    again = reloaded(tracebridge.trace(round_trip, torch.randn(64), runtime=runtime), runtime)
    x = torch.randn(96)
    assert torch.equal(again(x), round_trip(x))
    assert torch.allclose(again(x), x, atol=1e-5)


def test_empty_strided_is_zero_filled_in_its_whole_storage():
    again = reloaded(
        tracebridge.trace(
            lambda x: torch.empty_strided((x.shape[0], 2), (3, 1)).as_strided(
                (3 * x.shape[0] - 1,), (1,)
            ),
            torch.randn(4),
            check_trace=False,  # eager's storage is uninitialised, the trace's zeros
        ),
        "codegen",
    )
    got = again(torch.randn(5))  # the gaps between the rows too: no stale memory
    assert got.shape == (14,) and not got.any()


def test_a_window_sized_past_the_limit_at_the_call_is_refused_naming_the_op():
    traced = tracebridge.trace(lambda x: torch.hann_window(x.shape[0] * 2**28), torch.randn(0))
    with pytest.raises(tracebridge.OpError, match="hann_window would allocate"):
        traced(torch.randn(4))


def test_the_storage_limit_of_empty_strided_is_the_literal_size_limit():
    assert LIMITS["literal_numel"] == views.STORAGE_ELEMENTS


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    from .attack_cases import index_family, opset10_family
    from .test_fuzz import run_attacks

    cases = opset10_family()
    cases.update(
        {k: v for k, v in index_family().items() if k.split(":")[0] in ("put", "index_reduce")}
    )
    return run_attacks(tmp_path_factory.mktemp("opset10"), cases)


LOAD = {
    "empty_strided_far_stride": "reach 1099511627777 elements of storage",
    "empty_strided_negative_stride": "empty_strided sizes and strides must be >= 0",
    "empty_strided_mismatched": "empty_strided has 2 sizes but 1 strides",
    "empty_strided_bool_stride": "a bool where an integer is expected",
    "hann_window_literal": "hann_window is asked for 1099511627776 elements",
    # N is a scale argument (ir/ops.py): a literal past literal_numel is refused at load
    "vander_literal_n": "vander is given 1099511627776 for an argument that enlarges",
    "put_weight": "weight",
    "index_reduce_weight": "weight",
    "fill_diagonal_weight": "weight",
    "log_normal_weight": "weight",
}
CALL = {
    "empty_strided_computed_stride": "empty_strided would allocate",
    "empty_strided_computed_size": "empty_strided would allocate",
    "kaiser_window_computed": "kaiser_window would allocate",
    "hann_window_negative": "non-negative window_length",
    "vander_computed_n": "vander would allocate",
    "pdist_of_an_expand": "pdist would allocate",
    "pad_sequence_of_expands": "pad_sequence would allocate",
    "pad_sequence_empty": "sequences must not be empty",
    "gradient_count": "gives 3 results, but now it gives 1",
    "gradient_edge_order": "edge_order",
    "geometric_p_zero": "geometric_ expects p to be in (0, 1)",
    "fill_diagonal_of_a_vector": "dimensions must larger than 1",
}


def test_crafted_files_naming_opset10_ops_are_refused_where_they_are_wrong(attacks):
    from .test_fuzz import attack_failure

    failures = {name: why for name, o in attacks.items() if (why := attack_failure(o))}
    assert not failures, failures
    for table, stage in ((LOAD, "load"), (CALL, "call")):
        for name, words in table.items():
            outcome = attacks[f"opset10:{name}"]
            assert outcome["stage"] == stage and words in outcome["message"], (name, outcome)
    # indices past the target (or int64's extremes) are the kernel's IndexError, at the call
    for name, outcome in attacks.items():
        if name.startswith(("put:", "index_reduce:")):
            assert outcome["stage"] == "call", (name, outcome)
            assert "out of range" in outcome["message"], (name, outcome)


GRADIENT_CASES = {
    "pdist": lambda x: F.pdist(x).sum(),
    "fill_diagonal_": lambda x: (x @ x.T).fill_diagonal_(0.5).exp().sum(),
    "put_": lambda x: x.clone().put_(torch.tensor([0, 3]), x[0, :2] * 3, accumulate=True).sum(),
    "index_reduce_": lambda x: (
        x.clone().index_reduce_(0, torch.tensor([0, 1, 0]), x[:3] * 2, "amax").sum()
    ),
    "gradient": lambda x: torch.gradient(x, dim=0)[0].pow(2).sum(),
    "pad_sequence": lambda x: nn.utils.rnn.pad_sequence([x, x[:2] * 2]).pow(2).sum(),
    "special.erfcx": lambda x: torch.special.erfcx(x).sum(),
    "hann_window": lambda x: (x * torch.hann_window(x.shape[1], dtype=x.dtype)).sum(),
}


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_through_the_new_ops_are_eagers(name, runtime):
    fn = GRADIENT_CASES[name]
    again = reloaded(tracebridge.trace(fn, torch.randn(4, 3, requires_grad=True)), runtime)
    x = torch.randn(6, 5, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    fn(x).backward()
    again(y).backward()
    assert torch.equal(x.grad, y.grad), name


def test_an_input_written_by_fill_diagonal_is_written_as_eager_writes_it():
    def fn(x):
        return x.fill_diagonal_(7.0).sum()

    again = reloaded(tracebridge.trace(fn, torch.randn(3, 3)), "codegen")
    a = torch.randn(4, 4)
    b = a.clone()
    assert torch.equal(again(b), fn(a))
    assert torch.equal(a, b)
