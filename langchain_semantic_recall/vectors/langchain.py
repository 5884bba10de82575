"""Any LangChain `VectorStore` as the vector index, through a small per-store dialect.

LangChain's `VectorStore` interface has no common way to write precomputed vectors, to
filter by metadata or to list what is stored: a `StoreDialect` supplies those operations
for one kind of store (built in: `InMemoryVectorStore` and `langchain_chroma.Chroma`;
for another store, subclass it and pass it). The dialects live in `langchain_dialects`
and are importable from here too.

One store hosts every index name: each document carries `index_name` (and the
embedding model and dimension) in its metadata, every search and delete filters on it,
and document ids are `<index name>:<vector id>` so that two indexes never collide.
Scores are cosine similarity clipped to [0, 1], as on every backend; a Chroma store must
therefore be in cosine space.

Known gaps, by design of the LangChain interface:

- delete by thread or resource lists the matching ids, then deletes them: a vector
  written concurrently between the two steps survives (`reindex(missing_only=True)`
  removes such orphans);
- the engine's embedder does the embedding: the store's own embedding function is only
  used by code that calls the store directly (`similarity_search("text")`);
- `export` needs a dialect that reads vectors back (`lists_vectors`); otherwise it
  raises `ExportNotSupportedError`.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC
from typing import Any

from langchain_core.vectorstores import VectorStore

from langchain_semantic_recall.errors import EmbeddingMismatchError, InvalidInputError
from langchain_semantic_recall.filters import VECTOR_PREFIX
from langchain_semantic_recall.records import HeldVectors, ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.base import (
    ExportNotSupportedError,
    VectorIndex,
    record_from_metadata,
)
from langchain_semantic_recall.vectors.langchain_dialects import (
    ChromaDialect,
    InMemoryDialect,
    Metadata,
    StoreDialect,
    StoredVector,
    Where,
    chroma_where,
    dialect_for,
    matches,
)
from langchain_semantic_recall.vectors.rows import (
    carries_metadata,
    collect_held,
    filter_metadata,
    row_admitted,
)

__all__ = [
    "ChromaDialect",
    "InMemoryDialect",
    "LangChainVectorIndex",
    "StoreDialect",
    "StoredVector",
    "Where",
    "chroma_where",
    "dialect_for",
    "matches",
]

logger = logging.getLogger(__name__)


def _metadata(name: str, record: VectorRecord, model: str, dimension: int) -> Metadata:
    created = record.created_at
    aware = created.replace(tzinfo=UTC) if created.tzinfo is None else created.astimezone(UTC)
    return {
        "index_name": name,
        "vector_id": record.id,
        "message_id": record.message_id,
        "thread_id": record.thread_id,
        "resource_id": record.resource_id,
        "role": record.role,
        "created_at": aware.isoformat(),
        "embedding_model": model,
        "dimension": dimension,
        **filter_metadata(record),
    }


def _where(name: str, scope: ScopeFilter | None) -> Where:
    """The metadata filter of index `name` inside `scope` (its metadata filter too).

    A time range is not a `Where`: `_admitted` checks it on what the store returns.
    """
    where: dict[str, Any] = {"index_name": name}
    if scope is not None:
        where.update(scope.as_where())
        where.update({VECTOR_PREFIX + key: list(values) for key, values in scope.metadata})
    return where


def _admitted(scope: ScopeFilter | None, metadata: Mapping[str, Any]) -> bool:
    return scope is None or not scope.narrowed or row_admitted(scope, metadata)


class LangChainVectorIndex(VectorIndex):
    """A LangChain `VectorStore` you already have, as the engine's vector index.

    Setup:

    ```python
    store = InMemoryVectorStore(embedding=embeddings)  # or langchain_chroma.Chroma
    memory = SemanticRecall(
        storage=storage, vector_store=LangChainVectorIndex(store), embeddings=embeddings
    )
    ```

    Sync use:

    ```python
    memory.index(turn, thread_id="t1", resource_id="alice")
    ```

    Async use (the store's sync methods run in an executor):

    ```python
    await memory.arecall(messages, thread_id="t1", resource_id="alice")
    ```

    `compact` (and so `SemanticRecall.purge`) raises `CompactNotSupportedError`: what a
    store keeps of deleted vectors is its own; erase it with the store's tools.
    """

    def __init__(self, store: VectorStore, *, dialect: StoreDialect | None = None) -> None:
        """Wrap `store`.

        Args:
            store: The LangChain vector store.
            dialect: How to drive it; found from the store's type when None.

        Raises:
            InvalidOptionError: the store cannot filter by metadata, or has no dialect.
        """
        self.store = store
        self.dialect = dialect or dialect_for(store)
        self._lock = threading.RLock()
        self._opened: dict[str, tuple[str, int]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.store).__name__})"

    def _guard(self) -> AbstractContextManager[Any]:
        return nullcontext() if self.dialect.thread_safe else self._lock

    def _open(self, name: str, *, dimension: int, model: str) -> bool:
        """Record the index's model and dimension, or check them against stored vectors.

        A LangChain store keeps no index apart from its vectors: an index is created when
        no vector of it is found the first time this process opens it.
        """
        with self._lock:
            known = self._opened.get(name)
            if known is None:
                with self._guard():
                    first = next(
                        self.dialect.select(self.store, {"index_name": name}, limit=1), None
                    )
                if first is not None:
                    meta = first[1]
                    known = (str(meta.get("embedding_model", "")), int(meta.get("dimension", 0)))
                    self._opened[name] = known
            if known is None:
                self._opened[name] = (model, dimension)
                return True
        if known != (model, dimension):
            raise EmbeddingMismatchError(
                f"vector index {name!r} was built with embedding model {known[0]!r} "
                f"({known[1]}-d), but the embedder is {model!r} ({dimension}-d): use a new "
                "index_name for this embedder (reindex then embeds the stored messages "
                "into it), or empty this index before a reindex rebuilds it"
            )
        return False

    def _model(self, name: str) -> tuple[str, int]:
        with self._lock:
            known = self._opened.get(name)
        if known is None:
            raise InvalidInputError(
                f"vector index {name!r} was never opened: call open(name, dimension=..., "
                "model=...) first"
            )
        return known

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write vectors (document id `<name>:<vector id>`); an existing id is overwritten."""
        model, dimension = self._model(name)
        unique = list({record.id: record for record in records}.values())
        for record in unique:
            if len(record.vector) != dimension:
                raise EmbeddingMismatchError(
                    f"vector index {name!r} holds {dimension}-d vectors, got a "
                    f"{len(record.vector)}-d vector: embed with the index's model, use a new "
                    "index_name, or run reindex"
                )
        with self._guard():
            self.dialect.write(
                self.store,
                [f"{name}:{r.id}" for r in unique],
                [r.vector for r in unique],
                [r.content for r in unique],
                [_metadata(name, r, model, dimension) for r in unique],
            )

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The `k` most similar vectors inside `scope`, best first (scores in [0, 1])."""
        with self._lock:
            known = self._opened.get(name)
        if known is not None and len(vector) != known[1]:
            raise EmbeddingMismatchError(
                f"vector index {name!r} holds {known[1]}-d vectors, got a {len(vector)}-d "
                "query vector: embed with the index's model, use a new index_name, or reindex"
            )
        ask = k
        while True:  # a time range is checked here: ask for more until k are inside it
            with self._guard():
                found = self.dialect.search(self.store, vector, ask, _where(name, scope))
            hits = self._hits(name, scope, found)
            if len(hits) >= k or len(found) < ask or not scope.narrowed:
                break
            ask *= 4
        hits.sort(key=lambda hit: (-hit.score, hit.id))
        return hits[:k]

    @staticmethod
    def _hits(
        name: str, scope: ScopeFilter, found: list[tuple[str, Mapping[str, Any], float]]
    ) -> list[VectorHit]:
        hits: list[VectorHit] = []
        for doc_id, meta, similarity in found:
            resource_id, thread_id = str(meta.get("resource_id")), str(meta.get("thread_id"))
            if meta.get("index_name") != name or not scope.admits(resource_id, thread_id):
                logger.warning("dropped hit %r of %r outside the query scope", doc_id, name)
                continue
            if not _admitted(scope, meta):
                continue
            vector_id = str(meta.get("vector_id", doc_id))
            hits.append(
                VectorHit(
                    id=vector_id,
                    message_id=str(meta.get("message_id", vector_id)),
                    thread_id=thread_id,
                    resource_id=resource_id,
                    score=min(1.0, max(0.0, similarity)),
                )
            )
        return hits

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        """Lists the matching ids, then deletes them (each checked against the selectors).

        A delete is never wider than asked, whatever the dialect's `select` returns: a
        document outside the selectors (another resource's) is kept and logged, as
        `_hits` drops a hit outside a query's scope.
        """
        where: dict[str, str | Sequence[str]] = {"index_name": name}
        for key, value in (("thread_id", thread_id), ("resource_id", resource_id)):
            if value is not None:
                where[key] = value
        if message_ids is not None:
            where["message_id"] = message_ids
        with self._guard():
            doomed = list(self._selected(name, where))
            self.dialect.remove(self.store, doomed)

    def _selected(self, name: str, where: Where) -> Iterator[str]:
        """The ids `select` returns for `where` that do meet it (the others are logged)."""
        for doc_id, meta in self.dialect.select(self.store, where):
            if matches(meta, where):
                yield doc_id
            else:
                logger.warning("dropped document %r of %r outside the selection", doc_id, name)

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        return set(self._vector_ids(name, scope).messages)

    def _vector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        """The documents' metadata, read by `select` (no vectors)."""
        where = _where(name, scope)
        with self._guard():
            rows = list(self.dialect.select(self.store, where))
        return collect_held(
            (
                str(meta.get("vector_id", doc_id)),
                str(meta.get("message_id", doc_id)),
                carries_metadata(meta),
            )
            for doc_id, meta in rows
            if matches(meta, where) and _admitted(scope, meta)
        )

    def _count(self, name: str, scope: ScopeFilter | None) -> int:
        where = _where(name, scope)
        with self._guard():
            rows = self.dialect.select(self.store, where)
            return sum(1 for _, meta in rows if matches(meta, where) and _admitted(scope, meta))

    def _export(
        self, name: str, scope: ScopeFilter | None, *, batch_size: int
    ) -> Iterator[VectorRecord]:
        """Reads the documents of `name` in `scope` back through the dialect.

        Raises:
            ExportNotSupportedError: the dialect cannot read vectors back.
        """
        if not self.dialect.lists_vectors:
            raise ExportNotSupportedError(
                f"{type(self.dialect).__name__} cannot read vectors back from "
                f"{type(self.store).__name__}, so index {name!r} cannot be exported: embed "
                "the messages again (semantic-recall migrate --vectors reembed), or give a "
                "dialect with lists_vectors and select_vectors"
            )
        rows = self.dialect.select_vectors(self.store, _where(name, scope), page=batch_size)
        kept = (row for row in rows if _admitted(scope, row[1]))
        return self._records(name, kept, batch_size)

    def _records(
        self, name: str, rows: Iterator[StoredVector], batch_size: int
    ) -> Iterator[VectorRecord]:
        """Records of `rows`, read a batch at a time (the store's guard held per batch)."""
        while True:
            with self._guard():
                batch = list(itertools.islice(rows, batch_size))
            for doc_id, meta, text, vector in batch:
                vector_id = str(meta.get("vector_id", doc_id))
                record = record_from_metadata(vector_id, vector, meta, text)
                if record is None or meta.get("index_name") != name:
                    logger.warning("skipped document %r of %r without its metadata", doc_id, name)
                    continue
                yield record
            if len(batch) < batch_size:
                return
