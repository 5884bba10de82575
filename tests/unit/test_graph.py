"""LangGraph nodes: recall reaches the model, never the checkpoint; each turn stored once."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langchain_semantic_recall import (
    InvalidInputError,
    InvalidOptionError,
    MissingIdentityError,
    OwnershipError,
    SemanticRecall,
)
from langchain_semantic_recall.graph import (
    RECALL_KEY,
    IndexNode,
    RecalledMemory,
    RecallNode,
    RecallState,
    create_recall_graph,
    current_turn,
    inject_recalled,
    with_recall,
)
from langchain_semantic_recall.messages import MEMORY_SOURCE, is_recalled
from tests.fakes import (
    BLOCK_MARKER,
    BOB_SECRETS,
    SECRETS,
    TOPICS,
    FactsMemory,
    FakeChatModel,
    lookup,
)


@pytest.fixture
def memory() -> FactsMemory:
    return FactsMemory()


def config(thread_id: str, resource_id: str | None = "alice") -> dict[str, Any]:
    configurable = {"thread_id": thread_id}
    if resource_id is not None:
        configurable["resource_id"] = resource_id
    return {"configurable": configurable}


def recalled_in(call: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in call if is_recalled(m)]


def tool_rounds(question: str) -> int:
    """Two tool calls on every fifth topic, none otherwise."""
    topic = question.rstrip("?")
    return 2 if topic in TOPICS and TOPICS.index(topic) % 5 == 0 else 0


def check_saw_own_recall(
    model: FakeChatModel, calls_before: int, n: int, *, tool_loop: bool = True
) -> None:
    """Every model call of turn ``n`` saw one block: fact ``n`` of alice, nothing else."""
    calls = model.calls[calls_before:]
    assert calls, "the model was not called"
    for call in calls:
        memory_messages = recalled_in(call)
        assert len(memory_messages) == 1
        block = memory_messages[0]
        assert isinstance(block, SystemMessage)
        assert block.additional_kwargs["source"] == MEMORY_SOURCE
        assert f"{TOPICS[n]} {SECRETS[n]}" in block.text
        others = [s for i, s in enumerate(SECRETS) if i != n and s in block.text]
        assert others == []
        assert not any(s in block.text for s in BOB_SECRETS)
    assert len(calls) == 1 + (tool_rounds(f"{TOPICS[n]}?") if tool_loop else 0)


def check_history(messages: list[BaseMessage], turns: int, *, tool_loop: bool = True) -> None:
    """Only real turns: the questions, tool calls and results, answers; no memory."""
    assert not any(is_recalled(m) for m in messages)
    questions = [m.text for m in messages if isinstance(m, HumanMessage)]
    assert questions == [f"{t}?" for t in TOPICS[:turns]]
    tool_turns = sum(tool_rounds(f"{t}?") > 0 for t in TOPICS[:turns]) if tool_loop else 0
    assert len(messages) == 2 * turns + 4 * tool_turns


def check_stored_once(memory: FactsMemory, thread_id: str, turns: int) -> None:
    puts = memory.puts(thread_id)
    assert len(puts) == turns  # one write per turn, however many tool steps
    written = [i for put in puts for i in put]
    assert len(written) == len(set(written))
    stored = memory.stored(thread_id)
    assert [m.id for m in stored] == written
    text_turns = {m.id for m in stored if m.role in ("user", "assistant") and m.text}
    assert memory.vector_ids(thread_id) == text_turns  # tool calls/results stored, not embedded
    assert {m.role for m in stored} == {"user", "assistant", "tool"}


@pytest.fixture
def sqlite_saver(tmp_path: Path) -> Iterator[tuple[SqliteSaver, Path]]:
    path = tmp_path / "checkpoints.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(connection), path
    finally:
        connection.close()


def raw_sqlite(path: Path) -> bytes:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT * FROM checkpoints").fetchall()
        rows += connection.execute("SELECT * FROM writes").fetchall()
    return b"".join(v if isinstance(v, bytes) else str(v).encode() for row in rows for v in row)


def test_twenty_turns_sqlite_checkpoint_holds_only_real_turns(
    memory: FactsMemory, sqlite_saver: tuple[SqliteSaver, Path]
) -> None:
    saver, path = sqlite_saver
    model = FakeChatModel(tool_rounds=tool_rounds)
    graph = create_recall_graph(model, memory.engine, tools=[lookup], checkpointer=saver)
    for n, topic in enumerate(TOPICS):
        before = len(model.calls)
        out = graph.invoke({"messages": [("user", f"{topic}?")]}, config("alice-chat"))
        assert set(out) == {"messages"}
        check_saw_own_recall(model, before, n)
    state = graph.get_state(config("alice-chat"))
    assert state.values.get(RECALL_KEY) is None  # read as empty, never checkpointed
    check_history(state.values["messages"], len(TOPICS))
    for snapshot in graph.get_state_history(config("alice-chat")):
        assert snapshot.values.get(RECALL_KEY) is None
        assert not any(is_recalled(m) for m in snapshot.values.get("messages", []))
    raw = raw_sqlite(path)
    assert b"surfing?" in raw  # the scan reads real turns...
    assert BLOCK_MARKER.encode() not in raw  # ...and finds no recalled block, not even in writes
    assert SECRETS[0].encode() not in raw
    check_stored_once(memory, "alice-chat", len(TOPICS))


async def test_twenty_turns_in_memory_checkpoint_async(memory: FactsMemory) -> None:
    saver = InMemorySaver()
    model = FakeChatModel(tool_rounds=tool_rounds)
    graph = create_recall_graph(model, memory.engine, tools=[lookup], checkpointer=saver)
    for n, topic in enumerate(TOPICS):
        before = len(model.calls)
        await graph.ainvoke({"messages": [("user", f"{topic}?")]}, config("alice-chat"))
        check_saw_own_recall(model, before, n)
    state = await graph.aget_state(config("alice-chat"))
    check_history(state.values["messages"], len(TOPICS))
    async for snapshot in graph.aget_state_history(config("alice-chat")):
        assert snapshot.values.get(RECALL_KEY) is None
    raw = repr((saver.storage, saver.writes, saver.blobs)).encode()
    assert b"surfing?" in raw
    assert BLOCK_MARKER.encode() not in raw
    check_stored_once(memory, "alice-chat", len(TOPICS))


async def test_async_sqlite_checkpointer(memory: FactsMemory, tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        model = FakeChatModel()
        graph = create_recall_graph(model, memory.engine, checkpointer=saver)
        for n, topic in enumerate(TOPICS[:3]):
            before = len(model.calls)
            await graph.ainvoke({"messages": [("user", f"{topic}?")]}, config("alice-chat"))
            check_saw_own_recall(model, before, n, tool_loop=False)
        state = await graph.aget_state(config("alice-chat"))
    check_history(state.values["messages"], 3, tool_loop=False)
    assert BLOCK_MARKER.encode() not in raw_sqlite(tmp_path / "cp.sqlite")


def test_users_never_see_each_other(memory: FactsMemory) -> None:
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "garden?")]}, config("bob-chat", "bob"))
    graph.invoke({"messages": [("user", "garden?")]}, config("alice-chat", "alice"))
    bob_call, alice_call = model.calls
    assert BOB_SECRETS[0] in recalled_in(bob_call)[0].text
    assert SECRETS[0] not in " ".join(m.text for m in bob_call)
    assert SECRETS[0] in recalled_in(alice_call)[0].text
    assert BOB_SECRETS[0] not in " ".join(m.text for m in alice_call)


def test_many_turns_over_threads_of_two_users(memory: FactsMemory) -> None:
    """Facts told in one thread come back in the user's other thread, never to the other."""
    said = {user: [f"{user}{n}said" for n in range(6)] for user in ("alice", "bob")}
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    for n in range(6):
        for user in ("alice", "bob"):
            statement = f"{TOPICS[n]} {said[user][n]}"
            graph.invoke({"messages": [("user", statement)]}, config(f"{user}-{n % 2}", user))
    for n in range(6):
        for user, other in (("alice", "bob"), ("bob", "alice")):
            before = len(model.calls)
            thread = f"{user}-{(n + 1) % 2}"  # not the thread where it was said
            graph.invoke({"messages": [("user", f"{TOPICS[n]}?")]}, config(thread, user))
            (block,) = recalled_in(model.calls[before])
            assert said[user][n] in block.text
            leaked = [*said[other], *(BOB_SECRETS if user == "alice" else SECRETS)]
            assert not any(s in block.text for s in leaked)
            assert not any(s in m.text for m in model.calls[before] for s in said[other])
    for user in ("alice", "bob"):
        for thread in (f"{user}-0", f"{user}-1"):
            messages = graph.get_state(config(thread, user)).values["messages"]
            assert len(messages) == 12
            assert not any(is_recalled(m) for m in messages)


