"""A cold resource's first search without waiting for embedded Chroma to load its index.

Embedded Chroma loads a collection's HNSW index on the first query of a process: 0.3-0.6 s
at 100k vectors, ~7x the time to read the same vectors from a file (docs/performance.md,
issue 24). So a resource collection of `snapshots_from` vectors or more keeps a snapshot
(`chroma_snapshot`) under the Chroma folder (`semantic-recall-snapshots/`), and a
resource search of a collection that this process has not loaded answers from it by an
exact scan while Chroma loads the index in the background; Chroma answers once it has.
Thread scope (and anything but `nearest`) always asks Chroma.

A snapshot is used only when it is exactly the collection's content by Chroma's own log
(`chroma_log`): the collection's id and last write match, or the writes since are all
still in the log and, applied, leave as many vectors as Chroma counts. Otherwise Chroma
answers, as without one, and a new snapshot is built in the background: a page of vectors
at a time, then brought up to date from the log like a snapshot at load. A process that
writes past Chroma's purge of its log refreshes the snapshot instead of building it
again: Chroma's live rows number each record's last write, so only the records written
since are read (a record deleted since, or many changes, make it a full build). Deleting
vectors through the index deletes the collection's snapshot, so a forgotten message's
vector does not outlive it there; the purge (`compact`) replaces the whole folder,
snapshots included. A process stops its builds and refreshes at exit (a page at most).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from langchain_semantic_recall.vectors.chroma_log import DELETE, ChromaLog
from langchain_semantic_recall.vectors.chroma_snapshot import Snapshot, positions
from langchain_semantic_recall.vectors.chroma_snapshot_reads import read_every_vector, read_records
from langchain_semantic_recall.vectors.chroma_workarounds.reads import read_retrying

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["FOLDER", "SNAPSHOTS_FROM", "ColdSnapshots"]

logger = logging.getLogger(__name__)

FOLDER: Final = "semantic-recall-snapshots"
"""The snapshots' folder, inside the Chroma folder."""
SNAPSHOTS_FROM: Final = 20_000
"""Vectors from which a collection keeps a snapshot: Chroma loads smaller ones in ~60 ms
or less (a 1,000-vector collection: ~10 ms, `perf_memory.py`)."""
LOAD_AFTER: Final = 0.25
"""Seconds between a snapshot's first answer and the start of Chroma's load (`_load`)."""
REBUILD_EVERY: Final = 60.0
"""Seconds between two builds of one collection's snapshot prompted by writes (`written`)."""
REWRITE_AFTER: Final = 256
"""Log rows applied at a load from which the snapshot file is written again."""
_REFRESH_MOST: Final = 2000
"""Records written since a snapshot from which a refresh gives way to a full build (each
is looked up in the file by binary search, ~55 us at 100k: ~0.1 s for 2,000)."""
_IDLE: Final = 2.0
"""Seconds the builder thread waits for work before it ends."""
_JOIN: Final = 30.0
"""Seconds `close` waits for a background load or build to stop."""
KNOWN: Final = 4096
"""Collections whose state a process remembers (the oldest go first, then looked up again)."""


