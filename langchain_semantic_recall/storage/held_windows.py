"""The messages of recently read windows, held so that a search reads them again without SQL.

A default (hybrid) search reads ~20 context windows, ~150 messages, per query: in SQL that
is a join on `(thread_id, seq)` and a row made into a message each, 1-2 ms at 10k messages
(`benchmarks/perf_hybrid_phases.py`), the largest step after the vector index. Searches
come back to the same messages (the same memories answer many questions), so
`HeldWindows` keeps what the windows read in SQL brought back, per thread: the messages
and the spans of seqs known whole (every message of the thread in that span is held).
A window inside a known span is then two bisections. Holding costs no read of its own
(only what a search read anyway), so a search that finds nothing held pays a few dict
inserts, not a larger read.

- Only windows read without a filter teach spans (a filtered read leaves messages out).
- Least recently read thread out first, bounded by an estimate of the bytes held.
- Held messages are kept in step with the file as `keyword_index.PostingsCache` keeps
  the postings: a write through the storage's hooks is applied as it is made (a stored
  message put in its place in a held thread, a deleted thread or resource dropped) and a
  failed write empties the cache; a change that did not come through the hooks (another
  connection or process: `PRAGMA data_version`; an unhooked write on this one:
  `total_changes`) empties it too.
- A window from held messages is the SQL one: the hit inside the scope
  (`ScopeFilter.admits_message`, the same test as the SQL filter), then the messages of
  its thread in the span inside the scope's filter, in `seq` order.

Every method runs under the storage's lock, on its connection.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from sys import getsizeof
from typing import Final

from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.storage.sqlite_schema import change_marker

__all__ = ["HeldWindows"]

_OVERHEAD: Final = 400
"""Bytes of a held message besides its strings (the object, its time, its tuples)."""

Windows = dict[str, tuple[StoredMessage, ...]]


def _cost(message: StoredMessage) -> int:
    """Its bytes: each string as held (`getsizeof`: 1, 2 or 4 bytes a character), and the rest."""
    strings = (message.id, message.thread_id, message.resource_id, message.text, message.payload)
    size = _OVERHEAD + sum(map(getsizeof, strings))
    for key, value in message.metadata:  # up to 32 keys of up to 1,000 characters each
        size += getsizeof(key) + getsizeof(value) + 56  # the pair's tuple
    return size


@dataclass(slots=True)
class _Thread:
    """Held messages of one thread in `seq` order, and the spans of seqs held whole."""

    resource_id: str
    seqs: list[int] = field(default_factory=list)
    messages: list[StoredMessage] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    """The spans' first seqs, sorted; spans are disjoint and never adjacent."""
    ends: list[int] = field(default_factory=list)
    """The spans' last seqs (inclusive), in the same order."""
    bytes: int = 0

    def put(self, message: StoredMessage) -> int:
        """Insert or replace `message` at its seq; the change in bytes held."""
        spot = bisect.bisect_left(self.seqs, message.seq)
        change = _cost(message)
        if spot < len(self.seqs) and self.seqs[spot] == message.seq:
            change -= _cost(self.messages[spot])
            self.messages[spot] = message
        else:
            self.seqs.insert(spot, message.seq)
            self.messages.insert(spot, message)
        self.bytes += change
        return change

    def knows(self, low: int, high: int) -> bool:
        """Whether every message with a seq from `low` to `high` is held."""
        spot = bisect.bisect_right(self.starts, low) - 1
        return spot >= 0 and self.ends[spot] >= high

    def learn(self, low: int, high: int) -> None:
        """Every message with a seq from `low` to `high` is now held."""
        first = bisect.bisect_left(self.ends, low - 1)  # the first span touching it
        last = bisect.bisect_right(self.starts, high + 1)  # past the last one
        if first < last:
            low, high = min(low, self.starts[first]), max(high, self.ends[last - 1])
        self.starts[first:last] = [low]
        self.ends[first:last] = [high]

    def window(
        self, seq: int, before: int, after: int, scope: ScopeFilter
    ) -> tuple[StoredMessage, ...]:
        """The messages around `seq` inside `scope`, whose ids already admit the thread."""
        low = bisect.bisect_left(self.seqs, seq - before)
        high = bisect.bisect_right(self.seqs, seq + after)
        window = self.messages[low:high]
        if not scope.narrowed:  # one thread, one resource: the hit's own
            return tuple(window)
        return tuple(m for m in window if scope.matches(m.metadata, m.created_at))


