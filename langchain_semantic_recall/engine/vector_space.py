"""The vector space: the embedder, its cache, the vector index, and the index it writes.

One object owns this shared state; the engine holds it (and a `for_thread` view or
a `with_options` copy shares it). The index's name, model and dimension are
resolved once, on first use: the dimension comes from the embedder's `dimension`
attribute when it has one, else from embedding one probe text; the vector index then
opens (or creates) the index and fails closed if it was built with another model.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from langchain_semantic_recall.embeddings import Embedder, EmbeddingCache, embedding_model_name
from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    InvalidOptionError,
    SemanticRecallError,
)
from langchain_semantic_recall.options import check_index_name, default_index_name
from langchain_semantic_recall.records import ScopeFilter, StoredMessage, ThreadInfo
from langchain_semantic_recall.relevance.features import TermCache
from langchain_semantic_recall.relevance.reference import (
    SMALL_TALK,
    UNRELATED,
    Reference,
    shipped,
)
from langchain_semantic_recall.vectors.base import VectorIndex

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings


logger = logging.getLogger(__name__)

IN_FLIGHT: Final = timedelta(minutes=1)
"""Messages younger than this may still be writing their vectors (`note_no_vectors`)."""
NO_VECTORS_EVERY: Final = 600.0
"""Seconds between two warnings of `VectorSpace.note_no_vectors` for one index and scope."""
_NO_VECTORS_TOLD: dict[tuple[str, str | None, str | None], float] = {}
_NO_VECTORS_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class IndexInfo:
    """The vector index this engine reads and writes, resolved once."""

    name: str
    model: str
    dimension: int


class VectorSpace:
    """Embedder + cache + vector index, and the resolved `IndexInfo`.

    Args:
        embeddings: any LangChain `Embeddings`.
        vectors: the vector index host.
        cache: the embedding cache shared by recall and index.
        index_name: the index name; derived from the model and dimension when None.
    """

    def __init__(
        self,
        embeddings: Embeddings,
        vectors: VectorIndex,
        cache: EmbeddingCache,
        index_name: str | None = None,
    ) -> None:
        from langchain_core.embeddings import Embeddings  # (not for `stats` alone: ~0.3 s)

        if not isinstance(embeddings, Embeddings):
            raise InvalidOptionError(
                f"embeddings must be a LangChain Embeddings, got {embeddings!r}"
            )
        if not isinstance(vectors, VectorIndex):
            raise InvalidOptionError(
                "vector_store must be a VectorIndex (e.g. ChromaVectorIndex.persistent(path), "
                "ChromaVectorIndex(chromadb_client)) or a LangChain VectorStore, got "
                f"{type(vectors).__name__}"
            )
        if cache is not None and not isinstance(cache, EmbeddingCache):
            raise InvalidOptionError(f"cache must be an EmbeddingCache, got {cache!r}")
        self.embeddings = embeddings
        self.vectors = vectors
        self.cache = cache
        self.index_name = None if index_name is None else check_index_name(index_name)
        self._lock = threading.Lock()
        self._info: IndexInfo | None = None
        self._built = datetime.now(UTC)  # a new index warns of history from before this
        self._stored_unopened = 0  # messages this engine stored before opening its index
        self._probed = False  # the dimension of `_info` is one probe's answer
        self._reference: Reference | None = None
        self.texts = TermCache()
        """The terms of messages hybrid search has scored (keys are their text)."""

    def clear_caches(self) -> None:
        """Empty what is keyed by message text: the embeddings and the scoring's terms."""
        self.cache.clear()
        self.texts.clear()

    @property
    def info(self) -> IndexInfo | None:
        """The resolved index, or None before first use."""
        return self._info

    def _info_for(self, dimension: int) -> IndexInfo:
        return _index_info(self.embeddings, self.index_name, dimension)

    def resolve(self, *, quiet: bool = False) -> Op[IndexInfo]:
        """Resolve and open the index (once; later calls return it at no cost).

        An index created here over a store that already holds messages is warned of: its
        history has no vectors in it, so recall would be silent about all of it.

        Args:
            quiet: The caller fills the index from the store (reindex) or counts what it
                lacks (stats): no warning.
        """
        if self._info is not None:
            return self._info
        known = named_index(self.embeddings, self.index_name)
        if known is not None:
            info = known
        else:
            info = self._info_for(_probed_dimension((yield steps.ProbeDimension())))
        created = yield steps.OpenIndex(info)  # twice (two first calls at once) is harmless
        if created and not quiet and (yield from self._history_before()):
            _warn_new_index(info)
        with self._lock:
            if self._info is None:
                self._info = info
                self._probed = known is None
            return self._info

    def note_no_vectors(
        self, scope: ScopeFilter, found: Sequence[StoredMessage], now: datetime
    ) -> None:
        """Warn: the index answered nothing in `scope` where keyword search found `found`.

        Each keyword match is a stored user or assistant message with text, which has a
        vector unless writing it failed; none at all means the index lacks the scope's
        vectors (a vector URL of another store, a server restarted without its volume),
        and recall about it would be silent without a word (an audit). Messages younger
        than `IN_FLIGHT` are not counted (a turn stored a moment ago may be writing its
        vectors still). Said once per index and scope every `NO_VECTORS_EVERY` seconds
        in this process (engines built per request share it).
        """
        settled = [m for m in found if now - m.created_at > IN_FLIGHT]
        if not settled:
            return
        name = self._info.name if self._info is not None else ""
        key = (name, scope.resource_id, scope.thread_id)
        clock = time.monotonic()
        with _NO_VECTORS_LOCK:
            if clock - _NO_VECTORS_TOLD.get(key, -math.inf) < NO_VECTORS_EVERY:
                return
            _NO_VECTORS_TOLD[key] = clock
        where = f"resource {scope.resource_id!r}"
        if scope.thread_id is not None:
            where = f"thread {scope.thread_id!r} of {where}"
        logger.warning(
            "the vector index %r holds no vector for %s, though keyword search found %d of "
            "its stored messages: is it this storage's vector store (not another server, or "
            "an emptied one)? stats() counts the messages missing a vector, and "
            "reindex(missing_only=True) (semantic-recall reindex --missing-only) writes them",
            *(name, where, len(settled)),
        )

    def note_stored(self, count: int) -> None:
        """`count` messages were stored by this engine (before its index may be open)."""
        with self._lock:
            if self._info is None:
                self._stored_unopened += count

    def _history_before(self) -> Op[bool]:
        """Whether the store holds messages from before this engine was built.

        Not this engine's own (`note_stored`: a first import's dated messages too), nor
        those other engines stored since it was built (the first calls of several
        workers on a new store): those get their vectors.
        """
        own = self._stored_unopened
        if (yield steps.CountMessages(None, up_to=own + 1)) <= own:
            return False
        threads: list[ThreadInfo] = yield steps.ListThreads()
        return any(t.first_at is not None and t.first_at < self._built for t in threads)

    def embedded_another_dimension(self, info: IndexInfo) -> None:
        """The embedder answered `info` with vectors of another dimension.

        If `info`'s dimension was learnt from one probe (an embedder without a
        `dimension`, such as `OpenAIEmbeddings`), that answer is no longer trusted: the
        next call probes again, instead of this process keeping an index of the probe's
        dimension (one odd answer of a remote embedder) until it restarts.
        """
        with self._lock:
            if self._probed and self._info == info:
                self._info = None

    def reference(self, info: IndexInfo) -> Op[Reference]:
        """This embedder's view of unrelated text and small talk (embedded once, cached).

        Hybrid search measures every similarity against it (`relevance.reference`).
        """
        if self._reference is not None:
            return self._reference
        reference = shipped(self.embeddings)
        if reference is None:
            reference = Reference.from_vectors((yield steps.Embed(info, [*UNRELATED, *SMALL_TALK])))
        with self._lock:
            if self._reference is None:
                self._reference = reference
            return self._reference

    def check_query_vector(self, info: IndexInfo, vector: Sequence[float]) -> None:
        """Fail closed when a query vector does not fit the index."""
        if len(vector) != info.dimension:
            raise EmbeddingMismatchError(
                f"the embedder returned {len(vector)}-d vectors but index {info.name!r} "
                f"holds {info.dimension}-d vectors of {info.model!r}; use another "
                "index_name or run reindex with the new embedder"
            )


