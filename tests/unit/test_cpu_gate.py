"""Model runs and async embedded Chroma writes sharing a `CpuGate` never overlap."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.cpu_gate import CpuGate
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds

WAIT_S = 10.0  # only reached when the awaited state never comes (then the test fails)


class Log(list[str]):
    """What the gate's holders did, in order; `wait_for` wakes at each entry."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def append(self, entry: str) -> None:
        with self._changed:
            super().append(entry)
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
        """Whether `condition` came to hold within `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(condition, timeout)


def writes_waiting(gate: CpuGate, count: int) -> bool:
    """Whether `count` writes come to wait at `gate` within `WAIT_S` (it announces each)."""
    with gate._changed:
        return gate._changed.wait_for(lambda: gate._waiting == count, WAIT_S)


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def holding(gate: CpuGate, kind: str, label: str, log: Log, release: threading.Event) -> None:
    """Hold the gate as a model run (`kind` "run") or alone ("write") until `release`."""
    with gate.model_run() if kind == "run" else gate.alone():
        log.append(f"{label} in")
        release.wait(WAIT_S)
        log.append(f"{label} out")


def test_model_runs_share_the_gate() -> None:
    gate, log, release = CpuGate(), Log(), threading.Event()
    threads = [in_thread(lambda: holding(gate, "run", "run", log, release)) for _ in range(2)]
    assert log.wait_for(lambda: log.count("run in") == 2)  # both inside at once
    release.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert log == ["run in", "run in", "run out", "run out"]


def test_a_write_waits_for_the_run_in_progress_and_holds_back_the_runs_after_it() -> None:
    gate, log = CpuGate(), Log()
    first_run, write, late_run = threading.Event(), threading.Event(), threading.Event()
    threads = [in_thread(lambda: holding(gate, "run", "run", log, first_run))]
    assert log.wait_for(lambda: log == ["run in"])
    threads.append(in_thread(lambda: holding(gate, "write", "write", log, write)))
    assert writes_waiting(gate, 1)  # the write waits for the run
    late_run.set()  # the late run would leave at once: it must not even get in
    threads.append(in_thread(lambda: holding(gate, "run", "late run", log, late_run)))
    # Not held back, it gets in within a millisecond or so, beside the first run.
    assert not log.wait_for(lambda: "late run in" in log, timeout=0.3)
    first_run.set()
    assert log.wait_for(lambda: "write in" in log)
    write.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert log == ["run in", "run out", "write in", "write out", "late run in", "late run out"]


def test_an_async_embedded_chroma_write_waits_for_a_model_run(tmp_path: Path) -> None:
    gate = CpuGate()
    index = ChromaVectorIndex.persistent(
        tmp_path / "chroma", workarounds=ChromaWorkarounds(cpu_gate=gate)
    )
    index.open("gate-test", dimension=3, model="m")
    records = [
        VectorRecord(
            id=f"m{n}",
            vector=[1.0, float(n), 0.5],
            message_id=f"m{n}",
            thread_id="t",
            resource_id="alice",
            role="user",
            content=f"text {n}",
            created_at=datetime(2024, 1, 1, tzinfo=UTC),
        )
        for n in range(3)
    ]
    scope = ScopeFilter(resource_id="alice")
    log = Log()
    release = threading.Event()
    run = in_thread(lambda: holding(gate, "run", "run", log, release))

    async def write_while_the_model_runs() -> int:
        upsert = asyncio.ensure_future(index.aupsert("gate-test", records))
        waited = await asyncio.to_thread(writes_waiting, gate, 1)
        assert waited, "the write never came to the gate"
        written_meanwhile = index.count("gate-test", scope)
        release.set()
        await upsert
        return written_meanwhile

    try:
        assert log.wait_for(lambda: log == ["run in"])
        assert asyncio.run(write_while_the_model_runs()) == 0
    finally:
        release.set()
        run.join(WAIT_S)
    assert index.count("gate-test", scope) == 3
    index.close()


def test_the_local_model_does_not_run_while_a_write_holds_the_gate() -> None:
    gate = CpuGate()
    model = LocalEmbeddings(cpu_gate=gate)
    model.embed_query("load the model first")
    done = threading.Event()

    def embed() -> None:
        model.embed_query("held back")
        done.set()

    with gate.alone():
        embedding = in_thread(embed)
        # Unblocked, one short text takes ~10 ms: it must still be waiting after 300.
        assert not done.wait(0.3)
    assert done.wait(WAIT_S)
    embedding.join(WAIT_S)


def test_the_engine_gives_its_model_and_its_index_one_gate_of_their_own(tmp_path: Path) -> None:
    """`local()` owns the gate: shared by its model and index, not by another engine's."""
    first = SemanticRecall.local(tmp_path / "a")
    second = SemanticRecall.local(tmp_path / "b")
    try:
        model, index = first.embeddings, first.vector_store
        assert isinstance(model, LocalEmbeddings)
        assert isinstance(index, ChromaVectorIndex)
        assert model.cpu_gate is not None
        assert index.workarounds.cpu_gate is model.cpu_gate
        other = second.embeddings
        assert isinstance(other, LocalEmbeddings)
        assert other.cpu_gate is not model.cpu_gate
        assert LocalEmbeddings().cpu_gate is None  # built apart: no gate
    finally:
        first.storage.close()
        second.storage.close()
