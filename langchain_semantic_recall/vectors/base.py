"""Vector index: one vector per message (or per chunk of a long message), with metadata.

A backend hosts named indexes (a Chroma collection per index name). It implements a few
synchronous methods; async twins default to an executor. Scores are cosine similarity
clipped to [0, 1] on every backend, so a threshold means the same everywhere.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord


class VectorIndex(ABC):
    """Abstract vector index host."""

    @abstractmethod
    def open(self, name: str, *, dimension: int, model: str) -> None:
        """Create the index if missing (cosine space), recording model and dimension.

        Raises:
            EmbeddingMismatchError: the index exists with another model or dimension.
        """

    @abstractmethod
    def upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        """Write vectors; an existing id is overwritten, never duplicated."""

    @abstractmethod
    def query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        """The ``k`` most similar vectors inside ``scope``, best first."""

    @abstractmethod
    def delete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the vectors matching every given selector (all chunks of a message).

        Selectors combine with AND, so a delete never reaches wider than each of them.

        Raises:
            InvalidInputError: no selector was given (that would delete everything).
        """

    @abstractmethod
    def message_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        """Ids of the messages that have at least one vector (for stats and repair)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""

    async def aopen(self, name: str, *, dimension: int, model: str) -> None:
        await run_in_executor(None, lambda: self.open(name, dimension=dimension, model=model))

    async def aupsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        await run_in_executor(None, self.upsert, name, records)

    async def aquery(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        return await run_in_executor(None, lambda: self.query(name, vector, k=k, scope=scope))

    async def adelete(
        self,
        name: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> None:
        await run_in_executor(
            None,
            lambda: self.delete(
                name, thread_id=thread_id, resource_id=resource_id, message_ids=message_ids
            ),
        )

    async def amessage_ids(self, name: str, scope: ScopeFilter | None = None) -> set[str]:
        return await run_in_executor(None, self.message_ids, name, scope)


def has_work(
    thread_id: str | None, resource_id: str | None, message_ids: Sequence[str] | None
) -> bool:
    """The shared guard of every ``delete``: whether there is anything to delete.

    Raises:
        InvalidInputError: no selector was given (that would delete everything).
    """
    if thread_id is None and resource_id is None and message_ids is None:
        raise InvalidInputError(
            "delete needs thread_id, resource_id or message_ids; it never empties an index"
        )
    return message_ids is None or len(message_ids) > 0


def chunk_id(message_id: str, n: int) -> str:
    """Vector id of chunk ``n`` of a message: the message id itself for the first chunk."""
    return message_id if n == 0 else f"{message_id}#{n}"
