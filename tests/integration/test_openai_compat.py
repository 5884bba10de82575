"""ChatOpenAI end to end against a loopback fake OpenAI server.

Through the graph and through the middleware.
"""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from langchain_semantic_recall.graph import create_recall_graph
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from tests.fakes import (
    BLOCK_MARKER,
    SECRETS,
    FactsMemory,
    fake_openai_server,
)
from tests.unit.test_openai_compat import ALICE, check_chat_messages


def chat_model(base_url: str = "http://127.0.0.1:9/v1") -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini", api_key="test", base_url=base_url, max_retries=0, timeout=10
    )


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
