"""Chroma vector index: one Chroma collection per index name.

This is the only module of the package that imports :mod:`chromadb`, and it does so inside
functions, so importing it stays cheap. It works with any chromadb client: the embedded
``PersistentClient`` (the package's default), ``EphemeralClient`` and ``HttpClient``.

HNSW settings (chosen on purpose, see ``DEFAULT_HNSW``): recall always searches with a
metadata filter (one thread or one resource). With Chroma's default ``ef_search`` (100) a
filtered top-5 matched exact search in only 0.5-0.9 of queries on near-tie data (0.70 for
resource scope in our 30k x 384-d check); ``ef_search`` 400 made it exact, for at most about
twice the latency of a filtered query. ``ef_construction`` stays at Chroma's 100, written out:
200 halved the write rate (2.2k -> 1.1k vectors/s) without improving agreement. Chroma fixes
these settings when a collection is created; new values only reach new collections.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.errors import EmbeddingMismatchError, InvalidInputError
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.api.models.Collection import Collection

__all__ = ["DEFAULT_HNSW", "ChromaVectorIndex", "scope_where", "similarity_from_cosine_distance"]

logger = logging.getLogger(__name__)

DEFAULT_HNSW: Mapping[str, Any] = {"space": "cosine", "ef_search": 400, "ef_construction": 100}
"""HNSW configuration of new collections (see the module docstring for the reasons)."""

_PAGE = 5000
"""Rows per ``get`` page when listing metadata (kept under Chroma's max batch, 5,461)."""


def similarity_from_cosine_distance(distance: float) -> float:
    """Similarity in [0, 1] from a cosine distance; the one mapping of every backend.

    Chroma's cosine distance is ``1 - cos``. The similarity is the cosine itself, with
    negative values (opposite directions) clipped to 0 and float noise clipped to 1. This
    keeps the familiar meaning of a threshold such as 0.7, unlike ``(1 + cos) / 2``.

    Args:
        distance: Cosine distance, ``1 - cos`` (in [0, 2] up to float error).
    """
    return min(1.0, max(0.0, 1.0 - distance))


def scope_where(scope: ScopeFilter) -> dict[str, Any]:
    """The scope as a Chroma ``where``: one equality, or ``{"$and": [...]}`` for both keys."""
    return _and([{key: value} for key, value in scope.as_where().items()])


def _created_at(value: datetime) -> str:
    """ISO 8601 in UTC; a naive datetime is taken as UTC."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat()


def _space(collection: Collection) -> str:
    """Distance space of a collection (HNSW or SPANN configuration, else legacy metadata)."""
    config: Mapping[str, Any] = collection.configuration_json or {}  # .configuration warns
    for key in ("hnsw", "spann"):
        section = config.get(key)
        if isinstance(section, Mapping) and section.get("space"):
            return str(section["space"])
    legacy = (collection.metadata or {}).get("hnsw:space")
    return str(legacy) if legacy else "l2"


class ChromaVectorIndex(VectorIndex):
    """A host of named vector indexes, each a Chroma collection in cosine space.

    Setup::

        index = ChromaVectorIndex.persistent("./memory/chroma")
        index.open("minilm-384", dimension=384, model="all-MiniLM-L6-v2")

    Sync use::

        index.upsert("minilm-384", records)
        hits = index.query("minilm-384", vector, k=4, scope=ScopeFilter(resource_id="u1"))

    Async use::

        hits = await index.aquery("minilm-384", vector, k=4, scope=ScopeFilter(thread_id="t1"))

    Vectors are always passed in: collections are created with ``embedding_function=None``
    (Chroma's default embedding function would download a model). Opened collections are
    cached per name, so reopening is cheap; a collection deleted behind this instance's back
    (another process) needs a new instance or :meth:`close`. Safe to share between threads.
    """

    def __init__(self, client: ClientAPI, *, hnsw: Mapping[str, Any] | None = None) -> None:
        """Wrap a chromadb client.

        Args:
            client: Any chromadb client (persistent, ephemeral or HTTP).
            hnsw: HNSW settings for new collections, merged over ``DEFAULT_HNSW``. The
                space is always cosine.

        Raises:
            InvalidInputError: ``hnsw`` asks for a space other than cosine.
        """
        settings = {**DEFAULT_HNSW, **(hnsw or {})}
        if settings["space"] != "cosine":
            raise InvalidInputError(
                f"hnsw space must be 'cosine' (got {settings['space']!r}): scores are cosine "
                "similarity on every backend; remove 'space' from the hnsw options"
            )
        self._client = client
        self._hnsw: Mapping[str, Any] = settings
        self._lock = threading.Lock()
        self._opened: dict[str, tuple[Collection, str, int]] = {}
        self._max_batch: int | None = None

    @classmethod
    def persistent(
        cls, path: str | os.PathLike[str], *, hnsw: Mapping[str, Any] | None = None
    ) -> ChromaVectorIndex:
        """An embedded, persistent Chroma at ``path`` (anonymized telemetry off)."""
        import chromadb
        from chromadb.config import Settings

        client = chromadb.PersistentClient(
            path=os.fspath(path), settings=Settings(anonymized_telemetry=False)
        )
        return cls(client, hnsw=hnsw)

    @classmethod
    def ephemeral(cls, *, hnsw: Mapping[str, Any] | None = None) -> ChromaVectorIndex:
        """An in-memory Chroma (shared by every ephemeral client of the process)."""
        import chromadb
        from chromadb.config import Settings

        return cls(
            chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False)), hnsw=hnsw
        )

    @property
    def client(self) -> ClientAPI:
        """The wrapped chromadb client."""
        return self._client

    # -- opening ---------------------------------------------------------------------------

    def open(self, name: str, *, dimension: int, model: str) -> None:
        """Create the collection if missing, or check an existing one.

        Raises:
            EmbeddingMismatchError: the collection was built with another model or
                dimension, or not in cosine space.
        """
        opened = self._collection(name)
        if opened is None:
            collection = self._client.get_or_create_collection(
                name,
                embedding_function=None,
                configuration=cast("CreateCollectionConfiguration", {"hnsw": dict(self._hnsw)}),
                metadata={"embedding_model": model, "dimension": dimension},
            )
            logger.info("created Chroma collection %r (%s, %d-d)", name, model, dimension)
            opened = self._remember(name, collection)
        collection, stored_model, stored_dimension = opened
        if not stored_model or not stored_dimension:  # made elsewhere, without our metadata
            if collection.count() > 0:
                raise EmbeddingMismatchError(
                    f"vector index {name!r} exists without a recorded embedding model and "
                    f"dimension, so vectors of {model!r} ({dimension}-d) cannot be trusted to "
                    "match it: use a new index_name, or run reindex to rebuild it"
                )
            metadata = {**(collection.metadata or {}), "embedding_model": model}
            collection.modify(metadata={**metadata, "dimension": dimension})
            self._remember(name, collection, model=model, dimension=dimension)
            return
        _check_model(name, stored_model, stored_dimension, model, dimension)

    def _remember(
        self, name: str, collection: Collection, *, model: str = "", dimension: int = 0
    ) -> tuple[Collection, str, int]:
        """Check the space of ``collection`` and cache it with its model and dimension."""
        space = _space(collection)
        if space != "cosine":
            raise EmbeddingMismatchError(
                f"vector index {name!r} is a Chroma collection in {space!r} space, but scores "
                "need cosine: use a new index_name (created in cosine space), or run reindex"
            )
        stored = collection.metadata or {}
        entry = (
            collection,
            model or str(stored.get("embedding_model") or ""),
            dimension or int(stored.get("dimension") or 0),
        )
        with self._lock:
            self._opened[name] = entry
        return entry

    def _collection(self, name: str) -> tuple[Collection, str, int] | None:
        """The cached collection with its model and dimension; None if it does not exist."""
        from chromadb.errors import NotFoundError

        with self._lock:
            cached = self._opened.get(name)
        if cached is not None:
            return cached
        try:
            collection = self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None
        return self._remember(name, collection)

    def _batch(self) -> int:
        if self._max_batch is None:
            self._max_batch = max(1, int(self._client.get_max_batch_size()))
        return self._max_batch

    # -- writing ---------------------------------------------------------------------------

    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write vectors in batches of at most the client's max batch size.

        Within one call a repeated id keeps its last record.

        Raises:
            InvalidInputError: the index was never opened.
            EmbeddingMismatchError: a vector has another dimension than the index.
        """
        if not records:
            return
        opened = self._collection(name)
        if opened is None or not opened[1]:
            raise InvalidInputError(
                f"vector index {name!r} was never opened: call open(name, dimension=..., "
                "model=...) before upsert"
            )
        collection, model, dimension = opened
        unique = list({record.id: record for record in records}.values())
        for record in unique:
            _check_vector(name, dimension, len(record.vector))
        size = self._batch()
        for start in range(0, len(unique), size):
            batch = unique[start : start + size]
            collection.upsert(
                ids=[record.id for record in batch],
                embeddings=[_floats(record.vector) for record in batch],
                metadatas=[_metadata(record, model, dimension) for record in batch],
                documents=[record.content for record in batch],
            )
        logger.debug("upserted %d vectors into %r", len(unique), name)

    def delete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the vectors matching every given selector (all chunks of a message).

        Selectors combine with AND, so a delete never reaches wider than each of them.

        Raises:
            InvalidInputError: no selector was given (that would delete everything).
        """
        if thread_id is None and resource_id is None and message_ids is None:
            raise InvalidInputError(
                "delete needs thread_id, resource_id or message_ids; to drop a whole index "
                "use drop(name)"
            )
        opened = self._collection(name)
        if opened is None or (message_ids is not None and not message_ids):
            return
        collection = opened[0]
        base = [
            {key: value}
            for key, value in (("thread_id", thread_id), ("resource_id", resource_id))
            if value is not None
        ]
        if message_ids is None:
            collection.delete(where=_and(base))
            return
        ids = sorted(set(message_ids))
        size = self._batch()
        for start in range(0, len(ids), size):
            chunk = ids[start : start + size]
            collection.delete(where=_and([*base, {"message_id": {"$in": chunk}}]))

    def drop(self, name: str) -> None:
        """Delete a whole index (its collection); no error if it does not exist."""
        from chromadb.errors import NotFoundError

        with self._lock:
            self._opened.pop(name, None)
        try:
            self._client.delete_collection(name)
        except NotFoundError:
            return
        logger.info("dropped Chroma collection %r", name)

    # -- reading ---------------------------------------------------------------------------

    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The ``k`` most similar vectors inside ``scope``, best first.

        Scores come from :func:`similarity_from_cosine_distance`. Hits whose metadata is
        outside ``scope`` are dropped again after the search (defence in depth). A missing
        or empty index gives no hits.

        Raises:
            InvalidInputError: ``k`` is smaller than 1.
            EmbeddingMismatchError: the vector has another dimension than the index.
        """
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        opened = self._collection(name)
        if opened is None:
            return []
        collection, _, dimension = opened
        _check_vector(name, dimension, len(vector))
        # Chroma >= 1.5 returns fewer rows when k exceeds the (filtered) count, and none
        # from an empty collection; older versions raised (the suite checks both cases).
        result = collection.query(
            query_embeddings=[_floats(vector)],
            n_results=k,
            where=scope_where(scope),
            include=["metadatas", "distances"],
        )
        ids = result["ids"][0]
        metadatas = (result["metadatas"] or [[]])[0]
        distances = (result["distances"] or [[]])[0]
        hits: list[VectorHit] = []
        for vector_id, meta, distance in zip(ids, metadatas, distances, strict=True):
            resource_id, thread_id = str(meta.get("resource_id")), str(meta.get("thread_id"))
            if not scope.admits(resource_id, thread_id):
                logger.warning("dropped hit %r of %r outside the query scope", vector_id, name)
                continue
            hits.append(
                VectorHit(
                    id=vector_id,
                    message_id=str(meta.get("message_id", vector_id)),
                    thread_id=thread_id,
                    resource_id=resource_id,
                    score=similarity_from_cosine_distance(float(distance)),
                )
            )
        hits.sort(key=lambda hit: (-hit.score, hit.id))
        return hits

    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Ids of the messages with at least one vector, optionally inside ``scope``."""
        return {
            str(meta.get("message_id", vector_id))
            for vector_id, meta in self._rows(name, scope, include_metadata=True)
            if scope is None
            or scope.admits(str(meta.get("resource_id")), str(meta.get("thread_id")))
        }

    def count(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Number of vectors (chunks, not messages) in the index, optionally inside ``scope``."""
        if scope is None:
            opened = self._collection(name)
            return 0 if opened is None else int(opened[0].count())
        return sum(1 for _ in self._rows(name, scope, include_metadata=False))

    async def acount(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Async twin of :meth:`count`."""
        return await run_in_executor(None, self.count, name, scope)

    def _rows(
        self, name: str, scope: ScopeFilter | None, *, include_metadata: bool
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Pages through ``(id, metadata)`` inside ``scope`` (metadata empty if not asked)."""
        opened = self._collection(name)
        if opened is None:
            return
        collection = opened[0]
        where = scope_where(scope) if scope is not None else None
        page = min(_PAGE, self._batch())
        offset = 0
        while True:
            result = collection.get(
                where=where,
                limit=page,
                offset=offset,
                include=["metadatas"] if include_metadata else [],
            )
            ids = result["ids"]
            metadatas = result["metadatas"] or [{} for _ in ids]
            yield from zip(ids, metadatas, strict=True)
            if len(ids) < page:
                return
            offset += page

    def close(self) -> None:
        """Forget the cached collections (the client itself is left to its owner)."""
        with self._lock:
            self._opened.clear()


def _metadata(record: VectorRecord, model: str, dimension: int) -> dict[str, str | int]:
    return {
        "message_id": record.message_id,
        "thread_id": record.thread_id,
        "resource_id": record.resource_id,
        "role": record.role,
        "content": record.content,
        "created_at": _created_at(record.created_at),
        "embedding_model": model,
        "dimension": dimension,
    }


def _floats(vector: Sequence[float]) -> Sequence[float]:
    return [float(x) for x in vector]


def _and(clauses: list[dict[str, Any]]) -> dict[str, Any]:
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _check_model(name: str, stored_model: str, stored_dim: int, model: str, dim: int) -> None:
    if stored_model != model or stored_dim != dim:
        raise EmbeddingMismatchError(
            f"vector index {name!r} was built with embedding model {stored_model!r} "
            f"({stored_dim}-d), but the embedder is {model!r} ({dim}-d): use a new "
            "index_name for this embedder, or run reindex to rebuild the index with it"
        )


def _check_vector(name: str, dimension: int, length: int) -> None:
    if dimension and length != dimension:
        raise EmbeddingMismatchError(
            f"vector index {name!r} holds {dimension}-d vectors, got a {length}-d vector: "
            "embed with the index's model, use a new index_name, or run reindex"
        )
