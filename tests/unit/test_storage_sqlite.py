"""SQLiteStorage runs the storage conformance suite, plus file-level checks of its own."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import unicodedata
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_semantic_recall.errors import ForgottenThreadError, SemanticRecallError, StorageError
from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter
from langchain_semantic_recall.storage import MessageStorage, SQLiteStorage
from langchain_semantic_recall.storage.sqlite import SCHEMA_VERSION
from langchain_semantic_recall.storage.sqlite_sql import count_sql, list_messages_sql, windows_sql
from tests.conformance.filter_suite import StorageFilterConformance
from tests.conformance.storage_suite import StorageConformance, make_record, make_thread


class TestSQLiteStorage(StorageConformance):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[MessageStorage]:
        storage = SQLiteStorage(tmp_path / "messages.db")
        yield storage
        storage.close()


class TestSQLiteInMemory(StorageConformance):
    @pytest.fixture
    def storage(self) -> Iterator[MessageStorage]:
        storage = SQLiteStorage(":memory:")
        yield storage
        storage.close()


class TestSQLiteFiltersOnPostings(StorageFilterConformance):
    """The same filter rules when keyword search runs on the in-memory postings."""

    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[MessageStorage]:
        storage = SQLiteStorage(tmp_path / "messages.db", keyword_cache_min_docs=1)
        storage._postings.first_search_in_sql = False
        yield storage
        storage.close()

    def test_keyword_searches_run_on_the_postings(self, filled: SQLiteStorage) -> None:
        scope = ScopeFilter("alice", metadata=(("project", ("apollo",)),))
        assert len(filled.keyword_search("lighthouse", scope=scope, limit=9)) == 3
        assert len(filled._postings) == 1

    def test_ids_and_shares_come_from_the_postings_once_loaded(self, filled: SQLiteStorage) -> None:
        apollo = ScopeFilter("alice", metadata=(("project", ("apollo",)),))
        assert filled.kept_share(apollo) is None  # not loaded yet: no estimate
        filled.keyword_search("lighthouse", scope=apollo, limit=1)
        assert filled.kept_share(apollo) == 0.6
        assert filled.kept_share(replace(apollo, thread_id="t2")) == 1.0
        assert filled.kept_share(replace(apollo, thread_id="t9")) is None
        held = filled._postings.loaded(filled._conn, "alice")
        assert held is not None
        assert held.in_scope(["p1", "p2", "b1", "x"], apollo) == ({"p1"}, ["b1", "x"])


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "messages.db"


def test_a_version_2_file_gains_metadata_and_keeps_its_rows(db_path: Path) -> None:
    from dataclasses import replace

    from langchain_semantic_recall.storage.sqlite import _MIGRATIONS

    raw = sqlite3.connect(db_path)
    for version in (1, 2):
        for step in _MIGRATIONS[version]:
            raw.execute(step) if isinstance(step, str) else step(raw)
    raw.execute("CREATE TABLE schema_version (version INTEGER)")
    raw.execute("INSERT INTO schema_version VALUES (2)")
    old = make_record("old", text="the lighthouse keeper")
    raw.execute("INSERT INTO threads VALUES ('t1', 'r1', 1, '2024-01-15T10:30:00.000000+00:00')")
    raw.execute(
        "INSERT INTO messages (id, thread_id, resource_id, role, text, created_at, payload, seq) "
        "VALUES (?, 't1', 'r1', 'user', ?, '2024-01-15T10:30:00.000000+00:00', ?, 0)",
        (old.id, old.text, old.payload),
    )
    raw.commit()
    raw.close()
    storage = SQLiteStorage(db_path)
    try:
        windows = storage.get_windows(["old"], before=0, after=0, scope=ScopeFilter("r1"))
        assert windows["old"][0].metadata == ()
        storage.put([replace(make_record("new", text="lighthouse"), metadata=(("k", "v"),))])
        apollo = ScopeFilter("r1", metadata=(("k", ("v",)),))
        assert [i for i, _ in storage.keyword_search("lighthouse", scope=apollo, limit=5)] == [
            "new"
        ]
    finally:
        storage.close()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()


def test_a_version_3_file_indexes_its_cjk_messages_anew(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 3 held a run of CJK characters as one term, which no question repeats, and
    cut a word at an accent typed as a combining mark (NFD); opening the file re-indexes
    the messages whose terms changed, and only them."""
    from langchain_semantic_recall.storage import sqlite_fts
    from langchain_semantic_recall.storage.sqlite import _MIGRATIONS

    raw = sqlite3.connect(db_path)
    for version in (1, 2, 3):
        for step in _MIGRATIONS[version]:
            raw.execute(step) if isinstance(step, str) else step(raw)
    raw.execute("CREATE TABLE schema_version (version INTEGER)")
    raw.execute("INSERT INTO schema_version VALUES (3)")
    raw.execute("INSERT INTO threads VALUES ('t1', 'r1', 3, '2024-01-15T10:30:00.000000+00:00')")
    texts = {
        "zh": "我对花生过敏，请记住。",
        "en": "the lighthouse keeper",
        "ko": "땅콩은 싫어요",
        "nfd": unicodedata.normalize("NFD", "allergique aux cacahuètes"),
        "fr": "un café crème",  # not ASCII, but its terms are the same: left as it was
    }
    for seq, (message_id, text) in enumerate(texts.items()):
        raw.execute(
            "INSERT INTO messages (id, thread_id, resource_id, role, text, created_at, "
            "payload, seq) VALUES (?, 't1', 'r1', 'user', ?, "
            "'2024-01-15T10:30:00.000000+00:00', ?, ?)",
            (message_id, text, make_record(message_id, text=text).payload, seq),
        )
    with monkeypatch.context() as old:  # the terms schema 3 wrote: whole runs
        old.setattr(sqlite_fts, "message_terms", lambda _role, text: text_runs(text))
        sqlite_fts.backfill(raw)
    kept = "SELECT message_id, doc FROM message_terms WHERE message_id IN ('en', 'fr')"
    unchanged = raw.execute(kept).fetchall()
    raw.commit()
    raw.close()
    storage = SQLiteStorage(db_path)
    try:
        scope = ScopeFilter("r1")
        assert [i for i, _ in storage.keyword_search("我对什么过敏？", scope=scope, limit=5)] == [
            "zh"
        ]
        assert [i for i, _ in storage.keyword_search("땅콩", scope=scope, limit=5)] == ["ko"]
        assert [i for i, _ in storage.keyword_search("lighthouse", scope=scope, limit=5)] == ["en"]
        found = storage.keyword_search("cacahuètes", scope=scope, limit=5)
        assert [i for i, _ in found] == ["nfd"]
    finally:
        storage.close()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert raw.execute(kept).fetchall() == unchanged  # left as they were
        totals = raw.execute("SELECT docs, terms FROM thread_terms").fetchall()
    raw.close()
    from langchain_semantic_recall.keywords import message_terms

    assert totals == [(5, sum(len(message_terms("user", t)) for t in texts.values()))]


