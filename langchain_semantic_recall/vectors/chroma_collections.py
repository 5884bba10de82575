"""The resource collections of one chromadb client: looked up, created, cached and listed.

`ChromaVectorIndex` keeps one collection per resource of each index (see its module for
the layout and why). This module owns the handles to those collections: a bounded cache
(`CACHED_COLLECTIONS` of ~12 KB each), a size hint per collection (it picks the
thread-search strategy), the listing of every collection of an index, and the client's
batch limit; and the temporary copy a read-only open works on (`chroma_clients` opens
the clients). chromadb is imported inside functions only.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from langchain_semantic_recall.errors import InvalidInputError, StorageError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.chroma_layout import (
    INDEX_KEY,
    RESOURCE_KEY,
    check_space,
    collection_prefix,
    resource_collection_name,
    thread_where,
)
from langchain_semantic_recall.vectors.chroma_sqlite import copy_chroma_file
from langchain_semantic_recall.vectors.chroma_workarounds import READ_RETRY_DELAYS
from langchain_semantic_recall.vectors.chroma_workarounds.reads import read_retrying

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration
    from chromadb.api.models.Collection import Collection
    from chromadb.api.types import GetResult, Include, Where

__all__ = [
    "CACHED_COLLECTIONS",
    "ChromaCollections",
    "Row",
    "remove_copy",
    "sweep_copies",
    "temporary_copy",
]

logger = logging.getLogger(__name__)

CACHED_COLLECTIONS: Final = 1024
"""Resource collection handles kept per instance. A handle holds ~12 KB of chromadb's
objects (chromadb 1.5.9, measured): ~12 MB at this bound (4,096 held ~51 MB); a lookup
past it costs ~0.4 ms embedded, next to a search of 5-40 ms, and 8x Chroma's loaded
indexes (128 by default) stay cached."""
_LIST_PAGE: Final = 1000
"""Collections per `list_collections` page."""
COPY_PREFIX: Final = "semantic-recall-read-only-"
"""Name of a read-only open's temporary copy: this, its process's id, "-" and a random tail."""
_COPY_LOCK: Final = ".semantic-recall-copy.lock"
"""The file of a copy that its process keeps locked while it uses the copy (`_hold`)."""
SQLITE_FILE: Final = "chroma.sqlite3"
"""Chroma's own SQLite file in its folder (copied whole, `chroma_sqlite.copy_chroma_file`)."""
_HELD: dict[str, int] = {}
"""This process's copies -> the descriptor holding each one's lock."""
_T = TypeVar("_T")

Row = tuple[str, Mapping[str, Any], Iterable[float] | None]
"""One stored vector as read: its id, its metadata and (if asked) its embedding."""


