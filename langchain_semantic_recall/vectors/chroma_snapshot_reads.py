"""Reading a collection's vectors out of embedded Chroma for its snapshot (`chroma_snapshots`).

A build reads every vector, a page at a time; a refresh reads only the records written
since a snapshot. Each page holds the GIL ~25 ms at 100k vectors, so a search beside a
read waits at most that long, and both stop between pages when asked to (the index is
closing, or the interpreter exiting: Chroma's client goes next).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final

import numpy as np

from langchain_semantic_recall.vectors.chroma_snapshot import message_id_of
from langchain_semantic_recall.vectors.chroma_workarounds.reads import read_retrying

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["PAGE", "read_every_vector", "read_records"]

PAGE: Final = 1000
"""Vectors per `get` (each page holds the GIL ~25 ms at 100k)."""

Rows = tuple[list[str], list[str], np.ndarray]
"""Vector ids, the message id of each, and their vectors (one row each)."""


def read_every_vector(
    collection: Collection, count: int, delays: Sequence[float], stop: Callable[[], bool]
) -> Rows | None:
    """Every vector of `collection` (about `count`), paged by offset; None once `stop()`.

    A page read after a write shows it; a delete meanwhile can shift a row out of every
    page, which the caller finds by comparing the count with Chroma's log.
    """
    rows: dict[str, np.ndarray] = {}
    offset = 0
    while offset < count:
        if stop():
            return None
        get = partial(collection.get, limit=PAGE, offset=offset, include=["embeddings"])
        got = read_retrying(get, delays)
        if not got["ids"]:
            break
        rows.update(zip(got["ids"], np.asarray(got["embeddings"], dtype=np.float32), strict=True))
        offset += len(got["ids"])
    ids = list(rows)
    owners = _chunk_owners(collection, [vector_id for vector_id in ids if "#" in vector_id], delays)
    return ids, [owners.get(i, i) for i in ids], np.vstack(list(rows.values()))


def read_records(
    collection: Collection,
    vector_ids: Sequence[str],
    delays: Sequence[float],
    stop: Callable[[], bool],
    dimension: int,
) -> Rows | None:
    """The vectors of `vector_ids` (those still stored); None once `stop()`."""
    got: dict[str, tuple[np.ndarray, str]] = {}
    for start in range(0, len(vector_ids), PAGE):
        if stop():
            return None
        page = list(vector_ids[start : start + PAGE])
        get = partial(collection.get, ids=page, include=["embeddings", "metadatas"])
        read = read_retrying(get, delays)
        found = read["metadatas"]
        metadatas: list[object] = list(found) if found else [None] * len(read["ids"])
        vectors = np.asarray(read["embeddings"], dtype=np.float32)
        for vector_id, vector, metadata in zip(read["ids"], vectors, metadatas, strict=True):
            got[vector_id] = (vector, message_id_of(vector_id, metadata))
    matrix = np.vstack([v for v, _ in got.values()]) if got else np.empty((0, dimension))
    return list(got), [owner for _, owner in got.values()], matrix


def _chunk_owners(
    collection: Collection, chunk_ids: list[str], delays: Sequence[float]
) -> dict[str, str]:
    """The message of each later chunk of a long message (`id#n`), from its metadata."""
    owners: dict[str, str] = {}
    for start in range(0, len(chunk_ids), PAGE):
        page = chunk_ids[start : start + PAGE]
        got = read_retrying(partial(collection.get, ids=page, include=["metadatas"]), delays)
        for vector_id, meta in zip(got["ids"], got["metadatas"] or [], strict=False):
            owners[vector_id] = message_id_of(vector_id, meta)
    return owners
