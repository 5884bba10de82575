"""Closing an engine: what `local()` / `from_url()` built is closed, what was passed stays open.

`close()` / `aclose()` and `with` / `async with` release the engine's own SQLite
connection (after its background postings builds), its Chroma client; an engine and its
views share one lifecycle; every call after the close raises `EngineClosedError`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import (
    EngineClosedError,
    InvalidOptionError,
    SemanticRecall,
    SQLiteStorage,
    StorageError,
)
from langchain_semantic_recall.engine.lifecycle import Lifecycle, owning
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.storage.postings import ResourcePostings
from langchain_semantic_recall.vectors import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

TURN = [HumanMessage("I am allergic to peanuts"), AIMessage("Noted: no peanuts.")]


def _from_url(tmp_path: Path, **options: Any) -> SemanticRecall:
    return SemanticRecall.from_url(
        storage=f"sqlite:///{tmp_path / 'm.sqlite3'}",
        vector="memory://",
        embeddings=FakeEmbeddings(),
        **options,
    )


def _calls(memory: SemanticRecall) -> dict[str, Any]:
    """One call of each kind, to run on a closed engine."""
    return {
        "search": lambda: memory.search("peanuts", resource_id="alice"),
        "index": lambda: memory.index(TURN, thread_id="t1", resource_id="alice"),
        "recall": lambda: memory.recall(TURN, thread_id="t1", resource_id="alice"),
        "stats": lambda: memory.stats(resource_id="alice"),
        "forget": lambda: memory.forget_thread("t1", resource_id="alice"),
        "invoke": lambda: memory.invoke(TURN, {"configurable": {"thread_id": "t1"}}),
        "retriever": lambda: memory.as_retriever().invoke(
            "peanuts", {"configurable": {"resource_id": "alice"}}
        ),
    }


def test_with_block_closes_the_storage_it_built(tmp_path: Path) -> None:
    with _from_url(tmp_path) as memory:
        memory.index(TURN, thread_id="t1", resource_id="alice")
        assert memory.search("peanuts", resource_id="alice")
        storage = memory.storage
    assert memory.closed
    with pytest.raises(StorageError):  # the connection itself is closed, not only refused
        storage.count(ScopeFilter(resource_id="alice"))


@pytest.mark.parametrize(
    "call", ["search", "index", "recall", "stats", "forget", "invoke", "retriever"]
)
def test_every_call_after_close_raises_a_clear_error(tmp_path: Path, call: str) -> None:
    memory = _from_url(tmp_path)
    memory.close()
    with pytest.raises(EngineClosedError, match=r"build a new one"):
        _calls(memory)[call]()


async def test_async_calls_after_aclose_raise(tmp_path: Path) -> None:
    async with _from_url(tmp_path) as memory:
        await memory.aindex(TURN, thread_id="t1", resource_id="alice")
    with pytest.raises(EngineClosedError):
        await memory.asearch("peanuts", resource_id="alice")
    with pytest.raises(EngineClosedError):
        await memory.arecall(TURN, thread_id="t1", resource_id="alice")


async def test_aclose_closes_the_storage_it_built(tmp_path: Path) -> None:
    memory = _from_url(tmp_path)
    storage = memory.storage
    await memory.aclose()
    with pytest.raises(StorageError):
        storage.count(ScopeFilter(resource_id="alice"))


def test_close_is_idempotent(tmp_path: Path) -> None:
    memory = _from_url(tmp_path)
    memory.close()
    memory.close()
    assert memory.closed


async def test_aclose_after_close_is_a_no_op(tmp_path: Path) -> None:
    memory = _from_url(tmp_path)
    memory.close()
    await memory.aclose()
    assert memory.closed
    with pytest.raises(EngineClosedError):
        async with memory:
            pass


def test_a_closed_engine_cannot_be_entered_again(tmp_path: Path) -> None:
    memory = _from_url(tmp_path)
    memory.close()
    with pytest.raises(EngineClosedError), memory:
        pass


def test_backends_passed_in_stay_open(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "m.sqlite3")
    vectors = InMemoryVectorIndex()
    with SemanticRecall(storage=storage, vector_store=vectors, embeddings=FakeEmbeddings()) as m:
        m.index(TURN, thread_id="t1", resource_id="alice")
    with pytest.raises(EngineClosedError):
        m.search("peanuts", resource_id="alice")
    assert storage.count(ScopeFilter(resource_id="alice")) == 2  # still the caller's, open
    again = SemanticRecall(storage=storage, vector_store=vectors, embeddings=FakeEmbeddings())
    assert again.search("peanuts", resource_id="alice")
    storage.close()


def test_views_share_the_lifecycle(tmp_path: Path) -> None:
    memory = _from_url(tmp_path)
    precise = memory.with_options(top_k=1)
    bound = memory.for_thread("t1", "alice")
    precise.close()  # closing a view closes the engine it shares its backends with
    for engine in (memory, bound):
        assert engine.closed
        with pytest.raises(EngineClosedError):
            engine.search("peanuts", resource_id="alice")


def test_a_failed_build_closes_what_was_built_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []
    monkeypatch.setattr(SQLiteStorage, "close", lambda self: closed.append("sqlite"))
    monkeypatch.setattr(InMemoryVectorIndex, "close", lambda self: closed.append("vectors"))
    with pytest.raises(InvalidOptionError):
        _from_url(tmp_path, top_k=0)
    assert closed == ["vectors", "sqlite"]


def test_closing_waits_for_the_background_postings_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build in flight holds a read connection to the file: close waits for it."""
    storage = SQLiteStorage(tmp_path / "m.sqlite3", keyword_cache_min_docs=1)
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    memory.index(TURN, thread_id="t1", resource_id="alice")
    entered, release = threading.Event(), threading.Event()
    build = ResourcePostings.build

    def held_build(rows: Any) -> ResourcePostings:
        entered.set()
        assert release.wait(30)
        return build(rows)

    monkeypatch.setattr(ResourcePostings, "build", staticmethod(held_build))
    clear = storage._postings.clear

    def clear_and_release() -> None:  # close has begun: let the build finish
        clear()
        release.set()

    monkeypatch.setattr(storage._postings, "clear", clear_and_release)
    storage._postings.background_docs = 1
    storage._postings.first_search_in_sql = False
    storage.keyword_search("peanuts", scope=ScopeFilter(resource_id="alice"), limit=5)
    assert entered.wait(30)
    try:
        storage.close()
        assert not any(worker.is_alive() for worker in storage._postings._workers)
    finally:
        release.set()
        storage._postings.join(timeout=30)


