"""A store an earlier release wrote, opened by this one: nothing lost or unsearchable.

The old stores are built by writing this release's store and taking it back to the
earlier schema, as the migrations' own tests do (SQLite schema 2 and PostgreSQL schema 3
are the current tables less the `metadata` column): 0.1 and 0.2 wrote SQLite schema 2.
Checked by hand beside these tests: embedded stores written through the public API of
27f000c (0.1.0) and 26779ab (0.2.0), and PostgreSQL + a Chroma server written by
26779ab, search, count, list, export, forget, move and purge alike after the upgrade; a
store of af9fda1 (0.1.0, one shared Chroma collection) is refused until its index is
rebuilt (docs/migration-0.2.md, docs/migration-0.3.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import RecallStats, SemanticRecall
from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.records import MessageRecord, ScopeFilter
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.storage.sqlite import SCHEMA_VERSION, SQLiteStorage
from tests.fakes import FakeEmbeddings
from tests.unit import test_cli as unit
from tests.unit.test_cli import Cli, Embedder

pytestmark = pytest.mark.integration

# The fixtures of tests/unit/test_cli.py: the CLI's fake embedder, a plain terminal.
embedder = unit.embedder
plain_terminal = unit.plain_terminal

TRAVEL = (("project", "travel"),)
START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def turn() -> list[BaseMessage]:
    """Messages as 0.1 and 0.2 stored them: metadata in `additional_kwargs` only."""
    travel = {"metadata": {"project": "travel"}}
    return [
        HumanMessage("Plan my Lisbon trip in May", id="trip-1", additional_kwargs=travel),
        AIMessage("Lisbon in May is warm", id="trip-2"),
    ]


def records() -> list[MessageRecord]:
    """`turn()` as stored, and a message whose metadata today's `index` refuses (nested)."""
    nested = HumanMessage("Lisbon, a nested note", additional_kwargs={"metadata": {"a": {}}})
    messages = [*turn(), nested]
    return [
        MessageRecord(
            f"trip-{n}",
            "trip",
            "alice",
            "user",
            str(message.content),
            START,
            MessageRecord.dump(message),
        )
        for n, message in enumerate(messages, start=1)
    ]


def to_sqlite_schema_2(file: Path) -> None:
    """Take a SQLite store back to schema 2, the one 0.1 and 0.2 wrote."""
    raw = sqlite3.connect(file)
    raw.execute("ALTER TABLE messages DROP COLUMN metadata")
    raw.execute("UPDATE schema_version SET version = 2")
    raw.commit()
    raw.close()


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """An embedded store (SQLite + Chroma, fake embedder) as 0.2 left it."""
    store = tmp_path / "store"
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
        memory.index(turn()[:2], thread_id="trip", resource_id="alice")
    to_sqlite_schema_2(store / "messages.sqlite3")
    return store


def test_a_schema_2_sqlite_file_keeps_the_metadata_its_messages_carry(tmp_path: Path) -> None:
    """The migration added an empty column: every filter passed the older messages by."""
    file = tmp_path / "messages.sqlite3"
    storage = SQLiteStorage(file)
    storage.put(records())
    storage.close()
    to_sqlite_schema_2(file)
    check_kept(SQLiteStorage(file))


def check_kept(migrated: MessageStorage) -> None:
    """The carried metadata is the message's; a filter finds it (and only it)."""
    try:
        scope = ScopeFilter("alice")
        ids = ["trip-1", "trip-2", "trip-3"]
        windows = migrated.get_windows(ids, before=0, after=0, scope=scope)
        assert [windows[i][0].metadata for i in ids] == [TRAVEL, (), ()]
        travel = ScopeFilter("alice", metadata=(("project", ("travel",)),))
        hits = migrated.keyword_search("lisbon", scope=travel, limit=5)
        assert [message_id for message_id, _ in hits] == ["trip-1"]
    finally:
        migrated.close()


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (("threads",), "trip"),
        (("show", "trip"), "Lisbon in May is warm"),
        (("export", "--resource", "alice"), '"id": "trip-1"'),
        (("stats",), "2 of 2 embeddable"),
        (("search", "Lisbon trip", "--resource", "alice", "--threshold", "0"), "Lisbon"),
    ],
    ids=lambda value: value[0] if isinstance(value, tuple) else "",
)
def test_inspection_commands_work_on_a_store_an_earlier_release_wrote(
    old_store: Path,
    capsys: pytest.CaptureFixture[str],
    embedder: Embedder,
    command: tuple[str, ...],
    shown: str,
) -> None:
    """They open the store read-only, which refused the older schema ('a read-only store
    cannot be migrated; ... any command migrates it') until a command that writes ran."""
    cli = Cli(capsys, old_store)
    result = cli(*command)
    assert result.code == 0, result.err
    assert shown in result.out
    assert f"migrated it to schema {SCHEMA_VERSION}" in result.err
    again = cli(*command)
    assert (again.code, again.out) == (0, result.out)
    assert "migrated" not in again.err


