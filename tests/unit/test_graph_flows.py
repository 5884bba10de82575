"""LangGraph flows real apps use: copies of a thread, forks, edits, sub-agents.

Each test runs a real graph (`create_recall_graph`) or agent (`create_agent` with the
middleware) on a LangGraph checkpointer and checks what memory holds afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langchain_semantic_recall import OwnershipError
from langchain_semantic_recall.graph import create_recall_graph
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from tests.fakes import FactsMemory, FakeChatModel


@pytest.fixture
def memory() -> FactsMemory:
    return FactsMemory()


def config(thread_id: str, resource_id: str = "alice") -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "resource_id": resource_id}}


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def texts(memory: FactsMemory, thread_id: str) -> list[str]:
    return [m.text for m in memory.stored(thread_id)]


# --- a copy of a thread (LangGraph's threads.copy, or update_state on a new thread) -------


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_copied_thread_goes_on_and_stores_only_its_own_turns(
    memory: FactsMemory, asynchronous: bool
) -> None:
    """A thread copied with its checkpoint (the copy's messages keep their ids) failed
    every later turn at the index node: OwnershipError, "message id already belongs to
    another thread". Its history stays stored under the thread it was said in."""
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("original"))
    graph.update_state(config("copy"), graph.get_state(config("original")).values, as_node="index")
    for text in ("piano?", "tennis?"):
        if asynchronous:
            asyncio.run(graph.ainvoke(ask(text), config("copy")))
        else:
            graph.invoke(ask(text), config("copy"))
    state = graph.get_state(config("copy")).values["messages"]
    assert [m.text for m in state][-2:] == ["tennis?", "ok: tennis?"]
    assert texts(memory, "original") == ["garden?", "ok: garden?"]
    assert texts(memory, "copy") == ["piano?", "ok: piano?", "tennis?", "ok: tennis?"]
    hits = memory.engine.search("garden", resource_id="alice")
    assert [h.thread_id for h in hits if h.message.text == "garden?"] == ["original"]


def test_a_copied_agent_thread_goes_on(memory: FactsMemory) -> None:
    agent: Any = create_agent(
        FakeChatModel(),
        middleware=[SemanticRecallMiddleware(memory.engine)],
        checkpointer=InMemorySaver(),
    )
    agent.invoke(ask("garden?"), config("original"))
    agent.update_state(config("copy"), agent.get_state(config("original")).values)
    agent.invoke(ask("piano?"), config("copy"))
    assert texts(memory, "original") == ["garden?", "ok: garden?"]
    assert texts(memory, "copy") == ["piano?", "ok: piano?"]


def test_a_copy_of_another_users_thread_is_still_refused(memory: FactsMemory) -> None:
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("alices"))
    values = graph.get_state(config("alices")).values
    graph.update_state(config("bobs", "bob"), values, as_node="index")
    with pytest.raises(OwnershipError, match="another thread"):
        graph.invoke(ask("piano?"), config("bobs", "bob"))
    assert texts(memory, "alices") == ["garden?", "ok: garden?"]
    assert texts(memory, "bobs") == []


# --- an earlier message edited in the state ----------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_earlier_message_edited_in_the_state_is_updated_in_memory(
    memory: FactsMemory, asynchronous: bool
) -> None:
    """`update_state` with an earlier message's id and new text (a redaction) changed the
    conversation, but memory kept, embedded and recalled the old text: only the messages
    after the newest stored one were handed to `index`."""
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("my pin is zebra99", id="pin")]}, config("c"))
    graph.invoke(ask("garden?"), config("c"))
    redacted = HumanMessage("my pin is [redacted]", id="pin")
    graph.update_state(config("c"), {"messages": [redacted]}, as_node="index")
    if asynchronous:
        asyncio.run(graph.ainvoke(ask("piano?"), config("c")))
    else:
        graph.invoke(ask("piano?"), config("c"))
    state = graph.get_state(config("c")).values["messages"]
    assert [(m.id, m.text) for m in memory.stored("c")] == [(m.id, m.text) for m in state]
    hits = memory.engine.search("redacted", thread_id="c", resource_id="alice", scope="thread")
    assert "pin" in {h.message.id for h in hits}  # its vector holds the new text


def test_an_earlier_message_edited_in_an_agents_state_is_updated(memory: FactsMemory) -> None:
    agent: Any = create_agent(
        FakeChatModel(),
        middleware=[SemanticRecallMiddleware(memory.engine)],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("my pin is zebra99", id="pin")]}, config("c"))
    agent.update_state(config("c"), {"messages": [HumanMessage("my pin is [redacted]", id="pin")]})
    agent.invoke(ask("garden?"), config("c"))
    assert texts(memory, "c")[0] == "my pin is [redacted]"
