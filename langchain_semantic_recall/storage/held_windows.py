"""The messages of recently read windows, held so that a search reads them again without SQL.

A default (hybrid) search reads ~20 context windows, ~150 messages, per query: in SQL that
is a join on `(thread_id, seq)` and a row made into a message each, 1-2 ms at 10k messages
(`benchmarks/perf_hybrid_phases.py`), the largest step after the vector index. Searches
come back to the same messages (the same memories answer many questions), so
`HeldWindows` keeps, per thread, messages and the spans of seqs it holds whole: a window
inside a span is two bisections.

- What a window read in SQL brought back is held (no read of its own). Only reads
  without a filter teach spans (a filtered read leaves messages out).
- A thread read a second time is read whole (up to 1,000 messages), while the cache is
  at most half full: a small store ends up held whole, and a cold search pays nothing
  more than SQL. Past half, only what windows read is held; once full, one read in
  eight, so a store bigger than the cache does not pay on every read for evictions.
- Least recently read thread out first, bounded by the bytes held (each string as
  `sys.getsizeof` counts it, metadata included).
- Held messages are kept in step with the file with the keyword postings: a write
  through the storage's hooks is applied as it is made (a stored message put in its
  place in a held thread, a deleted thread or resource dropped), and whenever
  `keyword_index.PostingsCache` trusts nothing it holds (a failed or unhooked write; a
  change that did not come through the hooks: another connection or process, `PRAGMA
  data_version`; an unhooked write on this one, `total_changes`), it empties this cache
  too (its `on_clear`). The storage has it check the file before every window read.
- A window from held messages is the SQL one: the hit inside the scope
  (`ScopeFilter.admits_message`, the same test as the SQL filter), then the messages of
  its thread in the span inside the scope's filter, in `seq` order.

Every method runs under the storage's lock, on its connection.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from sys import getsizeof
from typing import Final

from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.storage import sqlite_sql as sql

__all__ = ["HeldWindows"]

_PLACES: Final = (
    "SELECT m.id, m.thread_id, t.next_seq FROM messages AS m "
    "JOIN threads AS t ON t.thread_id = m.thread_id WHERE m.id IN ({marks})"
)
_THREAD: Final = f"SELECT {sql.COLUMNS} FROM messages WHERE thread_id = ? ORDER BY seq"
_MAX_THREAD: Final = 1_000
"""Threads of more messages are never read whole; nor more than this many messages at once."""
_WHOLE: Final = 2**62
"""A span past any window (`checks.check_window` caps them at 2**31 - 1): the whole thread."""
_PER_MESSAGE: Final = 1_200
"""Bytes a message is counted at before any is held (a chat message of ~130 characters)."""
_REMEMBERED: Final = 4096
"""Threads read once, remembered so that their second read may hold them whole."""
_FULL_SAMPLE: Final = 8
"""A full cache learns one window read in this many (`HeldWindows.learn`)."""
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
        self._read_once: OrderedDict[str, None] = OrderedDict()
        self._full_reads = 0

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
        self._read_once.clear()
        self._bytes = 0

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

        A held hit outside the scope has no window (as in SQL). The caller has checked
        that the file did not change behind the hooks (`PostingsCache.check`).
        """
        if self.max_bytes <= 0:
            return {}, list(message_ids)
        found, rest = self._from_held(message_ids, before, after, scope)
        if rest and self._bytes < self.max_bytes // 2 and self._hold_threads_of(conn, rest):
            more, rest = self._from_held(rest, before, after, scope)
            found.update(more)
        return found, rest

    def _from_held(
        self, message_ids: Iterable[str], before: int, after: int, scope: ScopeFilter
    ) -> tuple[Windows, list[str]]:
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

    def _hold_threads_of(self, conn: sqlite3.Connection, message_ids: Sequence[str]) -> bool:
        """Read whole the threads of `message_ids` read once before, into half the cache.

        Whether any was read. Only while the cache is at most half full (the caller's
        check): a cache that fills evicts what it would hold before it is used again (at
        100k messages in 1,000 threads, a thread loaded whole for each window tripled a
        search), so past half it learns the windows it reads instead, and asks nothing more.
        """
        sizes: dict[str, int] = {}  # thread id -> its size (at most: its next seq)
        for start in range(0, len(message_ids), 500):  # SQLite's historical variable limit
            chunk = message_ids[start : start + 500]
            query = _PLACES.format(marks=", ".join("?" * len(chunk)))
            sizes.update((thread, size) for _, thread, size in conn.execute(query, chunk))
        per_message = self._bytes // len(self._by_id) if self._by_id else _PER_MESSAGE
        room, budget, held = self.max_bytes // 2 - self._bytes, _MAX_THREAD, False
        for thread_id, size in sizes.items():
            if thread_id not in self._read_once:  # a cold read pays nothing more than SQL
                self._read_once[thread_id] = None
            elif size <= budget and size * per_message <= room:
                budget, room = budget - size, room - size * per_message
                del self._read_once[thread_id]
                for row in conn.execute(_THREAD, (thread_id,)):
                    message = sql.to_message(row)
                    thread = self._threads.get(thread_id) or _Thread(message.resource_id)
                    self._hold(thread, message)
                    held = True
                if thread_id in self._threads:  # every message, and every later one (hooks)
                    self._threads[thread_id].learn(-_WHOLE, _WHOLE)
        while len(self._read_once) > _REMEMBERED:
            self._read_once.popitem(last=False)
        self._evict()
        return held

    def learn(
        self,
        windows: Mapping[str, Sequence[StoredMessage]],
        *,
        before: int,
        after: int,
        scope: ScopeFilter,
    ) -> None:
        """Hold the windows just read in SQL (in the same lock as `windows`' check).

        A full cache learns one read in `_FULL_SAMPLE`: what it holds still turns over to
        what searches read now, without paying on every read for an eviction that a cache
        smaller than what is searched would never win back.
        """
        if not windows:  # memory answered the whole read: no SQL read to count below
            return
        if self.max_bytes <= 0 or scope.narrowed:  # a filtered window misses messages
            return
        if self._bytes >= self.max_bytes - self.max_bytes // 16:
            self._full_reads += 1
            if self._full_reads % _FULL_SAMPLE:
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

    def stored(self, message: StoredMessage) -> None:
        """`message` was inserted or rewritten (as `put` returns it)."""
        thread = self._threads.get(message.thread_id)
        if thread is not None:  # a held span stays whole: the new message is held too
            self._hold(thread, replace(message, created=False))
            self._evict()

    def deleted(self, resource_id: str | None, thread_id: str | None = None) -> None:
        """A thread (or, without `thread_id`, every thread of the resource) was deleted."""
        if thread_id is not None:
            self._drop(thread_id)
            return
        for held_id, thread in list(self._threads.items()):
            if thread.resource_id == resource_id:
                self._drop(held_id)

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
