"""Message storage: the ordered record of every message of every thread.

The public methods of `MessageStorage` (`put`, `get_windows`, ... and their
`a`-prefixed async twins) are concrete: they check their input once
(`checks`) and call a small protected hook (`_put`, `_get_windows`, ...: `hooks`)
that a backend implements with storage work only. The protected async twins default to
running the sync ones in an executor; a backend with a native async driver overrides
them. Every backend must pass the shared conformance suite (`tests/conformance`).

Rules every backend keeps:

- A thread belongs to exactly one resource, and a message id to exactly one thread:
  writing either under another owner raises `OwnershipError` and writes nothing.
- Writing an existing message id again replaces its role, text, time and payload but
  keeps its place (sequence number) in the thread: re-indexing never duplicates. When
  one batch repeats an id, the last record wins. A failed batch uses up no sequence
  numbers.
- A thread written without a resource is owned by `NO_RESOURCE` until
  `adopt_thread` gives it its owner (once: a compare-and-set).
- A forgotten thread is retired: later writes to it raise `ForgottenThreadError`.
  Deleting a thread that was never written still retires its id. Emptying a thread
  (`delete_thread(..., retire=False)`) deletes its messages and its owner but leaves
  the id free for later writes (by any resource).
- `delete_before` (retention) keeps threads, owners and sequence numbers.
- Reads take a `ScopeFilter` and never return a message outside it.
- Times must be timezone-aware (compared as instants); negative window sizes and a
  page `limit` below 1 raise `InvalidInputError`. Thread ids sort by code
  point (PostgreSQL: `COLLATE "C"`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from langchain_semantic_recall.errors import CompactNotSupportedError
from langchain_semantic_recall.records import (
    CompactResult,
    Deleted,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
    ThreadPlace,
)
from langchain_semantic_recall.storable import check_id
from langchain_semantic_recall.storage.checks import (
    before_input,
    check_scope,
    checked_records,
    compact_refusal,
    count_input,
    delete_thread_input,
    keyword_input,
    last_input,
    message_id_of_another,  # noqa: F401 - the refusals' 0.3 import path
    move_thread_input,
    page_input,
    reserve_input,
    thread_of_another,  # noqa: F401 - the refusals' 0.3 import path
    windows_input,
)
from langchain_semantic_recall.storage.hooks import StorageHooks

logger = logging.getLogger(__name__)


def _log_delete(what: str, key: str, deleted: int, *, retire: bool = True) -> None:
    logger.info("%s %s %r (%d messages)", "forgot" if retire else "emptied", what, key, deleted)


def _share(value: object) -> float | None:
    """A backend's estimate if it is a share in [0, 1], else None (no estimate)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    return None


