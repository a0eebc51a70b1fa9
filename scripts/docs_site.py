"""Lay out the sources of the documentation site and check them (``make docs``).

    python scripts/docs_site.py stage   # build/docs-src/: what mkdocs.yml builds
    python scripts/docs_site.py check   # every public Python function documented
    python scripts/docs_site.py links site/python site/r   # no broken link in built sites

``stage`` gathers the pages from where they live in the repository (README.md as the home
page, docs/*.md, shared_ir/SPEC.md and opset.md, benchmarks/RESULTS.md), rewrites each
relative link to where its target lands in the site, copies the other files they link to
(examples, requirements) beside them, and writes the API page that mkdocstrings fills from
the docstrings. A link to a file that does not exist is an error here; ``mkdocs build
--strict`` then checks every link and anchor of the built site.

``check`` fails unless every public function, class and method of ``tracebridge.__all__``
has a docstring that names each of its arguments (the site's API page shows exactly these).
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "build" / "docs-src"

# repository path -> page of the site
PAGES = {
    "README.md": "index.md",
    "shared_ir/SPEC.md": "spec.md",
    "shared_ir/opset.md": "opset.md",
    "benchmarks/RESULTS.md": "benchmarks.md",
    **{f"docs/{p.name}": p.name for p in sorted((ROOT / "docs").glob("*.md"))},
}
# A relative link to a file: [text](path/to/file.md#anchor) (not "(%self.1)" in pasted text).
LINK = re.compile(r"(\]\()([\w./-]+)(#[^)\s]*)?(\))")
# "](" that starts no link (error text quoted in a table, "[name](%self.1)"): escaped, so
# that Markdown shows it as text instead of a broken link.
NOT_A_LINK = re.compile(r"\]\((?![\w./-]+(?:#[^)\s]*)?\)|[a-z][a-z0-9+.-]*:|#)")
API_PAGE = """# Python API

Everything below is generated from the docstrings of the `tracebridge` package
(`scripts/docs_site.py check` fails when a public function or one of its arguments is
undocumented). The R package has its own reference, built by pkgdown
(`make docs`: `site/r/`).

{members}

::: tracebridge.progress
"""
# Each public name is documented from the module that defines it: ``tracebridge.trace`` the
# function shares its name with the ``tracebridge.trace`` package (the tracer), which a
# static reader would find instead. Classes show the members they inherit from tracebridge's
# own base classes (``save``, ``guards``), not nn.Module's.
MEMBER = """::: {path}
    options:
      show_root_full_path: false
      heading_level: 2
{inherited}"""


def _target(source: str, link: str) -> str | None:
    """The repository path a relative link of ``source`` points at, or None for a URL."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith("/"):
        return None
    return os.path.normpath(os.path.join(os.path.dirname(source), link))


def _rewrite(source: str, text: str, copies: set[str], broken: list[str]) -> str:
    page = PAGES[source]

    def fix(match: re.Match) -> str:
        target = _target(source, match.group(2))
        if target is None:
            return match.group(0)
        if not (ROOT / target).exists():
            broken.append(f"{source}: link to {match.group(2)} ({target} does not exist)")
            return match.group(0)
        if target in PAGES:
            new = PAGES[target]
        elif (ROOT / target).is_dir():
            broken.append(f"{source}: link to the folder {match.group(2)}; link a file")
            return match.group(0)
        else:
            copies.add(target)
            new = f"files/{target}"
        new = os.path.relpath(new, os.path.dirname(page) or ".")
        return f"{match.group(1)}{new}{match.group(3) or ''}{match.group(4)}"

    return _outside_code(text, lambda prose: NOT_A_LINK.sub(r"]\\(", LINK.sub(fix, prose)))


def _outside_code(text: str, change) -> str:
    """Apply ``change`` to the text outside fenced code blocks."""
    parts = re.split(r"(^```.*?^```[^\n]*$)", text, flags=re.M | re.S)
    return "".join(part if i % 2 else change(part) for i, part in enumerate(parts))


