"""The pure parts of the Chroma layout: names, metadata, scores, checks and messages.

No chromadb import here (`Collection` is only a type, passed in by `chroma`).
See `langchain_semantic_recall.vectors.chroma` for the layout and why.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.filters import VECTOR_PREFIX
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.rows import (
    CREATED_TS,
    FILTERABLE,
    filter_metadata,
    row_admitted,
)

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

logger = logging.getLogger("langchain_semantic_recall.vectors.chroma")

DEFAULT_HNSW: Mapping[str, Any] = {
    "space": "cosine",
    "ef_search": 400,
    "ef_construction": 100,
    "max_neighbors": 32,
}
"""HNSW configuration of new collections (see the module docstring for the reasons)."""

LAYOUT: Final = "collection-per-resource-1"
"""Recorded in the root collection's metadata (key `layout`)."""

INDEX_KEY: Final = "semantic_recall_index"
"""Metadata key of a resource collection: the index it belongs to."""
RESOURCE_KEY: Final = "resource_id"
_MAX_NAME: Final = 512
_SUFFIX: Final = len("--r") + 32


def similarity_from_cosine_distance(distance: float) -> float:
    """Similarity in [0, 1] from a cosine distance; the one mapping of every backend.

    Chroma's cosine distance is `1 - cos`. The similarity is the cosine itself, with
    negative values (opposite directions) clipped to 0 and float noise clipped to 1. This
    keeps the familiar meaning of a threshold such as 0.7, unlike `(1 + cos) / 2`.

    Args:
        distance: Cosine distance, `1 - cos` (in [0, 2] up to float error).
    """
    return min(1.0, max(0.0, 1.0 - distance))


def scope_where(scope: ScopeFilter) -> dict[str, Any]:
    """The whole scope as one Chroma `where` (for a collection shared by resources)."""
    clauses = [{key: value} for key, value in scope.as_where().items()]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def thread_where(scope: ScopeFilter) -> dict[str, Any] | None:
    """The `where` of a search inside one resource's collection: thread and filter, or None.

    The resource is the collection itself, so resource scope needs no clause for it.
    The filter's metadata keys are stored as `meta_<key>`; a time range compares
    `created_ts`, and also lets through the rows written before it existed (no
    `filterable` mark), which `rows.row_admitted` then checks by their `created_at`.
    """
    clauses: list[dict[str, Any]] = []
    if scope.thread_id is not None:
        clauses.append({"thread_id": scope.thread_id})
    for key, values in scope.metadata:
        clauses.append(in_where(VECTOR_PREFIX + key, values))
    bounds: list[dict[str, Any]] = []
    if scope.since is not None:
        bounds.append({CREATED_TS: {"$gte": scope.since.timestamp()}})
    if scope.until is not None:
        bounds.append({CREATED_TS: {"$lt": scope.until.timestamp()}})
    if bounds:
        ranged = bounds[0] if len(bounds) == 1 else {"$and": bounds}
        clauses.append({"$or": [ranged, {FILTERABLE: {"$ne": True}}]})
    return and_where(clauses)


def in_where(key: str, values: Sequence[object]) -> dict[str, Any]:
    """`key` equal to one of `values` (one `$in` per Python type).

    Chroma refuses an `$in` whose values differ in type, ints and floats too ("all values
    of the same type"); it compares an int with a float as numbers (`2` matches `2.0`).
    """
    kinds: dict[type, list[object]] = {}
    for value in values:
        kinds.setdefault(type(value), []).append(value)
    clauses = [
        {key: group[0]} if len(group) == 1 else {key: {"$in": group}} for group in kinds.values()
    ]
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def resource_collection_name(name: str, resource_id: str) -> str:
    """The Chroma collection holding `resource_id`'s vectors in index `name`.

    `<name>--r<32 hex of sha256(resource_id)>`: any resource id maps to a legal Chroma
    name; an index name too long to take the suffix is shortened with a hash of itself.
    The hash never decides scope alone: every hit is checked against its metadata.
    """
    return collection_prefix(name) + hashlib.sha256(resource_id.encode("utf-8")).hexdigest()[:32]