async def test_concurrent_runs_on_one_thread_lose_and_duplicate_nothing(
    memory: FactsMemory,
) -> None:
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    await graph.ainvoke({"messages": [("user", "piano?")]}, config("alice-chat"))
    model.barrier = asyncio.Barrier(2)  # both runs reach the model before either answers
    await asyncio.gather(
        graph.ainvoke({"messages": [("user", "garden?")]}, config("alice-chat")),
        graph.ainvoke({"messages": [("user", "tennis?")]}, config("alice-chat")),
    )
    stored = memory.stored("alice-chat")
    assert len(stored) == 6
    assert len({m.id for m in stored}) == 6
    assert sorted(m.text for m in stored if m.role == "user") == ["garden?", "piano?", "tennis?"]
    assert sorted(m.text for m in stored if m.role == "assistant") == [
        "ok: garden?",
        "ok: piano?",
        "ok: tennis?",
    ]
    assert memory.vector_ids("alice-chat") == {m.id for m in stored}
    for call in model.calls[1:]:
        topic = call[-1].text.rstrip("?")
        (block,) = recalled_in(call)
        assert SECRETS[TOPICS.index(topic)] in block.text
        assert sum(s in block.text for s in SECRETS) == 1


def test_resource_changing_within_a_thread_is_refused(memory: FactsMemory) -> None:
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "garden?")]}, config("shared", "alice"))
    with pytest.raises(OwnershipError, match=r"belongs to another resource, not 'bob'"):
        graph.invoke({"messages": [("user", "garden?")]}, config("shared", "bob"))
    assert len(model.calls) == 1  # refused before the model saw anything