def stage() -> int:
    import tracebridge

    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    copies: set[str] = set()
    broken: list[str] = []
    for source, page in PAGES.items():
        text = (ROOT / source).read_text()
        (STAGE / page).write_text(_rewrite(source, text, copies, broken))
    for target in sorted(copies):
        out = STAGE / "files" / target
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / target, out)
    members = []
    for name in tracebridge.__all__:
        obj = getattr(tracebridge, name)
        inherited = sorted({attr for _, attr, _ in _own_members(obj)} - set(vars(obj)))
        listed = f"      inherited_members: {inherited}\n" if inherited else ""
        path = f"{obj.__module__}.{name}"
        members.append(MEMBER.format(path=path, inherited=listed))
    (STAGE / "api.md").write_text(API_PAGE.format(members="\n".join(members)))
    for line in broken:
        print(f"docs: broken link: {line}", file=sys.stderr)
    print(f"docs: staged {len(PAGES) + 1} pages and {len(copies)} files in {STAGE}")
    return 1 if broken else 0


# --- every public function documented ------------------------------------------------------


def _public_callables():
    """(qualified name, object) of every public function, class and method in
    ``tracebridge.__all__`` (methods: those the class itself defines)."""
    import tracebridge

    for name in tracebridge.__all__:
        obj = getattr(tracebridge, name)
        yield f"tracebridge.{name}", obj
        for _, attr, member in _own_members(obj):
            yield f"tracebridge.{name}.{attr}", member


def _own_members(obj):
    """(class, name, function) of the public methods and properties that ``obj`` (a class)
    has from tracebridge's own classes, itself included; nothing for anything else."""
    if not inspect.isclass(obj) or issubclass(obj, BaseException):
        return
    seen = set()
    for klass in obj.__mro__:
        if not klass.__module__.startswith("tracebridge"):
            continue
        for attr, member in vars(klass).items():
            if attr.startswith("_") or attr in seen:
                continue
            seen.add(attr)
            if isinstance(member, property):
                yield klass, attr, member.fget
            elif inspect.isfunction(member):
                yield klass, attr, member


def undocumented() -> list[str]:
    """What lacks a docstring, or an argument its docstring does not name."""
    faults = []
    for qualname, obj in _public_callables():
        doc = inspect.getdoc(obj) or ""
        if not doc.strip():
            faults.append(f"{qualname}: no docstring")
            continue
        if not (inspect.isfunction(obj) or inspect.ismethod(obj)):
            continue
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        for param in params:
            if param in ("self", "cls") or params[param].kind in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                continue
            if not re.search(rf"\b{re.escape(param)}\b", doc):
                faults.append(f"{qualname}: argument {param!r} is not described")
    return faults


def check() -> int:
    faults = undocumented()
    for fault in faults:
        print(f"docs: undocumented: {fault}", file=sys.stderr)
    count = sum(1 for _ in _public_callables())
    print(f"docs: {count} public functions, classes and methods, {len(faults)} undocumented")
    return 1 if faults else 0


# --- the built sites: every relative link and image is there ---------------------------------

HREF = re.compile(r"""(?:href|src)=["']([^"'#?]*)[^"']*["']""")


def broken_links(site: Path) -> list[str]:
    """Relative links and sources in the HTML under ``site`` whose file does not exist."""
    faults = []
    for page in sorted(site.rglob("*.html")):
        for target in HREF.findall(page.read_text(errors="replace")):
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:|^//", target):
                continue  # an anchor on the page itself, or another site
            path = (page.parent / target) if not target.startswith("/") else site / target[1:]
            if target.endswith("/"):
                path = path / "index.html"
            if not path.exists():
                faults.append(f"{page.relative_to(site)}: {target}")
    return faults


def links(*sites: str) -> int:
    faults = []
    for site in sites:
        found = broken_links(Path(site))
        faults += [f"{site}/{fault}" for fault in found]
        pages = sum(1 for _ in Path(site).rglob("*.html"))
        print(f"docs: {site}: {pages} pages, {len(found)} broken links")
    for fault in faults:
        print(f"docs: broken link: {fault}", file=sys.stderr)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    command = sys.argv[1] if len(sys.argv) > 1 else "stage"
    commands = {"stage": stage, "check": check, "links": links}
    sys.exit(commands[command](*sys.argv[2:]))
