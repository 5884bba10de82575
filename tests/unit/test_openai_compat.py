"""Recalled messages convert cleanly into OpenAI requests (the payloads, no server)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from langchain_semantic_recall.graph import create_recall_graph
from langchain_semantic_recall.messages import is_recalled
from tests.fakes import (
    BLOCK_MARKER,
    FactsMemory,
    FakeChatModel,
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
    # No socket options: ChatOpenAI would otherwise probe them on a new socket (offline tier).
    model = ChatOpenAI(model="gpt-4o-mini", api_key="test", http_socket_options=(), **options)
    return model._get_request_payload(messages)


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
