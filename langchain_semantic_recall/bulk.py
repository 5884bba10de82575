"""Bulk import: many conversations into an engine at the embedder's own speed.

The operation lives in `langchain_semantic_recall.engine.bulk_ops` (`bulk_index_op`):
it stores a whole batch of conversations in one storage transaction, embeds every text of
the batch in ONE call through the engine's cache, and writes batch *n*'s vectors in the
background while batch *n + 1* is embedded. It keeps `index`'s rules but one (a message
without an id gets one from its conversation and position, so re-importing adds nothing,
where `index`, which sees one turn at a time, gives it a fresh id: a repeated "yes" is a
new message there; system and tool messages stored but not embedded,
recalled memory and `RemoveMessage`s not stored, each counted by reason in
`not_embedded` / `not_stored`; long messages chunked; forgotten threads skipped and
reported). Re-importing embeds only the messages whose vectors are gone. These
functions are the engine's `bulk_index` twins, for code that imports from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Unpack

from langchain_semantic_recall.engine.bulk_ops import BulkResult, Conversation
from langchain_semantic_recall.engine.call_options import BulkOptions

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

__all__ = ["BulkResult", "Conversation", "abulk_index", "bulk_index"]


def bulk_index(
    memory: SemanticRecall,
    conversations: Iterable[Conversation],
    **options: Unpack[BulkOptions],
) -> BulkResult:
    """Store and embed many `(thread_id, resource_id, messages)` conversations.

    Args:
        memory: The engine to import into.
        conversations: `(thread_id, resource_id, messages)` triples, read once, in order.
        **options: `batch_size` and `progress` (see `BulkOptions`).

    Raises:
        ReadOnlyError: the engine is read-only.
        OwnershipError: a thread or message id belongs to another resource or thread.
        EmbeddingMismatchError: the embedder does not match the index.
    """
    return memory.bulk_index(conversations, **options)


async def abulk_index(
    memory: SemanticRecall,
    conversations: Iterable[Conversation],
    **options: Unpack[BulkOptions],
) -> BulkResult:
    """Async twin of `bulk_index`."""
    return await memory.abulk_index(conversations, **options)
