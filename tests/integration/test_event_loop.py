"""The event loop with embedded Chroma and the local model.

Async Chroma writes go in pieces; model runs at once are bounded by the cores.
tests/unit/test_event_loop.py has the rest.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from langchain_semantic_recall import local_embeddings
from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.vectors import chroma_writes
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ASYNC_PIECE
from tests.conformance.vector_suite import DIMENSION, MODEL, axis, record
from tests.unit.test_event_loop import WAIT_S


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
