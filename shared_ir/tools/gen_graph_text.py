"""Write the golden graph text of every golden vector: ``shared_ir/vectors/<name>.graph``.

Each file holds the text form (``shared_ir/SPEC.md``, "Text form") of every method of the
vector's artifact, in the artifact's method order, separated by one empty line. Both
printers (Python's ``tracebridge.ir.printer`` and R's ``jit_inspect``) are tested against
these stored files, not against each other.

    .venv/bin/python shared_ir/tools/gen_graph_text.py          # rewrite the files
    .venv/bin/python shared_ir/tools/gen_graph_text.py --check  # exit 1 if any is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tracebridge import artifact
from tracebridge.ir.printer import graph_text

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def graph_file_text(path: Path) -> str:
    """The text of every method of the artifact at ``path``, as the golden file holds it."""
    program = artifact.read(path)
    return "\n\n".join(graph_text(g, name) for name, g in program.methods.items()) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args(argv)
    manifest = json.loads((VECTORS / "manifest.json").read_text())
    stale = []
    for entry in manifest["vectors"]:
        target = VECTORS / f"{entry['name']}.graph"
        text = graph_file_text(VECTORS / entry["artifact"])
        if not target.exists() or target.read_text() != text:
            stale.append(target.name)
            if not args.check:
                target.write_text(text)
    verb = "stale" if args.check else "written"
    print(f"{len(stale)} graph files {verb}: {', '.join(stale) or '-'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
