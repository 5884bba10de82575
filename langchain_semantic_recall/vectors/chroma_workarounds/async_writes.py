"""Async writes of embedded Chroma in small pieces, one at a time, beside the local model.

Chroma's embedded bindings hold the GIL for the whole of a write: chroma-core/chroma#3873
released it for reads only ("inserts are internally multithreaded"), and #7692 (open) is
about metadata I/O. Measured here with chromadb 1.5.9: ~5 ms for 2 vectors, ~30 ms for
40, ~90 ms for 200; an event loop waiting for the GIL is a stalled loop. So an async
upsert goes `ChromaWorkarounds.async_piece` vectors at a time, one write of the gate at a
time per event loop: the loop runs between two pieces, and concurrent turns' writes take
turns instead of queueing on the GIL back to back. The async upsert of a batch is then
several writes, not one.

Each piece also holds the `CpuGate` it is given alone (`ChromaWorkarounds.cpu_gate`): a
run of the local model keeps every core busy, and a write that waits for a core while it
holds the GIL holds every Python thread with it (`cpu_gate`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.cpu_gate import CpuGate

__all__ = ["AsyncWriteGate"]

logger = logging.getLogger(__name__)

Write = Callable[[], None]


class AsyncWriteGate:
    """One write at a time per event loop, each in the default executor (see module)."""

    def __init__(self, cpu_gate: CpuGate | None = None) -> None:
        """An open gate (its lock for each loop is made on first use).

        Args:
            cpu_gate: Held alone by each write (shared with the local model), if given.
        """
        self._cpu_gate = cpu_gate
        # Each loop's lock and how many writes use it, kept only while some do: a lock
        # that made a writer wait holds its loop, so a mapping kept after the writes (a
        # weak-keyed one too) kept every loop that wrote, closed or not.
        self._locks: dict[asyncio.AbstractEventLoop, tuple[asyncio.Lock, int]] = {}

    async def run(self, writes: Sequence[Write]) -> None:
        """Perform `writes` in order, each alone and off the loop; the first error stops.

        A cancel (a caller's timeout) waits for the writes to finish, then goes on: cut
        between two pieces, a message of several chunks would keep its first chunks
        only, and look whole to `stats` and `reindex(missing_only=True)` (as a write over
        HTTP, in the executor, finishes whatever its caller does).
        """
        pieces = asyncio.ensure_future(self._pieces(writes))
        try:
            await asyncio.shield(pieces)
        except asyncio.CancelledError:
            while not pieces.done():  # a second cancel does not cut the pieces either
                with suppress(asyncio.CancelledError):
                    await asyncio.shield(pieces)
            if not pieces.cancelled() and (failure := pieces.exception()) is not None:
                logger.warning(
                    "an async vector write failed while its caller was cancelled: %r; a "
                    "long message may be written in part, reindex() without missing_only "
                    "writes it whole",
                    failure,
                )
            raise

    async def _pieces(self, writes: Sequence[Write]) -> None:
        loop = asyncio.get_running_loop()  # (only this loop's thread uses its entry)
        lock, users = self._locks.get(loop) or (asyncio.Lock(), 0)
        self._locks[loop] = (lock, users + 1)
        try:
            for write in writes:
                async with lock:
                    await run_in_executor(None, self._alone, write)
        finally:
            lock, users = self._locks[loop]
            if users > 1:
                self._locks[loop] = (lock, users - 1)
            else:
                del self._locks[loop]

    def _alone(self, write: Write) -> None:
        # The piece's collection is looked up (or created: a Chroma write too) inside the gate.
        with self._cpu_gate.alone() if self._cpu_gate is not None else nullcontext():
            write()
