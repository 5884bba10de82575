"""Unloading embedded Chroma's loaded HNSW indexes without losing vectors.

Embedded Chroma (the Rust bindings of chromadb 1.x) keeps the HNSW index of every
collection it has touched loaded, in a pool (`LocalSegmentManager.hnsw_index_pool`) of
capacity `RustBindingsAPI.hnsw_cache_size` (the open-file limit / 5: each loaded index
holds files open). A process that serves many users grows by ~3 MB + ~2 KB per message
for every resource it has searched. The Python settings `chroma_segment_cache_policy` /
`chroma_memory_limit_bytes` are not read by the Rust bindings.

**Chroma's own eviction loses vectors** (chromadb 1.5.9, read in its Rust source and
reproduced in `tests/integration/test_chroma_embedded_concurrency.py`):

1. The pool splits its capacity over 64 shards (foyer's default), each an LRU of
   capacity / 64: with 128 (this package's former bound) a shard holds 2 indexes, so
   evictions start with a few dozen resources, long before 128 are loaded.
2. An index is written to disk only every `sync_threshold` (1,000) vectors; eviction
   just closes its files. What was written since is in Chroma's log only.
3. The log is replayed into an index ("backfill") on every write, and on a read only the
   first time the client's executor reads that collection (`LocalExecutor.
   backfilled_collections`: never forgotten). Our handle lookup counts a new collection,
   which marks it as read while still empty.

So a search after an eviction loads the index from disk without replaying the log: never
written ("Error creating hnsw segment reader: Nothing found on disk", the turn recalled
nothing), or written at an earlier size (the vectors since then silently missing) until
the next write to that resource.

`RestartingBindings` replaces that eviction. It wraps the client's bindings, counts the
collections touched, and when one more than `limit` would be touched, waits for the
calls in flight to end and starts the bindings again (`RustBindingsAPI.start`, as a new
process would): every index is unloaded and its memory released, and the next read of
each collection replays its log, as after a restart. Chroma's pool is given room enough
(`_POOL_ROOM` x `limit`) that it never evicts by itself. Every `ChromaVectorIndex` on a
persistent embedded client gets one (`protect`) unless its `ChromaWorkarounds` are off,
at Chroma's own capacity unless `ChromaWorkarounds.max_loaded` sets the bound
(`chroma:///path?max_loaded=N`, 128 by default). `restart_around` also lets the purge
swap the folder under the bindings. Upstream: chroma-core/chroma#4212 (the error a
search after an eviction gets), #7765 (open: eviction closes a live index's files).
This module imports nothing of the package.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from chromadb.api.rust import RustBindingsAPI

__all__ = [
    "RestartingBindings",
    "chroma_capacity",
    "protect",
    "release_freed_memory",
    "restart_around",
]

logger = logging.getLogger(__name__)

_POOL_ROOM: Final = 1024
"""Chroma's pool capacity per collection of the bound: more than its 64 shards need."""
_PER_COLLECTION: Final = frozenset({"add", "count", "delete", "get", "query", "update", "upsert"})
"""Bindings methods whose first argument is the collection id they load."""
_LOCK = threading.Lock()


