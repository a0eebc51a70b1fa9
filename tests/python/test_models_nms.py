"""torchvision's non-maximum suppression as a checked op (``torchvision.nms``, op-set 6).

A detector's post-processing calls ``torchvision.ops.nms`` or ``batched_nms``, which call the
registered operator ``torch.ops.torchvision.nms``: the tracer records it as one node, the
checker counts its bytes and work where the file decides ``N``, both runtimes run
torchvision's own kernel after checking every argument, and a process without torchvision
refuses the program at load, naming the op, the line and the remedy (there is no stand-in:
see runtime/torchvision_ops.py).
"""

from __future__ import annotations

import importlib
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.check.program import LIMITS, check_program
from tracebridge.ir import ops
from tracebridge.runtime import folding, torchvision_ops

from .graph_helpers import loaded
from .test_check_program import r_verdicts, write

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _zoo_env():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("zoo_env")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _import_torchvision():
    """torchvision with its operators, or None. The project's pin (0.28.0) is a CUDA build
    that imports on the CPU wheel once its two operators are declared (benchmarks/zoo_env.py
    does it, with a plain-PyTorch CPU kernel standing in for the C++ one, as in the zoo;
    the zoo's harness tests import it at collection, before this module's tests run)."""
    try:
        import torchvision

        if not torchvision.extension._has_ops():  # imported after zoo_env declared the ops
            _zoo_env().allow_python_ops()
        return torchvision if torchvision.extension._has_ops() else None
    except Exception:
        pass
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # what the failed import left half-made
    try:
        zoo_env = _zoo_env()  # before torchvision, which it lets import
        torchvision = importlib.import_module("torchvision")
        zoo_env.allow_python_ops()
        return torchvision
    except Exception:
        return None


@pytest.fixture(scope="module")
def tv():
    found = _import_torchvision()
    if found is None:
        pytest.skip("torchvision is not importable here")
    return found


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class TinyDetector(nn.Module):
    """A detection head's post-processing, as torchvision's detectors write it: scores and
    boxes from features, a score threshold, per-class NMS (``batched_nms``), the best few."""

    def __init__(self, classes: int = 3, keep: int = 6):
        super().__init__()
        self.classes, self.keep = classes, keep
        self.box = nn.Linear(8, 4)
        self.cls = nn.Linear(8, classes)

    def forward(self, features):
        from torchvision.ops import batched_nms, nms

        shift = self.box(features)
        corner = features[:, :2] * 10
        boxes = torch.cat([corner, corner + shift[:, 2:].abs() * 5 + 1], dim=1)
        scores, labels = self.cls(features).softmax(-1).max(-1)
        keep = scores > 0.2
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        kept = batched_nms(boxes, scores, labels, 0.5)[: self.keep]
        plain = nms(boxes, scores, 0.3)
        return boxes[kept], scores[kept], labels[kept], plain


def _features(seed: int, count: int = 40) -> torch.Tensor:
    return torch.randn(count, 8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_detector_traces_runs_saves_and_loads(tv, runtime, tmp_path):
    torch.manual_seed(0)
    model = TinyDetector().eval()
    example = _features(0)
    traced = tracebridge.trace(model, example, runtime=runtime)
    nodes = [n.op for n in traced.program.methods["forward"].nodes]
    assert nodes.count("torchvision.nms") == 2
    again = loaded(traced, tmp_path, runtime=runtime)
    for seed in (0, 1, 2, 3):  # the example, and other features of its shape
        x = _features(seed)
        want = model(x)
        for fn in (traced, again):
            try:
                got = fn(x)
            except tracebridge.GuardError:
                continue  # another path (fewer boxes than kept): refused, never wrong
            assert all(torch.equal(a, b) for a, b in zip(got, want))
    got = again(example)
    assert all(torch.equal(a, b) for a, b in zip(got, model(example)))


def test_equal_scores_keep_the_kernel_s_order(tv, tmp_path):
    """Boxes with equal scores that overlap: which one survives is the kernel's sort."""

    def suppress(boxes, scores):
        return tv.ops.nms(boxes, scores, 0.5)

    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10.5], [20, 20, 30, 30]])
    scores = torch.tensor([0.5, 0.5, 0.5, 0.5])
    traced = tracebridge.trace(suppress, (boxes, scores))
    again = loaded(traced, tmp_path)
    for b, s in ((boxes, scores), (boxes.flip(0), scores), (boxes * 2, scores.flip(0))):
        assert torch.equal(again(b, s), tv.ops.nms(b, s, 0.5))


