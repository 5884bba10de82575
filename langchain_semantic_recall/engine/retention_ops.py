"""Retention: forget every message older than a cutoff, written once as a generator of steps.

A retention policy (`SemanticRecall(retention=timedelta(days=90))`) deletes nothing by
itself: the application schedules `apply_retention()` (a cron job, a worker, the CLI's
`semantic-recall forget --older-than 90d`), which forgets what was created before
`now - retention`; `forget_before(cutoff)` takes the cutoff itself. Like `forget_thread`
it is final: the messages leave the storage (their keyword index with them), then their
vectors leave the index. Threads stay, with their owner and sequence numbers (see
`MessageStorage.delete_before`); the result names the threads left empty.

The call acts for an owner (`EngineCore.owner`): a resource given or resolved (on an
authenticated LangGraph server, always the signed-in user) limits it to that resource;
with none, it covers every resource (maintenance).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import VectorSpace
from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.filters import in_utc
from langchain_semantic_recall.records import DeletedMessage, ScopeFilter, ThreadInfo

VECTOR_BATCH: Final = 1000
"""Message ids per vector-index delete."""


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one retention call (`apply_retention`, `forget_before`) deleted.

    ```python
    result = memory.apply_retention()
    print(result.messages, result.deleted)  # 42 {"alice": 40, "bob": 2}
    ```
    """

    cutoff: datetime
    """Messages created before this instant (UTC) were deleted."""
    resource_id: str | None
    """The resource the call acted for; None: every resource."""
    deleted: Mapping[str, int] = field(default_factory=dict)
    """Resource id -> messages deleted (storage and vectors), for each resource touched."""
    threads_emptied: tuple[str, ...] = ()
    """Threads that hold no message any more (they stay, owned: `forget_thread` removes one)."""

    @property
    def messages(self) -> int:
        """Messages deleted in all."""
        return sum(self.deleted.values())


def check_retention(value: object) -> timedelta | None:
    """The retention option: None (no policy) or a positive `timedelta`.

    Raises:
        InvalidOptionError: anything else.
    """
    if value is None:
        return None
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidOptionError(
            f"retention must be a positive timedelta (e.g. timedelta(days=90)) or None, "
            f"got {value!r}"
        )
    return value


def check_cutoff(cutoff: object) -> datetime:
    """The cutoff in UTC, if it is a timezone-aware datetime.

    Raises:
        InvalidInputError: a naive datetime, not a datetime, or one outside years
            1-9999 in UTC.
    """
    if not isinstance(cutoff, datetime) or cutoff.utcoffset() is None:
        raise InvalidInputError(
            f"cutoff must be a timezone-aware datetime (e.g. datetime(2025, 1, 1, "
            f"tzinfo=UTC)), got {cutoff!r}"
        )
    return in_utc(cutoff, "cutoff")


def retention_cutoff(retention: timedelta | None) -> datetime:
    """`now - retention`, now being the current time (UTC); year 1 if that is earlier.

    A policy reaching before year 1 deletes nothing (no message is that old), as a `since`
    that far back is no bound (`filters.check_bound`).

    Raises:
        InvalidOptionError: the engine has no retention policy.
    """
    if retention is None:
        raise InvalidOptionError(
            "this engine has no retention policy: build it with retention=timedelta(days=90) "
            "(SemanticRecall.local(path, retention=...)), or call forget_before(cutoff)"
        )
    try:
        return datetime.now(UTC) - retention
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def forget_before_op(
    space: VectorSpace, cutoff: datetime, owner: str | None
) -> Op[RetentionResult]:
    """Delete the messages created before `cutoff` (of `owner`, or of everyone).

    When the scope holds a message that old, the vector index is opened first (one that
    cannot be fails the call before anything is deleted), then the storage deletes (one
    transaction), then the vectors of exactly those messages. If the vector index fails
    then, the error is raised with a note: recall cannot show those vectors (every hit is
    read back through the storage), `stats()` counts them as orphans and
    `reindex(missing_only=True)` removes them.
    """
    scope = None if owner is None else ScopeFilter(resource_id=owner)
    threads: Sequence[ThreadInfo] = yield steps.ListThreads(owner)
    if not any(t.first_at is not None and t.first_at < cutoff for t in threads):
        # Nothing that old: no index to open (a retention job must not need the
        # embedder's API, nor create a mistyped index, to delete nothing).
        return RetentionResult(cutoff, owner)
    info = yield from space.resolve()
    deleted: Sequence[DeletedMessage] = yield steps.DeleteBefore(cutoff, scope)
    counts: dict[str, int] = {}
    for message in deleted:
        counts[message.resource_id] = counts.get(message.resource_id, 0) + 1
    if not deleted:
        return RetentionResult(cutoff, owner)
    yield steps.ClearCaches()  # it holds recent texts
    try:
        for resource_id in sorted(counts):
            ids = [m.id for m in deleted if m.resource_id == resource_id]
            for start in range(0, len(ids), VECTOR_BATCH):
                chunk = ids[start : start + VECTOR_BATCH]
                yield steps.DeleteVectors(info, resource_id=resource_id, message_ids=chunk)
    except Exception as failure:
        failure.add_note(
            f"{len(deleted)} message(s) created before {cutoff.isoformat()} were deleted from "
            "the storage, but not all of their vectors: run reindex(missing_only=True) "
            "(or 'semantic-recall reindex --missing-only') to remove the vectors left"
        )
        raise
    emptied: list[str] = []
    for thread_id in sorted({m.thread_id for m in deleted}):
        if not (yield steps.CountMessages(ScopeFilter(thread_id=thread_id), up_to=1)):
            emptied.append(thread_id)
    return RetentionResult(cutoff, owner, dict(sorted(counts.items())), tuple(emptied))
