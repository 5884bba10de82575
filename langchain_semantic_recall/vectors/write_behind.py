"""A turn's vectors written just after `upsert` returns; every other call waits for them.

Why: on embedded Chroma, a turn's 2-vector upsert takes 7-23 ms (two SQLite transactions
with their `fsync`s, in chromadb's Rust bindings): the whole of what `index` costs beyond
the embedding, and nothing our code can shorten (`docs/performance.md`). The storage has
the messages by then, so the vectors can follow a moment later.

What holds, so that nobody can tell the difference but by the clock:

- **Order.** One worker thread writes the batches in the order of the calls. Every other
  method of the index (a search, a delete, a count, an export, `compact`, `close`) first
  waits until nothing is pending: a search sees what was indexed before it, and a delete
  (a forget, an edit, a move) never overtakes a write.
- **Checks at the call.** The arguments, and what the backend checks cheaply (the index
  was opened, the vectors' dimension), are checked before the batch is queued: those
  errors are raised to the caller as before.
- **Sync calls only.** `aupsert` writes at the call: a worker holding the GIL stalls an
  event loop longer than the async hook's pieces do (`VectorIndex.aupsert`).
- **A bounded queue.** A caller that would queue more than `MAX_QUEUED` batches waits for
  the worker: whoever indexes faster than Chroma writes is held to its pace, and a wait
  for the writes (a search) is never longer than that queue.
- **Small batches only.** A batch of more than `MAX_BEHIND` vectors (bulk import,
  `reindex`) is written at the call, after the pending ones, its errors raised there.
- **Failure.** A write that fails is logged as an error and every vector of its messages
  is deleted (a message of several chunks written in part would look whole). The messages
  stay stored without vectors: `stats` counts them, `reindex(missing_only=True)` embeds
  them, and the failure is kept for each message's resource, whose next `index` reports
  it in `IndexResult.error` (another resource's calls never see it).
- **After the call.** Inside an engine call (`held`), a batch waits for the call to end
  before the worker starts on it: an embedded Chroma write holds the GIL from start to
  end, and the call's own last steps (SQLite reads, which let other threads run) would
  otherwise wait for the whole write. Anything that waits for the writes starts them.
- **Other processes.** Another process on the store (the command line beside an app) is
  not ordered with these writes: in the few ms after `index` returns, its search may miss
  the turn. Its forget or move is not overtaken: once a batch is written, the worker asks
  the storage which of its messages it still holds where they were (`Stored`, given by
  the engine) and deletes the vectors of the others (a moved thread's then read as
  missing: `reindex(missing_only=True)` writes them under its new resource).
- **Exit.** The worker is no daemon: the interpreter waits for it at exit. A process
  killed leaves the messages stored without vectors, as a kill during a write at the call
  would.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar, Concatenate, Final, ParamSpec, Protocol, TypeVar

from langchain_semantic_recall.executor import run_in_executor
from langchain_semantic_recall.records import VectorRecord

__all__ = [
    "MAX_BEHIND",
    "Gate",
    "Lane",
    "WriteBehind",
    "after_writes",
    "after_writes_async",
    "held",
    "read_after",
]

logger = logging.getLogger(__name__)

MAX_BEHIND: Final = 16
"""Most vectors of a batch written behind; a bigger one is written at the call."""
MAX_QUEUED: Final = 1
"""Most batches waiting in a lane: a caller that would queue more waits for the worker.
Without a bound, a thread indexing faster than Chroma writes grew the queue without end,
and every search waited for all of it (an audit: 5 searches in 8 s, up to 5.4 s each).
With one thread indexing without pause and one searching (`s52-behind/t6_starve_ab.py`),
searches took 0.20 / 0.60 s p50 / max with 8, 0.08 / 0.27 with 2, and 0.04-0.06 / 0.16-0.23
with 1, as when every write is made at the call (0.05 / 0.18)."""

Write = Callable[[str, Sequence[VectorRecord]], None]
Drop = Callable[[str, str, list[str]], None]
Gate = Callable[[], AbstractContextManager[None]]
Stored = Callable[[Sequence[VectorRecord]], Sequence[VectorRecord]]
"""The records of a batch whose message the storage still holds in their thread and
resource (asked once the batch is written)."""


@dataclass(frozen=True, slots=True)
class _Batch:
    """A batch queued, with the index's methods that write it (see `Lane.put`)."""

    name: str
    records: list[VectorRecord]
    write: Write
    drop: Drop
    gate: Gate
    stored: Stored | None


