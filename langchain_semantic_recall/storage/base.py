"""Message storage: the ordered record of every message of every thread.

A backend implements a small set of synchronous methods; the async twins default to
running them in an executor and a backend with a native async driver overrides them.
Every backend must pass the shared conformance suite (``tests/conformance``).

Rules every backend keeps:

- A thread belongs to exactly one resource, and a message id to exactly one thread:
  writing either under another owner raises :class:`OwnershipError` and writes nothing.
- Writing an existing message id again replaces its role, text, time and payload but
  keeps its place (sequence number) in the thread: re-indexing never duplicates. When
  one batch repeats an id, the last record wins. A failed batch uses up no sequence
  numbers.
- A forgotten thread is retired: later writes to it raise :class:`ForgottenThreadError`.
  Deleting a thread that was never written still retires its id.
- Reads take a :class:`ScopeFilter` and never return a message outside it.
- Times must be timezone-aware (compared as instants); negative window sizes and a
  page ``limit`` below 1 raise :class:`InvalidInputError`. Thread ids sort by code
  point (PostgreSQL: ``COLLATE "C"``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.records import MessageRecord, ScopeFilter, StoredMessage


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A summary of one thread."""

    thread_id: str
    resource_id: str
    message_count: int
    first_at: datetime | None
    last_at: datetime | None


class MessageStorage(ABC):
    """Abstract message storage. Subclass it and implement the abstract methods."""

    supports_keyword_search: ClassVar[bool] = False
    """Whether :meth:`keyword_search` is implemented (full-text search in the storage)."""

    # --- required surface -------------------------------------------------------------

    @abstractmethod
    def put(self, records: Sequence[MessageRecord]) -> list[StoredMessage]:
        """Insert or update messages atomically (all or nothing), in the given order.

        New messages get the next sequence numbers of their thread; known ids keep theirs.
        Returns the stored messages, in input order.
        """

    @abstractmethod
    def get_windows(
        self, message_ids: Sequence[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        """For each id inside ``scope``: it with ``before``/``after`` neighbours of its thread.

        Ids that are unknown or outside the scope are absent from the result.
        """

    @abstractmethod
    def get_thread_owner(self, thread_id: str) -> str | None:
        """The resource that owns the thread, or None if the thread is unknown."""

    @abstractmethod
    def list_messages(
        self,
        scope: ScopeFilter | None = None,
        *,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[StoredMessage]:
        """A page of messages ordered by (thread_id, seq), starting after ``after``.

        ``scope`` None lists every message (maintenance: reindex, stats).
        """

    @abstractmethod
    def list_threads(self, resource_id: str | None = None) -> list[ThreadInfo]:
        """Threads of a resource (or all), ordered by thread id."""

    @abstractmethod
    def delete_thread(self, thread_id: str) -> int:
        """Delete a thread's messages and retire its id. Returns the number deleted."""

    @abstractmethod
    def delete_resource(self, resource_id: str) -> int:
        """Delete every thread of a resource and retire their ids. Returns messages deleted."""

    @abstractmethod
    def is_forgotten(self, thread_id: str) -> bool:
        """Whether the thread was deleted (its id is retired)."""

    def keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """(message id, score) of the best keyword matches within the scope, best first."""
        raise NotImplementedError(f"{type(self).__name__} has no keyword search")

    def close(self) -> None:  # noqa: B027 - optional hook, most backends have nothing to close
        """Release connections."""

    # --- derived helpers --------------------------------------------------------------

    def count(self, scope: ScopeFilter | None = None) -> int:
        """Number of stored messages in the scope (or in total)."""
        return sum(t.message_count for t in self._threads_in(scope))

    def _threads_in(self, scope: ScopeFilter | None) -> list[ThreadInfo]:
        threads = self.list_threads(scope.resource_id if scope else None)
        if scope is not None and scope.thread_id is not None:
            threads = [t for t in threads if t.thread_id == scope.thread_id]
        return threads

    # --- async twins (override with a native driver where there is one) --------------

    async def aput(self, records: Sequence[MessageRecord]) -> list[StoredMessage]:
        return await run_in_executor(None, self.put, records)

    async def aget_windows(
        self, message_ids: Sequence[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        return await run_in_executor(
            None, lambda: self.get_windows(message_ids, before=before, after=after, scope=scope)
        )

    async def aget_thread_owner(self, thread_id: str) -> str | None:
        return await run_in_executor(None, self.get_thread_owner, thread_id)

    async def alist_messages(
        self,
        scope: ScopeFilter | None = None,
        *,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[StoredMessage]:
        return await run_in_executor(
            None, lambda: self.list_messages(scope, after=after, limit=limit)
        )

    async def alist_threads(self, resource_id: str | None = None) -> list[ThreadInfo]:
        return await run_in_executor(None, self.list_threads, resource_id)

    async def adelete_thread(self, thread_id: str) -> int:
        return await run_in_executor(None, self.delete_thread, thread_id)

    async def adelete_resource(self, resource_id: str) -> int:
        return await run_in_executor(None, self.delete_resource, resource_id)

    async def ais_forgotten(self, thread_id: str) -> bool:
        return await run_in_executor(None, self.is_forgotten, thread_id)

    async def akeyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        return await run_in_executor(
            None, lambda: self.keyword_search(query, scope=scope, limit=limit)
        )

    async def acount(self, scope: ScopeFilter | None = None) -> int:
        return await run_in_executor(None, self.count, scope)

    async def aclose(self) -> None:
        await run_in_executor(None, self.close)
