"""A comparison of traced sizes whose truth cannot change the ``and``/``or`` it stands in.

Note: why such a comparison needs no guard.
  transformers' SDPA path computes ``is_causal = q_length > 1 and attention_mask is None
  and is_causal`` (``integrations/sdpa_attention.py``). In an encoder ``is_causal`` is
  False, so the expression is False whatever the length: had ``q_length > 1`` been False,
  the expression would be that False; being True, Python goes on and ends at the final
  False. Guarding the comparison fixed the trace to lengths above 1 for nothing (Moonshine:
  an audio length that its strided convolutions take to one frame was refused).

  So where a comparison of traced values is an operand of a boolean chain, the rest of the
  chain after it is read from the caller's source and evaluated as Python would, without
  running any code: names and constants, ``is``/``is not`` between them, ``not``. Where
  one of those operands settles the chain with exactly the value a settling comparison
  would give (``False`` for ``and``, ``True`` for ``or``), the chain's value is that value
  whichever way the comparison goes, and no guard is needed. Anything else (a call, an
  attribute, a tensor's truth, a chain that ends on a value of another type such as
  ``None``) keeps the guard.
"""

from __future__ import annotations

import ast
import sys

from ..source import OWN_DIR
from .text import _parsed, _positions

# Values whose truth and identity a plain name may hold without running code.
_PLAIN = (bool, int, float, str, type(None))
_MISSING = object()


def settled_without_it() -> bool:
    """Whether the comparison the caller is making (outside tracebridge) stands in an
    ``and``/``or`` chain whose value the operands after it settle alone."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(OWN_DIR):
        frame = frame.f_back
    if frame is None:
        return False
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if index >= len(positions) or None in positions[index]:
        return False
    tree = _parsed(frame.f_code.co_filename)
    node = tree.get(positions[index]) if tree is not None else None
    chain = getattr(node, "_tb_parent", None)
    if not isinstance(node, ast.Compare) or not isinstance(chain, ast.BoolOp):
        return False
    settles = isinstance(chain.op, ast.Or)  # the value that ends the chain: True for or
    after = chain.values[next(i for i, v in enumerate(chain.values) if v is node) + 1 :]
    for operand in after:
        value = _value(operand, frame)
        if value is _MISSING:
            return False
        if bool(value) is settles:
            return value is settles  # ``None`` would differ from a settling False
    return False  # the last operand's value is the chain's: it depends on the comparison


def _value(node: ast.AST, frame):
    """``node``'s value in ``frame`` where reading it runs no code, else ``_MISSING``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        value = _lookup(node.id, frame)
        return value if type(value) in _PLAIN else _MISSING
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = _value(node.operand, frame)
        return _MISSING if value is _MISSING else not value
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.Is, ast.IsNot))
    ):
        left, right = (_identity(n, frame) for n in (node.left, node.comparators[0]))
        if left is _MISSING or right is _MISSING:
            return _MISSING
        return (left is right) is isinstance(node.ops[0], ast.Is)
    return _MISSING


def _identity(node: ast.AST, frame):
    """The object ``node`` names (any object: only its identity is compared)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return _lookup(node.id, frame)
    return _MISSING


def _lookup(name: str, frame):
    for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
        if name in scope:
            return scope[name]
    return _MISSING
