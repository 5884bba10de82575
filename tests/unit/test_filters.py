"""Metadata filters, time ranges and the recall horizon on every surface, sync and async."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.filters import metadata_conditions, same_value, time_range
from langchain_semantic_recall.graph import RecallNode, RecallState, create_recall_graph
from langchain_semantic_recall.messages import is_recalled
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.retriever import create_memory_search_tool
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeChatModel, FakeEmbeddings

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=200)
APOLLO = {"project": "apollo"}


def ago(days: float) -> str:
    return (NOW - timedelta(days=days)).isoformat()


@pytest.fixture(params=["keyword", "dense"])
def memory(request: pytest.FixtureRequest) -> SemanticRecall:
    """Three remembered lighthouse messages: apollo (old), gemini (recent), untagged."""
    engine = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode=request.param,
        message_range=0,
        top_k=5,
    )
    old = HumanMessage("the lighthouse keeper apollo", additional_kwargs={"created_at": ago(200)})
    engine.index([old], thread_id="t1", resource_id="alice", metadata=APOLLO)
    tagged = {"metadata": {"project": "gemini", "urgent": True}, "created_at": ago(2)}
    engine.index(
        [HumanMessage("the lighthouse lamp gemini", additional_kwargs=tagged)],
        thread_id="t2",
        resource_id="alice",
    )
    engine.index([HumanMessage("a lighthouse postcard")], thread_id="t3", resource_id="alice")
    engine.index(
        [HumanMessage("bob's lighthouse apollo")],
        thread_id="b1",
        resource_id="bob",
        metadata=APOLLO,
    )
    return engine


def texts(hits: Any) -> set[str]:
    return {hit.message.text for hit in hits}


def recalled(messages: list[BaseMessage]) -> str:
    """Every recalled text (same-thread messages and the cross-thread block), joined."""
    return "\n".join(m.text for m in messages if is_recalled(m))


# --- the pure rules ---------------------------------------------------------------------


def test_values_match_by_kind() -> None:
    assert same_value(1.0, 1)
    assert not same_value(True, 1)
    assert not same_value(1, True)
    assert not same_value("1", 1)
    assert metadata_conditions({"b": 1, "a": {"$in": [1, 1.0, True]}}) == (
        ("a", (1, True)),
        ("b", (1,)),
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"thread_id": "x"}, "reserved"),
        ({"meta_x": "x"}, "reserved"),
        ({"x y": 1}, "not a metadata key"),
        ({"café": 1}, "an ASCII letter"),  # "a letter" once, and é is one
        ({"$and": [{"x": 1}]}, r"\$and and \$or are not supported: every key must match"),
        ({"$or": [{"x": 1}, {"y": 2}]}, r"\$or.*\$in"),
        ({"x": [1]}, "list values are not kept"),
        ({"x": {"$gt": 1}}, r"\$gt"),
        ({"x": {"$in": []}}, "at least one"),
        ({"x": {"$in": "ab"}}, "list of values"),
        ({"x": float("nan")}, "finite"),
        ("project", "mapping"),
    ],
)
def test_bad_filters_are_refused(bad: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        metadata_conditions(bad)


def test_time_bounds() -> None:
    assert time_range(timedelta(days=1), None, now=NOW) == (NOW - timedelta(days=1), None)
    assert time_range(None, None, now=NOW, horizon=timedelta(days=9))[0] == NOW - timedelta(days=9)
    with pytest.raises(InvalidInputError, match="time zone"):
        time_range(datetime(2024, 1, 1), None, now=NOW)
    with pytest.raises(InvalidInputError, match="before until"):
        time_range(NOW, NOW, now=NOW)
    with pytest.raises(InvalidInputError, match="negative"):
        time_range(timedelta(days=-1), None, now=NOW)
    # before year 1: a since or a horizon there is no bound; an until there holds nothing
    ages = timedelta(days=999_999_999)
    assert time_range(ages, None, now=NOW) == (None, None)
    assert time_range(None, None, now=NOW, horizon=ages) == (None, None)
    with pytest.raises(InvalidInputError, match="before year 1"):
        time_range(None, ages, now=NOW)


async def test_bounds_before_year_one_are_options_not_crashes(memory: SemanticRecall) -> None:
    ages = timedelta(days=10**6)
    node = RecallNode(memory, since=ages)
    assert node.narrowing.since == ages
    with pytest.raises(InvalidOptionError, match="before year 1"):
        create_recall_graph(FakeChatModel(), memory, until=ages)
    assert len(memory.search("lighthouse", resource_id="alice", since=ages)) == 3
    with pytest.raises(InvalidInputError, match="before year 1"):
        await memory.asearch("lighthouse", resource_id="alice", until=ages)
    forever = memory.with_options(horizon=ages)
    ask = [HumanMessage("lighthouse keeper apollo?")]
    got = forever.recall(ask, thread_id="t2", resource_id="alice")
    assert "keeper apollo" in recalled(got)  # recalled, not a logged failure


async def test_aware_bounds_outside_the_utc_calendar_are_input_errors(
    memory: SemanticRecall,
) -> None:
    """Year 1 at +01:00 lies before year 1 in UTC: it once raised a bare OverflowError."""
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    late = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))
    cases: list[dict[str, Any]] = [
        {"since": early},
        {"until": late},
        {"since": early, "until": NOW},
    ]
    for bounds in cases:
        with pytest.raises(InvalidInputError, match="years 1-9999 in UTC"):
            memory.search("lighthouse", resource_id="alice", **bounds)
        with pytest.raises(InvalidInputError, match="years 1-9999 in UTC"):
            await memory.asearch("lighthouse", resource_id="alice", **bounds)
    with pytest.raises(InvalidOptionError, match="years 1-9999 in UTC"):
        RecallNode(memory, since=early)


# --- index: which metadata is kept --------------------------------------------------------


async def test_index_keeps_the_calls_metadata_under_the_messages_own(
    memory: SemanticRecall,
) -> None:
    own = {"metadata": {"project": "mine", "n": 2}}
    message = HumanMessage("the harbour", id="h1", additional_kwargs=own)
    memory.index([message], thread_id="t9", resource_id="alice", metadata={"project": "x", "k": 1})
    hits = memory.search("harbour", resource_id="alice", filter={"project": "mine", "k": 1})
    assert [dict(h.message.metadata) for h in hits] == [{"project": "mine", "n": 2, "k": 1}]
    again = await memory.aindex(
        [HumanMessage("the harbour", id="h1")], thread_id="t9", resource_id="alice"
    )
    assert [f.fate for f in again.fates] == ["updated"]  # its metadata changed: rewritten
    assert await memory.asearch("harbour", resource_id="alice", filter={"k": 1}) == []


@pytest.mark.parametrize(
    "metadata", [{"tags": ["a"]}, {"nested": {"a": 1}}, {"thread_id": "t"}, "apollo"]
)
async def test_index_refuses_metadata_it_cannot_keep(
    memory: SemanticRecall, metadata: object
) -> None:
    with pytest.raises(InvalidInputError):
        memory.index([HumanMessage("x")], thread_id="t9", resource_id="alice", metadata=metadata)  # type: ignore[arg-type]
    carried = HumanMessage("x", additional_kwargs={"metadata": metadata})
    with pytest.raises(InvalidInputError):
        await memory.aindex([carried], thread_id="t9", resource_id="alice")
    assert memory.storage.count() == 4  # nothing of either call was stored


@pytest.mark.parametrize("value", ["a\x00b", "a\ud800b"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_text_value_no_backend_keeps_is_refused_on_every_backend(
    value: str, backend: str
) -> None:
    """A NUL or a lone surrogate in a metadata value: one clear refusal everywhere.

    Otherwise each backend did something else: memory kept and matched it, SQLite kept a
    NUL but never matched it and raised `UnicodeEncodeError` on a surrogate, and
    PostgreSQL's JSONB refuses both.
    """
    storage = InMemoryStorage() if backend == "memory" else SQLiteStorage(":memory:")
    engine = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    message = HumanMessage("the lighthouse", id="m1")
    with pytest.raises(InvalidInputError, match=r"\['tag'\]: .* a NUL character"):
        engine.index([message], thread_id="t1", resource_id="alice", metadata={"tag": value})
    carried = HumanMessage("the lamp", id="m2", additional_kwargs={"metadata": {"tag": value}})
    with pytest.raises(InvalidInputError, match="'tag'"):
        await engine.aindex([carried], thread_id="t1", resource_id="alice")
    assert storage.count() == 0  # nothing of either call was stored
    with pytest.raises(InvalidInputError, match="'tag'"):
        engine.search("lighthouse", resource_id="alice", filter={"tag": value})
    with pytest.raises(InvalidInputError, match="'tag'"):
        await engine.asearch("lighthouse", resource_id="alice", filter={"tag": {"$in": [value]}})


# --- search and recall --------------------------------------------------------------------


async def test_search_filters_sync_and_async(memory: SemanticRecall) -> None:
    everything = {
        "the lighthouse keeper apollo",
        "the lighthouse lamp gemini",
        "a lighthouse postcard",
    }
    assert texts(memory.search("lighthouse", resource_id="alice")) == everything
    assert texts(memory.search("lighthouse", resource_id="alice", filter=APOLLO)) == {
        "the lighthouse keeper apollo"
    }
    tagged = {"project": {"$in": ["apollo", "gemini"]}}
    found = await memory.asearch("lighthouse", resource_id="alice", filter=tagged)
    assert texts(found) == everything - {"a lighthouse postcard"}
    assert texts(
        await memory.asearch("lighthouse", resource_id="alice", filter={"urgent": True})
    ) == {"the lighthouse lamp gemini"}


async def test_since_and_until_sync_and_async(memory: SemanticRecall) -> None:
    recent = memory.search("lighthouse", resource_id="alice", since=timedelta(days=30))
    assert texts(recent) == {"the lighthouse lamp gemini", "a lighthouse postcard"}
    before = await memory.asearch("lighthouse", resource_id="alice", until=NOW - timedelta(days=30))
    assert texts(before) == {"the lighthouse keeper apollo"}
    window = {"since": NOW - timedelta(days=3), "until": NOW - timedelta(days=1)}
    assert texts(memory.search("lighthouse", resource_id="alice", **window)) == {
        "the lighthouse lamp gemini"
    }
    with pytest.raises(InvalidInputError, match="before until"):
        memory.search("lighthouse", resource_id="alice", since=NOW, until=OLD)


async def test_recall_filters_sync_and_async(memory: SemanticRecall) -> None:
    ask = [HumanMessage("lighthouse?")]
    got = recalled(memory.recall(ask, thread_id="new", resource_id="alice", filter=APOLLO))
    assert "keeper apollo" in got
    assert "gemini" not in got
    assert "postcard" not in got
    assert "bob" not in got
    got = recalled(await memory.arecall(ask, thread_id="new", resource_id="alice", filter=APOLLO))
    assert "keeper apollo" in got
    assert "gemini" not in got
    late = memory.recall(ask, thread_id="t1", resource_id="alice", since=timedelta(days=30))
    assert "keeper" not in recalled(late)
    assert "gemini" in recalled(late)


async def test_the_horizon_bounds_recall_not_search(memory: SemanticRecall) -> None:
    near = memory.with_options(horizon=timedelta(days=30))
    ask = [HumanMessage("lighthouse keeper apollo?")]
    assert "keeper" in recalled(memory.recall(ask, thread_id="t2", resource_id="alice"))
    assert "keeper" not in recalled(near.recall(ask, thread_id="t2", resource_id="alice"))
    assert "keeper" not in recalled(await near.arecall(ask, thread_id="t2", resource_id="alice"))
    assert "the lighthouse keeper apollo" in texts(near.search("keeper", resource_id="alice"))
    # an explicit since wins over the horizon
    wide = near.recall(ask, thread_id="t2", resource_id="alice", since=timedelta(days=365))
    assert "keeper" in recalled(wide)
    with pytest.raises(InvalidOptionError, match="horizon"):
        memory.with_options(horizon=30)


async def test_relative_bounds_count_from_the_turns_own_time(memory: SemanticRecall) -> None:
    """A replayed turn dated 199 days ago still sees the message written a day before it."""
    near = memory.with_options(horizon=timedelta(days=30))
    then = HumanMessage("lighthouse keeper apollo?", additional_kwargs={"created_at": ago(199)})
    got = near.recall([then], thread_id="t2", resource_id="alice")
    assert "keeper apollo" in recalled(got)
    assert "keeper apollo" in recalled(
        await near.arecall([then], thread_id="t2", resource_id="alice")
    )
    now = HumanMessage("lighthouse keeper apollo?")  # today: 200 days is past the horizon
    assert "keeper apollo" not in recalled(near.recall([now], thread_id="t2", resource_id="alice"))


async def test_the_run_config_narrows_runnable_search_and_recall(memory: SemanticRecall) -> None:
    config = {"configurable": {"resource_id": "alice", "thread_id": "t2", "recall_filter": APOLLO}}
    assert texts(memory.search("lighthouse", config=config)) == {"the lighthouse keeper apollo"}
    assert texts(await memory.asearch("lighthouse", config=config)) == {
        "the lighthouse keeper apollo"
    }
    # an explicit filter narrows the config's further (apollo's message is not urgent)
    assert texts(memory.search("lighthouse", config=config, filter={"urgent": True})) == set()
    ask = [HumanMessage("lighthouse?")]
    assert "keeper" in recalled(memory.invoke(ask, config))
    assert "postcard" not in recalled(memory.invoke(ask, config))
    assert "postcard" not in recalled(await memory.ainvoke(ask, config))
    bad = {"configurable": {"resource_id": "alice", "recall_filter": {"resource_id": "bob"}}}
    with pytest.raises(InvalidInputError, match="reserved"):
        memory.search("lighthouse", config=bad)
    with pytest.raises(InvalidInputError, match="reserved"):
        memory.invoke(ask, bad)


async def test_the_calls_narrowing_and_the_runs_both_hold_on_every_surface(
    memory: SemanticRecall,
) -> None:
    """A filter or range given on a call or a component narrows the run's further.

    It once replaced the run's: `recall_filter={"project": "apollo"}` in the config and
    `filter={"urgent": True}` on the retriever found gemini's message, outside the run's
    filter; `recall_since=timedelta(days=30)` and `since=timedelta(days=365)` found a
    message of 200 days ago.
    """
    ids = {"resource_id": "alice", "thread_id": "t9"}
    ask = [HumanMessage("lighthouse keeper lamp?")]
    runs: list[tuple[dict[str, Any], dict[str, Any], set[str]]] = [
        ({"recall_filter": APOLLO}, {"filter": {"urgent": True}}, set()),
        (
            {"recall_since": timedelta(days=30)},
            {"since": timedelta(days=365)},
            {"the lighthouse lamp gemini", "a lighthouse postcard"},
        ),
        (
            {"recall_filter": {"project": {"$in": ["apollo", "gemini"]}}},
            {"filter": {"project": {"$in": ["gemini", "zeus"]}}},
            {"the lighthouse lamp gemini"},
        ),
        (
            {"recall_until": NOW - timedelta(days=30)},
            {"until": NOW, "filter": APOLLO},
            {"the lighthouse keeper apollo"},
        ),
    ]
    for configurable, options, expected in runs:
        config: Any = {"configurable": {**ids, **configurable}}
        assert texts(memory.search("lighthouse", config=config, **options)) == expected
        assert texts(await memory.asearch("lighthouse", config=config, **options)) == expected
        retriever = memory.as_retriever(**options)
        for docs in (
            retriever.invoke("lighthouse", config),
            await retriever.ainvoke("lighthouse", config),
        ):
            assert {d.metadata["text"] for d in docs} == expected
        tool = create_memory_search_tool(memory, **options)
        for answer in (
            tool.invoke({"query": "lighthouse"}, config),
            await tool.ainvoke({"query": "lighthouse"}, config),
        ):
            assert all(text in answer for text in expected)
            assert not any(
                text in answer
                for text in texts(memory.search("lighthouse", resource_id="alice")) - expected
            )
        shown = [
            recalled(memory.recall(ask, config=config, **options)),
            recalled(await memory.arecall(ask, config=config, **options)),
            recalled(
                graph_with(memory, **options)
                .invoke({"messages": ask}, config)["recalled_memory"]
                .messages
            ),
            recalled(
                (await graph_with(memory, **options).ainvoke({"messages": ask}, config))[
                    "recalled_memory"
                ].messages
            ),
        ]
        for got in shown:
            for text in ("keeper apollo", "lamp gemini", "postcard"):
                assert (text in got) == any(text in e for e in expected), (
                    configurable,
                    options,
                    got,
                )
    # the horizon still bounds a recall whose call and run both give only an until
    near = memory.with_options(horizon=timedelta(days=30))
    late: Any = {"configurable": {**ids, "recall_until": NOW + timedelta(days=2)}}
    for got in (
        recalled(near.recall(ask, config=late, until=NOW + timedelta(days=1))),
        recalled(await near.arecall(ask, config=late, until=NOW + timedelta(days=1))),
    ):
        assert "lamp gemini" in got
        assert "keeper apollo" not in got
    # on one key, no value both allow: an error, never a silent empty answer
    config = {"configurable": {**ids, "recall_filter": APOLLO}}
    with pytest.raises(InvalidInputError, match=r"'project'.*no value"):
        memory.search("lighthouse", config=config, filter={"project": "gemini"})
    with pytest.raises(InvalidInputError, match=r"'project'.*no value"):
        await graph_with(memory, filter={"project": "gemini"}).ainvoke({"messages": ask}, config)


@pytest.mark.parametrize("key", ["recall_filters", "recall_fitler", "recall_sinse", "recall_from"])
async def test_a_misspelt_narrowing_key_is_refused_on_every_surface(
    memory: SemanticRecall, key: str
) -> None:
    """A misspelt `recall_filter` once recalled, searched and answered unfiltered."""
    config = {"configurable": {"resource_id": "alice", "thread_id": "t9", key: APOLLO}}
    ask = [HumanMessage("lighthouse?")]
    agent = create_agent(FakeChatModel(), middleware=[SemanticRecallMiddleware(memory)])
    graph = create_recall_graph(FakeChatModel(), memory)
    calls = {
        "search": lambda: memory.search("lighthouse", config=config),
        "recall": lambda: memory.recall(ask, config=config),
        "invoke": lambda: memory.invoke(ask, config),
        "retriever": lambda: memory.as_retriever().invoke("lighthouse", config),
        "tool": lambda: memory.as_tool().invoke({"query": "lighthouse"}, config),
        "graph": lambda: graph.invoke({"messages": ask}, config),
        "agent": lambda: agent.invoke({"messages": ask}, config),
    }
    acalls = {
        "asearch": lambda: memory.asearch("lighthouse", config=config),
        "arecall": lambda: memory.arecall(ask, config=config),
        "ainvoke": lambda: memory.ainvoke(ask, config),
        "aretriever": lambda: memory.as_retriever().ainvoke("lighthouse", config),
        "atool": lambda: memory.as_tool().ainvoke({"query": "lighthouse"}, config),
        "agraph": lambda: graph.ainvoke({"messages": ask}, config),
        "aagent": lambda: agent.ainvoke({"messages": ask}, config),
    }
    for call in calls.values():
        with pytest.raises(InvalidInputError, match=key):
            call()
    for acall in acalls.values():
        with pytest.raises(InvalidInputError, match=key):
            await acall()
    assert memory.stats(thread_id="t9").messages == 0  # the turn was not stored either


# --- retriever and tool -------------------------------------------------------------------


async def test_retriever_filters_sync_and_async(memory: SemanticRecall) -> None:
    config = {"configurable": {"resource_id": "alice"}}
    retriever = memory.as_retriever(filter=APOLLO)
    docs = retriever.invoke("lighthouse", config)
    assert [d.metadata["text"] for d in docs] == ["the lighthouse keeper apollo"]
    kwargs = memory.as_retriever(search_kwargs={"filter": {"urgent": True}})
    docs = await kwargs.ainvoke("lighthouse", config)
    assert [d.metadata["text"] for d in docs] == ["the lighthouse lamp gemini"]
    recent = memory.as_retriever(since=timedelta(days=30))
    assert "the lighthouse keeper apollo" not in {
        d.metadata["text"] for d in recent.invoke("lighthouse", config)
    }
    with pytest.raises(InvalidOptionError, match="reserved"):
        memory.as_retriever(filter={"resource_id": "bob"})
    with pytest.raises(InvalidOptionError, match="once"):
        memory.as_retriever(filter=APOLLO, search_kwargs={"filter": APOLLO})


async def test_tool_filters_sync_and_async(memory: SemanticRecall) -> None:
    config = {"configurable": {"resource_id": "alice", "thread_id": "t3"}}
    tool = create_memory_search_tool(memory, filter=APOLLO)
    assert "keeper" in tool.invoke({"query": "lighthouse"}, config)
    assert "gemini" not in tool.invoke({"query": "lighthouse"}, config)
    answer = await tool.ainvoke({"query": "lighthouse"}, config)
    assert "keeper" in answer
    assert "gemini" not in answer
    recent = create_memory_search_tool(memory, since=timedelta(days=30))
    assert "keeper" not in await recent.ainvoke({"query": "lighthouse"}, config)
    with pytest.raises(InvalidOptionError, match="time zone"):
        create_memory_search_tool(memory, since=datetime(2024, 1, 1))


# --- graph node and middleware -------------------------------------------------------------


def graph_with(memory: SemanticRecall, **options: Any) -> Any:
    builder = StateGraph(RecallState)
    builder.add_node("recall", RecallNode(memory, **options))
    builder.add_edge(START, "recall")
    return builder.compile()


async def test_recall_node_takes_options_then_config_sync_and_async(
    memory: SemanticRecall,
) -> None:
    ask = {"messages": [HumanMessage("lighthouse?")]}
    config = {"configurable": {"resource_id": "alice", "thread_id": "t9"}}

    def seen(state: dict[str, Any]) -> str:
        return recalled(state["recalled_memory"].messages)

    assert "keeper" in seen(graph_with(memory).invoke(ask, config))
    filtered = graph_with(memory, filter={"urgent": True})
    shown = seen(filtered.invoke(ask, config))
    assert "gemini" in shown
    assert "keeper" not in shown
    assert "postcard" not in shown
    assert "keeper" not in seen(await filtered.ainvoke(ask, config))
    by_config = {"configurable": {**config["configurable"], "recall_filter": {"urgent": True}}}
    assert "keeper" not in seen(graph_with(memory).invoke(ask, by_config))
    horizon = graph_with(memory, horizon=timedelta(days=30))
    assert "keeper" not in seen(await horizon.ainvoke(ask, config))
    with pytest.raises(InvalidOptionError, match="reserved"):
        RecallNode(memory, filter={"thread_id": "x"})


async def test_create_recall_graph_takes_the_nodes_options_sync_and_async(
    memory: SemanticRecall,
) -> None:
    """The graph's filter reaches its recall node; the run config fills what it leaves."""
    model = FakeChatModel()
    graph = create_recall_graph(model, memory, filter=APOLLO, checkpointer=InMemorySaver())
    config = {"configurable": {"resource_id": "alice", "thread_id": "g1"}}
    graph.invoke({"messages": [HumanMessage("lighthouse?")]}, config)
    await graph.ainvoke({"messages": [HumanMessage("lighthouse again?")]}, config)
    assert len(model.calls) == 2
    for call in model.calls:  # sync and async: apollo only, and never bob's apollo
        shown = recalled(call)
        assert "keeper apollo" in shown
        assert "gemini" not in shown
        assert "postcard" not in shown
        assert "bob" not in shown

    def shown_by(
        graph: Any, model: FakeChatModel, configurable: dict[str, Any], text: str = "lighthouse?"
    ) -> str:
        """What the model saw recalled (the earlier turns' own messages are stored too)."""
        ask = {"messages": [HumanMessage(text)]}
        graph.invoke(ask, {"configurable": {"resource_id": "alice", **configurable}})
        return recalled(model.calls[-1])

    # the graph's own filter and the config's both hold (apollo's message is not urgent)
    urgent = {"recall_filter": {"urgent": True}}
    assert shown_by(graph, model, {"thread_id": "g2", **urgent}) == ""
    # a graph without options takes the config's filter
    plain_model = FakeChatModel()
    plain = create_recall_graph(plain_model, memory)
    shown = shown_by(plain, plain_model, {"thread_id": "g3", **urgent})
    assert "gemini" in shown
    assert "keeper" not in shown
    assert "postcard" not in shown
    # part by part: the graph's filter and the config's since both hold (apollo is old)
    recent = {"recall_since": timedelta(days=30)}
    assert shown_by(graph, model, {"thread_id": "g4", **recent}) == ""
    # and the graph's horizon bounds recall like the node's
    near_model = FakeChatModel()
    near = create_recall_graph(near_model, memory, horizon=timedelta(days=30))
    shown = shown_by(near, near_model, {"thread_id": "g5"}, "lighthouse keeper lamp gemini?")
    assert "the lighthouse lamp gemini" in shown  # t2's text (the turns' own differ)
    assert "keeper apollo" not in shown
    # since and until, absolute or relative, reach the node too
    late_model = FakeChatModel()
    late = create_recall_graph(late_model, memory, since=NOW - timedelta(days=30))
    shown = shown_by(late, late_model, {"thread_id": "g6"}, "lighthouse keeper lamp gemini?")
    assert "the lighthouse lamp gemini" in shown
    assert "keeper apollo" not in shown
    early_model = FakeChatModel()
    early = create_recall_graph(early_model, memory, until=timedelta(days=30))
    shown = shown_by(early, early_model, {"thread_id": "g7"}, "lighthouse keeper lamp gemini?")
    assert "keeper apollo" in shown
    assert "the lighthouse lamp gemini" not in shown


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"filter": {"resource_id": "bob"}}, "reserved"),
        ({"filter": {"thread_id": "t1"}}, "reserved"),
        ({"filter": {"project": {"$gt": 1}}}, "not supported"),
        ({"filter": ["apollo"]}, "mapping"),
        ({"since": datetime(2024, 1, 1)}, "time zone"),
        ({"until": timedelta(days=-1)}, "negative"),
        ({"since": NOW, "until": OLD}, "before until"),
        ({"horizon": timedelta(0)}, "horizon"),
        ({"horizon": 30}, "horizon"),
    ],
)
def test_create_recall_graph_refuses_bad_options_at_construction(
    memory: SemanticRecall, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        create_recall_graph(FakeChatModel(), memory, **options)


async def test_middleware_takes_options_then_config_sync_and_async(
    memory: SemanticRecall,
) -> None:
    model = FakeChatModel()
    middleware = SemanticRecallMiddleware(memory, filter={"urgent": True}, search_tool=True)
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"resource_id": "alice", "thread_id": "agent-1"}}
    agent.invoke({"messages": [HumanMessage("lighthouse?")]}, config)
    await agent.ainvoke({"messages": [HumanMessage("lighthouse again?")]}, config)
    shown = "\n".join(recalled(call) for call in model.calls)
    assert "gemini" in shown
    assert "keeper" not in shown
    assert "postcard" not in shown
    assert middleware.tools[0].narrowing == {"filter": {"urgent": True}}  # type: ignore[attr-defined]
    plain = FakeChatModel()
    agent = create_agent(plain, middleware=[SemanticRecallMiddleware(memory)])
    narrowed = {
        "configurable": {
            **config["configurable"],
            "thread_id": "agent-2",
            "recall_since": timedelta(days=30),
        }
    }
    await agent.ainvoke({"messages": [HumanMessage("lighthouse keeper?")]}, narrowed)
    assert not any(
        "keeper apollo" in m.text for call in plain.calls for m in call if is_recalled(m)
    )
    with pytest.raises(InvalidOptionError, match="horizon"):
        SemanticRecallMiddleware(memory, horizon=timedelta(0))


