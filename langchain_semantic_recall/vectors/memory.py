"""In-memory vector index: exact cosine search with numpy (tests, notebooks, small data).

The reference backend: each hook is a few lines over a dict; `VectorIndex` checks
the arguments and provides the async twins.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from langchain_semantic_recall.errors import EmbeddingMismatchError, InvalidInputError
from langchain_semantic_recall.records import (
    CompactResult,
    HeldVectors,
    ScopeFilter,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.rows import collect_held


@dataclass
class _Index:
    model: str
    dimension: int
    records: dict[str, VectorRecord] = field(default_factory=dict)
    unit: dict[str, np.ndarray] = field(default_factory=dict)


class InMemoryVectorIndex(VectorIndex):
    """Exact search over every vector in the scope; thread-safe; gone with the process.

    Setup:

    ```python
    index = InMemoryVectorIndex()
    memory = SemanticRecall(storage=InMemoryStorage(), vector_store=index, embeddings=e)
    ```

    Sync use:

    ```python
    index.upsert(name, records)
    hits = index.query(name, vector, k=4, scope=ScopeFilter(resource_id="alice"))
    ```

    Async use:

    ```python
    hits = await index.aquery(name, vector, k=4, scope=ScopeFilter(thread_id="t1"))
    ```
    """

    supports_compact = True

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._indexes: dict[str, _Index] = {}

    def _get(self, name: str) -> _Index:
        index = self._indexes.get(name)
        if index is None:
            raise InvalidInputError(
                f"vector index {name!r} was never opened: call open(name, dimension=..., "
                "model=...) first"
            )
        return index

    def _open(self, name: str, *, dimension: int, model: str) -> bool:
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                self._indexes[name] = _Index(model=model, dimension=dimension)
                return True
            if (index.model, index.dimension) != (model, dimension):
                raise EmbeddingMismatchError(
                    f"index {name!r} holds {index.dimension}-d vectors of {index.model!r}, "
                    f"not {dimension}-d vectors of {model!r}: use another index_name, or "
                    "reindex into a new index"
                )
            return False

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        with self._lock:
            index = self._get(name)
            for record in records:
                vector = np.asarray(record.vector, dtype=np.float32)
                if vector.shape != (index.dimension,):
                    raise EmbeddingMismatchError(
                        f"vector of length {vector.size} for a {index.dimension}-d index {name!r}"
                    )
                norm = float(np.linalg.norm(vector))
                # A copy of the vector: the caller's list may change, an export must not.
                index.records[record.id] = replace(record, vector=[float(x) for x in record.vector])
                index.unit[record.id] = vector / norm if norm else vector

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                return []
            ids = [i for i, r in index.records.items() if scope.admits_message(r)]
            if not ids:
                return []
            matrix = np.stack([index.unit[i] for i in ids])
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        sims = matrix @ (query / norm if norm else query)
        order = np.argsort(-sims, kind="stable")[:k]
        hits = []
        for position in order:
            record = index.records[ids[position]]
            hits.append(
                VectorHit(
                    id=record.id,
                    message_id=record.message_id,
                    thread_id=record.thread_id,
                    resource_id=record.resource_id,
                    score=min(1.0, max(0.0, float(sims[position]))),
                )
            )
        return hits

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        wanted = None if message_ids is None else set(message_ids)
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                return
            doomed = [
                i
                for i, r in index.records.items()
                if (thread_id is None or r.thread_id == thread_id)
                and (resource_id is None or r.resource_id == resource_id)
                and (wanted is None or r.message_id in wanted)
            ]
            for i in doomed:
                del index.records[i]
                del index.unit[i]

    def _in_scope(self, name: str, scope: ScopeFilter | None) -> list[VectorRecord]:
        """The records of `name` inside `scope` (all without one; none if no index)."""
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                return []
            return [r for r in index.records.values() if scope is None or scope.admits_message(r)]

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        return {r.message_id for r in self._in_scope(name, scope)}

    def _vector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        records = self._in_scope(name, scope)
        return collect_held((r.id, r.message_id, bool(r.metadata)) for r in records)

    def _count(self, name: str, scope: ScopeFilter | None) -> int:
        return len(self._in_scope(name, scope))

    def _export(
        self, name: str, scope: ScopeFilter | None, *, batch_size: int
    ) -> Iterator[VectorRecord]:
        # A snapshot taken at the call; each record gets its own copy of the vector.
        return (replace(r, vector=list(r.vector)) for r in self._in_scope(name, scope))

    def _compact(self, name: str) -> CompactResult:
        """Nothing to do: a deleted vector is dropped from the dict (nothing on disk)."""
        return CompactResult(backend=type(self).__name__, done=("nothing stored on disk",))
