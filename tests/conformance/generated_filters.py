"""Generated metadata and filters, and the check that a storage keeps what the rule keeps.

Hypothesis draws metadata and filters near the edges of "values compare by kind" (0 and
False, -0.0, 2**53 as an int and a float, look-alike and empty texts, quotes and JSON's
own characters); `check_reads` holds a storage to `filters.matches_metadata` through
every read that takes a scope (ids, windows, keyword search, counts, pages). Used by
`tests/unit/test_filter_backends.py` (in-memory, SQLite) and
`tests/integration/test_postgres_storage.py` (PostgreSQL); `check_vector_reads` does the
same for vector indexes (in-memory in the unit tier, Chroma in
`tests/integration/test_vectors_chroma.py`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import strategies as st

from langchain_semantic_recall.filters import matches_metadata, metadata_conditions
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex
from tests.conformance.storage_suite import make_record
from tests.conformance.vector_suite import DIMENSION, MODEL, unit

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
KEYS = ("project", "n", "Tag", "tag")
VALUES = st.sampled_from(
    [
        0,
        1,
        -1,
        2**53,
        -(2**53),
        0.0,
        -0.0,
        1.0,
        0.1,
        0.30000000000000004,
        1e16,
        2.0**53,
        1e-300,
        True,
        False,
        "",
        "0",
        "1",
        "true",
        "false",
        "1.0",
        "apollo",
        "Apollo",
        "apollo ",
        "é",
        "e\u0301",
        "ß",
        "SS",
        "İ",
        "a'b",
        'a"b',
        "a\\b",
        "%",
        "_",
        "$.n",
        "null",
        "🚀",
    ]
)
METADATA = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3)
FILTERS = st.dictionaries(
    st.sampled_from(KEYS),
    st.one_of(
        VALUES,
        VALUES.map(lambda value: {"$eq": value}),
        st.lists(VALUES, min_size=1, max_size=4).map(lambda values: {"$in": values}),
    ),
    min_size=1,
    max_size=2,
)
ROWS = st.lists(st.tuples(METADATA, st.integers(0, 5)), min_size=1, max_size=8)


Row = tuple[dict[str, Any], int]
"""A message's metadata and its day after `T0`."""


def _reads(storage: MessageStorage, scope: ScopeFilter, ids: list[str]) -> dict[str, set[str]]:
    """What each read of `storage` keeps of `ids` under `scope`."""
    windows = storage.get_windows(ids, before=0, after=0, scope=scope)
    return {
        "ids_in_scope": storage.ids_in_scope(ids, scope),
        "get_windows": set(windows),
        "keyword_search": {
            i for i, _ in storage.keyword_search("lighthouse", scope=scope, limit=50)
        },
        "list_messages": {m.id for m in storage.list_messages(scope=scope)},
    }


def check_reads(
    storage: MessageStorage,
    owner: str,
    rows: list[Row],
    *,
    filter: dict[str, Any],
    since: int | None,
    span: int,
) -> None:
    """Store `rows` as `owner`'s (and one other resource's look-alike), then read them back.

    Every read under `filter` and the range `[T0 + since, T0 + since + span)` days keeps
    exactly the messages `filters.matches_metadata` and the range keep.
    """
    records = [
        replace(
            make_record(f"{owner}-m{n}", f"{owner}-t{n % 2}", owner, text=f"lighthouse words {n}"),
            created_at=T0 + timedelta(days=day),
            metadata=tuple(sorted(meta.items())),
        )
        for n, (meta, day) in enumerate(rows)
    ]
    other = make_record(f"{owner}-x", f"{owner}-tx", f"{owner}-other", text="lighthouse words")
    storage.put(records)
    storage.put([replace(other, created_at=records[0].created_at, metadata=records[0].metadata)])
    conditions = metadata_conditions(filter)
    start = None if since is None else T0 + timedelta(days=since)
    end = None if since is None else T0 + timedelta(days=since + span)
    scope = ScopeFilter(owner, metadata=conditions, since=start, until=end)
    moments = [T0 + timedelta(days=day) for _, day in rows]
    expected = {
        f"{owner}-m{n}"
        for n, (meta, _) in enumerate(rows)
        if matches_metadata(meta, conditions)
        and (start is None or end is None or start <= moments[n] < end)
    }
    ids = [record.id for record in records] + [other.id]
    for read, found in _reads(storage, scope, ids).items():
        assert found == expected, (read, filter, rows)
    assert storage.count(scope) == len(expected), ("count", filter, rows)
    # BM25's statistics are the scope's: a filter leaves the scores it keeps as they were
    whole = dict(storage.keyword_search("lighthouse", scope=ScopeFilter(owner), limit=50))
    kept = storage.keyword_search("lighthouse", scope=scope, limit=50)
    assert kept == [(i, pytest.approx(whole[i])) for i, _ in kept], (filter, rows)


def check_vector_reads(
    vectors: VectorIndex,
    owner: str,
    rows: list[Row],
    *,
    filter: dict[str, Any],
    since: int | None,
    span: int,
) -> None:
    """`check_reads` for a vector index: query, nearest, ids and counts under the scope."""
    name = f"gen_{owner}"
    vectors.open(name, dimension=DIMENSION, model=MODEL)
    records = [
        VectorRecord(
            id=f"{owner}-m{n}",
            vector=unit(1.0, 0.1 * n),
            message_id=f"{owner}-m{n}",
            thread_id=f"{owner}-t{n % 2}",
            resource_id=owner,
            role="user",
            content=f"lighthouse words {n}",
            created_at=T0 + timedelta(days=day),
            metadata=tuple(sorted(meta.items())),
        )
        for n, (meta, day) in enumerate(rows)
    ]
    stranger = replace(records[0], id="x", message_id="x", resource_id="other", thread_id="tx")
    vectors.upsert(name, [*records, stranger])
    conditions = metadata_conditions(filter)
    start = None if since is None else T0 + timedelta(days=since)
    end = None if since is None else T0 + timedelta(days=since + span)
    scope = ScopeFilter(owner, metadata=conditions, since=start, until=end)
    expected = {
        record.message_id
        for record, (meta, _) in zip(records, rows, strict=True)
        if matches_metadata(meta, conditions)
        and (start is None or end is None or start <= record.created_at < end)
    }
    found = {
        "query": {hit.message_id for hit in vectors.query(name, unit(1.0), k=50, scope=scope)},
        "nearest": {mid for mid, _ in vectors.nearest(name, unit(1.0), k=50, scope=scope)},
        "message_ids": vectors.message_ids(name, scope),
        "vector_ids": set(vectors.vector_ids(name, scope).by_message()),
    }
    for read, ids in found.items():
        assert ids == expected, (read, filter, rows)
    assert vectors.count(name, scope) == len(expected), ("count", filter, rows)
