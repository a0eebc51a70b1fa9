"""The op set allowed by design and the one checker (issue 11 points 2 and 3, issue 10 points
3 and 4): each finding of the issue is a regression test here, and R's reader agrees with
Python's document rules on a corpus of crafted files (issue 17 item 6: the execution rules
are Python's alone; the full checker refuses what the corpus says it refuses).
"""

from __future__ import annotations

import copy
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tracebridge
from tracebridge.artifact import read_json
from tracebridge.check.program import LIMITS, RESERVED_METHODS, check_json_size, check_program
from tracebridge.ir import dtypes, ops

from .graph_helpers import skip_unless_tables_torch
from .models import ConvBNLinear
from .r_reader import run_r

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "shared_ir" / "vectors"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """A real artifact's program.json (a module with state, guards-free) and its tensors."""
    path = tmp_path_factory.mktemp("base") / "net.tb"
    traced = tracebridge.trace(ConvBNLinear().eval(), torch.rand(2, 3, 8, 8))
    tracebridge.save(traced, path)
    with zipfile.ZipFile(path) as archive:
        return {
            "doc": json.loads(archive.read("program.json")),
            "tensors": archive.read("tensors.safetensors"),
        }


def write(path: Path, doc, tensors: bytes) -> Path:
    """An artifact holding ``doc`` as program.json (text as is when it is a string)."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", text)
        archive.writestr("tensors.safetensors", tensors)
    return path


def forward(doc) -> dict:
    return doc["methods"]["forward"]


def node_doc(op, args, kwargs=None, outputs=1, kind="Tensor"):
    """A one-node function program on one input ``x`` (id 0)."""
    outs = [{"id": 1 + i, "kind": kind, "dtype": "float32", "shape": [2]} for i in range(outputs)]
    if kind != "Tensor":
        outs = [{"id": 1 + i, "kind": kind} for i in range(outputs)]
    return {
        "format": "tracebridge",
        "format_version": 1,
        "opset_version": ops.OPSET_VERSION,
        "producer": {"name": "tracebridge", "version": "0", "language": "python"},
        "kind": "function",
        "methods": {
            "forward": {
                "inputs": [
                    {"id": 0, "kind": "Tensor", "dtype": "float32", "shape": ["s0"], "name": "x"}
                ],
                "in_spec": {
                    "t": "tuple",
                    "c": [{"t": "tuple", "c": [{"t": "leaf"}]}, {"t": "dict", "keys": [], "c": []}],
                },
                "nodes": [
                    {
                        "op": op,
                        "args": args,
                        "kwargs": kwargs or {},
                        "outputs": outs,
                        "out_spec": {"t": "leaf"} if outputs == 1 else None,
                        "loc": "model.py:3",
                    }
                ],
                "outputs": [{"ref": 1 if outputs else 0}],
                "out_spec": {"t": "leaf"},
            }
        },
        "state": {},
    }


def refused(doc, *words):
    with pytest.raises(tracebridge.ArtifactError) as info:
        check_program(doc, "crafted.tb")
    for word in words:
        assert word in str(info.value), str(info.value)
    return str(info.value)


# --- the op set ---------------------------------------------------------------------------


RAW_MEMORY = [
    "Tensor.const_data_ptr",
    "Tensor.data_ptr",
    "_from_blob",
    "_nested_view_from_buffer",
    "Tensor.untyped_storage",
    "Tensor.storage",
    "Tensor.set_",
    "Tensor.resize_",
    "_copy_from",
    "_foreach_add",
    "_test_string_default",
    "mkldnn_linear",
    "Tensor.share_memory_",
    "from_file",
    "save",
]


@pytest.mark.parametrize("op", RAW_MEMORY)
def test_ops_reaching_raw_memory_are_not_in_the_set(op):
    assert not ops.is_known(op)
    refused(node_doc(op, [{"ref": 0}]), f"'{op}'", "not in the op set", "node 0")


def test_address_read_graph_from_the_issue_is_refused_at_load(base, tmp_path):
    """const_data_ptr -> scalar arithmetic -> _from_blob: the three-node memory reader."""
    doc = node_doc("Tensor.const_data_ptr", [{"ref": 0}], outputs=1, kind="int")
    graph = forward(doc)
    graph["nodes"].append(
        {
            "op": "_from_blob",
            "args": [{"ref": 1}, [16]],
            "kwargs": {"dtype": {"dtype": "uint8"}},
            "outputs": [{"id": 2, "kind": "Tensor", "dtype": "uint8", "shape": [16]}],
            "out_spec": {"t": "leaf"},
            "loc": None,
        }
    )
    graph["outputs"] = [{"ref": 2}]
    path = write(tmp_path / "reader.tb", doc, base["tensors"])
    with pytest.raises(tracebridge.ArtifactError, match="const_data_ptr"):
        tracebridge.load(path)


def test_every_private_op_is_reviewed_with_a_reason():
    for name in ops.all_names():
        short = name.rsplit(".", 1)[-1]
        if short.startswith("_") and not short.startswith("__"):
            assert ops.REVIEWED_PRIVATE.get(name), name
            assert "private" in ops.info(name).flags


def test_the_set_is_a_curated_list_and_every_listed_op_resolves():
    assert ops.MISSING == [], ops.MISSING
    curated = set(ops._curated())
    for name in ops.all_names():
        assert name in curated or name.startswith(("prim.", "scalar.")), name
    # as_strided is in (op-set 4), bounded to its input's own elements: test_models_views.py
    # prim.storage_offset (op-set 8) reads an offset, an integer, as prim.stride reads one
    names = [n for n in ops.all_names() if n != "prim.storage_offset"]
    for forbidden in ("data_ptr", "storage", "from_blob", "_foreach", "_test_"):
        assert not [n for n in names if forbidden in n], forbidden


def test_the_set_covers_common_model_ops():
    for name in (
        "conv2d conv1d batch_norm layer_norm group_norm scaled_dot_product_attention "
        "embedding upsample_bilinear2d upsample_nearest2d gelu silu max_pool2d "
        "adaptive_avg_pool2d softmax dropout linear matmul einsum cat stack"
    ).split():
        assert ops.is_known(name), name


def test_empty_runs_zero_filled():
    """Uninitialised memory would show a file what the process freed before."""
    assert torch.equal(ops.impl_of("empty")(3, 4), torch.zeros(3, 4))
    assert torch.equal(ops.impl_of("Tensor.new_empty")(torch.ones(2), (2,)), torch.zeros(2))


def test_tracer_refuses_ops_outside_the_set_naming_the_line():
    def f(x):
        return x + x.data_ptr()  # the line the error names

    with pytest.raises(tracebridge.UnsupportedOpError, match=r"test_check_program\.py:\d+"):
        tracebridge.trace(f, torch.ones(2))


def test_composites_still_descend_into_set_ops():
    traced = tracebridge.trace(lambda x: F.layer_norm(F.silu(x), (4,)), torch.rand(2, 4))
    recorded = [n.op for n in traced.program.methods["forward"].nodes]
    assert "layer_norm" in recorded and "silu" in recorded


# --- versions -----------------------------------------------------------------------------


def test_v1_golden_vectors_keep_loading():
    files = sorted(VECTORS.glob("*.tb"))
    assert files
    for path in files:
        doc, _ = read_json(path)
        assert doc["opset_version"] == 1
        tracebridge.load(path)


def test_v1_file_naming_a_removed_op_is_refused_with_a_clear_error():
    doc = node_doc("Tensor.const_data_ptr", [{"ref": 0}], kind="int")
    doc["opset_version"] = 1
    refused(doc, "removed after op-set version 1", "trace the model again")


def test_writer_writes_the_newest_opset(base):
    assert base["doc"]["opset_version"] == ops.OPSET_VERSION == 10


# --- SSA, order, specs --------------------------------------------------------------------


def test_undefined_value_is_refused_at_load_not_a_keyerror_at_run(base, tmp_path):
    doc = copy.deepcopy(base["doc"])
    graph = forward(doc)
    graph["nodes"][-1]["args"][0] = {"ref": 999}
    path = write(tmp_path / "undefined.tb", doc, base["tensors"])
    with pytest.raises(tracebridge.ArtifactError, match="uses %999 before it is defined"):
        tracebridge.load(path)


def test_value_used_before_its_node_is_refused(base):
    doc = copy.deepcopy(base["doc"])
    nodes = forward(doc)["nodes"]
    nodes[-1], nodes[-2] = nodes[-2], nodes[-1]
    refused(doc, "before it is defined", "[rule: SSA]")


def test_value_defined_twice_is_refused(base):
    doc = copy.deepcopy(base["doc"])
    nodes = forward(doc)["nodes"]
    nodes[-1]["outputs"][0]["id"] = nodes[-2]["outputs"][0]["id"]
    refused(doc, "defined twice")


def test_output_count_must_match_out_spec(base):
    doc = copy.deepcopy(base["doc"])
    forward(doc)["nodes"][-1]["outputs"] = []
    refused(doc, "0 outputs but out_spec has 1 leaves")


# --- names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["eval", "train", "to", "parameters", "state_dict", "code"])
def test_method_names_cannot_shadow_module_attributes(base, name):
    assert name in RESERVED_METHODS
    doc = copy.deepcopy(base["doc"])
    doc["methods"][name] = doc["methods"].pop("forward")
    doc["kind"] = "module"
    refused(doc, f"method name '{name}'", "loaded module's own attribute")


@pytest.mark.parametrize(
    "name", ["x\nimport os", "_private", "__class__", "a b", "forward()", "1x", "é"]
)
def test_method_names_follow_the_grammar(base, name):
    doc = copy.deepcopy(base["doc"])
    doc["methods"][name] = doc["methods"].pop("forward")
    refused(doc, "[A-Za-z][A-Za-z0-9_]*")


def test_state_and_keyword_names_and_loc_follow_the_grammar(base):
    doc = copy.deepcopy(base["doc"])
    key = next(iter(doc["state"]))
    doc["state"]["w\n__import__('os')"] = doc["state"].pop(key)
    refused(doc, "dotted path")
    doc = node_doc("sum", [{"ref": 0}], {"dim\nimport os": 0})
    refused(doc, "is not an identifier")
    doc = node_doc("relu", [{"ref": 0}])
    forward(doc)["nodes"][0]["loc"] = "model.py:3\nimport os\n#:1"
    refused(doc, "loc must be 'path:line'")


def test_names_like_generated_code_are_fine():
    """An input named like a generated variable or a builtin is legitimate: codegen must
    cope (its tests), the checker must not refuse it."""
    doc = node_doc("relu", [{"ref": 0}])
    forward(doc)["inputs"][0]["name"] = "getattr"
    check_program(doc)
    forward(doc)["inputs"][0]["name"] = "v4"
    check_program(doc)


# --- argument kinds -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,args,kwargs,words",
    [
        ("relu", [{"ref": 0}, "x"], {}, "at most 1 positional"),
        ("relu", ["x"], {}, "argument 0 of relu must be tensor"),
        ("sum", [{"ref": 0}], {"dim": "rows"}, "keyword 'dim' of sum"),
        ("sum", [{"ref": 0}], {"bogus": 1}, "sum takes no keyword 'bogus'"),
        ("Tensor.to", [{"ref": 0}, {"dict": []}], {}, "argument 1 of Tensor.to"),
        ("prim.state", [], {}, "prim.state takes 1 arguments"),
    ],
)
def test_argument_kinds_are_checked(op, args, kwargs, words):
    refused(node_doc(op, args, kwargs), words, "[rule: argument kinds]")


def test_legitimate_argument_forms_pass():
    for op, args, kwargs in [
        ("Tensor.view", [{"ref": 0}, 2, -1], {}),  # sizes spread over positions
        ("Tensor.view", [{"ref": 0}, {"tuple": [2, -1]}], {}),
        ("sum", [{"ref": 0}], {"dim": {"tuple": [0]}, "keepdim": True}),
        ("Tensor.to", [{"ref": 0}], {"dtype": {"dtype": "float64"}}),
        ("getitem", [{"ref": 0}, {"tuple": [{"slice": [None, 2, None]}, {"ellipsis": True}]}], {}),
        ("add", [{"ref": 0}, 2.5], {"alpha": 2}),
    ]:
        check_program(node_doc(op, args, kwargs))


# --- resource limits ----------------------------------------------------------------------


def test_expand_to_a_trillion_elements_then_sum_is_refused_at_load(base, tmp_path):
    doc = node_doc("Tensor.expand", [{"ref": 0}, 10**6, 10**6])
    graph = forward(doc)
    graph["nodes"].append(
        {
            "op": "sum",
            "args": [{"ref": 1}],
            "kwargs": {},
            "outputs": [{"id": 2, "kind": "Tensor", "dtype": "float32", "shape": []}],
            "out_spec": {"t": "leaf"},
        }
    )
    graph["outputs"] = [{"ref": 2}]
    path = write(tmp_path / "bomb.tb", doc, base["tensors"])
    with pytest.raises(tracebridge.ArtifactError, match="1000000000000 elements"):
        tracebridge.load(path)
    refused(node_doc("zeros", [[2**20, 2**20]]), "more than the limit")
    refused(node_doc("arange", [10**12]), "more than the limit")


def test_scalar_pow_bomb_is_refused_at_load_and_bounded_at_run():
    doc = node_doc("scalar.pow", [7, 10**9], kind="int")
    refused(doc, "scalar.pow by 1000000000", "[rule: resource limits]")
    doc = node_doc("scalar.lshift", [1, 10**9], kind="int")
    refused(doc, "scalar.lshift")
    with pytest.raises(ops.ScalarRangeError):
        ops.impl_of("scalar.pow")(7, 10**9)  # a traced base: refused before it is computed
    with pytest.raises(ops.ScalarRangeError):
        ops.impl_of("scalar.mul")(2**63, 2**63)
    assert ops.impl_of("scalar.pow")(2, 10) == 1024
    assert ops.impl_of("scalar.pow")(1, 10**9) == 1


def test_integer_literals_stay_in_int64_range():
    refused(node_doc("add", [{"ref": 0}, 2**70]), "outside int64")
    check_program(node_doc("add", [{"ref": 0}, -(2**63)]))


def test_nesting_depth_is_bounded():
    deep: object = 1
    for _ in range(LIMITS["depth"] + 5):
        deep = [deep]
    refused(node_doc("add", [{"ref": 0}, deep]), "nested more than")


def test_program_json_size_is_checked_before_parsing():
    check_json_size(LIMITS["program_bytes"])
    with pytest.raises(tracebridge.ArtifactError, match="more than the limit"):
        check_json_size(LIMITS["program_bytes"] + 1, "big.tb")


def test_integers_must_be_written_as_integers(base):
    doc = copy.deepcopy(base["doc"])
    forward(doc)["nodes"][0]["outputs"][0]["id"] = 5.0
    refused(doc, "is not an integer")


def test_every_message_names_the_method_node_and_rule():
    message = refused(node_doc("relu", ["x"]))
    assert "crafted.tb: method 'forward', node 0 (relu):" in message
    assert "[rule: argument kinds]" in message


# --- the tables and R ---------------------------------------------------------------------


def _gen():
    import importlib.util

    path = ROOT / "shared_ir" / "tools" / "gen_opset.py"
    spec = importlib.util.spec_from_file_location("gen_opset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exported_tables_are_current():
    skip_unless_tables_torch()
    for path, text in _gen().outputs().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} is stale: run .venv/bin/python shared_ir/tools/gen_opset.py"
        )


def test_dtype_table_is_the_one_the_ir_uses():
    from tracebridge import ir

    assert ir.DTYPE_NAMES == dtypes.DTYPE_NAMES and ir.DTYPE_SHORT == dtypes.DTYPE_SHORT
    table = json.loads((ROOT / "shared_ir" / "dtypes.json").read_text())
    assert table["float32"] == {
        "short": "f32",
        "safetensors": "F32",
        "itemsize": 4,
        "kind": "floating",
    }


# The R side: R/check.R sourced into a plain Rscript (no Python, no installed package),
# reading the program and the state as jit_inspect() does (graphs aside), so
# the comparison runs wherever R and jsonlite are, before or after the package is built.
R_CHECKER = r"""
for (path in readLines(args[[2]])) {
  r <- tryCatch({ read_state(path, read_program(path)); "accept" },
                error = function(e) paste("refuse", gsub("\n", " ", conditionMessage(e))))
  cat(basename(path), "\t", r, "\n", sep = "")
}
"""


def corpus(base: dict) -> dict[str, object]:
    """Crafted program.json documents, each a mutation of a real artifact."""
    good = base["doc"]
    cases: dict[str, object] = {"good": good}

    def mutate(name, edit):
        doc = copy.deepcopy(good)
        edit(doc)
        cases[name] = doc

    def set_node(i, **fields):
        return lambda d: forward(d)["nodes"][i].update(fields)

    last = len(forward(good)["nodes"]) - 1
    mutate("op_data_ptr", set_node(last, op="Tensor.const_data_ptr"))
    mutate("op_from_blob", set_node(last, op="_from_blob"))
    mutate("op_nested", set_node(last, op="_nested_view_from_buffer"))
    mutate("op_unknown", set_node(last, op="os.system"))
    mutate(
        "undefined_ref", lambda d: forward(d)["nodes"][last]["args"].__setitem__(0, {"ref": 999})
    )
    mutate("dup_id", lambda d: forward(d)["nodes"][last]["outputs"][0].update(id=0))
    mutate("method_eval", lambda d: d["methods"].update(eval=d["methods"].pop("forward")))
    mutate("method_newline", lambda d: d["methods"].update({"f\nx": d["methods"].pop("forward")}))
    mutate("method_underscore", lambda d: d["methods"].update(_f=d["methods"].pop("forward")))
    mutate("loc_newline", set_node(0, loc="a.py:1\nimport os"))
    mutate("loc_none", set_node(0, loc=None))
    mutate("kwarg_bad", set_node(last, kwargs={"a b": 1}))
    mutate("kwarg_unknown", set_node(last, kwargs={"bogus": 1}))
    mutate("arg_kind", lambda d: forward(d)["nodes"][last]["args"].__setitem__(0, "x"))
    mutate("int_huge", lambda d: forward(d)["nodes"][last]["args"].append(2**70))
    mutate("int_big_ok", set_node(last, op="add", args=[{"ref": 0}, 2**40], kwargs={}))
    mutate("int_edge", set_node(last, op="add", args=[{"ref": 0}, 2**64 - 1], kwargs={}))
    mutate("int_edge_over", set_node(last, op="add", args=[{"ref": 0}, 2**64], kwargs={}))
    mutate("float_id", lambda d: forward(d)["nodes"][0]["outputs"][0].update(id=1.0))
    mutate("version_float", lambda d: d.update(format_version=1.0))
    mutate("version_new", lambda d: d.update(format_version=99))
    mutate("opset_new", lambda d: d.update(opset_version=ops.OPSET_VERSION + 1))
    mutate("opset_v1", lambda d: d.update(opset_version=1))
    mutate(
        "opset_v1_removed",
        lambda d: (d.update(opset_version=1), set_node(last, op="Tensor.data_ptr")(d)),
    )
    mutate("count", lambda d: d["tensors"].update(count=99))
    mutate("dispatch_missing", lambda d: d.update(dispatch={"run": {"train": "x", "eval": "y"}}))
    mutate("function_params", lambda d: d.update(kind="function"))
    mutate("state_missing", lambda d: d["state"].pop(next(iter(d["state"]))))
    mutate("literal_two_keys", lambda d: forward(d)["nodes"][last]["args"].append({"a": 1, "b": 2}))
    mutate(
        "slice_short", set_node(last, op="getitem", args=[{"ref": 0}, {"slice": [1, 2]}], kwargs={})
    )
    mutate(
        "dtype_bad",
        set_node(last, op="Tensor.to", args=[{"ref": 0}, {"dtype": "float8"}], kwargs={}),
    )
    mutate(
        "device_bad",
        set_node(last, op="Tensor.to", args=[{"ref": 0}, {"device": "disk"}], kwargs={}),
    )
    mutate(
        "expand_bomb",
        set_node(last, op="Tensor.expand", args=[{"ref": 0}, 10**6, 10**6], kwargs={}),
    )
    mutate("view_spread", set_node(last, op="Tensor.view", args=[{"ref": 0}, 2, -1], kwargs={}))
    # prober18 F12: what PyTorch refuses anyway, written in the file (the input has rank 4)
    x = {"ref": 0}
    strided = {"op": "as_strided", "kwargs": {}}
    mutate("as_strided_bool_size", set_node(last, **strided, args=[x, [True, 3], [3, 1]]))
    mutate("as_strided_ok", set_node(last, **strided, args=[x, [2, 3], [3, 1], 0]))
    repeat = {"op": "repeat_interleave", "args": [x, 2]}
    mutate("repeat_bool", set_node(last, op="repeat_interleave", args=[x, True], kwargs={}))
    mutate("repeat_dim_7", set_node(last, **repeat, kwargs={"dim": 7}))
    mutate("repeat_dim_minus_4", set_node(last, **repeat, kwargs={"dim": -4}))
    broadcast = {"op": "broadcast_to", "kwargs": {}}
    mutate("broadcast_minus_2", set_node(last, **broadcast, args=[x, [-2, 3, 8, 8]]))
    mutate("broadcast_minus_1", set_node(last, **broadcast, args=[x, [-1, 3, 8, 8]]))
    mutate(
        "deep",
        lambda d: forward(d)["nodes"][last]["args"].append(json.loads("[" * 70 + "1" + "]" * 70)),
    )
    mutate("example_on_node", lambda d: forward(d)["nodes"][0]["outputs"][0].update(example=[1]))
    mutate("example_length", lambda d: forward(d)["inputs"][0].update(example=[1] * 9))
    mutate("example_negative", lambda d: forward(d)["inputs"][0].update(example=[-1, 2]))
    mutate("example_absent", lambda d: forward(d)["inputs"][0].pop("example", None))
    first_state = next(iter(good["state"]))
    mutate("alias_ok", lambda d: d.update(aliases={"tied.weight": first_state}))
    mutate("alias_target_missing", lambda d: d.update(aliases={"tied.weight": "nowhere"}))
    mutate("alias_is_state", lambda d: d.update(aliases={first_state: first_state}))
    mutate("alias_bad_name", lambda d: d.update(aliases={"a b": first_state}))
    mutate("alias_not_object", lambda d: d.update(aliases=["x"]))
    mutate("device_ok", lambda d: d["state"][first_state].update(device="cuda:0"))
    mutate("device_bad", lambda d: d["state"][first_state].update(device="cuda 0; rm"))
    mutate("device_number", lambda d: d["state"][first_state].update(device=0))
    # A non-persistent buffer's mark (optional, a boolean: a file without it reads as before).
    mutate("persistent_false", lambda d: d["state"][first_state].update(persistent=False))
    mutate("persistent_text", lambda d: d["state"][first_state].update(persistent="no"))
    mutate("eye_product", set_node(last, op="eye", args=[2**20, 2**20], kwargs={}))
    mutate("eye_ok", set_node(last, op="eye", args=[300, 400], kwargs={}))
    mutate("tril_product", set_node(last, op="tril_indices", args=[2**15, 2**15], kwargs={}))
    mutate("arange_tiny_step", set_node(last, op="arange", args=[0, 10, 1e-12], kwargs={}))
    mutate("arange_negative", set_node(last, op="arange", args=[-(2**40), 0], kwargs={}))
    mutate("arange_ok", set_node(last, op="arange", args=[-5, 10, 0.5], kwargs={}))
    mutate("arange_kw_step", set_node(last, op="arange", args=[0, 1], kwargs={"step": 1e-12}))
    mutate(
        "histc_bins",
        set_node(last, op="histc", args=[{"ref": 0}], kwargs={"bins": 2**40}),
    )
    mutate(
        "multinomial_samples",
        set_node(last, op="multinomial", args=[{"ref": 0}, 2**40], kwargs={"replacement": True}),
    )

    def folded(a, b, size, op="scalar.mul"):
        """op(a, b) computed into a size of the last node (a zeros)."""

        def edit(d):
            nodes = forward(d)["nodes"]
            scalar = {
                "op": op,
                "args": [a, b],
                "kwargs": {},
                "outputs": [{"id": 900, "kind": "int"}],
                "out_spec": {"t": "leaf"},
                "loc": "m.py:1",
            }
            nodes.insert(last, scalar)
            nodes[last + 1].update(op="zeros", args=[[{"ref": 900}, size]], kwargs={})

        return edit

    mutate("fold_bomb", folded(2**20, 2**20, 2**10))
    mutate("fold_ok", folded(3, 4, 5))
    # Past the range of traced numbers, and at 2**53 or more: one huge value, in both.
    mutate("fold_overflow", folded(2**32, 2**32, 1))
    mutate("fold_past_exact", folded(2**27, 2**26, 1))
    mutate("fold_pow_huge", folded(3, 2**52, 1, "scalar.pow"))
    # Folded exactly: a shift of 0, a power of -1; a literal past 2**53 is not folded.
    mutate("fold_shift_zero", folded(0, 2**40, 5, "scalar.lshift"))
    mutate("fold_pow_minus_one", folded(-1, 2**52, 5, "scalar.pow"))
    mutate("fold_big_literal", folded(2**60, 0, 5))
    mutate("in_spec_bad", lambda d: forward(d).update(in_spec={"t": "leaf"}))
    mutate("var_keywords_empty", lambda d: forward(d).update(var_keywords=[]))
    mutate("var_keywords_type", lambda d: forward(d).update(var_keywords="a"))
    mutate("var_keywords_unknown", lambda d: forward(d).update(var_keywords=["a"]))
    mutate("positional_only_ok", lambda d: forward(d).update(positional_only=1))
    mutate("defaults_ok", lambda d: forward(d).update(defaults={"x": None}))
    mutate("defaults_none_ok", lambda d: forward(d).update(defaults={"x": {"t": "none"}}))
    mutate("defaults_unknown_name", lambda d: forward(d).update(defaults={"nope": None}))
    mutate("defaults_leaf", lambda d: forward(d).update(defaults={"x": {"t": "leaf"}}))
    mutate(
        "defaults_big_int",
        lambda d: forward(d).update(defaults={"x": {"t": "const", "v": 2**70}}),
    )
    mutate("defaults_type", lambda d: forward(d).update(defaults=[1]))
    mutate("positional_only_type", lambda d: forward(d).update(positional_only="1"))
    mutate("positional_only_negative", lambda d: forward(d).update(positional_only=-1))
    mutate("positional_only_past", lambda d: forward(d).update(positional_only=9))
    mutate("out_spec_bad", lambda d: forward(d).update(out_spec={"t": "tuple", "c": []}))
    mutate(
        "guard_kind",
        lambda d: forward(d)["nodes"].append(
            {
                "op": "prim.guard",
                "args": [1],
                "kwargs": {"expect": 1, "kind": "weird"},
                "outputs": [],
                "out_spec": None,
            }
        ),
    )
    mutate("shape_float", lambda d: forward(d)["nodes"][0]["outputs"][0].update(shape=[2.0]))
    mutate("input_dim_int", lambda d: forward(d)["inputs"][0].update(shape=[2, 3, 8, 8]))
    mutate("value_name_bad", lambda d: forward(d)["inputs"][0].update(name="x\ny"))
    mutate("class_bad", lambda d: d["module_classes"].update({"": "Net\nimport os"}))
    mutate("reprs_ok", lambda d: d.update(module_reprs={"": "in_features=3, ü"}))
    mutate("reprs_control", lambda d: d.update(module_reprs={"": "a\x1b[2Jb"}))
    mutate("reprs_long", lambda d: d.update(module_reprs={"": "x" * 4097}))
    mutate("reprs_type", lambda d: d.update(module_reprs={"": 3}))
    mutate("reprs_path", lambda d: d.update(module_reprs={"a..b": "x"}))
    torch_class = "torch.nn.modules.linear.Linear"
    mutate("types_ok", lambda d: d.update(module_types={"fc": torch_class}))
    mutate("types_foreign", lambda d: d.update(module_types={"fc": "os.system"}))
    mutate("types_code", lambda d: d.update(module_types={"fc": "torch.nn.Linear()"}))
    mutate("types_type", lambda d: d.update(module_types={"fc": 3}))
    mutate("types_path", lambda d: d.update(module_types={"a..b": torch_class}))
    cpu = {"device": "cpu"}
    # (named well, so the document rules take it; the reader then finds no state for it)
    mutate("generators_ok", lambda d: d.update(generators={"g": cpu, "fc.noise": cpu}))
    mutate("generators_device", lambda d: d.update(generators={"g": {"device": "meta"}}))
    mutate("generators_no_device", lambda d: d.update(generators={"g": {}}))
    mutate("generators_module", lambda d: d.update(generators={"conv": cpu}))
    mutate("generators_reserved", lambda d: d.update(generators={"a.training": cpu}))
    mutate("generators_private", lambda d: d.update(generators={"_tb_tree": cpu}))
    mutate("generators_inside", lambda d: d.update(generators={"g": cpu, "g.h": cpu}))
    mutate("generators_type", lambda d: d.update(generators=[1]))
    many = {f"g{i}": cpu for i in range(LIMITS["generators"] + 1)}
    mutate("generators_many", lambda d: d.update(generators=many))
    mutate(
        "pow_bomb",
        lambda d: forward(d)["nodes"].append(
            {
                "op": "scalar.pow",
                "args": [7, 10**9],
                "kwargs": {},
                "outputs": [{"id": 10**6, "kind": "int"}],
                "out_spec": {"t": "leaf"},
            }
        ),
    )
    mutate(
        "pow_small",
        lambda d: forward(d)["nodes"].append(
            {
                "op": "scalar.pow",
                "args": [7, 3],
                "kwargs": {},
                "outputs": [{"id": 10**6, "kind": "int"}],
                "out_spec": {"t": "leaf"},
            }
        ),
    )
    cases["not_json"] = "{"
    cases["not_object"] = "[]"
    return cases


def r_verdicts(paths: list[Path], workdir: Path) -> dict[str, str]:
    """R's checker on each file, in one Rscript: file name -> "accept" or "refuse <why>"."""
    listing = workdir / "files.txt"
    listing.write_text("\n".join(str(p) for p in paths))
    return dict(line.split("\t", 1) for line in run_r(R_CHECKER, listing).splitlines())


