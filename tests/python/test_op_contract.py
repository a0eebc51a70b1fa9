"""Every op a file can name is safe with any arguments (issue 17, items 1 to 4).

Two parts:

* the findings of the issue, each a crafted file (a few hundred bytes of program.json)
  that loads and validates today and then crashes the process, reads freed memory,
  rewrites a weight for good or allocates gigabytes: each must now end in tracebridge's
  own error, at load or at the call, and nothing else;
* the contract: every op of the set, called through the runtime with arguments of its
  declared kinds but wrong shapes, short weights, out-of-range enums and indices, in a
  child process whose freed and fresh memory is filled with a canary byte
  (``MALLOC_PERTURB_``): a crash, a canary in an output, or two identical calls that give
  different outputs fail the test. ``make test`` runs a small fixed budget;
  ``make fuzz`` (``TRACEBRIDGE_CONTRACT_CASES``) a long one.

Everything that may crash runs in a child process, so a regression fails a test instead
of killing the suite.
"""

from __future__ import annotations

import collections
import json
import os
import random
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.artifact.container import Writer
from tracebridge.ir import ops


def _tensor(vid, dtype="float32", shape=(2,)):
    return {"id": vid, "kind": "Tensor", "dtype": dtype, "shape": list(shape)}


def _node(op, args, outputs, kwargs=None):
    spec = (
        {"t": "leaf"} if len(outputs) == 1 else {"t": "tuple", "c": [{"t": "leaf"}] * len(outputs)}
    )
    return {"op": op, "args": args, "kwargs": kwargs or {}, "outputs": outputs, "out_spec": spec}


def _ref(vid):
    return {"ref": vid}


def _literal(vid, data, dtype="float32"):
    """A ``tensor(data, dtype=...)`` node: a tensor written in the file."""
    return _node("tensor", [data], [_tensor(vid, dtype)], {"dtype": {"dtype": dtype}})


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """``neg(x)`` for a float vector x (input value 0): program.json and tensors member."""
    path = tmp_path_factory.mktemp("contract") / "base.tb"
    tracebridge.trace(torch.neg, torch.randn(3)).save(path)
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json")), archive.read("tensors.safetensors")


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    """A traced ``nn.Linear(3, 2)``: program.json and tensors member (state with parameters)."""
    path = tmp_path_factory.mktemp("contract") / "linear.tb"
    torch.manual_seed(0)
    tracebridge.trace(torch.nn.Linear(3, 2), torch.randn(4, 3)).save(path)
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json")), archive.read("tensors.safetensors")


def write_artifact(path: Path, doc: dict, tensors: bytes) -> Path:
    data = json.dumps(doc).encode()
    with open(path, "wb") as handle:
        writer = Writer(handle)
        for name, member, align in (
            ("program.json", data, 1),
            ("tensors.safetensors", tensors, 64),
        ):
            writer.begin(name, len(member), align)
            writer.write(member)
            writer.end(zlib.crc32(member))
        writer.close()
    return path


def crafted(tmp_path, base, nodes, outputs=None, name="crafted.tb", opset=None) -> Path:
    """``base`` with its forward graph replaced by ``nodes``; it returns ``outputs``
    (default: the last node's first output). ``opset``: the op-set version it declares."""
    doc = json.loads(json.dumps(base[0]))
    doc["opset_version"] = opset or doc["opset_version"]
    graph = doc["methods"]["forward"]
    graph["nodes"] = nodes
    outs = outputs or [nodes[-1]["outputs"][0]["id"]]
    graph["outputs"] = [_ref(v) for v in outs]
    graph["out_spec"] = (
        {"t": "leaf"} if len(outs) == 1 else {"t": "tuple", "c": [{"t": "leaf"}] * len(outs)}
    )
    graph["sources"] = {}
    return write_artifact(tmp_path / name, doc, base[1])


def child_jobs() -> dict[str, tuple[str, list, list[int], int]]:
    """Every crafted file of this module that runs in a child: name -> (base, nodes, input
    shape, calls). ``base`` is ``"neg"`` (a function) or ``"linear"`` (an ``nn.Linear``)."""
    jobs = {f"bn-{t}": ("neg", _bn_nodes(t), [3], 2) for t in (False, True)}
    jobs.update({f"v3-bn-{t}": ("neg3", _bn_nodes(t), [3], 2) for t in (False, True)})
    jobs["v3-rnn"] = ("neg3", _rnn_nodes("gru", "w_ih"), [3], 2)
    jobs["weight_norm"] = ("neg", _WEIGHT_NORM, [3], 2)
    jobs.update({f"rnn-{op}-{bad}": ("neg", _rnn_nodes(op, bad), [3], 2) for op, bad in _RNN})
    jobs.update({f"gmm-{offs}": ("neg", _gmm_nodes(offs), [3], 2) for offs in _OFFS})
    jobs.update({f"call-{case}": ("neg", nodes, [3], 2) for case, nodes in _AT_THE_CALL.items()})
    jobs["writes"] = ("linear", _WRITES["add_ under no_grad"], [4, 3], 3)
    jobs.update({f"circular-{op}": ("neg", _circular_nodes(op), [3], 2) for op in _CIRCULAR})
    jobs.update({f"pads-{op}": ("neg", _short_pads_nodes(op), [3], 2) for op in _PADDING})
    jobs["group_norm"] = ("neg", _GROUP_NORM, [3], 2)
    jobs.update({f"fused-{k}": ("neg", _fused_nodes(*v), [3], 2) for k, v in _FUSED.items()})
    jobs["v3-fused-mha-heads0"] = ("neg3", _fused_nodes(*_FUSED["mha-heads0"]), [3], 2)
    return jobs


