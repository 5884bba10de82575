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
| `vector_ids` / `avector_ids`   | `_vector_ids`  | may (default: list `export`)  |
| `export` / `aexport`           | `_export`      | implements it if it can list  |
| `count` / `acount`             | `_count`       | may (default: count `export`) |
| `compact` / `acompact`         | `_compact`     | implements it if it can erase |

Async twins check the same way and await the hook's async twin (`_aopen`...), which runs
the sync hook in the default executor unless a backend overrides it (`vectors.hooks`).
Scores are cosine similarity clipped to [0, 1] on every backend, so a threshold means the
same everywhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import ClassVar

from langchain_semantic_recall.errors import (
    CompactNotSupportedError,
    ExportNotSupportedError,
)
from langchain_semantic_recall.options import check_index_name
from langchain_semantic_recall.records import (
    CompactResult,
    HeldVectors,
    ScopeFilter,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.vectors.arguments import (
    check_delete,
    check_export,
    check_open,
    check_scope,
    check_search,
    has_work,
    inside,
    inside_async,
)
from langchain_semantic_recall.vectors.hooks import DEFAULT_EXPORT_BATCH, VectorHooks
from langchain_semantic_recall.vectors.rows import chunk_id, record_from_metadata
from langchain_semantic_recall.vectors.write_behind import (
    Stored,
    after_writes,
    after_writes_async,
    held,
    read_after,
)

__all__ = [
    "DEFAULT_EXPORT_BATCH",
    "ExportNotSupportedError",
    "VectorIndex",
    "chunk_id",
    "has_work",
    "record_from_metadata",
]


class VectorIndex(VectorHooks):
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

    A new backend subclasses this class and implements the abstract hooks of
    `VectorHooks` (`_open`, `_upsert`, `_query`, `_delete`, `_message_ids`, and `_export`
    when it can list vectors); it runs `tests/conformance/vector_suite.py`
    (`docs/writing-a-backend.md`).
    """

    supports_compact: ClassVar[bool] = False
    """Whether `compact` can erase the bytes deleted vectors left behind."""

    def writes_held(self) -> AbstractContextManager[None]:
        """A block (an engine call) whose writes behind start once it ends."""
        return held(self._behind)

    def flush(self) -> None:
        """Wait for the writes `upsert(behind=True)` queued (every other method does)."""
        self._flush()

    async def aflush(self) -> None:
        """Async twin of `flush`."""
        await self._aflush()

    def write_failures(self, resource_id: str) -> list[str]:
        """Why vectors of `resource_id` written behind failed since last asked (each once).

        `index` reports them (`IndexResult.error`); pending ones are not waited for.

        Args:
            resource_id: The resource whose failures to take.
        """
        return [] if self._behind is None else self._behind.failures(resource_id)

    # -- public, checked methods -----------------------------------------------------------

    def open(self, name: str, *, dimension: int, model: str) -> bool:
        """Create the index if missing (cosine space), recording model and dimension.

        Returns:
            True when this call created it (False: it existed, or the backend can't tell).

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            dimension: The vectors' length (>= 1).
            model: The embedding model's name, recorded with the index.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: `dimension` is not an int >= 1, or `model` is empty.
            EmbeddingMismatchError: the index exists with another model or dimension.
        """
        check_open(name, dimension, model)
        return bool(self._open(name, dimension=dimension, model=model))

    def upsert(
        self,
        name: str,
        records: Sequence[VectorRecord],
        *,
        behind: bool = False,
        stored: Stored | None = None,
    ) -> None:
        """Write vectors; an existing id is overwritten, never duplicated.

        Within one call a repeated id keeps its last record. Nothing to write is a no-op.

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            records: The vectors with their metadata (a chunk has the id `<message_id>#<n>`).
            behind: Allow writing them just after the call returns (`vectors.write_behind`:
                a backend that can, for a batch of up to 16; every other call waits).
            stored: With `behind`, which of them the storage still holds where they were,
                asked once they are written (`write_behind.Stored`): the vectors of the
                others (forgotten or moved meanwhile by another process) are deleted.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: the index was never opened (backends that need `open`).
            EmbeddingMismatchError: a vector has another dimension than the index.
        """
        check_index_name(name)
        if not records:
            return
        if behind and self._behind is not None and self._behind.takes(records):
            self._check_upsert(name, records)
            self._behind.put(name, records, self._upsert, self._drop_messages, stored)
            return
        self.flush()
        self._upsert(name, records)

    @after_writes
    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The `k` most similar vectors inside `scope`, best first.

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            vector: The query vector.
            k: How many hits (>= 1).
            scope: Which vectors may be returned.

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: `k` is not an int >= 1, or `scope` is not a ScopeFilter.
            EmbeddingMismatchError: the vector has another dimension than the index.
        """
        check_search(name, k, scope)
        return self._query(name, vector, k=k, scope=scope)

    @after_writes
    def nearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """(message id, similarity) for the `k` most similar vectors in `scope`, best first.

        One entry per message (its best chunk): what a search ranks. Unlike `query` it
        gives no thread ids, so a backend may skip reading metadata (Chroma does, in
        resource scope); the engine reads the messages through the storage, in `scope`.

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            vector: The query vector.
            k: How many vectors to read (>= 1).
            scope: Which vectors may be returned.

        Raises:
            the errors of `query`.
        """
        check_search(name, k, scope)
        return self._nearest(name, vector, k=k, scope=scope)

    @after_writes
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

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            thread_id: Only this thread's vectors.
            resource_id: Only this resource's vectors.
            message_ids: Only these messages' vectors (every chunk).

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            InvalidInputError: no selector was given (that would delete everything), or
                `message_ids` is a single string instead of a sequence of ids.
        """
        ids = check_delete(name, thread_id, resource_id, message_ids)
        if ids is None or ids:
            self._delete(name, thread_id=thread_id, resource_id=resource_id, message_ids=ids)

    @after_writes
    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Ids of the messages that have at least one vector (for stats and repair).

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            scope: Only vectors inside it; None means every vector.
        """
        check_index_name(name)
        check_scope(scope)
        return self._message_ids(name, scope)

    @after_writes
    def vector_ids(self, name: str, scope: ScopeFilter | None = None) -> HeldVectors:
        """Each message's vector ids inside `scope`, and which carry message metadata.

        What `stats` and `reindex` compare with the stored messages: a message's vectors
        beyond the chunks its text yields now (left by an edit to a shorter text in 0.3.0
        or earlier), and vectors written before 0.3 (no metadata). An index that does not
        exist holds none.

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            scope: Only vectors inside it; None means every vector.

        Raises:
            ExportNotSupportedError: the backend can neither list its vectors nor say this.
        """
        check_index_name(name)
        check_scope(scope)
        return self._vector_ids(name, scope)

    @after_writes
    def count(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Number of vectors (chunks, not messages) in the index, optionally inside `scope`.

        An index that does not exist holds 0 vectors.

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            scope: Only vectors inside it; None means every vector.

        Raises:
            ExportNotSupportedError: the backend can neither count nor list its vectors.
        """
        check_index_name(name)
        check_scope(scope)
        return self._count(name, scope)

    @after_writes
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

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).
            scope: Only vectors inside it; None means every vector.
            batch_size: Vectors read per round trip (>= 1).

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
        check_export(name, scope, batch_size)
        return inside(name, scope, self._export(name, scope, batch_size=batch_size))

    @after_writes
    def compact(self, name: str) -> CompactResult:
        """Erase what deleted vectors of index `name` left behind (files, logs, graphs).

        Run it after a forget (`SemanticRecall.purge` does), with no other writer. Every
        surviving vector is kept; what is guaranteed is the backend's (see
        `docs/data-handling.md`).

        Args:
            name: The index name (3-512 characters of `[A-Za-z0-9._-]`).

        Raises:
            InvalidOptionError: `name` is not a legal index name.
            CompactNotSupportedError: The backend cannot (`supports_compact` is False).
        """
        self._check_compact(name)
        return self._compact(name)

    def _check_compact(self, name: str) -> None:
        check_index_name(name)
        if not self.supports_compact:
            raise CompactNotSupportedError(
                f"{type(self).__name__} cannot erase the bytes of deleted vectors; erase them "
                "with the vector store's own tools (see docs/data-handling.md)"
            )

    @after_writes
    def close(self) -> None:
        """Release clients (a no-op unless the backend holds some); safe to call twice."""
        self._close()

    # -- async twins: the same checks, then the hook's async twin --------------------------

    async def aopen(self, name: str, *, dimension: int, model: str) -> bool:
        """Async twin of `open`."""
        check_open(name, dimension, model)
        return bool(await self._aopen(name, dimension=dimension, model=model))

    async def aupsert(
        self,
        name: str,
        records: Sequence[VectorRecord],
        *,
        behind: bool = False,
        stored: Stored | None = None,
    ) -> None:
        """Async twin of `upsert`, which always writes at the call (`behind`, `stored` ignored).

        A worker thread writing behind holds the GIL while the event loop waits for it
        (embedded Chroma; `benchmarks/perf_loop.py`: worst stall 48-78 ms against 22 ms),
        where the async hook writes in pieces that let the loop run between them.
        """
        del behind, stored  # (kept for the twins' one signature)
        check_index_name(name)
        if records:
            await self.aflush()
            await self._aupsert(name, records)

    @after_writes_async
    async def aquery(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """Async twin of `query`."""
        check_search(name, k, scope)
        return await self._aquery(name, vector, k=k, scope=scope)

    @after_writes_async
    async def anearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """Async twin of `nearest`."""
        check_search(name, k, scope)
        return await self._anearest(name, vector, k=k, scope=scope)

    @after_writes_async
    async def adelete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        """Async twin of `delete`."""
        ids = check_delete(name, thread_id, resource_id, message_ids)
        if ids is None or ids:
            await self._adelete(name, thread_id=thread_id, resource_id=resource_id, message_ids=ids)

    @after_writes_async
    async def amessage_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Async twin of `message_ids`."""
        check_index_name(name)
        check_scope(scope)
        return await self._amessage_ids(name, scope)

    @after_writes_async
    async def avector_ids(self, name: str, scope: ScopeFilter | None = None) -> HeldVectors:
        """Async twin of `vector_ids`."""
        check_index_name(name)
        check_scope(scope)
        return await self._avector_ids(name, scope)

    @after_writes_async
    async def acount(self, name: str, scope: ScopeFilter | None = None) -> int:
        """Async twin of `count`."""
        check_index_name(name)
        check_scope(scope)
        return await self._acount(name, scope)

    @after_writes_async
    async def acompact(self, name: str) -> CompactResult:
        """Async twin of `compact`."""
        self._check_compact(name)
        return await self._acompact(name)

    @after_writes_async
    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self._aclose()

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
        check_export(name, scope, batch_size)
        if self._behind is None or not self._behind.pending:
            return inside_async(name, scope, self._aexport(name, scope, batch_size=batch_size))
        # the backend's reads start once the writes behind are written, without blocking
        later = partial(self._aexport, name, scope, batch_size=batch_size)
        return inside_async(name, scope, read_after(self.aflush, later))
