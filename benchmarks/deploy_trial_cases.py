"""The hand-written cases of benchmarks/deploy_trial.py: small models of the patterns users
meet when they deploy (dynamic sizes, containers, state, modes, dtypes, guards, ops with
awkward outputs). Each builds a fresh, seeded model; the first input set is traced."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from deploy_trial import Spec

AOT = ("trace", "fx", "loaded", "export", "compile", "onnx", "aot")
NO_AOT = ("trace", "fx", "loaded", "export", "compile", "onnx")


def seeded(make):
    def build():
        torch.manual_seed(0)
        model = make()
        if isinstance(model, nn.Module):
            model.eval()
        return model

    return build


def training(make):
    def build():
        torch.manual_seed(0)
        return make().train()

    return build


def g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=g(seed)).to(dtype)


def ri(high, *shape, seed=0, dtype=torch.long):
    return torch.randint(0, high, shape, generator=g(seed)).to(dtype)


class Fn(nn.Module):
    """A function as a module without parameters (so every path gets a module)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def fn(f):
    return seeded(lambda: Fn(f))


def mlp(dtype=torch.float32):
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3)).to(dtype)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return self.fc(self.pool(y).flatten(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.pos = nn.Embedding(64, 16)
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.layer(self.emb(tokens) + self.pos(positions))


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.calls += 1
        self.running.mul_(0.9).add_(x.mean(0).detach() * 0.1)
        return self.lin(x) + self.running


Pair = namedtuple("Pair", ["low", "high"])


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x):
        h = torch.tanh(x)
        return Output(self.lin(h), h)


class TwoMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 4)
        self.dec = nn.Linear(4, 6)

    def forward(self, x):
        return self.dec(self.encode(x))

    def encode(self, x):
        return torch.relu(self.enc(x))


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.head = nn.Linear(8, 30, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(self.emb(tokens).mean(1))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 7, batch_first=True)
        self.out = nn.Linear(7, 2)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.out(y[:, -1]), h


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(self.conv(x), scale_factor=2, mode="bilinear", align_corners=False)
        return F.pad(y, (1, 1, 0, 0))


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x))


