"""Crafted files aimed at the ops and runtime passes added since the op-safety review.

Each family is a function that returns ``{name: case}``; a case is the nodes of the forward
graph of ``neg(x)`` (input value 0, a float32 vector given as ``ones(3)`` at the call) or
of a traced ``nn.Linear(3, 2)`` (``base: "linear"``: input value 0 a ``[4, 3]`` float32
matrix, ``weight`` value 1, ``bias`` value 2 read from state), or a whole-document edit
(``doc``: a function of the base document), or a safetensors edit (``tensors``: bytes).

Every case must end in tracebridge's error at load or at the call (naming the op or the
rule), or run and return memory some kernel wrote -- never a crash, a hang, a raw
exception, an allocation past the limits or a read outside a tensor.
``test_fuzz.py::test_crafted_attacks`` runs them all in children with a memory cap.
"""

from __future__ import annotations

import copy
import json
import struct

BIG = (2**28, 2**31, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1)


def tensor_value(vid: int, dtype: str = "float32", shape=(3,)) -> dict:
    return {"id": vid, "kind": "Tensor", "dtype": dtype, "shape": list(shape)}


def node(op: str, args: list, outputs: list, kwargs: dict | None = None) -> dict:
    spec = (
        {"t": "leaf"} if len(outputs) == 1 else {"t": "tuple", "c": [{"t": "leaf"}] * len(outputs)}
    )
    return {"op": op, "args": args, "kwargs": kwargs or {}, "outputs": outputs, "out_spec": spec}


def ref(vid: int) -> dict:
    return {"ref": vid}


def literal(vid: int, data, dtype: str = "float32", shape=None) -> dict:
    """``tensor(data, dtype=...)``: data written in the file."""
    if shape is None:
        shape, level = [], data
        while isinstance(level, list):
            shape.append(len(level))
            level = level[0] if level else None
    return node("tensor", [data], [tensor_value(vid, dtype, shape)], {"dtype": {"dtype": dtype}})


def out(vid: int, dtype: str = "float32", shape=(3,)) -> list:
    return [tensor_value(vid, dtype, shape)]


def tup(*items) -> dict:
    return {"tuple": list(items)}


# --- as_strided: a view whose geometry the file writes --------------------------------------


def as_strided_family() -> dict:
    cases = {}
    x = ref(0)
    geometries = {
        "past_end": ([2], [1], 2),
        "longer": ([4], [1], None),
        "huge_stride": ([2], [2**62], 0),
        "overflow_reach": ([2**62, 2**62], [2**62, 2**62], 0),
        "wrap_to_negative": ([2, 2], [2**63 - 1, 2**63 - 1], 0),
        "zero_stride_huge": ([2**40], [0], 0),
        "zero_stride_wide": ([2**31, 2**31], [0, 0], 0),
        "offset_past": ([1], [1], 2**40),
        "offset_int_max": ([1], [1], 2**63 - 1),
        "offset_uint": ([1], [1], 2**64 - 1),
        "negative_offset": ([1], [1], -1),
        "negative_stride": ([2], [-1], 2),
        "negative_size": ([-1], [1], 0),
        "mismatched": ([2, 2], [1], 0),
        "empty_far": ([0], [1], 2**40),
        "bool_size": ([True], [1], 0),
        "bool_size_of_two": ([True, 3], [3, 1], 0),  # prober18 F12: refused at load
        "bool_stride": ([1], [True], 0),
        "bool_offset": ([1], [1], True),
        "float_size": ([1.5], [1], 0),
        "string_size": (["3"], [1], 0),
        "rank_70": ([1] * 70, [0] * 70, 0),
    }
    for name, (size, stride, offset) in geometries.items():
        args = [x, tup(*size), tup(*stride)] + ([] if offset is None else [offset])
        cases[f"as_strided:{name}"] = {"nodes": [node("as_strided", args, out(1))]}
    # Views of views: the offset must stay within the view's own elements, not the storage.
    cases["as_strided:of_a_slice_back_to_0"] = {
        "nodes": [
            node("getitem", [x, {"slice": [1, None, None]}], out(1, shape=(2,))),
            node("as_strided", [ref(1), tup(3), tup(1), 0], out(2)),
        ]
    }
    cases["as_strided:of_a_narrow_forward"] = {
        "nodes": [
            node("narrow", [x, 0, 0, 1], out(1, shape=(1,))),
            node("as_strided", [ref(1), tup(2), tup(1)], out(2, shape=(2,))),
        ]
    }
    cases["as_strided:reduced_zero_stride_huge"] = {
        "nodes": [
            node("as_strided", [x, tup(2**40), tup(0), 0], out(1, shape=(2**40,))),
            node("sum", [ref(1)], out(2, shape=())),
        ]
    }
    # The weight of a module: a view past it would read the bias (another tensor of the
    # file's mapped bytes) or the padding between them.
    cases["as_strided:weight_into_bias"] = {
        "base": "linear",
        "nodes": [node("as_strided", [ref(1), tup(20), tup(1), 0], out(3, shape=(20,)))],
    }
    cases["as_strided:bias_before_itself"] = {
        "base": "linear",
        "nodes": [node("as_strided", [ref(2), tup(2), tup(1), 0], out(3, shape=(2,)))],
    }
    # Sizes from the graph: prim.size of the input, multiplied past the storage.
    cases["as_strided:computed_size"] = {
        "nodes": [
            node("prim.size", [x, 0], [{"id": 1, "kind": "int"}]),
            node("scalar.mul", [ref(1), 2**40], [{"id": 2, "kind": "int"}]),
            node("as_strided", [x, tup(ref(2)), tup(0), 0], out(3, shape=("?",))),
            node("sum", [ref(3)], out(4, shape=())),
        ]
    }
    # The same tree twice, so that the second call replays a kept geometry (runtime/views.py).
    tree = [
        node("Tensor.view", [x, tup(3, 1)], out(1, shape=(3, 1))),
        node("transpose", [ref(1), 0, 1], out(2, shape=(1, 3))),
        node("as_strided", [ref(2), tup(1, 3), tup(1, 1), 0], out(3, shape=(1, 3))),
        node("unsqueeze", [ref(3), 0], out(4, shape=(1, 1, 3))),
    ]
    cases["as_strided:tree_within"] = {"nodes": tree, "calls": 3}
    bad_tree = copy.deepcopy(tree)
    bad_tree[2]["args"] = [ref(2), tup(1, 3), tup(1, 1), 1]
    cases["as_strided:tree_past"] = {"nodes": bad_tree, "calls": 3}
    return cases


# --- repeat_interleave: an output whose size is a sum of repeats ----------------------------


