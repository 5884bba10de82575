"""Model runs and async embedded Chroma writes never overlap (`cpu_gate`): the gate itself."""

from __future__ import annotations

import threading
from collections.abc import Callable

from langchain_semantic_recall.cpu_gate import CpuGate

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


def test_event_loops_that_wrote_through_the_async_gate_are_not_kept() -> None:
    """Each `asyncio.run` that wrote through an index's async write gate (a script, a
    worker that runs each job in its own loop) leaves nothing of its loop behind.

    Before: the gate kept one `asyncio.Lock` per loop in a weak-keyed mapping, and a lock
    that has made a writer wait holds its loop: every such loop, closed, stayed alive."""
    import asyncio
    import gc
    import time
    import weakref

    from langchain_semantic_recall.vectors.chroma_workarounds.async_writes import (
        AsyncWriteGate,
    )

    gate = AsyncWriteGate()
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    def write() -> None:
        time.sleep(0.01)

    async def two_turns_at_once() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        await asyncio.gather(gate.run([write, write]), gate.run([write]))

    for _ in range(3):
        asyncio.run(two_turns_at_once())
    gc.collect()
    assert [loop for loop in loops if loop() is not None] == []