class RestartingBindings:
    """A client's Chroma bindings that unload every index at once, never one (see module).

    Stands in for `RustBindingsAPI.bindings`: every method is the bindings' own, called
    while no restart runs; the methods of `_PER_COLLECTION` count their collection.
    Thread-safe.
    """

    def __init__(self, server: RustBindingsAPI, limit: int) -> None:
        """Wrap the bindings of `server` (started again at once, with room in the pool)."""
        self._server = server
        self._limit = limit
        self._inner: Any = server.bindings
        self._changed = threading.Condition()
        self._calls = 0
        self._restarting = False
        self._touched: set[str] = set()
        self.restarts = 0
        """How many times the bindings were started again (for tests and benchmarks)."""
        self._restart()

    @property
    def limit(self) -> int:
        """Most collections touched between two restarts."""
        return self._limit

    @limit.setter
    def limit(self, limit: int) -> None:
        with self._changed:
            self._limit = limit
        self._enter(None, resize=True)
        self._leave()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if not callable(found):
            return found
        return partial(self._call, name)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._enter(str(args[0]) if method in _PER_COLLECTION and args else None)
        try:
            call: Callable[..., Any] = getattr(self._inner, method)
            return call(*args, **kwargs)
        finally:
            self._leave()

    def restart_around(self, between: Callable[[], None]) -> None:
        """Wait for the calls in flight, drop the bindings, run `between`, start again.

        New calls wait meanwhile. The bindings start again even if `between` raises.
        """
        self._enter(None, between=between)
        self._leave()

    def _enter(
        self,
        collection: str | None,
        *,
        resize: bool = False,
        between: Callable[[], None] | None = None,
    ) -> None:
        with self._changed:
            while self._restarting:
                self._changed.wait()
            full = collection is not None and collection not in self._touched
            if resize or between is not None or (full and len(self._touched) >= self._limit):
                self._restarting = True
                try:
                    while self._calls:
                        self._changed.wait()
                    if between is not None:
                        self._inner = None  # the last reference: Chroma closes its files
                        try:
                            between()
                        finally:
                            self._restart()
                    else:
                        self._restart()
                finally:
                    self._restarting = False
                    self._changed.notify_all()
            if collection is not None:
                self._touched.add(collection)
            self._calls += 1

    def _leave(self) -> None:
        with self._changed:
            self._calls -= 1
            if not self._calls:
                self._changed.notify_all()

    def _restart(self) -> None:
        """New bindings (no call in flight): nothing loaded, every log replayed on use."""
        server = self._server
        server.hnsw_cache_size = self._limit * _POOL_ROOM
        server.start()  # reads hnsw_cache_size; the old bindings are dropped with _inner
        self._inner = server.bindings  # the old bindings go: their indexes are freed
        server.bindings = self
        release_freed_memory()
        self._touched.clear()
        self.restarts += 1
        logger.debug("unloaded Chroma's indexes (bound: %d collections)", self._limit)


def protect(server: Any, limit: int | None = None) -> RestartingBindings | None:
    """Put `RestartingBindings` on a persistent embedded client's `server`, or update it.

    Args:
        server: The client's `RustBindingsAPI` (`client._server`).
        limit: Most collections loaded; None keeps the current bound, or Chroma's own
            capacity (the open-file limit / 5) on first use. A bound over that capacity
            is lowered to it (logged): each loaded index holds 4 files open, and past the
            process's open-file limit every write and file open fails.

    Returns:
        The bindings, or None (nothing done) for any other client: an HTTP client of a
        Chroma server, or an in-memory client (starting its bindings again would empty
        it).
    """
    if not isinstance(server, RustBindingsAPI):
        return None
    if not server._system.settings.is_persistent:
        return None
    capacity = chroma_capacity()
    if limit is not None and limit > capacity:
        logger.info(
            "keeping at most %d Chroma indexes loaded, not %d: the open-file limit (%d) / 5 "
            "(raise `ulimit -n` for more)",
            capacity,
            limit,
            capacity * 5,
        )
        limit = capacity
    with _LOCK:
        bindings = server.bindings
        if isinstance(bindings, RestartingBindings):
            if limit is not None and limit != bindings.limit:
                bindings.limit = limit
            return bindings
        return RestartingBindings(server, max(1, capacity if limit is None else limit))


def restart_around(server: Any, between: Callable[[], None]) -> None:
    """Run `between` while an embedded client's bindings are down, then start them again.

    With `RestartingBindings` on `server`, the calls in flight end first and new ones
    wait; on bare bindings, the caller makes sure no call runs meanwhile.
    """
    bindings = server.bindings
    if isinstance(bindings, RestartingBindings):
        bindings.restart_around(between)
        return
    server.stop()  # drops the bindings: Chroma closes its files
    try:
        between()
    finally:
        server.start()


def release_freed_memory() -> bool:
    """Hand the memory allocator's free pages back to the system (glibc); whether it could.

    Chroma's threads allocate the indexes in glibc's per-thread arenas. Freed by an
    unload, those pages stayed with the process, and the indexes loaded next (by other
    threads) did not reuse them: unloading every 20 collections, a process grew ~1.5 MB
    for each collection it had ever touched (docs/performance.md, issue 24); calling
    `malloc_trim` after each unload kept it level. Elsewhere (musl, macOS) a no-op.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim(0)
    return True


def chroma_capacity() -> int:
    """Chroma's own pool capacity: the open-file limit / 5 (`RustBindingsAPI.__init__`)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: Chroma asks the C runtime
        return 512 // 5
    return max(1, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 5)
