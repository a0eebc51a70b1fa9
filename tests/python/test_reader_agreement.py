"""R and Python read every file alike, and print nothing from a file raw (issue 17 items 6
and 7). Each crafted file here is read by both languages: Python's reader
(``tracebridge.artifact``) in this process and R's (``jit_inspect()``, base R and jsonlite,
sourced from R/ into a plain Rscript) in one child process for all files.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.artifact import read_json
from tracebridge.frontends import cli
from tracebridge.ir import graph_from_json
from tracebridge.ir.printable import printable
from tracebridge.ir.printer import graph_text

from .r_reader import run_r

ROOT = Path(__file__).resolve().parents[2]
HAS_R = shutil.which("Rscript") is not None

# Raw characters that must never reach a terminal: C0 (NUL, BEL, ESC, ...), DEL, C1
# (U+009B is a one-character CSI) and the bidirectional marks.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

# R's reader over files: "PATH\tMODE" lines; MODE "read" runs jit_inspect(quiet = TRUE),
# "print" also writes what print() shows to PATH.txt (UTF-8, byte for byte).
R_READER = r"""
for (line in readLines(args[[2]])) {
  parts <- strsplit(line, "\t", fixed = TRUE)[[1]]
  path <- parts[[1]]
  r <- tryCatch({
    info <- jit_inspect(path, quiet = TRUE)
    if (identical(parts[[2]], "print")) {
      shown <- enc2utf8(capture.output(print(info)))
      con <- file(paste0(path, ".txt"), open = "wb")
      writeBin(charToRaw(paste(shown, collapse = "\n")), con)
      close(con)
    }
    "accept"
  }, error = function(e) paste("refuse", gsub("\n", " ", conditionMessage(e))))
  cat(basename(path), "\t", r, "\n", sep = "")
}
"""


def r_read(paths: list[Path], workdir: Path, mode: str = "read") -> dict[str, str]:
    """R's verdict on each file: name -> "accept" or "refuse MESSAGE"."""
    listing = workdir / "files.txt"
    listing.write_text("\n".join(f"{p}\t{mode}" for p in paths))
    out = run_r(R_READER, listing)
    return dict(line.split("\t", 1) for line in out.splitlines())


def python_read(path: Path) -> str:
    try:
        read_json(path)
    except tracebridge.ArtifactError as exc:
        return f"refuse {exc}"
    return "accept"


# --- files ---------------------------------------------------------------------------------


def _guarded(x):
    if x.shape[0] > 2:
        return x.relu() * 2
    return x


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict:
    """A real artifact with a guard: its program.json (parsed) and its members' bytes."""
    path = tmp_path_factory.mktemp("real") / "g.tb"
    with pytest.warns(tracebridge.TracerWarning):
        tracebridge.trace(_guarded, torch.ones(3)).save(path)
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    return {"doc": json.loads(members["program.json"]), "members": members}


def write(path: Path, program: bytes | str | dict, tensors: bytes) -> Path:
    """An artifact of ``program`` (a dict is written as JSON, text and bytes as they are)."""
    if isinstance(program, dict):
        program = json.dumps(program)
    if isinstance(program, str):
        program = program.encode("utf-8")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", program)
        archive.writestr("tensors.safetensors", tensors)
    return path


# --- printing (item 7) ---------------------------------------------------------------------

HOSTILE = {
    "esc": "\x1b[2J\x1b]0;pwned\x07",
    "bel": "\x07",
    "rlo": "\u202etxt.exe",
    "csi": "\x9b31m",
}


def _hostile_doc(real: dict, version: str, loc: str) -> dict:
    doc = json.loads(json.dumps(real["doc"]))
    doc["producer"]["version"] = version
    for graph in doc["methods"].values():
        for node in graph["nodes"]:
            node["loc"] = loc
    return doc


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_inspect_escapes_control_and_bidi_characters_in_producer_version(real, tmp_path, kind):
    text = HOSTILE[kind]
    path = write(tmp_path / "v.tb", _hostile_doc(real, f"1.0{text}", "m.py:3"), b"")
    shown = io.StringIO()
    with redirect_stdout(shown):
        assert cli.main(["inspect", str(path)]) == 0
    out = shown.getvalue()
    assert not UNSAFE.search(out), ascii(out)
    assert printable(text) in out
    assert "producer:   tracebridge 1.0\\" in out


