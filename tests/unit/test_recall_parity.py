"""The original processor's own test list, ported: recall side, index side, cache, dimensions."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_semantic_recall import EmbeddingMismatchError, MissingIdentityError
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors
from tests.unit.conftest import EngineFactory, reset, turn

TRIP = [
    "We are planning a trip to Lisbon in March",
    "Lisbon in March is mild; pack a light jacket",
    "Which neighbourhood should we stay in",
    "Alfama is charming and central",
]
COOKING = [
    "How long should I boil an egg",
    "About seven minutes for a jammy yolk",
]


def recalled(messages: list) -> list:
    return [m for m in messages if m.additional_kwargs.get("source") == MEMORY_SOURCE]


# --- recall side ---------------------------------------------------------------------------


def test_recall_makes_the_exact_embed_query_and_window_calls(
    make_engine: EngineFactory,
    embeddings: FakeEmbeddings,
    storage: RecordingStorage,
    vectors: RecordingVectors,
) -> None:
    engine = make_engine(top_k=3, message_range=1)
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    reset(embeddings, storage, vectors)

    engine.recall([HumanMessage("trip to Lisbon")], thread_id="t2", resource_id="alice")

    assert embeddings.calls == [["trip to Lisbon"]]
    (query,) = vectors.of("query")
    assert query["k"] == 3
    assert query["scope"] == ScopeFilter(resource_id="alice")
    assert query["vector"] == pytest.approx(embeddings.vector("trip to Lisbon"))
    (window,) = [kw for name, kw in storage.calls if name == "get_windows"]
    assert (window["before"], window["after"]) == (1, 1)
    assert window["scope"] == ScopeFilter(resource_id="alice")
    assert window["message_ids"][0] == "a-0"


def test_top_k_is_passed_through(make_engine: EngineFactory, vectors: RecordingVectors) -> None:
    engine = make_engine(top_k=7)
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    engine.recall([HumanMessage("Lisbon")], thread_id="t1", resource_id="r")
    assert vectors.of("query")[-1]["k"] == 7


def test_threshold_drops_low_scores(make_engine: EngineFactory) -> None:
    engine = make_engine(threshold=0.99, scope="thread")
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    partial = engine.recall([HumanMessage("trip to Lisbon with friends")], thread_id="t1")
    assert recalled(partial) == []
    exact = engine.recall([HumanMessage(TRIP[2])], thread_id="t1")
    assert [m.id for m in recalled(exact)] == ["a-1", "a-2", "a-3"]


def test_thread_scope_filters_by_thread(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine(scope="thread")
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    engine.index(turn("b", ["Lisbon again, trip in March"]), thread_id="t2", resource_id="r")
    result = engine.recall([HumanMessage("Lisbon trip in March")], thread_id="t2", resource_id="r")
    assert vectors.of("query")[-1]["scope"].thread_id == "t2"
    assert {m.id for m in recalled(result)} == {"b-0"}


def test_resource_scope_filters_by_resource(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine(scope="resource")
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    engine.index(turn("b", TRIP), thread_id="t9", resource_id="bob")
    result = engine.recall([HumanMessage("Lisbon trip")], thread_id="t2", resource_id="alice")
    assert vectors.of("query")[-1]["scope"] == ScopeFilter(resource_id="alice")
    (block,) = recalled(result)
    assert "Lisbon" in block.content
    assert "t9" not in block.content


def test_no_results_leaves_input_unchanged_and_storage_untouched(
    make_engine: EngineFactory, storage: RecordingStorage
) -> None:
    engine = make_engine()
    messages = [HumanMessage("anything at all", id="q")]
    assert engine.recall(messages, thread_id="t1", resource_id="r") == messages
    # Whose thread; and, as the index was created, whether the store held history for it.
    assert storage.names() == ["get_thread_owner", "list_threads"]
    storage.calls.clear()
    assert engine.recall(messages, thread_id="t1", resource_id="r") == messages
    assert storage.names() == ["get_thread_owner"]  # its one read (whose thread); no write


def test_vector_store_error_leaves_input_unchanged_and_logs(
    make_engine: EngineFactory, vectors: RecordingVectors, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    vectors.fail["query"] = ConnectionError("vector store down")
    messages = [HumanMessage("Lisbon")]
    with caplog.at_level(logging.WARNING):
        assert engine.recall(messages, thread_id="t2", resource_id="r") == messages
    assert "continuing without recall" in caplog.text


def test_no_human_message_means_no_embed_and_no_query(
    make_engine: EngineFactory, embeddings: FakeEmbeddings, vectors: RecordingVectors
) -> None:
    engine = make_engine()
    messages = [SystemMessage("be nice"), AIMessage("hello")]
    assert engine.recall(messages, thread_id="t1", resource_id="r") == messages
    assert embeddings.calls == []
    assert vectors.of("query") == []


def test_no_thread_id_in_thread_scope_is_an_error_that_touches_nothing(
    make_engine: EngineFactory, embeddings: FakeEmbeddings, vectors: RecordingVectors
) -> None:
    # The original did nothing without a thread id; SPEC §10 makes a missing id loud.
    # Resource scope needs only the resource (tests/unit/test_contract.py).
    engine = make_engine(scope="thread")
    with pytest.raises(MissingIdentityError, match="thread_id"):
        engine.recall([HumanMessage("Lisbon")], resource_id="r")
    assert embeddings.calls == []
    assert vectors.calls == []


def test_multi_part_content_is_joined_with_a_space(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    reset(embeddings)
    content = [
        {"type": "text", "text": "trip"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "to Lisbon"},
    ]
    engine.recall([HumanMessage(content=content)], thread_id="t2", resource_id="r")
    assert embeddings.calls == [["trip to Lisbon"]]


def test_messages_already_in_the_input_are_not_recalled_twice(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(scope="thread")
    history = turn("a", TRIP)
    engine.index(history, thread_id="t1", resource_id="r")
    result = engine.recall([*history[2:], HumanMessage("Lisbon in March")], thread_id="t1")
    ids = [m.id for m in result if m.id]
    assert len(ids) == len(set(ids))
    assert {m.id for m in recalled(result)} <= {"a-0", "a-1"}


@pytest.mark.parametrize("scope", ["thread", "resource"])
async def test_a_live_message_without_an_id_is_not_recalled_beside_itself(
    make_engine: EngineFactory, scope: str
) -> None:
    """A loop that keeps its own history (the runnable recipe: `invoke`, then `index`)
    sends messages without ids; `index` stores them under new ids, so the next turn's
    recall handed the model the user's own earlier words twice, once as memory."""
    engine = make_engine(scope=scope, threshold=0)
    config = {"configurable": {"thread_id": "t1", "resource_id": "r"}}
    history: list[Any] = []
    for text, answer in zip(TRIP[::2], TRIP[1::2], strict=True):
        history.append(HumanMessage(text))
        engine.index([history[-1]], **config["configurable"])
        history.append(AIMessage(answer))
        engine.index([history[-1]], **config["configurable"])
    question = [*history, HumanMessage("Lisbon in March: which neighbourhood?")]
    for result in (
        engine.invoke(question, config),
        await engine.ainvoke(question, config),
        engine.recall(question, thread_id="t1", resource_id="r"),
    ):
        assert result[-len(question) :] == question
        assert recalled(result) == []  # every recalled message is already in the input