@pytest.fixture(scope="module")
def children(tmp_path_factory, base, linear) -> dict[str, dict]:
    """The outcome of every job of :func:`child_jobs`, run in as few children as crashes
    allow (each child costs seconds to import torch)."""
    from .canary_child import run_batch

    workdir = tmp_path_factory.mktemp("children")
    names, jobs = [], []
    for name, (which, nodes, shape, calls) in child_jobs().items():
        if which.startswith("neg"):
            opset = 3 if which == "neg3" else None
            path = crafted(workdir, base, nodes, name=f"{len(names)}.tb", opset=opset)
        else:
            path = _writes_weight(workdir, linear, nodes, name=f"{len(names)}.tb")
        names.append(name)
        jobs.append({"path": str(path), "shape": shape, "calls": calls})
    return dict(zip(names, run_batch(jobs, workdir)))


def refused(outcome: dict, *words: str) -> None:
    """The file ended in tracebridge's error whose message holds ``words``."""
    assert outcome["stage"] in ("load", "call"), outcome
    for word in words:
        assert word in outcome["message"], (word, outcome["message"])


# --- heap reads and writes, aborts, uninitialised memory (item 1) ---------------------------


def _bn_nodes(training: bool):
    return [
        _literal(1, [[[1.0, 2.0]] * 8] * 2),  # (2, 8, 2)
        _literal(2, [1.0]),
        _literal(3, [0.0]),
        _literal(4, [1.0]),
        _node(
            "native_batch_norm",
            [_ref(1), _ref(2), _ref(2), _ref(3), _ref(4), training, 0.1, 1e-5],
            [_tensor(5), _tensor(6), _tensor(7)],
        ),
    ]


@pytest.mark.parametrize("training", [False, True])
def test_native_batch_norm_with_short_weights_is_refused(children, training):
    """Read past the one-element weights (evaluation: garbage that changed between calls)
    and wrote past them (training: ``free(): invalid size``, SIGSEGV)."""
    refused(children[f"bn-{training}"], "native_batch_norm", "8 elements")


@pytest.mark.parametrize("case", ["v3-bn-False", "v3-bn-True", "v3-rnn"])
def test_files_of_older_op_sets_run_through_the_checked_implementations(children, case):
    """A file that says op-set version 3 is read under the same rules: its ops run through
    the checked implementations (the golden vectors of older versions keep loading:
    tests/python/test_vectors.py)."""
    refused(children[case], "must")


def test_files_of_older_op_sets_get_the_enum_and_write_rules(tmp_path, base, linear):
    nodes = [
        _node("ones", [[1, 1, 4, 4]], [_tensor(1, shape=[1, 1, 4, 4])]),
        _node("zeros", [[1, 2, 2, 2]], [_tensor(2, shape=[1, 2, 2, 2])]),
        _node("grid_sampler", [_ref(1), _ref(2), 99, 0, False], [_tensor(3)]),
    ]
    with pytest.raises(tracebridge.ArtifactError, match="rule: enums"):
        tracebridge.load(crafted(tmp_path, base, nodes, opset=3))
    doc = json.loads(json.dumps(linear[0]))
    doc["opset_version"] = 2
    doc["methods"]["forward"]["nodes"][2:2] = _WRITES["add_ through .data"]
    with pytest.raises(tracebridge.ArtifactError, match="rule: state writes"):
        tracebridge.load(write_artifact(tmp_path / "v2.tb", doc, linear[1]))


_WEIGHT_NORM = [
    _node("ones", [[4096, 3]], [_tensor(1, shape=[4096, 3])]),
    _literal(2, [1.0]),
    _node("_weight_norm", [_ref(1), _ref(2), 0], [_tensor(3, shape=[4096, 3])]),
]


def test_weight_norm_with_a_short_g_is_refused(children):
    """``_weight_norm(v[4096, 3], g[1], 0)`` aborted the process (munmap_chunk)."""
    refused(children["weight_norm"], "_weight_norm", "g must have shape")


def _rnn_nodes(op: str, bad: str):
    gates = {"gru": 3, "lstm": 4, "rnn_tanh": 1}[op]
    rows = gates * 4
    shapes = {"w_ih": [rows, 3], "w_hh": [rows, 4], "b_ih": [rows], "b_hh": [rows]}
    shapes[bad] = [1] + shapes[bad][1:]
    nodes = [_node("ones", [[5, 2, 3]], [_tensor(1, shape=[5, 2, 3])])]
    nodes.append(_node("zeros", [[1, 2, 4]], [_tensor(2, shape=[1, 2, 4])]))
    for vid, shape in enumerate(shapes.values(), start=3):
        nodes.append(_node("ones", [shape], [_tensor(vid, shape=shape)]))
    params = [_ref(v) for v in (3, 4, 5, 6)]
    hx = [_ref(2), _ref(2)] if op == "lstm" else _ref(2)
    outs = [_tensor(7), _tensor(8)] + ([_tensor(9)] if op == "lstm" else [])
    nodes.append(_node(op, [_ref(1), hx, params, True, 1, 0.0, False, False, False], outs))
    return nodes


_RNN = [("gru", "w_ih"), ("gru", "b_ih"), ("lstm", "b_hh"), ("lstm", "w_ih"), ("rnn_tanh", "b_ih")]


