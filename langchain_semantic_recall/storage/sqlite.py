"""SQLite message storage: the embedded default (stdlib `sqlite3`, WAL journal).

One file holds every resource's threads. The file itself (path checks, pragmas, schema,
migrations) is `sqlite_schema`'s; keyword search `sqlite_fts`'s; other statements `sqlite_sql`'s.

Concurrency: one connection (`check_same_thread=False`) guarded by one lock: SQLite has
one writer at a time anyway, every statement is short, and one connection is closed by
`close` (per-thread ones would leak from the async twins' executor threads). Other
processes sharing the file are handled by WAL and busy timeout.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from langchain_semantic_recall.errors import OwnershipError, StorageError
from langchain_semantic_recall.keywords import BM25Params, query_terms
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
from langchain_semantic_recall.storage import sqlite_fts as fts
from langchain_semantic_recall.storage import sqlite_sql as sql
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.checks import (
    check_still_owned,
    message_id_of_another,
    refuse_taken_ids,
    thread_of_another,
    thread_retired,
)
from langchain_semantic_recall.storage.held_windows import HeldWindows
from langchain_semantic_recall.storage.keyword_index import PostingsCache
from langchain_semantic_recall.storage.sqlite_schema import (
    MEMORY_PATH,
    MIGRATIONS,
    SCHEMA_VERSION,
    compact,
    connect,
    failure,
    is_writable,
    prepare_path,
)

if TYPE_CHECKING:  # numpy loads with the first postings built, not with the storage
    from langchain_semantic_recall.storage.postings import ResourcePostings as Postings

__all__ = [
    "MEMORY_PATH",
    "SCHEMA_VERSION",
    "SQLiteStorage",
]

logger = logging.getLogger(__name__)

_MIGRATIONS: Final = MIGRATIONS
"""The schema steps, by version (`sqlite_schema.MIGRATIONS`; tests import it here)."""
_MAX_IDS_PER_QUERY: Final = 500  # stays under SQLite's historical 999-variable limit


@dataclass(slots=True)
class _ThreadState:
    owner: str
    next_seq: int
    new: bool = False


class SQLiteStorage(MessageStorage):
    """Message storage in one SQLite file (WAL journal), safe across threads.

    Example:
        ```python
        storage = SQLiteStorage("./memory/messages.db")  # folders are created
        storage.put(records)
        await storage.aget_windows(ids, before=2, after=1, scope=scope)
        storage.close()
        ```

    `SQLiteStorage(":memory:")` keeps everything in memory (handy in tests).
    """

    supports_keyword_search = True
    supports_compact = True
    supports_move = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        bm25: BM25Params | None = None,
        read_only: bool = False,
        keyword_cache_docs: int = 500_000,
        keyword_cache_min_docs: int = 500,
        window_cache_bytes: int = 32 * 2**20,
    ) -> None:
        """Open (creating if needed) the database file and bring its schema up to date.

        Args:
            path: A file path, or `":memory:"`. Missing parent folders are created.
            bm25: BM25's constants for `keyword_search` (default `k1=1.2, b=0.3`).
            read_only: Open an existing file without ever writing it (a `mode=ro` URI: no
                migration, no pragma); every write then raises `StorageError`. For a
                backup, or a store on a read-only mount.
            keyword_cache_docs: Most messages whose keyword postings are kept in memory
                (resources of 500+ searchable messages, least recently searched out
                first; ~0.25 KB per message); 0 searches in SQL only. Same results. A
                resource's postings are built in the background on its first search
                (which, like those until the build is done, runs in SQL).
            keyword_cache_min_docs: Resources with fewer searchable messages are searched
                in SQL (fast there), never held in memory.
            window_cache_bytes: Most bytes of messages held in memory for searches'
                context windows (what recent windows read, least recently read thread
                out first; `held_windows`); 0 reads every window in SQL. Same results.

        Raises:
            StorageError: The path cannot be created, read or written, is not a SQLite
                database, was written by a newer version of this package, or (read-only)
                needs a migration.
        """
        self._path = prepare_path(path, read_only=read_only)
        self._bm25 = bm25 or BM25Params()
        self._lock = threading.Lock()
        self._read_only = read_only
        self._conn = connect(self._path, read_only=read_only)  # every use holds self._lock
        self._held = HeldWindows(max_bytes=window_cache_bytes)  # under self._lock too
        self._postings = PostingsCache(  # under self._lock too; watches the file for both
            min_docs=keyword_cache_min_docs,
            max_docs=keyword_cache_docs,
            opener=None if self._path == MEMORY_PATH else self._open_reader,
            lock=self._lock,
            on_clear=self._held.clear,
        )
        logger.debug("opened SQLite storage %s", self._path)

    def _open_reader(self) -> sqlite3.Connection:
        """A second, read-only connection to the file (a background postings build)."""
        return connect(self._path, read_only=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._path!r})"

    @property
    def path(self) -> str:
        """The database path (`":memory:"` for an in-memory database)."""
        return self._path

    @property
    def read_only(self) -> bool:
        """Whether the file was opened read-only (every write raises `StorageError`)."""
        return self._read_only

    @staticmethod
    def is_writable(path: str | os.PathLike[str]) -> bool:
        """Whether a store file at `path` could be written (False on a read-only mount).

        Args:
            path: The SQLite file (it may not exist yet).
        """
        return is_writable(path)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors("read"):
            yield self._conn

    @contextmanager
    def _write(self, *, hooked: bool = False) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction: committed on success, else rolled back.

        A write that does not report its changes to the in-memory caches (`hooked`: the
        keyword postings and the held windows) empties them when it commits.
        """
        if self._read_only:
            raise StorageError(
                f"SQLite storage {self._path} was opened read-only; open a writable copy "
                "to change it"
            )
        with self._lock, self._errors("write"):
            self._conn.execute("BEGIN IMMEDIATE")
            self._postings.begin(self._conn)  # (the held windows with it: its `on_clear`)
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                self._postings.abort()
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            if hooked:
                self._postings.commit(self._conn)
            else:
                self._postings.clear()

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise failure(self._path, exc, action) from exc

    # --- writes -----------------------------------------------------------------------

    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        """One `BEGIN IMMEDIATE` transaction (StorageError if it cannot be written)."""
        created = [sql.iso_text(record.created_at) for record in records]
        now = sql.iso_text(datetime.now(UTC))
        stored: list[StoredMessage] = []
        with self._write(hooked=True) as conn:
            place_of = conn.execute  # one read of each id's (thread, seq), kept for the batch
            places = {r.id: place_of(sql.GET_MESSAGE_PLACE, (r.id,)).fetchone() for r in records}
            # Every message id first: a thread error then means none is taken.
            refuse_taken_ids(records, places.get)
            threads: dict[str, _ThreadState] = {}
            for record, created_at in zip(records, created, strict=True):
                state = threads.get(record.thread_id)
                if state is None:
                    state = threads[record.thread_id] = self._thread_state(
                        conn, record.thread_id, record.resource_id, now
                    )
                if state.owner != record.resource_id:
                    raise thread_of_another(record.thread_id, record.resource_id)
                place = places[record.id]  # this batch's own earlier writes included
                if place is not None and place[0] != record.thread_id:
                    raise message_id_of_another(record.id, record.thread_id)
                if place is None:
                    seq = state.next_seq
                    state.next_seq += 1
                    places[record.id] = (record.thread_id, seq)
                else:
                    seq = place[1]
                metadata = sql.metadata_text(record)
                values = (
                    *(record.id, record.thread_id, record.resource_id, record.role, record.text),
                    *(created_at, record.payload, seq, metadata),
                )
                if place is None:
                    conn.execute(sql.INSERT_MESSAGE, values)
                else:
                    update = (*(record.role, record.text, created_at, record.payload), metadata)
                    conn.execute(sql.UPDATE_MESSAGE, (*update, record.id))
                    fts.drop_terms(conn, record.id, record.thread_id)
                    self._postings.rewritten(record.resource_id, record.id)
                terms = fts.add_terms(conn, record)
                self._postings.added(record, terms, created_at, metadata)
                stored.append(dataclasses.replace(sql.to_message(values), created=place is None))
                self._held.stored(stored[-1])
            for thread_id, state in threads.items():
                conn.execute(sql.SET_NEXT_SEQ, (state.next_seq, thread_id))
        logger.debug("stored %d messages in %s", len(stored), self._path)
        return stored

    @staticmethod
    def _thread_state(
        conn: sqlite3.Connection, thread_id: str, resource_id: str, now: str
    ) -> _ThreadState:
        """The owner and next seq of a thread, created for `resource_id` if new."""
        if conn.execute(sql.GET_FORGOTTEN, (thread_id,)).fetchone() is not None:
            raise thread_retired(thread_id)
        row = conn.execute(sql.GET_THREAD, (thread_id,)).fetchone()
        if row is not None:
            return _ThreadState(owner=row[0], next_seq=row[1])
        conn.execute(sql.INSERT_THREAD, (thread_id, resource_id, now))
        return _ThreadState(owner=resource_id, next_seq=0, new=True)

    def _delete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        now = sql.iso_text(datetime.now(UTC))
        with self._write(hooked=True) as conn:
            row = conn.execute(sql.GET_THREAD, (thread_id,)).fetchone()
            check_still_owned(thread_id, found := row[0] if row else None, owner)
            self._postings.deleted(found, thread_id)
            self._held.deleted(found, thread_id)
            fts.forget(conn, "thread_id", thread_id)  # before the rows it joins on
            deleted = conn.execute(sql.DELETE_THREAD_MESSAGES, (thread_id,)).rowcount
            conn.execute(sql.DELETE_THREAD, (thread_id,))
            if retire:
                conn.execute(sql.FORGET_THREAD, (thread_id, found, now))
        return int(deleted)

    def _delete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        """One transaction: the messages and their keyword index (threads stay)."""
        with self._write() as conn:  # rare and in bulk: the in-memory postings are reloaded
            rows = conn.execute(*sql.expired_sql(scope, sql.iso_text(cutoff))).fetchall()
            for message_id, thread_id, _ in rows:
                fts.drop_terms(conn, message_id, thread_id)
            conn.executemany(sql.DELETE_MESSAGE, [(row[0],) for row in rows])
        return [DeletedMessage(*row) for row in rows]

    def _reserve_threads(self, places: list[ThreadPlace]) -> int:
        """One transaction; no message changes, so the keyword postings stay."""
        now = sql.iso_text(datetime.now(UTC))
        created = 0
        with self._write(hooked=True) as conn:
            for place in places:
                state = self._thread_state(conn, place.thread_id, place.resource_id, now)
                if state.owner != place.resource_id:
                    raise thread_of_another(place.thread_id, place.resource_id)
                conn.execute(sql.RAISE_NEXT_SEQ, (place.next_seq, place.thread_id))
                created += state.new
        return created

    def _adopt_thread(self, thread_id: str, resource_id: str) -> int:
        with self._write() as conn:  # rare: the keyword postings are simply reloaded
            row = conn.execute(sql.GET_THREAD, (thread_id,)).fetchone()
            if row is None or row[0] == resource_id:
                return 0
            if row[0] != NO_RESOURCE:
                raise OwnershipError(
                    f"thread {thread_id!r} belongs to another resource than {resource_id!r}"
                )
            fts.move_thread(conn, thread_id, resource_id)
            conn.execute(sql.SET_THREAD_OWNER, (resource_id, thread_id))
            return int(conn.execute(sql.SET_MESSAGES_OWNER, (resource_id, thread_id)).rowcount)

    def _move_thread(self, thread_id: str, to_resource: str, owner: str | None) -> int:
        """One transaction: the owner, every message's resource and their keyword index."""
        with self._write() as conn:  # the in-memory postings are rebuilt at the next search
            if (row := conn.execute(sql.GET_THREAD, (thread_id,)).fetchone()) is None:
                return 0
            check_still_owned(thread_id, row[0], owner)
            rows = conn.execute(sql.THREAD_MESSAGES, (thread_id,)).fetchall()
            fts.forget(conn, "thread_id", thread_id)  # indexed under the old resource
            conn.execute(sql.SET_THREAD_OWNER, (to_resource, thread_id))
            conn.execute(sql.SET_MESSAGES_OWNER, (to_resource, thread_id))
            for row in rows:
                moved = dataclasses.replace(sql.to_message(row), resource_id=to_resource)
                fts.add_terms(conn, moved)
        return len(rows)

    def _unretire_thread(self, thread_id: str) -> bool:
        with self._write() as conn:
            return bool(conn.execute(sql.UNRETIRE_THREAD, (thread_id,)).rowcount)

    def _delete_resource(self, resource_id: str) -> int:
        now = sql.iso_text(datetime.now(UTC))
        with self._write(hooked=True) as conn:
            self._postings.deleted(resource_id)
            self._held.deleted(resource_id)
            conn.execute(sql.FORGET_RESOURCE, (now, resource_id))
            fts.forget(conn, "resource_id", resource_id)
            deleted = conn.execute(sql.DELETE_RESOURCE_MESSAGES, (resource_id,)).rowcount
            conn.execute(sql.DELETE_RESOURCE_THREADS, (resource_id,))
        return int(deleted)

    # --- reads ------------------------------------------------------------------------

    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        """Held (`held_windows`), else one indexed query per 500 ids, then held.

        Overlapping windows share their (frozen) messages.
        """
        windows: dict[str, list[StoredMessage]] = {}
        made: dict[str, StoredMessage] = {}  # a context read: ~176 rows, ~123 messages at 10k
        with self._read() as conn:
            self._postings.check(conn)  # a change behind the hooks empties the held windows
            held, rest = self._held.windows(
                conn, message_ids, before=before, after=after, scope=scope
            )
            for start in range(0, len(rest), _MAX_IDS_PER_QUERY):
                chunk = rest[start : start + _MAX_IDS_PER_QUERY]
                for row in conn.execute(*sql.windows_sql(chunk, before, after, scope)):
                    if (message := made.get(row[1])) is None:
                        message = made[row[1]] = sql.to_message(row[1:])
                    windows.setdefault(row[0], []).append(message)
            self._held.learn(windows, before=before, after=after, scope=scope)
        both = {**held, **{hit: tuple(window) for hit, window in windows.items()}}
        return {hit: both[hit] for hit in message_ids if hit in both}

    def _loaded_postings(self, conn: sqlite3.Connection, scope: ScopeFilter) -> Postings | None:
        """The scope's resource's postings if they are loaded and current, else None."""
        return None if scope.resource_id is None else self._postings.loaded(conn, scope.resource_id)

    def _ids_in_scope(self, message_ids: list[str], scope: ScopeFilter) -> set[str]:
        """From the resource's loaded postings (no row read), the ids they lack in SQL."""
        with self._read() as conn:
            held = self._loaded_postings(conn, scope)
            inside, rest = held.in_scope(message_ids, scope) if held else (set(), message_ids)
            for start in range(0, len(rest), _MAX_IDS_PER_QUERY):
                chunk = rest[start : start + _MAX_IDS_PER_QUERY]
                inside.update(row[0] for row in conn.execute(*sql.in_scope_sql(chunk, scope)))
        return inside

    def _kept_share(self, scope: ScopeFilter) -> float | None:
        """From a sample of the resource's loaded postings; None when they are not loaded."""
        with self._read() as conn:
            held = self._loaded_postings(conn, scope)
            return held.kept_share(scope) if held else None

    def _get_thread_owner(self, thread_id: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(sql.GET_THREAD, (thread_id,)).fetchone()
        return None if row is None else str(row[0])

    def _list_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        with self._read() as conn:
            rows = conn.execute(*sql.list_messages_sql(scope, after, limit)).fetchall()
        return [sql.to_message(row) for row in rows]

    def _last_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        """One query on the `(thread_id, seq)` key, read backwards."""
        with self._read() as conn:
            rows = conn.execute(*sql.last_messages_sql(scope, limit)).fetchall()
        return [sql.to_message(row) for row in reversed(rows)]

    def _list_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        with self._read() as conn:
            rows = conn.execute(*sql.list_threads_sql(resource_id)).fetchall()
        return [sql.thread_info(row) for row in rows]

    def _count(self, scope: ScopeFilter | None) -> int:
        """One query."""
        with self._read() as conn:
            return int(conn.execute(*sql.count_sql(scope)).fetchone()[0])

    def _count_up_to(self, scope: ScopeFilter | None, up_to: int) -> int:
        """In SQL, unless a filtered resource's postings already hold `up_to` that pass.

        Filters cannot use an index, so counting a big filtered scope in SQL reads rows
        until `up_to` pass; the postings (searchable messages only, a subset) count theirs
        with a few vector operations, and when they reach `up_to` so does the scope.
        """
        with self._read() as conn:
            postings = self._loaded_postings(conn, scope) if scope and scope.narrowed else None
            if scope and postings is not None and postings.admitted_count(scope) >= up_to:
                return up_to
            return int(conn.execute(*sql.count_sql(scope, up_to)).fetchone()[0])

    def _is_forgotten(self, thread_id: str) -> bool:
        with self._read() as conn:
            return conn.execute(sql.GET_FORGOTTEN, (thread_id,)).fetchone() is not None

    def _keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """(message id, BM25 score) of the best keyword matches inside `scope`, best first.

        The scope's user and assistant messages holding any query term (terms of
        `langchain_semantic_recall.keywords`: stemmed, without stop words) are scored
        by BM25 with this storage's constants and the scope's own statistics (FTS5's
        built-in `bm25()` fixes `b = 0.75`; chat measured better with 0.3): from the
        resource's in-memory postings (`keyword_index`) when it is big enough, else found
        by FTS5 and scored here. Both give the same ids, scores and order.
        """
        with self._read() as conn:
            postings = None
            if scope.resource_id is not None:
                postings = self._postings.get(conn, scope.resource_id)
            if postings is None:
                return fts.search(conn, query, scope=scope, limit=limit, params=self._bm25)
            return postings.search(
                query_terms(query), scope.thread_id, limit, self._bm25, scope=scope
            )

    def _compact(self) -> CompactResult:
        """On this storage's own connection, under its lock (`sqlite_schema.compact`).

        Raises:
            StorageError: Read-only, or another connection (another process) kept a read
                open so the log could not be emptied: stop it and run the purge again.
        """
        if self._read_only:
            raise StorageError(f"SQLite storage {self._path} was opened read-only")
        with self._lock, self._errors("compact"):
            return compact(self._conn, self._path, type(self).__name__)

    def _close(self) -> None:
        """Close the connection, after the background postings builds; later calls raise.

        Later calls raise `StorageError`. Builds in flight are discarded, and waited for
        (each holds a read connection to the file). Idempotent.
        """
        with self._lock:
            self._postings.clear()  # a build that finishes now installs nothing
            self._conn.close()
        self._postings.join()
