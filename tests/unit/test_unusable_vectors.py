"""An unusable vector (all zeros, NaN, infinite) costs its own message only.

An embedder may answer one text of a batch with a vector the index cannot compare (a
bag-of-words model given "👍": all zeros). That message is stored without a vector and
reported by id; the other messages of the turn (reindex batch, import batch) get theirs.
A failure of the whole answer (an exception, a short batch, another dimension) still
fails the whole batch.
"""

from __future__ import annotations

import asyncio
import logging
import math

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import (
    EmbeddingMismatchError,
    InMemoryStorage,
    SemanticRecall,
    SemanticRecallError,
)
from langchain_semantic_recall.embeddings import (
    EmbeddingCache,
    embed_each_with_cache,
    embed_with_cache,
)
from langchain_semantic_recall.records import IndexResult
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, UnusableFor

IDS = {"thread_id": "t1", "resource_id": "alice"}
BAD = {"zero": 0.0, "nan": math.nan, "inf": math.inf, "inf32": 1e308}
"""Each kind of unusable vector: 1e308 is finite in Python, infinite as float32."""


def _engine(embedder: UnusableFor) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=embedder
    )


def _turn() -> list[BaseMessage]:
    return [
        HumanMessage("my garden has roses", id="g1"),
        AIMessage("blank 👍", id="z1"),
        HumanMessage("tulips bloom in spring", id="r1"),
    ]


def _held(memory: SemanticRecall) -> set[str]:
    return memory.vector_store.message_ids(memory.ensure_index().name)


def _index(memory: SemanticRecall, messages: list[BaseMessage], twin: str) -> IndexResult:
    if twin == "sync":
        return memory.index(messages, **IDS)
    return asyncio.run(memory.aindex(messages, **IDS))


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize("kind", sorted(BAD))
def test_index_leaves_only_the_message_of_an_unusable_vector_without_one(
    kind: str, twin: str
) -> None:
    embedder = UnusableFor("blank", BAD[kind])
    memory = _engine(embedder)
    result = _index(memory, _turn(), twin)
    assert result.stored == ("g1", "z1", "r1")
    assert result.embedded == ("g1", "r1")
    assert _held(memory) == {"g1", "r1"}
    fate = result.fates[1]
    assert (fate.message_id, fate.fate, fate.embedded) == ("z1", "stored", False)
    reason = "all-zero vector" if kind == "zero" else "NaN or infinite vector"
    assert fate.reason is not None
    assert reason in fate.reason
    assert result.skipped == {"z1": fate.reason}
    assert [f.embedded for f in result.fates] == [True, False, True]
    assert result.error is not None
    assert "'z1'" in result.error
    assert reason in result.error
    assert "reindex(missing_only=True)" in result.error
    # Never cached: the next call asks the embedder again.
    assert memory.cache.get(memory.ensure_index().name, "blank 👍") is None
    assert memory.stats().missing_vectors == 1
    embedder.word = None  # the embedder is mended: the repair writes it
    assert memory.reindex(missing_only=True) == 1
    assert _held(memory) == {"g1", "z1", "r1"}
    assert memory.stats().missing_vectors == 0


