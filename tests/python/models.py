"""The conformance zoo: small models that tracebridge must trace, run, save and reload.

Each factory in ``CASES`` builds a fresh `Case` with fixed seeds, so two calls give two models
with identical parameters and identical inputs. The zoo needs only torch; the conformance tests
(`test_conformance.py`) and the benchmarks (`benchmarks/bench_python.py`) both use it.

Example:
    >>> from models import CASES
    >>> case = CASES["mlp"]()
    >>> case.model(*case.example_inputs).shape
    torch.Size([4, 4])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Inputs = tuple[Any, ...]


@dataclass
class Case:
    """One model of the zoo, with the inputs to trace it on and to check it with.

    Attributes:
        name: the registry key.
        model: the module, already in the mode (train/eval) that the case exercises.
        example_inputs: the inputs to trace ``forward`` with.
        other_inputs: more inputs for ``forward``: another batch size and, where the model has
            one, another sequence length (or spatial size).
        atol, rtol: tolerance for comparing against eager.
        check_trace_ok: whether tracing with ``check_trace=True`` is expected to pass.
            tracebridge's check replays the RNG, so it holds for dropout in train mode too,
            where torch.jit.trace's own check fails.
        trace_kwargs: extra keyword arguments for ``tracebridge.trace`` (``strict=False`` for
            dict or list outputs).
        stochastic: the output depends on the RNG; reseed with ``seed`` before every call that
            is compared.
        methods: for ``trace_module``: method name -> list of input tuples, the first one being
            the example to trace with. Empty for plain ``trace`` cases.
        make_inputs: builds ``forward`` inputs for a given batch size (used by the benchmarks).
    """

    name: str
    model: nn.Module
    example_inputs: Inputs
    other_inputs: list[Inputs]
    atol: float = 1e-5
    rtol: float = 1e-5
    check_trace_ok: bool = True
    trace_kwargs: dict[str, Any] = field(default_factory=dict)
    stochastic: bool = False
    seed: int = 0
    methods: dict[str, list[Inputs]] = field(default_factory=dict)
    make_inputs: Callable[[int], Inputs] | None = None

    @property
    def all_inputs(self) -> list[Inputs]:
        """The example inputs followed by every other input."""
        return [self.example_inputs, *self.other_inputs]

    def trace(self, **overrides: Any) -> Any:
        """Trace the case the way a user would: ``trace``, or ``trace_module`` for several
        methods, with the case's own options (``overrides`` win)."""
        import tracebridge  # the benchmarks import this registry without tracing

        kwargs = {"check_trace": self.check_trace_ok, **self.trace_kwargs, **overrides}
        if self.methods:
            examples = {method: calls[0] for method, calls in self.methods.items()}
            return tracebridge.trace_module(self.model, examples, **kwargs)
        return tracebridge.trace(self.model, self.example_inputs, **kwargs)


CASES: dict[str, Callable[[], Case]] = {}


def register(fn: Callable[[], Case]) -> Callable[[], Case]:
    """Add a case factory to ``CASES`` under its function name."""
    CASES[fn.__name__] = fn
    return fn


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def _tokens(batch: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=_gen(seed))


# --------------------------------------------------------------------------- MLP


def conv_bn_relus(blocks: int) -> nn.Module:
    """``blocks`` convolutions, each with a norm (folded into it) and a ReLU, then a pooled
    linear head, in evaluation: twelve blocks are enough ops (runtime/lean.py, MIN_OPS) for
    the loaded code to run in inference mode, where it checks the state's types too (the
    state-check and freeze tests share it)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)]
    return nn.Sequential(*layers).eval()


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        return self.fc3(x)


@register
def mlp() -> Case:
    torch.manual_seed(0)
    model = MLP().eval()
    return Case(
        name="mlp",
        model=model,
        example_inputs=(_randn(4, 16, seed=1),),
        other_inputs=[(_randn(1, 16, seed=2),), (_randn(7, 16, seed=3),)],
        make_inputs=lambda b: (_randn(b, 16, seed=4),),
    )


# --------------------------------------------------------------------------- CNN


class ConvBNLinear(nn.Module):
    """The small conv + batch-norm + linear module the file tests save and then damage."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc(y.view(y.shape[0], -1))


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.25)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.drop(F.relu(self.bn2(self.conv2(x))))
        x = torch.flatten(self.gap(x), 1)
        return self.fc(x)


