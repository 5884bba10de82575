"""Runs of the local model and async writes of embedded Chroma never overlap in a process.

A run of the local model keeps every core busy (`local_embeddings`), and an embedded
Chroma write holds the GIL from start to end (`vectors.chroma_writes`). When both run at
once, the writing thread waits for a core while it holds the GIL, and every other Python
thread waits with it, an event loop included. A `CpuGate` keeps them apart: model runs
share the gate with each other, a write waits for the runs in progress, then runs alone,
and runs that arrive while a write waits go after it. `benchmarks/perf_loop.py`, 20
`aindex` + 20 `arecall` at once with the real model on two cores, three paired runs:
longest loop stall 20.1 / 23.6 / 14.1 ms with the gate against 39.3 / 31.6 / 23.0 ms
without, p99 7.6-8.1 against 14.0-14.6 ms; over eight runs with the gate, 14-60 ms and
p99 7.1-9.2 ms (`docs/performance.md`). Writers go first, so a steady stream of async
writes holds the model back for as long as it lasts.

Only the async twins' writes take the gate: the sync bulk import overlaps writing batch
*n* with embedding batch *n + 1* on purpose, and blocks no event loop.

The gate belongs to whoever builds the model and the index: `SemanticRecall.local` and
`from_url` make one and pass it to both (`LocalEmbeddings(cpu_gate=...)`,
`ChromaWorkarounds(cpu_gate=...)`). A model and an index built apart share none, unless
given the same gate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CpuGate"]


class CpuGate:
    """Model runs share it; a write waits for them, then holds it alone (writers first).

    Example:
        ```python
        gate = CpuGate()
        with gate.model_run():
            vectors = session.run(...)
        with gate.alone():
            collection.upsert(...)
        ```
    """

    def __init__(self) -> None:
        """An open gate."""
        self._changed = threading.Condition()
        self._runs = 0
        self._writing = False
        self._waiting = 0

    @contextmanager
    def model_run(self) -> Iterator[None]:
        """Hold the gate beside other model runs (after any write waiting or running)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._writing and not self._waiting)
            self._runs += 1
        try:
            yield
        finally:
            with self._changed:
                self._runs -= 1
                self._changed.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the gate alone: no model run and no other write until this one ends."""
        with self._changed:
            self._waiting += 1
            self._changed.notify_all()  # every change of state is announced
            try:
                self._changed.wait_for(lambda: not self._writing and not self._runs)
            except BaseException:  # interrupted: let the runs held back by it go
                self._waiting -= 1
                self._changed.notify_all()
                raise
            self._waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._changed:
                self._writing = False
                self._changed.notify_all()
