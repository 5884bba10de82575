"""Message storage backends: in-memory (tests, notebooks), SQLite (embedded default)."""

from langchain_semantic_recall.storage.base import MessageStorage, ThreadInfo
from langchain_semantic_recall.storage.memory import InMemoryStorage
from langchain_semantic_recall.storage.sqlite import SQLiteStorage

__all__ = ["InMemoryStorage", "MessageStorage", "SQLiteStorage", "ThreadInfo"]