@pytest.mark.parametrize("loc", ["m\x9b31m.py:3", "\u202eyp.m:3", "m.py\u2066:3"])
def test_a_loc_with_c1_or_bidi_characters_is_escaped_in_graph_dot_and_inspect(real, tmp_path, loc):
    """The loc grammar admits U+009B and U+202E (it refuses only C0 and DEL): every printer
    escapes them."""
    path = write(tmp_path / "l.tb", _hostile_doc(real, "1.0", loc), b"")
    loaded = tracebridge.load(path)
    escaped = printable(loc)
    assert escaped != loc
    dot = cli.to_dot(loaded.program.methods["forward"], "forward")
    assert escaped in loaded.graph and not UNSAFE.search(loaded.graph)
    assert escaped.replace("\\", "\\\\") in dot and not UNSAFE.search(dot)  # DOT doubles \\
    shown = io.StringIO()
    with redirect_stdout(shown):
        cli.main(["inspect", str(path)])
    assert not UNSAFE.search(shown.getvalue()) and escaped in shown.getvalue()
    if shutil.which("dot"):
        svg = cli.to_svg(cli.to_dot(loaded.program.methods["forward"], "forward")).decode()
        assert not UNSAFE.search(svg), ascii(svg)


def test_a_guard_description_is_escaped_in_graph_and_dot(real, tmp_path):
    doc = _hostile_doc(real, "1.0", "m.py:3")
    guard = next(n for n in doc["methods"]["forward"]["nodes"] if n["op"] == "prim.guard")
    guard["kwargs"]["what"] = "x > 2\x1b[31m\u202e"
    loaded = tracebridge.load(write(tmp_path / "w.tb", doc, b""))
    dot = cli.to_dot(loaded.program.methods["forward"], "forward")
    assert "x > 2\\x1b[31m\\u202e" in loaded.graph and not UNSAFE.search(loaded.graph)
    assert "x > 2\\\\x1b[31m\\\\u202e" in dot and not UNSAFE.search(dot)


@pytest.mark.skipif(not HAS_R, reason="R is not installed")
def test_jit_inspect_escapes_what_python_escapes(real, tmp_path):
    """R's printer escapes the same characters the same way: its graph text is Python's,
    and what print() shows holds no raw control character or bidirectional mark (ESC, BEL
    and U+202E in the version; U+009B and U+202E in a loc; ESC and BEL in a loc, which only
    Python's full checker refuses)."""
    cases = {
        "version": _hostile_doc(real, "1.0" + "".join(HOSTILE.values()), "m.py:3"),
        "loc_c1": _hostile_doc(real, "1.0", "m\x9b31m.py:3"),
        "loc_rlo": _hostile_doc(real, "1.0", "\u202eyp.m:3"),
        "loc_esc": _hostile_doc(real, "1.0", "m\x1b[2J\x07.py:3"),
    }
    paths = [write(tmp_path / f"{n}.tb", d, b"") for n, d in cases.items()]
    verdicts = r_read(paths, tmp_path, mode="print")
    for path in paths:
        assert verdicts[path.name] == "accept", verdicts[path.name]
        shown = Path(f"{path}.txt").read_bytes().decode("utf-8")
        assert not UNSAFE.search(shown), ascii(shown)
        if path.stem != "loc_esc":  # Python's checker refuses C0 in a loc
            doc, _ = read_json(path)
            graph = graph_text(graph_from_json(doc["methods"]["forward"]), "forward")
            assert graph in shown, (ascii(graph), ascii(shown))
    version = Path(f"{paths[0]}.txt").read_text(encoding="utf-8")
    assert "1.0\\x1b[2J\\x1b]0;pwned\\x07\\x07\\u202etxt.exe\\x9b31m" in version
    assert "m\\x1b[2J\\x07.py:3" in Path(f"{paths[3]}.txt").read_text(encoding="utf-8")


# --- one grammar (item 6): files R and Python once read differently --------------------------


