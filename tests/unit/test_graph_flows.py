"""LangGraph flows real apps use: copies of a thread, forks, edits, sub-agents.

Each test runs a real graph (`create_recall_graph`) or agent (`create_agent` with the
middleware) on a LangGraph checkpointer and checks what memory holds afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.caches import InMemoryCache
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, RetryPolicy, interrupt

from langchain_semantic_recall import InvalidInputError, OwnershipError, StorageError
from langchain_semantic_recall.graph import (
    IndexNode,
    RecallNode,
    RecallState,
    awith_recall,
    create_recall_graph,
    with_recall,
)
from langchain_semantic_recall.messages import is_recalled
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from langchain_semantic_recall.turn_index import index_new_messages
from tests.fakes import SECRETS, FactsMemory, FakeChatModel, lookup


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


def test_a_copy_of_another_users_thread_stores_only_his_own_turns(
    memory: FactsMemory, caplog: pytest.LogCaptureFixture
) -> None:
    """Alice's checkpoint copied into Bob's thread: its history was refused at the end of
    every turn of Bob's thread, for good. Now Bob's own turns are stored, Alice's words
    never are (a warning names their ids), and Bob's memory finds none of them."""
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("alices"))
    values = graph.get_state(config("alices")).values
    graph.update_state(config("bobs", "bob"), values, as_node="index")
    for text in ("piano?", "tennis?"):
        graph.invoke(ask(text), config("bobs", "bob"))
    assert texts(memory, "alices") == ["garden?", "ok: garden?"]
    assert texts(memory, "bobs") == ["piano?", "ok: piano?", "tennis?", "ok: tennis?"]
    assert "not stored, as another resource's" in caplog.text
    hits = memory.engine.search("garden?", resource_id="bob", threshold=0.0)
    assert all(h.message.resource_id == "bob" for h in hits)
    assert not any("garden?" in m.text for h in hits for m in h.window)


def test_a_copy_goes_on_after_the_original_edits_a_message_it_copied(
    memory: FactsMemory,
) -> None:
    """A copy whose history the original then corrected (the same id, new text) is still
    a copy: a rule that asked for the same text refused every turn of it, for good."""
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("original"))
    graph.update_state(config("copy"), graph.get_state(config("original")).values, as_node="index")
    first = graph.get_state(config("original")).values["messages"][0]
    fixed = {"messages": [HumanMessage("garden!!", id=first.id)]}
    graph.update_state(config("original"), fixed, as_node="index")
    graph.invoke(ask("next"), config("original"))
    for text in ("piano?", "tennis?"):
        graph.invoke(ask(text), config("copy"))
    assert texts(memory, "original") == ["garden!!", "ok: garden?", "next", "ok: next"]
    assert texts(memory, "copy") == ["piano?", "ok: piano?", "tennis?", "ok: tennis?"]


def test_an_earlier_message_of_a_new_threads_first_input_reusing_an_id_is_kept(
    memory: FactsMemory,
) -> None:
    """A first input of two messages whose first reuses an id another thread of the same
    user stored with other text: it was dropped without a word (a review), then refused
    with the turn, at every later turn too. It is the user's own: stored in this thread
    under an id of its own, the same at every later turn (nothing stored twice)."""
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("hello", id="1")]}, config("c"))
    told = [HumanMessage("my PIN is 1234", id="1"), HumanMessage("remember it", id="2")]
    graph.invoke({"messages": told}, config("d"))
    graph.invoke(ask("and now?"), config("d"))
    assert texts(memory, "c") == ["hello", "ok: hello"]
    assert texts(memory, "d") == [
        *("my PIN is 1234", "remember it", "ok: remember it", "and now?", "ok: and now?")
    ]
    assert memory.stored("d")[0].id != "1"


def test_a_copy_resumes_the_run_it_copied_unanswered(memory: FactsMemory) -> None:
    """A thread copied while its run was pending (the model failed; `threads.copy` takes
    the checkpoint as it is) and resumed in both: the question is the original's, stored
    there; the copy stores its answer (it was refused as a message of another thread)."""
    failing = {"now": False}

    def reply(messages: list[BaseMessage]) -> str:
        if failing["now"]:
            raise RuntimeError("rate limit")
        return "ok: " + [m for m in messages if isinstance(m, HumanMessage)][-1].text

    model = FakeChatModel(reply=reply)
    graph: Any = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("A"))
    failing["now"] = True
    with pytest.raises(RuntimeError, match="rate limit"):
        graph.invoke(ask("piano?"), config("A"))
    failing["now"] = False
    graph.update_state(config("B"), graph.get_state(config("A")).values, as_node="recall")
    graph.invoke(None, config("A"))
    graph.invoke(None, config("B"))
    assert texts(memory, "A") == ["garden?", "ok: garden?", "piano?", "ok: piano?"]
    assert texts(memory, "B") == ["ok: piano?"]


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_new_message_reusing_an_id_of_another_thread_is_refused_not_dropped(
    memory: FactsMemory, surface: str, asynchronous: bool
) -> None:
    """A client numbering each conversation's messages from "1": the first turn of a new
    thread was taken for a copy of the thread that stored id "1" (by the id alone), and
    the user's message was dropped without a word. A copy holds the same text; this is
    another message, refused as `index` refuses it."""
    engine = memory.engine
    app: Any = (
        create_recall_graph(FakeChatModel(), engine, checkpointer=InMemorySaver())
        if surface == "graph"
        else create_agent(
            FakeChatModel(),
            middleware=[SemanticRecallMiddleware(engine)],
            checkpointer=InMemorySaver(),
        )
    )

    def turn(text: str, thread_id: str) -> None:
        state = {"messages": [HumanMessage(text, id="1")]}
        if asynchronous:
            asyncio.run(app.ainvoke(state, config(thread_id)))
        else:
            app.invoke(state, config(thread_id))

    turn("I have a cat named Tom", "a")
    with pytest.raises(OwnershipError, match="another thread"):
        turn("My parrot is called Polly", "b")
    assert texts(memory, "a") == ["I have a cat named Tom", "ok: I have a cat named Tom"]
    assert texts(memory, "b") == []