class SharedStorage(InMemoryStorage):
    """An in-memory storage that gives a fixed (maybe wrong) estimate of a filter's share."""

    def __init__(self, share: float | None) -> None:
        super().__init__()
        self.share = share

    def _kept_share(self, scope: ScopeFilter) -> float | None:
        return self.share


@pytest.mark.parametrize("share", [None, 0.05, 0.5, 1.0])
@pytest.mark.parametrize("looks", [(), (4,), (4, 8), (64,), (4, 64), (4, 256)])
async def test_the_unfiltered_first_look_finds_what_the_index_filter_finds(
    monkeypatch: pytest.MonkeyPatch, looks: tuple[int, ...], share: float | None
) -> None:
    """Whatever the looks find or miss, a filtered dense search is the exact filtered top k,
    however wrong the storage's estimate of the share the filter keeps (a rare tag kept 3
    of 40 here). No looks leave the filtering to the index: the reference.
    """
    from langchain_semantic_recall.engine import search_ops

    monkeypatch.setattr(search_ops, "LOOKS", looks)
    engine = SemanticRecall(
        storage=SharedStorage(share),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="dense",
        top_k=3,
        message_range=0,
    )
    words = ["harbour", "lighthouse", "keeper", "lamp", "storm", "boat"]
    for n in range(40):
        text = f"{words[n % 6]} {words[(n * 5) % 6]} note {n}"
        tag = {"project": "rare"} if n % 13 == 0 else {"project": "common"}
        engine.index([HumanMessage(text, id=f"m{n}")], thread_id="t", resource_id="r", metadata=tag)
    rare = {"project": "rare"}
    found = engine.search("lighthouse keeper", resource_id="r", filter=rare)
    assert {h.message.id for h in found} == {"m0", "m13", "m26"}  # every rare one, 3 = top_k
    again = await engine.asearch("lighthouse keeper", resource_id="r", filter=rare)
    assert [h.message.id for h in again] == [h.message.id for h in found]
    common = engine.search("lighthouse keeper", resource_id="r", filter={"project": "common"})
    monkeypatch.setattr(search_ops, "LOOKS", ())
    reference = engine.search("lighthouse keeper", resource_id="r", filter={"project": "common"})
    assert [h.score for h in common] == [h.score for h in reference]  # ties may swap places
    assert {h.message.id for h in common if h.score > common[-1].score} == {
        h.message.id for h in reference if h.score > reference[-1].score
    }


