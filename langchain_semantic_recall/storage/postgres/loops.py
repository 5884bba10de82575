"""The async pools of a `PostgresStorage`: one per event loop, closed when that loop ends.

psycopg_pool's `AsyncConnectionPool` keeps its maintenance workers on tasks of the loop
that opened it. When that loop shuts down with the pool still open (the end of
`asyncio.run`, a test runner's loop teardown), every task is cancelled and awaited; a
worker cancelled while it opens a connection takes the cancellation for a failed connect
and goes back to waiting for its next job, so the shutdown waits for it forever.

So each pool made here has a guard task on its loop. Cancelled with the others at
shutdown, the guard closes the pool (which sends every worker its stop job) and closes
the connections the pool opened, and the loop ends. An explicit `aclose()` in the loop
does the same. A pool whose loop was closed without cancelling its tasks is dropped
without touching that loop: its connections are closed synchronously (libpq's
`PQfinish`), when the storage next opens a pool or closes. A later loop (a second
`asyncio.run`, a notebook cell) gets a pool of its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    PoolFactory: TypeAlias = Callable[
        [Callable[[AsyncConnection[Any]], Awaitable[None]]], AsyncConnectionPool
    ]

logger = logging.getLogger(__name__)

__all__ = ["LoopPools"]


class _LoopPool:
    """One loop's pool, the connections it opened, and the guard that closes it."""

    def __init__(self, make: PoolFactory) -> None:
        self.connections: weakref.WeakSet[AsyncConnection[Any]] = weakref.WeakSet()
        self.pool = make(self._opened)
        self.guard: asyncio.Task[None] | None = None

    async def _opened(self, conn: AsyncConnection[Any]) -> None:
        """The pool's `configure` callback: remember every connection it opens."""
        self.connections.add(conn)

    async def close(self) -> None:
        """Close the pool in its own loop; at that loop's shutdown, its connections too.

        At shutdown the pool's workers were cancelled with the loop, so `pool.close()`
        stops them and then raises `CancelledError` before closing its idle connections:
        those are closed here.
        """
        try:
            await self.pool.close()
        except BaseException:
            self.finish()
            raise

    async def shut(self) -> None:
        """An explicit close in the pool's loop: close it, then end the guard."""
        try:
            await self.close()
        finally:
            guard = self.guard
            if guard is not None and not guard.done():
                guard.cancel()
                await asyncio.wait([guard])

    def finish(self) -> None:
        """Close the pool's open connections without its loop (`PQfinish`)."""
        open_ = [conn for conn in list(self.connections) if not conn.closed]
        for conn in open_:
            conn.pgconn.finish()
        if open_:
            logger.debug("closed %d connection(s) of an async pool without its loop", len(open_))


class LoopPools:
    """A storage's async pools, one per event loop (see the module's docstring)."""

    def __init__(self, make: PoolFactory) -> None:
        """`make(configure)` builds an unopened pool that calls `configure` per connection."""
        self._make = make
        self._lock = threading.Lock()
        self._pools: dict[asyncio.AbstractEventLoop, _LoopPool] = {}

    def __len__(self) -> int:
        return len(self._pools)

    def current(self) -> AsyncConnectionPool:
        """The running loop's pool, made (not opened) and guarded on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._pools.get(loop)
            if entry is not None:
                return entry.pool
            dead = [old for old in self._pools if old.is_closed()]
            finished = [self._pools.pop(old) for old in dead]
            entry = _LoopPool(self._make)
            self._pools[loop] = entry
            entry.guard = loop.create_task(
                self._guard(loop, entry), name="semantic-recall-async-pool-guard"
            )
        for old_entry in finished:
            old_entry.finish()
        return entry.pool

    async def _guard(self, loop: asyncio.AbstractEventLoop, entry: _LoopPool) -> None:
        """Wait until cancelled (the loop shuts down, or `aclose`); then close the pool."""
        try:
            await loop.create_future()  # never set
        except asyncio.CancelledError:
            with self._lock:
                if self._pools.get(loop) is entry:
                    del self._pools[loop]
            await entry.close()
            raise
        except GeneratorExit:  # collected, its loop closed: nothing can be awaited there
            entry.finish()
            raise

    async def aclose_current(self) -> None:
        """Close the running loop's pool, in that loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._pools.pop(loop, None)
        if entry is not None:
            await entry.shut()

    def close_all(self) -> None:
        """Close every loop's pool from sync code, each in its own loop if it can run.

        A loop running in another thread (or this one) gets the close scheduled; a loop
        that is not running is run until its pool is closed (when no loop runs here); a
        closed loop, or a stopped one while another runs here, is not touched: its
        pool's connections are closed synchronously.
        """
        with self._lock:
            entries = list(self._pools.items())
            self._pools.clear()
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for loop, entry in entries:
            if loop.is_closed():
                entry.finish()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(entry.shut(), loop)
            elif here is None:
                loop.run_until_complete(entry.shut())
            else:  # cannot run that loop inside this one: drop its pool without it
                entry.finish()
