"""Semantic recall over conversation history for LangChain and LangGraph agents.

Importing this package is cheap: chromadb and the local model load on first use.
"""

from langchain_semantic_recall.embeddings import EmbeddingCache
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    ForgottenThreadError,
    InvalidInputError,
    InvalidOptionError,
    OwnershipError,
    SemanticRecallError,
    StorageError,
)
from langchain_semantic_recall.maintenance import RecallStats
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.options import MessageRange, Scope
from langchain_semantic_recall.recall import IndexInfo, SemanticRecall
from langchain_semantic_recall.records import IndexResult, RecallHit, ScopeFilter, StoredMessage
from langchain_semantic_recall.storage import InMemoryStorage, MessageStorage, SQLiteStorage
from langchain_semantic_recall.vectors import VectorIndex

__version__ = "0.1.0"

__all__ = [
    "MEMORY_SOURCE",
    "EmbeddingCache",
    "EmbeddingMismatchError",
    "ForgottenThreadError",
    "InMemoryStorage",
    "IndexInfo",
    "IndexResult",
    "InvalidInputError",
    "InvalidOptionError",
    "MessageRange",
    "MessageStorage",
    "OwnershipError",
    "RecallHit",
    "RecallStats",
    "SQLiteStorage",
    "Scope",
    "ScopeFilter",
    "SemanticRecall",
    "SemanticRecallError",
    "StorageError",
    "StoredMessage",
    "VectorIndex",
    "__version__",
]