def test_export_of_an_upgraded_store_keeps_the_metadata(
    old_store: Path, capsys: pytest.CaptureFixture[str], embedder: Embedder, tmp_path: Path
) -> None:
    out = tmp_path / "alice.jsonl"
    cli = Cli(capsys, old_store)
    assert cli("export", "--resource", "alice", "--output", str(out)).code == 0
    lines = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert lines["trip-1"]["metadata"] == {"project": "travel"}
    assert "metadata" not in lines["trip-2"]


def test_a_read_only_open_of_an_older_store_says_how_to_migrate(old_store: Path) -> None:
    file = old_store / "messages.sqlite3"
    before = file.read_bytes()
    with pytest.raises(StorageError, match=r"SemanticRecall\.local\(path\) or any semantic-recall"):
        SQLiteStorage(file, read_only=True)
    assert file.read_bytes() == before


def test_a_version_3_postgres_database_keeps_the_metadata_its_messages_carry(
    pg_url: str,
) -> None:
    storage = PostgresStorage(pg_url)
    storage.put(records())
    storage.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to a version-3 database
        conn.execute("ALTER TABLE semantic_recall_messages DROP COLUMN metadata")
        conn.execute("DELETE FROM semantic_recall_schema_version WHERE version > 3")
    check_kept(PostgresStorage(pg_url))


def strip_filter_fields(chroma: Path) -> int:
    """Make every vector as 0.1 and 0.2 wrote it: no created_ts, filterable or meta_<key>."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(str(chroma), settings=Settings(anonymized_telemetry=False))
    stripped = 0
    for collection in client.list_collections():
        rows = collection.get(include=["embeddings", "metadatas", "documents"])
        if not rows["ids"]:
            continue
        old = [
            {k: v for k, v in meta.items() if k not in ("created_ts", "filterable")}
            for meta in rows["metadatas"] or []
        ]
        old = [{k: v for k, v in meta.items() if not k.startswith("meta_")} for meta in old]
        collection.delete(ids=rows["ids"])
        collection.add(
            ids=rows["ids"],
            embeddings=rows["embeddings"],
            metadatas=old,  # type: ignore[arg-type]
            documents=rows["documents"],
        )
        stripped += len(rows["ids"])
    return stripped


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_reindex_missing_only_gives_older_vectors_their_metadata(tmp_path: Path, twin: str) -> None:
    """After the migration the messages had their metadata, their vectors not: a dense
    search filtered on it passed them by, and `reindex(missing_only=True)` (the repair
    the docs name) wrote nothing, since every message had a vector."""
    store = tmp_path / "store"
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
        memory.index(turn(), thread_id="trip", resource_id="alice")
        memory.index([HumanMessage("unrelated", id="other")], thread_id="t2", resource_id="bob")
    assert strip_filter_fields(store / "chroma") == 3
    to_sqlite_schema_2(store / "messages.sqlite3")
    travel = {"project": "travel"}
    with SemanticRecall.local(
        store, embeddings=FakeEmbeddings(), search_mode="dense", threshold=0
    ) as memory:
        assert memory.search("Lisbon", resource_id="alice", filter=travel) == []
        if twin == "sync":
            written = memory.reindex(missing_only=True)
        else:
            written = asyncio.run(memory.areindex(missing_only=True))
        assert written == 1  # trip-1; trip-2 and bob's message carry no metadata
        hits = memory.search("Lisbon", resource_id="alice", filter=travel)
        assert [hit.message.id for hit in hits] == ["trip-1"]
        assert memory.reindex(missing_only=True) == 0
        assert memory.stats().missing_vectors == 0


def test_stats_counts_older_vectors_lacking_their_metadata_until_the_repair(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`stats` said "missing 0" while the vectors written before 0.3 lacked their
    message's metadata: nothing told a user that `reindex --missing-only` had work.
    Both readers count them: Chroma's file (no chromadb) and chromadb."""
    from langchain_semantic_recall.cli import admin

    store = tmp_path / "store"
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
        memory.index(turn(), thread_id="trip", resource_id="alice")
        memory.index([HumanMessage("unrelated", id="other")], thread_id="t2", resource_id="bob")
    strip_filter_fields(store / "chroma")
    to_sqlite_schema_2(store / "messages.sqlite3")
    cli = Cli(capsys, store)
    shown = cli("stats")
    assert shown.code == 0, shown.err
    assert "1 without their message's metadata" in shown.out
    assert "repair     semantic-recall reindex --missing-only" in shown.out

    def counted(*scope: str) -> int:
        result = cli("stats", "--json", *scope)
        assert result.code == 0, result.err
        return int(json.loads(result.out)["vectors_without_metadata"])

    assert (counted(), counted("--resource", "alice"), counted("--resource", "bob")) == (1, 1, 0)
    assert counted("--thread", "trip") == 1
    file_stats = admin._file_stats
    through_chromadb = {"file": 0}

    def no_file(args: object) -> None:
        through_chromadb["file"] += 1

    monkeypatch.setattr(admin, "_file_stats", no_file)
    assert (counted(), counted("--resource", "alice"), counted("--resource", "bob")) == (1, 1, 0)
    assert through_chromadb["file"] == 3
    assert cli("reindex", "--missing-only").code == 0
    assert counted() == 0
    monkeypatch.setattr(admin, "_file_stats", file_stats)
    assert counted() == 0
    assert "without their message's metadata" not in cli("stats").out


