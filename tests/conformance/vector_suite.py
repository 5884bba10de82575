"""The conformance suite every ``VectorIndex`` backend runs.

A backend's test module subclasses :class:`VectorIndexConformance` and provides one fixture,
``vectors``, yielding a fresh backend instance::

    class TestChroma(VectorIndexConformance):
        @pytest.fixture
        def vectors(self, tmp_path: Path) -> Iterator[VectorIndex]:
            index = ChromaVectorIndex.persistent(tmp_path / "chroma")
            yield index
            index.close()

Every test uses its own index names, so a backend shared by several tests (an ephemeral
Chroma, a server) works too. Vectors are tiny (``DIMENSION``) to keep the suite fast.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_semantic_recall.errors import EmbeddingMismatchError, InvalidInputError
from langchain_semantic_recall.fusion import best_per_message
from langchain_semantic_recall.records import HeldVectors, ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex, chunk_id
from tests.conformance.filter_suite import VectorFilterConformance

DIMENSION = 8
MODEL = "conformance-model"
EPOCH = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


def new_name() -> str:
    """A fresh, legal index name (3-512 chars of ``[A-Za-z0-9._-]``, alphanumeric ends)."""
    return f"idx-{uuid.uuid4().hex[:16]}"


def unit(*values: float) -> list[float]:
    """A vector of ``DIMENSION`` floats: ``values`` padded with zeros."""
    return [float(v) for v in values] + [0.0] * (DIMENSION - len(values))


def axis(i: int) -> list[float]:
    """The ``i``-th basis vector."""
    vector = [0.0] * DIMENSION
    vector[i] = 1.0
    return vector


def record(
    message_id: str,
    vector: list[float],
    *,
    thread_id: str = "t1",
    resource_id: str = "r1",
    n: int = 0,
    content: str | None = None,
) -> VectorRecord:
    """Chunk ``n`` of a message (id ``message_id`` for the first chunk, else ``m#n``)."""
    return VectorRecord(
        id=chunk_id(message_id, n),
        vector=vector,
        message_id=message_id,
        thread_id=thread_id,
        resource_id=resource_id,
        role="user",
        content=f"text of {message_id}" if content is None else content,
        created_at=EPOCH + timedelta(minutes=n),
    )


def exported(
    vectors: VectorIndex, name: str, scope: ScopeFilter | None = None, *, batch_size: int = 1000
) -> dict[str, VectorRecord]:
    """``export`` as a dict by vector id; fails on an id exported twice."""
    records = list(vectors.export(name, scope, batch_size=batch_size))
    by_id = {rec.id: rec for rec in records}
    assert len(by_id) == len(records), "an id was exported twice"
    return by_id


def assert_same_record(got: VectorRecord, want: VectorRecord) -> None:
    """Equal records; the embedding up to float32 rounding (Chroma stores float32)."""
    assert (got.id, got.message_id, got.thread_id, got.resource_id) == (
        want.id,
        want.message_id,
        want.thread_id,
        want.resource_id,
    )
    assert (got.role, got.content, got.created_at) == (want.role, want.content, want.created_at)
    assert got.vector == pytest.approx(want.vector, abs=1e-6)


def all_hits(vectors: VectorIndex, name: str, scope: ScopeFilter) -> list[VectorHit]:
    """Every vector in ``scope`` (queried with a generous ``k``)."""
    return vectors.query(name, unit(1, 1, 1, 1, 1, 1, 1, 1), k=1000, scope=scope)


@dataclass(frozen=True)
class Corpus:
    """A random set of messages over a few resources and threads, and one scoped query."""

    records: list[VectorRecord]
    query: list[float]
    scope: ScopeFilter
    k: int


RESOURCES = ("r0", "r1", "r2")
_coordinate = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False, width=32)
_vector = st.lists(_coordinate, min_size=DIMENSION, max_size=DIMENSION).filter(
    lambda v: float(np.linalg.norm(v)) >= 0.5
)
_thread = st.tuples(st.sampled_from(RESOURCES), st.integers(0, 2)).map(
    lambda pair: (pair[0], f"{pair[0]}-t{pair[1]}")
)


