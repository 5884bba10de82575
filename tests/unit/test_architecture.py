"""The package's shape holds: no import circle, no module over 500 lines, no mixins.

Imports are read from the source (lazy imports inside functions count; imports under
``if TYPE_CHECKING:`` do not, they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import langchain_semantic_recall

PACKAGE = Path(langchain_semantic_recall.__file__).parent
NAME = "langchain_semantic_recall"


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path, known: set[str]) -> set[str]:
    """Package modules imported when ``path`` runs (at import or inside a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name in known and name.startswith(NAME)}


def test_no_import_circle() -> None:
    graph = {name: runtime_imports(path, set(modules())) for name, path in modules().items()}
    # A package imports its submodules by design; only module-to-module edges matter.
    edges = {
        name: {t for t in targets if not name.startswith(t + ".") and t != name}
        for name, targets in graph.items()
    }
    done: set[str] = set()
    stack: list[str] = []

    def walk(node: str) -> None:
        if node in stack:
            circle = [*stack[stack.index(node) :], node]
            raise AssertionError("import circle: " + " -> ".join(circle))
        if node in done:
            return
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            walk(target)
        stack.pop()
        done.add(node)

    for name in sorted(edges):
        if name != NAME:  # __init__ re-exports everything
            walk(name)


def test_no_module_over_500_lines_and_no_mixins() -> None:
    for name, path in modules().items():
        source = path.read_text(encoding="utf-8")
        assert source.count("\n") <= 500, f"{name} has {source.count(chr(10))} lines"
        tree = ast.parse(source)
        mixins = [
            n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and "Mixin" in n.name
        ]
        assert mixins == [], f"{name} defines mixins {mixins}"


def test_the_cli_and_the_engine_never_import_chromadb() -> None:
    """Chroma is one backend: only ``vectors/chroma*`` and the URL factory may load it."""
    for name, path in modules().items():
        if not name.startswith((f"{NAME}.cli", f"{NAME}.engine", f"{NAME}.recall")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
        }
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        chroma = {m for m in imported if m.startswith(("chromadb", f"{NAME}.vectors.chroma"))}
        assert chroma == set(), f"{name} imports {chroma}"
