"""How to drive one kind of LangChain `VectorStore`: the dialects of the adapter.

LangChain's `VectorStore` interface embeds texts itself and has no common way to write
precomputed vectors, to filter by metadata or to list what is stored, and every store
spells filters its own way. A `StoreDialect` supplies those few operations for one kind
of store; built in are `InMemoryVectorStore` (langchain-core) and
`langchain_chroma.Chroma`. `LangChainVectorIndex` drives a store through its dialect.

Reading vectors back (for `export`) is optional: a dialect that can sets `lists_vectors`
and implements `StoreDialect.select_vectors`; without it, `export` raises
`ExportNotSupportedError` (and `semantic-recall migrate` embeds the messages again).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.filters import same_value
from langchain_semantic_recall.vectors.base import ExportNotSupportedError
from langchain_semantic_recall.vectors.chroma_layout import in_where

__all__ = [
    "ChromaDialect",
    "InMemoryDialect",
    "Metadata",
    "StoreDialect",
    "StoredVector",
    "Where",
    "chroma_where",
    "dialect_for",
    "matches",
]

Scalar: TypeAlias = str | int | float | bool
Where: TypeAlias = Mapping[str, Scalar | Sequence[Scalar]]
"""Metadata equality conditions, all of which must hold; a list or tuple means "one of".

Values compare by kind (`filters.same_value`): a bool only equals a bool, numbers compare
as numbers. A message metadata filter arrives as `meta_<key>` conditions; time ranges
are checked by the adapter on what the store returns (never asked of a dialect).
"""

Metadata: TypeAlias = dict[str, Scalar]
"""The metadata the adapter writes with each document."""

StoredVector: TypeAlias = tuple[str, Mapping[str, Any], str, Sequence[float]]
"""A document read back with its vector: (document id, metadata, text, vector)."""


def matches(metadata: Mapping[str, Any], where: Where) -> bool:
    """Whether `metadata` satisfies every condition of `where` (pure).

    Args:
        metadata: A document's metadata.
        where: Metadata conditions: a key's one value, or a sequence of allowed values.
    """
    for key, wanted in where.items():
        if key not in metadata:
            return False
        value = metadata[key]
        options = (wanted,) if isinstance(wanted, str | int | float | bool) else wanted
        if not any(same_value(value, option) for option in options):
            return False
    return True


class StoreDialect(ABC):
    """The operations the adapter needs from one kind of LangChain vector store."""

    thread_safe: bool = True
    """False when the store must not be used from two threads at once."""
    lists_vectors: bool = False
    """True when `select_vectors` reads vectors back (`export` needs it)."""

    @abstractmethod
    def write(
        self,
        store: Any,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        """Insert or overwrite documents with precomputed vectors.

        Args:
            store: The LangChain vector store.
            ids: One id per document.
            vectors: One precomputed vector per document.
            texts: One text per document.
            metadatas: One metadata mapping per document.
        """

    @abstractmethod
    def search(
        self, store: Any, vector: Sequence[float], k: int, where: Where
    ) -> list[tuple[str, Mapping[str, Any], float]]:
        """The `k` nearest documents satisfying `where`: (id, metadata, cosine).

        Args:
            store: The LangChain vector store.
            vector: The query vector.
            k: Most documents to return.
            where: Metadata conditions every document must meet (`matches`).
        """

    @abstractmethod
    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every (id, metadata) satisfying `where` (at most `limit`).

        Args:
            store: The LangChain vector store.
            where: Metadata conditions every document must meet (`matches`).
            limit: Most documents to return (None: all).
        """

    def select_vectors(self, store: Any, where: Where, *, page: int) -> Iterator[StoredVector]:
        """Every document satisfying `where` with its text and vector, `page` a read.

        Only called when `lists_vectors` is True.

        Args:
            store: The LangChain vector store.
            where: Metadata conditions every document must meet (`matches`).
            page: Documents read per round trip.
        """
        raise ExportNotSupportedError(
            f"{type(self).__name__} cannot read vectors back from the store: set "
            "lists_vectors and implement select_vectors, or embed the messages again"
        )

    def remove(self, store: Any, ids: Sequence[str]) -> None:
        """Delete documents by id.

        Args:
            store: The LangChain vector store.
            ids: The documents' ids.
        """
        if ids:
            store.delete(ids=list(ids))