def test_a_failing_part_does_not_keep_the_others_open() -> None:
    closed: list[str] = []

    class Part:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def close(self) -> None:
            closed.append(self.name)
            if self.fail:
                raise OSError(f"{self.name} failed")

    life = Lifecycle()
    life.own(Part("storage"), Part("vectors", fail=True), Part("embeddings"))
    with pytest.raises(OSError, match="vectors failed"):
        life.close()
    assert closed == ["embeddings", "vectors", "storage"]
    life.close()  # closed once: nothing is closed twice
    assert closed == ["embeddings", "vectors", "storage"]


class HeldEmbeddings(FakeEmbeddings):
    """Embeds as the fake does; while `held`, each call waits for `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False
        self.entered, self.release = threading.Event(), threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.held:
            self.entered.set()
            assert self.release.wait(30)
        return super().embed_documents(texts)


class CloseRecordingVectors(InMemoryVectorIndex):
    """In-memory vectors that refuse every write once closed, as Chroma's client does."""

    def __init__(self) -> None:
        super().__init__()
        self.is_closed = False

    def _upsert(self, name: str, records: Any) -> None:
        assert not self.is_closed, "a write reached the vector index after it was closed"
        super()._upsert(name, records)

    def _close(self) -> None:
        self.is_closed = True

    async def _aclose(self) -> None:
        self.is_closed = True


