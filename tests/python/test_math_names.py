"""``from math import log2`` in traced code: the module's own binding of a math function
(and ``from random import random``, whose draw trace/python_random.py refuses to use).

The trace replaces ``math.log2`` while it records, but a name bound by ``from math import``
is the C function itself, which reads a traced size's value without asking it: the number
of levels ``int(log2(n))`` was the example's on every call, silently (the check at n + 1
agrees for n = 4). Such names in the traced code's modules are bound to the traced
functions while a trace records, and put back after.
"""

from __future__ import annotations

import math
import random
from math import log2, sqrt
from random import random as draw

import pytest
import torch

import tracebridge


def levels(x):
    return x * int(log2(x.shape[0]))


def scaled(x):
    return x / sqrt(x.shape[1])


def test_a_math_function_imported_by_name_follows_the_size(tmp_path):
    traced = tracebridge.trace(levels, (torch.randn(4, 3),))
    path = tmp_path / "levels.tb"
    traced.save(str(path))
    for runner in (traced, tracebridge.load(str(path))):
        for rows in (8, 16, 2):
            x = torch.randn(rows, 3)
            torch.testing.assert_close(runner(x), levels(x), rtol=0, atol=0)


def test_a_float_result_follows_the_size():
    traced = tracebridge.trace(scaled, (torch.randn(2, 4),))
    x = torch.randn(2, 9)
    torch.testing.assert_close(traced(x), scaled(x))


def test_the_names_are_put_back_after_the_trace():
    tracebridge.trace(levels, (torch.randn(4, 3),))
    assert log2 is math.log2 and sqrt is math.sqrt
    assert globals()["log2"] is math.log2


def _drop_path(x):
    return x * 2 if draw() < 0.5 else x  # an old layer drop, the function imported by name


def test_a_random_function_imported_by_name_is_refused_when_its_draw_is_used():
    state = random.getstate()
    with pytest.raises(tracebridge.UnsupportedOpError, match=r"random\.random\(\) drew at"):
        tracebridge.trace(_drop_path, (torch.ones(3),))
    assert draw is random.random and random.getstate() == state


def test_a_name_rebound_between_traces_is_found(tmp_path, monkeypatch):
    """The modules the code reaches are scanned again where one of them rebinds a name
    (trace/integers.py keeps the last scan while nothing it read has changed)."""
    source = (
        "import math\n"
        "log2 = None  # bound to math's later, as a lazy import would\n"
        "def levels(x):\n"
        "    return x * int(log2(x.shape[0])) if log2 is not None else x\n"
    )
    (tmp_path / "tb_rebound_levels.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    import tb_rebound_levels as module

    tracebridge.trace(module.levels, (torch.randn(8, 3),))  # scanned: log2 is None
    monkeypatch.setattr(module, "log2", math.log2)  # same names, another object
    traced = tracebridge.trace(module.levels, (torch.randn(8, 3),))
    x = torch.randn(4, 3)
    torch.testing.assert_close(traced(x), x * 2, rtol=0, atol=0)
    assert module.log2 is math.log2