def text_runs(text: str) -> list[str]:
    """Schema 3's terms of these texts: stems of whole runs of letters and digits."""
    from langchain_semantic_recall.keywords import STOP_WORDS, stem

    runs = re.findall(r"[^\W_]+", text.casefold())
    return [stem(run) for run in runs if run not in STOP_WORDS]


def test_data_survives_reopening(db_path: Path) -> None:
    storage = SQLiteStorage(db_path)
    storage.put(make_thread(3))
    storage.delete_thread("gone")
    storage.close()

    reopened = SQLiteStorage(str(db_path))
    try:
        messages = reopened.list_messages()
        assert [m.id for m in messages] == ["t1-m0", "t1-m1", "t1-m2"]
        assert messages[0].to_message().content == "text of t1-m0"
        [next_one] = reopened.put([make_record("t1-m3")])
        assert next_one.seq == messages[-1].seq + 1
        assert reopened.is_forgotten("gone")
        with pytest.raises(ForgottenThreadError):
            reopened.put([make_record("late", "gone")])
    finally:
        reopened.close()


def test_emptying_drops_the_keyword_rows_and_survives_reopening(db_path: Path) -> None:
    storage = SQLiteStorage(db_path)
    storage.put([make_record("a", text="violin lessons"), make_record("b", "t2", text="violin")])
    assert storage.delete_thread("t1", retire=False) == 1
    storage.close()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT thread_id, docs FROM thread_terms").fetchall() == [("t2", 1)]
        assert raw.execute("SELECT message_id FROM message_terms").fetchall() == [("b",)]
        assert raw.execute("SELECT COUNT(*) FROM message_fts").fetchone() == (1,)
        assert raw.execute("SELECT COUNT(*) FROM forgotten_threads").fetchone() == (0,)
        assert raw.execute("SELECT thread_id FROM threads").fetchall() == [("t2",)]
    raw.close()
    reopened = SQLiteStorage(db_path)
    try:
        assert not reopened.is_forgotten("t1")
        [again] = reopened.put([make_record("c", text="violin again")])
        assert again.seq == 0  # a new thread row: numbering starts afresh
        found = reopened.keyword_search("violin", scope=ScopeFilter(thread_id="t1"), limit=5)
        assert [message_id for message_id, _ in found] == ["c"]
    finally:
        reopened.close()


