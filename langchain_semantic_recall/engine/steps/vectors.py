"""Steps that call the vector space: the embedder (through its cache) and the index."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from typing_extensions import override

from langchain_semantic_recall.embeddings import (
    EmbeddedTexts,
    aembed_each_with_cache,
    aembed_with_cache,
    embed_each_with_cache,
    embed_with_cache,
)
from langchain_semantic_recall.engine.steps.base import Backends, Step
from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.records import (
    CompactResult,
    HeldVectors,
    ScopeFilter,
    VectorRecord,
)

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.storage.base import MessageStorage

Vectors = list[list[float]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Embed(Step[Vectors]):
    """Embed `texts` through the cache for index `info` (vectors, in order).

    Checked against the index's dimension.
    """

    info: IndexInfo
    texts: Sequence[str]

    @override
    def run(self, backends: Backends) -> Vectors:
        return _embedded(backends, self.info, self.texts, embed_with_cache)

    @override
    async def arun(self, backends: Backends) -> Vectors:
        return await _aembedded(backends, self.info, self.texts, aembed_with_cache)


@dataclass(frozen=True, slots=True)
class EmbedEach(Step[EmbeddedTexts]):
    """`Embed`, but an unusable vector costs its own text only (`embed_each_with_cache`).

    A text the embedder answers with all zeros, NaN or infinite values gets None and a
    reason (by position); the other texts keep their vectors.
    """

    info: IndexInfo
    texts: Sequence[str]

    @override
    def run(self, backends: Backends) -> EmbeddedTexts:
        return _embedded(backends, self.info, self.texts, embed_each_with_cache)

    @override
    async def arun(self, backends: Backends) -> EmbeddedTexts:
        return await _aembedded(backends, self.info, self.texts, aembed_each_with_cache)


def _embedded(
    backends: Backends, info: IndexInfo, texts: Sequence[str], embed: Callable[..., T]
) -> T:
    """`embed` the texts through the cache; another dimension is told to the space."""
    space = backends.space
    try:
        return embed(space.embeddings, space.cache, info.name, texts, dimension=info.dimension)
    except EmbeddingMismatchError:
        space.embedded_another_dimension(info)
        raise


async def _aembedded(
    backends: Backends,
    info: IndexInfo,
    texts: Sequence[str],
    embed: Callable[..., Awaitable[T]],
) -> T:
    """Async twin of `_embedded`."""
    space = backends.space
    try:
        return await embed(
            space.embeddings, space.cache, info.name, texts, dimension=info.dimension
        )
    except EmbeddingMismatchError:
        space.embedded_another_dimension(info)
        raise


@dataclass(frozen=True, slots=True)
class ProbeDimension(Step[Vectors]):
    """Embed one probe text with no cache: the embedder's dimension, learnt once."""

    @override
    def run(self, backends: Backends) -> Vectors:
        return backends.space.embeddings.embed_documents(["dimension probe"])

    @override
    async def arun(self, backends: Backends) -> Vectors:
        return await backends.space.embeddings.aembed_documents(["dimension probe"])


@dataclass(frozen=True, slots=True)
class ClearCaches(Step[None]):
    """Empty the caches keyed by message text (after a forget, they hold its words)."""

    @override
    def run(self, backends: Backends) -> None:
        backends.space.clear_caches()

    @override
    async def arun(self, backends: Backends) -> None:
        backends.space.clear_caches()


@dataclass(frozen=True, slots=True)
class OpenIndex(Step[bool]):
    """Open (create if needed) the vector index of `info`; True when it was created."""

    info: IndexInfo

    @override
    def run(self, backends: Backends) -> bool:
        info = self.info
        return backends.space.vectors.open(info.name, dimension=info.dimension, model=info.model)

    @override
    async def arun(self, backends: Backends) -> bool:
        info = self.info
        return await backends.space.vectors.aopen(
            info.name, dimension=info.dimension, model=info.model
        )


@dataclass(frozen=True, slots=True)
class NearestMessages(Step[list[tuple[str, float]]]):
    """(message id, similarity) of the `k` nearest vectors inside `scope`."""

    info: IndexInfo
    vector: Sequence[float]
    _: KW_ONLY
    k: int
    scope: ScopeFilter

    @override
    def run(self, backends: Backends) -> list[tuple[str, float]]:
        vectors = backends.space.vectors
        return vectors.nearest(self.info.name, self.vector, k=self.k, scope=self.scope)

    @override
    async def arun(self, backends: Backends) -> list[tuple[str, float]]:
        vectors = backends.space.vectors
        return await vectors.anearest(self.info.name, self.vector, k=self.k, scope=self.scope)


