"""What a storage backend implements: protected hooks, called with checked input only.

`MessageStorage` (in `base`) is the public, checked surface; it subclasses this class.
The contract, the same as `vectors.hooks.VectorHooks`:

- Every public method checks its input once, then calls one hook (`put` -> `_put`).
- Abstract hooks are what every backend must write. The others are optional: a
  capability behind a `supports_*` flag (`_keyword_search`, `_move_thread`,
  `_unretire_thread`, `_compact`) or whose default raises an error naming the backend
  (`_adopt_thread`, `_delete_before`, `_reserve_threads`), or a default a backend may
  replace with one query (`_count`, `_count_up_to`, `_last_messages`, `_ids_in_scope`),
  or an estimate a backend may give when it has one at hand (`_kept_share`).
- One async rule: `_a<hook>` runs `_<hook>` in the default executor unless a backend with
  a native async driver overrides it (PostgreSQL does).

`docs/writing-a-backend.md` walks through a backend; its test is the conformance suite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from langchain_semantic_recall.executor import run_in_executor
from langchain_semantic_recall.records import (
    CompactResult,
    Deleted,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
    ThreadPlace,
)


class StorageHooks(ABC):
    """The storage work a backend does; `MessageStorage` checks input before each call."""

    @abstractmethod
    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        """Write a non-empty batch of checked records (`created_at` in UTC) atomically."""

    @abstractmethod
    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        """Windows of distinct, non-empty `message_ids`, in their order (see the public)."""

    @abstractmethod
    def _get_thread_owner(self, thread_id: str) -> str | None:
        """The owner of the thread, or None."""

    @abstractmethod
    def _list_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        """A page of messages (see `list_messages`)."""

    @abstractmethod
    def _list_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        """Thread summaries, ordered by thread id."""

    @abstractmethod
    def _delete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        """Delete the thread's messages, keyword index and owner; retire the id if asked.

        With `owner`, first check in the same transaction that the thread (if stored)
        still belongs to it (`checks.check_still_owned`).
        """

    @abstractmethod
    def _delete_resource(self, resource_id: str) -> int:
        """Delete and retire every thread of the resource."""

    @abstractmethod
    def _is_forgotten(self, thread_id: str) -> bool:
        """Whether the thread id is retired."""

    def _adopt_thread(self, thread_id: str, resource_id: str) -> int:
        """Move an unowned thread to `resource_id` (see `adopt_thread`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot adopt: pass a resource id")

    def _reserve_threads(self, places: list[ThreadPlace]) -> int:
        """Create or renumber threads, atomically (see `reserve_threads`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot reserve threads")

    def _keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """Keyword matches (override with `supports_keyword_search = True`)."""
        raise NotImplementedError(f"{type(self).__name__} has no keyword search")

    def _delete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        """Delete older messages; threads keep owner and seqs (an emptied one stays, empty)."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete messages by date")

    def _move_thread(self, thread_id: str, to_resource: str, owner: str | None) -> int:
        """Reassign the thread (override, with `supports_move = True`, with the next).

        With `owner`, check in the same transaction that the thread (if stored) still
        belongs to it (`checks.check_still_owned`).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot move threads")

    def _unretire_thread(self, thread_id: str) -> bool:
        raise NotImplementedError(f"{type(self).__name__} cannot restore forgotten threads")

    def _compact(self) -> CompactResult:
        """Erase deleted data's bytes (override with `supports_compact = True`)."""
        raise NotImplementedError(f"{type(self).__name__} has no compact")

    def _last_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        """The newest `limit` messages of the thread (override with one query)."""
        kept: list[StoredMessage] = []
        after: tuple[str, int] | None = None
        while page := self._list_messages(scope, after=after, limit=1000):
            after = (page[-1].thread_id, page[-1].seq)
            kept = [*kept, *page][-limit:]
        return kept

    def _ids_in_scope(self, message_ids: list[str], scope: ScopeFilter) -> set[str]:
        """Which of distinct, non-empty `message_ids` lie in `scope` (override: ids only).

        Reads the messages themselves by default; a filtered search asks this of up to a
        thousand ids at once, so a backend that can answer from ids alone should.
        """
        return set(self._get_windows(message_ids, before=0, after=0, scope=scope))

    def _kept_share(self, scope: ScopeFilter) -> float | None:
        """About what share of its thread's or resource's messages `scope`'s filter keeps.

        A number in [0, 1], or None (the default): unknown. A filtered search sizes its
        first look at the vector index by it; an estimate from a sample, in well under a
        millisecond, will do. Anything else is read as None.
        """
        return None

    def _count(self, scope: ScopeFilter | None) -> int:
        """Messages in the scope (override with one query).

        From the thread summaries; a scope with a filter or a time range counts the
        messages `_list_messages` gives for it, since summaries cannot say which pass.
        """
        if scope is not None and scope.narrowed:
            return self._count_listed(scope, None)
        threads = self._list_threads(scope.resource_id if scope else None)
        if scope is not None and scope.thread_id is not None:
            threads = [t for t in threads if t.thread_id == scope.thread_id]
        return sum(t.message_count for t in threads)

    def _count_up_to(self, scope: ScopeFilter | None, up_to: int) -> int:
        """`min(count, up_to)` (override with a query that stops at `up_to`)."""
        if scope is not None and scope.narrowed:
            return self._count_listed(scope, up_to)
        return min(self._count(scope), up_to)

    def _count_listed(self, scope: ScopeFilter, up_to: int | None) -> int:
        """The messages of `scope`'s pages, stopping at `up_to`."""
        counted = 0
        after: tuple[str, int] | None = None
        while page := self._list_messages(scope, after=after, limit=1000):
            counted += len(page)
            if up_to is not None and counted >= up_to:
                return up_to
            after = (page[-1].thread_id, page[-1].seq)
        return counted

    def _close(self) -> None:  # noqa: B027 - optional: most backends hold nothing to release
        """Release connections."""

    # --- async twins: by default the sync hook in the default executor ---------------------

    async def _aput(self, records: list[MessageRecord]) -> list[StoredMessage]:
        return await run_in_executor(None, self._put, records)

    async def _aget_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        return await run_in_executor(
            None, lambda: self._get_windows(message_ids, before=before, after=after, scope=scope)
        )

    async def _aget_thread_owner(self, thread_id: str) -> str | None:
        return await run_in_executor(None, self._get_thread_owner, thread_id)

    async def _alist_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        return await run_in_executor(
            None, lambda: self._list_messages(scope, after=after, limit=limit)
        )

    async def _alast_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        return await run_in_executor(None, lambda: self._last_messages(scope, limit=limit))

    async def _alist_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        return await run_in_executor(None, self._list_threads, resource_id)

    async def _adelete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        return await run_in_executor(
            None, lambda: self._delete_thread(thread_id, retire=retire, owner=owner)
        )

    async def _adelete_resource(self, resource_id: str) -> int:
        return await run_in_executor(None, self._delete_resource, resource_id)

    async def _ais_forgotten(self, thread_id: str) -> bool:
        return await run_in_executor(None, self._is_forgotten, thread_id)

    async def _aadopt_thread(self, thread_id: str, resource_id: str) -> int:
        return await run_in_executor(None, self._adopt_thread, thread_id, resource_id)

    async def _areserve_threads(self, places: list[ThreadPlace]) -> int:
        return await run_in_executor(None, self._reserve_threads, places)

    async def _akeyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        return await run_in_executor(
            None, lambda: self._keyword_search(query, scope=scope, limit=limit)
        )

    async def _aids_in_scope(self, message_ids: list[str], scope: ScopeFilter) -> set[str]:
        if type(self)._ids_in_scope is StorageHooks._ids_in_scope:  # the default reads windows:
            found = await self._aget_windows(message_ids, before=0, after=0, scope=scope)
            return set(found)  # through the backend's own async read (a native driver's too)
        return await run_in_executor(None, self._ids_in_scope, message_ids, scope)

    async def _akept_share(self, scope: ScopeFilter) -> float | None:
        if type(self)._kept_share is StorageHooks._kept_share:
            return None  # no estimate: no executor hop to say so
        return await run_in_executor(None, self._kept_share, scope)

    async def _acount(self, scope: ScopeFilter | None) -> int:
        return await run_in_executor(None, self._count, scope)

    async def _acount_up_to(self, scope: ScopeFilter | None, up_to: int) -> int:
        return await run_in_executor(None, self._count_up_to, scope, up_to)

    async def _acompact(self) -> CompactResult:
        return await run_in_executor(None, self._compact)

    async def _adelete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        return await run_in_executor(None, self._delete_before, cutoff, scope)

    async def _amove_thread(self, thread_id: str, to_resource: str, owner: str | None) -> int:
        return await run_in_executor(None, self._move_thread, thread_id, to_resource, owner)

    async def _aunretire_thread(self, thread_id: str) -> bool:
        return await run_in_executor(None, self._unretire_thread, thread_id)

    async def _aclose(self) -> None:
        await run_in_executor(None, self._close)