@pytest.mark.parametrize("op, bad", _RNN)
def test_rnn_flat_weights_of_the_wrong_shape_are_refused(children, op, bad):
    """A one-row ``weight_ih`` crashed ``gru`` (SIGSEGV); short biases were read past."""
    refused(children[f"rnn-{op}-{bad}"], op, "must have shape")


@pytest.mark.parametrize("mode", [99, -1])
def test_grid_sampler_enums_out_of_range_are_refused_at_load(tmp_path, base, mode):
    """Mode 99 or -1 returned heap memory (upper halves of pointers)."""
    nodes = [
        _node("ones", [[1, 1, 4, 4]], [_tensor(1, shape=[1, 1, 4, 4])]),
        _node("zeros", [[1, 2, 2, 2]], [_tensor(2, shape=[1, 2, 2, 2])]),
        _node("grid_sampler", [_ref(1), _ref(2), mode, 0, False], [_tensor(3)]),
    ]
    with pytest.raises(tracebridge.ArtifactError, match="rule: enums") as info:
        tracebridge.load(crafted(tmp_path, base, nodes))  # never called: it is refused
    assert "interpolation_mode of grid_sampler must be written in the file as one of 0, 1, 2" in (
        str(info.value)
    )


def test_grid_sampler_enum_from_a_value_is_checked_at_the_call():
    from tracebridge.runtime.checked_ops import CheckFailed, grid_sampler

    with pytest.raises(CheckFailed, match="interpolation_mode must be one of"):
        grid_sampler(torch.ones(1, 1, 4, 4), torch.zeros(1, 2, 2, 2), 99, 0, False)
    out = grid_sampler(torch.ones(1, 1, 4, 4), torch.zeros(1, 2, 2, 2), 0, 0, False)
    assert torch.equal(
        out, torch.grid_sampler(torch.ones(1, 1, 4, 4), torch.zeros(1, 2, 2, 2), 0, 0, False)
    )


_OFFS = ([4, 6], [4, 600000], [6, 2])


def _gmm_nodes(offs):
    return [
        _node("ones", [[8, 4]], [_tensor(1, shape=[8, 4])]),
        _node("ones", [[2, 4, 4]], [_tensor(2, shape=[2, 4, 4])]),
        _literal(3, offs, "int32"),
        _node("_grouped_mm", [_ref(1), _ref(2), _ref(3)], [_tensor(4, shape=[8, 4])]),
    ]


@pytest.mark.parametrize("offs", _OFFS)
def test_grouped_mm_offsets_are_checked(children, offs):
    """``offs=[4, 6]`` for 8 rows returned rows of a tensor the process freed earlier."""
    refused(children[f"gmm-{offs}"], "_grouped_mm", "offs")


def test_checked_ops_give_the_kernels_results_on_good_arguments():
    from tracebridge.runtime import checked_ops as c

    x, w = torch.randn(2, 3, 4), torch.randn(3)
    rm, rv = torch.zeros(3), torch.ones(3)
    got = c.native_batch_norm(x, w, w, rm.clone(), rv.clone(), False, 0.1, 1e-5)
    want = torch.native_batch_norm(x, w, w, rm.clone(), rv.clone(), False, 0.1, 1e-5)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    v, g = torch.randn(5, 3), torch.randn(5, 1)
    assert torch.equal(c.weight_norm(v, g, 0), torch._weight_norm(v, g, 0))
    a, b, offs = torch.randn(8, 4), torch.randn(2, 4, 4), torch.tensor([4, 8], dtype=torch.int32)
    assert torch.equal(c.grouped_mm(a, b, offs), torch._grouped_mm(a, b, offs))
    for cls, op in ((torch.nn.GRU, "gru"), (torch.nn.LSTM, "lstm"), (torch.nn.RNN, "rnn_tanh")):
        rnn = cls(3, 4, num_layers=2, bidirectional=True)
        inp = torch.randn(5, 2, 3)
        h = torch.zeros(4, 2, 4)
        hx = (h, h) if op == "lstm" else h
        weights = list(rnn._flat_weights)
        got = c.CHECKED[op](inp, hx, weights, True, 2, 0.0, False, True, False)
        want = getattr(torch, op)(inp, hx, weights, True, 2, 0.0, False, True, False)
        assert all(torch.equal(p, q) for p, q in zip(got, want))
    lstm = torch.nn.LSTM(3, 4, proj_size=2)
    hx = (torch.zeros(1, 2, 2), torch.zeros(1, 2, 4))
    got = c.CHECKED["lstm"](
        torch.randn(5, 2, 3), hx, list(lstm._flat_weights), True, 1, 0.0, False, False, False
    )
    assert got[0].shape == (5, 2, 2)


