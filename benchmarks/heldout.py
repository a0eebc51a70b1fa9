"""The held-out sweep: published models the zoo does not hold, traced as the zoo traces.

``benchmarks/zoo.py`` measures the models tracebridge is developed against; this script is
the check from outside, on cases it has not seen (``benchmarks/heldout_models.py``). It
reuses the zoo's machinery unchanged (``zoo.run_case``: trace once on the first input set,
call on the others and compare with eager; save; reload every artifact in a fresh process
and run it again), for tracebridge and ``torch.jit.trace`` side by side, and runs each model
in a process of its own under a time limit, so that one model that hangs or takes the
machine's memory costs only its own row. Results go to ``benchmarks/heldout_results.json``
(``--only`` re-runs some models and keeps the rest) and the table to the block between
``<!-- heldout:begin -->`` and ``<!-- heldout:end -->`` of ``benchmarks/RESULTS.md``.

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/heldout.py
    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/heldout.py --only gptj
    ... heldout.py --part 1/2 --results /tmp/a.json   # and --part 2/2 beside it, then
    ... heldout.py --merge /tmp/a.json /tmp/b.json      # into heldout_results.json + table
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import zoo  # noqa: E402 - imports zoo_env before torchvision

TOOLS = ("tracebridge", "jit")  # what a sweep runs unless --tools says otherwise
# The table's columns: each tool that some row ran (torch.export from the ninth round on).
ALL_TOOLS = ("tracebridge", "jit", "export")
TITLES = {"tracebridge": "tracebridge", "jit": "torch.jit.trace", "export": "torch.export"}
RESULTS = os.path.join(HERE, "heldout_results.json")
MARKDOWN = os.path.join(HERE, "RESULTS.md")
BEGIN, END = "<!-- heldout:begin -->", "<!-- heldout:end -->"
SHOWN = {"right": "right", "WRONG": "**SILENTLY WRONG**", "error": "refused", "-": "-"}
# Eager outputs whose largest value is under this are smaller than the comparison's absolute
# tolerance (zoo.compare: 1e-4 times max(1, scale)): any result compares as right there.
UNVERIFIED_BELOW = 1e-3


def run_one(name: str, out: str, limit: int, tools: tuple[str, ...] = TOOLS) -> None:
    """In a process of its own: trace, call, save and reload one model."""
    from heldout_models import all_cases

    torch.set_num_threads(zoo.THREADS)
    case = next(c for c in all_cases() if c.name == name)
    with tempfile.TemporaryDirectory() as workdir:
        entry, reloads = zoo.run_case(case, tools, workdir, 0, limit)
        after = zoo.run_reloads(reloads, workdir) if reloads else {}
    if not entry.get("eager"):
        entry["output_scale"] = output_scale(case)
    for tool, cell in entry["tools"].items():
        if (name, tool) in after:
            cell["reload"] = after[(name, tool)]
    with open(out, "w") as f:
        json.dump(entry, f)


def output_scale(case) -> float | None:
    """The largest absolute value of the model's eager outputs on its first inputs, built
    as ``zoo.run_case`` builds it (seed 0)."""
    torch.manual_seed(0)
    model = case.build().eval()
    with torch.no_grad():
        leaves = zoo.leaves(model(*case.inputs()[0]))
    floats = [t for t in leaves if t.is_floating_point() and t.numel()]
    return max((t.abs().max().item() for t in floats), default=None)


def run_all(
    names: list[str], results: dict, limit: int, path: str, tools: tuple[str, ...] = TOOLS
) -> None:
    """Each model in a fresh process; a model past ``3 * limit`` seconds is recorded as such."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    for i, name in enumerate(names):
        print(f"[{i + 1}/{len(names)}] {name}", flush=True)
        started = time.time()
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        command = [sys.executable, __file__, "--one", name, "--out", out, "--limit", str(limit)]
        command += ["--tools", ",".join(tools)]
        try:
            proc = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=3 * limit
            )
            if proc.returncode == 0:
                with open(out) as f:
                    entry = json.load(f)
            else:
                entry = {"eager": "the process failed: " + proc.stderr.strip()[-300:]}
        except subprocess.TimeoutExpired:
            entry = {"eager": f"took more than {3 * limit} s in all"}
        finally:
            os.unlink(out)
        entry["seconds"] = round(time.time() - started, 1)
        results[name] = entry
        for tool, cell in entry.get("tools", {}).items():
            status, detail = zoo.verdict(cell)
            print(f"    {tool:12s} {status:6s} {detail[:200]}", flush=True)
        with open(path, "w") as f:  # after every model: a long sweep keeps what it did
            json.dump(results, f, indent=1)