@pytest.fixture(scope="module")
def module(tmp_path_factory) -> dict:
    """A real artifact with state (nn.Linear(2, 1): weight [1, 2], bias [1])."""
    path = tmp_path_factory.mktemp("module") / "m.tb"
    tracebridge.trace(torch.nn.Linear(2, 1), torch.ones(1, 2)).save(path)
    with zipfile.ZipFile(path) as archive:
        return {"doc": json.loads(archive.read("program.json"))}


def _header(entries: dict, data: bytes = b"") -> bytes:
    """A safetensors member: the header written as given (text kept as is) and ``data``."""
    text = (entries if isinstance(entries, str) else json.dumps(entries)).encode()
    return len(text).to_bytes(8, "little") + text + data


def _state_file(module: dict, path: Path, bias_shape, header_bias: str) -> Path:
    """The Linear's artifact with bias of ``bias_shape`` in program.json and ``header_bias``
    (JSON text) as its safetensors entry; the weight is stored after it."""
    doc = json.loads(json.dumps(module["doc"]))
    doc["state"]["bias"]["shape"] = bias_shape
    doc["tensors"].pop("sha256", None)
    weight = '{"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}'
    return write(
        path, doc, _header('{"weight": ' + weight + ', "bias": ' + header_bias + "}", bytes(8))
    )


def _json_with(real: dict, **meta) -> str:
    doc = json.loads(json.dumps(real["doc"]))
    doc["meta"] = meta
    return json.dumps(doc)


