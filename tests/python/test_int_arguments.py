"""Every integer argument of every op is classified, and none asks for unbounded bytes.

``ir/ops.py`` declares each integer parameter of each op as a size, a scale, a count of
results, a dim or a value (``INT_CLASSES``); the op table refuses to build, and
``shared_ir/tools/gen_opset.py`` fails, while one is not. prober21c found four that no
rule counted: fft ``s``, ``diag``'s offset, the convolutions' and ``im2col``'s padding, on
a three-element input of the caller's, made 2 GiB to 35 TiB from a 1.3 KB file. Here every
argument of class ``scale`` of every op is called through a loaded file with an honest
value (it runs) and with one that asks for more than ``alloc_bytes`` (it is refused with
tracebridge's error, at load or at the call, never by the allocator), in a child process
capped at 3 GiB of address space; and every integer argument of every op is given large
values in the contract's random calls, with the same rule.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tracebridge.ir import ops
from tracebridge.runtime import checked_sizes

from .canary_child import address_space_limit, run_batch
from .test_op_contract import _literal, _node, _ref, base, crafted  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
_ALLOCATOR = ("can't allocate memory", "bad_alloc", "out of memory", "DefaultCPUAllocator")
W = 10  # the id of a literal weight or index tensor of a case


def _out(n: int = 1) -> list[dict]:
    return [{"id": 50 + i, "kind": "Tensor", "dtype": "float32", "shape": ["?"]} for i in range(n)]


def _d(k: int, v) -> list:
    return [v] * k


# op -> (the caller's input shape, nodes before the op, the op's args with "P" where the
# argument goes (or None), its keywords, and per scale parameter: (honest, too large)).
# "X" is the caller's input; a value of the form ("long",) is the input as int64.
def _conv(d: int) -> tuple:
    shape = [1, 1] + [3] * d
    weight = _literal(W, _nest([1.0], d + 2))
    args = ["X", _ref(W), None, _d(d, 1), "P:padding", _d(d, 1), 1]
    return shape, [weight], args, {}, {"padding": (_d(d, 2), _d(d, _BIG[d]))}


def _conv_t(d: int) -> tuple:
    shape = [1, 1] + [3] * d
    weight = _literal(W, _ones([1, 1] + [2] * d))  # a kernel of 2 along each dimension
    args = ["X", _ref(W), None, "P:stride", "P:padding", "P:output_padding", 1, "P:dilation"]
    return (
        shape,
        [weight],
        args,
        {},
        {
            "stride": (_d(d, 2), _d(d, _BIG[d])),
            "padding": (_d(d, 0), _d(d, 2**20)),  # shrinks: PyTorch refuses a negative size
            "output_padding": (_d(d, 0), _d(d, _BIG[d] - 1)),
            "dilation": (_d(d, 2), _d(d, _BIG[d])),
        },
        {"stride": _d(d, 1), "padding": _d(d, 0), "output_padding": _d(d, 0), "dilation": _d(d, 1)},
    )


def _ones(shape: list[int]):
    return [_ones(shape[1:]) for _ in range(shape[0])] if shape else 1.0


def _nest(inner: list, depth: int) -> list:
    out = inner
    for _ in range(depth - 1):
        out = [out]
    return out


# A value per dimension that makes a result past 2**30 bytes from a one- to three-element
# input: 2**29 elements along one, 2**15 along each of two, 2**10 along each of three.
_BIG = {1: 2**29, 2: 2**15, 3: 2**10}
CASES: list[tuple[str, tuple]] = [
    *((f"conv{d}d", _conv(d)) for d in (1, 2, 3)),
    *((f"conv_transpose{d}d", _conv_t(d)) for d in (1, 2, 3)),
]


def _with_defaults(case: tuple) -> tuple:
    return case if len(case) == 6 else (*case, {})


def _add(op, shape, nodes, args, kwargs, params, defaults=None):
    CASES.append((op, (shape, nodes, args, kwargs, params, defaults or {})))


_conv_t_1 = _conv_t(1)
_add(
    "convolution",
    [1, 1, 3],
    [_literal(W, [[[1.0, 1.0]]])],
    ["X", _ref(W), None, "P:stride", "P:padding", "P:dilation", True, "P:output_padding", 1],
    {},
    _conv_t_1[4],
    _conv_t_1[5],
)
_add(
    "im2col",
    [1, 1, 512, 512],
    [],
    ["X", "P:kernel_size", [1, 1], "P:padding", [1, 1]],
    {},
    {"kernel_size": ([3, 3], [256, 256]), "padding": ([1, 1], [2**14, 2**14])},
    {"kernel_size": [1, 1], "padding": [0, 0]},
)
_add(
    "col2im",
    [1, 4, 1],
    [],
    ["X", "P:output_size", [2, 2], [1, 1], [0, 0], [1, 1]],
    {},
    {"output_size": ([2, 2], [2**15, 2**15])},
)
for _d_ in (1, 2, 3):
    for _kind in ("avg", "max"):
        _add(
            f"adaptive_{_kind}_pool{_d_}d",
            [1, 1] + [2] * _d_,
            [],
            ["X", "P:output_size"],
            {},
            {"output_size": (_d(_d_, 3), _d(_d_, _BIG[_d_]))},
        )
for _name, _d_, _extra in (
    ("upsample_nearest1d", 1, []),
    ("_upsample_nearest_exact1d", 1, []),
    ("upsample_linear1d", 1, [False]),
    ("upsample_nearest2d", 2, []),
    ("_upsample_nearest_exact2d", 2, []),
    ("upsample_bilinear2d", 2, [False]),
    ("upsample_bicubic2d", 2, [False]),
    ("_upsample_bilinear2d_aa", 2, [False]),
    ("_upsample_bicubic2d_aa", 2, [False]),
    ("upsample_nearest3d", 3, []),
    ("_upsample_nearest_exact3d", 3, []),
    ("upsample_trilinear3d", 3, [False]),
):
    _add(
        _name,
        [1, 1] + [2] * _d_,
        [],
        ["X", "P:output_size", *_extra, None],
        {},
        {"output_size": (_d(_d_, 4), _d(_d_, _BIG[_d_]))},
    )
_add(
    "max_unpool2d",
    [1, 1, 1, 1],
    [_literal(W, [[[[0]]]], "int64")],
    ["X", _ref(W), "P:output_size"],
    {},
    {"output_size": ([2, 2], [2**15, 2**15])},
)
_add(
    "max_unpool3d",
    [1, 1, 1, 1, 1],
    [_literal(W, [[[[[0]]]]], "int64")],
    ["X", _ref(W), "P:output_size", [1, 1, 1], [0, 0, 0]],
    {},
    {"output_size": ([2, 2, 2], [2**10] * 3)},
)
_add(
    "affine_grid_generator",
    [1, 2, 3],
    [],
    ["X", "P:size", False],
    {},
    {"size": ([1, 1, 4, 4], [1, 1, 2**15, 2**15])},
)
for _name in ("diag", "diag_embed", "diagflat"):
    _param = "diagonal" if _name == "diag" else "offset"
    _add(_name, [3], [], ["X", f"P:{_param}"], {}, {_param: (2, 2**15)})
for _name in "fft ifft rfft irfft hfft ihfft".split():
    _add(f"fft.{_name}", [2, 3], [], ["X", "P:n"], {}, {"n": (8, 2**28)})
for _name in "fft2 ifft2 rfft2 irfft2 fftn ifftn rfftn irfftn".split():
    _add(f"fft.{_name}", [1, 1], [], ["X", "P:s"], {}, {"s": ([4, 4], [2**15, 2**15])})
_add("Tensor.unfold", [2**16], [], ["X", 0, "P:size", 1], {}, {"size": (4, 2**15)})
_add("Tensor.repeat", [3], [], ["X", "P:repeats"], {}, {"repeats": ([2, 2], [2**14, 2**14])})
_add("tile", [3], [], ["X", "P:dims"], {}, {"dims": ([2, 2], [2**14, 2**14])})
_add(
    "repeat_interleave",
    [3],
    [],
    ["X", "P:repeats"],
    {},
    {"repeats": (2, 2**28)},
)
_add(
    "repeat_interleave",
    [3],
    [],
    ["X", 2, 0],
    {"output_size": "P:output_size"},
    {"output_size": (6, 2**28)},
)
for _name in ("pad", "constant_pad_nd"):
    _add(_name, [3], [], ["X", "P:pad"], {}, {"pad": ([1, 2], [2**28, 2**28])})
_add("_pad_circular", [1, 1, 3], [], ["X", "P:pad"], {}, {"pad": ([1, 2], [2**28, 2**28])})
for _d_ in (1, 2, 3):
    for _kind in ("reflection", "replication"):
        _add(
            f"{_kind}_pad{_d_}d",
            [1, 1] + [3] * _d_,
            [],
            ["X", "P:padding"],
            {},
            {"padding": (_d(2 * _d_, 1), _d(2 * _d_, _BIG[_d_] // 2))},
        )
_add(
    "multinomial",
    [1, 3],
    [],
    ["X", "P:num_samples", True],
    {},
    {"num_samples": (4, 2**28)},
)
_add("one_hot", [3], [], [("long",), "P:num_classes"], {}, {"num_classes": (4, 2**28)})
_add("bincount", [3], [], [("long",), None, "P:minlength"], {}, {"minlength": (4, 2**28)})
_add("combinations", [3], [], ["X", "P:r", True], {}, {"r": (2, 2**11)})
for _name in ("vander", "linalg.vander"):
    _add(_name, [3], [], ["X"], {"N": "P:N"}, {"N": (4, 2**28)})
_add(
    "_pad_packed_sequence",
    [3, 2],
    [_literal(W, [1, 1, 1], "int64")],
    ["X", _ref(W), False, 0.0, "P:total_length"],
    {},
    {"total_length": (4, 2**28)},
)
_add(
    "stft",
    [64],
    [],
    ["X", "P:n_fft", "P:hop_length", "P:win_length", None, False, None, True],
    {},
    {"n_fft": (8, 2**20), "hop_length": (1, 2**20), "win_length": (8, 2**20)},
    {"n_fft": 8, "hop_length": 1, "win_length": 8},
)
_add(
    "istft",
    [5, 4, 2],
    [],
    [
        ("complex",),
        "P:n_fft",
        "P:hop_length",
        "P:win_length",
        None,
        True,
        False,
        True,
        "P:length",
    ],
    {},
    {
        "n_fft": (8, 2**20),
        "hop_length": (1, 2**27),
        "win_length": (8, 2**20),
        "length": (8, 2**28),
    },
    {"n_fft": 8, "hop_length": 1, "win_length": 8, "length": None},
)
# Where PyTorch itself refuses the large value before it allocates (a kernel larger than the
# input, a reflection past the border, a window past the signal, an output size that does not
# match the blocks): a clear refusal, as long as it is not the allocator's.
_PYTORCH_REFUSES = {
    ("im2col", "kernel_size"): False,
    ("col2im", "output_size"): True,
    ("stft", "n_fft"): True,
    ("stft", "win_length"): True,
    ("stft", "hop_length"): None,  # fewer frames: it runs
    ("istft", "n_fft"): True,
    ("istft", "win_length"): True,
    ("istft", "hop_length"): True,
    **{(f"reflection_pad{d}d", "padding"): True for d in (1, 2, 3)},
    ("_pad_circular", "pad"): True,
    **{(f"conv_transpose{d}d", "padding"): True for d in (1, 2, 3)},
    ("convolution", "padding"): True,
    ("repeat_interleave", "output_size"): True,
}


def _case_nodes(op: str, case: tuple, param: str, value) -> list[dict]:
    shape, before, args, kwargs, params, defaults = _with_defaults(case)
    nodes = list(before)

    def fill(a):
        if a == "X":
            return _ref(0)
        if isinstance(a, tuple):
            conv = {"long": "Tensor.long", "complex": "view_as_complex"}[a[0]]
            nodes.append(_node(conv, [_ref(0)], [_tensor_out(20)]))
            return _ref(20)
        if isinstance(a, str) and a.startswith("P:"):
            name = a[2:]
            return value if name == param else defaults.get(name, params[name][0])
        return a

    filled = [fill(a) for a in args]
    filled_kw = {k: fill(v) for k, v in kwargs.items()}
    count = {"adaptive_max_pool1d": 2, "adaptive_max_pool2d": 2, "adaptive_max_pool3d": 2,
             "_pad_packed_sequence": 2}.get(op, 1)  # fmt: skip
    nodes.append(_node(op, filled, _out(count), filled_kw))
    return nodes


def _tensor_out(vid: int) -> dict:
    return {"id": vid, "kind": "Tensor", "dtype": "float32", "shape": ["?"]}


def _scale_cases() -> list[tuple[str, str, str, object, tuple]]:
    """(op, parameter, "honest" or "large", value, case) for every case."""
    found = []
    for op, case in CASES:
        params = _with_defaults(case)[4]
        for param, (honest, large) in params.items():
            found.append((op, param, "honest", honest, case))
            found.append((op, param, "large", large, case))
    return found


def test_every_integer_argument_of_every_op_is_classified():
    """Each integer parameter of each op has a class; a value's reason is written; ops.json
    carries the classes the op table holds."""
    table = json.loads((ROOT / "shared_ir" / "ops.json").read_text())
    assert set(table["int_classes"]) == set(ops.INT_CLASSES)
    checked = 0
    for name, info in ops.OPS.items():
        for param, kinds in {**info.kwargs}.items():
            if {"int", "ints", "dim", "dims", "index"}.isdisjoint(kinds):
                continue
            assert info.ints.get(param) in ops.INT_CLASSES, (name, param)
            checked += 1
        for param, cls in info.ints.items():
            if cls == "value":
                assert ops.value_reason(name, param)
        assert table["ops"][name].get("ints", {}) == dict(info.ints), name
    assert checked > 400


def test_an_unclassified_integer_argument_fails_the_op_table_and_gen_opset():
    """An op whose integer parameter is declared nowhere: the op table does not build, and
    gen_opset.py fails with the op and the parameter named (here ``conv2d``'s padding,
    renamed as a new release of PyTorch might)."""
    with pytest.raises(ops.UnclassifiedIntegers, match="'frobnicate'"):
        ops.int_classes("conv2d", {"input": ("tensor",), "frobnicate": ("ints",)})
    script = (
        "import torch\n"
        "schemas = torch._C._jit_get_schemas_for_operator\n"
        "class Renamed:\n"
        "    def __init__(self, schema):\n"
        "        self.schema = schema\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(self.schema, name)\n"
        "    def __str__(self):\n"
        "        return str(self.schema).replace(' padding=', ' frobnicate=')\n"
        "def renamed(name):\n"
        "    found = schemas(name)\n"
        "    return [Renamed(s) for s in found] if name == 'aten::conv2d' else found\n"
        "torch._C._jit_get_schemas_for_operator = renamed\n"
        "import runpy, sys\n"
        "sys.argv = ['gen_opset.py', '--check']\n"
        "runpy.run_path('shared_ir/tools/gen_opset.py', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
        timeout=300,
    )
    assert done.returncode != 0
    assert "UnclassifiedIntegers" in done.stderr and "frobnicate" in done.stderr


def test_every_scale_argument_has_a_case():
    """The walk below covers every parameter of class ``scale`` of every op: an op that
    gains one must gain a case."""
    covered = {(op, param) for op, param, *_ in _scale_cases()}
    wanted = {
        (name, param)
        for name, info in ops.OPS.items()
        for param, cls in info.ints.items()
        if cls == "scale"
    }
    assert wanted <= covered, sorted(wanted - covered)
    assert {op for op, _ in wanted} <= checked_sizes.SCALED_OPS | checked_sizes.OWN_BOUND


def _of_shape(program: tuple, shape: list[int]) -> tuple:
    """``program`` (program.json and tensors) with its input declared of ``shape``'s rank."""
    doc = json.loads(json.dumps(program[0]))
    (spec,) = doc["methods"]["forward"]["inputs"]
    spec["shape"] = [f"s{i}" for i in range(len(shape))]
    spec["example"] = list(shape)
    return doc, program[1]