@st.composite
def corpora(draw: st.DrawFn) -> Corpus:
    """Random vectors over random resources/threads (a thread belongs to one resource)."""
    placed = draw(st.lists(st.tuples(_thread, _vector), min_size=0, max_size=30))
    records = [
        record(f"m{i}", vector, thread_id=thread_id, resource_id=resource_id)
        for i, ((resource_id, thread_id), vector) in enumerate(placed)
    ]
    resource_id, thread_id = draw(_thread)
    other_resource = draw(st.sampled_from(RESOURCES))
    scope = draw(
        st.sampled_from(
            [
                ScopeFilter(resource_id=resource_id),
                ScopeFilter(thread_id=thread_id),
                ScopeFilter(resource_id=resource_id, thread_id=thread_id),
                ScopeFilter(resource_id=other_resource, thread_id=thread_id),
            ]
        )
    )
    return Corpus(records, draw(_vector), scope, draw(st.integers(1, 12)))


def exact_scores(corpus: Corpus) -> dict[str, float]:
    """Brute-force similarity (clipped cosine) of every vector inside the corpus's scope."""
    query = np.asarray(corpus.query, dtype=np.float64)
    scores: dict[str, float] = {}
    for rec in corpus.records:
        if corpus.scope.admits(rec.resource_id, rec.thread_id):
            vector = np.asarray(rec.vector, dtype=np.float64)
            cosine = float(vector @ query / (np.linalg.norm(vector) * np.linalg.norm(query)))
            scores[rec.id] = min(1.0, max(0.0, cosine))
    return scores


PROPERTY = settings(
    max_examples=25,
    deadline=None,
    # The fixture is fresh per test and every example opens its own index, so sharing it
    # across examples is safe; each backend's subclass runs these methods (executors).
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.differing_executors,
    ],
)
"""The settings of the suite's property tests."""


