"""The ``tracebridge`` command: look inside, check, draw and run artifacts.

    tracebridge inspect FILE [--json]
    tracebridge validate FILE
    tracebridge graph FILE [--method NAME] [--format dot|svg|png] [-o OUT]
    tracebridge run FILE --inputs IN [--method NAME] [--mode train|eval] [-o OUT]

``inspect``, ``validate`` and ``graph`` read the archive only: they parse JSON and
safetensors bytes and never build or call a model, so they are safe on a file from anywhere.
To print intermediate sizes in input symbols (``f32[s0, 4, s2-2, s3-2]``, as a traced
object's ``.graph`` does), ``inspect`` and ``graph`` run the checked graph on meta tensors:
shapes only, no data and no weights (``label_sizes``).
``run`` loads the artifact with :func:`tracebridge.load` and calls one method.

Exit status: 0 success, 1 a bad file or a failed run (one line on stderr), 2 a usage error.

>>> from tracebridge.frontends.cli import main
>>> main(["validate", "/no/such/file.tb"])  # doctest: +SKIP
1
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from typing import Any

from .. import artifact
from ..artifact import compiled as compiled_member
from ..errors import ArtifactError, TraceError
from ..ir import DTYPE_SHORT, Graph, Program, Ref, dtypes, graph_from_json, pytree
from ..ir.printable import printable
from ..ir.printer import Printer, _short, graph_text
from ..progress import stage, track
from ..version import __version__

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Arguments that make no sense for this file (exit status 2)."""


# --- reading the archive (no model code runs) -------------------------------------------------


def read_archive(path: str) -> tuple[dict, Program]:
    """Open, check and decode an artifact: returns its program.json and the Program.

    Every check of :func:`tracebridge.artifact.read` runs (schema, op set, checksum, tensor
    sizes); nothing is executed.
    """
    # Mapped, not copied (a 7B model is not read into memory); external weights described.
    return artifact.describe(path)


def _method_names(doc: dict) -> list[str]:
    return list(doc["methods"]) + [m for m in doc.get("dispatch", {}) if m not in doc["methods"]]


def _resolve_method(doc: dict, requested: str | None, training: bool | None = None) -> str:
    """The stored graph a method name means: a dispatch route follows ``training``, by
    default the mode saved in the file."""
    methods = doc["methods"]
    dispatch = doc.get("dispatch", {})
    name = requested
    if name is None:
        name = "forward" if "forward" in methods or "forward" in dispatch else next(iter(methods))
    if name in dispatch and name not in methods:
        training = doc.get("training", False) if training is None else training
        return dispatch[name]["train" if training else "eval"]
    if name not in methods:
        raise UsageError(
            f"no method {name!r} in this file; it has: {', '.join(_method_names(doc))}"
        )
    return name


# --- inspect -----------------------------------------------------------------------------------


def _nbytes(info: dict) -> int:
    count = 1
    for d in info["shape"]:
        count *= d
    size = dtypes.ITEMSIZE.get(info["dtype"], 1)  # the one dtype table (ir/dtypes.py)
    return count * size


def guard_rows(graph: Graph) -> list[dict]:
    """Each guard of a graph as ``{what, expect, kind, loc}``."""
    return [
        {
            "what": n.kwargs.get("what", ""),
            "expect": n.kwargs.get("expect"),
            "kind": n.kwargs.get("kind", "value"),
            "loc": n.loc,
        }
        for n in graph.guards
    ]


def guard_text(row: dict) -> str:
    """A guard in words: ``x.shape[0] == 4`` or ``x.shape[1] == 4 is True``."""
    expect = row["expect"]
    if row["kind"] == "branch" and isinstance(expect, bool):
        return f"({row['what']}) is {expect}"
    if row["kind"] == "count":
        return f"{row['what']} gives {expect!r} results"
    return f"{row['what']} == {expect!r}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def op_counts(graph: Graph) -> dict[str, int]:
    """How many nodes of each op a graph has, most frequent first."""
    counts = collections.Counter(n.op for n in graph.nodes)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summary(doc: dict, program: Program) -> dict:
    """What ``inspect --json`` prints: everything a person wants to know about a file."""
    return {
        "format": doc["format"],
        "format_version": doc["format_version"],
        "opset_version": doc["opset_version"],
        "producer": doc["producer"],
        "kind": doc["kind"],
        "class": doc.get("module_classes", {}).get(""),
        "training": doc.get("training", False),
        "methods": list(doc["methods"]),
        "dispatch": doc.get("dispatch", {}),
        "state": {
            name: {"kind": info["kind"], "dtype": info["dtype"], "shape": info["shape"]}
            for name, info in doc["state"].items()
        },
        "graphs": {
            name: {
                "inputs": [{"name": v.name, "type": v.type_str()} for v in g.inputs],
                "nodes": len(g.nodes),
                "guards": guard_rows(g),
                "op_counts": op_counts(g),
            }
            for name, g in program.methods.items()
        },
        "compiled": compiled_member.describe(doc),
    }


