"""Beyond the original: batching, chunking, forgetting, repair, runnable, memory contract."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_semantic_recall import (
    ForgottenThreadError,
    InMemoryStorage,
    InvalidInputError,
    InvalidOptionError,
    MissingIdentityError,
    OwnershipError,
    SemanticRecall,
    SemanticRecallError,
)
from langchain_semantic_recall.messages import MEMORY_SOURCE, build_records
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors
from tests.unit.conftest import EngineFactory, reset, turn

TRIP = [
    "We are planning a trip to Lisbon in March",
    "Lisbon in March is mild",
    "Which neighbourhood should we stay in",
    "Alfama is charming and central",
]


def recalled(messages: list) -> list:
    return [m for m in messages if m.additional_kwargs.get("source") == MEMORY_SOURCE]


# --- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("top_k", 0),
        ("top_k", -1),
        ("top_k", 2.5),
        ("top_k", True),
        ("message_range", -1),
        ("message_range", {"before": -1, "after": 0}),
        ("message_range", {"before": 1, "later": 2}),
        ("message_range", "2"),
        ("scope", "user"),
        ("scope", None),
        ("threshold", 1.5),
        ("threshold", -0.1),
        ("threshold", float("nan")),
        ("threshold", "0.5"),
        ("index_name", "ab"),
        ("index_name", "-bad-start"),
        ("index_name", "has space"),
        ("index_name", "a" * 513),
        ("index_name", "two..dots"),
        ("max_block_chars", 0),
        ("max_block_chars", 499),
        ("cache_size", 0),
        ("thread_key", ""),
        ("resource_key", "thread_id"),  # the thread id would be read as the resource too
        ("read_only", "no"),  # a string (an environment variable) once read as True
        ("read_only", 0),
        ("logger", "my_app"),  # once an AttributeError at the first warning
        ("input_key", 5),
        ("output_key", ""),
    ],
)
def test_bad_options_fail_eagerly_with_a_value_error(
    make_engine: EngineFactory, option: str, value: object
) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        make_engine(**{option: value})
    assert isinstance(caught.value, ValueError)


async def test_a_threshold_per_call_is_refused_in_keyword_mode_as_at_construction(
    make_engine: EngineFactory,
) -> None:
    """search(threshold=0.9) in keyword mode once returned hits scoring 0.05, unfiltered."""
    from langchain_semantic_recall import InMemoryStorage

    engine = make_engine(storage=InMemoryStorage(), search_mode="keyword")
    engine.index([HumanMessage("zebra stripes zebra")], thread_id="t1", resource_id="r")
    engine.index([HumanMessage("a zebra once")], thread_id="t2", resource_id="r")
    refused = "a threshold means nothing there"
    with pytest.raises(InvalidOptionError, match=refused):
        engine.search("zebra stripes", resource_id="r", threshold=0.9)
    with pytest.raises(InvalidOptionError, match=refused):
        await engine.asearch("zebra stripes", resource_id="r", threshold=0.9)
    with pytest.raises(InvalidOptionError, match=refused):  # refused when built
        engine.as_retriever(resource_id="r", search_kwargs={"score_threshold": 0.9})
    assert len(engine.search("zebra stripes", resource_id="r")) == 2  # without one: all


def test_wrong_backend_types_are_refused(embeddings: FakeEmbeddings) -> None:
    from langchain_semantic_recall import InMemoryStorage

    with pytest.raises(InvalidOptionError, match="storage"):
        SemanticRecall(storage={}, vector_store=None, embeddings=embeddings)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="vector_store"):
        SemanticRecall(storage=InMemoryStorage(), vector_store=object(), embeddings=embeddings)


def test_a_langchain_vector_store_is_wrapped(embeddings: FakeEmbeddings) -> None:
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_semantic_recall import InMemoryStorage

    engine = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorStore(embedding=embeddings),
        embeddings=embeddings,
        search_mode="dense",
    )
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    hits = engine.search("trip to Lisbon", thread_id="t2", resource_id="r")
    assert hits[0].message.id == "a-0"


def test_message_range_accepts_every_documented_shape(make_engine: EngineFactory) -> None:
    assert make_engine(message_range=2).message_range == (
        r := make_engine(message_range={"before": 2, "after": 2}).message_range
    )
    assert make_engine(message_range=(0, 3)).message_range.after == 3
    assert r.before == 2


@pytest.mark.parametrize("partial", [{"before": 2}, {"after": 1}, {}])
def test_a_message_range_mapping_missing_a_side_is_refused(
    make_engine: EngineFactory, partial: dict[str, int]
) -> None:
    # The missing side read as 0, where MessageRange() reads 1 and hybrid mode 2 or 3.
    with pytest.raises(InvalidOptionError, match="needs both 'before' and 'after'"):
        make_engine(message_range=partial)


# --- bad input -----------------------------------------------------------------------------


def test_image_only_newest_message_falls_back_to_the_previous_text(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    reset(embeddings)
    image = HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:,x"}}])
    result = engine.recall(
        [HumanMessage("Lisbon trip"), AIMessage("ok"), image], thread_id="t2", resource_id="r"
    )
    assert embeddings.calls == [["Lisbon trip"]]
    assert recalled(result)


def test_whitespace_query_recalls_nothing(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    messages = [HumanMessage("   \n ")]
    assert make_engine().recall(messages, thread_id="t", resource_id="r") == messages
    assert embeddings.calls == []


def test_tool_calls_and_results_are_stored_but_not_embedded(
    make_engine: EngineFactory, embeddings: FakeEmbeddings, storage: RecordingStorage
) -> None:
    call = AIMessage("", id="c", tool_calls=[{"name": "weather", "args": {}, "id": "call-1"}])
    result = ToolMessage("sunny", tool_call_id="call-1", id="tr")
    outcome = make_engine().index(
        [HumanMessage("weather?", id="h"), call, result, AIMessage("It is sunny", id="a")],
        thread_id="t",
        resource_id="r",
    )
    assert outcome.skipped == {"c": "tool calls only", "tr": "tool message"}
    assert embeddings.embedded_texts == ["weather?", "It is sunny"]
    assert storage.inner.count() == 4


@pytest.mark.parametrize("search_mode", ["hybrid", "dense", "keyword"])
def test_messages_without_text_are_never_shown(
    make_engine: EngineFactory, search_mode: str
) -> None:
    """An image, an empty message, a bare tool call: stored, but no hit, no window line,
    no empty line in the memory block (they were once shown as `User: `)."""
    engine = make_engine(storage=InMemoryStorage(), search_mode=search_mode, message_range=3)
    image = HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:,x"}}], id="img")
    call = AIMessage("", id="call", tool_calls=[{"name": "w", "args": {"c": "tea"}, "id": "x"}])
    engine.index(
        [
            HumanMessage("I drink green tea every morning", id="tea"),
            AIMessage("Green tea every morning, noted.", id="ok"),
            HumanMessage("", id="empty"),
            image,
            call,
            HumanMessage("more green tea tomorrow morning", id="more"),
        ],
        thread_id="t1",
        resource_id="r",
    )
    options = {} if search_mode == "keyword" else {"threshold": 0.0}  # (keyword: no threshold)
    hits = engine.search("green tea morning", thread_id="t2", resource_id="r", **options)
    shown = {m.id for hit in hits for m in (hit.message, *hit.window)}
    assert "tea" in shown
    assert not shown & {"empty", "img", "call"}
    block = recalled(
        engine.recall([HumanMessage("green tea morning")], thread_id="t2", resource_id="r")
    )
    assert block
    text = "\n".join(str(m.content) for m in block)
    assert "green tea every morning" in text
    assert not re.search(r"(User|Assistant): *$", text, re.MULTILINE), text


def test_recalled_tool_pairs_never_reach_the_model_half_cut(make_engine: EngineFactory) -> None:
    engine = make_engine(scope="thread", message_range=2)
    call = AIMessage("checking", id="c", tool_calls=[{"name": "w", "args": {}, "id": "x"}])
    engine.index(
        [
            HumanMessage("weather in Lisbon", id="h"),
            call,
            ToolMessage("sunny", tool_call_id="x", id="tr"),
            AIMessage("Sunny!", id="a"),
        ],
        thread_id="t",
        resource_id="r",
    )
    out = recalled(engine.recall([HumanMessage("weather in Lisbon today")], thread_id="t"))
    assert not any(isinstance(m, ToolMessage) for m in out)
    assert all(not getattr(m, "tool_calls", None) for m in out)
    assert "checking" in [m.content for m in out]


def test_a_recalled_legacy_function_call_is_reduced_to_its_text(
    make_engine: EngineFactory,
) -> None:
    """OpenAI's older function calling keeps the call in `additional_kwargs`; recalled as
    it was, the model was shown a call it never made (and providers want its result)."""
    engine = make_engine(scope="thread", message_range=2)
    call = {"name": "transfer_money", "arguments": '{"to": "eve"}'}
    engine.index(
        [
            HumanMessage("weather in Lisbon", id="h"),
            AIMessage("checking", id="c", additional_kwargs={"function_call": call}),
            AIMessage("", id="bare", additional_kwargs={"function_call": call}),
            AIMessage("Sunny!", id="a"),
        ],
        thread_id="t",
        resource_id="r",
    )
    out = recalled(engine.recall([HumanMessage("weather in Lisbon today")], thread_id="t"))
    assert "checking" in [m.content for m in out]
    assert all("function_call" not in m.additional_kwargs for m in out)
    assert "bare" not in [m.id for m in out]


def test_messages_without_ids_are_new_messages_and_messages_with_ids_are_stored_once(
    make_engine: EngineFactory, storage: RecordingStorage
) -> None:
    engine = make_engine()
    messages = [HumanMessage("hello"), AIMessage("hi there"), HumanMessage("hello")]
    first = engine.index(messages, thread_id="t", resource_id="r")
    second = engine.index(messages, thread_id="t", resource_id="r")
    assert len(set(first.stored) | set(second.stored)) == 6  # id-less: each call is new
    assert [m.id for m in messages] == [None, None, None]  # the caller's messages untouched
    assert storage.inner.count() == 6
    with_ids = [HumanMessage("hello", id="h1"), AIMessage("hi there", id="a1")]
    engine.index(with_ids, thread_id="t", resource_id="r")
    embedded_before = len(engine.embeddings.calls)  # type: ignore[attr-defined]
    again = engine.index(with_ids, thread_id="t", resource_id="r")
    assert [f.fate for f in again.fates] == ["unchanged", "unchanged"]
    assert again.stored == ()  # not written again, nor its vectors: the index holds them
    assert again.embedded == ()
    assert len(engine.embeddings.calls) == embedded_before
    assert storage.inner.count() == 8
    info = engine.ensure_index()
    engine.vector_store.delete(info.name, message_ids=["h1"])  # a vector lost to a failure
    repaired = engine.index(with_ids, thread_id="t", resource_id="r")
    assert repaired.embedded == ("h1",)  # indexing again is a repair
    assert [f.embedded for f in repaired.fates] == [True, False]
    assert {"h1", "a1"} <= engine.vector_store.message_ids(info.name)


def test_non_string_ids_are_refused(make_engine: EngineFactory) -> None:
    message = HumanMessage("x")
    message.id = 42  # type: ignore[assignment]
    with pytest.raises(InvalidInputError, match="string"):
        make_engine().index([message], thread_id="t", resource_id="r")
    with pytest.raises(InvalidInputError):
        make_engine().recall([HumanMessage("x")], thread_id=7)  # type: ignore[arg-type]


def test_not_messages_are_refused_clearly(make_engine: EngineFactory) -> None:
    with pytest.raises(InvalidInputError):
        make_engine().index(12345, thread_id="t")
    with pytest.raises(InvalidInputError):
        make_engine().recall([{"role": "nobody-knows", "content": 3}], thread_id="t")


def test_a_thread_reused_under_another_resource_is_refused_and_nothing_is_stored(
    make_engine: EngineFactory, storage: RecordingStorage
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP[:2]), thread_id="t", resource_id="alice")
    with pytest.raises(OwnershipError):
        engine.index(turn("b", ["secret"]), thread_id="t", resource_id="bob")
    assert storage.inner.count() == 2


def test_unknown_thread_and_resource_recall_nothing(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t", resource_id="alice")
    messages = [HumanMessage("Lisbon")]
    assert engine.recall(messages, thread_id="nope", resource_id="nobody") == messages
    assert make_engine(scope="thread").recall(messages, thread_id="nope") == messages


def test_resource_scope_without_resource_is_an_error_not_a_guess(
    make_engine: EngineFactory, vectors: RecordingVectors, storage: RecordingStorage
) -> None:
    engine = make_engine()
    with pytest.raises(MissingIdentityError, match="resource_id"):
        engine.recall([HumanMessage("Lisbon")], thread_id="t")
    with pytest.raises(MissingIdentityError, match="resource_id"):
        engine.index([HumanMessage("Lisbon")], thread_id="t")
    assert vectors.of("query") == []
    assert storage.inner.get_thread_owner("t") is None  # no owner guessed, nothing locked


# --- beyond: chunking, budget --------------------------------------------------------------


def test_a_long_message_is_chunked_so_all_of_it_is_indexed(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine(scope="thread")
    long_text = " ".join(f"filler{n}" for n in range(3000)) + " the zebra password is ostrich"
    engine.index([HumanMessage(long_text, id="long")], thread_id="t", resource_id="r")
    records = vectors.of("upsert")[0]["records"]
    assert len(records) > 1
    assert {r.message_id for r in records} == {"long"}
    assert records[0].id == "long#1"
    assert records[-1].id == "long"  # its own vector last: a write cut short lacks it
    hits = engine.search("zebra password ostrich", thread_id="t")
    assert [h.message.id for h in hits] == ["long"]  # deduped by message


def test_the_memory_block_respects_its_budget(make_engine: EngineFactory) -> None:
    engine = make_engine(max_block_chars=600)
    huge = "Lisbon " + "data " * 20_000
    engine.index(
        [HumanMessage(huge, id="big"), AIMessage("ok", id="ok")], thread_id="t1", resource_id="r"
    )
    (block,) = recalled(
        engine.recall([HumanMessage("Lisbon data")], thread_id="t2", resource_id="r")
    )
    assert len(block.content) <= 600
    assert "truncated" in block.content


# --- forgetting and repair -----------------------------------------------------------------


def test_forget_thread_removes_messages_and_vectors_and_retires_the_id(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    engine.index(turn("b", ["Lisbon again"]), thread_id="t2", resource_id="r")
    assert engine.forget_thread("t1") == 4
    found = engine.search("Lisbon trip March", thread_id="t3", resource_id="r")
    assert {h.thread_id for h in found} == {"t2"}
    late = engine.index(turn("c", ["late Lisbon write"]), thread_id="t1", resource_id="r")
    assert late.stored == ()
    assert engine.stats().messages == 1
    assert vectors.inner.message_ids(engine.ensure_index().name) == {"b-0"}


def test_forget_thread_refuses_another_resources_thread(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    with pytest.raises(OwnershipError):
        engine.forget_thread("t1", resource_id="mallory")
    assert engine.stats().messages == 4


def test_forget_resource_removes_everything_of_it_and_only_it(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    engine.index(turn("b", TRIP), thread_id="t2", resource_id="bob")
    assert engine.forget_resource("alice") == 4
    assert engine.search("Lisbon", thread_id="new", resource_id="alice") == []
    assert engine.search("Lisbon", thread_id="new-b", resource_id="bob")
    engine.index(turn("c", ["I'm back"]), thread_id="t3", resource_id="alice")  # allowed
    assert engine.stats(resource_id="alice").messages == 1


def test_a_write_that_lands_while_the_thread_is_forgotten_leaves_no_vector(
    embeddings: FakeEmbeddings, vectors: RecordingVectors
) -> None:
    from langchain_semantic_recall import InMemoryStorage

    class ForgetsDuringEmbedding(FakeEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            if texts == ["in flight"]:
                inner.delete_thread("t")
            return super().embed_documents(texts)

    inner = InMemoryStorage()
    engine = SemanticRecall(
        storage=inner, vector_store=vectors, embeddings=ForgetsDuringEmbedding()
    )
    result = engine.index([HumanMessage("in flight", id="f")], thread_id="t", resource_id="r")
    assert result.stored == ()
    assert vectors.inner.message_ids(engine.ensure_index().name) == set()
    records = build_records(
        [HumanMessage("again", id="g")], thread_id="t", resource_id="r", now=datetime.now(UTC)
    )
    with pytest.raises(ForgottenThreadError):
        inner.put(records)


def test_stats_and_repair_after_lost_vectors(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="r")
    name = engine.ensure_index().name
    vectors.inner.delete(name, message_ids=["a-1", "a-2"])
    stats = engine.stats()
    assert (stats.messages, stats.embeddable, stats.vectors, stats.missing_vectors) == (4, 4, 2, 2)
    assert engine.reindex(missing_only=True) == 2
    assert engine.stats().missing_vectors == 0
    assert engine.reindex(missing_only=True) == 0  # idempotent
    vectors.inner.delete(name, message_ids=["a-1"])
    for flag in ("no", 0):  # once read as True: a repair when a full reindex was asked
        with pytest.raises(InvalidInputError, match="missing_only must be True or False"):
            engine.reindex(missing_only=flag)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="missing_only must be True or False"):
            asyncio.run(engine.areindex(missing_only=flag))  # type: ignore[arg-type]
    assert engine.stats().missing_vectors == 1  # nothing was done


# --- runnable and memory contract ----------------------------------------------------------


def test_runnable_takes_thread_and_resource_from_the_config(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    config = {"configurable": {"thread_id": "t2", "resource_id": "alice"}}
    out = engine.invoke([HumanMessage("Lisbon")], config)
    assert recalled(out)
    with pytest.raises(MissingIdentityError):
        engine.invoke([HumanMessage("Lisbon")])  # no ids at all: loud, not a silent no-op
    batch = engine.batch([[HumanMessage("Lisbon")], [HumanMessage("Alfama")]], config)
    assert all(recalled(b) for b in batch)
    assert next(iter(engine.stream("Lisbon", config)))[0].additional_kwargs["source"] == "memory"


async def test_without_a_thread_the_input_is_not_recalled_as_another_conversation(
    make_engine: EngineFactory,
) -> None:
    """Resource scope needs no thread; then the input's own messages are not echoed back."""
    engine = make_engine(message_range=1)
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    engine.index(turn("b", ["Alfama has trams", "yes"]), thread_id="t0", resource_id="alice")
    resent = [HumanMessage(TRIP[0]), AIMessage(f"  {TRIP[1]}"), HumanMessage("Alfama Lisbon")]
    config = {"configurable": {"resource_id": "alice"}}
    for out in (engine.invoke(resent, config), await engine.ainvoke(resent, config)):
        [block] = recalled(out)
        assert "Alfama is charming" in block.content  # the rest of that conversation
        assert "Alfama has trams" in block.content  # and another one
        assert TRIP[0] not in block.content
        assert TRIP[1] not in block.content
    said = engine.recall(resent, resource_id="alice")  # recall: the same rule
    assert TRIP[0] not in recalled(said)[0].content
    threaded = engine.invoke(
        resent, {"configurable": {"thread_id": "t9", **config["configurable"]}}
    )
    assert TRIP[0] in recalled(threaded)[0].content  # another thread: it is another conversation


