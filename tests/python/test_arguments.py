"""Literal arguments written the way torch parses fastest (runtime/arguments.py): every
table entry agrees with torch's own schema, every rewritten call dispatches to the same
overload with the same bits, crafted arguments that must stay as they are stay, and
loaded models give the interpreter's result bit for bit."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import tracebridge
from tracebridge.ir import Node, Ref
from tracebridge.runtime import arguments, support

from .graph_helpers import loaded, no_grad_code, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


# --- the table against torch's schemas -----------------------------------------------------

# op -> the overload of aten::op that the table describes
_OVERLOADS = {"mean": "dim", "sum": "dim_IntList", "softmax": "int", "log_softmax": "int"}
_OVERLOADS["flatten"] = "using_ints"


def _schema(op: str):
    overload = _OVERLOADS.get(op, "")
    for schema in torch._C._jit_get_schemas_for_operator(f"aten::{op}"):
        if schema.overload_name == overload:
            return schema
    raise AssertionError(f"no aten::{op}.{overload}")


def _shortest(value):
    """A schema default as the table writes it: [1, 1] as 1."""
    if isinstance(value, list) and value and len(set(value)) == 1:
        return value[0]
    return value


@pytest.mark.parametrize("op", sorted(arguments.SIGNATURES))
def test_each_signature_is_torchs_own(op):
    params = arguments.SIGNATURES[op]
    schema = [a for a in _schema(op).arguments if not a.is_out]
    assert len(params) == len(schema), op
    for param, arg in zip(params, schema):
        assert param.name == ("input" if arg.name == "self" else arg.name), (op, param)
        assert param.keyword_only == arg.kwarg_only, (op, param)
        assert param.size == arg.N, (op, param, arg.type)  # int[N]: N, else None
        if param.ints or param.size:
            assert "List[int]" in str(arg.type), (op, param, arg.type)
        if param.tensors:
            assert "List[Tensor]" in str(arg.type), (op, param, arg.type)
        if param.has_default:
            assert arg.has_default_value(), (op, param)
            assert arguments._same_literal(param.default, _shortest(arg.default_value)) or (
                param.default == arg.default_value
            ), (op, param, arg.default_value)
        elif arg.has_default_value():
            # only max/avg pool's stride, whose default [] means "the kernel size"
            assert param.name == "stride" and arg.default_value == [], (op, param)
    # and every parameter name is one the Python binding takes
    assert {p.name for p in params} <= _binding_names(op)


def _binding_names(op: str) -> set[str]:
    fn = support.default_callable(op)
    names = set()
    for line in (fn.__doc__ or "").splitlines()[:4]:
        names |= set(re.findall(r"(\w+)(?:=|,|\))", line.split("->")[0]))
    for schema in torch._C._jit_get_schemas_for_operator(f"aten::{op}"):
        names |= {"input" if a.name == "self" else a.name for a in schema.arguments}
    return names


# --- each rewritten call: the same overload, the same bits ---------------------------------

x4 = torch.randn(2, 4, 6, 6)
x3 = torch.randn(2, 4, 9)
x5 = torch.randn(1, 2, 4, 4, 4)
w2 = torch.randn(4, 4, 3, 3)
q = torch.randn(1, 2, 5, 8)
mask = torch.randn(1, 1, 5, 5)
TENSORS = {
    "x4": x4,
    "x3": x3,
    "x5": x5,
    "w1": torch.randn(4, 4, 3),
    "w2": w2,
    "w3": torch.randn(2, 1, 3, 3, 3),
    "wg": torch.randn(4, 1, 3, 3),
    "b": torch.randn(4),
    "lin": torch.randn(3, 9),
    "q": q,
    "mask": mask,
    "ln": torch.randn(9),
    "emb": torch.randn(7, 3),
    "ids": torch.tensor([[0, 3, 6]]),
}
_IDS = {name: i for i, name in enumerate(TENSORS)}


def _r(name: str) -> Ref:
    return Ref(_IDS[name])


# (op, args, kwargs) as the tracer records them, each with what the rewrite must give
CALLS = [
    ("conv2d", ["x4", "w2", None, (1, 1), (0, 0), (1, 1), 1], {}, ["x4", "w2"], {}),
    ("conv2d", ["x4", "w2", "b", (2, 2), (1, 1), (1, 1), 1], {}, ["x4", "w2", "b", 2, 1], {}),
    (
        "conv2d",
        ["x4", "w2", None, (1, 2), (1, 0), (1, 1), 1],
        {},
        ["x4", "w2", None, (1, 2), (1, 0)],
        {},
    ),
    (
        "conv2d",
        ["x4", "wg", None, (1, 1), (1, 1), (1, 1), 4],
        {},
        ["x4", "wg", None, 1, 1, 1, 4],
        {},
    ),
    ("conv2d", ["x4", "w2"], {"padding": "same"}, ["x4", "w2", None, 1, "same"], {}),
    (
        "conv2d",
        ["x4", "w2", None, (1, 1), "valid", (1, 1), 1],
        {},
        ["x4", "w2", None, 1, "valid"],
        {},
    ),
    ("conv1d", ["x3", "w1", "b", (2,), (1,), (1,), 1], {}, ["x3", "w1", "b", 2, 1], {}),
    (
        "conv3d",
        ["x5", "w3", None, (1, 1, 1), (1, 1, 1), (1, 1, 1), 2],
        {},
        ["x5", "w3", None, 1, 1, 1, 2],
        {},
    ),
    ("linear", ["x3", "lin", None], {}, ["x3", "lin"], {}),
    ("layer_norm", ["x3", [9], "ln", None, 1e-05, True], {}, ["x3", (9,), "ln"], {}),
    ("layer_norm", ["x3", (9,), None, "ln", 1e-06, True], {}, ["x3", (9,), None, "ln", 1e-06], {}),
    ("max_pool2d", ["x4", 3, 2, 1, 1, False], {}, ["x4", 3, 2, 1], {}),
    ("max_pool2d", ["x4", [3, 3], [2, 2], [0, 0], [1, 1], True], {}, ["x4", 3, 2, 0, 1, True], {}),
    ("max_pool2d", ["x4", 2], {}, ["x4", 2], {}),
    ("max_pool1d", ["x3", 3, 2, 0, 1, False], {}, ["x3", 3, 2], {}),
    ("avg_pool2d", ["x4", 2, 2, 0, False, True, None], {}, ["x4", 2, 2], {}),
    (
        "avg_pool2d",
        ["x4", [3, 3], [1, 1], [1, 1], True, False, None],
        {},
        ["x4", 3, 1, 1, True, False],
        {},
    ),
    ("avg_pool1d", ["x3", [3], [2], [0], False, True], {}, ["x3", 3, 2], {}),
    ("avg_pool3d", ["x5", 2, 2, 0, False, True, None], {}, ["x5", 2, 2], {}),
    ("adaptive_avg_pool2d", ["x4", [1, 1]], {}, ["x4", 1], {}),
    ("adaptive_avg_pool2d", ["x4", [2, 3]], {}, ["x4", [2, 3]], {}),
    ("adaptive_avg_pool1d", ["x3", (4,)], {}, ["x3", 4], {}),
    ("adaptive_avg_pool3d", ["x5", [2, 2, 2]], {}, ["x5", 2], {}),
    ("mean", ["x4", -1], {"keepdim": True}, ["x4", -1, True], {}),
    ("mean", ["x4", [2, 3]], {"keepdim": False}, ["x4", (2, 3)], {}),
    ("mean", ["x4", (-1,), False], {"dtype": torch.float64}, ["x4", -1], {"dtype": torch.float64}),
    ("mean", ["x4"], {}, None, None),
    ("sum", ["x4", [1]], {"keepdim": False}, ["x4", 1], {}),
    ("softmax", ["q"], {"dim": -1}, ["q", -1], {}),
    ("softmax", ["q", -1, None], {}, ["q", -1], {}),
    ("log_softmax", ["q"], {"dim": 1, "dtype": torch.float64}, ["q", 1, torch.float64], {}),
    ("gelu", ["q"], {"approximate": "none"}, ["q"], {}),
    ("gelu", ["q"], {"approximate": "tanh"}, ["q"], {"approximate": "tanh"}),
    (
        "scaled_dot_product_attention",
        ["q", "q", "q"],
        {"attn_mask": "mask", "dropout_p": 0.0, "scale": 0.25, "is_causal": False},
        ["q", "q", "q", "mask"],
        {"scale": 0.25},
    ),
    (
        "scaled_dot_product_attention",
        ["q", "q", "q", None, 0.0, True],
        {},
        ["q", "q", "q", None, 0.0, True],
        {},
    ),
    ("scaled_dot_product_attention", ["q", "q", "q"], {"dropout_p": 0.0}, ["q", "q", "q"], {}),
    ("flatten", ["q", 2, -1], {}, ["q", 2], {}),
    ("elu", ["q", 1.0], {}, ["q"], {}),
    ("elu", ["q", 1], {}, ["q", 1], {}),
    ("elu", ["q", 0.5, 1.0, 1.0], {}, ["q", 0.5], {}),
    ("flatten", ["q", 0, 1], {}, None, None),
    ("cat", [["x4", "x4"], 1], {}, [("x4", "x4"), 1], {}),
    ("cat", [["x4", "x4"]], {"dim": 0}, [("x4", "x4")], {}),
    ("embedding", ["emb", "ids", -1, False, False], {}, ["emb", "ids"], {}),
    ("embedding", ["emb", "ids", 2, False, False], {}, ["emb", "ids", 2], {}),
]


def _refs(value):
    if isinstance(value, str) and value in TENSORS:
        return _r(value)
    if isinstance(value, list):
        return [_refs(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_refs(v) for v in value)
    return value


def _values(value):
    if isinstance(value, Ref):
        return list(TENSORS.values())[value.id]
    if isinstance(value, list):
        return [_values(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_values(v) for v in value)
    return value


class _Overloads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def _run(op, args, kwargs):
    fn = support.default_callable(op)
    with _Overloads() as mode:
        out = fn(*_values(args), **{k: _values(v) for k, v in kwargs.items()})
    return out, mode.seen


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c[0])
def test_each_shorter_call_is_the_same_call(call):
    op, args, kwargs, want_args, want_kwargs = call
    node = Node(op, _refs(args), {k: _refs(v) for k, v in kwargs.items()})
    found = arguments.shorter(node)
    new_args, new_kwargs = found if found else (node.args, node.kwargs)
    if want_args is None:  # nothing shorter exists: written as recorded
        assert new_args == node.args and new_kwargs == node.kwargs
    else:
        assert (new_args, new_kwargs) == (_refs(want_args), _refs(want_kwargs))
    expected, overloads = _run(op, node.args, node.kwargs)
    got, overloads_now = _run(op, new_args, new_kwargs)
    assert overloads_now == overloads
    assert same_bits(got, expected)


# --- crafted arguments that must stay as they are ------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, expected",
    [
        # unequal entries stay a sequence
        ([(2, 1)], {}, [(2, 1)]),
        # a length other than the schema's N is not collapsed (nor dropped)
        ([(1,)], {}, [(1,)]),
        ([(1, 1, 1)], {}, [(1, 1, 1)]),
        # bools are not ints: True is not 1, [True, True] not one stride
        ([(True, True)], {}, [(True, True)]),
        ([1, 0, 1, True], {}, [1, 0, 1, True]),
        # a value of the graph stays whatever it holds
        ([Ref(7)], {}, [Ref(7)]),
        ([(Ref(7), Ref(7))], {}, [(Ref(7), Ref(7))]),
        # floats are not ints
        ([(1.0, 1.0)], {}, [(1.0, 1.0)]),
    ],
)
def test_crafted_strides_stay_what_they_mean(args, kwargs, expected):
    node = Node("conv2d", [Ref(0), Ref(1), None, *args], kwargs)
    found = arguments.shorter(node)
    got = found[0][3:] if found else node.args[3:]
    assert got == expected


def test_calls_that_do_not_bind_are_written_as_recorded():
    x, w = Ref(0), Ref(1)
    assert arguments.shorter(Node("conv2d", [x], {"self": w})) is None  # an alias
    assert arguments.shorter(Node("conv2d", [x, w], {"input": x})) is None  # twice
    assert arguments.shorter(Node("conv2d", [x, w, None, 1, 1, 1, 1, 1], {})) is None
    assert arguments.shorter(Node("linear", [x], {"bogus": 1})) is None
    assert arguments.shorter(Node("linear", [], {"weight": w})) is None  # input missing
    assert arguments.shorter(Node("relu", [x], {})) is None  # no signature
    # a keyword after a required position that is missing: torch's own error stays
    assert arguments.shorter(Node("max_pool2d", [x], {"padding": 1})) is None


def test_defaults_are_dropped_only_when_they_are_the_same_literal():
    q = Ref(0)

    def short(**kwargs):
        return arguments.shorter(Node("scaled_dot_product_attention", [q, q, q], kwargs))

    assert short(dropout_p=0.0) == ([q, q, q], {})
    assert short(dropout_p=-0.0) == ([q, q, q, None, -0.0], {})  # another sign of zero
    assert short(dropout_p=float("nan")) is not None  # kept, never a default
    assert short(dropout_p=float("nan"))[0][4] != short(dropout_p=float("nan"))[0][4]
    assert short(is_causal=0) == ([q, q, q, None, 0.0, 0], {})  # 0 is not False
    assert short(scale=None, enable_gqa=False) == ([q, q, q], {})


# --- loaded models: the interpreter's bits -------------------------------------------------


class Vision(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.wide = torch.nn.Conv2d(8, 8, (3, 1), stride=(1, 2), padding=(1, 0))
        self.depth = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.same = torch.nn.Conv2d(8, 8, 3, padding="same")
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = self.stem(x)
        x = F.max_pool2d(x, 3, 2, 1) + 0
        x = self.depth(self.same(x))
        y = self.wide(x)
        y = F.avg_pool2d(y, [2, 2], [1, 1])
        z = torch.cat([x.mean([2, 3], keepdim=True), F.adaptive_avg_pool2d(y, [1, 1])], dim=1)
        z = self.norm(z.flatten(1)[:, :8])
        return F.gelu(self.head(z), approximate="none").softmax(dim=-1), F.gelu(
            z, approximate="tanh"
        )


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 8)
        self.qkv = torch.nn.Linear(8, 24, bias=False)

    def forward(self, ids, m):
        h = self.embed(ids)
        q, k, v = self.qkv(h).view(1, -1, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=0.0, scale=0.5)
        return torch.log_softmax(a.sum(-1, keepdim=False), dim=-1)


@pytest.mark.parametrize("grad", [False, True])
def test_loaded_models_give_the_interpreters_bits(grad, tmp_path):
    torch.manual_seed(0)
    cases = [
        (Vision().eval(), (torch.randn(1, 3, 16, 16),), (torch.randn(2, 3, 20, 24),)),
        (
            Attention().eval(),
            (torch.tensor([[1, 2, 3, 4]]), torch.randn(1, 1, 4, 4)),
            (torch.tensor([[5, 6, 7, 8]]), torch.randn(1, 1, 4, 4)),
        ),
    ]
    for index, (model, example, other) in enumerate(cases):
        traced = tracebridge.trace(model, example)
        (tmp_path / str(index)).mkdir()
        fast = loaded(traced, tmp_path / str(index))
        slow = tracebridge.load(tmp_path / str(index) / "m.tb", runtime="interpreter")
        with torch.set_grad_enabled(grad):
            for inputs in (example, other):
                for a, b, c in zip(fast(*inputs), slow(*inputs), model(*inputs)):
                    assert same_bits(a.detach(), b.detach()) and same_bits(a.detach(), c.detach())


def test_the_code_shows_the_shorter_calls(tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(Vision().eval(), torch.randn(1, 3, 16, 16))
    code = no_grad_code(loaded(traced, tmp_path))
    # A weight that is not 1x1 or depthwise may come in its input's layout (runtime/layouts.py)
    w = (
        r"(?:c\d+\(\w+, v\d+\) if _plain and _type\(\w+\) is _Tensor"
        r" and \(not \w+\.is_contiguous\(\)\) else )?v\d+"
    )
    assert re.search(rf"op_conv2d_\d+\(in0, {w}, v\d+, 2, 1\)", code)  # stem
    assert re.search(rf"op_conv2d_\d+\(v\d+, {w}, v\d+, \(1, 2\), \(1, 0\)\)", code)  # unequal
    assert re.search(r"op_conv2d_\d+\(v\d+, v\d+, None, 1, 1, 1, 8\)", code)  # depthwise
    assert re.search(rf"op_conv2d_\d+\(v\d+, {w}, v\d+, 1, 'same'\)", code)
    assert re.search(r"op_max_pool2d_\d+\(v\d+, 3, 2, 1\)", code)
    assert re.search(r"op_adaptive_avg_pool2d_\d+\(v\d+, 1\)", code)
    assert re.search(r"op_mean_\d+\(v\d+, \(2, 3\), True\)", code)
    assert re.search(r"op_layer_norm_\d+\(v\d+, \(8,\), v\d+, v\d+\)", code)
    assert re.search(r"op_gelu_\d+\(v\d+\)", code)
    assert "approximate='tanh'" in code
    assert re.search(r"op_cat_\d+\(\(v\d+, v\d+\), 1\)", code)


# --- group_norm without its Python check where the check holds inline ----------------------


class Pool(torch.nn.Module):
    """poolformer's GroupNorm(1, C), a count over channels, and an in-place eval dropout."""

    def __init__(self):
        super().__init__()
        self.one = torch.nn.GroupNorm(1, 4)

    def forward(self, x):
        y = self.one(x) + F.group_norm(x, 2, eps=1e-5)
        return torch.dropout_(y * 1, 0.5, False)