def repeat_interleave_family() -> dict:
    cases = {}
    x = ref(0)
    for value in BIG + (-1, -(2**63)):
        cases[f"repeat_interleave:int_{value}"] = {
            "nodes": [node("repeat_interleave", [x, value], out(1, shape=("?",)))]
        }
    # Repeats whose int64 sum wraps around to a small number (the kernel then writes past
    # the output it allocated).
    for name, counts in {
        "sum_wraps_to_0": [2**62] * 4,
        "sum_wraps_to_3": [2**62] * 3 + [2**62 + 3],
        "sum_wraps_negative": [2**62, 2**62],
        "int_max_each": [2**63 - 1] * 3,
    }.items():
        size = len(counts)
        base = [literal(1, [0.0] * size), literal(2, counts, "int64")]
        cases[f"repeat_interleave:tensor_{name}"] = {
            "nodes": base + [node("repeat_interleave", [ref(1), ref(2)], out(3, shape=("?",)))]
        }
        cases[f"repeat_interleave:one_arg_{name}"] = {
            "nodes": [
                literal(1, counts, "int64"),
                node("repeat_interleave", [ref(1)], out(2, "int64", ("?",))),
            ]
        }
        cases[f"repeat_interleave:output_size_{name}"] = {
            "nodes": base
            + [
                node(
                    "repeat_interleave",
                    [ref(1), ref(2)],
                    out(3, shape=(3,)),
                    {"dim": 0, "output_size": 3},
                )
            ]
        }
    # Bytes, not elements: 2**27 complex128 elements are 2 GiB.
    cases["repeat_interleave:complex_bytes"] = {
        "nodes": [
            literal(1, [[1.0, 0.0]], "float64"),
            node("view_as_complex", [ref(1)], out(2, "complex128", (1,))),
            node("repeat_interleave", [ref(2), 2**27], out(3, "complex128", (2**27,))),
        ]
    }
    cases["repeat_interleave:complex_bytes_tensor"] = {
        "nodes": [
            literal(1, [[1.0, 0.0]], "float64"),
            node("view_as_complex", [ref(1)], out(2, "complex128", (1,))),
            literal(3, [2**27], "int64"),
            node("repeat_interleave", [ref(2), ref(3)], out(4, "complex128", (2**27,))),
        ]
    }
    cases["repeat_interleave:float64_bytes_at_load"] = {
        "nodes": [
            literal(1, [1.0], "float64"),
            node("repeat_interleave", [ref(1), 2**28 - 1, 0], out(2, "float64", (2**28 - 1,))),
        ]
    }
    odd = {
        "float_repeats": literal(1, [1.5, 1.0, 1.0], "float32"),
        "bool_repeats": literal(1, [True, True, True], "bool"),
        "uint8_repeats": literal(1, [255, 255, 255], "uint8"),
        "rank2_repeats": literal(1, [[1], [1], [1]], "int64"),
        "short_repeats": literal(1, [1, 1], "int64"),
        "negative_in_tensor": literal(1, [1, -1, 1], "int64"),
        "empty_repeats": literal(1, [], "int64", shape=[0]),
    }
    for name, lit in odd.items():
        cases[f"repeat_interleave:{name}"] = {
            "nodes": [lit, node("repeat_interleave", [x, ref(1)], out(2, shape=("?",)))]
        }
    for dim in (1, -2, 2**40):
        cases[f"repeat_interleave:dim_{dim}"] = {
            "nodes": [node("repeat_interleave", [x, 2], out(1, shape=(6,)), {"dim": dim})]
        }
    # prober18 F12: a dim past the input's rank failed inside the checked implementation
    # (IndexError: tuple index out of range); a bool for a count passed the load checks.
    cases["repeat_interleave:dim_7_of_rank_2"] = {
        "nodes": [
            node("Tensor.view", [x, tup(1, 3)], out(1, shape=(1, 3))),
            node("repeat_interleave", [ref(1), 2], out(2, shape=(2, 3)), {"dim": 7}),
        ]
    }
    cases["repeat_interleave:dim_computed"] = {
        "nodes": [
            node("prim.size", [x, 0], [{"id": 1, "kind": "int"}]),
            node("repeat_interleave", [x, 2], out(2, shape=(6,)), {"dim": ref(1)}),
        ]
    }
    cases["repeat_interleave:dim_bool"] = {
        "nodes": [node("repeat_interleave", [x, 2], out(1, shape=(6,)), {"dim": True})]
    }
    cases["repeat_interleave:repeats_bool"] = {
        "nodes": [node("repeat_interleave", [x, True], out(1, shape=(3,)))]
    }
    cases["repeat_interleave:output_size_bool"] = {
        "nodes": [
            node("repeat_interleave", [x, 1], out(1, shape=(3,)), {"dim": 0, "output_size": True})
        ]
    }
    for size in (-1, 2, 2**40):
        cases[f"repeat_interleave:output_size_{size}"] = {
            "nodes": [node("repeat_interleave", [x, 2], out(1, shape=(6,)), {"output_size": size})]
        }
    return cases


# --- broadcast_to / expand: views of written sizes that later ops read in full ------------


def broadcast_family() -> dict:
    cases = {}
    x = ref(0)
    for op in ("broadcast_to", "Tensor.expand"):
        for name, size in {
            "huge": [2**40, 3],
            "wide": [2**20, 2**20, 3],
            "negative": [-2, 3],
            "bool": [True, 3],
            "overflow": [2**62, 2**62, 3],
            "uint": [2**64 - 1, 3],
            "rank_100": [1] * 100 + [3],
        }.items():
            cases[f"{op}:{name}"] = {
                "nodes": [
                    node(op, [x, tup(*size)], out(1, shape=[abs(s) for s in size])),
                    node("sum", [ref(1)], out(2, shape=())),
                ]
            }
        cases[f"{op}:computed"] = {
            "nodes": [
                node("prim.size", [x, 0], [{"id": 1, "kind": "int"}]),
                node("scalar.mul", [ref(1), 2**40], [{"id": 2, "kind": "int"}]),
                node(op, [x, tup(ref(2), 3)], out(3, shape=("?", 3))),
                node("sum", [ref(3)], out(4, shape=())),
            ]
        }
        # prober18 F12: a size below -1 computed at the call reached the kernel ("numel:
        # integer multiplication overflow"); refused before it now.
        cases[f"{op}:computed_negative"] = {
            "nodes": [
                node("prim.size", [x, 0], [{"id": 1, "kind": "int"}]),
                node("scalar.sub", [ref(1), 5], [{"id": 2, "kind": "int"}]),
                node(op, [x, tup(ref(2), 3)], out(3, shape=("?", 3))),
                node("sum", [ref(3)], out(4, shape=())),
            ]
        }
        cases[f"{op}:from_item"] = {
            "nodes": [
                literal(1, 2**40, "int64", shape=[]),
                node("prim.item", [ref(1)], [{"id": 2, "kind": "int"}]),
                node(op, [x, tup(ref(2), 3)], out(3, shape=("?", 3))),
                node("sum", [ref(3)], out(4, shape=())),
            ]
        }
    return cases


# --- index ops: out-of-range, negative and huge indices ------------------------------------

INDEX_VALUES = {"past": 3, "negative": -4, "huge": 2**40, "int_min": -(2**63)}


def index_family() -> dict:
    cases = {}
    x = ref(0)
    for vname, v in INDEX_VALUES.items():
        idx = literal(1, [0, v], "int64")
        idx2 = literal(1, [[0, v]], "int64")
        src = literal(2, [1.0, 2.0], "float32")
        m = literal(3, [[1.0, 2.0, 3.0]], "float32")

        def two(op, args, kw=None, o=None, lits=(idx, src, m)):
            return [*lits, node(op, args, o or out(4, shape=("?",)), kw)]

        cases.update(
            {
                f"index_select:{vname}": two("index_select", [x, 0, ref(1)]),
                f"gather:{vname}": two("gather", [x, 0, ref(1)]),
                f"take:{vname}": two("take", [x, ref(1)]),
                f"take_along_dim:{vname}": two("take_along_dim", [x, ref(1), 0]),
                f"embedding:{vname}": [idx2, src, m]
                + [node("embedding", [ref(3), ref(1)], out(4, shape=(1, 2, 3)))],
                f"scatter:{vname}": two("scatter", [x, 0, ref(1), ref(2)]),
                f"scatter_add:{vname}": two("scatter_add", [x, 0, ref(1), ref(2)]),
                f"scatter_reduce:{vname}": two("scatter_reduce", [x, 0, ref(1), ref(2), "sum"]),
                f"index_add:{vname}": two("index_add", [x, 0, ref(1), ref(2)]),
                f"index_copy:{vname}": two("index_copy", [x, 0, ref(1), ref(2)]),
                f"index_fill:{vname}": two("index_fill", [x, 0, ref(1), 1.0]),
                f"index_put:{vname}": two("index_put", [x, [ref(1)], ref(2)]),
                f"index_put_acc:{vname}": two("index_put", [x, [ref(1)], ref(2), True]),
                f"getitem:{vname}": two("getitem", [x, ref(1)]),
                f"select:{vname}": [node("select", [x, 0, v], out(1, shape=()))],
                f"narrow:{vname}": [node("narrow", [x, 0, v, 1], out(1, shape=(1,)))],
                f"index_reduce:{vname}": two("index_reduce", [x, 0, ref(1), ref(2), "prod"]),
                f"put:{vname}": two("put", [x, ref(1), ref(2)]),
                f"one_hot:{vname}": [idx, node("one_hot", [ref(1), 3], out(2, "int64", (2, 3)))],
                f"bincount:{vname}": [idx, node("bincount", [ref(1)], out(2, "int64", ("?",)))],
                f"unravel_index:{vname}": [idx]
                + [node("unravel_index", [ref(1), tup(3)], out(2, "int64", (2,)))],
            }
        )
    # int32 and uint8 index tensors and indices on the meta device
    for dtype in ("int32", "int16", "uint8", "bool", "float32"):
        cases[f"gather:dtype_{dtype}"] = [
            literal(1, [0, 1] if dtype != "bool" else [True, False], dtype),
            node("gather", [x, 0, ref(1)], out(2, shape=(2,))),
        ]
    return {k: {"nodes": v} for k, v in cases.items()}