def _inspect_text(path: str, doc: dict, program: Program, show_graphs: bool) -> str:
    # Every field from the file is escaped to print (printable): a producer version or a
    # loc may hold terminal escapes or bidirectional marks.
    producer = {k: printable(str(v)) for k, v in doc["producer"].items()}
    out = io.StringIO()
    w = out.write
    w(f"file:       {path} ({os.path.getsize(path):,} bytes)\n")
    w(f"format:     tracebridge format {doc['format_version']}, op set {doc['opset_version']}\n")
    torch_part = f", torch {producer['torch']}" if producer.get("torch") else ""
    w(
        f"producer:   {producer['name']} {producer['version']} "
        f"({producer['language']}{torch_part})\n"
    )
    cls = doc.get("module_classes", {}).get("")
    kind = f"module ({printable(cls)})" if cls else doc["kind"]
    mode = ", saved in training mode" if doc.get("training") else ""
    w(f"kind:       {kind}{mode if doc['kind'] == 'module' else ''}\n")
    w(f"methods:    {printable(', '.join(doc['methods']))}\n")
    for name, route in doc.get("dispatch", {}).items():
        w(printable(f"dispatch:   {name} -> {route['train']} (train) / {route['eval']} (eval)"))
        w("\n")
    state = doc["state"]
    total = sum(_nbytes(i) for i in state.values())
    w(f"\nstate: {_plural(len(state), 'tensor')}, {total:,} bytes\n")
    if state:
        width = max(len(n) for n in state)
        for name, info in state.items():
            short = DTYPE_SHORT.get(info["dtype"], info["dtype"])
            dims = ", ".join(str(d) for d in info["shape"])
            w(printable(f"  {info['kind']:<10} {name:<{width}}  {short}[{dims}]") + "\n")
    generators = doc.get("generators") or {}
    if generators:  # what the random ops draw from (SPEC section 9, Generators)
        listed = ", ".join(f"{n} ({g['device']})" for n, g in generators.items())
        w(printable(f"generators: {listed}") + "\n")
    _compiled_text(doc, w)
    for name, graph in program.methods.items():
        guards = guard_rows(graph)
        w(
            f"\nmethod {printable(name)}: {_plural(len(graph.nodes), 'node')}, "
            f"{_plural(len(guards), 'guard')}\n"
        )
        inputs = ", ".join(f"{v.name}: {v.type_str()}" for v in graph.inputs)
        w(f"  inputs: {printable(inputs) or '(none)'}\n")
        if guards:
            w("  guards:\n")
            for g in guards:
                text = f"{guard_text(g)}  ({g['kind']} guard, at {_short(g['loc'])})"
                w(f"    {printable(text)}\n")
        w("  op counts:\n")
        counts = op_counts(graph)
        width = max((len(op) for op in counts), default=0)
        for op, count in counts.items():
            w(f"    {printable(op):<{width}}  {count}\n")
        if show_graphs:
            w("\n" + graph_text(graph, name) + "\n")
    return out.getvalue()


def _compiled_text(doc: dict, w) -> None:
    """The compiled member's lines (artifact/compiled.py's ``describe``: never opened)."""
    shown = compiled_member.describe(doc)
    if shown is None:
        return
    digest = "matches the program" if shown["digest_matches"] else "does NOT match the program"
    size = f"{shown['size']:,} bytes" if isinstance(shown["size"], int) else "size unknown"
    lines = [
        f"compiled:   {shown['format']} package {shown['member']} ({size}), "
        f"method {shown['method']}",
        f"  for:       {shown['device']}, torch {shown['torch']}, {shown['platform']}",
        f"  digest:    {digest}",
        f"  runs here: {shown['runs_here']}",
        "  (native code: only load_compiled(..., trust_compiled_code=True) runs it)",
    ]
    w("\n" + "".join(printable(line) + "\n" for line in lines))


def _progress(args: argparse.Namespace) -> bool | None:
    """``--no-progress`` turns the bar off; otherwise it shows on a terminal."""
    return False if getattr(args, "no_progress", False) else None


