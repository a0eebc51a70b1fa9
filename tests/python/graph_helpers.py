"""Helpers the runtime and tracer tests share: a traced graph's ops, a save/load round
trip, a counter of the calls that run a cached block as traced, a saved file with some
nodes rewritten (a crafted artifact), and the line of a class's source that a message names."""

from __future__ import annotations

import inspect
import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

import tracebridge


def ops_of(traced) -> list[str]:
    """The ops of ``traced``'s forward graph, in order."""
    return [n.op for n in traced.program.methods["forward"].nodes]


def line_of(cls, text: str) -> int:
    """The line number of ``cls``'s first source line that starts with ``text`` (else the
    first that holds it): where a refusal or GuardError must point."""
    lines, first = inspect.getsourcelines(cls)
    starts = [i for i, line in enumerate(lines) if line.strip().startswith(text)]
    return first + (starts or [i for i, line in enumerate(lines) if text in line])[0]


def loaded(traced, tmp_path, **load_options):
    """``traced`` saved under ``tmp_path`` and loaded again (``load_options`` go to
    :func:`tracebridge.load`, e.g. ``runtime=``)."""
    path = tmp_path / "m.tb"
    traced.save(path)
    return tracebridge.load(path, **load_options)


def traced_by(how: str, fn, example, tmp_path):
    """``fn`` traced on ``example``, run by ``how``: "codegen" (the generated code, in the
    process), "interpreter" (``trace(..., runtime="interpreter")``) or "loaded" (saved and
    loaded again: :func:`loaded`)."""
    if how == "interpreter":
        return tracebridge.trace(fn, example, runtime="interpreter")
    traced = tracebridge.trace(fn, example)
    return loaded(traced, tmp_path) if how == "loaded" else traced


def guarded_at_other_sizes(fn, tmp_path, example=(2, 3), other=(12, 3), guard="x.shape[0] == 2"):
    """Trace ``fn`` at ``example``: traced and loaded agree with ``fn`` there and refuse
    ``other`` with a GuardError naming ``guard``."""
    import pytest

    from tracebridge import GuardError

    traced = tracebridge.trace(fn, torch.ones(*example))
    assert torch.equal(traced(torch.ones(*example)), fn(torch.ones(*example)))
    for call in (traced, loaded(traced, tmp_path)):
        with pytest.raises(GuardError, match=re.escape(guard)):
            call(torch.ones(*other))


def loaded_module(module, inputs: tuple, tmp_path, **load_options):
    """``module`` traced on ``inputs`` (no trace check), saved and loaded again."""
    return loaded(tracebridge.trace(module, inputs, check_trace=False), tmp_path, **load_options)


def counting(runner) -> list:
    """Record each key a memo or views runner computes as traced (not from its cache)."""
    calls = []
    inner = runner.function

    def counted(*key):
        calls.append(key)
        return inner(*key)

    runner.function = counted
    return calls


def no_grad_code(traced) -> str:
    """The code a call of ``traced``'s forward without autograd runs (``.code`` shows the
    one with autograd: some rewrites hold only without it, see runtime/cse.py)."""
    from tracebridge.runtime.codegen import compile_function

    gen = traced._methods["forward"].codegen(True)
    gen.common = True
    return compile_function(gen).code


def same_bits(a, b) -> bool:
    """Bit for bit: dtype, shape, strides, values with NaN and the sign of zero."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and torch.equal(a.isnan(), b.isnan())
        and torch.equal(a.signbit(), b.signbit())
        and torch.equal(a.nan_to_num(1.5, 2.5, 3.5), b.nan_to_num(1.5, 2.5, 3.5))
    )


def recording_subclass() -> type:
    """A new ``torch.Tensor`` subclass whose ``calls`` lists the name of every torch
    function called on its instances (to check what a subclass sees of a rewrite),
    declared to tracebridge as changing no values (a traced call refuses other
    subclasses with a ``__torch_function__`` of their own: runtime/method.py)."""

    @tracebridge.pass_through
    class Recorded(torch.Tensor):
        calls: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(getattr(func, "__name__", ""))
            return super().__torch_function__(func, types, args, kwargs or {})

    return Recorded


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same values and dtype, and the same view: sizes, strides, offset, whether it
    is a view, whether it requires grad."""
    return (
        torch.equal(a, b)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset()
        and a._is_view() == b._is_view()
        and a.requires_grad == b.requires_grad
    )


def same_outputs(got, expected) -> bool:
    """:func:`same_bits` for each output of a call (one tensor or a tuple)."""
    got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
    return all(same_bits(a, b) for a, b in zip(got, expected, strict=True))


def rewrite_document(path: Path, edit: Callable[[dict], None]) -> Path:
    """The artifact at ``path`` with ``edit(doc)`` applied to its program.json (the JSON
    as stored), written back in place: a crafted file."""
    with zipfile.ZipFile(path) as archive:
        doc = json.loads(archive.read("program.json"))
        tensors = archive.read("tensors.safetensors")
    edit(doc)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", tensors)
    return path


def rewrite_nodes(path: Path, op: str, edit: Callable[[dict], None]) -> Path:
    """The artifact at ``path`` with ``edit(node)`` applied to each node of op ``op`` in
    its forward method, written back in place: a crafted file."""

    def each_node(doc: dict) -> None:
        nodes = [n for n in doc["methods"]["forward"]["nodes"] if n["op"] == op]
        assert nodes, op
        for node in nodes:
            edit(node)

    return rewrite_document(path, each_node)


def skip_unless_tables_torch() -> None:
    """Skip a test that regenerates the op tables (shared_ir/tools/gen_opset.py) under a
    torch other than the one they were made on: they hold the argument kinds of torch's
    own schemas, which differ between releases (2.11 has Dimname overloads that 2.13
    dropped), so only the pinned torch (requirements.txt) can regenerate them."""
    import pytest

    tables = Path(__file__).resolve().parents[2] / "shared_ir" / "ops.json"
    made_on = json.loads(tables.read_text(encoding="utf-8"))["torch"]
    if torch.__version__.split("+")[0] != made_on:
        pytest.skip(f"the op tables are generated on torch {made_on}, this is {torch.__version__}")