def test_custom_before_after_window(make_engine: EngineFactory, storage: RecordingStorage) -> None:
    engine = make_engine(scope="thread", top_k=1, message_range={"before": 2, "after": 0})
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    result = engine.recall([HumanMessage("Alfama is charming and central")], thread_id="t1")
    window = [kw for name, kw in storage.calls if name == "get_windows"][-1]
    assert (window["before"], window["after"]) == (2, 0)
    assert [m.id for m in recalled(result)] == ["a-1", "a-2", "a-3"]


def test_index_created_when_missing_with_the_embedder_dimension(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine()
    engine.recall([HumanMessage("hi")], thread_id="t1", resource_id="r")
    (opened,) = vectors.of("open")
    assert opened == {"name": "semantic-recall-fake-bow-128", "dimension": 128, "model": "fake-bow"}


def test_dimension_is_probed_once_when_the_embedder_does_not_say(
    vectors: RecordingVectors, storage: RecordingStorage
) -> None:
    embedder = FakeEmbeddings(dimension=32)
    embedder.dimension = None  # type: ignore[assignment]  # an embedder that does not say
    engine = SemanticRecall_(storage, vectors, embedder)
    engine.recall([HumanMessage("one")], thread_id="t", resource_id="r")
    engine.recall([HumanMessage("two")], thread_id="t", resource_id="r")
    assert embedder.calls.count(["dimension probe"]) == 1
    assert vectors.of("open")[0]["dimension"] == 32
    assert vectors.of("open")[0]["name"] == "semantic-recall-fake-bow-32"


def SemanticRecall_(storage, vectors, embeddings, **options):  # noqa: N802 - local helper
    from langchain_semantic_recall import SemanticRecall

    return SemanticRecall(storage=storage, vector_store=vectors, embeddings=embeddings, **options)


def test_custom_index_name_is_used(make_engine: EngineFactory, vectors: RecordingVectors) -> None:
    engine = make_engine(index_name="my-memory")
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    engine.recall([HumanMessage("Lisbon")], thread_id="t1", resource_id="r")
    assert {kw["name"] for _, kw in vectors.calls} == {"my-memory"}


def test_cross_thread_hits_become_one_system_block_and_same_thread_hits_stay_messages(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(top_k=4, message_range=0)
    engine.index(turn("a", TRIP), thread_id="trip", resource_id="alice")
    engine.index(
        turn("b", ["Lisbon flights are booked for March"]), thread_id="now", resource_id="alice"
    )
    live = [HumanMessage("What about Lisbon in March?", id="live")]
    result = engine.recall(live, thread_id="now", resource_id="alice")

    block, *same = recalled(result)
    assert isinstance(block, SystemMessage)
    assert "remembered_from_other_conversation" in block.content
    assert "the following messages are from 2024, Jan, 15" in block.content
    assert '[conversation "trip"]' in block.content
    assert "User: We are planning a trip to Lisbon in March" in block.content
    assert "10:30 AM" in block.content
    assert [m.id for m in same] == ["b-0"]
    assert isinstance(same[0], HumanMessage)
    assert result == [block, *same, *live]  # order: block, same-thread, input


def test_leading_system_prompt_stays_first(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="trip", resource_id="alice")
    prompt = SystemMessage("You are a travel agent.", id="sys")
    result = engine.recall([prompt, HumanMessage("Lisbon?")], thread_id="x", resource_id="alice")
    assert result[0] is prompt
    assert result[1].additional_kwargs["source"] == MEMORY_SOURCE


def test_thread_scope_drops_a_foreign_threads_hit_even_if_the_vector_store_returns_it(
    embeddings: FakeEmbeddings, storage: RecordingStorage
) -> None:
    class IgnoresScope(InMemoryVectorIndex):
        def _query(self, name, vector, *, k, scope):  # type: ignore[no-untyped-def]
            return super()._query(name, vector, k=k, scope=ScopeFilter(resource_id="r"))

    engine = SemanticRecall_(storage, IgnoresScope(), embeddings, scope="thread")
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    engine.index(turn("b", ["hello there"]), thread_id="t2", resource_id="r")
    result = engine.recall([HumanMessage("Lisbon trip March")], thread_id="t2", resource_id="r")
    assert recalled(result) == []


# --- index side ----------------------------------------------------------------------------


def test_user_and_assistant_messages_are_embedded_with_the_exact_metadata(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP[:2]), thread_id="t1", resource_id="alice")
    (upsert,) = vectors.of("upsert")
    first, second = upsert["records"]
    assert (first.id, first.message_id, first.thread_id, first.resource_id, first.role) == (
        "a-0",
        "a-0",
        "t1",
        "alice",
        "user",
    )
    assert first.content == TRIP[0]
    assert first.created_at.isoformat() == "2024-01-15T10:30:00+00:00"
    assert (second.id, second.role, second.content) == ("a-1", "assistant", TRIP[1])


def test_system_messages_are_stored_but_not_embedded(
    make_engine: EngineFactory, embeddings: FakeEmbeddings, storage: RecordingStorage
) -> None:
    engine = make_engine()
    result = engine.index(
        [SystemMessage("rules", id="s"), HumanMessage("hi", id="h")], thread_id="t", resource_id="r"
    )
    assert embeddings.embedded_texts == ["hi"]
    assert result.skipped == {"s": "system message"}
    assert storage.inner.count() == 2


def test_empty_text_is_stored_but_not_embedded(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    result = engine.index(
        [HumanMessage("   ", id="e"), AIMessage("", id="f")], thread_id="t", resource_id="r"
    )
    assert embeddings.calls == []
    assert result.stored == ("e", "f")
    assert result.skipped == {"e": "no text", "f": "no text"}


def test_invisible_only_text_is_stored_but_not_embedded_nor_recalled(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    """Zero-width and bidi characters are removed from the memory block: a message of
    nothing else was embedded (a vector of no text) and came back as an empty line."""
    engine = make_engine()
    invisible = "\u200b\u200c\u200d\ufeff \u2060\u202e"
    result = engine.index(
        [HumanMessage(invisible, id="z"), AIMessage("\u200b", id="y")],
        thread_id="t",
        resource_id="r",
    )
    assert embeddings.calls == []
    assert result.stored == ("z", "y")
    assert result.skipped == {"z": "no text", "y": "no text"}
    assert engine.recall([HumanMessage("\u200b\u200b")], thread_id="t2", resource_id="r") == [
        HumanMessage("\u200b\u200b")
    ]
    assert embeddings.calls == []  # nor is a query of nothing else embedded
    assert engine.search("\u200b", resource_id="r") == []


def test_an_invisible_only_neighbour_is_left_out_of_windows_and_the_block(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine()
    engine.index(
        [HumanMessage("I love hiking in the Alps", id="h"), HumanMessage("\u200b\u2060", id="z")],
        thread_id="a",
        resource_id="r",
    )
    hits = engine.search("hiking Alps", resource_id="r")
    assert [m.id for hit in hits for m in hit.window] == ["h"]
    block = engine.recall([HumanMessage("hiking Alps?")], thread_id="b", resource_id="r")[0]
    assert "I love hiking" in block.content
    assert "User: \n" not in block.content


def test_index_opens_the_index_with_a_custom_name(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine(index_name="custom.index")
    engine.index(turn("a", TRIP[:1]), thread_id="t", resource_id="r")
    assert vectors.of("open")[0]["name"] == "custom.index"
    assert vectors.of("upsert")[0]["name"] == "custom.index"


def test_index_without_thread_id_is_an_error_that_touches_nothing(
    make_engine: EngineFactory,
    storage: RecordingStorage,
    vectors: RecordingVectors,
    embeddings: FakeEmbeddings,
) -> None:
    # The original did nothing without a thread id; SPEC §10 makes a missing id loud.
    with pytest.raises(MissingIdentityError, match="thread_id"):
        make_engine().index(turn("a", TRIP), resource_id="r")
    assert storage.calls == []
    assert vectors.calls == []
    assert embeddings.calls == []


def test_read_only_writes_nothing_but_still_recalls(
    make_engine: EngineFactory,
    storage: RecordingStorage,
    vectors: RecordingVectors,
) -> None:
    make_engine().index(turn("a", TRIP), thread_id="t1", resource_id="r")
    reset(storage, vectors)
    engine = make_engine(read_only=True)
    assert engine.index(turn("b", COOKING), thread_id="t2", resource_id="r").stored == ()
    assert "put" not in storage.names()
    assert "upsert" not in vectors.names()
    assert recalled(engine.recall([HumanMessage("Lisbon")], thread_id="t2", resource_id="r"))


def test_embedding_error_upserts_nothing_raises_nothing_and_keeps_messages(
    make_engine: EngineFactory,
    embeddings: FakeEmbeddings,
    vectors: RecordingVectors,
    storage: RecordingStorage,
) -> None:
    engine = make_engine()
    engine.ensure_index()
    embeddings.fail = TimeoutError("embedding API timed out")
    result = engine.index(turn("a", TRIP), thread_id="t", resource_id="r")
    assert result.error is not None
    assert "timed out" in result.error
    assert vectors.of("upsert") == []
    assert storage.inner.count() == 4
    embeddings.fail = None
    assert engine.stats().missing_vectors == 4
    assert engine.reindex(missing_only=True) == 4
    assert engine.stats().missing_vectors == 0


def test_new_user_input_is_indexed_along_with_the_response(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    engine.index(
        [HumanMessage("question", id="q"), AIMessage("answer", id="a")],
        thread_id="t",
        resource_id="r",
    )
    assert embeddings.calls == [["question", "answer"]]  # one batched call


def test_upsert_error_is_swallowed_and_logged(
    make_engine: EngineFactory,
    vectors: RecordingVectors,
    caplog: pytest.LogCaptureFixture,
    storage: RecordingStorage,
) -> None:
    vectors.fail["upsert"] = RuntimeError("disk full")
    with caplog.at_level(logging.WARNING):
        result = make_engine().index(turn("a", TRIP), thread_id="t", resource_id="r")
    assert "disk full" in (result.error or "")
    assert "stored without vectors" in caplog.text
    assert storage.inner.count() == 4


# --- cache ---------------------------------------------------------------------------------


def test_identical_text_is_embedded_once(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    engine.index(
        [HumanMessage("same", id="1"), AIMessage("same", id="2")], thread_id="t", resource_id="r"
    )
    assert embeddings.embedded_texts == ["same"]


def test_a_repeated_query_is_embedded_once(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    for _ in range(3):
        engine.recall([HumanMessage("Lisbon")], thread_id="t", resource_id="r")
    assert embeddings.embedded_texts == ["Lisbon"]


def test_the_query_embedded_on_input_is_not_embedded_again_on_output(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    question = HumanMessage("Any tips for Lisbon?", id="q")
    engine.recall([question], thread_id="t", resource_id="r")
    engine.index(
        [question, AIMessage("Eat pastel de nata", id="a")], thread_id="t", resource_id="r"
    )
    assert embeddings.embedded_texts == ["Any tips for Lisbon?", "Eat pastel de nata"]


# --- dimensions ----------------------------------------------------------------------------


def test_a_different_dimension_on_an_existing_index_fails_closed(
    storage: RecordingStorage,
) -> None:
    shared = InMemoryVectorIndex()
    small = SemanticRecall_(storage, shared, FakeEmbeddings(384, "model-x"), index_name="shared")
    small.index(turn("a", TRIP), thread_id="t", resource_id="r")
    large = SemanticRecall_(storage, shared, FakeEmbeddings(1536, "model-x"), index_name="shared")
    with pytest.raises(EmbeddingMismatchError, match=r"shared.*(index_name|reindex)"):
        large.recall([HumanMessage("Lisbon")], thread_id="t", resource_id="r")
    with pytest.raises(EmbeddingMismatchError):
        large.index(turn("b", COOKING), thread_id="t2", resource_id="r")


def test_the_same_dimension_across_two_instances_works(storage: RecordingStorage) -> None:
    shared = InMemoryVectorIndex()
    writer = SemanticRecall_(storage, shared, FakeEmbeddings(384))
    writer.index(turn("a", TRIP), thread_id="t", resource_id="r")
    reader = SemanticRecall_(storage, shared, FakeEmbeddings(384))
    assert recalled(reader.recall([HumanMessage("Lisbon")], thread_id="t2", resource_id="r"))
