"""PostgreSQL under a turn's write: its connection killed, or the call cancelled, mid-write.

A turn is written in one transaction under the thread's advisory lock. The test holds that
lock from a second connection, so the engine's write is provably inside its transaction
when the server terminates its backend (`pg_terminate_backend`); a cancelled `aindex` is
cancelled at a sweep of moments, inside and around its SQL. Either way the caller is told
(`StorageError`, `CancelledError`), a turn is stored whole or not at all, no lock or
transaction is left behind (the next write goes through), and the same call again stores
each message once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, StorageError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.storage.postgres.sql import _lock_key
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def memory(pg_url: str) -> Iterator[SemanticRecall]:
    storage = PostgresStorage(pg_url, max_size=4)
    engine = SemanticRecall(
        storage=storage,
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=32),
        search_mode="dense",
    )
    yield engine
    storage.close()


def turn(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"question {n} about kites", id=f"q{n}"),
        AIMessage(f"answer {n}", id=f"a{n}"),
    ]


def stored_ids(memory: SemanticRecall) -> list[str]:
    return [m.id for m in memory.storage.list_messages(ScopeFilter(thread_id="t"), limit=10_000)]


def _blocked_writers(admin: psycopg.Connection[Any], database: str) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
        (database,),
    ).fetchall()
    return [int(row[0]) for row in rows]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_write_whose_connection_is_killed_stores_nothing_and_a_retry_stores_it_once(
    memory: SemanticRecall, pg_url: str, asynchronous: bool
) -> None:
    memory.index(turn(0), thread_id="t", resource_id="alice")
    database = pg_url.rsplit("/", 1)[1]
    outcome: dict[str, object] = {}

    def write() -> None:
        try:
            if asynchronous:
                asyncio.run(memory.aindex(turn(1), thread_id="t", resource_id="alice"))
            else:
                memory.index(turn(1), thread_id="t", resource_id="alice")
        except Exception as error:
            outcome["error"] = error

    with (
        psycopg.connect(pg_url, autocommit=True) as holder,
        psycopg.connect(pg_url, autocommit=True) as admin,
    ):
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("t"),))
        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: _blocked_writers(admin, database), timeout=20, what="the write")
        for pid in _blocked_writers(admin, database):
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        writer.join(30)
        holder.execute("ROLLBACK")
    error = outcome.get("error")
    assert isinstance(error, StorageError)
    assert "write failed" in str(error)
    assert stored_ids(memory) == ["q0", "a0"]  # nothing of the turn in flight
    result = memory.index(turn(1), thread_id="t", resource_id="alice")  # the pool recovered
    assert [f.fate for f in result.fates] == ["stored", "stored"]
    assert stored_ids(memory) == ["q0", "a0", "q1", "a1"]
    assert memory.stats().missing_vectors == 0


def test_aindex_cancelled_at_any_moment_leaves_whole_turns_and_no_lock(
    memory: SemanticRecall,
) -> None:
    async def run() -> None:
        await memory.aensure_index()
        for n, delay in enumerate(d / 1000 for d in range(0, 30, 2)):
            task = asyncio.create_task(memory.aindex(turn(n), thread_id="t", resource_id="alice"))
            await asyncio.sleep(delay)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            ids = stored_ids(memory)
            assert ids[-2:] == [f"q{n}", f"a{n}"] or f"q{n}" not in ids  # whole, or none
            # The same call again: never blocked by a lock or transaction left open.
            await asyncio.wait_for(
                memory.aindex(turn(n), thread_id="t", resource_id="alice"), timeout=20
            )

    asyncio.run(run())
    stored = memory.storage.list_messages(ScopeFilter(thread_id="t"), limit=10_000)
    assert [m.id for m in stored] == [i for n in range(15) for i in (f"q{n}", f"a{n}")]
    assert len({m.seq for m in stored}) == len(stored)
    stats = memory.stats()
    assert (stats.messages, stats.missing_vectors, stats.orphan_vectors) == (30, 0, 0)
