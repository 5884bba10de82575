"""Embedded Chroma with a bound on the HNSW indexes it keeps loaded (see `chroma_unload`).

Embedded Chroma keeps the HNSW index of every collection it has touched loaded (~3 MB +
~2 KB per message each), up to the open-file limit / 5 collections: a process that
serves many users grows with every resource it has searched. `bound_loaded_collections`
lowers that bound on a persistent embedded client, and `persistent_bounded` opens one
with it. When one more collection would be loaded, every index is unloaded at once and
rebuilt from disk and log on its next use (`chroma_unload.RestartingBindings`): Chroma's
own eviction, which lost vectors, never runs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.vectors.chroma_unload import protect

if TYPE_CHECKING:
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

__all__ = ["bound_loaded_collections", "persistent_bounded"]


def bound_loaded_collections(server: Any, limit: int) -> bool:
    """Keep at most `limit` collections of an embedded client loaded (see module).

    False (nothing done) for any other client, e.g. an HTTP client of a Chroma server.
    """
    return protect(server, limit) is not None


def persistent_bounded(
    path: str | os.PathLike[str],
    *,
    max_loaded_collections: int,
    hnsw: dict[str, Any] | None = None,
) -> ChromaVectorIndex:
    """An embedded, persistent Chroma at `path` that keeps at most N resources loaded.

    Each resource is one collection (`ChromaVectorIndex`), so this bounds the memory of
    a long-running process to about N x (3 MB + 2 KB per message of a resource). When
    one more would be loaded, all are unloaded (see the module); a search in an unloaded
    resource loads it again (the cold first search: ~10-15 ms for 1,000 vectors, ~0.25 s
    for 100,000).

    Example:
        ```python
        vectors = persistent_bounded("./memory/chroma", max_loaded_collections=200)
        memory = SemanticRecall(storage=..., vector_store=vectors, embeddings=...)
        ```

    Args:
        path: The Chroma folder (created if missing).
        max_loaded_collections: Most collections (resources) kept loaded, >= 1. The bound
            belongs to the folder for the life of the process (Chroma shares one client
            per folder).
        hnsw: HNSW settings for new collections (see `ChromaVectorIndex`).

    Raises:
        ValueError: `max_loaded_collections` < 1.
        StorageError: The folder cannot be opened.
    """
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    if isinstance(max_loaded_collections, bool) or max_loaded_collections < 1:
        raise ValueError(f"max_loaded_collections must be >= 1, got {max_loaded_collections!r}")
    index = ChromaVectorIndex.persistent(path, hnsw=hnsw)
    bound_loaded_collections(getattr(index.client, "_server", None), max_loaded_collections)
    return index