def _clear(outcome: dict) -> bool:
    return outcome["stage"] in ("load", "call") and not any(
        word in outcome.get("message", "") for word in _ALLOCATOR
    )


def test_every_scale_argument_is_bounded_in_bytes(tmp_path, base):  # noqa: F811
    """Each scale argument of each op, through a loaded file on the caller's input: an
    honest value runs, a value whose result passes ``alloc_bytes`` is refused by
    tracebridge (at load, or at the call naming the limit), never by the allocator."""
    jobs, cases = [], []
    for op, param, which, value, case in _scale_cases():
        nodes = _case_nodes(op, case, param, value)
        path = crafted(tmp_path, _of_shape(base, case[0]), nodes, name=f"{len(jobs)}.tb")
        jobs.append({"path": str(path), "shape": case[0], "calls": 2})
        cases.append((op, param, which, value))
    outcomes = run_batch(
        jobs, tmp_path, timeout=300 + 2 * len(jobs), memory_bytes=address_space_limit(3 << 30)
    )
    broken = []
    for (op, param, which, value), outcome in zip(cases, outcomes):
        refuses = _PYTORCH_REFUSES.get((op, param), False)
        label = f"{op}({param}={json.dumps(value)[:40]}) {which}"
        if which == "honest":
            if outcome["stage"] != "ok":
                broken.append(f"{label}: {outcome['stage']}: {outcome.get('message', '')[:200]}")
        elif refuses is None:
            if outcome["stage"] != "ok" and not _clear(outcome):
                broken.append(f"{label}: {outcome}")
        elif not _clear(outcome):
            broken.append(f"{label}: {outcome['stage']}: {outcome.get('message', '')[:300]}")
        elif not refuses and "limit" not in outcome.get("message", ""):
            broken.append(f"{label}: refused, not by a limit: {outcome.get('message', '')[:300]}")
    assert not broken, "\n".join(broken)


