"""The embedded Chroma vector index: the conformance suite plus Chroma-only behaviour."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from chromadb.api.models.Collection import Collection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import EmbeddingMismatchError, InvalidInputError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storage.memory import InMemoryStorage
from langchain_semantic_recall.vectors import chroma as chroma_module
from langchain_semantic_recall.vectors import chroma_collections, chroma_layout
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.chroma import (
    DEFAULT_HNSW,
    LAYOUT,
    ChromaVectorIndex,
    resource_collection_name,
)
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
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


# -- collections -------------------------------------------------------------------------------


def test_new_collection_is_cosine_with_our_hnsw_settings(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    collection = chroma.client.get_collection(name)
    hnsw = collection.configuration_json["hnsw"]
    assert hnsw is not None
    assert hnsw["space"] == "cosine"
    assert hnsw["ef_search"] == DEFAULT_HNSW["ef_search"] == 400
    assert hnsw["ef_construction"] == DEFAULT_HNSW["ef_construction"] == 100
    assert hnsw["max_neighbors"] == DEFAULT_HNSW["max_neighbors"] == 32
    assert collection.metadata == {
        "embedding_model": MODEL,
        "dimension": DIMENSION,
        "layout": LAYOUT,
    }
    assert collection.count() == 0  # the root only describes the index
    chroma.upsert(name, [record("a", axis(0), resource_id="alice")])
    own = chroma.client.get_collection(resource_collection_name(name, "alice"))
    assert own.configuration_json["hnsw"] == hnsw
    assert own.metadata == {"semantic_recall_index": name, "resource_id": "alice"}
    assert own.get()["ids"] == ["a"]


def test_hnsw_overrides_apply_but_space_stays_cosine(tmp_path: Path) -> None:
    index = ChromaVectorIndex.persistent(tmp_path / "chroma", hnsw={"ef_search": 250})
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    hnsw = index.client.get_collection(name).configuration_json["hnsw"]
    assert hnsw is not None
    assert (hnsw["space"], hnsw["ef_search"]) == ("cosine", 250)
    index.upsert(name, [record("a", axis(0))])
    own = index.client.get_collection(resource_collection_name(name, "r1"))
    assert own.configuration_json["hnsw"]["ef_search"] == 250
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
        "layout": LAYOUT,
    }
    with pytest.raises(EmbeddingMismatchError, match="without a recorded embedding model"):
        chroma.open(filled, dimension=DIMENSION, model=MODEL)


def test_metadata_of_a_vector(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("m", axis(0), n=1, content="hello there")])
    own = chroma.client.get_collection(resource_collection_name(name, "r1"))
    got = own.get(ids=["m#1"], include=["metadatas", "documents"])
    assert got["documents"] == [None]  # the text lives in the metadata only (no FTS index)
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
            "created_ts": 1705314660.0,  # the same time, for time-range filters
            "filterable": True,  # carries created_ts and the message's meta_<key> entries
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


async def test_async_drop_drops_like_drop(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    await chroma.aopen(name, dimension=DIMENSION, model=MODEL)
    await chroma.aupsert(
        name, [record("a", axis(0)), record("c", axis(3), resource_id="r2", thread_id="t3")]
    )
    await chroma.adrop(name)
    await chroma.adrop(name)  # no error when it is gone
    assert await chroma.acount(name) == 0
    await chroma.aopen(name, dimension=DIMENSION * 2, model="other")  # the name is free again


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
    chroma.upsert(name, [record("mine", axis(0)), record("sibling", axis(0), thread_id="t2")])
    # A vector of another resource planted in r1's collection (a hash collision, a bug).
    planted = record("theirs", axis(0), thread_id="t9", resource_id="r9")
    chroma.client.get_collection(resource_collection_name(name, "r1")).add(
        ids=[planted.id],
        embeddings=[planted.vector],
        metadatas=[{"message_id": "theirs", "thread_id": "t9", "resource_id": "r9"}],
    )
    hits = chroma.query(name, axis(0), k=5, scope=ScopeFilter(resource_id="r1"))
    assert sorted(hit.id for hit in hits) == ["mine", "sibling"]
    # Simulate a thread filter that lets everything through.
    monkeypatch.setattr(chroma_layout, "thread_where", lambda scope: None)
    monkeypatch.setattr(chroma_collections, "thread_where", lambda scope: None)
    thread = ScopeFilter(resource_id="r1", thread_id="t1")
    assert [hit.id for hit in chroma.query(name, axis(0), k=5, scope=thread)] == ["mine"]
    assert chroma.message_ids(name, ScopeFilter(thread_id="t1")) == {"mine"}


def test_an_index_of_the_shared_collection_layout_is_refused(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    old = chroma.client.create_collection(
        name,
        embedding_function=None,
        configuration={"hnsw": {"space": "cosine"}},
        metadata={"embedding_model": MODEL, "dimension": DIMENSION},
    )
    old.add(ids=["a"], embeddings=[axis(0)], metadatas=[{"thread_id": "t1", "resource_id": "r1"}])
    with pytest.raises(EmbeddingMismatchError, match="one collection per resource") as caught:
        chroma.open(name, dimension=DIMENSION, model=MODEL)
    assert "reindex" in str(caught.value)
    with pytest.raises(EmbeddingMismatchError, match="drop"):
        chroma.query(name, axis(0), k=1, scope=ScopeFilter(resource_id="r1"))
    chroma.drop(name)
    chroma.open(name, dimension=DIMENSION, model=MODEL)


def test_forgetting_a_resource_drops_its_collection(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("a", axis(0)), record("b", axis(0), resource_id="r2")])
    chroma.delete(name, resource_id="r1")
    names = {collection.name for collection in chroma.client.list_collections()}
    assert names == {name, resource_collection_name(name, "r2")}
    chroma.upsert(name, [record("c", axis(1))])  # the resource may start again
    assert chroma.message_ids(name) == {"b", "c"}


def test_a_collection_dropped_by_another_instance(tmp_path: Path) -> None:
    first = ChromaVectorIndex.persistent(tmp_path / "chroma")
    second = ChromaVectorIndex(first.client)
    name = new_name()
    first.open(name, dimension=DIMENSION, model=MODEL)
    first.upsert(name, [record("a", axis(0))])
    scope = ScopeFilter(resource_id="r1")
    assert [hit.id for hit in second.query(name, axis(0), k=1, scope=scope)] == ["a"]
    first.delete(name, resource_id="r1")
    assert second.query(name, axis(0), k=1, scope=scope) == []  # stale handle: looked up again
    second.upsert(name, [record("b", axis(1))])  # and written again
    assert [hit.id for hit in first.query(name, axis(1), k=1, scope=scope)] == ["b"]


@pytest.mark.parametrize("wide", [64, 2])  # 2: the first look holds too few: exact
def test_thread_scope_is_exact_in_a_resource_of_many_threads(
    chroma: ChromaVectorIndex, monkeypatch: pytest.MonkeyPatch, wide: int
) -> None:
    """The unfiltered first look, and the thread filter when it holds too few."""
    monkeypatch.setattr(chroma_module, "_WIDE", wide)
    monkeypatch.setattr(chroma_module, "_FILTER_UP_TO", 10)  # the unfiltered first look
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(120, DIMENSION))
    chroma.upsert(
        name,
        [record(f"m{i}", list(v), thread_id=f"t{i % 12}") for i, v in enumerate(vectors)],
    )
    query = rng.normal(size=DIMENSION)
    for thread in ("t0", "t5"):
        rows = [i for i in range(120) if f"t{i % 12}" == thread]
        cosine = vectors[rows] @ query / np.linalg.norm(vectors[rows], axis=1)
        expected = [f"m{rows[i]}" for i in np.argsort(-cosine)[:3]]
        scope = ScopeFilter(resource_id="r1", thread_id=thread)
        assert [hit.id for hit in chroma.query(name, list(query), k=3, scope=scope)] == expected
    nowhere = ScopeFilter(resource_id="r1", thread_id="no-such-thread")
    assert chroma.query(name, list(query), k=3, scope=nowhere) == []


def test_a_collection_whose_index_is_not_on_disk_yet_is_read_again(
    chroma: ChromaVectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chromadb.errors import InternalError

    name = new_name()
    fixes = ChromaWorkarounds(read_retry_delays=(0.0, 0.0))
    chroma = ChromaVectorIndex(chroma.client, workarounds=fixes)
    plain = ChromaVectorIndex(chroma.client, workarounds=ChromaWorkarounds.off())
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("a", axis(0))])
    real_query = Collection.query
    failures = iter([True, True, False])

    def flaky(self: Collection, *args: Any, **kwargs: Any) -> Any:
        if next(failures, False):
            raise InternalError("Error creating hnsw segment reader: Nothing found on disk")
        return real_query(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "query", flaky)
    scope = ScopeFilter(resource_id="r1")
    assert [hit.id for hit in chroma.query(name, axis(0), k=1, scope=scope)] == ["a"]
    failures = iter([True, True, True])  # still failing after every pause: raised
    with pytest.raises(InternalError, match="segment reader"):
        chroma.query(name, axis(0), k=1, scope=scope)
    failures = iter([True, False])  # the workaround turned off: the first failure is raised
    with pytest.raises(InternalError, match="segment reader"):
        plain.query(name, axis(0), k=1, scope=scope)

    def other(self: Collection, *args: Any, **kwargs: Any) -> Any:
        raise InternalError("something else")

    monkeypatch.setattr(Collection, "query", other)  # any other error: at once
    with pytest.raises(InternalError, match="something else"):
        chroma.query(name, axis(0), k=1, scope=scope)


def test_export_skips_vectors_without_our_metadata(chroma: ChromaVectorIndex) -> None:
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("mine", axis(0)), record("mine", axis(1), n=1)])
    chroma.client.get_collection(resource_collection_name(name, "r1")).add(
        ids=["foreign"], embeddings=[axis(2)], metadatas=[{"source": "another tool"}]
    )
    assert sorted(r.id for r in chroma.export(name)) == ["mine", "mine#1"]
    assert sorted(r.id for r in chroma.export(name, ScopeFilter(resource_id="r1"))) == [
        "mine",
        "mine#1",
    ]


def test_export_pages_within_the_client_limit_over_every_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = ChromaVectorIndex.persistent(tmp_path / "chroma")
    monkeypatch.setattr(index.client, "get_max_batch_size", lambda: 4)
    limits: list[int] = []
    real_get = Collection.get

    def spy(self: Collection, *args: Any, **kwargs: Any) -> Any:
        limits.append(kwargs.get("limit") or 0)
        return real_get(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "get", spy)
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    records = [
        record(f"m{i}", axis(i % DIMENSION), resource_id=f"r{i % 3}", thread_id=f"t{i % 3}")
        for i in range(13)
    ]
    index.upsert(name, records)
    got = {r.id: r for r in index.export(name, batch_size=1000)}
    assert sorted(got) == sorted(r.id for r in records)
    assert got["m4"].resource_id == "r1"
    assert got["m4"].vector == axis(4)
    assert max(limits, default=0) == 4  # the client's max, not the 1,000 asked
    assert index.count(name) == 13
    assert index.count(name, ScopeFilter(thread_id="t2")) == 4


def test_a_vector_planted_in_another_resource_never_reaches_a_search(
    chroma: ChromaVectorIndex,
) -> None:
    """`nearest` reads no metadata in resource scope: the storage read is what scopes it."""

    class AlongX(Embeddings):
        model, dimension = MODEL, DIMENSION

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [axis(0) for _ in texts]

        def embed_query(self, text: str) -> list[float]:
            return axis(0)

    memory = SemanticRecall(storage=InMemoryStorage(), vector_store=chroma, embeddings=AlongX())
    memory.index([HumanMessage("mine about lisbon", id="mine")], thread_id="t1", resource_id="r1")
    memory.index([HumanMessage("theirs about lisbon", id="x")], thread_id="t9", resource_id="r9")
    name = memory.ensure_index().name
    chroma.flush()  # (a turn's vectors are written just after `index` returns)
    chroma.client.get_collection(resource_collection_name(name, "r1")).add(
        ids=["x"],  # r9's message id, in r1's collection (a bug, a hand-edited store)
        embeddings=[axis(0)],
        metadatas=[{"message_id": "x", "thread_id": "t9", "resource_id": "r9"}],
    )
    scope = ScopeFilter(resource_id="r1")
    assert {m for m, _ in chroma.nearest(name, axis(0), k=5, scope=scope)} == {"mine", "x"}
    for mode in ("hybrid", "dense"):
        engine = memory.with_options(search_mode=mode, threshold=0.0)
        hits = engine.search("lisbon", resource_id="r1")
        assert [hit.message.id for hit in hits] == ["mine"], mode
        assert [m.id for hit in hits for m in hit.window] == ["mine"], mode


def test_a_resource_search_or_write_never_counts_the_collection(
    chroma: ChromaVectorIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Embedded Chroma's first `count()` of a collection loads it (0.7 s at 100k vectors,
    more than the first query): only a thread-scoped search needs the size hint."""
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record(f"m{i}", axis(i % 3), thread_id=f"t{i % 2}") for i in range(6)])
    counted: list[str] = []
    real = Collection.count

    def count(self: Collection) -> int:
        counted.append(self.name)
        return real(self)

    monkeypatch.setattr(Collection, "count", count)
    fresh = ChromaVectorIndex(chroma.client)  # no cached handle: the first lookup
    resource = ScopeFilter(resource_id="r1")
    assert [i for i, _ in fresh.nearest(name, axis(0), k=2, scope=resource)] == ["m0", "m3"]
    assert [hit.id for hit in fresh.query(name, axis(1), k=2, scope=resource)] == ["m1", "m4"]
    fresh.upsert(name, [record("m6", axis(2))])
    assert counted == []
    thread = ScopeFilter(resource_id="r1", thread_id="t0")
    assert [hit.id for hit in fresh.query(name, axis(0), k=1, scope=thread)] == ["m0"]
    fresh.query(name, axis(2), k=1, scope=thread)
    assert counted == [resource_collection_name(name, "r1")]  # once, then the hint


