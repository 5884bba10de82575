"""`SemanticRecall`'s maintenance methods: forgetting, retention, moving, reindex, purge, stats.

Written here as functions and bound in the class body of `recall.SemanticRecall`
(`forget_thread, aforget_thread = maintenance.forget_thread, ...`), so the facade stays one
readable page. Each is a shell: the operation is `engine.core`'s, run by the sync or async
driver.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Unpack

from langchain_semantic_recall.engine.call_options import ReindexOptions
from langchain_semantic_recall.engine.maintenance_ops import RecallStats
from langchain_semantic_recall.engine.retention_ops import RetentionResult
from langchain_semantic_recall.engine.vector_space import IndexInfo
from langchain_semantic_recall.records import PurgeResult

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall


def forget_thread(self: SemanticRecall, thread_id: str, *, resource_id: str | None = None) -> int:
    """Delete a thread's messages and vectors for good; returns messages deleted.

    Its id is retired: a later `index` of it stores nothing and says so (`result.forgotten`);
    graph nodes and the middleware raise `ForgottenThreadError`. Idempotent: call it again
    if it raised. A thread of another resource than the call's raises `OwnershipError`.
    An id that holds nothing is not retired (returns 0): never written, or emptied by
    `clear_thread`, which frees it. No caller can reserve the id of a conversation another
    resource has yet to start. To empty a thread and refuse it later writes, forget it
    (not clear, then forget).

    Args:
        thread_id: The thread to forget.
        resource_id: The resource the call acts for (checked against the thread's owner; on a
            LangGraph server, the signed-in user).
    """
    return self._core.run(self._core.forget_thread(thread_id, resource_id, retire=True))


async def aforget_thread(
    self: SemanticRecall, thread_id: str, *, resource_id: str | None = None
) -> int:
    """Async twin of `forget_thread`."""
    return await self._core.arun(self._core.forget_thread(thread_id, resource_id, retire=True))


def clear_thread(self: SemanticRecall, thread_id: str, *, resource_id: str | None = None) -> int:
    """Empty a thread (messages and vectors) but keep its id usable; returns deleted.

    The id is freed with its messages, as if never written: the next write under it,
    by any resource, starts the thread afresh and owns it (`forget_thread` retires it).

    Args:
        thread_id: The thread to empty.
        resource_id: The resource the call acts for (checked against the thread's owner; on a
            LangGraph server, the signed-in user).
    """
    return self._core.run(self._core.forget_thread(thread_id, resource_id, retire=False))


async def aclear_thread(
    self: SemanticRecall, thread_id: str, *, resource_id: str | None = None
) -> int:
    """Async twin of `clear_thread`."""
    return await self._core.arun(self._core.forget_thread(thread_id, resource_id, retire=False))


def forget_resource(self: SemanticRecall, resource_id: str) -> int:
    """Delete every thread of a resource (messages and vectors), retiring their ids.

    Args:
        resource_id: The resource whose threads are forgotten.
    """
    return self._core.run(self._core.forget_resource(resource_id))


async def aforget_resource(self: SemanticRecall, resource_id: str) -> int:
    """Async twin of `forget_resource`."""
    return await self._core.arun(self._core.forget_resource(resource_id))


def forget_before(
    self: SemanticRecall, cutoff: datetime, *, resource_id: str | None = None
) -> RetentionResult:
    """Delete for good what was created before `cutoff`, messages and vectors (retention).

    Args:
        cutoff: A timezone-aware instant: messages created before it go.
        resource_id: Only this resource's messages (None: the call's resource, or every one).
    """
    return self._core.run(self._core.forget_before(cutoff, resource_id))


async def aforget_before(
    self: SemanticRecall, cutoff: datetime, *, resource_id: str | None = None
) -> RetentionResult:
    """Async twin of `forget_before`."""
    return await self._core.arun(self._core.forget_before(cutoff, resource_id))


def apply_retention(self: SemanticRecall, *, resource_id: str | None = None) -> RetentionResult:
    """`forget_before(now - retention)`: the policy applied, on a call you schedule.

    Args:
        resource_id: Only this resource's messages (None: the call's resource, or every one).
    """
    return self._core.run(self._core.apply_retention(resource_id))


async def aapply_retention(
    self: SemanticRecall, *, resource_id: str | None = None
) -> RetentionResult:
    """Async twin of `apply_retention`."""
    return await self._core.arun(self._core.apply_retention(resource_id))


def move_thread(
    self: SemanticRecall, thread_id: str, *, to: str, resource_id: str | None = None
) -> int:
    """Give a thread (messages, vectors) to resource `to`; `resource_id` checks the owner.

    A thread of another resource than the call's raises `OwnershipError`; on a LangGraph
    server the signed-in user can neither take another resource's thread nor give one
    away (`IdentityMismatchError`). If it raised once the storage had moved the thread
    (its vectors not yet all written), call it again with `resource_id=to` to finish.

    Args:
        thread_id: The thread to move.
        to: The resource that owns it afterwards.
        resource_id: The owner it must have now (refused otherwise; default: the call's
            resource, e.g. a `for_thread` view's or the signed-in user).
    """
    return self._core.run(self._core.move_thread(thread_id, resource_id, to))


async def amove_thread(
    self: SemanticRecall, thread_id: str, *, to: str, resource_id: str | None = None
) -> int:
    """Async twin of `move_thread`."""
    return await self._core.arun(self._core.move_thread(thread_id, resource_id, to))


def restore_thread(self: SemanticRecall, thread_id: str) -> bool:
    """Let a forgotten thread id be written again (to ingest its export); was it retired?

    An administrator's call: inside a signed-in LangGraph run it raises `OwnershipError`
    (a retired id keeps no owner to check the user against).

    Args:
        thread_id: The forgotten thread's id.
    """
    return self._core.run(self._core.restore_thread(thread_id))


async def arestore_thread(self: SemanticRecall, thread_id: str) -> bool:
    """Async twin of `restore_thread`."""
    return await self._core.arun(self._core.restore_thread(thread_id))


def reindex(self: SemanticRecall, **options: Unpack[ReindexOptions]) -> int:
    """Embed stored messages again into this engine's index; returns vectors written.

    After switching embedder (a new index fills from storage), or with
    `missing_only=True` to repair vectors lost to a failure (and to give vectors
    written before 0.3 their message's metadata). Either way the vectors whose message
    is gone (orphans) are removed, and a message's vectors beyond the chunks its text
    yields now (left by an edit to a shorter text in 0.3.0 or earlier) are deleted and
    the message embedded again. Idempotent. Raises `ReadOnlyError` on a read-only engine.

    Args:
        **options: `resource_id` / `thread_id` (what to cover), `missing_only` (a repair),
            `batch_size`, `progress` (see `ReindexOptions`).
    """
    return self._core.run(self._core.reindex(options))


async def areindex(self: SemanticRecall, **options: Unpack[ReindexOptions]) -> int:
    """Async twin of `reindex`."""
    return await self._core.arun(self._core.reindex(options))


def purge(self: SemanticRecall) -> PurgeResult:
    """Erase on disk what forgotten messages left; no other process may use the store."""
    return self._core.run(self._core.purge())


async def apurge(self: SemanticRecall) -> PurgeResult:
    """Async twin of `purge` (what each backend guarantees: docs/data-handling.md)."""
    return await self._core.arun(self._core.purge())


def stats(
    self: SemanticRecall, *, resource_id: str | None = None, thread_id: str | None = None
) -> RecallStats:
    """Counts (messages, threads, vectors, missing) of the call's resource, or of all.

    Args:
        resource_id: Count this resource only (None: the call's resource, or all).
        thread_id: Count this thread only.
    """
    return self._core.run(self._core.stats(resource_id, thread_id))


async def astats(
    self: SemanticRecall, *, resource_id: str | None = None, thread_id: str | None = None
) -> RecallStats:
    """Async twin of `stats`."""
    return await self._core.arun(self._core.stats(resource_id, thread_id))


def ensure_index(self: SemanticRecall) -> IndexInfo:
    """Resolve the index (probing the embedder's dimension once) and open it."""
    return self._core.run(self._core.backends.space.resolve())


async def aensure_index(self: SemanticRecall) -> IndexInfo:
    """Async twin of `ensure_index`."""
    return await self._core.arun(self._core.backends.space.resolve())
