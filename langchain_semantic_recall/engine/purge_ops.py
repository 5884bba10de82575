"""Purge: erase the bytes forgotten messages left in the backends, written once as steps.

A forget deletes rows and vectors; the backends keep their bytes for a while (free pages,
full-text segments, write-ahead logs, HNSW graphs, folders of dropped collections). The
purge asks each backend to `compact` (see `docs/data-handling.md` for what each
guarantees), after checking that both can, so that nothing is half done. First it deletes
the vectors whose message is no longer stored: a forget or a retention call whose vector
delete failed (or was interrupted) left them, with their text, and a rebuild would copy
them as live rows.
"""

from __future__ import annotations

from dataclasses import replace

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Backends, Op
from langchain_semantic_recall.engine.vector_space import IndexInfo
from langchain_semantic_recall.errors import CompactNotSupportedError
from langchain_semantic_recall.records import PurgeResult

_PAGE = 1000
"""Messages read, and vectors deleted, at a time."""


def purge_op(backends: Backends) -> Op[PurgeResult]:
    """Drop orphan vectors; compact the storage, then the engine's vector index; empty the cache.

    Raises:
        CompactNotSupportedError: a backend cannot compact (raised before any change).
        StorageError: a backend could not finish (what it kept is whole; run it again).
    """
    pair = (backends.storage, backends.space.vectors)
    unable = [type(backend).__name__ for backend in pair if not backend.supports_compact]
    if unable:
        raise CompactNotSupportedError(
            f"purge needs backends that can erase deleted data; {' and '.join(unable)} "
            "cannot: erase with the backend's own tools (see docs/data-handling.md)"
        )
    info = yield from backends.space.resolve()
    orphans = yield from drop_orphans(info)
    yield steps.ClearCaches()  # it holds recent texts
    storage = yield steps.CompactStorage()
    vectors = yield steps.CompactVectors(info.name)
    if orphans:
        line = f"deleted {orphans} vector(s) of messages no longer stored (a failed forget's)"
        vectors = replace(vectors, done=(line, *vectors.done))
    return PurgeResult(storage=storage, vectors=vectors)


def drop_orphans(info: IndexInfo) -> Op[int]:
    """Delete the index's vectors whose message is not stored; returns how many messages.

    What `reindex(missing_only=True)` removes too, and `stats().orphan_vectors` counts.
    """
    orphans: set[str] = yield steps.VectorMessageIds(info, None)
    after: tuple[str, int] | None = None
    while orphans and (page := (yield steps.ListMessages(None, after=after, limit=_PAGE))):
        after = (page[-1].thread_id, page[-1].seq)
        orphans.difference_update(message.id for message in page)
    ids = sorted(orphans)
    for start in range(0, len(ids), _PAGE):
        yield steps.DeleteVectors(info, message_ids=ids[start : start + _PAGE])
    return len(ids)
