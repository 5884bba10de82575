"""In-memory keyword postings of the busiest resources, kept in step with the SQLite file.

Scoring BM25 in Python over FTS5's candidates costs ~30 ms at 100k messages in one resource
(and is only exact up to 1,000 matches). A `ResourcePostings` holds one resource's
keyword index as numpy arrays (CSR postings: term -> documents and term frequencies,
plus each document's length and thread), so a search is a few vectorised sums: the same
BM25 as `keywords.rank_bm25` (same constants, the statistics of the search scope
itself, the same floating-point operations in the same order, so the same scores to the
last bit), over *every* match of the scope.

`PostingsCache` keeps the postings of recently searched resources, least recently used
out first, bounded by the number of documents held. A resource's postings are built on
its first search; from `BACKGROUND_DOCS` messages on (~0.5 s at 100k) in the background
(its searches run in SQL meanwhile, same answers; a smaller build costs less than a
thread and a connection), from a snapshot read on a second connection, taken under the
storage's lock; the writes made through the storage after it are journaled and replayed
on the postings before they are used. It never answers from stale data:

- writes made through the owning storage are applied to the loaded postings inside
  their own transaction (new documents go to a small delta, rewritten and deleted ones
  are tombstoned); a large delta drops the postings, rebuilt at the next search;
- any other change to the file (another process or connection: `PRAGMA data_version`;
  a write on this connection that did not come through those hooks:
  `Connection.total_changes`) empties the cache and discards the builds in flight.

Every method runs under the storage's lock, on its connection (a background build takes
that lock to install its postings).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from langchain_semantic_recall.errors import SemanticRecallError
from langchain_semantic_recall.keywords import BM25Params

__all__ = ["PostingsCache", "ResourcePostings"]

logger = logging.getLogger(__name__)

BACKGROUND_DOCS: Final = 20_000
"""Resources of this many searchable messages (a ~0.1 s build) are built in the background."""

_LOAD: Final = (
    "SELECT t.message_id, m.thread_id, t.terms FROM messages AS m "
    "JOIN message_terms AS t ON t.message_id = m.id WHERE m.resource_id = ?"
)
_COUNT: Final = (
    "SELECT COALESCE(SUM(s.docs), 0) FROM threads AS h "
    "JOIN thread_terms AS s ON s.thread_id = h.thread_id WHERE h.resource_id = ?"
)

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


@dataclass(slots=True)
class _Stats:
    docs: int = 0
    terms: int = 0


@dataclass(slots=True)
class ResourcePostings:
    """One resource's keyword index: CSR postings plus a delta of later documents."""

    ids: list[str]
    """Message id of each document slot."""
    thread: Ints
    """Thread number of each slot (see `threads`)."""
    length: Floats
    """Number of terms of each slot."""
    alive: npt.NDArray[np.bool_]
    """False for a rewritten or deleted document."""
    vocab: dict[str, int]
    indptr: Ints
    post_doc: npt.NDArray[np.int32]
    post_tf: npt.NDArray[np.int32]
    threads: dict[str, int]
    thread_stats: list[_Stats]
    total: _Stats
    slot_of: dict[str, int]
    delta: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Term -> (slot, tf) of the documents added since the build."""
    delta_docs: int = 0

    @classmethod
    def build(cls, rows: Sequence[tuple[str, str, str]]) -> ResourcePostings:
        """Postings of `rows` = (message id, thread id, space-joined terms)."""
        n = len(rows)
        ids = [row[0] for row in rows]
        threads: dict[str, int] = {}
        thread = np.fromiter(
            (threads.setdefault(row[1], len(threads)) for row in rows), np.int64, n
        )
        lengths = np.fromiter((row[2].count(" ") + 1 for row in rows), np.int64, n)
        tokens = " ".join([row[2] for row in rows]).split(" ") if n else []
        vocab = {term: number for number, term in enumerate(dict.fromkeys(tokens))}
        flat = np.fromiter(map(vocab.__getitem__, tokens), np.int64, len(tokens))
        keys, tf = np.unique(
            flat * max(n, 1) + np.repeat(np.arange(n), lengths), return_counts=True
        )
        post_term = keys // max(n, 1)
        stats = [_Stats() for _ in threads]
        for t, size in zip(thread.tolist(), lengths.tolist(), strict=True):
            stats[t].docs += 1
            stats[t].terms += size
        return cls(
            ids=ids,
            thread=thread,
            length=lengths.astype(np.float64),
            alive=np.ones(n, dtype=np.bool_),
            vocab=vocab,
            indptr=np.searchsorted(post_term, np.arange(len(vocab) + 1)).astype(np.int64),
            post_doc=(keys % max(n, 1)).astype(np.int32),
            post_tf=tf.astype(np.int32),
            threads=threads,
            thread_stats=stats,
            total=_Stats(n, int(lengths.sum())),
            slot_of={message_id: slot for slot, message_id in enumerate(ids)},
        )

    @property
    def size(self) -> int:
        """Document slots held (alive or not): what the cache bound counts."""
        return len(self.ids)

    def remove(self, message_id: str) -> None:
        """Tombstone a document (it was rewritten or deleted)."""
        slot = self.slot_of.pop(message_id, None)
        if slot is None or not self.alive[slot]:
            return
        self.alive[slot] = False
        size = int(self.length[slot])
        for stats in (self.total, self.thread_stats[int(self.thread[slot])]):
            stats.docs -= 1
            stats.terms -= size

    def remove_thread(self, thread_id: str) -> None:
        """Tombstone every document of a thread."""
        number = self.threads.get(thread_id)
        if number is None:
            return
        for message_id in [m for m, s in self.slot_of.items() if self.thread[s] == number]:
            self.remove(message_id)

    def add(self, documents: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        """Add documents = (message id, thread id, terms), after `remove` of old versions."""
        numbers: list[int] = []
        for message_id, thread_id, terms in documents:
            slot = len(self.ids)
            number = self.threads.setdefault(thread_id, len(self.threads))
            if number == len(self.thread_stats):
                self.thread_stats.append(_Stats())
            numbers.append(number)
            self.ids.append(message_id)
            self.slot_of[message_id] = slot
            counts: dict[str, int] = {}
            for term in terms:
                counts[term] = counts.get(term, 0) + 1
            for term, tf in counts.items():
                self.delta.setdefault(term, []).append((slot, tf))
            for stats in (self.total, self.thread_stats[number]):
                stats.docs += 1
                stats.terms += len(terms)
        lengths = [float(len(terms)) for _, _, terms in documents]
        self.thread = np.concatenate([self.thread, np.asarray(numbers, dtype=np.int64)])
        self.length = np.concatenate([self.length, np.asarray(lengths, dtype=np.float64)])
        self.alive = np.concatenate([self.alive, np.ones(len(documents), dtype=np.bool_)])
        self.delta_docs += len(documents)

    def _postings(self, term: str) -> tuple[Ints, Floats]:
        number = self.vocab.get(term)
        docs: Ints = np.empty(0, np.int64)
        tf: Floats = np.empty(0, np.float64)
        if number is not None:
            lo, hi = int(self.indptr[number]), int(self.indptr[number + 1])
            docs = self.post_doc[lo:hi].astype(np.int64)
            tf = self.post_tf[lo:hi].astype(np.float64)  # small integers: exact
        extra = self.delta.get(term)
        if extra:
            more = np.asarray(extra, dtype=np.int64)
            docs = np.concatenate([docs, more[:, 0]])
            tf = np.concatenate([tf, more[:, 1].astype(np.float64)])
        return docs, tf

    def search(
        self, terms: Sequence[str], thread_id: str | None, limit: int, params: BM25Params
    ) -> list[tuple[str, float]]:
        """The `limit` best documents by BM25 over the resource, or one of its threads.

        The arithmetic mirrors `keywords.rank_bm25` operation by operation (float64), so
        scores are bit-identical; ties are broken by message id as there.
        """
        if thread_id is None:
            stats, number = self.total, -1
        else:
            found = self.threads.get(thread_id)
            if found is None:
                return []
            stats, number = self.thread_stats[found], found
        if not terms or stats.docs <= 0:
            return []
        k1, b = params.k1, params.b
        docs, avg_length = stats.docs, stats.terms / stats.docs
        scores = np.zeros(len(self.ids), dtype=np.float64)
        matched = False
        for term in terms:
            slots, tf = self._postings(term)
            keep = self.alive[slots]
            if number >= 0:
                keep &= self.thread[slots] == number
            slots, tf = slots[keep], tf[keep]
            df = len(slots)
            if not df:
                continue
            idf = math.log(1.0 + (docs - df + 0.5) / (df + 0.5))
            norm = k1 * ((1.0 - b) + (b * self.length[slots]) / avg_length)
            scores[slots] += ((idf * tf) * (k1 + 1.0)) / (tf + norm)
            matched = True
        if not matched:
            return []
        hits = np.flatnonzero(scores > 0)  # the matched slots, sorted (no sort of postings)
        values = scores[hits]
        if len(hits) > limit:  # keep the top `limit` and everything tied with the last
            floor = np.partition(values, len(values) - limit)[len(values) - limit]
            keep = values >= floor
            hits, values = hits[keep], values[keep]
        ranked = sorted(
            zip(values.tolist(), (self.ids[slot] for slot in hits.tolist()), strict=True),
            key=lambda item: (-item[0], item[1]),
        )
        return [(message_id, score) for score, message_id in ranked[:limit]]


Change: TypeAlias = (
    tuple[Literal["remove"], str]
    | tuple[Literal["add"], tuple[str, str, Sequence[str]]]
    | tuple[Literal["thread"], str]
)
"""A committed write to a resource whose postings are being built, replayed on them."""


def _replay(postings: ResourcePostings, journal: Sequence[Change]) -> None:
    added: list[tuple[str, str, Sequence[str]]] = []
    for change in journal:
        if change[0] == "add":
            added.append(change[1])
            continue
        if added:  # keep the order: a later removal may hit a document added before it
            postings.add(added)
            added = []
        if change[0] == "remove":
            postings.remove(change[1])
        else:
            postings.remove_thread(change[1])
    if added:
        postings.add(added)


@dataclass(slots=True)
class _Pending:
    """A write's changes to the keyword index, applied to the loaded postings."""

    removed: list[tuple[str, str]] = field(default_factory=list)
    """(resource id, message id) rewritten."""
    added: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)
    """Message id -> (resource id, thread id, terms), the last version written."""


