"""One-entry caches keyed on a size, warmed before tracing: traced as the code fills them.

Note: why a warm cache is traced cold.
  A rotary embedding keeps its table for one length (transformers' Wav2Vec2-Conformer,
  Wav2Vec2-BERT, SeamlessM4T: ``if length == self.cached_sequence_length: return
  self.cached_table``, else compute it and store ``self.cached_sequence_length =
  length``). Traced on a fresh model, the recording takes the computing path and is right
  for every length. But called once eagerly first (a warm-up, a check), the recording
  finds the key equal to the example's length and takes the cached table: the graph
  guards ``length == 5`` and reads the stored table, refusing every other length
  (prober20a F4); warmed at another length it guards ``length != 7`` and refuses that one.
  Eager answers every length alike (the stored table is what the computing path gives
  for its length), so the recording is made again with the key set aside: where a size
  of the trace was compared (``==``/``!=``) with a plain number kept in an attribute that
  the same function also assigns the compared expression (``self.key = length``: the key
  of a cache that function fills; not a setting made in ``__init__``, not a counter), the
  attribute holds a stand-in that equals nothing while the
  code is recorded again, which then takes the path that fills the cache, as on a fresh
  model; the attribute is put back after. Where that recording fails, the first one
  stands (its guard names the line).
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache

from ..source import user_frame
from .text import _parsed
from .text import _positions as _all_positions

_positions = lru_cache(maxsize=1024)(_all_positions)


class _Cold:
    """A cache key that no size equals (``==`` False, ``!=`` True, by identity)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<a cache key set aside while tracing>"


COLD = _Cold()


def note_compared(tracer, plain) -> None:
    """A traced size was compared (``==``/``!=``) with the plain number ``plain``: where the
    user's line reads it from an attribute its function also assigns (a one-entry cache's
    key), remember ``(object, attribute, file:line)`` on ``tracer.cache_keys``."""
    frame = user_frame(sys._getframe(1))
    if frame is None:
        return
    code = frame.f_code
    positions = _positions(code)
    index = frame.f_lasti // 2
    if index >= len(positions) or None in positions[index]:
        return
    node = (_parsed(code.co_filename) or {}).get(tuple(positions[index]))
    if not isinstance(node, ast.Compare):
        return
    operands = (node.left, *node.comparators)
    if len(operands) != 2:
        return
    for operand, other in (operands, operands[::-1]):
        if not (isinstance(operand, ast.Attribute) and isinstance(operand.value, ast.Name)):
            continue
        owner = frame.f_locals.get(operand.value.id)
        held = getattr(owner, "__dict__", {}).get(operand.attr, COLD)
        if type(held) is not int or held != plain:
            continue
        if _filled_in(node, operand.value.id, operand.attr, ast.dump(other)):
            key = (owner, operand.attr, f"{code.co_filename}:{frame.f_lineno}")
            if not any(k[0] is owner and k[1] == operand.attr for k in tracer.cache_keys):
                tracer.cache_keys.append(key)


def _filled_in(node: ast.AST, name: str, attr: str, value: str) -> bool:
    """Whether the function around ``node`` (not ``__init__``) assigns ``name.attr`` the
    expression it compares it with (``value``, dumped): ``self.cached_len = seq_len``,
    a cache's key filled. A counter (``self.step += 1``) or a setting is not."""
    function = node
    while function is not None and not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        function = getattr(function, "_tb_parent", None)
    if function is None or function.name == "__init__":
        return False
    for statement in ast.walk(function):
        targets = []
        if isinstance(statement, ast.Assign) and ast.dump(statement.value) == value:
            targets = statement.targets
        for target in targets:
            for leaf in ast.walk(target):
                if (
                    isinstance(leaf, ast.Attribute)
                    and leaf.attr == attr
                    and isinstance(leaf.value, ast.Name)
                    and leaf.value.id == name
                ):
                    return True
    return False


class set_aside:  # noqa: N801 - used as a context manager, like contextlib's
    """The cache keys ``keys`` hold :data:`COLD` inside the block, their values after."""

    def __init__(self, keys: list):
        self.keys = keys
        self.kept: list = []

    def __enter__(self):
        for owner, attr, _ in self.keys:
            self.kept.append((owner, attr, owner.__dict__[attr]))
            owner.__dict__[attr] = COLD
        return self

    def __exit__(self, *exc):
        for owner, attr, value in self.kept:
            owner.__dict__[attr] = value
        return False
