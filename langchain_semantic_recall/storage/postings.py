"""One resource's keyword index as numpy arrays: BM25 over every match in a few sums.

A `ResourcePostings` holds CSR postings (term -> documents and term frequencies), each
document's length and thread, so a search is a few vectorised sums: the same BM25 as
`keywords.rank_bm25` (same constants, the statistics of the search scope itself, the same
floating-point operations in the same order, so the same scores to the last bit), over
*every* match of the scope. `keyword_index.PostingsCache` keeps them in step with SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

import numpy as np
import numpy.typing as npt

from langchain_semantic_recall.keywords import BM25Params, bm25_idf
from langchain_semantic_recall.records import ScopeFilter

__all__ = ["Document", "ResourcePostings"]

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Document = tuple[str, str, Sequence[str], str, str | None]
"""(message id, thread id, terms, created_at ISO text, metadata JSON text or None)."""
_TIME: Final = "datetime64[us]"
"""Creation times, in UTC (parsed from the storage's fixed-width ISO text, `_time`)."""


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
    created: npt.NDArray[np.datetime64] = field(default_factory=lambda: np.empty(0, _TIME))
    """Creation time of each slot (UTC)."""
    metadata: list[str | None] = field(default_factory=list)
    """Metadata JSON text of each slot (None: none), parsed when a filter asks."""
    columns: dict[str, npt.NDArray[np.str_]] = field(default_factory=dict)
    """Metadata key -> each slot's tagged value (`_column`), for the slots parsed so far."""
    delta: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Term -> (slot, tf) of the documents added since the build."""
    delta_docs: int = 0

    @classmethod
    def build(cls, rows: Sequence[tuple[str, str, str, str, str | None]]) -> ResourcePostings:
        """Postings of `rows` = (message id, thread id, space-joined terms, created, metadata)."""
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
            created=_times([row[3] for row in rows]),
            metadata=[row[4] for row in rows],
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

    def add(self, documents: Sequence[Document]) -> None:
        """Add documents (`Document`), after `remove` of their old versions."""
        numbers: list[int] = []
        for message_id, thread_id, terms, _, metadata in documents:
            self.metadata.append(metadata)
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
        lengths = [float(len(document[2])) for document in documents]
        self.created = np.concatenate([self.created, _times([d[3] for d in documents])])
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
        self,
        terms: Sequence[str],
        thread_id: str | None,
        limit: int,
        params: BM25Params,
        *,
        scope: ScopeFilter | None = None,
    ) -> list[tuple[str, float]]:
        """The `limit` best documents by BM25 over the resource, or one of its threads.

        The arithmetic mirrors `keywords.rank_bm25` operation by operation (float64), so
        scores are bit-identical; ties are broken by message id as there. A `scope` with
        a filter keeps the matches it admits (BM25's statistics stay the thread's or
        resource's, as on every backend).
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
            idf = bm25_idf(df, docs)
            norm = k1 * ((1.0 - b) + (b * self.length[slots]) / avg_length)
            scores[slots] += ((idf * tf) * (k1 + 1.0)) / (tf + norm)
            matched = True
        if not matched:
            return []
        hits = np.flatnonzero(scores > 0)  # the matched slots, sorted (no sort of postings)
        if scope is not None and scope.narrowed:
            hits = self._admitted(hits, scope)
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

    def _admitted(self, slots: Ints, scope: ScopeFilter) -> Ints:
        """The slots whose creation time and metadata pass the scope's filter."""
        if scope.since is not None:
            slots = slots[self.created[slots] >= _time(scope.since)]
        if scope.until is not None:
            slots = slots[self.created[slots] < _time(scope.until)]
        for key, values in scope.metadata:
            slots = slots[np.isin(self._column(key)[slots], [_tag(v) for v in values])]
        return slots

    def in_scope(
        self, message_ids: Sequence[str], scope: ScopeFilter
    ) -> tuple[set[str], list[str]]:
        """The ids of live documents inside `scope`, and the ids these postings do not hold.

        Vector operations on the slots: no message is read. The ids not held (messages
        without keyword terms, or not of this resource) are for the caller to check.
        """
        slots: list[int] = []
        unknown: list[str] = []
        for message_id in message_ids:
            slot = self.slot_of.get(message_id)
            if slot is None:
                unknown.append(message_id)
            else:
                slots.append(slot)
        held = np.asarray(slots, dtype=np.int64)
        if scope.thread_id is not None:
            held = held[self.thread[held] == self.threads.get(scope.thread_id, -1)]
        return {self.ids[slot] for slot in self._admitted(held, scope).tolist()}, unknown

    def kept_share(self, scope: ScopeFilter, sample: int = 4096) -> float | None:
        """The share of the scope's live thread (or resource) documents its filter keeps.

        Measured on `sample` of them, one drawn at random from each of `sample` equal runs
        of slots (a fixed seed: the same answer every time). Slots run in write order, so
        a time range is measured almost exactly; evenly spaced slots would alias with
        alternating tags. A tag kept by 8 % is measured within about half a point.
        None if there are none.
        """
        if scope.thread_id is None and len(self.ids) > sample:  # no scan of every slot
            slots = _stratified(len(self.ids), sample)
            slots = slots[self.alive[slots]]
        else:
            slots = self._live(scope.thread_id)
            if len(slots) > sample:
                slots = slots[_stratified(len(slots), sample)]
        return len(self._admitted(slots, scope)) / len(slots) if len(slots) else None

    def admitted_count(self, scope: ScopeFilter) -> int:
        """Live documents of the scope's thread (or of the resource) that pass its filter."""
        return len(self._admitted(self._live(scope.thread_id), scope))

    def _live(self, thread_id: str | None) -> Ints:
        """The live slots of a thread (none if unknown here), or of the whole resource."""
        live = self.alive
        if thread_id is not None:
            live = live & (self.thread == self.threads.get(thread_id, -1))
        return np.flatnonzero(live)

    def _column(self, key: str) -> npt.NDArray[np.str_]:
        """Each slot's value of metadata `key`, tagged by kind (`_tag`); parsed once."""
        column = self.columns.get(key)
        done = 0 if column is None else len(column)
        if done < len(self.ids):
            fresh = np.asarray(
                [_tag(json.loads(m).get(key)) if m else "" for m in self.metadata[done:]],
                dtype=np.str_,
            )
            column = fresh if column is None else np.concatenate([column, fresh])
            self.columns[key] = column
        assert column is not None
        return column


_JITTER: Final = np.random.default_rng(0).random(4096)
"""Where in each run `_stratified` draws (fixed: the same estimate every time)."""


def _stratified(size: int, sample: int) -> Ints:
    """`sample` positions in `range(size)`, one at random in each of `sample` equal runs."""
    jitter = _JITTER[:sample] if sample <= len(_JITTER) else np.resize(_JITTER, sample)
    return ((np.arange(sample) + jitter) * (size / sample)).astype(np.int64)


def _times(texts: Sequence[str]) -> npt.NDArray[np.datetime64]:
    """The storage's UTC ISO texts (`sqlite_sql.iso_text`: 26 characters then +00:00)."""
    return np.asarray([text[:26] for text in texts], dtype=_TIME)


def _time(value: datetime) -> np.datetime64:
    return np.datetime64(value.astimezone(UTC).replace(tzinfo=None), "us")


def _tag(value: object) -> str:
    """A metadata value as text that equals another's when `filters.same_value` says so.

    A bool only equals a bool, numbers compare as numbers (2 and 2.0 both give "n2.0"),
    text as text; a missing key ("") equals nothing that is asked for.
    """
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int | float):
        return "n" + repr(float(value))
    return "s" + value if isinstance(value, str) else ""
