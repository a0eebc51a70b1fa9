"""The dtypes of op-set 10 in files: uint16/32/64 and the float8 dtypes that safetensors
stores save and load bit for bit (fp8 weight storage, prober20b F5); a dtype the format
does not name is refused at save naming the tensor, never a KeyError or a message about
the temporary file that saving to a stream writes."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.ir import dtypes

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def reloaded(traced, runtime="codegen"):
    buffer = io.BytesIO()
    tracebridge.save(traced, buffer)
    return tracebridge.load(buffer.getvalue(), runtime=runtime)


class Float8Linear(nn.Module):
    """Weight-only fp8, as fp8 checkpoints are served: the weight kept in float8 with a
    scale, widened in forward."""

    def __init__(self, dtype):
        super().__init__()
        w = torch.randn(3, 4)
        scale = w.abs().max() / torch.finfo(dtype).max
        self.register_buffer("w8", (w / scale).to(dtype))
        self.register_buffer("s", scale.clone())

    def forward(self, x):
        return x @ (self.w8.to(x.dtype) * self.s).t()


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_state_saves_and_loads_bit_for_bit(dtype, runtime):
    model = Float8Linear(dtype)
    again = reloaded(tracebridge.trace(model, torch.randn(2, 4)), runtime)
    assert again.w8.dtype == dtype
    assert torch.equal(again.w8.view(torch.uint8), model.w8.view(torch.uint8))
    x = torch.randn(5, 4)
    assert torch.equal(again(x), model(x))


@pytest.mark.parametrize("dtype", FLOAT8 + UNSIGNED, ids=str)
def test_new_dtypes_as_inputs_and_casts(dtype):
    widen = tracebridge.trace(lambda a: a.to(torch.float64) * 3, torch.arange(4).to(dtype))
    narrow = tracebridge.trace(lambda a: (a * 2).to(dtype), torch.rand(3))
    x = torch.arange(7).to(dtype)
    assert torch.equal(reloaded(widen)(x), x.to(torch.float64) * 3)
    y = torch.rand(6) * 10
    got = reloaded(narrow)(y)
    assert got.dtype == dtype
    assert torch.equal(got.view(torch.uint8), (y * 2).to(dtype).view(torch.uint8))


def test_unsigned_state_saves_and_loads():
    class Ids(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("ids", torch.tensor([0, 40000, 65535]).to(torch.uint16))
            self.register_buffer("big", torch.tensor([2**40, 2**63 + 5], dtype=torch.uint64))

        def forward(self, x):
            return x + self.ids.to(torch.int64)

    model = Ids()
    again = reloaded(tracebridge.trace(model, torch.zeros(3, dtype=torch.int64)))
    assert again.ids.dtype == torch.uint16 and again.big.dtype == torch.uint64
    assert again.big.view(torch.int64).tolist() == model.big.view(torch.int64).tolist()
    x = torch.arange(3)
    assert torch.equal(again(x), model(x))


def test_complex32_computes_in_a_graph_but_is_not_stored_as_state():
    traced = tracebridge.trace(lambda a: (a * 2).real.float(), torch.randn(3).to(torch.complex32))
    x = torch.randn(4).to(torch.complex32)
    assert torch.equal(reloaded(traced)(x), (x * 2).real.float())

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("z", torch.randn(2).to(torch.complex32))

        def forward(self, a):
            return a + self.z.real.float()

    with pytest.raises(tracebridge.ArtifactError, match=r"state tensor 'z' has dtype .*complex32"):
        reloaded(tracebridge.trace(Holder(), torch.randn(2)))


def test_a_dtype_the_format_lacks_is_refused_naming_the_tensor_not_the_temporary_file(
    unchecked_programs,  # such a trace runs in process; only saving it is refused
):
    odd = torch.float8_e8m0fnu
    assert odd not in dtypes.DTYPE_NAMES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        as_input = tracebridge.trace(lambda a: a.float(), torch.ones(3).to(odd))
        as_cast = tracebridge.trace(lambda a: (a * 2).to(odd).float(), torch.ones(3))
    with pytest.raises(
        dtypes.UnsupportedDtypeError, match="input 'a' has dtype float8_e8m0fnu"
    ) as e:
        reloaded(as_input)
    assert "tracebridge-" not in str(e.value)
    with pytest.raises(
        dtypes.UnsupportedDtypeError, match=r"Tensor.to has dtype float8_e8m0fnu.*at "
    ):
        reloaded(as_cast)

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("e", torch.ones(2).to(odd))

        def forward(self, a):
            return a * 2

    with pytest.raises(tracebridge.ArtifactError, match="'e' has dtype") as e:
        reloaded(tracebridge.trace(Holder(), torch.randn(2)))
    assert "KeyError" not in repr(e.value)