class ColdSnapshots:
    """The snapshots of one embedded Chroma folder, for one `ChromaVectorIndex`."""

    def __init__(
        self,
        folder: str,
        *,
        snapshots_from: int = SNAPSHOTS_FROM,
        build: bool = True,
        retry_delays: tuple[float, ...] = (),
    ) -> None:
        """Serve and build the snapshots of the Chroma folder `folder`.

        Args:
            folder: The embedded Chroma's folder.
            snapshots_from: Vectors from which a collection gets a snapshot.
            build: Build and write snapshots (False: only read them, e.g. read-only).
            retry_delays: Pauses between reads of an index that is not ready.
        """
        self._files = Path(folder) / FOLDER
        self._log = ChromaLog(folder)
        self.snapshots_from = snapshots_from
        self.building = build
        """Whether snapshots are built and written (False: only read)."""
        self._delays = retry_delays
        self._lock = threading.Lock()
        self._serving: dict[str, Snapshot] = {}  # collection name -> until Chroma loaded it
        self._chroma: dict[str, int | None] = {}  # Chroma answers for: see `_chroma_answers`
        self._unloads: Callable[[], int] = lambda: 0  # see `follow_unloads`
        self._threads: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._closing = threading.Event()
        self._pending = 0  # jobs submitted and not done
        self._dropping = False  # `close(finish_checks=False)`: queued jobs are skipped
        self._checking: set[str] = set()  # collections with a `_check` queued
        self._built_at: dict[str, float] = {}  # collection name -> monotonic time
        self._short: dict[str, int] = {}  # name -> vectors short of a snapshot (the last KNOWN)
        self._written_here: dict[str, Collection] = {}  # written, maybe big (for `settle`)
        self._idle = threading.Condition(self._lock)
        _OPEN.add(self)

    def nearest(
        self, collection: Collection, embedding: list[float], k: int
    ) -> list[tuple[str, float]] | None:
        """The `k` nearest vectors from the collection's snapshot; None: ask Chroma.

        The first call for a collection reads its snapshot (and starts Chroma's load in
        the background); later calls use it until Chroma has loaded the index or a write
        moved the collection past it. Once Chroma unloads every index (`follow_unloads`),
        the next call is a first call again.
        """
        name = collection.name
        unloads = self._unloads()
        with self._lock:
            if self._closing.is_set():
                return None
            if name in self._chroma:
                loaded = self._chroma[name]
                if loaded is None or loaded == unloads:
                    return None
                del self._chroma[name]  # Chroma unloaded it since: the snapshot answers again
            snapshot = self._serving.get(name)
        try:
            if snapshot is None:
                snapshot = self._open(collection)
                if snapshot is None:
                    self._chroma_answers(name, has_snapshot=False)
                    self._submit(partial(self._build_one, collection))
                    return None
                with self._lock:
                    self._serving[name] = snapshot
                found = snapshot.nearest(embedding, k)
                self._start(self._load, collection, embedding)
                return found
            stamp = self._log.stamp(snapshot.collection_id)
            if stamp is None or stamp.seq != snapshot.seq:  # written since: Chroma has it
                self._chroma_answers(name, has_snapshot=True)
                return None
            return snapshot.nearest(embedding, k)
        except (UnicodeDecodeError, ValueError, IndexError) as damaged:  # bytes changed on disk
            logger.warning("vector snapshot %r is damaged (%s): Chroma answers", name, damaged)
            self._chroma_answers(name, has_snapshot=False)
            Snapshot.delete(self._files, name)
            self._submit(partial(self._build_one, collection))
            return None

    def follow_unloads(self, unloads: Callable[[], int]) -> None:
        """Serve the snapshots again each time Chroma unloads every index (`unloads()` counts).

        The embedded default bounds the indexes loaded by starting Chroma's bindings again
        (`chroma_workarounds.unload`): a big collection's next search would wait for
        Chroma's load once more, which its snapshot spares, as at a process's first.
        """
        self._unloads = unloads

    def written(self, collection: Collection, vectors: int) -> None:
        """Vectors were written to `collection`: check its snapshot in the background.

        Chroma purges its log each time it persists a collection's index (at most 1,000
        writes apart): from then on the snapshot cannot be brought up to date, and the next
        process would wait for Chroma's load. The check then refreshes it (reads what
        was written since), or builds a new one at most once per `REBUILD_EVERY` seconds
        per collection (a build reads every vector). A collection counted below
        `snapshots_from` is not checked again until `vectors` written since could have
        brought it there.
        """
        with self._lock:
            short = self._short.pop(collection.name, 0) - vectors
            if short > 0:  # (never big enough for `settle` either)
                _remember(self._short, collection.name, short)
                return
            self._written_here[collection.name] = collection
            if collection.name in self._checking or not self.building:
                return
            self._checking.add(collection.name)
        self._submit(partial(self._check, collection))

    def settle(self) -> int:
        """Leave every collection this process wrote a snapshot the next process can use.

        For a process about to end after many writes (`semantic-recall ingest`): its
        checks ran in the background, a full build at most once a minute per collection,
        and what is queued at exit never runs, so the next process could wait for
        Chroma's load (0.3-0.7 s at 100k; every time if read-only). Here nothing is
        throttled: a refresh where it suffices, else a full build (3-8 s at 100k), on the
        caller's thread. Returns how many of those collections now have one.
        """
        self.wait()  # the checks already queued first
        with self._lock:
            collections = list(self._written_here.values())
            self._written_here.clear()
        ready = 0
        for collection in collections:
            if not self.building or self._closing.is_set():
                break
            ready += self._check(collection, throttled=False)
        return ready

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the background loads and builds have ended (benchmarks and tests)."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0, timeout)
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def forget(self, name: str) -> None:
        """Delete the snapshot of collection `name` (its vectors were deleted or dropped).

        Read only (`read_in_place`): only stop serving it; the copy's log has the delete.
        What is known of it in memory goes too (a dropped collection's handle with it).
        """
        with self._lock:
            for known in (self._serving, self._chroma, self._short, self._built_at):
                known.pop(name, None)
            self._written_here.pop(name, None)
        if self.building:
            Snapshot.delete(self._files, name)

    def read_in_place(self, folder: str | os.PathLike[str]) -> None:
        """Read the snapshots of the Chroma folder `folder`; never build or delete one there.

        This index's folder is a private copy of `folder`, made without its snapshots.
        """
        self.building = False
        self._files = Path(folder) / FOLDER

    def clear(self) -> None:
        """Forget what is known in memory (the folder was replaced under the client)."""
        with self._lock:
            for known in (self._serving, self._chroma, self._short, self._built_at):
                known.clear()
            self._written_here.clear()

    def close(self, *, finish_checks: bool = True) -> None:
        """Stop the builds and background loads (each stops after its current page).

        What the last writes queued still runs (`finish_checks`): a refresh reads only
        what changed, and a full build stops at its first page. So a process that writes
        a few turns and closes leaves a snapshot for the next one. At interpreter exit
        (`_stop_all`) nothing queued runs.
        """
        with self._idle:  # under `_submit`'s lock: no job is queued behind the None
            self._closing.set()
            self._dropping = self._dropping or not finish_checks  # (sticky: exit came first)
            self._jobs.put(None)
            threads = [*self._threads, *([self._worker] if self._worker else [])]
            self._serving.clear()
            self._idle.notify_all()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(_JOIN)

    # -- reading a snapshot ------------------------------------------------------------------

    def _open(self, collection: Collection) -> Snapshot | None:
        """The collection's snapshot brought up to Chroma's last write; None if unsure."""
        name = collection.name
        if not Snapshot.exists(self._files, name):
            return None
        snapshot = Snapshot.load(self._files, name)
        if snapshot is None or snapshot.collection_id != str(collection.id):
            return None
        tail = self._log.applied_tail(snapshot.collection_id, snapshot.seq)
        if tail is None:  # (or logged writes not applied yet, which chromadb applies first)
            return None
        stamp, records = tail
        if not records:
            return snapshot if stamp.count == len(snapshot) else None
        caught_up = snapshot.replayed(stamp, records)
        if caught_up is not None and len(records) >= REWRITE_AFTER:
            self._submit(partial(self._save, name, caught_up))
        return caught_up

    def _load(self, collection: Collection, embedding: list[float]) -> None:
        """Have Chroma load the collection's index, after a pause; from then on it answers.

        `LOAD_AFTER`: the search that read the snapshot is still running (its keyword half,
        its ranking), and a load beside it cost +15-37 ms at 100k on 2 cores, measured.
        """
        if self._closing.wait(LOAD_AFTER):
            return
        try:
            vectors = np.asarray([embedding], dtype=np.float32)
            query = partial(collection.query, query_embeddings=vectors, n_results=1, include=[])
            read_retrying(query, self._delays)
        except Exception as exc:  # the next search asks Chroma, which reports it
            logger.debug("loading Chroma collection %r failed: %s", collection.name, exc)
        self._chroma_answers(collection.name, has_snapshot=True)

    def _chroma_answers(self, name: str, *, has_snapshot: bool) -> None:
        """Chroma answers for collection `name`: always, or until it unloads every index.

        Kept as the unload count it loaded the collection at (`follow_unloads`), or None
        when the collection has no snapshot to answer from.
        """
        loaded = self._unloads() if has_snapshot else None
        with self._lock:
            self._serving.pop(name, None)
            _remember(self._chroma, name, loaded)

    # -- building a snapshot -----------------------------------------------------------------

    def _submit(self, job: Callable[[], object]) -> None:
        with self._lock:  # the worker leaves when idle, and `close` closes, under the lock
            if not self.building or self._closing.is_set():
                return
            self._pending += 1
            self._jobs.put(job)
            if self._worker is None or not self._worker.is_alive():  # (not after a fork)
                self._worker = self._started(self._work)

    def _work(self) -> None:
        while True:  # until `close`'s None: the jobs queued before it run (or are dropped)
            try:
                job = self._jobs.get(timeout=_IDLE)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._worker = None
                        return
                continue
            if job is None:
                return
            try:
                if not self._dropping:
                    job()
            except Exception as exc:  # a snapshot is an optimisation: Chroma still answers
                logger.warning("could not write a vector snapshot: %s", exc)
            finally:
                job = None  # an idle worker holds no collection's handle
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _check(self, collection: Collection, *, throttled: bool = True) -> bool:
        """Build a snapshot if the collection's cannot be brought up to date (`written`).

        `throttled`: a full build at most once per `REBUILD_EVERY` seconds (`settle` asks
        for one regardless). Returns whether the next process can start from it now.
        """
        name = collection.name
        with self._lock:
            self._checking.discard(name)
        snapshot = Snapshot.load(self._files, name)
        if snapshot is not None and snapshot.collection_id == str(collection.id):
            if self._log.holds(snapshot.collection_id, snapshot.seq):
                return True  # the next process applies the writes since
            if self._refresh(collection, snapshot):
                return True  # once per purge of the log at most: no throttle
        with self._lock:  # a full build reads every vector: at most once a while
            last = self._built_at.get(name, -REBUILD_EVERY)
            if throttled and time.monotonic() - last < REBUILD_EVERY:
                return False
        if not self._build_one(collection):  # written meanwhile: the next write retries
            return False
        with self._lock:
            self._built_at[name] = time.monotonic()
        return True

    def _build_one(self, collection: Collection) -> bool:
        """Read the collection page by page, then apply what was written meanwhile.

        A page read after a write shows it (applying the log's row again changes
        nothing); a delete meanwhile can shift a row out of every page: then the count
        differs from Chroma's and nothing is kept. Returns whether a snapshot was written.
        """
        stamp = self._log.stamp(str(collection.id))
        if stamp is None or stamp.count < self.snapshots_from:
            if stamp is not None:
                with self._lock:
                    _remember(self._short, collection.name, self.snapshots_from - stamp.count)
                    self._written_here.pop(collection.name, None)
            return False
        stop = partial(self._closing.wait, 0.001)  # (a pause between pages for searches)
        rows = read_every_vector(collection, stamp.count, self._delays, stop)
        if rows is None:
            return False
        read = Snapshot.of(stamp, *rows)
        return self._caught_up(collection.name, read)

    def _refresh(self, collection: Collection, stale: Snapshot) -> bool:
        """Bring a snapshot up to date that Chroma's log no longer can: read only what changed.

        Chroma's live records keep the number of their last write (`ChromaLog.live`): a
        record written after the snapshot is read from Chroma (this process has its index
        loaded), every other row is still exact. A record deleted since (the count tells)
        or over `_REFRESH_MOST` changes leave it to a full build. Its reads take ~0.1 s at
        100k (a build's: 3-8 s; saving the file ~0.2-3 s more): it ends before a process
        that writes a few turns and closes. At interpreter exit it stops between pages.
        """
        live = self._log.live(stale.collection_id)
        if live is None:
            return False
        stamp, written = live
        changed = sorted(vector_id for vector_id, seq in written.items() if seq > stale.seq)
        if stamp.count < self.snapshots_from or len(changed) > _REFRESH_MOST:
            return False
        flat = stale.flat()
        rewritten = positions(flat.vector_ids, set(changed))
        if len(flat) - len(rewritten) + len(changed) != stamp.count:
            return False  # a row of the snapshot was deleted since: it must not stay
        hidden = np.zeros(len(flat), dtype=bool)
        hidden[list(rewritten.values())] = True
        dimension = flat.vectors.shape[1]
        rows = read_records(collection, changed, self._delays, lambda: self._dropping, dimension)
        if rows is None:  # interpreter exit: Chroma's client goes next
            return False
        since = Snapshot.of(stamp, *rows)
        if self._dropping:
            return False
        at_stamp = replace(
            flat,
            seq=stamp.seq,
            hidden=hidden if hidden.any() else None,
            since=since if len(since) else None,
        )
        return self._caught_up(collection.name, at_stamp)

    def _caught_up(self, name: str, read: Snapshot) -> bool:
        """Apply to `read` what was written while it was read, and save it if exact."""
        tail = self._log.tail(read.collection_id, read.seq)
        if tail is None:
            snapshot = None
        elif tail[1]:
            snapshot = read.replayed(*tail)
        else:
            snapshot = read if tail[0].count == len(read) else None
        if snapshot is None:
            logger.debug("collection %r changed while read: no snapshot", name)
            return False
        self._save(name, snapshot)
        with self._lock:
            if name in self._chroma:  # Chroma answers until it unloads the index
                self._chroma[name] = self._unloads()
        logger.info("wrote a snapshot of %d vectors of %r", len(snapshot), name)
        return True

    def _save(self, name: str, snapshot: Snapshot) -> None:
        """Write the file; put it in place only if no vector was deleted since `snapshot`.

        A forget (here or in another process) deletes the file and its temporary copies
        before and after Chroma's delete (`ChromaVectorIndex._delete`): a copy written
        before its second delete is deleted by it; one written after it finds the
        forget's rows in Chroma's log here, and is never put in place.
        """

        def unchanged() -> bool:
            tail = self._log.tail(snapshot.collection_id, snapshot.seq)
            return tail is not None and not any(r.operation == DELETE for r in tail[1])

        if snapshot.save(self._files, name, still=unchanged) and not unchanged():
            Snapshot.delete(self._files, name)  # a forget by an older version, after ours

    def _start(self, target: Callable[..., None], *args: object) -> None:
        with self._lock:
            self._threads = [thread for thread in self._threads if thread.is_alive()]
            self._threads.append(self._started(partial(target, *args)))

    @staticmethod
    def _started(target: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=target, name="semantic-recall-snapshots", daemon=True)
        thread.start()
        return thread


def _remember(known: dict[str, Any], name: str, value: object) -> None:
    """`known[name] = value` as its newest entry, the oldest dropped past `KNOWN`."""
    known.pop(name, None)
    known[name] = value
    if len(known) > KNOWN:
        del known[next(iter(known))]


_OPEN: weakref.WeakSet[ColdSnapshots] = weakref.WeakSet()
if hasattr(os, "register_at_fork"):  # a fork stops none of its parent's (their locks may be held)
    os.register_at_fork(after_in_child=_OPEN.clear)


@atexit.register
def _stop_all() -> None:
    """At exit, stop every build before Chroma's client is torn down under it."""
    for snapshots in list(_OPEN):
        snapshots.close(finish_checks=False)
