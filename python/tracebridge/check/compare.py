"""Shared helpers of the trace checks (verify.py, dims.py, repeated.py): fresh copies of
inputs, inputs with moved values, and the comparison of the code's and the trace's outputs.

Kept apart from verify.py so that the checks import these one way, with no cycle.
"""

from __future__ import annotations

import torch

from ..errors import TracingCheckError
from ..ir import pytree
from ..ir.pytree import is_tensor

# What a value difference may mean where the check knows no more specific cause.
NON_DETERMINISM = (
    ". If the difference is expected (non-determinism), raise check_tolerance or pass "
    "check_trace=False"
)


def compare_outputs(
    expected, got, tolerance: float, label: str, advice: str = NON_DETERMINISM
) -> None:
    """Raise :class:`TracingCheckError` unless ``got`` (the trace's outputs) has the
    structure, shapes and dtypes of ``expected`` (the code's) and values within
    ``tolerance`` (integers and booleans exactly); ``label`` says which check ran.
    ``advice`` ends the message of a value difference: the caller's own, where it knows
    the cause (a kept constant, a baked size), so that the message never suggests turning
    the check off for a trace that is wrong."""
    exp_leaves, exp_spec = pytree.flatten(expected, is_tensor)
    got_leaves, got_spec = pytree.flatten(got, is_tensor)
    if exp_spec != got_spec:
        raise TracingCheckError(
            f"{label}: the trace returns a different structure than the "
            f"code: expected {exp_spec}, got {got_spec}"
        )
    for index, (a, b) in enumerate(zip(exp_leaves, got_leaves)):
        where = pytree.describe_path(exp_spec, index)
        if a.shape != b.shape:
            raise TracingCheckError(
                f"{label}: output {where} has shape {list(b.shape)} in the "
                f"trace but {list(a.shape)} in the code"
            )
        if a.dtype != b.dtype:
            raise TracingCheckError(
                f"{label}: output {where} has dtype {b.dtype} in the "
                f"trace but {a.dtype} in the code"
            )
        if a.numel() == 0 or a.is_meta or b.is_meta:
            continue  # no values to compare (meta tensors have sizes and dtypes only)
        a64, b64 = a.detach().double(), b.detach().double()
        if a.dtype == torch.bool or not a.is_floating_point():
            ok = torch.equal(a, b)
        else:
            ok = torch.allclose(a64, b64, rtol=tolerance, atol=tolerance, equal_nan=True)
        if not ok:
            abs_err = (a64 - b64).abs()
            rel_err = abs_err / a64.abs().clamp_min(1e-12)
            raise TracingCheckError(
                f"{label}: output {where} differs between the code and the trace: max "
                f"absolute error {abs_err.max().item():.3g}, max relative error "
                f"{rel_err.max().item():.3g}, tolerance {tolerance:g}{advice}"
            )


def on_meta(args: tuple, kwargs: dict, state=()) -> bool:
    """Whether the inputs or the ``state`` tensors (those the trace reads) hold a tensor on
    the meta device (a model traced without its weights): such a tensor has a shape and a
    dtype but no values. A meta buffer no graph reads (a cache the traced path never
    uses) takes no part in a call, so the values are compared all the same."""
    leaves, _ = pytree.flatten((args, kwargs), is_tensor)
    return any(t is not None and t.is_meta for t in (*leaves, *state))


def fresh(args: tuple, kwargs: dict):
    """Copies of the inputs: code that changes its inputs in place must not see the
    changes of an earlier run, and the caller's tensors stay as they are."""

    copies: dict[int, torch.Tensor] = {}  # one copy per tensor: an input given twice stays one

    def copy(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in copies:
            c = _same_flags_copy(t.detach())
            copies[id(t)] = c.requires_grad_() if t.requires_grad and c.is_floating_point() else c
        return copies[id(t)]

    leaves, spec = pytree.flatten((args, kwargs), is_tensor)
    return pytree.unflatten([copy(t) for t in leaves], spec)


def _same_flags_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with the flags a trace reads and guards (op-set 8): an inference
    tensor's copy is one too, and a lazy conjugate or negation stays lazy (``clone`` would
    resolve it), so that the check traces the code on what the example was."""
    if t.is_conj():
        return _same_flags_copy(t.conj()).conj()
    if t.is_neg():
        return torch._neg_view(_same_flags_copy(torch._neg_view(t)))
    if t.is_inference() and not torch.is_inference_mode_enabled():
        with torch.inference_mode():
            return t.clone()
    return t.clone()


def rolled(args: tuple, kwargs: dict):
    """The example inputs with each tensor's values moved one place along its elements:
    the same shapes, dtypes and set of values (indices stay in range, masks stay masks),
    at other positions. None when that changes no input, or when an input is on the meta
    device (it holds no values to move: the checks that need other values do not run)."""
    leaves, spec = pytree.flatten((args, kwargs), is_tensor)
    if any(t.is_meta for t in leaves):
        return None
    moved = [t.detach().flatten().roll(1).view_as(t) if t.numel() > 1 else t for t in leaves]
    if all(torch.equal(a, b) for a, b in zip(leaves, moved)):
        return None
    return pytree.unflatten(moved, spec)