def test_traced_recurrent_and_normalised_modules_still_match_eager():
    """The checked forms change no result of a real model (GRU, LSTM with projections,
    packed sequences, grid_sample, weight norm)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 4, num_layers=2, batch_first=True)
    x = torch.randn(2, 5, 3)
    traced = tracebridge.trace(gru, x)
    assert torch.equal(traced(x)[0], gru(x)[0])
    lstm = torch.nn.LSTM(3, 4, proj_size=2, bidirectional=True)
    traced = tracebridge.trace(lstm, torch.randn(5, 2, 3))
    y = torch.randn(7, 2, 3)
    assert torch.equal(traced(y)[0], lstm(y)[0])
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 4))
    traced = tracebridge.trace(conv, torch.randn(2, 3))
    z = torch.randn(6, 3)
    assert torch.allclose(traced(z), conv(z))

    def sample(img, grid):
        return torch.nn.functional.grid_sample(img, grid, mode="bicubic", align_corners=False)

    img, grid = torch.randn(1, 2, 5, 5), torch.rand(1, 3, 3, 2) * 2 - 1
    traced = tracebridge.trace(sample, (img, grid))
    assert torch.equal(traced(img, grid), sample(img, grid))


# --- state a file may change (item 4) ----------------------------------------------------------


def _writes_weight(tmp_path, linear, extra, name="writes.tb"):
    """The traced ``nn.Linear``, with ``extra`` nodes run before its ``linear`` node
    (``extra`` reads the weight as value 1 and may define values from 100 on)."""
    doc = json.loads(json.dumps(linear[0]))
    nodes = doc["methods"]["forward"]["nodes"]
    nodes[2:2] = extra
    return write_artifact(tmp_path / name, doc, linear[1])


_UNIT = _tensor(100, shape=[2, 3])
_WRITES = {
    "add_ under no_grad": [
        _node("set_grad_enabled", [False], []),
        _node("Tensor.add_", [_ref(1), 3], [_UNIT]),
        _node("set_grad_enabled", [True], []),
    ],
    "add_ through .data": [
        _node("Tensor.data", [_ref(1)], [_tensor(101, shape=[2, 3])]),
        _node("Tensor.add_", [_ref(101), 3], [_UNIT]),
    ],
    "setitem through a view": [
        _node("Tensor.view", [_ref(1), -1], [_tensor(101, shape=[6])]),
        _node("setitem", [_ref(101), 0, 5.0], []),
    ],
    # found by review 9: ops that may return their argument itself, or a view of it
    **{
        f"add_ through {op}": [
            _node(op, [_ref(1), *args], [_tensor(101, shape=shape)]),
            _node("Tensor.add_", [_ref(101), 3], [_tensor(102, shape=shape)]),
        ]
        for op, args, shape in [
            ("positive", [], [2, 3]),
            ("dropout", [0.5, False], [2, 3]),
        ]
    },
    "copy_ into the bias": [_node("Tensor.copy_", [_ref(2), _ref(2)], [_tensor(100, shape=[2])])],
    "in-place shift operator": [
        _node("detach", [_ref(1)], [_tensor(101, shape=[2, 3])]),
        _node("Tensor.__imod__", [_ref(101), 2], [_UNIT]),
    ],
    "requires_grad_": [_node("Tensor.requires_grad_", [_ref(1), False], [_UNIT])],
    "detach_": [_node("Tensor.detach_", [_ref(1)], [_UNIT])],
    "batch_norm running stats": [
        _node("ones", [[4, 2]], [_tensor(101, shape=[4, 2])]),
        _node(
            "batch_norm",
            [_ref(101), None, None, _ref(2), _ref(2), True, 0.5, 1e-5, False],
            [_tensor(102, shape=[4, 2])],
        ),
    ],
}


@pytest.mark.parametrize("case", sorted(_WRITES))
def test_writes_to_parameters_are_refused_at_load(tmp_path, linear, case):
    """Each shifted the output on every call and the change stayed in the module (a re-save
    kept it); ``requires_grad_(False)`` and ``detach_`` froze the weight silently."""
    path = _writes_weight(tmp_path, linear, _WRITES[case])
    with pytest.raises(tracebridge.ArtifactError, match=r"state writes") as info:
        tracebridge.load(path)
    message = str(info.value)
    assert "writes parameter" in message and "never a parameter" in message, message
    assert "do not load it" in message


def test_the_weights_of_a_refused_file_never_change(children):
    assert children["writes"]["stage"] == "load", children["writes"]


def test_buffers_may_be_written_batch_norm_statistics_in_training():
    """What the SPEC allows: a BatchNorm's running statistics and counter change in
    training mode, through the loaded module, as in eager PyTorch."""
    bn = torch.nn.BatchNorm1d(3).train()
    traced = tracebridge.trace(bn, torch.randn(4, 3))
    x = torch.randn(8, 3)
    before = traced.state_dict()["running_mean"].clone()
    traced(x)
    assert not torch.equal(traced.state_dict()["running_mean"], before)
    assert int(traced.state_dict()["num_batches_tracked"]) >= 1


def test_in_place_ops_on_values_that_are_not_state_still_trace_and_load(tmp_path):
    def f(x, w):
        y = x.clone()
        y.add_(1).relu_()
        w2 = w * 2
        w2.requires_grad_(True)
        return y + w2.detach_()

    traced = tracebridge.trace(f, (torch.randn(3), torch.randn(3)))
    traced.save(tmp_path / "f.tb")
    loaded = tracebridge.load(tmp_path / "f.tb")
    a, b = torch.randn(3), torch.randn(3)
    assert torch.equal(loaded(a, b), f(a, b))


def test_a_custom_function_may_not_write_a_parameter_it_is_passed():
    """A crafted file passes a parameter to a custom autograd function whose forward graph
    writes its input in place (the tracer refuses ``ctx.mark_dirty``, a file need not)."""
    from tracebridge.artifact.archive import program_to_json
    from tracebridge.check.program import check_program

    from .test_autograd_function import QuantNet

    traced = tracebridge.trace(QuantNet(), torch.randn(2, 4))
    doc = json.loads(json.dumps(program_to_json(traced.program)))
    graph = doc["methods"]["forward"]
    index, node = next(
        (i, n) for i, n in enumerate(graph["nodes"]) if n["op"] == "prim.autograd_function"
    )
    parameter = next(n for n, e in doc["state"].items() if e["kind"] == "parameter")
    read = _node("prim.state", [parameter], [_tensor(9999)])
    graph["nodes"].insert(index, read)
    node["args"][0][0] = _ref(9999)
    forward = doc["methods"][node["kwargs"]["forward"]]
    first = forward["inputs"][0]["id"]
    forward["nodes"].insert(0, _node("Tensor.add_", [_ref(first), 3.0], [_tensor(9998)]))
    with pytest.raises(tracebridge.ArtifactError, match="forward graph writes input 0"):
        check_program(doc, "crafted.tb")
    del forward["nodes"][0]
    check_program(doc, "crafted.tb")  # the same file without the write loads


# --- resource bounds in bytes (item 3) -------------------------------------------------------


def _computed(value: int) -> list[dict]:
    """Nodes that compute ``value`` as the int value 2 at the call (an item of a sum the
    checker does not fold): a size only the call knows."""
    half = value // 2
    return [
        _literal(1, [half, value - half], "int64"),
        _node("sum", [_ref(1)], [_tensor(11, "int64", [])]),
        _node("prim.item", [_ref(11)], [{"id": 2, "kind": "int"}]),
    ]


_BIG = 2**40
_AT_THE_CALL = {
    "bincount of a value": [
        _literal(1, [_BIG], "int64"),
        _node("bincount", [_ref(1)], [_tensor(2, "int64")]),
    ],
    "one_hot without num_classes": [
        _literal(1, [_BIG], "int64"),
        _node("one_hot", [_ref(1)], [_tensor(2, "int64")]),
    ],
    "prim.item of a literal as a size": [
        *_computed(_BIG),
        _node("zeros", [[_ref(2), 4]], [_tensor(3)]),
    ],
    "prim.item as a size spread over positions": [
        *_computed(2**20),
        _node("Tensor.new_ones", [_ref(0), _ref(2), _ref(2)], [_tensor(3)]),
    ],
    "prim.item as an expand": [
        *_computed(2**20),
        _node("ones", [[1, 1]], [_tensor(3, shape=[1, 1])]),
        _node("Tensor.expand", [_ref(3), _ref(2), _ref(2)], [_tensor(4)]),
        _node("sum", [_ref(4)], [_tensor(5, shape=[])]),
    ],
}


@pytest.mark.parametrize("case", sorted(_AT_THE_CALL))
def test_sizes_taken_from_values_are_bounded_at_the_call(children, case):
    """Each asked the allocator for terabytes from a 1.5 KB file; only the allocator
    stopped them, with its own message."""
    outcome = children[f"call-{case}"]
    assert outcome["stage"] == "call", outcome
    refused(outcome, "would allocate", "shared_ir/SPEC.md, section Limits", "an op failed at")
    assert "DefaultCPUAllocator" not in outcome["message"]


def _ones(vid, shape, dtype=None):
    kwargs = {"dtype": {"dtype": dtype}} if dtype else {}
    return _node("ones", [list(shape)], [_tensor(vid, dtype or "float32", shape)], kwargs)


_AT_LOAD = {
    "outer of literals": [
        _ones(1, [2**15]),
        _node("outer", [_ref(1), _ref(1)], [_tensor(2)]),
    ],
    "cartesian_prod of literals": [
        _ones(1, [2**11]),
        _node("cartesian_prod", [[_ref(1), _ref(1), _ref(1)]], [_tensor(2)]),
    ],
    "kron of literals": [
        _ones(1, [2**8, 2**8]),
        _node("kron", [_ref(1), _ref(1)], [_tensor(2)]),
    ],
    "broadcast add of a column and a row": [
        _ones(1, [2**15, 1]),
        _ones(2, [1, 2**15]),
        _node("add", [_ref(1), _ref(2)], [_tensor(3)]),
    ],
    "complex128 literal": [
        _node(
            "full",
            [[2**27], 1.0],
            [_tensor(1, "complex128")],
            {"dtype": {"dtype": "complex128"}},
        )
    ],
    "randperm of 2^28 int64 elements": [_node("randperm", [2**28], [_tensor(1, "int64")])],
    "diag_embed offset": [
        _ones(1, [2]),
        _node("diag_embed", [_ref(1), 2**16], [_tensor(2)]),
    ],
    "mm on 4096 squared literals": [
        _ones(1, [4096, 4096]),
        _node("mm", [_ref(1), _ref(1)], [_tensor(2)]),
        _node("mm", [_ref(2), _ref(1)], [_tensor(3)]),
    ],
    "chain of mm on 2048 squared literals": [
        _ones(1, [2048, 2048]),
        *[_node("mm", [_ref(1 + i), _ref(1)], [_tensor(2 + i)]) for i in range(10)],
    ],
}


@pytest.mark.parametrize("case", sorted(_AT_LOAD))
def test_bytes_and_work_from_sizes_the_file_holds_are_bounded_at_load(tmp_path, base, case):
    """Each passed the element limit (each size within 2^28 elements) and asked for more
    than 2 GB or more than 60 s of matrix products."""
    path = crafted(tmp_path, base, _AT_LOAD[case])
    with pytest.raises(tracebridge.ArtifactError, match=r"resource limits") as info:
        tracebridge.load(path)
    assert "bytes" in str(info.value) or "multiply-adds" in str(info.value)


def test_sizes_within_the_limits_load_and_run(tmp_path, base):
    nodes = [
        _ones(1, [256]),
        _node("outer", [_ref(1), _ref(1)], [_tensor(2)]),
        _node("mm", [_ref(2), _ref(2)], [_tensor(3)]),
        _node("sum", [_ref(3)], [_tensor(4, shape=[])]),
    ]
    module = tracebridge.load(crafted(tmp_path, base, nodes))
    assert float(module(torch.ones(3))) == 256.0**3


def test_a_count_of_results_is_bounded(tmp_path, base):
    """``tensor_split(x, 2**31)`` ran for minutes making two billion tensors (found by the
    contract test below): a literal count is refused at load, a computed one at the call."""
    nodes = [_node("tensor_split", [_ref(0), 2**31], [_tensor(1)])]
    with pytest.raises(tracebridge.ArtifactError, match="asked for 2147483648 results"):
        tracebridge.load(crafted(tmp_path, base, nodes))
    nodes = [
        *_computed(2**31),
        _node("tensor_split", [_ref(0), _ref(2)], [_tensor(3)]),
    ]
    module = tracebridge.load(crafted(tmp_path, base, nodes, name="computed.tb"))
    with pytest.raises(tracebridge.TraceError, match="asked for 2147483648 results"):
        module(torch.ones(3))
    # chunk of an empty dimension made that many empty tensors (killed for memory)
    nodes = [
        _node("zeros", [[0]], [_tensor(1, shape=[0])]),
        _node("chunk", [_ref(1), 2**31], [_tensor(2, shape=[0])]),
    ]
    with pytest.raises(tracebridge.ArtifactError, match="chunk is asked for 2147483648"):
        tracebridge.load(crafted(tmp_path, base, nodes, name="chunk.tb"))


# --- the contract: every op, arguments of its kinds that do not fit (item 2) -----------------

# Cases per op and the seed: ``make test`` runs one case per op with a fixed seed;
# ``make fuzz`` sets TRACEBRIDGE_CONTRACT_CASES (and a seed of its own).
CONTRACT_CASES = int(os.environ.get("TRACEBRIDGE_CONTRACT_CASES", "1"))
CONTRACT_SEED = int(os.environ.get("TRACEBRIDGE_CONTRACT_SEED", "17"))


def _broken(op: str, outcome: dict) -> str:
    """Why an outcome breaks the contract, or ``""``."""
    if outcome["stage"] in ("load", "call"):
        return ""  # tracebridge's own error, at load or at the call
    if outcome["stage"] != "ok":
        return f"{outcome['stage']}: {outcome.get('message', '')[:300]}"
    if outcome["canary"]:
        return "an output holds the canary: memory no kernel wrote"
    if not outcome["same"] and "random" not in ops.info(op).flags:
        return "two identical calls gave different outputs"
    if outcome["changed"]:
        return f"the calls changed state {outcome['changed']}"
    return ""


def test_every_op_keeps_its_contract(tmp_path_factory, base):
    """Every op of the set, called through a loaded file with arguments of its declared
    kinds but shapes, weights, enums and indices that do not fit, in a child with the
    canary allocator: it ends in tracebridge's error or in a result that holds no canary
    and is the same on two calls. Nothing crashes, hangs or raises another exception."""
    from .canary_child import run_batch
    from .contract_cases import case, contract_ops

    workdir = tmp_path_factory.mktemp("contract")
    jobs, cases = [], []
    for op in contract_ops():
        for k in range(CONTRACT_CASES):
            nodes = case(op, random.Random(f"{CONTRACT_SEED}:{op}:{k}"))
            path = crafted(workdir, base, nodes, name=f"{len(jobs)}.tb")
            jobs.append({"path": str(path), "shape": [3], "calls": 2})
            cases.append((op, nodes[-1]["args"]))
    outcomes = run_batch(jobs, workdir, timeout=120 + 2 * len(jobs))
    broken = [
        f"{op}{json.dumps(args)[:160]}: {why}"
        for (op, args), outcome in zip(cases, outcomes)
        if (why := _broken(op, outcome))
    ]
    stages = collections.Counter(o["stage"] for o in outcomes)
    print(f"contract: {len(jobs)} cases, {len(contract_ops())} ops, seed {CONTRACT_SEED}: {stages}")
    assert not broken, "\n".join(broken)
    assert len({op for op, _ in cases}) == len(contract_ops())
    assert stages["ok"] > len(jobs) // 10  # the cases reach the kernels, not only the checks


def test_the_checked_ops_are_declared_in_the_op_set():
    """``ops.json`` flags ``checked`` exactly the ops the runtime runs through a check, and
    every declared enum is a parameter of its op."""
    from tracebridge.runtime import torchvision_ops
    from tracebridge.runtime.checked_ops import CHECKED
    from tracebridge.runtime.checked_ops7 import CHECKED_SINCE_7

    flagged = {name for name, info in ops.OPS.items() if "checked" in info.flags}
    declared = set(CHECKED) | set(torchvision_ops.CHECKED) | set(CHECKED_SINCE_7)
    assert flagged == declared == ops.CHECKED_OPS
    for name, info in ops.OPS.items():
        for param in info.enums:
            assert any(param in names for names in info.arg_names), (name, param)
    assert ops.info("grid_sampler").enums == {
        "interpolation_mode": (0, 1, 2),
        "padding_mode": (0, 1, 2),
    }
    assert ops.info("mse_loss").enums == {"reduction": (0, 1, 2)}
    assert ops.info("embedding_bag").enums["mode"] == (0, 1, 2)


def test_the_call_time_bound_reads_every_size_and_keeps_expanded_dims():
    from tracebridge.runtime.checked_ops import CheckFailed, sized_guard

    zeros = sized_guard("zeros", torch.zeros, [0], [], 0)
    assert zeros(2, 3).shape == (2, 3)
    with pytest.raises(CheckFailed, match="zeros would allocate"):
        zeros(2, 2**30)  # the second size, spread over positions, counts
    expand = sized_guard("Tensor.expand", torch.Tensor.expand, [1], [], 1)
    big = torch.ones(2**15, 1)
    assert expand(big, -1, 4).shape == (2**15, 4)
    with pytest.raises(CheckFailed, match="would allocate"):
        expand(big, -1, 2**15)  # -1 keeps 2**15 rows: 2**30 elements


def test_the_budget_reads_sizes_spread_over_positions(tmp_path, base):
    nodes = [
        _node(
            "zeros",
            [2**14, 2**14],
            [_tensor(1, "float64", [2**14, 2**14])],
            {"dtype": {"dtype": "float64"}},
        ),
        _node("sum", [_ref(1)], [_tensor(2, shape=[])]),
    ]
    with pytest.raises(tracebridge.ArtifactError, match="bytes"):
        tracebridge.load(crafted(tmp_path, base, nodes))


def test_an_item_of_a_tensor_literal_counts_as_a_written_size(tmp_path, base):
    """``prim.item(tensor(n))`` got around the folded-size rule; the checker now sees it,
    so what it sizes (here an expand, then a matrix product of hours) is refused at load."""
    nodes = [
        _literal(1, 2**14, "int64"),
        _node("prim.item", [_ref(1)], [{"id": 2, "kind": "int"}]),
        _ones(3, [1, 1]),
        _node("Tensor.expand", [_ref(3), _ref(2), _ref(2)], [_tensor(4)]),
        _node("mm", [_ref(4), _ref(4)], [_tensor(5)]),
    ]
    with pytest.raises(tracebridge.ArtifactError, match="multiply-adds"):
        tracebridge.load(crafted(tmp_path, base, nodes))


_CIRCULAR = ("pad", "_pad_circular")


def _circular_nodes(op: str) -> list[dict]:
    args = ["circular"] if op == "pad" else []
    return [
        _literal(1, [[[1, 2, 3, 4], [5, 6, 7, 8]]], "int32"),
        _node(op, [_ref(1), [4, -3], *args], [_tensor(2, "int32")]),
    ]


@pytest.mark.parametrize("op", _CIRCULAR)
def test_circular_padding_that_wraps_past_what_it_keeps_is_refused(children, op):
    """Found by the contract test: ``F.pad(x, [4, -3], mode='circular')`` of a length-4 row
    crops 3, then pads 4 around the one element left, and PyTorch returned three elements
    of memory it never wrote (the canary)."""
    refused(children[f"circular-{op}"], op, "wraps around more than the 1 elements it keeps")


_PADDING = ("reflection_pad3d", "replication_pad2d", "reflection_pad1d")


def _short_pads_nodes(op: str) -> list[dict]:
    return [
        _literal(1, [[[[1.0, 2.0], [3.0, 4.0]]]], "float32"),
        _node(op, [_ref(1), []], [_tensor(2, "float32")]),
    ]


@pytest.mark.parametrize("op", _PADDING)
def test_a_padding_list_of_the_wrong_length_is_refused(children, op):
    """Found on torch 2.11 (in the declared range): its ``reflection_pad3d`` reads six pads
    before it counts them, and an empty list crashed the process. Every reflection and
    replication pad counts them first, whatever the release's kernel does."""
    pairs = int(op[-2])
    refused(children[f"pads-{op}"], op, f"padding holds {2 * pairs} ints")