def _stateless_app(memory: FactsMemory, surface: str, model: FakeChatModel) -> Any:
    """The graph or the agent without a checkpointer: the client keeps the history."""
    if surface == "graph":
        return create_recall_graph(model, memory.engine)
    return create_agent(model, middleware=[SemanticRecallMiddleware(memory.engine)])


def _app(memory: FactsMemory, surface: str) -> Any:
    if surface == "graph":
        return create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    middleware = [SemanticRecallMiddleware(memory.engine)]
    return create_agent(FakeChatModel(), middleware=middleware, checkpointer=InMemorySaver())


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_one_message_object_sent_to_two_users_keeps_both_threads_going(
    memory: FactsMemory, surface: str, asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A module-level message (a fixed greeting, a "Continue" button) carries the id
    LangGraph gave it in the first conversation it was sent in. In another user's thread
    that id was refused at the end of every later turn, which then stored nothing more.
    Now the turn that sends it is refused (it is that turn's own message), and every later
    turn stores the rest; nothing of it is stored for the second user."""
    app = _app(memory, surface)
    welcome = AIMessage("Welcome! Ask me anything.")
    go_on = HumanMessage("Continue")

    def turn(messages: list[BaseMessage], thread_id: str, user: str) -> None:
        state = {"messages": messages}
        if asynchronous:
            asyncio.run(app.ainvoke(state, config(thread_id, user)))
        else:
            app.invoke(state, config(thread_id, user))

    turn([welcome, HumanMessage("garden?")], "a", "alice")
    turn([go_on], "a", "alice")
    assert welcome.id  # LangGraph wrote the ids it gave into the objects
    assert go_on.id
    turn([welcome, HumanMessage("piano?")], "b", "bob")
    with pytest.raises(OwnershipError, match="another thread"):
        turn([go_on], "b", "bob")
    turn([HumanMessage("tennis?")], "b", "bob")
    assert texts(memory, "a") == [
        *("Welcome! Ask me anything.", "garden?", "ok: garden?", "Continue", "ok: Continue")
    ]
    assert texts(memory, "b") == [
        *("piano?", "ok: piano?", "ok: Continue", "tennis?", "ok: tennis?")
    ]
    assert all(m.resource_id == "bob" for m in memory.stored("b"))
    assert "not stored, as another resource's" in caplog.text


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_cached_reply_is_stored_in_every_thread_it_answers(
    surface: str, asynchronous: bool
) -> None:
    """LangChain's LLM cache hands back a reply with the id of its first use. In another
    thread of the same user that reply was taken for copied history and not stored; in
    another user's thread the turn was refused once the model had answered, and nothing
    of it was stored. A reply of the current turn is the thread's own: it is stored under
    an id of its own, and the next turn goes on."""
    memory = FactsMemory(scope="thread")  # no memory in a first turn: the same prompts
    model = FakeChatModel(cache=InMemoryCache())
    middleware = [SemanticRecallMiddleware(memory.engine)]
    app: Any = (
        create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
        if surface == "graph"
        else create_agent(model, middleware=middleware, checkpointer=InMemorySaver())
    )

    def turn(text: str, thread_id: str, user: str) -> None:
        if asynchronous:
            asyncio.run(app.ainvoke(ask(text), config(thread_id, user)))
        else:
            app.invoke(ask(text), config(thread_id, user))

    places = (("a", "alice"), ("b", "alice"), ("c", "bob"))
    for thread_id, user in places:
        turn("hi", thread_id, user)
    replies = {app.get_state(config(*place)).values["messages"][-1].id for place in places}
    assert len(replies) == 1  # the cache answered twice, with its first reply's id
    said = ["hi", "ok: hi", "tennis?", "ok: tennis?"]
    for thread_id, user in places[1:]:
        turn("tennis?", thread_id, user)
        assert texts(memory, thread_id) == said
        assert {m.resource_id for m in memory.stored(thread_id)} == {user}
    assert texts(memory, "a") == ["hi", "ok: hi"]


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_stateless_server_stores_each_message_once(
    memory: FactsMemory, surface: str, asynchronous: bool
) -> None:
    """No checkpointer; the client sends the whole conversation as role/content dicts on
    every request, and `add_messages` gives each message a new id each time: every turn
    stored the whole history again, and recall put the copies beside the input. The
    history is known by its place now; the same words said again are still a message."""
    model = FakeChatModel()
    app = _stateless_app(memory, surface, model)
    history: list[dict[str, str]] = []
    for text in ("garden?", "piano?", "garden?", "tennis?"):
        history.append({"role": "user", "content": text})
        state = {"messages": list(history)}
        cfg = config("stateless")
        out = asyncio.run(app.ainvoke(state, cfg)) if asynchronous else app.invoke(state, cfg)
        history.append({"role": "assistant", "content": out["messages"][-1].text})
    said = ["garden?", "piano?", "garden?", "tennis?"]
    assert texts(memory, "stateless") == [t for q in said for t in (q, f"ok: {q}")]
    for call in model.calls:  # no copy of a message the input holds
        live = {m.text for m in call if not is_recalled(m)}
        assert not live & {m.text for m in call if is_recalled(m)}


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_stateless_client_sending_a_request_again_stores_its_history_once(
    memory: FactsMemory, surface: str, asynchronous: bool
) -> None:
    """A client that lost an answer (a timeout) sends the same request again. The stored
    attempt after its history made that history match nothing, and the whole of it was
    stored again, at the retry and at every later turn. Each attempt's turn is stored
    (the same words said again are a message); the history never is."""
    model = FakeChatModel()
    app = _stateless_app(memory, surface, model)
    history: list[dict[str, str]] = []

    def send(text: str, *, seen: bool = True) -> None:
        state, cfg = {"messages": [*history, {"role": "user", "content": text}]}, config("r")
        out = asyncio.run(app.ainvoke(state, cfg)) if asynchronous else app.invoke(state, cfg)
        if seen:
            history.extend(
                (
                    {"role": "user", "content": text},
                    {"role": "assistant", "content": out["messages"][-1].text},
                )
            )

    send("garden?")
    send("piano?")
    send("tennis?", seen=False)  # answered and stored; the client never got it
    send("tennis?", seen=False)  # nor the second time
    send("tennis?")
    send("golf?")
    said = ["garden?", "piano?", "tennis?", "tennis?", "tennis?", "golf?"]
    assert texts(memory, "r") == [t for q in said for t in (q, f"ok: {q}")]


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_stateless_client_editing_an_earlier_message_loses_nothing(
    memory: FactsMemory, surface: str, asynchronous: bool
) -> None:
    """ "Edit and resubmit" sends the conversation up to an earlier message again: its
    head is stored once more (it cannot be told from a new chat in the same thread whose
    opening words repeat), and later turns store only what is new (a review: 2, 4, 6,
    10, 16 messages). A history message whose words occur only in an old branch or an
    old chat is stored, never taken as stored (it may be a turn whose storing failed)."""
    model = FakeChatModel()
    app = _stateless_app(memory, surface, model)

    def send(history: list[dict[str, str]]) -> str:
        state, cfg = {"messages": list(history)}, config("edits")
        out = asyncio.run(app.ainvoke(state, cfg)) if asynchronous else app.invoke(state, cfg)
        return str(out["messages"][-1].text)

    history: list[dict[str, str]] = []
    for text in ("garden?", "piano?", "tennis?"):
        history.append({"role": "user", "content": text})
        history.append({"role": "assistant", "content": send(history)})
    history = [*history[:2], {"role": "user", "content": "violin?"}]
    history.append({"role": "assistant", "content": send(history)})
    history.append({"role": "user", "content": "chess?"})
    history.append({"role": "assistant", "content": send(history)})
    said = ["garden?", "piano?", "tennis?", "garden?", "violin?", "chess?"]
    assert texts(memory, "edits") == [t for q in said for t in (q, f"ok: {q}")]
    # "tennis?" failed to be stored on the new branch; its words are in the old one.
    history.append({"role": "user", "content": "tennis?"})
    history.append({"role": "user", "content": "golf?"})
    assert send(history) == "ok: golf?"
    assert texts(memory, "edits")[-3:] == ["tennis?", "golf?", "ok: golf?"]


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("client", ["trims replies", "user messages only"])
def test_a_stateless_client_that_sends_back_less_stores_each_message_once(
    memory: FactsMemory, surface: str, client: str
) -> None:
    """A chat client trims the reply it sends back, or sends back the user's messages
    alone: each turn stored the history again (2, 5, 10, 17 messages; a review)."""
    model = FakeChatModel(reply=lambda messages: f"ok: {messages[-1].text}\n")
    app = _stateless_app(memory, surface, model)
    history: list[dict[str, str]] = []
    for text in ("garden?", "piano?", "garden?", "tennis?"):
        history.append({"role": "user", "content": text})
        answer = app.invoke({"messages": list(history)}, config("less"))["messages"][-1].text
        if client == "trims replies":
            history.append({"role": "assistant", "content": answer.strip()})
    said = ["garden?", "piano?", "garden?", "tennis?"]
    assert [" ".join(t.split()) for t in texts(memory, "less")] == [
        t for q in said for t in (q, f"ok: {q}")
    ]
    for call in model.calls:  # no stored copy of a message the input holds, trimmed or not
        live = {m.text.strip() for m in call if not is_recalled(m)}
        assert not live & {m.text.strip() for m in call if is_recalled(m)}


@pytest.mark.parametrize("surface", ["graph", "agent"])
@pytest.mark.parametrize("client", ["words only", "ids for its own messages", "a context line"])
def test_a_stateless_client_with_tools_stores_each_message_once(
    memory: FactsMemory, surface: str, client: str
) -> None:
    """Chat clients send back the words (no tool calls or results), or keep ids for the
    user's messages only, or hold a line the storage does not keep: each stored the whole
    history, or the previous answer, again at every turn (a review)."""
    model = FakeChatModel(tool_rounds=1)
    engine = memory.engine
    app: Any = (
        create_recall_graph(model, engine, tools=[lookup])
        if surface == "graph"
        else create_agent(model, tools=[lookup], middleware=[SemanticRecallMiddleware(engine)])
    )
    history: list[BaseMessage] = []
    if client == "a context line":
        history.append(ChatMessage(role="context", content="The shop opens at 9am"))
    for n, text in enumerate(("garden?", "piano?", "tennis?")):
        history.append(HumanMessage(text, id=f"u{n}" if client != "words only" else None))
        sent = [
            m.model_copy(update={"id": m.id if client != "words only" else None}) for m in history
        ]
        answer = app.invoke({"messages": sent}, config("client"))["messages"][-1]
        history.append(AIMessage(answer.text, id=f"a{n}" if client != "words only" else None))
    said = [m.text for m in memory.stored("client") if m.role == "user" or m.text.startswith("ok")]
    assert said == [t for q in ("garden?", "piano?", "tennis?") for t in (q, f"ok: {q}")]
    assert len(memory.stored("client")) == 12  # each turn: question, call, result, answer


@pytest.mark.parametrize("surface", ["graph", "agent"])
def test_a_thread_retention_emptied_does_not_store_its_history_again(
    memory: FactsMemory, surface: str
) -> None:
    """`forget_before` emptied a checkpointed thread; the next turn found none of the
    state's ids stored and stored the whole deleted history again, with new times, for
    another full period (a review)."""
    app = _app(memory, surface)
    app.invoke(ask("my old secret: PIN 9999"), config("kept"))
    result = memory.engine.forget_before(datetime.now(UTC) + timedelta(seconds=1))
    assert "kept" in result.threads_emptied
    app.invoke(ask("new question"), config("kept"))
    assert texts(memory, "kept") == ["new question", "ok: new question"]


def test_the_stateless_read_of_recall_fails_open_and_is_made_only_when_needed() -> None:
    """The read that tells resent history apart (`IdsInScope`) ran outside recall's
    "a failed read recalls nothing" rule, and on every checkpointed turn (a review)."""
    memory = FactsMemory(message_range=0, top_k=4, threshold=0.0)
    engine, ids = memory.engine, {"thread_id": "t", "resource_id": "alice"}
    said = [HumanMessage("my garden roses", id="u1"), AIMessage("roses noted", id="a1")]
    index_new_messages(engine, said, **ids)
    memory.storage.calls.clear()
    engine.recall([*said, HumanMessage("what about my garden roses?", id="u2")], **ids)
    assert "ids_in_scope" not in memory.storage.names()  # its ids are the hits': stored
    resent = [HumanMessage("my garden roses", id="x1"), AIMessage("roses noted", id="x2")]
    memory.storage.fail = {"ids_in_scope": StorageError("db down")}
    out = engine.recall([*resent, HumanMessage("what about my garden roses?", id="x3")], **ids)
    assert len(out) == 3  # recall failed, the turn goes on with the conversation as it is


def test_a_stateless_client_does_not_bring_back_what_retention_deleted(
    memory: FactsMemory,
) -> None:
    """A stateless client resends the history whose head retention deleted: aligned only
    from the input's start, the stored tail never matched, and the deleted messages were
    stored again with new times (a review)."""
    app: Any = create_recall_graph(FakeChatModel(), memory.engine)
    history: list[dict[str, str]] = []

    def turn(text: str) -> None:
        history.append({"role": "user", "content": text})
        out = app.invoke({"messages": list(history)}, config("resent"))
        history.append({"role": "assistant", "content": out["messages"][-1].text})

    turn("my PIN is 9999")
    memory.engine.forget_before(datetime.now(UTC) + timedelta(seconds=1))
    for text in ("second?", "third?", "fourth?"):
        turn(text)
    assert texts(memory, "resent") == [
        t for q in ("second?", "third?", "fourth?") for t in (q, f"ok: {q}")
    ]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_recalled_answer_is_kept_when_its_words_are_said_again_later(
    asynchronous: bool,
) -> None:
    """A trimmed checkpointed conversation: the old "yes" answering "cancel?" is recalled
    with its question, and the state holds a later, unrelated "yes" under its own id.
    Matching by role and text for every input message (the stateless fix's first form)
    dropped the old answer: the model saw the question without it (a review)."""
    memory = FactsMemory(message_range=1, top_k=4, threshold=0.0)
    engine = memory.engine
    old = [
        HumanMessage("cancel my premium subscription please", id="u1"),
        AIMessage("Shall I cancel your premium subscription now?", id="a1"),
        HumanMessage("yes", id="u2"),
        AIMessage("Done, cancelled.", id="a2"),
    ]
    index_new_messages(engine, old, thread_id="t", resource_id="alice")
    state = [
        HumanMessage("shall we talk about music", id="u3"),
        AIMessage("Shall we?", id="a3"),
        HumanMessage("yes", id="u4"),
        AIMessage("Great.", id="a4"),
        HumanMessage("what happened to my premium subscription?", id="u5"),
    ]
    index_new_messages(engine, state, thread_id="t", resource_id="alice")
    ids = {"thread_id": "t", "resource_id": "alice"}
    out = asyncio.run(engine.arecall(state, **ids)) if asynchronous else engine.recall(state, **ids)
    recalled = [m.id for m in out if is_recalled(m) and not isinstance(m, SystemMessage)]
    assert recalled[-3:] == ["u1", "a1", "u2"]


def test_a_long_history_sent_again_is_known_by_its_newest_messages(
    memory: FactsMemory,
) -> None:
    """Past the 64 newest messages, the stored tail is found where it lies in the input."""
    engine = memory.engine

    def sent(count: int) -> list[BaseMessage]:  # new ids on every request
        kinds = (HumanMessage, AIMessage)
        lines = [f"line {n % 7}" for n in range(count)]  # words repeat on purpose
        return [kinds[n % 2](text, id=str(uuid.uuid4())) for n, text in enumerate(lines)]

    index_new_messages(engine, sent(99), thread_id="long", resource_id="alice")
    index_new_messages(engine, sent(101), thread_id="long", resource_id="alice")
    assert [m.text for m in memory.stored("long")] == [f"line {n % 7}" for n in range(101)]
    again = [HumanMessage("line 0", id=str(uuid.uuid4()))]
    index_new_messages(engine, again, thread_id="long", resource_id="alice")
    assert len(memory.stored("long")) == 102  # a turn alone repeating old words: a message


@pytest.mark.parametrize("surface", ["graph", "agent"])
def test_a_system_prompt_kept_in_the_state_is_not_stored_or_quoted(
    memory: FactsMemory, surface: str
) -> None:
    """The app's instructions at the start of the state were stored as a message of the
    user's conversation, exported with the user's data, and quoted in the memory block
    beside every recalled message next to them."""
    app = _app(memory, surface)
    prompt = "You are Acme's bot. Internal discount code: ACME50."
    for thread_id, text in (("s1", "garden?"), ("s2", "tell me about my garden?")):
        state = {"messages": [SystemMessage(prompt), HumanMessage(text)]}
        app.invoke(state, config(thread_id))
    assert texts(memory, "s1") == ["garden?", "ok: garden?"]
    assert not any("ACME50" in m.text for m in memory.stored("s2"))
    result = index_new_messages(
        memory.engine,
        [SystemMessage(prompt, id="sys"), HumanMessage("piano?", id="p1")],
        thread_id="s3",
        resource_id="alice",
    )
    assert result.skipped["sys"] == "a system prompt at the start of the state: not stored"
    assert [m.id for m in memory.stored("s3")] == ["p1"]
    mid = [HumanMessage("tennis?", id="t1"), SystemMessage("note: user is on mobile", id="n1")]
    index_new_messages(memory.engine, mid, thread_id="s4", resource_id="alice")
    assert [m.id for m in memory.stored("s4")] == ["t1", "n1"]  # later ones are kept


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


# --- time travel: a run resumed from an earlier checkpoint -------------------------------


def fork_after_first_turn(graph: Any, thread_id: str) -> RunnableConfig:
    """The config of the checkpoint that ended the thread's first turn."""
    history = list(graph.get_state_history(config(thread_id)))
    first = next(s for s in history if len(s.values.get("messages", ())) == 2 and not s.next)
    fork: RunnableConfig = first.config
    fork["configurable"]["resource_id"] = "alice"
    return fork


def test_a_fork_keeps_the_abandoned_branch_in_memory_as_documented() -> None:
    """docs/surfaces.md: memory is a log of what was said in a thread, not a tree of
    checkpoints; a run resumed from an earlier checkpoint leaves the abandoned turns in
    memory, and same-thread recall can bring them back."""
    memory = FactsMemory(scope="thread")
    model = FakeChatModel()
    graph: Any = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("t"))
    graph.invoke(ask("piano alpha1x"), config("t"))  # the turn the fork abandons
    graph.invoke(ask("piano?"), fork_after_first_turn(graph, "t"))
    state = [m.text for m in graph.get_state(config("t")).values["messages"]]
    assert state == ["garden?", "ok: garden?", "piano?", "ok: piano?"]
    assert "piano alpha1x" in texts(memory, "t")
    assert any("piano alpha1x" in m.text for m in model.calls[-1] if m.type == "human")


def test_clearing_the_thread_after_a_fork_makes_memory_follow_the_branch() -> None:
    """The recipe of docs/surfaces.md: `clear_thread`, and the next turn stores the
    branch the checkpoint holds."""
    memory = FactsMemory(scope="thread")
    model = FakeChatModel()
    graph: Any = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("t"))
    graph.invoke(ask("piano alpha1x"), config("t"))
    fork = fork_after_first_turn(graph, "t")
    memory.engine.clear_thread("t", resource_id="alice")
    graph.invoke(ask("piano?"), fork)
    state = [m.text for m in graph.get_state(config("t")).values["messages"]]
    assert texts(memory, "t") == state
    assert not any("alpha1x" in m.text for call in model.calls[2:] for m in call)


# --- messages removed from the state ------------------------------------------------------


@pytest.mark.parametrize("everything", [False, True])
def test_removing_messages_from_the_state_trims_the_context_not_memory(
    memory: FactsMemory, everything: bool
) -> None:
    """docs/surfaces.md: `RemoveMessage` (one id, or `REMOVE_ALL_MESSAGES`) shortens the
    checkpointed conversation; memory keeps what was said, and recall brings it back
    (`clear_thread` / `forget_thread` delete it)."""
    model = FakeChatModel()
    graph: Any = create_recall_graph(model, memory.engine, checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("piano alpha1x", id="said")]}, config("t"))
    gone = RemoveMessage(id=REMOVE_ALL_MESSAGES if everything else "said")
    graph.update_state(config("t"), {"messages": [gone]}, as_node="index")
    graph.invoke(ask("piano?"), config("t"))
    assert "said" not in {m.id for m in graph.get_state(config("t")).values["messages"]}
    assert texts(memory, "t")[0] == "piano alpha1x"
    assert any(m.id == "said" and is_recalled(m) for m in model.calls[-1])


