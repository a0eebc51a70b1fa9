"""``from math import log2`` in traced code: the module's own binding of a math function.

The trace replaces ``math.log2`` while it records, but a name bound by ``from math import``
is the C function itself, which reads a traced size's value without asking it: the number
of levels ``int(log2(n))`` was the example's on every call, silently (the check at n + 1
agrees for n = 4). Such names in the traced code's modules are bound to the traced
functions while a trace records, and put back after.
"""

from __future__ import annotations

import math
from math import log2, sqrt

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
