"""Where state tensors live: the device recorded on save, restored (or remapped) on load.

Note: the rule is ``torch.load``'s and ``torch.jit.load``'s. A state entry of
``program.json`` MAY name the device its tensor was saved from (``"device": "cuda:0"``;
writers leave it out for the CPU and the meta device, so CPU files are unchanged). Loading
puts each tensor back on that device when the machine has it; ``map_location`` overrides:
a device (string or ``torch.device``) for every tensor, or a dict from saved device to
target (``{"cuda:1": "cuda:0"}``, ``{"cuda:0": "cpu"}``; unnamed devices keep theirs, and
CPU tensors are keyed ``"cpu"``). A saved device the machine lacks is an error that says
what to pass, never a silent move to the CPU.
"""

from __future__ import annotations

import torch

from ..errors import ArtifactError

MapLocation = str | torch.device | dict | None

# Devices a tensor is never "restored" to: the CPU is where the file's bytes are mapped,
# and meta tensors have no bytes (the weights are bound from elsewhere).
_IMPLICIT = ("cpu", "meta")


def saved_device(tensor: torch.Tensor) -> str | None:
    """The device string a writer records for ``tensor`` (``None``: the CPU or meta)."""
    return None if tensor.device.type in _IMPLICIT else str(tensor.device)


def available(device: torch.device) -> bool:
    """Whether this process can place tensors on ``device``."""
    if device.type in _IMPLICIT:
        return True
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False
        return device.index is None or device.index < torch.cuda.device_count()
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError, ValueError):
        return False
    return True


def _as_device(value, what: str) -> torch.device:
    try:
        return torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ArtifactError(
            f"{what} is {value!r}, which is not a device; use a device such as 'cpu' or 'cuda:0'"
        ) from None


def target(saved: str, map_location: MapLocation, name: str) -> torch.device:
    """The device a tensor saved on ``saved`` is loaded to, given ``map_location``."""
    if map_location is None:
        where = saved
    elif isinstance(map_location, (str, torch.device)):
        where = map_location
    elif isinstance(map_location, dict):
        where = map_location.get(saved, saved)
    else:
        raise ArtifactError(
            f"map_location takes a device (a string or torch.device) or a dict from saved "
            f"device to device, not {type(map_location).__name__}"
        )
    device = _as_device(where, "map_location" if where is not saved else f"{name}: a device")
    if not available(device):
        if where is saved:
            raise ArtifactError(
                f"{name}: its state was saved from device {saved!r}, which this machine does "
                f"not have ({_why(device)}); load it with map_location='cpu' (or another "
                f"device, or a dict such as {{{saved!r}: 'cpu'}})"
            )
        raise ArtifactError(
            f"map_location asks for device {str(device)!r}, which this machine does not have "
            f"({_why(device)}); pass map_location='cpu' or a device it has"
        )
    return device


def _why(device: torch.device) -> str:
    if device.type == "cuda" and torch.cuda.is_available():
        return f"it has {torch.cuda.device_count()} CUDA device(s)"
    if device.type == "cuda":
        return "CUDA is not available"
    return f"no {device.type} device is available"


def place(state: dict, saved: dict[str, str | None], map_location: MapLocation, name: str) -> None:
    """Move each entry of ``state`` (name -> StateEntry) to its load device, in place.
    ``saved`` maps state names to their recorded device (``None`` or absent: the CPU)."""
    cache: dict[str, torch.device] = {}
    for key, entry in state.items():
        if entry.tensor.is_meta:
            continue
        where = saved.get(key) or "cpu"
        if where not in cache:
            cache[where] = target(where, map_location, name)
        if entry.tensor.device != cache[where]:
            entry.tensor = entry.tensor.to(cache[where])


def saved_devices(doc: dict) -> dict[str, str | None]:
    """State name -> the device program.json records for it (``None``: not recorded)."""
    return {key: info.get("device") for key, info in doc["state"].items()}