# --- the graph itself ----------------------------------------------------------------------


def _graph(doc: dict) -> dict:
    return doc["methods"]["forward"]


def _edit(fn):
    def edit(doc):
        doc = copy.deepcopy(doc)
        fn(doc, _graph(doc))
        return doc

    return edit


def structure_family() -> dict:
    neg = lambda i, o: node("neg", [ref(i)], out(o))  # noqa: E731

    def used_before(doc, g):
        g["nodes"] = [neg(2, 1), neg(0, 2)]
        g["outputs"] = [ref(1)]

    def cycle(doc, g):
        g["nodes"] = [neg(2, 1), neg(1, 2)]
        g["outputs"] = [ref(2)]

    def self_loop(doc, g):
        g["nodes"] = [neg(1, 1)]
        g["outputs"] = [ref(1)]

    def duplicate_id(doc, g):
        g["nodes"] = [neg(0, 1), neg(0, 1)]
        g["outputs"] = [ref(1)]

    def shadow_input(doc, g):
        g["nodes"] = [neg(0, 0)]
        g["outputs"] = [ref(0)]

    def undefined_output(doc, g):
        g["outputs"] = [ref(99)]

    def two_outputs_for_one(doc, g):
        g["nodes"][0]["outputs"] = out(1) + out(2)
        g["nodes"][0]["out_spec"] = {"t": "tuple", "c": [{"t": "leaf"}] * 2}

    def no_outputs(doc, g):
        g["nodes"][0]["outputs"] = []

    def spec_mismatch(doc, g):
        g["nodes"][0]["out_spec"] = {"t": "tuple", "c": [{"t": "leaf"}] * 3}

    def chunk_outputs_short(doc, g):
        g["nodes"] = [node("chunk", [ref(0), 3], out(1, shape=(1,)) + out(2, shape=(1,)))]
        g["outputs"] = [ref(1)]

    def unbind_outputs_long(doc, g):
        g["nodes"] = [node("unbind", [ref(0)], [tensor_value(i, shape=()) for i in range(1, 9)])]
        g["outputs"] = [ref(8)]

    def id_huge(doc, g):
        g["nodes"] = [neg(0, 2**63)]
        g["outputs"] = [ref(2**63)]

    def id_negative(doc, g):
        g["nodes"] = [neg(0, -1)]
        g["outputs"] = [ref(-1)]

    def id_string(doc, g):
        g["nodes"] = [node("neg", [ref(0)], [{"id": "1", "kind": "Tensor"}])]
        g["outputs"] = [ref("1")]

    def id_float(doc, g):
        g["nodes"] = [node("neg", [ref(0)], [{"id": 1.0, "kind": "Tensor"}])]
        g["outputs"] = [ref(1.0)]

    def deep_args(doc, g):
        deep = 1
        for _ in range(60):
            deep = [deep]
        g["nodes"][0]["kwargs"] = {"x": deep}

    def dtype_unknown(doc, g):
        g["nodes"][0]["outputs"][0]["dtype"] = "float128"

    def dtype_kwarg_unknown(doc, g):
        g["nodes"] = [node("Tensor.to", [ref(0)], out(1), {"dtype": {"dtype": "qint4"}})]

    def device_odd(doc, g):
        g["nodes"] = [node("Tensor.to", [ref(0)], out(1), {"device": {"device": "cuda:9999"}})]

    def device_meta(doc, g):
        g["nodes"] = [node("Tensor.to", [ref(0)], out(1), {"device": {"device": "meta"}})]

    def device_string(doc, g):
        g["nodes"] = [node("Tensor.to", [ref(0), "cpu\u0000"], out(1))]

    def nan_as_int(doc, g):
        g["nodes"] = [node("Tensor.view", [ref(0), tup({"float": "nan"})], out(1))]

    def string_as_int(doc, g):
        g["nodes"] = [node("Tensor.view", [ref(0), tup("3")], out(1))]

    def input_shape_lies(doc, g):
        g["inputs"][0]["shape"] = [2**62]
        g["inputs"][0]["example"] = [2**62]

    def example_huge(doc, g):
        g["inputs"][0]["example"] = [2**64 - 1]

    return {
        f"structure:{fn.__name__}": {"doc": _edit(fn)}
        for fn in (
            used_before, cycle, self_loop, duplicate_id, shadow_input, undefined_output,
            two_outputs_for_one, no_outputs, spec_mismatch, chunk_outputs_short,
            unbind_outputs_long, id_huge, id_negative, id_string, id_float, deep_args,
            dtype_unknown, dtype_kwarg_unknown, device_odd, device_meta, device_string,
            nan_as_int, string_as_int, input_shape_lies, example_huge,
        )
    }  # fmt: skip


def flags_family() -> dict:
    """Op-set 8's reads of a tensor's flags, of its storage offset and of the caller's
    modes, with arguments no tracer writes: refused at load or run to their answer."""

    def read(op: str, args: list, kind: str = "bool"):
        def edit(doc, g):
            g["nodes"] = [node(op, args, [{"id": 1, "kind": kind}])]
            g["outputs"] = [ref(0)]

        edit.__name__ = f"{op.removeprefix('prim.')}_{len(args)}"
        return edit

    reads = [
        read("prim.autocast_enabled", ["os.system"]),
        read("prim.autocast_enabled", ["cpu\u0000"]),
        read("prim.autocast_enabled", ["bogus"]),
        read("prim.autocast_dtype", ["cuda:0"], kind="dtype"),
        read("prim.autocast_dtype", [tup("cpu")], kind="dtype"),
        read("prim.is_contiguous_as", [ref(0), "channels_last"]),
        read("prim.is_contiguous_as", [ref(0), 3]),
        read("prim.storage_offset", [7], kind="int"),
        read("prim.is_inference", []),
        read("prim.is_leaf", [ref(0), ref(0)]),
        read("prim.inference_mode", [ref(0)]),
        read("prim.has_grad_fn", [{"memory_format": "channels_last"}]),
        # op-set 9: a setting by a name outside the table, or not a name at all
        read("prim.setting", ["__import__"], kind="int"),
        read("prim.setting", [ref(0)], kind="int"),
        read("prim.setting", [], kind="bool"),
        # op-set 9: a device type outside the table, not a string, or missing
        read("prim.is_device_type", [ref(0), "os.system"]),
        read("prim.is_device_type", [ref(0), ref(0)]),
        read("prim.is_device_type", [ref(0)]),
    ]

    def guarded_unknown_device(doc, g):  # a guard needs the read: still refused at load
        g["nodes"] = [
            node("prim.autocast_enabled", ["os.system"], [{"id": 1, "kind": "bool"}]),
            node("prim.guard", [ref(1)], [], {"expect": False, "what": "x", "kind": "branch"}),
        ]
        g["outputs"] = [ref(0)]

    reads.append(guarded_unknown_device)
    return {f"flags:{fn.__name__}:{i}": {"doc": _edit(fn)} for i, fn in enumerate(reads)}


