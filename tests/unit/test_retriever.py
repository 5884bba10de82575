"""The retriever (with LangChain's standard retriever tests) and the memory search tool."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import ToolMessage
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_semantic_recall import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.retriever import (
    MemorySearchTool,
    SemanticRecallRetriever,
    create_memory_search_tool,
    format_hits,
)
from tests.fakes import BOB_SECRETS, SECRETS, TOPICS, FactsMemory

ALICE = {"configurable": {"thread_id": "alice-chat", "resource_id": "alice"}}
BOB = {"configurable": {"thread_id": "bob-chat", "resource_id": "bob"}}


@cache
def standard_memory() -> FactsMemory:
    """One engine for the standard suite (its fixtures are properties, not pytest's)."""
    return FactsMemory(threshold=None)


class TestStandardRetriever(RetrieversIntegrationTests):
    """LangChain's standard retriever tests, on a memory holding 20 facts per user."""

    @property
    def retriever_constructor(self) -> type[SemanticRecallRetriever]:
        return SemanticRecallRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        # No config in the standard calls: the retriever's own defaults give the scope.
        return {"memory": standard_memory().engine, "thread_id": "t", "resource_id": "alice"}

    @property
    def retriever_query_example(self) -> str:
        return "garden alpha0x piano"


@pytest.fixture
def memory() -> FactsMemory:
    return FactsMemory()


def test_documents_carry_message_metadata_and_score(memory: FactsMemory) -> None:
    retriever = memory.engine.as_retriever()
    (doc,) = retriever.invoke("garden", ALICE)
    assert isinstance(doc, Document)
    assert doc.page_content == f"garden {SECRETS[0]}"
    assert doc.id == "alice-garden"
    meta = doc.metadata
    assert meta["source"] == "memory"
    assert meta["message_id"] == "alice-garden"
    assert (meta["thread_id"], meta["resource_id"], meta["role"]) == (
        "alice-notes",
        "alice",
        "user",
    )
    assert meta["created_at"].endswith("+00:00")
    assert isinstance(meta["seq"], int)
    assert 0.3 <= meta["score"] <= 1
    assert meta["window"] == [
        {
            "message_id": "alice-garden",
            "role": "user",
            "text": f"garden {SECRETS[0]}",
            "created_at": meta["created_at"],
        }
    ]


async def test_scope_comes_from_the_config(memory: FactsMemory) -> None:
    retriever = memory.engine.as_retriever()
    alice = await retriever.ainvoke("garden", ALICE)
    bob = await retriever.ainvoke("garden", BOB)
    assert [d.page_content for d in alice] == [f"garden {SECRETS[0]}"]
    assert [d.page_content for d in bob] == [f"garden {BOB_SECRETS[0]}"]
    # The config wins over the retriever's defaults.
    pinned = memory.engine.as_retriever(thread_id="x", resource_id="alice")
    assert [d.metadata["resource_id"] for d in pinned.invoke("garden", BOB)] == ["bob"]


def test_k_per_retriever_and_per_call() -> None:
    memory = FactsMemory(threshold=None)
    query = " ".join(TOPICS[:6])
    assert len(memory.engine.as_retriever(k=5).invoke(query, ALICE)) == 5
    assert len(memory.engine.as_retriever().invoke(query, ALICE, k=2)) == 2
    assert len(memory.engine.as_retriever().invoke(query, ALICE)) == memory.engine.top_k
    with pytest.raises(InvalidOptionError):
        memory.engine.as_retriever(k=0)


def test_a_bound_view_gives_the_default_scope(memory: FactsMemory) -> None:
    retriever = memory.engine.for_thread("bob-chat", "bob").as_retriever()
    assert [d.page_content for d in retriever.invoke("garden")] == [f"garden {BOB_SECRETS[0]}"]


def test_no_thread_anywhere_is_a_clear_error(memory: FactsMemory) -> None:
    with pytest.raises(InvalidInputError, match="thread_id"):
        memory.engine.as_retriever().invoke("garden")


def test_tool_takes_only_a_query(memory: FactsMemory) -> None:
    tool = memory.engine.as_tool()
    assert isinstance(tool, MemorySearchTool)
    assert tool.name == "search_memory"
    assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    with pytest.raises(InvalidOptionError):
        memory.engine.as_tool(arg_types={"query": str})


async def test_tool_is_scoped_to_the_caller_whatever_the_model_says(memory: FactsMemory) -> None:
    tool = create_memory_search_tool(memory.engine, name="recall_notes", description="Notes.")
    assert (tool.name, tool.description) == ("recall_notes", "Notes.")
    call = {
        "name": "recall_notes",
        "args": {"query": "garden", "resource_id": "alice", "thread_id": "alice-notes"},
        "id": "call_1",
        "type": "tool_call",
    }
    result = await tool.ainvoke(call, BOB)
    assert isinstance(result, ToolMessage)
    assert BOB_SECRETS[0] in result.text
    assert SECRETS[0] not in result.text
    assert [d.metadata["resource_id"] for d in result.artifact] == ["bob"]
    sync = tool.invoke(call, ALICE)
    assert SECRETS[0] in sync.text
    assert BOB_SECRETS[0] not in sync.text


def test_tool_without_a_thread_is_a_clear_error(memory: FactsMemory) -> None:
    with pytest.raises(InvalidInputError, match="'search_memory' tool"):
        memory.engine.as_tool().invoke({"query": "garden"})


def test_format_hits(memory: FactsMemory) -> None:
    assert format_hits([]) == "No memories found for this query."
    text = format_hits(memory.engine.search("garden", thread_id="t", resource_id="alice"))
    assert text.splitlines()[0] == "Found 1 remembered message(s), best first:"
    assert 'conversation "alice-notes"' in text
    assert f"> user: garden {SECRETS[0]}" in text