def _cnn(train: bool) -> Case:
    torch.manual_seed(10)
    model = SmallCNN()
    # Non-trivial running statistics, so that eval mode differs from train mode.
    with torch.no_grad():
        model.train()
        for i in range(3):
            model(_randn(4, 3, 16, 16, seed=100 + i) * 2 + 0.5)
    model.train(train)
    return Case(
        name="cnn_train" if train else "cnn_eval",
        model=model,
        example_inputs=(_randn(2, 3, 16, 16, seed=11),),
        other_inputs=[(_randn(5, 3, 16, 16, seed=12),), (_randn(3, 3, 20, 20, seed=13),)],
        stochastic=train,
        seed=1234,
        make_inputs=lambda b: (_randn(b, 3, 16, 16, seed=14),),
    )


@register
def cnn_eval() -> Case:
    return _cnn(train=False)


@register
def cnn_train() -> Case:
    return _cnn(train=True)


# --------------------------------------------------------------------------- ResNet-style


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class SmallResNet(nn.Module):
    """ResNet-18 in shape (stem, four stages of two BasicBlocks, pooling, fc), small channels."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64), num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers = []
        c_in = widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(c_in, w, stride), BasicBlock(w, w, 1)))
            c_in = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


@register
def resnet() -> Case:
    torch.manual_seed(20)
    model = SmallResNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    model.eval()
    return Case(
        name="resnet",
        model=model,
        example_inputs=(_randn(2, 3, 32, 32, seed=21),),
        other_inputs=[(_randn(1, 3, 32, 32, seed=22),), (_randn(4, 3, 24, 24, seed=23),)],
        atol=1e-4,
        make_inputs=lambda b: (_randn(b, 3, 32, 32, seed=24),),
    )


# --------------------------------------------------------------------------- Transformer


class EncoderClassifier(nn.Module):
    def __init__(self, d_model: int = 32, nhead: int = 4, layers: int = 2) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward=64, dropout=0.1, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


@register
def transformer() -> Case:
    torch.manual_seed(30)
    model = EncoderClassifier().eval()
    return Case(
        name="transformer",
        model=model,
        example_inputs=(_randn(2, 10, 32, seed=31),),
        other_inputs=[(_randn(1, 10, 32, seed=32),), (_randn(3, 7, 32, seed=33),)],
        atol=1e-4,
        make_inputs=lambda b: (_randn(b, 16, 32, seed=34),),
    )


# --------------------------------------------------------------------------- attention, GPT


class CausalSelfAttention(nn.Module):
    """Explicit masked softmax; the mask is built from ``x.size(1)`` on every call."""

    def __init__(self, d_model: int = 32, n_head: int = 4, use_sdpa: bool = False) -> None:
        super().__init__()
        self.n_head = n_head
        self.use_sdpa = use_sdpa
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        hs = c // self.n_head
        q = self.q(x).view(b, t, self.n_head, hs).transpose(1, 2)
        k = self.k(x).view(b, t, self.n_head, hs).transpose(1, 2)
        v = self.v(x).view(b, t, self.n_head, hs).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.triu(
                torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device), diagonal=1
            )
            att = att.masked_fill(mask, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


@register
def causal_attention() -> Case:
    torch.manual_seed(40)
    model = CausalSelfAttention().eval()
    return Case(
        name="causal_attention",
        model=model,
        example_inputs=(_randn(2, 8, 32, seed=41),),
        other_inputs=[(_randn(1, 8, 32, seed=42),), (_randn(3, 5, 32, seed=43),)],
        make_inputs=lambda b: (_randn(b, 16, 32, seed=44),),
    )


class GPTBlock(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, use_sdpa=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 50, block: int = 16, d_model: int = 32, n_layer: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(block, d_model)
        self.blocks = nn.ModuleList(GPTBlock(d_model) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


@register
def tiny_gpt() -> Case:
    torch.manual_seed(50)
    model = TinyGPT().eval()
    return Case(
        name="tiny_gpt",
        model=model,
        example_inputs=(_tokens(2, 8, 50, seed=51),),
        other_inputs=[(_tokens(1, 8, 50, seed=52),), (_tokens(3, 12, 50, seed=53),)],
        atol=1e-4,
        make_inputs=lambda b: (_tokens(b, 16, 50, seed=54),),
    )


# --------------------------------------------------------------------------- RNNs


class RNNModel(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, state = self.rnn(x)
        # LSTM state is (h, c); GRU state is h.
        h = state[0] if isinstance(state, tuple) else state
        return self.head(out[:, -1]), h


def _rnn(cell: type[nn.Module], name: str, seed: int) -> Case:
    torch.manual_seed(seed)
    model = RNNModel(cell).eval()
    return Case(
        name=name,
        model=model,
        example_inputs=(_randn(2, 6, 8, seed=seed + 1),),
        other_inputs=[(_randn(1, 6, 8, seed=seed + 2),), (_randn(3, 4, 8, seed=seed + 3),)],
        make_inputs=lambda b: (_randn(b, 16, 8, seed=seed + 4),),
    )


@register
def lstm() -> Case:
    return _rnn(nn.LSTM, "lstm", 60)


@register
def gru() -> Case:
    return _rnn(nn.GRU, "gru", 70)


# --------------------------------------------------------------------------- indexing


class EmbedSlice(nn.Module):
    """Embedding, index assignment into a clone, and slices from both ends."""

    def __init__(self, vocab: int = 20, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.cls = nn.Parameter(torch.randn(dim))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.emb(tokens)
        out = e.clone()
        out[:, 0] = self.cls
        out[:, 1:, 0] = 0.0
        tail = out[..., 1:]
        return tail * 2 + e[:, -1:, :-1]


@register
def embed_slice() -> Case:
    torch.manual_seed(80)
    return Case(
        name="embed_slice",
        model=EmbedSlice().eval(),
        example_inputs=(_tokens(2, 5, 20, seed=81),),
        other_inputs=[(_tokens(1, 5, 20, seed=82),), (_tokens(4, 9, 20, seed=83),)],
        make_inputs=lambda b: (_tokens(b, 16, 20, seed=84),),
    )


# --------------------------------------------------------------------------- containers


class DictOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 12)
        self.cls = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.tanh(self.body(x))
        logits = self.cls(features)
        return {"logits": logits, "features": features, "probs": logits.softmax(-1)}


@register
def dict_output() -> Case:
    torch.manual_seed(90)
    return Case(
        name="dict_output",
        model=DictOutput().eval(),
        example_inputs=(_randn(3, 6, seed=91),),
        other_inputs=[(_randn(1, 6, seed=92),), (_randn(8, 6, seed=93),)],
        trace_kwargs={"strict": False},
        make_inputs=lambda b: (_randn(b, 6, seed=94),),
    )


class NestedTupleOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 4)
        self.b = nn.Linear(6, 5)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]:
        a = self.a(x)
        b = self.b(y)
        return a, (b, (a.sum(-1), b.max(dim=-1).values))


@register
def nested_tuple() -> Case:
    torch.manual_seed(100)
    return Case(
        name="nested_tuple",
        model=NestedTupleOutput().eval(),
        example_inputs=(_randn(3, 6, seed=101), _randn(3, 6, seed=102)),
        other_inputs=[(_randn(1, 6, seed=103), _randn(1, 6, seed=104))],
        make_inputs=lambda b: (_randn(b, 6, seed=105), _randn(b, 6, seed=106)),
    )


# --------------------------------------------------------------------------- trace_module


class TwoMethods(nn.Module):
    """The ``torch.jit.trace_module`` example of the PyTorch docs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)

    def weighted_kernel_sum(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * self.conv.weight


@register
def two_methods() -> Case:
    torch.manual_seed(110)
    fwd = [(_randn(1, 1, 3, 3, seed=111),), (_randn(2, 1, 5, 5, seed=112),)]
    wks = [(_randn(1, 1, 3, 3, seed=113),), (_randn(1, 1, 3, 3, seed=114),)]
    return Case(
        name="two_methods",
        model=TwoMethods().eval(),
        example_inputs=fwd[0],
        other_inputs=fwd[1:],
        methods={"forward": fwd, "weighted_kernel_sum": wks},
    )


# --------------------------------------------------------------------------- sizes


class ShapeOps(nn.Module):
    """``x.view(x.size(0), -1)``, ``x.shape[1]`` and ``len(x)`` used as values."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(x)
        c = x.shape[1]
        flat = x.view(x.size(0), -1)
        y = self.fc(flat) / c
        return y + n * x.mean(dim=(1, 2, 3)).unsqueeze(1)


@register
def shape_ops() -> Case:
    torch.manual_seed(120)
    return Case(
        name="shape_ops",
        model=ShapeOps().eval(),
        example_inputs=(_randn(2, 4, 3, 3, seed=121),),
        other_inputs=[(_randn(1, 4, 3, 3, seed=122),), (_randn(6, 4, 3, 3, seed=123),)],
        make_inputs=lambda b: (_randn(b, 4, 3, 3, seed=124),),
    )


# --------------------------------------------------------------------------- nn.MultiheadAttention


class MHA(nn.Module):
    def __init__(self, d_model: int = 32, nhead: int = 4) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(x, x, x)
        return out, weights


@register
def mha() -> Case:
    torch.manual_seed(130)
    return Case(
        name="mha",
        model=MHA().eval(),
        example_inputs=(_randn(2, 6, 32, seed=131),),
        other_inputs=[(_randn(1, 6, 32, seed=132),), (_randn(3, 9, 32, seed=133),)],
        make_inputs=lambda b: (_randn(b, 16, 32, seed=134),),
    )
