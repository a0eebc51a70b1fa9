"""A griffe extension for the documentation site (mkdocs.yml loads it; ``make docs``).

tracebridge's docstrings carry runnable examples as plain doctest blocks (``>>> ...`` and the
output lines after them), which ``--doctest-modules`` runs. Read as Markdown, ``>>>`` is three
nested quotes and ``['s0', 's1']`` on the line after ``[d.dim_param ...]`` a reference link,
so each block is fenced as ``pycon`` code before the page is written. The docstrings in the
sources stay as they are.
"""

from __future__ import annotations

import re

try:
    from griffe import Extension
except ImportError:  # the tests import fence_doctests from .venv, which has no griffe
    Extension = object

PROMPT = re.compile(r"^(\s*)>>>( |$)")


def fence_doctests(text: str) -> str:
    """``text`` with each doctest block (from a ``>>>`` line to the next blank line, or to a
    line less indented than its prompt) inside a fenced ``pycon`` block; text already in a
    fence is left alone."""
    out: list[str] = []
    lines = text.split("\n")
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        start = PROMPT.match(line)
        if fenced or start is None:
            out.append(line)
            i += 1
            continue
        indent = start.group(1)
        block = []
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            block.append(lines[i])
            i += 1
        out += [f"{indent}```pycon", *block, f"{indent}```"]
    return "\n".join(out)


class FenceDoctests(Extension):
    """Fences the doctest blocks of every docstring (see the module docstring)."""

    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
