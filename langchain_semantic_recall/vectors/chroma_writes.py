"""Writing vectors into Chroma: checked and grouped first, then written in batches.

`planned_writes` checks a whole batch (every vector's dimension) before anything is
written, then groups it by resource collection into writes of at most `size` vectors.
The sync `upsert` runs them in turn; the async twin of an embedded client runs them
through `chroma_workarounds.async_writes`. chromadb is imported inside functions only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.records import VectorRecord
from langchain_semantic_recall.vectors.chroma_layout import check_vector, floats, vector_metadata

if TYPE_CHECKING:
    from langchain_semantic_recall.vectors.chroma_collections import ChromaCollections

__all__ = ["Write", "planned_writes"]

Write = Callable[[], None]


def planned_writes(
    collections: ChromaCollections,
    name: str,
    root: tuple[str, int],
    records: Sequence[VectorRecord],
    size: int,
) -> list[Write]:
    """The writes of `records` into index `name` (model and dimension `root`), in order.

    A repeated id keeps its last record. Each write covers at most `size` vectors of one
    resource's collection.

    Raises:
        EmbeddingMismatchError: a vector has another dimension than the index (raised
            before any write is planned, so nothing of the batch is written).
    """
    by_resource: dict[str, dict[str, VectorRecord]] = {}
    for record in records:
        check_vector(name, root[1], len(record.vector))
        by_resource.setdefault(record.resource_id, {})[record.id] = record
    writes: list[Write] = []
    for resource_id, unique in by_resource.items():
        rows = list(unique.values())
        for start in range(0, len(rows), size):
            batch = rows[start : start + size]
            writes.append(partial(_write, collections, name, resource_id, batch, root=root))
    return writes


def _write(
    collections: ChromaCollections,
    name: str,
    resource_id: str,
    batch: list[VectorRecord],
    *,
    root: tuple[str, int],
) -> None:
    from chromadb.errors import NotFoundError

    model, dimension = root
    rows: dict[str, Any] = {
        "ids": [record.id for record in batch],
        "embeddings": [floats(record.vector) for record in batch],
        "metadatas": [vector_metadata(record, model, dimension) for record in batch],
    }
    for attempt in (1, 2):
        collection = collections.writable(name, resource_id)
        try:
            collection.upsert(**rows)
            collections.grew(name, resource_id, len(batch))
            return
        except NotFoundError:  # dropped since we cached it (a forget elsewhere)
            collections.forget(name, resource_id)
            if attempt == 2:
                raise