def test_circular_padding_within_bounds_is_pytorchs():
    from tracebridge.runtime.checked_ops import CheckFailed, pad, pad_circular

    x = torch.arange(1, 9, dtype=torch.int32).reshape(1, 2, 4)
    checked = 0
    for left in range(-4, 5):
        for right in range(-4, 5):
            try:
                want = torch._C._nn._pad_circular(x, [left, right])
            except RuntimeError:
                continue
            try:
                got = pad_circular(x, [left, right])
            except CheckFailed:
                continue  # the cases PyTorch got wrong
            assert torch.equal(got, want), (left, right)
            assert torch.equal(pad(x, [left, right], "circular"), want)
            checked += 1
    assert checked >= 39


def test_a_custom_function_may_not_write_a_parameter_it_saves_for_backward():
    """The same through the backward graph: the forward graph saves its input (a
    parameter the node passes) and the backward graph writes that saved value."""
    from tracebridge.artifact.archive import program_to_json
    from tracebridge.check.program import check_program

    from .test_autograd_function import QuantNet

    traced = tracebridge.trace(QuantNet(), torch.randn(2, 4))
    doc = json.loads(json.dumps(program_to_json(traced.program)))
    graph = doc["methods"]["forward"]
    index, node = next(
        (i, n) for i, n in enumerate(graph["nodes"]) if n["op"] == "prim.autograd_function"
    )
    parameter = next(n for n, e in doc["state"].items() if e["kind"] == "parameter")
    graph["nodes"].insert(index, _node("prim.state", [parameter], [_tensor(9999)]))
    node["args"][0][0] = _ref(9999)
    node["kwargs"]["saved"] = 1
    forward = doc["methods"][node["kwargs"]["forward"]]
    forward["outputs"].append(_ref(forward["inputs"][0]["id"]))  # saves its input
    forward["out_spec"]["c"].append({"t": "leaf"})
    backward = doc["methods"][node["kwargs"]["backward"]]
    saved = dict(backward["inputs"][0], id=500, name="saved0")
    backward["inputs"].insert(0, saved)
    backward["in_spec"]["c"][0]["c"].append({"t": "leaf"})
    check_program(doc, "saves.tb")  # saving it is fine
    backward["nodes"].insert(0, _node("Tensor.mul_", [_ref(500), 0.0], [_tensor(9998)]))
    with pytest.raises(tracebridge.ArtifactError, match="backward graph writes input 0"):
        check_program(doc, "saves.tb")


