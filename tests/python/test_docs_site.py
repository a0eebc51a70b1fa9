"""The documentation site's sources (scripts/docs_site.py; `make docs` builds the site):
every public function documented, every relative link of the pages pointing at a file."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("docs_site", ROOT / "scripts" / "docs_site.py")
docs_site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_site)


def test_every_public_function_and_argument_is_documented():
    assert docs_site.undocumented() == []


def test_pages_stage_with_no_broken_link(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(docs_site, "STAGE", tmp_path / "docs-src")
    assert docs_site.stage() == 0, capsys.readouterr().err
    api = (tmp_path / "docs-src" / "api.md").read_text()
    assert "::: tracebridge.api.trace\n" in api and "::: tracebridge.api.load\n" in api
    index = (tmp_path / "docs-src" / "index.md").read_text()
    assert "](spec.md)" in index and "](scale-out.md)" in index  # rewritten to the site


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(docs_site, "ROOT", tmp_path)
    monkeypatch.setattr(docs_site, "PAGES", {"README.md": "index.md"})
    (tmp_path / "README.md").write_text("[gone](docs/gone.md) and [x](%self.1)\n")
    copies, broken = set(), []
    text = docs_site._rewrite("README.md", (tmp_path / "README.md").read_text(), copies, broken)
    assert broken == ["README.md: link to docs/gone.md (docs/gone.md does not exist)"]
    assert "]\\(%self.1)" in text  # not a link: shown as text


def test_broken_links_of_a_built_site_are_found(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text(
        '<a href="../b/index.html">b</a> <a href="#x">x</a> <a href="https://x.org/">e</a>'
        '<img src="pic.png"> <a href="../a/">a</a>'
    )
    assert docs_site.broken_links(tmp_path) == [
        "a/index.html: ../b/index.html",
        "a/index.html: pic.png",
    ]


def test_every_page_is_in_the_menu():
    # mkdocs --strict refuses a page that is not in mkdocs.yml's nav: a new docs/*.md must
    # be added there (found here in seconds instead of in the site build).
    nav = set(re.findall(r"^\s+- [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert set(docs_site.PAGES.values()) | {"api.md"} <= nav


def test_doctest_blocks_are_fenced_as_code():
    spec = importlib.util.spec_from_file_location("docs_griffe", ROOT / "scripts/docs_griffe.py")
    docs_griffe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs_griffe)
    text = "Intro.\n\n>>> [d for d in\n...  x]\n['s0', 's1']\n\nAfter.\n```\n>>> kept\n```"
    assert docs_griffe.fence_doctests(text) == (
        "Intro.\n\n```pycon\n>>> [d for d in\n...  x]\n['s0', 's1']\n```\n\nAfter.\n"
        "```\n>>> kept\n```"
    )
    indented = "Args:\n    x: a number\n\n    >>> f(1)\n    2\nEnd."
    assert docs_griffe.fence_doctests(indented) == (
        "Args:\n    x: a number\n\n    ```pycon\n    >>> f(1)\n    2\n    ```\nEnd."
    )
