"""Docstrings are Markdown with Google sections: no reST roles or literal blocks.

LangChain's reference docs render docstrings as Markdown, so `:class:`X`` shows up as
raw text and an `Example::` block as a paragraph. Names go in backticks and examples in
```` ```python ```` fences. Every docstring of the package is read from the source (module,
class, function and attribute docstrings alike), so no module needs importing.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import warnings
from pathlib import Path
from typing import Any

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


# --- `Args:` sections on the public API --------------------------------------------------------

PUBLIC_MODULES = (
    "langchain_semantic_recall",
    "langchain_semantic_recall.bulk",
    "langchain_semantic_recall.chat_history",
    "langchain_semantic_recall.embeddings",
    "langchain_semantic_recall.errors",
    "langchain_semantic_recall.evaluation",
    "langchain_semantic_recall.graph",
    "langchain_semantic_recall.importers",
    "langchain_semantic_recall.local_embeddings",
    "langchain_semantic_recall.middleware",
    "langchain_semantic_recall.offline",
    "langchain_semantic_recall.options",
    "langchain_semantic_recall.recall",
    "langchain_semantic_recall.records",
    "langchain_semantic_recall.retriever",
    "langchain_semantic_recall.settings",
    "langchain_semantic_recall.storage",
    "langchain_semantic_recall.storage.postgres",
    "langchain_semantic_recall.vectors",
    "langchain_semantic_recall.vectors.langchain",
)
"""The modules users and backend authors import: every name of their `__all__` is public."""

PENDING: tuple[str, ...] = ()
"""Files whose public callables may still lack `Args:` sections (none: keep it empty)."""


def _has_args(doc: str | None) -> bool:
    return doc is not None and any(line.strip() == "Args:" for line in doc.splitlines())


def _ours(obj: object) -> str | None:
    """The path of `obj`'s source under the package, or None (generated, or not ours)."""
    try:
        source = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except TypeError:
        return None
    if source is None or (
        Path(source).resolve().parent != PACKAGE and PACKAGE not in (Path(source).resolve().parents)
    ):
        return None
    return str(Path(source).resolve().relative_to(PACKAGE))


def _parameters(function: Any, *, method: bool = False) -> list[str]:
    """The parameters a caller passes (a method's first one, whatever its name, is bound)."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []
    if method:
        names = names[1:]
    return [name for name in names if name not in ("self", "cls")]


def _documented(function: Any, owner: type | None, name: str) -> bool:
    """An `Args:` section here, an async twin's pointer, or a documented base method's."""
    doc = inspect.getdoc(function)
    if _has_args(doc) or (doc or "").startswith("Async twin of"):
        return True
    bases = owner.__mro__[1:] if owner is not None else ()
    return any(_has_args(inspect.getdoc(getattr(base, name, None))) for base in bases)


def missing_args() -> list[str]:
    """Public callables that take parameters and say nothing of them, as `file: name`."""
    found: set[str] = set()

    def check(function: Any, owner: type | None, name: str, *, method: bool = False) -> None:
        function = inspect.unwrap(function)
        where = _ours(function) if inspect.isfunction(function) else None
        if where is None or where.startswith(PENDING):
            return
        if not _parameters(function, method=method):
            return
        if not _documented(function, owner, name):
            found.add(f"{where}: {function.__qualname__}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in PUBLIC_MODULES:
            module = importlib.import_module(module_name)
            for public in getattr(module, "__all__", ()):
                obj = getattr(module, public)
                if not inspect.isclass(obj):
                    if callable(obj):
                        check(obj, None, public)
                    continue
                where = _ours(obj)
                init = obj.__dict__.get("__init__")
                constructor = (  # a class documents its constructor in its own docstring
                    where is not None
                    and not where.startswith(PENDING)
                    and init is not None
                    and _ours(init) is not None
                    and _parameters(init, method=True)
                )
                if constructor and not (
                    _has_args(inspect.getdoc(obj)) or _has_args(inspect.getdoc(init))
                ):
                    found.add(f"{where}: {obj.__qualname__}.__init__")
                for name, member in vars(obj).items():
                    if name.startswith("_"):
                        continue
                    if isinstance(member, classmethod | staticmethod):
                        check(member.__func__, obj, name, method=isinstance(member, classmethod))
                    else:
                        check(member, obj, name, method=True)
    return sorted(found)


def test_public_callables_that_take_arguments_document_them() -> None:
    """Google style `Args:` on every public function, method and constructor with parameters.

    An async twin may say only "Async twin of `x`."; an override inherits its base's section.
    """
    assert missing_args() == []


def test_the_args_check_finds_an_undocumented_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_semantic_recall import settings

    def redact(url: str) -> str:
        """Undocumented parameter."""
        return url

    redact.__module__ = settings.__name__
    redact.__code__ = redact.__code__.replace(co_filename=settings.__file__)
    monkeypatch.setattr(settings, "redact", redact)
    assert "settings.py: test_the_args_check_finds_an_undocumented_parameter.<locals>.redact" in (
        missing_args()
    )
