"""Vectors written behind: nobody can tell the difference from a write at the call but the
clock, and a failure is reported, never lost.

The in-memory index, with writes behind turned on, passes the whole conformance suite
(each write delayed, so that every other call really has something to wait for); the
tests below hold a write with an event to show what waits for it and what does not.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from langchain_semantic_recall.vectors.write_behind import MAX_BEHIND, Stored
from tests.conformance.vector_suite import DIMENSION, MODEL, VectorIndexConformance, record

NAME = "behind-test"
ALICE = ScopeFilter(resource_id="alice")


class BehindIndex(InMemoryVectorIndex):
    """The in-memory index writing behind; `hold` keeps the worker's next write waiting."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self._write_behind(None, lane=None)  # a lane of its own: tests stay apart
        self.delay = delay
        self.hold = threading.Event()
        self.hold.set()
        self.fail: Exception | None = None
        self.writes: list[list[str]] = []
        self.written = threading.Condition()

    def wait_for_writes(self, n: int) -> bool:
        """Whether `n` batches were written within 5 s."""
        with self.written:
            return self.written.wait_for(lambda: len(self.writes) >= n, timeout=5)

    def upsert(
        self,
        name: str,
        records: Sequence[VectorRecord],
        *,
        behind: bool = True,
        stored: Stored | None = None,
    ) -> None:
        super().upsert(name, records, behind=behind, stored=stored)  # behind unless told not

    def _check_upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        dimension = self._get(name).dimension
        for row in records:
            if len(row.vector) != dimension:
                raise EmbeddingMismatchError(f"vector of length {len(row.vector)}")

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        self.hold.wait(5)
        time.sleep(self.delay)  # what a write costs (Chroma: 10-20 ms), not a wait
        with self.written:
            self.writes.append([row.id for row in records])
            self.written.notify_all()
        if self.fail is not None:
            super()._upsert(name, records[:1])  # lands in part, then fails
            raise self.fail
        super()._upsert(name, records)


class TestConformanceWritingBehind(VectorIndexConformance):
    @pytest.fixture
    def vectors(self) -> VectorIndex:
        return BehindIndex(delay=0.002)


def vec(x: float) -> list[float]:
    rng = np.random.default_rng(int(x * 1000))
    return [float(v) for v in rng.standard_normal(DIMENSION)]


def opened(index: BehindIndex) -> BehindIndex:
    index.open(NAME, dimension=DIMENSION, model=MODEL)
    return index


def in_thread(call: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(call()))  # type: ignore[operator]
    thread.start()
    return thread, out


def test_upsert_returns_before_the_write_and_a_search_waits_for_it() -> None:
    index = opened(BehindIndex())
    index.hold.clear()
    index.upsert(NAME, [record("m1", vec(1), resource_id="alice")])  # returns: held
    assert index.writes == []
    search, hits = in_thread(lambda: index.query(NAME, vec(1), k=3, scope=ALICE))
    search.join(0.2)
    assert search.is_alive(), "a search must wait for the write pending before it"
    index.hold.set()
    search.join(5)
    assert [hit.id for hit in hits[0]] == ["m1"]  # type: ignore[union-attr]


def test_a_delete_never_overtakes_a_pending_write() -> None:
    index = opened(BehindIndex())
    index.hold.clear()
    index.upsert(NAME, [record("m1", vec(1), resource_id="alice")])
    delete, _ = in_thread(lambda: index.delete(NAME, message_ids=["m1"]))
    delete.join(0.2)
    assert delete.is_alive()
    index.hold.set()
    delete.join(5)
    assert index.count(NAME) == 0  # written, then deleted: not written after the delete


def test_a_big_batch_is_written_at_the_call_after_the_pending_ones() -> None:
    index = opened(BehindIndex(delay=0.05))
    index.upsert(NAME, [record("small", vec(1), resource_id="alice")])
    big = [record(f"b{i}", vec(i + 2), resource_id="alice") for i in range(MAX_BEHIND + 1)]
    index.upsert(NAME, big)
    assert len(index.writes) == 2  # no flush: both written when the call returned
    assert index.writes[0] == ["small"]
    index.upsert(NAME, [record("asked", vec(40), resource_id="alice")], behind=False)
    assert index.writes[-1] == ["asked"]  # a write not allowed behind (a move, a reindex)


def test_a_wrong_dimension_is_refused_at_the_call() -> None:
    index = opened(BehindIndex())
    with pytest.raises(EmbeddingMismatchError):
        index.upsert(NAME, [record("m1", [1.0, 2.0])])
    assert index.count(NAME) == 0


def test_a_failed_write_leaves_no_part_and_is_told_to_its_resource_only() -> None:
    index = opened(BehindIndex())
    index.fail = RuntimeError("disk full")
    rows = [
        record("long", vec(1), resource_id="alice", n=1),
        record("long", vec(2), resource_id="alice"),
        record("b1", vec(3), resource_id="bob"),
    ]
    index.upsert(NAME, rows)
    index.flush()
    assert index.count(NAME) == 0  # the chunk that landed is deleted: "long" reads missing
    assert index.write_failures("carol") == []
    (alice,) = index.write_failures("alice")
    assert "disk full" in alice
    assert "long" in alice
    assert "b1" not in alice
    (bob,) = index.write_failures("bob")
    assert "b1" in bob
    assert "long" not in bob
    assert index.write_failures("alice") == []  # said once