async def test_resource_changing_within_a_thread_is_refused_async(memory: FactsMemory) -> None:
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine)
    await graph.ainvoke({"messages": [("user", "garden?")]}, config("shared", "alice"))
    with pytest.raises(OwnershipError, match="Start a new thread id"):
        await graph.ainvoke({"messages": [("user", "piano?")]}, config("shared", "bob"))


def test_missing_thread_id_is_a_clear_error(memory: FactsMemory) -> None:
    graph = create_recall_graph(FakeChatModel(), memory.engine)
    with pytest.raises(MissingIdentityError, match="agent turn needs a conversation id"):
        graph.invoke({"messages": [("user", "garden?")]}, {"configurable": {"resource_id": "a"}})


async def test_missing_thread_id_is_a_clear_error_async(memory: FactsMemory) -> None:
    graph = create_recall_graph(FakeChatModel(), memory.engine)
    with pytest.raises(InvalidInputError, match="thread_id"):
        await graph.ainvoke({"messages": [("user", "garden?")]})


def test_custom_config_keys(memory: FactsMemory) -> None:
    model = FakeChatModel()
    engine = memory.engine.with_options(thread_key="chat", resource_key="user")
    graph = create_recall_graph(model, engine)
    graph.invoke(
        {"messages": [("user", "garden?")]}, {"configurable": {"chat": "c", "user": "alice"}}
    )
    assert SECRETS[0] in recalled_in(model.calls[0])[0].text
    assert memory.engine.storage.get_thread_owner("c") == "alice"


def test_state_without_messages_is_a_clear_error(memory: FactsMemory) -> None:
    class QuestionState(TypedDict):
        question: str

    builder = StateGraph(QuestionState)
    builder.add_node("recall", RecallNode(memory.engine))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", END)
    with pytest.raises(InvalidInputError, match=r"no 'messages' channel.*messages_key="):
        builder.compile().invoke({"question": "garden?"}, config("t"))


def test_turn_without_a_human_message_recalls_nothing_and_is_stored(memory: FactsMemory) -> None:
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke({"messages": [AIMessage("Welcome back!", id="greeting")]}, config("alice-chat"))
    assert "query" not in memory.vectors.names()
    assert recalled_in(model.calls[0]) == []
    assert memory.stored("alice-chat")[0].id == "greeting"


def test_model_returning_only_tool_calls_without_tools(memory: FactsMemory) -> None:
    model = FakeChatModel(force_tool="lookup")
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    out = graph.invoke({"messages": [("user", "garden?")]}, config("alice-chat"))
    answer = out["messages"][-1]
    assert isinstance(answer, AIMessage)
    assert answer.tool_calls
    stored = memory.stored("alice-chat")
    assert [m.role for m in stored] == ["user", "assistant"]
    assert memory.vector_ids("alice-chat") == {stored[0].id}  # a tool-call-only answer: no vector


