"""PostgresStorage against a real PostgreSQL: the storage conformance suite, then its own."""

from __future__ import annotations

import asyncio
import itertools
import unicodedata
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import InvalidInputError, StorageError
from langchain_semantic_recall.records import MessageRecord, ScopeFilter
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.postgres import SCHEMA_VERSION, PostgresStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.conformance.generated_filters import FILTERS, ROWS, Row, check_reads
from tests.conformance.storage_suite import StorageConformance, make_record, make_thread
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.integration


class TestPostgresStorage(StorageConformance):
    @pytest.fixture
    async def storage(self, pg_url: str) -> AsyncIterator[MessageStorage]:
        storage = PostgresStorage(pg_url, max_size=10)
        yield storage
        # Closed in the test's own loop, as a caller would; a pool left open is closed with
        # its loop (test_postgres_event_loops.py: that teardown used to hang).
        await storage.aclose()


@pytest.fixture
def storage(pg_url: str) -> Iterator[PostgresStorage]:
    storage = PostgresStorage(pg_url)
    yield storage
    storage.close()


def test_schema_version_and_indexes(storage: PostgresStorage, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM semantic_recall_schema_version").fetchall()
        indexes = {
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'semantic_recall_messages'"
            )
        }
        collation = conn.execute(
            "SELECT collation_name FROM information_schema.columns "
            "WHERE table_name = 'semantic_recall_messages' AND column_name = 'thread_id'"
        ).fetchone()
    assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))
    assert {"semantic_recall_messages_resource", "semantic_recall_messages_tsv"} <= indexes
    assert collation == ("C",)


def test_reopening_keeps_data_and_migrates_once(storage: PostgresStorage, pg_url: str) -> None:
    storage.put(make_thread(3))
    storage.delete_thread("gone")
    again = PostgresStorage(pg_url)
    try:
        assert [m.id for m in again.list_messages()] == ["t1-m0", "t1-m1", "t1-m2"]
        assert again.is_forgotten("gone")
        assert again.put([make_record("t1-m3")])[0].seq == 3
    finally:
        again.close()


def test_old_schema_is_migrated_with_keyword_backfill(pg_url: str) -> None:
    storage = PostgresStorage(pg_url)
    storage.put([make_record("m1", text="Painting the garden fence")])
    storage.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to a version-1 database
        conn.execute("DROP INDEX semantic_recall_messages_tsv")
        conn.execute(
            "ALTER TABLE semantic_recall_messages DROP COLUMN terms, DROP COLUMN term_count, "
            "DROP COLUMN tsv, DROP COLUMN metadata"
        )
        conn.execute("DELETE FROM semantic_recall_schema_version WHERE version > 1")
    migrated = PostgresStorage(pg_url)
    try:
        hits = migrated.keyword_search("painted", scope=ScopeFilter("r1"), limit=5)
        assert [message_id for message_id, _ in hits] == ["m1"]
    finally:
        migrated.close()


def test_a_version_3_database_gains_metadata_and_keeps_its_rows(pg_url: str) -> None:
    from dataclasses import replace

    storage = PostgresStorage(pg_url)
    storage.put([make_record("old", text="the lighthouse keeper")])
    storage.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to a version-3 database
        conn.execute("ALTER TABLE semantic_recall_messages DROP COLUMN metadata")
        conn.execute("DELETE FROM semantic_recall_schema_version WHERE version > 3")
    migrated = PostgresStorage(pg_url)
    try:
        scope = ScopeFilter("r1")
        assert (
            migrated.get_windows(["old"], before=0, after=0, scope=scope)["old"][0].metadata == ()
        )
        migrated.put([replace(make_record("new", text="lighthouse"), metadata=(("k", "v"),))])
        tagged = ScopeFilter("r1", metadata=(("k", ("v",)),))
        hits = migrated.keyword_search("lighthouse", scope=tagged, limit=5)
        assert [message_id for message_id, _ in hits] == ["new"]
    finally:
        migrated.close()