# Why tracebridge refuses, for the models where it does (written from the sweep's messages,
# each checked against the library's code; shown under the table for refused models only).
_PER_IMAGE = (
    "right refusal: the model returns one result per image (a list whose length is the "
    "batch size), and the zoo's wrapper turns the batch into that list "
    "(`images.unbind(0)`, zoo_models.py:116): a batch of 3 raises GuardError there. The "
    "graph serves the example's batch and, through its size-1 specialisation, batch 1; "
    "torch.jit.trace is right at the example's batch only."
)
CAUSES = {
    "fcos_resnet50_fpn (detector, nms)": _PER_IMAGE,
    "ssd300_vgg16 (detector, nms)": _PER_IMAGE,
    "vilt (image and text)": (
        "right refusal: ViLT builds each image's position embedding in a Python loop over "
        "the batch (`modeling_vilt.py:115`, `for h, w in zip(x_h, x_w)`), unrolled for the "
        "example's 2 images; a batch of 3 raises GuardError there (batch 1 is served by the "
        "size-1 specialisation). torch.jit.trace fails batches 1 and 3."
    ),
    "fastspeech2_conformer (durations)": (
        "right refusal: the length regulator expands each sequence by its predicted "
        "durations in a Python loop over the batch, unrolled for the example's 2; a batch "
        "of 3 raises GuardError (batch 1: the size-1 specialisation). torch.jit.trace fails "
        "batches 1 and 3."
    ),
    "superpoint (keypoints)": (
        "right refusal: keypoints are kept per image in a Python loop over the batch "
        "(their count depends on the scores), unrolled for the example's 2; a batch of 3 "
        "raises GuardError. torch.jit.trace fails batches 1 and 3 and is SILENTLY WRONG at "
        "96x96."
    ),
    "rwkv (linear recurrence)": (
        "right refusal: the CPU path of its WKV recurrence loops over the sequence, "
        "unrolled and guarded; another length raises GuardError naming the line. "
        "torch.jit.trace fails or is SILENTLY WRONG at other lengths."
    ),
    "reformer (lsh attention)": (
        "refused at trace time, naming the line: the reversible layers are a custom "
        "autograd function (`_ReversibleFunction`, `modeling_reformer.py:1791`) whose "
        "forward reads tensors that are neither its arguments nor saved for backward (the "
        "layers' parameters, line 1383), so a recorded backward would fix their values; "
        "the message says to trace under `torch.no_grad()` for inference, where its "
        "forward ops are recorded (right on the example's shape and batch 1, other lengths "
        "refused by guards). torch.jit.trace fails at trace time."
    ),
    "timm mobilevitv2_050": (
        "right refusal: at 96x96 a feature map has an odd side and MobileViT interpolates it "
        "up before cutting 2x2 patches (`timm/models/mobilevit.py:539`, `if new_h != H or "
        "new_w != W`); the graph traced at 64x64 has no interpolation, so GuardError names "
        "that line. torch.jit.trace fails the same call."
    ),
    "hf mobilevit": (
        "right refusal: behind `torch.jit.is_tracing()` MobileViT calls "
        "`torch.ceil(orig_height / patch_height)` on a size, written for torch.jit.trace; "
        "the traced number is taken as a 0-dim tensor, as jit takes it, so the graph stays "
        "general (3 of 4 calls right). At 96x96 a feature map has an odd side and MobileViT "
        "interpolates it first (`modeling_mobilevit.py:406`, `if new_width != orig_width "
        "or ...`): GuardError names that line; torch.jit.trace fails the same call."
    ),
    "mamba (state space)": (
        "right refusal: the reference selective scan loops over the sequence "
        "(`modeling_mamba.py:260`, `for index in range(seq_len)`): the loop is unrolled and "
        "guarded, another length raises GuardError naming that line; torch.jit.trace fails "
        "at other lengths too."
    ),
    "recurrent_gemma (linear recurrence)": (
        "right refusal: the recurrence loops over time (`modeling_recurrent_gemma.py:383`, "
        "`for t in range(hidden_states.shape[1])`), unrolled and guarded; "
        "torch.jit.trace is SILENTLY WRONG at another length."
    ),
    "canine (character)": (
        "right refusal: local attention loops over chunks of the sequence "
        "(`modeling_canine.py:449`, `for chunk_start in range(from_start, from_seq_length, "
        "stride)`); the loop is unrolled for its number of chunks, guarded, and a length "
        "with another number of chunks raises GuardError; torch.jit.trace is SILENTLY WRONG."
    ),
    "swin3d (video, small)": (
        "right refusal: torchvision's video Swin shrinks its window to the input where the "
        "input is smaller (`swin_transformer.py:36`, `if size_dhw[i] <= window_size[i]`): "
        "another structure of the model, guarded; torch.jit.trace fails the same call."
    ),
    "switch_transformers (MoE)": (
        "right refusal: the experts that run are chosen by the data (`for expert_idx in "
        'expert_hit`, then `self[f"expert_{expert_idx[0]}"]`): the trace guards how '
        "many experts are hit and which, and a call routed otherwise raises GuardError "
        "(before the sweep's fix, the formatted index was baked: SILENTLY WRONG). "
        "torch.jit.trace fails at other shapes."
    ),
    "nystromformer": (
        "transformers' own tracing path fails: under `torch.jit.is_tracing()` it always "
        "builds an attention mask, and Nystromformer's landmark attention cannot add it "
        "(eager fails the same way with any padding); torch.jit.trace fails identically."
    ),
    "jetmoe (attention experts)": (
        "right refusal: the router counts the tokens each expert gets and turns the counts "
        "into Python numbers (`modeling_jetmoe.py:195`, `expert_size = expert_size.tolist()`) "
        "to split the batch by them: the sizes of the graph follow the data, so the trace "
        "guards the counts and a call routed otherwise raises GuardError naming that line "
        "(the example's own call is right). torch.jit.trace bakes the example's counts: "
        "SILENTLY WRONG on another batch."
    ),
    "moonshine (speech to text, rotary)": (
        "refused where torch.jit.trace is right: transformers' SDPA path computes "
        "`is_causal = q_length > 1 and attention_mask is None and is_causal` "
        "(`integrations/sdpa_attention.py:159`); Python's `and` asks the truth of the "
        "comparison first, so the trace guards `q_length > 1` in the encoder too, where "
        "`is_causal` is False and the comparison cannot change the result. Moonshine's "
        "three strided convolutions take 1200 samples to one frame (1600 to two), and "
        "GuardError names that line. The threshold probes (check/specialise.py) retrace "
        "only at sizes whose guarded comparisons they can evaluate from the graph's size "
        "arithmetic, and a convolution's output length is not among them; torch.jit.trace "
        "bakes `False` here, which is right for the encoder."
    ),
    "siglip2 vision (naflex)": (
        "right refusal: the position table is resized to each image's own patch grid, read "
        "from the data in a loop over the batch (`modeling_siglip2.py:167`, `for i in "
        "range(batch_size)`, then `height, width = spatial_shapes[i].tolist()`): the loop "
        "is unrolled for the example's 2 images and each grid guarded, so another batch "
        "size or other grids raise GuardError naming the line. torch.jit.trace bakes the "
        "example's grids: SILENTLY WRONG on 2 of 4 calls."
    ),
    "fasterrcnn_mobilenet_v3_large_320_fpn (two-stage detector)": (
        "right refusal: the model returns one result per image (a list whose length is the "
        "batch size), and the zoo's wrapper turns the batch into that list "
        "(`images.unbind(0)`, zoo_models.py:116): a batch of 3 raises GuardError there; "
        "the example's batch and batch 1 are right. Before the ninth round's fix it was "
        "refused at trace as not stable: its RoI pooling (`_roi_align`, compiled by "
        "torchvision's `lazy_compile` where the C++ kernels are missing) ran under dynamo "
        "while recording; compiled code now runs as its Python code there. torch.jit.trace "
        "fails at trace time (a dynamo-optimized function)."
    ),
    "jamba (mamba, attention, MoE)": (
        "right refusal: without the mamba kernels Jamba's selective scan loops over the "
        "sequence (`modeling_jamba.py:420`, `for index in range(seq_len)`): unrolled and "
        "guarded, another length raises GuardError naming that line. Before the tenth "
        "round's fix a shorter length raised an IndexError from a view of `C[:, index]` "
        "that the generated code made before the loop's guard (runtime/views.py). "
        "torch.jit.trace and torch.export fail at other lengths too."
    ),
    "dbrx (MoE, clipped qkv)": (
        "right refusal: the experts that run are the ones the router chose (`for expert_idx "
        "in expert_hit`, `modeling_dbrx.py:295`, a loop over the rows of a tensor whose "
        "length follows the data): the trace guards how many were hit, and a call routed "
        "to another number of experts raises GuardError naming that line. torch.jit.trace "
        "fails the same call; torch.export refuses at trace time (a data-dependent guard)."
    ),
    "hf mobilenet_v2 (tf padding)": (
        "right refusal: TensorFlow-style padding branches on each stride-2 layer's input "
        "parity (`modeling_mobilenet_v2.py:62`, `if in_height % stride_height == 0`); "
        "`int(features.shape[-2])` keeps the size traced (trace/integers.py), so the trace "
        "at 64 serves 96 (same parities), the graph traced at 63 (a residue probe) serves "
        "sizes odd at the first layer only, and 65 and 97, odd at deeper layers too, raise "
        "GuardError naming the branch. "
        "torch.jit.trace bakes the example's padding: SILENTLY WRONG at 65 and 97 (with "
        "the default initializer the logits were about 1e-25 and every padding compared "
        "as right; the case now uses initializer_range=0.3)."
    ),
}


