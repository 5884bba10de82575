"""Erasing what deleted vectors leave in Chroma: collections rebuilt, folders and log purged.

Chroma deletes lazily. Measured with chromadb 1.5.9 (embedded `PersistentClient`):

- a vector deleted from a collection stays in the collection's HNSW file
  (`<segment id>/data_level0.bin`, normalized to unit length in cosine space), only
  marked deleted;
- a dropped collection's segment folder stays on disk with its HNSW files
  (chroma-core/chroma#5259: the Rust build leaves the folder to a garbage collector the
  single-node build does not run);
- deleted rows (metadata, including the message text this package stores) stay in free
  pages of `chroma.sqlite3`, and the write-ahead log table `embeddings_queue` keeps
  records until the vector segment has persisted them;
- a new HNSW index writes its whole allocation to `data_level0.bin` and `length.bin`
  before it holds anything (hnswlib's `initPersistentIndex` writes `malloc`ed memory): the
  slots past its element count hold whatever the process freed before, such as the
  vectors of a collection it just dropped. Seen here as 1-12 forgotten vectors in a
  rebuilt collection's file, about one purge in six.

`compact_index` therefore:

1. finishes a rebuild a crash interrupted (`_recover`);
2. rebuilds every resource collection of the index: copies its vectors (ids,
   embeddings, metadata, documents) into a new collection, checks the copy is whole
   (else drops the copy and raises, keeping the old collection), drops the old one and
   gives the new one its name and metadata;
3. on an embedded persistent client: removes the segment folders no live segment
   references, zeroes the unused slots of every live HNSW file (`scrub_unused_slots`),
   deletes the log records of dropped collections, merges Chroma's full-text index and
   VACUUMs `chroma.sqlite3` (what `chroma vacuum` does, without stopping this process's
   client).

Over HTTP (a Chroma server) only step 1 and 2 run: the server's files, log and
compaction are its operator's (`chroma vacuum --path` on the server's folder).
chromadb is imported inside functions only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import struct
import uuid
from collections.abc import Iterator, Mapping
from contextlib import closing
from typing import TYPE_CHECKING, Any, Final, cast

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.records import CompactResult
from langchain_semantic_recall.vectors.chroma_layout import collection_prefix

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.api.models.Collection import Collection

    from langchain_semantic_recall.vectors.chroma_collections import ChromaCollections

__all__ = [
    "compact_index",
    "folder_bytes",
    "is_http",
    "persist_folder",
    "remove_orphan_segments",
    "scrub_unused_slots",
]

logger = logging.getLogger(__name__)

PURGE_OF: Final = "semantic_recall_purge_of"
"""Metadata key of a collection being rebuilt: the name of the collection it replaces."""
PURGE_METADATA: Final = "semantic_recall_purge_metadata"
"""Metadata key of a collection being rebuilt: the replaced collection's metadata (JSON)."""
_TEMP_PREFIX: Final = "semantic-recall-purge-"
_PAGE: Final = 1000
"""Rows per `get` / `add` while copying (under Chroma's max batch)."""
_LIST_PAGE: Final = 1000
_SQLITE_FILE: Final = "chroma.sqlite3"
_BUSY_TIMEOUT_S: Final = 60.0
_HNSW_HEADER: Final = struct.Struct("<iQQQQ")
"""hnswlib's persisted header starts: version, offsetLevel0, max_elements,
cur_element_count, size_data_per_element (little-endian, as written on x86 and ARM)."""
_HNSW_VERSION: Final = 1
_FLOAT: Final = 4
"""Bytes per entry of `length.bin` (one float32 norm per slot)."""


def compact_index(client: ClientAPI, collections: ChromaCollections, name: str) -> CompactResult:
    """Rebuild index `name`'s collections and, on disk, purge what dropped ones left.

    Raises:
        StorageError: a copy came out incomplete (the old collection is kept), or the
            Chroma folder could not be compacted.
    """
    folder = persist_folder(client)
    before = folder_bytes(folder)
    done: list[str] = []
    collections.clear()
    recovered = _recover(client, name)
    if recovered:
        done.append(f"finished {recovered} interrupted rebuild(s)")
    olds = [collection for _, collection in collections.every(name)]
    size = min(_PAGE, collections.max_batch())
    rebuilt = sum(_rebuild(client, old, size) for old in olds)
    collections.clear()
    done.append(f"rebuilt {len(olds)} collection(s) of index {name!r} ({rebuilt} vectors)")
    if folder is not None:
        removed = remove_orphan_segments(folder)
        done.append(f"removed {removed} segment folder(s) of dropped collections")
        files, zeroed = scrub_unused_slots(folder)
        done.append(f"zeroed {zeroed} bytes of unused slots in {files} HNSW file(s)")
        done.extend(compact_sqlite(os.path.join(folder, _SQLITE_FILE)))
    logger.info("compacted vector index %r: %s", name, "; ".join(done))
    return CompactResult("ChromaVectorIndex", tuple(done), before, folder_bytes(folder), rebuilt)


