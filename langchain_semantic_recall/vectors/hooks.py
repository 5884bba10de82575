"""What a vector backend implements: protected hooks, called with checked arguments only.

`VectorIndex` (in `base`) is the public, checked surface; it subclasses this class. The
contract, the same as `storage.hooks.StorageHooks`:

- Every public method checks its arguments once, then calls one hook (`query` -> `_query`).
- Abstract hooks are what every backend must write: `_open`, `_upsert`, `_query`,
  `_delete`, `_message_ids`. The others are optional: a capability (`_export` when the
  backend can list its vectors, `_compact` behind `supports_compact`), or a default a
  backend may replace with something cheaper (`_nearest`, `_count`, `_vector_ids`).
- One async rule: `_a<hook>` runs `_<hook>` in the default executor unless a backend
  overrides it (embedded Chroma writes in pieces; see `vectors.chroma_writes`).

`docs/writing-a-backend.md` walks through a backend; its test is the conformance suite.
"""

from __future__ import annotations

import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Final

from langchain_semantic_recall.errors import ExportNotSupportedError
from langchain_semantic_recall.executor import run_in_executor
from langchain_semantic_recall.fusion import best_per_message
from langchain_semantic_recall.records import (
    CompactResult,
    HeldVectors,
    ScopeFilter,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.vectors.rows import collect_held
from langchain_semantic_recall.vectors.write_behind import Gate, WriteBehind

DEFAULT_EXPORT_BATCH: Final = 1000
"""Vectors read per round trip by `export` unless told otherwise."""


class VectorHooks(ABC):
    """The storage work a vector backend does; `VectorIndex` checks arguments first."""

    _behind: WriteBehind | None = None
    """Where a backend writing small batches after `upsert` returns queues them (`flush`)."""

    def _write_behind(self, gate: Gate | None, lane: str | None) -> None:
        """Write small batches after `upsert` returns (in `gate()`; `lane`: `WriteBehind`)."""
        self._behind = WriteBehind(gate, lane)

    def _check_upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """What a backend that writes behind checks at the call (default: nothing)."""
        del name, records

    def _drop_messages(self, name: str, resource_id: str, message_ids: list[str]) -> None:
        """Delete the vectors of messages of a write behind (`write_behind.Drop`)."""
        self._delete(name, thread_id=None, resource_id=resource_id, message_ids=message_ids)

    def _flush(self) -> None:
        if self._behind is not None:
            self._behind.settle()

    async def _aflush(self) -> None:
        if self._behind is not None:
            await self._behind.asettle()

    @abstractmethod
    def _open(self, name: str, *, dimension: int, model: str) -> bool | None:
        """Create the index if missing, or check its model and dimension.

        Return True when this call created it (the engine then warns if the store already
        holds messages, which the new index has no vectors for); None when it cannot tell.
        """

    @abstractmethod
    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write a non-empty batch of records."""

    @abstractmethod
    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The top `k` (`k >= 1`) inside `scope`, best first."""

    def _nearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        """`_query`'s hits, best per message (override when cheaper without metadata)."""
        return best_per_message(self._query(name, vector, k=k, scope=scope))

    @abstractmethod
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

    @abstractmethod
    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        """Ids of the messages with a vector inside `scope` (every one when None)."""

    def _vector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        """Each message's vector ids inside `scope`, read from `_export`; override cheaper.

        A backend that cannot list its vectors implements this hook (without it,
        `stats` and `reindex` raise `ExportNotSupportedError`).
        """
        try:
            listed = self._export(name, scope, batch_size=DEFAULT_EXPORT_BATCH)
        except ExportNotSupportedError as error:
            raise ExportNotSupportedError(
                f"{type(self).__name__} cannot list its vectors, so stats and reindex cannot "
                f"tell which vectors index {name!r} holds: implement its _vector_ids hook "
                "(docs/writing-a-backend.md)"
            ) from error
        return collect_held(
            (r.id, r.message_id, bool(r.metadata))
            for r in listed
            if scope is None or scope.admits_message(r)
        )

    def _compact(self, name: str) -> CompactResult:
        """Erase deleted vectors' bytes (override with `supports_compact = True`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _compact")

    def _count(self, name: str, scope: ScopeFilter | None) -> int:
        """Counts what `_export` lists; override with something cheaper."""
        listed = self._export(name, scope, batch_size=DEFAULT_EXPORT_BATCH)
        return sum(1 for r in listed if scope is None or scope.admits(r.resource_id, r.thread_id))

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

    def _close(self) -> None:  # noqa: B027 - optional: most backends hold nothing to release
        """Release clients the backend holds."""

    # --- async twins: by default the sync hook in the default executor ---------------------

    async def _aopen(self, name: str, *, dimension: int, model: str) -> bool | None:
        return await run_in_executor(
            None, lambda: self._open(name, dimension=dimension, model=model)
        )

    async def _aupsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        await run_in_executor(None, self._upsert, name, records)

    async def _aquery(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        return await run_in_executor(None, lambda: self._query(name, vector, k=k, scope=scope))

    async def _anearest(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[tuple[str, float]]:
        return await run_in_executor(None, lambda: self._nearest(name, vector, k=k, scope=scope))

    async def _adelete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        await run_in_executor(
            None,
            lambda: self._delete(
                name, thread_id=thread_id, resource_id=resource_id, message_ids=message_ids
            ),
        )

    async def _amessage_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        return await run_in_executor(None, self._message_ids, name, scope)

    async def _avector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        return await run_in_executor(None, self._vector_ids, name, scope)

    async def _acount(self, name: str, scope: ScopeFilter | None) -> int:
        return await run_in_executor(None, self._count, name, scope)

    async def _acompact(self, name: str) -> CompactResult:
        return await run_in_executor(None, self._compact, name)

    async def _aclose(self) -> None:
        await run_in_executor(None, self._close)

    def _aexport(
        self, name: str, scope: ScopeFilter | None, *, batch_size: int
    ) -> AsyncIterator[VectorRecord]:
        """`_export` read in the executor, `batch_size` records at a time.

        Like `_export`, raises `ExportNotSupportedError` at the call when the backend
        cannot list its vectors.
        """
        return _in_executor(self._export(name, scope, batch_size=batch_size), batch_size)


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
