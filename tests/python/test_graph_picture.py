"""`tracebridge graph`: pictures grouped by module, parameters folded into their op, sizes as
`inspect` prints them, and DOT, SVG or PNG (python/tracebridge/frontends/cli.py, DotWriter)."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import artifact
from tracebridge.frontends import cli
from tracebridge.ir import graph_from_json


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.bn1(self.conv1(x)))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3)
        self.blocks = nn.Sequential(Block(4), Block(4))
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        h = self.blocks(self.stem(x)).mean((2, 3))
        return self.fc(h)


@pytest.fixture(scope="module")
def net_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "net.tb"
    tracebridge.trace(Net().eval(), torch.rand(2, 1, 8, 8)).save(path)
    return str(path)


def _dot(capsys, *argv) -> str:
    assert cli.main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


def _clusters(dot: str) -> list[str]:
    return re.findall(r'subgraph "cluster_([^"]+)"', dot)


def test_ops_are_grouped_by_module(net_file, capsys):
    dot = _dot(capsys, "graph", net_file)
    assert _clusters(dot) == ["blocks", "blocks.0", "blocks.1"]
    assert 'label="blocks.0 (Block)"' in dot and 'label="blocks (Sequential)"' in dot
    # A module of one op is a box named after it, inside its parent's cluster.
    block0 = dot.split('subgraph "cluster_blocks.0"')[1].split("subgraph")[0]
    assert "conv1 (Conv2d): conv2d" in block0 and "bn1 (BatchNorm2d): batch_norm" in block0
    assert "relu" in block0  # a stateless op between two of the block's modules
    assert "stem (Conv2d): conv2d" in dot and "fc (Linear): linear" in dot


def test_parameters_are_folded_into_their_op(net_file, capsys):
    dot = _dot(capsys, "graph", net_file)
    graph = artifact.read(net_file).methods["forward"]
    states = [n for n in graph.nodes if n.op == "prim.state"]
    declared = [line for line in dot.splitlines() if "[label=" in line and "->" not in line]
    assert len(declared) == len(graph.inputs) + len(graph.nodes) - len(states) + 1
    assert "weight f32[4, 4, 3, 3]\\nbias f32[4]" in dot  # in the conv2d box
    assert "running_mean f32[4]" in dot
    assert "prim.state" not in dot and "blocks.0.conv1.weight" not in dot


def _edge_types(dot: str) -> list[str]:
    return re.findall(r'-> \w+ \[label="([^"]*)"\]', dot)


def test_sizes_are_those_inspect_prints(net_file, capsys):
    dot = _dot(capsys, "graph", net_file)
    text = _dot(capsys, "inspect", net_file)
    edge_types = set(_edge_types(dot))
    printed = set(re.findall(r"%[\w.]+: ([a-z0-9]+\[[^\]]*\]|int)", text))
    assert edge_types and edge_types <= printed
    assert "f32[s0, s1, s2, s3]" in dot  # the input, with its symbols


def test_intermediate_sizes_are_symbolic(net_file, capsys):
    # The file holds the sizes seen at trace time (2, 1, 8, 8); the picture and inspect show
    # them in the input symbols: the stem's 3x3 convolution takes 2 from height and width,
    # the blocks keep them, mean and fc leave the batch.
    dot = _dot(capsys, "graph", net_file)
    assert set(_edge_types(dot)) == {
        "f32[s0, s1, s2, s3]",
        "f32[s0, 4, s2-2, s3-2]",
        "f32[s0, 4]",
        "f32[s0, 2]",
    }
    assert "%0: f32[s0, 4, s2-2, s3-2]" in dot  # the stem's box names its output's type
    assert "f32[2, 4, 6, 6]" not in dot and "f32[2, 2]" not in dot
    text = _dot(capsys, "inspect", net_file)
    assert "f32[s0, 2] = linear(" in text and "f32[2, 4, 6, 6]" not in text
    # The state keeps its own sizes.
    assert "weight f32[4, 4, 3, 3]" in dot and "%stem.weight: f32[4, 1, 3, 3]" in text


def test_picture_sizes_match_the_traced_graph(net_file, capsys):
    traced = tracebridge.trace(Net().eval(), torch.rand(2, 1, 8, 8), progress=False)
    in_graph = set(re.findall(r"%[\w.]+: ([a-z0-9]+\[[^\]]*\])", traced.graph))
    assert set(_edge_types(_dot(capsys, "graph", net_file))) <= in_graph


def test_a_file_without_trace_time_sizes_keeps_its_sizes(net_file):
    doc, _ = artifact.read_json(net_file)
    graph = graph_from_json(doc["methods"]["forward"])
    for value in graph.inputs:
        value.example = None  # as in a file from before inputs recorded them
    cli.label_sizes(doc, {"forward": graph})
    outputs = [v for n in graph.nodes for v in n.outputs if v.kind == "Tensor"]
    assert outputs and all(v.labels is None for v in outputs)
    assert "f32[2, 4, 6, 6]" in {v.type_str() for v in outputs}


@pytest.mark.parametrize("fmt, magic", [("svg", b"<svg"), ("png", b"\x89PNG\r\n\x1a\n")])
def test_svg_and_png(net_file, tmp_path, capsys, fmt, magic):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed")
    out = tmp_path / f"net.{fmt}"
    assert cli.main(["graph", net_file, "--format", fmt, "-o", str(out)]) == 0
    data = out.read_bytes()
    assert magic in data[:400]
    if fmt == "svg":
        assert b"cluster_blocks.0" in data and b"conv1 (Conv2d)" in data


def test_png_without_graphviz_is_a_clear_error(net_file, capsys, monkeypatch):
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert cli.main(["graph", net_file, "--format", "png"]) == 1
    err = capsys.readouterr().err
    assert "needed for --format png" in err and "apt-get install graphviz" in err


def test_the_innermost_common_module():
    assert cli._common_module(["layer1.0.conv1", "layer1.0.bn1"]) == "layer1.0"
    assert cli._common_module(["layer1.1.bn2", "layer2.0.conv1"]) == ""
    assert cli._common_module(["fc"]) == "fc"


def test_png_to_a_terminal_is_a_usage_error(net_file, capsys, monkeypatch):
    monkeypatch.setattr(cli.sys.stdout, "isatty", lambda: True)
    assert cli.main(["graph", net_file, "--format", "png"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "write it to a file with -o FILE.png" in err
