"""The embedded Chroma vector index: the conformance suite plus Chroma-only behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import pytest
from chromadb.api.models.Collection import Collection

from langchain_semantic_recall.errors import EmbeddingMismatchError, InvalidInputError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors import chroma as chroma_module
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.chroma import (
    DEFAULT_HNSW,
    ChromaVectorIndex,
    scope_where,
    similarity_from_cosine_distance,
)
from tests.conformance.vector_suite import (
    DIMENSION,
    MODEL,
    VectorIndexConformance,
    axis,
    new_name,
    record,
)

ROOT = Path(__file__).resolve().parents[2]


class TestPersistentChroma(VectorIndexConformance):
    @pytest.fixture
    def vectors(self, tmp_path: Path) -> Iterator[VectorIndex]:
        index = ChromaVectorIndex.persistent(tmp_path / "chroma")
        yield index
        index.close()


class TestEphemeralChroma(VectorIndexConformance):
    @pytest.fixture
    def vectors(self) -> Iterator[VectorIndex]:
        index = ChromaVectorIndex.ephemeral()  # shared in-process: the suite uses fresh names
        yield index
        index.close()


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[ChromaVectorIndex]:
    index = ChromaVectorIndex.persistent(tmp_path / "chroma")
    yield index
    index.close()


# -- pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("distance", "similarity"),
    [(0.0, 1.0), (0.3, 0.7), (1.0, 0.0), (1.5, 0.0), (2.0, 0.0), (-1e-7, 1.0)],
)
def test_similarity_from_cosine_distance(distance: float, similarity: float) -> None:
    assert similarity_from_cosine_distance(distance) == pytest.approx(similarity)


def test_scope_where() -> None:
    assert scope_where(ScopeFilter(thread_id="t")) == {"thread_id": "t"}
    assert scope_where(ScopeFilter(resource_id="r")) == {"resource_id": "r"}
    assert scope_where(ScopeFilter(resource_id="r", thread_id="t")) == {
        "$and": [{"resource_id": "r"}, {"thread_id": "t"}]
    }


# -- collections -------------------------------------------------------------------------------


def test_new_collection_is_cosine_with_our_hnsw_settings(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    collection = chroma.client.get_collection(name)
    hnsw = collection.configuration_json["hnsw"]
    assert hnsw is not None
    assert hnsw["space"] == "cosine"
    assert hnsw["ef_search"] == DEFAULT_HNSW["ef_search"] == 400
    assert hnsw["ef_construction"] == DEFAULT_HNSW["ef_construction"]
    assert collection.metadata == {"embedding_model": MODEL, "dimension": DIMENSION}


def test_hnsw_overrides_apply_but_space_stays_cosine(tmp_path: Path) -> None:
    index = ChromaVectorIndex.persistent(tmp_path / "chroma", hnsw={"ef_search": 250})
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    hnsw = index.client.get_collection(name).configuration_json["hnsw"]
    assert hnsw is not None
    assert (hnsw["space"], hnsw["ef_search"]) == ("cosine", 250)
    with pytest.raises(InvalidInputError, match="cosine"):
        ChromaVectorIndex(index.client, hnsw={"space": "l2"})


def test_existing_l2_collection_is_refused(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.client.create_collection(
        name,
        embedding_function=None,
        configuration={"hnsw": {"space": "l2"}},
        metadata={"embedding_model": MODEL, "dimension": DIMENSION},
    )
    with pytest.raises(EmbeddingMismatchError, match=r"'l2' space.*cosine") as caught:
        chroma.open(name, dimension=DIMENSION, model=MODEL)
    assert name in str(caught.value)
    with pytest.raises(EmbeddingMismatchError, match="cosine"):
        chroma.query(name, axis(0), k=1, scope=ScopeFilter(thread_id="t1"))
    chroma.drop(name)  # the way out: drop it (or pick another name) and open again
    chroma.open(name, dimension=DIMENSION, model=MODEL)


def test_collection_without_our_metadata(chroma: ChromaVectorIndex) -> None:
    empty, filled = new_name(), new_name()
    for name in (empty, filled):
        chroma.client.create_collection(
            name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
    chroma.client.get_collection(filled).add(ids=["x"], embeddings=[axis(0)])
    chroma.open(empty, dimension=DIMENSION, model=MODEL)  # adopted: nothing to mismatch
    assert chroma.client.get_collection(empty).metadata == {
        "embedding_model": MODEL,
        "dimension": DIMENSION,
    }
    with pytest.raises(EmbeddingMismatchError, match="without a recorded embedding model"):
        chroma.open(filled, dimension=DIMENSION, model=MODEL)


def test_metadata_and_document_of_a_vector(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("m", axis(0), n=1, content="hello there")])
    got = chroma.client.get_collection(name).get(ids=["m#1"], include=["metadatas", "documents"])
    assert got["documents"] == ["hello there"]
    assert got["metadatas"] == [
        {
            "message_id": "m",
            "thread_id": "t1",
            "resource_id": "r1",
            "role": "user",
            "content": "hello there",
            "created_at": "2024-01-15T10:31:00+00:00",
            "embedding_model": MODEL,
            "dimension": DIMENSION,
        }
    ]


def test_wrong_vector_length_fails_closed(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    with pytest.raises(EmbeddingMismatchError, match=name):
        chroma.upsert(name, [record("m", [1.0] * (DIMENSION + 1))])
    with pytest.raises(EmbeddingMismatchError, match=name):
        chroma.query(name, [1.0] * (DIMENSION - 1), k=1, scope=ScopeFilter(thread_id="t1"))
    with pytest.raises(InvalidInputError, match="k must be"):
        chroma.query(name, axis(0), k=0, scope=ScopeFilter(thread_id="t1"))


def test_an_index_that_was_never_opened(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    scope = ScopeFilter(resource_id="r1")
    assert chroma.query(name, axis(0), k=3, scope=scope) == []
    assert chroma.message_ids(name) == set()
    assert chroma.count(name) == 0
    chroma.delete(name, thread_id="t1")
    with pytest.raises(InvalidInputError, match="open"):
        chroma.upsert(name, [record("m", axis(0))])
    assert chroma.client.list_collections() == []


def test_count_and_drop(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(
        name,
        [
            record("a", axis(0)),
            record("a", axis(1), n=1),
            record("b", axis(2), thread_id="t2"),
            record("c", axis(3), resource_id="r2", thread_id="t3"),
        ],
    )
    assert chroma.count(name) == 4
    assert chroma.count(name, ScopeFilter(resource_id="r1")) == 3
    assert chroma.count(name, ScopeFilter(thread_id="t1")) == 2
    chroma.drop(name)
    chroma.drop(name)
    assert chroma.count(name) == 0
    chroma.open(name, dimension=DIMENSION * 2, model="other")  # a fresh index with the name


async def test_async_count(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    await chroma.aopen(name, dimension=DIMENSION, model=MODEL)
    await chroma.aupsert(name, [record("a", axis(0))])
    assert await chroma.acount(name, ScopeFilter(thread_id="t1")) == 1


def test_upsert_batches_within_the_client_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = ChromaVectorIndex.persistent(tmp_path / "chroma")
    monkeypatch.setattr(index.client, "get_max_batch_size", lambda: 4)
    sizes: list[int] = []
    real_upsert = Collection.upsert

    def spy(self: Collection, *args: Any, **kwargs: Any) -> None:
        sizes.append(len(kwargs["ids"]))
        real_upsert(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "upsert", spy)
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    records = [record(f"m{i}", axis(i % DIMENSION)) for i in range(10)]
    index.upsert(name, [*records, record("m0", axis(7))])  # a repeated id keeps the last
    assert sizes == [4, 4, 2]
    assert index.count(name) == 10
    index.delete(name, message_ids=[f"m{i}" for i in range(9)])  # $in lists are batched too
    assert index.message_ids(name) == {"m9"}


def test_vectors_and_embedder_survive_a_new_process(
    chroma: ChromaVectorIndex, tmp_path: Path
) -> None:
    """A new process (no shared in-process Chroma cache) reads what this one wrote.

    It also checks that importing the module alone does not import chromadb.
    """
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("a", axis(0)), record("b", axis(1))])
    script = textwrap.dedent(
        f"""
        import json, sys
        from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
        lazy = "chromadb" not in sys.modules
        from langchain_semantic_recall.errors import EmbeddingMismatchError
        from langchain_semantic_recall.records import ScopeFilter

        index = ChromaVectorIndex.persistent({str(tmp_path / "chroma")!r})
        index.open({name!r}, dimension={DIMENSION}, model={MODEL!r})
        hits = index.query({name!r}, {axis(1)!r}, k=5, scope=ScopeFilter(thread_id="t1"))
        try:
            index.open({name!r}, dimension={DIMENSION}, model="other")
            refused = False
        except EmbeddingMismatchError:
            refused = True
        print(json.dumps({{"lazy": lazy, "hits": [h.id for h in hits], "refused": refused}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "lazy": True,
        "hits": ["b", "a"],
        "refused": True,
    }


def test_accepts_any_chromadb_client(tmp_path: Path) -> None:
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        path=str(tmp_path / "own"), settings=Settings(anonymized_telemetry=False)
    )
    index = ChromaVectorIndex(client)
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    index.upsert(name, [record("a", axis(0))])
    assert index.message_ids(name) == {"a"}


def test_hits_outside_the_scope_are_dropped_even_if_the_filter_fails(
    chroma: ChromaVectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(
        name,
        [record("mine", axis(0)), record("theirs", axis(0), thread_id="t9", resource_id="r9")],
    )
    # Simulate a backend whose metadata filter lets everything through.
    monkeypatch.setattr(chroma_module, "scope_where", lambda scope: {"role": "user"})
    hits = chroma.query(name, axis(0), k=5, scope=ScopeFilter(resource_id="r1"))
    assert [hit.id for hit in hits] == ["mine"]
    assert chroma.message_ids(name, ScopeFilter(thread_id="t1")) == {"mine"}
