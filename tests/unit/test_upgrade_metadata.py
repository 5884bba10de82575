"""The schema migration keeps the metadata a message carried as today's `index` would.

0.1 and 0.2 stored a message's `additional_kwargs["metadata"]` in its payload only; the
migration to SQLite schema 3 copies it into the `metadata` column. For generated
metadata (valid, nested, reserved keys, odd values), each migrated message holds what
`messages.record_for` keeps for the same message today, or none where it refuses it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, RecallStats, SemanticRecall
from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.messages import record_for
from langchain_semantic_recall.records import (
    HeldVectors,
    MessageRecord,
    MetadataItems,
    ScopeFilter,
)
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

_KEYS = st.one_of(
    st.sampled_from(["project", "urgent", "n", "resource_id", "thread_id", "meta_x", "$or"]),
    st.text(max_size=6),
)
_SCALARS = st.one_of(
    st.text(max_size=8),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2), st.dictionaries(_KEYS, _SCALARS))
CARRIED = st.one_of(
    st.none(), st.dictionaries(_KEYS, _VALUES, max_size=4), st.lists(_SCALARS, max_size=2)
)


def kept_today(message: HumanMessage) -> MetadataItems:
    """What `index` keeps of the message's metadata today (none where it refuses it)."""
    try:
        record = record_for(
            message, position=0, thread_id="t", resource_id="alice", now=NOW, fresh_id=False
        )
    except InvalidInputError:
        return ()
    return record.metadata


def write_schema_2(path: Path, messages: list[HumanMessage]) -> None:
    """A store as 0.2 left it: the messages stored, no metadata column, schema 2."""
    storage = SQLiteStorage(path)
    storage.put(
        [
            MessageRecord(
                str(message.id), "t", "alice", "user", "text", NOW, MessageRecord.dump(message)
            )
            for message in messages
        ]
    )
    storage.close()
    raw = sqlite3.connect(path)
    raw.execute("ALTER TABLE messages DROP COLUMN metadata")
    raw.execute("UPDATE schema_version SET version = 2")
    raw.commit()
    raw.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CARRIED, min_size=1, max_size=5))
def test_migrated_messages_hold_the_metadata_index_keeps(carried: list[object]) -> None:
    messages = [
        HumanMessage("text", id=f"m{n}", additional_kwargs={"metadata": value})
        for n, value in enumerate(carried)
    ]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "messages.sqlite3"
        write_schema_2(path, messages)
        migrated = SQLiteStorage(path)
        try:
            ids = [str(message.id) for message in messages]
            windows = migrated.get_windows(ids, before=0, after=0, scope=ScopeFilter("alice"))
            found = [windows[i][0].metadata for i in ids]
        finally:
            migrated.close()
    assert found == [kept_today(message) for message in messages]


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_stats_counts_the_vectors_that_lack_their_messages_metadata(twin: str) -> None:
    """Vectors written before 0.3 lack the metadata the migration gave their messages: a
    filtered vector search passes them by, yet `stats` said "missing 0", so nothing told
    a user that `reindex(missing_only=True)` had work to do."""
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    travel = {"metadata": {"project": "travel"}}
    memory.index(
        [HumanMessage("Plan my Lisbon trip", id="trip-1", additional_kwargs=travel)],
        thread_id="trip",
        resource_id="alice",
    )
    memory.index([AIMessage("Lisbon is warm", id="trip-2")], thread_id="trip", resource_id="alice")
    memory.index(
        [HumanMessage("Bob's trip", id="bob-1", additional_kwargs=travel)],
        thread_id="b",
        resource_id="bob",
    )

    def stats(resource_id: str | None = None) -> RecallStats:
        if twin == "sync":
            return memory.stats(resource_id=resource_id)
        return asyncio.run(memory.astats(resource_id=resource_id))

    assert stats().vectors_without_metadata == 0
    name = memory.ensure_index().name
    index = memory.vector_store
    assert isinstance(index, InMemoryVectorIndex)
    rows = [r for r in index.export(name, ScopeFilter("alice")) if r.message_id == "trip-1"]
    index.upsert(name, [replace(r, metadata=()) for r in rows])  # as 0.2 wrote it
    assert (stats().vectors_without_metadata, stats().missing_vectors) == (1, 0)
    assert stats("bob").vectors_without_metadata == 0
    assert stats("alice").vectors_without_metadata == 1
    assert memory.reindex(missing_only=True) == 1
    assert stats().vectors_without_metadata == 0


class _Recording(InMemoryVectorIndex):
    """Records the scopes of `message_ids` and `vector_ids` reads."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: list[ScopeFilter | None] = []

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        self.scopes.append(scope)
        return super()._message_ids(name, scope)

    def _vector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        self.scopes.append(scope)
        return super()._vector_ids(name, scope)


def test_a_threads_stats_reads_only_that_threads_vectors_for_the_metadata_check() -> None:
    """`stats(thread_id=...)` of one thread of a big resource stays as cheap as before:
    the metadata check reads the thread's vectors, not the whole resource's."""
    index = _Recording()
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=index, embeddings=FakeEmbeddings()
    )
    travel = {"metadata": {"project": "travel"}}
    for thread in ("t1", "t2"):
        memory.index(
            [HumanMessage(f"note {thread}", id=f"{thread}-m", additional_kwargs=travel)],
            thread_id=thread,
            resource_id="alice",
        )
    index.scopes.clear()
    assert memory.stats(thread_id="t1", resource_id="alice").vectors_without_metadata == 0
    assert index.scopes
    assert all(scope is not None and scope.thread_id == "t1" for scope in index.scopes)
