"""Recalled messages convert cleanly into OpenAI requests (payload and a loopback call)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from langchain_semantic_recall.graph import create_recall_graph
from langchain_semantic_recall.messages import is_recalled
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from tests.fakes import (
    BLOCK_MARKER,
    SECRETS,
    FactsMemory,
    FakeChatModel,
    fake_openai_server,
    lookup,
)

ALICE = {"configurable": {"thread_id": "alice-chat", "resource_id": "alice"}}
KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls"},
    "tool": {"role", "content", "tool_call_id"},
}
MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])


def chat_model(base_url: str = "http://127.0.0.1:9/v1") -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini", api_key="test", base_url=base_url, max_retries=0, timeout=10
    )


def check_chat_messages(messages: Sequence[dict[str, Any]]) -> None:
    """Valid chat/completions messages: roles, keys, content, tool-call pairs."""
    MESSAGES.validate_python(messages)
    pending: set[str] = set()
    for message in messages:
        role = message["role"]
        assert set(message) <= KEYS[role], message
        if role == "tool":
            assert message["tool_call_id"] in pending, "a tool result without its call"
            pending.discard(message["tool_call_id"])
            continue
        assert not pending, "a tool call without its result"
        content = message["content"]
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                assert call["type"] == "function"
                json.loads(call["function"]["arguments"])
                pending.add(call["id"])
        else:
            assert isinstance(content, str) or all(p["type"] == "text" for p in content)
    assert not pending, "a tool call without its result"
    assert '"source"' not in json.dumps(messages)  # our tag stays on our side


def payload(messages: list[BaseMessage], **options: Any) -> dict[str, Any]:
    return ChatOpenAI(model="gpt-4o-mini", api_key="test", **options)._get_request_payload(messages)


def history() -> list[BaseMessage]:
    call = {"name": "lookup", "args": {"query": "garden"}, "id": "call_old"}
    return [
        HumanMessage("garden plans?", id="h1"),
        AIMessage("Let me check.", tool_calls=[call], id="a1"),
        ToolMessage("garden beds at noon", tool_call_id="call_old", id="t1"),
        AIMessage("garden beds: noon", id="a2"),
        HumanMessage("piano?", id="h2"),
        AIMessage("ok: piano?", id="a3"),
    ]


def test_same_and_cross_thread_recall_make_a_valid_payload() -> None:
    memory = FactsMemory(message_range=2, top_k=4)
    memory.engine.index(history(), thread_id="alice-chat", resource_id="alice")
    live_call = {"name": "lookup", "args": {"query": "garden"}, "id": "call_live"}
    live = [
        HumanMessage("garden beds?", id="h3"),
        AIMessage("", tool_calls=[live_call], id="a4"),
        ToolMessage("looked up", tool_call_id="call_live", id="t2"),
    ]
    messages = memory.engine.recall(live, thread_id="alice-chat", resource_id="alice")
    recalled = [m for m in messages if is_recalled(m)]
    assert any(m.id == "a1" for m in recalled)  # a recalled tool call, reduced to its text
    assert BLOCK_MARKER in recalled[0].text  # and the cross-thread block
    body = payload(messages)
    check_chat_messages(body["messages"])
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system"
    assert "tool_calls" not in body["messages"][roles.index("assistant")]
    responses = payload(messages, use_responses_api=True)
    assert '"source"' not in json.dumps(responses["input"])


def test_every_model_call_of_a_tool_loop_makes_a_valid_payload() -> None:
    memory = FactsMemory()
    model = FakeChatModel(tool_rounds=2)
    graph = create_recall_graph(
        model,
        memory.engine,
        tools=[lookup],
        system_prompt="Be brief.",
        checkpointer=InMemorySaver(),
    )
    for question in ("garden?", "piano?"):
        graph.invoke({"messages": [("user", question)]}, ALICE)
    assert len(model.calls) == 6
    for call in model.calls:
        body = payload(call)
        check_chat_messages(body["messages"])
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        assert BLOCK_MARKER in body["messages"][1]["content"]


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.mark.usefixtures("no_proxy")
def test_chat_openai_end_to_end_through_the_graph() -> None:
    memory = FactsMemory()
    with fake_openai_server("You said garden alpha0x.") as server:
        graph = create_recall_graph(
            chat_model(server.base_url), memory.engine, checkpointer=InMemorySaver()
        )
        out = graph.invoke({"messages": [("user", "garden?")]}, ALICE)
    assert server.paths == ["/v1/chat/completions"]
    (request,) = server.requests
    check_chat_messages(request["messages"])
    block = request["messages"][0]
    assert block["role"] == "system"
    assert BLOCK_MARKER in block["content"]
    assert f"garden {SECRETS[0]}" in block["content"]
    assert request["messages"][-1] == {"role": "user", "content": "garden?"}
    assert out["messages"][-1].text == "You said garden alpha0x."
    assert [m.role for m in memory.stored("alice-chat")] == ["user", "assistant"]


@pytest.mark.usefixtures("no_proxy")
async def test_chat_openai_end_to_end_through_the_middleware() -> None:
    memory = FactsMemory()
    with fake_openai_server() as server:
        agent = create_agent(
            chat_model(server.base_url),
            system_prompt="Be brief.",
            middleware=[SemanticRecallMiddleware(memory.engine)],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "alice-chat"}}
        await agent.ainvoke(
            {"messages": [("user", "piano?")]}, config, context={"resource_id": "alice"}
        )
    (request,) = server.requests
    check_chat_messages(request["messages"])
    first, block = request["messages"][:2]
    assert first == {"role": "system", "content": "Be brief."}
    assert f"piano {SECRETS[1]}" in block["content"]
