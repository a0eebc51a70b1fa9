"""torchvision's registered operators, run by torchvision's own kernels after our checks.

Note: torchvision's kernel or nothing. ``torchvision.nms`` (op-set 6) is the operator
``torchvision::nms`` that ``torchvision.ops.nms`` and ``batched_nms`` call. Its result is
the kernel's, and no pure-PyTorch function reproduces it everywhere: the boxes that survive
depend on the order of equal scores, which is the sort the kernel uses (torchvision's
kernels sorted unstably before 0.12 and stably since, pytorch/vision#4767), and on the last
bit of each overlap, which its CUDA kernel computes per pair (nvcc may fuse multiply-adds)
where its CPU kernel reads precomputed areas and compares in double. A stand-in would be
right on most inputs and silently wrong on ties, so there is none: a runtime binds
torchvision's kernel when it loads a graph that names the op (importing torchvision if
nothing has yet), and where that fails the load stops with an error that names the op,
the traced line and the remedy.

What the checks cover, before the kernel runs (a ``CheckFailed`` the runtime turns into an
``OpError`` naming the node): ``dets`` a floating tensor of shape ``[N, 4]``, ``scores`` a
tensor of shape ``[N]`` with the same dtype and on the same device, ``iou_threshold`` a
number (a NaN or a negative threshold is torchvision's to take, as eager does), and ``N``
within the limits of shared_ir/SPEC.md section 3: the ``N`` int64 indices it returns (and,
on CUDA, the kernel's ``N x ceil(N / 64)`` mask) within ``alloc_bytes``, and the ``N * N``
overlaps it may compare within ``work_macs``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..check.program import LIMITS
from ..errors import ArtifactError
from ..ir import Node
from ..ir.printable import printable
from .checked_ops import CheckFailed

ALLOC_BYTES = LIMITS["alloc_bytes"]
WORK = LIMITS["work_macs"]


def _need(ok: bool, message) -> None:
    if not ok:
        raise CheckFailed(message() if callable(message) else message)


def registered_kernel(namespace: str, name: str) -> Callable | None:
    """``torch.ops.NAMESPACE.NAME`` if some library registered it, else None."""
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


_FOUND: dict[str, Callable] = {}  # operators found once (a failure is retried: see below)


def torchvision_kernel(name: str) -> tuple[Callable | None, str]:
    """torchvision's operator ``name`` and ``""``, or None and why it is not there.

    Importing torchvision registers its operators; a program that was traced with it
    loads in a process that has not imported it yet (and a failure is not remembered: the
    user may install or import it and load again)."""
    kernel = _FOUND.get(name) or registered_kernel("torchvision", name)
    if kernel is not None:
        _FOUND[name] = kernel
        return kernel, ""
    try:
        import torchvision  # noqa: F401 - registers torch.ops.torchvision.*
    except Exception as exc:  # ImportError, or a build that does not match this torch
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return None, f"import torchvision failed: {type(exc).__name__}: {text}"
    kernel = registered_kernel("torchvision", name)
    if kernel is None:
        return None, f"torchvision imported, but it registers no operator torchvision::{name}"
    return kernel, ""


def nms(dets, scores, iou_threshold):
    """``torch.ops.torchvision.nms(dets, scores, iou_threshold)`` after checking every
    argument (the module Note): shapes, dtypes, device, and the bytes and work of ``N``."""
    _need(
        isinstance(dets, torch.Tensor) and dets.dim() == 2 and dets.shape[1] == 4,
        lambda: (
            "torchvision.nms: dets must be a tensor of shape [N, 4], not "
            + (
                f"shape {list(dets.shape)}"
                if isinstance(dets, torch.Tensor)
                else type(dets).__name__
            )
        ),
    )
    _need(
        dets.is_floating_point(),
        lambda: f"torchvision.nms: dets must be floating point, not {dets.dtype}",
    )
    count = dets.shape[0]
    _need(
        isinstance(scores, torch.Tensor) and scores.dim() == 1 and scores.shape[0] == count,
        lambda: (
            f"torchvision.nms: scores must be a tensor of shape [{count}] (one per box), "
            + (
                f"not shape {list(scores.shape)}"
                if isinstance(scores, torch.Tensor)
                else f"not {type(scores).__name__}"
            )
        ),
    )
    _need(
        scores.dtype == dets.dtype and scores.device == dets.device,
        lambda: (
            f"torchvision.nms: scores ({scores.dtype}, {scores.device}) must have the "
            f"dtype and device of dets ({dets.dtype}, {dets.device})"
        ),
    )
    _need(
        type(iou_threshold) in (int, float),
        lambda: (
            f"torchvision.nms: iou_threshold must be a number, not {type(iou_threshold).__name__}"
        ),
    )
    size = count * 8
    if dets.device.type == "cuda":  # the kernel's mask: one bit per pair, in int64 words
        size += count * -(-count // 64) * 8
    _need(
        size <= ALLOC_BYTES,
        lambda: (
            f"torchvision.nms of {count} boxes would allocate {size} bytes, more than the "
            f"limit of {ALLOC_BYTES} (shared_ir/SPEC.md, section Limits)"
        ),
    )
    _need(
        count * count <= WORK,
        lambda: (
            f"torchvision.nms of {count} boxes may compare {count * count} pairs, more than "
            f"the limit of {WORK} (shared_ir/SPEC.md, section Limits)"
        ),
    )
    kernel, why = torchvision_kernel("nms")
    if kernel is None:
        raise CheckFailed(f"torchvision.nms: {why}")
    return kernel(dets, scores, float(iou_threshold))


# Op name -> its checked implementation, and the torchvision operator it runs.
CHECKED: dict[str, Callable] = {"torchvision.nms": nms}
_KERNELS = {"torchvision.nms": "nms"}


def require(node: Node) -> None:
    """Raise :class:`ArtifactError` unless torchvision's kernel for ``node`` can be bound:
    at load, so that a program that cannot run here says so before its first call."""
    name = _KERNELS.get(node.op)
    if name is None:
        return
    kernel, why = torchvision_kernel(name)
    if kernel is not None:
        return
    where = f" (traced at {printable(node.loc)})" if node.loc else ""
    raise ArtifactError(
        f"the program calls {node.op}{where}, torchvision's non-maximum suppression, and "
        f"this process cannot run it: {why}. Its result is torchvision's kernel's (equal "
        "scores are ordered by the kernel's own sort), so tracebridge does not stand in for "
        "it: install the torchvision that matches torch "
        f"{torch.__version__.split('+')[0]} (pip install torchvision), or load the program "
        "where it was traced"
    )


def require_program(methods) -> None:
    """:func:`require` for every node of ``methods`` (a program's graphs by name), so that
    ``tracebridge.load`` refuses a program that cannot run here before it returns."""
    for graph in methods.values():
        for node in graph.nodes:
            if node.op in _KERNELS:
                require(node)
