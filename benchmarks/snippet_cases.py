"""The snippets of snippet_trial.py: everyday PyTorch code, by area.

Each case names a factory (a function, or a module built fresh), the example call and other
calls (other shapes, other values) as ``(args, kwargs)``, and options for
``tracebridge.trace``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import rnn as rnn_utils

r = torch.randn


@dataclasses.dataclass
class Case:
    name: str
    area: str
    make: Callable[[], Any]
    example: tuple
    others: list
    options: dict = dataclasses.field(default_factory=dict)
    # Applied after tracing to the model traced (and to a loaded module): a change a user
    # makes to the model later (a hook, an attribute); eager runs the changed model.
    after_trace: Callable | None = None


CASES: list[Case] = []


def case(area: str, example, *others, name: str | None = None, module: bool = False, **options):
    """Register a snippet: ``example`` and ``others`` are tuples of positional inputs, or
    ``(args, kwargs)`` pairs given as ``kw(args, kwargs)``."""

    def wrap(call):
        def norm(item):
            return item if isinstance(item, _Kw) else _Kw(item, {})

        ex = norm(example)
        make = call if module else (lambda: call)
        CASES.append(
            Case(
                name or call.__name__,
                area,
                make,
                (ex.args, ex.kwargs),
                [(o.args, o.kwargs) for o in map(norm, others)],
                options,
            )
        )
        return call

    return wrap


@dataclasses.dataclass
class _Kw:
    args: tuple
    kwargs: dict


def kw(args: tuple, kwargs: dict) -> _Kw:
    return _Kw(args, kwargs)


# --- nn.Module hooks and buffers ------------------------------------------------------------


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def forward_hook():
    m = nn.Linear(4, 2)
    m.register_forward_hook(lambda mod, args, out: out * 2)
    return m


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def forward_pre_hook():
    m = nn.Linear(4, 2)
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    return m


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def submodule_hook():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    m[1].register_forward_hook(lambda mod, args, out: out.clamp(max=0.5))
    return m


class RunningMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("peak", torch.zeros(4))

    def forward(self, x):
        torch.maximum(self.peak, x.amax(0), out=self.peak)
        return x / (self.peak + 1)


@case("hooks/buffers", (r(3, 4),), (r(5, 4) * 3,), (r(2, 4),), module=True)
def running_max_out():
    return RunningMax()


class EMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.avg.mul_(0.9).add_(x.mean(0), alpha=0.1)
        self.steps += 1
        return x - self.avg


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), (r(2, 4),), module=True)
def ema_buffer():
    return EMA()


class NonPersistent(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.arange(4.0), persistent=False)

    def forward(self, x):
        return x * self.scale


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def non_persistent_buffer():
    return NonPersistent()


class BNBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        y = self.bn(x)
        if y.mean() > 0:
            return y
        return -y


@case("hooks/buffers", (r(6, 4) + 1,), (r(6, 4) - 3,), (r(5, 4) + 1,), module=True)
def bn_train_then_branch():
    return BNBranch().train()


# --- torch.where / masked ops ---------------------------------------------------------------


@case("where/masked", (r(3, 4),), (r(5, 4),))
def where_scalar(x):
    return torch.where(x > 0, x, torch.zeros(()))


@case("where/masked", (r(3, 4),), (r(5, 4),))
def where_single_arg(x):
    return torch.stack(torch.where(x > 0.5)).float().sum(1) if (x > 0.5).any() else x.sum()


@case("where/masked", (r(3, 4),), (r(5, 4),))
def masked_select_sum(x):
    return torch.masked_select(x, x.abs() > 0.5).sum()


@case("where/masked", (r(3, 4),), (r(5, 4),))
def masked_scatter(x):
    mask = x > 0
    return torch.zeros_like(x).masked_scatter(mask, torch.arange(x.numel(), dtype=x.dtype))


@case("where/masked", (r(2, 5), torch.tensor([3, 5])), (r(3, 7), torch.tensor([1, 7, 4])))
def length_mask_softmax(x, lengths):
    mask = torch.arange(x.shape[1])[None, :] < lengths[:, None]
    return x.masked_fill(~mask, float("-inf")).softmax(-1)


# --- integer / boolean dtypes ---------------------------------------------------------------


@case("int/bool", (torch.randint(-9, 9, (5,)),), (torch.randint(-9, 9, (8,)),))
def int_floor_remainder(x):
    return torch.remainder(x, 4) + torch.floor_divide(x, 3) + x.abs().bitwise_and(6)


@case("int/bool", (torch.randint(0, 2, (6,)).bool(),), (torch.randint(0, 2, (9,)).bool(),))
def bool_logic(x):
    return (x ^ x.roll(1)) | (~x & x.flip(0))


@case(
    "int/bool",
    (torch.randint(0, 100, (4,), dtype=torch.int32),),
    (torch.randint(0, 9, (6,), dtype=torch.int32),),
)
def int32_sum_dtype(x):
    return x.sum(), x.cumsum(0), x * 2, (x / 3)


@case(
    "int/bool",
    (torch.randint(0, 255, (4,), dtype=torch.uint8),),
    (torch.randint(0, 255, (6,), dtype=torch.uint8),),
)
def uint8_wrap(x):
    return x + 200, x.to(torch.int16) * 3


@case("int/bool", (torch.randint(0, 5, (6,)),), (torch.randint(0, 5, (9,)),))
def bincount_argmax(x):
    return torch.bincount(x, minlength=5).argmax()


# --- complex numbers ------------------------------------------------------------------------


@case("complex", (torch.randn(4, dtype=torch.cfloat),), (torch.randn(6, dtype=torch.cfloat),))
def complex_polar(x):
    return torch.polar(x.abs(), x.angle() + 1.0)


@case("complex", (r(4, 2),), (r(7, 2),))
def view_as_complex_mul(x):
    z = torch.view_as_complex(x.contiguous())
    return torch.view_as_real(z * z.conj() + 1j)


@case("complex", (r(8),), (r(12),))
def fft_roundtrip(x):
    return torch.fft.irfft(torch.fft.rfft(x) * 2, n=x.shape[0])


@case(
    "complex", (torch.randn(3, 3, dtype=torch.cdouble),), (torch.randn(4, 4, dtype=torch.cdouble),)
)
def complex_matmul_exp(x):
    return torch.exp(x @ x.mH).real.sum()


# --- einsum ---------------------------------------------------------------------------------


@case("einsum", (r(2, 3, 4), r(2, 4, 5)), (r(3, 2, 4), r(3, 4, 6)))
def einsum_batched(a, b):
    return torch.einsum("bij,bjk->bik", a, b)


@case("einsum", (r(3, 3),), (r(5, 5),))
def einsum_trace_diag(x):
    return torch.einsum("ii", x), torch.einsum("ii->i", x)


@case("einsum", (r(2, 3, 4),), (r(3, 5, 4),))
def einsum_ellipsis(x):
    return torch.einsum("...d,...d->...", x, x)


@case("einsum", (r(2, 3), r(3, 4), r(4, 2)), (r(3, 5), r(5, 2), r(2, 3)))
def einsum_three(a, b, c):
    return torch.einsum("ij,jk,kl->il", a, b, c)


@case("einsum", (r(2, 4, 8), r(2, 6, 8)), (r(1, 3, 8), r(1, 5, 8)))
def einsum_attention(q, k):
    return torch.einsum("bqd,bkd->bqk", q, k).softmax(-1)


# --- padding / packing ----------------------------------------------------------------------


class PackedGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4, batch_first=True)

    def forward(self, x, lengths):
        packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = self.gru(packed)
        out, _ = rnn_utils.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out, h


@case(
    "padding/packing",
    (r(3, 5, 3), torch.tensor([5, 2, 4])),
    (r(3, 5, 3), torch.tensor([3, 5, 1])),
    (r(2, 6, 3), torch.tensor([6, 2])),
    module=True,
)
def pack_padded_gru():
    return PackedGRU().eval()


@case("padding/packing", (r(3, 4), r(5, 4), r(2, 4)), (r(1, 4), r(6, 4), r(3, 4)))
def pad_sequence_three(a, b, c):
    return rnn_utils.pad_sequence([a, b, c], batch_first=True, padding_value=-1.0)


@case("padding/packing", (r(1, 2, 5),), (r(2, 2, 9),))
def pad_modes(x):
    return F.pad(x, (1, 2), mode="replicate") + F.pad(x, (1, 2), mode="circular").flip(-1)


@case("padding/packing", (r(2, 3),), (r(4, 5),))
def pad_constant_value(x):
    return F.pad(x, (0, 8 - x.shape[1]), value=float(x.shape[0]))


# --- torch.func ------------------------------------------------------------------------------


@case("torch.func", (r(4, 3),), (r(6, 3),))
def func_vmap(x):
    return torch.func.vmap(lambda row: row.dot(row))(x)


@case("torch.func", (r(3),), (r(5),))
def func_grad(x):
    return torch.func.grad(lambda v: (v.sin() ** 2).sum())(x)


@case("torch.func", (r(3, 4),), (r(5, 4),), module=True)
def functional_call():
    class Call(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            params = {k: v * 2 for k, v in self.lin.named_parameters()}
            return torch.func.functional_call(self.lin, params, (x,))

    return Call()


# --- sparse-ish indexing --------------------------------------------------------------------


@case(
    "indexing",
    (r(5, 3), torch.tensor([0, 2, 0, 1, 2])),
    (r(7, 3), torch.tensor([1, 1, 0, 2, 0, 2, 1])),
)
def index_add_inplace(x, idx):
    out = torch.zeros(3, 3)
    out.index_add_(0, idx, x)
    return out


@case("indexing", (r(6), torch.tensor([0, 1, 0, 2, 1, 0])), (r(4), torch.tensor([2, 2, 1, 0])))
def scatter_reduce_amax(x, idx):
    return torch.zeros(3).scatter_reduce(0, idx, x, reduce="amax", include_self=False)


@case("indexing", (r(6), torch.tensor([0, 1, 0, 2, 1, 0])), (r(4), torch.tensor([2, 2, 1, 0])))
def scatter_reduce_mean(x, idx):
    return torch.ones(3).scatter_reduce(0, idx, x, reduce="mean")


@case("indexing", (r(4, 5),), (r(6, 5),))
def gather_topk_rows(x):
    idx = x.argsort(1, descending=True)[:, :2]
    return x.gather(1, idx)


@case("indexing", (r(5, 4), torch.tensor([4, 0, 2])), (r(6, 4), torch.tensor([5, 1])))
def index_select_put(x, idx):
    y = x.clone()
    y.index_put_((idx,), torch.ones(idx.shape[0], 4), accumulate=True)
    return y.index_select(0, idx)


# --- in-place on views ----------------------------------------------------------------------


@case("inplace-views", (r(4, 4),), (r(6, 6),))
def diagonal_fill(x):
    y = x.clone()
    y.diagonal().fill_(0)
    return y


@case("inplace-views", (r(3, 6),), (r(5, 8),))
def slice_mul_inplace(x):
    y = x.clone()
    y[:, ::2] *= 2
    y.narrow(1, 1, 2).add_(1)
    return y


@case("inplace-views", (r(2, 3, 4),), (r(3, 3, 5),))
def transpose_view_write(x):
    y = x.clone()
    y.transpose(1, 2)[:, 0].zero_()
    return y


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def unbind_inplace(x):
    y = x.clone()
    for row in y.unbind(0):
        row.mul_(2)
    return y


# --- devices as strings ---------------------------------------------------------------------


@case("devices", (r(3, 4),), (r(5, 4),))
def to_cpu_string(x):
    return x.to("cpu") + torch.ones(x.shape, device="cpu")


@case("devices", (r(3, 4),), (r(5, 4),))
def device_of_input(x):
    return torch.zeros(x.shape[0], device=x.device, dtype=x.dtype) + x.sum(1)


@case("devices", (r(3, 4),), (r(5, 4),))
def device_object(x):
    return x.to(torch.device("cpu"), torch.float64) * 2


# --- string / None / dict inputs, defaults, keyword-only ------------------------------------


@case("inputs", (r(3, 4), "sum"), (r(5, 4), "sum"), (r(5, 4), "mean"))
def string_input(x, how):
    return x.sum(0) if how == "sum" else x.mean(0)


@case("inputs", (r(3, 4), None), (r(5, 4), None), (r(5, 4), r(5, 4)))
def none_input(x, mask):
    return x if mask is None else x * mask


@case(
    "inputs",
    ({"a": r(3, 4), "b": r(3, 4)},),
    ({"a": r(5, 4), "b": r(5, 4)},),
    ({"b": r(2, 4), "a": r(2, 4)},),
)
def dict_input(d):
    return d["a"] - d["b"]


@case("inputs", (r(3, 4),), (r(5, 4),))
def default_argument(x, scale=3.0):
    return x * scale


@case("inputs", kw((r(3, 4),), {"bias": r(4)}), kw((r(5, 4),), {"bias": r(4)}))
def keyword_only(x, *, bias):
    return x + bias


@case(
    "inputs",
    kw((r(3, 4),), {"temperature": 2.0}),
    kw((r(5, 4),), {"temperature": 2.0}),
    kw((r(5, 4),), {"temperature": 0.5}),
)
def keyword_float(x, *, temperature=1.0):
    return (x / temperature).softmax(-1)


@case("inputs", ([r(3), r(3)],), ([r(5), r(5)],), ([r(2), r(2), r(2)],))
def list_input(xs):
    return torch.stack(xs).sum(0)


# --- nested outputs -------------------------------------------------------------------------


@case("outputs", (r(3, 4),), (r(5, 4),), strict=False)
def nested_output(x):
    return {"stats": (x.mean(), [x.min(), x.max()]), "y": x * 2, "none": None}


@case("outputs", (r(3, 4),), (r(5, 4),))
def tuple_with_int(x):
    return x.sum(0), x.shape[0]


@dataclasses.dataclass
class Pred:
    logits: torch.Tensor
    label: torch.Tensor


@case("outputs", (r(3, 4),), (r(5, 4),))
def dataclass_output(x):
    return Pred(x, x.argmax(-1))


# --- autocast / no_grad / inference_mode ----------------------------------------------------


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def autocast_bf16():
    class Auto(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = self.lin(x)
            return y.float().softmax(-1), y.dtype == torch.bfloat16

    return Auto()


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def no_grad_inside():
    class NoGrad(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            with torch.no_grad():
                target = self.lin(x).detach()
            return self.lin(x) - target.mean(), target.requires_grad

    return NoGrad()


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def inference_mode_inside():
    class Infer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self, x):
            with torch.inference_mode():
                y = self.lin(x) * 2
            return y.clone()

    return Infer()


@case("autocast/grad", (r(3, 4),), (r(5, 4),))
def enable_grad_inside(x):
    with torch.enable_grad():
        w = torch.ones(4, requires_grad=True)
        y = (x * w).sum()
    return y.detach(), y.requires_grad


# --- interpolate / grid_sample ---------------------------------------------------------------


@case("interpolate", (r(1, 2, 4, 4),), (r(2, 2, 5, 7),))
def interp_bicubic(x):
    return F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True)


@case("interpolate", (r(1, 2, 6),), (r(2, 2, 9),))
def interp_linear_1d(x):
    return F.interpolate(x, size=10, mode="linear")


@case("interpolate", (r(1, 1, 3, 4, 4),), (r(1, 1, 2, 3, 5),))
def interp_trilinear(x):
    return F.interpolate(x, scale_factor=2, mode="trilinear")


@case("interpolate", (r(1, 2, 5, 5),), (r(2, 2, 7, 3),))
def interp_area_nearest_exact(x):
    return F.interpolate(x, size=(3, 3), mode="area") + F.interpolate(
        x, size=(3, 3), mode="nearest-exact"
    )


@case("interpolate", (r(1, 2, 4, 4),), (r(2, 2, 6, 5),))
def interp_antialias(x):
    return F.interpolate(x, size=(2, 2), mode="bilinear", antialias=True)


@case(
    "interpolate",
    (r(2, 3, 5, 5), torch.rand(2, 4, 4, 2) * 2 - 1),
    (r(1, 3, 6, 7), torch.rand(1, 2, 3, 2) * 2 - 1),
)
def grid_sample_bilinear(x, grid):
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


@case("interpolate", (r(2, 3, 5, 5),), (r(1, 3, 6, 7),))
def affine_grid_sample(x):
    theta = torch.tensor([[0.8, 0.1, 0.0], [-0.1, 0.9, 0.1]]).expand(x.shape[0], 2, 3)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="nearest", align_corners=False)


# --- quantile / median / sort / cumulative --------------------------------------------------


@case("stats", (r(4, 7),), (r(6, 9),))
def quantile_dim(x):
    return torch.quantile(x, torch.tensor([0.1, 0.5, 0.9]), dim=1, interpolation="midpoint")


@case("stats", (r(4, 7),), (r(6, 8),))
def median_lower(x):
    return x.median(dim=-1), x.nanmedian()


@case("stats", (torch.tensor([3, 1, 2, 1, 3, 2, 1]),), (torch.tensor([2, 2, 1, 1, 0]),))
def stable_sort(x):
    return torch.sort(x, stable=True)


@case("stats", (r(3, 6),), (r(5, 4),))
def cumulative_ops(x):
    return x.cumprod(1), x.cummax(1).values, x.cummin(0).indices, torch.logcumsumexp(x, 1)


@case("stats", (r(3, 6),), (r(5, 4),))
def kthvalue_mode(x):
    return x.kthvalue(2, dim=1).values + x.round().mode(1).values


@case("stats", (r(10),), (r(15),))
def histc_searchsorted(x):
    edges = torch.linspace(-2, 2, 5)
    return torch.histc(x, bins=4, min=-2, max=2), torch.searchsorted(edges, x.sort().values)


# --- RNN variants ---------------------------------------------------------------------------


def _rnn_case(name, make, example, *others):
    case("rnn", example, *others, name=name, module=True)(make)


_rnn_case(
    "lstm_proj_batch_first",
    lambda: nn.LSTM(4, 6, proj_size=3, batch_first=True).eval(),
    (r(2, 5, 4),),
    (r(3, 7, 4),),
)
_rnn_case(
    "lstm_bidir_2layer",
    lambda: nn.LSTM(4, 5, num_layers=2, bidirectional=True).eval(),
    (r(5, 2, 4),),
    (r(3, 1, 4),),
)
_rnn_case(
    "gru_batch_first_bidir",
    lambda: nn.GRU(4, 5, batch_first=True, bidirectional=True).eval(),
    (r(2, 5, 4),),
    (r(1, 3, 4),),
)
_rnn_case(
    "rnn_tanh_relu",
    lambda: nn.RNN(4, 5, nonlinearity="relu", num_layers=2).eval(),
    (r(5, 2, 4),),
    (r(3, 4, 4),),
)
_rnn_case(
    "lstm_with_state",
    lambda: nn.LSTM(4, 5, batch_first=True).eval(),
    (r(2, 5, 4), (r(1, 2, 5), r(1, 2, 5))),
    (r(3, 4, 4), (r(1, 3, 5), r(1, 3, 5))),
)
_rnn_case("lstm_unbatched", lambda: nn.LSTM(4, 5).eval(), (r(6, 4),), (r(3, 4),))
_rnn_case("lstm_cell_loop", lambda: _CellLoop().eval(), (r(5, 2, 4),), (r(3, 3, 4),))


class _CellLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(4, 5)

    def forward(self, x):
        h = torch.zeros(x.shape[1], 5)
        c = torch.zeros(x.shape[1], 5)
        outs = []
        for step in x:
            h, c = self.cell(step, (h, c))
            outs.append(h)
        return torch.stack(outs)


# --- second round: where a trace could be silently wrong ------------------------------------


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def write_into_input(x):
    x[:, 0] = 0
    x.mul_(2)
    return x.sum()


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def input_view_inplace(x):
    x.t()[0].add_(1)
    return x


@case("where/masked", (r(3, 4),), (r(5, 4),))
def masked_fill_tensor_value(x):
    return x.masked_fill(x < 0, x.max())


@case("where/masked", (torch.randint(-3, 3, (5,)),), (torch.randint(-3, 3, (7,)),))
def where_int_float(x):
    return torch.where(x > 0, x, 0.5), torch.where(x > 0, x, 2)


@case("int/bool", (torch.randint(-9, 9, (5,)),), (torch.randint(-9, 9, (8,)),))
def int_true_divide_trunc(x):
    return x / 2, torch.div(x, 2, rounding_mode="trunc"), x // -2


@case("int/bool", (r(4, 5),), (r(6, 5),))
def bool_sum_mean(x):
    mask = x > 0
    return mask.sum(), mask.sum(1), mask.float().mean(), mask.cumsum(1)


@case("int/bool", (torch.randint(0, 9, (5,)),), (torch.randint(0, 9, (7,)),))
def int_shift_and_cast(x):
    return (x << 2) >> 1, x.to(torch.int8) * 40


@case("complex", (torch.randn(4, dtype=torch.cfloat),), (torch.randn(6, dtype=torch.cfloat),))
def complex_real_inplace(x):
    y = x.clone()
    y.real.mul_(2)
    return y, y.imag, x.conj().imag


@case("complex", (r(5),), (r(7),))
def complex_from_real(x):
    z = torch.complex(x, x.flip(0))
    return z.abs(), z * 1j, torch.view_as_real(z)


@case("outputs", (r(3, 4),), (r(5, 4),))
def shape_output(x):
    return x.shape, x.size(1), x.dim()


@case("outputs", (r(3, 4),), (r(5, 4),))
def python_float_output(x):
    return x * 2, x.shape[0] / 2


@case("outputs", (r(3, 4),), (r(5, 4),))
def bool_output(x):
    return x.is_floating_point(), x + 1


@case("outputs", (r(3, 4),), (r(5, 4),), strict=False)
def int_key_dict(x):
    return {0: x, 1: x.t()}


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def buffer_none_and_optional():
    class Opt(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", None)
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y if self.mask is None else y * self.mask

    return Opt()


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def hook_with_state():
    m = nn.Linear(4, 2)
    m.calls = 0

    def hook(mod, args, out):
        mod.calls += 1
        return out * mod.calls

    m.register_forward_hook(hook)
    return m


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def autocast_matmul_bf16_output():
    class AutoOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = self.lin(x) @ x.t()
                z = y.softmax(-1)
            return y, z

    return AutoOut()


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def no_grad_output_requires_grad():
    class NG(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        @torch.no_grad()
        def forward(self, x):
            return self.lin(x)

    return NG()


@case("interpolate", (r(1, 2, 5, 5),), (r(2, 2, 7, 9),))
def interp_scale_recompute(x):
    return F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)


@case("interpolate", (r(1, 2, 5, 5),), (r(2, 2, 7, 9),))
def interp_scale_float(x):
    return F.interpolate(x, scale_factor=(0.6, 1.3), mode="nearest")


@case(
    "interpolate",
    (r(2, 3, 4, 4), r(2, 4, 4, 2).clamp(-1, 1)),
    (r(1, 3, 5, 6), r(1, 2, 2, 2).clamp(-1, 1)),
)
def grid_sample_zeros_bicubic(x, grid):
    return F.grid_sample(x, grid, mode="bicubic", padding_mode="zeros", align_corners=True)


@case("stats", (r(9),), (r(12),))
def quantile_scalar(x):
    return torch.quantile(x, 0.3), torch.nanquantile(x, 0.7, interpolation="nearest")


@case("stats", (r(4, 6),), (r(2, 5),))
def sort_descending_stable(x):
    v = (x * 2).round() / 2
    return torch.sort(v, dim=1, descending=True, stable=True).indices


@case("stats", (r(3, 5),), (r(4, 6),))
def cumsum_dtype_flip(x):
    return (
        x.cumsum(1, dtype=torch.float64),
        x.flip(1).cumsum(1).flip(1),
        torch.cumulative_trapezoid(x, dim=1),
    )


@case(
    "indexing",
    (r(5, 3), torch.tensor([0, 2, 0, 1, 2])),
    (r(7, 3), torch.tensor([1, 1, 0, 2, 0, 2, 1])),
)
def index_add_alpha(x, idx):
    return torch.zeros(3, 3).index_add(0, idx, x, alpha=-0.5)


@case(
    "indexing",
    (r(4, 3), torch.tensor([[0, 1, 2], [2, 0, 1], [1, 1, 1], [0, 0, 0]])),
    (r(2, 3), torch.tensor([[2, 2, 2], [0, 1, 0]])),
)
def scatter_add_and_reduce(x, idx):
    return torch.zeros(3, 3).scatter_add(0, idx, x), torch.ones(3, 3).scatter(
        0, idx, x, reduce="multiply"
    )


@case("indexing", (r(6, 4),), (r(8, 4),))
def advanced_index_mixed(x):
    rows = torch.arange(x.shape[0] // 2) * 2
    return x[rows, 1:3], x[..., [0, 3]], x[x[:, 0] > 0, 0]


@case("padding/packing", (r(3, 5, 3), [5, 4, 2]), (r(3, 5, 3), [5, 3, 1]), module=True)
def pack_sorted_list_lengths():
    class P(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 4, batch_first=True)

        def forward(self, x, lengths):
            packed = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True)
            out, (h, c) = self.lstm(packed)
            return h[-1]

    return P().eval()


@case("rnn", (r(2, 5, 4),), (r(3, 2, 4),), module=True)
def lstm_dropout_train():
    return nn.LSTM(4, 5, num_layers=2, dropout=0.5, batch_first=True).train()


@case("torch.func", (r(3),), (r(5),))
def func_jacrev(x):
    return torch.func.jacrev(torch.sin)(x)


@case("devices", (r(3, 4),), (r(5, 4),))
def new_tensor_on_device(x):
    return x + x.new_tensor([1.0, 2.0, 3.0, 4.0]) + torch.as_tensor([0.5] * 4, device=x.device)


@case("inputs", (r(3, 4), 2), (r(5, 4), 2), (r(5, 4), 3))
def int_argument(x, k):
    return x.topk(k, dim=1).values


@case("inputs", ((r(3, 4), (r(3, 4), r(4))),), ((r(5, 4), (r(5, 4), r(4))),))
def nested_tuple_input(t):
    a, (b, c) = t
    return a * b + c


# --- third round ----------------------------------------------------------------------------


@case("int/bool", (r(3, 4),), (r(5, 6),))
def sizes_into_tensors(x):
    return (
        torch.tensor(x.shape[0]),
        torch.tensor([x.shape[0], 3.0]),
        torch.full((2,), x.shape[1]),
        x.new_full((2,), x.shape[0]),
        torch.arange(x.shape[0] * 0.5),
        torch.linspace(0, 1, x.shape[1]),
    )


@case("int/bool", (r(3, 4),), (r(5, 6),))
def size_arithmetic_outputs(x):
    n = x.shape[0]
    return x.sum() / n, torch.zeros(n, dtype=torch.long).fill_(x.shape[1] // 2), n % 2 == 0


@case(
    "int/bool",
    (torch.randint(0, 9, (5,), dtype=torch.int32),),
    (torch.randint(0, 9, (7,), dtype=torch.int32),),
)
def int32_cumsum_promotes(x):
    return x.cumsum(0), x.sum(), x.prod(), torch.cumprod(x, 0, dtype=torch.int32)


@case("complex", (r(4, 6),), (r(5, 8),))
def fftn_with_s(x):
    return torch.fft.fftn(x, s=(4, 4)).abs(), torch.fft.fftshift(torch.fft.fft2(x)).angle()


@case("complex", (r(5),), (r(7),))
def to_complex_dtype(x):
    z = x.to(torch.complex64)
    return (z * (1 + 2j)).conj_physical(), torch.abs(z)


@case("einsum", (r(2, 3), r(3, 4)), (r(4, 5), r(5, 2)))
def einsum_sublist(a, b):
    return torch.einsum(a, [0, 1], b, [1, 2], [0, 2])


@case("einsum", (r(2, 3), r(3, 4)), (r(4, 5), r(5, 2)))
def einsum_list_operands(a, b):
    return torch.einsum("ij,jk", [a, b])


@case("einsum", (r(3, 4, 4),), (r(2, 5, 5),))
def einsum_batch_diag_sum(x):
    return torch.einsum("bii->b", x), torch.einsum("bij->", x)


@case("padding/packing", (r(5, 2, 3),), (r(4, 3, 3),), module=True)
def packed_output():
    class PackedOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(3, 4)

        def forward(self, x):
            lengths = torch.full((x.shape[1],), x.shape[0])
            packed = rnn_utils.pack_padded_sequence(x, lengths)
            return self.gru(packed)[0]

    return PackedOut().eval()


@case("indexing", (r(5, 3),), (r(7, 3),))
def take_along_and_fill(x):
    idx = x.argmax(1, keepdim=True)
    y = x.clone()
    y.scatter_(1, idx, 1.0)
    return torch.take_along_dim(x, idx, 1), y.index_fill(0, torch.tensor([0]), -1.0)


@case("indexing", (r(5, 3), torch.tensor([0, 0, 2])), (r(6, 3), torch.tensor([1, 1, 1, 4])))
def index_duplicate_plus_equals(x, idx):
    y = x.clone()
    y[idx] += 1
    return y


@case("indexing", (r(5, 3),), (r(7, 3),))
def negative_and_none_index(x):
    return x[torch.tensor([-1, 0])], x[None, ..., None].shape, x[:, -1:], x[-2]


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def detach_alias_write(x):
    d = x.detach()
    d.zero_()
    return x + 1


@case("inplace-views", (r(4, 4),), (r(6, 6),))
def view_chain_write(x):
    y = x.clone()
    y.view(-1)[::2] = 0
    z = y[0]
    z += 1
    return y


@case("inputs", (r(3), r(3)), (r(5), r(5)), (r(2), r(2), r(2)))
def var_positional(*xs):
    return sum(xs)


@case(
    "inputs",
    kw((), {"a": r(3), "b": r(3)}),
    kw((), {"a": r(5), "b": r(5)}),
    kw((), {"b": r(4), "a": r(4)}),
)
def var_keyword(**parts):
    return parts["a"] * 2 - parts["b"]


@case("inputs", (r(3, 4),), kw((r(5, 4),), {"scale": 3.0}), kw((r(5, 4),), {"scale": 0.5}))
def default_given_later(x, scale=3.0):
    return x * scale


@case("inputs", kw((r(3, 4),), {"y": r(3, 4)}), (r(5, 4), r(5, 4)))
def keyword_then_positional(x, y):
    return x - y


@case("outputs", (r(3, 4),), (r(5, 4),))
def same_tensor_twice(x):
    y = x * 2
    return y, y, x


@case("outputs", (r(3, 4),), (r(5, 4),))
def return_types_output(x):
    return x.max(1), torch.sort(x, 1)


@case("outputs", (r(3, 4),), (r(5, 4),), strict=False)
def dataclass_in_dict(x):
    return {"pred": Pred(x, x.argmax(-1)), "n": x.shape[0]}


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def autocast_disabled_inside():
    class Nested(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 2)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.a(x)
                with torch.autocast("cpu", enabled=False):
                    out = self.b(h.float())
            return h, out

    return Nested()


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def autocast_decorated_forward():
    class Deco(nn.Linear):
        @torch.autocast("cpu", dtype=torch.bfloat16)
        def forward(self, x):
            return super().forward(x) * 2

    return Deco(4, 3)


@case("autocast/grad", (r(3, 4),), (r(5, 4),), module=True)
def set_grad_enabled_call():
    class SGE(nn.Linear):
        def forward(self, x):
            with torch.set_grad_enabled(False):
                frozen = super().forward(x)
            return super().forward(x) + frozen

    return SGE(4, 3)


@case("interpolate", (r(1, 2, 8),), (r(2, 2, 12),))
def interp_size_from_shape(x):
    return F.interpolate(x, size=x.shape[-1] * 2 - 1, mode="linear", align_corners=True)


@case("interpolate", (r(1, 2, 8, 8),), (r(2, 2, 12, 12),))
def interp_scale_from_shape(x):
    return F.interpolate(x, scale_factor=16 / x.shape[-1], mode="bilinear")


@case("interpolate", (r(1, 2, 4, 4),), (r(2, 2, 3, 5),), module=True)
def upsample_module():
    return nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(2, 2, 3, padding=1))


@case("stats", (r(3, 6), torch.tensor([0.25, 0.75])), (r(4, 5), torch.tensor([0.1, 0.9])))
def quantile_tensor_q(x, q):
    return torch.quantile(x, q, dim=1, keepdim=True)


@case(
    "stats",
    (torch.tensor([[1.0, float("nan"), 3.0, 2.0]]),),
    (torch.tensor([[float("nan"), 5.0], [1.0, 2.0]]),),
)
def nanmedian_dim(x):
    return torch.nanmedian(x, dim=1), x.median()


@case("stats", (torch.tensor([2.0, 1.0, 2.0, 1.0, 2.0]),), (torch.tensor([3.0, 3.0, 1.0, 3.0]),))
def cummax_ties_argsort_stable(x):
    return x.cummax(0), torch.argsort(x, stable=True), x.msort()


@case("stats", (r(3, 6),), (r(4, 5),))
def diff_prepend(x):
    return torch.diff(x, n=2, dim=1, prepend=x[:, :1]), torch.trapezoid(x, dim=1)


@case("rnn", (r(2, 5, 4), r(2, 2, 5)), (r(3, 4, 4), r(2, 3, 5)), module=True)
def gru_h0_batch_first_2layer():
    return nn.GRU(4, 5, num_layers=2, batch_first=True).eval()


@case("rnn", (r(5, 2, 4),), (r(3, 4, 4),), module=True)
def rnn_no_bias_tanh():
    return nn.RNN(4, 5, bias=False).eval()


@case("rnn", (r(2, 5, 4),), (r(3, 6, 4),), module=True)
def lstm_proj_bidir_2layer():
    return nn.LSTM(4, 6, num_layers=2, proj_size=2, bidirectional=True, batch_first=True).eval()


@case("rnn", (r(5, 2, 4),), (r(3, 4, 4),), module=True)
def lstm_flatten_parameters():
    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 5)

        def forward(self, x):
            self.lstm.flatten_parameters()
            return self.lstm(x)[1][0]

    return Flat().eval()


@case("rnn", (r(3, 4),), (r(5, 4),), module=True)
def gru_cell_step():
    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.GRUCell(4, 6)
            self.rcell = nn.RNNCell(6, 3, nonlinearity="relu")

        def forward(self, x):
            return self.rcell(self.cell(x))

    return Step()


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), module=True)
def buffer_read_as_python_number():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", torch.tensor(3.0))

        def forward(self, x):
            return x * float(self.k)

    return Scale()


@case("hooks/buffers", (r(3, 4),), (r(5, 4),), (r(2, 4),), module=True)
def buffer_append_history():
    class History(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("hist", torch.zeros(3))

        def forward(self, x):
            self.hist.copy_(torch.cat([self.hist[1:], x.mean().reshape(1)]))
            return x - self.hist.mean()

    return History()


@case("where/masked", (r(4, 4),), (r(6, 6),))
def masked_fill_scaled_float(x):
    scale = float(x.shape[-1]) ** -0.5
    return (x * scale).masked_fill(torch.eye(x.shape[0], dtype=torch.bool), -1e4)


@case("where/masked", (r(3, 4),), (r(5, 4),))
def masked_set_broadcast(x):
    y = x.clone()
    y[y < 0] = torch.tensor(0.25)
    y[:, x[0] > 0] = 9.0
    return y


# --- changes made to the model after tracing ------------------------------------------------


def _hook_second_layer(model):
    model.get_submodule("1").register_forward_hook(lambda mod, args, out: out * 0.5)


def _bigger_eps(model):
    model.get_submodule("1").eps = 10.0


@case("after tracing", (r(3, 4),), (r(5, 4),), module=True)
def hook_added_after_trace():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


@case("after tracing", (r(3, 4),), (r(5, 4),), module=True)
def attribute_changed_after_trace():
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).eval()


CASES[-2].after_trace = _hook_second_layer
CASES[-1].after_trace = _bigger_eps


# --- fourth round: aliases and identity -----------------------------------------------------


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def noop_conversion_alias_write(x):
    y = x.float()  # x is float already: y is x
    y.add_(1)
    z = x.contiguous()
    z.mul_(2)
    return x.to(torch.float32).sum()


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def reshape_alias_write(x):
    y = x.reshape(-1)  # a view of a contiguous input
    y[0] = 100.0
    return x


@case("inplace-views", (r(4, 3),), (r(6, 3),))
def transposed_reshape_copy_write(x):
    y = x.t().reshape(-1)  # a copy: x does not change
    y.zero_()
    return x, y


@case("inplace-views", (r(3, 4),), (r(5, 4),))
def type_as_alias(x):
    y = x.type_as(x)
    y.neg_()
    return x * 1


@case("inplace-views", (r(2, 3),), (r(4, 3),))
def chunk_then_write(x):
    a, b = x.chunk(2, dim=1) if x.shape[1] % 2 == 0 else (x[:, :2], x[:, 2:])
    a.mul_(0)
    return x + b.sum()


@case("outputs", (r(3, 4),), (r(5, 4),), module=True)
def return_parameter_and_buffer():
    class Ret(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))
            self.register_buffer("b", torch.zeros(4))

        def forward(self, x):
            return x * self.w, self.w, self.b

    return Ret()


@case("outputs", (r(3, 4),), (r(5, 4),))
def return_input_and_view(x):
    return x, x[0], x.t()


@case("where/masked", (r(3, 4),), (r(5, 4),))
def nan_handling(x):
    y = x.masked_fill(x > 1, float("nan"))
    return torch.nan_to_num(y, nan=0.0), y.nansum(1), torch.isnan(y).any(), y.max()


@case(
    "stats",
    (torch.tensor([1.0, float("nan"), 2.0, 0.5]),),
    (torch.tensor([float("nan"), 3.0, 1.0]),),
)
def sort_topk_with_nan(x):
    return x.sort(), x.topk(2), x.argmax()


@case(
    "int/bool",
    (torch.randint(0, 2**30, (4,), dtype=torch.int32),),
    (torch.randint(0, 2**30, (6,), dtype=torch.int32),),
)
def int32_overflow_wraps(x):
    return x * 4, (x + x).sum(dtype=torch.int32)


@case("int/bool", (r(4),), (r(6),))
def bool_arith_promotion(x):
    m = x > 0
    return m + m, m * 2.5, m.sum() / 2, ~m


# --- devices written as text ----------------------------------------------------------------


@case("devices", (r(3, 4),), (r(5, 4),))
def device_from_str_of_device(x):
    return torch.ones(x.shape[1], device=str(x.device)) + x


@case("devices", (r(3, 4),), (r(5, 4),))
def device_with_index(x):
    return x.to("cpu:0") * torch.ones(1, device=torch.device("cpu", 0))


@case("devices", (r(3, 4),), (r(5, 4),))
def device_type_branch(x):
    if x.device.type == "cpu":
        return x.double()
    return x
