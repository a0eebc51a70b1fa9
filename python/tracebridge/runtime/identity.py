"""Conversions that give their input back: tested inline instead of called.

Note: ``x.to(dtype)`` is ``x`` itself when ``x`` already has that dtype.
  Hugging Face code converts to the dtype a tensor already has on every call: Llama's
  RMSNorm runs ``hidden_states.to(torch.float32)`` and ``.to(input_dtype)`` in every
  layer, attention masks ``.to(mask.dtype)``. PyTorch returns the tensor itself then,
  but the call still costs its argument parsing (about a microsecond, more than a
  ``view``). The generated code writes such a node as
  ``x if _type(x) is _Tensor and x.dtype is dtype else op_Tensor_to(x, dtype)``: the
  same object in the same case, the call otherwise. The test holds only for a plain
  tensor (a subclass's ``__torch_function__`` sees the call, as before) and for a call
  with a dtype alone (no device, ``copy``, ``non_blocking`` or memory format).
  The same holds for ``x.float()``, ``x.double()``, ``x.half()``, ``x.bfloat16()``
  without arguments (Gemma's RMSNorm runs ``x.float()`` on a float32 tensor twice per
  layer; 0.23 us a call, 0.10 tested). ``x.type_as(y)`` stays a call: its own fast
  return costs 0.31 us, about what testing both dtypes and devices costs.

  ``x.to(device)`` and ``x.to(device=d, dtype=t)`` (CLIP and masking code move tensors
  to the device they are on) are ``x`` itself when ``x.device == d`` (and ``x.dtype is
  t``): the device a value of the graph holds is tested to be a ``torch.device`` first.
"""

from __future__ import annotations

import torch

from ..ir import Node, Ref

# Methods that convert to one dtype, with no arguments.
_TO_DTYPE = {
    "Tensor.float": torch.float32,
    "Tensor.double": torch.float64,
    "Tensor.half": torch.float16,
    "Tensor.bfloat16": torch.bfloat16,
}
# Ops whose result is their input when nothing changes.
CONVERSIONS = frozenset({"Tensor.to", *_TO_DTYPE})


def dtype_conversion(node: Node, kinds: dict[int, str]) -> tuple[Ref, object] | None:
    """``(tensor, dtype)`` of a node that only converts a tensor to a dtype (a literal
    dtype or a value of kind ``dtype``), or None."""
    if node.op not in CONVERSIONS or len(node.outputs) != 1:
        return None
    if node.op in _TO_DTYPE:
        if len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], Ref):
            return None
        tensor = node.args[0]
        return (tensor, _TO_DTYPE[node.op]) if kinds.get(tensor.id) == "Tensor" else None
    if len(node.args) == 2 and not node.kwargs:
        tensor, dtype = node.args
    elif len(node.args) == 1 and set(node.kwargs) == {"dtype"}:
        tensor, dtype = node.args[0], node.kwargs["dtype"]
    else:
        return None
    if not isinstance(tensor, Ref) or kinds.get(tensor.id) != "Tensor":
        return None
    if isinstance(dtype, torch.dtype) or (
        isinstance(dtype, Ref) and kinds.get(dtype.id) == "dtype"
    ):
        return tensor, dtype
    return None


def device_conversion(node: Node, kinds: dict[int, str]) -> tuple[Ref, object, object] | None:
    """``(tensor, device, dtype or None)`` of a ``Tensor.to`` that only moves a tensor to
    a device (a literal device or a value of kind ``device``), and maybe to a dtype (a
    literal or a value of kind ``dtype``), by keyword; or None."""
    if node.op != "Tensor.to" or len(node.outputs) != 1:
        return None
    if len(node.args) == 2 and not node.kwargs:
        tensor, device, dtype = node.args[0], node.args[1], None
    elif len(node.args) == 1 and set(node.kwargs) in ({"device"}, {"device", "dtype"}):
        tensor, device, dtype = node.args[0], node.kwargs["device"], node.kwargs.get("dtype")
    else:
        return None
    if not isinstance(tensor, Ref) or kinds.get(tensor.id) != "Tensor":
        return None
    is_device = isinstance(device, torch.device) or (
        isinstance(device, Ref) and kinds.get(device.id) == "device"
    )
    is_dtype = (
        dtype is None
        or isinstance(dtype, torch.dtype)
        or (isinstance(dtype, Ref) and kinds.get(dtype.id) == "dtype")
    )
    return (tensor, device, dtype) if is_device and is_dtype else None
