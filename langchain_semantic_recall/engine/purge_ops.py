"""Purge: erase the bytes forgotten messages left in the backends, written once as steps.

A forget deletes rows and vectors; the backends keep their bytes for a while (free pages,
full-text segments, write-ahead logs, HNSW graphs, folders of dropped collections). The
purge asks each backend to `compact` (see `docs/data-handling.md` for what each
guarantees), after checking that both can, so that nothing is half done.
"""

from __future__ import annotations

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Backends, Op
from langchain_semantic_recall.errors import CompactNotSupportedError
from langchain_semantic_recall.records import PurgeResult


def purge_op(backends: Backends) -> Op[PurgeResult]:
    """Compact the storage, then the engine's vector index; empty the embedding cache.

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
    yield steps.ClearCaches()  # it holds recent texts
    storage = yield steps.CompactStorage()
    vectors = yield steps.CompactVectors(info.name)
    return PurgeResult(storage=storage, vectors=vectors)