def _reading(what: str, args: argparse.Namespace):
    """A progress bar over the bytes of ``args.file`` (the checksum reads every one)."""
    size = os.path.getsize(args.file) if os.path.isfile(args.file) else None
    return track(f"{what} {os.path.basename(args.file)}", size, "B", progress=_progress(args))


def label_sizes(doc: dict, methods: dict[str, Graph], only: str | None = None) -> None:
    """Label the intermediate sizes of ``methods`` (or of the method ``only``) with input
    symbols, in place, as a traced object's ``.graph`` does (``runtime/shapes.py``): files
    carry trace-time sizes; ``methods`` are all the program's graphs, which a graph may call.

    The graphs of a checked file run on meta tensors made from the state's description:
    shapes only, no data, no weights read. A graph whose inputs have no trace-time sizes (an
    older file) keeps the sizes it carries.
    """
    import torch

    from ..ir import DTYPES
    from ..runtime.shapes import symbolize

    state = {
        name: torch.empty(info["shape"], dtype=DTYPES[info["dtype"]], device="meta")
        for name, info in doc["state"].items()
    }
    for name, graph in methods.items():
        if only not in (None, name):
            continue
        if graph.inputs and all(v.example is not None for v in graph.inputs):
            symbolize(graph, state, methods)


def cmd_inspect(args: argparse.Namespace) -> int:
    with _reading("reading", args):
        doc, program = read_archive(args.file)
        if not args.json and not args.no_graph:
            label_sizes(doc, program.methods)
    if args.json:
        print(json.dumps(summary(doc, program), indent=1))
    else:
        sys.stdout.write(_inspect_text(args.file, doc, program, not args.no_graph))
    return EXIT_OK


# --- validate ----------------------------------------------------------------------------------


def check_structure(doc: dict, program: Program, path: str) -> None:
    """Every rule of the spec (``check_program``, strict: the checksum must be present),
    and stored members. Raises ArtifactError naming the first fault."""
    from ..check.program import check_program

    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                raise ArtifactError(
                    f"{path}: member {info.filename} is compressed; members "
                    "must be stored so the tensors can be memory-mapped"
                )
    check_program(doc, path, strict=True)


def cmd_validate(args: argparse.Namespace) -> int:
    with _reading("validating", args):
        doc, program = read_archive(args.file)
        check_structure(doc, program, args.file)
    nodes = sum(len(g.nodes) for g in program.methods.values())
    guards = sum(len(g.guards) for g in program.methods.values())
    counts = ", ".join(
        [
            _plural(len(program.methods), "method"),
            _plural(nodes, "node"),
            _plural(guards, "guard"),
            _plural(len(program.state), "tensor"),
        ]
    )
    print(
        f"{args.file}: valid tracebridge artifact (format {doc['format_version']}, op set "
        f"{doc['opset_version']}; {counts}; checksum ok)"
    )
    return EXIT_OK


# --- graph -------------------------------------------------------------------------------------