_LARGE = {"size": 2**20, "scale": 2**20, "results": 2**20, "dim": 2**31 + 1, "value": 2**31 + 1}


def test_every_integer_argument_given_large_values_is_refused_or_runs_within_bounds(
    tmp_path,
    base,  # noqa: F811
):
    """Every integer parameter of every op, in the contract's random calls (tests/python/
    contract_cases.py) with that parameter large (2**20 where it sizes, 2**31 + 1 where it
    is a dim or a value): tracebridge's error or a result, never a crash, a raw exception
    or the allocator's refusal (children capped at 3 GiB)."""
    from .contract_cases import case, contract_ops

    jobs, cases = [], []
    for op in contract_ops():
        info = ops.info(op)
        for param, cls in sorted(info.ints.items()):
            nodes = case(op, random.Random(f"ints:{op}:{param}"))
            node = nodes[-1]
            kinds = info.kwargs.get(param, ())
            big = _LARGE[cls]
            value = [big] if {"ints", "dims"} & set(kinds) else big
            position = next((i for i, names in enumerate(info.arg_names) if param in names), None)
            if position is not None and position < len(node["args"]):
                node["args"][position] = value
            else:
                node["kwargs"][param] = value
            path = crafted(tmp_path, base, nodes, name=f"{len(jobs)}.tb")
            jobs.append({"path": str(path), "shape": [3], "calls": 1})
            cases.append((op, param, value))
    outcomes = run_batch(
        jobs, tmp_path, timeout=300 + 2 * len(jobs), memory_bytes=address_space_limit(3 << 30)
    )
    broken = [
        f"{op}({param}={value}): {o['stage']}: {o.get('message', '')[:200]}"
        for (op, param, value), o in zip(cases, outcomes)
        if o["stage"] not in ("load", "call", "ok")
        or any(word in o.get("message", "") for word in _ALLOCATOR)
    ]
    assert not broken, "\n".join(broken)
    assert len(cases) > 400