def test_hand_built_graph_with_the_two_nodes(memory: FactsMemory) -> None:
    model = FakeChatModel()
    builder = StateGraph(RecallState)
    builder.add_node("recall", RecallNode(memory.engine))
    builder.add_node("model", lambda state: {"messages": [model.invoke(with_recall(state))]})
    builder.add_node("index", IndexNode(memory.engine))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    builder.add_edge("model", "index")
    builder.add_edge("index", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    for n, topic in enumerate(TOPICS[:3]):
        before = len(model.calls)
        graph.invoke({"messages": [("user", f"{topic}?")]}, config("alice-chat"))
        check_saw_own_recall(model, before, n, tool_loop=False)
    check_history(graph.get_state(config("alice-chat")).values["messages"], 3, tool_loop=False)
    assert len(memory.puts("alice-chat")) == 3
    assert len(memory.stored("alice-chat")) == 6


def test_index_node_after_every_model_call_stores_each_message_once(memory: FactsMemory) -> None:
    model = FakeChatModel(tool_rounds=3).bind_tools([lookup])

    def route(state: dict[str, Any]) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    from langgraph.prebuilt import ToolNode

    builder = StateGraph(RecallState)
    builder.add_node("recall", RecallNode(memory.engine))
    builder.add_node("model", lambda state: {"messages": [model.invoke(with_recall(state))]})
    builder.add_node("index", IndexNode(memory.engine))
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    builder.add_edge("model", "index")
    builder.add_conditional_edges("index", route, ["tools", END])
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "garden?")]}, config("alice-chat"))
    graph.invoke({"messages": [("user", "piano?")]}, config("alice-chat"))
    puts = memory.puts("alice-chat")
    assert len(puts) == 8  # after each of the 4 model calls of each turn
    written = [i for put in puts for i in put]
    assert len(written) == len(set(written)) == 16
    assert len(memory.stored("alice-chat")) == 16


def test_stream_updates_show_what_recall_found(memory: FactsMemory) -> None:
    graph = create_recall_graph(FakeChatModel(), memory.engine)
    updates = list(
        graph.stream({"messages": [("user", "garden?")]}, config("c"), stream_mode="updates")
    )
    recalled = updates[0]["recall"][RECALL_KEY]
    assert isinstance(recalled, RecalledMemory)
    assert recalled.block is not None
    assert SECRETS[0] in recalled.block.text
    assert [next(iter(u)) for u in updates] == ["recall", "model", "index"]


def test_resumed_run_recalls_again_for_its_model_calls(memory: FactsMemory) -> None:
    @tool
    def approve(query: str) -> str:
        """Ask a human to approve."""
        return f"approved: {interrupt(query)}"

    model = FakeChatModel(tool_rounds=1)
    graph = create_recall_graph(model, memory.engine, tools=[approve], checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "garden?")]}, config("alice-chat"))
    assert len(model.calls) == 1  # stopped in the tool, waiting for a human
    graph.invoke(Command(resume="yes"), config("alice-chat"))  # the per-run channel is empty
    assert len(model.calls) == 2
    for call in model.calls:
        (block,) = recalled_in(call)
        assert SECRETS[0] in block.text
    messages = graph.get_state(config("alice-chat")).values["messages"]
    assert messages[2].text == "approved: yes"
    assert not any(is_recalled(m) for m in messages)
    assert len(memory.stored("alice-chat")) == 4


def test_read_only_memory_recalls_but_stores_nothing(memory: FactsMemory) -> None:
    engine = SemanticRecall(
        storage=memory.storage,
        vector_store=memory.vectors,
        embeddings=memory.embeddings,
        top_k=3,
        message_range=0,
        threshold=0.3,
        read_only=True,
    )
    model = FakeChatModel()
    create_recall_graph(model, engine).invoke({"messages": [("user", "garden?")]}, config("c"))
    assert SECRETS[0] in recalled_in(model.calls[0])[0].text
    assert memory.stored("c") == []


# --- pure helpers ------------------------------------------------------------------------


def test_inject_recalled_keeps_instructions_first_and_skips_present_ids() -> None:
    system = SystemMessage("be nice")
    block = SystemMessage("memory", additional_kwargs={"source": "memory"})
    old = HumanMessage("old", id="m1", additional_kwargs={"source": "memory"})
    live = [system, HumanMessage("hi", id="m1"), HumanMessage("now", id="m2")]
    assert inject_recalled(live, [block, old]) == [system, block, *live[1:]]
    assert inject_recalled([HumanMessage("x")], []) == [HumanMessage("x")]


