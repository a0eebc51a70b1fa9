"""shared_ir/SPEC.md against the code: schema copy, op-set reference, literal tags, the
example document, and the text grammar (a small parser of section 13 reads every printed
graph of the model zoo)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import sys
import warnings
import zipfile

import pytest
import torch

import tracebridge
from tracebridge import artifact, ir
from tracebridge.frontends import cli
from tracebridge.ir import ops as opset
from tracebridge.ir import pytree
from tracebridge.ir.printer import graph_text

from .graph_helpers import skip_unless_tables_torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(REPO, "shared_ir")


def _read(name: str) -> str:
    with open(os.path.join(SHARED, name), encoding="utf-8") as handle:
        return handle.read()


SPEC = _read("SPEC.md")


def section(number: int) -> str:
    start = SPEC.index(f"\n## {number}. ")
    end = SPEC.find("\n## ", start + 1)
    return SPEC[start : end if end != -1 else len(SPEC)]


# --- companion files -----------------------------------------------------------------------


def test_schema_copy_is_identical_to_the_package_schema():
    package = os.path.join(REPO, "python", "tracebridge", "schema", "program.schema.json")
    with open(package, "rb") as a, open(os.path.join(SHARED, "program.schema.json"), "rb") as b:
        assert a.read() == b.read(), "copy python/tracebridge/schema/program.schema.json"


def _gen_opset():
    path = os.path.join(SHARED, "tools", "gen_opset.py")
    spec = importlib.util.spec_from_file_location("gen_opset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_opset_md_is_up_to_date():
    skip_unless_tables_torch()
    gen = _gen_opset()
    with open(os.path.join(SHARED, "opset.md"), encoding="utf-8") as handle:
        current = handle.read()
    assert current == gen.render(), "run: .venv/bin/python shared_ir/tools/gen_opset.py"


def test_opset_md_lists_every_op_once_with_flags():
    text = _read("opset.md")
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]*) \|", text, re.M)
    gen = _gen_opset()
    order = [title for title, _, _ in gen.GROUPS]
    expected = sorted(opset.all_names(), key=lambda n: order.index(gen.group_of(n)))
    assert [name for name, _ in rows] == expected
    flags = dict(rows)
    assert flags["Tensor.add_"].strip() == "in-place"
    assert flags["dropout"].strip() == "random"
    assert flags["chunk"].strip() == "variadic, checked"
    assert flags["grid_sampler"].strip() == "checked"
    assert flags["relu"].strip() == ""


# --- the words of the spec follow the code ---------------------------------------------------


def test_spec_names_the_current_versions():
    assert SPEC.startswith(f"# The tracebridge artifact format, version {ir.FORMAT_VERSION}")
    assert f"op-set version **{ir.OPSET_VERSION}**" in SPEC


def test_spec_lists_every_dtype_value_kind_and_spec_kind():
    schema = json.loads(_read("program.schema.json"))
    schema["$defs"] = schema.get("$defs") or schema["definitions"]  # 2020-12 or draft-07
    for dtype in schema["$defs"]["dtype"]["enum"]:
        assert dtype in section(4), dtype
    assert set(schema["$defs"]["dtype"]["enum"]) == set(ir.DTYPE_NAMES.values())
    for short in ir.DTYPE_SHORT.values():
        assert f"`{short}" in section(4) or f" {short}" in section(4), short
    for kind in schema["$defs"]["value"]["properties"]["kind"]["enum"]:
        assert f"`{kind}`" in section(4), kind
    for kind in schema["$defs"]["spec"]["properties"]["t"]["enum"]:
        assert f"| `{kind}` |" in section(3), kind
    for kind in ("parameter", "buffer", "constant"):
        assert f"`{kind}`" in section(9)


def test_spec_lists_every_prim_scalar_op_and_guard_kind():
    table = section(7)
    for name in opset.PRIM_OPS:
        assert f"`{name}`" in table, name
    for name in opset.SCALAR_OPS:
        short = name.split(".", 1)[1]
        assert re.search(rf"`scalar\.[^`]*\b{short}\b", table), name
    for kind in ("value", "branch", "loop", "count"):
        assert f"`{kind}`" in section(8)


SAMPLES = [
    None,
    True,
    3,
    0.5,
    "mean",
    [1, 2],
    ir.Ref(7),
    math.inf,
    -math.inf,
    math.nan,
    (1, 2),
    {"a": 1},
    slice(1, None, 2),
    Ellipsis,
    torch.float16,
    torch.device("cpu"),
    torch.channels_last,
    torch.strided,
    1 + 2j,
]


@pytest.mark.parametrize("value", SAMPLES, ids=[repr(v) for v in SAMPLES])
def test_literal_encoding_is_the_one_in_section_5(value):
    encoded = ir.encode(value)
    if isinstance(encoded, dict):
        (tag,) = encoded
        assert f'{{"{tag}":' in section(5), tag
    back = ir.decode(json.loads(json.dumps(encoded)))
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:
        assert back == value and type(back) is type(value)


def test_unknown_literal_tags_are_refused():
    for bad in ({"lambda": "x"}, {"float": "1e999"}, {"dtype": "float8"}, {"a": 1, "b": 2}):
        with pytest.raises(ValueError):
            ir.decode(bad)


def _example_document() -> dict:
    block = section(14)
    return json.loads(
        block[block.index("```json") + 7 : block.index("```", block.index("```json") + 7)]
    )


def test_the_example_document_is_valid_and_runs(tmp_path, capsys):
    doc = _example_document()
    artifact.check_document(doc, "SPEC.md")
    blob = artifact.safetensors_bytes({})[0]
    assert doc["tensors"]["sha256"] == hashlib.sha256(blob).hexdigest()
    path = tmp_path / "example.tb"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", blob)
    assert cli.main(["validate", str(path)]) == 0
    f = tracebridge.load(path)
    assert f(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 4.0]


# --- the text grammar of section 13 ------------------------------------------------------------


class GrammarError(Exception):
    pass


class TextParser:
    """A recursive-descent parser of the EBNF in SPEC.md section 13 (one line at a time)."""

    DSHORT = ("bf16", "c128", "c64", "f32", "f64", "f16", "i64", "i32", "i16", "i8", "u8", "b8")
    KINDS = ("int", "float", "bool", "dtype", "device", "list")
    WORDS = (
        "True",
        "False",
        "None",
        "inf",
        "-inf",
        "nan",
        "...",
        "strided",
        "float32",
        "float64",
        "float16",
        "bfloat16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
        "complex64",
        "complex128",
        "contiguous_format",
        "channels_last_3d",
        "channels_last",
        "preserve_format",
    )
    SCALAR = re.compile(
        r"-?(\d+\.?\d*(e[-+]?\d+)?|\.\d+)|'([^'\\]|\\.)*'|\"([^\"\\]|\\.)*\""
        r"|\(-?[\d.e+-]+[-+][\d.e+-]*j\)|-?[\d.e+-]*j"
    )
    VALUE = re.compile(r"%(\?\d+|\d+|[A-Za-z_][\w.]*)")

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def fail(self, what):
        raise GrammarError(f"expected {what} at column {self.i}: {self.s!r}")

    def eat(self, token: str) -> bool:
        if self.s.startswith(token, self.i):
            self.i += len(token)
            return True
        return False

    def need(self, token: str) -> None:
        if not self.eat(token):
            self.fail(repr(token))

    def regex(self, pattern) -> bool:
        m = pattern.match(self.s, self.i)
        if m and m.end() > self.i:
            self.i = m.end()
            return True
        return False

    def end(self) -> None:
        if self.i != len(self.s):
            self.fail("end of line")

    def type(self) -> None:
        for short in self.DSHORT:
            if self.eat(short + "["):
                if not self.eat("]"):
                    self.dim()
                    while self.eat(", "):
                        self.dim()
                    self.need("]")
                return
        if not any(self.eat(k) for k in self.KINDS):
            self.fail("a type")

    def dim(self) -> None:
        if not self.regex(re.compile(r"\?|(\d+\*)?s\d+([+-]\d+)?|\d+")):
            self.fail("a dimension")

    def sequence(self, item, close: str, single_comma: bool = True) -> None:
        """Items separated by ', '; a single item takes a trailing ',' where tuples do."""
        if self.eat(close):
            return
        item()
        if single_comma and self.eat("," + close):
            return
        while self.eat(", "):
            item()
        self.need(close)

    def literal(self) -> None:
        start = self.i
        self._atom()
        if self.s.startswith(":", self.i) and not self.s.startswith(": ", self.i):
            self._slice_rest()
        elif self.i == start:
            self.fail("a literal")

    def _slice_rest(self) -> None:
        self.need(":")
        if self.s[self.i : self.i + 1] not in ("", ",", ")", "]", ":", " "):
            self._atom()
        if self.eat(":"):
            self._atom()

    def _atom(self) -> None:
        if self.s.startswith(":", self.i) and not self.s.startswith(": ", self.i):
            return  # a slice with no start
        if self.regex(self.VALUE):
            return
        if self.eat("device("):
            self.regex(self.SCALAR)
            self.need(")")
            return
        if self.eat("("):
            return self.sequence(self.literal, ")")
        if self.eat("["):
            return self.sequence(self.literal, "]")
        if self.eat("{"):
            return self.sequence(self._entry, "}")
        for word in self.WORDS:
            if self.s.startswith(word, self.i) and not re.match(
                r"\w", self.s[self.i + len(word) :][:1]
            ):
                self.i += len(word)
                return
        if not self.regex(self.SCALAR):
            self.fail("a literal")

    def _entry(self) -> None:
        self.literal()
        self.need(": ")
        self.literal()

    def target(self) -> None:
        if self.eat("_"):
            return
        if self.eat("("):
            return self.sequence(self.target, ")")
        if not self.regex(self.VALUE):
            self.fail("a value")
        self.need(": ")
        self.type()

    def arg(self) -> None:
        m = re.compile(r"[A-Za-z_]\w*=(?!=)").match(self.s, self.i)
        if m:
            self.i = m.end()
        self.literal()

    def result(self) -> None:
        m = re.compile(r"[A-Za-z_]\w*\(").match(self.s, self.i)
        if m and not self.s.startswith("device(", self.i):
            self.i = m.end()
            return self.sequence(self.result, ")")
        if self.eat("("):
            return self.sequence(self.result, ")")
        if self.eat("["):
            return self.sequence(self.result, "]")
        if self.eat("{"):
            return self.sequence(self._result_entry, "}")
        self.literal()

    def _result_entry(self) -> None:
        self.regex(self.SCALAR)
        self.need(": ")
        self.result()

    def stmt(self) -> None:
        self.need("  ")
        if self.eat("guard "):
            self.literal()
            self.need(" == ")
            self.literal()
            self.need("  # ")
            if not re.search(r", at ([^:]+:\d+|\?)$", self.s):
                self.fail("', at FILE:LINE'")
            self.i = len(self.s)
            return
        save = self.i
        try:
            self.target()
            self.need(" = ")
        except GrammarError:
            self.i = save  # a node without targets
        if not self.regex(re.compile(r"[A-Za-z_][\w.]*")):
            self.fail("an op")
        self.need("(")
        self.sequence(self.arg, ")", single_comma=False)
        if self.eat("  # ") and not self.regex(re.compile(r"[^:\s]+:\d+")):
            self.fail("FILE:LINE")
        self.end()


def check_graph_text(text: str) -> None:
    lines = text.split("\n")
    header = TextParser(lines[0])
    header.need("graph ")
    header.regex(re.compile(r"[A-Za-z_]\w*"))
    header.need("(")
    if not header.eat(") {"):

        def input_():
            if not header.regex(TextParser.VALUE):
                header.fail("an input")
            header.need(": ")
            header.type()

        input_()
        while header.eat(", "):
            input_()
        header.need(") {")
    header.end()
    assert lines[-1] == "}" and lines[-2].startswith("  return ")
    for line in lines[1:-2]:
        TextParser(line).stmt()
    ret = TextParser(lines[-2])
    ret.need("  return ")
    ret.result()
    ret.end()


def test_the_parser_rejects_what_the_grammar_does_not_allow():
    for bad in (
        "  %0: f32[3] relu(%x)",
        "  %0: q7[3] = relu(%x)",
        "  guard %1 = 3  # x, at a:1",
        "  %0: f32[3] = relu(%x) # a.py:3",
        "  %0: f32[3] = relu(%x,)",
    ):
        with pytest.raises(GrammarError):
            TextParser(bad).stmt()


def _zoo_graphs():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models import CASES

    for name, make in CASES.items():
        case = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if case.methods:
                inputs = {m: examples[0] for m, examples in case.methods.items()}
                traced = tracebridge.trace_module(case.model, inputs, check_trace=False)
            else:
                traced = tracebridge.trace(
                    case.model, case.example_inputs, check_trace=False, **case.trace_kwargs
                )
        yield name, traced.program


def _odd_function(x, y):
    a, b = x.chunk(2)
    z = torch.nn.functional.pad(a, (1, 1), value=float("-inf"))
    w = b.to(dtype=torch.float64)[..., None, 0:1]
    if x.shape[0] > 2:
        w = w * 2
    n = x.size(0) // 2
    return {"z": z, "w": w}, [y.view(n, -1)], (x.sum().item(),), None, 3


def test_printed_graphs_follow_the_grammar_and_zoo_files_validate(tmp_path, capsys):
    programs = list(_zoo_graphs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        odd = tracebridge.trace(
            _odd_function, (torch.randn(4, 3), torch.randn(4, 2)), strict=False, check_trace=False
        )
    programs.append(("odd", odd.program))
    assert len(programs) >= 10
    texts = 0
    for name, program in programs:
        for method, graph in program.methods.items():
            text = graph_text(graph, method)
            try:
                check_graph_text(text)
            except GrammarError as exc:
                pytest.fail(f"{name}.{method}: {exc}")
            texts += 1
        path = tmp_path / f"{name}.tb"
        artifact.write(program, path)
        assert cli.main(["validate", str(path)]) == 0, capsys.readouterr().err
    odd_text = graph_text(odd.program.methods["forward"], "f")
    for piece in (
        "-inf",
        "float64",
        "(..., None, 0:1)",
        "guard ",
        "return ({'z': ",
        "[%",
        "None, 3)",
        "(%0: f32[2, 3], %1: f32[2, 3]) = chunk(%x, 2)",
    ):
        assert piece in odd_text, (piece, odd_text)
    assert texts >= len(programs)
    assert pytree.LEAF == {"t": "leaf"}
