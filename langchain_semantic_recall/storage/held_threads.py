"""Whole threads held in memory, so that a search reads its context windows without SQL.

A default (hybrid) search reads ~20 context windows, ~150 messages, per query: in SQL that
is a join on `(thread_id, seq)` and a row made into a message each, 1-2 ms at 10k messages
(`benchmarks/perf_hybrid_phases.py`), the largest step after the vector index. Searches
come back to the same threads, so `HeldThreads` keeps the messages of the threads that
searches keep returning to, whole and in `seq` order: a window is then two bisections.

- A thread is held from its second read (the first is answered in SQL, so a cold search
  pays nothing more), if it has at most `max_thread` messages; one read holds at most
  `max_thread` messages more (a search never waits for more than ~5 ms of reading);
  least recently read out first, bounded by an estimate of the bytes held.
- Held threads are kept in step with the file as `keyword_index.PostingsCache` keeps the
  postings: a write through the storage's hooks is applied as it is made (a stored message
  is put in its place, a deleted thread or resource dropped) and any failed write empties
  the cache; a change that did not come through the hooks (another connection or process:
  `PRAGMA data_version`; an unhooked write on this one: `total_changes`) empties it too.
- A window from held messages is the SQL one: the hit and its neighbours inside the scope
  (`ScopeFilter.admits_message`, the same test as the SQL filter), in `seq` order.

Every method runs under the storage's lock, on its connection.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.storage import sqlite_sql as sql
from langchain_semantic_recall.storage.sqlite_schema import change_marker

__all__ = ["HeldThreads"]

_PLACES: Final = (
    "SELECT m.id, m.thread_id, t.next_seq FROM messages AS m "
    "JOIN threads AS t ON t.thread_id = m.thread_id WHERE m.id IN ({marks})"
)
_THREAD: Final = f"SELECT {sql.COLUMNS} FROM messages WHERE thread_id = ? ORDER BY seq"
_OVERHEAD: Final = 600
"""Bytes of a held message besides its text and payload (the object, its ids, its time)."""
_REMEMBERED: Final = 4096
"""Threads read once, remembered so that their second read holds them."""

Windows = dict[str, tuple[StoredMessage, ...]]


def _cost(message: StoredMessage) -> int:
    return _OVERHEAD + len(message.text) + len(message.payload)


@dataclass(slots=True)
class _Thread:
    """One thread's messages, in `seq` order."""

    resource_id: str
    seqs: list[int] = field(default_factory=list)
    messages: list[StoredMessage] = field(default_factory=list)
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


class HeldThreads:
    """The messages of threads that searches return to, LRU, bounded by bytes.

    Args:
        max_bytes: Most bytes held (estimated: the texts, the payloads and ~0.6 KB per
            message); 0 holds nothing (every window is read in SQL).
        max_thread: Threads with more messages are never held (their windows are read in
            SQL: a long thread's window is a small part of it).
    """

    def __init__(self, *, max_bytes: int = 32 * 2**20, max_thread: int = 1_000) -> None:
        """Create an empty cache."""
        self.max_bytes = max_bytes
        self.max_thread = max_thread
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._by_id: dict[str, StoredMessage] = {}
        self._read_once: OrderedDict[str, None] = OrderedDict()
        self._bytes = 0
        self._seen: tuple[int, int] | None = None
        self._version: int | None = None

    def __len__(self) -> int:  # threads held
        return len(self._threads)

    @property
    def bytes_held(self) -> int:
        """The estimated bytes of every held message."""
        return self._bytes

    def clear(self) -> None:
        """Forget every held thread (and every thread read once)."""
        self._threads.clear()
        self._by_id.clear()
        self._read_once.clear()
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
        """The windows of the hits in held threads, and the hits left to read in SQL.

        A hit outside the scope has no window (as in SQL). The threads of the other hits
        that were read once before, and are short enough, are read whole and held now.
        """
        if self.max_bytes <= 0:
            return {}, list(message_ids)
        fingerprint = change_marker(conn)
        if fingerprint != self._seen:  # a change that did not come through the hooks
            self.clear()
            self._seen = fingerprint
        found, rest = self._from_held(message_ids, before, after, scope)
        if rest and self._hold_threads_of(conn, rest):
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
            elif scope.admits_message(hit):
                self._threads.move_to_end(hit.thread_id)
                found[message_id] = self._threads[hit.thread_id].window(
                    hit.seq, before, after, scope
                )
        return found, rest

    def _hold_threads_of(self, conn: sqlite3.Connection, message_ids: Sequence[str]) -> bool:
        """Read whole the threads of `message_ids` that were read before; whether any."""
        sizes: dict[str, int] = {}  # thread id -> its size (at most: its next seq)
        for start in range(0, len(message_ids), 500):  # SQLite's historical variable limit
            chunk = message_ids[start : start + 500]
            query = _PLACES.format(marks=", ".join("?" * len(chunk)))
            sizes.update((thread, size) for _, thread, size in conn.execute(query, chunk))
        wanted: dict[str, int] = {}
        for thread_id, size in sizes.items():
            if size > self.max_thread:
                continue
            if thread_id in self._read_once:
                wanted[thread_id] = size
            else:
                self._read_once[thread_id] = None
        while len(self._read_once) > _REMEMBERED:
            self._read_once.popitem(last=False)
        budget, held = self.max_thread, False
        for thread_id, size in sorted(wanted.items()):
            if size > budget:
                continue  # held at a later read
            budget -= size
            del self._read_once[thread_id]
            for row in conn.execute(_THREAD, (thread_id,)):
                message = sql.to_message(row)
                thread = self._threads.get(thread_id) or _Thread(message.resource_id)
                self._hold(thread, message)
                held = True
        self._evict()
        return held

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
        if thread is not None:
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
