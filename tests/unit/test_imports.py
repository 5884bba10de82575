"""The public API: `__all__` is exactly the expected list, and importing it stays light.

As in LangChain's partner packages, a name added to or removed from `__all__` must also
be added here: the public surface changes on purpose only.
"""

from __future__ import annotations

import ast
import importlib
from importlib import metadata
from pathlib import Path

import pytest

import langchain_semantic_recall

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_ALL = [
    "MEMORY_SOURCE",
    "BulkResult",
    "CompactNotSupportedError",
    "EmbeddingCache",
    "EmbeddingMismatchError",
    "EngineClosedError",
    "ExportNotSupportedError",
    "ForgottenThreadError",
    "ForkedEngineError",
    "IdentityMismatchError",
    "InMemoryStorage",
    "IndexInfo",
    "IndexNode",
    "IndexResult",
    "InvalidInputError",
    "InvalidOptionError",
    "MessageFate",
    "MessageRange",
    "MessageStorage",
    "MessageIdTakenError",
    "MissingIdentityError",
    "OwnershipError",
    "ReadOnlyError",
    "RecallHit",
    "RecallNode",
    "RecallState",
    "RecallReport",
    "RecallStats",
    "RetentionResult",
    "SQLiteStorage",
    "Scope",
    "SemanticRecall",
    "SemanticRecallChatHistory",
    "SemanticRecallError",
    "SemanticRecallMiddleware",
    "SemanticRecallRetriever",
    "StorageError",
    "ThreadOwnerError",
    "VectorIndex",
    "__version__",
    "create_memory_search_tool",
    "create_recall_graph",
]


def test_all_imports() -> None:
    assert sorted(langchain_semantic_recall.__all__) == sorted(EXPECTED_ALL)


def test_every_public_name_resolves() -> None:
    missing = [
        name
        for name in langchain_semantic_recall.__all__
        if not hasattr(langchain_semantic_recall, name)
    ]
    assert missing == []


def test_backend_author_types_live_in_storage_and_vectors() -> None:
    from langchain_semantic_recall import records, storage, vectors

    for name in ("MessageRecord", "StoredMessage", "ScopeFilter", "CompactResult"):
        assert getattr(storage, name) is getattr(records, name), name
        assert name in storage.__all__
    for name in ("VectorRecord", "VectorHit", "HeldVectors", "ScopeFilter", "CompactResult"):
        assert getattr(vectors, name) is getattr(records, name), name
        assert name in vectors.__all__


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("Identity", "langchain_semantic_recall.engine.identity"),
        ("IdentityKeys", "langchain_semantic_recall.engine.identity"),
        ("ScopeFilter", "langchain_semantic_recall.storage"),
        ("StoredMessage", "langchain_semantic_recall.storage"),
    ],
)
def test_moved_names_still_resolve_at_the_top_level_with_a_deprecation_warning(
    name: str, home: str
) -> None:
    with pytest.warns(DeprecationWarning, match=home.replace(".", r"\.")):
        value = getattr(langchain_semantic_recall, name)
    assert value is getattr(importlib.import_module(home), name)
    assert name not in langchain_semantic_recall.__all__


def test_version_comes_from_the_package_metadata() -> None:
    assert langchain_semantic_recall.__version__ == metadata.version("langchain-semantic-recall")
    source = (ROOT / "langchain_semantic_recall" / "__init__.py").read_text()
    assert "__version__ =" not in source  # pyproject.toml is the one place it is written


def test_every_error_class_is_defined_in_errors_and_exported() -> None:
    """No error class is defined outside errors.py; old import paths name the same class."""
    from langchain_semantic_recall import errors
    from langchain_semantic_recall.cli import common
    from langchain_semantic_recall.vectors import base

    package = ROOT / "langchain_semantic_recall"
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                assert path.name == "errors.py", f"{node.name} is defined in {path}"
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    }
    assert defined <= set(errors.__all__)
    user_facing = {
        name for name in defined if name not in {"CommandError", "NotFoundError", "UsageError"}
    }
    assert user_facing <= set(langchain_semantic_recall.__all__)
    assert base.ExportNotSupportedError is errors.ExportNotSupportedError
    assert common.CommandError is errors.CommandError
    assert common.UsageError is errors.UsageError
    assert common.NotFoundError is errors.NotFoundError