class ChromaCollections:
    """Handles to the resource collections of every index on one client; thread-safe.

    A handle is looked up once and cached (least recently used out first); a collection
    dropped by another process is looked up again once its caller `forget` s it.
    """

    def __init__(
        self,
        client: ClientAPI,
        configuration: CreateCollectionConfiguration,
        *,
        cached: int = CACHED_COLLECTIONS,
        retry_delays: tuple[float, ...] = READ_RETRY_DELAYS,
    ) -> None:
        """Wrap `client`; new collections get `configuration` (cosine HNSW).

        `retry_delays`: pauses between reads of a collection whose index is not ready
        (`chroma_workarounds.reads`); empty, a read is tried once.
        """
        self._client = client
        self._delays = retry_delays
        self._configuration = configuration
        self._cached = cached
        self._lock = threading.Lock()
        self._handles: OrderedDict[tuple[str, str], Collection] = OrderedDict()
        self._sizes: dict[tuple[str, str], int] = {}
        self._max_batch: int | None = None

    def get(self, name: str, resource_id: str, *, create: bool) -> Collection | None:
        """The collection of `resource_id` in `name` (created if asked), else None.

        Raises:
            EmbeddingMismatchError: the collection exists, but not in cosine space.
        """
        from chromadb.errors import NotFoundError

        key = (name, resource_id)
        with self._lock:
            cached = self._handles.get(key)
            if cached is not None:
                self._handles.move_to_end(key)
                return cached
        collection_name = resource_collection_name(name, resource_id)
        try:
            collection = self._client.get_collection(collection_name, embedding_function=None)
        except NotFoundError:
            if not create:
                return None
            collection = self._client.get_or_create_collection(
                collection_name,
                embedding_function=None,
                configuration=self._configuration,
                metadata={INDEX_KEY: name, RESOURCE_KEY: resource_id},
            )
        check_space(name, collection)
        with self._lock:
            self._handles[key] = collection
            while len(self._handles) > self._cached:
                old, _ = self._handles.popitem(last=False)
                self._sizes.pop(old, None)
        return collection

    def read(self, read: Callable[[], _T]) -> _T:
        """`read()`, tried again while a collection's index is not ready (see `__init__`)."""
        return read_retrying(read, self._delays)

    def writable(self, name: str, resource_id: str) -> Collection:
        """The collection of `resource_id` in `name`, created if missing."""
        collection = self.get(name, resource_id, create=True)
        if collection is None:  # pragma: no cover - create=True always returns one
            raise InvalidInputError(f"cannot create the collection of {resource_id!r}")
        return collection

    def forget(self, name: str, resource_id: str) -> None:
        """Drop the cached handle (the collection was deleted, here or elsewhere)."""
        with self._lock:
            self._handles.pop((name, resource_id), None)
            self._sizes.pop((name, resource_id), None)

    def every(self, name: str) -> Iterator[tuple[str, Collection]]:
        """Every (resource id, collection) of index `name` (pages through the listing)."""
        prefix = collection_prefix(name)
        offset = 0
        while True:
            listed = self._client.list_collections(limit=_LIST_PAGE, offset=offset)
            for collection in listed:
                meta = collection.metadata or {}
                if collection.name.startswith(prefix) and meta.get(INDEX_KEY) == name:
                    yield str(meta.get(RESOURCE_KEY)), collection
            if len(listed) < _LIST_PAGE:
                return
            offset += _LIST_PAGE

    def scoped(self, name: str, scope: ScopeFilter | None) -> list[tuple[str, Collection]]:
        """The collections a scope can reach: one per resource id, or all of the index."""
        if scope is not None and scope.resource_id is not None:
            collection = self.get(name, scope.resource_id, create=False)
            return [] if collection is None else [(scope.resource_id, collection)]
        return list(self.every(name))

    def size(self, name: str, resource_id: str) -> int:
        """About how many vectors the collection holds (a hint: an upper bound).

        Counted on first ask only (a thread-scoped search): embedded Chroma's first
        `count()` of a collection loads it and took 0.7 s at 100k vectors, more than the
        first query itself; resource-scoped searches and writes never need it.
        """
        key = (name, resource_id)
        with self._lock:
            known = self._sizes.get(key)
        if known is not None:
            return known
        counted = sum(self.each(name, ScopeFilter(resource_id=resource_id), _count))
        with self._lock:
            return self._sizes.setdefault(key, counted)

    def grew(self, name: str, resource_id: str, n: int) -> None:
        """Record `n` more vectors written (an upsert may replace: still a hint only)."""
        with self._lock:
            key = (name, resource_id)
            if key in self._sizes:  # else counted when first asked, writes included
                self._sizes[key] += n

    def max_batch(self) -> int:
        """The client's largest batch (asked once)."""
        if self._max_batch is None:
            self._max_batch = max(1, int(self._client.get_max_batch_size()))
        return self._max_batch

    def rows(
        self, name: str, scope: ScopeFilter | None, *, metadata: bool, embeddings: bool, page: int
    ) -> Iterator[Row]:
        """Pages through the rows inside `scope`, `page` at most per `get`.

        Metadata is empty and the embedding None unless asked for.
        """
        where = thread_where(scope) if scope is not None else None
        include: Include = []
        if metadata:
            include.append("metadatas")
        if embeddings:
            include.append("embeddings")
        size = min(page, self.max_batch())
        for resource_id, collection in self.scoped(name, scope):
            for result in self._pages(
                name, resource_id, collection, where=where, include=include, size=size
            ):
                ids = result["ids"]
                metadatas = result["metadatas"] or [{} for _ in ids]
                vectors = result["embeddings"] if embeddings else None
                for i, vector_id in enumerate(ids):
                    yield vector_id, metadatas[i], None if vectors is None else vectors[i]

    def each(
        self,
        name: str,
        scope: ScopeFilter | None,
        use: Callable[[str, Collection], _T],
    ) -> Iterator[_T]:
        """`use(resource id, collection)` for each collection `scope` reaches.

        A cached collection dropped since (a forget by another engine or process on the
        same folder: chromadb raises `NotFoundError`) is looked up again by name: gone,
        it is skipped; written anew since (another collection under its name), that one
        is used.
        """
        from chromadb.errors import NotFoundError

        for resource_id, collection in self.scoped(name, scope):
            try:
                yield use(resource_id, collection)
                continue
            except NotFoundError:
                self.forget(name, resource_id)
            again = self.get(name, resource_id, create=False)
            if again is None or again.id == collection.id:
                continue
            with suppress(NotFoundError):  # dropped once more meanwhile: gone
                yield use(resource_id, again)

    def _pages(
        self,
        name: str,
        resource_id: str,
        collection: Collection,
        *,
        where: Where | None,
        include: Include,
        size: int,
    ) -> Iterator[GetResult]:
        """`_pages` of the collection; of its new self if it was dropped before the first."""
        from chromadb.errors import NotFoundError

        read: Collection | None = collection
        while read is not None:
            started = False
            try:
                for result in _pages(read, where, include, size, self._delays):
                    started = True
                    yield result
                return
            except NotFoundError:  # dropped since cached (see `each`)
                self.forget(name, resource_id)
                if started:
                    return  # dropped half way through: the rest is gone
            again = self.get(name, resource_id, create=False)
            read = None if again is None or again.id == read.id else again

    def clear(self) -> None:
        """Forget every cached handle."""
        with self._lock:
            self._handles.clear()
            self._sizes.clear()


def _count(_: str, collection: Collection) -> int:
    return int(collection.count())