@dataclass(frozen=True, slots=True)
class UpsertVectors(Step[None]):
    """Write `records` into the index (`behind`: after the call, if the index can)."""

    info: IndexInfo
    records: Sequence[VectorRecord]
    _: KW_ONLY
    behind: bool = False

    # (`behind` is passed only when asked: an `upsert` replaced by 0.3's signature still works)

    @override
    def run(self, backends: Backends) -> None:
        vectors = backends.space.vectors
        if self.behind:
            stored = partial(where_stored, backends.storage)
            vectors.upsert(self.info.name, self.records, behind=True, stored=stored)
        else:
            vectors.upsert(self.info.name, self.records)

    @override
    async def arun(self, backends: Backends) -> None:
        vectors = backends.space.vectors
        if self.behind:
            await vectors.aupsert(self.info.name, self.records, behind=True)
        else:
            await vectors.aupsert(self.info.name, self.records)


def where_stored(storage: MessageStorage, records: Sequence[VectorRecord]) -> list[VectorRecord]:
    """`records` whose message is still stored in their thread and resource (`Stored`).

    Asked by the worker once it wrote them: another process may have forgotten or moved
    their thread meanwhile. One read per thread. A thread moved to another resource is
    not followed: its id and its messages' ids are no proof that they are the same
    messages (another resource may have started a thread of that id with ids its app
    chose), so their vectors are deleted and `reindex(missing_only=True)` writes them.
    """
    threads: dict[tuple[str, str], list[VectorRecord]] = {}
    for record in records:
        threads.setdefault((record.resource_id, record.thread_id), []).append(record)
    now: list[VectorRecord] = []
    for (resource_id, thread_id), rows in threads.items():
        ids = sorted({row.message_id for row in rows})
        here = storage.ids_in_scope(ids, ScopeFilter(resource_id, thread_id))
        now += [row for row in rows if row.message_id in here]
    return now


@dataclass(frozen=True, slots=True)
class WriteFailures(Step[list[str]]):
    """Why vectors of `resource_id` written behind failed since last asked (each once)."""

    resource_id: str

    @override
    def run(self, backends: Backends) -> list[str]:
        return backends.space.vectors.write_failures(self.resource_id)

    @override
    async def arun(self, backends: Backends) -> list[str]:
        return self.run(backends)  # a dict lookup: nothing to wait for


@dataclass(frozen=True, slots=True)
class DeleteVectors(Step[None]):
    """Delete the vectors matching every selector given."""

    info: IndexInfo
    _: KW_ONLY
    thread_id: str | None = None
    resource_id: str | None = None
    message_ids: Sequence[str] | None = None

    @override
    def run(self, backends: Backends) -> None:
        backends.space.vectors.delete(
            self.info.name,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            message_ids=self.message_ids,
        )

    @override
    async def arun(self, backends: Backends) -> None:
        await backends.space.vectors.adelete(
            self.info.name,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            message_ids=self.message_ids,
        )


@dataclass(frozen=True, slots=True)
class VectorMessageIds(Step[set[str]]):
    """The message ids that have a vector inside `scope`."""

    info: IndexInfo
    scope: ScopeFilter | None

    @override
    def run(self, backends: Backends) -> set[str]:
        return backends.space.vectors.message_ids(self.info.name, self.scope)

    @override
    async def arun(self, backends: Backends) -> set[str]:
        return await backends.space.vectors.amessage_ids(self.info.name, self.scope)


@dataclass(frozen=True, slots=True)
class VectorIds(Step[HeldVectors]):
    """Each message's vector ids inside `scope`, and which carry message metadata."""

    info: IndexInfo
    scope: ScopeFilter | None

    @override
    def run(self, backends: Backends) -> HeldVectors:
        return backends.space.vectors.vector_ids(self.info.name, self.scope)

    @override
    async def arun(self, backends: Backends) -> HeldVectors:
        return await backends.space.vectors.avector_ids(self.info.name, self.scope)


@dataclass(frozen=True, slots=True)
class CompactVectors(Step[CompactResult]):
    """Erase what deleted vectors left in the files of the index `name`."""

    name: str

    @override
    def run(self, backends: Backends) -> CompactResult:
        return backends.space.vectors.compact(self.name)

    @override
    async def arun(self, backends: Backends) -> CompactResult:
        return await backends.space.vectors.acompact(self.name)
