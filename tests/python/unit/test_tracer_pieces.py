"""Unit tests, one group per piece of the tracer (trace/): traced numbers, the builtin
patches, recording, conversions to Python values, and dispatch. Each piece's invariant is
stated in its module docstring; these tests hold it."""

from __future__ import annotations

import builtins
import math
import threading

import pytest
import torch
import torch.nn.functional as F

from tracebridge.errors import TracerWarning, UnsupportedOpError
from tracebridge.trace.capture import capture
from tracebridge.trace.numbers import SymInt
from tracebridge.trace.patches import BUILTIN_PATCHES, recording
from tracebridge.trace.tracer import Tracer


def _ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


# --- numbers: a traced number holds the concrete value, its arithmetic is recorded --------


def test_traced_size_keeps_its_value_and_records_arithmetic():
    seen = {}

    def f(x):
        n = x.size(0)
        seen["n"] = n
        seen["twice"] = n * 2 + 1
        return x.view(seen["twice"] - 1 - n, -1)

    graph = capture(f, (torch.zeros(3, 4),), {})
    ops = _ops(graph)
    assert {"prim.size", "scalar.mul", "scalar.add", "scalar.sub"} <= set(ops)
    assert "prim.guard" not in ops  # nothing became a Python value
    assert isinstance(seen["n"], SymInt) and seen["twice"]._concrete() == 7


def test_a_traced_number_used_in_a_branch_is_guarded():
    def f(x):
        return x * 2 if x.size(0) > 2 else x

    graph = capture(f, (torch.zeros(3),), {})
    guards = [n for n in graph.nodes if n.op == "prim.guard"]
    assert len(guards) == 1 and guards[0].kwargs["expect"] is True


# --- patches: installed exactly while some thread records, originals put back --------------


def test_patches_are_installed_only_while_recording_and_restored_exactly():
    original_len, original_sqrt = builtins.len, math.sqrt
    tracer = Tracer({}, {}, set())
    assert not BUILTIN_PATCHES.installed
    with recording(tracer):
        assert BUILTIN_PATCHES.installed and builtins.len is not original_len
    assert not BUILTIN_PATCHES.installed
    assert builtins.len is original_len and math.sqrt is original_sqrt


def test_a_replacement_that_fails_to_install_leaves_nothing_replaced():
    original_len = builtins.len

    def failing_hook(on):
        if on:
            raise RuntimeError("hook failed")

    BUILTIN_PATCHES.hooks.append(failing_hook)
    try:
        with pytest.raises(RuntimeError, match="hook failed"), recording(Tracer({}, {}, set())):
            pass
    finally:
        BUILTIN_PATCHES.hooks.remove(failing_hook)
    assert not BUILTIN_PATCHES.installed and builtins.len is original_len
    with recording(Tracer({}, {}, set())):  # and the next trace installs them again
        assert builtins.len is not original_len
    assert builtins.len is original_len


def test_another_thread_sees_plain_len_while_one_thread_records():
    results = {}
    started, release = threading.Event(), threading.Event()

    def other():
        started.wait()
        results["len"] = len(torch.zeros(5, 2))
        results["type"] = type(len(torch.zeros(5, 2)))
        release.set()

    thread = threading.Thread(target=other)
    thread.start()

    def f(x):
        started.set()
        release.wait(10)
        return x.view(len(x), -1)

    capture(f, (torch.zeros(3, 4),), {})
    thread.join()
    assert results == {"len": 5, "type": int}


# --- recording: one value per tensor, in execution order -----------------------------------


def test_the_same_tensor_is_one_value_and_nodes_come_in_order():
    def f(x):
        y = torch.relu(x)
        return y + y

    graph = capture(f, (torch.zeros(2),), {})
    relu, add = graph.nodes
    assert (relu.op, add.op) == ("relu", "add")
    assert add.args[0] == add.args[1] == relu.outputs[0].id or add.args[0].id == add.args[1].id


def test_a_captured_tensor_becomes_a_named_constant_with_a_warning():
    table = torch.arange(3.0)

    def f(x):
        return x + table

    constants = {}
    with pytest.warns(TracerWarning):
        graph = capture(f, (torch.zeros(3),), {}, constants=constants)
    assert list(constants) and "prim.state" in _ops(graph)


# --- conversions: a traced value never becomes a Python value silently --------------------


def test_item_of_a_tensor_is_guarded_at_the_users_line():
    def f(x):
        return x * bool(x.sum() > 0)

    graph = capture(f, (torch.ones(2),), {})
    guard = next(n for n in graph.nodes if n.op == "prim.guard")
    assert guard.loc and guard.loc.endswith(str(f.__code__.co_firstlineno + 1))


# --- dispatch: ops recorded once, composites descended, the rest refused -------------------


def test_a_python_composite_folds_into_the_op_it_calls():
    graph = capture(lambda x: F.relu(x), (torch.zeros(2),), {})
    assert _ops(graph) == ["relu"]


def test_a_call_outside_the_op_set_is_refused_with_the_line():
    def f(x):
        return x + x.data_ptr()  # an address: never recorded

    with pytest.raises(UnsupportedOpError, match=r"data_ptr at .*test_tracer_pieces.py:\d+"):
        capture(f, (torch.zeros(2),), {})
