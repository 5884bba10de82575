"""The SQLite storage's file: its path checks, pragmas, schema and migrations.

A file carries its schema version (table `schema_version`); opening it brings the
schema up to `SCHEMA_VERSION` in one transaction, step by step, so a file written
by any earlier release is migrated in place and one written by a later release is
refused. The statements live in `MIGRATIONS`; keyword search's tables and their
backfill come from `sqlite_fts`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.storage import sqlite_fts as fts

logger = logging.getLogger(__name__)

MEMORY_PATH: Final = ":memory:"
SCHEMA_VERSION: Final = 2
_BUSY_TIMEOUT_S: Final = 30.0

Migration = str | Callable[[sqlite3.Connection], None]

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
}
"""Version -> the statements (or functions) that bring a file from the previous version."""

_CREATE_VERSION_TABLE: Final = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)"
_GET_VERSION: Final = "SELECT MAX(version) FROM schema_version"
_CLEAR_VERSION: Final = "DELETE FROM schema_version"
_SET_VERSION: Final = "INSERT INTO schema_version (version) VALUES (?)"


def prepare_path(path: str | os.PathLike[str]) -> str:
    """The database path, its folder created; StorageError if it cannot be written."""
    raw = os.fspath(path)
    if raw == MEMORY_PATH:
        return raw
    target = Path(raw).expanduser()
    if target.is_dir():
        raise StorageError(
            f"SQLite storage path {target} is a directory; pass a file path such as "
            f"{target / 'memory.db'}"
        )
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


def connect(path: str) -> sqlite3.Connection:
    """An autocommit connection to a prepared path, its schema brought up to date.

    Raises:
        StorageError: The file is not a SQLite database, cannot be written, or was
            written by a newer version of this package.
    """
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
        raise StorageError(
            f"cannot use SQLite storage {path} ({exc}); check that it is a SQLite "
            "database in a folder you can write, or choose another path"
        ) from exc
    return conn


def _configure(conn: sqlite3.Connection, path: str) -> None:
    """Set the pragmas and bring the schema up to `SCHEMA_VERSION`, in one transaction."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
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
