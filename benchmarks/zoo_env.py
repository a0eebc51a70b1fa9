"""Make the zoo's optional packages importable on the CPU-only torch wheel.

torchvision 0.28.0 is published only as a CUDA build. Its Python code works on the CPU
torch wheel, but at import it registers fake (meta) kernels for two C++ operators
(``torchvision::nms``, ``torchvision::qnms``) that the CUDA build's shared library would
have defined; without that library the import fails with "operator torchvision::nms does
not exist". Declaring the two schemas first, with a plain-PyTorch CPU kernel for ``nms``,
lets ``import torchvision`` succeed and detection models run (slowly, which is fine for
tiny inputs). Import this module before torchvision.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_declared = False


def _nms_cpu(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: the reference semantics of torchvision.ops.nms."""
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    order = scores.argsort(descending=True, stable=True)
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(dets.shape[0], dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.long)


def declare_torchvision_ops() -> None:
    """Declare ``torchvision::nms`` (with a CPU kernel) and ``torchvision::qnms``."""
    global _declared
    if _declared:
        return
    try:
        torch.ops.torchvision.nms  # noqa: B018 - a real torchvision build defines it
        _declared = True
        return
    except (AttributeError, RuntimeError):
        pass
    if _load_torchvision_library():
        _declared = True
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.impl("nms", _nms_cpu, "CPU")
    # The library object must outlive this call, or the definitions go away.
    globals()["_lib"] = lib
    _declared = True


def _load_torchvision_library() -> bool:
    """Load torchvision's own C++ library where it loads (a build for this torch, as on a
    GPU machine): it defines the operators itself, and declaring them here first would make
    that library abort the process when torchvision is imported."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    for library in Path(next(iter(spec.submodule_search_locations))).glob("_C*.so"):
        try:
            torch.ops.load_library(str(library))
        except OSError:  # the CUDA build on the CPU wheel: libraries it links are missing
            return False
        return True
    return False


def allow_python_ops() -> None:
    """torchvision.ops.nms asks whether its C++ extension loaded; ours is declared above."""
    import torchvision.extension

    torchvision.extension._has_ops = _has_ops


def _has_ops() -> bool:
    return True


declare_torchvision_ops()