# --- what streams and what is checkpointed -----------------------------------------------


@pytest.mark.parametrize("mode", ["messages", "updates", "values"])
def test_streamed_conversation_never_carries_recalled_messages(
    memory: FactsMemory, mode: str
) -> None:
    """The `messages` channel and the model's streamed output hold real turns only
    (a graph's "updates" and "values" show the recall under its own key)."""
    graph: Any = create_recall_graph(FakeChatModel(), memory.engine, checkpointer=InMemorySaver())
    agent: Any = create_agent(
        FakeChatModel(),
        middleware=[SemanticRecallMiddleware(memory.engine)],
        checkpointer=InMemorySaver(),
    )
    for runnable in (graph, agent):
        parts = list(runnable.stream(ask("garden?"), config(f"s-{id(runnable)}"), stream_mode=mode))
        if mode == "messages":
            conversation = [chunk for chunk, _ in parts]
        elif mode == "values":
            conversation = [m for part in parts for m in part["messages"]]
        else:
            updates = [u for part in parts for u in part.values() if isinstance(u, dict)]
            conversation = [m for update in updates for m in update.get("messages", [])]
        assert [m.text for m in conversation][-1] == "ok: garden?"
        assert not any(is_recalled(m) or SECRETS[0] in m.text for m in conversation)