class ClosureConst(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.tensor([1.0, 2.0, 3.0])  # a plain attribute: not a buffer

    def forward(self, x):
        return x * self.scale


# --- the functions -------------------------------------------------------------------------


def f_inplace(x):
    y = x.clone()
    y.add_(1).mul_(2)
    y.relu_()
    return y


def f_input_mutated(x):
    x.add_(1)
    return x * 2


def f_setitem(x):
    y = x.clone()
    y[:, 0] = 0
    y[..., -1] += 5
    return y


def f_slices(x):
    return x[:, ::2] * 2, x[..., -1], x[1:, 1:-1]


def f_views(x):
    b = x.size(0)
    y = x.view(b, -1)
    z = y.reshape(-1, 2)
    return z.t().contiguous(), y.unsqueeze(1).expand(b, 3, y.size(1))


def f_alias_out(x):
    y = x * 2
    return y, y[0], x


def f_dict_in(d):
    return d["a"] * d["b"].sum(-1, keepdim=True)


def f_dict_out(x):
    return {"sum": x.sum(1), "max": x.max(1).values, "idx": x.argmax(1)}


def f_list_in(xs):
    return torch.stack([x * i for i, x in enumerate(xs)]).sum(0)


def f_nested_out(x):
    return (x + 1, [x * 2, {"n": x.neg()}])


def f_namedtuple_out(x):
    return Pair(x.clamp(max=0), x.clamp(min=0))


def f_none_out(x):
    return x.exp(), None


def f_kwargs(x, *, scale, shift):
    return x * scale + shift


def f_scalar_out(x):
    return x.sum(), x.mean()


def f_int_out(x):
    return x.size(0) * 2 + x.size(1)


def f_item(x):
    return x * x.max().item()


def f_tolist(x):
    values = x.tolist()
    return torch.tensor(values) * 2


def f_data_branch(x):
    return x * 2 if x.sum() > 0 else -x


def f_size_branch(x):
    return x.sum(1) if x.shape[0] > 3 else x.mean(1)


def f_loop(x):
    out = x[:, 0]
    for i in range(1, x.shape[1]):
        out = out + x[:, i] * i
    return out


def f_size_eq(x):
    assert x.shape[1] == 4
    return x.softmax(-1)


def f_int_arg(x, n):
    return x * n


def f_cumsum(x):
    return torch.cumsum(x, 1) - x.logcumsumexp(1)


def f_topk(x):
    values, indices = x.topk(2, dim=1)
    s, order = x.sort(dim=1, descending=True)
    return values, indices, s[:, :3], order


def f_unbind(x):
    a, b, c = x.unbind(1)
    p, q = x.split([1, 2], dim=1)
    return a + b * c, q - p


def f_where(x, mask):
    return torch.where(mask, x, torch.zeros_like(x)).masked_fill(~mask, -1.0)


def f_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def f_einsum(a, b):
    return torch.einsum("bij,bjk->bik", a, b)


def f_cat(x, y):
    return torch.cat([x, y], 0), torch.stack([x, x], -1)


def f_factory(x):
    return torch.zeros(x.shape[0], 3) + x.new_ones(x.size(0), 1) * x.sum(1, keepdim=True)


def f_arange(x):
    return x + torch.arange(x.size(-1), dtype=x.dtype)


def f_broadcast(x, y):
    return x.unsqueeze(-1) * y.unsqueeze(-2)


def f_bool_out(x):
    return x > 0, (x > 0).sum(1)


def f_int_math(x):
    return x * 3 + 1, x // 2, x % 5


def f_to_float(x):
    return x.float() / 3


def f_random(x):
    return x + torch.randn_like(x)


def f_dropout_fn(x):
    return F.dropout(x, 0.5, training=True)


def f_zero_dim(x):
    return x.sum(0) + 1, x * 2


def f_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y.float() + 1


def f_noncontig(x):
    return x.t() @ x


def f_global_const(x):
    return x + _CONST


_CONST = torch.tensor([0.5, -0.5, 1.5])


def f_complex_ops(x):
    return torch.fft.rfft(x, dim=-1).abs()


def f_nonzero(x):
    return x.nonzero()


def f_mask_select(x):
    return x[x > 0]


def f_grad_mode(x):
    with torch.no_grad():
        y = x * 2
    return y + x


def hand_specs() -> list[Spec]:
    S = Spec
    return [
        # shapes after tracing
        S(
            "mlp_dynamic_batch",
            "dynamic sizes",
            seeded(mlp),
            [(rn(4, 6),), (rn(9, 6, seed=1),), (rn(1, 6, seed=2),)],
            paths=AOT,
        ),
        S(
            "mlp_traced_at_batch_1",
            "dynamic sizes",
            seeded(mlp),
            [(rn(1, 6),), (rn(5, 6, seed=1),)],
            paths=AOT,
        ),
        S(
            "conv_dynamic_hw",
            "dynamic sizes",
            seeded(ConvNet),
            [(rn(2, 3, 8, 8),), (rn(3, 3, 12, 10, seed=1),), (rn(1, 3, 5, 5, seed=2),)],
            paths=AOT,
        ),
        S(
            "encoder_dynamic_length",
            "dynamic sizes",
            seeded(Encoder),
            [(ri(50, 2, 7),), (ri(50, 3, 12, seed=1),), (ri(50, 1, 2, seed=2),)],
        ),
        S("views_reshape", "views/in-place", fn(f_views), [(rn(3, 4, 2),), (rn(5, 4, 2, seed=1),)]),
        S("zero_size_call", "zero-size dims", seeded(mlp), [(rn(3, 6),), (rn(0, 6),)]),
        S(
            "zero_size_trace",
            "zero-size dims",
            fn(f_zero_dim),
            [(rn(0, 4),), (rn(3, 4, seed=1),), (rn(0, 4),)],
        ),
        # views and in-place
        S("inplace_chain", "views/in-place", fn(f_inplace), [(rn(3, 4),), (rn(6, 4, seed=1),)]),
        S(
            "input_mutated",
            "views/in-place",
            fn(f_input_mutated),
            [(rn(3, 4),), (rn(5, 4, seed=1),)],
            note="mutates its input",
            paths=AOT,
        ),
        S("setitem", "views/in-place", fn(f_setitem), [(rn(3, 4),), (rn(5, 4, seed=1),)]),
        S("slices", "views/in-place", fn(f_slices), [(rn(3, 6),), (rn(5, 6, seed=1),)]),
        S(
            "aliased_outputs",
            "views/in-place",
            fn(f_alias_out),
            [(rn(3, 4),), (rn(2, 4, seed=1),)],
            paths=AOT,
        ),
        S(
            "noncontiguous_math",
            "views/in-place",
            fn(f_noncontig),
            [(rn(4, 3),), (rn(7, 3, seed=1).t().contiguous().t(),)],
        ),
        # containers
        S(
            "dict_input",
            "containers/kwargs",
            fn(f_dict_in),
            [
                ({"a": rn(3, 4), "b": rn(3, 2, seed=1)},),
                ({"a": rn(5, 4, seed=2), "b": rn(5, 2, seed=3)},),
            ],
            trace_kw={"strict": False},
        ),
        S(
            "dict_output",
            "containers/kwargs",
            fn(f_dict_out),
            [(rn(3, 4),), (rn(6, 4, seed=1),)],
            trace_kw={"strict": False},
            paths=AOT,
        ),
        S(
            "list_input",
            "containers/kwargs",
            fn(f_list_in),
            [
                ([rn(3, 2), rn(3, 2, seed=1), rn(3, 2, seed=2)],),
                ([rn(5, 2, seed=3), rn(5, 2, seed=4), rn(5, 2, seed=5)],),
            ],
        ),
        S(
            "nested_output",
            "containers/kwargs",
            fn(f_nested_out),
            [(rn(2, 3),), (rn(4, 3, seed=1),)],
            trace_kw={"strict": False},
        ),
        S(
            "namedtuple_output",
            "containers/kwargs",
            fn(f_namedtuple_out),
            [(rn(2, 3),), (rn(4, 3, seed=1),)],
        ),
        S(
            "dataclass_output",
            "containers/kwargs",
            seeded(DataclassOut),
            [(rn(2, 5),), (rn(6, 5, seed=1),)],
        ),
        S(
            "none_in_output",
            "containers/kwargs",
            fn(f_none_out),
            [(rn(2, 3),), (rn(4, 3, seed=1),)],
        ),
        S(
            "keyword_inputs",
            "containers/kwargs",
            fn(f_kwargs),
            [
                {"x": rn(2, 3), "scale": rn(3, seed=1), "shift": rn(1, seed=2)},
                {"x": rn(5, 3, seed=3), "scale": rn(3, seed=4), "shift": rn(1, seed=5)},
            ],
        ),
        # state and modes
        S(
            "batchnorm_train",
            "state/modes",
            training(ConvNet),
            [(rn(4, 3, 6, 6),), (rn(3, 3, 6, 6, seed=1),), (rn(5, 3, 4, 4, seed=2),)],
            stateful=True,
            mode="train",
            paths=AOT,
        ),
        S(
            "batchnorm_eval",
            "state/modes",
            seeded(ConvNet),
            [(rn(4, 3, 6, 6),), (rn(2, 3, 7, 7, seed=1),)],
            paths=AOT,
        ),
        S(
            "counter_buffers",
            "state/modes",
            seeded(Counter),
            [(rn(3, 4),), (rn(5, 4, seed=1),), (rn(2, 4, seed=2),)],
            stateful=True,
            paths=AOT,
        ),
        S(
            "respect_mode_eval",
            "state/modes",
            seeded(ConvNet),
            [(rn(4, 3, 6, 6),), (rn(2, 3, 5, 5, seed=1),)],
            trace_kw={"respect_mode": True},
        ),
        S(
            "dropout_train",
            "random",
            training(DropoutNet),
            [(rn(4, 8),), (rn(6, 8, seed=1),)],
            random=True,
            mode="train",
        ),
        S("dropout_eval", "state/modes", seeded(DropoutNet), [(rn(4, 8),), (rn(6, 8, seed=1),)]),
        S(
            "dropout_functional_train",
            "random",
            fn(f_dropout_fn),
            [(rn(4, 8),), (rn(6, 8, seed=1),)],
            random=True,
        ),
        S("randn_like", "random", fn(f_random), [(rn(4, 8),), (rn(6, 8, seed=1),)], random=True),
        S("grad_mode_block", "state/modes", fn(f_grad_mode), [(rn(3, 2),), (rn(4, 2, seed=1),)]),
        # dtypes
        S(
            "float16_mlp",
            "dtypes",
            seeded(lambda: mlp(torch.float16)),
            [(rn(4, 6, dtype=torch.float16),), (rn(7, 6, seed=1, dtype=torch.float16),)],
        ),
        S(
            "bfloat16_mlp",
            "dtypes",
            seeded(lambda: mlp(torch.bfloat16)),
            [(rn(4, 6, dtype=torch.bfloat16),), (rn(7, 6, seed=1, dtype=torch.bfloat16),)],
        ),
        S(
            "float64_mlp",
            "dtypes",
            seeded(lambda: mlp(torch.float64)),
            [(rn(4, 6, dtype=torch.float64),), (rn(7, 6, seed=1, dtype=torch.float64),)],
        ),
        S(
            "float32_model_float64_input",
            "dtypes",
            seeded(mlp),
            [(rn(4, 6),), (rn(3, 6, seed=1, dtype=torch.float64),)],
            note="a float64 call of a float32 trace",
        ),
        S("int64_math", "dtypes", fn(f_int_math), [(ri(20, 3, 4),), (ri(20, 5, 4, seed=1),)]),
        S(
            "int32_to_float",
            "dtypes",
            fn(f_to_float),
            [(ri(20, 3, 4, dtype=torch.int32),), (ri(20, 6, 4, seed=1, dtype=torch.int32),)],
        ),
        S("bool_outputs", "dtypes", fn(f_bool_out), [(rn(3, 4),), (rn(5, 4, seed=1),)]),
        S(
            "autocast_bf16",
            "dtypes",
            fn(f_autocast),
            [(rn(3, 4), rn(4, 5, seed=1)), (rn(6, 4, seed=2), rn(4, 5, seed=3))],
        ),
        S(
            "tied_embedding_int_input",
            "dtypes",
            seeded(Tied),
            [(ri(30, 2, 5),), (ri(30, 4, 3, seed=1),)],
            paths=AOT,
        ),
        # scalars
        S("scalar_outputs", "scalars", fn(f_scalar_out), [(rn(3, 4),), (rn(5, 2, seed=1),)]),
        S("python_int_output", "scalars", fn(f_int_out), [(rn(3, 4),), (rn(5, 2, seed=1),)]),
        S("item_as_constant", "guards", fn(f_item), [(rn(3, 4),), (rn(3, 4, seed=1),)]),
        S("tolist_roundtrip", "guards", fn(f_tolist), [(rn(3),), (rn(3, seed=1),)]),
        S(
            "int_argument",
            "scalars",
            fn(f_int_arg),
            [(rn(3), 3), (rn(4, seed=1), 3), (rn(4, seed=1), 5)],
        ),
        # guards that refuse
        S(
            "data_dependent_branch",
            "guards",
            fn(f_data_branch),
            [(rn(3, 4).abs(),), (-rn(5, 4, seed=1).abs(),), (rn(2, 4, seed=2).abs(),)],
        ),
        S(
            "size_branch",
            "guards",
            fn(f_size_branch),
            [(rn(5, 3),), (rn(7, 3, seed=1),), (rn(2, 3, seed=2),)],
            paths=AOT,
        ),
        S(
            "loop_over_size",
            "guards",
            fn(f_loop),
            [(rn(3, 4),), (rn(5, 4, seed=1),), (rn(3, 6, seed=2),)],
        ),
        S(
            "assert_size",
            "guards",
            fn(f_size_eq),
            [(rn(3, 4),), (rn(5, 4, seed=1),), (rn(3, 5, seed=2),)],
        ),
        # ops with awkward forms
        S("cumsum_logcumsumexp", "ops", fn(f_cumsum), [(rn(3, 5),), (rn(4, 7, seed=1),)]),
        S("topk_sort", "ops", fn(f_topk), [(rn(3, 5),), (rn(4, 7, seed=1),)]),
        S("unbind_split", "ops", fn(f_unbind), [(rn(3, 3),), (rn(6, 3, seed=1),)]),
        S(
            "where_bool_mask",
            "ops",
            fn(f_where),
            [(rn(3, 4), rn(3, 4, seed=1) > 0), (rn(5, 4, seed=2), rn(5, 4, seed=3) > 0)],
        ),
        S(
            "sdpa_causal",
            "ops",
            fn(f_sdpa),
            [
                (rn(2, 2, 5, 8), rn(2, 2, 5, 8, seed=1), rn(2, 2, 5, 8, seed=2)),
                (rn(1, 2, 9, 8, seed=3), rn(1, 2, 9, 8, seed=4), rn(1, 2, 9, 8, seed=5)),
            ],
        ),
        S(
            "einsum_bmm",
            "ops",
            fn(f_einsum),
            [(rn(2, 3, 4), rn(2, 4, 5, seed=1)), (rn(3, 6, 4, seed=2), rn(3, 4, 2, seed=3))],
        ),
        S(
            "cat_stack",
            "ops",
            fn(f_cat),
            [(rn(2, 3), rn(4, 3, seed=1)), (rn(5, 3, seed=2), rn(1, 3, seed=3))],
        ),
        S("factories_from_sizes", "ops", fn(f_factory), [(rn(3, 4),), (rn(6, 4, seed=1),)]),
        S("arange_positions", "ops", fn(f_arange), [(rn(2, 5),), (rn(3, 8, seed=1),)]),
        S(
            "broadcast_outer",
            "ops",
            fn(f_broadcast),
            [(rn(2, 3), rn(2, 4, seed=1)), (rn(5, 2, seed=2), rn(5, 6, seed=3))],
        ),
        S("lstm", "ops", seeded(LSTMNet), [(rn(2, 6, 5),), (rn(3, 4, 5, seed=1),)]),
        S(
            "interpolate_pad",
            "ops",
            seeded(Upsample),
            [(rn(1, 2, 4, 4),), (rn(2, 2, 6, 5, seed=1),)],
        ),
        S("fft_abs", "ops", fn(f_complex_ops), [(rn(2, 8),), (rn(3, 16, seed=1),)]),
        S("nonzero_data_size", "ops", fn(f_nonzero), [(rn(3, 4),), (rn(3, 4, seed=1),)]),
        S("boolean_mask_select", "ops", fn(f_mask_select), [(rn(3, 4),), (rn(5, 4, seed=1),)]),
        S(
            "closure_tensor_attribute",
            "ops",
            seeded(ClosureConst),
            [(rn(2, 3),), (rn(4, 3, seed=1),)],
        ),
        S("global_tensor_constant", "ops", fn(f_global_const), [(rn(2, 3),), (rn(4, 3, seed=1),)]),
        # several methods
        S(
            "trace_module_second_method",
            "methods",
            seeded(TwoMethods),
            [(rn(3, 6),), (rn(5, 6, seed=1),)],
            methods={"forward": (rn(3, 6),), "encode": (rn(3, 6),)},
            method="encode",
        ),
        S(
            "trace_module_forward",
            "methods",
            seeded(TwoMethods),
            [(rn(3, 6),), (rn(5, 6, seed=1),)],
            methods={"forward": (rn(3, 6),), "encode": (rn(2, 6),)},
        ),
    ]