def _dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class DotWriter:
    """A graph as a Graphviz picture (DOT): one DOT node per input, op and guard, and an
    edge for each use of a value, labelled with the value's type as ``inspect`` prints it.

    Note: what makes a large graph readable. Parameters and buffers (``prim.state``) are
    folded into the op that uses them (``weight f32[64, 3, 7, 7]`` inside the ``conv2d``
    box) instead of drawn as boxes of their own, and ops are grouped into one cluster per
    module, nested as the modules are, labelled with the path and class
    (``layer1.0 (BasicBlock)``). The file records no module per op, so it is read from the
    data: an op that uses state belongs to the module that holds that state; an op that
    uses none (``relu``, the residual ``add``) to the innermost module that holds both the
    state used before it and the state used after it.
    """

    STYLES = {
        "input": 'shape=ellipse, style=filled, fillcolor="#d8ecff"',
        "op": 'shape=box, style="rounded,filled", fillcolor="#ffffff"',
        "scalar": 'shape=box, style="rounded,filled", fillcolor="#fff6d8", fontsize=10',
        "guard": 'shape=octagon, style=filled, fillcolor="#ffd8d8", fontsize=10',
        "output": 'shape=ellipse, style=filled, fillcolor="#d8ffd8"',
    }

    def __init__(self, graph: Graph, name: str, module_classes: dict[str, str] | None = None):
        self.graph, self.name = graph, name
        self.classes = module_classes or {}
        self.printer = Printer(graph)
        self.owner: dict[int, str] = {}  # value id -> DOT node id
        self.state: dict[int, tuple[str, Any]] = {}  # value id of a state read -> name, value
        self.edges: list[str] = []
        # module path -> its nodes: (DOT id, label, style)
        self.boxes: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
        self.first: dict[str, int] = {}  # module path -> when it was first drawn in

    def add(self, node_id: str, label: str, style: str, module: str = "") -> None:
        self.boxes[module].append((node_id, label, style))
        self.first.setdefault(module, len(self.first))  # clusters follow the data flow

    def box(self, node_id: str, label: str, style: str) -> str:
        return f"{node_id} [label={_dot_label(label)}, {self.STYLES[style]}];"

    def edges_to(self, target: str, arg: Any) -> None:
        from ..ir import refs_in

        for ref in dict.fromkeys(refs_in(arg)):  # one edge per distinct value
            source = self.owner.get(ref.id)
            value = self.printer.values.get(ref.id)
            if source is not None:
                label = value.type_str() if value is not None else ""
                self.edges.append(f"  {source} -> {target} [label={_dot_label(label)}];")

    def write(self) -> str:
        for i, value in enumerate(self.graph.inputs):
            label = self.printer.define(value, named=True)
            self.owner[value.id] = f"in{i}"
            self.add(f"in{i}", f"{label}\n{value.type_str()}", "input")
        modules = self.modules()
        for i, node in enumerate(self.graph.nodes):
            self.node(f"n{i}", node, modules[i])
        self.add("out", "return", "output")
        self.edges_to("out", self.graph.outputs)
        lines = [
            f"digraph {_dot_label(self.name)} {{",
            "  rankdir=TB; newrank=true;",
            '  node [fontname="Helvetica"]; edge [fontname="Helvetica", fontsize=9];',
            '  graph [fontname="Helvetica", fontsize=11, labeljust=l];',
        ]
        lines += self.cluster("", 1)
        lines += self.edges
        lines.append("}")
        return "\n".join(lines) + "\n"

    def cluster(self, module: str, depth: int) -> list[str]:
        """The DOT lines of ``module``'s nodes and of its sub-modules' clusters."""
        pad = "  " * depth
        lines = [pad + self.box(*box) for box in self.boxes.get(module, [])]
        prefix = f"{module}." if module else ""
        below = [m for m in self.boxes if m.startswith(prefix) and m != module]
        children: dict[str, int] = {}
        for path in below:
            part = path[len(prefix) :].split(".")[0]
            children[part] = min(children.get(part, len(self.first)), self.first[path])
        for part in sorted(children, key=children.get):
            path = prefix + part
            if not any(m == path or m.startswith(path + ".") for m in self.boxes):
                continue
            cls = self.classes.get(path)
            label = f"{path} ({cls})" if cls else path
            inner = [m for m in self.boxes if m.startswith(path + ".")]
            if not inner and len(self.boxes[path]) == 1:
                # A module of one op (a Conv2d, a Linear): a box, not a cluster around it.
                node_id, text, style = self.boxes[path][0]
                named = f"{part} ({cls})" if cls else part
                lines.append(pad + self.box(node_id, f"{named}: {text}", style))
                continue
            lines.append(f"{pad}subgraph {_dot_string('cluster_' + path)} {{")
            lines.append(f'{pad}  label={_dot_label(label)}; style="rounded,dashed";')
            lines += self.cluster(path, depth + 1)
            lines.append(f"{pad}}}")
        return lines

    def modules(self) -> list[str]:
        """The module path each node is drawn in (see the class Note)."""
        from ..ir import refs_in

        reads = {}  # value id -> state name
        for node in self.graph.nodes:
            if node.op == "prim.state":
                reads[node.outputs[0].id] = str(node.args[0])
        own: list[str | None] = []
        for node in self.graph.nodes:
            used = [reads[r.id] for r in refs_in((node.args, node.kwargs)) if r.id in reads]
            if node.op == "prim.state" or not used:
                own.append(None)
            else:
                own.append(
                    _common_module([name.rsplit(".", 1)[0] if "." in name else "" for name in used])
                )
        out, before = [], None
        after = [None] * (len(own) + 1)
        for i in range(len(own) - 1, -1, -1):
            after[i] = own[i] if own[i] is not None else after[i + 1]
        for i, module in enumerate(own):
            if module is not None:
                before = module
                out.append(module)
            elif before is None or after[i + 1] is None:
                out.append("")
            else:
                out.append(_common_module([before, after[i + 1]]))
        return out

    def node(self, node_id: str, node, module: str) -> None:
        if node.op == "prim.guard":
            expect = self.printer.literal(node.kwargs.get("expect"))
            label = f"guard == {expect}\n{node.kwargs.get('what', '')}"
            self.add(node_id, label, "guard", module)
            self.edges_to(node_id, node.args)
            return
        if node.op == "prim.state":  # folded into the ops that use it
            self.printer.targets(node)
            value = node.outputs[0]
            self.state[value.id] = (str(node.args[0]), value)
            return
        targets = self.printer.targets(node)  # names the outputs as the text form does
        for value in node.outputs:
            self.owner[value.id] = node_id
        literals = [self.printer.literal(a) for a in node.args if not isinstance(a, Ref)]
        literals += [
            f"{k}={self.printer.literal(v)}"
            for k, v in node.kwargs.items()
            if not isinstance(v, Ref)
        ]
        shown = ", ".join(x for x in literals if "%" not in x)
        label = node.op + (f"({shown})" if shown and len(shown) <= 40 else "")
        from ..ir import refs_in

        for ref in dict.fromkeys(refs_in((node.args, node.kwargs))):
            if ref.id in self.state:
                state_name, value = self.state[ref.id]
                local = state_name[len(module) + 1 :] if module else state_name
                label += f"\n{local} {value.type_str()}"
        if targets:
            label += "\n" + targets.rstrip(" =")
        if node.loc:
            label += "\n" + _short(node.loc)
        style = "scalar" if node.op.startswith(("scalar.", "prim.")) else "op"
        self.add(node_id, label, style, module)
        self.edges_to(node_id, (node.args, node.kwargs))


