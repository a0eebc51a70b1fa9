"""The generators a program's random ops draw from, in a file (shared_ir/SPEC.md, section
9, Generators).

``program.json`` lists each under ``generators`` (name -> ``{"device": "cpu"}``); its
state, the bytes ``torch.Generator.get_state()`` gives, is a 1-D ``U8`` entry of
``tensors.safetensors`` named ``#generator.`` + its name (``#`` keeps it apart from state
names, as the fillers' ``#pad``). A reader makes a new generator on that device and sets
that state: its calls draw what eager code draws from the generator as it was saved.
"""

from __future__ import annotations

import torch

from ..errors import ArtifactError

PREFIX = "#generator."


def entry_name(name: str) -> str:
    """The ``tensors.safetensors`` entry that holds generator ``name``'s state."""
    return PREFIX + name


def is_entry(name: str) -> bool:
    return name.startswith(PREFIX)


def device_of(generator: torch.Generator) -> str:
    """``"cpu"`` or ``"cuda:N"`` (a CUDA generator always names its device)."""
    device = generator.device
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index}"
    return device.type


def to_json(generators: dict[str, torch.Generator]) -> dict:
    return {name: {"device": device_of(g)} for name, g in generators.items()}


def states(generators: dict[str, torch.Generator]) -> dict[str, torch.Tensor]:
    """The entries to store: each generator's state now."""
    return {entry_name(name): g.get_state() for name, g in generators.items()}


def check_entries(doc: dict, entries: dict, where: str) -> None:
    """Each generator of ``doc`` has its entry, a 1-D uint8 one, and no entry names a
    generator the document lacks."""
    listed = doc.get("generators") or {}
    for key, entry in entries.items():
        if not is_entry(key):
            continue
        if key[len(PREFIX) :] not in listed:
            raise ArtifactError(
                f"{where}: tensors.safetensors holds {key!r}, the state of a generator "
                "program.json does not list"
            )
        if entry.dtype != torch.uint8 or len(entry.shape) != 1:
            raise ArtifactError(f"{where}: generator state {key!r} must be a 1-D U8 entry")
    for name in listed:
        if entry_name(name) not in entries:
            raise ArtifactError(
                f"{where}: generator {name!r} has no state in tensors.safetensors "
                f"({entry_name(name)!r})"
            )


def rebuild(
    doc: dict, tensors: dict[str, torch.Tensor], where: str, describing: bool = False
) -> dict:
    """name -> a new generator on its saved device, in its saved state (``describing``: a
    CUDA one is left out on a machine without CUDA, where nothing runs)."""
    made = {}
    for name, info in (doc.get("generators") or {}).items():
        device = info["device"]
        if device.startswith("cuda") and not torch.cuda.is_available():
            if describing:
                continue
            raise ArtifactError(
                f"{where}: generator {name!r} was saved from {device}, and this machine has "
                "no CUDA device; a random op that draws from it cannot run here "
                "(map_location moves tensors, not generators: trace the model on the CPU "
                "with a CPU generator to run it here)"
            )
        state = tensors[entry_name(name)]
        try:
            generator = torch.Generator(device=device)
            generator.set_state(state.contiguous())
        except (RuntimeError, ValueError) as exc:
            raise ArtifactError(
                f"{where}: generator {name!r}: its saved state does not fit a {device} "
                f"generator ({str(exc).splitlines()[0][:200]})"
            ) from None
        made[name] = generator
    return made
