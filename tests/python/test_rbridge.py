"""The Python half of the R bridge, tested without R."""

import numpy as np
import pytest
import torch

import tracebridge
from tracebridge.frontends import rbridge


def test_tensor_from_r_keeps_index_meaning_of_column_major_data():
    a = np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    a.flags.writeable = False
    t = rbridge.tensor_from_r(a, torch.float32)
    assert t.shape == (2, 3, 4)
    assert t.dtype == torch.float32
    assert t[1, 2, 3].item() == a[1, 2, 3]
    assert t.is_contiguous()


def test_tensor_to_r_returns_int32_for_small_longs():
    out = rbridge.tensor_to_r(torch.tensor([1, 2, 3]))
    assert out.dtype == np.int32
    big = rbridge.tensor_to_r(torch.tensor([2**40]))
    assert big.dtype == np.int64


@pytest.mark.parametrize(
    "dtype",
    [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz],
    ids=str,
)
def test_tensor_to_r_widens_float8_exactly(dtype):
    t = torch.tensor([0.5, -2.0, 3.0]).to(dtype)  # a float8 output of a loaded op-set 10 file
    out = rbridge.tensor_to_r(t)
    assert out.dtype == np.float32 and out.tolist() == t.float().tolist()


def test_tensor_to_r_keeps_unsigned_and_widens_complex32():
    assert rbridge.tensor_to_r(torch.tensor([65535]).to(torch.uint16)).tolist() == [65535]
    z = torch.tensor([1 + 2j]).to(torch.complex32)
    assert rbridge.tensor_to_r(z).dtype == np.complex64


def test_format_tensor_matches_mlverse_torch():
    assert rbridge.format_tensor(torch.tensor([0.0, 0.0, 1.0])) == (
        "torch_tensor\n 0\n 0\n 1\n[ CPUFloatType{3} ]"
    )
    assert rbridge.format_tensor(torch.tensor([[1, 3], [2, 4]])) == (
        "torch_tensor\n 1 3\n 2 4\n[ CPULongType{2,2} ]"
    )
    assert rbridge.format_tensor(torch.tensor(2.5)) == "torch_tensor\n2.5000\n[ CPUFloatType{} ]"


def test_index_spec():
    t = torch.arange(12).reshape(3, 4)
    assert torch.equal(rbridge.index(t, [0, None]), t[0])
    assert torch.equal(rbridge.index(t, [None, ("range", 1, 3)]), t[:, 1:3])
    assert torch.equal(rbridge.index(t, [[0, 2], None]), t[[0, 2]])


def test_call_remembers_the_exception_for_r():
    with pytest.raises(ValueError):
        rbridge.call(int, "x")
    err = rbridge.take_last_error()
    assert isinstance(err, ValueError)
    assert rbridge.take_last_error() is None
    name, _, mro = rbridge.error_info(tracebridge.GuardError("broken"))
    assert name == "GuardError"
    assert "TraceError" in mro


def test_rmodule_is_traceable_with_state_paths():
    m = rbridge.new_module("Net")
    m.add_module("fc1", torch.nn.Linear(3, 2))
    m._r_forward = lambda x: torch.relu(m.fc1(x))
    assert type(m).__name__ == "Net"
    traced = tracebridge.trace(m, torch.rand(4, 3))
    x = torch.rand(5, 3)
    assert torch.allclose(traced(x), torch.relu(m.fc1(x)))
    assert "fc1.weight" in traced.graph


def test_register_source_lets_messages_quote_r_lines_without_a_file():
    import linecache

    from tracebridge.source import source_line

    lines = ["function (x) ", "{", "    if (x$shape[1] == 2) x else -x", "}"]
    rbridge.register_source("<R function f>", lines)
    assert source_line("<R function f>:3") == "if (x$shape[1] == 2) x else -x"
    linecache.checkcache()  # an entry without a file survives the check for stale files
    assert source_line("<R function f>:1") == "function (x)"
    rbridge.register_source("<R function g>", "x + 1")
    assert source_line("<R function g>:1") == "x + 1"


def test_to_float_reads_a_traced_number():
    assert rbridge.to_float(3) == 3.0
    assert isinstance(rbridge.to_float(3), float)