def python_verdict(path: Path) -> str:
    try:
        read_json(path)
    except tracebridge.ArtifactError:
        return "refuse"
    return "accept"


def python_document_verdict(path: Path) -> str:
    """Python's reader with only the document rules (``check_document_rules``), the rules
    R's reader applies: R must agree with it on every file."""
    from unittest import mock

    from tracebridge.check.program import check_document_rules

    with mock.patch("tracebridge.artifact.archive.check_document", check_document_rules):
        return python_verdict(path)


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_and_python_checkers_agree(base, tmp_path):
    from .test_fuzz import json_mutations  # the fuzzer's JSON mutations, fed to both

    cases = corpus(base)
    for index, doc in enumerate(json_mutations(base["doc"], 40, seed=11)):
        cases[f"fuzz{index:02d}"] = doc
    paths = [write(tmp_path / f"{name}.tb", doc, base["tensors"]) for name, doc in cases.items()]
    r_verdict = r_verdicts(paths, tmp_path)
    disagree = []
    for path in paths:
        # R applies the document rules; the execution rules are Python's alone (one checker).
        py = python_document_verdict(path)
        r = r_verdict[path.name].split(" ", 1)[0]
        if py != r:
            disagree.append(f"{path.name}: python {py}, R {r_verdict[path.name]}")
    assert not disagree, "\n".join(disagree)
    verdicts = {p.stem: python_verdict(p) for p in paths}
    accepted = {
        "good",
        "loc_none",
        "int_big_ok",
        "int_edge",
        "opset_v1",
        "view_spread",
        "as_strided_ok",
        "repeat_dim_minus_4",
        "broadcast_minus_1",
        "pow_small",
        "example_absent",
        "alias_ok",
        "device_ok",
        "persistent_false",
        "reprs_ok",
        "types_ok",
        "var_keywords_empty",
        "positional_only_ok",
        "defaults_ok",
        "defaults_none_ok",
        "eye_ok",
        "arange_ok",
        "fold_ok",
        "fold_shift_zero",
        "fold_pow_minus_one",
        "fold_big_literal",
    }
    for name in corpus(base):
        assert (verdicts[name] == "accept") == (name in accepted), name


