"""What a stored vector row is: its id scheme and the metadata the backends write."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

from langchain_semantic_recall.records import Role, VectorRecord

__all__ = ["chunk_id", "record_from_metadata"]

_ROLES: Final = frozenset({"system", "user", "assistant", "tool"})


def chunk_id(message_id: str, n: int) -> str:
    """Vector id of chunk `n` of a message: the message id itself for the first chunk."""
    return message_id if n == 0 else f"{message_id}#{n}"


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
    )