async def test_a_named_period_counts_from_the_turns_own_time() -> None:
    """ "Last week" in a replayed turn of May 2023 means a week before it, not before today."""
    engine = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="keyword",
        message_range=0,
        top_k=1,
    )
    turn_time = datetime(2023, 5, 10, 12, 0, tzinfo=UTC)
    # A week to the day before: inside the calendar week before, whatever the weekday (six
    # days before a Sunday is that week's Monday, and this test failed on Sundays).
    written = {"alpha": turn_time - timedelta(days=7), "omega": NOW - timedelta(days=7)}
    for word, when in written.items():
        said = HumanMessage(
            f"the lighthouse plan {word}", additional_kwargs={"created_at": when.isoformat()}
        )
        engine.index([said], thread_id=word, resource_id="alice")
    question = "what was the lighthouse plan last week?"
    ask = HumanMessage(question, additional_kwargs={"created_at": turn_time.isoformat()})
    for got in (
        engine.recall([ask], thread_id="new", resource_id="alice"),
        await engine.arecall([ask], thread_id="new", resource_id="alice"),
    ):
        assert "plan alpha" in recalled(got)  # a week before the turn
        assert "plan omega" not in recalled(got)
    today = engine.search(question, resource_id="alice")  # a search's own time is now
    assert [h.message.text for h in today] == ["the lighthouse plan omega"]


