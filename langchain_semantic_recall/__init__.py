"""Semantic recall over conversation history for LangChain and LangGraph agents.

Importing this package is cheap: every public name but the errors is imported on first
use (LangChain's tracers, numpy, chromadb and the local model load only when needed), so
`semantic-recall --help` and the storage-only commands start fast.

`__all__` holds what applications import. What backend authors need lives beside the
base classes: `langchain_semantic_recall.storage` (`StoredMessage`, `MessageRecord`,
`ScopeFilter`...) and `langchain_semantic_recall.vectors` (`VectorRecord`, `VectorHit`...).
"""

import warnings
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.errors import (
    CompactNotSupportedError,
    EmbeddingMismatchError,
    EngineClosedError,
    ExportNotSupportedError,
    ForgottenThreadError,
    ForkedEngineError,
    IdentityMismatchError,
    InvalidInputError,
    InvalidOptionError,
    MessageIdTakenError,
    MissingIdentityError,
    OwnershipError,
    ReadOnlyError,
    SemanticRecallError,
    StorageError,
    ThreadOwnerError,
)

if TYPE_CHECKING:  # imported on first use, see `_LAZY`
    from langchain_semantic_recall.chat_history import SemanticRecallChatHistory
    from langchain_semantic_recall.embeddings import EmbeddingCache
    from langchain_semantic_recall.engine.bulk_ops import BulkResult
    from langchain_semantic_recall.engine.maintenance_ops import RecallStats
    from langchain_semantic_recall.engine.retention_ops import RetentionResult
    from langchain_semantic_recall.graph import (
        IndexNode,
        RecallNode,
        RecallState,
        create_recall_graph,
    )
    from langchain_semantic_recall.messages import MEMORY_SOURCE
    from langchain_semantic_recall.middleware import SemanticRecallMiddleware
    from langchain_semantic_recall.options import MessageRange, Scope
    from langchain_semantic_recall.recall import IndexInfo, SemanticRecall
    from langchain_semantic_recall.recall_report import RecallReport
    from langchain_semantic_recall.records import IndexResult, MessageFate, RecallHit
    from langchain_semantic_recall.retriever import (
        SemanticRecallRetriever,
        create_memory_search_tool,
    )
    from langchain_semantic_recall.storage import InMemoryStorage, MessageStorage, SQLiteStorage
    from langchain_semantic_recall.vectors import VectorIndex

_LAZY = {
    "SemanticRecallChatHistory": "chat_history",
    "EmbeddingCache": "embeddings",
    "BulkResult": "engine.bulk_ops",
    "RecallStats": "engine.maintenance_ops",
    "RetentionResult": "engine.retention_ops",
    "IndexNode": "graph",
    "RecallNode": "graph",
    "RecallState": "graph",
    "create_recall_graph": "graph",
    "MEMORY_SOURCE": "messages",
    "SemanticRecallMiddleware": "middleware",
    "MessageRange": "options",
    "Scope": "options",
    "IndexInfo": "recall",
    "SemanticRecall": "recall",
    "RecallReport": "recall_report",
    "IndexResult": "records",
    "MessageFate": "records",
    "RecallHit": "records",
    "SemanticRecallRetriever": "retriever",
    "create_memory_search_tool": "retriever",
    "InMemoryStorage": "storage",
    "MessageStorage": "storage",
    "SQLiteStorage": "storage",
    "VectorIndex": "vectors",
}
"""Public name -> the submodule (under this package) that defines it."""


_MOVED = {
    "Identity": "engine.identity",
    "IdentityKeys": "engine.identity",
    "ScopeFilter": "storage",
    "StoredMessage": "storage",
}
"""Names once at the top level, for backend and surface authors: where they live now."""


def __getattr__(name: str) -> Any:
    """A public name, imported from its submodule when first used (then cached here)."""
    from importlib import import_module

    if name in _LAZY:
        value = getattr(import_module(f"langchain_semantic_recall.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name in _MOVED:  # not cached: every use from here is told where the name lives now
        home = f"langchain_semantic_recall.{_MOVED[name]}"
        warnings.warn(
            f"langchain_semantic_recall.{name} moved: import it from {home} "
            "(docs/migration-0.3.md); the top-level name goes away in a later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(import_module(home), name)
    if name == "__version__":  # read once, from the installed package's metadata
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("langchain-semantic-recall")
        except PackageNotFoundError:  # a source tree on sys.path, never installed
            value = "unknown"
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


__all__ = [
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
    "MessageIdTakenError",
    "MessageRange",
    "MessageStorage",
    "MissingIdentityError",
    "OwnershipError",
    "ReadOnlyError",
    "RecallHit",
    "RecallNode",
    "RecallReport",
    "RecallState",
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