LATER = [HumanMessage("We fly to Lisbon in May"), AIMessage("Noted: Lisbon, May.")]
"""A turn not embedded yet (the engine caches the vectors of texts it embedded)."""


def _held_engine(tmp_path: Path) -> tuple[SemanticRecall, HeldEmbeddings, CloseRecordingVectors]:
    embeddings, vectors = HeldEmbeddings(), CloseRecordingVectors()
    backends = {
        "storage": SQLiteStorage(tmp_path / "m.sqlite3"),
        "vector_store": vectors,
        "embeddings": embeddings,
    }
    memory = owning(SemanticRecall, backends, {}, embeddings_given=True)
    memory.index(TURN, thread_id="t0", resource_id="alice")  # the index exists
    embeddings.held = True
    return memory, embeddings, vectors


def _closing_began(memory: SemanticRecall) -> threading.Event:
    """Set once a close of `memory` marked it closed (and goes on to wait for calls)."""
    life, began = memory._core.life, threading.Event()
    begin = life._begin

    def begin_and_tell() -> None:
        begin()
        began.set()

    life._begin = begin_and_tell  # type: ignore[method-assign]
    return began


def test_close_waits_for_the_calls_in_flight(tmp_path: Path) -> None:
    """A close on another thread lets a call in flight finish whole, then closes.

    Before: the close closed the storage and the vector index under the call, which
    stored the turn and then failed its vector write (on embedded Chroma: an
    `AttributeError` from inside chromadb in the result's `error`).
    """
    memory, embeddings, vectors = _held_engine(tmp_path)
    outcome: dict[str, Any] = {}
    call = threading.Thread(
        target=lambda: outcome.setdefault(
            "result", memory.index(LATER, thread_id="t1", resource_id="alice")
        )
    )
    call.start()
    assert embeddings.entered.wait(30)
    began = _closing_began(memory)
    closer = threading.Thread(target=memory.close)
    closer.start()
    assert began.wait(30)
    with pytest.raises(EngineClosedError):  # a new call is refused at once
        memory.search("peanuts", resource_id="alice")
    assert closer.is_alive()  # waiting for the call
    assert not vectors.is_closed
    embeddings.release.set()
    call.join(30)
    closer.join(30)
    assert not closer.is_alive()
    assert outcome["result"].error is None
    assert vectors.is_closed


async def test_aclose_waits_for_the_calls_in_flight(tmp_path: Path) -> None:
    import asyncio

    memory, embeddings, vectors = _held_engine(tmp_path)
    call = asyncio.ensure_future(memory.aindex(LATER, thread_id="t1", resource_id="alice"))
    assert await asyncio.to_thread(embeddings.entered.wait, 30)
    began = _closing_began(memory)
    closing = asyncio.ensure_future(memory.aclose())
    assert await asyncio.to_thread(began.wait, 30)
    assert not closing.done()
    assert not vectors.is_closed
    embeddings.release.set()
    result = await asyncio.wait_for(call, 30)
    await asyncio.wait_for(closing, 30)
    assert result.error is None
    assert vectors.is_closed


async def test_close_on_the_loop_thread_leaves_the_closing_to_the_last_call(
    tmp_path: Path,
) -> None:
    """`close()` cannot block the loop its own calls run on: the last call out closes."""
    import asyncio

    memory, embeddings, vectors = _held_engine(tmp_path)
    call = asyncio.ensure_future(memory.aindex(LATER, thread_id="t1", resource_id="alice"))
    assert await asyncio.to_thread(embeddings.entered.wait, 30)
    memory.close()  # returns at once: waiting here would hang the loop
    assert memory.closed
    assert not vectors.is_closed
    embeddings.release.set()
    result = await asyncio.wait_for(call, 30)
    assert result.error is None
    assert vectors.is_closed


