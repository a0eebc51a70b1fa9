"""Where a graph finds the generators its random ops draw from (``GeneratorRef``).

Note: slots. A graph reads state through ``(table, key)`` slots, looked up at each call,
so a tensor replaced in the module is the one the next call reads. A generator the
traced module keeps as an attribute (``self.g``) is read the same way, from the module's
``__dict__``: reseeding it, or putting another generator (or None) in its place, reaches
the trace as it reaches eager code. A generator the code found elsewhere (a global)
sits in a table of the traced object's own. The state slots travel through every
runtime as one dict; the generators' ride on it as an attribute (:class:`Slots`), so
that no code that walks the state (tensors all) meets a generator.
"""

from __future__ import annotations

import torch

from ..errors import ArtifactError


class Slots(dict):
    """State name -> ``(table, key)``, and ``generators``: generator name -> ``(table,
    key)``, where ``table[key]`` is the generator at the time of the call."""

    generators: dict[str, tuple[dict, str]]

    def __init__(self, state: dict, generators: dict[str, tuple[dict, str]] | None = None):
        super().__init__(state)
        self.generators = dict(generators or {})


def slot(slots: dict, name: str, where: str) -> tuple[dict, str]:
    """The slot of generator ``name`` among ``slots`` (refused when the program has none)."""
    found = getattr(slots, "generators", {}).get(name)
    if found is None:
        raise ArtifactError(
            f"{where}: draws from generator {name!r}, which the program does not keep; the "
            "file is corrupt (run tracebridge validate)"
        )
    return found


def read(table: dict, key: str, name: str):
    """The generator in a slot at call time: a torch.Generator or None (an attribute set
    to None: the op draws from the global generator, as in eager code)."""
    value = table.get(key) if isinstance(table, dict) else None
    if value is None or isinstance(value, torch.Generator):
        return value
    raise TypeError(
        f"the trace draws from the generator {name!r}, but the module holds a "
        f"{type(value).__name__} there now; put a torch.Generator (or None) back"
    )


def module_slots(root: torch.nn.Module, generators: dict, own: dict) -> dict:
    """The slots of a module's ``generators`` (name -> generator): a direct attribute of
    ``root`` or a sub-module that holds it now is read from that module's ``__dict__``;
    any other sits in ``own`` (the traced object's table)."""
    slots = {}
    for name, generator in generators.items():
        *parents, leaf = name.split(".")
        owner = root
        for part in parents:
            owner = owner._modules.get(part) if owner is not None else None
        table = vars(owner) if owner is not None else None
        if table is not None and table.get(leaf) is generator:
            slots[name] = (table, leaf)
        else:
            own[name] = generator
            slots[name] = (own, name)
    return slots


def current(slots: dict[str, tuple[dict, str]]) -> dict[str, torch.Generator]:
    """name -> the generator each slot holds now (what a save stores); a slot that holds
    none is refused: the file would have no generator to draw from."""
    found = {}
    for name, (table, key) in slots.items():
        value = table.get(key)
        if not isinstance(value, torch.Generator):
            raise ArtifactError(
                f"cannot save: the trace draws from the generator {name!r}, and the module "
                f"holds {type(value).__name__} there now; put a torch.Generator back (its "
                "state is saved), or trace again"
            )
        found[name] = value
    return found


def states(slots: dict) -> list:
    """The generators the slots hold now and their states (for :func:`set_states`)."""
    found = []
    for table, key in getattr(slots, "generators", {}).values():
        generator = table.get(key)
        if isinstance(generator, torch.Generator):
            found.append((generator, generator.get_state()))
    return found


def set_states(found: list) -> None:
    for generator, state in found:
        generator.set_state(state)