@pytest.mark.parametrize("threshold", [float("nan"), -0.5, 0.0, 1.0])
def test_thresholds_torchvision_takes_are_taken(tv, threshold, tmp_path):
    """torchvision takes any number (a NaN keeps every box, a negative one suppresses every
    box that touches a kept one): a traced call gives what eager gives."""
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]])
    scores = torch.tensor([0.9, 0.8, 0.7])

    def suppress(b, s):
        return tv.ops.nms(b, s, threshold)

    again = loaded(tracebridge.trace(suppress, (boxes, scores)), tmp_path)
    assert torch.equal(again(boxes, scores), tv.ops.nms(boxes, scores, threshold))


def test_the_registered_operator_is_named_in_the_op_set(tv):
    assert ops.canonical_name(torch.ops.torchvision.nms) == "torchvision.nms"
    assert ops.canonical_name(torch.ops.torchvision.nms.default) == "torchvision.nms"
    info = ops.info("torchvision.nms")
    assert "checked" in info.flags and ops.SINCE["torchvision.nms"] == 6 < ops.OPSET_VERSION


def test_nothing_that_feeds_nms_is_rounded(tv):
    """nms decides (its result is indices): the values it reads are decisions' inputs, so
    no batch norm before it is folded into its convolution (runtime/folding.py)."""
    model = TinyDetector().eval()
    traced = tracebridge.trace(model, _features(0))
    graph = traced.program.methods["forward"]
    decide = folding.values_that_decide(graph)
    for node in graph.nodes:
        if node.op == "torchvision.nms":
            assert node.args[0].id in decide and node.args[1].id in decide


# --- crafted files ---------------------------------------------------------------------------


BOXES = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]])
SCORES = torch.tensor([0.9, 0.8, 0.7])


def _nms_doc(args, kwargs=None, dets_shape=("s0", "s1"), scores_shape=("s2",), dtypes=None):
    """A one-node program: ``torchvision.nms`` on inputs dets (id 0) and scores (id 1)."""
    leaf = {"t": "leaf"}
    dtypes = dtypes or ("float32", "float32")
    return {
        "format": "tracebridge",
        "format_version": 1,
        "opset_version": ops.OPSET_VERSION,
        "producer": {"name": "tracebridge", "version": "0", "language": "python"},
        "kind": "function",
        "methods": {
            "forward": {
                "inputs": [
                    {"id": 0, "kind": "Tensor", "dtype": dtypes[0], "shape": list(dets_shape)},
                    {"id": 1, "kind": "Tensor", "dtype": dtypes[1], "shape": list(scores_shape)},
                ],
                "in_spec": {
                    "t": "tuple",
                    "c": [{"t": "tuple", "c": [leaf, leaf]}, {"t": "dict", "keys": [], "c": []}],
                },
                "nodes": [
                    {
                        "op": "torchvision.nms",
                        "args": args,
                        "kwargs": kwargs or {},
                        "outputs": [{"id": 2, "kind": "Tensor", "dtype": "int64", "shape": [3]}],
                        "out_spec": leaf,
                        "loc": "detector.py:7",
                    }
                ],
                "outputs": [{"ref": 2}],
                "out_spec": leaf,
            }
        },
        "state": {},
    }


