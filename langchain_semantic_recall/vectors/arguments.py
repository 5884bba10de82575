"""The checks of `VectorIndex`: its arguments, and the rows an export returns.

Each method checks its arguments before it calls its hook; an export drops any row
outside the scope asked for.

They live apart from `base` so that the public surface there reads as the contract it is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.options import check_index_name
from langchain_semantic_recall.records import ScopeFilter, VectorRecord

__all__ = [
    "check_delete",
    "check_export",
    "check_open",
    "check_scope",
    "check_search",
    "has_work",
    "inside",
    "inside_async",
]

logger = logging.getLogger(__name__)


def has_work(
    thread_id: str | None, resource_id: str | None, message_ids: Sequence[str] | None
) -> bool:
    """The shared guard of every `delete`: whether there is anything to delete.

    `VectorIndex.delete` applies it before calling a backend's `_delete`.

    Raises:
        InvalidInputError: no selector was given (that would delete everything).
    """
    if thread_id is None and resource_id is None and message_ids is None:
        raise InvalidInputError(
            "delete needs thread_id, resource_id or message_ids; it never empties an index"
        )
    return message_ids is None or len(message_ids) > 0


def check_delete(
    name: str, thread_id: str | None, resource_id: str | None, message_ids: Sequence[str] | None
) -> list[str] | None:
    """The checked `message_ids` of a delete: sorted and unique, None for no id selector.

    An empty list means there is nothing to delete.
    """
    check_index_name(name)
    if isinstance(message_ids, str):
        raise InvalidInputError(
            f"message_ids must be a sequence of ids, got the string {message_ids!r}: "
            "wrap a single id in a list"
        )
    if not has_work(thread_id, resource_id, message_ids):
        return []
    return None if message_ids is None else sorted(set(message_ids))


def check_open(name: str, dimension: object, model: object) -> None:
    """The arguments of `open`: a legal name, a dimension >= 1, a model name."""
    check_index_name(name)
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise InvalidInputError(f"dimension must be an int >= 1, got {dimension!r}")
    if not isinstance(model, str) or not model:
        raise InvalidInputError(f"model must be a non-empty string, got {model!r}")


def check_export(name: str, scope: object, batch_size: object) -> None:
    """The arguments of `export`: a legal name, a scope or None, a batch size >= 1."""
    check_index_name(name)
    check_scope(scope)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be an int >= 1, got {batch_size!r}")


def check_search(name: str, k: object, scope: object) -> None:
    """The arguments of `query` and `nearest`: a legal name, `k` >= 1, a scope."""
    check_index_name(name)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInputError(f"k must be at least 1, got {k!r}")
    check_scope(scope, required=True)


def check_scope(scope: object, *, required: bool = False) -> None:
    """A `ScopeFilter` (or None, unless `required`)."""
    if scope is None and not required:
        return
    if not isinstance(scope, ScopeFilter):
        raise InvalidInputError(
            f"scope must be a ScopeFilter{'' if required else ' or None'}, got {scope!r}"
        )


def inside(
    name: str, scope: ScopeFilter | None, records: Iterator[VectorRecord]
) -> Iterator[VectorRecord]:
    """`records` inside `scope`; anything else is dropped with a warning."""
    for record in records:
        if scope is None or scope.admits(record.resource_id, record.thread_id):
            yield record
        else:
            logger.warning("dropped exported vector %r of %r outside the scope", record.id, name)


async def inside_async(
    name: str,
    scope: ScopeFilter | None,
    records: AsyncIterator[VectorRecord],
) -> AsyncIterator[VectorRecord]:
    """`inside` for an async iterator; closing it closes `records` (the backend's reads)."""
    try:
        async for record in records:
            if scope is None or scope.admits(record.resource_id, record.thread_id):
                yield record
            else:
                logger.warning(
                    "dropped exported vector %r of %r outside the scope", record.id, name
                )
    finally:
        close = getattr(records, "aclose", None)
        if close is not None:
            await close()