def collection_prefix(name: str) -> str:
    """What every resource collection name of index `name` starts with."""
    if len(name) + _SUFFIX > _MAX_NAME:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
        keep = _MAX_NAME - _SUFFIX - len(digest) - 1
        name = f"{name[:keep].rstrip('._-')}-{digest}"
    return name + "--r"


def created_at_text(value: datetime) -> str:
    """ISO 8601 in UTC; a naive datetime is taken as UTC."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat()


def collection_space(collection: Collection) -> str:
    """Distance space of a collection (HNSW or SPANN configuration, else legacy metadata)."""
    config: Mapping[str, Any] = collection.configuration_json or {}  # .configuration warns
    for key in ("hnsw", "spann"):
        section = config.get(key)
        if isinstance(section, Mapping) and section.get("space"):
            return str(section["space"])
    legacy = (collection.metadata or {}).get("hnsw:space")
    return str(legacy) if legacy else "l2"


def check_space(name: str, collection: Collection) -> None:
    """Refuse a collection whose distance is not cosine (`EmbeddingMismatchError`)."""
    space = collection_space(collection)
    if space != "cosine":
        raise EmbeddingMismatchError(
            f"vector index {name!r} is a Chroma collection in {space!r} space, but scores "
            "need cosine: use a new index_name (created in cosine space), or run reindex"
        )


def scoped_hits(
    name: str,
    scope: ScopeFilter,
    result: Mapping[str, Any],
    *,
    other_threads_expected: bool = False,
) -> Iterator[VectorHit]:
    """The rows of a query result that lie in `scope`, as hits (best first).

    A row of another resource (or, unless expected, another thread) is dropped with a
    warning: defence in depth, whatever the collection or the filter returned. A row
    without metadata is a vector deleted since this process loaded the index (by another
    process on the same folder: embedded Chroma's loaded index does not see it) and is no
    hit.
    """
    ids = result["ids"][0]
    metadatas = (result["metadatas"] or [[]])[0]
    distances = (result["distances"] or [[]])[0]
    for vector_id, meta, distance in zip(ids, metadatas, distances, strict=True):
        if meta is None:
            logger.debug("skipped hit %r of %r: deleted by another process", vector_id, name)
            continue
        resource_id, thread_id = str(meta.get("resource_id")), str(meta.get("thread_id"))
        if not scope.admits(resource_id, thread_id):
            if not (other_threads_expected and scope.admits(resource_id, str(scope.thread_id))):
                logger.warning("dropped hit %r of %r outside the query scope", vector_id, name)
            continue
        if scope.narrowed and not row_admitted(scope, meta):
            continue  # outside the filter (a wide query's, or an older row's time)
        yield VectorHit(
            id=vector_id,
            message_id=str(meta.get("message_id", vector_id)),
            thread_id=thread_id,
            resource_id=resource_id,
            score=similarity_from_cosine_distance(float(distance)),
        )


def scope_of(resource_id: str | None, thread_id: str | None) -> ScopeFilter | None:
    """The `ScopeFilter` of a thread and/or a resource (None when both are None)."""
    if resource_id is None and thread_id is None:
        return None
    return ScopeFilter(resource_id=resource_id, thread_id=thread_id)


def vector_metadata(
    record: VectorRecord, model: str, dimension: int
) -> dict[str, str | int | float | bool]:
    """The Chroma metadata stored with a vector (ids, role, text, time, model, filters)."""
    return {
        **filter_metadata(record),
        "message_id": record.message_id,
        "thread_id": record.thread_id,
        "resource_id": record.resource_id,
        "role": record.role,
        "content": record.content,
        "created_at": created_at_text(record.created_at),
        "embedding_model": model,
        "dimension": dimension,
    }


def floats(vector: Sequence[float]) -> list[float]:
    """`vector` as a list of Python floats."""
    return [float(x) for x in vector]


def and_where(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A Chroma `where` of every clause (`$and` when several; None when none)."""
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def read_root(name: str, root: Collection, model: str = "") -> tuple[str, int] | None:
    """(model, dimension) recorded on the root collection of index `name`.

    None for an empty collection without our layout (made elsewhere, or by an earlier
    version): the caller may adopt it.

    Raises:
        EmbeddingMismatchError: not in cosine space, or holding vectors (of an earlier
            layout, or without a recorded model) that this layout cannot trust.
    """
    check_space(name, root)
    stored = root.metadata or {}
    stored_model = str(stored.get("embedding_model") or "")
    stored_dimension = int(stored.get("dimension") or 0)
    if stored.get("layout") == LAYOUT and stored_model and stored_dimension:
        return stored_model, stored_dimension
    if root.count() > 0:
        raise EmbeddingMismatchError(foreign_root_message(name, stored_model, model))
    return None


def foreign_root_message(name: str, stored_model: str, model: str) -> str:
    """Why a root collection without our layout cannot be adopted, and what to do."""
    if not stored_model:
        return (
            f"vector index {name!r} exists without a recorded embedding model and "
            f"dimension, so vectors of {model or 'this embedder'!r} cannot be trusted to "
            "match it: use a new index_name, or drop it and run reindex to rebuild it"
        )
    return (
        f"vector index {name!r} holds vectors in one shared collection (the layout of an "
        "earlier version); this version keeps one collection per resource: use a new "
        "index_name, or drop it (ChromaVectorIndex.drop) and run reindex to rebuild it"
    )


def check_model(name: str, stored_model: str, stored_dim: int, model: str, dim: int) -> None:
    """Refuse an embedder whose model or dimension differs from the index's."""
    if stored_model != model or stored_dim != dim:
        raise EmbeddingMismatchError(
            f"vector index {name!r} was built with embedding model {stored_model!r} "
            f"({stored_dim}-d), but the embedder is {model!r} ({dim}-d): use a new "
            "index_name for this embedder (reindex then embeds the stored messages into "
            "it), or drop this index (ChromaVectorIndex.drop) before a reindex rebuilds it"
        )


def check_vector(name: str, dimension: int, length: int) -> None:
    """Refuse a vector whose length differs from the index's dimension."""
    if dimension and length != dimension:
        raise EmbeddingMismatchError(
            f"vector index {name!r} holds {dimension}-d vectors, got a {length}-d vector: "
            "embed with the index's model, use a new index_name, or run reindex"
        )


def search_collection(
    name: str,
    collection: Collection,
    embedding: list[float],
    *,
    k: int,
    scope: ScopeFilter,
    size: int,
    wide: int,
    filter_up_to: int,
) -> list[VectorHit]:
    """Top `k` of `scope` in one resource's collection of about `size` vectors.

    Resource scope: one unfiltered query. Thread scope, or a filter or time range, in a
    small collection (up to `filter_up_to` vectors): Chroma's filter (~3-5 ms). In a
    bigger one that filter costs 100-200 ms however few rows match (embedded Chroma has no
    metadata index: chroma-core/chroma#4089, #7092), so the search first
    asks for the resource's best `wide` without a filter (~8 ms at 100k) and keeps those
    inside: the top `k` whenever `k` of them are among those. Otherwise a thread's
    vectors are read and ranked exactly (`_exact_in_thread`); a metadata filter or time
    range (which may hold most of the collection) is left to Chroma's filtered query,
    exact too, then read exactly if older rows (no `created_ts`) took places in it.
    """
    if scope.thread_id is None and not scope.narrowed:
        return list(scoped_hits(name, scope, _query(collection, embedding, k, None)))
    if size <= filter_up_to:
        result = _query(collection, embedding, k, thread_where(scope))
        inside = list(scoped_hits(name, scope, result))
        if len(inside) == len(result["ids"][0]) or len(result["ids"][0]) < k:
            return inside
        return list(scoped_hits(name, scope, _exact_in_thread(collection, embedding, k, scope)))
    wide = max(k, wide)
    result = _query(collection, embedding, wide, None)
    inside = list(scoped_hits(name, scope, result, other_threads_expected=True))
    if len(inside) >= k or len(result["ids"][0]) < wide:
        return inside[:k]
    if scope.narrowed:
        result = _query(collection, embedding, k, thread_where(scope))
        inside = list(scoped_hits(name, scope, result))
        if len(inside) == len(result["ids"][0]) or len(result["ids"][0]) < k:
            return inside
    return list(scoped_hits(name, scope, _exact_in_thread(collection, embedding, k, scope)))


_READ_PAGE: Final = 5000
"""Rows read by id per `get` (Chroma refuses a `where` read of tens of thousands at once)."""


def _exact_in_thread(
    collection: Collection, embedding: list[float], k: int, scope: ScopeFilter
) -> Mapping[str, Any]:
    """Exact top `k` of the scope, as a query result: its rows read by the `where`.

    Reading a thread's rows costs a few tens of ms in a 100k-vector collection, several
    times less than Chroma's filtered HNSW query there, and the ranking is exact. Rows
    that the `where` lets through but the filter does not (an older row's time) go.
    """
    listed: list[str] = collection.get(where=thread_where(scope), include=[])["ids"]
    ids: list[str] = []
    metadatas: list[Mapping[str, Any]] = []
    rows: list[Any] = []
    for start in range(0, len(listed), _READ_PAGE):
        got = collection.get(
            ids=listed[start : start + _READ_PAGE], include=["embeddings", "metadatas"]
        )
        embeddings = got["embeddings"]
        assert embeddings is not None  # asked for
        for i, meta in enumerate(got["metadatas"] or [{} for _ in got["ids"]]):
            if not scope.narrowed or row_admitted(scope, meta):
                ids.append(got["ids"][i])
                metadatas.append(meta)
                rows.append(embeddings[i])
    if not ids:
        return {"ids": [[]], "metadatas": [[]], "distances": [[]]}
    matrix = np.asarray(rows, dtype=np.float32)
    query = np.asarray(embedding, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
    cosine = (matrix @ query) / np.maximum(norms, 1e-12)
    best = np.argsort(-cosine, kind="stable")[:k]
    return {
        "ids": [[ids[i] for i in best]],
        "metadatas": [[metadatas[i] for i in best]],
        "distances": [[1.0 - float(cosine[i]) for i in best]],
    }


def nearest_in_collection(
    collection: Collection, embedding: list[float], *, k: int
) -> list[tuple[str, float]]:
    """(message id, similarity) of the `k` nearest vectors of one resource's collection.

    Asks Chroma for ids and distances only: reading the hits' metadata (which holds the
    message text) was most of a query's time (3.7 ms of 4.9 at k=50 in 1,000 vectors).
    A vector id is its message's id unless it names a later chunk (`chunk_id`: `id#n`);
    since a message id may hold `#` itself, an id with `#` is resolved by its metadata.
    """
    result = _query(collection, embedding, k, None, metadata=False)
    ids: list[str] = result["ids"][0]
    distances = (result["distances"] or [[]])[0]
    owners: dict[str, str] = {}
    if chunks := [vector_id for vector_id in ids if "#" in vector_id]:
        got = collection.get(ids=chunks, include=["metadatas"])
        metadatas = got["metadatas"] or [{} for _ in got["ids"]]
        for vector_id, meta in zip(got["ids"], metadatas, strict=True):
            owners[vector_id] = str((meta or {}).get("message_id", vector_id))
    return [
        (owners.get(vector_id, vector_id), similarity_from_cosine_distance(float(distance)))
        for vector_id, distance in zip(ids, distances, strict=True)
    ]


def _query(
    collection: Collection,
    embedding: list[float],
    k: int,
    where: dict[str, Any] | None,
    *,
    metadata: bool = True,
) -> Mapping[str, Any]:
    # Chroma >= 1.5 returns fewer rows when k exceeds the (filtered) count, and none from
    # an empty collection; older versions raised (the conformance suite checks both).
    result: Mapping[str, Any] = collection.query(
        query_embeddings=np.asarray([embedding], dtype=np.float32),
        n_results=k,
        where=where,
        include=["metadatas", "distances"] if metadata else ["distances"],
    )
    return result