def named_index(embeddings: Embedder, index_name: str | None = None) -> IndexInfo | None:
    """The index `VectorSpace.resolve` opens for `embeddings`, when told without embedding.

    Known when the embedder has a `dimension` attribute (an int >= 1, as the local
    model); None when only embedding a probe text would tell. Nothing is opened.
    """
    dimension = getattr(embeddings, "dimension", None)
    if isinstance(dimension, int) and not isinstance(dimension, bool) and dimension > 0:
        return _index_info(embeddings, index_name, dimension)
    return None


def _index_info(embeddings: Embedder, index_name: str | None, dimension: int) -> IndexInfo:
    model = embedding_model_name(embeddings)
    name = index_name or default_index_name(model, dimension)
    return IndexInfo(name=name, model=model, dimension=dimension)


def _probed_dimension(probe: object) -> int:
    """The dimension of the embedder's answer to one text, or a clear error.

    No usable vector is the embedder failing (as if it had raised: recall goes on
    without memory, index reports it), not a mismatch with the index: there is no
    index yet to mismatch.
    """
    try:  # a list, a tuple or a numpy array (the vector checks read each the same)
        usable = not isinstance(probe, str | bytes | dict) and len(probe) == 1  # type: ignore[arg-type]
        usable = usable and len(probe[0]) >= 1  # type: ignore[index]
    except (TypeError, KeyError, IndexError):  # no length: a number, a 0-d array
        usable = False
    if not usable:
        raise SemanticRecallError(
            "the embedder returned no usable vector for one text while probing its "
            f"dimension (got {str(probe)[:80]}); check the embedder"
        )
    return len(probe[0])  # type: ignore[index]


def _warn_new_index(info: IndexInfo) -> None:
    """A new index over a store with messages: none of them can be recalled until reindex.

    The usual cause is an embedder changed under a store whose index is named after the
    model (the default), so the earlier vectors are in an index this engine does not read.
    """
    logger.warning(
        "created vector index %r for %s (%d-d), but the store already holds messages "
        "stored before this engine was built, and this index has no vectors for them: "
        "recall and search find none of them until `reindex` embeds them "
        "(memory.reindex(), or `semantic-recall reindex`). If the "
        "embedder changed by mistake, use the earlier one; pin index_name= to have another "
        "embedder refused instead (docs/deploy.md)",
        info.name,
        info.model,
        info.dimension,
    )