def _pages(
    collection: Collection,
    where: Where | None,
    include: Include,
    size: int,
    delays: tuple[float, ...],
) -> Iterator[GetResult]:
    """`collection.get` results of at most `size` rows: every row matching `where`.

    With a filter, the matching ids are listed once (ids only), then read by id: Chroma
    evaluates `where` again for every `offset` page and skips what came before, so
    paging a long thread by offset grows with n^2 / size.
    """
    if where is None:
        offset = 0
        while True:
            result = read_retrying(
                partial(collection.get, limit=size, offset=offset, include=include), delays
            )
            yield result
            if len(result["ids"]) < size:
                return
            offset += size
    ids = read_retrying(partial(collection.get, where=where, include=[]), delays)["ids"]
    for start in range(0, len(ids), size):
        page = ids[start : start + size]
        yield read_retrying(partial(collection.get, ids=page, include=include), delays)


def temporary_copy(folder: str) -> str:
    """A private copy of a Chroma folder, for a read-only open (`ChromaVectorIndex.persistent`)."""
    if not os.path.isdir(folder):
        raise StorageError(f"no Chroma index at {folder} to open read-only; check the path")
    from langchain_semantic_recall.vectors.chroma_snapshots import FOLDER

    sweep_copies()
    copy = tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{os.getpid()}-")
    # The snapshots are read in place (`ColdSnapshots`); Chroma's file is copied apart.
    skip = shutil.ignore_patterns(FOLDER, f"{SQLITE_FILE}*")
    try:
        _hold(copy)
        shutil.copytree(
            folder, copy, dirs_exist_ok=True, copy_function=shutil.copyfile, ignore=skip
        )
        _writable(copy)  # copytree kept the folders' read-only modes
        source = Path(folder) / SQLITE_FILE
        if source.is_file() and not copy_chroma_file(source, Path(copy) / SQLITE_FILE):
            # A journal stays beside it (a writer stopped mid-write, or writes on and on):
            # copied with it, as before, so Chroma rolls the copy back to a whole state.
            logger.warning("Chroma's file in %s kept changing while it was copied", folder)
            for name in (SQLITE_FILE, f"{SQLITE_FILE}-journal"):
                if (Path(folder) / name).is_file():
                    shutil.copyfile(Path(folder) / name, Path(copy) / name)
    except OSError as exc:
        remove_copy(copy)
        raise StorageError(
            f"cannot copy the read-only Chroma index {folder} to {copy} ({exc}); free space "
            "in the temporary folder (set TMPDIR) or open a writable copy of the store"
        ) from exc
    return copy


def sweep_copies(root: str | None = None) -> list[str]:
    """Delete the read-only copies that processes killed before their exit left behind.

    A copy holds the whole Chroma folder: every message's text, and what a forget left
    until `purge`. It is removed with its index or at exit, which a process stopped by
    SIGKILL (or a library user's SIGTERM) never reaches. Its process holds a lock on a
    file inside it for as long as it uses it (the system drops the lock when the process
    ends, whatever ends it): a copy of this user whose lock is free is deleted (on POSIX;
    elsewhere none is). Called by every read-only open and by `purge`.

    Args:
        root: The temporary folder (default: `tempfile.gettempdir()`).

    Returns:
        The folders deleted.
    """
    if os.name != "posix":
        return []
    root = root or tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    swept: list[str] = []
    for name in names:
        path = os.path.join(root, name)
        if not name.startswith(COPY_PREFIX) or path in _HELD or not _abandoned(path):
            continue
        try:
            _writable(path)
            shutil.rmtree(path)
        except OSError:
            logger.warning("could not delete the abandoned read-only copy %s", path, exc_info=True)
        else:
            swept.append(path)
    if swept:
        logger.warning("deleted %d read-only copies left by killed processes", len(swept))
    return swept


def remove_copy(copy: str) -> None:
    """Delete a read-only copy this process made, and release its lock."""
    fd = _HELD.pop(copy, None)
    _writable(copy)
    shutil.rmtree(copy, ignore_errors=True)
    if fd is not None:
        os.close(fd)


def _writable(copy: str) -> None:
    """Make a copy's folders writable again, so that it can be deleted.

    `copytree` gives each folder the store's read-only mode; a copy it left half made (a
    full temporary folder) kept them, and then the text in it, for good.
    """
    for root, _dirs, _files in os.walk(copy):
        with suppress(OSError):
            os.chmod(root, 0o700)


def _hold(copy: str) -> None:
    """Lock the copy's lock file for as long as this process uses the copy (POSIX)."""
    if os.name != "posix":
        return
    import fcntl

    fd = os.open(os.path.join(copy, _COPY_LOCK), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _HELD[copy] = fd


def _abandoned(path: str) -> bool:
    """Whether a copy is this user's and no process holds its lock (its maker is gone).

    A copy without a lock file (made by an earlier version, or being made right now)
    is left alone.
    """
    import fcntl

    try:
        if os.lstat(path).st_uid != os.getuid():
            return False
        fd = os.open(os.path.join(path, _COPY_LOCK), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its process is alive
    finally:
        os.close(fd)  # (releases ours)
    return True
