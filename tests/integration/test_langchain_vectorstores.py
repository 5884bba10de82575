"""LangChain vector stores as the vector index: the conformance suite on each store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import chromadb
import pytest
from chromadb.config import Settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.base import ExportNotSupportedError, VectorIndex
from langchain_semantic_recall.vectors.chroma_server import ChromaURL
from langchain_semantic_recall.vectors.langchain import (
    InMemoryDialect,
    LangChainVectorIndex,
    chroma_where,
)
from tests.conformance.generated_filters import FILTERS, ROWS, Row, check_vector_reads
from tests.conformance.vector_suite import (
    DIMENSION,
    MODEL,
    VectorIndexConformance,
    axis,
    new_name,
    record,
)
from tests.fakes import FakeEmbeddings

if TYPE_CHECKING:
    from chromadb.api.collection_configuration import CreateCollectionConfiguration

pytestmark = pytest.mark.integration


def chroma_store(url: str, *, space: str = "cosine") -> Chroma:
    where = ChromaURL.parse(url)
    client = chromadb.HttpClient(
        host=where.host, port=where.port, settings=Settings(anonymized_telemetry=False)
    )
    return Chroma(
        collection_name=f"lc-{uuid.uuid4().hex[:12]}",
        embedding_function=FakeEmbeddings(8),  # explicit: Chroma's default downloads a model
        client=client,
        collection_configuration=cast("CreateCollectionConfiguration", {"hnsw": {"space": space}}),
    )


class TestInMemoryVectorStore(VectorIndexConformance):
    @pytest.fixture
    def vectors(self) -> VectorIndex:
        return LangChainVectorIndex(InMemoryVectorStore(embedding=FakeEmbeddings(8)))


class TestChromaVectorStoreOnServer(VectorIndexConformance):
    @pytest.fixture
    def vectors(self, chroma_url: str) -> Iterator[VectorIndex]:
        store = chroma_store(chroma_url)
        yield LangChainVectorIndex(store)
        store.delete_collection()


class _NoFilterStore(VectorStore):
    """A store whose search takes no metadata filter (like some simple stores)."""

    def add_texts(self, texts: Any, metadatas: Any = None, **kwargs: Any) -> list[str]:
        return []

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return []

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        return []

    @classmethod
    def from_texts(
        cls, texts: Any, embedding: Embeddings, metadatas: Any = None, **kwargs: Any
    ) -> _NoFilterStore:
        return cls()


class _FilteringStore(_NoFilterStore):
    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: Any = None, **kwargs: Any
    ) -> list[Document]:
        return []


def test_a_store_without_metadata_filters_is_refused_clearly() -> None:
    with pytest.raises(InvalidOptionError, match="cannot filter a search by metadata"):
        LangChainVectorIndex(_NoFilterStore())
    with pytest.raises(InvalidOptionError, match="StoreDialect"):
        LangChainVectorIndex(_FilteringStore())


def test_a_dialect_that_cannot_read_vectors_back_refuses_export_clearly() -> None:
    class WriteOnly(InMemoryDialect):
        lists_vectors = False

    index = LangChainVectorIndex(
        InMemoryVectorStore(embedding=FakeEmbeddings(8)), dialect=WriteOnly()
    )
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    index.upsert(name, [record("a", axis(0)), record("a", axis(1), n=1)])
    with pytest.raises(ExportNotSupportedError, match=r"WriteOnly.*reembed") as caught:
        index.export(name)  # at the call, before any iteration
    assert isinstance(caught.value, NotImplementedError)
    assert index.count(name) == 2  # counting needs no vectors
    assert index.count(name, ScopeFilter(thread_id="t1")) == 2


def test_a_chroma_store_in_l2_space_is_refused(chroma_url: str) -> None:
    store = chroma_store(chroma_url, space="l2")
    try:
        with pytest.raises(InvalidOptionError, match="cosine"):
            LangChainVectorIndex(store)
    finally:
        store.delete_collection()


def test_chroma_filters_are_translated() -> None:
    assert chroma_where({"index_name": "i"}) == {"index_name": "i"}
    assert chroma_where({"index_name": "i", "message_id": ["a", "b"]}) == {
        "$and": [{"index_name": "i"}, {"message_id": {"$in": ["a", "b"]}}]
    }


@pytest.mark.parametrize("kind", ["memory", "chroma"])
def test_recall_through_a_langchain_store(kind: str, chroma_url: str) -> None:
    embeddings = FakeEmbeddings(64)
    store: VectorStore = (
        InMemoryVectorStore(embedding=embeddings) if kind == "memory" else chroma_store(chroma_url)
    )
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=LangChainVectorIndex(store), embeddings=embeddings
    )
    memory.index(
        [HumanMessage("my cat is called Miso", id="u1"), AIMessage("Miso is lovely", id="a1")],
        thread_id="t1",
        resource_id="alice",
    )
    memory.index([HumanMessage("bob has a cat too", id="u2")], thread_id="t2", resource_id="bob")
    hits = memory.search("what is my cat called", thread_id="t3", resource_id="alice")
    assert {m.id for hit in hits for m in hit.window} == {"u1", "a1"}
    assert memory.forget_thread("t1") == 2
    assert memory.vector_store.message_ids(memory.ensure_index().name) == {"u2"}
    assert memory.search("cat", thread_id="t3", resource_id="alice") == []
    scope = ScopeFilter(resource_id="bob")
    assert memory.vector_store.message_ids(memory.ensure_index().name, scope) == {"u2"}


COSINE = {"hnsw": {"space": "cosine"}}


@settings(max_examples=40, deadline=None)
@given(rows=ROWS, filter=FILTERS, since=st.none() | st.integers(0, 5), span=st.integers(1, 6))
@example(rows=[({"n": 1}, 0)], filter={"n": {"$in": [0, 1.0]}}, since=None, span=1)
def test_generated_filters_through_langchain_chroma_keep_what_the_rule_keeps(
    rows: list[Row], filter: dict[str, Any], since: int | None, span: int
) -> None:
    """`chroma_where` matches as `filters.matches_metadata` (an int and a float in one `$in`)."""
    store = Chroma(
        collection_name=f"lc-{uuid.uuid4().hex[:12]}",
        embedding_function=FakeEmbeddings(8),
        client=chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False)),
        collection_configuration=cast(
            "CreateCollectionConfiguration", {"hnsw": {"space": "cosine"}}
        ),
    )
    try:
        check_vector_reads(
            LangChainVectorIndex(store), "alice", rows, filter=filter, since=since, span=span
        )
    finally:
        store.delete_collection()
