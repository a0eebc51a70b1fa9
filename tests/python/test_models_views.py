"""``repeat_interleave``, ``Tensor.broadcast_to`` and a bounded ``as_strided`` (issue 20,
item 2): recorded by the tracer, checked at load, run by both runtimes, general in shape.

Each module copies what published code does: rotary embeddings and grouped-query
attention repeat along a dimension, pooling encoders repeat by a tensor of counts, speech
models broadcast a bias, and long-document encoders (Longformer) cut a sequence into
overlapping chunks with ``as_strided``. ``as_strided`` may only rearrange its input's own
elements: a crafted file that reaches further is refused before the kernel runs.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.check.program import check_program
from tracebridge.ir import ops

from .test_check_program import forward, node_doc, r_verdicts, refused, write

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Rotary(nn.Module):
    """Rotary embedding with interleaved pairs, and key heads repeated for the queries."""

    def forward(self, q, k):
        n, d = q.shape[-2], q.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), inv)
        cos = freqs.cos().repeat_interleave(2, dim=-1)
        sin = torch.repeat_interleave(freqs.sin(), 2, dim=-1)
        q = q * cos + torch.flip(q, [-1]) * sin
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        return q @ k.transpose(-1, -2)


class Pooled(nn.Module):
    """Segment pooling: each row repeated by a count given as a tensor (with output_size)."""

    def forward(self, x, counts):
        total = counts.sum()
        spread = torch.repeat_interleave(x, counts, dim=0, output_size=int(total))
        index = torch.repeat_interleave(counts)
        return spread * 2, index


class SpeechBias(nn.Module):
    """A relative-position bias broadcast to the batch of attention maps."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, 1, 1, 6))

    def forward(self, scores):
        return scores + self.bias[..., : scores.shape[-1]].broadcast_to(scores.shape)


class Chunks(nn.Module):
    """Longformer's ``_chunk``: overlapping windows of a sequence through as_strided."""

    def forward(self, x, window: int = 2):
        b, n, d = x.shape
        x = x.contiguous().view(b, n // (2 * window), 2 * window, d)
        size = list(x.size())
        size[1] = size[1] * 2 - 1
        stride = list(x.stride())
        stride[1] = stride[1] // 2
        return x.as_strided(size=size, stride=stride).sum(-1)


CASES = [
    (Rotary, [(2, 4, 5, 8), (2, 2, 5, 8)],
     [[(1, 6, 3, 4), (1, 3, 3, 4)], [(3, 2, 7, 8), (3, 1, 7, 8)]]),
    (SpeechBias, [(2, 3, 4, 5)], [[(1, 2, 3, 6)], [(4, 1, 2, 2)]]),
    (Chunks, [(2, 8, 3)], [[(1, 12, 5)], [(3, 4, 2)]]),
]  # fmt: skip


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
@pytest.mark.parametrize("cls, example, others", CASES, ids=[c[0].__name__ for c in CASES])
def test_trace_run_save_load_on_other_shapes(cls, example, others, runtime, tmp_path):
    torch.manual_seed(0)
    model = cls()
    inputs = tuple(torch.randn(*s) for s in example)
    traced = tracebridge.trace(model, inputs, runtime=runtime)
    recorded = {n.op for n in traced.program.methods["forward"].nodes}
    assert recorded & {"repeat_interleave", "broadcast_to", "as_strided"}
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path, runtime=runtime)
    for shapes in [example, *others]:
        call = tuple(torch.randn(*s) for s in shapes)
        expected = model(*call)
        assert torch.allclose(traced(*call), expected, atol=1e-5)
        assert torch.equal(loaded(*call), traced(*call))
    assert not traced.guards


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_repeat_interleave_by_a_tensor_of_counts(runtime, tmp_path):
    model = Pooled()
    x, counts = torch.randn(3, 2), torch.tensor([1, 0, 2])
    traced = tracebridge.trace(model, (x, counts), runtime=runtime, check_trace=False)
    path = tmp_path / "pooled.tb"
    traced.save(path)
    loaded = tracebridge.load(path, runtime=runtime)
    for fn in (traced, loaded):
        for a, b in zip(fn(x, counts), model(x, counts)):
            assert torch.equal(a, b)


def test_the_ops_are_in_op_set_4_and_ops_json():
    for name in ("as_strided", "repeat_interleave"):
        assert ops.is_known(name) and ops.SINCE[name] == 4
    assert ops.canonical_name(torch.Tensor.broadcast_to) == "broadcast_to"
    assert ops.canonical_name(torch.Tensor.as_strided) == "as_strided"
    assert ops.canonical_name(torch.Tensor.repeat_interleave) == "repeat_interleave"
    from pathlib import Path

    table = json.loads((Path(__file__).parents[2] / "shared_ir" / "ops.json").read_text())
    assert table["ops"]["as_strided"]["since"] == 4
    assert "since" not in table["ops"]["broadcast_to"]


