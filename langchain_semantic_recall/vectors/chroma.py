"""Chroma vector index: one Chroma collection per resource of each index.

This is the only module of the package that imports :mod:`chromadb`, and it does so inside
functions, so importing it stays cheap. It works with any chromadb client: the embedded
``PersistentClient`` (the package's default), ``EphemeralClient`` and ``HttpClient``.

Layout (measured in ``docs/performance.md``): index ``name`` is a *root* collection
``name`` holding no vectors (its metadata records the embedding model, the dimension and
the layout version, so a mismatched embedder fails closed) plus one collection per
resource, :func:`resource_collection_name`. Resource scope is then one unfiltered HNSW
query (3.7 ms p50 at 100k vectors, where a metadata filter over a shared collection cost
55-110 ms); thread scope searches inside the owner's collection
(:func:`~langchain_semantic_recall.vectors.chroma_layout.search_collection`); forgetting
a resource drops its collection. Scopes without a resource (maintenance) visit every
collection of the index: correct, and slower with many resources.

HNSW (``DEFAULT_HNSW``): on 100k near-tie vectors, top-5 agreement with brute force was
0.92 / 0.97 / 0.99 at ``ef_search`` 200 / 400 / 800 with 16 neighbours per node, and
0.985 / 0.999 at 200 / 400 with 32: so 32 neighbours and ``ef_search`` 400.
``ef_construction`` stays at Chroma's 100 (200 halved the write rate for no agreement).
Chroma fixes these when a collection is created; new values reach new collections only.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex, has_work
from langchain_semantic_recall.vectors.chroma_layout import (
    DEFAULT_HNSW,
    INDEX_KEY,
    LAYOUT,
    RESOURCE_KEY,
    and_where,
    check_model,
    check_space,
    check_vector,
    collection_prefix,
    floats,
    read_root,
    resource_collection_name,
    retrying,
    scope_of,
    scope_where,
    search_collection,
    similarity_from_cosine_distance,
    thread_where,
    vector_metadata,
)

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.api.models.Collection import Collection

__all__ = [
    "DEFAULT_HNSW",
    "LAYOUT",
    "ChromaVectorIndex",
    "resource_collection_name",
    "scope_where",
    "similarity_from_cosine_distance",
    "thread_where",
]

logger = logging.getLogger(__name__)

_PAGE: Final = 5000
"""Rows per ``get`` page when listing metadata (kept under Chroma's max batch, 5,461)."""
_WIDE: Final = 64
"""Unfiltered rows a thread-scope search looks at first (see ``search_collection``)."""
_FILTER_UP_TO: Final = 5000
"""Collections up to this size search a thread with Chroma's filter alone."""
_T = TypeVar("_T")
_RETRY_DELAYS: tuple[float, ...] = (0.02, 0.1, 0.3)
"""Pauses before reading again a collection whose index is not on disk yet (see
``_retrying``)."""
_CACHED_COLLECTIONS: Final = 4096
"""Resource collection handles kept per instance (a handle is a few hundred bytes)."""


class ChromaVectorIndex(VectorIndex):
    """A host of named vector indexes: per index, one Chroma collection per resource.

    Setup::

        index = ChromaVectorIndex.persistent("./memory/chroma")
        index.open("minilm-384", dimension=384, model="all-MiniLM-L6-v2")

    Sync use::

        index.upsert("minilm-384", records)
        hits = index.query("minilm-384", vector, k=4, scope=ScopeFilter(resource_id="u1"))

    Async use::

        scope = ScopeFilter(resource_id="u1", thread_id="t1")
        hits = await index.aquery("minilm-384", vector, k=4, scope=scope)

    Vectors are always passed in: collections are created with ``embedding_function=None``
    (Chroma's default embedding function would download a model). Collection handles are
    cached, so reopening is cheap; a collection deleted by another process is looked up
    again on the next call. A message id belongs to one resource (the storage enforces
    it): upserting it under another resource adds a vector there. Safe to share between
    threads.
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
        self._roots: dict[str, tuple[str, int]] = {}
        self._collections: OrderedDict[tuple[str, str], Collection] = OrderedDict()
        self._sizes: dict[tuple[str, str], int] = {}
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

    def _configuration(self) -> CreateCollectionConfiguration:
        return cast("CreateCollectionConfiguration", {"hnsw": dict(self._hnsw)})

    # -- the root collection ---------------------------------------------------------------

    def open(self, name: str, *, dimension: int, model: str) -> None:
        """Create the index if missing, or check an existing one.

        Raises:
            EmbeddingMismatchError: the index was built with another model or dimension,
                not in cosine space, or holds vectors of an earlier layout.
        """
        from chromadb.errors import NotFoundError

        with self._lock:
            known = self._roots.get(name)
        if known is not None:
            check_model(name, *known, model, dimension)
            return
        try:
            root = self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            root = self._client.get_or_create_collection(
                name,
                embedding_function=None,
                configuration=self._configuration(),
                metadata={"embedding_model": model, "dimension": dimension, "layout": LAYOUT},
            )
            logger.info("created vector index %r (%s, %d-d)", name, model, dimension)
        entry = read_root(name, root, model)
        if entry is None:  # an empty collection made elsewhere or by an earlier version: adopt
            stored = dict(root.metadata or {})
            entry = (
                str(stored.get("embedding_model") or model),
                int(stored.get("dimension") or dimension),
            )
            layout = {"embedding_model": entry[0], "dimension": entry[1], "layout": LAYOUT}
            root.modify(metadata={**stored, **layout})
        check_model(name, *entry, model, dimension)
        with self._lock:
            self._roots[name] = entry

    def _root(self, name: str) -> tuple[str, int] | None:
        """(model, dimension) of an opened or existing index; None if it does not exist."""
        from chromadb.errors import NotFoundError

        with self._lock:
            known = self._roots.get(name)
        if known is not None:
            return known
        try:
            root = self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None
        entry = read_root(name, root)
        if entry is None:
            return None  # not opened by us yet: nothing stored
        with self._lock:
            self._roots[name] = entry
        return entry

    # -- resource collections --------------------------------------------------------------

    def _writable(self, name: str, resource_id: str) -> Collection:
        """The collection of ``resource_id`` in ``name``, created if missing."""
        collection = self._resource(name, resource_id, create=True)
        if collection is None:  # pragma: no cover - create=True always returns one
            raise InvalidInputError(f"cannot create the collection of {resource_id!r}")
        return collection

    def _resource(self, name: str, resource_id: str, *, create: bool) -> Collection | None:
        """The collection of ``resource_id`` in ``name`` (created if asked), else None."""
        from chromadb.errors import NotFoundError

        key = (name, resource_id)
        with self._lock:
            cached = self._collections.get(key)
            if cached is not None:
                self._collections.move_to_end(key)
                return cached
        collection_name = resource_collection_name(name, resource_id)
        try:
            collection = self._client.get_collection(collection_name, embedding_function=None)
        except NotFoundError:
            if not create:
                return None
            collection = self._client.get_or_create_collection(
                collection_name,
                embedding_function=None,
                configuration=self._configuration(),
                metadata={INDEX_KEY: name, RESOURCE_KEY: resource_id},
            )
        check_space(name, collection)
        size = int(collection.count())
        with self._lock:
            self._collections[key] = collection
            self._sizes[key] = size
            while len(self._collections) > _CACHED_COLLECTIONS:
                old, _ = self._collections.popitem(last=False)
                self._sizes.pop(old, None)
        return collection

    def _forget_handle(self, name: str, resource_id: str) -> None:
        with self._lock:
            self._collections.pop((name, resource_id), None)
            self._sizes.pop((name, resource_id), None)

    def _all_resources(self, name: str) -> Iterator[tuple[str, Collection]]:
        """Every (resource id, collection) of index ``name`` (pages through the listing)."""
        prefix = collection_prefix(name)
        offset = 0
        page = 1000
        while True:
            listed = self._client.list_collections(limit=page, offset=offset)
            for collection in listed:
                meta = collection.metadata or {}
                if collection.name.startswith(prefix) and meta.get(INDEX_KEY) == name:
                    yield str(meta.get(RESOURCE_KEY)), collection
            if len(listed) < page:
                return
            offset += page

    def _scoped(self, name: str, scope: ScopeFilter | None) -> list[tuple[str, Collection]]:
        """The collections a scope can reach: one per resource id, or all of the index."""
        if scope is not None and scope.resource_id is not None:
            collection = self._resource(name, scope.resource_id, create=False)
            return [] if collection is None else [(scope.resource_id, collection)]
        return list(self._all_resources(name))

    def _batch(self) -> int:
        if self._max_batch is None:
            self._max_batch = max(1, int(self._client.get_max_batch_size()))
        return self._max_batch

    # -- writing ---------------------------------------------------------------------------

    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write vectors into their resources' collections, in batches of the client's max.

        Within one call a repeated id keeps its last record.

        Raises:
            InvalidInputError: the index was never opened.
            EmbeddingMismatchError: a vector has another dimension than the index.
        """
        if not records:
            return
        root = self._root(name)
        if root is None:
            raise InvalidInputError(
                f"vector index {name!r} was never opened: call open(name, dimension=..., "
                "model=...) before upsert"
            )
        model, dimension = root
        by_resource: dict[str, dict[str, VectorRecord]] = {}
        for record in records:
            check_vector(name, dimension, len(record.vector))
            by_resource.setdefault(record.resource_id, {})[record.id] = record
        size = self._batch()
        for resource_id, unique in by_resource.items():
            rows = list(unique.values())
            for start in range(0, len(rows), size):
                self._write(name, resource_id, rows[start : start + size], model, dimension)
        logger.debug("upserted %d vectors into %r", len(records), name)

    def _write(
        self, name: str, resource_id: str, batch: list[VectorRecord], model: str, dim: int
    ) -> None:
        from chromadb.errors import NotFoundError

        rows: dict[str, Any] = {
            "ids": [record.id for record in batch],
            "embeddings": [floats(record.vector) for record in batch],
            "metadatas": [vector_metadata(record, model, dim) for record in batch],
        }
        for attempt in (1, 2):
            collection = self._writable(name, resource_id)
            try:
                collection.upsert(**rows)
                with self._lock:  # an upper bound (an upsert may replace): a hint only
                    key = (name, resource_id)
                    self._sizes[key] = self._sizes.get(key, 0) + len(batch)
                return
            except NotFoundError:  # dropped since we cached it (a forget elsewhere)
                self._forget_handle(name, resource_id)
                if attempt == 2:
                    raise

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
        A resource alone drops its collection; without a resource every collection of
        the index is visited.

        Raises:
            InvalidInputError: no selector was given (that would delete everything).
        """
        from chromadb.errors import NotFoundError

        if not has_work(thread_id, resource_id, message_ids):
            return
        if resource_id is not None and thread_id is None and message_ids is None:
            self._forget_handle(name, resource_id)
            try:
                self._client.delete_collection(resource_collection_name(name, resource_id))
            except NotFoundError:
                return
            return
        thread = [] if thread_id is None else [{"thread_id": thread_id}]
        for found_resource, collection in self._scoped(name, scope_of(resource_id, thread_id)):
            try:
                if message_ids is None:
                    collection.delete(where=and_where(thread))
                    continue
                ids = sorted(set(message_ids))
                size = self._batch()
                for start in range(0, len(ids), size):
                    chunk = {"message_id": {"$in": ids[start : start + size]}}
                    collection.delete(where=and_where([*thread, chunk]))
            except NotFoundError:
                self._forget_handle(name, found_resource)

    def drop(self, name: str) -> None:
        """Delete a whole index (every collection of it); no error if it does not exist."""
        from chromadb.errors import NotFoundError

        for resource_id, collection in list(self._all_resources(name)):
            self._forget_handle(name, resource_id)
            try:
                self._client.delete_collection(collection.name)
            except NotFoundError:
                continue
        with self._lock:
            self._roots.pop(name, None)
        try:
            self._client.delete_collection(name)
        except NotFoundError:
            return
        logger.info("dropped vector index %r", name)

    # -- reading ---------------------------------------------------------------------------

    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The ``k`` most similar vectors inside ``scope``, best first.

        One query in the resource's own collection (filtered by thread in thread scope).
        Scores come from :func:`similarity_from_cosine_distance`. Hits whose metadata is
        outside ``scope`` are dropped again after the search (defence in depth). A missing
        or empty index gives no hits.

        Raises:
            InvalidInputError: ``k`` is smaller than 1.
            EmbeddingMismatchError: the vector has another dimension than the index.
        """
        from chromadb.errors import NotFoundError

        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        root = self._root(name)
        if root is None:
            return []
        check_vector(name, root[1], len(vector))
        embedding = floats(vector)
        hits: list[VectorHit] = []
        for resource_id, collection in self._scoped(name, scope):
            with self._lock:
                size = self._sizes.get((name, resource_id), 0)
            try:
                found = _retrying(
                    partial(
                        search_collection,
                        name,
                        collection,
                        embedding,
                        k=k,
                        scope=scope,
                        size=size,
                        wide=_WIDE,
                        filter_up_to=_FILTER_UP_TO,
                    )
                )
                hits.extend(found)
            except NotFoundError:  # forgotten by another process since we cached it
                self._forget_handle(name, resource_id)
        hits.sort(key=lambda hit: (-hit.score, hit.id))
        return hits[:k]

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
        if scope is None or (scope.thread_id is None and scope.resource_id is not None):
            return sum(int(collection.count()) for _, collection in self._scoped(name, scope))
        return sum(1 for _ in self._rows(name, scope, include_metadata=False))

    async def acount(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Async twin of :meth:`count`."""
        return await run_in_executor(None, self.count, name, scope)

    def _rows(
        self, name: str, scope: ScopeFilter | None, *, include_metadata: bool
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Pages through ``(id, metadata)`` inside ``scope`` (metadata empty if not asked)."""
        if self._root(name) is None:
            return
        where = thread_where(scope) if scope is not None else None
        page = min(_PAGE, self._batch())
        for _, collection in self._scoped(name, scope):
            offset = 0
            while True:
                result = _retrying(
                    partial(
                        collection.get,
                        where=where,
                        limit=page,
                        offset=offset,
                        include=["metadatas"] if include_metadata else [],
                    )
                )
                ids = result["ids"]
                metadatas = result["metadatas"] or [{} for _ in ids]
                yield from zip(ids, metadatas, strict=True)
                if len(ids) < page:
                    break
                offset += page

    def close(self) -> None:
        """Forget the cached collections (the client itself is left to its owner)."""
        with self._lock:
            self._roots.clear()
            self._collections.clear()


def _retrying(read: Callable[[], _T]) -> _T:
    from chromadb.errors import InternalError

    return retrying(read, delays=_RETRY_DELAYS, transient=InternalError)