def table(results: dict) -> list[str]:
    from heldout_models import all_cases
    from zoo_models import all_cases as zoo_cases

    cases = {c.name: c for c in all_cases()}
    # Models the sweep found worth keeping covered move to the zoo; their rows stay here.
    moved = {c.name: c for c in zoo_cases() if c.name in results}
    cases.update(moved)
    meta = results.get("_meta", {})
    rows, details, unverified = [], [], []
    ran = [t for t in ALL_TOOLS if any(t in e.get("tools", {}) for e in _rows(results))]
    counts = {t: {"right": 0, "WRONG": 0, "error": 0} for t in ran}
    for name, entry in results.items():  # in the order they were run
        case = cases.get(name)
        if case is None:
            continue  # _meta, or a model no longer in either list
        cells = []
        for tool in ran:
            status, detail = zoo.verdict(entry.get("tools", {}).get(tool))
            if status in counts[tool]:
                counts[tool][status] += 1
            cells.append(SHOWN.get(status, status))
            if detail:
                details.append(f"- **{name}**, {tool}: {detail}")
        if entry.get("eager"):
            cells = ["(eager: " + entry["eager"][:60] + ")"] * len(ran)
        shown = f"{name} (now in the zoo)" if name in moved else name
        scale = entry.get("output_scale")
        if scale is not None and scale < UNVERIFIED_BELOW:
            shown += " (outputs ≈ 0: unverified)"
            unverified.append(f"{name} ({scale:.2g})")
        rows.append(f"| {shown} | {case.category} | {case.source} | " + " | ".join(cells) + " |")
    reloaded = [
        call
        for entry in results.values()
        if isinstance(entry, dict)
        for call in entry.get("tools", {}).get("tracebridge", {}).get("reload", {}).get("calls", [])
        if "same_as_in_process" in call
    ]
    same, total = sum(c["same_as_in_process"] for c in reloaded), len(reloaded)
    lines = [
        BEGIN,
        "### Held-out sweep: published models the zoo does not hold",
        "",
        "Made by `PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/heldout.py`",
        "(here in two processes side by side, `--part 1/2 --results /tmp/a.json` and",
        "`--part 2/2 --results /tmp/b.json`, then `--merge /tmp/a.json /tmp/b.json`;",
        f"{meta.get('date', '?')}; torch {meta.get('torch', '?')}, timm "
        f"{meta.get('timm', '?')}, transformers {meta.get('transformers', '?')}; CPU, one "
        "thread). Models in `benchmarks/heldout_models.py`, each traced by the zoo's own",
        "`run_case` (trace on the first input set, call on the others, save, reload in a fresh",
        "process): **right** when every call that eager runs is right in process and after",
        "reloading, **SILENTLY WRONG** when an output differs with no error, **refused** when",
        "the tool raised (the reason is below the table). Each call, eager's and each tool's,",
        "starts from the same seed (`zoo.seeded`): a model that draws random numbers when it",
        "runs (ViLT samples its image patches) is compared draw for draw.",
        *(
            f"Re-run {r['date']} with `--only` ({r.get('why', 'after a change')}): "
            + ", ".join(r["models"])
            + "."
            for r in meta.get("reruns", [])
        ),
        "",
        "| tool | right on every shape | silently wrong | refused | models run |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {TITLES[tool]} | {c['right']} | {c['WRONG']} | {c['error']} | {sum(c.values())} |"
            for tool, c in counts.items()
        ),
        "",
        "A cell is `-` where the tool was not run on that model (torch.export joined the",
        "sweep with its ninth round: `--tools tracebridge,jit,export`).",
        *_all_tools_paragraph(results),
        "",
        f"tracebridge artifacts reloaded in a fresh process computed bit for bit what the "
        f"in-process trace computed in {same} of {total} calls. Rows marked *(now in the",
        "zoo)* are kinds the sweep found right and the zoo lacked: they moved to",
        "`benchmarks/zoo_models.py` after this run.",
        "",
        *(
            [
                f"Marked *(outputs ≈ 0: unverified)*: {len(unverified)} models whose eager "
                f"outputs are all under {UNVERIFIED_BELOW:g} (largest value in brackets), "
                "less than the comparison's absolute tolerance, so that any result compares "
                "as right (zero-initialised heads, activations that vanish at random "
                "initialisation): their **right** says only that the tool ran. "
                + ", ".join(unverified)
                + ".",
                "",
            ]
            if unverified
            else []
        ),
        "| model | kind | from | " + " | ".join(TITLES[t] for t in ran) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in ran) + " |",
        *rows,
        "",
        "Why a cell is not right (the first error):",
        "",
        *details,
        "",
        "What causes tracebridge's refusals:",
        "",
        *(
            f"- **{name}**: {CAUSES[name]}"
            for name in results
            if name in CAUSES
            and zoo.verdict(results[name].get("tools", {}).get("tracebridge"))[0] == "error"
        ),
        END,
    ]
    return lines


