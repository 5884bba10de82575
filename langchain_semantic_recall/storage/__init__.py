"""Message storage backends: in-memory (tests, notebooks), SQLite (embedded default).

Also the records a storage backend reads and writes (`MessageRecord` in, `StoredMessage`
out, `ScopeFilter` to select), for authors of a backend (docs/writing-a-backend.md).
"""

from langchain_semantic_recall.records import (
    CompactResult,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
)
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.memory import InMemoryStorage
from langchain_semantic_recall.storage.sqlite import SQLiteStorage

__all__ = [
    "CompactResult",
    "InMemoryStorage",
    "MessageRecord",
    "MessageStorage",
    "SQLiteStorage",
    "ScopeFilter",
    "StoredMessage",
    "ThreadInfo",
]