def test_a_version_4_database_indexes_its_cjk_messages_anew(pg_url: str) -> None:
    """Schema 4 held a run of CJK characters as one term, which no question repeats, and
    cut a word at an accent typed as a combining mark (NFD); the migration re-indexes
    the messages whose terms changed, and only them."""
    storage = PostgresStorage(pg_url)
    storage.put(
        [
            make_record("zh", text="我对花生过敏，请记住。"),
            make_record("en", text="the lighthouse keeper"),
            make_record("fr", text="un café crème"),
            make_record("nfd", text=unicodedata.normalize("NFD", "aux cacahuètes")),
        ]
    )
    storage.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to a version-4 database
        conn.execute(
            "UPDATE semantic_recall_messages SET terms = %s, term_count = 2, "
            "tsv = array_to_tsvector(%s) WHERE id = 'zh'",
            (["我对花生过敏", "请记住"], ["我对花生过敏", "请记住"]),
        )
        conn.execute(
            "UPDATE semantic_recall_messages SET terms = %s, term_count = 3, "
            "tsv = array_to_tsvector(%s) WHERE id = 'nfd'",
            (["aux", "cacahu", "te"], ["aux", "cacahu", "te"]),
        )
        conn.execute("UPDATE semantic_recall_messages SET term_count = 99 WHERE id IN ('en', 'fr')")
        conn.execute("DELETE FROM semantic_recall_schema_version WHERE version > 4")
    migrated = PostgresStorage(pg_url)
    try:
        hits = migrated.keyword_search("我对什么过敏？", scope=ScopeFilter("r1"), limit=5)
        assert [message_id for message_id, _ in hits] == ["zh"]
        hits = migrated.keyword_search("cacahuètes", scope=ScopeFilter("r1"), limit=5)
        assert [message_id for message_id, _ in hits] == ["nfd"]
    finally:
        migrated.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, term_count FROM semantic_recall_messages").fetchall()
    counts: dict[str, int] = dict(rows)
    from langchain_semantic_recall.keywords import message_terms

    zh = len(message_terms("user", "我对花生过敏，请记住。"))
    nfd = len(message_terms("user", "aux cacahuètes"))
    assert counts == {"zh": zh, "nfd": nfd, "en": 99, "fr": 99}  # the others left as they were