def test_wal_and_schema_version_are_on_disk(db_path: Path) -> None:
    SQLiteStorage(db_path).close()
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    raw.close()
    assert {"threads", "messages", "forgotten_threads", "schema_version"} <= tables
    assert SCHEMA_VERSION == 4


def test_newer_schema_is_refused(db_path: Path) -> None:
    SQLiteStorage(db_path).close()
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE schema_version SET version = 99")
    raw.close()
    with pytest.raises(StorageError, match="upgrade"):
        SQLiteStorage(db_path)


def test_missing_folders_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "messages.db"
    storage = SQLiteStorage(path)
    storage.put([make_record("m1")])
    storage.close()
    assert path.is_file()


def test_directory_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="is a directory") as info:
        SQLiteStorage(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_folder_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = blocker / "messages.db"
    with pytest.raises(StorageError, match="cannot create the folder") as info:
        SQLiteStorage(path)
    assert str(path) in str(info.value)


def test_file_that_is_not_a_database_is_refused(db_path: Path) -> None:
    db_path.write_bytes(b"definitely not sqlite " * 100)
    with pytest.raises(StorageError, match="SQLite database") as info:
        SQLiteStorage(db_path)
    assert str(db_path) in str(info.value)


@pytest.mark.parametrize("read_only", ["file", "folder"])
def test_read_only_paths_are_refused_even_for_root(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, read_only: str
) -> None:
    SQLiteStorage(db_path).close()
    locked = db_path if read_only == "file" else db_path.parent
    real_access = os.access

    def access(path: str | os.PathLike[str], mode: int) -> bool:
        if Path(path) == locked and mode & os.W_OK:
            return False
        return real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(StorageError, match=r"chmod|writable folder") as info:
        SQLiteStorage(db_path)
    assert str(db_path) in str(info.value)


def test_unwritable_location_is_refused() -> None:
    # /proc refuses new files even to root: a real read-only folder on any Linux machine.
    with pytest.raises(StorageError, match="/proc"):
        SQLiteStorage("/proc/semantic-recall-test.db")


def test_a_store_another_connection_keeps_locked_says_so(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the busy timeout it said "check that the file is writable, has free space",
    or on open "check that it is a SQLite database in a folder you can write"."""
    from langchain_semantic_recall.storage import sqlite_schema

    monkeypatch.setattr(sqlite_schema, "_BUSY_TIMEOUT_S", 0.2)
    storage = SQLiteStorage(db_path)
    storage.put([make_record("m1")])
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StorageError, match="stayed locked by another connection") as said:
            storage.put([make_record("m2")])
        assert "try again when it is done" in str(said.value)
        assert "free space" not in str(said.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    storage.put([make_record("m2")])  # the lock gone, the same write goes through
    assert storage.count() == 2
    storage.close()


def test_closed_storage_raises_storage_error(db_path: Path) -> None:
    storage = SQLiteStorage(db_path)
    storage.close()
    with pytest.raises(StorageError, match="still open"):
        storage.count()


def test_memory_databases_are_separate() -> None:
    first, second = SQLiteStorage(":memory:"), SQLiteStorage(":memory:")
    first.put(make_thread(2))
    assert second.count() == 0
    assert first.path == ":memory:"
    first.close()
    second.close()


@pytest.mark.parametrize(
    "scope", [ScopeFilter("r1"), ScopeFilter(thread_id="t1"), ScopeFilter("r1", "t1")]
)
def test_hot_queries_use_indexes(db_path: Path, scope: ScopeFilter) -> None:
    SQLiteStorage(db_path).close()
    queries = [
        windows_sql(["a", "b", "c"], 2, 1, scope),
        list_messages_sql(scope, ("t1", 3), 100),
        list_messages_sql(None, ("t1", 3), 100),
        count_sql(scope),
    ]
    with sqlite3.connect(db_path) as raw:
        for sql, params in queries:
            plan = [row[-1] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
            assert plan, sql
            assert not [step for step in plan if step.startswith("SCAN")], (sql, plan)
    raw.close()


WORDS = ("lighthouse", "keeper", "apollo", "river", "stone", "the")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
OPS = st.tuples(
    st.sampled_from(["put", "put", "put", "move", "adopt", "delete", "before", "forget"]),
    st.integers(0, 3),  # thread
    st.sampled_from(["r1", "r2", NO_RESOURCE]),
    st.integers(0, 9),  # day
    st.sampled_from([(), (("project", "apollo"),), (("project", "gemini"),)]),
    st.booleans(),  # written by the second storage (another process) rather than the first
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(OPS, min_size=1, max_size=25))
def test_ids_in_scope_from_the_postings_are_what_the_storage_holds(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]
) -> None:
    """After any writes, moves, adoptions, deletes and retention (also by another storage on
    the same file), the ids a filtered search keeps are those the storage reads back in
    scope: never another resource's, another thread's, or one outside the filter."""
    path = tmp_path_factory.mktemp("ids") / "messages.db"
    first = SQLiteStorage(path, keyword_cache_min_docs=1)
    first._postings.first_search_in_sql = False
    other = SQLiteStorage(path, keyword_cache_min_docs=1)
    made = 0
    try:
        for kind, thread_no, resource, day, meta, by_other in ops:
            who, thread = (other if by_other else first), f"t{thread_no}"
            with contextlib.suppress(SemanticRecallError):
                if kind == "put":
                    owner = who.get_thread_owner(thread) or resource
                    text = " ".join(WORDS[(made + i) % len(WORDS)] for i in range(3))
                    when = T0 + timedelta(days=day)
                    record = make_record(f"m{made}", thread, owner, text=text)
                    who.put([replace(record, created_at=when, metadata=meta)])
                    made += 1
                elif kind == "move":
                    who.move_thread(thread, to_resource="r2" if resource == "r1" else "r1")
                elif kind == "adopt":
                    who.adopt_thread(thread, "r1")
                elif kind == "delete":
                    who.delete_thread(thread, retire=False)
                elif kind == "before":
                    who.delete_before(T0 + timedelta(days=day // 3), ScopeFilter("r1"))
                else:
                    who.delete_resource("r2")
            asked = [f"m{i}" for i in range(made)] + ["unknown"]
            for owner in ("r1", "r2", NO_RESOURCE):
                first.keyword_search("lighthouse keeper", scope=ScopeFilter(owner), limit=3)
                for thread_id in (None, "t0", "t1"):
                    for scope in (
                        ScopeFilter(owner, thread_id, metadata=(("project", ("apollo",)),)),
                        ScopeFilter(owner, thread_id, since=T0 + timedelta(days=4)),
                    ):
                        held = set(first.get_windows(asked, before=0, after=0, scope=scope))
                        assert first.ids_in_scope(asked, scope) == held
    finally:
        first.close()
        other.close()


@pytest.mark.parametrize("period", [2, 4, 8])
def test_the_share_sample_does_not_alias_with_a_repeating_tag(period: int) -> None:
    """Tags that repeat every few messages (a question, then its answer) are measured as
    they are: evenly spaced samples would land on one tag only and say 1.0 or 0.0."""
    from langchain_semantic_recall.storage.postings import ResourcePostings

    rows = [
        (f"m{i}", "t1", "word", "2024-01-01T00:00:00.000000+00:00", f'{{"n": {i % period}}}')
        for i in range(32_768)  # 8 slots per sampled run: an even stride
    ]
    postings = ResourcePostings.build(rows)
    for value in range(period):
        scope = ScopeFilter("r1", metadata=(("n", (value,)),))
        assert postings.kept_share(scope) == pytest.approx(1 / period, abs=0.03)