@pytest.mark.parametrize("repair", [("reindex", "--missing-only"), ("reindex",)], ids=" ".join)
def test_chunks_an_edit_to_a_shorter_text_left_are_counted_and_removed(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
    repair: tuple[str, ...],
) -> None:
    """Before this release an edit to a shorter text overwrote its message's first chunk
    only: the old text's later chunks stayed, a search found the message by words it no
    longer holds, and no count or repair saw them. Both readers of `stats` count them
    (Chroma's file and chromadb); either reindex removes them, on the embedded default."""
    from langchain_semantic_recall.cli import admin
    from tests.unit.test_stray_chunks import LONG, leave_old_chunks

    store = tmp_path / "store"
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
        memory.index(
            [HumanMessage("Book the Lisbon hotel", id="edited"), HumanMessage(LONG, id="long")],
            thread_id="trip",
            resource_id="alice",
        )
        memory.index([HumanMessage("unrelated", id="other")], thread_id="t2", resource_id="bob")
        leave_old_chunks(memory, "edited", "trip", "alice")
    cli = Cli(capsys, store)

    def found() -> list[str]:
        with SemanticRecall.local(
            store, embeddings=FakeEmbeddings(), search_mode="dense", threshold=0.5
        ) as memory:
            return [h.message.id for h in memory.search("zeppelin airship", resource_id="alice")]

    def counted(*scope: str) -> int:
        result = cli("stats", "--json", *scope)
        assert result.code == 0, result.err
        return int(json.loads(result.out)["stray_vectors"])

    assert found() == ["edited"]
    file_stats = admin._file_stats
    read: list[bool] = []

    def from_file(args: argparse.Namespace) -> RecallStats | None:
        stats = file_stats(args)
        read.append(stats is not None)
        return stats

    monkeypatch.setattr(admin, "_file_stats", from_file)
    shown = cli("stats")
    assert "2 beyond their message's text" in shown.out, shown.out
    assert "repair     semantic-recall reindex --missing-only" in shown.out
    assert (counted(), counted("--resource", "alice"), counted("--resource", "bob")) == (2, 2, 0)
    assert read == [True] * 4  # Chroma's file told them
    monkeypatch.setattr(admin, "_file_stats", lambda args: None)  # chromadb counts them
    assert (counted(), counted("--resource", "alice"), counted("--thread", "trip")) == (2, 2, 2)
    repaired = cli(*repair)
    assert repaired.code == 0, repaired.err
    assert "Deleted 2 vector(s) beyond their message's text." in repaired.out
    assert counted() == 0
    monkeypatch.setattr(admin, "_file_stats", file_stats)
    assert counted() == 0
    assert found() == []
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
        name = memory.ensure_index().name
        assert memory.vector_store.vector_ids(name).by_message() == {
            "edited": frozenset({"edited"}),
            "long": frozenset({"long", "long#1"}),
            "other": frozenset({"other"}),
        }