def is_http(client: ClientAPI) -> bool:
    """Whether `client` talks to a Chroma server (else it is embedded in this process)."""
    return "fastapi" in str(client.get_settings().chroma_api_impl)


def persist_folder(client: ClientAPI) -> str | None:
    """The folder of an embedded persistent client; None over HTTP or in memory."""
    settings = client.get_settings()
    folder = settings.persist_directory
    if not settings.is_persistent or not folder or is_http(client):
        return None
    return folder if os.path.isfile(os.path.join(folder, _SQLITE_FILE)) else None


def folder_bytes(folder: str | None) -> int | None:
    """Bytes of every file under `folder` (None for None)."""
    if folder is None:
        return None
    return sum(
        os.path.getsize(os.path.join(root, file))
        for root, _, files in os.walk(folder)
        for file in files
    )


# --- rebuilding a collection ---------------------------------------------------------------


def _rebuild(client: ClientAPI, old: Collection, size: int) -> int:
    """Copy `old` into a fresh collection, check it, drop `old`, rename; returns vectors."""
    expected = int(old.count())
    metadata = dict(old.metadata or {})
    temp_name = _TEMP_PREFIX + old.id.hex
    marks = {PURGE_OF: old.name, PURGE_METADATA: json.dumps(metadata)}
    temp = client.create_collection(
        temp_name, embedding_function=None, configuration=_configuration(old), metadata=marks
    )
    copied = 0
    for page in _pages(old, size):
        temp.add(**page)
        copied += len(page["ids"])
    found, now = int(temp.count()), int(old.count())
    if not copied == found == expected == now:  # a write elsewhere, or a short copy
        client.delete_collection(temp_name)
        raise StorageError(
            f"rebuilding Chroma collection {old.name!r} copied {copied} of {expected} "
            f"vectors ({found} readable, {now} there now); the collection is kept as it "
            "was: stop the other processes writing to the store and run the purge again"
        )
    client.delete_collection(old.name)
    temp.modify(name=old.name, metadata=cast("Any", metadata or None))
    return copied


def _pages(old: Collection, size: int) -> Iterator[dict[str, Any]]:
    """`old`'s rows, `size` at a time, as `add` keyword arguments."""
    offset = 0
    while True:
        got = old.get(limit=size, offset=offset, include=["embeddings", "metadatas", "documents"])
        ids = got["ids"]
        if not ids:
            return
        page: dict[str, Any] = {"ids": ids, "embeddings": got["embeddings"]}
        if got["metadatas"] is not None:
            page["metadatas"] = got["metadatas"]
        documents = got["documents"]
        if documents is not None and any(d is not None for d in documents):
            page["documents"] = documents
        yield page
        if len(ids) < size:
            return
        offset += len(ids)


def _configuration(collection: Collection) -> CreateCollectionConfiguration:
    """The index settings of `collection` (HNSW or SPANN), to create its copy alike."""
    config: Mapping[str, Any] = collection.configuration_json or {}
    kept = {
        key: {k: v for k, v in section.items() if v is not None}
        for key in ("hnsw", "spann")
        if isinstance(section := config.get(key), Mapping)
    }
    return cast("CreateCollectionConfiguration", kept)


def _every_collection(client: ClientAPI) -> Iterator[Collection]:
    offset = 0
    while True:
        listed = client.list_collections(limit=_LIST_PAGE, offset=offset)
        yield from listed
        if len(listed) < _LIST_PAGE:
            return
        offset += _LIST_PAGE


def _recover(client: ClientAPI, name: str) -> int:
    """Finish rebuilds of index `name` a crash cut short; returns how many were found.

    A copy whose original still exists may be incomplete: it is dropped. A copy whose
    original is gone was checked whole before the original was dropped: it is renamed.
    """
    prefix = collection_prefix(name)
    found = [
        c
        for c in _every_collection(client)
        if c.name.startswith(_TEMP_PREFIX)
        and str((c.metadata or {}).get(PURGE_OF, "")).startswith(prefix)
    ]
    existing = {c.name for c in _every_collection(client)}
    for temp in found:
        meta = temp.metadata or {}
        target = str(meta[PURGE_OF])
        if target in existing:
            client.delete_collection(temp.name)
            continue
        metadata = json.loads(str(meta.get(PURGE_METADATA) or "{}"))
        temp.modify(name=target, metadata=metadata or None)
        logger.warning("restored Chroma collection %r from an interrupted purge", target)
    return len(found)