def _all_tools_paragraph(results: dict) -> list[str]:
    """The counts over the models every tool of ``ALL_TOOLS`` ran on (the ninth round on),
    one tool beside the other on the same models, then over the tenth round's alone."""
    from heldout_tenth import tenth_round

    rows = {k: e for k, e in results.items() if not k.startswith("_") and isinstance(e, dict)}
    rows = {k: e for k, e in rows.items() if all(t in e.get("tools", {}) for t in ALL_TOOLS)}
    if not rows:
        return []
    tenth = [e for k, e in rows.items() if k in {c.name for c in tenth_round()}]
    lines = [
        "",
        f"On the {len(rows)} models all three tools ran on (`benchmarks/heldout_ninth.py` "
        "and `benchmarks/heldout_tenth.py`; "
        "`heldout.py --only NAME ... --tools tracebridge,jit,export`): "
        + _counts(list(rows.values()))
        + ".",
    ]
    if tenth:
        lines += [
            "",
            f"Of them, the {len(tenth)} of the tenth round (`benchmarks/heldout_tenth.py`, "
            f"hand-written patterns included): {_counts(tenth)}.",
        ]
    return lines


def _counts(entries: list[dict]) -> str:
    """Each tool's right, silently wrong and refused counts over ``entries``."""
    parts = []
    for tool in ALL_TOOLS:
        seen = [zoo.verdict(e["tools"][tool])[0] for e in entries]
        parts.append(
            f"{TITLES[tool]} right on {seen.count('right')}, silently wrong on "
            f"{seen.count('WRONG')}, refused on {seen.count('error')}"
        )
    return "; ".join(parts)