def test_an_interrupted_agent_checkpoints_no_memory(memory: FactsMemory, tmp_path: Path) -> None:
    """Stopped by a human-in-the-loop interrupt and resumed: memory reaches both model
    calls, never the checkpoint (nor its pending writes); the turn is stored once."""
    path = tmp_path / "checkpoints.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    model = FakeChatModel(tool_rounds=1)
    approve = HumanInTheLoopMiddleware(interrupt_on={"lookup": True})
    agent: Any = create_agent(
        model,
        tools=[lookup],
        middleware=[SemanticRecallMiddleware(memory.engine), approve],
        checkpointer=SqliteSaver(connection),
    )
    try:
        stopped = agent.invoke(ask("garden?"), config("hitl"))
        assert "__interrupt__" in stopped
        assert texts(memory, "hitl") == []  # stored when the agent finishes
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config("hitl"))
    finally:
        connection.close()
    assert len(model.calls) == 2
    assert all(any(SECRETS[0] in m.text for m in call if is_recalled(m)) for call in model.calls)
    assert len(memory.puts("hitl")) == 1
    assert [m.role for m in memory.stored("hitl")] == ["user", "assistant", "tool", "assistant"]
    assert SECRETS[0].encode() not in checkpointed_bytes(path)


# --- a sub-agent inside a tool ------------------------------------------------------------


