"""The SQLite storage's file: its path checks, pragmas, schema and migrations.

A file carries its schema version (table `schema_version`); opening it brings the
schema up to `SCHEMA_VERSION` in one transaction, step by step, so a file written
by any earlier release is migrated in place and one written by a later release is
refused. The statements live in `MIGRATIONS`; keyword search's tables and their
backfill come from `sqlite_fts`.

A read-only open (`connect(path, read_only=True)`, e.g. a backup on a read-only mount)
uses a `mode=ro` URI: it sets no pragma, migrates nothing, and refuses a file whose schema
is not the current one, but for the versions it reads as they are (`READ_AS_IS`). A WAL
file whose `-shm` cannot be created is opened `immutable`: on a read-only mount nothing
can change it while we read; in a folder this user may not write (a backup copied
read-only), it is read as it stands, and a write its owner makes meanwhile is not seen.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final
from urllib.parse import quote

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.filters import METADATA_KEY
from langchain_semantic_recall.records import CompactResult
from langchain_semantic_recall.storage import sqlite_fts as fts
from langchain_semantic_recall.storage.checks import (
    payload_metadata_columns,
    refused_metadata_note,
)

logger = logging.getLogger(__name__)

MEMORY_PATH: Final = ":memory:"
SCHEMA_VERSION: Final = 4
_BUSY_TIMEOUT_S: Final = 30.0

Migration = str | Callable[[sqlite3.Connection], None]


def backfill_metadata(conn: sqlite3.Connection) -> None:
    """Copy the metadata of messages stored before version 3 into their column.

    A message's `additional_kwargs["metadata"]` is its filterable metadata since version
    3 (`filters`); one stored before kept it in its payload only, so every filter would
    pass it by. A message whose metadata today's `index` would refuse keeps none (a
    warning counts them).
    """
    page = (
        "SELECT rowid, id, payload FROM messages WHERE rowid > ? AND instr(payload, ?) > 0 "
        "ORDER BY rowid LIMIT 1000"
    )
    refused: list[str] = []
    after = 0
    while rows := conn.execute(page, (after, f'"{METADATA_KEY}"')).fetchall():
        columns, invalid = payload_metadata_columns((id_, payload) for _, id_, payload in rows)
        conn.executemany(
            "UPDATE messages SET metadata = ? WHERE id = ?", [(t, i) for i, t in columns]
        )
        refused += invalid
        after = rows[-1][0]
    if refused:
        logger.warning("SQLite storage: %s", refused_metadata_note(refused))


MIGRATIONS: Final[dict[int, tuple[Migration, ...]]] = {
    1: (
        "CREATE TABLE threads (thread_id TEXT PRIMARY KEY, resource_id TEXT NOT NULL, "
        "next_seq INTEGER NOT NULL, created_at TEXT NOT NULL)",
        "CREATE INDEX threads_resource ON threads (resource_id)",
        "CREATE TABLE messages (id TEXT PRIMARY KEY, "
        "thread_id TEXT NOT NULL REFERENCES threads (thread_id), resource_id TEXT NOT NULL, "
        "seq INTEGER NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL, "
        "created_at TEXT NOT NULL, payload TEXT NOT NULL, UNIQUE (thread_id, seq))",
        # (resource_id, thread_id) serves resource-scoped reads; seq keeps them ordered.
        "CREATE INDEX messages_resource_thread ON messages (resource_id, thread_id, seq)",
        "CREATE TABLE forgotten_threads (thread_id TEXT PRIMARY KEY, resource_id TEXT, "
        "forgotten_at TEXT NOT NULL)",
    ),
    2: (*fts.KEYWORD_TABLES, fts.backfill),
    # Version 3: message metadata (JSON text, NULL for none), for search filters; the
    # metadata older messages carry in their payload is copied into it.
    3: ("ALTER TABLE messages ADD COLUMN metadata TEXT", backfill_metadata),
    # Version 4: CJK text is indexed by character pairs, other text in NFKC
    # (`keywords.tokenize`).
    4: (fts.reindex_changed,),
}
"""Version -> the statements (or functions) that bring a file from the previous version."""

READ_AS_IS: Final = frozenset({3})
"""Older versions a read-only open reads as they are: version 4 only indexed CJK and
non-NFKC text anew, so a version-3 file answers as before, its keyword search of such
text coarser, until a writable open migrates it."""

_CREATE_VERSION_TABLE: Final = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)"
_GET_VERSION: Final = "SELECT MAX(version) FROM schema_version"
_HAS_VERSION_TABLE: Final = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
)
_CLEAR_VERSION: Final = "DELETE FROM schema_version"
_SET_VERSION: Final = "INSERT INTO schema_version (version) VALUES (?)"


def prepare_path(path: str | os.PathLike[str], *, read_only: bool = False) -> str:
    """The database path, its folder created; StorageError if it cannot be written.

    With `read_only`, the file must exist and be readable; nothing is created.
    """
    raw = os.fspath(path)
    if raw == MEMORY_PATH:
        return raw
    target = Path(raw).expanduser()
    if target.is_dir():
        raise StorageError(
            f"SQLite storage path {target} is a directory; pass a file path such as "
            f"{target / 'memory.db'}"
        )
    if read_only:
        if not target.is_file() or not os.access(target, os.R_OK):
            raise StorageError(
                f"SQLite storage {target} does not exist or is not readable, so it cannot "
                "be opened read-only; check the path and its permissions"
            )
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the folder {target.parent} for the SQLite storage {target} "
            f"({exc.strerror}); create it yourself or choose a writable path"
        ) from exc
    if target.exists() and not os.access(target, os.R_OK | os.W_OK):
        raise StorageError(
            f"SQLite storage {target} is not readable and writable; fix its permissions "
            "(e.g. chmod u+rw) or choose another path"
        )
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise StorageError(
            f"folder {target.parent} of the SQLite storage {target} is read-only (SQLite "
            "writes its journal next to the database); choose a writable folder"
        )
    return str(target)


def change_marker(conn: sqlite3.Connection) -> tuple[int, int]:
    """What moves when the file changes, as seen from `conn`.

    Commits by *other* connections (`PRAGMA data_version`: this one's own leave it), and
    this connection's own changes (`total_changes`).
    """
    return int(conn.execute("PRAGMA data_version").fetchone()[0]), conn.total_changes


def compact(conn: sqlite3.Connection, path: str, backend: str) -> CompactResult:
    """Overwrite and drop what deleted rows left: FTS5 segments, free pages, the WAL.

    `secure_delete` zeroes the pages the FTS5 merge frees, `VACUUM` rewrites the file
    without free pages, and a `TRUNCATE` checkpoint empties the write-ahead log.

    Raises:
        StorageError: Another connection (another process) kept a read open, so the log
            could not be emptied.
    """
    if path == MEMORY_PATH:
        return CompactResult(backend=backend, done=("in-memory database",))
    before = file_bytes(path)
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute(fts.OPTIMIZE)
    conn.execute("VACUUM")
    if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
        raise StorageError(
            f"SQLite storage {path}: the write-ahead log could not be emptied because "
            "another connection is reading it; close the other processes using this store "
            "and run the purge again"
        )
    done = ("PRAGMA secure_delete = ON", "FTS5 optimize", "VACUUM", "wal_checkpoint(TRUNCATE)")
    return CompactResult(backend, done, before, file_bytes(path))


def file_bytes(path: str) -> int:
    """Bytes of the database file and its write-ahead log (and shared-memory index)."""
    files = (path, f"{path}-wal", f"{path}-shm")
    return sum(os.path.getsize(f) for f in files if os.path.exists(f))


def is_writable(path: str | os.PathLike[str]) -> bool:
    """Whether SQLite can write the file at `path` (and its journal next to it).

    False on a read-only mount, or where file modes forbid it to this user.
    """
    target = Path(path)
    folder_ok = os.access(target.parent, os.W_OK | os.X_OK)
    return folder_ok and (not target.exists() or os.access(target, os.W_OK))


def in_use(path: str | os.PathLike[str]) -> bool:
    """Whether another connection (this process or another) has the database open.

    A connection in exclusive locking mode cannot lock a WAL database that any other
    connection holds open, even idle (measured with Python's sqlite3: "database is
    locked"). The probe takes the lock, lets go of it at once and writes nothing.
    """
    probe = sqlite3.connect(os.fspath(path), timeout=0, isolation_level=None)
    try:
        probe.execute("PRAGMA locking_mode = EXCLUSIVE")
        probe.execute("BEGIN EXCLUSIVE")
        probe.execute("COMMIT")
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()
    return False


def holds_no_store(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a SQLite file (an empty one included) without this package's schema.

    Opened read-only, so a probe never creates anything. False for a missing file, or one
    that cannot be read: the open that follows says what is wrong with it.
    """
    target = os.fspath(path)
    if not os.path.isfile(target):
        return False
    try:
        return _probed_version(target) is None
    except sqlite3.Error:
        return False


def holds_another_database(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a SQLite file with tables but not this package's schema.

    Another application's database: a store must not be created in it (an empty file
    may hold one). Read-only, as `holds_no_store`.
    """
    target = os.fspath(path)
    if not os.path.isfile(target):
        return False
    try:
        probe = sqlite3.connect(f"file:{quote(target)}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_S)
        try:
            if probe.execute(_HAS_VERSION_TABLE).fetchone() is not None:
                return False  # a store of this package
            return probe.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None
        finally:
            probe.close()
    except sqlite3.Error:
        return False


def _probed_version(target: str) -> int | None:
    """The schema version of the file at `target`, read-only (None: it has none).

    Raises:
        sqlite3.Error: the file cannot be read as a database.
    """
    probe = sqlite3.connect(f"file:{quote(target)}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_S)
    try:
        if probe.execute(_HAS_VERSION_TABLE).fetchone() is None:
            return None
        return int(probe.execute(_GET_VERSION).fetchone()[0] or 0)
    finally:
        probe.close()


def migrate_older(path: str | os.PathLike[str]) -> int | None:
    """Bring a writable file of an earlier schema up to date; the version it had.

    For a caller that then opens the file read-only (the command line's inspection
    commands), which would refuse an older schema. None, and nothing done, when the
    file is current, newer, missing, not a store, or cannot be written.
    """
    target = os.fspath(path)
    if not os.path.isfile(target) or not is_writable(target):
        return None
    try:
        version = _probed_version(target)
    except sqlite3.Error:
        return None  # the open that follows says what is wrong with the file
    if version is None or version >= SCHEMA_VERSION:
        return None
    connect(target).close()
    return version


def connect(path: str, *, read_only: bool = False) -> sqlite3.Connection:
    """An autocommit connection to a prepared path, its schema brought up to date.

    Args:
        path: A path from `prepare_path` (with the same `read_only`).
        read_only: Open with a `mode=ro` URI: no pragma, no migration, no write.

    Raises:
        StorageError: The file is not a SQLite database (or is damaged), cannot be
            written, was written by a newer version of this package, or (read-only)
            has an older schema that would need a migration.
    """
    if read_only and path != MEMORY_PATH:
        return _connect_read_only(path)
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(
            path,
            timeout=_BUSY_TIMEOUT_S,
            isolation_level=None,  # autocommit; transactions are explicit (BEGIN IMMEDIATE)
            check_same_thread=False,  # the storage guards every use with its lock
        )
        _configure(conn, path)
    except (sqlite3.Error, StorageError) as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, StorageError):
            raise
        raise _open_error(path, exc) from exc
    return conn


def _open_error(path: str, exc: sqlite3.Error) -> StorageError:
    """The error for a file SQLite refused: damaged, locked, or not writable."""
    return failure(path, exc, None)


def failure(path: str, exc: sqlite3.Error, action: str | None) -> StorageError:
    """What a SQLite error means for the store at `path`, and what to do.

    Args:
        path: The database file.
        exc: SQLite's error.
        action: What failed ("write", "read"); None: opening the file.
    """
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
        then = (
            "move it aside to start an empty store"
            if action is None
            else ("copy out what still reads with 'semantic-recall export'")
        )
        return StorageError(
            f"SQLite storage {path} is damaged or not a SQLite database ({exc}); restore "
            f"it from a backup, or {then}"
        )
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):  # the busy timeout ran out
        return StorageError(
            f"SQLite storage {path} stayed locked by another connection for "
            f"{_BUSY_TIMEOUT_S:.0f} s ({exc}): another process is writing it (a long "
            "ingest, a backup holding it); try again when it is done"
        )
    if action is None:
        return StorageError(
            f"cannot use SQLite storage {path} ({exc}); check that it is a SQLite "
            "database in a folder you can write, or choose another path"
        )
    return StorageError(
        f"SQLite storage {path}: {action} failed ({exc}); check that the file is "
        "writable, has free space and is still open"
    )


_NO_SHM: Final = frozenset({"SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY"})
"""What SQLite says of a WAL file whose `-shm` cannot be made: a read-only mount (the
first), a folder whose modes forbid this user to write (the second)."""


def _connect_read_only(path: str) -> sqlite3.Connection:
    """A `mode=ro` connection, `immutable` if the WAL index cannot be created."""
    base = f"file:{quote(path)}?mode=ro"
    for uri in (base, base + "&immutable=1"):
        conn = sqlite3.connect(
            uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            version = _read_version(conn, path)
        except sqlite3.Error as exc:
            conn.close()
            if getattr(exc, "sqlite_errorname", "") in _NO_SHM and uri == base:
                continue  # WAL in a folder this user cannot write: no -shm can be made
            raise _open_error(path, exc) from exc
        except StorageError:
            conn.close()
            raise
        if version != SCHEMA_VERSION and version not in READ_AS_IS:
            conn.close()
            raise StorageError(
                f"SQLite storage {path} has schema version {version}, "
                + (
                    f"newer than this package understands ({SCHEMA_VERSION}); upgrade "
                    "langchain-semantic-recall"
                    if version > SCHEMA_VERSION
                    else f"older than this package's ({SCHEMA_VERSION}), and a store opened "
                    "read-only cannot be migrated; open it (or a writable copy) once without "
                    "read_only: SemanticRecall.local(path) or any semantic-recall command "
                    "migrates it (docs/migration-0.3.md)"
                )
            )
        logger.debug("opened SQLite storage %s read-only (%s)", path, uri)
        return conn
    raise AssertionError("unreachable")  # pragma: no cover


def _read_version(conn: sqlite3.Connection, path: str) -> int:
    """The schema version of a file opened read-only (StorageError if it has none)."""
    found = conn.execute(_HAS_VERSION_TABLE).fetchone()
    if found is None:
        raise StorageError(
            f"SQLite storage {path} holds no schema version (it is empty or not a store "
            "of this package); check the path"
        )
    return int(conn.execute(_GET_VERSION).fetchone()[0] or 0)


def _journal_mode_wal(conn: sqlite3.Connection) -> str:
    """`PRAGMA journal_mode = WAL`, waiting (up to the busy timeout) for the file's lock.

    Switching a new file to WAL needs its exclusive lock, and SQLite does not wait for it
    when another connection is creating the same file: two processes opening one new
    store at once failed "database is locked" (3-7 of 120 opens, measured).
    """
    deadline, pause = time.monotonic() + _BUSY_TIMEOUT_S, 0.005
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_BUSY":
                raise
            if time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


def _configure(conn: sqlite3.Connection, path: str) -> None:
    """Set the pragmas and bring the schema up to `SCHEMA_VERSION`, in one transaction."""
    mode = _journal_mode_wal(conn)
    if mode != "wal" and path != MEMORY_PATH:
        logger.warning("SQLite storage %s runs in %s journal mode, not WAL", path, mode)
    # NORMAL is durable in WAL mode except for the last commits on power loss.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_CREATE_VERSION_TABLE)
        version = conn.execute(_GET_VERSION).fetchone()[0] or 0
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"SQLite storage {path} has schema version {version}, newer than this "
                f"package understands ({SCHEMA_VERSION}); upgrade langchain-semantic-recall"
            )
        # Version 2 adds keyword search (sqlite_fts): its tables, then the existing rows.
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for step in MIGRATIONS[target]:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(conn)
            logger.info("SQLite storage %s: schema migrated to v%d", path, target)
        if version != SCHEMA_VERSION:
            conn.execute(_CLEAR_VERSION)
            conn.execute(_SET_VERSION, (SCHEMA_VERSION,))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
