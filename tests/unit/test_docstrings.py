"""Docstrings are Markdown with Google sections: no reST roles or literal blocks.

LangChain's reference docs render docstrings as Markdown, so `:class:`X`` shows up as
raw text and an `Example::` block as a paragraph. Names go in backticks and examples in
```` ```python ```` fences. Every docstring of the package is read from the source (module,
class, function and attribute docstrings alike), so no module needs importing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import langchain_semantic_recall

PACKAGE = Path(langchain_semantic_recall.__file__).resolve().parent
MODULES = sorted(PACKAGE.rglob("*.py"))
_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):`")
_DIRECTIVE = re.compile(r"^\s*\.\. [\w-]+::")


def docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string statement: module, class, function and attribute docs."""
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def rest_markup(source: str) -> list[str]:
    """Where `source`'s docstrings use reST instead of Markdown, one line per finding."""
    found = []
    for line, text in docstrings(source):
        for offset, row in enumerate(text.splitlines()):
            at = f"line {line + offset}"
            found += [
                f"{at}: reST role {m.group(0)}... (write `Name`)" for m in _ROLE.finditer(row)
            ]
            if row.rstrip().endswith("::"):
                found.append(f"{at}: reST literal block {row.strip()!r} (use a ``` fence)")
            if _DIRECTIVE.match(row):
                found.append(f"{at}: reST directive {row.strip()!r} (use a ``` fence)")
    return found


def test_every_module_is_checked() -> None:
    assert len(MODULES) > 50
    assert PACKAGE / "recall.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_docstrings_are_markdown(path: Path) -> None:
    assert rest_markup(path.read_text(encoding="utf-8")) == []


def test_the_check_finds_rest() -> None:
    source = '''
"""Module: see :mod:`pkg.mod`."""

X = 1
"""Attribute, used by :func:`f`."""


class C:
    """A class.

    Example::

        C()
    """

    def m(self) -> None:
        """Calls :meth:`n` and returns :class:`~pkg.C`.

        .. code-block:: python

            C().m()
        """
'''
    found = rest_markup(source)
    assert len(found) == 6, found
    assert all("reST" in finding for finding in found)


def test_markdown_passes() -> None:
    source = '''
def f() -> None:
    """Return `C` (see `pkg.mod`).

    Example:
        ```python
        f()
        ```
    """
'''
    assert rest_markup(source) == []