def _dot_label(text: str) -> str:
    """A DOT string of text that may come from a file (a loc, a guard's description, a
    module path): each line escaped to print (``printable``), as the graph text does, so
    DOT and the SVG and PNG drawn from it show no control or bidirectional characters."""
    return _dot_string("\n".join(printable(line) for line in text.split("\n")))


def _common_module(paths: list[str]) -> str:
    """The innermost module that holds every path (``""``: the root)."""
    parts = [p.split(".") if p else [] for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common)


def to_dot(graph: Graph, name: str, module_classes: dict[str, str] | None = None) -> str:
    """The Graphviz DOT text of a graph, grouped by module (``module_classes``: module
    path -> class name, for the clusters' labels)."""
    return DotWriter(graph, name, module_classes).write()


FORMATS = ("dot", "svg", "png")


def render(dot_text: str, fmt: str) -> bytes:
    """Render DOT text to ``fmt`` (``svg`` or ``png``) with Graphviz's ``dot`` program."""
    exe = shutil.which("dot")
    if exe is None:
        raise TraceError(
            "the Graphviz 'dot' program is not installed or not on PATH; it is "
            f"needed for --format {fmt} (install Graphviz, e.g. apt-get install "
            "graphviz, or use --format dot)"
        )
    done = subprocess.run(
        [exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise TraceError(f"dot failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def to_svg(dot_text: str) -> bytes:
    """Render DOT text to SVG with Graphviz's ``dot`` program."""
    return render(dot_text, "svg")


def cmd_graph(args: argparse.Namespace) -> int:
    to_screen = args.output in (None, "-") and sys.stdout.isatty()
    if args.format == "png" and (to_screen or not hasattr(sys.stdout, "buffer")):
        raise UsageError("a PNG is binary: write it to a file with -o FILE.png")
    with track(f"drawing {os.path.basename(args.file)}", progress=_progress(args)):
        stage("reading")
        doc, _ = artifact.read_json(args.file)
        name = _resolve_method(doc, args.method)
        methods = {}  # all of them: a graph may call another (a custom autograd function)
        for method, data in doc["methods"].items():
            try:
                methods[method] = graph_from_json(data)
            except (KeyError, ValueError, TypeError) as exc:
                where = f"{args.file}: method {method!r}"
                raise ArtifactError(f"{where} is malformed ({exc})") from None
        graph = methods[name]
        stage("labelling sizes")
        label_sizes(doc, methods, only=name)
        stage("laying out")
        text = to_dot(graph, name, doc.get("module_classes") or {})
        if args.format != "dot":
            stage("running dot")
        data = render(text, args.format) if args.format != "dot" else text.encode()
    _write_output(args.output, data)
    return EXIT_OK


def _write_output(path: str | None, data: bytes) -> None:
    if path is None or path == "-":
        if hasattr(sys.stdout, "buffer"):
            sys.stdout.buffer.write(data)
        else:  # a replaced stdout (tests, notebooks) takes text
            sys.stdout.write(data.decode())
        sys.stdout.flush()
        return
    with open(path, "wb") as handle:
        handle.write(data)


# --- run ---------------------------------------------------------------------------------------


def read_inputs(path: str) -> list:
    """Input tensors from ``.safetensors`` or ``.npz``, named ``input0``, ``input1``, ...
    (``arr_0``, ``arr_1``, ... as ``numpy.savez`` names them also works), in that order."""
    import torch

    if not os.path.exists(path):
        raise UsageError(f"{path}: no such inputs file")
    if path.endswith(".npz"):
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as data:
                named = {k: torch.from_numpy(np.array(data[k])) for k in data.files}
        except (ValueError, OSError, zipfile.BadZipFile) as exc:
            raise UsageError(f"{path}: cannot read as .npz ({exc})") from None
    elif path.endswith(".safetensors"):
        with open(path, "rb") as handle:
            named = artifact.parse_safetensors(handle.read(), path)
    else:
        raise UsageError(f"{path}: inputs must be a .safetensors or .npz file")
    for prefix in ("input", "arr_"):
        keys = [f"{prefix}{i}" for i in range(len(named))]
        if set(keys) == set(named):
            return [named[k] for k in keys]
    raise UsageError(
        f"{path}: tensors must be named input0, input1, ... (found "
        f"{', '.join(sorted(named)) or 'none'})"
    )


def _flatten_outputs(result) -> list[tuple[str, Any]]:
    import torch

    # Python numbers at the output (``.item()``, sizes) are leaves too, not constants.
    leaves, spec = pytree.flatten(result, lambda x: isinstance(x, (torch.Tensor, int, float)))
    return [(pytree.describe_path(spec, i), leaf) for i, leaf in enumerate(leaves)]


def _preview(tensor, count: int = 6) -> str:
    flat = tensor.detach().reshape(-1)[:count].tolist()
    text = ", ".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in flat)
    return f"[{text}{', ...' if tensor.numel() > count else ''}]"


def cmd_run(args: argparse.Namespace) -> int:
    import torch

    from ..api import TracedFunction, load

    if args.output and not args.output.endswith((".safetensors", ".npz")):
        raise UsageError("-o must name a .safetensors or .npz file")
    doc, _ = artifact.read_json(args.file)
    training = None if args.mode is None else args.mode == "train"
    stored = _resolve_method(doc, args.method, training)
    leaves = read_inputs(args.inputs)
    graph = graph_from_json(doc["methods"][stored])
    if len(leaves) != len(graph.inputs):
        wanted = ", ".join(f"{v.name}: {v.type_str()}" for v in graph.inputs)
        raise UsageError(
            f"method {stored!r} takes {len(graph.inputs)} input tensors "
            f"({wanted}), but {args.inputs} has {len(leaves)}"
        )
    call_args, call_kwargs = pytree.unflatten(leaves, graph.in_spec)
    traced = load(args.file, runtime=args.runtime)
    if isinstance(traced, TracedFunction):
        method = traced._forward
    else:
        mode = graph_mode(traced.program, stored, training)
        if mode is not None:
            enter_graph_mode(traced, stored, mode)
        method = traced._method_for(stored)
    with torch.no_grad():
        result = method(*call_args, **call_kwargs)
    outputs = []
    for path, leaf in _flatten_outputs(result):
        if not isinstance(leaf, torch.Tensor):  # a Python number: keep its full precision
            kinds = {bool: torch.bool, int: torch.int64, float: torch.float64}
            leaf = torch.tensor(leaf, dtype=kinds.get(type(leaf), torch.float64))
        outputs.append((path, leaf.detach().cpu()))
    if args.output:
        named = {f"output{i}": t for i, (_, t) in enumerate(outputs)}
        if args.output.endswith(".npz"):
            import numpy as np

            np.savez(args.output, **{k: as_numpy(k, t) for k, t in named.items()})
        else:
            with open(args.output, "wb") as handle:
                handle.write(user_safetensors_bytes(named))
        print(f"wrote {_plural(len(named), 'output')} of {method.name} to {args.output}")
        return EXIT_OK
    print(f"{method.name}: {_plural(len(outputs), 'output')}")
    for i, (path, tensor) in enumerate(outputs):
        dims = ", ".join(str(d) for d in tensor.shape)
        short = DTYPE_SHORT.get(str(tensor.dtype).replace("torch.", ""), str(tensor.dtype))
        print(f"  output{i} {path}: {short}[{dims}] {_preview(tensor)}")
    return EXIT_OK


def graph_mode(program: Program, stored: str, requested: bool | None) -> bool | None:
    """The training flag a loaded module runs graph ``stored`` in: the mode of a
    respect_mode route (``trainforward``: training), or the one mode the method was traced
    in (where the other records another graph); else ``requested`` (``--mode``), None
    where not given. A ``--mode`` that the graph cannot run in is refused here, with
    what to pass on the command line (the runtime's own errors give Python advice)."""
    flag = "train" if requested else "eval"
    for method, route in program.dispatch.items():
        for mode, graph_name in route.items():
            if graph_name != stored:
                continue
            if requested is not None and (mode == "train") != requested:
                raise UsageError(
                    f"{stored} is the graph of {method} in {_MODE_WORDS[mode]} mode, and "
                    f"--mode {flag} asks for the other: leave out --mode (or pass --mode "
                    f"{mode}), or run --method {method} --mode {flag}"
                )
            return mode == "train"
    bound = program.mode_bound.get(stored)
    if bound is None:
        return requested
    traced = "train" if bound["training"] else "eval"
    if requested is not None and requested != bound["training"]:
        raise UsageError(
            f"{stored} was traced in {_MODE_WORDS[traced]} mode only: the module records "
            f"another graph in {_MODE_WORDS[flag]} mode (first at {bound['op']}, "
            f"{bound.get('loc') or '?'}), which this file does not hold. Leave out --mode "
            f"(or pass --mode {traced}), or trace with respect_mode=True (both graphs) "
            "and save again"
        )
    return bound["training"]


_MODE_WORDS = {"train": "training", "eval": "evaluation"}


def enter_graph_mode(traced, stored: str, mode: bool) -> None:
    """Put ``traced`` in ``mode`` and each sub-module in the mode graph ``stored`` was
    recorded with (a batch norm frozen in a training model stays frozen): a command line
    cannot set sub-modules' flags, so the graph runs as it was recorded."""
    recorded = traced.program.module_modes.get(stored, {})
    traced.training = mode
    for path, module in traced.named_modules():
        if path:
            module.training = recorded.get(path, mode)


def user_safetensors_bytes(tensors: dict) -> bytes:
    """A safetensors file holding ``tensors`` and nothing else, for a user (``run -o``):
    the artifact's writer (``artifact.safetensors_bytes``) aligns each tensor to 64 bytes
    with ``#padN`` filler tensors, which a reader that counts or orders the tensors takes
    for data (prober21d F2). Here the header is padded with spaces, as the safetensors
    library pads it, and the tensors lie widest dtype first, each at a multiple of its
    element size; the header lists them in the order given.

    >>> import torch
    >>> from tracebridge.artifact import parse_safetensors
    >>> blob = user_safetensors_bytes({"output0": torch.ones(3), "output1": torch.tensor(2)})
    >>> sorted(parse_safetensors(blob, "out.safetensors"))
    ['output0', 'output1']
    """
    from ..artifact import tensors as st

    for name, tensor in tensors.items():
        if tensor.dtype not in st.ST_DTYPES:
            raise UsageError(
                f"{name} has dtype {tensor.dtype}, which a safetensors file cannot hold; "
                "write -o as a .npz file, or return a tensor of another dtype"
            )
    order = sorted(tensors, key=lambda name: -tensors[name].element_size())  # stable
    offsets, end = {}, 0
    for name in order:
        size = tensors[name].numel() * tensors[name].element_size()
        offsets[name] = [end, end + size]
        end += size
    header = {
        name: {
            "dtype": st.ST_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": offsets[name],
        }
        for name, t in tensors.items()
    }
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-(8 + len(text)) % 8)
    parts = [len(text).to_bytes(8, "little"), text]
    parts += [bytes(st.tensor_bytes(tensors[name])) for name in order]
    return b"".join(parts)


def as_numpy(name: str, tensor):
    """``tensor`` as a numpy array for ``.npz``: a dtype numpy lacks (bfloat16, float8,
    complex32) is widened, exactly, to one it has (float32, complex64), with a note on
    standard error; ``.safetensors`` keeps every dtype."""
    import torch

    try:
        return tensor.numpy()
    except TypeError:
        pass
    if tensor.is_complex():
        wider = torch.complex64
    elif tensor.is_floating_point():
        wider = torch.float32
    else:
        raise UsageError(
            f"{name} is {tensor.dtype}, which numpy has no type for: write -o as a "
            ".safetensors file, which keeps it"
        )
    print(
        f"tracebridge run: note: {name} is {str(tensor.dtype).replace('torch.', '')}, which "
        f"numpy has no type for: written to .npz as {str(wider).replace('torch.', '')} "
        "(every value exactly); write -o as a .safetensors file to keep the dtype",
        file=sys.stderr,
    )
    return tensor.to(wider).numpy()


# --- onnx --------------------------------------------------------------------------------------


def cmd_onnx(args: argparse.Namespace) -> int:
    from ..api import load
    from ..export.onnx import export_onnx

    out = args.output or os.path.splitext(args.file)[0] + ".onnx"
    doc, _ = artifact.read_json(args.file)
    stored = _resolve_method(doc, args.method)
    example = None
    if args.inputs:
        graph = graph_from_json(doc["methods"][stored])
        leaves = read_inputs(args.inputs)
        if len(leaves) != len(graph.inputs):
            raise UsageError(
                f"method {stored!r} takes {len(graph.inputs)} input tensors, but "
                f"{args.inputs} has {len(leaves)}"
            )
        call_args, call_kwargs = pytree.unflatten(leaves, graph.in_spec)
        if call_kwargs:
            raise UsageError("the traced method takes keyword arguments: use export_onnx()")
        example = tuple(call_args)
    path = export_onnx(
        load(args.file),
        out,
        method=stored,
        example_inputs=example,
        opset_version=args.opset,
        check=not args.no_check,
    )
    checked = "" if args.no_check else ", checked with ONNX Runtime"
    print(f"wrote {path} ({os.path.getsize(path)} bytes{checked})")
    return EXIT_OK


# --- the command line ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tracebridge",
        description="Inspect, validate, draw, run and export tracebridge artifacts.",
        epilog="Exit status: 0 success, 1 invalid file or failed run, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"tracebridge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Every command: a progress bar on a terminal for steps that take seconds.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (also: TRACEBRIDGE_PROGRESS=0; it shows only on a terminal)",
    )

    p = sub.add_parser(
        "inspect", parents=[common], help="show what an artifact holds (no code runs)"
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead")
    p.add_argument("--no-graph", action="store_true", help="leave out the graph texts")
    p.set_defaults(handler=cmd_inspect)

    p = sub.add_parser(
        "validate", parents=[common], help="check an artifact against the spec (no code runs)"
    )
    p.add_argument("file", metavar="FILE")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser(
        "graph", parents=[common], help="draw a method's graph as Graphviz DOT, SVG or PNG"
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--method", help="method to draw (default: forward)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="dot",
        help="dot (text, default), or svg / png through Graphviz's dot program",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    p.set_defaults(handler=cmd_graph)

    p = sub.add_parser(
        "run", parents=[common], help="run a method on inputs from a .safetensors or .npz file"
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--inputs",
        required=True,
        metavar="IN",
        help="tensors named input0, input1, ... (.safetensors or .npz)",
    )
    p.add_argument("--method", help="method to run (default: forward)")
    p.add_argument(
        "--mode",
        choices=("train", "eval"),
        help="module mode for forward (default: the mode saved in the file)",
    )
    p.add_argument("--runtime", choices=("codegen", "interpreter"), default="codegen")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="write outputs (output0, ...) to a .safetensors or .npz file",
    )
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("onnx", help="export a method to ONNX (needs tracebridge[onnx])")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", metavar="OUT", help="the .onnx file (default: FILE.onnx)")
    p.add_argument("--method", help="method to export (default: forward)")
    p.add_argument(
        "--inputs",
        metavar="IN",
        help="example inputs input0, input1, ... (.safetensors or .npz; default: tensors of "
        "the traced sizes)",
    )
    p.add_argument("--opset", type=int, help="ONNX opset version (default: the exporter's)")
    p.add_argument(
        "--no-check", action="store_true", help="do not run the result with ONNX Runtime"
    )
    p.set_defaults(handler=cmd_onnx)
    return parser


def _one_line(message: str, limit: int = 600) -> str:
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status instead of exiting.

    >>> main(["--version"])  # doctest: +SKIP
    tracebridge 0.1.0
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 for --help/--version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    prefix = f"tracebridge {args.command}: error:"
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"{prefix} {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except ArtifactError as exc:
        print(f"{prefix} {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_INVALID
    except TraceError as exc:  # a guard or a run-time check: the full message helps
        print(f"{prefix} {exc}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bad file must never show a traceback
        print(f"{prefix} {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
