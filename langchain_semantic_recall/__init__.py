"""Semantic recall over conversation history for LangChain and LangGraph agents.

Importing this package is cheap: chromadb and the local model load on first use.
"""

from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.chat_history import SemanticRecallChatHistory
from langchain_semantic_recall.embeddings import EmbeddingCache
from langchain_semantic_recall.engine.identity import Identity, IdentityKeys
from langchain_semantic_recall.engine.index_ops import BulkResult
from langchain_semantic_recall.engine.maintenance_ops import RecallStats
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    ForgottenThreadError,
    IdentityMismatchError,
    InvalidInputError,
    InvalidOptionError,
    MissingIdentityError,
    OwnershipError,
    ReadOnlyError,
    SemanticRecallError,
    StorageError,
)
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.options import MessageRange, Scope
from langchain_semantic_recall.recall import IndexInfo, SemanticRecall
from langchain_semantic_recall.records import (
    IndexResult,
    MessageFate,
    RecallHit,
    ScopeFilter,
    StoredMessage,
)
from langchain_semantic_recall.retriever import SemanticRecallRetriever, create_memory_search_tool
from langchain_semantic_recall.storage import InMemoryStorage, MessageStorage, SQLiteStorage
from langchain_semantic_recall.vectors import VectorIndex

if TYPE_CHECKING:  # imported on first use (LangGraph and LangChain agents load slowly)
    from langchain_semantic_recall.graph import (
        IndexNode,
        RecallNode,
        RecallState,
        create_recall_graph,
    )
    from langchain_semantic_recall.middleware import SemanticRecallMiddleware

_LAZY = {
    "IndexNode": "graph",
    "RecallNode": "graph",
    "RecallState": "graph",
    "create_recall_graph": "graph",
    "SemanticRecallMiddleware": "middleware",
}


def __getattr__(name: str) -> Any:
    """The LangGraph and agent surfaces, imported when first used."""
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"langchain_semantic_recall.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.2.0"

__all__ = [
    "MEMORY_SOURCE",
    "BulkResult",
    "EmbeddingCache",
    "EmbeddingMismatchError",
    "ForgottenThreadError",
    "Identity",
    "IdentityKeys",
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
    "MissingIdentityError",
    "OwnershipError",
    "ReadOnlyError",
    "RecallHit",
    "RecallNode",
    "RecallState",
    "RecallStats",
    "SQLiteStorage",
    "Scope",
    "ScopeFilter",
    "SemanticRecall",
    "SemanticRecallChatHistory",
    "SemanticRecallError",
    "SemanticRecallMiddleware",
    "SemanticRecallRetriever",
    "StorageError",
    "StoredMessage",
    "VectorIndex",
    "__version__",
    "create_memory_search_tool",
    "create_recall_graph",
]