def _crafted(tmp_path, args, runtime="codegen", like=(BOXES, SCORES)):
    """The one-node program loaded, with inputs of the rank and dtype of ``like``'s (a
    file's inputs may be anything: the op checks its own arguments)."""
    doc = _nms_doc(
        args,
        dets_shape=[f"s{i}" for i in range(like[0].dim())],
        scores_shape=[f"s{like[0].dim() + i}" for i in range(like[1].dim())],
        dtypes=[str(t.dtype).removeprefix("torch.") for t in like],
    )
    check_program(doc, "crafted.tb")
    header = b"{}"
    tensors = len(header).to_bytes(8, "little") + header
    return tracebridge.load(write(tmp_path / "crafted.tb", doc, tensors), runtime=runtime)


@pytest.mark.parametrize(
    "args, words",
    [
        ([{"ref": 0}, {"ref": 1}, "0.5"], "argument 2 of torchvision.nms must be"),
        ([{"ref": 0}, [0.9, 0.8], 0.5], "argument 1 of torchvision.nms must be"),
        ([{"ref": 0}, {"ref": 1}, 0.5, 1], "at most 3 positional arguments"),
    ],
)
def test_crafted_arguments_of_the_wrong_kind_are_refused_at_load(args, words):
    with pytest.raises(tracebridge.ArtifactError, match=words):
        check_program(_nms_doc(args), "crafted.tb")


def test_nms_of_more_boxes_than_the_work_limit_is_refused_at_load():
    """N boxes from sizes the file holds (a zeros of [N, 4]) compare N * N pairs."""
    count = math.isqrt(LIMITS["work_macs"]) + 1
    doc = _nms_doc([{"ref": 3}, {"ref": 1}, 0.5])
    nodes = doc["methods"]["forward"]["nodes"]
    made = {"id": 3, "kind": "Tensor", "dtype": "float32", "shape": [count, 4]}
    nodes.insert(0, {"op": "zeros", "args": [[count, 4]], "kwargs": {}, "outputs": [made],
                     "out_spec": {"t": "leaf"}, "loc": "detector.py:6"})  # fmt: skip
    with pytest.raises(tracebridge.ArtifactError, match="box comparisons"):
        check_program(doc, "crafted.tb")


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
@pytest.mark.parametrize(
    "boxes, scores, words",
    [
        (BOXES[:, :3], SCORES, "dets must be a tensor of shape \\[N, 4\\], not shape \\[3, 3\\]"),
        (BOXES[0], SCORES, "dets must be a tensor of shape \\[N, 4\\], not shape \\[4\\]"),
        (BOXES.long(), SCORES, "dets must be floating point, not torch.int64"),
        (BOXES, SCORES[:2], "scores must be a tensor of shape \\[3\\] \\(one per box\\)"),
        (BOXES, SCORES[None], "scores must be a tensor of shape \\[3\\]"),
        (BOXES, SCORES.double(), "must have the dtype and device of dets"),
    ],
)
def test_crafted_calls_are_checked_before_the_kernel(tv, runtime, boxes, scores, words, tmp_path):
    fn = _crafted(tmp_path, [{"ref": 0}, {"ref": 1}, 0.5], runtime=runtime)
    assert torch.equal(fn(BOXES, SCORES), tv.ops.nms(BOXES, SCORES, 0.5))
    fn = _crafted(tmp_path, [{"ref": 0}, {"ref": 1}, 0.5], runtime, like=(boxes, scores))
    with pytest.raises(tracebridge.OpError, match=words):
        fn(boxes, scores)


def test_a_threshold_that_is_not_a_number_is_refused_at_the_call(tv, tmp_path):
    """The kind ``float`` takes a 0-dim tensor (as PyTorch's ops do); the operator does not."""
    doc = _nms_doc([{"ref": 0}, {"ref": 1}, {"ref": 1}])
    check_program(doc, "crafted.tb")
    header = b"{}"
    path = write(tmp_path / "t.tb", doc, len(header).to_bytes(8, "little") + header)
    with pytest.raises(tracebridge.OpError, match="iou_threshold must be a number, not Tensor"):
        tracebridge.load(path)(BOXES, SCORES)