def _rows(results: dict) -> list[dict]:
    return [e for k, e in results.items() if not k.startswith("_") and isinstance(e, dict)]


def write_markdown(results: dict, path: str) -> None:
    """Replace the block between the markers (or add it at the end)."""
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    block = "\n".join(table(results))
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def check_names() -> None:
    """The held-out list and the zoo hold no model in common."""
    from heldout_models import all_cases as held
    from zoo_models import all_cases as zoo_cases

    common = {c.name for c in held()} & {c.name for c in zoo_cases()}
    if common:
        raise SystemExit(f"in the zoo already: {sorted(common)}")
    print(f"{len(held())} held-out models, none in the zoo")


def _ordered(results: dict, names: list[str]) -> dict:
    """The held-out models in their list's order, then the rows of models that have moved
    to the zoo since they were run, then ``_meta``."""
    order = [n for n in names if n in results]
    order += [n for n in results if n not in order and n != "_meta"] + ["_meta"]
    return {k: results[k] for k in order if k in results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="model name (repeatable)")
    parser.add_argument("--limit", type=int, default=180, help="seconds per step")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--markdown", default=MARKDOWN)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--check-names", action="store_true")
    parser.add_argument("--part", help="I/N: run every N-th model from the I-th (1-based)")
    parser.add_argument("--merge", nargs="+", help="merge these results files, then the table")
    parser.add_argument("--why", help="with --merge: why models already in the results ran again")
    parser.add_argument(
        "--tools", default=",".join(TOOLS), help="comma-separated, of " + ",".join(ALL_TOOLS)
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.one:
        run_one(opts.one, opts.out, opts.limit, tuple(opts.tools.split(",")))
        return
    if opts.check_names:
        check_names()
        return
    from heldout_models import all_cases

    names = [c.name for c in all_cases()]
    if opts.list:
        print("\n".join(names))
        return
    results = {}
    if os.path.exists(opts.results):
        with open(opts.results) as f:
            results = json.load(f)
    if opts.merge:  # parts run side by side: later files win, model by model
        for path in opts.merge:
            with open(path) as f:
                merge_into(results, json.load(f), opts.why)
        results = _ordered(results, names)
        with open(opts.results, "w") as f:
            json.dump(results, f, indent=1)
    elif not opts.table_only:
        if opts.only:
            unknown = sorted(set(opts.only) - set(names))
            if unknown:
                raise SystemExit(f"unknown model(s) {unknown}; see --list")
        chosen = [n for n in names if not opts.only or n in opts.only]
        if opts.part:
            first, count = (int(n) for n in opts.part.split("/"))
            chosen = chosen[first - 1 :: count]
        run_all(chosen, results, opts.limit, opts.results, tuple(opts.tools.split(",")))
        results["_meta"] = zoo.versions() | {"date": datetime.date.today().isoformat()}
        results = _ordered(results, names)
        with open(opts.results, "w") as f:
            json.dump(results, f, indent=1)
    write_markdown(results, opts.markdown)


def merge_into(results: dict, part: dict, why: str | None = None) -> None:
    """``part``'s models into ``results`` (``part`` wins). Its ``_meta`` updates the
    versions and the date but keeps what ``results`` recorded (``reruns``, notes), and the
    models ``part`` runs again are recorded as a re-run, with ``why``."""
    meta = dict(results.get("_meta", {}))
    new_meta = part.get("_meta", {})
    again = [name for name in part if not name.startswith("_") and name in results]
    results.update({k: v for k, v in part.items() if k != "_meta"})
    meta.update({k: v for k, v in new_meta.items() if k != "reruns"})
    if again:
        rerun = {"date": new_meta.get("date", datetime.date.today().isoformat()), "models": again}
        meta["reruns"] = [*meta.get("reruns", []), rerun | ({"why": why} if why else {})]
    results["_meta"] = meta


if __name__ == "__main__":
    main()
