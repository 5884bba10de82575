"""Vector index: one vector per message (or per chunk of a long message), with metadata.

A backend hosts named indexes (a Chroma collection per index name). As in LangGraph's
`BaseStore`, every public method is concrete: it checks its arguments once (the index
name, `k`, the delete selectors, the batch size) and calls one small hook that does the
storage work only:

| public (sync / async)          | hook           | a backend                     |
|--------------------------------|----------------|-------------------------------|
| `open` / `aopen`               | `_open`        | implements it                 |
| `upsert` / `aupsert`           | `_upsert`      | implements it                 |
| `query` / `aquery`             | `_query`       | implements it                 |
| `nearest` / `anearest`         | `_nearest`     | may (default: `query`)        |
| `delete` / `adelete`           | `_delete`      | implements it                 |
| `message_ids` / `amessage_ids` | `_message_ids` | implements it                 |
| `export` / `aexport`           | `_export`      | implements it if it can list  |
| `count` / `acount`             | `_count`       | may (default: count `export`) |
| `compact` / `acompact`         | `_compact`     | implements it if it can erase |

Async twins run the sync method in an executor (`run_in_executor`). Scores are cosine
similarity clipped to [0, 1] on every backend, so a threshold means the same everywhere.
A wrapper that forwards every call to another index (the tests' recorders) may override
the public methods instead of the hooks: the wrapped index still checks the arguments.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import ClassVar, Final

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.errors import (  # ExportNotSupportedError: named here too
    CompactNotSupportedError,
    ExportNotSupportedError,
    InvalidInputError,
)
from langchain_semantic_recall.fusion import best_per_message
from langchain_semantic_recall.options import check_index_name
from langchain_semantic_recall.records import CompactResult, ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.rows import chunk_id, record_from_metadata

__all__ = [
    "DEFAULT_EXPORT_BATCH",
    "ExportNotSupportedError",
    "VectorIndex",
    "chunk_id",
    "has_work",
    "record_from_metadata",
]

logger = logging.getLogger(__name__)

DEFAULT_EXPORT_BATCH: Final = 1000
"""Vectors read per round trip by `export` unless told otherwise."""


class VectorIndex:
    """Host of named vector indexes: concrete checked methods over small storage hooks.

    Setup (any backend; the engine calls `open` for you):

    ```python
    index = InMemoryVectorIndex()
    index.open("minilm-384", dimension=384, model="all-MiniLM-L6-v2")
    ```

    Sync use:

    ```python
    index.upsert("minilm-384", records)
    hits = index.query("minilm-384", vector, k=4, scope=ScopeFilter(resource_id="u1"))
    everything = list(index.export("minilm-384"))
    ```

    Async use:

    ```python
    hits = await index.aquery("minilm-384", vector, k=4, scope=scope)
    async for record in index.aexport("minilm-384", scope):
        ...
    ```

    A new backend subclasses this class and implements the hooks (`_open`, `_upsert`,
    `_query`, `_delete`, `_message_ids`, and `_export` when it can list vectors);
    it runs `tests/conformance/vector_suite.py`. The hooks raise `NotImplementedError`
    rather than being abstract (as LangGraph's `BaseCheckpointSaver` does) so that a
    forwarding wrapper, which overrides the public methods, needs none of them.
    """

    supports_compact: ClassVar[bool] = False
    """Whether `compact` can erase the bytes deleted vectors left behind."""

    # -- public, checked methods -----------------------------------------------------------

    def open(self, name: str, *, dimension: int, model: str) -> None:
        """Create the index if missing (cosine space), recording model and dimension.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: `dimension` is not an int >= 1, or `model` is empty.
            EmbeddingMismatchError: the index exists with another model or dimension.
        """
        check_index_name(name)
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InvalidInputError(f"dimension must be an int >= 1, got {dimension!r}")
        if not isinstance(model, str) or not model:
            raise InvalidInputError(f"model must be a non-empty string, got {model!r}")
        self._open(name, dimension=dimension, model=model)

    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write vectors; an existing id is overwritten, never duplicated.

        Within one call a repeated id keeps its last record. Nothing to write is a no-op.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: the index was never opened (backends that need `open`).
            EmbeddingMismatchError: a vector has another dimension than the index.
        """
        check_index_name(name)
        if records:
            self._upsert(name, records)

    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The `k` most similar vectors inside `scope`, best first.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: `k` is not an int >= 1, or `scope` is not a ScopeFilter.
            EmbeddingMismatchError: the vector has another dimension than the index.
        """
        _check_search(name, k, scope)
        return self._query(name, vector, k=k, scope=scope)

    def nearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """(message id, similarity) for the `k` most similar vectors in `scope`, best first.

        One entry per message (its best chunk): what a search ranks. Unlike `query` it
        gives no thread ids, so a backend may skip reading metadata (Chroma does, in
        resource scope); the engine reads the messages through the storage, in `scope`.

        Raises:
            the errors of `query`.
        """
        _check_search(name, k, scope)
        return self._nearest(name, vector, k=k, scope=scope)

    def delete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the vectors matching every given selector (all chunks of a message).

        Selectors combine with AND, so a delete never reaches wider than each of them. An
        empty `message_ids` deletes nothing.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: no selector was given (that would delete everything), or
                `message_ids` is a single string instead of a sequence of ids.
        """
        check_index_name(name)
        if isinstance(message_ids, str):
            raise InvalidInputError(
                f"message_ids must be a sequence of ids, got the string {message_ids!r}: "
                "wrap a single id in a list"
            )
        if not has_work(thread_id, resource_id, message_ids):
            return
        ids = None if message_ids is None else sorted(set(message_ids))
        self._delete(name, thread_id=thread_id, resource_id=resource_id, message_ids=ids)

    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Ids of the messages that have at least one vector (for stats and repair)."""
        check_index_name(name)
        _check_scope(scope)
        return self._message_ids(name, scope)

    def count(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Number of vectors (chunks, not messages) in the index, optionally inside `scope`.

        An index that does not exist holds 0 vectors.

        Raises:
            ExportNotSupportedError: the backend can neither count nor list its vectors.
        """
        check_index_name(name)
        _check_scope(scope)
        return self._count(name, scope)

    def export(
        self,
        name: str,
        scope: ScopeFilter | None = None,
        *,
        batch_size: int = DEFAULT_EXPORT_BATCH,
    ) -> Iterator[VectorRecord]:
        """Every vector of the index with its metadata and embedding, chunks included.

        Records come `batch_size` at a time from the backend (one round trip each), in
        no particular order; a chunk has the id `<message_id>#<n>`. Only vectors inside
        `scope` are yielded (every vector when it is None): the backend filters, and
        this method drops whatever else it returned (defence in depth). Arguments are
        checked at the call; reading starts with the first record. An index that does not
        exist yields nothing.

        Example:
            ```python
            for record in index.export("minilm-384", ScopeFilter(resource_id="alice")):
                target.upsert("minilm-384", [record])
            ```

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: `batch_size` is not an int >= 1.
            ExportNotSupportedError: the backend cannot list its vectors.
        """
        check_index_name(name)
        _check_scope(scope)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be an int >= 1, got {batch_size!r}")
        return _inside(name, scope, self._export(name, scope, batch_size=batch_size))

    def compact(self, name: str) -> CompactResult:
        """Erase what deleted vectors of index `name` left behind (files, logs, graphs).

        Run it after a forget (`SemanticRecall.purge` does), with no other writer. Every
        surviving vector is kept; what is guaranteed is the backend's (see
        `docs/data-handling.md`).

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            CompactNotSupportedError: The backend cannot (`supports_compact` is False).
        """
        check_index_name(name)
        if not self.supports_compact:
            raise CompactNotSupportedError(
                f"{type(self).__name__} cannot erase the bytes of deleted vectors; erase them "
                "with the vector store's own tools (see docs/data-handling.md)"
            )
        return self._compact(name)

    def close(self) -> None:
        """Release clients (a no-op unless the backend holds some)."""

    # -- async twins -----------------------------------------------------------------------

    async def aopen(self, name: str, *, dimension: int, model: str) -> None:
        """Async twin of `open`."""
        await run_in_executor(None, lambda: self.open(name, dimension=dimension, model=model))

    async def aupsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Async twin of `upsert`."""
        await run_in_executor(None, self.upsert, name, records)

    async def aquery(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """Async twin of `query`."""
        return await run_in_executor(None, lambda: self.query(name, vector, k=k, scope=scope))

    async def anearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """Async twin of `nearest`."""
        return await run_in_executor(None, lambda: self.nearest(name, vector, k=k, scope=scope))

    async def adelete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        """Async twin of `delete`."""
        await run_in_executor(
            None,
            lambda: self.delete(
                name, thread_id=thread_id, resource_id=resource_id, message_ids=message_ids
            ),
        )

    async def amessage_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Async twin of `message_ids`."""
        return await run_in_executor(None, self.message_ids, name, scope)

    async def acount(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Async twin of `count`."""
        return await run_in_executor(None, self.count, name, scope)

    async def acompact(self, name: str) -> CompactResult:
        """Async twin of `compact`."""
        return await run_in_executor(None, self.compact, name)

    def aexport(
        self,
        name: str,
        scope: ScopeFilter | None = None,
        *,
        batch_size: int = DEFAULT_EXPORT_BATCH,
    ) -> AsyncIterator[VectorRecord]:
        """Async twin of `export`: an async iterator (not a coroutine: no `await`).

        Arguments are checked at the call, as by `export`; then each batch of
        `batch_size` records is read in an executor as the iteration reaches it, so a
        large index streams without blocking the event loop or filling memory:

        ```python
        async for record in index.aexport("minilm-384", ScopeFilter(thread_id="t1")):
            ...
        ```

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: `batch_size` is not an int >= 1.
            ExportNotSupportedError: the backend cannot list its vectors.
        """
        return _in_executor(self.export(name, scope, batch_size=batch_size), batch_size)

    # -- storage hooks: a backend implements these (arguments already checked) -------------

    def _open(self, name: str, *, dimension: int, model: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement _open")

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write a non-empty batch of records."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _upsert")

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The top `k` (`k >= 1`) inside `scope`, best first."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _query")

    def _nearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """`query`'s hits, best per message (through `query`, which wrappers forward)."""
        return best_per_message(self.query(name, vector, k=k, scope=scope))

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        """Delete what matches every selector.

        At least one selector is set; `message_ids` is sorted, unique and not empty.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement _delete")

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        raise NotImplementedError(f"{type(self).__name__} does not implement _message_ids")

    def _compact(self, name: str) -> CompactResult:
        """Erase deleted vectors' bytes (override with `supports_compact = True`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _compact")

    def _count(self, name: str, scope: ScopeFilter | None) -> int:
        """Counts what `export` lists; override with something cheaper."""
        return sum(1 for _ in self.export(name, scope))

    def _export(
        self, name: str, scope: ScopeFilter | None, *, batch_size: int
    ) -> Iterator[VectorRecord]:
        """Records inside `scope`, read `batch_size` at a time.

        Raise `ExportNotSupportedError` at the call (not on the first `next`)
        when the vectors cannot be listed, as this default does.
        """
        raise ExportNotSupportedError(
            f"{type(self).__name__} cannot list its vectors, so index {name!r} cannot be "
            "exported: embed the messages again instead (semantic-recall migrate --vectors "
            "reembed, or SemanticRecall.reindex)"
        )


def has_work(
    thread_id: str | None, resource_id: str | None, message_ids: Sequence[str] | None
) -> bool:
    """The shared guard of every `delete`: whether there is anything to delete.

    `VectorIndex.delete` applies it before calling a backend's `_delete`.

    Raises:
        InvalidInputError: no selector was given (that would delete everything).
    """
    if thread_id is None and resource_id is None and message_ids is None:
        raise InvalidInputError(
            "delete needs thread_id, resource_id or message_ids; it never empties an index"
        )
    return message_ids is None or len(message_ids) > 0


def _check_search(name: str, k: object, scope: object) -> None:
    """The arguments of `query` and `nearest`: a legal name, `k` >= 1, a scope."""
    check_index_name(name)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInputError(f"k must be at least 1, got {k!r}")
    _check_scope(scope, required=True)


def _check_scope(scope: object, *, required: bool = False) -> None:
    if scope is None and not required:
        return
    if not isinstance(scope, ScopeFilter):
        raise InvalidInputError(
            f"scope must be a ScopeFilter{'' if required else ' or None'}, got {scope!r}"
        )


def _inside(
    name: str, scope: ScopeFilter | None, records: Iterator[VectorRecord]
) -> Iterator[VectorRecord]:
    """`records` inside `scope`; anything else is dropped with a warning."""
    for record in records:
        if scope is None or scope.admits(record.resource_id, record.thread_id):
            yield record
        else:
            logger.warning("dropped exported vector %r of %r outside the scope", record.id, name)


def _take(records: Iterator[VectorRecord], n: int) -> list[VectorRecord]:
    return list(itertools.islice(records, n))


async def _in_executor(records: Iterator[VectorRecord], size: int) -> AsyncIterator[VectorRecord]:
    """Iterate `records` in an executor, `size` at a time, as an async iterator."""
    try:
        while batch := await run_in_executor(None, _take, records, size):
            for record in batch:
                yield record
            if len(batch) < size:
                return
    finally:
        close = getattr(records, "close", None)
        if callable(close):
            with contextlib.suppress(ValueError):  # still running in a cancelled executor
                close()
