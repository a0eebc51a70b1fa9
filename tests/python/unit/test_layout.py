"""The package is laid out by pipeline stage, and imports only point down the pipeline.

Stages, lowest first (a module may import its own stage and any stage below it):

    leaves (errors, source, version, progress) < ir < trace < check < runtime < artifact < api
      < export < backends < frontends

This test fails when an import goes the wrong way, so the layout in docs/architecture.md
stays true.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tracebridge

PACKAGE = Path(tracebridge.__file__).parent
STAGES = [
    ("errors", "source", "version", "progress"),
    ("ir",),
    ("trace",),
    ("check",),
    ("runtime",),
    ("artifact",),
    ("api",),
    ("export",),
    ("backends",),
    ("frontends", "__main__"),  # python -m tracebridge: the command line
]
RANK = {name: rank for rank, names in enumerate(STAGES) for name in names}


def _stage(module: str) -> str | None:
    """``tracebridge.runtime.codegen`` -> ``runtime``; the package root has no stage."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tracebridge" else None


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every tracebridge module that ``path`` imports (top level or inside functions)."""
    module = ".".join(("tracebridge", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "tracebridge" or (node.module is None and node.level):
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, t) for line, t in found if t.startswith("tracebridge.")]


def test_every_module_belongs_to_a_stage():
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue
        stage = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        assert stage in RANK, f"{path} is in no pipeline stage; add it to STAGES"


def test_imports_point_down_the_pipeline():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue  # the package root re-exports the public API of every stage
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for line, target in _imports(path):
            stage = _stage(target)
            if stage in RANK and RANK[stage] > RANK[own]:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} ({own}) imports {target}")
    assert not wrong, "imports against the pipeline:\n" + "\n".join(wrong)