def test_a_sub_agent_on_a_read_only_view_recalls_and_stores_nothing(memory: FactsMemory) -> None:
    """A sub-agent run inside a tool inherits the run's thread: with the middleware on
    the engine, its task ("SUBAGENT: ...") was stored as the user's words. On a
    read-only view (docs/surfaces.md) it recalls the user's memory and stores nothing."""
    sub_model = FakeChatModel()
    sub: Any = create_agent(
        sub_model, middleware=[SemanticRecallMiddleware(memory.engine.with_options(read_only=True))]
    )

    @tool
    def research(query: str) -> str:
        """Ask the research sub-agent."""
        answer = sub.invoke({"messages": [HumanMessage(f"SUBAGENT: {query}")]})
        return str(answer["messages"][-1].content)

    graph: Any = create_recall_graph(
        FakeChatModel(tool_rounds=1), memory.engine, tools=[research], checkpointer=InMemorySaver()
    )
    graph.invoke(ask("garden?"), config("main"))
    assert any(SECRETS[0] in m.text for m in sub_model.calls[0] if is_recalled(m))
    users = [m.text for m in memory.stored("main") if m.role == "user"]
    assert users == ["garden?"]


# --- retries and middleware order --------------------------------------------------------


class FlakyError(Exception):
    """A failure a RetryPolicy retries."""