def test_randint_high_is_a_value_not_a_size(tmp_path, base):  # noqa: F811
    """``randint(0, 2**31 - 1, (8,))`` saves and loads (prober21c F10: position 1 is
    ``size`` in ``randint(high, size)``, and was counted as 2**31 - 1 elements here, where
    it is ``high``); a size written there in the two-argument form is still counted."""
    import torch

    import tracebridge

    traced = tracebridge.trace(
        lambda x: torch.randint(0, 2**31 - 1, (8,)) + x.sum().long(), torch.ones(3)
    )
    traced.save(tmp_path / "randint.tb")
    assert tracebridge.load(tmp_path / "randint.tb")(torch.ones(3)).shape == (8,)
    out = {"id": 1, "kind": "Tensor", "dtype": "int64", "shape": ["?"]}
    for args in ([5, [2**30]], [0, 5, [2**30]]):
        nodes = [_node("randint", args, [out])]
        with pytest.raises(tracebridge.ArtifactError, match="resource limits"):
            tracebridge.load(crafted(tmp_path, base, nodes, name="big.tb"))


def test_a_matrix_power_of_int64_min_is_refused_at_load(tmp_path, base):  # noqa: F811
    """``matrix_power(x, -2**63)`` never returns in PyTorch (it negates ``n``, which stays
    negative: prober21c F8); the file is refused at load. ``-2**62`` still loads."""
    import tracebridge

    out = {"id": 1, "kind": "Tensor", "dtype": "float32", "shape": ["?"]}
    for op in ("matrix_power", "linalg.matrix_power"):
        nodes = [_node(op, [_ref(0), -(2**63)], [out])]
        with pytest.raises(tracebridge.ArtifactError, match="never return"):
            tracebridge.load(crafted(tmp_path, base, nodes, name="power.tb"))
        nodes = [_node(op, [_ref(0), -(2**62)], [out])]
        tracebridge.load(crafted(tmp_path, base, nodes, name="power62.tb"))


