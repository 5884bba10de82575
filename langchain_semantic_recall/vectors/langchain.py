"""Any LangChain ``VectorStore`` as the vector index, through a small per-store dialect.

LangChain's ``VectorStore`` interface embeds texts itself and has no common way to write
precomputed vectors, to filter by metadata or to list what is stored, and every store
spells filters its own way. A :class:`StoreDialect` supplies those few operations for one
kind of store; built in are ``InMemoryVectorStore`` (langchain-core) and
``langchain_chroma.Chroma``. For another store, subclass :class:`StoreDialect` and pass it.

One store hosts every index name: each document carries ``index_name`` (and the
embedding model and dimension) in its metadata, every search and delete filters on it,
and document ids are ``<index name>:<vector id>`` so that two indexes never collide.
Scores are cosine similarity clipped to [0, 1], as on every backend; a Chroma store must
therefore be in cosine space.

Known gaps, by design of the LangChain interface:

- delete by thread or resource lists the matching ids, then deletes them: a vector
  written concurrently between the two steps survives (``reindex(missing_only=True)``
  removes such orphans);
- the engine's embedder does the embedding: the store's own embedding function is only
  used by code that calls the store directly (``similarity_search("text")``).
"""

from __future__ import annotations

import inspect
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC
from typing import Any, TypeAlias

from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    InvalidInputError,
    InvalidOptionError,
)
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex, has_work

__all__ = [
    "ChromaDialect",
    "InMemoryDialect",
    "LangChainVectorIndex",
    "StoreDialect",
    "Where",
    "dialect_for",
]

logger = logging.getLogger(__name__)

Where: TypeAlias = Mapping[str, str | Sequence[str]]
"""Metadata equality conditions, all of which must hold; a sequence means "one of"."""

Metadata: TypeAlias = dict[str, str | int]


def matches(metadata: Mapping[str, Any], where: Where) -> bool:
    """Whether ``metadata`` satisfies every condition of ``where`` (pure)."""
    for key, wanted in where.items():
        value = metadata.get(key)
        if isinstance(wanted, str):
            if value != wanted:
                return False
        elif value not in wanted:
            return False
    return True


