"""Write a benchmark's table into benchmarks/RESULTS.md between its own markers, so each
benchmark replaces its block and leaves the others' as they are."""

from __future__ import annotations

import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_results(text: str, tag: str) -> None:
    """Put ``text`` between ``<!-- tag:begin -->`` and ``<!-- tag:end -->`` (appended at
    the end the first time)."""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    block = f"{begin}\n{text}\n{end}"
    if begin in old and end in old:
        new = old[: old.index(begin)] + block + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(new)
    print(f"[{tag}] wrote {RESULTS}", file=sys.stderr)
