"""The async API keeps blocking work off the event loop; hybrid halves run at once."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage, local_embeddings
from langchain_semantic_recall.engine.steps import drivers
from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.records import MessageRecord, ScopeFilter, StoredMessage, VectorHit
from langchain_semantic_recall.vectors import chroma_writes
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ASYNC_PIECE
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.conformance.vector_suite import DIMENSION, MODEL, axis, record
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


# --- embedded Chroma's async writes and the model's runs ----------------------------------


def test_async_writes_of_embedded_chroma_go_in_pieces_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chroma holds the GIL while it writes: small pieces, one at a time, the loop between."""
    index = ChromaVectorIndex.persistent(tmp_path / "chroma")
    index.open("idx-writes", dimension=DIMENSION, model=MODEL)
    log: list[str] = []
    sizes: list[int] = []
    active, most = 0, 0
    lock = threading.Lock()
    write = chroma_writes._write

    def counted(*args: Any, **kwargs: Any) -> None:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
            log.append("write")
            sizes.append(len(args[3]))
        try:
            write(*args, **kwargs)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(chroma_writes, "_write", counted)

    async def main() -> None:
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                if not log or log[-1] != "tick":
                    log.append("tick")
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        batches = [
            [record(f"m{r}-{i}", axis(i % DIMENSION), resource_id=f"r{r}") for i in range(40)]
            for r in range(3)
        ]
        await asyncio.gather(*(index.aupsert("idx-writes", batch) for batch in batches))
        done.set()
        await ticking

    asyncio.run(main())
    assert most == 1  # never two writes at once
    assert sum(sizes) == 120
    assert max(sizes) == ASYNC_PIECE
    writes = [n for n, kind in enumerate(log) if kind == "write"]
    assert all("tick" in log[a + 1 : b] for a, b in itertools.pairwise(writes))
    assert index.count("idx-writes") == 120


def test_an_async_batch_with_one_bad_vector_writes_nothing(tmp_path: Path) -> None:
    index = ChromaVectorIndex.persistent(tmp_path / "chroma")
    index.open("idx-bad", dimension=DIMENSION, model=MODEL)
    batch = [record(f"m{i}", axis(i % DIMENSION)) for i in range(40)]
    batch.append(record("short", [1.0, 0.0]))
    with pytest.raises(EmbeddingMismatchError, match="8-d vectors, got a 2-d vector"):
        asyncio.run(index.aupsert("idx-bad", batch))
    assert index.count("idx-bad") == 0


@pytest.mark.parametrize("share", ["all cores", "one core"])
def test_model_runs_at_once_are_bounded_by_the_cores(
    share: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent callers get no more runs at once than the cores hold at their threads.

    Every run waits until all eight callers are either running or waiting for their
    turn, so as many runs overlap as the bound lets in (and all eight without it).
    """
    cores = local_embeddings._usable_cores()
    threads = cores if share == "all cores" else 1
    callers_n = 8
    state = {"inside": 0, "waiting": 0, "most": 0, "arrived": 0}
    changed = threading.Condition()

    def count(key: str, step: int) -> None:
        with changed:
            state[key] += step
            state["most"] = max(state["most"], state["inside"])
            changed.notify_all()

    class Turns(threading.BoundedSemaphore):  # counts the callers waiting for a run
        def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
            count("waiting", 1)
            try:
                return super().acquire(blocking, timeout)
            finally:
                count("waiting", -1)

        def __enter__(self) -> bool:
            return self.acquire()

    def all_arrived() -> bool:  # every caller is in a run or queued for one (once true, stays)
        if state["inside"] + state["waiting"] == callers_n:
            state["arrived"] = 1
        return state["arrived"] == 1

    def run(self: Any, batch: Sequence[Sequence[int]]) -> list[list[float]]:
        count("inside", 1)
        try:
            with changed:
                assert changed.wait_for(all_arrived, timeout=WAIT_S), state
        finally:
            count("inside", -1)
        return [[0.0] * 384 for _ in batch]

    monkeypatch.setattr(local_embeddings._Runtime, "embed", run)
    with monkeypatch.context() as patch:
        patch.setattr(threading, "BoundedSemaphore", Turns)
        embeddings = LocalEmbeddings(num_threads=threads)
    callers = [
        threading.Thread(target=embeddings.embed_documents, args=([f"text {n}"],))
        for n in range(callers_n)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert state["most"] == max(1, cores // threads)