class MessageStorage(StorageHooks):
    """Abstract message storage: public methods check input, backends store.

    Subclass it and implement the abstract hooks of `StorageHooks` (`_put`,
    `_get_windows`, `_get_thread_owner`, `_list_messages`, `_list_threads`,
    `_delete_thread`, `_delete_resource`, `_is_forgotten`); optionally the capabilities
    (`_keyword_search` with `supports_keyword_search = True`, `_delete_before` for
    retention...), cheaper defaults
    (`_count`) and the `_a*` async twins (a native async driver). They receive checked
    input only: valid ids, `created_at` and cutoffs in UTC, window sizes >= 0, `limit` >= 1.
    `docs/writing-a-backend.md` has the whole contract.

    Every public method raises `InvalidInputError` on unusable input (an id that
    is blank, not a string or holds NUL or a lone surrogate; a naive `created_at`; a
    negative window; `limit` below 1; a scope that is not a `ScopeFilter`).
    """

    supports_keyword_search: ClassVar[bool] = False
    """Whether `keyword_search` is implemented (full-text search in the storage)."""
    supports_compact: ClassVar[bool] = False
    """Whether `compact` is implemented (erases the bytes of deleted messages)."""
    supports_move: ClassVar[bool] = False
    """Whether `move_thread` and `unretire_thread` are implemented."""

    # --- writes -----------------------------------------------------------------------

    def put(self, records: Sequence[MessageRecord]) -> list[StoredMessage]:
        """Insert or update messages atomically (all or nothing), in the given order.

        New messages get the next sequence numbers of their thread; known ids keep theirs.

        Args:
            records: The messages to write, each with its thread, resource and UTC time.

        Returns:
            The stored messages (`created_at` in UTC), in input order.

        Raises:
            OwnershipError: A thread of another resource, or a message id of another thread.
            ForgottenThreadError: A record targets a forgotten thread.
            InvalidInputError: An unusable record (see the class docstring).
        """
        checked = checked_records(records)
        return self._put(checked) if checked else []

    async def aput(self, records: Sequence[MessageRecord]) -> list[StoredMessage]:
        """Async twin of `put`."""
        checked = checked_records(records)
        return await self._aput(checked) if checked else []

    def adopt_thread(self, thread_id: str, resource_id: str) -> int:
        """`move_thread` for a thread stored without an owner (`NO_RESOURCE`) only, atomic.

        Returns the messages moved (0: unknown, or owned by `resource_id` already).

        Args:
            thread_id: The thread stored without an owner.
            resource_id: Its owner from now on.

        Raises:
            OwnershipError: the thread is owned by another resource.
        """
        move_thread_input(thread_id, resource_id)
        return self._adopt_thread(thread_id, resource_id)

    async def aadopt_thread(self, thread_id: str, resource_id: str) -> int:
        """Async twin of `adopt_thread`."""
        move_thread_input(thread_id, resource_id)
        return await self._aadopt_thread(thread_id, resource_id)

    def reserve_threads(self, places: Sequence[ThreadPlace]) -> int:
        """Keep threads' owners and numbering, all or nothing (`migrate`'s copies).

        A thread is created, empty and owned, if new; its next new message gets a seq of
        at least `next_seq` (a higher one stays). So a copy keeps a thread retention
        emptied, with its owner, and the seqs of one whose oldest messages it deleted.

        Args:
            places: The threads, each with its owner and least next seq.

        Returns:
            The threads created.

        Raises:
            OwnershipError: a thread belongs to another resource.
            ForgottenThreadError: a thread id is retired.
            InvalidInputError: an unusable id or a `next_seq` below 0.
            NotImplementedError: the backend cannot (its `_reserve_threads` is not written).
        """
        checked = reserve_input(places)
        return self._reserve_threads(checked) if checked else 0

    async def areserve_threads(self, places: Sequence[ThreadPlace]) -> int:
        """Async twin of `reserve_threads`."""
        checked = reserve_input(places)
        return await self._areserve_threads(checked) if checked else 0

    def delete_thread(
        self, thread_id: str, *, retire: bool = True, owner: str | None = None
    ) -> int:
        """Delete a thread's messages; returns the number deleted.

        Args:
            thread_id: The thread. Unknown threads delete nothing.
            retire: True (forget): the id is retired, even if never written; later writes
                raise `ForgottenThreadError`. False (empty): messages and owner go, later
                writes succeed under any resource (a retired id stays retired).
            owner: The resource the caller found owning the thread (None: any). The
                delete checks it in its own transaction, so a move made since the
                caller's check is never deleted with it.

        Raises:
            OwnershipError: `owner` is given and the thread now belongs to another
                resource; nothing is deleted.
        """
        delete_thread_input(thread_id, retire, owner)
        deleted = self._delete_thread(thread_id, retire=retire, owner=owner)
        _log_delete("thread", thread_id, deleted, retire=retire)
        return deleted

    async def adelete_thread(
        self, thread_id: str, *, retire: bool = True, owner: str | None = None
    ) -> int:
        """Async twin of `delete_thread`."""
        delete_thread_input(thread_id, retire, owner)
        deleted = await self._adelete_thread(thread_id, retire=retire, owner=owner)
        _log_delete("thread", thread_id, deleted, retire=retire)
        return deleted

    def delete_resource(self, resource_id: str) -> int:
        """Delete every thread of a resource and retire their ids; count the messages.

        Args:
            resource_id: The resource whose threads go.
        """
        check_id("resource_id", resource_id)
        deleted = self._delete_resource(resource_id)
        _log_delete("resource", resource_id, deleted)
        return deleted

    async def adelete_resource(self, resource_id: str) -> int:
        """Async twin of `delete_resource`."""
        check_id("resource_id", resource_id)
        deleted = await self._adelete_resource(resource_id)
        _log_delete("resource", resource_id, deleted)
        return deleted

    def delete_before(self, cutoff: datetime, scope: ScopeFilter | None = None) -> Deleted:
        """Delete the messages created before `cutoff` (in `scope`, or all); which went.

        Args:
            cutoff: A timezone-aware instant: messages created before it go (one at it stays).
            scope: Only messages inside it; None deletes in every resource.
        """
        return self._delete_before(before_input(cutoff, scope), scope)

    async def adelete_before(self, cutoff: datetime, scope: ScopeFilter | None = None) -> Deleted:
        """Async twin of `delete_before`."""
        return await self._adelete_before(before_input(cutoff, scope), scope)

    def move_thread(self, thread_id: str, *, to_resource: str, owner: str | None = None) -> int:
        """Give a thread and its messages to another resource, atomically; returns moved.

        Ids, order, content and the keyword index follow; an unknown (or forgotten) thread
        moves nothing. The caller checks who may; a backend without `supports_move` raises
        `NotImplementedError`.

        Args:
            thread_id: The thread to move.
            to_resource: The resource that owns it afterwards.
            owner: The resource the caller found owning it (None: any), checked in the
                move's own transaction.

        Raises:
            OwnershipError: `owner` is given and the thread now belongs to another one.
        """
        move_thread_input(thread_id, to_resource, owner)
        moved = self._move_thread(thread_id, to_resource, owner)
        logger.info("moved thread %r to resource %r (%d messages)", thread_id, to_resource, moved)
        return moved

    async def amove_thread(
        self, thread_id: str, *, to_resource: str, owner: str | None = None
    ) -> int:
        """Async twin of `move_thread`."""
        move_thread_input(thread_id, to_resource, owner)
        moved = await self._amove_thread(thread_id, to_resource, owner)
        logger.info("moved thread %r to resource %r (%d messages)", thread_id, to_resource, moved)
        return moved

    def unretire_thread(self, thread_id: str) -> bool:
        """Lift a forget's retirement of a thread id (it may be written again); was it retired?

        Args:
            thread_id: The forgotten thread's id.
        """
        return self._unretire_thread(check_id("thread_id", thread_id))

    async def aunretire_thread(self, thread_id: str) -> bool:
        """Async twin of `unretire_thread`."""
        return await self._aunretire_thread(check_id("thread_id", thread_id))

    # --- reads ------------------------------------------------------------------------

    def get_windows(
        self, message_ids: Sequence[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        """For each id inside `scope`: it with `before`/`after` neighbours of its thread.

        Args:
            message_ids: Ids of the hits. Unknown ids and ids outside the scope are absent
                from the result.
            before: Messages to include before each hit (clipped at the thread start).
            after: Messages to include after each hit (clipped at the thread end).
            scope: Which messages may be returned.

        Returns:
            Hit id -> the window of its own thread, ordered by seq, including the hit.
        """
        ids = windows_input(message_ids, before, after, scope)
        return self._get_windows(ids, before=before, after=after, scope=scope) if ids else {}

    async def aget_windows(
        self, message_ids: Sequence[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        """Async twin of `get_windows`."""
        ids = windows_input(message_ids, before, after, scope)
        if not ids:
            return {}
        return await self._aget_windows(ids, before=before, after=after, scope=scope)

    def ids_in_scope(self, message_ids: Sequence[str], scope: ScopeFilter) -> set[str]:
        """Which of `message_ids` are stored messages inside `scope` (its filter included).

        What `get_windows` would return keys for, without reading the messages: a
        filtered search checks its vector candidates so.

        Args:
            message_ids: Ids to check. Unknown ids and ids outside the scope are absent.
            scope: The scope, with any metadata filter and time range.
        """
        ids = windows_input(message_ids, 0, 0, scope)
        return self._ids_in_scope(ids, scope) if ids else set()

    async def aids_in_scope(self, message_ids: Sequence[str], scope: ScopeFilter) -> set[str]:
        """Async twin of `ids_in_scope`."""
        ids = windows_input(message_ids, 0, 0, scope)
        return await self._aids_in_scope(ids, scope) if ids else set()

    def kept_share(self, scope: ScopeFilter) -> float | None:
        """About what share of its thread's (or resource's) messages `scope`'s filter keeps.

        An estimate (from a sample), or None when this storage has none at hand: a
        filtered search sizes its first look at the vector index by it.

        Args:
            scope: A scope with a metadata filter or a time range (1.0 when it has none).
        """
        check_scope(scope)
        return _share(self._kept_share(scope)) if scope.narrowed else 1.0

    async def akept_share(self, scope: ScopeFilter) -> float | None:
        """Async twin of `kept_share`."""
        check_scope(scope)
        return _share(await self._akept_share(scope)) if scope.narrowed else 1.0

    def get_thread_owner(self, thread_id: str) -> str | None:
        """The resource that owns the thread, or None if it is unknown or deleted.

        Args:
            thread_id: The thread.
        """
        return self._get_thread_owner(check_id("thread_id", thread_id))

    async def aget_thread_owner(self, thread_id: str) -> str | None:
        """Async twin of `get_thread_owner`."""
        return await self._aget_thread_owner(check_id("thread_id", thread_id))

    def list_messages(
        self,
        scope: ScopeFilter | None = None,
        *,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[StoredMessage]:
        """A page of messages ordered by (thread_id, seq), starting after `after`.

        Args:
            scope: Only messages inside it; None lists every message (maintenance).
            after: The (thread_id, seq) of the last message of the previous page.
            limit: Page size (>= 1).
        """
        cursor = page_input(scope, after, limit)
        return self._list_messages(scope, after=cursor, limit=limit)

    async def alist_messages(
        self,
        scope: ScopeFilter | None = None,
        *,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[StoredMessage]:
        """Async twin of `list_messages`."""
        cursor = page_input(scope, after, limit)
        return await self._alist_messages(scope, after=cursor, limit=limit)

    def last_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        """The newest `limit` messages of the scope's thread, oldest first, read alone.

        Args:
            scope: The thread to read (a `ScopeFilter` with a `thread_id`).
            limit: How many of its newest messages (>= 1).

        Raises:
            InvalidInputError: `scope` has no `thread_id`, or `limit` is below 1.
        """
        return self._last_messages(last_input(scope, limit), limit=limit)

    async def alast_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        """Async twin of `last_messages`."""
        return await self._alast_messages(last_input(scope, limit), limit=limit)

    def list_threads(self, resource_id: str | None = None) -> list[ThreadInfo]:
        """Threads of a resource (or all), ordered by thread id.

        Args:
            resource_id: Only this resource's threads; None lists every thread.
        """
        if resource_id is not None:
            check_id("resource_id", resource_id)
        return self._list_threads(resource_id)

    async def alist_threads(self, resource_id: str | None = None) -> list[ThreadInfo]:
        """Async twin of `list_threads`."""
        if resource_id is not None:
            check_id("resource_id", resource_id)
        return await self._alist_threads(resource_id)

    def count(self, scope: ScopeFilter | None = None, *, up_to: int | None = None) -> int:
        """Number of stored messages in the scope (or in total), at most `up_to`.

        `up_to` bounds the work too: search asks how small a scope is, on every call.

        Args:
            scope: Only messages inside it; None counts every message.
            up_to: Stop counting here (None: count all).
        """
        count_input(scope, up_to)
        return self._count(scope) if up_to is None else self._count_up_to(scope, up_to)

    async def acount(self, scope: ScopeFilter | None = None, *, up_to: int | None = None) -> int:
        """Async twin of `count`."""
        count_input(scope, up_to)
        return await (self._acount(scope) if up_to is None else self._acount_up_to(scope, up_to))

    def is_forgotten(self, thread_id: str) -> bool:
        """Whether the thread was forgotten (its id is retired).

        Args:
            thread_id: The thread.
        """
        return self._is_forgotten(check_id("thread_id", thread_id))

    async def ais_forgotten(self, thread_id: str) -> bool:
        """Async twin of `is_forgotten`."""
        return await self._ais_forgotten(check_id("thread_id", thread_id))

    def keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """(message id, score) of the best keyword matches within the scope, best first.

        Args:
            query: The text to match.
            scope: Which messages may match.
            limit: Most matches returned (>= 1).

        Raises:
            NotImplementedError: The backend has no keyword search
                (`supports_keyword_search` is False).
        """
        keyword_input(query, scope, limit)
        return self._keyword_search(query, scope=scope, limit=limit)

    async def akeyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """Async twin of `keyword_search`."""
        keyword_input(query, scope, limit)
        return await self._akeyword_search(query, scope=scope, limit=limit)

    def compact(self) -> CompactResult:
        """Erase what deleted messages left in the backend's files (free pages, indexes, logs).

        Run it after a forget (`SemanticRecall.purge` does). What it guarantees is the
        backend's: see `docs/data-handling.md`.

        Raises:
            CompactNotSupportedError: The backend cannot (`supports_compact` is False).
        """
        self._check_compact()
        return self._compact()

    async def acompact(self) -> CompactResult:
        """Async twin of `compact`."""
        self._check_compact()
        return await self._acompact()

    def _check_compact(self) -> None:
        if not self.supports_compact:
            raise CompactNotSupportedError(compact_refusal(self))

    def close(self) -> None:
        """Release connections (what `_close` holds); safe to call twice."""
        self._close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self._aclose()
