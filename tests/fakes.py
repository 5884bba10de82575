"""The one set of test fakes: a deterministic embedder and recording backend wrappers."""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_semantic_recall.records import (
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.storage.base import MessageStorage, ThreadInfo
from langchain_semantic_recall.vectors.base import VectorIndex

_WORD = re.compile(r"[a-z0-9]+")


class FakeEmbeddings(Embeddings):
    """Bag-of-words hashed into ``dimension`` buckets, L2-normalised.

    Similarity-preserving: texts sharing words are close, texts sharing none are
    orthogonal-ish. Deterministic across processes (sha1, not ``hash``). Records calls.
    """

    def __init__(self, dimension: int = 128, model: str = "fake-bow") -> None:
        self.dimension: int | None = dimension
        self.size = dimension
        self.model = model
        self.calls: list[list[str]] = []
        self.fail: Exception | None = None
        self._lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        size = self.size
        values = [0.0] * size
        for word in _WORD.findall(text.lower()):
            digest = hashlib.sha1(word.encode()).digest()
            values[int.from_bytes(digest[:4], "big") % size] += 1.0
        norm = math.sqrt(sum(v * v for v in values))
        if norm == 0:
            values[0] = 1.0
            return values
        return [v / norm for v in values]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.calls.append(list(texts))
        if self.fail is not None:
            raise self.fail
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    @property
    def embedded_texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


class RecordingStorage(MessageStorage):
    """Wraps a storage and records every call (name, arguments); can be made to fail."""

    def __init__(self, inner: MessageStorage) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}

    def _record(self, op: str, /, **kwargs: Any) -> None:
        self.calls.append((op, kwargs))
        if op in self.fail:
            raise self.fail[op]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def put(self, records: Sequence[MessageRecord]) -> list[StoredMessage]:
        self._record("put", records=list(records))
        return self.inner.put(records)

    def get_windows(
        self, message_ids: Sequence[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        self._record(
            "get_windows", message_ids=list(message_ids), before=before, after=after, scope=scope
        )
        return self.inner.get_windows(message_ids, before=before, after=after, scope=scope)

    def get_thread_owner(self, thread_id: str) -> str | None:
        self._record("get_thread_owner", thread_id=thread_id)
        return self.inner.get_thread_owner(thread_id)

    def list_messages(
        self,
        scope: ScopeFilter | None = None,
        *,
        after: tuple[str, int] | None = None,
        limit: int = 1000,
    ) -> list[StoredMessage]:
        self._record("list_messages", scope=scope, after=after, limit=limit)
        return self.inner.list_messages(scope, after=after, limit=limit)

    def list_threads(self, resource_id: str | None = None) -> list[ThreadInfo]:
        self._record("list_threads", resource_id=resource_id)
        return self.inner.list_threads(resource_id)

    def delete_thread(self, thread_id: str) -> int:
        self._record("delete_thread", thread_id=thread_id)
        return self.inner.delete_thread(thread_id)

    def delete_resource(self, resource_id: str) -> int:
        self._record("delete_resource", resource_id=resource_id)
        return self.inner.delete_resource(resource_id)

    def is_forgotten(self, thread_id: str) -> bool:
        self._record("is_forgotten", thread_id=thread_id)
        return self.inner.is_forgotten(thread_id)


class RecordingVectors(VectorIndex):
    """Wraps a vector index and records every call; can be made to fail."""

    def __init__(self, inner: VectorIndex) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}

    def _record(self, op: str, /, **kwargs: Any) -> None:
        self.calls.append((op, kwargs))
        if op in self.fail:
            raise self.fail[op]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.calls if n == name]

    def open(self, name: str, *, dimension: int, model: str) -> None:
        self._record("open", name=name, dimension=dimension, model=model)
        self.inner.open(name, dimension=dimension, model=model)

    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        self._record("upsert", name=name, records=list(records))
        self.inner.upsert(name, records)

    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        self._record("query", name=name, vector=list(vector), k=k, scope=scope)
        return self.inner.query(name, vector, k=k, scope=scope)

    def delete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        self._record(
            "delete",
            name=name,
            thread_id=thread_id,
            resource_id=resource_id,
            message_ids=message_ids,
        )
        self.inner.delete(
            name, thread_id=thread_id, resource_id=resource_id, message_ids=message_ids
        )

    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        self._record("message_ids", name=name, scope=scope)
        return self.inner.message_ids(name, scope)
