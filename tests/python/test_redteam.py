"""Hostile artifacts made by editing program.json of a normal one (red-team findings).

Each file is written through the artifact container's own writer, so the container is
valid and only the program is hostile. A load either refuses the file with an
ArtifactError, or every call of the loaded module ends in a TraceError: never a raw
exception from PyTorch or Python arithmetic. The tests marked xfail are holes of the
load-time checker (``check/program.py``) still open; they only load (never call) the file,
so they stay fast and small while the hole is open.
"""

from __future__ import annotations

import json
import zipfile
import zlib

import pytest
import torch

import tracebridge
from tracebridge.artifact.container import Writer


def _tensor(vid, dtype="float32", shape=(1,)):
    return {"id": vid, "kind": "Tensor", "dtype": dtype, "shape": list(shape)}


def _node(op, args, outputs, kwargs=None):
    spec = {"t": "leaf"} if len(outputs) == 1 else {"t": "none"}
    return {"op": op, "args": args, "kwargs": kwargs or {}, "outputs": outputs, "out_spec": spec}


def _ref(vid):
    return {"ref": vid}


def _int(vid):
    return {"id": vid, "kind": "int"}


def _float(vid):
    return {"id": vid, "kind": "float"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The members of ``neg(x)`` for a float vector x (input value 0): its program.json
    parsed, and its (empty) tensors member as bytes."""
    path = tmp_path_factory.mktemp("redteam") / "base.tb"
    tracebridge.trace(torch.neg, torch.randn(3)).save(path)
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json")), archive.read("tensors.safetensors")


def _write(path, doc, tensors: bytes) -> None:
    data = json.dumps(doc).encode()
    with open(path, "wb") as handle:
        writer = Writer(handle)
        members = (("program.json", data, 1), ("tensors.safetensors", tensors, 64))
        for name, member, align in members:
            writer.begin(name, len(member), align)
            writer.write(member)
            writer.end(zlib.crc32(member))
        writer.close()


def _hostile(tmp_path, base, nodes, name="hostile.tb"):
    doc = json.loads(json.dumps(base[0]))
    graph = doc["methods"]["forward"]
    graph["nodes"] = nodes
    graph["outputs"] = [_ref(nodes[-1]["outputs"][0]["id"])]
    graph["sources"] = {}
    path = tmp_path / name
    _write(path, doc, base[1])
    return path


# --- ops that fail on what the file asks: a TraceError, never a raw exception -------------

_FAILING = {
    "truediv_by_zero": [
        _node("scalar.truediv", [1, 0], [_float(1)]),
        _node("mul", [_ref(0), _ref(1)], [_tensor(2, shape=["s0"])]),
    ],
    "mod_by_zero": [
        _node("scalar.mod", [1, 0], [_int(1)]),
        _node("mul", [_ref(0), _ref(1)], [_tensor(2, shape=["s0"])]),
    ],
    "sqrt_of_negative": [
        _node("scalar.sqrt", [-1], [_float(1)]),
        _node("mul", [_ref(0), _ref(1)], [_tensor(2, shape=["s0"])]),
    ],
    "exp_overflow": [
        _node("scalar.exp", [1000], [_float(1)]),
        _node("mul", [_ref(0), _ref(1)], [_tensor(2, shape=["s0"])]),
    ],
    "negative_shift": [
        _node("scalar.rshift", [1, -1], [_int(1)]),
        _node("mul", [_ref(0), _ref(1)], [_tensor(2, shape=["s0"])]),
    ],
    "narrow_out_of_range": [_node("narrow", [_ref(0), 0, 2**62, 5], [_tensor(1)])],
    "select_out_of_range": [_node("select", [_ref(0), 0, 2**40], [_tensor(1)])],
    "getitem_out_of_range": [_node("getitem", [_ref(0), 2**63 - 1], [_tensor(1)])],
    "fill_past_int64": [
        _node("full", [[2], 2**64 - 1], [_tensor(1, "int64")], {"dtype": {"dtype": "int64"}})
    ],
    "negative_size": [_node("full", [[-1], 1.0], [_tensor(1)])],
    "view_as_complex_of_vector": [_node("view_as_complex", [_ref(0)], [_tensor(1)])],
}


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
@pytest.mark.parametrize("case", sorted(_FAILING))
def test_an_op_failing_is_a_trace_error(tmp_path, base, case, runtime):
    """Was a raw ZeroDivisionError, ValueError, OverflowError, IndexError or RuntimeError
    from the first call of a file that loads and validates."""
    path = _hostile(tmp_path, base, _FAILING[case])
    module = tracebridge.load(path, runtime=runtime)
    with pytest.raises(tracebridge.TraceError, match="method 'forward': an op failed") as info:
        module(torch.ones(3))
    assert info.value.__cause__ is not None
    assert "tracebridge validate" in str(info.value)


def test_an_op_failing_names_the_op(tmp_path, base):
    path = _hostile(tmp_path, base, _FAILING["narrow_out_of_range"])
    for runtime in ("codegen", "interpreter"):
        with pytest.raises(tracebridge.TraceError, match="narrow") as info:
            tracebridge.load(path, runtime=runtime)(torch.ones(3))
        assert isinstance(info.value.__cause__, IndexError)
        assert isinstance(info.value, IndexError)  # ``except IndexError`` works as in eager


def test_guard_errors_are_not_rewrapped():
    traced = tracebridge.trace(lambda x: x + 1 if bool(x.sum() > 0) else x - 1, torch.ones(3))
    with pytest.raises(tracebridge.GuardError) as info:
        traced(-torch.ones(3))
    assert type(info.value) is tracebridge.GuardError


# --- sizes the checker does not bound (check/program.py, _sizes / _literal_numel) ----------

_CHECKER = "check/program.py _GraphCheck._sizes"
_BIG = {
    # expand(-1, ...) keeps a dimension, so each expand's literal has one big size only:
    # three of them make a 3 * 2**42-element view whose sum runs for hours.
    "expand_keeps_dims_with_minus_one": (
        [
            _node("reshape", [_ref(0), [3, 1, 1, 1]], [_tensor(1, shape=[3, 1, 1, 1])]),
            _node("Tensor.expand", [_ref(1), [3, -1, -1, 2**14]], [_tensor(2)]),
            _node("Tensor.expand", [_ref(2), [-1, 2**14, -1, -1]], [_tensor(3)]),
            _node("Tensor.expand", [_ref(3), [-1, -1, 2**14, -1]], [_tensor(4)]),
            _node("sum", [_ref(4)], [_tensor(5, shape=[])]),
        ],
        f"{_CHECKER}: an expand/broadcast_to size of -1 keeps the input's dimension, so "
        "bound the product of the output shape (track literal shapes through the graph), "
        "or bound the number of expand nodes chained on one value",
    ),
    "size_from_scalar_arithmetic_on_literals": (
        [
            _node("scalar.mul", [2**20, 2**20], [_int(1)]),
            _node("zeros", [[_ref(1), 2**10]], [_tensor(2)]),
        ],
        f"{_CHECKER}: a size argument holding a ref to a scalar.* result computed only "
        "from literals is a literal: fold scalar ops on literals and bound the result",
    ),
    "arange_from_a_negative_start": (
        [_node("arange", [-(2**40), 0], [_tensor(1, "int64")])],
        f"{_CHECKER}: arange's size is (end - start) / step, not end: bound "
        "ceil((end - start) / step) for literal start, end and step",
    ),
    "arange_with_a_tiny_step": (
        [_node("arange", [0, 10, 1e-12], [_tensor(1)])],
        f"{_CHECKER}: bound ceil((end - start) / step) for arange with a literal step",
    ),
    "eye_rows_times_columns": (
        [_node("eye", [2**20, 2**20], [_tensor(1)])],
        f"{_CHECKER}: eye(n, m) makes n * m elements; each size argument is bounded "
        "alone: bound the product of n and m",
    ),
    "tril_indices_rows_times_columns": (
        [_node("tril_indices", [2**15, 2**15], [_tensor(1, "int64")])],
        f"{_CHECKER}: tril_indices/triu_indices(row, col) make about row * col * 2 "
        "elements: bound the product",
    ),
    "histc_bins": (
        [_node("histc", [_ref(0)], [_tensor(1)], {"bins": 2**40})],
        f"{_CHECKER}: add 'bins' to ops.SIZE_ARGUMENTS (ir/ops.py and shared_ir/ops.json)",
    ),
    "multinomial_num_samples": (
        [_node("multinomial", [_ref(0), 2**40], [_tensor(1, "int64")], {"replacement": True})],
        f"{_CHECKER}: add 'num_samples' to ops.SIZE_ARGUMENTS",
    ),
    "combinations_r": (
        [_node("combinations", [_ref(0)], [_tensor(1)], {"r": 30})],
        f"{_CHECKER}: combinations makes C(n, r) * r elements; bound 'r' (say r <= 8) "
        "or refuse it as a literal past a small limit",
    ),
    "upsample_scale_factor": (
        [
            _node("reshape", [_ref(0), [1, 1, 3]], [_tensor(1, shape=[1, 1, 3])]),
            _node("upsample_nearest1d", [_ref(1), None, [1e9]], [_tensor(2)]),
        ],
        f"{_CHECKER}: bound the product of literal scale factors of interpolate/upsample_* "
        "ops (scale_factors, scale_factor) like a size",
    ),
}


# Closed: sizes whose element count is a product of size arguments (ops.SIZE_PRODUCTS), the
# length of a range (ops.SIZE_RANGES), the bins/num_samples size arguments, and sizes
# computed by scalar ops from literals (folded by the checker); expands of shapes the file
# decides, combinations' r and upsampling scale factors (check/budget.py, LIMITS).
_BOUNDED = frozenset(
    """arange_from_a_negative_start arange_with_a_tiny_step eye_rows_times_columns
    tril_indices_rows_times_columns histc_bins multinomial_num_samples
    size_from_scalar_arithmetic_on_literals expand_keeps_dims_with_minus_one combinations_r
    upsample_scale_factor""".split()
)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(k)
        if k in _BOUNDED
        else pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=r))
        for k, (_, r) in _BIG.items()
    ],
)
def test_sizes_asked_by_the_file_are_bounded_at_load(tmp_path, base, case):
    """Each file loads today; its first call allocates terabytes or runs for hours (a
    memory-limited process gets a TraceError from the allocator, an unlimited one swaps)."""
    path = _hostile(tmp_path, base, _BIG[case][0])
    with pytest.raises(tracebridge.ArtifactError, match="resource limits"):
        tracebridge.load(path)


def test_an_op_error_quotes_its_own_module_not_another(tmp_path, base):
    """The generated code of every method was filed in linecache as ``<tracebridge:forward>``:
    a module compiled later replaced the lines of one compiled earlier, so an error of one
    artifact quoted the code of another (here: a harmless one, naming ``neg``)."""
    hostile = tracebridge.load(_hostile(tmp_path, base, _FAILING["narrow_out_of_range"]))
    with pytest.raises(tracebridge.TraceError):
        hostile(torch.ones(3))  # compiles (and keeps) the hostile module's function first
    harmless = tracebridge.trace(torch.neg, torch.randn(3))
    harmless(torch.ones(3))  # compiled second, with the same method name
    with pytest.raises(tracebridge.TraceError) as info:
        hostile(torch.ones(3))
    assert "failed at narrow" in str(info.value) and "neg" not in str(info.value)


# --- state names that collide with the rebuilt module (api.py TracedModule._rebuild) -------


def _renamed_state(tmp_path, mapping: dict[str, str]):
    """A traced Linear whose state is renamed (program.json, safetensors header, checksum)."""
    import hashlib
    import struct

    path = tmp_path / "linear.tb"
    tracebridge.trace(torch.nn.Linear(3, 2), torch.rand(4, 3)).save(path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        tensors = archive.read("tensors.safetensors")
    (size,) = struct.unpack("<Q", tensors[:8])
    header = {mapping.get(k, k): v for k, v in json.loads(tensors[8 : 8 + size]).items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 64)
    tensors = struct.pack("<Q", len(text)) + text + tensors[8 + size :]
    doc["state"] = {mapping.get(k, k): v for k, v in doc["state"].items()}
    for graph in doc["methods"].values():
        for node in graph["nodes"]:
            if node["op"] == "prim.state":
                node["args"][0] = mapping.get(node["args"][0], node["args"][0])
    doc["tensors"]["sha256"] = hashlib.sha256(tensors).hexdigest()
    out = tmp_path / "renamed.tb"
    _write(out, doc, tensors)
    return out


@pytest.mark.parametrize(
    "mapping",
    [{"weight": "training"}, {"weight": "_modules"}, {"weight": "bias.x"}, {"weight": "cpu"}],
    ids=["training", "_modules", "parent_of_bias", "cpu"],
)
def test_state_names_that_collide_with_the_module_are_refused(tmp_path, mapping):
    path = _renamed_state(tmp_path, mapping)
    with pytest.raises(tracebridge.ArtifactError, match=r"\[rule: names\]"):
        tracebridge.load(path)


def test_renamed_state_loads_when_the_name_is_plain(tmp_path):
    """The renaming helper itself makes a valid file (so the xfail above is the names)."""
    module = tracebridge.load(_renamed_state(tmp_path, {"weight": "w"}))
    assert module(torch.rand(4, 3)).shape == (4, 2)


# --- kernels that trust their arguments (runtime/support.py _CHECKED_IMPLS) ----------------


def _embedding_bag_file(tmp_path, base, offsets):
    def literal(vid, data, dtype):
        return _node("tensor", [data], [_tensor(vid, dtype)], {"dtype": {"dtype": dtype}})

    outputs = [_tensor(4), _tensor(5, "int64"), _tensor(6, "int64"), _tensor(7, "int64")]
    nodes = [
        literal(1, [[1.0, 2.0], [3.0, 4.0]], "float32"),
        literal(2, [0, 1], "int64"),
        literal(3, offsets, "int64"),
        _node("embedding_bag", [_ref(1), _ref(2), _ref(3)], outputs),
    ]
    nodes[-1]["out_spec"] = {"t": "tuple", "c": [{"t": "leaf"}] * 4}
    return _hostile(tmp_path, base, nodes)


def test_embedding_bag_offsets_that_crashed_the_process_are_refused(tmp_path, base):
    """PyTorch's kernel reads indices[offsets[i]] unchecked: offsets [0, -10**12] crashed
    the process (SIGSEGV, in Python and in R's session alike). Run in a fresh process, so
    that a regression fails this test instead of killing the suite."""
    from .conftest import run_fresh_python

    path = _embedding_bag_file(tmp_path, base, [0, -(10**12)])
    done = run_fresh_python(
        f"""
        import torch, tracebridge
        module = tracebridge.load({str(path)!r})
        try:
            module(torch.ones(3))
        except tracebridge.TraceError as exc:
            print("refused:", exc)
        """,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "offsets must be non-negative" in done.stdout


@pytest.mark.parametrize("offsets", [[0, -7], [0, 2, 1], [0, 3]])
def test_embedding_bag_offsets_are_checked(tmp_path, base, offsets):
    """[0, -7] read 8 bytes before the indices and quoted them in PyTorch's error."""
    for runtime in ("codegen", "interpreter"):
        module = tracebridge.load(_embedding_bag_file(tmp_path, base, offsets), runtime=runtime)
        with pytest.raises(tracebridge.TraceError, match="offsets must be non-negative"):
            module(torch.ones(3))


def test_embedding_bag_with_good_offsets_is_unchanged():
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
    for runtime in ("codegen", "interpreter"):
        traced = tracebridge.trace(bag, (indices, offsets), runtime=runtime)
        assert torch.equal(traced(indices, offsets), bag(indices, offsets))
        assert torch.equal(
            traced(indices, torch.tensor([0, 8])), bag(indices, torch.tensor([0, 8]))
        )


# --- output specs (check/program.py _leaves) ------------------------------------------------


@pytest.mark.parametrize("name, fields", [("P", ["def"]), ("P", ["a b"]), ("P", ["a", "a"])])
def test_namedtuple_specs_are_checked_at_load(tmp_path, base, name, fields):
    doc = json.loads(json.dumps(base[0]))
    graph = doc["methods"]["forward"]
    graph["out_spec"] = {
        "t": "namedtuple",
        "name": name,
        "fields": fields,
        "c": [{"t": "leaf"}] * len(fields),
    }
    graph["outputs"] = [_ref(1)] * len(fields)
    path = tmp_path / "namedtuple.tb"
    _write(path, doc, base[1])
    with pytest.raises(tracebridge.ArtifactError, match="spec"):
        tracebridge.load(path)


# --- parsing cost (artifact/archive.py _open, check/program.py LIMITS) ----------------------


def test_many_json_containers_are_refused_before_parsing(tmp_path, base):
    doc = json.loads(json.dumps(base[0]))
    doc["meta"] = {"x": "@@"}
    raw = json.dumps(doc).replace('"@@"', "[" + ",".join(["{}"] * 2**19) + "]").encode()
    path = tmp_path / "containers.tb"
    with open(path, "wb") as handle:
        writer = Writer(handle)
        for name, member, align in (("program.json", raw, 1), ("tensors.safetensors", base[1], 64)):
            writer.begin(name, len(member), align)
            writer.write(member)
            writer.end(zlib.crc32(member))
        writer.close()
    with pytest.raises(tracebridge.ArtifactError, match="resource limits"):
        tracebridge.load(path)


def test_literal_sizes_are_bounded_per_graph(tmp_path, base):
    nodes = []
    for i in range(10):
        nodes.append(_node("ones", [[2**28]], [_tensor(1 + 2 * i, shape=[2**28])]))
        nodes.append(_node("sum", [_ref(1 + 2 * i)], [_tensor(2 + 2 * i, shape=[])]))
    path = _hostile(tmp_path, base, nodes)
    with pytest.raises(tracebridge.ArtifactError, match="resource limits"):
        tracebridge.load(path)  # never called: the call is what takes the time