async def test_a_turn_dated_in_year_one_still_recalls() -> None:
    """A client that sends its unset clock (`0001-01-01T00:00:00Z`) as the turn's time:
    "last week" names no period there, and recall still runs. Before: `OverflowError`,
    logged as "recall failed", and the turn went on without memory."""
    engine = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="keyword",
        message_range=0,
        top_k=1,
    )
    said = HumanMessage("the lighthouse plan alpha")
    engine.index([said], thread_id="old", resource_id="alice")
    unset = {"created_at": "0001-01-01T00:00:00Z"}
    ask = HumanMessage("what was the lighthouse plan last week?", additional_kwargs=unset)
    for got in (
        engine.recall([ask], thread_id="new", resource_id="alice"),
        await engine.arecall([ask], thread_id="new", resource_id="alice"),
    ):
        assert "plan alpha" in recalled(got)


class _Chunking(FakeEmbeddings):
    """Splits a message into chunks at `|`: a message may hold many vectors."""

    def split_text(self, text: str) -> list[str]:
        return text.split("|")


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
async def test_a_filtered_search_finds_messages_behind_other_messages_chunks(mode: str) -> None:
    """The unfiltered first look reads vectors, not messages: chunks must not end it early."""
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=_Chunking(),
        search_mode=mode,
        message_range=0,
        top_k=5,
        threshold=0.0,
    )
    near = [HumanMessage("|".join(["lighthouse"] * 10)) for _ in range(30)]  # 300 vectors
    memory.index(near, thread_id="t1", resource_id="alice", metadata={"project": "b"})
    far = [HumanMessage(f"lighthouse keeper boat ship sea {i}") for i in range(5)]
    memory.index(far, thread_id="t2", resource_id="alice", metadata={"project": "a"})
    options: dict[str, Any] = {"resource_id": "alice", "filter": {"project": "a"}}
    hits = memory.search("lighthouse", **options)
    assert len(hits) == 5
    assert {hit.thread_id for hit in hits} == {"t2"}
    assert [h.message.id for h in await memory.asearch("lighthouse", **options)] == [
        h.message.id for h in hits
    ]


@pytest.mark.parametrize(
    ("share", "looks"),
    [
        (None, [256, 1024]),  # no estimate: a small look, then a wide one
        (0.5, [128, 1024]),  # broad filters: a look a little over 1.25 k / share
        (0.25, [256, 1024]),
        (1 / 12, [768, 1024]),  # a twelfth: one look of about 1.25 k / share
        (0.01, [1024]),  # rarer than the widest look can serve: that look, then the index
        (0.0, [1024]),  # the sample kept none: the same
    ],
)
def test_a_filtered_search_sizes_its_look_by_the_share_kept(
    share: float | None, looks: list[int]
) -> None:
    from langchain_semantic_recall.engine.search_ops import _looks

    assert _looks(50, share) == looks
    assert _looks(1024, share) == []  # no look can hold k: the index filters at once
    assert _looks(1000, share) == [1024]
