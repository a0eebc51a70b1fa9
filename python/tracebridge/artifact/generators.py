"""The generators a program's random ops draw from, in a file (shared_ir/SPEC.md, section
9, Generators).

``program.json`` lists each under ``generators`` (name -> ``{"device": "cpu"}``); its
state, the bytes ``torch.Generator.get_state()`` gives, is a 1-D ``U8`` entry of
``tensors.safetensors`` named ``#generator.`` + its name (``#`` keeps it apart from state
names, as the fillers' ``#pad``). A reader makes a new generator on that device and sets
that state: its calls draw what eager code draws from the generator as it was saved.
"""

from __future__ import annotations

import math
import struct

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
        check_state(name, info["device"], state, where)
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


# A CPU generator's state (ATen's CPUGeneratorImplState, aten/src/ATen/CPUGeneratorImpl.cpp,
# little-endian): the_initial_seed u64 @0, left i32 @8, seeded i32 @12, next u64 @16,
# state u64[624] @24 (each a 32-bit word), normal_x f64 @5016, normal_y f64 @5024,
# normal_rho f64 @5032, normal_is_valid i32 @5040, next_float_normal_sample f32 @5048,
# is_next_float_normal_sample_valid bool @5052; 5056 bytes in all.
CPU_STATE_BYTES = 5056
CUDA_STATE_BYTES = 16
_MT_N = 624


def cpu_state_problem(data: bytes) -> str | None:
    """Why ``data`` is no state a CPU generator (ATen's mt19937) can hold, or ``None``.

    Note: the rule. ``Generator.set_state`` checks only ``0 < left <= 624`` and
    ``next <= 624`` apart (``mt19937::is_valid``); a draw decrements ``left``, regenerates
    the words when it reaches 0 (then ``left = 624, next = 0``), and reads
    ``state[next++]``: the next ``left - 1`` draws read ``state[next .. next + left - 2]``,
    in bounds only when ``left + next <= 625``. A real generator holds ``left = 1,
    next = 0`` once seeded and ``left + next == 625`` after any draw; any other pair is
    refused (``left = next = 624`` reads 623 words past the generator's memory). The words
    are 32-bit (stored in 64), ``seeded`` is 1, the flags are 0 or 1 (a C++ ``bool`` of
    another value is undefined), and the cached normal samples are finite."""
    if len(data) != CPU_STATE_BYTES:
        return f"{len(data)} bytes, where a CPU generator's state is {CPU_STATE_BYTES}"
    _seed, left, seeded, nxt = struct.unpack_from("<QiiQ", data, 0)
    if seeded != 1:
        return f"its 'seeded' field is {seeded}, not 1"
    if not (
        1 <= left <= _MT_N and nxt <= _MT_N and (left + nxt == _MT_N + 1 or (left, nxt) == (1, 0))
    ):
        return (
            f"its Mersenne Twister position (left={left}, next={nxt}) is none a generator "
            f"holds (left + next == {_MT_N + 1}, or left=1, next=0 once seeded): a draw would "
            "read past the generator's words"
        )
    words = struct.unpack_from(f"<{_MT_N}Q", data, 24)
    if max(words) >= 1 << 32:
        return "a word of its Mersenne Twister state does not fit 32 bits"
    normal_x, normal_y, normal_rho, normal_valid = struct.unpack_from("<dddi", data, 5016)
    float_sample, float_valid = struct.unpack_from("<fB", data, 5048)
    if normal_valid not in (0, 1) or float_valid not in (0, 1):
        return "a flag of its cached normal samples is neither 0 nor 1"
    if not all(math.isfinite(v) for v in (normal_x, normal_y, normal_rho, float_sample)):
        return "a cached normal sample is not finite"
    return None


def cuda_state_problem(data: bytes) -> str | None:
    """Why ``data`` is no state a CUDA generator (Philox: seed u64, offset i64) holds, or
    ``None``. ``set_state`` checks the size (8 or 16) and that the offset is a multiple of
    4; a generator's offset only grows from 0, so a negative one (as int64) is refused
    too, and the 8-byte legacy form (no offset) is refused as no generator writes it."""
    if len(data) != CUDA_STATE_BYTES:
        return f"{len(data)} bytes, where a CUDA generator's state is {CUDA_STATE_BYTES}"
    (offset,) = struct.unpack_from("<q", data, 8)
    if offset < 0 or offset % 4:
        return f"its Philox offset {offset} is none a generator holds (0 or more, a multiple of 4)"
    return None


def check_state(name: str, device: str, state: torch.Tensor, where: str) -> None:
    """Refuse a saved state no generator on ``device`` can hold, before ``set_state``
    (which would take some of them and then read past the generator's memory)."""
    data = state.contiguous().numpy().tobytes()
    kind = torch.device(device).type
    problem = cpu_state_problem(data) if kind == "cpu" else cuda_state_problem(data)
    if problem is not None:
        raise ArtifactError(
            f"{where}: generator {name!r}: its saved state does not fit a {device} generator "
            f"({problem}); the file is corrupt or hostile: save the "
            "model again from the generator it was traced with"
        )
