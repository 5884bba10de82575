"""Bulk import: many conversations into an engine at the embedder's own speed.

``SemanticRecall.index`` is shaped for one turn: store, embed, write the vectors, in that
order. Importing history that way pays, per thread, a batch padded to its own longest
message and a vector write (~10-30 ms of fsyncs in embedded Chroma) during which the
embedder waits. :func:`bulk_index` instead

* stores a whole batch of conversations in one storage transaction,
* embeds every text of the batch in ONE call (the local model sorts them by length, so
  batches are padded little), through the engine's cache,
* writes the vectors of batch *n* on a background thread while batch *n + 1* is embedded
  (the ONNX model and Chroma's Rust core both run outside the GIL).

It keeps ``index``'s rules: the same records and ids (re-importing adds nothing), system,
tool and recalled messages are stored but not embedded, long messages are chunked, a
thread that was forgotten is skipped (its messages are not stored again), and one
forgotten while its vectors were being written loses them again. Measured in
``docs/performance.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.embeddings import embed_with_cache
from langchain_semantic_recall.errors import ForgottenThreadError
from langchain_semantic_recall.indexing import pending_vectors
from langchain_semantic_recall.messages import build_records, skip_reason, to_messages
from langchain_semantic_recall.records import MessageRecord, VectorRecord

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

__all__ = ["BulkResult", "Conversation", "abulk_index", "bulk_index"]

logger = logging.getLogger(__name__)

Conversation = tuple[str, str, Sequence[BaseMessage]]
"""``(thread_id, resource_id, messages)``: one thread of one resource, in order."""


@dataclass(slots=True)
class BulkResult:
    """What :func:`bulk_index` did."""

    stored: int = 0
    """Messages written to storage."""
    embedded: int = 0
    """Messages whose vectors were written."""
    forgotten_threads: list[str] = field(default_factory=list)
    """Threads skipped because they were forgotten (their ids are retired)."""


def bulk_index(
    memory: SemanticRecall,
    conversations: Iterable[Conversation],
    *,
    batch_size: int = 2048,
    progress: Callable[[int], None] | None = None,
) -> BulkResult:
    """Store and embed many conversations, overlapping vector writes with embedding.

    Example::

        from langchain_semantic_recall.bulk import bulk_index

        result = bulk_index(memory, [("t1", "alice", messages), ("t2", "alice", more)])

    Args:
        memory: the engine to fill (its storage, vector index, embedder and cache).
        conversations: ``(thread_id, resource_id, messages)`` triples.
        batch_size: messages per storage transaction and embedding call.
        progress: called with the number of messages of each batch once it is stored.

    Raises:
        OwnershipError: a thread or message id belongs to another resource or thread.
        EmbeddingMismatchError: the embedder does not match the index.
        Exception: any embedding or vector-write failure (messages already stored stay
            stored; ``reindex(missing_only=True)`` completes them).
    """
    info = memory.ensure_index()
    result = BulkResult()
    pending: Future[None] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bulk-index") as writer:
        for batch in _batches(conversations, batch_size):
            records, to_embed = _store(memory, batch, result)
            if progress is not None:
                progress(len(records))
            rows = pending_vectors(memory.embeddings, to_embed)
            vectors = embed_with_cache(
                memory.embeddings, memory.cache, info.name, [row.content for row in rows]
            )
            ready = [replace(row, vector=v) for row, v in zip(rows, vectors, strict=True)]
            if pending is not None:
                pending.result()  # one write in flight at a time, errors surface here
            pending = writer.submit(_write, memory, info.name, ready)
            result.embedded += len(to_embed)
        if pending is not None:
            pending.result()
    return result


async def abulk_index(
    memory: SemanticRecall,
    conversations: Iterable[Conversation],
    *,
    batch_size: int = 2048,
    progress: Callable[[int], None] | None = None,
) -> BulkResult:
    """Async twin of :func:`bulk_index`.

    The embedded backends are synchronous and the import overlaps its own threads, so it
    runs in an executor: the event loop stays free while a large history is imported.
    """
    items = list(conversations)
    return await run_in_executor(
        None, lambda: bulk_index(memory, items, batch_size=batch_size, progress=progress)
    )


def _batches(
    conversations: Iterable[Conversation], size: int
) -> Iterable[list[tuple[str, list[MessageRecord], dict[str, BaseMessage]]]]:
    """Records of whole conversations, grouped into batches of about ``size`` messages."""
    batch: list[tuple[str, list[MessageRecord], dict[str, BaseMessage]]] = []
    count = 0
    now = datetime.now(UTC)
    for thread_id, resource_id, messages in conversations:
        items = to_messages(messages)
        records = build_records(items, thread_id=thread_id, resource_id=resource_id, now=now)
        batch.append((thread_id, records, {m.id: m for m in items if m.id}))
        count += len(records)
        if count >= size:
            yield batch
            batch, count = [], 0
    if batch:
        yield batch


def _store(
    memory: SemanticRecall,
    batch: Sequence[tuple[str, list[MessageRecord], dict[str, BaseMessage]]],
    result: BulkResult,
) -> tuple[list[MessageRecord], list[MessageRecord]]:
    """Store a batch in one transaction (thread by thread if one was forgotten)."""
    kept = list(batch)
    try:
        memory.storage.put([r for _, records, _ in kept for r in records])
    except ForgottenThreadError:
        kept = []
        for item in batch:
            try:
                memory.storage.put(item[1])
            except ForgottenThreadError:
                logger.warning("thread %r was forgotten; not imported again", item[0])
                result.forgotten_threads.append(item[0])
                continue
            kept.append(item)
    stored = [r for _, records, _ in kept for r in records]
    result.stored += len(stored)
    to_embed = [
        r for _, records, by_id in kept for r in records if skip_reason(r, by_id.get(r.id)) is None
    ]
    return stored, to_embed


def _write(memory: SemanticRecall, name: str, rows: Sequence[VectorRecord]) -> None:
    """Upsert, then drop the vectors of any thread forgotten meanwhile (as ``index`` does)."""
    memory.vector_store.upsert(name, rows)
    owners = {row.thread_id: row.resource_id for row in rows}
    for thread_id, resource_id in owners.items():
        if memory.storage.is_forgotten(thread_id):
            memory.vector_store.delete(name, thread_id=thread_id, resource_id=resource_id)
