"""Everyday PyTorch snippets traced with tracebridge and with torch.jit.trace, as a user would.

Each snippet is traced on an example, then called -- in process and after save/load -- on
the example and on other inputs (other shapes, other values), and compared with eager
PyTorch on the same inputs (outputs, and for modules their buffers after the call). Each
tool gets one verdict per snippet:

* ``right``: every call agrees with eager (a call eager itself refuses is skipped);
* ``clear error``: the trace or a call is refused with a tracebridge error
  (``TraceError`` and its kinds: ``GuardError``, ``TracingCheckError``, ...), never a wrong
  answer (for torch.jit: any exception);
* ``silently wrong``: some call returns a result (or leaves buffers) that differs from eager;
* ``crash``: tracebridge raised something other than its own errors (a bare
  ``RuntimeError``, ``KeyError``, ...).

    python benchmarks/snippet_trial.py               # a table
    python benchmarks/snippet_trial.py --json out.json
    python benchmarks/snippet_trial.py where_masked einsum_batched   # some snippets
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import snippet_cases  # noqa: E402  (the snippets, beside this file)
import tracebridge  # noqa: E402


@dataclass
class Result:
    name: str
    area: str
    tool: str
    verdict: str
    detail: str = ""
    calls: list[str] = field(default_factory=list)


def close(a, b) -> bool:
    """Same structure, types, shapes, dtypes and values (NaN equal to NaN)."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.requires_grad != b.requires_grad:  # training through it would differ
            return False
        if a.is_complex() or a.is_floating_point():
            return torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return (
            isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(close(x, y) for x, y in zip(a, b))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and close(vars(a), vars(b))
    return a == b


def _clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def _buffers(model) -> dict:
    if not isinstance(model, torch.nn.Module):
        return {}
    return {k: v.clone() for k, v in model.state_dict().items()}


def _load(model, state: dict) -> None:
    if isinstance(model, torch.nn.Module) and state:
        model.load_state_dict(state)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _trace(tool: str, model, case):
    args, kwargs = case.example
    if tool == "jit":
        if kwargs:
            return torch.jit.trace(model, example_kwarg_inputs=_clone(kwargs), check_trace=False)
        return torch.jit.trace(model, _clone(args), check_trace=False, strict=False)
    traced = tracebridge.trace(
        model, _clone(args), example_kwarg_inputs=_clone(kwargs) or None, **case.options
    )
    if tool == "tb-loaded":
        buffer = io.BytesIO()
        traced.save(buffer)
        buffer.seek(0)
        traced = tracebridge.load(buffer)
        if isinstance(model, torch.nn.Module):
            traced.train(model.training)
    return traced


def _float_leaves(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() else []
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _float_leaves(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _float_leaves(x)]
    if hasattr(obj, "__dataclass_fields__"):
        return _float_leaves(vars(obj))
    return []


def _gradients(fn, params: dict, args, kwargs):
    """d(sum of the float outputs)/d(float inputs and parameters), or None."""
    args, kwargs = _clone((args, kwargs))
    inputs = [t.requires_grad_() for t in _float_leaves((args, kwargs))]
    torch.manual_seed(1)
    try:
        out = fn(*args, **kwargs)
    except Exception:
        return None
    terms = [t.float().sum() for t in _float_leaves(out) if t.requires_grad]
    wrt = inputs + list(params.values())
    if not terms or not wrt:
        return None
    try:
        grads = torch.autograd.grad(sum(terms), wrt, allow_unused=True)
    except RuntimeError:
        return None  # no derivative for some op: nothing to compare
    return [torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads)]


def _same_gradients(eager_model, traced, state_holder, args, kwargs) -> bool:
    """Whether backward through the trace gives eager's gradients (inputs and parameters,
    by name); True where eager has none to compare."""
    named = dict(eager_model.named_parameters()) if isinstance(eager_model, torch.nn.Module) else {}
    expected = _gradients(eager_model, named, args, kwargs)
    if expected is None:
        return True
    theirs = dict(state_holder.named_parameters()) if named else {}
    if set(theirs) != set(named):
        return False
    try:
        got = _gradients(traced, {k: theirs[k] for k in named}, args, kwargs)
    except Exception:
        return False
    return got is not None and all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True) for a, b in zip(expected, got)
    )