class InMemoryDialect(StoreDialect):
    """`langchain_core.vectorstores.InMemoryVectorStore`: exact cosine search in memory.

    Vectors are written into the store's `store` dict in the layout its own
    `add_documents` uses; filters are Python callables.
    """

    thread_safe = False
    lists_vectors = True

    def write(
        self,
        store: Any,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        """Put each vector into the store's dict, as `add_documents` lays it out."""
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
        """The `k` nearest documents satisfying `where`: (id, metadata, cosine)."""
        found = store.similarity_search_with_score_by_vector(
            [float(x) for x in vector], k=k, filter=lambda doc: matches(doc.metadata, where)
        )
        return [(str(doc.id), doc.metadata, float(score)) for doc, score in found]

    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every (id, metadata) satisfying `where` (at most `limit`)."""
        found = 0
        for item in list(store.store.values()):
            if matches(item["metadata"], where):
                yield str(item["id"]), item["metadata"]
                found += 1
                if limit is not None and found >= limit:
                    return

    def select_vectors(self, store: Any, where: Where, *, page: int) -> Iterator[StoredVector]:
        """Every document satisfying `where` with its text and vector."""
        for item in list(store.store.values()):
            if matches(item["metadata"], where):
                yield str(item["id"]), item["metadata"], str(item["text"]), item["vector"]


def chroma_where(where: Where) -> dict[str, Any]:
    """`where` in Chroma's filter language (`$and` of `$eq` / `$in`, one `$in` per kind).

    Args:
        where: Metadata conditions: a key's one value, or a sequence of allowed values.
    """
    clauses: list[dict[str, Any]] = [
        {key: value} if isinstance(value, str | int | float | bool) else in_where(key, value)
        for key, value in where.items()
    ]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class ChromaDialect(StoreDialect):
    """`langchain_chroma.Chroma`; its collection must be in cosine space.

    Create the store with an explicit embedding function (Chroma's default downloads a
    model) and cosine space:

    ```python
    store = Chroma(
        collection_name="memory",
        embedding_function=embeddings,
        collection_configuration={"hnsw": {"space": "cosine"}},
    )
    ```

    Vectors are upserted through the store's collection (the store's own `add_texts`
    would embed the texts again).
    """

    _PAGE = 5000
    lists_vectors = True

    def write(
        self,
        store: Any,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        texts: Sequence[str],
        metadatas: Sequence[Metadata],
    ) -> None:
        """Upsert precomputed vectors into the store's collection, in batches."""
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
        """The `k` nearest documents satisfying `where`: (id, metadata, cosine)."""
        found = store.similarity_search_by_vector_with_relevance_scores(
            [float(x) for x in vector], k=k, filter=chroma_where(where)
        )
        return [(str(doc.id), doc.metadata, 1.0 - float(distance)) for doc, distance in found]

    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every (id, metadata) satisfying `where` (at most `limit`), page by page."""
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

    def select_vectors(self, store: Any, where: Where, *, page: int) -> Iterator[StoredVector]:
        """Every document satisfying `where` with its text and vector, `page` a read."""
        size = min(page, self._PAGE)
        offset = 0
        while True:
            got = store.get(
                where=chroma_where(where),
                limit=size,
                offset=offset,
                include=["metadatas", "documents", "embeddings"],
            )
            ids = got["ids"]
            metadatas = got["metadatas"] or [{} for _ in ids]
            documents = got["documents"] or ["" for _ in ids]
            vectors = got["embeddings"]
            for i, doc_id in enumerate(ids):
                yield doc_id, metadatas[i], documents[i] or "", vectors[i]
            offset += len(ids)
            if len(ids) < size:
                return

    @staticmethod
    def check_space(store: Any) -> None:
        """Refuse a collection whose distance is not cosine (scores would mean otherwise).

        Args:
            store: A `langchain_chroma.Chroma` store.
        """
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
    """The built-in dialect of `store`.

    Args:
        store: A LangChain vector store.

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