def test_nodes_retried_by_a_retry_policy_store_nothing_twice(memory: FactsMemory) -> None:
    model = FakeChatModel()
    failures = {"model": 1, "index": 1}

    def answer(state: Any) -> dict[str, Any]:
        if failures["model"]:
            failures["model"] -= 1
            raise FlakyError("the model is down")
        return {"messages": [model.invoke(with_recall(state))]}

    class IndexThenFail(IndexNode):
        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> dict[str, Any]:
            done = super().invoke(input, config)
            if failures["index"]:  # fails after its write: the retry writes again
                failures["index"] -= 1
                raise FlakyError("lost the answer")
            return done

    retry = RetryPolicy(retry_on=FlakyError, initial_interval=0.001, jitter=False)
    builder: Any = StateGraph(RecallState)
    builder.add_node("recall", RecallNode(memory.engine))
    builder.add_node("model", answer, retry_policy=retry)
    builder.add_node("index", IndexThenFail(memory.engine), retry_policy=retry)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    builder.add_edge("model", "index")
    builder.add_edge("index", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke(ask("garden?"), config("retried"))
    assert failures == {"model": 0, "index": 0}
    assert len(model.calls) == 1
    assert texts(memory, "retried") == ["garden?", "ok: garden?"]
    assert len(memory.puts("retried")) == 1


def test_summarization_before_our_middleware_loses_no_user_message(memory: FactsMemory) -> None:
    """The other order than tests/unit/test_middleware.py's summarization test."""
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
    middleware: list[Any] = [summarize, SemanticRecallMiddleware(memory.engine)]
    agent: Any = create_agent(
        model, tools=[lookup], middleware=middleware, checkpointer=InMemorySaver()
    )
    searches = memory.searches()
    result = agent.invoke(ask("garden?"), config("g"))
    assert summary in result["messages"][0].text
    assert memory.searches() - searches == 1
    stored = memory.stored("g")
    assert [m.text for m in stored if m.role == "user"] == ["garden?"]
    assert all(any(SECRETS[0] in m.text for m in call if is_recalled(m)) for call in model.calls)


# --- a resumed run recalls once ----------------------------------------------------------


def checkpointed_bytes(path: Path) -> bytes:
    """Everything a SQLite checkpointer wrote: checkpoints and pending writes."""
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT * FROM checkpoints").fetchall()
        rows += raw.execute("SELECT * FROM writes").fetchall()
    assert rows
    return b"".join(v if isinstance(v, bytes) else str(v).encode() for row in rows for v in row)


def _asks_a_human_once() -> Any:
    """A tool that interrupts the run the first time it is called, then goes on."""
    resumed: dict[str, str] = {}

    @tool
    def check(query: str) -> str:
        """Ask a human once, then go on."""
        if "answer" not in resumed:
            resumed["answer"] = interrupt(query)
        return "checked"

    return check


@pytest.mark.parametrize("kind", ["graph", "agent"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_resumed_run_recalls_once_for_all_its_model_calls(
    memory: FactsMemory, kind: str, asynchronous: bool, tmp_path: Path
) -> None:
    """Resumed after an interrupt, the middleware recalled again before every model call
    of the run (three searches for three calls: the per-run channel stayed empty), where
    the graph recalls once; README: "recall once per user turn". The recall it keeps
    for the run is not checkpointed either."""
    check = _asks_a_human_once()

    model = FakeChatModel(tool_rounds=3)
    connection = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    saver: Any = InMemorySaver() if asynchronous else SqliteSaver(connection)
    runnable: Any = (
        create_recall_graph(model, memory.engine, tools=[check], checkpointer=saver)
        if kind == "graph"
        else create_agent(
            model,
            tools=[check],
            middleware=[SemanticRecallMiddleware(memory.engine)],
            checkpointer=saver,
        )
    )
    before = memory.searches()
    try:
        for step in (ask("garden?"), Command(resume="yes")):
            if asynchronous:
                asyncio.run(runnable.ainvoke(step, config("resumed")))
            else:
                runnable.invoke(step, config("resumed"))
    finally:
        connection.close()
    assert len(model.calls) == 4  # one before the interrupt, three after
    assert memory.searches() - before == 2  # once per run
    for call in model.calls:
        assert any(SECRETS[0] in m.text for m in call if is_recalled(m))
    assert len(memory.puts("resumed")) == 1
    if not asynchronous:
        assert SECRETS[0].encode() not in checkpointed_bytes(tmp_path / "checkpoints.sqlite")


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("given_the_node", [True, False])
def test_a_hand_built_graph_resumed_after_an_interrupt_recalls_or_says_why_not(
    memory: FactsMemory, asynchronous: bool, given_the_node: bool
) -> None:
    """A hand-built graph (recall node, a model node calling `with_recall(state)`, tools,
    index node) resumed after an interrupt starts at the interrupted node: the recall node
    does not run, and `with_recall` sent the model no memory, silently. Given the recall
    node it recalls for the turn itself; without it, it says why it cannot."""
    check = _asks_a_human_once()

    model = FakeChatModel(tool_rounds=2).bind_tools([check])
    recall = RecallNode(memory.engine)

    def call_model(state: RecallState) -> dict[str, Any]:
        prompt = with_recall(state, recall) if given_the_node else with_recall(state)
        return {"messages": [model.invoke(prompt)]}

    async def acall_model(state: RecallState) -> dict[str, Any]:
        prompt = await (awith_recall(state, recall) if given_the_node else awith_recall(state))
        return {"messages": [await model.ainvoke(prompt)]}

    builder: Any = StateGraph(RecallState)
    builder.add_node("recall", recall)
    builder.add_node("model", acall_model if asynchronous else call_model)
    builder.add_node("tools", ToolNode([check]))
    builder.add_node("index", IndexNode(memory.engine))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: "index"})
    builder.add_edge("tools", "model")
    builder.add_edge("index", END)
    graph = builder.compile(checkpointer=InMemorySaver())

    def run(step: Any) -> None:
        if asynchronous:
            asyncio.run(graph.ainvoke(step, config("handmade")))
        else:
            graph.invoke(step, config("handmade"))

    run(ask("garden?"))
    if not given_the_node:
        with pytest.raises(InvalidInputError, match="resumed after an interrupt"):
            run(Command(resume="yes"))
        return
    run(Command(resume="yes"))
    calls = model.bound.calls  # type: ignore[attr-defined]
    assert len(calls) == 3  # one before the interrupt, two after
    for call in calls:
        assert any(SECRETS[0] in m.text for m in call if is_recalled(m))
    assert texts(memory, "handmade")[-1] == "ok: garden?"


@pytest.mark.parametrize("ours_first", [True, False])
def test_a_turn_summarized_away_after_a_resume_is_still_stored(
    memory: FactsMemory, ours_first: bool
) -> None:
    """Interrupted, then summarized in the resumed run: the user's message (not stored
    before the turn ends) left the state, and the turn's messages as it began, kept in a
    per-run channel, were gone with the first run; memory never got the message."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    check = _asks_a_human_once()

    summary = "Here is a summary of the conversation to date"
    model = FakeChatModel(
        tool_rounds=lambda question: 0 if summary in question else 4, reply=lambda _: "done"
    )
    summarize = SummarizationMiddleware(
        model=GenericFakeChatModel(messages=iter(["They asked about a garden."] * 4)),
        trigger=("messages", 5),
        keep=("messages", 2),
    )
    ours = SemanticRecallMiddleware(memory.engine)
    middleware: list[Any] = [ours, summarize] if ours_first else [summarize, ours]
    agent: Any = create_agent(
        model, tools=[check], middleware=middleware, checkpointer=InMemorySaver()
    )
    agent.invoke(ask("garden?"), config("g"))
    result = agent.invoke(Command(resume="yes"), config("g"))
    assert summary in result["messages"][0].text  # the state lost the user's message
    stored = memory.stored("g")
    assert [m.text for m in stored if m.role == "user"] == ["garden?"]
    assert not any(summary in m.text for m in stored)


# --- copies, generated: nothing ever moves between threads or owners ---------------------

Copy = tuple[str, int, str]
"""(owner of the copied thread, which of its threads, owner of the copy)."""


USERS = st.sampled_from(["alice", "bob"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(USERS, st.integers(0, 2), USERS), min_size=1, max_size=8))
def test_generated_copies_keep_every_message_where_it_was_said(copies: list[Copy]) -> None:
    """A copy goes on and stores only its own turn, within one owner or into another
    owner's thread (whose history is set aside); no message changes thread or owner."""
    memory = FactsMemory()
    engine = memory.engine
    states: dict[str, list[BaseMessage]] = {}
    said_in: dict[str, str] = {}  # message id -> the thread it was first said in
    for n, (owner, which, copier) in enumerate(copies):
        source = f"{owner}-{which}"
        if source not in states:
            states[source] = [
                HumanMessage(f"first of {source}", id=f"{source}-q"),
                AIMessage("ok", id=f"{source}-a"),
            ]
            index_new_messages(engine, states[source], thread_id=source, resource_id=owner)
            said_in |= {m.id or "": source for m in states[source]}
        copy = f"{copier}-copy{n}"
        turn = HumanMessage(f"turn {n}", id=f"{copy}-q")
        index_new_messages(engine, [*states[source], turn], thread_id=copy, resource_id=copier)
        states[copy] = [*states[source], turn]
        said_in[turn.id or ""] = copy
        assert [m.id for m in memory.stored(copy)] == [turn.id]
    for thread_id in states:
        for stored in memory.stored(thread_id):
            assert said_in[stored.id] == thread_id
            assert stored.resource_id == thread_id.split("-")[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(USERS, st.integers(0, 2), st.sampled_from(["Sure.", "Hello!", "ok"])),
        min_size=1,
        max_size=10,
    )
)
def test_generated_cached_replies_are_stored_once_in_every_thread_they_answer(
    turns: list[tuple[str, int, str]],
) -> None:
    """Replies drawn from a pool with one id per text, as LangChain's LLM cache hands
    them back, in threads of two users (each state grown by `add_messages`, as a
    checkpointer grows it): every thread stores what its state holds, each message once,
    under its own owner, and no turn is refused."""
    memory = FactsMemory()
    pool: dict[str, AIMessage] = {}
    states: dict[str, list[BaseMessage]] = {}
    for n, (user, which, text) in enumerate(turns):
        thread_id = f"{user}-{which}"
        reply = pool.setdefault(text, AIMessage(text, id=f"cached-{len(pool)}"))
        turn = [HumanMessage(f"question {n}", id=f"q{n}"), reply]
        states[thread_id] = add_messages(states.get(thread_id, []), turn)
        index_new_messages(memory.engine, states[thread_id], thread_id=thread_id, resource_id=user)
    for thread_id, state in states.items():
        stored = memory.stored(thread_id)
        assert [m.text for m in stored] == [m.text for m in state]
        assert {m.resource_id for m in stored} == {thread_id.split("-")[0]}


