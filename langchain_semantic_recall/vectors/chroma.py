"""Chroma vector index: one Chroma collection per resource of each index.

The `chroma*` modules alone import `chromadb`, inside functions (importing them is cheap).
Any client works: `PersistentClient` (the default), `EphemeralClient`, `HttpClient`. Layout
(`docs/performance.md`): index `name` is a vector-less *root* collection recording the
embedding model, dimension and layout version (a mismatched embedder fails closed), plus one
collection per resource (`resource_collection_name`, handles in `ChromaCollections`).
Resource scope is one unfiltered HNSW query; thread scope searches the owner's collection
(`search_collection`); forgetting a resource drops its collection; scopes without a resource
(maintenance, export) visit every collection. `DEFAULT_HNSW` (chosen by agreement with exact
search) applies to new collections; `compact` is `chroma_purge`'s.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.fusion import best_scores
from langchain_semantic_recall.options import check_index_name
from langchain_semantic_recall.records import CompactResult, ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors import chroma_clients as clients
from langchain_semantic_recall.vectors.base import VectorIndex, record_from_metadata
from langchain_semantic_recall.vectors.chroma_collections import ChromaCollections, Row
from langchain_semantic_recall.vectors.chroma_layout import (
    DEFAULT_HNSW,
    LAYOUT,
    and_where,
    check_vector,
    floats,
    nearest_in_collection,
    resource_collection_name,
    scope_of,
    scope_where,
    search_collection,
    similarity_from_cosine_distance,
    thread_where,
)
from langchain_semantic_recall.vectors.chroma_purge import compact_index, is_http, persist_folder
from langchain_semantic_recall.vectors.chroma_roots import ChromaRoots
from langchain_semantic_recall.vectors.chroma_snapshot import Snapshot
from langchain_semantic_recall.vectors.chroma_snapshots import FOLDER, SNAPSHOTS_FROM, ColdSnapshots
from langchain_semantic_recall.vectors.chroma_sqlite import release_unused
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from langchain_semantic_recall.vectors.chroma_workarounds.async_writes import AsyncWriteGate
from langchain_semantic_recall.vectors.chroma_writes import Write, planned_writes
from langchain_semantic_recall.vectors.rows import carries_metadata, collect_held, row_admitted
from langchain_semantic_recall.vectors.write_behind import after_writes

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.api.models.Collection import Collection

    from langchain_semantic_recall.records import HeldVectors

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
"""Rows per `get` page when listing metadata (kept under Chroma's max batch, 5,461)."""
_WIDE: Final = 64
"""Unfiltered rows a thread-scope search looks at first (see `search_collection`)."""
_FILTER_UP_TO: Final = 5000
"""Collections up to this size search a thread with Chroma's filter alone."""
_T = TypeVar("_T")


class ChromaVectorIndex(VectorIndex):
    """A host of named vector indexes: per index, one Chroma collection per resource.

    ```python
    index = ChromaVectorIndex.persistent("./memory/chroma")
    index.open("minilm-384", dimension=384, model="all-MiniLM-L6-v2")
    index.upsert("minilm-384", records)
    hits = index.query("minilm-384", vector, k=4, scope=ScopeFilter(resource_id="u1"))
    hits = await index.aquery("minilm-384", vector, k=4, scope=ScopeFilter(resource_id="u1"))
    ```

    Vectors are passed in (collections have `embedding_function=None`: Chroma's default
    would download a model). Collection handles are cached; one deleted by another
    process is looked up again. A message id belongs to one resource (the storage enforces
    it). Safe to share between threads. Chroma's known problems are worked around as
    `workarounds` says (all on by default), a turn's writes made just after `upsert`
    returns among them. `VectorIndex` checks every call's arguments; here is Chroma's work.
    """

    supports_compact = True

    def __init__(
        self,
        client: ClientAPI,
        *,
        hnsw: Mapping[str, Any] | None = None,
        workarounds: ChromaWorkarounds | bool = True,
        snapshots_from: int = SNAPSHOTS_FROM,
    ) -> None:
        """Wrap a chromadb client.

        Args:
            client: Any chromadb client (persistent, ephemeral or HTTP).
            hnsw: HNSW settings for new collections, merged over `DEFAULT_HNSW`. The
                space is always cosine.
            workarounds: The Chroma workarounds to use (`ChromaWorkarounds`); True: the
                defaults, False: none.
            snapshots_from: On an embedded persistent client, resource collections of
                this many vectors or more keep a snapshot for their first search in a
                process (`chroma_snapshots`); 0: none.

        Raises:
            InvalidInputError: `hnsw` asks for a space other than cosine.
            InvalidOptionError: `workarounds` is not one of those.
        """
        settings = {**DEFAULT_HNSW, **(hnsw or {})}
        if settings["space"] != "cosine":
            raise InvalidInputError(
                f"hnsw space must be 'cosine' (got {settings['space']!r}): scores are cosine "
                "similarity on every backend; remove 'space' from the hnsw options"
            )
        self._workarounds = fixes = ChromaWorkarounds.of(workarounds)
        self._client = client
        self._close_own: Callable[[], None] | None = None  # what `persistent` opened (`own`)
        self._hnsw: Mapping[str, Any] = settings
        self._lock = threading.Lock()
        self._roots = ChromaRoots(client, self._configuration())
        self._collections = ChromaCollections(
            client, self._configuration(), retry_delays=fixes.delays
        )
        embedded = not is_http(client)
        if embedded:  # (a fork of a process that ran embedded Chroma hangs in it)
            clients.embedded_here()
        self._gate = AsyncWriteGate(fixes.gate) if embedded and fixes.enabled else None
        folder = persist_folder(client)
        if embedded and fixes.behind:  # a turn's vectors written after `upsert` returns
            lane = os.path.realpath(folder) if folder else ":ephemeral:"  # (one per process)
            self._write_behind(fixes.gate.alone if fixes.gate else None, lane)
        self._snapshot_files = Path(folder) / FOLDER if folder else None
        self._snapshots = (
            ColdSnapshots(folder, snapshots_from=snapshots_from, retry_delays=fixes.delays)
            if folder and snapshots_from > 0
            else None
        )
        if embedded and fixes.enabled:  # Chroma's own eviction loses vectors
            from langchain_semantic_recall.vectors.chroma_workarounds.unload import protect

            bindings = protect(getattr(client, "_server", None), fixes.max_loaded)
            if bindings is not None and self._snapshots is not None:  # (weak: the client's)
                restarts = weakref.ref(bindings)
                self._snapshots.follow_unloads(lambda: getattr(restarts(), "restarts", 0))

    @classmethod
    def persistent(
        cls,
        path: str | os.PathLike[str],
        *,
        hnsw: Mapping[str, Any] | None = None,
        read_only: bool = False,
        workarounds: ChromaWorkarounds | bool = True,
        snapshots_from: int = SNAPSHOTS_FROM,
    ) -> ChromaVectorIndex:
        """An embedded, persistent Chroma at `path` (anonymized telemetry off).

        Args:
            path: The Chroma folder (created if missing, unless `read_only`).
            hnsw: HNSW settings for new collections (see `__init__`).
            workarounds: The Chroma workarounds to use (see `__init__`).
            snapshots_from: Snapshots for a first search (see `__init__`).
            read_only: Never write `path`. Embedded Chroma writes its `chroma.sqlite3`
                when it opens (measured with chromadb 1.5 on a read-only mount: "attempt
                to write a readonly database"), so the index is opened on a private
                temporary copy of `path`, removed with the index (or at exit).

        Raises:
            StorageError: The folder holds a damaged index, or cannot be opened.
        """
        path = os.path.expanduser(path)  # "~": the home folder, as `SQLiteStorage` reads it
        with clients.opened_persistent(path, read_only=read_only) as (client, copy):
            index = cls(client, hnsw=hnsw, workarounds=workarounds, snapshots_from=snapshots_from)
        index._close_own = clients.own(index, partial(clients.close_client, client), copy=copy)
        if copy is not None:
            index._snapshot_files = None  # never delete in `path`
            if index._snapshots:  # the copy has none: read the store's own, never built
                index._snapshots.read_in_place(path)
        return index

    @classmethod
    def ephemeral(
        cls,
        *,
        hnsw: Mapping[str, Any] | None = None,
        workarounds: ChromaWorkarounds | bool = True,
    ) -> ChromaVectorIndex:
        """An in-memory Chroma (shared by every ephemeral client of the process).

        Args:
            hnsw: HNSW settings for new collections (see `__init__`).
            workarounds: Chroma's workarounds (`ChromaWorkarounds`; True: the defaults).
        """
        return cls(clients.open_ephemeral(), hnsw=hnsw, workarounds=workarounds)

    @property
    def client(self) -> ClientAPI:
        """The wrapped chromadb client."""
        return self._client

    @property
    def snapshots(self) -> ColdSnapshots | None:
        """The snapshots for a resource's first search (`chroma_snapshots`); None if off."""
        return self._snapshots

    @property
    def workarounds(self) -> ChromaWorkarounds:
        """The Chroma workarounds this index uses."""
        return self._workarounds

    def _configuration(self) -> CreateCollectionConfiguration:
        return cast("CreateCollectionConfiguration", {"hnsw": dict(self._hnsw)})

    def _open(self, name: str, *, dimension: int, model: str) -> bool:
        """Create the root collection if missing, or check an existing one (`ChromaRoots`).

        Raises:
            EmbeddingMismatchError: the index was built with another model or dimension,
                not in cosine space, or holds vectors of an earlier layout.
        """
        return self._roots.open(name, dimension=dimension, model=model)

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write into the resources' collections, in batches of the client's max.

        Raises:
            InvalidInputError: the index was never opened.
            EmbeddingMismatchError: a vector has another dimension than the index.
        """
        for write in self._writes(name, records, self._collections.max_batch()):
            write()
        self._written(name, records)
        logger.debug("upserted %d vectors into %r", len(records), name)

    def _check_upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        self._writes(name, records, len(records))  # opened? the vectors' dimension?

    async def _aupsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """On an embedded client, in pieces (`async_writes`); over HTTP, in the executor."""
        piece = self._workarounds.piece
        if self._gate is None or piece is None:  # over HTTP the writes leave the process
            await super()._aupsert(name, records)
            return
        writes = await run_in_executor(None, self._writes, name, records, piece)
        await self._gate.run(writes)
        self._written(name, records)

    def _written(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Have the written collections' snapshots checked (`ColdSnapshots.written`)."""
        if self._snapshots is None:
            return
        for resource_id, vectors in Counter(record.resource_id for record in records).items():
            if collection := self._collections.get(name, resource_id, create=False):
                self._snapshots.written(collection, vectors)

    def _writes(self, name: str, records: Sequence[VectorRecord], size: int) -> list[Write]:
        if (root := self._roots.get(name)) is None:
            raise InvalidInputError(
                f"vector index {name!r} was never opened: call open(name, dimension=..., "
                "model=...) before upsert"
            )
        return planned_writes(self._collections, name, root, records, size)

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        """Delete what matches every selector.

        A resource alone drops its collection; without a resource every collection of the
        index is visited.
        """
        from chromadb.errors import NotFoundError

        if resource_id is not None and thread_id is None and message_ids is None:
            self._drop_collection(name, resource_id, resource_collection_name(name, resource_id))
            return
        thread = [] if thread_id is None else [{"thread_id": thread_id}]
        scope = scope_of(resource_id, thread_id)
        for found_resource, collection in self._collections.scoped(name, scope):
            self._forget_snapshot(collection.name)
            try:
                if message_ids is None:
                    collection.delete(where=and_where(thread))
                    continue
                size = self._collections.max_batch()
                for start in range(0, len(message_ids), size):
                    chunk = {"message_id": {"$in": message_ids[start : start + size]}}
                    collection.delete(where=and_where([*thread, chunk]))
            except NotFoundError:
                self._collections.forget(name, found_resource)
            finally:
                self._forget_snapshot(collection.name)  # one a build wrote meanwhile

    @after_writes
    def drop(self, name: str) -> None:
        """Delete a whole index (every collection of it); no error if it does not exist.

        Args:
            name: The index name.
        """
        from chromadb.errors import NotFoundError

        check_index_name(name)
        for resource_id, collection in list(self._collections.every(name)):
            self._drop_collection(name, resource_id, collection.name)
        self._roots.forget(name)
        with suppress(NotFoundError):
            self._client.delete_collection(name)
            logger.info("dropped vector index %r", name)

    async def adrop(self, name: str) -> None:
        """Async twin of `drop`."""
        await run_in_executor(None, self.drop, name)

    def _drop_collection(self, name: str, resource_id: str, collection: str) -> None:
        """Drop one resource's collection, and its snapshot (also one a build wrote meanwhile)."""
        from chromadb.errors import NotFoundError

        self._collections.forget(name, resource_id)
        self._forget_snapshot(collection)
        with suppress(NotFoundError):
            self._client.delete_collection(collection)
        self._forget_snapshot(collection)  # `ColdSnapshots._save` may have written one

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """One query in the resource's own collection (filtered by thread in thread scope).

        Scores come from `similarity_from_cosine_distance`. Hits whose metadata is
        outside `scope` are dropped again after the search (defence in depth). A missing
        or empty index gives no hits.

        Raises:
            EmbeddingMismatchError: the vector has another dimension than the index.
        """
        search = partial(
            search_collection, name, k=k, scope=scope, wide=_WIDE, filter_up_to=_FILTER_UP_TO
        )
        hits = self._each_collection(name, vector, scope, lambda c, v, n: search(c, v, size=n))
        hits.sort(key=lambda hit: (-hit.score, hit.id))
        return hits[:k]

    def _nearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """Resource scope: ids and distances only (`nearest_in_collection`), no metadata.

        The resource's own collection holds only its vectors, and the engine reads the
        messages through the storage in `scope`. Thread scope: `query`'s checked hits.
        """
        if scope.thread_id is not None or scope.narrowed:
            return super()._nearest(name, vector, k=k, scope=scope)
        found = self._each_collection(name, vector, scope, partial(self._nearest_in, k=k))
        return best_scores(found)[:k]

    def _nearest_in(
        self, collection: Collection, vector: list[float], _size: int, *, k: int
    ) -> list[tuple[str, float]]:
        """From the collection's snapshot while Chroma has not loaded it, else from Chroma."""
        snapshots = self._snapshots
        found = None if snapshots is None else snapshots.nearest(collection, vector, k)
        return nearest_in_collection(collection, vector, k=k) if found is None else found

    def _forget_snapshot(self, collection_name: str) -> None:
        """Delete the collection's snapshot, also with snapshots off (another wrote one?)."""
        if self._snapshots is not None:
            self._snapshots.forget(collection_name)
        elif self._snapshot_files is not None:
            Snapshot.delete(self._snapshot_files, collection_name)

    def _each_collection(
        self,
        name: str,
        vector: Sequence[float],
        scope: ScopeFilter,
        search: Callable[[Collection, list[float], int], list[_T]],
    ) -> list[_T]:
        """`search(collection, vector, size)` over the collections `scope` reaches.

        Raises:
            EmbeddingMismatchError: the vector has another dimension than the index.
        """
        root = self._roots.get(name)
        if root is None:
            return []
        check_vector(name, root[1], len(vector))
        embedding = floats(vector)
        plain = scope.thread_id is None and not scope.narrowed

        def one(resource_id: str, collection: Collection) -> list[_T]:
            # the size picks the thread-search strategy; a resource search needs none
            size = 0 if plain else self._collections.size(name, resource_id)
            return self._collections.read(partial(search, collection, embedding, size))

        # a collection forgotten by another process since we cached it: read anew, or none
        return [hit for hits in self._collections.each(name, scope, one) for hit in hits]

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        return set(self._vector_ids(name, scope).messages)

    def _vector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        """Read with the rows' metadata (no embedding): one outside `scope` is left out."""
        return collect_held(
            (vector_id, str(meta.get("message_id", vector_id)), carries_metadata(meta))
            for vector_id, meta, _ in self._rows(name, scope, metadata=True)
            if scope is None or row_admitted(scope, meta)
        )

    def _count(self, name: str, scope: ScopeFilter | None) -> int:
        """A resource's collections count themselves; a thread's vectors are listed."""
        if self._roots.get(name) is None:
            return 0
        if scope is None or (scope.thread_id is None and not scope.narrowed):
            return sum(self._collections.each(name, scope, lambda _, c: int(c.count())))
        if scope.narrowed:  # the `where` may let older rows through: each is checked
            return sum(map(len, self._vector_ids(name, scope).by_message().values()))
        return sum(1 for _ in self._rows(name, scope, metadata=False))

    def _export(
        self, name: str, scope: ScopeFilter | None, *, batch_size: int
    ) -> Iterator[VectorRecord]:
        """The scope's collections, `batch_size` rows a `get`; rows not written here skipped."""
        for vector_id, meta, embedding in self._rows(
            name, scope, metadata=True, embeddings=True, page=batch_size
        ):
            if scope is not None and scope.narrowed and not row_admitted(scope, meta):
                continue
            vector = () if embedding is None else embedding
            record = record_from_metadata(vector_id, vector, meta, str(meta.get("content", "")))
            if record is None:
                logger.warning("skipped vector %r of %r without its metadata", vector_id, name)
                continue
            yield record

    def _rows(
        self,
        name: str,
        scope: ScopeFilter | None,
        *,
        metadata: bool,
        embeddings: bool = False,
        page: int = _PAGE,
    ) -> Iterator[Row]:
        """The rows inside `scope` (`ChromaCollections.rows`); none if no such index."""
        if self._roots.get(name) is None:
            return iter(())
        return self._collections.rows(
            name, scope, metadata=metadata, embeddings=embeddings, page=min(page, _PAGE)
        )

    def _compact(self, name: str) -> CompactResult:
        try:
            return compact_index(self._client, self._collections, name)
        finally:
            if self._snapshots is not None:  # the folder was replaced, snapshots included
                self._snapshots.clear()

    def _close(self) -> None:
        """Forget the cached collections; close the client if built here (not a caller's)."""
        self._roots.clear()
        with self._lock:
            close, self._close_own = self._close_own, None
        self._collections.clear()
        if self._snapshots is not None:
            self._snapshots.close()
        if close is not None:
            close()
            release_unused()  # chromadb's file, once no client of ours has it
