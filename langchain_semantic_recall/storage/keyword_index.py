"""In-memory keyword postings of the busiest resources, kept in step with the SQLite file.

Scoring BM25 in Python over FTS5's candidates costs ~30 ms at 100k messages in one resource
(and is only exact up to 1,000 matches). A `ResourcePostings` holds one resource's
keyword index as numpy arrays (CSR postings: term -> documents and term frequencies,
plus each document's length and thread), so a search is a few vectorised sums: the same
BM25 as `keywords.rank_bm25` (same constants, the statistics of the search scope
itself, the same floating-point operations in the same order, so the same scores to the
last bit), over *every* match of the scope.

`PostingsCache` keeps the postings of recently searched resources, least recently used
out first, bounded by the number of documents held. It never answers from stale data:

- writes made through the owning storage are applied to the loaded postings inside
  their own transaction (new documents go to a small delta, rewritten and deleted ones
  are tombstoned); a large delta drops the postings, rebuilt at the next search;
- any other change to the file (another process or connection: `PRAGMA data_version`;
  a write on this connection that did not come through those hooks:
  `Connection.total_changes`) empties the cache.

Every method runs under the storage's lock, on its connection.
"""

from __future__ import annotations

import math
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_semantic_recall.keywords import BM25Params

__all__ = ["PostingsCache", "ResourcePostings"]

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
        touched: list[Ints] = []
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
            touched.append(slots)
        if not touched:
            return []
        hits = np.unique(np.concatenate(touched))
        values = scores[hits]
        keep = values > 0
        hits, values = hits[keep], values[keep]
        if len(hits) > limit:  # keep the top `limit` and everything tied with the last
            floor = np.partition(values, len(values) - limit)[len(values) - limit]
            keep = values >= floor
            hits, values = hits[keep], values[keep]
        ranked = sorted(
            zip(values.tolist(), (self.ids[slot] for slot in hits.tolist()), strict=True),
            key=lambda item: (-item[0], item[1]),
        )
        return [(message_id, score) for score, message_id in ranked[:limit]]


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
    """

    def __init__(self, *, min_docs: int = 500, max_docs: int = 500_000) -> None:
        """Create an empty cache."""
        self.min_docs = min_docs
        self.max_docs = max_docs
        self._loaded: OrderedDict[str, ResourcePostings] = OrderedDict()
        self._seen: tuple[int, int] | None = None
        self._pending = _Pending()
        self._before: int | None = None
        self._version: int | None = None

    def __len__(self) -> int:
        return len(self._loaded)

    @property
    def docs_held(self) -> int:
        """Document slots currently held, over every loaded resource."""
        return sum(postings.size for postings in self._loaded.values())

    def clear(self) -> None:
        """Forget every loaded resource."""
        self._loaded.clear()
        self._seen = None

    @staticmethod
    def _data_version(conn: sqlite3.Connection) -> int:
        """Changes committed by *other* connections (this one's own commits leave it)."""
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    @classmethod
    def _fingerprint(cls, conn: sqlite3.Connection) -> tuple[int, int]:
        return cls._data_version(conn), conn.total_changes

    def get(self, conn: sqlite3.Connection, resource_id: str) -> ResourcePostings | None:
        """The resource's postings (built if big enough), or None to search in SQL."""
        fingerprint = self._fingerprint(conn)
        if fingerprint != self._seen:  # a change that did not come through the hooks
            self._loaded.clear()
            self._seen = fingerprint
        postings = self._loaded.get(resource_id)
        if postings is not None:
            self._loaded.move_to_end(resource_id)
            return postings
        if self.max_docs <= 0 or int(conn.execute(_COUNT, (resource_id,)).fetchone()[0]) < max(
            self.min_docs, 1
        ):
            return None
        postings = ResourcePostings.build(conn.execute(_LOAD, (resource_id,)).fetchall())
        self._loaded[resource_id] = postings
        held = self.docs_held
        while held > self.max_docs and len(self._loaded) > 1:
            _, dropped = self._loaded.popitem(last=False)
            held -= dropped.size
        return postings

    # --- hooks: the storage's writes, inside their transaction -------------------------

    def begin(self, conn: sqlite3.Connection) -> None:
        """A write transaction starts (call right after `BEGIN IMMEDIATE`).

        The other connections' change marker is read here, inside the transaction that
        holds the write lock: nobody else can commit until ours does, so it is exactly
        the state our changes are applied to. Read after `COMMIT`, it could already count
        another connection's commit, which would then never be seen.
        """
        self._pending = _Pending()
        fingerprint = self._fingerprint(conn)
        if fingerprint != self._seen:
            self.clear()  # someone else wrote since the last look: rebuild lazily
        self._version = fingerprint[0]
        self._before = conn.total_changes

    def rewritten(self, resource_id: str, message_id: str) -> None:
        """A stored message is about to be rewritten."""
        if resource_id in self._loaded:
            self._pending.removed.append((resource_id, message_id))
            self._pending.added.pop(message_id, None)

    def added(self, resource_id: str, thread_id: str, message_id: str, terms: list[str]) -> None:
        """A message was made keyword-searchable under `terms`."""
        if resource_id in self._loaded and terms:
            self._pending.added[message_id] = (resource_id, thread_id, terms)

    def deleted(self, resource_id: str | None, thread_id: str | None = None) -> None:
        """A thread (or, without `thread_id`, the whole resource) was deleted."""
        postings = self._loaded.get(resource_id) if resource_id is not None else None
        if postings is None:
            return
        if thread_id is None:
            del self._loaded[str(resource_id)]
        else:
            postings.remove_thread(thread_id)

    def commit(self, conn: sqlite3.Connection) -> None:
        """Apply the write's changes (call right after `COMMIT`, still under the lock)."""
        pending, self._pending = self._pending, _Pending()
        if self._seen is None or self._before is None or self._version is None:
            self._loaded.clear()
        for resource_id, message_id in pending.removed:
            if resource_id in self._loaded:
                self._loaded[resource_id].remove(message_id)
        by_resource: dict[str, list[tuple[str, str, Sequence[str]]]] = {}
        for message_id, (resource_id, thread_id, terms) in pending.added.items():
            by_resource.setdefault(resource_id, []).append((message_id, thread_id, terms))
        for resource_id, documents in by_resource.items():
            postings = self._loaded.get(resource_id)
            if postings is not None:
                postings.add(documents)
        for resource_id in _stale(self._loaded.items()):
            del self._loaded[resource_id]
        # The marker read inside the transaction, and this connection's own changes
        # (only it moves `total_changes`): a commit by another connection after ours
        # still differs from what is recorded here, so the next look rebuilds.
        self._seen = None if self._version is None else (self._version, conn.total_changes)
        self._before = self._version = None

    def abort(self) -> None:
        """The write failed (before or at `COMMIT`): trust nothing loaded."""
        self._pending = _Pending()
        self._version = None
        self.clear()


def _stale(loaded: Iterable[tuple[str, ResourcePostings]]) -> list[str]:
    """Resources whose delta outgrew their postings (rebuilt in one go at the next search)."""
    return [r for r, p in loaded if p.delta_docs > max(1_000, p.size // 10)]
