"""A store records the vector indexes its vectors are written to, and an engine opened
without `index_name` opens the store's own: on a shared Chroma server the model's default
index may be another store's (an audit: a repair through it deleted that store's vectors,
a forget through it left this store's). The storage side is in the conformance suite."""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.errors import InvalidOptionError, StorageError
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

TURN = [HumanMessage("I am allergic to peanuts", id="m1"), AIMessage("Noted.", id="m2")]


def engine(
    storage: InMemoryStorage, vectors: InMemoryVectorIndex, index_name: str | None = None
) -> SemanticRecall:
    return SemanticRecall(
        storage=storage, vector_store=vectors, embeddings=FakeEmbeddings(), index_name=index_name
    )


def test_an_unnamed_engine_opens_the_index_the_store_records() -> None:
    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
    named = engine(storage, vectors, "store-b")
    named.index(TURN, thread_id="t1", resource_id="u1")
    assert [i.name for i in storage.recorded_indexes()] == ["store-b"]
    other = engine(InMemoryStorage(), vectors)  # another store's default index, same host
    other.index([HumanMessage("tomatoes in the garden", id="x1")], thread_id="x", resource_id="u1")

    unnamed = engine(storage, vectors)
    assert unnamed.ensure_index().name == "store-b"
    hits = unnamed.search("allergic peanuts", resource_id="u1")
    assert [h.message.id for h in hits][:1] == ["m1"]
    assert unnamed.forget_resource("u1") == 2  # deletes in the store's own index
    assert vectors.message_ids("store-b") == set()
    assert vectors.message_ids(other.ensure_index().name) == {"x1"}  # the other store's: kept


async def test_an_unnamed_engine_opens_the_recorded_index_async_too() -> None:
    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
    await engine(storage, vectors, "store-b").aindex(TURN, thread_id="t1", resource_id="u1")
    unnamed = engine(storage, vectors)
    assert (await unnamed.aensure_index()).name == "store-b"
    hits = await unnamed.asearch("allergic peanuts", resource_id="u1")
    assert [h.message.id for h in hits][:1] == ["m1"]


def test_the_default_index_wins_when_the_store_records_it_too() -> None:
    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
    default = engine(storage, vectors)
    default.index(TURN, thread_id="t1", resource_id="u1")
    engine(storage, vectors, "rebuild").reindex()
    names = [i.name for i in storage.recorded_indexes()]
    assert names == sorted([default.ensure_index().name, "rebuild"])
    assert engine(storage, vectors).ensure_index().name == default.ensure_index().name


def test_two_recorded_indexes_of_the_model_and_no_default_is_a_clear_error() -> None:
    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
    engine(storage, vectors, "first").index(TURN, thread_id="t1", resource_id="u1")
    engine(storage, vectors, "second").reindex()
    unnamed = engine(storage, vectors)
    with pytest.raises(InvalidOptionError, match=r"records 2 vector indexes.*'first', 'second'"):
        unnamed.search("peanuts", resource_id="u1")
    # `index` stores the turn and says its vectors were not written, as for any index error
    result = unnamed.index([HumanMessage("more", id="m3")], thread_id="t1", resource_id="u1")
    assert result.error is not None
    assert "index_name=" in result.error
    assert "m3" not in vectors.message_ids("first") | vectors.message_ids("second")
    assert engine(storage, vectors, "second").ensure_index().name == "second"  # named: fine


def test_another_models_record_does_not_move_this_models_default() -> None:
    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
    storage.record_index("someone-elses", model="another-model", dimension=7)
    unnamed = engine(storage, vectors)
    assert unnamed.ensure_index().name != "someone-elses"


def test_a_storage_that_cannot_record_warns_and_still_writes_the_vectors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()

    def refuse(index: object) -> bool:
        raise StorageError("the database went away")

    monkeypatch.setattr(storage, "_record_index", refuse)
    named = engine(storage, vectors, "store-b")
    with caplog.at_level(logging.WARNING):
        result = named.index(TURN, thread_id="t1", resource_id="u1")
    assert result.error is None
    assert vectors.message_ids("store-b") == {"m1", "m2"}
    assert "could not record that its vectors are in index 'store-b'" in caplog.text
