"""The divergence suite (issue 3): programs that make ``torch.jit.trace`` silently wrong.

Each case is a small program of a kind known to fool tracing, an example input to trace it
with, and a second input (or a change made after tracing: ``.eval()``, a rebound closure) on
which the trace is called. For every case the suite records, by assertion, what
``torch.jit.trace`` returns on the second input, and asserts that tracebridge either returns
the right result or refuses clearly: ``GuardError`` at call time (``check_trace=False``, the
run-time guards) or ``TracingCheckError`` / ``TraceError`` at trace time
(``check_trace=True``, the trace-time check) -- never a wrong result.

Outcomes, compared with eager PyTorch on the second input:
  right   same values, shape, dtype and device as eager
  wrong   a result that differs from eager (the silent failure)
  error   an ordinary exception at call time (torch.jit only)
  refuse  an ordinary exception at trace time (torch.jit only)
  guard   tracebridge.GuardError at call time
  check   tracebridge.TracingCheckError at trace time
  unsupported  another tracebridge.TraceError at trace time (UnsupportedOpError)

Where tracebridge returns a wrong result, the case is a core bug: its tracebridge test is
marked ``xfail(strict=True, reason="core: ...")`` and asserts the safe behaviour, so a fix
turns it into an XPASS to remove.

``python tests/python/test_divergence.py`` prints the table of docs/divergence.md from the
outcomes observed now.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge

SAFE = ("right", "guard", "refused", "check", "unsupported")


@dataclass
class Setup:
    """One fresh instance of a case: the program, its inputs, and the change after tracing.

    ``change`` is called after tracing and before the second call (``m.eval()``, rebinding a
    closure); it receives every traced object so it can switch their mode too.
    """

    fn: Callable
    example: tuple
    other: tuple
    change: Callable[[list], None] | None = None
    context: Callable[[], Any] = contextlib.nullcontext  # around the second call
    example_kwargs: dict = field(default_factory=dict)  # keyword inputs of the trace
    other_kwargs: dict = field(default_factory=dict)  # keyword inputs of the second call


@dataclass
class Case:
    """A divergence case and the outcomes observed for it.

    Attributes:
        name: the test id.
        what: the pattern, for the table.
        build: makes a fresh :class:`Setup` (fresh modules, closures and inputs).
        jit: the outcome of ``torch.jit.trace`` on the second input.
        tb: the outcomes of tracebridge with ``check_trace=False`` and ``check_trace=True``.
        core: for an outcome ``wrong`` of tracebridge, why (the xfail reason).
        kwargs: extra arguments to both tracers (``strict``) and to tracebridge
            (``respect_mode``; never passed to torch.jit).
    """

    name: str
    what: str
    build: Callable[[], Setup]
    jit: str
    tb: tuple[str, str]
    core: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- the programs


def data_branch(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def int_size_view(x):
    return x.view(int(x.size(0)), -1)


def item_arithmetic(x):
    return x / x.max().item()


def item_branch(x):
    if x.max().item() > 0.5:
        return x * 2
    return x


def loop_over_len(x):
    acc = torch.zeros_like(x[0])
    for i in range(len(x)):
        acc = acc + x[i] * (i + 1)
    return acc


def loop_over_size(x):
    acc = torch.zeros_like(x[0])
    for i in range(x.size(0)):
        acc = acc + x[i]
    return acc


def iterate_rows(x):
    acc = torch.zeros_like(x[0])
    for row in x:
        acc = acc + row
    return acc


def device_of_input(x):
    return torch.arange(x.shape[0], device=x.device)


def dtype_of_input(x):
    return torch.ones(x.shape[0], dtype=x.dtype)


def zeros_of_batch(x):
    return torch.zeros(x.shape[0], 4) + x.sum(1, keepdim=True)


def tolist_to_tensor(x):
    return torch.tensor(x.tolist()) * 2


def tensor_of_item(x):
    return x[:2] * torch.tensor([x.sum().item(), 1.0])


def tensor_of_shape(x):
    return torch.tensor(x.shape)


def arange_mask(x):
    return x * (torch.arange(x.size(1)) < 2)


def through_numpy(x):
    return torch.from_numpy(x.numpy() * 2)


def shape_branch(x):
    if x.shape[0] > 2:
        return x * 2
    return x + 1


def max_of_size(x):
    return torch.zeros(max(x.size(0), 3))


def list_output(x):
    return [x[i] * 2 for i in range(x.size(0))]


def dict_output(x):
    return {f"row{i}": x[i] for i in range(x.size(0))}


def fixed_dict_output(x):
    return {"sum": x.sum(0), "first": x[0]}


def inplace_input(x):
    x.add_(1)
    return x * 2


def new_zeros_of_size(x):
    return x.new_zeros(x.size()) + 1


def dtype_branch(x):
    if x.dtype == torch.float16:
        x = x.float()
    return x * 2


def floating_point_branch(x):
    if x.is_floating_point():
        return x / 2
    return x // 2


def size_in_set(x):
    if x.shape[0] in {1, 2}:
        return x * 10
    return x


SCALE_BY_BATCH = {2: 1.0, 3: 0.5}


def size_as_dict_key(x):
    return x * SCALE_BY_BATCH.get(x.size(0), 0.1)


def round_of_size(x):
    return x[: round(x.size(0) * 0.5)]


def shift_of_size(x):
    return x.view(x.size(0) >> 1, -1)


def divmod_of_size(x):
    half, _ = divmod(x.size(0), 2)
    return x[:half]


def size_through_string(x):
    return x.reshape(int(f"{x.size(0)}"), -1)


def contiguity_branch(x):
    if x.is_contiguous():
        return x * 2
    return x + 1


def stride_arithmetic(x):
    return x * x.stride(0)


SCALE = 2.0


def global_number(x):
    return x * SCALE


def lengths_by_repeat(x):
    return torch.tensor([x.size(1)] * x.size(0))


def pad_to_power_of_two(x):
    n = x.size(0)
    return F.pad(x, (0, 0, 0, (1 << (n - 1).bit_length()) - n))


def positions_from_numpy(x):
    return torch.from_numpy(np.arange(x.size(0)))


def levels_by_log2(x):
    return x * int(math.log2(x.size(0)))


def float_over_size(x):
    # A sinusoidal position encoding's frequency step: float on the left of the operator.
    return x * (-math.log(10000.0) / x.size(1))


def float_left_comparison(x):
    # A float on the left of a comparison: float's own C code compares, no hook sees it.
    return x * 2 if 3.5 < x.size(0) else x  # noqa: SIM300 - the pattern under test


class CallCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def grad_mode_branch(x):
    if torch.is_grad_enabled():
        return x * 2
    return x


def floating_point_function(x):
    return x / 2 if torch.is_floating_point(x) else x // 2


def requires_grad_branch(x):
    if x.requires_grad:
        return x * 2
    return x


def inference_tensor_branch(x):
    return x + 1 if x.is_inference() else x - 1


def storage_offset_arithmetic(x):
    return x * x.storage_offset()


def result_requires_grad_branch(x):
    y = x * 2
    return y + 1 if y.requires_grad else y - 1


def inference_mode_branch(x):
    return x * 2 if torch.is_inference_mode_enabled() else x - 1


def autocast_branch(x):
    return x * 2 if torch.is_autocast_enabled("cpu") else x - 1


def matmul_precision_branch(x):
    return x * 2 if torch.get_float32_matmul_precision() == "highest" else x - 1


@contextlib.contextmanager
def _matmul_precision(precision: str):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def same_size_branch(x, y):
    return x + 1 if x.is_same_size(y) else x - 1


def channels_last_branch(x):
    return x + 1 if x.is_contiguous(memory_format=torch.channels_last) else x - 1


def _submodule_mode_changed() -> Setup:
    module = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).eval()

    def change(traced: list) -> None:
        module[1].train()  # one sub-module switched, as a fine-tuning script might

    return Setup(module, (_seeded(4, 3),), (_seeded(5, 3),), change)


def _submodule_replaced() -> Setup:
    module = nn.Sequential(nn.Linear(3, 3), nn.ReLU())

    def change(traced: list) -> None:
        module[1] = nn.Tanh()  # timm's reset_classifier() replaces the head so

    return Setup(module, (_seeded(4, 3),), (_seeded(5, 3),), change)


def concatenated_values(d):
    return torch.cat(list(d.values()))


def concatenated_var_keywords(x, **kw):
    return torch.cat([x, *kw.values()])


def _var_keywords_reordered() -> Setup:
    a, b = _seeded(2), _seeded(3)
    return Setup(
        concatenated_var_keywords,
        (_seeded(1),),
        (_seeded(1),),
        example_kwargs={"a": a, "b": b},
        other_kwargs={"b": b.clone(), "a": a.clone()},
    )


def _inference_copy(x):
    with torch.inference_mode():
        return x.clone()


# --------------------------------------------------------------------------- the builders


def size_one_branch(x):
    # transformers' sdpa_attention: is_causal = q_length > 1
    if x.shape[0] > 1:
        return x.cumsum(0)
    return x * 2


def padding_shortcut(x, mask):
    # transformers' masking: the shortcut for unpadded batches, skipped by tracers
    if not torch.jit.is_tracing() and bool(mask.all()):
        return x.sum(1)
    return (x * mask).sum(1)


def _plain(fn: Callable, example: tuple, other: tuple) -> Callable[[], Setup]:
    return lambda: Setup(fn, example, other)


def _seeded(*shape, scale=1.0, shift=0.0, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(shape) + 7)
    return (torch.rand(*shape, generator=gen) * scale + shift).to(dtype)


def _mode_switch(module_factory: Callable[[], nn.Module], x, other) -> Callable[[], Setup]:
    """A module traced in training mode and then switched to evaluation mode."""

    def build() -> Setup:
        torch.manual_seed(0)
        module = module_factory().train()

        def change(traced: list) -> None:
            module.eval()
            for t in traced:
                t.eval()

        return Setup(module, (x,), (other,), change)

    return build


class TrainingFlagBranch(nn.Module):
    def forward(self, x):
        if self.training:
            return x * 0.5
        return x


def _closure_rebound() -> Setup:
    weight = torch.ones(3)

    def scaled(x):
        return x * weight

    def change(traced: list) -> None:
        nonlocal weight
        weight = torch.full((3,), 5.0)

    return Setup(scaled, (_seeded(3),), (_seeded(3),), change)


def _closure_inplace() -> Setup:
    weight = torch.ones(3)

    def scaled(x):
        return x * weight

    def change(traced: list) -> None:
        weight.mul_(5.0)

    return Setup(scaled, (_seeded(3),), (_seeded(3),), change)


def _global_number() -> Setup:
    def change(traced: list) -> None:
        global SCALE
        SCALE = 3.0

    global SCALE
    SCALE = 2.0
    return Setup(global_number, (_seeded(3),), (_seeded(3),), change)


class Temperature(nn.Module):
    def __init__(self):
        super().__init__()
        self.temperature = 2.0

    def forward(self, x):
        return x / self.temperature


def _module_attribute() -> Setup:
    module = Temperature()

    def change(traced: list) -> None:
        module.temperature = 4.0

    return Setup(module, (_seeded(3),), (_seeded(3),), change)


def _call_counter() -> Setup:
    module = CallCounter()

    def change(traced: list) -> None:
        module(_seeded(3))  # the model is used once more after tracing

    return Setup(module, (_seeded(3),), (_seeded(3),), change)


def _dropout():
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))


def _batchnorm():
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))


X34, X54 = _seeded(3, 4), _seeded(5, 4)
META = torch.empty(5, device="meta")
NONCONTIGUOUS = _seeded(3, 3, shift=1.0).t()


CASES = [
    Case(
        "data_branch",
        "`if x.sum() > 0:` (branch on tensor data)",
        _plain(data_branch, (torch.ones(3),), (-2 * torch.ones(3),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "int_size_view",
        "`x.view(int(x.size(0)), -1)`",
        _plain(int_size_view, (_seeded(2, 3, 4),), (_seeded(5, 3, 4),)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "item_arithmetic",
        "`x / x.max().item()`",
        _plain(item_arithmetic, (_seeded(4, shift=1.0),), (_seeded(4, scale=10.0, shift=1.0),)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "item_branch",
        "`if x.max().item() > 0.5:`",
        _plain(item_branch, (torch.ones(3),), (torch.full((3,), 0.25),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "loop_over_len",
        "`for i in range(len(x)):`",
        _plain(loop_over_len, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "loop_over_size",
        "`for i in range(x.size(0)):`",
        _plain(loop_over_size, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "iterate_rows",
        "`for row in x:`",
        _plain(iterate_rows, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="error",
        tb=("guard", "guard"),
    ),
    Case(
        "dropout_eval",
        "Dropout traced in train mode, used in eval (`respect_mode=True`)",
        _mode_switch(_dropout, X34, X34),
        jit="wrong",
        tb=("right", "right"),
        kwargs={"respect_mode": True},
    ),
    Case(
        "batchnorm_eval",
        "BatchNorm traced in train mode, used in eval (`respect_mode=True`)",
        _mode_switch(_batchnorm, X34, X34),
        jit="wrong",
        tb=("right", "right"),
        kwargs={"respect_mode": True},
    ),
    Case(
        "training_flag_eval",
        "`if self.training:` traced in train, used in eval (`respect_mode=True`)",
        _mode_switch(TrainingFlagBranch, X34, X34),
        jit="wrong",
        tb=("right", "right"),
        kwargs={"respect_mode": True},
    ),
    Case(
        "dropout_eval_default",
        "Dropout traced in train mode, used in eval (default `respect_mode=False`)",
        _mode_switch(_dropout, X34, X34),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "batchnorm_eval_default",
        "BatchNorm traced in train mode, used in eval (default `respect_mode=False`)",
        _mode_switch(_batchnorm, X34, X34),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "device_of_input",
        "`torch.arange(n, device=x.device)`, called on another device (meta)",
        _plain(device_of_input, (_seeded(3),), (META,)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "dtype_of_input",
        "`torch.ones(n, dtype=x.dtype)`, called with float64",
        _plain(dtype_of_input, (_seeded(3),), (_seeded(5, dtype=torch.float64),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "zeros_of_batch",
        "`torch.zeros(x.shape[0], 4)`",
        _plain(zeros_of_batch, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "new_zeros_of_size",
        "`x.new_zeros(x.size())`",
        _plain(new_zeros_of_size, (_seeded(2, 3),), (_seeded(4, 5),)),
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "tolist_to_tensor",
        "`torch.tensor(x.tolist())`",
        _plain(tolist_to_tensor, (_seeded(3),), (_seeded(3, shift=5.0),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "tensor_of_item",
        "`torch.tensor([x.sum().item(), 1.0])`",
        _plain(tensor_of_item, (_seeded(4),), (_seeded(4, shift=5.0),)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "tensor_of_shape",
        "`torch.tensor(x.shape)`",
        _plain(tensor_of_shape, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "arange_mask",
        "mask from `torch.arange(x.size(1)) < 2`",
        _plain(arange_mask, (_seeded(3, 4),), (_seeded(3, 6),)),
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "through_numpy",
        "`torch.from_numpy(x.numpy() * 2)`",
        _plain(through_numpy, (_seeded(3),), (_seeded(3, shift=5.0),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "closure_inplace",
        "closure-captured tensor changed in place after tracing",
        _closure_inplace,
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "closure_rebound",
        "closure-captured tensor rebound after tracing",
        _closure_rebound,
        jit="wrong",
        tb=("wrong", "wrong"),
        core="core: a captured tensor is stored by reference at trace time; rebinding the "
        "closure variable later is invisible to the trace (warned at trace time only)",
    ),
    Case(
        "global_number",
        "global Python number read at trace time, changed later",
        _global_number,
        jit="wrong",
        tb=("wrong", "wrong"),
        core="core: a global Python number is baked into the graph with neither guard nor warning",
    ),
    Case(
        "shape_branch",
        "`if x.shape[0] > 2:`",
        _plain(shape_branch, (_seeded(3),), (_seeded(2),)),
        jit="wrong",
        tb=("right", "right"),  # the size where the comparison flips is traced too
    ),
    Case(
        "max_of_size",
        "`max(x.size(0), 3)`",
        _plain(max_of_size, (_seeded(2),), (_seeded(5),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "list_output",
        "list output `[x[i] for i in range(x.size(0))]` (`strict=False`)",
        _plain(list_output, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="wrong",
        tb=("guard", "guard"),
        kwargs={"strict": False},
    ),
    Case(
        "dict_output",
        "dict output with one key per row (`strict=False`)",
        _plain(dict_output, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="wrong",
        tb=("guard", "guard"),
        kwargs={"strict": False},
    ),
    Case(
        "fixed_dict_output",
        "dict output of fixed structure (`strict=False`)",
        _plain(fixed_dict_output, (_seeded(3, 2),), (_seeded(5, 2),)),
        jit="right",
        tb=("right", "right"),
        kwargs={"strict": False},
    ),
    Case(
        "inplace_input",
        "in-place mutation of an input (`x.add_(1)`)",
        _plain(inplace_input, (torch.zeros(3),), (_seeded(4),)),
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "dtype_branch",
        "`if x.dtype == torch.float16:`, called with float16",
        _plain(dtype_branch, (_seeded(3),), (_seeded(3, dtype=torch.float16),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "floating_point_branch",
        "`if x.is_floating_point():`, called with int64",
        _plain(floating_point_branch, (_seeded(3),), (torch.tensor([3, 5, 7]),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "size_in_set",
        "`if x.shape[0] in {1, 2}:`",
        _plain(size_in_set, (_seeded(4),), (_seeded(2),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "size_as_dict_key",
        "`SCALES.get(x.size(0), 0.1)`",
        _plain(size_as_dict_key, (_seeded(4),), (_seeded(2),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "round_of_size",
        "`x[:round(x.size(0) * 0.5)]`",
        _plain(round_of_size, (_seeded(4),), (_seeded(8),)),
        jit="refuse",
        tb=("right", "right"),
    ),
    Case(
        "shift_of_size",
        "`x.view(x.size(0) >> 1, -1)`",
        _plain(shift_of_size, (_seeded(4, 3),), (_seeded(8, 3),)),
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "divmod_of_size",
        "`divmod(x.size(0), 2)`",
        _plain(divmod_of_size, (_seeded(4),), (_seeded(8),)),
        jit="refuse",
        tb=("right", "right"),
    ),
    Case(
        "size_through_string",
        '`int(f"{x.size(0)}")`',
        _plain(size_through_string, (_seeded(4, 3),), (_seeded(8, 3),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "contiguity_branch",
        "`if x.is_contiguous():`, called with a transposed tensor",
        _plain(contiguity_branch, (_seeded(3, 3),), (NONCONTIGUOUS,)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "stride_arithmetic",
        "`x * x.stride(0)`",
        _plain(stride_arithmetic, (_seeded(3, 3),), (_seeded(3, 5),)),
        jit="wrong",
        tb=("right", "right"),
    ),
]
CASES += [
    Case(
        "module_attribute",
        "Python number attribute of a module (`self.temperature`), changed after tracing",
        _module_attribute,
        jit="wrong",
        tb=("wrong", "wrong"),
        core="core: a Python attribute of the module is baked into the graph with neither "
        "guard nor warning",
    ),
    Case(
        "lengths_by_repeat",
        "`torch.tensor([x.size(1)] * x.size(0))` (list repeat)",
        _plain(lengths_by_repeat, (_seeded(2, 3),), (_seeded(4, 3),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "requires_grad_branch",
        "`if x.requires_grad:`, called with a tensor that requires grad",
        _plain(requires_grad_branch, (_seeded(3),), (_seeded(3).requires_grad_(),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
]
CASES += [
    Case(
        "pad_to_power_of_two",
        "`1 << (n - 1).bit_length()` (pad the batch to a power of two)",
        _plain(pad_to_power_of_two, (_seeded(4, 2),), (_seeded(5, 2),)),
        jit="refuse",
        tb=("guard", "guard"),
    ),
    Case(
        "positions_from_numpy",
        "`torch.from_numpy(np.arange(x.size(0)))`",
        _plain(positions_from_numpy, (_seeded(4),), (_seeded(6),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
]
CASES += [
    Case(
        "float_over_size",
        "`x * (-math.log(10000.0) / x.size(1))` (a float on the left of a size)",
        _plain(float_over_size, (_seeded(2, 4),), (_seeded(2, 6),)),
        jit="right",
        # float's own C code computes it, reading the size unseen: guarded where the size
        # is made (trace/unseen_reads.py, session 17)
        tb=("guard", "guard"),
    ),
    Case(
        "float_left_comparison",
        "`if 3.5 < x.size(0):` (a float on the left of a comparison), traced at 5, called at 2",
        _plain(float_left_comparison, (_seeded(5),), (_seeded(2),)),
        jit="wrong",
        # the comparison float's C code makes is recorded as `size > 3.5` (session 17): the
        # call at 2 fails it and is served by the graph for size 1
        tb=("right", "right"),
    ),
    Case(
        "call_counter",
        "`self.calls += 1; return x * self.calls`, the model called once after tracing",
        _call_counter,
        jit="wrong",
        tb=("wrong", "check"),
        core="core: a Python attribute a call changes is read as a constant; the trace "
        "cannot repeat the change (the check calls the code and the trace twice)",
    ),
    Case(
        "levels_by_log2",
        "`int(math.log2(x.size(0)))`",
        _plain(levels_by_log2, (_seeded(4),), (_seeded(8),)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "grad_mode_branch",
        "`if torch.is_grad_enabled():`, called under `torch.no_grad()`",
        lambda: Setup(grad_mode_branch, (_seeded(3),), (_seeded(3),), context=torch.no_grad),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "size_one_branch",
        "`if x.shape[0] > 1:` traced at batch 2, called at batch 1",
        _plain(size_one_branch, (_seeded(2, 3),), (_seeded(1, 3),)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "padding_shortcut",
        "`if not torch.jit.is_tracing() and bool(mask.all()):`, called with padding",
        _plain(
            padding_shortcut,
            (_seeded(2, 4), torch.ones(2, 4)),
            (_seeded(3, 4), torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])),
        ),
        jit="right",
        tb=("right", "right"),
    ),
    Case(
        "floating_point_function",
        "`torch.is_floating_point(x)` (the function form), called with int64",
        _plain(floating_point_function, (_seeded(3),), (torch.tensor([3, 5, 7]),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
]
CASES += [  # op-set 8: a tensor's flags and storage offset, the caller's inference mode
    Case(
        "inference_tensor_branch",
        "`if x.is_inference():`, called with an inference tensor",
        _plain(inference_tensor_branch, (_seeded(3),), (_inference_copy(_seeded(3)),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "storage_offset_arithmetic",
        "`x * x.storage_offset()`, called with a view that starts later in its storage",
        _plain(storage_offset_arithmetic, (_seeded(3),), (_seeded(5)[2:],)),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "result_requires_grad_branch",
        "`if (x * 2).requires_grad:`, called with a tensor that requires grad",
        _plain(result_requires_grad_branch, (_seeded(3),), (_seeded(3).requires_grad_(),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "inference_mode_branch",
        "`if torch.is_inference_mode_enabled():`, called under `torch.inference_mode()`",
        lambda: Setup(
            inference_mode_branch, (_seeded(3),), (_seeded(3),), context=torch.inference_mode
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "autocast_branch",
        '`if torch.is_autocast_enabled("cpu"):`, called under `torch.autocast("cpu")`',
        lambda: Setup(
            autocast_branch,
            (_seeded(3),),
            (_seeded(3),),
            context=lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "matmul_precision_branch",
        '`if torch.get_float32_matmul_precision() == "highest":`, called with "high"',
        lambda: Setup(
            matmul_precision_branch,
            (_seeded(3),),
            (_seeded(3),),
            context=lambda: _matmul_precision("high"),
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "same_size_branch",
        "`if x.is_same_size(y):`, called with tensors of other sizes",
        _plain(same_size_branch, (_seeded(3), _seeded(3)), (_seeded(3), _seeded(4))),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "channels_last_branch",
        "`if x.is_contiguous(memory_format=torch.channels_last):`, called channels-last",
        _plain(
            channels_last_branch,
            (_seeded(1, 2, 3, 3),),
            (_seeded(1, 2, 3, 3).to(memory_format=torch.channels_last),),
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
]
CASES += [  # the module tree changed after tracing (runtime/module_tree.py)
    Case(
        "submodule_mode_changed",
        "one sub-module's training flag switched after tracing (`model[1].train()`)",
        _submodule_mode_changed,
        jit="wrong",
        tb=("refused", "refused"),
    ),
    Case(
        "submodule_replaced",
        "a sub-module replaced after tracing (`model[1] = nn.Tanh()`)",
        _submodule_replaced,
        jit="wrong",
        tb=("refused", "refused"),
    ),
]
CASES += [  # known: what a trace does not watch after it was made
    Case(
        "dict_input_order",
        "`torch.cat(list(d.values()))`, called with the dict's keys in another order",
        _plain(
            concatenated_values,
            ({"a": _seeded(2), "b": _seeded(3)},),
            ({"b": _seeded(3), "a": _seeded(2)},),
        ),
        jit="wrong",
        # A dict input's key order is part of what the code sees: another order is
        # refused at the call (runtime/method.py, _refuse_reordered_dict).
        tb=("guard", "guard"),
    ),
    Case(
        "var_keywords_order",
        "`torch.cat([x, *kw.values()])` of `f(x, **kw)`, called with the keywords in another order",
        _var_keywords_reordered,
        # torch.jit.trace passes example_kwarg_inputs alone (x is missing), and a graph
        # it traces from keywords only declares x alone: it cannot run this code.
        jit="refuse",
        # Keywords that land in **kw are iterated in the call's order: the graph records
        # their traced order (var_keywords), and another order is refused at the call
        # (runtime/method.py, _refuse_reordered_var_keywords).
        tb=("guard", "guard"),
    ),
]


# A conversion that gave back its input when traced (trace/returned_inputs.py), and state
# a batch norm writes without moving its version (runtime/caller_memory.py), session 15.
def contiguous_alias_write(x):
    shortcut = x
    h = x.contiguous()
    h.mul_(0.5)
    return h + shortcut


def to_other_alias_write(x, y):
    z = x.to(y)
    z.mul_(2)
    return x * 1


def to_other_then_read(a, b):
    c = a.to(b)
    return a * 1, c


def contiguous_then_stride(a):
    c = a.contiguous()
    return torch.tensor(a.stride()), c


class _RenormBN(nn.Module):
    """Running statistics of its own, read before the batch norm that updates them."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("rmean", torch.zeros(n))
        self.register_buffer("rvar", torch.ones(n))

    def forward(self, x):
        r = (x.var(0, unbiased=False) / self.rvar).clamp(1 / 3, 3).sqrt()
        d = (x.mean(0) - self.rmean) / self.rvar.sqrt()
        y = F.batch_norm(x, self.rmean, self.rvar, training=True, momentum=0.1)
        return y * r + d


