"""No CLI module imports Chroma, even lazily (read from the source, no process)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import langchain_semantic_recall.cli as cli_package

CLI_DIR = Path(cli_package.__file__).parent

MODULES = sorted(
    f"langchain_semantic_recall.cli.{info.name}" for info in pkgutil.iter_modules([str(CLI_DIR)])
)

FORBIDDEN = ("chromadb", "langchain_semantic_recall.vectors.chroma")


FILES = sorted(CLI_DIR.rglob("*.py"))


def forbidden(module: str) -> bool:
    """Whether importing ``module`` means importing chromadb or a Chroma backend module."""
    return any(module == name or module.startswith(name) for name in FORBIDDEN)


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, at any depth; ``from a import b`` gives
    both ``a`` and ``a.b`` (``b`` may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_the_cli_package_has_the_modules_we_expect() -> None:
    assert "langchain_semantic_recall.cli.migrate" in MODULES
    assert {path.name for path in FILES} >= {"__init__.py", "migrate.py", "common.py"}


def test_the_checks_catch_a_chroma_import() -> None:
    tree = ast.parse(
        "def f():\n"
        "    from chromadb.errors import NotFoundError\n"
        "    from langchain_semantic_recall.vectors import chroma\n"
        "    import langchain_semantic_recall.vectors.chroma_layout\n"
        "from langchain_semantic_recall.vectors.base import VectorIndex\n"
    )
    flagged = [name for _, name in imported_modules(tree) if forbidden(name)]
    assert flagged == [
        "chromadb.errors",
        "chromadb.errors.NotFoundError",
        "langchain_semantic_recall.vectors.chroma",
        "langchain_semantic_recall.vectors.chroma_layout",
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_no_cli_module_imports_chroma_even_lazily(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    offenders = [
        f"{path.name}:{line}: {name}" for line, name in imported_modules(tree) if forbidden(name)
    ]
    assert offenders == []