class VectorIndexConformance(VectorFilterConformance):
    """Behaviour every vector index backend must show. Subclasses provide ``vectors``."""

    @pytest.fixture
    def vectors(self) -> Iterator[VectorIndex]:
        raise NotImplementedError("a backend's test class provides the `vectors` fixture")

    @pytest.fixture
    def name(self, vectors: VectorIndex) -> str:
        """A fresh index, opened with ``MODEL`` and ``DIMENSION``."""
        index_name = new_name()
        vectors.open(index_name, dimension=DIMENSION, model=MODEL)
        return index_name

    # -- open ------------------------------------------------------------------------------

    def test_open_creates_a_cosine_index(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(name, [record("a", unit(1, 0)), record("b", unit(0, 1))])
        hits = vectors.query(name, unit(5, 0), k=2, scope=ScopeFilter(resource_id="r1"))
        # Cosine: a scaled copy is identical; orthogonal is 0 (L2 or dot would differ).
        assert [hit.id for hit in hits] == ["a", "b"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert hits[1].score == pytest.approx(0.0, abs=1e-5)

    def test_open_says_whether_it_created_the_index(self, vectors: VectorIndex) -> None:
        """The engine warns of a new index over a store with history on this answer."""
        name, other = new_name(), new_name()
        assert vectors.open(name, dimension=DIMENSION, model=MODEL) is True
        assert vectors.open(name, dimension=DIMENSION, model=MODEL) is False
        assert asyncio.run(vectors.aopen(other, dimension=DIMENSION, model=MODEL)) is True
        assert asyncio.run(vectors.aopen(other, dimension=DIMENSION, model=MODEL)) is False

    def test_reopen_with_same_model_and_dimension(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(name, [record("a", unit(1))])
        vectors.open(name, dimension=DIMENSION, model=MODEL)
        assert vectors.message_ids(name) == {"a"}

    @pytest.mark.parametrize(
        ("dimension", "model"), [(DIMENSION + 4, MODEL), (DIMENSION, "another-model")]
    )
    def test_reopen_with_another_embedder_fails_closed(
        self, vectors: VectorIndex, name: str, dimension: int, model: str
    ) -> None:
        vectors.upsert(name, [record("a", unit(1))])
        with pytest.raises(EmbeddingMismatchError) as caught:
            vectors.open(name, dimension=dimension, model=model)
        message = str(caught.value)
        assert name in message
        assert MODEL in message
        assert model in message
        assert str(dimension) in message
        assert "reindex" in message
        assert "index_name" in message

    def test_an_empty_index_still_records_its_embedder(
        self, vectors: VectorIndex, name: str
    ) -> None:
        with pytest.raises(EmbeddingMismatchError, match=name):
            vectors.open(name, dimension=DIMENSION * 2, model=MODEL)

    # -- upsert and query ------------------------------------------------------------------

    def test_query_returns_best_first_with_scores_in_unit_range(
        self, vectors: VectorIndex, name: str
    ) -> None:
        vectors.upsert(
            name,
            [
                record("same", unit(1, 2, 3)),
                record("close", unit(1, 2, 4)),
                record("far", unit(3, -1, 0)),
                record("opposite", unit(-1, -2, -3)),
            ],
        )
        hits = vectors.query(name, unit(1, 2, 3), k=4, scope=ScopeFilter(thread_id="t1"))
        assert [hit.id for hit in hits] == ["same", "close", "far", "opposite"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert all(0.0 <= hit.score <= 1.0 for hit in hits)
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
        assert hits[-1].score == pytest.approx(0.0, abs=1e-5)
        same = hits[0]
        assert (same.message_id, same.thread_id, same.resource_id) == ("same", "t1", "r1")

    def test_query_returns_at_most_k(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(name, [record(f"m{i}", axis(i)) for i in range(DIMENSION)])
        hits = vectors.query(name, axis(3), k=2, scope=ScopeFilter(resource_id="r1"))
        assert len(hits) == 2
        assert hits[0].id == "m3"

    def test_k_larger_than_the_index(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(name, [record("a", axis(0)), record("b", axis(1))])
        hits = vectors.query(name, axis(0), k=50, scope=ScopeFilter(resource_id="r1"))
        assert [hit.id for hit in hits] == ["a", "b"]

    def test_query_on_an_empty_index(self, vectors: VectorIndex, name: str) -> None:
        assert vectors.query(name, axis(0), k=4, scope=ScopeFilter(thread_id="t1")) == []
        assert vectors.message_ids(name) == set()

    def test_upsert_of_an_existing_id_overwrites(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(name, [record("a", axis(0)), record("b", axis(1))])
        vectors.upsert(name, [record("a", axis(2), thread_id="t2")])
        hits = all_hits(vectors, name, ScopeFilter(resource_id="r1"))
        assert sorted(hit.id for hit in hits) == ["a", "b"]
        top = vectors.query(name, axis(2), k=1, scope=ScopeFilter(resource_id="r1"))
        assert top[0].id == "a"
        assert top[0].score == pytest.approx(1.0, abs=1e-5)
        assert top[0].thread_id == "t2"
        assert vectors.query(name, axis(0), k=5, scope=ScopeFilter(thread_id="t1"))[0].id == "b"

    def test_chunks_are_separate_vectors_of_one_message(
        self, vectors: VectorIndex, name: str
    ) -> None:
        vectors.upsert(name, [record("m", axis(0)), record("m", axis(1), n=1)])
        hits = vectors.query(name, axis(1), k=5, scope=ScopeFilter(thread_id="t1"))
        assert [hit.id for hit in hits] == ["m#1", "m"]
        assert {hit.message_id for hit in hits} == {"m"}
        assert vectors.message_ids(name) == {"m"}

    # -- scope -----------------------------------------------------------------------------

    def _seed_scopes(self, vectors: VectorIndex, name: str) -> None:
        same = unit(1, 1)  # one vector everywhere: only the filter can tell them apart
        vectors.upsert(
            name,
            [
                record("a1", same, thread_id="ta", resource_id="alice"),
                record("a2", same, thread_id="ta", resource_id="alice"),
                record("a3", same, thread_id="tb", resource_id="alice"),
                record("b1", same, thread_id="tc", resource_id="bob"),
            ],
        )

    def test_thread_scope_is_exact(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        hits = all_hits(vectors, name, ScopeFilter(thread_id="ta"))
        assert sorted(hit.id for hit in hits) == ["a1", "a2"]

    def test_resource_scope_is_exact(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        assert sorted(h.id for h in all_hits(vectors, name, ScopeFilter(resource_id="alice"))) == [
            "a1",
            "a2",
            "a3",
        ]
        assert [h.id for h in all_hits(vectors, name, ScopeFilter(resource_id="bob"))] == ["b1"]

    def test_thread_and_resource_scope_narrows(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        both = ScopeFilter(resource_id="alice", thread_id="tb")
        assert [hit.id for hit in all_hits(vectors, name, both)] == ["a3"]
        assert all_hits(vectors, name, ScopeFilter(resource_id="bob", thread_id="ta")) == []
        assert all_hits(vectors, name, ScopeFilter(resource_id="nobody")) == []

    @PROPERTY
    @given(corpus=corpora())
    def test_scoped_search_is_exact_and_never_leaks(
        self, vectors: VectorIndex, corpus: Corpus
    ) -> None:
        name = new_name()
        vectors.open(name, dimension=DIMENSION, model=MODEL)
        vectors.upsert(name, corpus.records)
        hits = vectors.query(name, corpus.query, k=corpus.k, scope=corpus.scope)
        by_id = {rec.id: rec for rec in corpus.records}
        for hit in hits:
            stored = by_id[hit.id]
            assert corpus.scope.admits(stored.resource_id, stored.thread_id)
            assert corpus.scope.admits(hit.resource_id, hit.thread_id)
            assert (hit.resource_id, hit.thread_id) == (stored.resource_id, stored.thread_id)
        # Same scores as exact search within the scope (ties may come in any order).
        exact = exact_scores(corpus)
        expected = sorted(exact.values(), reverse=True)[: corpus.k]
        scores = [hit.score for hit in hits]
        assert len({hit.id for hit in hits}) == len(hits)
        assert scores == pytest.approx(expected, abs=1e-4)
        assert [hit.score for hit in hits] == pytest.approx(
            [exact[hit.id] for hit in hits], abs=1e-4
        )
        assert scores == sorted(scores, reverse=True)

    @PROPERTY
    @given(
        corpus=corpora(), chunked=st.sets(st.integers(0, 29)), hashed=st.sets(st.integers(0, 29))
    )
    def test_nearest_is_the_best_chunk_of_each_message_in_scope(
        self, vectors: VectorIndex, corpus: Corpus, chunked: set[int], hashed: set[int]
    ) -> None:
        """`nearest` ranks messages (best chunk), in scope, whatever their ids hold."""
        name = new_name()
        vectors.open(name, dimension=DIMENSION, model=MODEL)
        records: list[VectorRecord] = []
        for i, rec in enumerate(corpus.records):  # some ids hold "#", some messages 2 chunks
            message_id = f"{rec.message_id}#{i}" if i in hashed else rec.message_id
            where = {"thread_id": rec.thread_id, "resource_id": rec.resource_id}
            records.append(record(message_id, rec.vector, **where))
            if i in chunked:
                records.append(record(message_id, corpus.query, n=1 + i % 2, **where))
        vectors.upsert(name, records)
        k = corpus.k
        got = vectors.nearest(name, corpus.query, k=k, scope=corpus.scope)
        owner = {rec.message_id: (rec.resource_id, rec.thread_id) for rec in records}
        assert all(corpus.scope.admits(*owner[message_id]) for message_id, _ in got)
        assert len({message_id for message_id, _ in got}) == len(got)
        expected = best_per_message(vectors.query(name, corpus.query, k=k, scope=corpus.scope))
        assert [score for _, score in got] == pytest.approx([s for _, s in expected], abs=1e-4)
        if expected:  # the same messages, but for ties with the last one
            floor = expected[-1][1] + 1e-4
            assert {m for m, s in expected if s > floor} <= {m for m, _ in got}

    async def test_anearest_is_the_async_twin(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(
            name, [record("a", axis(0)), record("a", axis(1), n=1), record("b", axis(2))]
        )
        got = await vectors.anearest(name, axis(1), k=5, scope=ScopeFilter(resource_id="r1"))
        assert [message_id for message_id, _ in got] == ["a", "b"]
        assert got[0][1] == pytest.approx(1.0, abs=1e-4)
        with pytest.raises(InvalidInputError, match="k must be at least 1"):
            await vectors.anearest(name, axis(1), k=0, scope=ScopeFilter(resource_id="r1"))

    # -- delete and listing ----------------------------------------------------------------

    def test_delete_a_thread(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        vectors.delete(name, thread_id="ta")
        assert vectors.message_ids(name) == {"a3", "b1"}

    def test_delete_a_resource(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        vectors.delete(name, resource_id="alice")
        assert vectors.message_ids(name) == {"b1"}
        assert all_hits(vectors, name, ScopeFilter(resource_id="alice")) == []

    def test_delete_messages_removes_every_chunk(self, vectors: VectorIndex, name: str) -> None:
        vectors.upsert(
            name,
            [
                record("m", axis(0)),
                record("m", axis(1), n=1),
                record("m", axis(2), n=2),
                record("keep", axis(3)),
                record("gone", axis(4)),
            ],
        )
        vectors.delete(name, message_ids=["m", "gone", "never-indexed"])
        hits = all_hits(vectors, name, ScopeFilter(thread_id="t1"))
        assert [hit.id for hit in hits] == ["keep"]
        vectors.delete(name, message_ids=[])
        assert vectors.message_ids(name) == {"keep"}

    def test_delete_of_an_unknown_thread_is_a_no_op(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        vectors.delete(name, thread_id="nope")
        vectors.delete(name, resource_id="nope")
        assert vectors.message_ids(name) == {"a1", "a2", "a3", "b1"}

    def test_delete_without_a_selector_is_refused(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        with pytest.raises(ValueError, match="thread_id"):
            vectors.delete(name)
        assert vectors.message_ids(name) == {"a1", "a2", "a3", "b1"}

    def test_message_ids_by_scope(self, vectors: VectorIndex, name: str) -> None:
        self._seed_scopes(vectors, name)
        vectors.upsert(name, [record("a1", axis(5), thread_id="ta", resource_id="alice", n=1)])
        assert vectors.message_ids(name) == {"a1", "a2", "a3", "b1"}
        assert vectors.message_ids(name, ScopeFilter(resource_id="alice")) == {"a1", "a2", "a3"}
        assert vectors.message_ids(name, ScopeFilter(thread_id="ta")) == {"a1", "a2"}
        assert vectors.message_ids(name, ScopeFilter(resource_id="bob", thread_id="ta")) == set()

    def test_vector_ids_list_each_messages_chunks_by_scope(
        self, vectors: VectorIndex, name: str
    ) -> None:
        self._seed_export(vectors, name)
        a1 = frozenset({"a1", "a1#1", "a1#2"})
        alice = {"a1": a1, "a2": frozenset({"a2"}), "a3": frozenset({"a3"})}
        everything = vectors.vector_ids(name)
        assert everything.by_message() == {**alice, "b1": frozenset({"b1", "b1#1"})}
        assert set(everything.chunked) == {"a1", "b1"}  # the others: one vector, their id
        assert vectors.vector_ids(name, ScopeFilter(resource_id="alice")).by_message() == alice
        thread = vectors.vector_ids(name, ScopeFilter(resource_id="alice", thread_id="ta"))
        assert thread.by_message() == {"a1": a1, "a2": frozenset({"a2"})}
        assert vectors.vector_ids(name, ScopeFilter(resource_id="bob", thread_id="ta")) == (
            HeldVectors()
        )
        assert vectors.vector_ids(new_name()) == HeldVectors()  # never opened: none
        # a later chunk left alone (its first chunk deleted) is still its message's
        vectors.delete(name, message_ids=["a2"])
        vectors.upsert(name, [record("a2", axis(1), thread_id="ta", resource_id="alice", n=3)])
        assert vectors.vector_ids(name, ScopeFilter(thread_id="ta")).by_message() == {
            "a1": a1,
            "a2": frozenset({"a2#3"}),
        }

    async def test_vector_ids_tell_which_vectors_carry_message_metadata(
        self, vectors: VectorIndex, name: str
    ) -> None:
        tagged = (("project", "apollo"),)
        vectors.upsert(
            name,
            [
                replace(record("m", axis(0)), metadata=tagged),
                replace(record("m", axis(1), n=1), metadata=tagged),
                record("plain", axis(2)),
                replace(record("theirs", axis(3), resource_id="r2"), metadata=tagged),
            ],
        )
        held = vectors.vector_ids(name, ScopeFilter(resource_id="r1"))
        assert held.by_message() == {"m": frozenset({"m", "m#1"}), "plain": frozenset({"plain"})}
        assert held.carrying == {"m"}
        assert await vectors.avector_ids(name, ScopeFilter(resource_id="r1")) == held
        assert (await vectors.avector_ids(name)).carrying == {"m", "theirs"}
        with pytest.raises(InvalidInputError, match="ScopeFilter"):
            await vectors.avector_ids(name, "r1")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="index_name"):
            vectors.vector_ids("x")

    # -- export and count ------------------------------------------------------------------

    def _seed_export(self, vectors: VectorIndex, name: str) -> list[VectorRecord]:
        """Two resources, three threads, a message of three chunks; distinct vectors."""
        records = [
            record("a1", unit(1, 2, 3), thread_id="ta", resource_id="alice", content="first"),
            record("a1", unit(-1, 0.5), thread_id="ta", resource_id="alice", n=1),
            record("a1", unit(0, 0, 0, 4), thread_id="ta", resource_id="alice", n=2),
            record("a2", axis(5), thread_id="ta", resource_id="alice", content="ünï 🙂"),
            record("a3", unit(0.25, -0.75), thread_id="tb", resource_id="alice"),
            record("b1", axis(7), thread_id="tc", resource_id="bob"),
            record("b1", unit(3, 1, 4, 1, 5), thread_id="tc", resource_id="bob", n=1),
        ]
        vectors.upsert(name, records)
        return records

    def test_export_lists_every_vector_with_its_metadata_and_embedding(
        self, vectors: VectorIndex, name: str
    ) -> None:
        records = self._seed_export(vectors, name)
        got = exported(vectors, name)
        assert sorted(got) == sorted(["a1", "a1#1", "a1#2", "a2", "a3", "b1", "b1#1"])
        for want in records:
            assert_same_record(got[want.id], want)

    @pytest.mark.parametrize(
        ("scope", "expected"),
        [
            (ScopeFilter(thread_id="ta"), ["a1", "a1#1", "a1#2", "a2"]),
            (ScopeFilter(resource_id="alice"), ["a1", "a1#1", "a1#2", "a2", "a3"]),
            (ScopeFilter(resource_id="bob"), ["b1", "b1#1"]),
            (ScopeFilter(resource_id="alice", thread_id="tb"), ["a3"]),
            (ScopeFilter(resource_id="bob", thread_id="ta"), []),
            (ScopeFilter(thread_id="nope"), []),
            (ScopeFilter(resource_id="nobody"), []),
        ],
    )
    def test_export_and_count_by_scope(
        self, vectors: VectorIndex, name: str, scope: ScopeFilter, expected: list[str]
    ) -> None:
        by_id = {rec.id: rec for rec in self._seed_export(vectors, name)}
        got = exported(vectors, name, scope)
        assert sorted(got) == expected
        for vector_id, rec in got.items():
            assert scope.admits(rec.resource_id, rec.thread_id)
            assert_same_record(rec, by_id[vector_id])
        assert vectors.count(name, scope) == len(expected)

    def test_export_reads_in_batches_without_losing_or_repeating(
        self, vectors: VectorIndex, name: str
    ) -> None:
        records = [
            record(f"m{i}", axis(i % DIMENSION), thread_id=f"t{i % 2}", n=0) for i in range(11)
        ]
        records += [record("m0", axis(3), thread_id="t0", n=n) for n in (1, 2, 3)]
        vectors.upsert(name, records)
        for batch_size in (1, 2, 5, 14, 15):
            assert sorted(exported(vectors, name, batch_size=batch_size)) == sorted(
                rec.id for rec in records
            )
        thread = exported(vectors, name, ScopeFilter(thread_id="t0"), batch_size=2)
        assert sorted(thread) == sorted(rec.id for rec in records if rec.thread_id == "t0")

    def test_count_follows_writes_and_deletes(self, vectors: VectorIndex, name: str) -> None:
        assert vectors.count(name) == 0
        self._seed_export(vectors, name)
        assert vectors.count(name) == 7
        assert vectors.count(name, ScopeFilter(resource_id="alice")) == 5
        assert vectors.count(name, ScopeFilter(thread_id="ta")) == 4
        vectors.upsert(name, [record("a2", axis(0), thread_id="ta", resource_id="alice")])
        assert vectors.count(name) == 7  # overwritten, not added
        vectors.delete(name, message_ids=["a1"])
        assert vectors.count(name, ScopeFilter(thread_id="ta")) == 1
        vectors.delete(name, resource_id="bob")
        assert vectors.count(name) == 2
        assert sorted(exported(vectors, name)) == ["a2", "a3"]

    def test_an_index_that_was_never_opened(self, vectors: VectorIndex) -> None:
        missing = new_name()
        assert vectors.query(missing, axis(0), k=3, scope=ScopeFilter(resource_id="r1")) == []
        assert vectors.message_ids(missing) == set()
        vectors.delete(missing, thread_id="t1")
        with pytest.raises(InvalidInputError, match="open"):
            vectors.upsert(missing, [record("m", axis(0))])
        assert list(vectors.export(missing)) == []
        assert list(vectors.export(missing, ScopeFilter(thread_id="t1"))) == []
        assert vectors.count(missing) == 0
        assert vectors.count(missing, ScopeFilter(resource_id="r1")) == 0

    def test_export_checks_its_arguments_at_the_call(self, vectors: VectorIndex, name: str) -> None:
        for bad in (0, -1, True, 2.5):
            with pytest.raises(InvalidInputError, match="batch_size"):
                vectors.export(name, batch_size=bad)  # type: ignore[arg-type]  # not iterated
        with pytest.raises(ValueError, match="index_name"):
            vectors.export("x")
        with pytest.raises(InvalidInputError, match="batch_size"):
            vectors.aexport(name, batch_size=0)  # checked before any await

    def test_an_exported_index_copies_into_another(self, vectors: VectorIndex, name: str) -> None:
        records = self._seed_export(vectors, name)
        copy = new_name()
        vectors.open(copy, dimension=DIMENSION, model=MODEL)
        vectors.upsert(copy, list(vectors.export(name, batch_size=3)))
        got = exported(vectors, copy)
        for want in records:
            assert_same_record(got[want.id], want)
        scope = ScopeFilter(resource_id="alice", thread_id="ta")
        query = unit(1, 2, 3, 4, 5, 6)  # no ties among the thread's top 3
        original = vectors.query(name, query, k=3, scope=scope)
        copied = vectors.query(copy, query, k=3, scope=scope)
        assert [hit.id for hit in copied] == [hit.id for hit in original] == ["a2", "a1#2", "a1"]
        assert [hit.score for hit in copied] == pytest.approx([h.score for h in original])

    @settings(PROPERTY, max_examples=15)
    @given(corpus=corpora())
    def test_scoped_export_is_exact_and_never_leaks(
        self, vectors: VectorIndex, corpus: Corpus
    ) -> None:
        name = new_name()
        vectors.open(name, dimension=DIMENSION, model=MODEL)
        vectors.upsert(name, corpus.records)
        inside = {
            rec.id: rec
            for rec in corpus.records
            if corpus.scope.admits(rec.resource_id, rec.thread_id)
        }
        got = exported(vectors, name, corpus.scope, batch_size=corpus.k)
        assert sorted(got) == sorted(inside)
        for vector_id, rec in got.items():
            assert_same_record(rec, inside[vector_id])
        assert vectors.count(name, corpus.scope) == len(inside)
        assert vectors.count(name) == len(corpus.records)
        held = vectors.vector_ids(name, corpus.scope)
        assert held.by_message() == {rec.message_id: frozenset({rec.id}) for rec in inside.values()}

    # -- async twins -----------------------------------------------------------------------

    async def test_async_twins(self, vectors: VectorIndex) -> None:
        name = new_name()
        await vectors.aopen(name, dimension=DIMENSION, model=MODEL)
        with pytest.raises(EmbeddingMismatchError, match=name):
            await vectors.aopen(name, dimension=DIMENSION, model="another-model")
        await vectors.aupsert(
            name,
            [
                record("a", axis(0), thread_id="ta"),
                record("a", axis(1), thread_id="ta", n=1),
                record("b", axis(2), thread_id="tb"),
                record("c", axis(3), thread_id="tc", resource_id="r2"),
            ],
        )
        hits = await vectors.aquery(name, axis(2), k=10, scope=ScopeFilter(resource_id="r1"))
        assert hits[0].id == "b"
        assert {hit.id for hit in hits} == {"a", "a#1", "b"}
        assert await vectors.amessage_ids(name, ScopeFilter(thread_id="ta")) == {"a"}
        await vectors.adelete(name, message_ids=["a"])
        await vectors.adelete(name, thread_id="tb")
        assert await vectors.amessage_ids(name) == {"c"}
        await vectors.adelete(name, resource_id="r2")
        assert await vectors.amessage_ids(name) == set()

    async def test_async_export_and_count(self, vectors: VectorIndex) -> None:
        name = new_name()
        await vectors.aopen(name, dimension=DIMENSION, model=MODEL)
        records = self._seed_export(vectors, name)
        streamed = [rec async for rec in vectors.aexport(name, batch_size=2)]
        assert sorted(rec.id for rec in streamed) == sorted(rec.id for rec in records)
        by_id = {rec.id: rec for rec in records}
        for rec in streamed:
            assert_same_record(rec, by_id[rec.id])
        scope = ScopeFilter(thread_id="ta")
        thread = [rec.id async for rec in vectors.aexport(name, scope, batch_size=3)]
        assert sorted(thread) == ["a1", "a1#1", "a1#2", "a2"]
        assert await vectors.acount(name) == 7
        assert await vectors.acount(name, ScopeFilter(resource_id="bob")) == 2
        assert await vectors.acount(name, scope) == 4