def run(case, tool: str) -> Result:
    """One snippet with one tool."""
    torch.manual_seed(0)
    model = eager_model = case.make()
    initial = _buffers(model)
    try:
        traced = _trace(tool, model, case)
    except Exception as exc:
        kind = (
            "clear error" if isinstance(exc, tracebridge.TraceError) or tool == "jit" else "crash"
        )
        return Result(case.name, case.area, tool, kind, "at trace: " + _describe(exc))
    if tool != "jit" and not close(initial, _buffers(model)):
        return Result(case.name, case.area, tool, "silently wrong", "tracing changed buffers")
    if case.after_trace is not None:
        case.after_trace(model)
        if tool == "tb-loaded":
            case.after_trace(traced)
    # Eager runs from the state the traced model has now (tracing must not have changed it).
    if isinstance(model, torch.nn.Module):
        eager_model = copy.deepcopy(model)
    state_holder = traced if tool == "tb-loaded" else model
    calls, wrong, errors, crashes = [], [], [], []
    for args, kwargs in [case.example, *case.others]:
        before = _buffers(eager_model)
        eager_inputs = _clone((args, kwargs))
        torch.manual_seed(1)
        try:
            expected = eager_model(*eager_inputs[0], **eager_inputs[1])
        except Exception:
            calls.append("eager refuses")
            _load(eager_model, before)
            continue
        state_after = _buffers(eager_model)
        traced_inputs = _clone((args, kwargs))
        torch.manual_seed(1)
        try:
            got = traced(*traced_inputs[0], **traced_inputs[1])
        except Exception as exc:
            clear = isinstance(exc, tracebridge.TraceError) or tool == "jit"
            (errors if clear else crashes).append(_describe(exc))
            calls.append("error" if clear else "crash")
            _load(eager_model, before)  # a refused call must change nothing
            if tool != "jit" and not close(before, _buffers(state_holder)):
                wrong.append("a refused call changed the buffers")
            if tool != "jit" and not close((args, kwargs), traced_inputs):
                wrong.append("a refused call changed its inputs")
            continue
        ok = close(expected, got)
        if not ok:
            wrong.append("output differs from eager")
        elif not close(eager_inputs, traced_inputs):
            ok = False
            wrong.append("inputs changed in place differ from eager")
        elif state_after and not close(state_after, _buffers(state_holder)):
            ok = False
            wrong.append("buffers differ from eager after the call")
        if ok and not _same_gradients(eager_model, traced, state_holder, args, kwargs):
            ok = False
            wrong.append("gradients differ from eager")
        calls.append("right" if ok else "WRONG")
    if wrong:
        detail = "; ".join(dict.fromkeys(wrong))
        return Result(case.name, case.area, tool, "silently wrong", detail, calls)
    if crashes:
        return Result(case.name, case.area, tool, "crash", crashes[0], calls)
    if errors:
        return Result(case.name, case.area, tool, "clear error", errors[0], calls)
    return Result(case.name, case.area, tool, "right", "", calls)


VERDICTS = ("right", "clear error", "silently wrong", "crash")


def markdown(results: list[Result], count: int) -> str:
    """The trial as RESULTS.md tables: verdicts by area and tool, and tracebridge's
    refusals with their first words."""
    tools = list(dict.fromkeys(r.tool for r in results))
    areas = list(dict.fromkeys(r.area for r in results))
    lines = [
        "### Everyday snippets: tracebridge and torch.jit.trace against eager",
        "",
        f"`python benchmarks/snippet_trial.py --results` ({count} snippets of "
        "`benchmarks/snippet_cases.py`, each traced once, called on the example and on "
        "other shapes and values, compared with eager: outputs, `requires_grad`, "
        "gradients, buffers, inputs changed in place). Cells: right / clear error / "
        "silently wrong / crash.",
        "",
        "| area | " + " | ".join(tools) + " |",
        "|---|" + "---|" * len(tools),
    ]
    for area in [*areas, "all"]:
        cells = []
        for tool in tools:
            rows = [r for r in results if r.tool == tool and area in (r.area, "all")]
            cells.append(" / ".join(str(sum(r.verdict == v for r in rows)) for v in VERDICTS))
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    lines += ["", "tracebridge (in process) where it is not right:", ""]
    root = str(Path(__file__).resolve().parent.parent) + "/"
    for r in results:
        if r.tool == "tb" and r.verdict != "right":
            detail = r.detail.replace(root, "")[:160]
            lines.append(f"- `{r.name}` ({r.verdict}): {detail}")
    lines += [
        "",
        "`attribute_changed_after_trace` is the documented limit of tracing (a module "
        "attribute is read once, at trace time: docs/divergence.md); torch.jit.trace "
        "shares it.",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="snippets to run (default: all)")
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--tools", default="tb,tb-loaded,jit")
    parser.add_argument(
        "--results", action="store_true", help="write the tables into benchmarks/RESULTS.md"
    )
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    cases = [c for c in snippet_cases.CASES if not options.names or c.name in options.names]
    results = [run(case, tool) for case in cases for tool in options.tools.split(",")]
    for r in results:
        mark = {"right": "  ", "clear error": "..", "silently wrong": "!!", "crash": "XX"}
        print(f"{mark[r.verdict]} {r.name:28s} {r.tool:9s} {r.verdict:14s} {r.detail[:150]}")
    summary: dict[str, dict[str, int]] = {}
    for r in results:
        summary.setdefault(r.tool, {}).setdefault(r.verdict, 0)
        summary[r.tool][r.verdict] += 1
    print(f"{len(cases)} snippets:", json.dumps(summary))
    if options.results:
        from results_md import write_results

        write_results(markdown(results, len(cases)), "snippet-trial")
    if options.json:
        rows = [r.__dict__ for r in results]
        Path(options.json).write_text(json.dumps({"summary": summary, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