_GROUP_NORM = [
    _node("zeros", [[2, 0, 3]], [_tensor(1, shape=[2, 0, 3])]),
    _node("group_norm", [_ref(1), 2**31], [_tensor(2, shape=[2, 0, 3])]),
]


def test_a_group_count_past_the_channels_is_refused(children):
    """Found by the contract test: ``group_norm`` of an input without channels into 2**31
    groups allocated statistics for each group (the child was killed for memory)."""
    refused(children["group_norm"], "group_norm", "num_groups must be between 1 and the 0")


def test_an_fft_length_counts_in_complex_bytes(tmp_path, base):
    nodes = [_node("fft.fft", [_ref(0), 2**28], [_tensor(1, "complex64")])]
    with pytest.raises(tracebridge.ArtifactError, match="fft.fft is asked for 2147483648 bytes"):
        tracebridge.load(crafted(tmp_path, base, nodes))


# --- fused inference paths (op-set 5) --------------------------------------------------------

_E, _F = 4, 8  # embed_dim and feed-forward width of the crafted layers


def _fused_nodes(op: str, heads: int, bias: int) -> list[dict]:
    """One ``op`` (``mha``: ``_native_multi_head_attention``, ``encoder``:
    ``_transformer_encoder_layer_fwd``) on weights of ones, ``heads`` heads, and a
    projection bias (the encoder: its second feed-forward bias) of ``bias`` elements."""
    shapes = [[2, 3, _E], [3 * _E, _E], [3 * _E], [_E, _E], [bias], [_E], [_F, _E], [_F], [_E, _F]]
    nodes = [_node("ones", [shape], [_tensor(i, shape=shape)]) for i, shape in enumerate(shapes, 1)]
    x, qkv_w, qkv_b, proj_w, short, vec, w1, b1, w2 = (_ref(i) for i in range(1, 10))
    if op == "mha":
        args = [x, x, x, _E, heads, qkv_w, qkv_b, proj_w, short, None, False, True, None]
        outputs = [_tensor(20, shape=[2, 3, _E]), _tensor(21, shape=[0])]
        return nodes + [_node("_native_multi_head_attention", args, outputs)]
    norms = [vec, vec, vec, vec]
    args = [x, _E, heads, qkv_w, qkv_b, proj_w, vec, False, False, 1e-5, *norms, w1, b1, w2]
    args += [short, None, None]
    outputs = [_tensor(20, shape=[2, 3, _E])]
    return nodes + [_node("_transformer_encoder_layer_fwd", args, outputs)]


