"""The async API keeps blocking work off the event loop; hybrid halves run at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.engine.steps import drivers
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.records import MessageRecord, ScopeFilter, StoredMessage, VectorHit
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

WAIT_S = 10.0  # only reached if the two halves do not overlap (then the test fails)


class ThreadEmbeddings(FakeEmbeddings):
    """Records the thread of every embedding call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.threads.add(threading.get_ident())
        return super().embed_documents(texts)


class ThreadStorage(SQLiteStorage):
    """SQLite storage recording the thread of each backend call."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.threads: dict[str, set[int]] = {}

    def _seen(self, name: str) -> None:
        self.threads.setdefault(name, set()).add(threading.get_ident())

    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        self._seen("put")
        return super()._put(records)

    def _keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        self._seen("keyword_search")
        return super()._keyword_search(query, scope=scope, limit=limit)

    def _get_windows(self, message_ids: list[str], **kwargs: Any) -> Any:
        self._seen("get_windows")
        return super()._get_windows(message_ids, **kwargs)


class ThreadVectors(InMemoryVectorIndex):
    """In-memory vectors recording the thread of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[str, set[int]] = {}

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        self.threads.setdefault("query", set()).add(threading.get_ident())
        return super()._query(name, vector, k=k, scope=scope)

    def _upsert(self, name: str, records: Sequence[Any]) -> None:
        self.threads.setdefault("upsert", set()).add(threading.get_ident())
        super()._upsert(name, records)


def turn(n: int) -> list[Any]:
    return [HumanMessage(f"I planted tomatoes in the garden {n}"), AIMessage(f"Nice garden {n}")]


def test_async_index_and_recall_do_their_io_off_the_loop() -> None:
    storage, vectors, embeddings = ThreadStorage(), ThreadVectors(), ThreadEmbeddings()
    memory = SemanticRecall(storage=storage, vector_store=vectors, embeddings=embeddings)

    async def main() -> int:
        ids = {"thread_id": "t", "resource_id": "alice"}
        await asyncio.gather(*(memory.aindex(turn(n), **ids) for n in range(5)))
        await asyncio.gather(
            *(memory.arecall([HumanMessage("what about the garden?")], **ids) for _ in range(5))
        )
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert embeddings.threads
    assert loop_thread not in embeddings.threads
    for name in ("put", "keyword_search", "get_windows"):
        assert storage.threads[name], name
        assert loop_thread not in storage.threads[name], name
    for name in ("query", "upsert"):
        assert vectors.threads[name], name
        assert loop_thread not in vectors.threads[name], name


class Rendezvous:
    """Both halves must be inside their call at the same time, or the wait times out."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=WAIT_S)
        self.met = False

    def meet(self) -> None:
        self.barrier.wait()
        self.met = True


def rendezvous_engine() -> tuple[SemanticRecall, Rendezvous]:
    meeting = Rendezvous()

    class KeywordMeets(SQLiteStorage):
        def _keyword_search(
            self, query: str, *, scope: ScopeFilter, limit: int
        ) -> list[tuple[str, float]]:
            if query == "garden meeting":
                meeting.meet()
            return super()._keyword_search(query, scope=scope, limit=limit)

    class VectorsMeet(InMemoryVectorIndex):
        def _query(
            self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
        ) -> list[VectorHit]:
            meeting.meet()
            return super()._query(name, vector, k=k, scope=scope)

    memory = SemanticRecall(
        storage=KeywordMeets(":memory:"), vector_store=VectorsMeet(), embeddings=FakeEmbeddings()
    )
    memory.index(turn(1), thread_id="t", resource_id="alice")
    return memory, meeting


def test_hybrid_search_runs_both_halves_at_once_sync() -> None:
    memory, meeting = rendezvous_engine()
    memory.search("garden meeting", resource_id="alice")
    assert meeting.met


def test_hybrid_search_runs_both_halves_at_once_async() -> None:
    memory, meeting = rendezvous_engine()
    asyncio.run(memory.asearch("garden meeting", resource_id="alice"))
    assert meeting.met


def test_splitting_text_does_not_load_the_model() -> None:
    """Chunking runs on the caller's thread (an event loop): the tokenizer alone loads."""
    embeddings = LocalEmbeddings()
    assert embeddings.split_text("a short message") == ["a short message"]
    assert embeddings.count_tokens("a short message") == 5
    assert embeddings._loaded is None  # the ONNX session was not loaded


def test_busy_side_threads_fall_back_to_one_after_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = SemanticRecall(
        storage=SQLiteStorage(":memory:"),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
    )
    memory.index(turn(1), thread_id="t", resource_id="alice")
    expected = memory.search("tomatoes garden", resource_id="alice")
    monkeypatch.setattr(drivers, "_SIDE", drivers._SidePool(workers=0))
    assert drivers._SIDE.submit(lambda: None) is None
    assert memory.search("tomatoes garden", resource_id="alice") == expected


async def test_sync_twins_work_inside_a_running_event_loop() -> None:
    """A Jupyter cell runs in a loop: the sync calls never start or need one of their own."""
    memory = SemanticRecall(
        storage=SQLiteStorage(":memory:"),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="dense",
        threshold=0.0,
    )
    ids = {"thread_id": "t", "resource_id": "alice"}
    assert memory.index(turn(1), **ids).error is None
    assert memory.search("tomatoes garden", resource_id="alice")
    question = HumanMessage("what about the garden tomatoes?")
    assert len(memory.recall([question], **ids)) > 1  # the memory block, then the question
    config = {"configurable": ids}
    assert memory.invoke([question], config)
    assert memory.as_retriever().invoke("tomatoes", {"configurable": {"resource_id": "alice"}})
    assert memory.stats(resource_id="alice").messages == 2
    assert memory.forget_thread("t", resource_id="alice") == 2
    memory.close()