_HELD: ContextVar[frozenset[Lane]] = ContextVar("semantic_recall_writes_held", default=frozenset())
"""Inside an engine call: batches put wait for it to end (a context variable: the async
driver's steps run in executor threads with a copy of the caller's context)."""


@contextmanager
def held(behind: WriteBehind | None) -> Iterator[None]:
    """Batches put within the block are written once it ends (the outermost block).

    Per lane: code run inside one engine's call (an embedder, a callback) that indexes
    into a store on another folder has its batch started when its own call ends.
    """
    held_now = _HELD.get()
    if behind is None or behind.lane in held_now:
        yield
        return
    token = _HELD.set(held_now | {behind.lane})
    try:
        yield
    finally:
        _HELD.reset(token)
        behind.start()


class Flushes(Protocol):
    """An index that can wait for its writes behind (`VectorIndex.flush`)."""

    def flush(self) -> None:
        """Wait until every write behind is written."""

    async def aflush(self) -> None:
        """Async twin of `flush`."""


_I = TypeVar("_I", bound=Flushes)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def after_writes(method: Callable[Concatenate[_I, _P], _T]) -> Callable[Concatenate[_I, _P], _T]:
    """A method of the index that runs once the writes behind are written (`flush`)."""

    @functools.wraps(method)
    def after(self: _I, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        self.flush()
        return method(self, *args, **kwargs)

    return after


def after_writes_async(
    method: Callable[Concatenate[_I, _P], Awaitable[_T]],
) -> Callable[Concatenate[_I, _P], Awaitable[_T]]:
    """`after_writes` for an async method (`aflush`)."""

    @functools.wraps(method)
    async def after(self: _I, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        await self.aflush()
        return await method(self, *args, **kwargs)

    return after


async def read_after(
    settle: Callable[[], Awaitable[None]], reads: Callable[[], AsyncIterator[VectorRecord]]
) -> AsyncIterator[VectorRecord]:
    """The records of `reads()`, started once `settle()` is done; closing it closes them."""
    await settle()
    records = reads()
    try:
        async for record in records:
            yield record
    finally:
        close = getattr(records, "aclose", None)
        if close is not None:
            await close()


class WriteBehind:
    """One index's way into the writes behind of its store (`Lane`), with its CPU gate.

    Indexes on one folder share a lane (`lane`): one engine's search waits for another's
    writes, as it did when they were made at the call.

    Example:
        ```python
        behind = WriteBehind(gate=None, lane="/data/memory/chroma")
        behind.put("minilm-384", records, index._upsert, drop)  # returns at once
        behind.settle()  # before any other call on the index
        ```
    """

    def __init__(self, gate: Gate | None, lane: str | None = None) -> None:
        """A way into the lane named `lane` (made on first use), or into a lane of its own.

        Args:
            gate: Held around each of this index's writes (`CpuGate.alone`), if given.
            lane: The store's name (its folder's real path); None: a lane of this index
                alone.
        """
        self._gate = gate or nullcontext
        self.lane = Lane() if lane is None else Lane.named(lane)

    def takes(self, records: Sequence[VectorRecord]) -> bool:
        """Whether a batch this size is written behind (else at the call)."""
        return len(records) <= MAX_BEHIND

    def put(
        self,
        name: str,
        records: Sequence[VectorRecord],
        write: Write,
        drop: Drop,
        stored: Stored | None = None,
    ) -> None:
        """Queue a checked batch (`Lane.put`), written inside this index's gate."""
        self.lane.put(_Batch(name, list(records), write, drop, self._gate, stored))

    def start(self) -> None:
        """Start writing what is queued (`Lane.start`)."""
        self.lane.start()

    @property
    def pending(self) -> bool:
        """Whether a batch of the lane is queued or being written."""
        return self.lane.pending

    def settle(self) -> None:
        """Wait until every batch queued so far is written (`Lane.settle`)."""
        self.lane.settle()

    async def asettle(self) -> None:
        """Async twin of `settle`."""
        await self.lane.asettle()

    def failures(self, resource_id: str) -> list[str]:
        """What failed for `resource_id` since last asked, each said once."""
        return self.lane.failures(resource_id)


class Lane:
    """A store's queue of batches written behind, its worker, and the failures not told."""

    _named: ClassVar[weakref.WeakValueDictionary[str, Lane]] = weakref.WeakValueDictionary()
    _naming: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        """An empty queue."""
        self._changed = threading.Condition()
        # The index's methods travel with each batch: kept by the index, they would hold
        # it in a cycle, and it would outlive its last user until a collection.
        self._queue: deque[_Batch] = deque()
        # Tickets: a wait is for the batches queued before it, not for an empty queue (a
        # thread indexing without pause kept every search waiting until it stopped).
        self._queued = 0
        self._done = 0
        self._running = False
        self._thread: threading.Thread | None = None
        self._worker = threading.local()
        self._failures: defaultdict[str, list[str]] = defaultdict(list)

    @classmethod
    def named(cls, name: str) -> Lane:
        """The lane of store `name`, shared by its indexes while any uses it."""
        with cls._naming:
            lane = cls._named.get(name)
            if lane is None:
                lane = cls._named[name] = cls()
            return lane

    def put(self, batch: _Batch) -> None:
        """Queue a checked batch; a worker thread writes it (started when none runs).

        Args:
            batch: The index name and the records; `write` writes them into the index (a
                backend's `_upsert`), `drop` deletes the vectors of `message_ids` of
                resource `resource_id`, both inside `gate`; `stored` says where their
                messages are once they are written (None: not asked).
        """
        if self._queued - self._done >= MAX_QUEUED and not getattr(self._worker, "inside", False):
            self.start()
            with self._changed:
                self._changed.wait_for(lambda: self._queued - self._done < MAX_QUEUED)
        with self._changed:
            self._queue.append(batch)
            self._queued += 1
        if self not in _HELD.get():
            self.start()

    def start(self) -> None:
        """Start a worker on the queued batches, unless one runs or none is queued.

        When no thread can start (at interpreter exit since Python 3.12, or out of
        threads), the caller writes them itself: nothing is left queued with no worker.
        """
        with self._changed:
            if self._running or not self._queue:
                return
            self._running = True
            worker = threading.Thread(
                target=self._drain, name="semantic-recall-vectors", daemon=False
            )
            try:
                worker.start()
            except RuntimeError:
                pass  # still `_running`: this caller is the one consumer until the queue is empty
            else:
                self._thread = worker
                return
        logger.warning("no thread could start to write vectors behind; written at the call")
        self._drain()

    @property
    def pending(self) -> bool:
        """Whether a batch is queued or being written."""
        return self._done < self._queued

    def settle(self) -> None:
        """Wait until every batch queued before this call is written (or has failed)."""
        ticket = self._queued
        if self._done >= ticket or getattr(self._worker, "inside", False):
            return
        self.start()  # (queued by a call still running, this one perhaps)
        with self._changed:
            self._changed.wait_for(lambda: self._done >= ticket)
            idle = None if self._running else self._thread
        if idle is not None:  # its last moments: no thread outlives a `close`
            idle.join()

    async def asettle(self) -> None:
        """Async twin of `settle`: waits in an executor, only when a batch is pending."""
        if self.pending:
            await run_in_executor(None, self.settle)

    def failures(self, resource_id: str) -> list[str]:
        """What failed for `resource_id` since last asked, each said once."""
        with self._changed:
            return self._failures.pop(resource_id, [])

    def _drain(self) -> None:
        """The one consumer (`_running`): the worker, or a caller when none could start."""
        inside, self._worker.inside = getattr(self._worker, "inside", False), True
        done = False
        try:
            while not done:
                with self._changed:  # (started on a queue of one at least)
                    batch = self._queue.popleft()
                try:
                    if self._write_one(batch):
                        self._drop_gone(batch)
                finally:
                    with self._changed:  # stopping is decided with the last batch's count
                        self._done += 1
                        done = not self._queue
                        self._running = not done
                        self._changed.notify_all()
        finally:
            self._worker.inside = inside

    def _write_one(self, batch: _Batch) -> bool:
        """Write the batch; on failure, delete what it left and keep the failure."""
        try:
            with batch.gate():
                batch.write(batch.name, batch.records)
        except Exception as error:
            lost = _by_resource(batch.records)
            logger.error(
                "could not write the vectors of %d message(s) indexed a moment ago: %r; they "
                "are stored without vectors (stats() counts them, reindex(missing_only=True) "
                "embeds them)",
                sum(map(len, lost.values())),
                error,
                exc_info=True,
            )
            for resource_id, ids in lost.items():
                _delete(batch, resource_id, ids)
                note = (
                    f"the vectors of {len(ids)} message(s) indexed earlier could not be "
                    f"written ({error!r}): stored without vectors, reindex(missing_only=True) "
                    f"embeds them: {', '.join(sorted(ids))}"
                )
                with self._changed:
                    self._failures[resource_id].append(note)
            return False
        return True

    def _drop_gone(self, batch: _Batch) -> None:
        """Delete the vectors of messages forgotten or moved since they were queued.

        Another process (the command line beside an app) forgets or moves a thread without
        waiting for this lane: its deletes may come before the write. Read after the
        write, the storage tells: a forget after this read deletes the vectors itself.
        Nothing is written here, so nothing written can be overtaken in turn.
        """
        if batch.stored is None:
            return
        try:
            kept = {record.id for record in batch.stored(batch.records)}
        except Exception as error:  # (a storage closed before its vector index, say)
            logger.warning(
                "after writing the vectors of %d message(s), could not ask the storage "
                "whether another process forgot them meanwhile (%r); if one did, stats() "
                "counts its vectors as orphans",
                len({record.message_id for record in batch.records}),
                error,
            )
            return
        stale = _by_resource(record for record in batch.records if record.id not in kept)
        if not stale:
            return
        logger.warning(
            "%d message(s) were forgotten or moved by another process while their vectors "
            "were written: deleted (a moved thread's read as missing: "
            "reindex(missing_only=True) writes them under its new resource)",
            sum(map(len, stale.values())),
        )
        for resource_id, ids in stale.items():
            _delete(batch, resource_id, ids)


def _by_resource(records: Iterable[VectorRecord]) -> dict[str, list[str]]:
    """Resource id -> the ids of its messages among `records` (both sorted, each once)."""
    ids: defaultdict[str, set[str]] = defaultdict(set)
    for record in records:
        ids[record.resource_id].add(record.message_id)
    return {resource_id: sorted(ids[resource_id]) for resource_id in sorted(ids)}


def _delete(batch: _Batch, resource_id: str, ids: list[str]) -> None:
    """Delete the vectors of `ids` (a failed write's part, or forgotten meanwhile)."""
    try:
        with batch.gate():
            batch.drop(batch.name, resource_id, ids)
    except Exception:
        logger.warning(
            "could not delete the vectors of %d message(s) written in part or forgotten "
            "meanwhile; stats() counts what is left, reindex() without missing_only "
            "rewrites them from the storage",
            len(ids),
            exc_info=True,
        )
