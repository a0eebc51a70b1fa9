"""Products of sizes are written as ``*`` while their bits stay bounded (runtime/codegen.py).

A batch norm in training mode checks ``size(0) * size(2) * size(3) != 1`` on every call.
Generated code writes such products inline as long as the integers they make have at most
``_PRODUCT_BITS`` bits; past that, the op table's bounded multiplication (which refuses a
result outside the int64 range) runs, so no chain of products builds a huge integer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError
from tracebridge.runtime import codegen

sys.path.insert(0, str(Path(__file__).parent))
from models import CASES  # noqa: E402

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def test_the_batch_norm_check_multiplies_sizes_inline(tmp_path):
    case = CASES["cnn_train"]()
    path = tmp_path / "m.tb"
    tracebridge.save(case.trace(), path)
    loaded = tracebridge.load(path)
    interpreted = tracebridge.load(path, runtime="interpreter")
    code = loaded.code
    assert "op_scalar_mul" not in code
    assert code.count(" * v") == 4
    with torch.no_grad():
        for batch in (1, 3):
            x = torch.randn(batch, 3, 16, 16)
            torch.manual_seed(0)
            got = loaded(x)
            torch.manual_seed(0)
            assert torch.equal(got, interpreted(x))
    one = torch.randn(1, 3, 1, 1)  # one value per channel: the guard refuses it
    with pytest.raises(GuardError) as inline:
        loaded(one)
    with pytest.raises(GuardError) as called:
        interpreted(one)
    assert str(inline.value) == str(called.value)


def _product_of_sizes(x):
    n = x.size(0) * x.size(1) * x.size(2) * x.size(3)
    return x.reshape(-1) * (n * x.size(4))


def test_a_product_past_the_bound_goes_through_the_bounded_op():
    x = torch.rand(2, 3, 1, 2, 2)
    traced = tracebridge.trace(_product_of_sizes, x)
    code = traced.code
    # 64 bits a size: three products inline (256 bits), the fourth through the op table
    assert code.count("op_scalar_mul") == 1
    assert code.count(" * v") == 3
    y = torch.rand(3, 1, 2, 5, 1)
    assert torch.equal(traced(y), _product_of_sizes(y))


def test_bits_are_bounded_through_sums_and_bounded_ops():
    x = torch.rand(2, 3)

    def f(x):
        a = x.size(0) + x.size(1)  # 65 bits
        b = a * a  # 130 bits, inline
        c = (b * b) ** 2  # 260 bits: the op; pow: the op, 64 bits
        return x * (c * a)  # 64 + 65: inline

    traced = tracebridge.trace(f, x)
    graph = traced._methods["forward"].graph
    bits = codegen._int_bits(graph)
    widths = sorted(set(bits.values()))
    assert max(widths) <= codegen._PRODUCT_BITS
    code = traced.code
    assert code.count("op_scalar_mul") == 1
    y = torch.rand(3, 2)
    assert torch.equal(traced(y), f(y))
