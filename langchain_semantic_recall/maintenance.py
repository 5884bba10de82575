"""Forgetting, reindexing and stats: the maintenance half of :class:`SemanticRecall`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from langchain_semantic_recall.errors import InvalidInputError, OwnershipError
from langchain_semantic_recall.messages import check_id, skip_reason
from langchain_semantic_recall.records import ScopeFilter, StoredMessage

if TYPE_CHECKING:
    from langchain_semantic_recall.embeddings import EmbeddingCache
    from langchain_semantic_recall.recall import IndexInfo
    from langchain_semantic_recall.storage.base import MessageStorage
    from langchain_semantic_recall.vectors.base import VectorIndex

Progress = Callable[[int], None]
"""Called with the number of messages just handled (for progress bars)."""


@dataclass(frozen=True, slots=True)
class RecallStats:
    """What is stored, and whether the vectors are whole."""

    index_name: str
    model: str
    dimension: int
    messages: int
    threads: int
    resources: int
    embeddable: int
    """Messages that should have a vector (user and assistant messages with text)."""
    vectors: int
    """Messages that have at least one vector."""
    missing_vectors: int
    """Embeddable messages without a vector (repair with ``reindex(missing_only=True)``)."""
    orphan_vectors: int
    """Vectors whose message is no longer stored (removed by the repair too)."""


def _scope(resource_id: str | None, thread_id: str | None) -> ScopeFilter | None:
    if resource_id is None and thread_id is None:
        return None
    if resource_id is not None:
        check_id("resource_id", resource_id)
    if thread_id is not None:
        check_id("thread_id", thread_id)
    return ScopeFilter(resource_id=resource_id, thread_id=thread_id)


def _check_batch(batch_size: object, progress: object) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if progress is not None and not callable(progress):
        raise InvalidInputError(f"progress must be a callable or None, got {progress!r}")


def _forgotten_ids(forgotten: Callable[[str], bool], written: Sequence[StoredMessage]) -> list[str]:
    """Ids of the written messages whose thread was forgotten meanwhile."""
    gone = {t for t in {m.thread_id for m in written} if forgotten(t)}
    return [m.id for m in written if m.thread_id in gone]


def _pages(
    storage: MessageStorage, scope: ScopeFilter | None, size: int
) -> Iterator[list[StoredMessage]]:
    after: tuple[str, int] | None = None
    while True:
        page = storage.list_messages(scope, after=after, limit=size)
        if not page:
            return
        yield page
        after = (page[-1].thread_id, page[-1].seq)


def _embeddable(page: Sequence[StoredMessage]) -> list[StoredMessage]:
    return [m for m in page if skip_reason(m) is None]


class MaintenanceMixin:
    """Forget, reindex and stats, with async twins. Mixed into SemanticRecall."""

    storage: MessageStorage
    vector_store: VectorIndex
    logger: logging.Logger
    cache: EmbeddingCache

    if TYPE_CHECKING:

        def ensure_index(self) -> IndexInfo: ...
        async def aensure_index(self) -> IndexInfo: ...
        def _write_vectors(self, info: IndexInfo, records: Sequence[StoredMessage]) -> None: ...
        async def _awrite_vectors(
            self, info: IndexInfo, records: Sequence[StoredMessage]
        ) -> None: ...

    # --- forgetting ---------------------------------------------------------------------

    @staticmethod
    def _check_forget_ids(thread_id: object, resource_id: object) -> None:
        check_id("thread_id", thread_id)
        if resource_id is not None:
            check_id("resource_id", resource_id)

    def _check_owner(self, thread_id: str, owner: str | None, resource_id: str | None) -> None:
        if resource_id is not None and owner is not None and owner != resource_id:
            raise OwnershipError(
                f"thread {thread_id!r} does not belong to resource {resource_id!r}"
            )

    def forget_thread(self, thread_id: str, *, resource_id: str | None = None) -> int:
        """Delete a thread's messages and vectors; returns the number of messages deleted.

        When this returns, nothing of the thread can be recalled, searched or listed, and
        its id is retired: a late or concurrent ``index`` (or ``reindex``) call for it
        stores nothing. Pass ``resource_id`` to refuse deleting a thread of another
        resource. The embedding cache is emptied (it holds recent texts). If it raises
        (a backend failed), call it again: it is idempotent.
        """
        self._check_forget_ids(thread_id, resource_id)
        owner = self.storage.get_thread_owner(thread_id)
        self._check_owner(thread_id, owner, resource_id)
        deleted = self.storage.delete_thread(thread_id)
        self.cache.clear()
        # The owner lets a vector layout partitioned by resource touch one partition.
        self.vector_store.delete(self.ensure_index().name, thread_id=thread_id, resource_id=owner)
        return deleted

    async def aforget_thread(self, thread_id: str, *, resource_id: str | None = None) -> int:
        """Async twin of :meth:`forget_thread`."""
        self._check_forget_ids(thread_id, resource_id)
        owner = await self.storage.aget_thread_owner(thread_id)
        self._check_owner(thread_id, owner, resource_id)
        deleted = await self.storage.adelete_thread(thread_id)
        self.cache.clear()
        name = (await self.aensure_index()).name
        await self.vector_store.adelete(name, thread_id=thread_id, resource_id=owner)
        return deleted

    def forget_resource(self, resource_id: str) -> int:
        """Delete every thread of a resource (messages and vectors); returns messages deleted.

        The resource's existing thread ids are retired; the resource itself may start new
        threads later (a returning user starts from nothing). The embedding cache is
        emptied. If it raises (a backend failed), call it again: it is idempotent.
        """
        check_id("resource_id", resource_id)
        deleted = self.storage.delete_resource(resource_id)
        self.cache.clear()
        self.vector_store.delete(self.ensure_index().name, resource_id=resource_id)
        return deleted

    async def aforget_resource(self, resource_id: str) -> int:
        """Async twin of :meth:`forget_resource`."""
        check_id("resource_id", resource_id)
        deleted = await self.storage.adelete_resource(resource_id)
        self.cache.clear()
        await self.vector_store.adelete((await self.aensure_index()).name, resource_id=resource_id)
        return deleted

    # --- reindex ------------------------------------------------------------------------

    def reindex(
        self,
        *,
        resource_id: str | None = None,
        thread_id: str | None = None,
        missing_only: bool = False,
        batch_size: int = 256,
        progress: Progress | None = None,
    ) -> int:
        """Embed stored messages again into this engine's index; returns vectors written.

        Use it after switching embedder (a new index is filled from storage), or with
        ``missing_only=True`` to repair vectors lost to a failure; the repair also removes
        vectors whose message is gone. Idempotent: vector ids are message ids. A thread
        forgotten while this runs keeps no vector (as for ``index``).
        """
        _check_batch(batch_size, progress)
        scope = _scope(resource_id, thread_id)
        info = self.ensure_index()
        have = self.vector_store.message_ids(info.name, scope) if missing_only else set()
        stored_ids: set[str] = set()
        written = 0
        for page in _pages(self.storage, scope, batch_size):
            stored_ids.update(m.id for m in page)
            todo = [m for m in _embeddable(page) if m.id not in have]
            if todo:
                self._write_vectors(info, todo)
                written += len(todo)
                # Forgotten while we embedded: the forget may have deleted its vectors
                # before ours landed, so remove them (the same rule as index).
                if gone := _forgotten_ids(self.storage.is_forgotten, todo):
                    self.vector_store.delete(info.name, message_ids=gone)
                    written -= len(gone)
            if progress is not None:
                progress(len(page))
        orphans = have - stored_ids
        if orphans:
            self.vector_store.delete(info.name, message_ids=sorted(orphans))
        return written

    async def areindex(
        self,
        *,
        resource_id: str | None = None,
        thread_id: str | None = None,
        missing_only: bool = False,
        batch_size: int = 256,
        progress: Progress | None = None,
    ) -> int:
        """Async twin of :meth:`reindex`."""
        _check_batch(batch_size, progress)
        scope = _scope(resource_id, thread_id)
        info = await self.aensure_index()
        have = await self.vector_store.amessage_ids(info.name, scope) if missing_only else set()
        stored_ids: set[str] = set()
        written = 0
        after: tuple[str, int] | None = None
        while page := await self.storage.alist_messages(scope, after=after, limit=batch_size):
            after = (page[-1].thread_id, page[-1].seq)
            stored_ids.update(m.id for m in page)
            todo = [m for m in _embeddable(page) if m.id not in have]
            if todo:
                await self._awrite_vectors(info, todo)
                written += len(todo)
                forgotten = {
                    t for t in {m.thread_id for m in todo} if await self.storage.ais_forgotten(t)
                }
                if gone := _forgotten_ids(forgotten.__contains__, todo):
                    await self.vector_store.adelete(info.name, message_ids=gone)
                    written -= len(gone)
            if progress is not None:
                progress(len(page))
        orphans = have - stored_ids
        if orphans:
            await self.vector_store.adelete(info.name, message_ids=sorted(orphans))
        return written

    # --- stats --------------------------------------------------------------------------

    def stats(self, *, resource_id: str | None = None, thread_id: str | None = None) -> RecallStats:
        """Counts of messages, threads and vectors, and how many vectors are missing."""
        scope = _scope(resource_id, thread_id)
        info = self.ensure_index()
        have = self.vector_store.message_ids(info.name, scope)
        return _tally(info, have, _pages(self.storage, scope, 1000))

    async def astats(
        self, *, resource_id: str | None = None, thread_id: str | None = None
    ) -> RecallStats:
        """Async twin of :meth:`stats`."""
        scope = _scope(resource_id, thread_id)
        info = await self.aensure_index()
        have = await self.vector_store.amessage_ids(info.name, scope)
        pages: list[list[StoredMessage]] = []
        after: tuple[str, int] | None = None
        while page := await self.storage.alist_messages(scope, after=after, limit=1000):
            pages.append(page)
            after = (page[-1].thread_id, page[-1].seq)
        return _tally(info, have, iter(pages))


def _tally(info: IndexInfo, have: set[str], pages: Iterator[list[StoredMessage]]) -> RecallStats:
    messages = 0
    threads: set[str] = set()
    resources: set[str] = set()
    stored: set[str] = set()
    embeddable: set[str] = set()
    for page in pages:
        messages += len(page)
        for m in page:
            threads.add(m.thread_id)
            resources.add(m.resource_id)
            stored.add(m.id)
        embeddable.update(m.id for m in _embeddable(page))
    return RecallStats(
        index_name=info.name,
        model=info.model,
        dimension=info.dimension,
        messages=messages,
        threads=len(threads),
        resources=len(resources),
        embeddable=len(embeddable),
        vectors=len(have & stored),
        missing_vectors=len(embeddable - have),
        orphan_vectors=len(have - stored),
    )