async def test_without_a_thread_the_input_is_known_when_its_replies_are_not_recalled(
    make_engine: EngineFactory,
) -> None:
    """A window holds a hit's likely messages only: with the short replies between two
    recalled messages left out, no two recalled messages were consecutive, and the
    input's own conversation came back quoted as another one. Their stored neighbours
    tell (an audit: "My gym locker code is 4711." / "Got it." quoted back)."""
    engine = make_engine(message_range=0, search_mode="dense", top_k=3)
    own = ["my gym locker code is 4711", "ok", "the locker is in the gym basement", "sure"]
    engine.index(turn("own", own), thread_id="t1", resource_id="alice")
    engine.index(turn("b", ["my old gym locker code was 1234", "noted"]), thread_id="t0",
                 resource_id="alice")  # fmt: skip
    resent = [
        HumanMessage(own[0]), AIMessage(own[1]), HumanMessage(own[2]), AIMessage(own[3]),
        HumanMessage("which gym locker code"),
    ]  # fmt: skip
    config = {"configurable": {"resource_id": "alice"}}
    hits = engine.search("which gym locker code", resource_id="alice")
    recalled_own = {m.text for h in hits for m in h.window if m.thread_id == "t1"}
    assert recalled_own == {own[0], own[2]}  # the gap: "ok" is not recalled
    said = engine.recall(resent, resource_id="alice")
    for out in (said, engine.invoke(resent, config), await engine.ainvoke(resent, config)):
        [block] = recalled(out)
        assert "1234" in block.content  # the other conversation is quoted
        assert own[0] not in block.content
        assert own[2] not in block.content


