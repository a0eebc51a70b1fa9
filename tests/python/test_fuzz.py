"""A fuzzer for the loader: mutations of real artifacts, each loaded (and, when it loads,
printed and called) in a worker process with a memory cap and a time limit.

Every outcome must be one of: a correct load (and a call that returns, raises a tracebridge
error, or raises the error a PyTorch op raises on arguments it refuses); or a refusal with a
tracebridge error (a ``TraceError`` subclass). Never: code from the file running (the
payloads in names and locations write a canary file if they ever run), another exception
at load, an internal assertion of PyTorch, a crash, or a case that runs longer than
``CASE_SECONDS`` or needs more than ``MEMORY_BYTES`` of address space beyond what torch maps.

``make test`` runs ``CASES`` cases with a fixed seed; ``make fuzz`` runs the long budget
(``TRACEBRIDGE_FUZZ_CASES``, ``TRACEBRIDGE_FUZZ_SEED``) and prints the counts.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import resource
import struct
import subprocess
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.artifact import safetensors_bytes
from tracebridge.ir import ops

from .canary_child import address_space_limit
from .models import ConvBNLinear

CASES = int(os.environ.get("TRACEBRIDGE_FUZZ_CASES", "800"))
SEED = int(os.environ.get("TRACEBRIDGE_FUZZ_SEED", "20261123"))
CASE_SECONDS = 20
MEMORY_BYTES = 3 << 30
# What a child may map: MEMORY_BYTES beyond what torch's import maps (canary_child.py).
MEMORY_LIMIT = address_space_limit(MEMORY_BYTES)
ROOT = Path(__file__).resolve().parents[2]

# --- the worker --------------------------------------------------------------------------
# One process loads case after case (importing torch costs seconds); the parent restarts it
# after a crash or a hang and blames the case it was on.
WORKER = r"""
import json, os, sys, traceback
if os.environ.get("TRACEBRIDGE_FUZZ_BENCHMARKS"):
    # torchvision's operators declared as the zoo declares them (benchmarks/zoo_env.py),
    # so that files naming torchvision.nms load and reach its checks.
    sys.path.insert(0, os.environ["TRACEBRIDGE_FUZZ_BENCHMARKS"])
    try:
        import zoo_env, torchvision
        zoo_env.allow_python_ops()
    except Exception:
        pass
import tracebridge
from tracebridge.artifact import parse_safetensors

OP_ERRORS = (RuntimeError, ValueError, IndexError, TypeError, ArithmeticError)

def outcome(exc):
    if isinstance(exc, tracebridge.TraceError):
        return "tracebridge:" + type(exc).__name__
    return "raw:" + type(exc).__name__ + ": " + str(exc)[:300]

print("ready", flush=True)
for line in sys.stdin:
    case = json.loads(line)
    result = {}
    try:
        loaded = tracebridge.load(case["path"])
        result["load"] = "ok"
    except Exception as exc:
        result["load"] = outcome(exc)
        print(json.dumps(result), flush=True)
        continue
    try:
        str(loaded.graph), str(loaded.code)
        with open(case["inputs"], "rb") as handle:
            tensors = parse_safetensors(handle.read(), case["inputs"])
        loaded(*[tensors[str(i)] for i in range(len(tensors))])
        result["call"] = "ok"
    except tracebridge.TraceError as exc:
        result["call"] = outcome(exc)
    except OP_ERRORS as exc:
        internal = "INTERNAL ASSERT" in str(exc)
        result["call"] = ("raw:" if internal else "op-error:") + type(exc).__name__
        if internal:
            result["call"] += ": " + str(exc)[:300]
    except Exception as exc:
        result["call"] = outcome(exc)
    print(json.dumps(result), flush=True)
"""


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Worker:
    """A Python process that loads the cases it is given, one line each."""

    def __init__(self):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"}
        if _torchvision() is not None:
            env["TRACEBRIDGE_FUZZ_BENCHMARKS"] = str(ROOT / "benchmarks")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=_limits,
        )
        assert self._line(120) == "ready"

    def _line(self, seconds: float) -> str | None:
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=seconds):
                return None
        line = self.proc.stdout.readline()
        return line.strip() if line else None

    def run(self, path: Path, inputs: Path) -> dict:
        self.proc.stdin.write(json.dumps({"path": str(path), "inputs": str(inputs)}) + "\n")
        self.proc.stdin.flush()
        started = time.monotonic()
        line = self._line(CASE_SECONDS)
        if line is None:
            timed_out = time.monotonic() - started >= CASE_SECONDS - 0.5
            self.stop()
            return {"load": "hang" if timed_out else f"crash:{self.proc.returncode}"}
        return json.loads(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# --- the seeds: real artifacts -----------------------------------------------------------


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return nn.functional.gelu(y)[:, -1]


def _guarded(x, y):
    if x.shape[0] > 1:
        x = x * 2
    return (x + y, x[0])


# Seeds for the ops of op-set 6 and later, most run through checked implementations: a
# mutated file of one of them reaches the checks (``mutate_json``'s "target" mutations).


class Spectral(nn.Module):
    """stft and istft (op-set 6)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(16))

    def forward(self, wave):
        spec = torch.stft(wave, 16, hop_length=4, window=self.window, return_complex=True)
        back = torch.istft(spec * 0.5, 16, hop_length=4, window=self.window, length=wave.shape[-1])
        return back, spec.abs()


