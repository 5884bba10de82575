"""A read-only SQLite open never writes, and refuses to migrate an old schema."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.records import MessageRecord, ScopeFilter
from langchain_semantic_recall.storage.sqlite import _MIGRATIONS, SQLiteStorage

WHEN = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


def _record(message_id: str, seq: int) -> MessageRecord:
    return MessageRecord(message_id, "t1", "r1", "user", f"text {seq}", WHEN, "{}")


def test_a_read_only_sqlite_open_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "messages.sqlite3"
    writer = SQLiteStorage(path)
    writer.put([_record("m0", 0), _record("m1", 1)])
    writer.close()
    before = path.read_bytes()
    storage = SQLiteStorage(path, read_only=True)
    try:
        assert storage.read_only
        assert [m.id for m in storage.list_messages(ScopeFilter("r1"))] == ["m0", "m1"]
        assert storage.keyword_search("text", scope=ScopeFilter("r1"), limit=5)
        with pytest.raises(StorageError, match="opened read-only"):
            storage.put([_record("m2", 2)])
        with pytest.raises(StorageError, match="opened read-only"):
            storage.delete_thread("t1")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):  # the connection itself
            storage._conn.execute("CREATE TABLE probe (x)")
    finally:
        storage.close()
    assert path.read_bytes() == before


def test_a_read_only_open_refuses_to_migrate_an_old_schema(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    for statement in _MIGRATIONS[1]:
        assert isinstance(statement, str)
        raw.execute(statement)
    raw.execute("CREATE TABLE schema_version (version INTEGER)")
    raw.execute("INSERT INTO schema_version VALUES (1)")
    raw.commit()
    raw.close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match=r"schema version 1, older .* cannot be migrated"):
        SQLiteStorage(path, read_only=True)
    assert path.read_bytes() == before
    with pytest.raises(StorageError, match="does not exist"):
        SQLiteStorage(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()


def test_a_read_only_open_reads_a_version_3_file_as_it_is(tmp_path: Path) -> None:
    """Version 4 only indexed CJK text anew (character pairs): a file of the release
    before still answers a read-only open (the CLI's `threads`, `show`, `search`, `stats`),
    its CJK keyword search coarser until a writable open migrates it."""
    path = tmp_path / "v3.db"
    SQLiteStorage(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE schema_version SET version = 3")
    raw.close()
    before = path.read_bytes()
    storage = SQLiteStorage(path, read_only=True)
    storage.close()
    assert path.read_bytes() == before
    SQLiteStorage(path).close()  # a writable open migrates it
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
    raw.close()


def test_with_options_cannot_make_an_engine_on_a_read_only_storage_writable(
    tmp_path: Path,
) -> None:
    from langchain_semantic_recall import InvalidOptionError, SemanticRecall
    from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
    from tests.fakes import FakeEmbeddings

    path = tmp_path / "messages.sqlite3"
    SQLiteStorage(path).close()
    storage = SQLiteStorage(path, read_only=True)
    try:
        reader = SemanticRecall(
            storage=storage,
            vector_store=InMemoryVectorIndex(),
            embeddings=FakeEmbeddings(),
            read_only=True,
        )
        # Accepted, then every index failed with "opened read-only".
        with pytest.raises(InvalidOptionError, match="opened read-only"):
            reader.with_options(read_only=False)
        assert reader.with_options(top_k=2).read_only
    finally:
        storage.close()


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_an_engine_on_a_storage_opened_read_only_is_read_only(tmp_path: Path, twin: str) -> None:
    """It said it was writable, so `index` failed with "opened read-only" at the first
    write instead of reporting each message's fate, as a read-only engine does."""
    import asyncio

    from langchain_core.messages import HumanMessage

    from langchain_semantic_recall import SemanticRecall
    from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
    from tests.fakes import FakeEmbeddings

    path = tmp_path / "messages.sqlite3"
    SQLiteStorage(path).close()
    storage = SQLiteStorage(path, read_only=True)
    try:
        memory = SemanticRecall(
            storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
        )
        assert memory.read_only
        turn = [HumanMessage("my sister lives in Lisbon", id="m1")]
        if twin == "sync":
            result = memory.index(turn, thread_id="t", resource_id="alice")
        else:
            result = asyncio.run(memory.aindex(turn, thread_id="t", resource_id="alice"))
        assert (result.stored, result.error) == ((), None)
        assert result.skipped == {"m1": "read-only engine"}
    finally:
        storage.close()
