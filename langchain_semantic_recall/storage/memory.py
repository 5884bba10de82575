"""In-memory message storage: the reference backend for tests and notebooks.

Everything lives in plain dicts guarded by one `threading.RLock`. A write is
planned against the current state first and applied only when every record passed the
ownership and forgotten-thread checks, so a failing batch writes nothing.

Example:
    ```python
    from langchain_semantic_recall.storage import InMemoryStorage

    storage = InMemoryStorage()
    storage.put([record])  # record: a MessageRecord
    windows = storage.get_windows(
        [record.id], before=1, after=1, scope=ScopeFilter(resource_id="user-1")
    )
    # async twins: await storage.aput([...]), await storage.aget_windows(...)
    ```
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from datetime import datetime

from langchain_semantic_recall.errors import OwnershipError
from langchain_semantic_recall.keywords import BM25Params, message_terms, query_terms, rank_bm25
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    CompactResult,
    Deleted,
    DeletedMessage,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
    ThreadPlace,
)
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.checks import (
    check_still_owned,
    message_id_of_another,
    refuse_taken_ids,
    thread_of_another,
    thread_retired,
)

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Thread:
    """One thread: its owner and its messages, ordered by seq (a retention leaves gaps)."""

    resource_id: str
    messages: list[StoredMessage] = field(default_factory=list)
    next_seq: int = 0
    """The seq of the thread's next new message (seqs are never reused)."""
    searchable: int = 0
    """Keyword-searchable messages (user and assistant messages with terms)."""
    term_count: int = 0
    """Their terms, in total (BM25's average length)."""


def _position(thread: _Thread, seq: int) -> int:
    """Where the first message of seq `seq` or later is in `thread.messages`."""
    return bisect_left(thread.messages, seq, key=_seq)


def _seq(message: StoredMessage) -> int:
    return message.seq


