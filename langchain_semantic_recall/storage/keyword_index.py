"""In-memory keyword postings of the busiest resources, kept in step with the SQLite file.

Scoring BM25 in Python over FTS5's candidates costs ~20-60 ms at 100k messages in one
resource (exact up to 1,000 matches, or when the rarer terms settle the best:
`sqlite_fts.search`). A `ResourcePostings` holds one resource's keyword index as numpy
arrays (CSR postings: term -> documents and term frequencies, plus each document's
length and thread), so a search is a few vectorised sums: the same
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
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from langchain_semantic_recall.errors import SemanticRecallError
from langchain_semantic_recall.records import MessageRecord
from langchain_semantic_recall.storage.sqlite_schema import change_marker

if TYPE_CHECKING:  # numpy loads with the first postings built, not with the storage
    from langchain_semantic_recall.storage.postings import Document, ResourcePostings

__all__ = ["PostingsCache"]

logger = logging.getLogger(__name__)

BACKGROUND_DOCS: Final = 20_000
"""Resources of this many searchable messages (a ~0.1 s build) are built in the background."""

_LOAD: Final = (
    "SELECT t.message_id, m.thread_id, t.terms, m.created_at, m.metadata FROM messages AS m "
    "JOIN message_terms AS t ON t.message_id = m.id WHERE m.resource_id = ?"
)
_COUNT: Final = (
    "SELECT COALESCE(SUM(s.docs), 0) FROM threads AS h "
    "JOIN thread_terms AS s ON s.thread_id = h.thread_id WHERE h.resource_id = ?"
)

Change: TypeAlias = (
    tuple[Literal["remove"], str]
    | tuple[Literal["add"], "Document"]
    | tuple[Literal["thread"], str]
)
"""A committed write to a resource whose postings are being built, replayed on them."""


def _built(rows: Sequence[tuple[str, str, str, str, str | None]]) -> ResourcePostings:
    from langchain_semantic_recall.storage.postings import ResourcePostings

    return ResourcePostings.build(rows)


def _replay(postings: ResourcePostings, journal: Sequence[Change]) -> None:
    added: list[Document] = []
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
    added: dict[str, tuple[str, Document]] = field(default_factory=dict)
    """Message id -> (resource id, its document), the last version written."""


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
        on_clear: Called whenever this cache trusts nothing it holds (a change that did
            not come through the hooks, a failed or unhooked write, `close`): the
            storage's other in-memory copies (`held_windows`) are emptied with it, so the
            file's changes are watched in one place.
    """

    def __init__(
        self,
        *,
        min_docs: int = 500,
        max_docs: int = 500_000,
        opener: Callable[[], sqlite3.Connection] | None = None,
        lock: threading.Lock | None = None,
        on_clear: Callable[[], None] | None = None,
    ) -> None:
        """Create an empty cache."""
        self.min_docs = min_docs
        self.max_docs = max_docs
        self._loaded: OrderedDict[str, ResourcePostings] = OrderedDict()
        self._seen: tuple[int, int] | None = None
        self._pending = _Pending()
        self._before: int | None = None
        self._version: int | None = None
        self._opener = opener
        self.background_docs = BACKGROUND_DOCS
        # A big resource's first search waits for Chroma to load its index, which a build
        # beside it slowed (the GIL: 0.7 -> 1.15 s at 100k): SQL; the second one builds.
        self.first_search_in_sql = True
        self._asked: set[str] = set()
        self._lock = lock or threading.Lock()
        self._building: dict[str, list[Change]] = {}  # the writes since each build's snapshot
        self._workers: list[threading.Thread] = []
        self._on_clear = on_clear

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
        if self._on_clear is not None:
            self._on_clear()

    def building(self, resource_id: str) -> bool:
        """Whether the resource's postings are being built in the background."""
        return resource_id in self._building

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the background builds started so far; False if some still run."""
        for worker in list(self._workers):
            worker.join(timeout)
        self._workers = [w for w in self._workers if w.is_alive()]
        return not self._workers

    def check(self, conn: sqlite3.Connection) -> None:
        """Before a read: empty the cache if the file changed other than through the hooks."""
        fingerprint = change_marker(conn)
        if fingerprint != self._seen:
            self.clear()
            self._seen = fingerprint

    def loaded(self, conn: sqlite3.Connection, resource_id: str) -> ResourcePostings | None:
        """The resource's postings if they are loaded and current; never builds them."""
        self.check(conn)
        return self._loaded.get(resource_id)

    def get(self, conn: sqlite3.Connection, resource_id: str) -> ResourcePostings | None:
        """The resource's postings (built if big enough), or None to search in SQL."""
        postings = self.loaded(conn, resource_id)
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
        postings = _built(conn.execute(_LOAD, (resource_id,)).fetchall())
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
        first: list[tuple[str, str, str, str, str | None]],
        resource_id: str,
        journal: list[Change],
    ) -> None:
        """The background build: read the snapshot, build, replay the journal, install."""
        try:
            rows = first + cursor.fetchall()
            reader.execute("COMMIT")
            postings = _built(rows)
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
        """A write transaction starts (call right after `BEGIN IMMEDIATE`).

        The other connections' change marker is read here, inside the transaction that
        holds the write lock: nobody else can commit until ours does, so it is exactly
        the state our changes are applied to. Read after `COMMIT`, it could already count
        another connection's commit, which would then never be seen.
        """
        self._pending = _Pending()
        fingerprint = change_marker(conn)
        if fingerprint != self._seen:
            self.clear()  # someone else wrote since the last look: rebuild lazily
        self._version = fingerprint[0]
        self._before = conn.total_changes

    def rewritten(self, resource_id: str, message_id: str) -> None:
        """A stored message is about to be rewritten."""
        if resource_id in self._loaded or resource_id in self._building:
            self._pending.removed.append((resource_id, message_id))
            self._pending.added.pop(message_id, None)

    def added(
        self, record: MessageRecord, terms: list[str], created_at: str, metadata: str | None
    ) -> None:
        """A message was made keyword-searchable under `terms` (its columns as stored)."""
        resource_id = record.resource_id
        if (resource_id in self._loaded or resource_id in self._building) and terms:
            document = (record.id, record.thread_id, terms, created_at, metadata)
            self._pending.added[record.id] = (resource_id, document)

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
        """Apply the write's changes (call right after `COMMIT`, still under the lock)."""
        pending, self._pending = self._pending, _Pending()
        if self._seen is None or self._before is None or self._version is None:
            self._loaded.clear()
            self._building.clear()
        for resource_id, message_id in pending.removed:
            if resource_id in self._loaded:
                self._loaded[resource_id].remove(message_id)
            elif resource_id in self._building:
                self._building[resource_id].append(("remove", message_id))
        by_resource: dict[str, list[Document]] = {}
        for resource_id, document in pending.added.values():
            by_resource.setdefault(resource_id, []).append(document)
        for resource_id, documents in by_resource.items():
            postings = self._loaded.get(resource_id)
            if postings is not None:
                postings.add(documents)
            elif resource_id in self._building:
                self._building[resource_id].extend(("add", document) for document in documents)
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