@pytest.mark.parametrize("wide", [64, 2])  # 2: the first look holds too few: exact
@pytest.mark.parametrize("big", [True, False])  # the unfiltered first look, or Chroma's filter
def test_filters_are_exact_in_a_big_collection(
    chroma: ChromaVectorIndex, monkeypatch: pytest.MonkeyPatch, wide: int, big: bool
) -> None:
    """A metadata filter and a time range find the exact top k on every search path."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from langchain_semantic_recall.filters import metadata_conditions

    monkeypatch.setattr(chroma_module, "_WIDE", wide)
    monkeypatch.setattr(chroma_module, "_FILTER_UP_TO", 10 if big else 10_000)
    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    rng = np.random.default_rng(11)
    vectors = rng.normal(size=(120, DIMENSION))
    start = datetime(2024, 1, 1, tzinfo=UTC)
    chroma.upsert(
        name,
        [
            replace(
                record(f"m{i}", list(v), thread_id=f"t{i % 5}"),
                created_at=start + timedelta(days=i),
                metadata=(("project", ["a", "b", "c"][i % 3]),),
            )
            for i, v in enumerate(vectors)
        ],
    )
    query = rng.normal(size=DIMENSION)
    since, until = start + timedelta(days=30), start + timedelta(days=90)
    for wanted, inside in [
        ({"project": "b"}, lambda i: i % 3 == 1),
        ({"project": {"$in": ["a", "c"]}}, lambda i: i % 3 != 1),
    ]:
        rows = [i for i in range(120) if inside(i) and 30 <= i < 90]
        cosine = vectors[rows] @ query / np.linalg.norm(vectors[rows], axis=1)
        expected = [f"m{rows[i]}" for i in np.argsort(-cosine)[:4]]
        scope = ScopeFilter(
            resource_id="r1", metadata=metadata_conditions(wanted), since=since, until=until
        )
        assert [hit.id for hit in chroma.query(name, list(query), k=4, scope=scope)] == expected
        nearest = chroma.nearest(name, list(query), k=4, scope=scope)
        assert [message_id for message_id, _ in nearest] == expected


def test_rows_written_before_timestamps_are_filtered_by_their_iso_time(
    chroma: ChromaVectorIndex,
) -> None:
    """Older rows have no `created_ts`: a time range still reads them, by `created_at`."""
    from datetime import UTC, datetime

    name = new_name()
    chroma.open(name, dimension=DIMENSION, model=MODEL)
    chroma.upsert(name, [record("new", axis(0))])  # makes the resource's collection
    collection = chroma.client.get_collection(resource_collection_name(name, "r1"))
    old = {"message_id": "old", "thread_id": "t1", "resource_id": "r1", "role": "user"}
    collection.add(
        ids=["old", "older"],
        embeddings=[axis(0), axis(0)],
        metadatas=[
            {**old, "created_at": "2023-06-01T00:00:00+00:00"},
            {**old, "message_id": "older", "created_at": "2020-06-01T00:00:00+00:00"},
        ],
    )
    since = ScopeFilter(resource_id="r1", since=datetime(2022, 1, 1, tzinfo=UTC))
    assert {h.id for h in chroma.query(name, axis(0), k=5, scope=since)} == {"new", "old"}
    assert chroma.count(name, since) == 2
    assert chroma.message_ids(name, since) == {"new", "old"}
    until = ScopeFilter(resource_id="r1", until=datetime(2022, 1, 1, tzinfo=UTC))
    assert {h.id for h in chroma.query(name, axis(0), k=1, scope=until)} == {"older"}
    assert {r.id for r in chroma.export(name, until)} == {"older"}


def test_the_same_relative_path_from_two_working_directories_is_two_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chroma caches a client per path string: a relative one must be made absolute."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = ChromaVectorIndex.persistent("chroma")
    name = new_name()
    first.open(name, dimension=DIMENSION, model=MODEL)
    first.upsert(name, [record("only-in-a", axis(0))])
    monkeypatch.chdir(tmp_path / "b")
    second = ChromaVectorIndex.persistent("chroma")  # the first is still open
    second.open(name, dimension=DIMENSION, model=MODEL)
    assert second.message_ids(name) == set()
    second.upsert(name, [record("only-in-b", axis(1))])
    assert first.message_ids(name) == {"only-in-a"}
    assert second.message_ids(name) == {"only-in-b"}
    assert (tmp_path / "b" / "chroma" / "chroma.sqlite3").is_file()
    first.close()
    second.close()


RUNS = itertools.count()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=ROWS, filter=FILTERS, since=st.none() | st.integers(0, 5), span=st.integers(1, 6))
@example(rows=[({"n": 1}, 0)], filter={"n": {"$in": [0, 1.0]}}, since=None, span=1)
def test_generated_filters_keep_what_the_rule_keeps(
    chroma: ChromaVectorIndex,
    rows: list[Row],
    filter: dict[str, Any],
    since: int | None,
    span: int,
) -> None:
    """Chroma's `where` matches as `filters.matches_metadata` (0 and False, 2 and 2.0, ...)."""
    owner = f"alice{next(RUNS)}"  # one store, many examples: an index each
    check_vector_reads(chroma, owner, rows, filter=filter, since=since, span=span)


async def test_a_filter_on_an_int_and_a_float_searches_and_recalls() -> None:
    """`{"n": {"$in": [1, 2.5]}}` once raised chromadb's ValueError from search, and recall
    logged it and recalled nothing: Chroma's `$in` takes values of one type only."""
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=ChromaVectorIndex.ephemeral(),
        embeddings=FakeEmbeddings(),
        search_mode="dense",  # fewer than top_k pass: the index filters itself
    )
    for n in range(5):
        note = [HumanMessage(f"lighthouse note {n}")]
        memory.index(note, thread_id="t", resource_id="alice", metadata={"n": n})
    numbers = {"n": {"$in": [1, 2.5]}}
    hits = memory.search("lighthouse", resource_id="alice", filter=numbers)
    assert [hit.message.text for hit in hits] == ["lighthouse note 1"]
    hits = await memory.asearch("lighthouse", resource_id="alice", filter=numbers)
    assert [hit.message.text for hit in hits] == ["lighthouse note 1"]
    ask = [HumanMessage("lighthouse?")]
    recalled = memory.recall(ask, thread_id="new", resource_id="alice", filter=numbers)
    assert "lighthouse note 1" in "\n".join(m.text for m in recalled)