def test_current_turn_and_with_recall_of_a_run() -> None:
    messages = [HumanMessage("a", id="h1"), AIMessage("b"), HumanMessage("c", id="h2")]
    assert current_turn(messages) == "h2"
    assert current_turn([HumanMessage("x")]) == "@0"
    assert current_turn([AIMessage("x")]) is None
    block = SystemMessage("memory", additional_kwargs={"source": "memory"})
    stale = {"messages": messages, RECALL_KEY: RecalledMemory(turn="h1", messages=(block,))}
    fresh = {"messages": messages, RECALL_KEY: RecalledMemory(turn="h2", messages=(block,))}
    assert with_recall(fresh) == [block, *messages]
    # A recall of this run for an earlier user message (a node added one since: a
    # critique, a tool's image) is still this run's memory: used, not refused.
    assert with_recall(stale) == [block, *messages]
    # An empty channel (a run resumed after an interrupt, whose recall node did not
    # run): the model would get no memory. It was sent none, silently.
    with pytest.raises(InvalidInputError, match=r"is empty, so the model would get no"):
        with_recall({"messages": messages, RECALL_KEY: None})
    node = RecallNode(FactsMemory().engine)
    with pytest.raises(InvalidInputError, match="call it in a graph node"):
        with_recall({"messages": messages, RECALL_KEY: None}, node)  # outside a run
    with pytest.raises(InvalidOptionError, match=r"recall_key='mem' differs"):
        with_recall(fresh, node, recall_key="mem")
    no_user = [AIMessage("hello")]
    assert with_recall({"messages": no_user, RECALL_KEY: None}) == no_user
    with pytest.raises(InvalidOptionError, match="RecallNode"):
        with_recall(fresh, object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="RecallState"):  # no channel: say so
        with_recall({"messages": messages})


def test_index_assigns_stable_ids_to_messages_without_one(memory: FactsMemory) -> None:
    node = IndexNode(memory.engine)
    state = {"messages": [HumanMessage("garden?"), AIMessage("sure")]}
    node.invoke(state, config("plain"))
    node.invoke(state, config("plain"))  # same state again: nothing new
    assert len(memory.stored("plain")) == 2
    assert len(memory.puts("plain")) == 1


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_user_message_edited_in_place_is_updated_not_kept_stale(
    memory: FactsMemory, asynchronous: bool
) -> None:
    """The same id sent again with new text (add_messages replaces it in place) was
    answered, but memory kept the old text: the turn stored after the newest stored one."""
    graph = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    first = {"messages": [HumanMessage("garden?", id="q")]}
    edited = {"messages": [HumanMessage("piano?", id="q")]}
    if asynchronous:
        asyncio.run(graph.ainvoke(first, config("edit")))
        asyncio.run(graph.ainvoke(edited, config("edit")))
    else:
        graph.invoke(first, config("edit"))
        graph.invoke(edited, config("edit"))
    state = graph.get_state(config("edit")).values["messages"]
    assert [m.text for m in state] == ["piano?", "ok: garden?", "ok: piano?"]
    assert [(m.id, m.text) for m in memory.stored("edit")] == [(m.id, m.text) for m in state]
    hits = memory.engine.search("piano", thread_id="edit", resource_id="alice", scope="thread")
    assert "q" in {hit.message.id for hit in hits}  # its vector holds the new text too


def test_tool_messages_are_stored_for_windows(memory: FactsMemory) -> None:
    node = IndexNode(memory.engine)
    call = {"name": "lookup", "args": {"query": "x"}, "id": "call_1"}
    state = {
        "messages": [
            HumanMessage("garden?", id="h"),
            AIMessage("", tool_calls=[call], id="c"),
            ToolMessage("result", tool_call_id="call_1", id="t"),
            AIMessage("done", id="a"),
        ]
    }
    node.invoke(state, config("tools"))
    assert [m.role for m in memory.stored("tools")] == ["user", "assistant", "tool", "assistant"]
    assert memory.vector_ids("tools") == {"h", "a"}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_misspelt_input_key_is_a_clear_error_not_an_empty_turn(
    memory: FactsMemory, asynchronous: bool
) -> None:
    """LangGraph drops input keys the state does not have: `{"message": [...]}` ran the
    model on nothing and stored its answer alone, with no error."""
    model = FakeChatModel()
    graph = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    wrong = {"message": [("user", "garden?")]}
    ids = config("typo-chat", "alice")

    def run() -> object:
        if asynchronous:
            return asyncio.run(graph.ainvoke(wrong, ids))
        return graph.invoke(wrong, ids)

    with pytest.raises(InvalidInputError, match=r"state\['messages'\] is empty"):
        run()
    assert model.calls == []
    assert memory.engine.stats(thread_id="typo-chat", resource_id="alice").messages == 0