class PostingsCache:
    """The postings of recently searched resources, LRU, bounded by documents held.

    Args:
        min_docs: Resources with fewer searchable messages are searched in SQL (fast
            enough there, and nothing to keep in memory).
        max_docs: Most document slots kept in memory across resources (~0.25 KB each).
        opener: Opens a read-only connection to the same file, for background builds
            (None: build on the caller's thread, e.g. for an in-memory database).
        lock: The storage's lock, which guards this cache (taken by background builds
            to install their postings).
    """

    def __init__(
        self,
        *,
        min_docs: int = 500,
        max_docs: int = 500_000,
        opener: Callable[[], sqlite3.Connection] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        """Create an empty cache."""
        self.min_docs = min_docs
        self.max_docs = max_docs
        self._loaded: OrderedDict[str, ResourcePostings] = OrderedDict()
        self._seen: tuple[int, int] | None = None
        self._pending = _Pending()
        self._before: int | None = None
        self._opener = opener
        self.background_docs = BACKGROUND_DOCS
        # A big resource's first search waits for Chroma to load its index, which a build
        # beside it slowed (the GIL: 0.7 -> 1.15 s at 100k): SQL; the second one builds.
        self.first_search_in_sql = True
        self._asked: set[str] = set()
        self._lock = lock or threading.Lock()
        self._building: dict[str, list[Change]] = {}  # the writes since each build's snapshot
        self._workers: list[threading.Thread] = []

    def __len__(self) -> int:  # resources loaded
        return len(self._loaded)

    @property
    def docs_held(self) -> int:
        """Document slots currently held, over every loaded resource."""
        return sum(postings.size for postings in self._loaded.values())

    def clear(self) -> None:
        """Forget every loaded resource, and discard the builds in flight."""
        self._loaded.clear()
        self._building.clear()
        self._seen = None

    def building(self, resource_id: str) -> bool:
        """Whether the resource's postings are being built in the background."""
        return resource_id in self._building

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the background builds started so far; False if some still run."""
        for worker in list(self._workers):
            worker.join(timeout)
        self._workers = [w for w in self._workers if w.is_alive()]
        return not self._workers

    @staticmethod
    def _fingerprint(conn: sqlite3.Connection) -> tuple[int, int]:
        return int(conn.execute("PRAGMA data_version").fetchone()[0]), conn.total_changes

    def get(self, conn: sqlite3.Connection, resource_id: str) -> ResourcePostings | None:
        """The resource's postings (built if big enough), or None to search in SQL."""
        fingerprint = self._fingerprint(conn)
        if fingerprint != self._seen:  # a change that did not come through the hooks
            self.clear()
            self._seen = fingerprint
        postings = self._loaded.get(resource_id)
        if postings is not None:
            self._loaded.move_to_end(resource_id)
            return postings
        if resource_id in self._building:
            return None
        docs = int(conn.execute(_COUNT, (resource_id,)).fetchone()[0]) if self.max_docs > 0 else 0
        if docs < max(self.min_docs, 1):
            return None
        if self._opener is not None and docs >= self.background_docs:
            if self.first_search_in_sql and resource_id not in self._asked:
                self._asked = {*list(self._asked)[-4095:], resource_id}  # (bounded)
                return None
            self._asked.discard(resource_id)
            try:
                self._start_build(resource_id)
                return None
            except (sqlite3.Error, SemanticRecallError):  # no second connection: build here
                logger.warning("cannot open %s again; building here", resource_id, exc_info=True)
        postings = ResourcePostings.build(conn.execute(_LOAD, (resource_id,)).fetchall())
        self._install(resource_id, postings)
        return postings

    def _install(self, resource_id: str, postings: ResourcePostings) -> None:
        self._loaded[resource_id] = postings
        held = self.docs_held
        while held > self.max_docs and len(self._loaded) > 1:
            _, dropped = self._loaded.popitem(last=False)
            held -= dropped.size

    def _start_build(self, resource_id: str) -> None:
        """Read the resource's snapshot now (under the lock), build it on a thread."""
        assert self._opener is not None
        reader = self._opener()
        try:
            reader.execute("BEGIN")  # the snapshot: no write of this storage can come first
            cursor = reader.execute(_LOAD, (resource_id,))
            first = cursor.fetchmany(256)
        except BaseException:
            reader.close()
            raise
        journal: list[Change] = []
        self._building[resource_id] = journal
        job = (reader, cursor, first, resource_id, journal)
        worker = threading.Thread(target=self._build, args=job, name="postings", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    def _build(
        self,
        reader: sqlite3.Connection,
        cursor: sqlite3.Cursor,
        first: list[tuple[str, str, str]],
        resource_id: str,
        journal: list[Change],
    ) -> None:
        """The background build: read the snapshot, build, replay the journal, install."""
        try:
            rows = first + cursor.fetchall()
            reader.execute("COMMIT")
            postings = ResourcePostings.build(rows)
        except Exception:  # searches keep running in SQL, with the same answers
            message = "keyword postings of %r not built: searched in SQL, tried again next time"
            logger.warning(message, resource_id, exc_info=True)
            postings = None
        finally:
            reader.close()
        with self._lock:
            if self._building.get(resource_id) is not journal:
                return  # the cache was emptied, or the resource deleted, meanwhile
            del self._building[resource_id]
            if postings is not None:
                _replay(postings, journal)
                if not _stale([(resource_id, postings)]):
                    self._install(resource_id, postings)

    # --- hooks: the storage's writes, inside their transaction -------------------------

    def begin(self, conn: sqlite3.Connection) -> None:
        """A write transaction starts (call right after `BEGIN IMMEDIATE`)."""
        self._pending = _Pending()
        if self._fingerprint(conn) != self._seen:
            self.clear()  # someone else wrote since the last look: rebuild lazily
        self._before = conn.total_changes

    def rewritten(self, resource_id: str, message_id: str) -> None:
        """A stored message is about to be rewritten."""
        if resource_id in self._loaded or resource_id in self._building:
            self._pending.removed.append((resource_id, message_id))
            self._pending.added.pop(message_id, None)

    def added(self, resource_id: str, thread_id: str, message_id: str, terms: list[str]) -> None:
        """A message was made keyword-searchable under `terms`."""
        if (resource_id in self._loaded or resource_id in self._building) and terms:
            self._pending.added[message_id] = (resource_id, thread_id, terms)

    def deleted(self, resource_id: str | None, thread_id: str | None = None) -> None:
        """A thread (or, without `thread_id`, the whole resource) was deleted."""
        if resource_id is None:
            return
        if resource_id in self._building:  # (an aborted write then discards the build)
            if thread_id is None:
                del self._building[resource_id]
            else:
                self._building[resource_id].append(("thread", thread_id))
        postings = self._loaded.get(resource_id)
        if postings is None:
            return
        if thread_id is None:
            del self._loaded[resource_id]
        else:
            postings.remove_thread(thread_id)

    def commit(self, conn: sqlite3.Connection) -> None:
        """Apply the write's changes (call just before `COMMIT`)."""
        pending, self._pending = self._pending, _Pending()
        if self._seen is None or self._before is None:
            self._loaded.clear()
            self._building.clear()
        for resource_id, message_id in pending.removed:
            if resource_id in self._loaded:
                self._loaded[resource_id].remove(message_id)
            elif resource_id in self._building:
                self._building[resource_id].append(("remove", message_id))
        by_resource: dict[str, list[tuple[str, str, Sequence[str]]]] = {}
        for message_id, (resource_id, thread_id, terms) in pending.added.items():
            by_resource.setdefault(resource_id, []).append((message_id, thread_id, terms))
        for resource_id, documents in by_resource.items():
            postings = self._loaded.get(resource_id)
            if postings is not None:
                postings.add(documents)
            elif resource_id in self._building:
                self._building[resource_id].extend(("add", document) for document in documents)
        for resource_id in _stale(self._loaded.items()):
            del self._loaded[resource_id]
        self._seen = self._fingerprint(conn)
        self._before = None

    def abort(self) -> None:
        """The write failed (before or at `COMMIT`): trust nothing loaded."""
        self._pending = _Pending()
        self.clear()


def _stale(loaded: Iterable[tuple[str, ResourcePostings]]) -> list[str]:
    """Resources whose delta outgrew their postings (rebuilt in one go at the next search)."""
    return [r for r, p in loaded if p.delta_docs > max(1_000, p.size // 10)]
