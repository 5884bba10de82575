"""PostgreSQL's forgets against another process's concurrent move: never past the owner.

The storage's statements run in separate round trips; a concurrent writer holding a
thread's advisory lock is simulated deterministically by a second connection that takes
the same lock and commits a move while the forget waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.storage.postgres.lifecycle import move_thread_steps
from langchain_semantic_recall.storage.postgres.sql import _lock_key
from langchain_semantic_recall.storage.postgres.storage import _drive
from tests.conformance.storage_suite import make_thread
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def storage(pg_url: str) -> Iterator[PostgresStorage]:
    storage = PostgresStorage(pg_url)
    yield storage
    storage.close()


def _waiting_for_a_lock(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    row = conn.execute(query).fetchone()
    return bool(row and row[0])


def test_forget_resource_leaves_a_thread_moved_away_while_it_waited(
    storage: PostgresStorage, pg_url: str
) -> None:
    storage.put(make_thread(2, "t-moved", "alice") + make_thread(1, "t-kept", "alice"))
    deleted: list[int] = []
    with (
        psycopg.connect(pg_url, autocommit=True) as watcher,
        psycopg.connect(pg_url) as mover,
    ):
        mover.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("t-moved"),))
        forget = threading.Thread(target=lambda: deleted.append(storage.delete_resource("alice")))
        forget.start()
        wait_until(lambda: _waiting_for_a_lock(watcher), timeout=30, what="the forget to wait")
        with mover.cursor() as cursor:  # another process moves the thread to bob, and commits
            assert _drive(cursor, move_thread_steps("t-moved", "bob")) == 2
        mover.commit()
        forget.join(timeout=30)

    assert deleted == [1]  # alice's own thread only
    assert storage.get_thread_owner("t-moved") == "bob"
    assert storage.count(ScopeFilter("bob")) == 2
    assert not storage.is_forgotten("t-moved")
    assert storage.is_forgotten("t-kept")
