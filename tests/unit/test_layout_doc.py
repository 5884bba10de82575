"""docs/layout.md names every module of the package, and no module that is gone.

The package root, `engine/`, `storage/` and `vectors/` are listed module by module (a
glob such as `sqlite*.py` counts); another subpackage (`cli/`, `importers/`, ...) is
named as a folder.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import langchain_semantic_recall

PACKAGE = Path(langchain_semantic_recall.__file__).parent
DOC = PACKAGE.parent / "docs" / "layout.md"
LISTED = ("", "engine", "storage", "vectors")
"""Folders of the package whose modules the page names one by one."""


def _tree() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("```", 2)[1]


def _names() -> set[str]:
    return set(re.findall(r"[\w*]+\.py|\w+/", _tree()))


def missing(names: set[str]) -> list[str]:
    """Modules and subpackages of the listed folders the page does not name."""
    lost: list[str] = []
    for folder in LISTED:
        base = PACKAGE / folder
        for path in sorted(base.iterdir()):
            if path.name.startswith(("_", ".")):
                continue
            if path.is_dir() and (path / "__init__.py").is_file():
                if f"{path.name}/" not in names:
                    lost.append(f"{path.relative_to(PACKAGE)}/")
            elif path.suffix == ".py" and not any(fnmatch.fnmatch(path.name, n) for n in names):
                lost.append(str(path.relative_to(PACKAGE)))
    return lost


def test_the_layout_page_names_every_module() -> None:
    assert missing(_names()) == [], "add them to docs/layout.md"


def test_every_module_the_layout_page_names_exists() -> None:
    files = {p.name for p in PACKAGE.rglob("*.py")} | {"test_readme.py"}
    folders = {f"{p.name}/" for p in PACKAGE.rglob("*") if p.is_dir()}
    folders |= {"langchain_semantic_recall/", "tests/", "unit/", "conformance/"}
    folders |= {"integration/", "benchmarks/"}
    gone = [
        n
        for n in _names()
        if (n.endswith("/") and n not in folders)
        or (n.endswith(".py") and not any(fnmatch.fnmatch(f, n) for f in files))
    ]
    assert gone == [], "docs/layout.md names modules that are gone"


def test_the_check_finds_a_module_left_out() -> None:
    names = _names() - {"bulk.py"}
    assert "bulk.py" in missing(names)
    assert "engine/steps/" in missing(_names() - {"steps/"})
