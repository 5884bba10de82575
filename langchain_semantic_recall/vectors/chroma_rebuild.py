"""Rebuilding an embedded Chroma folder from its live rows, through Chroma's public API.

`purge` on a persistent embedded client (`chroma_purge.compact_index`) writes a new
folder beside the old one and swaps them. Nothing here reads or edits Chroma's files:
the rows are read with `Collection.get` and written with `Collection.add`, and a folder
is only ever moved or deleted whole.

The new folder is written by a **child process** (`python -m` this module) that reads
the rows from a pipe and never opens the old folder. Every byte of the new folder then
comes from a live row: hnswlib writes a new index's whole allocation from uninitialized
memory (`initPersistentIndex`), and in the process that had the old indexes loaded, that
memory can hold the vectors of a dropped collection (seen with chromadb 1.5.9: 1-12
forgotten vectors in about one in six in-process rebuilds). A fresh process's memory
holds nothing but what it was sent.

The swap (`swap_folders`), each step a rename, so a crash at any point loses nothing
(`recover_swap` finishes or undoes it on the next open or purge):

1. the child writes `<folder>.purge-tmp` (a leftover one is incomplete: deleted);
2. the copy is counted and renamed `<folder>.purge-ready`;
3. `<folder>` is renamed `<folder>.purge-old`, `<folder>.purge-ready` renamed `<folder>`;
4. `<folder>.purge-old` is deleted.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, cast

from langchain_semantic_recall.errors import StorageError

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.api.models.Collection import Collection

__all__ = ["copy_pages", "recover_swap", "swap_folders", "write_copy"]

TMP: Final = ".purge-tmp"
READY: Final = ".purge-ready"
OLD: Final = ".purge-old"
_LIST_PAGE: Final = 1000


def every_collection(client: ClientAPI) -> Iterator[Collection]:
    """Every collection of the client's database (pages through the listing)."""
    offset = 0
    while True:
        listed = client.list_collections(limit=_LIST_PAGE, offset=offset)
        yield from listed
        if len(listed) < _LIST_PAGE:
            return
        offset += _LIST_PAGE


def copy_pages(collection: Collection, size: int) -> Iterator[dict[str, Any]]:
    """`collection`'s rows, `size` at a time, as `add` keyword arguments."""
    offset = 0
    while True:
        got = collection.get(
            limit=size, offset=offset, include=["embeddings", "metadatas", "documents"]
        )
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


def configuration_of(collection: Collection) -> CreateCollectionConfiguration:
    """The index settings of `collection` (HNSW or SPANN), to create its copy alike."""
    config: Mapping[str, Any] = collection.configuration_json or {}
    kept = {
        key: {k: v for k, v in section.items() if v is not None}
        for key in ("hnsw", "spann")
        if isinstance(section := config.get(key), Mapping)
    }
    return cast("CreateCollectionConfiguration", kept)


def write_copy(client: ClientAPI, target: str, size: int) -> tuple[dict[str, int], dict[str, int]]:
    """Copy every collection of `client` into a new Chroma folder `target` (a child writes it).

    Returns:
        (rows read per collection name, rows the child counted in its copy).

    Raises:
        StorageError: the child failed (its error is quoted); `target` is then removed.
    """
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    read: dict[str, int] = {}
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", __name__, target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=env,
        )
        pipe = cast("IO[bytes]", child.stdin)
        try:
            for collection in every_collection(client):
                metadata = dict(collection.metadata or {}) or None  # Chroma refuses {}
                spec = (collection.name, metadata, configuration_of(collection))
                pickle.dump(("collection", *spec), pipe)
                read[collection.name] = 0
                for page in copy_pages(collection, size):
                    pickle.dump(("rows", page), pipe)
                    read[collection.name] += len(page["ids"])
            pickle.dump(("done",), pipe)
            pipe.close()
        except BrokenPipeError:
            pass  # the child died: its exit code and error say why
        except BaseException:
            child.kill()
            child.wait()
            shutil.rmtree(target, ignore_errors=True)
            raise
        out = cast("IO[bytes]", child.stdout).read()
        code = child.wait()
        if code != 0:
            errors.seek(0)
            tail = errors.read().decode("utf-8", "replace").strip().splitlines()[-3:]
            shutil.rmtree(target, ignore_errors=True)
            raise StorageError(
                f"rebuilding the Chroma folder into {target} failed (exit {code}: "
                f"{' / '.join(tail) or 'no message'}); the folder is kept as it was"
            )
    counted: dict[str, int] = json.loads(out or b"{}")
    return read, counted


def swap_folders(folder: str) -> None:
    """Put `<folder>.purge-ready` in the place of `folder`; the old one is deleted last.

    If the second rename fails, the old folder is put back before the error is raised.
    """
    os.replace(folder, folder + OLD)
    try:
        os.replace(folder + READY, folder)
    except BaseException:
        os.replace(folder + OLD, folder)
        raise
    shutil.rmtree(folder + OLD)


def recover_swap(folder: str) -> str | None:
    """Finish or undo a purge a crash cut short; returns what was done, or None.

    - `.purge-tmp` may be incomplete: deleted.
    - `.purge-ready` and `.purge-old` both there: the crash came between the two renames
      of the swap; the ready copy (counted whole) takes the place of `folder`.
    - `.purge-ready` alone: the swap never started; deleted when `folder` is there.
    - `.purge-old` alone: the swap was done; deleted when `folder` is there.
    - `folder` missing: the ready copy, else the old folder, is put in its place.
    """
    done: list[str] = []
    ready, old = folder + READY, folder + OLD
    if os.path.isdir(folder + TMP):
        shutil.rmtree(folder + TMP)
        done.append("deleted an incomplete copy")
    if os.path.isdir(ready) and os.path.isdir(old) and os.path.exists(folder):
        shutil.rmtree(folder)  # made empty by a client opened after the crash
    if not os.path.exists(folder):
        for leftover in (READY, OLD):
            if os.path.isdir(folder + leftover):
                os.replace(folder + leftover, folder)
                done.append(f"put {leftover} in the folder's place")
                break
    for leftover in (READY, OLD):
        if os.path.isdir(folder + leftover):
            shutil.rmtree(folder + leftover)
            done.append(f"deleted {leftover}")
    return "; ".join(done) or None


def _child(target: str) -> None:
    """Read collections and rows from stdin, write them into a new folder `target`."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(path=target, settings=Settings(anonymized_telemetry=False))
    source = sys.stdin.buffer
    collection: Any = None
    while True:
        message = pickle.load(source)
        if message[0] == "done":
            break
        if message[0] == "collection":
            _, name, metadata, configuration = message
            collection = client.create_collection(
                name, embedding_function=None, configuration=configuration, metadata=metadata
            )
        else:
            collection.add(**message[1])
    counts = {c.name: int(c.count()) for c in every_collection(client)}
    sys.stdout.write(json.dumps(counts))
    sys.stdout.flush()


if __name__ == "__main__":
    _child(sys.argv[1])