def test_a_before_agent_redaction_listed_first_keeps_pii_from_the_embedder(
    memory: FactsMemory,
) -> None:
    """docs/surfaces.md: `PIIMiddleware` redacts before each model call, after recall
    searched for the message as sent; a `before_agent` redaction listed first does not."""
    from langchain.agents.middleware import AgentMiddleware, PIIMiddleware

    class RedactFirst(AgentMiddleware[Any, Any, Any]):
        def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
            last = state["messages"][-1]
            text = last.text.replace("alice@example.com", "[email]")
            return {"messages": [HumanMessage(text, id=last.id)]}

    embedded: list[str] = []
    embed_documents, embed_query = memory.embeddings.embed_documents, memory.embeddings.embed_query

    def documents(texts: list[str]) -> list[list[float]]:
        embedded.extend(texts)
        return embed_documents(texts)

    def query(text: str) -> list[float]:
        embedded.append(text)
        return embed_query(text)

    memory.embeddings.__dict__.update(embed_documents=documents, embed_query=query)
    for first, thread_id in (
        (PIIMiddleware("email", strategy="redact"), "pii"),
        (RedactFirst(), "own"),
    ):
        agent: Any = create_agent(
            FakeChatModel(), middleware=[first, SemanticRecallMiddleware(memory.engine)]
        )
        embedded.clear()  # a new message each time (LangGraph gives the input's its id)
        agent.invoke(
            {"messages": [HumanMessage("garden? mail alice@example.com")]}, config(thread_id)
        )
        assert not any("@" in m.text for m in memory.stored(thread_id))
        assert any("alice@example.com" in t for t in embedded) == (thread_id == "pii")


def test_history_of_tool_calls_alone_is_stored_not_a_crash() -> None:
    """History with no words (a tool call and its result, new ids) before the turn, in a
    thread that holds words: the search from the thread's start indexed an empty list."""
    engine = FactsMemory().engine
    ids = {"thread_id": "t", "resource_id": "alice"}
    index_new_messages(
        engine, [HumanMessage("hi there", id="u1"), AIMessage("hello", id="a1")], **ids
    )
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}], id="x1")
    state = [call, ToolMessage("result", tool_call_id="c1", id="x2"), HumanMessage("next", id="x3")]
    assert index_new_messages(engine, state, **ids).stored == ("x1", "x2", "x3")
