"""Dataclass and named-tuple outputs come back as the user's class (ir/pytree.py, Note: the
user's classes): from the traced object always, from a loaded artifact where the class is
in an imported module; the file keeps its ``namedtuple`` spec, so R still reads a named
list and a process without the class gets a named tuple of the same name and fields."""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import NamedTuple

import pytest
import torch

import tracebridge
from tracebridge.ir import pytree

from .conftest import run_fresh_python

pytestmark = pytest.mark.usefixtures("quiet_warnings")


@dataclasses.dataclass
class Scored:
    logits: torch.Tensor
    probs: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Frozen:
    value: torch.Tensor


@dataclasses.dataclass
class Doubled:
    """Its __post_init__ changes a field: a rebuilt output must not run it again."""

    x: torch.Tensor

    def __post_init__(self):
        self.x = self.x * 2


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


def heads(x):
    return Scored(x * 3, x.softmax(-1)), Pair(x, -x), Frozen(x.sum()), Doubled(x + 1)


def _fields(obj) -> list[str]:
    if dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj)]
    return list(obj._fields)


def _assert_same(out, expected):
    assert [type(o) for o in out] == [type(e) for e in expected]
    for got, want in zip(out, expected):
        for name in _fields(want):
            torch.testing.assert_close(getattr(got, name), getattr(want, name))


def test_the_traced_object_returns_the_users_classes():
    x = torch.rand(2, 3)
    traced = tracebridge.trace(heads, x)
    out = traced(torch.rand(4, 3))
    assert isinstance(out[0], Scored) and isinstance(out[1], Pair)
    assert isinstance(out[2], Frozen) and isinstance(out[3], Doubled)
    y = torch.rand(5, 3)
    _assert_same(traced(y), heads(y))  # Doubled's __post_init__ is not run twice


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_loaded_artifact_returns_the_class_of_an_imported_module(tmp_path, runtime):
    tracebridge.trace(heads, torch.rand(2, 3)).save(tmp_path / "h.tb")
    loaded = tracebridge.load(tmp_path / "h.tb", runtime=runtime)
    y = torch.rand(3, 3)
    _assert_same(loaded(y), heads(y))


def test_a_local_class_is_kept_in_process_and_a_named_tuple_when_loaded(tmp_path):
    @dataclasses.dataclass
    class Local:
        a: torch.Tensor

    traced = tracebridge.trace(lambda x: Local(x + 1), torch.rand(3))
    assert isinstance(traced(torch.rand(3)), Local)
    traced.save(tmp_path / "l.tb")
    out = tracebridge.load(tmp_path / "l.tb")(torch.zeros(3))
    assert not isinstance(out, Local)  # no module holds it: a stand-in of the same shape
    assert type(out).__name__ == "Local" and out._fields == ("a",)
    assert torch.equal(out.a, torch.ones(3))


def test_two_imported_classes_of_one_name_and_fields_give_the_stand_in(monkeypatch):
    first, second = types.ModuleType("tb_first"), types.ModuleType("tb_second")
    for module in (first, second):
        module.Twin = dataclasses.make_dataclass("Twin", [("t", torch.Tensor)])
        monkeypatch.setitem(sys.modules, module.__name__, module)
    assert pytree.imported_class("Twin", ("t",)) is None
    built = pytree.namedtuple_class("Twin", ["t"])(torch.ones(1))
    assert type(built) not in (first.Twin, second.Twin) and built.t.item() == 1.0
    monkeypatch.delitem(sys.modules, "tb_second")
    assert pytree.imported_class("Twin", ("t",)) is first.Twin
    assert pytree.imported_class("Twin", ("t", "u")) is None  # other fields: not that class


def test_specs_are_written_as_before():
    _, spec = pytree.flatten(Scored(torch.ones(1), torch.ones(1)), pytree.is_tensor)
    assert spec == {
        "t": "namedtuple",
        "name": "Scored",
        "fields": ["logits", "probs"],
        "c": [pytree.LEAF, pytree.LEAF],
    }
    import copy
    import json

    assert type(copy.deepcopy(spec)) is dict
    assert json.loads(json.dumps(spec)) == spec


_MODULE = """
import dataclasses, torch

@dataclasses.dataclass
class Result:
    y: torch.Tensor
    n: torch.Tensor

def f(x):
    return Result(x * 2, x.sum())
"""


def test_a_fresh_process_gets_the_class_once_its_module_is_imported(tmp_path):
    (tmp_path / "user_outputs.py").write_text(_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import user_outputs

        tracebridge.trace(user_outputs.f, torch.rand(3)).save(tmp_path / "r.tb")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("user_outputs", None)
    code = f"""
        import sys, torch, tracebridge
        sys.path.insert(0, {str(tmp_path)!r})
        loaded = tracebridge.load({str(tmp_path / "r.tb")!r})
        out = loaded(torch.ones(3))
        print("before", type(out).__module__, type(out).__name__, out.y.tolist())
        import user_outputs
        again = tracebridge.load({str(tmp_path / "r.tb")!r})(torch.ones(3))
        print("after", isinstance(again, user_outputs.Result), again.n.item())
    """
    done = run_fresh_python(code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "before tracebridge.ir.pytree Result [2.0, 2.0, 2.0]"
    assert lines[1] == "after True 3.0"
