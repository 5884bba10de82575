"""Reading embedded Chroma's `chroma.sqlite3` from Python without touching chromadb's locks.

chromadb's Rust bindings carry their own SQLite, not the one Python's `sqlite3` links.
SQLite locks a file with POSIX advisory locks, which belong to the process, not to a
connection: when Python's SQLite took and dropped its read lock, or closed the file, it
also changed or dropped the locks chromadb's connections held on that file in the same
process. Another process writing the store (a `forget` from the command line while the
app runs, which docs/data-handling.md calls safe) then met a lock state neither library
expected: measured, an app process writing while it read Chroma's file (the snapshots'
checks, `chroma_log`) and a second process writing another resource both hung in
chromadb's 1,000 s busy wait, a hot journal left on disk, in every run (3 of 3); without
the reads, both finished (`tests/integration/test_chroma_file_locks.py`).

So a read here takes no lock at all (SQLite's `unix-none` file system, read only), and
the file is never closed while chromadb has its folder open in this process: one
connection per file stays open, and is closed once no chromadb client of the process
has the folder (`release_unused`, at an index's close). Without locks a read could meet a
write half done, so it checks that it did not: no journal beside the file (a write in
progress, in Chroma's rollback-journal mode) and the same change counter in the file's
header before and after; otherwise it reads again, a few times, then gives up (None).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

__all__ = ["copy_chroma_file", "read_chroma_file", "release_unused"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
RETRY_DELAYS: Final = (0.001, 0.005, 0.02, 0.05)
"""Pauses before reading again a file a write was changing."""
_ROLLBACK_JOURNAL: Final = 1
"""Bytes 18 and 19 of a SQLite header: 1 in rollback-journal mode (2: WAL, not read here)."""


class _Reader:
    """One lock-free, read-only connection to a Chroma file, and a descriptor for its header."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.closed = False
        self.fd = os.open(path, os.O_RDONLY)
        try:
            stat = os.fstat(self.fd)
            self.inode = (stat.st_dev, stat.st_ino)
            # No lock taken (Windows locks per handle, and has no `unix-none`: plain there).
            lock_free = "" if os.name == "nt" else "&vfs=unix-none"
            uri = f"{Path(path).as_uri()}?mode=ro{lock_free}"
            self.connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
        except BaseException:
            os.close(self.fd)
            raise

    def current(self) -> bool:
        """Whether the path still names the file this reader opened (a purge swaps it)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == self.inode

    def version(self) -> bytes | None:
        """The header's change counter, or None while a write is under way (or not readable)."""
        try:
            if os.path.getsize(self.path + "-journal") > 0:
                return None
        except OSError:
            pass  # no journal: no write in progress
        header = os.pread(self.fd, 28, 0)
        if len(header) < 28 or header[18] != _ROLLBACK_JOURNAL:
            return None
        return header[24:28]

    def read(self, read: Callable[[sqlite3.Cursor], _T | None]) -> _T | None:
        """`read(cursor)` in one read transaction, if no write changed the file meanwhile."""
        if self.closed:  # closed by `release_unused` between its lookup and this read
            return None
        for delay in (*RETRY_DELAYS, None):
            before = self.version()
            if before is not None:
                cursor = self.connection.cursor()
                try:
                    cursor.execute("BEGIN")
                    try:
                        result = read(cursor)
                    finally:
                        self.connection.rollback()
                except sqlite3.DatabaseError as exc:  # pages met half written: read again
                    logger.debug("reading Chroma's file %s met a write: %s", self.path, exc)
                else:
                    if self.version() == before:
                        return result
            if delay is not None:
                time.sleep(delay)
        logger.debug("Chroma's file %s kept changing while it was read", self.path)
        return None

    def copy_to(self, target: str) -> bool:
        """Write the file, as no write was changing it, to `target` (False: it kept changing).

        Read through the descriptor kept open: a copy opened and closed here would drop
        chromadb's locks like a connection would.
        """
        for delay in (*RETRY_DELAYS, None):
            before = self.version()
            if before is not None and not self.closed:
                with open(target, "wb") as out:
                    offset = 0
                    while chunk := os.pread(self.fd, 1 << 20, offset):
                        out.write(chunk)
                        offset += len(chunk)
                if self.version() == before:
                    return True
            if delay is not None:
                time.sleep(delay)
        return False

    def close(self) -> None:
        self.closed = True
        self.connection.close()
        os.close(self.fd)


_READERS: dict[str, _Reader] = {}
_READERS_LOCK: Final = threading.Lock()


def read_chroma_file(path: Path, read: Callable[[sqlite3.Cursor], _T | None]) -> _T | None:
    """`read(cursor)` on Chroma's SQLite file `path`, read only, in one read transaction.

    None (logged) if the file is missing, a write kept changing it, or the read fails
    (another version's tables).

    Args:
        path: A `chroma.sqlite3`.
        read: What to read, given a cursor inside the transaction.
    """
    if not path.is_file():
        return None
    try:
        reader = _reader(os.path.realpath(path))
        with reader.lock:
            return reader.read(read)
    except (OSError, sqlite3.Error, TypeError, ValueError) as exc:
        logger.debug("cannot read Chroma's file %s: %s", path, exc)
        return None
    finally:
        release_unused()


def copy_chroma_file(path: Path, target: Path) -> bool:
    """Copy Chroma's SQLite file `path` to `target` whole, as no write was changing it.

    False (nothing to rely on in `target`) when writes kept changing it.

    Args:
        path: A `chroma.sqlite3`.
        target: Where the copy goes (overwritten).

    Raises:
        OSError: `path` cannot be read or `target` written.
    """
    try:
        reader = _reader(os.path.realpath(path))
        with reader.lock:
            return reader.copy_to(os.fspath(target))
    finally:
        release_unused()


def _reader(path: str) -> _Reader:
    with _READERS_LOCK:
        reader = _READERS.get(path)
        if reader is not None and not reader.current():
            del _READERS[path]  # its file was replaced: chromadb no longer has that one
            _close_quietly(reader)
            reader = None
        if reader is None:
            reader = _READERS[path] = _Reader(path)
        return reader


def release_unused() -> None:
    """Close the readers of files no chromadb client of this process has open any more."""
    with _READERS_LOCK:
        folders = _open_folders()
        unused = [
            path
            for path, reader in _READERS.items()
            if folders is not None
            and os.path.dirname(path) not in folders
            and not reader.lock.locked()
        ]
        readers = [_READERS.pop(path) for path in unused]
    for reader in readers:
        with reader.lock:
            _close_quietly(reader)


def _open_folders() -> set[str] | None:
    """The folders chromadb has a client system for in this process (None: cannot tell)."""
    module = sys.modules.get("chromadb.api.shared_system_client")
    if module is None:
        return set()  # chromadb not imported (the command line's reads): it holds no file
    try:
        identifiers = list(module.SharedSystemClient._identifier_to_system)
    except (AttributeError, TypeError, RuntimeError):  # (RuntimeError: changed meanwhile)
        return None  # a chromadb that keeps them elsewhere: keep every reader open
    return {os.path.realpath(identifier) for identifier in identifiers if identifier}


def _close_quietly(reader: _Reader) -> None:
    try:
        reader.close()
    except (OSError, sqlite3.Error) as exc:
        logger.debug("closing the reader of %s: %s", reader.path, exc)
