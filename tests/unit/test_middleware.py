"""SemanticRecallMiddleware: one recall per user turn, injected per call, indexed at the end."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_semantic_recall import InvalidInputError, MissingIdentityError, OwnershipError
from langchain_semantic_recall.graph import RECALL_KEY
from langchain_semantic_recall.messages import is_recalled
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from tests.fakes import (
    BLOCK_MARKER,
    BOB_SECRETS,
    SECRETS,
    TOPICS,
    FactsMemory,
    FakeChatModel,
    lookup,
)

TOOL_ROUNDS = 3


@pytest.fixture
def memory() -> FactsMemory:
    return FactsMemory()


@dataclass
class UserContext:
    resource_id: str


def thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def agent_for(memory: FactsMemory, model: FakeChatModel, **options: Any) -> Any:
    options.setdefault("tools", [lookup])
    return create_agent(
        model,
        middleware=[SemanticRecallMiddleware(memory.engine)],
        checkpointer=InMemorySaver(),
        **options,
    )


def blocks(call: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in call if is_recalled(m)]


def ask(topic: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"{topic}?")]}


def test_one_recall_per_user_turn_however_many_tool_steps(memory: FactsMemory) -> None:
    model = FakeChatModel(tool_rounds=TOOL_ROUNDS)
    agent = agent_for(memory, model, system_prompt="You are helpful.")
    for n, topic in enumerate(TOPICS[:5]):
        searches, calls = memory.searches(), len(model.calls)
        agent.invoke(ask(topic), thread("alice-chat"), context=UserContext("alice"))
        assert memory.searches() - searches == 1  # one recall for the turn...
        turn_calls = model.calls[calls:]
        assert len(turn_calls) == TOOL_ROUNDS + 1  # ...seen by each of its model calls
        for call in turn_calls:
            assert isinstance(call[0], SystemMessage)
            assert call[0].text == "You are helpful."  # instructions stay first
            (block,) = blocks(call)
            assert SECRETS[n] in block.text
            assert sum(s in block.text for s in SECRETS) == 1
    state = agent.get_state(thread("alice-chat"))
    assert RECALL_KEY not in state.values
    messages = state.values["messages"]
    assert not any(is_recalled(m) for m in messages)
    assert len(messages) == 5 * (2 + 2 * TOOL_ROUNDS)
    for snapshot in agent.get_state_history(thread("alice-chat")):
        assert not any(is_recalled(m) for m in snapshot.values.get("messages", []))
    saver = agent.checkpointer
    raw = repr((saver.storage, saver.writes, saver.blobs)).encode()
    assert b"violin?" in raw
    assert BLOCK_MARKER.encode() not in raw


def test_the_turn_is_indexed_once_when_the_agent_finishes(memory: FactsMemory) -> None:
    agent = agent_for(memory, FakeChatModel(tool_rounds=2))
    agent.invoke(ask("garden"), thread("t"), context={"resource_id": "alice"})
    agent.invoke(ask("piano"), thread("t"), context={"resource_id": "alice"})
    puts = memory.puts("t")
    assert [len(p) for p in puts] == [6, 6]  # question, 2 x (call, result), answer
    stored = memory.stored("t")
    assert [m.role for m in stored[:6]] == ["user", *["assistant", "tool"] * 2, "assistant"]
    assert memory.vector_ids("t") == {
        m.id for m in stored if m.role in ("user", "assistant") and m.text
    }
    assert len(memory.vector_ids("t")) == 4


def test_two_users_are_isolated(memory: FactsMemory) -> None:
    model = FakeChatModel(tool_rounds=1)
    agent = agent_for(memory, model)
    agent.invoke(ask("garden"), thread("alice-chat"), context=UserContext("alice"))
    calls = len(model.calls)
    agent.invoke(ask("garden"), thread("bob-chat"), context=UserContext("bob"))
    for call in model.calls[:calls]:
        text = " ".join(m.text for m in call)
        assert SECRETS[0] in text
        assert BOB_SECRETS[0] not in text
    for call in model.calls[calls:]:
        text = " ".join(m.text for m in call)
        assert BOB_SECRETS[0] in text
        assert SECRETS[0] not in text
        assert "ok: garden?" not in text  # nor alice's conversation itself


async def test_async_agent(memory: FactsMemory) -> None:
    model = FakeChatModel(tool_rounds=2)
    agent = agent_for(memory, model)
    for n, topic in enumerate(TOPICS[:3]):
        searches, calls = memory.searches(), len(model.calls)
        await agent.ainvoke(ask(topic), thread("a"), context={"resource_id": "alice"})
        assert memory.searches() - searches == 1
        for call in model.calls[calls:]:
            (block,) = blocks(call)
            assert SECRETS[n] in block.text
    assert [len(p) for p in memory.puts("a")] == [6, 6, 6]
    state = await agent.aget_state(thread("a"))
    assert not any(is_recalled(m) for m in state.values["messages"])


def test_resource_from_config_when_the_context_has_none(memory: FactsMemory) -> None:
    model = FakeChatModel()
    agent = agent_for(memory, model)
    config = {"configurable": {"thread_id": "b", "resource_id": "bob"}}
    agent.invoke(ask("garden"), config)
    (block,) = blocks(model.calls[0])
    assert BOB_SECRETS[0] in block.text


def test_config_wins_over_context_by_the_one_documented_precedence(memory: FactsMemory) -> None:
    model = FakeChatModel()
    agent = agent_for(memory, model)
    config = {"configurable": {"thread_id": "b", "resource_id": "bob"}}
    agent.invoke(ask("garden"), config, context={"resource_id": "alice"})
    (block,) = blocks(model.calls[0])
    assert BOB_SECRETS[0] in block.text
    assert SECRETS[0] not in block.text
    assert memory.engine.storage.get_thread_owner("b") == "bob"


def test_missing_thread_id_is_a_clear_error(memory: FactsMemory) -> None:
    agent = create_agent(FakeChatModel(), middleware=[SemanticRecallMiddleware(memory.engine)])
    with pytest.raises(MissingIdentityError, match="agent turn needs a conversation id"):
        agent.invoke(ask("garden"), context={"resource_id": "alice"})


def test_a_thread_keeps_its_owner(memory: FactsMemory) -> None:
    model = FakeChatModel()
    agent = agent_for(memory, model)
    agent.invoke(ask("garden"), thread("shared"), context={"resource_id": "alice"})
    with pytest.raises(OwnershipError, match="Start a new thread id"):
        agent.invoke(ask("garden"), thread("shared"), context={"resource_id": "bob"})
    assert len(model.calls) == 1


def test_search_tool_is_scoped_to_the_caller(memory: FactsMemory) -> None:
    model = FakeChatModel(tool_rounds=1)
    agent = create_agent(
        model,
        middleware=[SemanticRecallMiddleware(memory.engine, search_tool=True)],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke(ask("garden"), thread("b"), context={"resource_id": "bob"})
    (result,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert result.name == "search_memory"
    assert BOB_SECRETS[0] in result.text
    assert SECRETS[0] not in result.text


def test_a_wrong_engine_key_or_search_tool_is_refused_when_built(memory: FactsMemory) -> None:
    from langchain_semantic_recall import InvalidOptionError
    from langchain_semantic_recall.graph import IndexNode, RecallNode, create_recall_graph

    engine = memory.engine
    # search_tool="no" is truthy: it gave the agent the tool.
    with pytest.raises(InvalidOptionError, match="search_tool must be True or False"):
        SemanticRecallMiddleware(engine, search_tool="no")  # type: ignore[arg-type]
    # Not an engine: accepted, then an AttributeError at the first turn.
    for build in (
        lambda: SemanticRecallMiddleware("memory"),  # type: ignore[arg-type]
        lambda: RecallNode({"top_k": 3}),  # type: ignore[arg-type]
        lambda: IndexNode(None),  # type: ignore[arg-type]
        lambda: create_recall_graph(FakeChatModel(), "memory"),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidOptionError, match="needs a SemanticRecall as memory"):
            build()
    # A channel name that is not one: each run failed as "the state has no channel".
    with pytest.raises(InvalidOptionError, match="messages_key"):
        RecallNode(engine, messages_key="")
    with pytest.raises(InvalidOptionError, match="recall_key"):
        RecallNode(engine, recall_key=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="messages_key"):
        IndexNode(engine, messages_key=5)  # type: ignore[arg-type]
    assert SemanticRecallMiddleware(engine, search_tool=True).tools


async def test_a_turn_summarized_away_before_it_ends_is_still_stored(memory: FactsMemory) -> None:
    """With LangChain's `SummarizationMiddleware`, a turn long enough to be summarized
    before it ended was stored without the user's message (replaced in the state by the
    summary) and with the summary stored as if the user had said it; the model calls
    after the summary recalled again, for the summary's text."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    summary = "Here is a summary of the conversation to date"
    model = FakeChatModel(
        tool_rounds=lambda question: 0 if summary in question else 3, reply=lambda _: "done"
    )
    summarize = SummarizationMiddleware(
        model=GenericFakeChatModel(messages=iter(["They asked about a garden."] * 4)),
        trigger=("messages", 4),
        keep=("messages", 2),
    )
    middleware: list[Any] = [SemanticRecallMiddleware(memory.engine), summarize]
    agent: Any = create_agent(
        model, tools=[lookup], middleware=middleware, checkpointer=InMemorySaver()
    )
    for run, topic in ((agent.invoke, "garden"), (agent.ainvoke, "piano")):
        searches = memory.searches()
        result = run(ask(topic), thread(topic), context={"resource_id": "alice"})
        if not isinstance(result, dict):
            result = await result
        assert memory.searches() - searches == 1  # one recall for the turn, summary or not
        assert summary in result["messages"][0].text  # the state lost the user's message
        stored = memory.stored(topic)
        assert [m.text for m in stored if m.role == "user"] == [f"{topic}?"]
        assert not any(summary in m.text for m in stored)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_misspelt_input_key_is_a_clear_error_not_an_empty_turn(
    memory: FactsMemory, asynchronous: bool
) -> None:
    """`{"message": [...]}` reached the agent as an empty conversation: the model ran on
    nothing and its answer was stored alone, with no error."""
    model = FakeChatModel()
    agent = agent_for(memory, model)
    wrong = {"message": [("user", "garden?")]}
    ids = {"configurable": {"thread_id": "typo-chat", "resource_id": "alice"}}

    def run() -> object:
        if asynchronous:
            return asyncio.run(agent.ainvoke(wrong, ids))
        return agent.invoke(wrong, ids)

    with pytest.raises(InvalidInputError, match=r"state\['messages'\] is empty"):
        run()
    assert model.calls == []
    assert memory.engine.stats(thread_id="typo-chat", resource_id="alice").messages == 0