class InMemoryStorage(MessageStorage):
    """Message storage in process memory (lost when the process ends).

    Thread-safe: every method holds one re-entrant lock for its whole duration. It keeps
    every rule of `MessageStorage` and is the reference the conformance suite is
    written against.

    Example:
        ```python
        storage = InMemoryStorage()
        recall = SemanticRecall(storage=storage, vector_store=..., embeddings=...)
        ```
    """

    supports_keyword_search = True
    supports_move = True
    supports_compact = True

    def __init__(self, *, bm25: BM25Params | None = None) -> None:
        """Create an empty storage.

        Args:
            bm25: BM25's constants for `keyword_search` (default `k1=1.2, b=0.3`).
        """
        self._lock = threading.RLock()
        self._threads: dict[str, _Thread] = {}
        self._index: dict[str, tuple[str, int]] = {}
        """Message id -> (thread id, seq)."""
        self._forgotten: dict[str, str | None] = {}
        self._bm25 = bm25 or BM25Params()
        self._terms: dict[str, list[str]] = {}
        """Message id -> its keyword terms (searchable messages only)."""
        self._postings: dict[str, set[str]] = {}
        """Term -> ids of the messages holding it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threads={len(self._threads)})"

    # --- writes -----------------------------------------------------------------------

    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        with self._lock:
            # Plan on overlays first; the real dicts change only once every record passed.
            owners: dict[str, str] = {}
            next_seq: dict[str, int] = {}
            planned: dict[str, tuple[str, int]] = {}
            stored: list[StoredMessage] = []
            # Every message id first: a thread error then means none is taken.
            refuse_taken_ids(records, self._index.get)
            for record in records:
                thread_id = record.thread_id
                if thread_id in self._forgotten:
                    raise thread_retired(thread_id)
                thread = self._threads.get(thread_id)
                owner = owners.setdefault(
                    thread_id, thread.resource_id if thread else record.resource_id
                )
                if owner != record.resource_id:
                    raise thread_of_another(thread_id, record.resource_id)
                known = self._index.get(record.id) or planned.get(record.id)
                if known is not None and known[0] != thread_id:
                    raise message_id_of_another(record.id, thread_id)
                if known is None:
                    seq = next_seq.setdefault(thread_id, thread.next_seq if thread else 0)
                    next_seq[thread_id] = seq + 1
                    planned[record.id] = (thread_id, seq)
                else:
                    seq = known[1]
                stored.append(
                    StoredMessage(
                        id=record.id,
                        thread_id=thread_id,
                        resource_id=record.resource_id,
                        role=record.role,
                        text=record.text,
                        created_at=record.created_at,
                        payload=record.payload,
                        seq=seq,
                        metadata=record.metadata,
                    )
                )
            created = {r.id for r in records if r.id not in self._index}
            for message in stored:
                self._apply(message)
            logger.debug("stored %d messages", len(stored))
            return [replace(m, created=m.id in created) for m in stored]

    def _apply(self, message: StoredMessage) -> None:
        thread = self._threads.setdefault(message.thread_id, _Thread(message.resource_id))
        if message.seq < thread.next_seq:  # a known id: it keeps its place
            thread.messages[_position(thread, message.seq)] = message
        else:
            thread.messages.append(message)
            thread.next_seq = message.seq + 1
        self._index[message.id] = (message.thread_id, message.seq)
        self._unindex_terms(message.id, thread)
        terms = message_terms(message.role, message.text)
        if terms:
            self._terms[message.id] = terms
            for term in set(terms):
                self._postings.setdefault(term, set()).add(message.id)
            thread.searchable += 1
            thread.term_count += len(terms)

    def _unindex_terms(self, message_id: str, thread: _Thread) -> None:
        terms = self._terms.pop(message_id, None)
        if terms is None:
            return
        for term in set(terms):
            holders = self._postings[term]
            holders.discard(message_id)
            if not holders:
                del self._postings[term]
        thread.searchable -= 1
        thread.term_count -= len(terms)

    def _delete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        with self._lock:
            held = self._threads.get(thread_id)
            check_still_owned(thread_id, held.resource_id if held else None, owner)
            thread = self._threads.pop(thread_id, None)
            if retire:
                self._forgotten.setdefault(thread_id, thread.resource_id if thread else None)
            if thread is None:
                return 0
            for message in thread.messages:
                del self._index[message.id]
                self._unindex_terms(message.id, thread)
            return len(thread.messages)

    def _delete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        with self._lock:
            deleted: Deleted = []
            for thread_id, thread in sorted(self._threads.items()):
                if scope is not None and not scope.admits(thread.resource_id, thread_id):
                    continue
                kept = []
                for message in thread.messages:
                    if message.created_at >= cutoff:
                        kept.append(message)
                        continue
                    del self._index[message.id]
                    self._unindex_terms(message.id, thread)
                    deleted.append(DeletedMessage(message.id, thread_id, thread.resource_id))
                thread.messages = kept
            return deleted

    def _reserve_threads(self, places: list[ThreadPlace]) -> int:
        with self._lock:  # every place checked before any thread changes
            owners: dict[str, str] = {}
            for place in places:
                if place.thread_id in self._forgotten:
                    raise thread_retired(place.thread_id)
                thread = self._threads.get(place.thread_id)
                owner = owners.setdefault(
                    place.thread_id, thread.resource_id if thread else place.resource_id
                )
                if owner != place.resource_id:
                    raise thread_of_another(place.thread_id, place.resource_id)
            created = 0
            for place in places:
                thread = self._threads.get(place.thread_id)
                if thread is None:
                    thread = self._threads[place.thread_id] = _Thread(place.resource_id)
                    created += 1
                thread.next_seq = max(thread.next_seq, place.next_seq)
            return created

    def _adopt_thread(self, thread_id: str, resource_id: str) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None or thread.resource_id == resource_id:
                return 0
            if thread.resource_id != NO_RESOURCE:
                raise OwnershipError(
                    f"thread {thread_id!r} belongs to another resource than {resource_id!r}"
                )
            thread.resource_id = resource_id
            thread.messages = [replace(m, resource_id=resource_id) for m in thread.messages]
            return len(thread.messages)

    def _move_thread(self, thread_id: str, to_resource: str, owner: str | None) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return 0
            check_still_owned(thread_id, thread.resource_id, owner)
            thread.resource_id = to_resource
            thread.messages = [replace(m, resource_id=to_resource) for m in thread.messages]
            return len(thread.messages)

    def _unretire_thread(self, thread_id: str) -> bool:
        with self._lock:
            return self._forgotten.pop(thread_id, False) is not False

    def _delete_resource(self, resource_id: str) -> int:
        with self._lock:
            owned = [tid for tid, t in self._threads.items() if t.resource_id == resource_id]
            return sum(
                self._delete_thread(thread_id, retire=True, owner=resource_id)
                for thread_id in owned
            )

    # --- reads ------------------------------------------------------------------------

    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        with self._lock:
            windows: dict[str, tuple[StoredMessage, ...]] = {}
            for message_id in message_ids:
                location = self._index.get(message_id)
                if location is None:
                    continue
                thread_id, seq = location
                thread = self._threads[thread_id]
                if not scope.admits(thread.resource_id, thread_id):
                    continue
                low = _position(thread, seq - before)
                high = bisect_right(thread.messages, seq + after, key=_seq)
                window = thread.messages[low:high]
                if scope.narrowed:  # every message returned passes the filter
                    if not scope.admits_message(thread.messages[_position(thread, seq)]):
                        continue
                    window = [m for m in window if scope.matches(m.metadata, m.created_at)]
                windows[message_id] = tuple(window)
            return windows

    def _get_thread_owner(self, thread_id: str) -> str | None:
        with self._lock:
            thread = self._threads.get(thread_id)
            return thread.resource_id if thread else None

    def _list_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        with self._lock:
            thread_ids = sorted(self._threads)
            start = 0 if after is None else bisect_left(thread_ids, after[0])
            page: list[StoredMessage] = []
            for thread_id in thread_ids[start:]:
                thread = self._threads[thread_id]
                if scope is not None and not scope.admits(thread.resource_id, thread_id):
                    continue
                first = _position(thread, after[1] + 1) if after and thread_id == after[0] else 0
                rest = thread.messages[first:]
                if scope is not None and scope.narrowed:
                    rest = [m for m in rest if scope.matches(m.metadata, m.created_at)]
                page.extend(rest[: limit - len(page)])
                if len(page) >= limit:
                    break
            return page

    def _last_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        with self._lock:
            thread = self._threads.get(scope.thread_id or "")
            if thread is None or not scope.admits(thread.resource_id, scope.thread_id or ""):
                return []
            if scope.narrowed:
                return [m for m in thread.messages if scope.admits_message(m)][-limit:]
            return thread.messages[-limit:]

    def _count(self, scope: ScopeFilter | None) -> int:
        if scope is None or not scope.narrowed:
            return super()._count(scope)
        with self._lock:
            return sum(
                1
                for thread_id, thread in self._threads.items()
                if scope.admits(thread.resource_id, thread_id)
                for message in thread.messages
                if scope.matches(message.metadata, message.created_at)
            )

    def _list_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        with self._lock:
            return [
                ThreadInfo(
                    thread_id=thread_id,
                    resource_id=thread.resource_id,
                    message_count=len(thread.messages),
                    first_at=min((m.created_at for m in thread.messages), default=None),
                    last_at=max((m.created_at for m in thread.messages), default=None),
                    next_seq=thread.next_seq,
                )
                for thread_id, thread in sorted(self._threads.items())
                if resource_id is None or thread.resource_id == resource_id
            ]

    def _is_forgotten(self, thread_id: str) -> bool:
        with self._lock:
            return thread_id in self._forgotten

    def _keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """(message id, BM25 score) of the best keyword matches inside `scope`, best first.

        User and assistant messages are searchable (like the vector index); terms are
        those of `langchain_semantic_recall.keywords`, and BM25's statistics (document
        count, frequencies, mean length) are those of the scope itself (its thread or
        resource: a filter or time range only drops candidates, as on every backend).
        """
        terms = query_terms(query)
        with self._lock:
            threads = [t for tid, t in self._threads.items() if scope.admits(t.resource_id, tid)]
            docs = sum(t.searchable for t in threads)
            if not terms or not docs:
                return []
            candidates: dict[str, list[str]] = {}
            doc_freq: dict[str, int] = {}
            for term in terms:
                for message_id in self._postings.get(term, ()):
                    thread_id, seq = self._index[message_id]
                    thread = self._threads[thread_id]
                    if not scope.admits(thread.resource_id, thread_id):
                        continue
                    doc_freq[term] = doc_freq.get(term, 0) + 1  # the scope's, filter or not
                    if scope.narrowed:  # seqs have gaps after retention: find the position
                        message = thread.messages[_position(thread, seq)]
                        if not scope.admits_message(message):
                            continue
                    candidates[message_id] = self._terms[message_id]
            avg_length = sum(t.term_count for t in threads) / docs
        return rank_bm25(
            terms,
            candidates,
            doc_freq=doc_freq,
            docs=docs,
            avg_length=avg_length,
            params=self._bm25,
            limit=limit,
        )

    def _compact(self) -> CompactResult:
        """Nothing to do: deleted messages are dropped from the dicts (nothing on disk)."""
        return CompactResult(backend=type(self).__name__, done=("nothing stored on disk",))
