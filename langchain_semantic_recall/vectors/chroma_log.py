"""What embedded Chroma's own SQLite file says about a collection's writes (read only).

`chroma_snapshots` uses it to tell whether a snapshot is exactly a collection's content.
Measured with chromadb 1.5.9 (`tests/integration/test_chroma_snapshots.py` checks it):

* every record written (added, updated, upserted or deleted) is a row of the write-ahead
  log table `embeddings_queue`, numbered by `seq_id` (one counter for every collection),
  with its operation, its vector (`FLOAT32` bytes) and its metadata (JSON);
* the collection's metadata segment applies each write as it is made and records the
  number of the last one in `max_seq_id`; its rows in `embeddings` are the live records,
  each with the number of its last write (an upsert or update renumbers it; never purged);
* the log is purged from the oldest rows once the HNSW segment has persisted them (every
  `sync_threshold` records); a collection's newest row is kept;
* a write is logged, then applied in a second transaction: a read between the two (or
  after a writer stopped there) finds log rows past `max_seq_id`, which chromadb applies
  before it reads (`ahead`).

These are Chroma's internal tables: a read that fails or finds another shape gives
`None` (no snapshot is used), never a guess.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeGuard, TypeVar

from langchain_semantic_recall.vectors.chroma_sqlite import read_chroma_file

__all__ = [
    "ADD",
    "DELETE",
    "UPDATE",
    "UPSERT",
    "ChromaLog",
    "LogRecord",
    "Stamp",
    "logged_after",
    "metadata_segment",
    "read_chroma_file",
]

logger = logging.getLogger(__name__)

ADD: Final = 0
UPDATE: Final = 1
UPSERT: Final = 2
DELETE: Final = 3
"""Chroma's operation codes in `embeddings_queue.operation`."""
_T = TypeVar("_T")

_STAMP: Final = """
SELECT s.id, m.seq_id FROM segments AS s LEFT JOIN max_seq_id AS m ON m.segment_id = s.id
WHERE s.collection = ? AND s.scope = 'METADATA'
"""
_COUNT: Final = "SELECT count(*) FROM embeddings WHERE segment_id = ?"
_LIVE: Final = "SELECT embedding_id, seq_id FROM embeddings WHERE segment_id = ?"
_HOLDS: Final = "SELECT count(*) FROM embeddings_queue WHERE seq_id = ? AND topic LIKE ?"
_LOGGED: Final = """
SELECT q.topic, max(q.seq_id) FROM embeddings_queue AS q WHERE q.seq_id > ? GROUP BY q.topic
"""
_TAIL: Final = """
SELECT seq_id, operation, id, vector, encoding, metadata FROM embeddings_queue
WHERE seq_id > ? AND seq_id <= ? AND topic LIKE ? ORDER BY seq_id
"""


@dataclass(frozen=True)
class Stamp:
    """A collection's state: the last write applied, and how many records it holds."""

    collection_id: str
    seq: int
    count: int


@dataclass(frozen=True)
class LogRecord:
    """One row of Chroma's write-ahead log."""

    seq: int
    operation: int
    vector_id: str
    vector: bytes | None
    encoding: str | None
    metadata: str | None


class ChromaLog:
    """Read-only queries on the `chroma.sqlite3` of one embedded Chroma folder.

    A connection per call (opening one costs ~0.1 ms): safe from any thread, and never
    holds Chroma's file open between calls.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        """Read the Chroma folder `folder`."""
        self._path = Path(folder) / "chroma.sqlite3"

    def stamp(self, collection_id: str) -> Stamp | None:
        """The collection's state now; None if it cannot be read."""
        return self._read(lambda cursor: _stamp(cursor, collection_id))

    def tail(self, collection_id: str, after: int) -> tuple[Stamp, list[LogRecord]] | None:
        """The collection's state and the log rows written after write `after`, in order.

        Read in one transaction. None if the log no longer holds write `after` itself
        (rows after it may have been purged), or anything cannot be read.
        """
        return self._read(lambda cursor: _tail(cursor, collection_id, after))

    def applied_tail(self, collection_id: str, after: int) -> tuple[Stamp, list[LogRecord]] | None:
        """`tail`, for a reader: None also while the log is `ahead` of what was applied.

        Both are read in one transaction, so the rows and the check see one state.
        """

        def read(cursor: sqlite3.Cursor) -> tuple[Stamp, list[LogRecord]] | None:
            found = _tail(cursor, collection_id, after)
            if found is None or logged_after(cursor, {collection_id: found[0].seq}):
                return None
            return found

        return self._read(read)

    def holds(self, collection_id: str, after: int) -> bool:
        """Whether the log still holds write `after` (what `tail` needs), read cheaply.

        Neither the rows since nor the count are read: a writer asks after every write.
        """
        return bool(self._read(lambda cursor: _holds(cursor, collection_id, after)))

    def ahead(self, collection_id: str, seq: int) -> bool:
        """Whether the log holds a write of the collection after write `seq` (or cannot tell).

        A reader's check: a write logged and not applied yet, which chromadb applies
        before it reads, is in no snapshot of the applied state.
        """
        ahead = self._read(lambda cursor: logged_after(cursor, {collection_id: seq}))
        return ahead is None or ahead

    def live(self, collection_id: str) -> tuple[Stamp, dict[str, int]] | None:
        """The collection's state and the number of each live record's last write.

        Read in one transaction, from the rows Chroma keeps for as long as the records
        live: what changed since a purged write can still be told. None if unreadable.
        """
        return self._read(lambda cursor: _live(cursor, collection_id))

    def _read(self, read: Callable[[sqlite3.Cursor], _T | None]) -> _T | None:
        """`read(cursor)` on this folder's file (`read_chroma_file`); None if unreadable."""
        return read_chroma_file(self._path, read)