def _kernel_written_buffer() -> Setup:
    """A first call under no_grad, then the second call from the same state for eager and
    the trace (the state put back through ``.data``, as the kernel writes it: no version
    moves)."""
    module = _RenormBN(3).train()
    example, other = _seeded(8, 3), _seeded(9, 3, scale=2.0, shift=1.0)

    def change(traced: list) -> None:
        with torch.no_grad():
            traced[0](_clone(example))

    @contextlib.contextmanager
    def same_state():
        saved = [b.clone() for b in module.buffers()]
        with torch.no_grad():
            yield
        for buffer, value in zip(module.buffers(), saved):
            buffer.data.copy_(value)

    return Setup(module, (example,), (other,), change, same_state)


CASES += [
    Case(
        "contiguous_alias_write",
        "`h = x.contiguous(); h.mul_(0.5); return h + x`, called with a transposed `x`",
        _plain(contiguous_alias_write, (_seeded(3, 4),), (_seeded(4, 3).t(),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "to_other_alias_write",
        "`z = x.to(y); z.mul_(2); return x * 1`, called with `y` of another dtype",
        _plain(
            to_other_alias_write,
            (_seeded(3), _seeded(3)),
            (_seeded(3), _seeded(3, dtype=torch.float64)),
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "to_other_then_read",
        "`c = a.to(b); return a * 1, c`, called with `b` of another dtype",
        _plain(
            to_other_then_read,
            (_seeded(3), _seeded(3)),
            (_seeded(3), _seeded(3, dtype=torch.float64)),
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "contiguous_then_stride",
        "`c = a.contiguous(); return torch.tensor(a.stride()), c`, called transposed",
        _plain(contiguous_then_stride, (_seeded(2, 3),), (_seeded(3, 2).t(),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "kernel_written_buffer",
        "`(x.mean(0) - self.rmean) / self.rvar.sqrt()` before "
        "`F.batch_norm(x, self.rmean, self.rvar, training=True)`, a second call under `no_grad`",
        _kernel_written_buffer,
        jit="right",
        tb=("right", "right"),
    ),
]


def device_type_branch(x):
    if x.device.type == "cpu":  # "half is slow on the CPU": keep float32 there
        return x * 2
    return (x * 2).half()


def device_flag_branch(x):
    return x.half() if x.is_cuda or x.is_meta else x


def cosine_of_item(x, t):
    # a cosine noise schedule on a 0-dim timestep (Nichol & Dhariwal)
    alpha = math.cos((t.item() / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2
    return x * math.sqrt(alpha)


def isclose_of_item(x, t):
    return x if math.isclose(t.item(), 0.0, abs_tol=1e-6) else x * t.item()


CASES += [  # a tensor's device and math of traced numbers (session 15)
    Case(
        "device_type_branch",
        '`if x.device.type == "cpu":`, traced on the CPU, called on another device (meta)',
        _plain(device_type_branch, (_seeded(3),), (META,)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "device_flag_branch",
        "`x.half() if x.is_cuda or x.is_meta else x`, called on another device (meta)",
        _plain(device_flag_branch, (_seeded(3),), (META,)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "math_cos_of_item",
        "`math.cos(t.item() ...)` (a noise schedule), called with another timestep",
        _plain(cosine_of_item, (_seeded(3), torch.tensor(10.0)), (_seeded(3), torch.tensor(900.0))),
        jit="wrong",
        tb=("right", "right"),
    ),
    Case(
        "math_isclose_of_item",
        "`x if math.isclose(t.item(), 0.0) else x * t.item()`, called with t = 0",
        _plain(isclose_of_item, (_seeded(3), torch.tensor(2.0)), (_seeded(3), torch.tensor(0.0))),
        jit="wrong",
        tb=("guard", "guard"),
    ),
]


# A size or an .item() read by CPython's C code (trace/unseen_reads.py; session 16).
SCALES = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]


def list_indexed_by_size(x):
    return x * SCALES[x.size(0) - 1]


def list_pop_of_size(x):
    scales = list(SCALES)
    return x * scales.pop(x.size(0))


def list_slice_of_item(x, t):
    return x * sum(SCALES[: int(t.item())])


class Batch:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def user_len_of_size(x):
    return torch.zeros(len(Batch(x.size(0)))) + x


def percent_float_of_item(x):
    return x * 2 if "%.1f" % x.sum().item() == "3.0" else x  # noqa: UP031 - the pattern


CASES += [
    Case(
        "list_indexed_by_size",
        "`SCALES[x.size(0) - 1]` (a Python list indexed by a size)",
        _plain(list_indexed_by_size, (_seeded(3),), (_seeded(5),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "list_pop_of_size",
        "`scales.pop(x.size(0))` (a list method given a size)",
        _plain(list_pop_of_size, (_seeded(3),), (_seeded(5),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "list_slice_of_item",
        "`sum(SCALES[: int(t.item())])` (a list sliced by an `.item()`)",
        _plain(
            list_slice_of_item, (_seeded(3), torch.tensor(2.0)), (_seeded(3), torch.tensor(4.0))
        ),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "user_len_of_size",
        "`torch.zeros(len(batch)) + x`, `batch.__len__` answering `x.size(0)`",
        _plain(user_len_of_size, (_seeded(3),), (_seeded(5),)),
        jit="error",
        tb=("right", "right"),
    ),
    Case(
        "percent_float_of_item",
        '`if "%.1f" % x.sum().item() == "3.0":` (text made in C from an `.item()`)',
        _plain(percent_float_of_item, (torch.ones(3),), (torch.ones(4),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
]


# A size carried to C code by an attribute, a container, **kwargs, a user __len__
# (trace/carried_reads.py; session 17).
class KeepsTheBatch(nn.Module):
    def measure(self, x):
        self.n = x.size(0)

    def forward(self, x):
        self.measure(x)
        return self.scaled(x)

    def scaled(self, x):
        return x * SCALES[self.n]


def _scale_by_keyword(x, **options):
    return x * SCALES[options["n"]]


def size_through_kwargs(x):
    return _scale_by_keyword(x, n=x.size(0))


def _summed_scales(x, sizes):
    return x * sum(SCALES[: sizes["n"]])


def size_in_a_dict(x):
    return _summed_scales(x, {"n": x.size(0)})


def if_user_len_of_size(x):
    return x * 2 if Batch(x.size(0) - 3) else x


class HalvesTheLength(nn.Module):
    def forward(self, x):
        self.n = x.size(0)
        return self.halved(x)

    def halved(self, x):
        return x * (0.5 * self.n)


CASES += [
    Case(
        "size_in_an_attribute",
        "`self.n = x.size(0)` in one method, `SCALES[self.n]` in another",
        _plain(KeepsTheBatch(), (_seeded(3),), (_seeded(5),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "size_through_kwargs",
        '`helper(x, n=x.size(0))` indexing `SCALES[options["n"]]` from `**options`',
        _plain(size_through_kwargs, (_seeded(3),), (_seeded(5),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "size_in_a_dict",
        '`{"n": x.size(0)}` passed on, `sum(SCALES[: sizes["n"]])` in the helper',
        _plain(size_in_a_dict, (_seeded(3),), (_seeded(5),)),
        jit="wrong",
        tb=("guard", "guard"),
    ),
    Case(
        "if_user_len_of_size",
        "`if Batch(x.size(0) - 3):` (a user `__len__` answering a size), traced at 5, called at 3",
        _plain(if_user_len_of_size, (_seeded(5),), (_seeded(3),)),
        jit="wrong",
        # guarded as `x.size(0) - 3 > 0`: another of the trace's graphs serves the call at 3
        tb=("right", "right"),
    ),
    Case(
        "float_times_attribute",
        "`self.n = x.size(0)`, then `x * (0.5 * self.n)` in another method",
        _plain(HalvesTheLength(), (_seeded(3),), (_seeded(5),)),
        jit="right",
        tb=("guard", "guard"),
    ),
]
BY_NAME = {case.name: case for case in CASES}


# --------------------------------------------------------------------------- running a case


def _clone(obj):
    if isinstance(obj, torch.Tensor) and obj.layout is torch.strided:
        # The same storage layout (a view's offset, channels-last strides) and an inference
        # tensor's flag: the cases read them.
        inference = torch.inference_mode() if obj.is_inference() else contextlib.nullcontext()
        with inference:
            storage = obj.untyped_storage().clone()
            copy = torch.empty((0,), dtype=obj.dtype, device=obj.device)
            copy.set_(storage, obj.storage_offset(), obj.size(), obj.stride())
        return copy.requires_grad_(obj.requires_grad)
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_clone(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def same(expected, got) -> bool:
    """Same structure, and per tensor the same shape, dtype, device and values."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return False
        if (expected.shape, expected.dtype, expected.device) != (got.shape, got.dtype, got.device):
            return False
        if expected.device.type == "meta":
            return True
        return torch.allclose(expected.double(), got.double(), atol=1e-6, equal_nan=True)
    if isinstance(expected, (tuple, list)):
        return (
            type(got) is type(expected)
            and len(got) == len(expected)
            and all(same(a, b) for a, b in zip(expected, got))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and list(got) == list(expected)
            and all(same(expected[k], got[k]) for k in expected)
        )
    return expected == got


def _second_call(setup: Setup, traced) -> str:
    if setup.change is not None:
        setup.change([traced])
    with setup.context():
        expected = setup.fn(*_clone(setup.other), **_clone(setup.other_kwargs))
    try:
        with setup.context():
            got = traced(*_clone(setup.other), **_clone(setup.other_kwargs))
    except tracebridge.GuardError:
        return "guard"
    except tracebridge.TraceError:
        return "refused"  # a refusal that says what and what to do, not a guard's
    except Exception:
        return "error"
    return "right" if same(expected, got) else "wrong"


def jit_outcome(case: Case) -> str:
    """What ``torch.jit.trace`` returns on the case's second input."""
    setup = case.build()
    strict = case.kwargs.get("strict", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated and warns a lot
        try:
            traced = torch.jit.trace(
                setup.fn,
                _clone(setup.example),
                check_trace=False,
                strict=strict,
                example_kwarg_inputs=_clone(setup.example_kwargs) or None,
            )
        except Exception:
            return "refuse"
    return _second_call(setup, traced)


def tracebridge_outcome(case: Case, check_trace: bool) -> str:
    """What tracebridge does: refuse at trace time, refuse at call time, or answer."""
    setup = case.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        try:
            traced = tracebridge.trace(
                setup.fn,
                _clone(setup.example),
                check_trace=check_trace,
                example_kwarg_inputs=_clone(setup.example_kwargs) or None,
                **case.kwargs,
            )
        except tracebridge.TracingCheckError:
            return "check"
        except tracebridge.TraceError:
            return "unsupported"
    return _second_call(setup, traced)


def _tb_params():
    params = []
    for case in CASES:
        for index, check_trace in enumerate((False, True)):
            marks = []
            if case.tb[index] == "wrong":
                marks = [pytest.mark.xfail(strict=True, reason=case.core)]
            params.append(
                pytest.param(
                    case.name, check_trace, marks=marks, id=f"{case.name}-check_trace={check_trace}"
                )
            )
    return params


# --------------------------------------------------------------------------- the tests


def test_suite_is_large_and_jit_is_often_wrong():
    assert len(CASES) >= 14
    assert sum(case.jit == "wrong" for case in CASES) >= 14
    assert all(case.core for case in CASES if "wrong" in case.tb)


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_torch_jit_trace(name):
    """Record what torch.jit.trace does (mostly: a silently wrong result)."""
    case = BY_NAME[name]
    assert jit_outcome(case) == case.jit


@pytest.mark.parametrize(("name", "check_trace"), _tb_params())
def test_tracebridge(name, check_trace):
    """tracebridge answers right or refuses clearly; never a wrong result."""
    case = BY_NAME[name]
    outcome = tracebridge_outcome(case, check_trace)
    assert outcome in SAFE, f"tracebridge returned a wrong result for {case.what}"
    if case.tb[check_trace] != "wrong":  # an xfail case that is now safe must XPASS
        assert outcome == case.tb[check_trace]


def test_guard_errors_name_the_line():
    """Where tracebridge refuses at call time, the error names the user's source line."""
    for case in CASES:
        if case.tb[0] != "guard":
            continue
        setup = case.build()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tracebridge.TracerWarning)
            traced = tracebridge.trace(
                setup.fn,
                _clone(setup.example),
                check_trace=False,
                example_kwarg_inputs=_clone(setup.example_kwargs) or None,
                **case.kwargs,
            )
        if setup.change is not None:
            setup.change([traced])
        with pytest.raises(tracebridge.GuardError) as info, setup.context():
            traced(*_clone(setup.other), **_clone(setup.other_kwargs))
        if str(info.value).startswith("input x has dtype"):
            # The input check on the dtype's kind names the input, not a line.
            assert info.value.guard == "x is floating-point", case.name
            continue
        if info.value.guard.startswith("the order of the keys of"):
            # A dict input's key order is checked where the call's arguments are matched
            # to the traced ones: the error names the input, not a line.
            assert info.value.guard == "the order of the keys of argument 1", case.name
            assert "where the trace was made with ['a', 'b']" in str(info.value), case.name
            continue
        if info.value.guard == "the order of the keyword arguments in **kwargs":
            # Likewise for the keywords of **kwargs: the error names them and both orders.
            assert info.value.seen == ["b", "a"], case.name
            assert "in another order than the trace was made with ['a', 'b']" in str(info.value), (
                case.name
            )
            continue
        assert info.value.location.startswith(__file__ + ":"), case.name
        assert __file__ + ":" in str(info.value), case.name


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_outcomes_survive_save_and_load(tmp_path, runtime):
    """A loaded artifact keeps its guards and its general sizes: same outcome as in memory."""
    checked = 0
    for case in CASES:
        setup = case.build()
        if setup.change is not None or case.tb[0] not in ("right", "guard"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tracebridge.TracerWarning)
            traced = tracebridge.trace(
                setup.fn,
                _clone(setup.example),
                check_trace=False,
                example_kwarg_inputs=_clone(setup.example_kwargs) or None,
                **case.kwargs,
            )
        path = tmp_path / f"{case.name}.tb"
        traced.save(path)
        loaded = tracebridge.load(path, runtime=runtime)
        assert _second_call(setup, loaded) == case.tb[0], case.name
        checked += 1
    assert checked >= 15


def test_inplace_input_is_mutated_once_like_eager():
    """Tracing without the check runs the code once, so an input mutated in place is
    mutated once, as one eager call would; the traced call mutates its input too."""
    x = torch.zeros(3)
    traced = tracebridge.trace(inplace_input, x, check_trace=False)
    assert torch.equal(x, torch.ones(3))
    y = torch.zeros(3)
    assert torch.equal(traced(y), torch.full((3,), 2.0))
    assert torch.equal(y, torch.ones(3))


def test_check_trace_accepts_inplace_input_and_leaves_it_as_one_call_would():
    """check_trace runs the code and the trace on copies of the example inputs (fixed in
    8a828cf; before, the check refused this correct trace and mutated x four times)."""
    x = torch.zeros(3)
    tracebridge.trace(inplace_input, x, check_trace=True)
    assert torch.equal(x, torch.ones(3))


def test_default_mode_refuses_the_other_mode():
    """Without respect_mode, the traced module holds one mode's graph, and refuses to run it
    in the other mode instead of silently dropping out (or not) as torch.jit does."""
    module = _dropout().eval()
    traced = tracebridge.trace(module, X34)
    assert traced.methods == ["forward"]
    traced.train()
    with pytest.raises(tracebridge.GuardError) as info:
        traced(X34)
    assert re.fullmatch(
        r"forward was traced in eval mode, and this module records another graph in training "
        rf"mode \(first at dropout, {re.escape(__file__)}:\d+\); call \.eval\(\) first, or "
        r"trace with respect_mode=True to keep both graphs",
        str(info.value),
    )
    assert info.value.seen is True
    with tracebridge.guards_disabled():
        assert torch.equal(traced(X34), module.eval()(X34))  # the evaluation graph
    traced.eval()
    assert torch.equal(traced(X34), module(X34))


# --------------------------------------------------------------------------- the table


def divergence_table() -> str:
    """The markdown table of docs/divergence.md, from the outcomes observed now."""
    words = {
        "right": "right result",
        "wrong": "**silently wrong**",
        "error": "error at call",
        "refuse": "error at trace",
        "guard": "`GuardError` at call",
        "refused": "`TraceError` at call",
        "check": "`TracingCheckError` at trace",
        "unsupported": "`UnsupportedOpError` at trace",
    }
    rows = [
        "| case | pattern | `torch.jit.trace` | tracebridge, `check_trace=False` "
        "| tracebridge, `check_trace=True` |",
        "|---|---|---|---|---|",
    ]
    counts = {"jit": 0, "tb": 0}
    for case in CASES:
        torch.manual_seed(0)
        jit = jit_outcome(case)
        tb = [tracebridge_outcome(case, check) for check in (False, True)]
        counts["jit"] += jit == "wrong"
        counts["tb"] += "wrong" in tb
        cells = [words[jit]] + [words[o] + (" (core bug)" if o == "wrong" else "") for o in tb]
        rows.append(f"| `{case.name}` | {case.what} | " + " | ".join(cells) + " |")
    rows.append("")
    rows.append(
        f"{len(CASES)} cases: `torch.jit.trace` is silently wrong in {counts['jit']}, "
        f"tracebridge in {counts['tb']} (each a core bug, xfail in the suite)."
    )
    return "\n".join(rows)


if __name__ == "__main__":
    print(divergence_table())