def test_group_norm_runs_its_kernel_where_the_check_holds(tmp_path):
    torch.manual_seed(0)
    model = Pool().eval()
    traced = tracebridge.trace(model, torch.randn(1, 4, 3, 3))
    fast = loaded(traced, tmp_path)
    slow = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    code = fast.code
    assert re.search(r"op_group_norm_kernel_\d+\(in0, 1, v\d+, v\d+\) if ", code)
    assert re.search(r"in0.shape\[1\] >= 2\) else op_group_norm_\d+\(in0, 2\)", code)
    assert "# dropout_" in code and not re.search(r"op_dropout_\w*\(", code)  # x itself
    for x in (torch.randn(2, 4, 5, 5), torch.randn(1, 4, 1, 1), torch.randn(3, 4, 2, 7)):
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                assert same_bits(fast(x).detach(), slow(x).detach())
                assert same_bits(fast(x).detach(), model(x).detach())


def test_group_norm_falls_back_to_its_check_with_the_same_error(tmp_path):
    traced = tracebridge.trace(lambda x: F.group_norm(x, 2), torch.randn(1, 4, 3))
    fast = loaded(traced, tmp_path)
    slow = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    assert "op_group_norm_kernel_" in fast.code
    message = "num_groups must be between 1 and the 1 channels"
    for runner in (fast, slow):
        with pytest.raises(tracebridge.TraceError, match=message):
            runner(torch.randn(1, 1, 3))