def _tail(
    cursor: sqlite3.Cursor, collection_id: str, after: int
) -> tuple[Stamp, list[LogRecord]] | None:
    stamp = _stamp(cursor, collection_id)
    if stamp is None or stamp.seq < after:
        return None
    if stamp.seq == after:
        return stamp, []
    if not _logged(cursor, collection_id, after):
        return None  # purged: what came after it may be too
    topic = f"%/{collection_id}"
    records = [_record(row) for row in cursor.execute(_TAIL, (after, stamp.seq, topic))]
    kept = [record for record in records if record is not None]
    return (stamp, kept) if len(kept) == len(records) else None


def _holds(cursor: sqlite3.Cursor, collection_id: str, after: int) -> bool:
    found = metadata_segment(cursor, collection_id)
    if found is None or found[1] < after:
        return False
    return found[1] == after or _logged(cursor, collection_id, after)


def _logged(cursor: sqlite3.Cursor, collection_id: str, seq: int) -> bool:
    """Whether write `seq` of the collection is still a row of the log."""
    return bool(cursor.execute(_HOLDS, (seq, f"%/{collection_id}")).fetchone()[0] == 1)


def _stamp(cursor: sqlite3.Cursor, collection_id: str) -> Stamp | None:
    found = metadata_segment(cursor, collection_id)
    if found is None:
        return None
    segment, seq = found
    count = cursor.execute(_COUNT, (segment,)).fetchone()[0]
    return Stamp(collection_id, seq, int(count))


def _live(cursor: sqlite3.Cursor, collection_id: str) -> tuple[Stamp, dict[str, int]] | None:
    found = metadata_segment(cursor, collection_id)
    if found is None:
        return None
    segment, seq = found
    written: dict[str, int] = {}
    for vector_id, number in cursor.execute(_LIVE, (segment,)):
        if not (isinstance(vector_id, str) and _is_number(number)):
            return None  # another version's encoding
        written[vector_id] = number
    return Stamp(collection_id, seq, len(written)), written


def logged_after(cursor: sqlite3.Cursor, applied: dict[str, int]) -> bool:
    """Whether the log holds a write of a collection after the last one it applied.

    `applied`: collection id -> the last write its metadata segment applied. Chroma logs
    a write, then applies it in another transaction: a read may fall between, or a
    writer stop there. chromadb applies such writes before it reads. True also when a
    row has another shape (the file cannot tell).
    """
    if not applied:
        return False
    for topic, last in cursor.execute(_LOGGED, (min(applied.values()),)):
        if not isinstance(topic, str) or not _is_number(last):
            return True
        collection = topic.rsplit("/", 1)[-1]
        if collection in applied and last > applied[collection]:
            return True
    return False


def metadata_segment(cursor: sqlite3.Cursor, collection_id: str) -> tuple[str, int] | None:
    """The collection's metadata segment and the number of its last write (0: none)."""
    rows = cursor.execute(_STAMP, (collection_id,)).fetchall()
    if len(rows) != 1:
        return None
    segment, seq = rows[0]
    if seq is None:
        seq = 0  # never written
    if not (isinstance(segment, str) and _is_number(seq)):
        return None  # another version's encoding
    return segment, seq


def _is_number(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _record(row: tuple[object, ...]) -> LogRecord | None:
    seq, operation, vector_id, vector, encoding, metadata = row
    if not (isinstance(seq, int) and isinstance(operation, int) and isinstance(vector_id, str)):
        return None
    if operation not in (ADD, UPDATE, UPSERT, DELETE):
        return None
    if vector is not None and not isinstance(vector, bytes):
        return None
    return LogRecord(
        seq,
        operation,
        vector_id,
        vector,
        encoding if isinstance(encoding, str) else None,
        metadata if isinstance(metadata, str) else None,
    )
