"""Erasing what deleted vectors leave in Chroma, through Chroma's public API only.

Chroma deletes lazily. Measured with chromadb 1.5.9 (embedded `PersistentClient`): a
vector deleted from a collection stays in the collection's HNSW file, only marked
deleted; a dropped collection's segment folder stays on disk with its HNSW files
(chroma-core/chroma#5259, #1309); deleted rows (metadata, including the message text
this package stores) stay in free pages of `chroma.sqlite3` and in its write-ahead log
table until Chroma compacts it.

`compact_index` therefore never edits those files. On an embedded persistent client it
**rebuilds the whole folder** from the live rows (`chroma_rebuild`): a child process
writes a new folder, the copy is counted against the rows read (else it is deleted and
the old folder kept), the client's bindings are stopped
(`chroma_workarounds.unload.restart_around`), the folders are swapped by renames and the
old one deleted, and the bindings start on the new folder. Every collection of the folder
is copied (other indexes too), with its metadata and HNSW settings. A crash at any step
loses nothing (`recover_swap`).

Over HTTP (a Chroma server) and in memory, each resource collection of the index is
rebuilt in place instead (`_rebuild`): its rows copied into a new collection, checked
whole, the old one dropped and the new one renamed; a crash between drop and rename is
finished by the next purge (`_recover`). The server's files are its operator's
(`chroma vacuum --path` on the server's folder). chromadb is imported inside functions
only.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final, cast

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.records import CompactResult
from langchain_semantic_recall.vectors.chroma_collections import sweep_copies
from langchain_semantic_recall.vectors.chroma_layout import collection_prefix
from langchain_semantic_recall.vectors.chroma_rebuild import (
    READY,
    TMP,
    configuration_of,
    copy_pages,
    every_collection,
    recover_swap,
    swap_folders,
    write_copy,
)

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

    from langchain_semantic_recall.vectors.chroma_collections import ChromaCollections

__all__ = ["compact_index", "folder_bytes", "is_http", "persist_folder"]

logger = logging.getLogger(__name__)

PURGE_OF: Final = "semantic_recall_purge_of"
"""Metadata key of a collection being rebuilt: the name of the collection it replaces."""
PURGE_METADATA: Final = "semantic_recall_purge_metadata"
"""Metadata key of a collection being rebuilt: the replaced collection's metadata (JSON)."""
_TEMP_PREFIX: Final = "semantic-recall-purge-"
_PAGE: Final = 1000
"""Rows per `get` / `add` while copying (under Chroma's max batch)."""
_SQLITE_FILE: Final = "chroma.sqlite3"


def compact_index(client: ClientAPI, collections: ChromaCollections, name: str) -> CompactResult:
    """Rebuild index `name`'s collections; on disk, the whole folder (see module).

    Raises:
        StorageError: a copy came out incomplete (the old collection or folder is kept).
    """
    folder = persist_folder(client)
    before = folder_bytes(folder)
    collections.clear()
    size = min(_PAGE, collections.max_batch())
    if folder is not None:
        steps, rebuilt = _rebuild_folder(client, folder, name, size)
    else:
        steps, rebuilt = _rebuild_collections(client, collections, name, size)
    collections.clear()
    logger.info("compacted vector index %r: %s", name, "; ".join(steps))
    return CompactResult("ChromaVectorIndex", tuple(steps), before, folder_bytes(folder), rebuilt)


def _rebuild_folder(client: ClientAPI, folder: str, name: str, size: int) -> tuple[list[str], int]:
    """Copy every collection into a new folder (a child writes it), then swap (see module)."""
    from langchain_semantic_recall.vectors.chroma_workarounds.unload import restart_around

    done: list[str] = []
    recovered = recover_swap(folder)
    if recovered:
        done.append(f"finished an interrupted purge ({recovered})")
    if _recover(client, name):  # collections an in-place rebuild (an earlier version) left
        done.append("finished an interrupted rebuild of a collection")
    expected = {c.name: int(c.count()) for c in every_collection(client)}
    read, counted = write_copy(client, folder + TMP, size)
    now = {c.name: int(c.count()) for c in every_collection(client)}
    if not read == counted == expected == now:  # a write elsewhere, or a short copy
        recover_swap(folder)
        lost = {k: (read.get(k, 0), v) for k, v in expected.items() if counted.get(k) != v}
        raise StorageError(
            f"rebuilding the Chroma folder {folder} copied fewer rows than it holds "
            f"(collection: (copied, held) {lost or now}); the folder is kept as it was: "
            "stop the other processes writing to the store and run the purge again"
        )
    os.replace(folder + TMP, folder + READY)
    server = getattr(client, "_server", None)
    restart_around(server, lambda: swap_folders(folder))
    prefix = collection_prefix(name)
    mine = [k for k in expected if k == name or k.startswith(prefix)]  # (its own root too)
    rebuilt = sum(expected[k] for k in mine)
    others = len(expected) - len(mine)
    count = f"{rebuilt} vectors, a long message's chunks one each"
    done.append(f"rebuilt {len(mine)} collection(s) of index {name!r} ({count})")
    done.append(f"copied {others} other collection(s) into the new folder")
    done.append("replaced the Chroma folder by its rebuilt copy (the old one deleted)")
    if swept := sweep_copies():
        done.append(f"deleted {len(swept)} read-only copies of a store left by killed processes")
    return done, rebuilt


def _rebuild_collections(
    client: ClientAPI, collections: ChromaCollections, name: str, size: int
) -> tuple[list[str], int]:
    """Rebuild each resource collection of `name` in place (a server, or in memory)."""
    done: list[str] = []
    recovered = _recover(client, name)
    if recovered:
        done.append(f"finished {recovered} interrupted rebuild(s)")
    olds = [collection for _, collection in collections.every(name)]
    rebuilt = sum(_rebuild(client, old, size) for old in olds)
    done.append(f"rebuilt {len(olds)} collection(s) of index {name!r} ({rebuilt} vectors)")
    return done, rebuilt


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
    """Bytes of every file under `folder` (None for None).

    A file gone while measured counts 0 (a snapshot build renames its temporary file).
    """
    if folder is None:
        return None
    total = 0
    for root, _, files in os.walk(folder):
        for file in files:
            with suppress(FileNotFoundError):
                total += os.path.getsize(os.path.join(root, file))
    return total


# --- rebuilding a collection ---------------------------------------------------------------


def _rebuild(client: ClientAPI, old: Collection, size: int) -> int:
    """Copy `old` into a fresh collection, check it, drop `old`, rename; returns vectors."""
    expected = int(old.count())
    metadata = dict(old.metadata or {})
    temp_name = _TEMP_PREFIX + old.id.hex
    marks = {PURGE_OF: old.name, PURGE_METADATA: json.dumps(metadata)}
    temp = client.create_collection(
        temp_name, embedding_function=None, configuration=configuration_of(old), metadata=marks
    )
    copied = 0
    for page in copy_pages(old, size):
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


def _recover(client: ClientAPI, name: str) -> int:
    """Finish rebuilds of index `name` a crash cut short; returns how many were found.

    A copy whose original still exists may be incomplete: it is dropped. A copy whose
    original is gone was checked whole before the original was dropped: it is renamed.
    """
    prefix = collection_prefix(name)
    found = [
        c
        for c in every_collection(client)
        if c.name.startswith(_TEMP_PREFIX)
        and str((c.metadata or {}).get(PURGE_OF, "")).startswith(prefix)
    ]
    existing = {c.name for c in every_collection(client)}
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
