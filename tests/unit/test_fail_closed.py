"""Checks fail closed and bugs stay loud (issue 23, item 9).

- A turn (graph nodes, middleware) checks its thread's owner and whether it was
  forgotten before the model runs; when the storage cannot answer, the turn is refused
  with `StorageError`, never run unchecked.
- `recall` degrades to "no recall" when a backend fails, but a programming error
  (`TypeError`, `AttributeError`, ...) raised anywhere under it propagates.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.errors import PROGRAMMING_ERRORS, StorageError
from langchain_semantic_recall.turns import arecall_turn, recall_turn
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.faults import (
    FaultyEmbeddings,
    FaultyStorage,
    FaultyVectors,
    InjectedError,
    Injector,
)

QUESTION = [HumanMessage("where did we go in Lisbon?", id="live")]


def rig(
    search_mode: str = "dense",
) -> tuple[SemanticRecall, FaultyStorage, FaultyVectors, FaultyEmbeddings]:
    storage = FaultyStorage(InMemoryStorage())
    vectors = FaultyVectors(InMemoryVectorIndex())
    embeddings = FaultyEmbeddings()
    memory = SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=embeddings,
        search_mode=search_mode,  # type: ignore[arg-type]
    )
    history: list[BaseMessage] = [
        HumanMessage("we went to Lisbon in March", id="m1"),
        AIMessage("Lisbon in March was mild", id="m2"),
    ]
    memory.index(history, thread_id="t1", resource_id="alice")
    return memory, storage, vectors, embeddings


@pytest.mark.parametrize("op", ["get_thread_owner", "is_forgotten"])
@pytest.mark.parametrize("error", [InjectedError("down"), TimeoutError("slow")])
def test_a_turn_whose_checks_cannot_be_read_is_refused(op: str, error: Exception) -> None:
    memory, storage, _, _ = rig()
    storage.faults.fail(op, error, times=None)
    with pytest.raises(StorageError, match="refused rather than run unchecked") as raised:
        recall_turn(memory, QUESTION, thread_id="t2", resource_id="alice")
    assert raised.value.__cause__ is error
    with pytest.raises(StorageError, match="t2"):
        asyncio.run(arecall_turn(memory, QUESTION, thread_id="t2", resource_id="alice"))
    storage.faults.clear()
    assert recall_turn(memory, QUESTION, thread_id="t2", resource_id="alice").messages


@pytest.mark.parametrize("bug", PROGRAMMING_ERRORS)
@pytest.mark.parametrize("where", ["embeddings", "vectors", "storage"])
@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_a_programming_error_under_recall_is_raised_not_read_as_no_memory(
    bug: type[Exception], where: str, mode: str
) -> None:
    memory, storage, vectors, embeddings = rig(mode)
    error = bug("a bug, not an outage")
    injectors: dict[str, Injector] = {
        "embeddings": embeddings.faults,
        "vectors": vectors.faults,
        "storage": storage.faults,
    }
    injector = injectors[where]
    op = {"embeddings": "embed_documents", "vectors": "query", "storage": "get_windows"}[where]
    injector.fail(op, error, times=None)
    with pytest.raises(bug, match="a bug"):
        memory.recall(QUESTION, thread_id="t2", resource_id="alice")
    with pytest.raises(bug, match="a bug"):
        asyncio.run(memory.arecall(QUESTION, thread_id="t2", resource_id="alice"))
    config = {"configurable": {"thread_id": "t2", "resource_id": "alice"}}
    with pytest.raises(bug, match="a bug"):
        memory.invoke(QUESTION, config)  # type: ignore[arg-type]
    assert injector.fired


def test_an_outage_under_recall_still_degrades_to_no_recall() -> None:
    memory, _, vectors, _ = rig()
    vectors.faults.fail("query", InjectedError("down"), times=None)
    assert memory.recall(QUESTION, thread_id="t2", resource_id="alice") == QUESTION
    vectors.faults.clear()
    assert memory.recall(QUESTION, thread_id="t2", resource_id="alice") != QUESTION