def grammar_cases(real: dict, module: dict, folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, words both refusals must contain)."""
    text = json.dumps(real["doc"])
    big = 2**53
    cases = {
        "json_form_feed": (text.replace(', "kind"', ',\f"kind"', 1), "control character"),
        "json_vertical_tab": (text.replace(', "kind"', ',\v"kind"', 1), "control character"),
        "json_4301_digits": (
            _json_with(real).replace('"meta": {}', '"meta": {"n": ' + "7" * 4301 + "}"),
            "4300 digits",
        ),
        "json_keys_after_nul": (_json_with(real, **{"a\0x": 1, "a\0y": 2}), "U+0000"),
        "json_lone_surrogate_keys": (
            _json_with(real).replace('"meta": {}', '"meta": {"\\ud800": 1, "\\udbff": 2}'),
            "lone surrogate",
        ),
        "json_nul_in_version": (text.replace('"version": "', '"version": "1\\u0000', 1), "U+0000"),
        # R's mark of a big integer, forged in a string: 2 in R, a string in Python.
        "json_forged_big_int": (
            text.replace('"format_version": 2', '"format_version": "\\u001ftbint:2"', 1),
            "U+001F",
        ),
    }
    paths = {n: (write(folder / f"{n}.tb", t, b""), w) for n, (t, w) in cases.items()}
    stated = {
        "st_shape_float": (
            [1],
            '{"dtype": "F32", "shape": [1.0], "data_offsets": [8, 12]}',
            "shape",
        ),
        "st_offset_float": (
            [1],
            '{"dtype": "F32", "shape": [1], "data_offsets": [8, 12.0]}',
            "data_offsets",
        ),
        "st_offset_exponent": (
            [1],
            '{"dtype": "F32", "shape": [1], "data_offsets": [8, 1.2e1]}',
            "data_offsets",
        ),
        "st_shape_past_2_53": (
            [big + 1, 0],
            f'{{"dtype": "F32", "shape": [{big}, 0], "data_offsets": [8, 8]}}',
            "shape",
        ),
        "st_zero_numel_dim_2_63": (
            [2**63, 0],
            f'{{"dtype": "F32", "shape": [{2**63}, 0], "data_offsets": [8, 8]}}',
            "2^63",
        ),
    }
    for name, (shape, entry, words) in stated.items():
        paths[name] = (_state_file(module, folder / f"{name}.tb", shape, entry), words)
    return paths


def test_the_files_r_and_python_once_read_differently_are_refused_by_python(real, module, tmp_path):
    for name, (path, words) in grammar_cases(real, module, tmp_path).items():
        verdict = python_read(path)
        assert verdict.startswith("refuse"), (name, verdict)
        assert words in verdict, (name, verdict)
        with pytest.raises(tracebridge.ArtifactError):
            tracebridge.load(path)


@pytest.mark.skipif(not HAS_R, reason="R is not installed")
def test_the_files_r_and_python_once_read_differently_are_refused_by_r(real, module, tmp_path):
    cases = grammar_cases(real, module, tmp_path)
    verdicts = r_read([p for p, _ in cases.values()], tmp_path)
    for name, (path, words) in cases.items():
        assert verdicts[path.name].startswith("refuse"), (name, verdicts[path.name])
        assert words in verdicts[path.name], (name, verdicts[path.name])


def _crc_broken(real: dict, path: Path) -> Path:
    write(path, real["doc"], b"")
    data = bytearray(path.read_bytes())
    at = data.index(b'"tracebridge"', data.index(b"program.json")) + 1
    data[at] = ord("T")  # the member changes, its CRC in both headers does not
    path.write_bytes(bytes(data))
    return path


def test_program_json_crc_is_checked_by_both(real, tmp_path):
    path = _crc_broken(real, tmp_path / "crc.tb")
    assert "program.json fails its CRC-32" in python_read(path)
    if HAS_R:
        verdict = r_read([path], tmp_path)[path.name]
        assert "program.json fails its CRC-32" in verdict, verdict


def test_grammar_mutations_of_the_fuzzer_seeds_are_refused_by_both(tmp_path):
    """The fuzzer's grammar mutations (test_fuzz.mutate_grammar) of its seeds: each
    file is refused by Python and by R."""
    import random

    from .test_fuzz import GRAMMAR_MUTATIONS, mutate_grammar, seeds, write_case

    rng = random.Random(17)
    paths, kinds = [], set()
    for path, _ in seeds(tmp_path):
        with zipfile.ZipFile(path) as archive:
            doc = json.loads(archive.read("program.json"))
            tensors = archive.read("tensors.safetensors")
        for i in range(12):
            kind, text, mutated = mutate_grammar(doc, tensors, rng)
            case = tmp_path / f"{path.stem}_{i}_{kind.split(':')[1]}.tb"
            write_case(case, text, mutated)
            paths.append(case)
            kinds.add(kind.split(":")[1])
    assert kinds == set(GRAMMAR_MUTATIONS)
    for case in paths:
        assert python_read(case).startswith("refuse"), case.name
    if HAS_R:
        verdicts = r_read(paths, tmp_path)
        accepted = [p.name for p in paths if not verdicts[p.name].startswith("refuse")]
        assert not accepted, accepted


@pytest.mark.skipif(not HAS_R, reason="R is not installed")
def test_refusals_quote_file_text_escaped_in_both(real, tmp_path):
    """An error message that quotes a name from the file escapes it: Python with repr(),
    R with printable() (every message of R's reader)."""
    doc = json.loads(json.dumps(real["doc"]))
    doc["methods"]["f\x1b[2J\u202e"] = doc["methods"].pop("forward")
    path = write(tmp_path / "name.tb", doc, b"")
    py, r = python_read(path), r_read([path], tmp_path)[path.name]
    for verdict in (py, r):
        assert verdict.startswith("refuse") and not UNSAFE.search(verdict), ascii(verdict)
    assert "f\\x1b[2J\\u202e" in r and "f\\x1b[2J\\u202e" in py


def test_a_failed_guard_quotes_the_file_text_escaped(real, tmp_path):
    """A GuardError's message quotes the guard's description and loc from the file."""
    doc = _hostile_doc(real, "1.0", "m\u202e.py:3")
    doc.pop("specialised", None)
    guard = next(n for n in doc["methods"]["forward"]["nodes"] if n["op"] == "prim.guard")
    guard["kwargs"]["what"] = "x > 2\x1b[31m\x9b"
    loaded = tracebridge.load(write(tmp_path / "g.tb", doc, b""))
    with pytest.raises(tracebridge.GuardError) as info:
        loaded(torch.ones(1))
    message = str(info.value)
    assert not UNSAFE.search(message), ascii(message)
    assert "x > 2\\x1b[31m\\x9b" in message and "m\\u202e.py:3" in message
