"""Writing vectors into Chroma: checked and grouped first, then written in pieces.

`planned_writes` checks a whole batch (every vector's dimension) before anything is
written, then groups it by resource collection into writes of at most `size` vectors.
The sync `upsert` runs them in turn.

The async twin of an embedded client runs them through an `AsyncWriteGate`. Chroma's
embedded bindings hold the GIL for the whole of a write (chroma-core/chroma#3873;
measured here: ~5 ms for 2 vectors, ~30 ms for 40, ~90 ms for 200), and an event loop
waiting for the GIL is a stalled loop. So async writes go `ASYNC_PIECE` vectors at a
time, one write of the gate at a time per event loop: the loop runs between two pieces,
and concurrent turns' writes take turns instead of queueing on the GIL back to back.
Each piece also waits for the local model's runs in progress and holds them back while
it writes (`cpu_gate`). chromadb is imported inside functions only.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.cpu_gate import CPU_GATE
from langchain_semantic_recall.records import VectorRecord
from langchain_semantic_recall.vectors.chroma_layout import check_vector, floats, vector_metadata

if TYPE_CHECKING:
    from langchain_semantic_recall.vectors.chroma_collections import ChromaCollections

__all__ = ["ASYNC_PIECE", "AsyncWriteGate", "planned_writes"]

ASYNC_PIECE: Final = 16
"""Vectors per write of an async upsert on an embedded client (~10 ms holding the GIL)."""

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


def _alone(write: Write) -> None:
    # The piece's collection is looked up (or created: a Chroma write too) inside the gate.
    with CPU_GATE.alone():
        write()


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


class AsyncWriteGate:
    """One write at a time per event loop, each in the default executor (see module)."""

    def __init__(self) -> None:
        """An open gate (its lock for each loop is made on first use)."""
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, writes: Sequence[Write]) -> None:
        """Perform `writes` in order, each alone and off the loop; the first error stops."""
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks.setdefault(loop, asyncio.Lock())
        for write in writes:
            async with lock:
                await run_in_executor(None, _alone, write)