# --- crafted files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        ([{"ref": 0}, [2, -1], [1, 1]], {}, "must be >= 0"),
        ([{"ref": 0}, [2], [-1]], {}, "must be >= 0"),
        ([{"ref": 0}, [2, 2], [1]], {}, "2 sizes but 1 strides"),
        ([{"ref": 0}, [2], [1], -5], {}, "must be >= 0"),
    ],
)
def test_crafted_as_strided_with_impossible_literals_is_refused_at_load(args, kwargs, words):
    refused(node_doc("as_strided", args, kwargs), words, "node 0")


def test_crafted_repeat_interleave_with_a_negative_count_is_refused_at_load():
    refused(node_doc("repeat_interleave", [{"ref": 0}, -3]), "must be >= 0")


# prober18 F12: what PyTorch refuses anyway is refused at load, naming the op, the argument
# and the node; a bool passed the op set's kinds (where a bool stands for an int).
@pytest.mark.parametrize(
    "op, args, kwargs, words",
    [
        ("as_strided", [{"ref": 0}, [True, 3], [3, 1]], {}, "as_strided's size is [true, 3]"),
        ("as_strided", [{"ref": 0}, [2], [True]], {}, "as_strided's stride is [true]"),
        ("as_strided", [{"ref": 0}, [2], [1], True], {}, "as_strided's storage_offset is true"),
        ("as_strided", [{"ref": 0}, [2], [1]], {"storage_offset": False}, "storage_offset is"),
        ("repeat_interleave", [{"ref": 0}, True], {}, "repeat_interleave's repeats is true"),
        ("repeat_interleave", [{"ref": 0}], {"repeats": True}, "repeats is true"),
        ("repeat_interleave", [{"ref": 0}, 2], {"output_size": True}, "output_size is true"),
        ("broadcast_to", [{"ref": 0}, [True, 2]], {}, "broadcast_to's size is [true, 2]"),
        ("Tensor.expand", [{"ref": 0}, True, 2], {}, "Tensor.expand's size is true"),
        ("zeros", [[2, True]], {}, "zeros's size is [2, true]"),
        ("Tensor.view", [{"ref": 0}, True, 2], {}, "Tensor.view's size is true"),
    ],
)
def test_a_bool_where_pytorch_takes_an_integer_size_is_refused_at_load(op, args, kwargs, words):
    message = refused(node_doc(op, args, kwargs), words, "a bool where an integer", "node 0")
    assert "[rule: argument kinds]" in message


@pytest.mark.parametrize(
    "args, kwargs, words",
    [
        ([{"ref": 0}, 2], {"dim": 1}, "dim 1 is out of range for its input of rank 1 (dims -1..0)"),
        ([{"ref": 0}, 2, -2], {}, "dim -2 is out of range for its input of rank 1"),
        ([{"ref": 0}, 2, 7], {}, "dim 7 is out of range"),
    ],
)
def test_a_repeat_interleave_dim_past_its_inputs_rank_is_refused_at_load(args, kwargs, words):
    refused(node_doc("repeat_interleave", args, kwargs), words, "node 0", "[rule: literals]")


@pytest.mark.parametrize(
    "op, args, words",
    [
        ("broadcast_to", [{"ref": 0}, [-2, 3]], "broadcast_to size -2 (at position 0"),
        ("Tensor.expand", [{"ref": 0}, 4, -3], "Tensor.expand size -3 (at position 1"),
        ("Tensor.expand", [{"ref": 0}, {"tuple": [-5]}], "size -5"),
    ],
)
def test_an_expand_size_below_minus_one_is_refused_at_load(op, args, words):
    refused(node_doc(op, args), words, "or -1 to keep the input's size", "[rule: literals]")


