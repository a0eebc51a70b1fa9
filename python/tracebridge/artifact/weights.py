"""Weights from outside the artifact: ``load(path, weights=...)``.

A program traced on the meta device (how large models are traced without their weights)
is saved without tensor data; its state is bound at load, by name, from safetensors
checkpoints read with the ``safetensors`` library (memory-mapped, so the tensors are views
of the checkpoint files). ``weights`` is one ``.safetensors`` file, a list of them, a
Hugging Face sharded index (``model.safetensors.index.json``, whose ``weight_map`` names
the shard of each tensor), or a dict of tensors by name (a ``state_dict()``: the tensors
themselves are bound, not copies; a pickled traced object travels so, api.py).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ..errors import ArtifactError
from .jsonstrict import loads_strict

WeightsArg = str | os.PathLike | Sequence[str | os.PathLike] | Mapping[str, torch.Tensor]
_MAX_INDEX_BYTES = 64 * 1024 * 1024


def _files(weights: WeightsArg) -> list[str]:
    """The checkpoint files ``weights`` names, an index expanded to its shards."""
    if isinstance(weights, (str, os.PathLike)):
        items = [os.fspath(weights)]
    elif isinstance(weights, Sequence) and all(isinstance(w, (str, os.PathLike)) for w in weights):
        items = [os.fspath(w) for w in weights]
    else:
        raise ArtifactError(
            "weights= takes a .safetensors file, a list of them, or a sharded index "
            f"(model.safetensors.index.json), not {type(weights).__name__}"
        )
    if not items:
        raise ArtifactError("weights= is an empty list; give at least one .safetensors file")
    files: list[str] = []
    for item in items:
        if not os.path.isfile(item):
            raise ArtifactError(f"weights: {item}: no such file")
        files.extend(_index_shards(item) if item.endswith(".json") else [item])
    return list(dict.fromkeys(files))


def _index_shards(index: str) -> list[str]:
    if os.path.getsize(index) > _MAX_INDEX_BYTES:
        raise ArtifactError(f"weights: {index}: too large for a checkpoint index")
    with open(index, "rb") as handle:
        doc = loads_strict(handle.read(), f"weights index {index}")
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ArtifactError(
            f"weights: {index}: not a sharded checkpoint index (no weight_map of tensor name "
            "-> shard file)"
        )
    folder = os.path.dirname(os.path.abspath(index))
    return [_shard_file(index, folder, shard) for shard in dict.fromkeys(weight_map.values())]


def _shard_file(index: str, folder: str, shard: str) -> str:
    """The path of a shard the index names, checked before anything opens it.

    Note: the index is data from anywhere, so the files it names are held to what a
    checkpoint is: regular files inside the index's folder once links are resolved. A FIFO
    would block the open inside the safetensors library forever (no alarm interrupts it), a
    device or a link out of the folder would read whatever it leads to. A user who trusts
    links elsewhere (the Hugging Face cache links shards to its blobs folder) passes the
    shard files themselves as a list, which are the user's choice, not the file's.
    """
    if os.path.basename(shard) != shard or shard in ("", ".", ".."):
        raise ArtifactError(
            f"weights: {index}: shard {shard!r} is not a file name beside the index"
        )
    path = os.path.join(folder, shard)
    real, inside = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, inside]) != inside:
        raise ArtifactError(
            f"weights: {index}: shard {shard!r} is a link that leads out of the index's "
            f"folder (to {real}); an index names files beside it. If you trust the link, "
            "pass the shard files themselves as a list to weights="
        )
    try:
        mode = os.stat(real).st_mode
    except OSError:
        raise ArtifactError(f"weights: {index}: shard {shard!r}: no such file") from None
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise ArtifactError(
            f"weights: {index}: shard {shard!r} is {kind}, not a regular file (nothing was "
            "opened); a sharded index names .safetensors files beside it"
        )
    return real


def open_weights(weights: WeightsArg) -> dict[str, tuple[str, object]]:
    """Every tensor the checkpoints hold: name -> (file, safetensors slice). A name found
    in two files is refused (which one would be meant?)."""
    from safetensors import SafetensorError, safe_open

    found: dict[str, tuple[str, object]] = {}
    for path in _files(weights):
        try:
            handle = safe_open(path, framework="pt", device="cpu")
            names = list(handle.keys())
        except (SafetensorError, OSError, ValueError) as exc:
            raise ArtifactError(
                f"weights: {path}: not a readable safetensors file ({exc})"
            ) from None
        for name in names:
            if name in found:
                raise ArtifactError(
                    f"weights: tensor {name!r} is in both {found[name][0]} and {path}; "
                    "give each tensor once"
                )
            found[name] = (path, handle)
    return found


@dataclass
class _Piece:
    """One tensor the weights offer: where it is (for messages), its dtype and shape as
    the checks read them, and how to take it."""

    where: str
    dtype: torch.dtype | None
    dtype_text: str
    shape: list
    take: object  # () -> torch.Tensor


def _from_files(weights: WeightsArg) -> dict[str, _Piece]:
    from .tensors import FROM_ST

    pieces = {}
    for name, (path, handle) in open_weights(weights).items():
        piece = handle.get_slice(name)
        text = piece.get_dtype()
        pieces[name] = _Piece(
            os.path.basename(path),
            FROM_ST.get(text),
            text,
            list(piece.get_shape()),
            lambda handle=handle, name=name: handle.get_tensor(name),
        )
    return pieces


def _from_mapping(weights: Mapping) -> dict[str, _Piece]:
    pieces = {}
    for name, tensor in weights.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise ArtifactError(
                "weights= as a dict maps state names to tensors (a state_dict()); "
                f"{name!r} maps to {type(tensor).__name__}"
            )
        if tensor.is_meta:
            raise ArtifactError(
                f"weights: {name!r} is a meta tensor (no data); give tensors with values"
            )
        text = str(tensor.dtype)[6:]
        pieces[name] = _Piece(
            "the dict", tensor.dtype, text, list(tensor.shape), lambda t=tensor: t
        )
    return pieces


def bind(
    state: dict[str, dict],
    needed: Sequence[str],
    weights: WeightsArg,
    artifact: str,
    aliases: dict[str, str] | None = None,
):
    """Tensors for the state, by name, from ``weights``.

    ``state`` is program.json's state (name -> {dtype, shape, ...}); ``needed`` are the
    names the artifact holds no data for. Every needed name must be in the weights, every
    weight must be a state name, and dtypes and shapes must match; otherwise one
    ArtifactError lists all that is missing, extra and mis-shaped. ``aliases`` (other name
    -> state name, tied weights) lets a checkpoint hold a state tensor under another of its
    names: writers keep one name of a shared tensor, not always the traced module's first.
    """
    found = _from_mapping(weights) if isinstance(weights, Mapping) else _from_files(weights)
    for alias, target in (aliases or {}).items():
        if alias in found:
            if target not in found:
                found[target] = found[alias]
            del found[alias]
    missing = [n for n in needed if n not in found]
    extra = sorted(n for n in found if n not in state)
    wrong = []
    tensors: dict[str, torch.Tensor] = {}
    for name, piece in found.items():
        if name not in state:
            continue
        want = state[name]
        if (
            piece.dtype is None
            or str(piece.dtype)[6:] != want["dtype"]
            or piece.shape != want["shape"]
        ):
            wrong.append(
                f"{name}: {piece.dtype_text}{piece.shape} in {piece.where}, the program "
                f"needs {want['dtype']}{want['shape']}"
            )
            continue
        tensors[name] = piece.take()
    if missing or extra or wrong:
        transient = [n for n in missing if state[n].get("persistent", True) is False]
        missing = [n for n in missing if n not in transient]
        parts = []
        if missing:
            parts.append(f"missing ({len(missing)}): {', '.join(missing)}")
        if extra:
            parts.append(f"not in the program ({len(extra)}): {', '.join(extra)}")
        if wrong:
            parts.append(f"wrong dtype or shape ({len(wrong)}): {'; '.join(wrong)}")
        advice = (
            ". Pass the checkpoint of the model that was traced (names as in module.state_dict())"
            if parts
            else ""
        )
        if transient:
            parts.append(non_persistent_message(transient))
        raise ArtifactError(
            f"{artifact}: the weights do not fit the program's state. " + ". ".join(parts) + advice
        )
    return tensors


def non_persistent_message(names: Sequence[str]) -> str:
    """Why no checkpoint holds these buffers of a program traced on the meta device, and
    the two ways to give their values."""
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return (
        f"non-persistent buffers with no values ({len(names)}): {shown}. A module computes "
        "such a buffer itself (register_buffer(..., persistent=False): a rotary embedding's "
        "inv_freq, position ids) and leaves it out of state_dict(), so no checkpoint holds "
        "it, and it was on the meta device when traced, so the file holds no values for it "
        "either. Either pass its values in one more safetensors file, "
        "weights=[checkpoint, 'buffers.safetensors'], written with "
        "safetensors.torch.save_file({name: tensor}, 'buffers.safetensors') from the module "
        "that owns it built on the CPU; or trace again with the buffer real (build the model "
        "on the meta device, then put back the module that owns it built on the CPU), so "
        "that the saved file holds its values"
    )


__all__ = ["bind", "non_persistent_message", "open_weights", "WeightsArg", "json"]