async def test_a_cancelled_aclose_leaves_the_closing_to_the_last_call(tmp_path: Path) -> None:
    """`asyncio.wait_for(memory.aclose(), 1)` timing out while a call runs: still closed."""
    import asyncio

    memory, embeddings, vectors = _held_engine(tmp_path)
    call = asyncio.ensure_future(memory.aindex(LATER, thread_id="t1", resource_id="alice"))
    assert await asyncio.to_thread(embeddings.entered.wait, 30)
    began = _closing_began(memory)
    closing = asyncio.ensure_future(memory.aclose())
    assert await asyncio.to_thread(began.wait, 30)
    closing.cancel()
    assert (await asyncio.gather(closing, return_exceptions=True))[0] is not None
    assert not vectors.is_closed
    embeddings.release.set()
    assert (await asyncio.wait_for(call, 30)).error is None
    assert vectors.is_closed  # closed by the call as it left


def test_a_call_that_never_ends_holds_a_close_for_a_bounded_time_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung embedder, a task of an abandoned event loop: the close goes on after
    `CLOSE_WAIT_S` (shortened here) and says how many calls it closed under."""
    from langchain_semantic_recall.engine import lifecycle

    monkeypatch.setattr(lifecycle, "CLOSE_WAIT_S", 0.05)
    memory, embeddings, vectors = _held_engine(tmp_path)
    call = threading.Thread(
        target=lambda: memory.index(LATER, thread_id="t1", resource_id="alice"), daemon=True
    )
    call.start()
    assert embeddings.entered.wait(30)
    try:
        memory.close()  # returns: the held call is still in flight
        assert vectors.is_closed
        assert "1 call(s) still in flight" in caplog.text
    finally:
        embeddings.release.set()
        call.join(30)


class LoopHeldEmbeddings(FakeEmbeddings):
    """Embeds as the fake does, except that async calls wait on their loop for ever."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        import asyncio

        self.entered.set()
        await asyncio.Event().wait()  # never set: the loop is closed under it
        raise AssertionError("unreachable")


def test_an_async_call_abandoned_with_its_event_loop_leaves_once_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event loop closed with a call of the engine pending in one of its tasks (a
    server's loop torn down, a script's `loop.close()`): once the task's coroutine is
    closed (collected), the call has left. A close then closes at once.

    Before: the call's exit raised `ValueError` (a context variable reset outside the
    task's context; "Exception ignored in: <coroutine ...>" when collected) before it
    counted itself out, so the engine counted it in flight for ever: a close on the
    loop's thread left the closing to that call and closed nothing (its SQLite
    connection and Chroma client stayed open), one on another thread waited
    `CLOSE_WAIT_S` (60 s).
    """
    import asyncio

    from langchain_semantic_recall.engine import lifecycle

    monkeypatch.setattr(lifecycle, "CLOSE_WAIT_S", 5.0)
    embeddings, vectors = LoopHeldEmbeddings(), CloseRecordingVectors()
    backends = {
        "storage": SQLiteStorage(tmp_path / "m.sqlite3"),
        "vector_store": vectors,
        "embeddings": embeddings,
    }
    memory = owning(SemanticRecall, backends, {}, embeddings_given=True)
    memory.index(TURN, thread_id="t0", resource_id="alice")
    loop = asyncio.new_event_loop()
    task = loop.create_task(memory.asearch("Lisbon in May", resource_id="alice"))
    assert loop.run_until_complete(asyncio.to_thread(embeddings.entered.wait, 30))
    loop.close()
    task._log_destroy_pending = False  # type: ignore[attr-defined]  # (the test's own task)
    task.get_coro().close()  # what collecting the abandoned task does
    memory.close()
    assert vectors.is_closed
    with pytest.raises(StorageError):
        memory.storage.count(ScopeFilter(resource_id="alice"))