def test_an_app_role_without_create_opens_a_store_an_admin_made(pg_url: str) -> None:
    """Every open asked `CREATE TABLE IF NOT EXISTS` of the version table, which
    PostgreSQL refuses without the schema's CREATE right even when the table exists: a
    role given only its tables' rows (the least privilege an app needs) never opened
    the store (an audit). CREATE is needed the first time only, as the docs say."""
    PostgresStorage(pg_url).close()  # the admin makes the schema
    role = f"app_{uuid.uuid4().hex[:8]}"
    grants = [
        f"CREATE ROLE {role} LOGIN",
        f"GRANT USAGE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in grants:
            conn.execute(statement)
    parts = urlsplit(pg_url)
    app_url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    try:
        with psycopg.connect(app_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE probe (x INTEGER)")  # the role cannot create
        storage = PostgresStorage(app_url)
        try:
            storage.put([make_record("m1", "t1", "alice", text="hello there")])
            assert [m.text for m in storage.list_messages()] == ["hello there"]
        finally:
            storage.close()
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_newer_schema_is_refused(storage: PostgresStorage, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO semantic_recall_schema_version (version) VALUES (99)")
    with pytest.raises(StorageError, match="newer"):
        PostgresStorage(pg_url)


async def test_nul_in_text_is_refused_clearly(storage: PostgresStorage) -> None:
    # Ids with NUL are refused by every backend (the conformance suite); text with NUL is
    # PostgreSQL's own limit (``text`` columns cannot hold it), so only this backend refuses.
    batch = [make_record("m0"), make_record("m1", text="a\x00b")]
    with pytest.raises(InvalidInputError, match="NUL"):
        storage.put(batch)
    assert storage.count() == 0
    assert storage.get_thread_owner("t1") is None
    try:
        with pytest.raises(InvalidInputError, match="NUL"):
            await storage.aput(batch)
        assert await storage.acount() == 0
    finally:
        # Closed in this loop, as a caller would (left open, the loop's teardown closes it).
        await storage.aclose()


def test_unreachable_server_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="cannot open PostgreSQL"):
        PostgresStorage("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_keyword_search_ranks_by_bm25_within_scope(storage: PostgresStorage) -> None:
    storage.put(
        [
            make_record("a", "t1", "r1", text="We painted the kitchen blue"),
            make_record("b", "t1", "r1", role="assistant", text="Blue paint, painting again"),
            make_record("c", "t2", "r1", text="Groceries for the week"),
            make_record("s", "t1", "r1", role="system", text="paint paint paint"),
            make_record("x", "t9", "r2", text="painting painting painting"),
        ]
    )
    hits = storage.keyword_search("Painting?", scope=ScopeFilter("r1"), limit=10)
    assert [message_id for message_id, _ in hits] == ["b", "a"]
    assert hits[0][1] > hits[1][1] > 0
    assert storage.keyword_search("painting", scope=ScopeFilter(thread_id="t2"), limit=5) == []
    assert storage.keyword_search("the of and", scope=ScopeFilter("r1"), limit=5) == []
    assert storage.keyword_search("paint", scope=ScopeFilter("r1"), limit=1) == hits[:1]
    with pytest.raises(InvalidInputError):
        storage.keyword_search("paint", scope=ScopeFilter("r1"), limit=0)


async def test_async_keyword_search_matches_sync(storage: PostgresStorage) -> None:
    await storage.aput([make_record("a", text="Lisbon trip in March"), make_record("b")])
    scope = ScopeFilter("r1")
    assert await storage.akeyword_search("lisbon march", scope=scope, limit=3) == (
        storage.keyword_search("lisbon march", scope=scope, limit=3)
    )
    await storage.aclose()


async def test_async_twins_use_one_pool_per_loop(storage: PostgresStorage) -> None:
    await asyncio.gather(*(storage.aput([make_record(f"m{i}", f"t{i}")]) for i in range(20)))
    assert await storage.acount() == 20
    assert len(storage._apools) == 1


def test_keyword_search_ranks_like_the_in_memory_backend(storage: PostgresStorage) -> None:
    from langchain_semantic_recall.storage.memory import InMemoryStorage

    texts = [
        "We painted the kitchen blue last spring",
        "The painter's quote for the kitchen was too high",
        "Blue is my sister's favourite colour, she paints too",
        "Painting lessons start in March; I booked three",
        "Groceries: tomatoes, basil, pasta",
        "Don't forget the kitchen tiles and the blue paint",
    ]
    records = [
        make_record(f"m{i}", f"t{i % 2}", "r1", role="user" if i % 3 else "assistant", text=t)
        for i, t in enumerate(texts)
    ] + [make_record("other", "t9", "r2", text="blue kitchen painting")]
    reference = InMemoryStorage()
    reference.put(records)
    storage.put(records)
    for query in ("painting the kitchen blue", "sister colour", "tomatoes", "March lessons"):
        for scope in (ScopeFilter("r1"), ScopeFilter(thread_id="t0")):
            expected = reference.keyword_search(query, scope=scope, limit=4)
            found = storage.keyword_search(query, scope=scope, limit=4)
            assert [i for i, _ in found] == [i for i, _ in expected], (query, scope)
            assert [s for _, s in found] == pytest.approx([s for _, s in expected])


async def test_callers_pools_are_used_and_left_open(pg_url: str) -> None:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    pool = ConnectionPool(pg_url, kwargs={"autocommit": True}, min_size=1, open=True)
    apool = AsyncConnectionPool(pg_url, kwargs={"autocommit": True}, min_size=1, open=False)
    await apool.open()
    try:
        storage = PostgresStorage(pool=pool, async_pool=apool)
        await storage.aput(make_thread(2))
        assert storage.count() == 2
        assert [m.id for m in await storage.alist_messages()] == ["t1-m0", "t1-m1"]
        await storage.aclose()
        assert not pool.closed
        assert not apool.closed
        async_only = PostgresStorage(async_pool=apool)
        assert await async_only.acount() == 2
        with pytest.raises(StorageError, match="only an async pool"):
            async_only.count()
    finally:
        pool.close()
        await apool.close()


async def test_every_async_twin_runs_on_the_async_pool_alone(pg_url: str) -> None:
    # With no sync pool, a twin falling back to the executor (the sync driver) would raise
    # "only an async pool": each one must run on the native async driver.
    from psycopg_pool import AsyncConnectionPool

    apool = AsyncConnectionPool(pg_url, kwargs={"autocommit": True}, min_size=1, open=False)
    await apool.open()
    try:
        storage = PostgresStorage(async_pool=apool)
        scope = ScopeFilter("r1")
        await storage.aput([*make_thread(3), make_record("k", "t2", text="violin lessons")])
        windows = await storage.aget_windows(["t1-m1"], before=1, after=1, scope=scope)
        assert [m.id for m in windows["t1-m1"]] == ["t1-m0", "t1-m1", "t1-m2"]
        assert await storage.aget_thread_owner("t1") == "r1"
        assert len(await storage.alist_messages(scope, limit=10)) == 4
        assert [t.thread_id for t in await storage.alist_threads("r1")] == ["t1", "t2"]
        assert await storage.acount(scope) == 4
        assert await storage.aids_in_scope(["t1-m1", "k", "nope"], scope) == {"t1-m1", "k"}
        assert (
            await storage.akept_share(replace(scope, since=datetime(2000, 1, 1, tzinfo=UTC)))
            is None
        )
        found = await storage.akeyword_search("violin", scope=scope, limit=3)
        assert [message_id for message_id, _ in found] == ["k"]
        assert await storage.adelete_thread("t2", retire=False) == 1
        assert not await storage.ais_forgotten("t2")
        assert await storage.adelete_thread("t1") == 3
        assert await storage.ais_forgotten("t1")
        await storage.aput([make_record("back", "t2", "r1")])
        assert await storage.adelete_resource("r1") == 1
        assert await storage.ais_forgotten("t2")
        await storage.aclose()
    finally:
        await apool.close()


LONG_KEY = "k" * 3000  # one word over PostgreSQL's 2,047 bytes per lexeme / tsquery word


def test_long_word_of_an_older_schema_is_indexed_by_the_migration(pg_url: str) -> None:
    storage = PostgresStorage(pg_url)
    storage.put([make_record("m1", text=f"the key {LONG_KEY}")])
    storage.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to version 2: no digest
        conn.execute(
            "UPDATE semantic_recall_messages SET tsv = (SELECT tsvector_agg FROM (SELECT "
            "array_to_tsvector(array_agg(x)) AS tsvector_agg FROM unnest(tsvector_to_array(tsv)) "
            "AS x WHERE x NOT LIKE 'h:%%') AS s)"
        )
        conn.execute("ALTER TABLE semantic_recall_messages DROP COLUMN metadata")  # (v4)
        conn.execute("DELETE FROM semantic_recall_schema_version WHERE version > 2")
    with psycopg.connect(pg_url) as conn:
        (lexemes,) = conn.execute(
            "SELECT tsvector_to_array(tsv) FROM semantic_recall_messages"
        ).fetchone()
    assert not [x for x in lexemes if x.startswith("h:")]
    migrated = PostgresStorage(pg_url)
    try:
        hits = migrated.keyword_search(LONG_KEY, scope=ScopeFilter("r1"), limit=5)
        assert [message_id for message_id, _ in hits] == ["m1"]
    finally:
        migrated.close()


async def test_a_long_query_word_works_on_every_search_surface(pg_url: str) -> None:
    memory = SemanticRecall(
        storage=PostgresStorage(pg_url),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(32),
        search_mode="hybrid",
        threshold=0.0,  # silence off: a 32-bucket fake makes a one-word query look like chat
    )
    ids = {"thread_id": "t1", "resource_id": "alice"}
    config = {"configurable": ids}
    try:
        memory.index(
            [HumanMessage(f"my api key is {LONG_KEY}", id="u1"), AIMessage("noted", id="a1")],
            **ids,
        )
        assert LONG_KEY in memory.search(LONG_KEY, **ids)[0].message.text
        assert LONG_KEY in (await memory.asearch(LONG_KEY, **ids))[0].message.text
        recalled = memory.recall([HumanMessage(f"what about {LONG_KEY}?")], **ids)
        assert any(LONG_KEY in str(m.content) for m in recalled[:-1])
        tool_output = memory.as_tool().invoke({"query": LONG_KEY}, config)
        assert LONG_KEY in str(tool_output)
        documents = memory.as_retriever().invoke(LONG_KEY, config)
        assert documents
        assert LONG_KEY in documents[0].page_content
    finally:
        await memory.storage.aclose()


# --- retention through the engine ---------------------------------------------------------


def _old_and_new(memory: SemanticRecall) -> None:
    old, new = "2023-01-01T00:00:00+00:00", "2024-06-01T00:00:00+00:00"
    for resource in ("alice", "bob"):
        for when, tag in ((old, "old"), (new, "new")):
            turn = [
                HumanMessage(f"{resource} {tag} lisbon", id=f"{resource}-{tag}-0"),
                AIMessage(f"{resource} {tag} noted", id=f"{resource}-{tag}-1"),
            ]
            for message in turn:
                message.additional_kwargs["created_at"] = when
            memory.index(turn, thread_id=f"{resource}-t", resource_id=resource)


def test_retention_through_the_engine_sync_and_async(storage: PostgresStorage) -> None:
    from datetime import UTC, datetime

    from tests.unit.test_signed_in_user import asigned_in, signed_in

    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    _old_and_new(memory)
    cutoff = datetime(2024, 1, 1, tzinfo=UTC)
    result = signed_in("alice", lambda: memory.forget_before(cutoff))
    assert result.deleted == {"alice": 2}
    assert result.threads_emptied == ()
    assert storage.count(ScopeFilter("bob")) == 4  # the signed-in user's call stays theirs

    async def bob_then_close() -> tuple[Any, set[str], list[int], int]:
        try:
            result = await memory.aforget_before(cutoff)
            kept = {m.id for m in await storage.alist_messages()}
            seqs = [m.seq for m in await storage.alist_messages(ScopeFilter("alice"))]
            later = await storage.aput([make_record("next", "alice-t", "alice")])
            return result, kept, seqs, later[0].seq
        finally:
            # Closed in this loop, as a caller would (left open, asyncio.run's shutdown
            # closes it: test_postgres_event_loops.py).
            await storage.aclose()

    result, kept, seqs, next_seq = asigned_in("bob", bob_then_close)
    assert result.deleted == {"bob": 2}
    assert kept == {"alice-new-0", "alice-new-1", "bob-new-0", "bob-new-1"}
    assert memory.vector_store.message_ids(memory.ensure_index().name) == kept
    assert seqs == [2, 3]
    assert next_seq == 4


def test_retention_beside_rewrites_of_the_same_threads_finishes_whole(
    storage: PostgresStorage,
) -> None:
    """Concurrent rewrites and retentions of the same threads all finish, nothing left."""
    from datetime import UTC, datetime

    threads = [f"t{i}" for i in range(6)]
    seeded = [make_record(f"{t}-m{n}", t, minute=n) for t in threads for n in range(40)]

    async def rewrite(rows: list[MessageRecord]) -> None:
        await storage.aput([replace(r, text=r.text + " again") for r in reversed(rows)])

    async def run() -> tuple[int, list[int]]:
        for _ in range(4):
            await storage.aput(seeded)
            await asyncio.gather(
                *(rewrite(seeded) for _ in range(3)),
                *(storage.adelete_before(datetime(2030, 1, 1, tzinfo=UTC)) for _ in range(2)),
            )
        await storage.adelete_before(datetime(2030, 1, 1, tzinfo=UTC))
        counts = [t.message_count for t in await storage.alist_threads()]
        left = await storage.acount()
        await storage.aclose()  # the loop's async pool, in its own loop
        return left, counts

    left, counts = asyncio.run(run())
    assert left == 0
    assert counts == [0] * 6


RUNS = itertools.count()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=ROWS, filter=FILTERS, since=st.none() | st.integers(0, 5), span=st.integers(1, 6))
def test_generated_filters_keep_what_the_rule_keeps(
    storage: PostgresStorage,
    rows: list[Row],
    filter: dict[str, Any],
    since: int | None,
    span: int,
) -> None:
    """JSONB containment matches as `filters.matches_metadata` (tests/unit: SQLite, memory)."""
    owner = f"alice{next(RUNS)}"  # one database, many examples: a resource each
    check_reads(storage, owner, rows, filter=filter, since=since, span=span)