# --- tensors: the safetensors member and the state it backs ------------------------------


def _st(header: dict, data: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def tensors_family() -> dict:
    """Edits of the linear base's tensors (weight [2, 3] at 0..24, bias [2] at 64..72)."""
    data = bytes(72)
    w = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    b = {"dtype": "F32", "shape": [2], "data_offsets": [64, 72]}
    pad = {"dtype": "U8", "shape": [40], "data_offsets": [24, 64]}

    def member(weight=None, bias=None, payload=data, extra=None):
        header = {"weight": weight or w, "#pad1": pad, "bias": bias or b}
        header.update(extra or {})
        return _st(header, payload)

    cases = {
        "short_bytes": member(weight={**w, "data_offsets": [0, 20]}),
        "long_bytes": member(weight={**w, "data_offsets": [0, 28]}),
        "shape_numel_huge": member(weight={**w, "shape": [2**31, 2**31]}),
        "overflow_product": member(weight={**w, "shape": [2**32, 2**32, 2**32]}),
        "overlap": member(bias={**b, "data_offsets": [16, 24]}),
        "past_end": member(bias={**b, "data_offsets": [64, 2**40]}),
        "reversed": member(bias={**b, "data_offsets": [72, 64]}),
        "dtype_unknown": member(weight={**w, "dtype": "F128"}),
        "dtype_differs": member(weight={**w, "dtype": "I32"}),
        "dtype_f64_numel": member(weight={**w, "dtype": "F64", "data_offsets": [0, 48]}),
        "negative_shape": member(weight={**w, "shape": [-2, -3]}),
        "string_shape": member(weight={**w, "shape": ["2", 3]}),
        "truncated_data": member(payload=data[:40]),
        "header_huge": struct.pack("<Q", 2**62) + b"{}",
        "missing_bias": _st({"weight": w, "#pad1": pad}, data),
        "extra_tensor": member(
            extra={"zzz": {"dtype": "F32", "shape": [1], "data_offsets": [68, 72]}}
        ),
        "metadata_payload": member(extra={"__metadata__": {"x": "__import__('os')"}}),
    }  # fmt: skip
    return {f"tensors:{k}": {"base": "linear", "tensors": v} for k, v in cases.items()}


def state_family() -> dict:
    """Program-side state entries that disagree with the tensors member."""

    def state_edit(fn):
        def edit(doc):
            doc = copy.deepcopy(doc)
            fn(doc["state"], _graph(doc))
            return doc

        return edit

    def shape_lie(state, g):
        state["weight"]["shape"] = [3, 2]
        g["nodes"][0]["outputs"][0]["shape"] = [3, 2]

    def dtype_lie(state, g):
        state["weight"]["dtype"] = "float64"

    def node_shape_lie(state, g):
        g["nodes"][0]["outputs"][0]["shape"] = [2, 4]

    def node_dtype_lie(state, g):
        g["nodes"][0]["outputs"][0]["dtype"] = "float16"

    def unknown_state(state, g):
        g["nodes"][0]["args"] = ["nothing"]

    def kind_odd(state, g):
        state["weight"]["kind"] = "storage"

    return {
        f"state:{fn.__name__}": {"base": "linear", "doc": state_edit(fn)}
        for fn in (shape_lie, dtype_lie, node_shape_lie, node_dtype_lie, unknown_state, kind_odd)
    }


# --- runtime passes: graphs shaped to be rewritten, with metadata that lies -----------------


def passes_family() -> dict:
    """Graphs that linear_2d, concat_linear, inplace, folding, views and size_checks would
    rewrite, with traced shapes, dtypes and ranks that do not hold at the call."""
    x, w, b = ref(0), ref(1), ref(2)
    cases = {}
    # linear_2d: the input traced as a matrix, a vector at the call; or the weight as 3-D.
    cases["linear_2d:rank_lies"] = [
        node("linear", [x, w, b], out(3, shape=(4, 2))),
        node("linear", [x, w, b], out(4, shape=(4, 2))),
        node("linear", [x, w, b], out(5, shape=(4, 2))),
        node("add", [ref(3), ref(4)], out(6, shape=(4, 2))),
        node("add", [ref(6), ref(5)], out(7, shape=(4, 2))),
    ]
    # concat_linear: three linears on one input whose results a view reads, with widths
    # that the traced shapes misstate.
    group = []
    for vid in (3, 4, 5):
        group.append(node("linear", [x, w, b], out(vid, shape=(4, 7))))
    for i, vid in enumerate((3, 4, 5)):
        group.append(node("Tensor.view", [ref(vid), tup(-1, 1, 7)], out(6 + i, shape=(4, 1, 7))))
    group.append(node("add", [ref(6), ref(7)], out(9, shape=(4, 1, 7))))
    group.append(node("add", [ref(9), ref(8)], out(10, shape=(4, 1, 7))))
    cases["concat_linear:width_lies"] = group
    # inplace: a fresh result whose traced dtype is a float, an int at the call.
    cases["inplace:dtype_lies"] = [
        node("Tensor.long", [x], out(3, "float32", (4, 3))),
        node("relu", [ref(3)], out(4, "float32", (4, 3))),
        node("add", [ref(4), x], out(5, "float32", (4, 3))),
    ]
    cases["inplace:shape_lies"] = [
        node("mul", [x, 2.0], out(3, shape=(4, 3))),
        node("add", [ref(3), b], out(4, shape=(4, 3))),
        node("relu", [ref(4)], out(5, shape=(4, 3))),
    ]
    cases["inplace:broadcast_grows"] = [
        literal(3, [[1.0], [2.0], [3.0], [4.0]]),
        node("mul", [ref(3), 2.0], out(4, shape=(4, 1))),
        node("add", [ref(4), x], out(5, shape=(4, 1))),
        node("relu", [ref(5)], out(6, shape=(4, 1))),
    ]
    # folding: a static value from state whose traced shape lies; a write into it.
    cases["folding:write_into_state_view"] = [
        node("t", [w], out(3, shape=(3, 2))),
        node("Tensor.add_", [ref(3), 1.0], out(4, shape=(3, 2))),
        node("matmul", [x, ref(4)], out(5, shape=(4, 2))),
    ]
    cases["folding:write_into_folded"] = [
        node("t", [w], out(3, shape=(3, 2))),
        node("mul", [ref(3), 2.0], out(4, shape=(3, 2))),
        node("Tensor.add_", [ref(4), 1.0], out(5, shape=(3, 2))),
        node("matmul", [x, ref(4)], out(6, shape=(4, 2))),
    ]
    cases["folding:static_shape_lies"] = [
        node("t", [w], out(3, shape=(2, 3))),
        node("mul", [ref(3), 2.0], out(4, shape=(2, 3))),
        node("matmul", [x, ref(4)], out(5, shape=(4, 3))),
    ]
    # size_checks: a guard on the sizes of a dead value, with a size that lies.
    cases["size_checks:dead_value_guard"] = [
        node("linear", [x, w, b], out(3, shape=(4, 2))),
        node("relu", [ref(3)], out(4, shape=(4, 2))),
        node("gelu", [ref(4)], out(5, shape=(4, 2))),
        node("prim.size", [ref(5), -1], [{"id": 6, "kind": "int"}]),
        node("prim.guard", [ref(6)], [], {"expect": 2**62, "what": "width", "kind": "value"}),
        node("neg", [x], out(7, shape=(4, 3))),
    ]
    # views: a tree whose base is a weight, replayed after the weight is resized.
    cases["views:tree_over_weight"] = [
        node("Tensor.view", [w, tup(3, 2)], out(3, shape=(3, 2))),
        node("transpose", [ref(3), 0, 1], out(4, shape=(2, 3))),
        node("unsqueeze", [ref(4), 0], out(5, shape=(1, 2, 3))),
        node("select", [ref(5), 0, 1], out(6, shape=(3,))),
    ]
    return {f"passes:{k}": {"base": "linear", "nodes": v, "calls": 3} for k, v in cases.items()}


# --- results larger than their operands' bytes --------------------------------------------


class Wide:
    """Nodes that make cheap wide operands: a one-element literal expanded to a written
    shape (a view of one element, within the load limits), so that the op after them is
    what would allocate."""

    def __init__(self):
        self.nodes: list[dict] = []
        self.next = 1

    def _id(self) -> int:
        self.next += 1
        return self.next - 1

    def view(self, shape, dtype="float32", value=0.0) -> dict:
        lit, wide = self._id(), self._id()
        one = [value]
        for _ in shape[1:]:
            one = [one]
        self.nodes.append(literal(lit, one, dtype, shape=[1] * len(shape)))
        self.nodes.append(node("Tensor.expand", [ref(lit), tup(*shape)], out(wide, dtype, shape)))
        return ref(wide)

    def then(self, op, args, kwargs=None, dtype="float32", outputs=1) -> list[dict]:
        made = [tensor_value(self._id(), dtype, ("?",)) for _ in range(outputs)]
        return [*self.nodes, node(op, args, made, kwargs)]


def _wide_case(build) -> list[dict]:
    wide = Wide()
    return build(wide)


N = 2**16  # two operands of N elements whose product of sizes is 2**32 (16 GiB of float32)


def blowup_family() -> dict:
    """Ops whose result is a product of their operands' sizes, or materialises a wide view,
    on operands that cost the file nothing: each asks for 16 GiB or more unless bounded."""
    cases = {
        "diag": lambda w: w.then("diag", [w.view([N])]),
        "block_diag": lambda w: w.then("block_diag", [[w.view([N, 1]), w.view([1, N])]]),
        "cdist": lambda w: w.then("cdist", [w.view([N, 1]), w.view([N, 1])]),
        "take_along_dim": lambda w: w.then(
            "take_along_dim", [w.view([N, 1]), w.view([1, N], "int64", 0), 1]
        ),
        "tensordot": lambda w: w.then("tensordot", [w.view([N]), w.view([N]), 0]),
        "einsum": lambda w: w.then("einsum", ["i,j->ij", [w.view([N]), w.view([N])]]),
        "pad_constant": lambda w: w.then("pad", [w.view([N, 1]), tup(0, N)]),
        "constant_pad_nd": lambda w: w.then("constant_pad_nd", [w.view([N, 1]), tup(0, N)]),
        "conv_transpose1d": lambda w: w.then(
            "conv_transpose1d", [w.view([1, 1, 2**10]), w.view([1, 1, 1])], {"stride": 2**22}
        ),
        "im2col": lambda w: w.then(
            "im2col",
            [w.view([1, 1, 2**10, 2**10]), tup(2**9, 2**9), tup(1, 1), tup(0, 0), tup(1, 1)],
        ),  # fmt: skip
        "max_unpool2d": lambda w: w.then(
            "max_unpool2d",
            [w.view([1, 2**10, 1, 1]), w.view([1, 2**10, 1, 1], "int64", 0), tup(2**14, 2**14)],
        ),  # fmt: skip
        "upsample_nearest1d": lambda w: w.then("upsample_nearest1d", [w.view([1, N, 1]), tup(N)]),
        "unfold_view_sum": lambda w: [
            *w.then("Tensor.unfold", [w.view([2**20]), 0, 2**19, 1]),
            node("sum", [ref(w.next - 1)], out(w.next, shape=())),
        ],
        "meshgrid_contiguous": lambda w: [
            *w.then("meshgrid", [[w.view([N]), w.view([N])]], outputs=2),
            node("Tensor.contiguous", [ref(w.next - 2)], out(w.next, shape=(N, N))),
        ],
        "embedding": lambda w: w.then(
            "embedding", [w.view([1, 2**12]), w.view([2**20], "int64", 0)]
        ),
        "index_select": lambda w: w.then(
            "index_select", [w.view([1, 2**12]), 0, w.view([2**20], "int64", 0)]
        ),
        "contiguous_complex": lambda w: w.then(
            "Tensor.contiguous",
            [w.view([2**28], "complex128", {"complex": [1.0, 0.0]})],
            dtype="complex128",
        ),
        "flip_float64": lambda w: w.then("flip", [w.view([2**28], "float64"), tup(0)]),
        "bucketize": lambda w: w.then("bucketize", [w.view([2**28]), w.view([1])], dtype="int64"),
        "where_broadcast": lambda w: w.then(
            "where", [w.view([N, 1], "bool", True), w.view([1, N]), 0.0]
        ),
        "lerp_broadcast": lambda w: w.then("lerp", [w.view([N, 1]), w.view([1, N]), 0.5]),
        "addcmul_broadcast": lambda w: w.then(
            "addcmul", [w.view([N, 1]), w.view([1, N]), w.view([1, 1])]
        ),
        "polar_broadcast": lambda w: w.then(
            "polar", [w.view([N, 1]), w.view([1, N])], dtype="complex64"
        ),
        "masked_select": lambda w: w.then(
            "masked_select", [w.view([N, 1]), w.view([1, N], "bool", True)]
        ),
        "masked_fill_broadcast": lambda w: w.then(
            "masked_fill", [w.view([N, 1]), w.view([1, N], "bool", True), 1.0]
        ),
        "histc_float64": lambda w: w.then("histc", [w.view([1], "float64")], {"bins": 2**28 - 1}),
        "grid_sampler": lambda w: w.then(
            "grid_sampler", [w.view([1, 2**10, 1, 1]), w.view([1, 2**13, 2**14, 2]), 0, 0, False]
        ),
        "cumsum_float64": lambda w: w.then("cumsum", [w.view([2**28], "float64"), 0]),
        "sort_float64": lambda w: w.then("sort", [w.view([2**28], "float64")], outputs=2),
        "bilinear": lambda w: w.then(
            "bilinear", [w.view([N, 1]), w.view([N, 1]), w.view([N, 1, 1])]
        ),
    }
    made = {f"blowup:{k}": {"nodes": _wide_case(v)} for k, v in cases.items()}
    # The index literal and its expand declared float64 (the tensor is int64): a meta rule
    # that trusted declared dtypes saw embedding refuse a float index, and counted nothing.
    lying = copy.deepcopy(made["blowup:embedding"]["nodes"])
    for n in lying[2:4]:
        n["outputs"][0]["dtype"] = "float64"
    made["blowup:embedding_declared_float"] = {"nodes": lying}
    # An expand of the caller's data (its dtype unknown at load) as the index.
    made["blowup:embedding_of_the_callers_index"] = {
        "nodes": [
            literal(1, [[0.0] * 8], "float32"),
            node("Tensor.long", [ref(0)], out(2, "int64", (3,))),
            node("narrow", [ref(2), 0, 0, 1], out(3, "int64", (1,))),
            node("Tensor.expand", [ref(3), tup(2**24)], out(4, "int64", (2**24,))),
            node("Tensor.expand", [ref(1), tup(2, 2**8)], out(5, shape=(2, 2**8))),
            node("embedding", [ref(5), ref(4)], out(6, shape=(2**24, 2**8))),
        ]
    }
    return made


def counts_family() -> dict:
    """Ops whose number of results is a size of an operand the file makes for nothing:
    each would make 2**24 or more tensors (seconds and gigabytes of Python objects) before
    the runtime could compare the count with the node's outputs."""
    big = 2**24
    cases = {
        "unbind": lambda w: w.then("unbind", [w.view([big])], outputs=2),
        "split_1": lambda w: w.then("split", [w.view([big]), 1], outputs=2),
        "chunk_of_wide": lambda w: w.then("chunk", [w.view([big]), 2**16], outputs=2),
        "tensor_split_by_tensor": lambda w: w.then(
            "tensor_split", [w.view([3]), w.view([big], "int64", 1)], outputs=2
        ),
        "unbind_dim1": lambda w: w.then("unbind", [w.view([1, big]), 1], outputs=2),
        "hsplit_1": lambda w: w.then(
            "hsplit", [w.view([big]), w.view([big], "int64", 0)], outputs=2
        ),
        "split_with_sizes_many": lambda w: w.then(
            "split_with_sizes", [w.view([2**16 + 1]), tup(*([1] * (2**16 + 1)))], outputs=2
        ),
        "split_with_sizes_ones": lambda w: w.then(
            "split_with_sizes", [w.view([2**16]), tup(*([1] * 2**16))], outputs=2
        ),
    }
    cases["diff_n_long"] = lambda w: w.then("diff", [w.view([8]), 10**5])
    return {f"counts:{k}": {"nodes": _wide_case(v)} for k, v in cases.items()}


# --- dims, counts and sizes out of range; empty tensors; mixed dtypes ------------------


DIMS = {"past": 1, "before": -2, "huge": 2**40, "int_min": -(2**63), "uint_max": 2**64 - 1}


def dims_family() -> dict:
    """Dimension arguments out of range, sizes whose product overflows, counts too large
    for the input, and ops on empty and zero-size tensors."""
    x = ref(0)
    cases = {}
    for name, d in DIMS.items():
        per_dim = {
            "sum": ("sum", [x, d]),
            "transpose": ("transpose", [x, 0, d]),
            "unsqueeze": ("unsqueeze", [x, d]),
            "movedim": ("movedim", [x, 0, d]),
            "flatten": ("flatten", [x, d]),
            "softmax": ("softmax", [x, d]),
            "cumsum": ("cumsum", [x, d]),
            "cat": ("cat", [[x, x], d]),
            "stack": ("stack", [[x, x], d]),
            "gather": ("gather", [x, d, x]),
            "squeeze": ("squeeze", [x, d]),
            "narrow_length": ("narrow", [x, 0, 0, d]),
            "topk": ("topk", [x, d]),
            "kthvalue": ("kthvalue", [x, d]),
            "roll": ("roll", [x, d]),
            "diff": ("diff", [x, d]),
            "Tensor.unfold_step": ("Tensor.unfold", [x, 0, 1, d]),
            "Tensor.unfold_size": ("Tensor.unfold", [x, 0, d, 1]),
            "unflatten": ("unflatten", [x, 0, tup(d, -1)]),
            "Tensor.view": ("Tensor.view", [x, tup(d, -1)]),
            "Tensor.reshape": ("Tensor.reshape", [x, tup(d, d)]),
            "tril": ("tril", [x, d]),
            "diagonal": ("diagonal", [x, d]),
            "chunk": ("chunk", [x, d]),
            "split": ("split", [x, d]),
        }
        for label, (op, args) in per_dim.items():
            cases[f"dims:{label}:{name}"] = [node(op, args, out(1, shape=("?",)))]
    # Products of sizes that overflow int64 (each size alone within the limits).
    cases["dims:view_product_wraps"] = [
        node("Tensor.view", [x, tup(2**32, 2**32, 3)], out(1, shape=(2**32, 2**32, 3))),
    ]
    cases["dims:expand_product_wraps"] = [
        node("Tensor.expand", [x, tup(2**21, 2**21, 2**21, 3)], out(1, shape=("?",))),
    ]
    cases["dims:zeros_product_wraps"] = [
        node("zeros", [tup(2**32, 2**32)], out(1, shape=("?",))),
    ]
    cases["dims:permute_repeated"] = [node("permute", [x, tup(0, 0)], out(1))]
    cases["dims:permute_long"] = [node("permute", [x, tup(*range(70))], out(1))]
    empty = literal(1, [], "float32", shape=[0])
    empty_index = literal(2, [], "int64", shape=[0])
    for label, (op, args) in {
        "max": ("max", [ref(1)]),
        "kthvalue": ("kthvalue", [ref(1), 1]),
        "item": ("prim.item", [ref(1)]),
        "embedding": ("embedding", [ref(1), ref(2)]),
        "index_select_into_empty": ("index_select", [ref(1), 0, ref(3)]),
        "gather_from_empty": ("gather", [ref(1), 0, ref(3)]),
        "unfold_empty": ("Tensor.unfold", [ref(1), 0, 1, 1]),
        "as_strided_of_empty": ("as_strided", [ref(1), tup(1), tup(1), 0]),
        "topk_of_empty": ("topk", [ref(1), 1]),
        "multinomial_of_empty": ("multinomial", [ref(1), 1]),
        "median_of_empty": ("median", [ref(1)]),
        "argmax_of_empty": ("argmax", [ref(1)]),
        "repeat_interleave_empty": ("repeat_interleave", [ref(1), ref(2)]),
        "histc_of_empty": ("histc", [ref(1), 4]),
    }.items():
        outputs = [{"id": 4, "kind": "int"}] if op == "prim.item" else out(4, shape=("?",))
        nodes = [empty, empty_index, literal(3, [0], "int64"), node(op, args, outputs)]
        cases[f"empty:{label}"] = nodes
    # Mixed dtypes where an op wants one kind.
    for label, (op, args) in {
        "float_index": ("index_select", [x, 0, ref(1)]),
        "float_gather": ("gather", [x, 0, ref(1)]),
        "int_weight_embedding": ("embedding", [ref(2), ref(2)]),
        "float_scatter_index": ("scatter", [x, 0, ref(1), x]),
        "bool_matmul": ("matmul", [ref(3), ref(3)]),
        "complex_sort": ("sort", [ref(4)]),
        "int_softmax": ("softmax", [ref(2), 0]),
        "mixed_cat": ("cat", [[x, ref(2), ref(4)]]),
        "mixed_where": ("where", [ref(2), x, ref(4)]),
        "half_mm": ("mm", [ref(5), ref(5)]),
    }.items():
        nodes = [
            literal(1, [0.0, 1.0], "float32"),
            literal(2, [[0, 1], [1, 0]], "int64"),
            literal(3, [[True, False], [False, True]], "bool"),
            literal(4, [{"complex": [1.0, 2.0]}, {"complex": [0.0, 1.0]}], "complex64"),
            literal(5, [[1.0, 2.0], [3.0, 4.0]], "float16"),
            node(op, args, out(6, shape=("?",)) if op != "sort" else out(6) + out(7, "int64")),
        ]
        cases[f"dtypes:{label}"] = nodes
    return {k: {"nodes": v} for k, v in cases.items()}


def nms_family() -> dict:
    """``torchvision.nms`` with boxes of the wrong shape, scores of another length or
    dtype, a NaN threshold, and ``N * N`` comparisons past ``work_macs`` from a cheap
    expand. Where torchvision's operators do not load, each is refused at load with the
    error that says so."""
    cases = {
        "boxes_5_wide": lambda w: w.then("torchvision.nms", [w.view([4, 5]), w.view([4]), 0.5]),
        "scores_short": lambda w: w.then("torchvision.nms", [w.view([4, 4]), w.view([3]), 0.5]),
        "scores_int": lambda w: w.then(
            "torchvision.nms", [w.view([4, 4]), w.view([4], "int64", 0), 0.5]
        ),
        "nan_threshold": lambda w: w.then(
            "torchvision.nms", [w.view([4, 4]), w.view([4]), {"float": "nan"}]
        ),
        "pairs_past_work": lambda w: w.then(
            "torchvision.nms", [w.view([2**20, 4]), w.view([2**20]), 0.5]
        ),
    }
    return {f"nms:{k}": {"nodes": _wide_case(v)} for k, v in cases.items()}


# --- custom autograd functions: the graphs a prim.autograd_function node names -----------


def _function_graphs(doc: dict) -> tuple[dict, str, str]:
    """The ``prim.autograd_function`` node of the ``agf`` base and its two graph names."""
    fn = doc["methods"]["forward"]["nodes"][0]
    return fn, fn["kwargs"]["forward"], fn["kwargs"]["backward"]


def autograd_function_family() -> dict:
    """Edits of a traced ``Sq.apply(x).sum()`` (``x * x`` saving ``x``, backward ``2 * x *
    g``), called with autograd on so that the backward graph runs."""

    def fwd_is_forward(doc, fn, f, b):
        fn["kwargs"]["forward"] = "forward"

    def bwd_is_fwd(doc, fn, f, b):
        fn["kwargs"]["backward"] = f

    def missing_graph(doc, fn, f, b):
        fn["kwargs"]["backward"] = "nothing"

    def saved_too_many(doc, fn, f, b):
        fn["kwargs"]["saved"] = 5

    def saved_negative(doc, fn, f, b):
        fn["kwargs"]["saved"] = -1

    def saved_bool(doc, fn, f, b):
        fn["kwargs"]["saved"] = True

    def saved_zero(doc, fn, f, b):
        fn["kwargs"]["saved"] = 0

    def marked_out_of_range(doc, fn, f, b):
        fn["kwargs"]["non_differentiable"] = [5]

    def marked_twice(doc, fn, f, b):
        fn["kwargs"]["non_differentiable"] = [0, 0]

    def marked_string(doc, fn, f, b):
        fn["kwargs"]["non_differentiable"] = ["0"]

    def function_payload(doc, fn, f, b):
        fn["kwargs"]["function"] = "__import__('os').system('true')"

    def backward_three_grads(doc, fn, f, b):
        g = doc["methods"][b]
        g["outputs"] = [ref(3), ref(3), ref(3)]
        g["out_spec"] = {"t": "tuple", "c": [{"t": "leaf"}] * 3}

    def backward_grad_of_wrong_shape(doc, fn, f, b):
        g = doc["methods"][b]
        g["nodes"].append(node("sum", [ref(3)], out(4, shape=())))
        g["outputs"] = [ref(4)]

    def backward_grad_of_wrong_dtype(doc, fn, f, b):
        g = doc["methods"][b]
        g["nodes"].append(node("Tensor.long", [ref(3)], out(4, "int64")))
        g["outputs"] = [ref(4)]

    def backward_writes_saved(doc, fn, f, b):
        g = doc["methods"][b]
        g["nodes"].append(node("Tensor.mul_", [ref(0), 2.0], out(4)))
        g["outputs"] = [ref(4)]

    def backward_reads_state(doc, fn, f, b):
        g = doc["methods"][b]
        g["nodes"].insert(0, node("prim.state", ["w"], out(9)))

    def forward_gives_too_few(doc, fn, f, b):
        doc["methods"][f]["outputs"] = [ref(1)]

    def input_not_tensor(doc, fn, f, b):
        fn["args"] = [[3]]

    def nested_deep(doc, fn, f, b):
        names = [f"nest{i}" for i in range(70)]
        for i, name in enumerate(names):
            inner = copy.deepcopy(doc["methods"][f])
            if i + 1 < len(names):
                inner["nodes"] = [
                    {**copy.deepcopy(fn), "kwargs": {**fn["kwargs"], "forward": names[i + 1]}}
                ]
                inner["nodes"][0]["outputs"] = out(1)
                inner["outputs"] = [ref(1), ref(0)]
            doc["methods"][name] = inner
        fn["kwargs"]["forward"] = names[0]

    def edit_of(fn):
        def edit(doc):
            doc = copy.deepcopy(doc)
            fn(doc, *_function_graphs(doc))
            return doc

        return edit

    return {
        f"autograd_function:{fn.__name__}": {"base": "agf", "doc": edit_of(fn), "grad": True}
        for fn in (
            fwd_is_forward, bwd_is_fwd, missing_graph, saved_too_many, saved_negative,
            saved_bool, saved_zero, marked_out_of_range, marked_twice, marked_string,
            function_payload, backward_three_grads, backward_grad_of_wrong_shape,
            backward_grad_of_wrong_dtype, backward_writes_saved, backward_reads_state,
            forward_gives_too_few, input_not_tensor, nested_deep,
        )
    }  # fmt: skip


def writes_family() -> dict:
    """Writes: ``out=`` recorded as an op and ``copy_``, into a parameter, through views
    of it, and into an expand of the caller's input under a later check (the graph then
    runs as a transaction, runtime/transaction.py, which copies what it may write)."""
    x, w = ref(0), ref(1)
    guard = node("prim.guard", [ref(90)], [], {"expect": 4, "what": "rows", "kind": "value"})
    rows = node("prim.size", [x, 0], [{"id": 90, "kind": "int"}])
    cases = {
        "copy_into_weight": [node("Tensor.copy_", [w, w], out(3, shape=(2, 3)))],
        "copy_into_weight_view": [
            node("t", [w], out(3, shape=(3, 2))),
            node("Tensor.copy_", [ref(3), ref(3)], out(4, shape=(3, 2))),
        ],
        "add_into_weight_data": [
            node("Tensor.data", [w], out(3, shape=(2, 3))),
            node("Tensor.add_", [ref(3), 1.0], out(4, shape=(2, 3))),
        ],
        "write_expanded_input_then_check": [
            node("Tensor.expand", [x, tup(2**24, 4, 3)], out(3, shape=(2**24, 4, 3))),
            node("Tensor.add_", [ref(3), 1.0], out(4, shape=(2**24, 4, 3))),
            rows,
            guard,
            node("neg", [x], out(5, shape=(4, 3))),
        ],
        "write_input_then_check": [
            node("Tensor.mul_", [x, 2.0], out(3, shape=(4, 3))),
            rows,
            node("prim.guard", [ref(90)], [], {"expect": 5, "what": "rows", "kind": "value"}),
            node("neg", [x], out(5, shape=(4, 3))),
        ],
    }
    return {f"writes:{k}": {"base": "linear", "nodes": v} for k, v in cases.items()}


def document_family() -> dict:
    """Session 15's optional document fields, with values no writer makes: ``module_modes``
    (graph -> module path -> flag) and a graph's ``var_keywords``. Refused at load, or
    (a path the loaded module does not have) read and run. And ``aliases`` whose names a
    loaded module cannot hold as written; and (session 17) ``module_types``, which names
    torch.nn classes a loaded sub-module answers ``isinstance`` as (never importing nor
    running one), and a state entry's ``persistent`` flag; (session 18) a graph's
    ``positional_only`` and ``defaults``."""

    def field(name, value):
        def edit(doc):
            doc = copy.deepcopy(doc)
            doc[name] = value
            return doc

        return edit

    def modes(value):
        return field("module_modes", value)

    def aliases(value):
        return field("aliases", value)

    def types(value):  # for a sub-module "head" the file names, so a stand-in is made
        def edit(doc):
            doc = copy.deepcopy(doc)
            doc["module_classes"]["head"] = "Linear"
            doc["module_types"] = {"head": value}
            return doc

        return edit

    def persistent(value):
        def edit(doc):
            doc = copy.deepcopy(doc)
            doc["state"]["bias"]["persistent"] = value
            return doc

        return edit

    def graph_field(name, value):
        def edit(doc):
            doc = copy.deepcopy(doc)
            _graph(doc)[name] = value
            return doc

        return edit

    def var_keywords(value):
        return graph_field("var_keywords", value)

    cases = {
        # tied names the loaded module registers (session 16): through a tensor, private,
        # over a method, and a new path; each loads and runs
        "alias_through_tensor": aliases({"weight.x": "bias"}),
        "alias_private": aliases({"_methods": "bias"}),
        "alias_over_method": aliases({"forward": "weight"}),
        "alias_new_path": aliases({"head.proj.weight": "weight"}),
        "modes_flag_text": modes({"forward": {"": "yes"}}),
        "modes_list": modes(["forward"]),
        "modes_unknown_graph": modes({"__init__": {"": True}}),
        "modes_path_control": modes({"forward": {"a\u0000b": True}}),
        "modes_path_dunder": modes({"forward": {"__class__.__init__": False}}),
        "modes_nested": modes({"forward": {"": {"": {"": True}}}}),
        "modes_ghost_path": modes({"forward": {"": False, "ghost.bn": True}}),
        "modes_many": modes({"forward": {f"m{i}": True for i in range(50_000)}}),
        "var_keywords_unknown": var_keywords(["not_an_input"]),
        "var_keywords_text": var_keywords("x"),
        "var_keywords_repeat": var_keywords(["x", "x"]),
        # module_types (session 17): refused where not a torch.nn name; a torch.nn name
        # that is no class, or a method reached through one, is only not used
        "types_foreign": types("os.system"),
        "types_call": types("torch.nn.Linear(2, 2)"),
        "types_not_text": types(["torch.nn.Linear"]),
        "types_function": types("torch.nn.functional.linear"),
        "types_method": types("torch.nn.modules.module.Module.__subclasses__"),
        "types_other_class": types("torch.nn.modules.conv.Conv2d"),
        "persistent_text": persistent("no"),
        # positional_only and defaults (session 18): a count past the inputs, a default
        # for no input, a default that is a tensor's place, an int past int64
        "positional_only_past": graph_field("positional_only", 10**9),
        "defaults_unknown": graph_field("defaults", {"nope": None}),
        "defaults_leaf": graph_field("defaults", {"x": {"t": "leaf"}}),
        "defaults_huge": graph_field("defaults", {"x": {"t": "const", "v": 2**70}}),
    }
    return {f"document:{k}": {"base": "linear", "doc": v} for k, v in cases.items()}


# --- op-set 10: the everyday ops added for prober20b F8 ----------------------------------------


def opset10_family() -> dict:
    """Op-set 10's ops with arguments no tracer writes: sizes and strides past the limits
    (literal: refused at load; computed from the input's size: refused at the call), an
    expanded operand that a product of sizes would materialise, counts and probabilities
    PyTorch refuses, and writes into a parameter."""
    x = ref(0)
    size = node("prim.size", [x, 0], [{"id": 1, "kind": "int"}])

    def computed(factor: int) -> list:  # value 2: the input's size (3) times ``factor``
        return [size, node("scalar.mul", [ref(1), factor], [{"id": 2, "kind": "int"}])]

    def expanded(rows: int) -> list:  # value 5: the input's first element as rows x 1
        return [
            *computed(rows // 3),
            node("getitem", [x, {"slice": [0, 1, None]}], out(3, shape=(1,))),
            node("Tensor.view", [ref(3), tup(1, 1)], out(4, shape=(1, 1))),
            node("Tensor.expand", [ref(4), tup(ref(2), 1)], out(5, shape=("?", 1))),
        ]

    cases = {
        "empty_strided_far_stride": [
            node("empty_strided", [tup(2), tup(2**40)], out(1, shape=(2,)))
        ],
        "empty_strided_negative_stride": [
            node("empty_strided", [tup(2, 3), tup(-1, 1)], out(1, shape=(2, 3)))
        ],
        "empty_strided_mismatched": [node("empty_strided", [tup(2, 3), tup(1)], out(1))],
        "empty_strided_bool_stride": [node("empty_strided", [tup(2), tup(True)], out(1))],
        "empty_strided_computed_stride": [
            *computed(2**40),
            node("empty_strided", [tup(2), tup(ref(2))], out(3, shape=(2,))),
        ],
        "empty_strided_computed_size": [
            *computed(2**40),
            node("empty_strided", [tup(ref(2)), tup(1)], out(3, shape=("?",))),
        ],
        "hann_window_literal": [node("hann_window", [2**40], out(1, shape=(2**40,)))],
        "kaiser_window_computed": [
            *computed(2**40),
            node("kaiser_window", [ref(2)], out(3, shape=("?",))),
        ],
        "hann_window_negative": [node("hann_window", [-5], out(1, shape=("?",)))],
        "vander_literal_n": [node("vander", [x, 2**40], out(1, shape=(3, 2**40)))],
        "vander_computed_n": [
            *computed(2**38),
            node("vander", [x, ref(2)], out(3, shape=(3, "?"))),
        ],
        "pdist_of_an_expand": [*expanded(3 * 2**20), node("pdist", [ref(5)], out(6, shape=("?",)))],
        "pad_sequence_of_expands": [
            *expanded(3 * 2**22),
            node("pad_sequence", [[ref(5)] * 64, True], out(6, shape=(64, "?", 1))),
        ],
        "pad_sequence_empty": [node("pad_sequence", [[], True], out(1, shape=(0,)))],
        "gradient_count": [
            {
                **node("gradient", [x], out(1) + out(2) + out(3)),
                "out_spec": {"t": "tuple", "c": [{"t": "leaf"}] * 3},
            }
        ],
        "gradient_edge_order": [node("gradient", [x], out(1), {"edge_order": 7})],
        "geometric_p_zero": [
            node("clone", [x], out(1)),
            node("Tensor.geometric_", [ref(1), 0.0], out(2)),
        ],
        "fill_diagonal_of_a_vector": [
            node("clone", [x], out(1)),
            node("Tensor.fill_diagonal_", [ref(1), 1.0], out(2)),
        ],
    }
    cases = {f"opset10:{k}": {"nodes": v} for k, v in cases.items()}
    # In-place ops of op-set 10 writing into the weight of a module (state writes rule).
    idx, src = literal(3, [0], "int64"), literal(4, [[9.0, 9.0, 9.0]], "float32")
    writes = {
        "put_weight": [
            idx,
            literal(4, [9.0]),
            node("Tensor.put_", [ref(1), ref(3), ref(4)], out(5)),
        ],
        "index_reduce_weight": [
            idx,
            src,
            node("Tensor.index_reduce_", [ref(1), 0, ref(3), ref(4), "amax"], out(5, shape=(2, 3))),
        ],
        "fill_diagonal_weight": [
            node("Tensor.fill_diagonal_", [ref(1), 0.0], out(3, shape=(2, 3)))
        ],
        "log_normal_weight": [node("Tensor.log_normal_", [ref(1)], out(3, shape=(2, 3)))],
    }
    cases.update({f"opset10:{k}": {"base": "linear", "nodes": v} for k, v in writes.items()})
    return cases


FAMILIES = {
    "document": document_family,
    "autograd_function": autograd_function_family,
    "blowup": blowup_family,
    "dims": dims_family,
    "counts": counts_family,
    "nms": nms_family,
    "writes": writes_family,
    "as_strided": as_strided_family,
    "repeat_interleave": repeat_interleave_family,
    "broadcast": broadcast_family,
    "index": index_family,
    "opset10": opset10_family,
    "structure": structure_family,
    "tensors": tensors_family,
    "flags": flags_family,
    "state": state_family,
    "passes": passes_family,
}


def all_cases() -> dict:
    """Every crafted case of every family, by name."""
    cases = {}
    for family in FAMILIES.values():
        cases.update(family())
    return cases