def test_without_a_thread_a_lone_reply_hides_nothing_of_another_conversation(
    make_engine: EngineFactory,
) -> None:
    """A "yes" or "no" of the input matched every recalled "yes" or "no": another
    conversation's question came back without the answer that gives it its meaning."""
    engine = make_engine(message_range=1)
    intake = [AIMessage("Are you allergic to penicillin?", id="q"), HumanMessage("yes", id="a")]
    engine.index(intake, thread_id="intake", resource_id="alice")
    config = {"configurable": {"resource_id": "alice"}}
    for live in (
        [AIMessage("Want dessert?"), HumanMessage("yes"), HumanMessage("allergic penicillin")],
        [AIMessage("Is penicillin fine?"), HumanMessage("yes")],  # the newest: the turn asked
    ):
        [block] = recalled(engine.invoke(live, config))
        assert "Are you allergic to penicillin?" in block.content
        assert "User: yes" in block.content


async def test_runnable_async_and_custom_keys(make_engine: EngineFactory) -> None:
    engine = make_engine(thread_key="conversation", resource_key="user")
    await engine.aindex(turn("a", TRIP), thread_id="t1", resource_id="alice")
    config = {"configurable": {"conversation": "t2", "user": "alice"}}
    out = await engine.ainvoke([HumanMessage("Lisbon")], config)
    assert recalled(out)