def test_sizes_given_as_integer_tensors_are_bounded_by_their_values_and_remembered():
    """A padding kept as a 0-d integer buffer (EnCodec's ``padding_total``) reaches
    ``F.pad`` as a tensor in its list of ints. The bound reads the value (the meta run
    cannot: a meta tensor has none), so a large one is refused and a small one passes
    once, then by its key, which holds the value: before, the meta run failed on every
    call (EnCodec 1.9x torch.jit) and a key of shapes alone would have let a large padding
    through after a small one."""
    import torch
    import torch.nn.functional as F

    calls = []
    shape_function = checked_sizes.result_bytes
    run = checked_sizes.bounded("pad", F.pad)
    x = torch.randn(1, 2, 16)
    try:
        checked_sizes.result_bytes = lambda *a: calls.append(a) or shape_function(*a)
        for _ in range(3):
            out = run(x, (torch.tensor(3), torch.tensor(0)), "reflect", 0.0)
        assert torch.equal(out, F.pad(x, (3, 0), "reflect"))
        assert calls == []  # the upper bound read the values: no shape function
        huge = (torch.tensor(2**40), torch.tensor(0))
        with pytest.raises(checked_sizes.CheckFailed, match="more than the limit"):
            run(x, huge, "constant", 0.0)
    finally:
        checked_sizes.result_bytes = shape_function
    assert checked_sizes._key((x, (torch.tensor(3), 0))) != checked_sizes._key(
        (x, (torch.tensor(4), 0))
    )


def test_a_traced_padding_kept_as_an_integer_buffer_runs_without_the_shape_function(tmp_path):
    """The same, through a traced and loaded module: right at two lengths, and the shape
    function is not asked on every call."""
    import torch
    import torch.nn.functional as F

    import tracebridge

    class Padded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(2, 3, 5)
            self.register_buffer("padding_total", torch.tensor(4), persistent=False)

        def forward(self, x):
            extra = x.shape[-1] % 2
            return self.conv(F.pad(x, (self.padding_total, extra), "reflect"))

    model = Padded().eval()
    path = tmp_path / "padded.tb"
    tracebridge.trace(model, torch.randn(1, 2, 16)).save(path)
    loaded = tracebridge.load(path)
    calls = []
    shape_function = checked_sizes.result_bytes
    try:
        checked_sizes.result_bytes = lambda *a: calls.append(a) or shape_function(*a)
        with torch.no_grad():
            for length in (16, 17, 16, 17):
                x = torch.randn(1, 2, length)
                torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    finally:
        checked_sizes.result_bytes = shape_function
    assert calls == []