_FUSED = {
    "mha-good": ("mha", 2, _E),
    "mha-heads0": ("mha", 0, _E),
    "mha-bias1": ("mha", 2, 1),
    "encoder-good": ("encoder", 2, _E),
    "encoder-heads0": ("encoder", 0, _E),
    "encoder-bias1": ("encoder", 2, 1),
}


def test_fused_attention_with_no_heads_is_refused(children):
    """The kernels of nn.MultiheadAttention's and nn.TransformerEncoderLayer's fused paths
    divide by ``num_heads`` unchecked: a file with 0 heads killed the process (SIGFPE),
    also from a file of an older op set."""
    for name in ("fused-mha-heads0", "v3-fused-mha-heads0"):
        refused(children[name], "_native_multi_head_attention", "integers >= 1, not 4 and 0")
    refused(children["fused-encoder-heads0"], "_transformer_encoder_layer_fwd", "not 4 and 0")


def test_fused_attention_biases_are_one_per_feature(children):
    """The kernels broadcast a one-element bias over every feature, a result the modules
    never give: refused."""
    refused(children["fused-mha-bias1"], "proj_bias must be vectors of 4 elements")
    refused(children["fused-encoder-bias1"], "ffn_bias_2", "not of shapes (4,), (8,), (1,)")


def test_fused_attention_on_good_weights_runs_the_kernel(children):
    for name in ("fused-mha-good", "fused-encoder-good"):
        outcome = children[name]
        assert outcome["stage"] == "ok" and outcome["same"] and not outcome["canary"], outcome


def test_the_checked_fused_paths_give_the_kernels_results():
    from tracebridge.runtime import checked_ops as c

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    attn = layer.self_attn
    x = torch.randn(2, 5, 8)
    weights = [attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias]
    rest = [layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias]
    rest += [layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias]
    mask = torch.rand(2, 5) > 0.7
    mask[:, 0] = False
    with torch.no_grad():
        for m, kind in ((None, None), (mask, 1)):
            args = [x, 8, 2, *weights, False, False, 1e-5, *rest, m, kind]
            got = c.transformer_encoder_layer_fwd(*args)
            assert torch.equal(got, torch._transformer_encoder_layer_fwd(*args))
            args = [x, x, x, 8, 2, *weights, m, True, True, kind]
            got = c.native_multi_head_attention(*args)
            want = torch._native_multi_head_attention(*args)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