def _mm_of_zeros(x):
    return torch.mm(x, torch.zeros(3, 2, device=x.device))


@pytest.mark.parametrize(
    "device",
    [{"device": "meta"}, {"device": "meta:0"}, "meta"],
)
def test_a_file_that_names_the_meta_device_is_refused(device, tmp_path):
    """Was: a file could name the meta device (a literal, or the string in a device
    argument); ``mm`` of a CPU tensor and a meta one then returned a CPU tensor of memory
    the kernel never wrote (as do matmul, linear, linalg.solve_triangular, lu_solve, ...).
    A traced program takes the device from a tensor (``prim.device``), never from a
    literal, so nothing legitimate is lost."""
    path = tmp_path / "meta.tb"
    tracebridge.trace(_mm_of_zeros, (torch.randn(2, 3),)).save(path)
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        tensors = archive.read("tensors.safetensors")
    (zeros,) = [n for n in doc["methods"]["forward"]["nodes"] if n["op"] == "zeros"]
    zeros["kwargs"]["device"] = device
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", tensors)
    with pytest.raises(
        tracebridge.ArtifactError, match=r"node \d+ \(zeros\): the file names the meta device"
    ):
        tracebridge.load(path)
    assert tracebridge.trace(_mm_of_zeros, (torch.randn(2, 3, device="meta"),), check_trace=False)
