"""The index (output) side of :class:`SemanticRecall`: store every message, embed the text.

Every message of a turn is written to storage first (all roles); user and assistant text
is then chunked, embedded in one batched call through the shared cache and upserted. A
failure after the storage write is logged and reported, never raised: the messages are
kept and ``reindex(missing_only=True)`` makes the vectors whole again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage

from langchain_semantic_recall.embeddings import (
    EmbeddingCache,
    aembed_with_cache,
    embed_with_cache,
    split_for_embedding,
)
from langchain_semantic_recall.errors import EmbeddingMismatchError, ForgottenThreadError
from langchain_semantic_recall.messages import build_records, skip_reason, to_messages
from langchain_semantic_recall.records import IndexResult, MessageRecord, VectorRecord
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex, chunk_id

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import IndexInfo


@dataclass(slots=True)
class _Turn:
    """The records of one ``index`` call and what becomes of them."""

    thread_id: str
    records: list[MessageRecord]
    skipped: dict[str, str] = field(default_factory=dict)
    to_embed: list[MessageRecord] = field(default_factory=list)

    @property
    def resource_id(self) -> str:
        return self.records[0].resource_id

    @property
    def embedded_ids(self) -> list[str]:
        return [r.id for r in self.to_embed]

    def result(
        self, *, stored: bool = True, embedded: bool = False, error: str | None = None
    ) -> IndexResult:
        return IndexResult(
            stored=tuple(r.id for r in self.records) if stored else (),
            embedded=tuple(self.embedded_ids) if embedded else (),
            skipped=self.skipped,
            error=error,
        )


def _with_vectors(
    pending: Sequence[VectorRecord], vectors: Sequence[list[float]]
) -> list[VectorRecord]:
    return [replace(p, vector=v) for p, v in zip(pending, vectors, strict=True)]


def pending_vectors(embeddings: Embeddings, records: Sequence[MessageRecord]) -> list[VectorRecord]:
    """One vector record per chunk of each record, vector still empty (filled once embedded).

    The first chunk's id is the message id, later ones ``<message_id>#<n>``.
    """
    return [
        VectorRecord(
            id=chunk_id(record.id, n),
            vector=[],
            message_id=record.id,
            thread_id=record.thread_id,
            resource_id=record.resource_id,
            role=record.role,
            content=piece,
            created_at=record.created_at,
        )
        for record in records
        for n, piece in enumerate(split_for_embedding(embeddings, record.text))
    ]


class IndexingMixin:
    """``index`` / ``aindex`` and the vector writes ``reindex`` shares. Mixed into
    :class:`SemanticRecall`."""

    storage: MessageStorage
    vector_store: VectorIndex
    embeddings: Embeddings
    cache: EmbeddingCache
    logger: logging.Logger
    read_only: bool

    if TYPE_CHECKING:

        def ensure_index(self) -> IndexInfo: ...
        async def aensure_index(self) -> IndexInfo: ...
        def _ids(
            self, thread_id: str | None, resource_id: str | None
        ) -> tuple[str | None, str | None]: ...

    def _plan(self, messages: Sequence[BaseMessage], thread_id: str, resource_id: str) -> _Turn:
        """What to store and what to embed for one turn (pure)."""
        records = build_records(
            messages, thread_id=thread_id, resource_id=resource_id, now=datetime.now(UTC)
        )
        by_id = {m.id: m for m in messages if m.id}
        turn = _Turn(thread_id=thread_id, records=records)
        for record in records:
            reason = skip_reason(record, by_id.get(record.id))
            if reason is None:
                turn.to_embed.append(record)
            else:
                turn.skipped[record.id] = reason
        return turn

    def _vector_records(
        self, records: Sequence[MessageRecord]
    ) -> tuple[list[VectorRecord], list[str]]:
        """One vector record per chunk (vectors still empty) and the texts to embed."""
        pending = pending_vectors(self.embeddings, records)
        return pending, [p.content for p in pending]

    def _write_vectors(self, info: IndexInfo, records: Sequence[MessageRecord]) -> None:
        """Chunk, embed (one batched call, through the cache) and upsert."""
        pending, texts = self._vector_records(records)
        vectors = embed_with_cache(
            self.embeddings, self.cache, info.name, texts, dimension=info.dimension
        )
        self.vector_store.upsert(info.name, _with_vectors(pending, vectors))

    async def _awrite_vectors(self, info: IndexInfo, records: Sequence[MessageRecord]) -> None:
        pending, texts = self._vector_records(records)
        vectors = await aembed_with_cache(
            self.embeddings, self.cache, info.name, texts, dimension=info.dimension
        )
        await self.vector_store.aupsert(info.name, _with_vectors(pending, vectors))

    def _vectors_failed(self, turn: _Turn, error: Exception) -> IndexResult:
        self.logger.warning(
            "indexing vectors failed; %d message(s) stored without vectors "
            "(repair with reindex(missing_only=True))",
            len(turn.to_embed),
            exc_info=True,
        )
        return turn.result(error=repr(error))

    def _forgotten(self, turn: _Turn) -> IndexResult:
        self.logger.warning("thread %r was forgotten; late write dropped", turn.thread_id)
        return IndexResult(skipped=dict.fromkeys((r.id for r in turn.records), "forgotten"))

    def index(
        self,
        messages: Sequence[BaseMessage] | Any,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> IndexResult:
        """Persist a turn's messages and embed its user and assistant messages.

        Every message is stored (all roles). Messages without an id get a deterministic
        one, so repeating a call adds nothing. To import history with its real dates, put
        the creation time in ``message.additional_kwargs["created_at"]`` (ISO 8601 text,
        a datetime or epoch seconds). No thread id, or ``read_only``: nothing happens.
        Without a resource id the thread's owner is used, or the thread is its own
        resource. Embedding or vector failures are logged and reported in the result;
        the messages stay stored and ``reindex(missing_only=True)`` repairs the vectors.

        Raises:
            OwnershipError: the thread (or a message id) belongs to another resource.
            StorageError: the storage could not be written (nothing was stored).
        """
        items = to_messages(messages)
        thread_id, resource_id = self._ids(thread_id, resource_id)
        if thread_id is None or self.read_only:
            return IndexResult()
        if resource_id is None:
            resource_id = self.storage.get_thread_owner(thread_id) or thread_id
        turn = self._plan(items, thread_id, resource_id)
        if not turn.records:
            return turn.result(stored=False)
        try:
            self.storage.put(turn.records)
        except ForgottenThreadError:
            return self._forgotten(turn)
        if not turn.to_embed:
            return turn.result()
        try:
            info = self.ensure_index()
            self._write_vectors(info, turn.to_embed)
            if self.storage.is_forgotten(thread_id):  # forgotten while we embedded
                self.vector_store.delete(
                    info.name, message_ids=turn.embedded_ids, resource_id=turn.resource_id
                )
                return self._forgotten(turn)
        except EmbeddingMismatchError:
            raise
        except Exception as error:
            return self._vectors_failed(turn, error)
        return turn.result(embedded=True)

    async def aindex(
        self,
        messages: Sequence[BaseMessage] | Any,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> IndexResult:
        """Async twin of :meth:`index`."""
        items = to_messages(messages)
        thread_id, resource_id = self._ids(thread_id, resource_id)
        if thread_id is None or self.read_only:
            return IndexResult()
        if resource_id is None:
            resource_id = await self.storage.aget_thread_owner(thread_id) or thread_id
        turn = self._plan(items, thread_id, resource_id)
        if not turn.records:
            return turn.result(stored=False)
        try:
            await self.storage.aput(turn.records)
        except ForgottenThreadError:
            return self._forgotten(turn)
        if not turn.to_embed:
            return turn.result()
        try:
            info = await self.aensure_index()
            await self._awrite_vectors(info, turn.to_embed)
            if await self.storage.ais_forgotten(thread_id):
                await self.vector_store.adelete(
                    info.name, message_ids=turn.embedded_ids, resource_id=turn.resource_id
                )
                return self._forgotten(turn)
        except EmbeddingMismatchError:
            raise
        except Exception as error:
            return self._vectors_failed(turn, error)
        return turn.result(embedded=True)