def test_a_good_turn_after_a_bad_one_has_no_error() -> None:
    memory = _engine(UnusableFor("blank"))
    assert memory.index(_turn(), **IDS).error is not None
    result = memory.index([HumanMessage("more roses", id="m1")], **IDS)
    assert (result.embedded, result.error) == (("m1",), None)


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_reindex_skips_and_reports_a_message_of_an_unusable_vector(
    twin: str, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = UnusableFor("blank", math.nan)
    memory = _engine(embedder)
    memory.index(_turn(), **IDS)

    def reindex(missing_only: bool) -> int:
        if twin == "sync":
            return memory.reindex(missing_only=missing_only)
        return asyncio.run(memory.areindex(missing_only=missing_only))

    with caplog.at_level(logging.WARNING):
        assert reindex(missing_only=True) == 0  # z1 is tried again, and skipped again
        assert reindex(missing_only=False) == 2  # the others are written again
    assert "'z1'" in caplog.text
    assert "NaN or infinite vector" in caplog.text
    assert _held(memory) == {"g1", "r1"}
    assert memory.stats().missing_vectors == 1
    # Another process, whose embedder now fails a text it embedded before (its cache is
    # empty): the old vector went, as the log says, not kept beside "none" (a review).
    later = SemanticRecall(
        storage=memory.storage,
        vector_store=memory.vector_store,
        embeddings=UnusableFor("roses", math.nan),
    )
    assert later.reindex(missing_only=False) == 2  # z1 mended, r1
    assert _held(later) == {"r1", "z1"}
    assert later.stats().missing_vectors == 1


def test_an_edit_to_a_text_of_unusable_vector_drops_the_old_texts_vector() -> None:
    """Left, the old text's vector would make the message look whole, found by old words."""
    memory = _engine(UnusableFor("blank"))
    memory.index([HumanMessage("my garden has roses", id="g1")], **IDS)
    result = memory.index([HumanMessage("blank now", id="g1")], **IDS)
    assert (result.fates[0].fate, result.embedded) == ("updated", ())
    assert _held(memory) == set()
    assert memory.stats().missing_vectors == 1


def test_a_long_message_with_one_unusable_chunk_gets_no_vector() -> None:
    """Its other chunks written, it would look whole to stats and to the repair."""
    memory = _engine(UnusableFor("blank", split_on="|"))
    long = HumanMessage("roses in the garden|blank 👍|tulips in spring", id="long")
    result = memory.index([long, HumanMessage("a short one", id="s1")], **IDS)
    assert result.embedded == ("s1",)
    assert result.fates[0].reason is not None
    assert "all-zero" in result.fates[0].reason
    assert _held(memory) == {"s1"}
    assert memory.stats().missing_vectors == 1


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_bulk_index_imports_on_and_names_the_messages_without_a_vector(twin: str) -> None:
    memory = _engine(UnusableFor("blank"))
    conversations = [
        ("t1", "alice", _turn()),
        ("t2", "bob", [HumanMessage("blank", id="z2"), AIMessage("all good", id="b1")]),
    ]
    if twin == "sync":
        result = memory.bulk_index(conversations, batch_size=2)
    else:
        result = asyncio.run(memory.abulk_index(conversations, batch_size=2))
    assert (result.stored, result.embedded) == (5, 3)
    assert set(result.unusable_vectors) == {"z1", "z2"}
    assert all("all-zero vector" in why for why in result.unusable_vectors.values())
    assert sum(result.not_embedded.values()) == 2
    assert _held(memory) == {"g1", "r1", "b1"}
    assert memory.stats().missing_vectors == 2


def test_a_whole_answer_that_fails_still_fails_the_whole_batch() -> None:
    embedder = UnusableFor("blank")
    memory = _engine(embedder)
    memory.ensure_index()
    embedder.fail = RuntimeError("embedder down")
    result = memory.index(_turn(), **IDS)
    assert (result.embedded, result.error) == ((), "RuntimeError('embedder down')")
    embedder.fail = None
    embedder.size = 4  # another dimension than the index's
    with pytest.raises(EmbeddingMismatchError):
        memory.index([HumanMessage("other", id="o1")], **IDS)


def test_embed_each_keeps_the_good_vectors_and_caches_only_them() -> None:
    embedder = UnusableFor("blank")
    cache = EmbeddingCache()
    got = embed_each_with_cache(embedder, cache, "ns", ["roses", "blank", "roses"], dimension=8)
    assert got.vectors == [embedder.vector("roses"), None, embedder.vector("roses")]
    assert list(got.unusable) == [1]
    assert "all-zero vector" in got.unusable[1]
    assert (cache.get("ns", "blank"), len(cache)) == (None, 1)
    # The plain call still refuses the whole batch (a query has no other text).
    with pytest.raises(SemanticRecallError, match="all-zero vector at position 0"):
        embed_with_cache(embedder, EmbeddingCache(), "ns", ["blank", "roses"])


def test_a_loop_resending_its_history_is_told_once_and_eval_goes_on() -> None:
    """The message was named in `error` at every later turn that sent it again, and
    `eval` stopped at the first conversation holding one (a review)."""
    from langchain_semantic_recall.eval_records import Dataset, EvalConversation
    from langchain_semantic_recall.evaluation import load_dataset

    memory = _engine(UnusableFor("blank"))
    first = memory.index(_turn(), **IDS)
    assert "'z1'" in (first.error or "")
    again = memory.index([*_turn(), HumanMessage("and lilies", id="l1")], **IDS)
    assert again.error is None  # z1 unchanged: named when it was written
    assert dict(again.skipped).get("z1") is not None  # its fate still says why
    conversations = [
        EvalConversation("bob", "c1", [HumanMessage("blank 👍", id="b1")]),
        EvalConversation("bob", "c2", [HumanMessage("roses", id="b2")]),
    ]
    load_dataset(memory, Dataset(conversations, []), progress=False)
    assert memory.stats(resource_id="bob").messages == 2


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_query_of_unusable_vector_is_answered_by_the_keyword_half_in_hybrid_mode(
    twin: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A query the embedder cannot place (here: any text with "~~") used to fail the whole
    # hybrid search, though its words alone find the message; dense mode has nothing else.
    memory = _engine(UnusableFor("~~", math.nan))
    memory.index(_turn(), **IDS)
    query = "roses in my garden ~~"
    scope = {"resource_id": "alice"}
    with caplog.at_level(logging.WARNING):
        if twin == "sync":
            hits = memory.search(query, **scope)
        else:
            hits = asyncio.run(memory.asearch(query, **scope))
    assert [hit.message.id for hit in hits][:1] == ["g1"]
    assert "keyword half alone" in caplog.text
    assert "NaN or infinite" in caplog.text
    dense = SemanticRecall(
        storage=memory.storage,
        vector_store=memory.vector_store,
        embeddings=memory.embeddings,
        search_mode="dense",
    )
    with pytest.raises(SemanticRecallError, match="NaN or infinite"):
        dense.search(query, **scope)


def test_an_index_without_the_resources_vectors_is_named_once_not_silent(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vector URL of another store, or a server restarted without its volume: the
    index exists, holds nothing of the resource, and hybrid search answered from its
    keyword half, mostly with silence, without a word (an audit). It warns once per
    scope (every ten minutes, for every engine of the process), naming the repair; a
    turn stored a moment ago (its vectors may be on their way) does not count."""
    from langchain_semantic_recall.engine import vector_space

    monkeypatch.setattr(vector_space, "_NO_VECTORS_TOLD", {})
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    old = {"created_at": "2024-01-15T10:30:00Z"}
    memory.index([HumanMessage("my garden has tomatoes", additional_kwargs=old)], **IDS)
    memory.index([HumanMessage("garden news", id="new")], thread_id="t2", resource_id="alice")
    name = memory.ensure_index().name
    memory.vector_store.delete(name, resource_id="alice")  # the server emptied under it

    def told() -> list[str]:
        return [r.getMessage() for r in caplog.records if "holds no vector" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        memory.search("news", thread_id="t2", resource_id="alice", scope="thread")
        assert told() == []  # only the message stored a moment ago: not counted
        memory.search("garden tomatoes", resource_id="alice")
        memory.search("garden", resource_id="alice")
        memory.with_options(top_k=3).search("garden", resource_id="alice")
        memory.search("tomatoes", thread_id="t1", resource_id="alice", scope="thread")
    assert len(told()) == 2
    assert "for resource 'alice', though keyword search found 1" in told()[0]
    assert "reindex(missing_only=True)" in told()[0]
    assert "for thread 't1' of resource 'alice'" in told()[1]
    assert memory.stats(resource_id="alice").missing_vectors == 2
    memory.reindex(missing_only=True)
    caplog.clear()
    monkeypatch.setattr(vector_space, "_NO_VECTORS_TOLD", {})
    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        memory.search("garden tomatoes", resource_id="alice")
    assert told() == []  # the vectors are back