def test_what_pytorch_takes_stays_accepted():
    """-1 keeps a size, a dim may count from the end, a count may be 0: traced files hold
    these, and the rules above refuse none of them."""
    for op, args, kwargs in [
        ("broadcast_to", [{"ref": 0}, [2, -1]], {}),
        ("Tensor.expand", [{"ref": 0}, 2, -1], {}),
        ("repeat_interleave", [{"ref": 0}, 0], {"dim": -1}),
        ("repeat_interleave", [{"ref": 0}, 2, 0], {"output_size": 4}),
        ("as_strided", [{"ref": 0}, [1, 2], [0, 1], 0], {}),
    ]:
        check_program(node_doc(op, args, kwargs))


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_dim_or_size_computed_at_the_call_is_refused_before_the_kernel(runtime, tmp_path):
    """A dim past the rank failed inside the checked implementation (``IndexError: tuple
    index out of range``); an expand size below -1 reached the kernel (``numel: integer
    multiplication overflow``)."""

    def less(by):  # %6 = x.size(0) - by
        return [
            {"op": "prim.size", "args": [{"ref": 0}, 0], "outputs": [{"id": 5, "kind": "int"}]},
            {"op": "scalar.sub", "args": [{"ref": 5}, by], "outputs": [{"id": 6, "kind": "int"}]},
        ]

    doc = node_doc("repeat_interleave", [{"ref": 0}, 2], {"dim": {"ref": 6}})
    forward(doc)["nodes"][:0] = [dict(n, kwargs={}, out_spec={"t": "leaf"}) for n in less(1)]
    fn = _load(tmp_path, doc, runtime)
    assert torch.equal(fn(torch.tensor([1.0])), torch.tensor([1.0, 1.0]))  # dim 1 - 1 = 0
    with pytest.raises(tracebridge.OpError, match=r"repeat_interleave: dim 2 is out of range "
                       r"for an input of rank 1 \(dims -1..0\)"):  # fmt: skip
        fn(torch.ones(3))
    doc = node_doc("broadcast_to", [{"ref": 0}, {"tuple": [{"ref": 6}, {"ref": 5}]}])
    forward(doc)["nodes"][:0] = [dict(n, kwargs={}, out_spec={"t": "leaf"}) for n in less(5)]
    fn = _load(tmp_path, doc, runtime)
    assert fn(torch.ones(7)).shape == (2, 7)  # 7 - 5
    with pytest.raises(tracebridge.OpError, match=r"broadcast_to: size -2 is negative"):
        fn(torch.ones(3))


def _load(tmp_path, doc, runtime):
    check_program(doc, "crafted.tb")
    header = b"{}"
    tensors = len(header).to_bytes(8, "little") + header
    return tracebridge.load(write(tmp_path / "crafted.tb", doc, tensors), runtime=runtime)


def _crafted(tmp_path, args, op="as_strided", kwargs=None, runtime="codegen"):
    doc = node_doc(op, args, kwargs)
    check_program(doc, "crafted.tb")  # the literals alone are possible
    header = b"{}"
    tensors = len(header).to_bytes(8, "little") + header
    return tracebridge.load(write(tmp_path / "crafted.tb", doc, tensors), runtime=runtime)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_crafted_as_strided_outside_its_input_is_refused_before_the_kernel(runtime, tmp_path):
    fn = _crafted(tmp_path, [{"ref": 0}, [6], [1]], runtime=runtime)
    assert torch.equal(fn(torch.arange(8.0)), torch.arange(6.0))
    with pytest.raises(Exception, match="outside the input's own elements"):
        fn(torch.arange(4.0))  # PyTorch itself refuses this one too
    storage = torch.arange(100.0)
    # Within the storage, so PyTorch alone would read elements 0..5 of `storage`: the
    # input is elements 10..13 of it, and the view may not leave them.
    with pytest.raises(Exception, match="outside the input's own elements"):
        fn(storage[10:14])


def test_crafted_as_strided_offset_before_its_input_is_refused(tmp_path):
    fn = _crafted(tmp_path, [{"ref": 0}, [2], [1], 0])
    storage = torch.arange(100.0)
    with pytest.raises(Exception, match="outside the input's own elements"):
        fn(storage[50:60])


def test_crafted_repeat_interleave_output_is_bounded_before_it_is_allocated(tmp_path):
    fn = _crafted(tmp_path, [{"ref": 0}, 2**27], op="repeat_interleave")
    with pytest.raises(Exception, match="more than the limit"):
        fn(torch.zeros(4))
    fn = _crafted(tmp_path, [{"ref": 0}, 2], op="repeat_interleave", kwargs={"output_size": 3})
    with pytest.raises(Exception, match="not the sum of the repeats"):
        fn(torch.zeros(4))


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_accepts_the_traced_ops(tmp_path):
    """R's base-R reader checks a file against ops.json: the new rows let it read these."""
    paths = []
    for cls, example, _ in CASES:
        traced = tracebridge.trace(cls(), tuple(torch.randn(*s) for s in example))
        path = tmp_path / f"{cls.__name__}.tb"
        traced.save(path)
        paths.append(path)
    verdicts = r_verdicts(paths, tmp_path)
    assert all(verdicts[p.name] == "accept" for p in paths), verdicts