@pytest.mark.parametrize(
    "kwargs",
    [{"thread_id": "t1"}, {"resource_id": "bob"}, {"filter": {"project": "apollo"}}, {"k": 1}],
)
async def test_runnable_refuses_keywords_it_would_ignore(
    make_engine: EngineFactory, kwargs: dict[str, object]
) -> None:
    """invoke(messages, config, filter=...) once recalled as if the keyword were not there."""
    engine = make_engine()
    engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    config = {"configurable": {"thread_id": "t2", "resource_id": "alice"}}
    with pytest.raises(InvalidInputError, match="config"):
        engine.invoke([HumanMessage("Lisbon")], config, **kwargs)
    with pytest.raises(InvalidInputError, match="config"):
        await engine.ainvoke([HumanMessage("Lisbon")], config, **kwargs)
    with pytest.raises(InvalidInputError, match="config"):
        engine.bind(**kwargs).invoke([HumanMessage("Lisbon")], config)


def test_memory_contract(make_engine: EngineFactory) -> None:
    engine = make_engine()
    assert engine.memory_variables == ["history"]
    with pytest.raises(InvalidInputError, match="for_thread"):
        engine.load_memory_variables({"input": "hi"})
    alice = engine.for_thread("t1", "alice")
    alice.save_context({"input": "I love Lisbon in March"}, {"output": "Lovely choice"})
    alice.save_context({"input": "yes"}, {"output": "ok"})
    alice.save_context({"input": "yes"}, {"output": "ok"})  # a new turn, not a repeat
    assert engine.stats().messages == 6
    other = engine.for_thread("t2", "alice")
    history = other.load_memory_variables({"input": "Lisbon in March"})["history"]
    assert isinstance(history[0], SystemMessage)
    assert "Lisbon" in history[0].content
    alice.clear()
    assert engine.stats().messages == 0


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ({}, {"output": "ok"}, "no input holds"),
        ({"stop": ["x"]}, {"output": "ok"}, "no input holds"),
        ({"input": "hi", "lang": "en"}, {"output": "ok"}, "several inputs"),
        ({"input": "hi"}, {}, "no output"),
        ({"input": "hi"}, {"output": "ok", "extra": "x"}, "several outputs"),
    ],
)
def test_memory_contract_says_whether_a_key_is_missing_or_ambiguous(
    make_engine: EngineFactory, inputs: dict[str, Any], outputs: dict[str, Any], message: str
) -> None:
    """An empty output read "several outputs []; set output_key": setting the key
    would not have helped, the output was missing."""
    view = make_engine().for_thread("t1", "alice")
    with pytest.raises(InvalidInputError, match=message):
        view.save_context(inputs, outputs)
    assert view.stats().messages == 0


