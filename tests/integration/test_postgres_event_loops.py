"""PostgresStorage's async pools across event loops that end without `aclose()`.

Each scenario runs in a child process with a deadline, so a loop shutdown that hangs
fails the test instead of holding up the run: `asyncio.run` whose pool was left open
(its shutdown once waited forever on a pool worker that took the cancellation for a
failed connect), a second `asyncio.run` with the same storage, and the engine's async
twins. The children count the storage's server connections (`pg_stat_activity`) as
they go: a loop's connections are closed when the loop ends.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.conformance.storage_suite import make_record
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import wait_until
from tests.processes import ends

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60
ROUNDS = 4  # loop ends per child: each one raced the pool's workers before the fix
APP = "semantic-recall-loop-test"  # the storage's connections, to count them


# --- the children -------------------------------------------------------------------------


def _connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            (APP,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _settles_at(url: str, expected: int, when: str) -> None:
    """The storage's connections come to `expected` (a closed one's server side lags)."""
    try:
        wait_until(lambda: _connections(url) == expected, timeout=15, what=when)
    except TimeoutError:
        raise AssertionError(
            f"{when}: {_connections(url)} connections open, {expected} expected"
        ) from None


def _storage(url: str) -> PostgresStorage:
    storage = PostgresStorage(url, connection_kwargs={"application_name": APP})
    assert storage._pool is not None
    storage._pool.wait(timeout=15)  # the sync pool's one connection, counted from here on
    return storage


async def _busy(storage: PostgresStorage, tag: str) -> int:
    """Concurrent calls, so the loop's pool grows while the calls finish."""
    ids = [f"{tag}-m{i}" for i in range(6)]
    await asyncio.gather(*(storage.aput([make_record(i, f"{tag}-t{i}")]) for i in ids))
    scope = ScopeFilter("r1")
    windows = await storage.aget_windows(ids, before=1, after=1, scope=scope)
    assert sorted(windows) == sorted(ids)
    counts = await asyncio.gather(*(storage.acount(scope) for _ in range(6)))
    assert len(set(counts)) == 1
    return counts[0]


def child_exit(url: str) -> None:
    """`asyncio.run` with async calls and no `aclose()`, each round a new storage."""
    # Every storage stays referenced: one collected would close its sync pool's
    # connection too, at a moment the garbage collector picks, and the count would drift.
    storages: list[PostgresStorage] = []
    for n in range(ROUNDS):
        storage = _storage(url)
        storages.append(storage)
        assert asyncio.run(_busy(storage, f"r{n}")) == 6 * (n + 1)
        _settles_at(url, n + 1, f"round {n}: the loop's async pool closed with its loop")


def child_twice(url: str) -> None:
    """One storage used by consecutive `asyncio.run` calls, then by sync code, then closed."""
    storage = _storage(url)
    for n in range(ROUNDS):
        assert asyncio.run(_busy(storage, f"r{n}")) == 6 * (n + 1)
        _settles_at(url, 1, f"run {n}: only the sync pool's connection left")
    assert storage.count() == 6 * ROUNDS
    storage.close()
    _settles_at(url, 0, "the storage closed")


def child_engine(url: str) -> None:
    """The engine's async index, search and retention on PostgresStorage, never closed."""
    memory = SemanticRecall(
        storage=_storage(url),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        retention=timedelta(days=30),
    )
    old = (datetime.now(UTC) - timedelta(days=90)).isoformat()

    async def turn(n: int) -> tuple[list[str], dict[str, int]]:
        stale = HumanMessage(f"an old note {n} about tulips", id=f"old-{n}")
        stale.additional_kwargs["created_at"] = old
        messages = [
            stale,
            HumanMessage(f"my sister {n} lives in Lisbon near the river", id=f"u-{n}"),
            AIMessage("noted", id=f"a-{n}"),
        ]
        await memory.aindex(messages, thread_id=f"t{n}", resource_id="alice")
        query = "where does my sister live"
        hits = await memory.asearch(query, thread_id=f"t{n}", resource_id="alice")
        retention = await memory.aapply_retention(resource_id="alice")
        return [hit.message.id or "" for hit in hits], dict(retention.deleted)

    for n in range(ROUNDS):
        found, deleted = asyncio.run(turn(n))
        assert f"u-{n}" in found, found
        assert deleted == {"alice": 1}, deleted
        _settles_at(url, 1, f"run {n}: the loop's async pool closed with its loop")


def child_dead(url: str) -> None:
    """A loop closed with its tasks never cancelled: its pool is dropped, not awaited."""
    storage = _storage(url)
    for n in range(ROUNDS):
        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(_busy(storage, f"r{n}")) == 6 * (n + 1)
        finally:
            loop.close()  # the pool's tasks (and its guard) left pending in a closed loop
        assert asyncio.run(storage.acount()) == 6 * (n + 1)  # a new loop: a new pool
        # The closed loop's pool was dropped and the connections it had opened closed; one
        # it was still opening when the loop stopped is held by a suspended coroutine of
        # that loop, and goes when Python collects it.
        gc.collect()
        _settles_at(url, 1, f"round {n}: the closed loop's connections closed")
    storage.close()
    _settles_at(url, 0, "the storage closed")


def child_sync_close(url: str) -> None:
    """`close()` from sync code still closes a stopped loop's pool and a running one's."""
    storage = _storage(url)
    stopped = asyncio.new_event_loop()
    assert stopped.run_until_complete(_busy(storage, "a")) == 6
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever)
    thread.start()
    try:
        assert asyncio.run_coroutine_threadsafe(_busy(storage, "b"), running).result(30) == 12
        storage.close()  # runs the stopped loop until its pool is closed; schedules the other
        _settles_at(url, 0, "the storage closed")
        assert not asyncio.all_tasks(stopped)  # the pool's workers and guard ended
    finally:
        running.call_soon_threadsafe(running.stop)
        thread.join()
    assert not asyncio.all_tasks(running)
    stopped.close()
    running.close()


CHILDREN = {
    "exit": child_exit,
    "twice": child_twice,
    "engine": child_engine,
    "dead": child_dead,
    "sync_close": child_sync_close,
}


# --- the parent ---------------------------------------------------------------------------


def _run_child(scenario: str, url: str) -> None:
    code = "import sys; from tests.integration.test_postgres_event_loops import CHILDREN; "
    code += "CHILDREN[sys.argv[1]](sys.argv[2]); print('finished')"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, scenario, url],
            cwd=ROOT,
            env=env,
            capture_output=True,
            check=False,
            text=True,
            timeout=DEADLINE_S,
        )
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(
            f"the {scenario!r} child hung for {DEADLINE_S} s (an event loop's shutdown "
            f"waiting on its async pool):\n{hung.stderr!s}"
        ) from None
    assert done.returncode == 0, ends(done.stderr)
    assert done.stdout.strip().splitlines()[-1:] == ["finished"], done.stdout


def test_asyncio_run_without_aclose_ends_and_closes_its_connections(pg_url: str) -> None:
    _run_child("exit", pg_url)


def test_consecutive_asyncio_runs_share_one_storage(pg_url: str) -> None:
    _run_child("twice", pg_url)


def test_engine_async_twins_on_postgres_under_asyncio_run(pg_url: str) -> None:
    _run_child("engine", pg_url)


def test_a_loop_closed_without_shutdown_leaves_no_connections(pg_url: str) -> None:
    _run_child("dead", pg_url)


def test_sync_close_still_closes_the_pools_of_stopped_and_running_loops(pg_url: str) -> None:
    _run_child("sync_close", pg_url)
