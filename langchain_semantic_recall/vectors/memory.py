"""In-memory vector index: exact cosine search with numpy (tests, notebooks, small data)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex, has_work


@dataclass
class _Index:
    model: str
    dimension: int
    records: dict[str, VectorRecord] = field(default_factory=dict)
    unit: dict[str, np.ndarray] = field(default_factory=dict)


class InMemoryVectorIndex(VectorIndex):
    """Exact search over every vector in the scope; thread-safe; gone with the process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._indexes: dict[str, _Index] = {}

    def _get(self, name: str) -> _Index:
        index = self._indexes.get(name)
        if index is None:
            raise KeyError(f"index {name!r} was not opened")
        return index

    def open(self, name: str, *, dimension: int, model: str) -> None:
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                self._indexes[name] = _Index(model=model, dimension=dimension)
            elif (index.model, index.dimension) != (model, dimension):
                raise EmbeddingMismatchError(
                    f"index {name!r} holds {index.dimension}-d vectors of {index.model!r}, "
                    f"not {dimension}-d vectors of {model!r}: use another index_name, or "
                    "reindex into a new index"
                )

    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        with self._lock:
            index = self._get(name)
            for record in records:
                vector = np.asarray(record.vector, dtype=np.float32)
                if vector.shape != (index.dimension,):
                    raise EmbeddingMismatchError(
                        f"vector of length {vector.size} for a {index.dimension}-d index {name!r}"
                    )
                norm = float(np.linalg.norm(vector))
                index.records[record.id] = record
                index.unit[record.id] = vector / norm if norm else vector

    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        with self._lock:
            index = self._get(name)
            ids = [i for i, r in index.records.items() if scope.admits(r.resource_id, r.thread_id)]
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

    def delete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        if not has_work(thread_id, resource_id, message_ids):
            return
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

    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        with self._lock:
            index = self._indexes.get(name)
            if index is None:
                return set()
            return {
                r.message_id
                for r in index.records.values()
                if scope is None or scope.admits(r.resource_id, r.thread_id)
            }