async def test_memory_contract_async(make_engine: EngineFactory) -> None:
    view = make_engine(scope="thread").for_thread("t1", "alice")
    await view.asave_context({"question": "Lisbon trip"}, {"answer": "Sounds fun"})
    history = (await view.aload_memory_variables({"question": "Lisbon"}))["history"]
    assert [m.content for m in history] == ["Lisbon trip", "Sounds fun"]
    await view.aclear()


async def test_async_twins_match_sync(make_engine: EngineFactory) -> None:
    engine = make_engine()
    await engine.aindex(turn("a", TRIP), thread_id="t1", resource_id="alice")
    sync = engine.search("Lisbon trip", thread_id="t2", resource_id="alice")
    both = await asyncio.gather(
        engine.asearch("Lisbon trip", thread_id="t2", resource_id="alice"),
        engine.arecall([HumanMessage("Lisbon trip")], thread_id="t2", resource_id="alice"),
    )
    assert [h.message.id for h in both[0]] == [h.message.id for h in sync]
    assert recalled(both[1])
    assert (await engine.astats()).messages == 4
    assert await engine.areindex(missing_only=True) == 0
    assert await engine.aforget_thread("t1") == 4
    assert await engine.aforget_resource("alice") == 0


def test_a_conversation_title_labels_the_memory_block(make_engine: EngineFactory) -> None:
    engine = make_engine()
    titled = [
        HumanMessage(
            "Lisbon trip in March",
            id="t-0",
            additional_kwargs={"conversation_title": 'Trip "planning"'},
        ),
        AIMessage("Pack layers", id="t-1"),
    ]
    engine.index(titled, thread_id="trip", resource_id="alice")
    engine.index(turn("b", ["Lisbon flights booked"]), thread_id="flights", resource_id="alice")
    (block,) = recalled(engine.recall([HumanMessage("Lisbon")], thread_id="x", resource_id="alice"))
    assert "[conversation \"Trip 'planning'\"]" in block.content  # no quote closes the label
    assert '[conversation "flights"]' in block.content  # no title: the thread id


