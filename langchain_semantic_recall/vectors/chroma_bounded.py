"""Embedded Chroma with a bound on the HNSW indexes it keeps loaded.

Embedded Chroma (the Rust bindings of chromadb 1.x) keeps every collection it has
searched loaded, in an LRU cache whose capacity is the process's open-file limit / 5
(`RustBindingsAPI.hnsw_cache_size`: 200,000 collections with `ulimit -n` at
1,048,576), so in practice nothing is ever evicted and a process that
serves many users grows by ~3 MB + ~2 KB per message for every resource it has searched.
The Python settings `chroma_segment_cache_policy` / `chroma_memory_limit_bytes` are not
read by the Rust bindings.

`bound_loaded_collections` lowers that capacity on an ordinary `PersistentClient` (the
least recently used index is closed and its memory released; measured in
`benchmarks/perf_memory.py`). Chroma accepts no custom API class for an embedded client
(its shared-system registry knows only its own), so the client's bindings are started
again with the smaller capacity right after the client is created.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from chromadb.api.rust import RustBindingsAPI

if TYPE_CHECKING:
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

__all__ = ["bound_loaded_collections", "persistent_bounded"]

_LOCK = threading.Lock()


def bound_loaded_collections(server: Any, limit: int) -> bool:
    """Lower an embedded client's cache of loaded HNSW indexes to `limit` collections.

    `server` is the client's `RustBindingsAPI`; its bindings are started again with the
    smaller capacity (loaded indexes are dropped and reload on their next search). False
    (nothing done) for any other client, e.g. an HTTP client of a Chroma server.
    """
    if not isinstance(server, RustBindingsAPI):
        return False
    with _LOCK:
        if server.hnsw_cache_size != limit:
            server.hnsw_cache_size = limit
            server.start()  # new bindings read hnsw_cache_size; the old ones are dropped
    return True


def persistent_bounded(
    path: str | os.PathLike[str],
    *,
    max_loaded_collections: int,
    hnsw: dict[str, Any] | None = None,
) -> ChromaVectorIndex:
    """An embedded, persistent Chroma at `path` that keeps at most N resources loaded.

    Each resource is one collection (`ChromaVectorIndex`), so this bounds the memory of
    a long-running process to about N x (3 MB + 2 KB per message of a resource). A
    search in an evicted resource loads it again (the cold first search: ~10-15 ms for
    1,000 vectors, ~0.25 s for 100,000).

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
