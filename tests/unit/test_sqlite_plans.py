"""The SQLite storage's reads use the index they were written for, whatever the id count."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall.records import MessageRecord, ScopeFilter
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.storage.sqlite_sql import windows_sql


@pytest.mark.parametrize("count", [1, 10, 100, 500])
@pytest.mark.parametrize("thread", [None, "t3"])
@pytest.mark.parametrize("window", [(1, 2), (0, 0)])
def test_windows_read_the_hits_by_primary_key(
    tmp_path: Path, count: int, thread: str | None, window: tuple[int, int]
) -> None:
    """Never through the resource index: that reads every message of the resource.

    With no neighbours (how hybrid search reads its candidates) the query is the hits
    alone: one row per hit inside the scope.
    """
    path = tmp_path / "m.db"
    storage = SQLiteStorage(path)
    storage.put(
        [
            MessageRecord(
                id=f"m{n}",
                thread_id=f"t{n % 10}",
                resource_id="alice",
                role="user",
                text=f"message {n}",
                created_at=datetime(2024, 1, 1, tzinfo=UTC),
                payload=MessageRecord.dump(HumanMessage(f"message {n}")),
            )
            for n in range(2000)
        ]
    )
    storage.close()
    conn = sqlite3.connect(path)
    ids = [f"m{n * 3}" for n in range(count)]
    scope = ScopeFilter(resource_id="alice", thread_id=thread)
    sql, params = windows_sql(ids, *window, scope)
    plan = " / ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    assert "messages_resource_thread" not in plan
    assert "sqlite_autoindex_messages_1 (id=?)" in plan
    rows = conn.execute(sql, params).fetchall()
    hits = {row[0] for row in rows}
    expected = {i for i in ids if thread is None or f"t{int(i[1:]) % 10}" == thread}
    assert hits == expected
    if window == (0, 0):
        assert sorted(row[0] for row in rows) == sorted(expected)  # the hit itself, once
        assert all(row[0] == row[1] for row in rows)
