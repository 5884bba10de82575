"""What a stored vector row is: its id scheme and the metadata the backends write."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

from langchain_semantic_recall.filters import VECTOR_PREFIX
from langchain_semantic_recall.records import (
    HeldVectors,
    MetadataItems,
    Role,
    ScopeFilter,
    VectorRecord,
)

__all__ = [
    "CREATED_TS",
    "FILTERABLE",
    "carries_metadata",
    "chunk_id",
    "collect_held",
    "filter_metadata",
    "record_from_metadata",
    "row_admitted",
    "row_created",
    "row_metadata",
]

CREATED_TS: Final = "created_ts"
"""Row metadata key: the creation time in seconds since the epoch (time-range filters)."""
FILTERABLE: Final = "filterable"
"""Row metadata key: True on rows that carry `created_ts` and `meta_<key>` entries."""

_ROLES: Final = frozenset({"system", "user", "assistant", "tool"})


def chunk_id(message_id: str, n: int) -> str:
    """Vector id of chunk `n` of a message: the message id itself for the first chunk."""
    return message_id if n == 0 else f"{message_id}#{n}"


def carries_metadata(metadata: Mapping[str, Any]) -> bool:
    """Whether a stored row carries message metadata (a `meta_<key>`; rows before 0.3 none)."""
    return any(key.startswith(VECTOR_PREFIX) for key in metadata)


def collect_held(rows: Iterable[tuple[str, str, bool]]) -> HeldVectors:
    """`HeldVectors` of (vector id, message id, carries message metadata) rows (pure).

    Comprehensions over every row, and a loop over the few whose id is not their
    message's: `stats` reads 100,000 rows, and a loop per row cost 3-4x as much.
    """
    listed = rows if isinstance(rows, list) else list(rows)
    chunked: dict[str, set[str]] = {}
    for vector_id, message_id in [(v, m) for v, m, _ in listed if v != m]:
        chunked.setdefault(message_id, set()).add(vector_id)
    if chunked:  # and those of them that hold a vector of their own id
        for message_id in {m for v, m, _ in listed if v == m and m in chunked}:
            chunked[message_id].add(message_id)
    return HeldVectors(
        frozenset([m for _, m, _ in listed]),
        frozenset([m for _, m, carries in listed if carries]),
        {message_id: frozenset(ids) for message_id, ids in chunked.items()},
    )


def record_from_metadata(
    vector_id: str, vector: Iterable[float], metadata: Mapping[str, Any], content: str
) -> VectorRecord | None:
    """A `VectorRecord` from a stored row (pure): its id, embedding and metadata.

    The metadata is the one the backends write (`message_id`, `thread_id`,
    `resource_id`, `role`, `created_at` in ISO 8601). None for a row without it (a
    vector written by something else), which an export skips.
    """
    try:
        created = datetime.fromisoformat(str(metadata["created_at"]))
        message_id = str(metadata["message_id"])
        thread_id, resource_id = str(metadata["thread_id"]), str(metadata["resource_id"])
    except (KeyError, ValueError):
        return None
    role = str(metadata.get("role", "user"))
    return VectorRecord(
        id=vector_id,
        vector=[float(x) for x in vector],
        message_id=message_id,
        thread_id=thread_id,
        resource_id=resource_id,
        role=cast("Role", role if role in _ROLES else "user"),
        content=content,
        created_at=created.replace(tzinfo=UTC) if created.tzinfo is None else created,
        metadata=row_metadata(metadata),
    )


def filter_metadata(record: VectorRecord) -> dict[str, str | int | float | bool]:
    """The row metadata that filters read: `created_ts`, `filterable`, `meta_<key>`.

    `created_ts` is the creation time in seconds since the epoch (stores compare numbers,
    not ISO text); `filterable` marks rows that carry these keys, so that a row written
    before them (no `created_ts`) is told apart and checked from its `created_at`.
    """
    extra: dict[str, str | int | float | bool] = {
        CREATED_TS: record.created_at.timestamp(),
        FILTERABLE: True,
    }
    extra.update({VECTOR_PREFIX + key: value for key, value in record.metadata})
    return extra


def row_metadata(metadata: Mapping[str, Any]) -> MetadataItems:
    """A row's message metadata (its `meta_<key>` entries), as sorted pairs."""
    cut = len(VECTOR_PREFIX)
    return tuple(
        sorted(
            (key[cut:], value)
            for key, value in metadata.items()
            if key.startswith(VECTOR_PREFIX) and isinstance(value, str | int | float | bool)
        )
    )


def row_created(metadata: Mapping[str, Any]) -> datetime | None:
    """A row's creation time: `created_ts`, else its ISO `created_at` (older rows)."""
    stamp = metadata.get(CREATED_TS)
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return datetime.fromtimestamp(stamp, UTC)
    try:
        created = datetime.fromisoformat(str(metadata["created_at"]))
    except (KeyError, ValueError):
        return None
    return created.replace(tzinfo=UTC) if created.tzinfo is None else created


def row_admitted(scope: ScopeFilter, metadata: Mapping[str, Any]) -> bool:
    """Whether a row (by its metadata) is inside `scope`, filter and time range included."""
    if not scope.admits(str(metadata.get("resource_id")), str(metadata.get("thread_id"))):
        return False
    if not scope.narrowed:
        return True
    created = row_created(metadata)
    if created is None:
        return False
    return scope.matches(row_metadata(metadata), created)