class HeldWindows:
    """The messages of windows read recently, per thread, LRU, bounded by bytes.

    Args:
        max_bytes: Most bytes held (the strings of each message, its metadata's
            included, and ~0.4 KB for the rest); 0 holds nothing (every window is read in
            SQL).
    """

    def __init__(self, *, max_bytes: int = 32 * 2**20) -> None:
        """Create an empty cache."""
        self.max_bytes = max_bytes
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._by_id: dict[str, StoredMessage] = {}
        self._bytes = 0
        self._seen: tuple[int, int] | None = None
        self._version: int | None = None

    def __len__(self) -> int:  # threads with messages held
        return len(self._threads)

    @property
    def bytes_held(self) -> int:
        """The estimated bytes of every held message."""
        return self._bytes

    def clear(self) -> None:
        """Forget every held message."""
        self._threads.clear()
        self._by_id.clear()
        self._bytes = 0
        self._seen = None

    # --- reads ------------------------------------------------------------------------

    def windows(
        self,
        conn: sqlite3.Connection,
        message_ids: Sequence[str],
        *,
        before: int,
        after: int,
        scope: ScopeFilter,
    ) -> tuple[Windows, list[str]]:
        """The windows held whole, and the hits left to read in SQL (then `learn` them).

        A held hit outside the scope has no window (as in SQL).
        """
        if self.max_bytes <= 0:
            return {}, list(message_ids)
        fingerprint = change_marker(conn)
        if fingerprint != self._seen:  # a change that did not come through the hooks
            self.clear()
            self._seen = fingerprint
        found: Windows = {}
        rest: list[str] = []
        for message_id in message_ids:
            hit = self._by_id.get(message_id)
            if hit is None:
                rest.append(message_id)
                continue
            thread = self._threads[hit.thread_id]
            if not thread.knows(hit.seq - before, hit.seq + after):
                rest.append(message_id)
            elif scope.admits_message(hit):
                self._threads.move_to_end(hit.thread_id)
                found[message_id] = thread.window(hit.seq, before, after, scope)
        return found, rest

    def learn(
        self,
        windows: Mapping[str, Sequence[StoredMessage]],
        *,
        before: int,
        after: int,
        scope: ScopeFilter,
    ) -> None:
        """Hold the windows just read in SQL (in the same lock as `windows`' check)."""
        if self.max_bytes <= 0 or scope.narrowed:  # a filtered window misses messages
            return
        for hit_id, window in windows.items():
            hit = next((m for m in window if m.id == hit_id), None)
            if hit is None:  # (never: a window holds its hit)
                continue
            thread = self._threads.get(hit.thread_id) or _Thread(hit.resource_id)
            for message in window:
                if self._by_id.get(message.id) is not message:
                    self._hold(thread, message)
            thread.learn(hit.seq - before, hit.seq + after)
            self._threads.move_to_end(hit.thread_id)
        self._evict()

    # --- hooks: the storage's writes, inside their transaction -------------------------

    def begin(self, conn: sqlite3.Connection) -> None:
        """A write transaction starts (right after `BEGIN IMMEDIATE`: see `PostingsCache`)."""
        fingerprint = change_marker(conn)
        if fingerprint != self._seen:
            self.clear()
        self._version = fingerprint[0]

    def stored(self, message: StoredMessage) -> None:
        """`message` was inserted or rewritten (as `put` returns it)."""
        thread = self._threads.get(message.thread_id)
        if thread is not None:  # a held span stays whole: the new message is held too
            self._hold(thread, replace(message, created=False))

    def deleted(self, resource_id: str | None, thread_id: str | None = None) -> None:
        """A thread (or, without `thread_id`, every thread of the resource) was deleted."""
        if thread_id is not None:
            self._drop(thread_id)
            return
        for held_id, thread in list(self._threads.items()):
            if thread.resource_id == resource_id:
                self._drop(held_id)

    def commit(self, conn: sqlite3.Connection) -> None:
        """The write committed (right after `COMMIT`, still under the lock)."""
        self._seen = None if self._version is None else (self._version, conn.total_changes)
        self._version = None
        self._evict()

    def abort(self) -> None:
        """The write failed (before or at `COMMIT`): trust nothing held."""
        self._version = None
        self.clear()

    # --- the bound --------------------------------------------------------------------

    def _hold(self, thread: _Thread, message: StoredMessage) -> None:
        self._threads.setdefault(message.thread_id, thread)
        self._bytes += thread.put(message)
        self._by_id[message.id] = message

    def _drop(self, thread_id: str) -> None:
        thread = self._threads.pop(thread_id, None)
        if thread is not None:
            self._bytes -= thread.bytes
            for message in thread.messages:
                del self._by_id[message.id]

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._threads:
            self._drop(next(iter(self._threads)))
