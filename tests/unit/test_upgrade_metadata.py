"""The schema migration keeps the metadata a message carried as today's `index` would.

0.1 and 0.2 stored a message's `additional_kwargs["metadata"]` in its payload only; the
migration to SQLite schema 3 copies it into the `metadata` column. For generated
metadata (valid, nested, reserved keys, odd values), each migrated message holds what
`messages.record_for` keeps for the same message today, or none where it refuses it.
"""

from __future__ import annotations

import sqlite3
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.messages import record_for
from langchain_semantic_recall.records import MessageRecord, MetadataItems, ScopeFilter
from langchain_semantic_recall.storage.sqlite import SQLiteStorage

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