def test_the_async_twins_wait_without_blocking_the_loop() -> None:
    index = opened(BehindIndex())

    async def main() -> tuple[int, int]:
        index.hold.clear()
        index.upsert(NAME, [record("m1", vec(1), resource_id="alice")])  # (aupsert: at the call)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while index.writes == []:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        counting = asyncio.ensure_future(index.acount(NAME, ALICE))
        await asyncio.sleep(0.1)
        assert not counting.done()
        index.hold.set()
        count = await counting
        await ticker
        return count, ticks

    count, ticks = asyncio.run(main())
    assert count == 1
    assert ticks >= 5  # the loop ran while acount waited for the write


def test_a_wait_is_for_the_writes_queued_before_it_not_for_an_idle_queue() -> None:
    """A thread indexing without pause kept every search waiting until it stopped (an
    audit: one search in 8 s, taking 12.5 s); a wait now ends once the batches queued
    before it are written."""
    index = opened(BehindIndex(delay=0.005))
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            index.upsert(NAME, [record(f"p{n}", vec(n % 50), resource_id="alice")])
            n += 1

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert index.wait_for_writes(3)  # the producer keeps the queue busy
        waiter, _ = in_thread(index.flush)
        waiter.join(5)
        assert not waiter.is_alive(), "the wait never ended while another thread indexed"
    finally:
        stop.set()
        producer.join()
    index.flush()


def test_when_no_thread_can_start_the_batch_is_written_at_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At interpreter exit (Python 3.12+) or out of threads, `Thread.start` raises: the
    lane was left "running" with no worker, and every later call waited for ever."""
    index = opened(BehindIndex())

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    index.upsert(NAME, [record("m1", vec(1), resource_id="alice")])
    assert index.writes == [["m1"]]  # written by the caller
    monkeypatch.undo()
    index.upsert(NAME, [record("m2", vec(2), resource_id="alice")])
    assert index.count(NAME, ALICE) == 2  # and the lane works again


def test_a_store_written_inside_another_stores_call_is_not_held_by_it() -> None:
    """Held per store: code run inside one engine's call (an embedder, a callback) that
    indexed into another store had its batch started by nobody, and lost at exit."""
    outer, inner = opened(BehindIndex()), opened(BehindIndex())
    with outer.writes_held():
        inner.upsert(NAME, [record("m1", vec(1), resource_id="alice")])
        assert inner.wait_for_writes(1)  # written while the outer call still runs
        assert inner.writes == [["m1"]]
        outer.upsert(NAME, [record("m2", vec(2), resource_id="alice")])
        assert outer._behind is not None
        assert outer._behind.pending  # the outer store's own batch waits for its call
        assert not outer._behind.lane._running  # to end: no worker was started for it
        assert outer.writes == []
    outer.flush()
    assert outer.writes == [["m2"]]


def test_vectors_of_messages_forgotten_or_moved_while_they_waited_are_deleted() -> None:
    """Another process forgets or moves a thread without waiting for the lane: its deletes
    come before the write, so the worker asks, once it has written, which messages are
    still where they were, and deletes the others' vectors (a move's read as missing)."""
    index = opened(BehindIndex())
    index.hold.clear()
    where: dict[str, str | None] = {"gone": None, "moved": "bob", "kept": "alice"}
    asked: list[list[str]] = []

    def stored(records: Sequence[VectorRecord]) -> list[VectorRecord]:
        asked.append([row.id for row in records])
        return [row for row in records if where[row.message_id] == row.resource_id]

    batch = [record(m, vec(n), resource_id="alice") for n, m in enumerate(where)]
    batch.append(record("gone", vec(9), resource_id="alice", n=1))  # a second chunk of it
    index.upsert(NAME, batch, stored=stored)
    assert asked == []  # asked after the write, not before
    index.hold.set()
    index.flush()
    assert asked == [[row.id for row in batch]]
    assert index.message_ids(NAME, ALICE) == {"kept"}
    assert index.message_ids(NAME, ScopeFilter(resource_id="bob")) == set()  # never written


def test_a_storage_that_cannot_tell_leaves_the_vectors_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    index = opened(BehindIndex())

    def stored(records: Sequence[VectorRecord]) -> list[VectorRecord]:
        raise ConnectionError("the database went away")

    index.upsert(NAME, [record("m1", vec(1), resource_id="alice")], stored=stored)
    index.flush()
    assert index.message_ids(NAME, ALICE) == {"m1"}  # written: a failed check is no failure
    assert index.write_failures("alice") == []
    assert "could not ask the storage" in caplog.text
    assert "the database went away" in caplog.text