class StoreDialect(ABC):
    """The operations the adapter needs from one kind of LangChain vector store."""

    thread_safe: bool = True
    """False when the store must not be used from two threads at once."""

    @abstractmethod
    def write(
        self,
        store: Any,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        """Insert or overwrite documents with precomputed vectors."""

    @abstractmethod
    def search(
        self, store: Any, vector: Sequence[float], k: int, where: Where
    ) -> list[tuple[str, Mapping[str, Any], float]]:
        """The ``k`` nearest documents satisfying ``where``: (id, metadata, cosine)."""

    @abstractmethod
    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every (id, metadata) satisfying ``where`` (at most ``limit``)."""

    def remove(self, store: Any, ids: Sequence[str]) -> None:
        """Delete documents by id."""
        if ids:
            store.delete(ids=list(ids))


class InMemoryDialect(StoreDialect):
    """``langchain_core.vectorstores.InMemoryVectorStore``: exact cosine search in memory.

    Vectors are written into the store's ``store`` dict in the layout its own
    ``add_documents`` uses; filters are Python callables.
    """

    thread_safe = False

    def write(
        self,
        store: Any,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        for id_, vector, text, metadata in zip(ids, vectors, texts, metadatas, strict=True):
            store.store[id_] = {
                "id": id_,
                "vector": [float(x) for x in vector],
                "text": text,
                "metadata": dict(metadata),
            }

    def search(
        self, store: Any, vector: Sequence[float], k: int, where: Where
    ) -> list[tuple[str, Mapping[str, Any], float]]:
        found = store.similarity_search_with_score_by_vector(
            [float(x) for x in vector], k=k, filter=lambda doc: matches(doc.metadata, where)
        )
        return [(str(doc.id), doc.metadata, float(score)) for doc, score in found]

    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        found = 0
        for item in list(store.store.values()):
            if matches(item["metadata"], where):
                yield str(item["id"]), item["metadata"]
                found += 1
                if limit is not None and found >= limit:
                    return


def chroma_where(where: Where) -> dict[str, Any]:
    """``where`` in Chroma's filter language (``$and`` of ``$eq`` / ``$in``)."""
    clauses: list[dict[str, Any]] = [
        {key: value if isinstance(value, str) else {"$in": list(value)}}
        for key, value in where.items()
    ]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class ChromaDialect(StoreDialect):
    """``langchain_chroma.Chroma``; its collection must be in cosine space.

    Create the store with an explicit embedding function (Chroma's default downloads a
    model) and cosine space, e.g. ``Chroma(collection_name="memory",
    embedding_function=embeddings, collection_configuration={"hnsw": {"space":
    "cosine"}})``. Vectors are upserted through the store's collection (the store's own
    ``add_texts`` would embed the texts again).
    """

    _PAGE = 5000

    def write(
        self,
        store: Any,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        collection = store._collection  # the only way to write precomputed vectors
        size = min(self._PAGE, int(store._client.get_max_batch_size()))
        for start in range(0, len(ids), size):
            end = start + size
            collection.upsert(
                ids=list(ids[start:end]),
                embeddings=[[float(x) for x in v] for v in vectors[start:end]],
                documents=list(texts[start:end]),
                metadatas=[dict(m) for m in metadatas[start:end]],
            )

    def search(
        self, store: Any, vector: Sequence[float], k: int, where: Where
    ) -> list[tuple[str, Mapping[str, Any], float]]:
        found = store.similarity_search_by_vector_with_relevance_scores(
            [float(x) for x in vector], k=k, filter=chroma_where(where)
        )
        return [(str(doc.id), doc.metadata, 1.0 - float(distance)) for doc, distance in found]

    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        page = self._PAGE if limit is None else min(limit, self._PAGE)
        offset = 0
        while True:
            got = store.get(
                where=chroma_where(where), limit=page, offset=offset, include=["metadatas"]
            )
            ids, metadatas = got["ids"], got["metadatas"] or [{} for _ in got["ids"]]
            yield from zip(ids, metadatas, strict=True)
            offset += len(ids)
            if len(ids) < page or (limit is not None and offset >= limit):
                return

    @staticmethod
    def check_space(store: Any) -> None:
        """Refuse a collection whose distance is not cosine (scores would mean otherwise)."""
        collection = store._collection
        config: Mapping[str, Any] = collection.configuration_json or {}
        spaces = [
            section.get("space")
            for section in (config.get("hnsw"), config.get("spann"))
            if isinstance(section, Mapping)
        ]
        space = next((s for s in spaces if s), None) or (collection.metadata or {}).get(
            "hnsw:space", "l2"
        )
        if space != "cosine":
            raise InvalidOptionError(
                f"the Chroma collection {collection.name!r} uses {space!r} distance, but "
                "recall scores are cosine similarity: create the store with "
                'collection_configuration={"hnsw": {"space": "cosine"}}'
            )


def dialect_for(store: VectorStore) -> StoreDialect:
    """The built-in dialect of ``store``.

    Raises:
        InvalidOptionError: the store cannot filter by metadata (recall must restrict
            every search to one thread or resource), or it has no built-in dialect.
    """
    if isinstance(store, InMemoryVectorStore):
        return InMemoryDialect()
    if type(store).__module__.startswith("langchain_chroma"):
        ChromaDialect.check_space(store)
        return ChromaDialect()
    name = type(store).__name__
    search = getattr(store, "similarity_search_by_vector", None)
    if search is None or "filter" not in inspect.signature(search).parameters:
        raise InvalidOptionError(
            f"{name} cannot filter a search by metadata, and recall must restrict every "
            "search to one thread or resource (or one user's memories would reach "
            "another); use a store with metadata filters (InMemoryVectorStore, Chroma) or "
            "the built-in ChromaVectorIndex"
        )
    raise InvalidOptionError(
        f"no built-in dialect for {name}: subclass "
        "langchain_semantic_recall.vectors.langchain.StoreDialect (write precomputed "
        "vectors, search by vector with a metadata filter, list ids by metadata) and pass "
        "LangChainVectorIndex(store, dialect=...)"
    )


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
    }


class LangChainVectorIndex(VectorIndex):
    """A LangChain ``VectorStore`` you already have, as the engine's vector index.

    Setup::

        store = InMemoryVectorStore(embedding=embeddings)  # or langchain_chroma.Chroma
        memory = SemanticRecall(
            storage=storage, vector_store=LangChainVectorIndex(store), embeddings=embeddings
        )

    Sync use::

        memory.index(turn, thread_id="t1", resource_id="alice")

    Async use (the store's sync methods run in an executor)::

        await memory.arecall(messages, thread_id="t1", resource_id="alice")
    """

    def __init__(self, store: VectorStore, *, dialect: StoreDialect | None = None) -> None:
        """Wrap ``store``.

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

    def open(self, name: str, *, dimension: int, model: str) -> None:
        """Record the index's model and dimension, or check them against stored vectors."""
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
                return
        if known != (model, dimension):
            raise EmbeddingMismatchError(
                f"vector index {name!r} was built with embedding model {known[0]!r} "
                f"({known[1]}-d), but the embedder is {model!r} ({dimension}-d): use a new "
                "index_name for this embedder, or run reindex to rebuild the index with it"
            )

    def _model(self, name: str) -> tuple[str, int]:
        with self._lock:
            known = self._opened.get(name)
        if known is None:
            raise InvalidInputError(
                f"vector index {name!r} was never opened: call open(name, dimension=..., "
                "model=...) first"
            )
        return known

    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write vectors (document id ``<name>:<vector id>``); an existing id is overwritten."""
        if not records:
            return
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

    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The ``k`` most similar vectors inside ``scope``, best first (scores in [0, 1])."""
        if k < 1:
            raise InvalidInputError(f"k must be at least 1, got {k}")
        with self._lock:
            known = self._opened.get(name)
        if known is not None and len(vector) != known[1]:
            raise EmbeddingMismatchError(
                f"vector index {name!r} holds {known[1]}-d vectors, got a {len(vector)}-d "
                "query vector: embed with the index's model, use a new index_name, or reindex"
            )
        where = {"index_name": name, **scope.as_where()}
        with self._guard():
            found = self.dialect.search(self.store, vector, k, where)
        hits: list[VectorHit] = []
        for doc_id, meta, similarity in found:
            resource_id, thread_id = str(meta.get("resource_id")), str(meta.get("thread_id"))
            if meta.get("index_name") != name or not scope.admits(resource_id, thread_id):
                logger.warning("dropped hit %r of %r outside the query scope", doc_id, name)
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
        hits.sort(key=lambda hit: (-hit.score, hit.id))
        return hits[:k]

    def delete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the vectors matching every given selector (lists the ids, then deletes).

        Raises:
            InvalidInputError: no selector was given (that would delete everything).
        """
        if not has_work(thread_id, resource_id, message_ids):
            return
        where: dict[str, str | Sequence[str]] = {"index_name": name}
        for key, value in (("thread_id", thread_id), ("resource_id", resource_id)):
            if value is not None:
                where[key] = value
        if message_ids is not None:
            where["message_id"] = sorted(set(message_ids))
        with self._guard():
            doomed = [doc_id for doc_id, _ in self.dialect.select(self.store, where)]
            self.dialect.remove(self.store, doomed)

    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Ids of the messages with at least one vector, optionally inside ``scope``."""
        where = {"index_name": name, **(scope.as_where() if scope else {})}
        with self._guard():
            rows = list(self.dialect.select(self.store, where))
        return {str(meta.get("message_id", doc_id)) for doc_id, meta in rows}
