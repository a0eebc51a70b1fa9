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

from ..check.program import LIMITS
from ..errors import ArtifactError
from . import devices

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
    total = 0
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
        total += entry.shape[0]
        _bytes_ok(total, where)
    for name in listed:
        if entry_name(name) not in entries:
            raise ArtifactError(
                f"{where}: generator {name!r} has no state in tensors.safetensors "
                f"({entry_name(name)!r})"
            )


def _bytes_ok(total: int, where: str) -> None:
    """The generators' states, ``total`` bytes so far, within ``generator_bytes``."""
    if total > LIMITS["generator_bytes"]:
        raise ArtifactError(
            f"{where}: the generators' states take more than {LIMITS['generator_bytes']} "
            "bytes in tensors.safetensors, the limit (a CPU generator's state is 5056 bytes) "
            "[rule: resource limits]; the file is corrupt or hostile"
        )


def rebuild(
    doc: dict,
    tensors: dict[str, torch.Tensor],
    where: str,
    describing: bool = False,
    map_location: devices.MapLocation = None,
) -> dict:
    """name -> a new generator on its load device (:func:`load_device`), in its saved
    state (``describing``: a CUDA one is left out on a machine without CUDA, where nothing
    runs)."""
    made, total = {}, 0
    for name, info in (doc.get("generators") or {}).items():
        state = tensors.get(entry_name(name))
        if state is None:
            raise ArtifactError(f"{where}: generator {name!r} has no state in tensors.safetensors")
        total += state.numel()
        _bytes_ok(total, where)
        if describing and info["device"] != "cpu" and not torch.cuda.is_available():
            continue
        device = load_device(name, info["device"], map_location, where)
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


def load_device(name: str, saved: str, map_location: devices.MapLocation, where: str) -> str:
    """Where generator ``name``, saved from ``saved``, is made at load.

    Note: the rule. ``map_location`` moves a generator as it moves tensors where the
    target is a device of the same type (``{"cuda:1": "cuda:0"}``): a generator's state
    fits only a generator of its type, and there it draws what it drew. A CUDA generator
    that ``map_location`` sends to another type (``"cpu"``) is refused: a CUDA state (a
    Philox seed and offset, 16 bytes) is no CPU state (a Mersenne Twister's, 5056 bytes),
    and a CPU generator seeded anew would draw other numbers than the saved one, silently.
    A CPU generator stays on the CPU wherever ``map_location`` sends the tensors, as
    ``nn.Module.to()`` leaves a generator where it is: the graph's ops say where its draws
    go (``torch.rand(n, generator=g).to(x.device)`` runs as in eager code; an op that
    draws on another device from it is refused at the call, by torch, as eagerly)."""
    if saved == "cpu":
        return "cpu"
    what = f"{where}: generator {name!r}"
    try:
        device = devices.target(saved, map_location, what)
    except ArtifactError:
        if torch.cuda.is_available():
            raise
        raise ArtifactError(
            f"{what} was saved from {saved}, and this machine has no CUDA device; a random "
            "op that draws from it cannot run here, and map_location cannot move it to the "
            "CPU (a CUDA generator's state is not a CPU generator's): trace the model on "
            "the CPU with a CPU generator (torch.Generator()) and save it again to run it "
            "here"
        ) from None
    if device.type != torch.device(saved).type:
        raise ArtifactError(
            f"{what} was saved from {saved}, and map_location sends {saved} to {device}: "
            f"a generator cannot change its device type (a {torch.device(saved).type} "
            f"generator's state is not a {device.type} generator's, and one seeded anew "
            f"would draw other numbers); keep {saved} on a {torch.device(saved).type} "
            "device (map_location={'cuda:N': 'cuda:M'}), or trace the model with a "
            f"generator on {device.type} and save it again"
        )
    return str(device)