def test_more_boxes_than_the_work_limit_are_refused_before_the_kernel(tv, tmp_path):
    fn = _crafted(tmp_path, [{"ref": 0}, {"ref": 1}, 0.5])
    count = math.isqrt(LIMITS["work_macs"]) + 1
    with pytest.raises(tracebridge.OpError, match=f"nms of {count} boxes may compare"):
        fn(torch.zeros(count, 4), torch.zeros(count))


def test_the_byte_bound_counts_the_cuda_kernel_s_mask():
    """On CUDA the kernel allocates N x ceil(N / 64) int64 words: the bound counts them
    (checked on a meta-free path: the message is made before any kernel is looked up)."""
    count = 100_000  # 8e5 bytes of indices; the mask would be 1.25e9 bytes
    boxes = torch.zeros(count, 4)
    dets = boxes.expand(count, 4)
    assert count * -(-count // 64) * 8 > torchvision_ops.ALLOC_BYTES
    if torch.cuda.is_available():
        with pytest.raises(torchvision_ops.CheckFailed, match="would allocate"):
            torchvision_ops.nms(dets.cuda(), torch.zeros(count, device="cuda"), 0.5)
    else:  # on the CPU the same N is within the bytes limit: only the work limit applies
        assert count * 8 <= torchvision_ops.ALLOC_BYTES and count * count <= LIMITS["work_macs"]


# --- without torchvision ---------------------------------------------------------------------


@pytest.fixture
def no_torchvision(monkeypatch):
    """A process where torchvision's operator is not registered and cannot be imported."""
    monkeypatch.setattr(torchvision_ops, "registered_kernel", lambda namespace, name: None)
    monkeypatch.setattr(torchvision_ops, "_FOUND", {})
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision: ImportError


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_without_torchvision_load_refuses_naming_the_op_line_and_remedy(
    no_torchvision, runtime, tmp_path
):
    doc = _nms_doc([{"ref": 0}, {"ref": 1}, 0.5])
    header = b"{}"
    path = write(tmp_path / "det.tb", doc, len(header).to_bytes(8, "little") + header)
    with pytest.raises(tracebridge.ArtifactError) as refused:
        tracebridge.load(path, runtime=runtime)
    text = str(refused.value)
    assert "the program calls torchvision.nms (traced at detector.py:7)" in text
    assert "import torchvision failed: ModuleNotFoundError" in text
    assert "pip install torchvision" in text and "does not stand in" in text


def test_without_torchvision_a_direct_call_is_refused_not_approximated(no_torchvision):
    with pytest.raises(torchvision_ops.CheckFailed, match="import torchvision failed"):
        torchvision_ops.nms(BOXES, SCORES, 0.5)


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_accepts_a_traced_detector(tv, tmp_path):
    """R's base-R reader checks a file against ops.json: the new row lets it read one."""
    traced = tracebridge.trace(TinyDetector().eval(), _features(0))
    path = tmp_path / "detector.tb"
    traced.save(path)
    assert r_verdicts([path], tmp_path)[path.name] == "accept"


def test_the_load_time_budget_counts_the_indices_in_bytes():
    """With ``N`` known from the file, nms makes up to ``N`` int64 indices: counted in bytes
    against ``alloc_bytes`` (here a limit just under them) and ``N * N`` pairs as work."""
    from tracebridge.check.budget import Budget

    count = 1000
    state = {"boxes": {"kind": "constant", "dtype": "float32", "shape": [count, 4]}}
    limits = dict(LIMITS, alloc_bytes=count * 8 - 1)
    budget = Budget(state, limits, frozenset())
    budget.state_read("boxes", 7)
    node = {"args": [{"ref": 7}, {"ref": 8}, 0.5], "kwargs": {}, "outputs": [{"id": 9}]}
    reason = budget.node("torchvision.nms", node)
    assert f"torchvision.nms makes a tensor of shape [{count}] ({count * 8} bytes)" in reason
    budget = Budget(state, dict(LIMITS), frozenset())
    budget.state_read("boxes", 7)
    assert budget.node("torchvision.nms", node) == "" and budget.work_total == count * count