class Packed(nn.Module):
    """_pack_padded_sequence into an LSTM and _pad_packed_sequence back (op-set 6)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 4, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        out, _ = self.rnn(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


def _validated(x, y):
    """broadcast_tensors (F.mse_loss of shapes that broadcast, a Normal's parameters) and
    _is_all_true / _is_any_true (the distribution's validation; a direct call) (op-set 6)."""
    normal = torch.distributions.Normal(x, y.exp(), validate_args=True)
    mean = y.mean(0, keepdim=True)
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")  # mse_loss warns about broadcasting
        loss = nn.functional.mse_loss(x, mean)
    return normal.log_prob(x), loss, torch._is_any_true(x > 0)


class CTC(nn.Module):
    """ctc_loss (op-set 7)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 5)

    def forward(self, frames, targets, target_lengths):
        log_probs = self.head(frames).log_softmax(-1).transpose(0, 1)
        lengths = torch.full((frames.shape[0],), log_probs.shape[0], dtype=torch.long)
        return nn.functional.ctc_loss(log_probs, targets, lengths, target_lengths)


class Grouped(nn.Module):
    """What the runtime passes rewrite (op-set 7 code paths): three linears on one input
    whose results a view reads (runtime/concat_linear.py), head-splitting view trees
    (runtime/views.py), Hugging Face's repeat_kv (runtime/repeats.py), a classifier linear
    over a matrix (runtime/linear_2d.py), an as_strided window and a broadcast_to."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 4), nn.Linear(8, 4)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 2, 4).transpose(1, 2)
        k = self.k(x).view(b, s, 1, 4).transpose(1, 2)
        v = self.v(x).view(b, s, 1, 4).transpose(1, 2)
        k = k[:, :, None, :, :].expand(b, 1, 2, s, 4).reshape(b, 2, s, 4)
        v = v[:, :, None, :, :].expand(b, 1, 2, s, 4).reshape(b, 2, s, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        y = y.transpose(1, 2).reshape(b, s, 8)
        window = y.as_strided((b, 2, 8), (s * 8, 8, 1))
        bias = torch.broadcast_to(self.head.bias, (b, 3))
        return self.head(window.sum(1)) + bias, y.repeat_interleave(2, dim=1)


def _nms(boxes, scores):
    """torchvision.nms (op-set 6), where torchvision imports."""
    import torchvision

    return torchvision.ops.nms(boxes, scores, 0.5)


def _torchvision():
    from .test_models_nms import _import_torchvision

    return _import_torchvision()


def _boxes(count: int) -> torch.Tensor:
    corner = torch.rand(count, 2) * 10
    return torch.cat([corner, corner + torch.rand(count, 2) * 5 + 1], dim=1)


def _everyday10(x, ids):
    """Op-set 10's everyday ops (prober20b F8), each once, with sizes from the input."""
    n = x.shape[1]
    h = x * torch.hann_window(n) + x * torch.kaiser_window(n, True, 6.0)
    h = h.clone().fill_diagonal_(0.0).put_(torch.tensor([0, 1]), torch.tensor([1.0, 2.0]))
    h = h.index_reduce_(0, torch.tensor([0, 1]), h[:2] * 2, "amax")
    padded = torch.nn.utils.rnn.pad_sequence([h, h[:2]], batch_first=True)
    strided = torch.empty_strided((n, 2), (1, n)).copy_(h[:2].T)
    grads = torch.gradient(h, dim=1)[0]
    kept = torch.isin(ids, torch.tensor([1, 3])).float().sum()
    return (
        padded.sum()
        + torch.pdist(h).sum()
        + torch.vander(h[0], 3).sum()
        + strided.sum()
        + (grads.sum() + kept)
    )


def _optional_fields(query, key, *, scale=None):
    """The graph fields added in session 22, in one file: ``distinct_inputs`` (a test of
    the inputs' identity), ``keyword_defaults`` (a keyword-only default the example left
    out) and an output spec marked ``size`` (a ``torch.Size``)."""
    if query is key:
        return query * 3, query.shape
    return query + key, query.shape


def newer_op_seeds() -> list[tuple[str, object, tuple]]:
    """(name, traced, inputs) for the ops of op-set 6 and later."""
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        wave = torch.randn(2, 40)
        x, lengths = torch.randn(3, 5, 3), torch.tensor([5, 3, 2])
        xy = (torch.randn(3, 2), torch.randn(3, 2))
        ctc = (torch.randn(2, 7, 4), torch.randint(1, 5, (2, 3)), torch.tensor([3, 2]))
        grouped = (torch.randn(2, 5, 8),)
        made = [
            ("spectral", tracebridge.trace(Spectral(), wave), (wave,)),
            ("packed", tracebridge.trace(Packed(), (x, lengths)), (x, lengths)),
            ("validated", tracebridge.trace(_validated, xy), xy),
            ("ctc", tracebridge.trace(CTC(), ctc), ctc),
            ("grouped", tracebridge.trace(Grouped().eval(), grouped), grouped),
        ]
        pair = (torch.randn(2, 3), torch.randn(2, 3))
        made.append(("optional_fields", tracebridge.trace(_optional_fields, pair), pair))
        everyday = (torch.randn(4, 6), torch.randint(0, 5, (2, 7)))
        made.append(("everyday10", tracebridge.trace(_everyday10, everyday), everyday))
        if _torchvision() is not None:
            boxes = (_boxes(12), torch.rand(12))
            made.append(("nms", tracebridge.trace(_nms, boxes), boxes))
    return made


def seeds(folder: Path) -> list[tuple[Path, Path]]:
    """(artifact, inputs) pairs, saved by this tracebridge from traced models."""
    torch.manual_seed(0)
    made = [
        ("conv", tracebridge.trace(ConvBNLinear().eval(), torch.rand(2, 3, 6, 6)),
         (torch.rand(2, 3, 6, 6),)),
        ("attention", tracebridge.trace(Attention(), torch.rand(2, 5, 8)), (torch.rand(2, 5, 8),)),
        ("guarded", tracebridge.trace(_guarded, (torch.rand(3, 2), torch.rand(3, 2))),
         (torch.rand(3, 2), torch.rand(3, 2))),
    ] + newer_op_seeds()  # fmt: skip
    out = []
    for name, traced, inputs in made:
        path = folder / f"{name}.tb"
        tracebridge.save(traced, path)
        blob, _ = safetensors_bytes({str(i): t for i, t in enumerate(inputs)})
        (folder / f"{name}.inputs").write_bytes(blob)
        out.append((path, folder / f"{name}.inputs"))
    return out


# --- mutations ---------------------------------------------------------------------------


def payloads(canary: Path) -> list[str]:
    """Strings that run code (touching ``canary``) if any of them is ever executed."""
    touch = f"__import__('pathlib').Path({str(canary)!r}).touch()"
    return [
        f"x\n{touch}\n#",
        f"x'); {touch}; ('",
        f'x"); {touch}; ("',
        f"x\n    {touch}\n",
        f"{{{touch}}}",
        f"x:1\n{touch}\n#:1",
        f"__import__('os').system('touch {canary}')",
        "eval",
        "train",
        "__class__",
        "getattr",
        "v4",
        "/etc/passwd:1",
        "/dev/zero:1",
        "",
        "a" * 5000,
    ]


FORBIDDEN_OPS = [
    "Tensor.const_data_ptr", "_from_blob", "_nested_view_from_buffer", "Tensor.set_",
    "Tensor.untyped_storage", "_copy_from", "os.system", "builtins.eval",
    "__import__", "Tensor.__reduce_ex__", "_foreach_add", "save",
]  # fmt: skip


def random_literal(rng: random.Random, canary: Path, ids: list[int]):
    choices = [
        lambda: {"ref": rng.choice(ids) if ids else 0},
        lambda: {"ref": rng.randint(-5, 10**9)},
        lambda: rng.randint(-(2**70), 2**70),
        lambda: rng.choice([0, 1, -1, 2, 10**6, 2**63, 2**64, -(2**63) - 1]),
        lambda: rng.choice([0.5, -1e308, 1e-300]),
        lambda: rng.choice(payloads(canary)),
        lambda: None,
        lambda: True,
        lambda: [rng.randint(0, 10**7) for _ in range(rng.randint(0, 4))],
        lambda: {"tuple": [rng.randint(-3, 3), {"slice": [None, rng.randint(-2, 5), None]}]},
        lambda: {"dtype": rng.choice(["float32", "int64", "float8", "", "bool"])},
        lambda: {"device": rng.choice(["cpu", "cuda:0", "disk", "meta", "cpu\n"])},
        lambda: {"float": rng.choice(["inf", "nan", "1e999", 5])},
        lambda: {"dict": [[rng.choice(payloads(canary)), 1]]},
        lambda: {"ellipsis": rng.choice([True, False])},
        lambda: {"complex": [1, rng.choice([2, "x"])]},
        lambda: {"memory_format": rng.choice(["channels_last", "x"])},
        lambda: {"a": 1, "b": 2},
        lambda: json.loads("[" * 80 + "1" + "]" * 80),
    ]
    return rng.choice(choices)()


def _paths(obj, prefix=()):
    """Every (path, value) of a JSON document."""
    yield prefix, obj
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _paths(value, (*prefix, i))


def _set(doc, path, value):
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _ids(doc) -> list[int]:
    return [v for p, v in _paths(doc) if p and p[-1] == "id" and isinstance(v, int)]


def mutate_json(doc: dict, rng: random.Random, canary: Path) -> tuple[str, dict]:
    """One mutation of a program.json: a field, a name, an op or an argument."""
    doc = copy.deepcopy(doc)
    method = rng.choice(list(doc["methods"]))
    graph = doc["methods"][method]
    nodes = graph["nodes"]
    node = rng.choice(nodes) if nodes else None
    kinds = ["field", "field", "name", "op", "arg", "arg", "kwarg", "delete", "swap"]
    targets = [n for n in nodes if n["op"] in TARGETED_OPS]
    if targets:  # a seed of the newer ops: a third of its mutations go to their arguments
        kinds += ["target"] * 4
    kind = rng.choice(kinds)
    if kind == "target":
        target = rng.choice(targets)
        return mutate_target(target, rng, canary, _defined_before(graph, target)), doc
    if kind == "name":
        payload = rng.choice(payloads(canary))
        where = rng.choice(
            ["method", "state", "input", "loc", "kwarg", "arg_name", "class", "what", "dispatch"]
        )
        if where == "method":
            doc["methods"][payload] = doc["methods"].pop(method)
        elif where == "state" and doc["state"]:
            old = rng.choice(list(doc["state"]))
            doc["state"][payload] = doc["state"].pop(old)
            for n in (n for g in doc["methods"].values() for n in g["nodes"]):
                if n["op"] == "prim.state" and n["args"] == [old]:
                    n["args"] = [payload]
        elif where == "input" and graph["inputs"]:
            graph["inputs"][0]["name"] = payload
        elif where == "kwarg" and node is not None:
            node["kwargs"][payload] = 1
        elif where == "arg_name":
            graph["arg_names"] = [payload]
        elif where == "class":
            doc.setdefault("module_classes", {})[""] = payload
        elif where == "what" and node is not None:
            node["op"], node["args"], node["outputs"], node["out_spec"] = (
                "prim.guard",
                [1],
                [],
                None,
            )
            node["kwargs"] = {"expect": 1, "what": payload, "kind": "value"}
        elif where == "dispatch":
            doc["dispatch"] = {payload: {"train": method, "eval": method}}
        elif node is not None:
            node["loc"] = payload
        return f"name:{where}", doc
    if kind == "op" and node is not None:
        node["op"] = rng.choice(FORBIDDEN_OPS + rng.sample(ops.all_names(), 5))
        return "op", doc
    if kind == "arg" and node is not None and node["args"]:
        node["args"][rng.randrange(len(node["args"]))] = random_literal(rng, canary, _ids(doc))
        return "arg", doc
    if kind == "kwarg" and node is not None:
        key = rng.choice(list(node["kwargs"]) or ["dim", "dtype", "out", "bogus"])
        node["kwargs"][key] = random_literal(rng, canary, _ids(doc))
        return "kwarg", doc
    places = [(p, v) for p, v in _paths(doc) if p]
    path, value = rng.choice(places)
    if kind == "delete" and isinstance(path[-1], str):
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
        return "delete", doc
    if kind == "swap" and isinstance(value, list) and len(value) > 1:
        i, j = rng.sample(range(len(value)), 2)
        value[i], value[j] = value[j], value[i]
        return "swap", doc
    _set(doc, path, random_literal(rng, canary, _ids(doc)))
    return "field", doc


# The ops whose arguments the "target" mutations change: every op run through a checked
# implementation, every op added since op-set 6, and the ops the runtime passes rewrite.
TARGETED_OPS = frozenset(
    name for name, info in ops.OPS.items() if "checked" in info.flags or ops.SINCE.get(name, 0) >= 6
) | frozenset(  # what the runtime passes rewrite (the Grouped seed)
    """as_strided repeat_interleave broadcast_to linear Tensor.view transpose Tensor.expand
    Tensor.reshape getitem scaled_dot_product_attention""".split()
)


def _defined_before(graph: dict, node: dict) -> list[int]:
    """The ids a node may use: the graph's inputs and the results of the nodes before it
    (a mutation that uses another is refused at load, before any op's check)."""
    ids = [value["id"] for value in graph["inputs"]]
    for other in graph["nodes"]:
        if other is node:
            break
        ids += [value["id"] for value in other["outputs"]]
    return ids


def mutate_target(node: dict, rng: random.Random, canary: Path, ids: list[int]) -> str:
    """One argument of a node of a targeted op made wrong in a way its check must catch:
    an int moved (off by one, negated, huge), a bool or a list where an int was, another
    value defined before it where a value was (a tensor of another shape or dtype, a
    size), or any literal."""
    slots = [("args", i) for i in range(len(node["args"]))]
    slots += [("kwargs", key) for key in node["kwargs"]]
    if not slots:
        return "target:none"
    where, key = rng.choice(slots)
    value = node[where][key]
    if isinstance(value, bool):
        new = rng.choice([not value, 1, None, "x"])
    elif isinstance(value, int):
        new = rng.choice([value + 1, value - 1, -value, value * 1000, 2**40, 0, [value]])
    elif isinstance(value, dict) and "ref" in value and ids:
        new = {"ref": rng.choice(ids)}
    elif isinstance(value, list) and value:
        new = list(value)
        at = rng.randrange(len(new))
        new[at] = {"ref": rng.choice(ids)} if ids and rng.random() < 0.5 else -1
    else:
        new = random_literal(rng, canary, ids)
    node[where][key] = new
    return f"target:{node['op']}"


def json_mutations(doc: dict, count: int, seed: int) -> list[dict]:
    """``count`` mutated documents of ``doc`` (also fed to R's checker, test_check_program)."""
    rng = random.Random(seed)
    canary = Path("/nonexistent/canary")
    return [mutate_json(doc, rng, canary)[1] for _ in range(count)]


# Text where one JSON or safetensors reader could read what the other does not (SPEC 1.1;
# each once made R and Python disagree): both readers must refuse every one.
GRAMMAR_MUTATIONS = (
    "form_feed",
    "vertical_tab",
    "long_integer",
    "nul_in_key",
    "lone_surrogates",
    "forged_big_int",
    "st_shape_float",
    "st_offset_float",
)


def mutate_grammar(doc: dict, tensors: bytes, rng: random.Random) -> tuple[str, bytes, bytes]:
    """A text mutation of program.json or the safetensors header that the grammar refuses:
    (kind, program.json bytes, tensors.safetensors bytes)."""
    head_len = struct.unpack("<Q", tensors[:8])[0] if len(tensors) >= 8 else 0
    header = tensors[8 : 8 + head_len]
    kinds = [k for k in GRAMMAR_MUTATIONS if not k.startswith("st_") or b'"shape"' in header]
    kind = rng.choice(kinds)
    text = json.dumps(doc)
    commas = [i for i, c in enumerate(text) if c == ","]
    if kind in ("form_feed", "vertical_tab"):
        at = rng.choice(commas) + 1
        text = text[:at] + ("\f" if kind == "form_feed" else "\v") + text[at:]
    elif kind == "long_integer":
        text = text[:-1] + ', "meta": {"n": ' + "9" * rng.randint(4301, 6000) + "}}"
    elif kind == "nul_in_key":
        text = text[:-1] + ', "meta": {"a\\u0000b": 1, "a\\u0000c": 2}}'
    elif kind == "forged_big_int":  # R's mark of an integer past 32 bits, in a string
        text = text.replace('"format_version": ', '"format_version": "\\u001ftbint:', 1)
        text = re.sub(r'("format_version": "\\u001ftbint:)(\d+)', r'\1\2"', text, count=1)
    elif kind == "lone_surrogates":
        high = rng.choice(["\\ud800", "\\udbff", "\\udc00"])
        text = text[:-1] + f', "meta": {{"{high}": 1, "\\ud801": 2}}}}'
    else:
        field = b'"shape":[' if kind == "st_shape_float" else b'"data_offsets":['
        starts = [i for i in range(len(header)) if header.startswith(field, i)]
        at = rng.choice(starts) + len(field)
        end = at
        while header[end : end + 1].isdigit():
            end += 1
        if end > at:  # an empty shape has no number to write as a float
            header = header[:end] + b".0" + header[end:]
            tensors = struct.pack("<Q", len(header)) + header + tensors[8 + head_len :]
        else:
            kind = "form_feed"
            text = text.replace(",", ",\f", 1)
    return f"grammar:{kind}", text.encode(), tensors


def _member_offsets(data: bytes) -> list[int]:
    out, start = [], 0
    while (at := data.find(b"PK\x03\x04", start)) != -1:
        out.append(at)
        start = at + 4
    return out


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """A mutation of the archive's bytes: flips, truncation, ZIP header fields."""
    raw = bytearray(data)
    kind = rng.choice(
        ["flip", "truncate", "zip_method", "zip_flags", "zip_size", "duplicate", "directory"]
    )
    locals_ = _member_offsets(data)
    central = [i for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)]
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        raw = raw[: rng.randrange(len(raw))]
    elif kind == "zip_method":
        method = rng.choice([8, 12, 14, 99])
        for at in locals_:
            raw[at + 8 : at + 10] = struct.pack("<H", method)
        for at in central:
            raw[at + 10 : at + 12] = struct.pack("<H", method)
    elif kind == "zip_flags":
        flag = rng.choice([1, 8, 0x41, 0x2000])
        for at in locals_:
            raw[at + 6 : at + 8] = struct.pack("<H", flag)
        for at in central:
            raw[at + 8 : at + 10] = struct.pack("<H", flag)
    elif kind == "zip_size":
        at = rng.choice(central)
        field = rng.choice([20, 24])  # compressed or uncompressed size
        raw[at + field : at + field + 4] = struct.pack("<I", rng.choice([0, 1, 2**31, 2**32 - 1]))
    elif kind in ("duplicate", "directory"):
        import io

        buffer = io.BytesIO(bytes(data))
        with zipfile.ZipFile(buffer, "a") as archive:
            if kind == "duplicate":
                text = archive.read("program.json").replace(b'"relu"', b'"neg"')
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    archive.writestr("program.json", text)
            else:
                archive.writestr("program.json/", b"")
        raw = bytearray(buffer.getvalue())
    return f"bytes:{kind}", bytes(raw)


def write_case(
    path: Path, doc: dict | bytes | None, tensors: bytes, raw: bytes | None = None
) -> None:
    """An artifact of ``doc`` (a dict written as JSON, bytes as they are) and ``tensors``;
    or the file ``raw``."""
    if raw is not None:
        path.write_bytes(raw)
        return
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", doc if isinstance(doc, bytes) else json.dumps(doc))
        archive.writestr("tensors.safetensors", tensors)


# --- the run -----------------------------------------------------------------------------


def fuzz(folder: Path, cases: int, seed: int) -> tuple[Counter, list[str]]:
    """Run ``cases`` mutations; return the outcome counts and the failures."""
    rng = random.Random(seed)
    canary = folder / "canary"
    bases = []
    for path, inputs in seeds(folder):
        with zipfile.ZipFile(path) as archive:
            doc = json.loads(archive.read("program.json"))
            tensors = archive.read("tensors.safetensors")
        bases.append((path.read_bytes(), doc, tensors, inputs))
    counts: Counter = Counter()
    failures: list[str] = []
    worker = Worker()
    try:
        for index in range(cases):
            data, doc, tensors, inputs = rng.choice(bases)
            case = folder / f"case{index % 8}.tb"
            draw = rng.random()
            if draw < 0.25:
                kind, raw = mutate_bytes(data, rng)
                write_case(case, None, tensors, raw)
            elif draw < 0.3:
                kind, text, grammar_tensors = mutate_grammar(doc, tensors, rng)
                write_case(case, text, grammar_tensors)
            else:
                kind, mutated = mutate_json(doc, rng, canary)
                write_case(case, mutated, tensors)
            result = worker.run(case, inputs)
            load, call = result["load"], result.get("call")
            counts[f"load {load.split(':')[0]}"] += 1
            if call is not None:
                counts[f"call {call.split(':')[0]}"] += 1
                if kind.startswith("target:"):  # a newer op's argument reached the call
                    counts[f"target call {call.split(':')[0]}"] += 1
            bad = [x for x in (load, call or "") if x.startswith(("raw", "hang", "crash"))]
            if kind.startswith("grammar:") and not load.startswith("tracebridge"):
                bad.append(f"the grammar refuses this file, the loader said {load}")
            if canary.exists():
                bad.append("CANARY: code from the file ran")
                canary.unlink()
            if bad:
                failures.append(f"case {index} ({kind}): {bad}")
                keep = folder / f"failure{len(failures)}.tb"
                keep.write_bytes(case.read_bytes())
            if load.startswith(("hang", "crash")):
                worker = Worker()
    finally:
        worker.stop()
    return counts, failures


def test_fuzz_loader(tmp_path):
    counts, failures = fuzz(tmp_path, CASES, SEED)
    print(f"\nfuzz: {CASES} cases, seed {SEED}: " + ", ".join(
        f"{k}: {v}" for k, v in sorted(counts.items())))  # fmt: skip
    assert not failures, "\n".join(failures[:20])
    assert counts["load ok"] > 0 and counts["load tracebridge"] > 0
    if CASES >= 400:  # mutated arguments of the newer ops reach their checks at the call
        assert counts["target call tracebridge"] > 0 and counts["target call ok"] > 0


def test_worker_reports_hangs_and_memory(tmp_path):
    """The harness itself: a hang is reported as one, memory past the cap is not a pass."""
    worker = Worker()
    try:
        worker.proc.stdin.write("not json\n")
        worker.proc.stdin.flush()
        assert worker._line(30) is None  # the worker died on a bad line: no answer
    finally:
        worker.stop()
    probe = subprocess.run(
        [sys.executable, "-c", f"bytearray({MEMORY_LIMIT})"],
        preexec_fn=_limits,
        capture_output=True,
    )
    assert probe.returncode != 0 and b"MemoryError" in probe.stderr


@pytest.mark.parametrize("mutation", ["zip_method", "zip_flags", "duplicate"])
def test_zip_header_mutations_are_tracebridge_errors_or_loads(tmp_path, mutation):
    path, _ = seeds(tmp_path)[2]
    rng = random.Random(1)
    for _ in range(20):
        kind, raw = mutate_bytes(path.read_bytes(), rng)
        if kind == f"bytes:{mutation}":
            break
    case = tmp_path / "case.tb"
    case.write_bytes(raw)
    with contextlib.suppress(tracebridge.TraceError):
        tracebridge.load(case)


# --- crafted attacks (tests/python/attack_cases.py) ---------------------------------------


class _Squared(torch.autograd.Function):
    """A custom autograd function: ``x * x``, saving ``x``; backward ``2 * x * g``."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def _squared_sum(x):
    return _Squared.apply(x).sum()


def _base_members(tmp_path: Path, which: str) -> tuple[dict, bytes]:
    path = tmp_path / f"base-{which}.tb"
    torch.manual_seed(0)
    if which == "linear":
        tracebridge.trace(nn.Linear(3, 2), torch.randn(4, 3)).save(path)
    elif which == "agf":
        tracebridge.trace(_squared_sum, torch.randn(3)).save(path)
    else:
        tracebridge.trace(torch.neg, torch.randn(3)).save(path)
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json")), archive.read("tensors.safetensors")


def build_attack(folder: Path, name: str, case: dict, bases: dict) -> dict:
    """The file of one crafted case and the job that runs it (canary_child's form)."""
    import hashlib

    from .test_op_contract import write_artifact

    which = case.get("base", "neg")
    doc, tensors = bases[which]
    doc = copy.deepcopy(doc)
    if "nodes" in case:
        graph = doc["methods"]["forward"]
        nodes = case["nodes"]
        graph["nodes"] = ([] if which == "neg" else graph["nodes"][:2]) + nodes
        last = nodes[-1]["outputs"][0]["id"]
        graph["outputs"], graph["out_spec"] = [{"ref": last}], {"t": "leaf"}
    if "doc" in case:
        doc = case["doc"](doc)
    if "tensors" in case:
        tensors = case["tensors"]
        doc["tensors"]["sha256"] = hashlib.sha256(tensors).hexdigest()
    path = folder / f"{len(list(folder.glob('attack-*.tb')))}.tb"
    path = folder / f"attack-{path.stem}.tb"
    write_artifact(path, doc, tensors)
    shape = [4, 3] if which == "linear" else [3]
    calls = case.get("calls", 2)
    return {"path": str(path), "shape": shape, "calls": calls, "grad": case.get("grad", False)}


ATTACK_SECONDS = 300  # one child's budget; a case that hangs is marked and skipped


def run_attacks(folder: Path, cases: dict) -> dict[str, dict]:
    """Each crafted case's outcome (canary_child's), run in children limited to
    ``MEMORY_BYTES`` of address space."""
    from .canary_child import run_batch

    bases = {which: _base_members(folder, which) for which in ("neg", "linear", "agf")}
    jobs = [build_attack(folder, name, case, bases) for name, case in cases.items()]
    outcomes = run_batch(jobs, folder, timeout=ATTACK_SECONDS, memory_bytes=MEMORY_LIMIT)
    return dict(zip(cases, outcomes))


def attack_failure(outcome: dict) -> str | None:
    """Why an outcome breaks the promise, or None: a refusal at load or at the call, or a
    run whose outputs hold no canary and whose state did not change."""
    stage = outcome["stage"]
    allocator = ("can't allocate memory", "std::bad_alloc")  # what only the cap stopped
    if stage in ("load", "call") and not any(a in outcome["message"] for a in allocator):
        return None
    if stage == "ok" and not outcome["canary"] and not outcome["changed"]:
        return None
    return json.dumps(outcome)[:600]


@pytest.fixture(scope="module")
def attacks(tmp_path_factory) -> dict[str, dict]:
    """The outcome of every crafted case of ``attack_cases.FAMILIES``."""
    from .attack_cases import all_cases

    return run_attacks(tmp_path_factory.mktemp("attacks"), all_cases())


def test_crafted_attacks_are_refused_or_run_within_their_tensors(attacks):
    """Every crafted case: refused at load or at the call with tracebridge's error, or run
    without a crash, a hang, an allocation past the cap, a canary word or a state change."""
    failures = {name: why for name, o in attacks.items() if (why := attack_failure(o))}
    stages = Counter(o["stage"] for o in attacks.values())
    print(f"\ncrafted attacks: {len(attacks)} cases: " + ", ".join(
        f"{k}: {v}" for k, v in sorted(stages.items())))  # fmt: skip
    assert not failures, "\n".join(f"{k}: {v}" for k, v in list(failures.items())[:20])


def test_autocast_reads_of_another_device_type_are_refused_at_load(attacks):
    """``prim.autocast_enabled``/``prim.autocast_dtype`` naming a device type torch keeps
    no autocast state for: refused by the loader (check/program.py), guarded or not; a
    read no guard needs was run to torch's refusal at the call, or never."""
    cases = {
        name: o
        for name, o in attacks.items()
        if name.startswith(("flags:autocast_", "flags:guarded_unknown_device"))
    }
    assert len(cases) == 6
    assert all(o["stage"] == "load" for o in cases.values()), cases
    named = [o for o in cases.values() if "which torch keeps no autocast" in o["message"]]
    assert len(named) == 4, cases  # "os.system" (twice), "bogus", "cuda:0"; not a string: 2


def test_session_15_document_fields_with_odd_values_are_refused_at_load(attacks):
    """``module_modes``, ``var_keywords``, ``module_types`` and ``persistent`` holding what
    no writer makes: refused by the loader, naming the field; a module path the loaded
    module lacks is only not watched."""
    cases = {
        n.removeprefix("document:"): o for n, o in attacks.items() if n.startswith("document:")
    }
    assert len(cases) == 26
    # module_types naming a torch.nn function, a method or another class: only a name
    # the stand-in answers isinstance as (or none); nothing is imported or run
    for name in ("types_function", "types_method", "types_other_class"):
        outcome = cases.pop(name)
        assert outcome["stage"] == "ok" and not outcome["canary"], (name, outcome)
    for name in ("types_foreign", "types_call"):
        assert "is not a class of torch.nn" in cases.pop(name)["message"], name
    assert "module_types" in cases.pop("types_not_text")["message"]  # the schema's rule
    assert "persistent" in cases.pop("persistent_text")["message"]
    # tied names a loaded module cannot take as written are left out; the file runs
    for name in ("alias_through_tensor", "alias_private", "alias_over_method", "alias_new_path"):
        outcome = cases.pop(name)
        assert outcome["stage"] == "ok" and not outcome["canary"], (name, outcome)
    # paths the loaded module does not have (one of 50,000, one that names a dunder) are
    # not watched: no attribute of the module is ever looked up by a path of the file
    for name in ("modes_ghost_path", "modes_path_dunder", "modes_many"):
        outcome = cases.pop(name)
        assert outcome["stage"] == "ok" and not outcome["canary"], (name, outcome)
    assert "U+0000" in cases.pop("modes_path_control")["message"]  # the JSON reader's rule
    assert all(o["stage"] == "load" for o in cases.values()), cases
    for name, o in cases.items():
        field = next(
            (f for f in ("var_keywords", "positional_only", "defaults") if name.startswith(f)),
            "module_modes",
        )
        assert field in o["message"], (name, o["message"])


@pytest.mark.parametrize(
    "case", ["tensor_sum_wraps_to_0", "one_arg_sum_wraps_to_3", "output_size_sum_wraps_to_3"]
)
def test_repeat_interleave_counts_whose_sum_wraps_are_refused(attacks, case):
    """Repeats of 2**62 whose int64 sum wraps to 0 or 3: the kernel allocated that and
    wrote 2**64 elements past it (a segfault). Each count is bounded before the sum."""
    outcome = attacks[f"repeat_interleave:{case}"]
    assert outcome["stage"] == "call", outcome
    assert "a repeat count of 46116860184273879" in outcome["message"]
    assert "repeat_interleave" in outcome["message"]


def test_repeat_interleave_is_bounded_in_bytes(attacks):
    """2**27 repeats of one complex128 element (2 GiB, fewer elements than the old bound
    of 2**28): refused at the call in bytes where a tensor gives the count; at load
    where the file writes it."""
    called = attacks["repeat_interleave:complex_bytes_tensor"]
    assert called["stage"] == "call", called
    assert "2147483648 bytes" in called["message"]
    assert attacks["repeat_interleave:complex_bytes"]["stage"] == "load"
    loaded = attacks["repeat_interleave:float64_bytes_at_load"]
    assert loaded["stage"] == "load", loaded
    assert "repeat_interleave makes a tensor" in loaded["message"]
    assert "2147483640 bytes" in loaded["message"]


# prober18 F12: each refused at load where the file says enough, else before the kernel,
# naming the op and the argument (they failed inside the checked implementation, passed the
# load checks, or reached ATen: "numel: integer multiplication overflow").
F12_AT_LOAD = {
    "as_strided:bool_size": "as_strided's size is [true]: a bool",
    "as_strided:bool_size_of_two": "as_strided's size is [true, 3]: a bool",
    "as_strided:bool_stride": "as_strided's stride is [true]: a bool",
    "as_strided:bool_offset": "as_strided's storage_offset is true: a bool",
    "repeat_interleave:repeats_bool": "repeat_interleave's repeats is true: a bool",
    "repeat_interleave:output_size_bool": "repeat_interleave's output_size is true: a bool",
    "repeat_interleave:dim_1": "dim 1 is out of range for its input of rank 1 (dims -1..0)",
    "repeat_interleave:dim_-2": "dim -2 is out of range for its input of rank 1",
    "repeat_interleave:dim_7_of_rank_2": "dim 7 is out of range for its input of rank 2",
    "broadcast_to:negative": "broadcast_to size -2 (at position 0 of the sizes) is negative",
    "broadcast_to:bool": "broadcast_to's size is [true, 3]: a bool",
    "Tensor.expand:negative": "Tensor.expand size -2 (at position 0 of the sizes) is negative",
    "Tensor.expand:bool": "Tensor.expand's size is [true, 3]: a bool",
}
F12_AT_THE_CALL = {
    "repeat_interleave:dim_computed": "repeat_interleave: dim 3 is out of range for an input "
    "of rank 1 (dims -1..0)",
    "repeat_interleave:dim_bool": "repeat_interleave: dim must be an integer, not True",
    "repeat_interleave:bool_repeats": "repeats must be an integer tensor",
    "broadcast_to:computed_negative": "broadcast_to: size -2 is negative",
    "Tensor.expand:computed_negative": "Tensor.expand: size -2 is negative",
}


def test_sizes_pytorch_refuses_are_refused_at_load_or_before_the_kernel(attacks):
    for name, words in F12_AT_LOAD.items():
        outcome = attacks[name]
        assert outcome["stage"] == "load", (name, outcome)
        assert words in outcome["message"] and "rule: " in outcome["message"], (name, outcome)
    for name, words in F12_AT_THE_CALL.items():
        outcome = attacks[name]
        assert outcome["stage"] == "call", (name, outcome)
        op = name.split(":")[0]
        assert words in outcome["message"] and f"at {op}" in outcome["message"], (name, outcome)


def test_as_strided_of_a_size_computed_at_the_call_is_bounded(attacks):
    """``as_strided(x, [3 * 2**40], [0]).sum()``, the size computed from ``x.size(0)``:
    a view within the input's one element that a sum read for hours. Bounded as an
    expand is: its elements at its width within alloc_bytes."""
    outcome = attacks["as_strided:computed_size"]
    assert outcome["stage"] == "call", outcome
    assert "as_strided" in outcome["message"] and "limit of 1073741824 bytes" in outcome["message"]


_BLOWUPS_AT_LOAD = """diag block_diag cdist take_along_dim einsum pad_constant constant_pad_nd
conv_transpose1d im2col max_unpool2d upsample_nearest1d unfold_view_sum meshgrid_contiguous
embedding index_select contiguous_complex flip_float64 bucketize polar_broadcast histc_float64
grid_sampler cumsum_float64 sort_float64 bilinear embedding_declared_float
embedding_of_the_callers_index""".split()


@pytest.mark.parametrize("case", _BLOWUPS_AT_LOAD)
def test_results_larger_than_what_their_operands_hold_are_counted_at_load(attacks, case):
    """Each asked for 2 GiB to 1 TiB from operands that cost the file one element each
    (expanded literals): the allocator's refusal under the fuzzer's cap was all that
    stopped them. The budget now runs ops without a rule on meta tensors (check/budget.py,
    ``Budget._meta``) and counts what they make beyond what their operands hold."""
    outcome = attacks[f"blowup:{case}"]
    assert outcome["stage"] == "load", outcome
    assert "[rule: resource limits]" in outcome["message"]
    assert "more than the limit of" in outcome["message"]


def test_masked_select_of_a_broadcast_mask_is_bounded_at_the_call(attacks):
    """``masked_select`` of ``[2**16, 1]`` by a ``[1, 2**16]`` mask chose 2**32 elements:
    data-dependent, so bounded at the call (runtime/checked_selections.py)."""
    outcome = attacks["blowup:masked_select"]
    assert outcome["stage"] == "call", outcome
    assert "masked_select would allocate" in outcome["message"]


def test_the_meta_rule_counts_nothing_that_does_not_grow(tmp_path):
    """A cast, a sort and a transpose of state are followed, not counted (a 2 GiB
    weight upcast would otherwise be refused), and a legitimate model loads."""
    from tracebridge.check.budget import Budget
    from tracebridge.check.program import LIMITS

    budget = Budget({"w": {"dtype": "float32", "shape": [2**14, 2**14]}}, LIMITS, frozenset())
    budget.state_read("w", 1)
    node = {"args": [{"ref": 1}], "kwargs": {}, "outputs": [{"id": 2, "kind": "Tensor"}]}
    assert budget.node("Tensor.double", dict(node)) == ""  # 2 GiB, but no new elements
    assert budget.alloc_total == 0 and budget.known[2] == ((2**14, 2**14), 8)
    grown = dict(node, op="diag", outputs=[{"id": 3, "kind": "Tensor"}])
    grown["args"] = [{"ref": 2}]
    assert budget.node("Tensor.flatten", dict(grown)) == ""  # a view of what it holds
    traced = tracebridge.trace(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), torch.rand(2, 4))
    traced.save(tmp_path / "ok.tb")
    assert tracebridge.load(tmp_path / "ok.tb")(torch.ones(2, 4)).shape == (2, 8)


@pytest.mark.parametrize("case", ["unbind", "split_1", "tensor_split_by_tensor", "unbind_dim1"])
def test_a_count_of_results_taken_from_a_size_is_bounded(attacks, case):
    """``unbind`` and ``split`` of an expanded literal of 2**24 elements, and
    ``tensor_split`` by 2**24 indices, made 2**24 tensors (``std::bad_alloc`` under the
    cap) before the runtime compared the count with the node's outputs."""
    outcome = attacks[f"counts:{case}"]
    assert outcome["stage"] == "call", outcome
    assert "results, more than the limit of 65536" in outcome["message"]


def test_a_list_of_sizes_longer_than_the_results_limit_is_refused_at_load(attacks):
    outcome = attacks["counts:split_with_sizes_many"]
    assert outcome["stage"] == "load", outcome
    assert "split_with_sizes is asked for 65537 results" in outcome["message"]


def test_the_meta_rule_never_runs_a_meta_form_that_loops_over_an_argument():
    """``diff(x, n)``'s meta form loops ``n`` times (5 s at load for ``n = 10**5``; the
    kernel stops once the input is empty): the meta rule skips it, and operands past
    ``_META_OPERANDS`` (Python decompositions cost per operand)."""
    import time as clock

    from tracebridge.check.budget import _NO_META, Budget
    from tracebridge.check.program import LIMITS

    assert "diff" in _NO_META
    budget = Budget({"x": {"dtype": "float32", "shape": [8]}}, LIMITS, frozenset())
    budget.state_read("x", 1)
    started = clock.perf_counter()
    node = {"args": [{"ref": 1}, 10**5], "kwargs": {}, "outputs": [{"id": 2, "kind": "Tensor"}]}
    assert budget.node("diff", node) == ""
    assert clock.perf_counter() - started < 1.0


def _meta_rule_case(tmp_path, nodes: list[dict]) -> Path:
    """A ``neg`` file whose forward graph is ``nodes`` (the last one's output returned)."""
    from .attack_cases import ref
    from .test_op_contract import write_artifact

    doc, tensors = _base_members(tmp_path, "neg")
    graph = doc["methods"]["forward"]
    graph["nodes"] = nodes
    graph["outputs"], graph["out_spec"] = [ref(nodes[-1]["outputs"][0]["id"])], {"t": "leaf"}
    return write_artifact(tmp_path / "case.tb", doc, tensors)


def test_the_meta_rule_runs_on_meta_whatever_device_the_file_names(tmp_path):
    """randint_like(expand of 2**28, device="cpu") allocated and filled 2 GiB at load, and
    its result (not on meta) escaped the count."""
    from .attack_cases import Wide

    wide = Wide()
    kwargs = {"dtype": {"dtype": "int64"}, "device": {"device": "cpu"}}
    nodes = wide.then("randint_like", [wide.view([2**28]), 10], kwargs, dtype="int64")
    with pytest.raises(tracebridge.ArtifactError, match=r"randint_like makes a tensor.*2147483648"):
        tracebridge.load(_meta_rule_case(tmp_path, nodes))


@pytest.mark.parametrize("alias", ["same", "Tensor.view", "detach"])
def test_the_meta_rule_counts_each_memory_once(tmp_path, alias):
    """cat of one tensor named 1024 times, of 1024 views of it or of 1024 uncounted
    copies held 1024 times what there is: two such rounds from a 1024-element literal made
    2**30 elements (4 GiB at the call) that load never counted."""
    from .attack_cases import literal, node, ref, tensor_value, tup

    nodes, vid, size = [literal(1, [0.0] * 1024)], 1, 1024
    for _ in range(2):
        parts = []
        for _ in range(1024):
            if alias == "same":
                parts.append(vid)
                continue
            parts.append(vid + 1 + len(parts))
            args = [ref(vid), tup(size)] if alias == "Tensor.view" else [ref(vid)]
            nodes.append(node(alias, args, [tensor_value(parts[-1], "float32", (size,))]))
        made = max(parts[-1], vid) + 1
        nodes.append(
            node("cat", [[ref(p) for p in parts]], [tensor_value(made, "float32", (size * 1024,))])
        )
        vid, size = made, size * 1024
    with pytest.raises(
        tracebridge.ArtifactError, match=r"cat makes a tensor of shape \[1073741824\]"
    ):
        tracebridge.load(_meta_rule_case(tmp_path, nodes))


class _RelativeBias(nn.Module):
    """A Swin-style relative position bias: ``table[index]``, both buffers."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(49, 2))
        self.register_buffer("index", torch.randint(0, 49, (256,)))

    def forward(self, x):
        bias = self.table[self.index].view(16, 16, 2).permute(2, 0, 1).contiguous()
        return x + bias.unsqueeze(0)


def _assert_loads_without_sympy(path: Path) -> None:
    """``tracebridge.load(path)`` in a fresh process leaves sympy unimported: the meta
    kernels that call ``torch._check`` import it on their first call (1-6 s of a load)."""
    code = "import sys, tracebridge; tracebridge.load(sys.argv[1]); print('sympy' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(Path(tracebridge.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env
    )
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_the_meta_rule_takes_rows_without_torchs_meta_kernel(tmp_path):
    """table[index] of state is sized by hand: torch's meta kernel imported sympy at load
    (1-6 s on a busy machine, for a load of 0.2 s); rows taken by a wide index still
    count."""
    from .attack_cases import Wide

    tracebridge.trace(_RelativeBias(), torch.randn(1, 2, 16, 16)).save(tmp_path / "rb.tb")
    _assert_loads_without_sympy(tmp_path / "rb.tb")
    wide = Wide()
    nodes = wide.then("getitem", [wide.view([1, 2**12]), wide.view([2**20], "int64", 0)])
    with pytest.raises(
        tracebridge.ArtifactError, match=r"getitem makes a tensor of shape \[1048576, 4096\]"
    ):
        tracebridge.load(_meta_rule_case(tmp_path, nodes))


class _CausalMask(nn.Module):
    """A decoder's mask of literal size (``triu(ones(n, n))``), then softmax over it."""

    def forward(self, x):
        mask = torch.triu(torch.ones(8, 8), 1).bool()
        scores = torch.cumsum(torch.ones(8, 8), -1).softmax(-1)
        return x.masked_fill(mask, 0.0) + scores


def test_ops_of_one_tensor_that_keep_its_shape_are_sized_without_a_meta_kernel(tmp_path):
    """triu, softmax, cumsum (and sort, flip, ...) of a literal are sized by hand: their
    meta forms imported sympy at load (1-5 s of a load of 0.1 s); of an expanded literal
    they still count what they make."""
    from .attack_cases import Wide

    tracebridge.trace(_CausalMask(), torch.randn(8, 8)).save(tmp_path / "mask.tb")
    _assert_loads_without_sympy(tmp_path / "mask.tb")
    for op in ("triu", "cumsum", "sort"):
        wide = Wide()
        made = 2 if op == "sort" else 1
        nodes = wide.then(op, [wide.view([2**14, 2**14], "float64")], None, "float64", made)
        with pytest.raises(tracebridge.ArtifactError, match=rf"{op} makes a tensor of shape"):
            tracebridge.load(_meta_rule_case(tmp_path, nodes))
