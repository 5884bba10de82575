"""Long threads: reads and deletes cost what they touch, not the length of the thread.

The figures (a 100k-message thread) are `benchmarks/perf_long_thread.py`'s; here the
work is counted: rows read from the storage, and calls made on the vector index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

LENGTH = 2_500  # more than two of the storage's 1,000-message pages


class CountingSQLite(SQLiteStorage):
    """A SQLite storage that counts the message rows its reads return."""

    rows_read = 0

    def _list_messages(self, *args: Any, **kwargs: Any) -> list[StoredMessage]:
        page = super()._list_messages(*args, **kwargs)
        self.rows_read += len(page)
        return page

    def _last_messages(self, *args: Any, **kwargs: Any) -> list[StoredMessage]:
        newest = super()._last_messages(*args, **kwargs)
        self.rows_read += len(newest)
        return newest


def long_thread_memory(tmp_path: Path) -> tuple[SemanticRecall, CountingSQLite]:
    storage = CountingSQLite(tmp_path / "m.db")
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings(8)
    )
    messages = [
        (HumanMessage if n % 2 == 0 else AIMessage)(f"message {n}", id=f"m{n}")
        for n in range(LENGTH)
    ]
    memory.index(messages, thread_id="long", resource_id="alice")
    storage.rows_read = 0
    return memory, storage


async def test_chat_history_last_n_reads_n_messages(tmp_path: Path) -> None:
    memory, storage = long_thread_memory(tmp_path)
    history = memory.chat_history("long", resource_id="alice", last=5)
    newest = [f"m{n}" for n in range(LENGTH - 5, LENGTH)]
    assert [m.id for m in history.messages] == newest
    assert storage.rows_read == 5
    assert [m.id for m in await history.aget_messages()] == newest
    assert storage.rows_read == 10
    whole = memory.chat_history("long", resource_id="alice").messages
    assert len(whole) == LENGTH  # without `last`: the whole thread, as before
    assert storage.last_messages(ScopeFilter("alice", "long"), limit=1)[0].id == f"m{LENGTH - 1}"