class _ArrayEmbeddings(FakeEmbeddings):
    """Answers with numpy arrays, and says nothing of its dimension (probed)."""

    def embed_documents(self, texts: list[str]) -> Any:
        import numpy as np

        return np.asarray(super().embed_documents(texts), dtype=np.float32)


def test_an_embedder_answering_numpy_arrays_is_used() -> None:
    """The dimension probe wanted a list: it called the array "no usable vector" (while
    printing it), so every message was stored without a vector and recall found none."""
    embedder = _ArrayEmbeddings()
    embedder.dimension = None  # nothing said: the engine probes it
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=embedder,
        search_mode="dense",
        scope="thread",
    )
    done = memory.index([HumanMessage("peanuts are my allergy", id="m1")], thread_id="t")
    assert (done.error, done.embedded) == (None, ("m1",))
    assert [hit.message.id for hit in memory.search("peanuts are my allergy", thread_id="t")] == [
        "m1"
    ]


def test_a_probe_answered_with_no_vector_is_the_embedder_failing_not_a_type_error() -> None:
    import numpy as np

    from langchain_semantic_recall.engine.vector_space import _probed_dimension

    assert _probed_dimension(np.zeros((1, 4), dtype=np.float32)) == 4
    for answer in (np.asarray(5.0), 5, "ab", [[]], np.zeros(3), None):
        with pytest.raises(SemanticRecallError, match="no usable vector"):
            _probed_dimension(answer)