# --- the embedded folder -------------------------------------------------------------------


def remove_orphan_segments(folder: str) -> int:
    """Delete the segment folders (UUID names) no live segment of `chroma.sqlite3` uses."""
    with closing(sqlite3.connect(os.path.join(folder, _SQLITE_FILE), timeout=30)) as conn:
        live = {str(row[0]) for row in conn.execute("SELECT id FROM segments")}
    removed = 0
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False) and _is_uuid(entry.name) and entry.name not in live:
            shutil.rmtree(entry.path)
            removed += 1
    return removed


def scrub_unused_slots(folder: str) -> tuple[int, int]:
    """Zero the slots past the element count of every live segment's HNSW files.

    Those bytes are never read as vectors (the header's count bounds every read), but
    hnswlib wrote them from uninitialized memory, which can hold freed vectors of other
    collections. Zeroing them in place is safe with the index open: hnswlib only ever
    writes an element's slot again when it adds that element, and then writes all of it.

    Returns:
        (files rewritten, bytes zeroed).

    Raises:
        StorageError: a header is not hnswlib's version 1 layout, so what is unused
            cannot be known: the purge cannot vouch for that file.
    """
    files = zeroed = 0
    with closing(sqlite3.connect(os.path.join(folder, _SQLITE_FILE), timeout=30)) as conn:
        live = sorted(str(row[0]) for row in conn.execute("SELECT id FROM segments"))
    for segment in live:
        header = os.path.join(folder, segment, "header.bin")
        if not os.path.isfile(header):
            continue  # a metadata segment, or a vector segment not yet written
        with open(header, "rb") as file:
            raw = file.read(_HNSW_HEADER.size)
        version, offset, _, count, per_element = (
            _HNSW_HEADER.unpack(raw) if len(raw) == _HNSW_HEADER.size else (0, 0, 0, 0, 0)
        )
        if version != _HNSW_VERSION or offset != 0 or per_element <= 0:
            raise StorageError(
                f"{header}: not an HNSW header this package knows (version {version}), so "
                "the purge cannot tell which bytes are unused; the rest of the purge is "
                "done: report the chromadb version you use"
            )
        for name, used in (
            ("data_level0.bin", count * per_element),
            ("length.bin", count * _FLOAT),
        ):
            cleared = _zero_from(os.path.join(folder, segment, name), used)
            files += cleared > 0
            zeroed += cleared
    return files, zeroed


def _zero_from(path: str, start: int) -> int:
    """Overwrite `path` with zeros from byte `start` to its end (size kept); returns bytes."""
    if not os.path.isfile(path):
        return 0
    size = os.path.getsize(path)
    if size <= start:
        return 0
    with open(path, "r+b") as file:
        file.seek(start)
        left = size - start
        while left:
            chunk = min(left, 1 << 20)
            file.write(bytes(chunk))
            left -= chunk
        file.flush()
        os.fsync(file.fileno())
    return size - start


def compact_sqlite(path: str) -> list[str]:
    """Drop dead log records, merge the full-text index, VACUUM; returns what was done.

    Raises:
        StorageError: the file could not be compacted (locked by another process).
    """
    done: list[str] = []
    try:
        with closing(sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)) as db:
            db.execute("PRAGMA secure_delete = ON")
            tables = {str(row[0]) for row in db.execute("SELECT name FROM sqlite_master")}
            if {"embeddings_queue", "collections"} <= tables:
                live = {str(row[0]) for row in db.execute("SELECT id FROM collections")}
                topics = [
                    str(r[0]) for r in db.execute("SELECT DISTINCT topic FROM embeddings_queue")
                ]
                dead = [t for t in topics if t.rsplit("/", 1)[-1] not in live]
                for topic in dead:
                    db.execute("DELETE FROM embeddings_queue WHERE topic = ?", (topic,))
                done.append(f"deleted the log records of {len(dead)} dropped collection(s)")
            if "embedding_fulltext_search" in tables:
                db.execute(
                    "INSERT INTO embedding_fulltext_search(embedding_fulltext_search) "
                    "VALUES('optimize')"
                )
                done.append("FTS5 optimize of Chroma's full-text index")
            db.execute("VACUUM")
            done.append(f"VACUUM {_SQLITE_FILE}")
            if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                if db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                    raise StorageError(
                        f"{path}: the write-ahead log could not be emptied (another "
                        "process reads it); stop it and run the purge again"
                    )
                done.append("wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        raise StorageError(
            f"cannot compact {path} ({exc}); stop the other processes using the store and "
            "run the purge again"
        ) from exc
    return done


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
