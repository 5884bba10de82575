"""The embedding cache and the embedder-agnostic helpers around it.

* `EmbeddingCache`: a thread-safe LRU of vectors keyed by `(namespace, text)`;
  the namespace is the index name, so two embedders never share a vector.
* `embed_with_cache` / `aembed_with_cache`: embed a batch through the cache,
  one call for every distinct miss, with the embedder's answer validated before any of
  it is cached. `embed_each_with_cache` / `aembed_each_with_cache` do the same, but a
  text answered with an unusable vector (all zeros, NaN, infinite) costs itself only.
* `chunk_text` / `split_for_embedding` (from `chunking`): cut a long message into
  pieces the embedder can take whole, so that no part of it is silently left unindexed.
* `embedding_model_name`: the model name used to derive the default index name.

The local default embedder lives in `langchain_semantic_recall.local_embeddings`.
"""

from __future__ import annotations

import logging
import math
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from langchain_semantic_recall.chunking import (
    DEFAULT_MAX_CHARS,
    chunk_spans,
    chunk_text,
    split_for_embedding,
)
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    InvalidOptionError,
    SemanticRecallError,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from langchain_semantic_recall.local_model import LocalModel

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_MAX_CHARS",
    "UNUSABLE_NAN",
    "UNUSABLE_ZERO",
    "EmbeddedTexts",
    "EmbeddingCache",
    "aembed_each_with_cache",
    "aembed_with_cache",
    "chunk_spans",
    "chunk_text",
    "embed_each_with_cache",
    "embed_with_cache",
    "embedding_model_name",
    "split_for_embedding",
    "unusable_reason",
]

logger = logging.getLogger(__name__)

Embedder: TypeAlias = "Embeddings | LocalModel"
"""An embedder as far as naming its index and splitting its text go: any LangChain
`Embeddings`, or the local model's description alone (`local_model.LocalModel`, which
the command line's `stats` uses without importing LangChain)."""

DEFAULT_CACHE_SIZE = 1000
"""Entries an `EmbeddingCache` keeps by default."""

_Vector: TypeAlias = "array[float]"
"""A cached vector: packed doubles (8 bytes a value; a tuple of floats took ~32)."""


class EmbeddingCache:
    """A thread-safe least-recently-used cache of embedding vectors.

    Keys are `(namespace, text)`: use the index name as the namespace so that vectors
    of different models never mix. Vectors are stored as immutable tuples and handed out
    as fresh lists, so a caller mutating its result cannot corrupt the cache.

    Example:
        >>> cache = EmbeddingCache(maxsize=2)
        >>> cache.put("idx", "hello", [1.0, 0.0])
        >>> cache.get("idx", "hello")
        [1.0, 0.0]
        >>> cache.get("idx", "other") is None
        True
        >>> (cache.hits, cache.misses, len(cache))
        (1, 1, 1)

    Args:
        maxsize: the most entries kept; the least recently used entry is evicted first.

    Raises:
        InvalidOptionError: `maxsize` is not an integer >= 1.
    """

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise InvalidOptionError(
                f"EmbeddingCache maxsize must be an integer >= 1, got {maxsize!r}"
            )
        self._maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str], _Vector] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def maxsize(self) -> int:
        """The most entries kept."""
        return self._maxsize

    @property
    def hits(self) -> int:
        """Lookups that found a vector, since construction."""
        return self._hits

    @property
    def misses(self) -> int:
        """Lookups that found nothing, since construction."""
        return self._misses

    def get(self, namespace: str, text: str) -> list[float] | None:
        """The cached vector of `text` in `namespace` (marked recently used), or None.

        Args:
            namespace: The index name (two embedders never share a vector).
            text: The text that was embedded.
        """
        key = (namespace, text)
        with self._lock:
            vector = self._entries.get(key)
            if vector is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
        return list(vector)

    def put(self, namespace: str, text: str, vector: Sequence[float]) -> None:
        """Store `vector` for `text` in `namespace`, evicting the oldest if full.

        Args:
            namespace: The index name (two embedders never share a vector).
            text: The text that was embedded.
            vector: Its embedding (copied).
        """
        key = (namespace, text)
        frozen = array("d", map(float, vector))  # (a copy no caller holds)
        with self._lock:
            self._entries[key] = frozen
            self._entries.move_to_end(key)
            while len(self._entries) > self._maxsize:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry (the hit and miss counters are kept)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"EmbeddingCache(maxsize={self._maxsize}, size={len(self)}, "
            f"hits={self._hits}, misses={self._misses})"
        )


# --- embedding through the cache ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Batch:
    """One call's texts looked up in the cache (`_lookup`)."""

    namespace: str
    texts: Sequence[str]
    dimension: int | None
    found: dict[str, list[float]]
    """Text -> its cached vector (the new ones are added once checked)."""
    missing: list[str]
    """The distinct texts not cached, in first-seen order: to embed."""


def _lookup(
    cache: EmbeddingCache, namespace: str, texts: Sequence[str], dimension: int | None = None
) -> _Batch:
    """Look every distinct text up once: the vectors found, and the distinct misses.

    With `dimension`, a cached vector of another length counts as a miss (it is replaced).
    """
    found: dict[str, list[float]] = {}
    missing: dict[str, None] = {}
    for text in texts:
        if text in found or text in missing:
            continue
        vector = cache.get(namespace, text)
        if vector is None or (dimension is not None and len(vector) != dimension):
            missing[text] = None
        else:
            found[text] = vector
    return _Batch(namespace, texts, dimension, found, list(missing))


UNUSABLE_ZERO = "all-zero vector from the embedder, no direction to compare"
"""Why a message got no vector: the embedder answered its text with zeros (`EmbeddedTexts`)."""
UNUSABLE_NAN = "NaN or infinite vector from the embedder, in float32 as the index stores it"
"""Why a message got no vector: the embedder's vector of its text is not finite."""


def unusable_reason(values: Sequence[float]) -> str | None:
    """Why the indexes cannot compare this vector (`UNUSABLE_*`), or None if they can.

    It must be finite in float32 (what they store) and not zero: 1e308 is a finite
    Python float but inf in float32, and so is the norm of a vector whose squares
    overflow; an all-zero vector has no direction (its cosine is undefined).

    Args:
        values: One vector.
    """
    array = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norm = float(np.linalg.norm(array.astype(np.float32)))
    if not np.isfinite(array).all() or not math.isfinite(norm):
        return UNUSABLE_NAN
    return UNUSABLE_ZERO if norm == 0.0 else None


def _refusal(name: str, position: int, reason: str) -> SemanticRecallError:
    """The error of a batch refused whole for the unusable vector at `position`."""
    if reason == UNUSABLE_NAN:
        return SemanticRecallError(
            f"embedder {name!r} returned a vector with NaN or infinite values at position "
            f"{position} (as float32, what the vector indexes store); nothing was cached"
        )
    return SemanticRecallError(
        f"embedder {name!r} returned an all-zero vector at position {position} (it has "
        "no direction to compare); nothing was cached or indexed. Check the embedder"
    )


def _validated(
    vectors: object, expected: int, embeddings: Embeddings, dimension: int | None = None
) -> list[list[float]]:
    """Check an embedder's answer: one numeric vector per text, all of one non-zero length.

    With `dimension`, that length must be `dimension` (`EmbeddingMismatchError`). Whether
    each vector is usable (`unusable_reason`) is the caller's to check.
    """
    name = embedding_model_name(embeddings)
    if isinstance(vectors, str | bytes) or not isinstance(vectors, Iterable):
        raise SemanticRecallError(
            f"embedder {name!r} returned {type(vectors).__name__}, not a list of vectors"
        )
    rows: list[Any] = list(vectors)
    if len(rows) != expected:
        raise SemanticRecallError(
            f"embedder {name!r} returned {len(rows)} vectors for {expected} texts; "
            "nothing was cached. Check the embedder (batch limits, filtering of inputs)."
        )
    result: list[list[float]] = []
    for position, vector in enumerate(rows):
        try:
            values = [float(x) for x in vector]
        except (TypeError, ValueError) as exc:
            raise SemanticRecallError(
                f"embedder {name!r} returned a non-numeric vector at position {position}"
            ) from exc
        if not values:
            raise SemanticRecallError(f"embedder {name!r} returned an empty vector")
        if result and len(values) != len(result[0]):
            raise SemanticRecallError(
                f"embedder {name!r} returned vectors of different lengths "
                f"({len(result[0])} and {len(values)}) in one batch; nothing was cached"
            )
        if dimension is not None and len(values) != dimension:
            raise EmbeddingMismatchError(
                f"embedder {name!r} returned {len(values)}-d vectors for an index of "
                f"{dimension}-d vectors; nothing was cached. Use the index's model, a new "
                "index_name, or reindex with the new embedder"
            )
        result.append(values)
    return result


@dataclass(frozen=True, slots=True)
class EmbeddedTexts:
    """A batch's vectors in input order, None where the embedder's one is unusable."""

    vectors: list[list[float] | None]
    unusable: dict[int, str] = field(default_factory=dict)
    """Position in the batch -> why its vector is unusable (`unusable_reason`)."""


def _settle(
    raw: object, embeddings: Embeddings, cache: EmbeddingCache, batch: _Batch, *, isolate: bool
) -> EmbeddedTexts:
    """Check the answer for the misses, cache its usable vectors, assemble the batch.

    Without `isolate`, an unusable vector refuses the whole batch (nothing cached).

    Raises:
        SemanticRecallError: the answer is unusable (`_validated`), or, without
            `isolate`, one of its vectors is.
        EmbeddingMismatchError: the vectors are not `dimension` long.
    """
    found, missing, texts = batch.found, batch.missing, batch.texts
    vectors = _validated(raw, len(missing), embeddings, batch.dimension) if missing else []
    bad: dict[str, str] = {}
    for position, (text, vector) in enumerate(zip(missing, vectors, strict=True)):
        if (reason := unusable_reason(vector)) is not None:
            if not isolate:
                raise _refusal(embedding_model_name(embeddings), position, reason)
            bad[text] = reason
    for text, vector in zip(missing, vectors, strict=True):
        if text not in bad:
            cache.put(batch.namespace, text, vector)
            found[text] = vector
    # Fresh lists per position: duplicates in the input must not alias one list.
    return EmbeddedTexts(
        vectors=[list(found[text]) if text in found else None for text in texts],
        unusable={n: bad[text] for n, text in enumerate(texts) if text in bad},
    )


def _whole(embedded: EmbeddedTexts) -> list[list[float]]:
    """The vectors of a batch settled without `isolate` (every one usable).

    Raises:
        AssertionError: one is missing (`_settle` raises first: a bug, never a shorter list).
    """
    vectors = [vector for vector in embedded.vectors if vector is not None]
    if len(vectors) != len(embedded.vectors):
        raise AssertionError("a batch settled without isolate lacks a vector")
    return vectors


def embed_with_cache(
    embeddings: Embeddings,
    cache: EmbeddingCache,
    namespace: str,
    texts: Sequence[str],
    *,
    dimension: int | None = None,
) -> list[list[float]]:
    """Embed `texts` through `cache`, calling the embedder at most once.

    Every distinct text is looked up once; the misses are embedded together in ONE
    `embed_documents` call (identical texts only once), validated, cached, and the
    result is returned in input order. Two threads missing the same text at the same
    moment may both embed it; the result is the same. One unusable vector (all zeros,
    NaN or infinite) refuses the whole batch: `embed_each_with_cache` keeps the others.

    Args:
        embeddings: the embedder.
        cache: the cache to read and fill.
        namespace: the cache namespace, normally the index name.
        texts: the texts to embed.
        dimension: the length every vector must have (the index's dimension), so that a
            vector of another model is never cached; None to accept any one length.

    Returns:
        One vector per text, in input order.

    Raises:
        SemanticRecallError: the embedder returned the wrong number of vectors, vectors
            of different lengths, or non-finite values. Nothing of that call is cached.
        EmbeddingMismatchError: the vectors are not `dimension` long (nothing cached).
    """
    batch = _lookup(cache, namespace, texts, dimension)
    raw = _ask(embeddings, batch)
    return _whole(_settle(raw, embeddings, cache, batch, isolate=False))


async def aembed_with_cache(
    embeddings: Embeddings,
    cache: EmbeddingCache,
    namespace: str,
    texts: Sequence[str],
    *,
    dimension: int | None = None,
) -> list[list[float]]:
    """Async twin of `embed_with_cache` (uses `aembed_documents`)."""
    batch = _lookup(cache, namespace, texts, dimension)
    raw = await _aask(embeddings, batch)
    return _whole(_settle(raw, embeddings, cache, batch, isolate=False))


def embed_each_with_cache(
    embeddings: Embeddings,
    cache: EmbeddingCache,
    namespace: str,
    texts: Sequence[str],
    *,
    dimension: int | None = None,
) -> EmbeddedTexts:
    """`embed_with_cache`, but an unusable vector costs its own text only.

    A text the embedder answers with an all-zero, NaN or infinite vector gets None (and
    its reason, by position): it is not cached, so the next call asks again. A failure
    of the whole answer still raises (nothing cached).

    Args:
        embeddings: the embedder.
        cache: the cache to read and fill.
        namespace: the cache namespace, normally the index name.
        texts: the texts to embed.
        dimension: the length every vector must have (the index's dimension).

    Raises:
        SemanticRecallError: the embedder returned the wrong number of vectors, vectors
            of different lengths, empty or non-numeric ones. Nothing of that call is cached.
        EmbeddingMismatchError: the vectors are not `dimension` long (nothing cached).
    """
    batch = _lookup(cache, namespace, texts, dimension)
    raw = _ask(embeddings, batch)
    return _settle(raw, embeddings, cache, batch, isolate=True)


async def aembed_each_with_cache(
    embeddings: Embeddings,
    cache: EmbeddingCache,
    namespace: str,
    texts: Sequence[str],
    *,
    dimension: int | None = None,
) -> EmbeddedTexts:
    """Async twin of `embed_each_with_cache` (uses `aembed_documents`)."""
    batch = _lookup(cache, namespace, texts, dimension)
    raw = await _aask(embeddings, batch)
    return _settle(raw, embeddings, cache, batch, isolate=True)


def _ask(embeddings: Embeddings, batch: _Batch) -> object:
    """The embedder's answer for the cache misses (nothing asked if there are none)."""
    if not batch.missing:
        return []
    logger.debug("embedding %d of %d texts (cache misses)", len(batch.missing), len(batch.texts))
    return embeddings.embed_documents(list(batch.missing))


async def _aask(embeddings: Embeddings, batch: _Batch) -> object:
    """Async twin of `_ask` (uses `aembed_documents`)."""
    if not batch.missing:
        return []
    logger.debug("embedding %d of %d texts (cache misses)", len(batch.missing), len(batch.texts))
    return await embeddings.aembed_documents(list(batch.missing))


def embedding_model_name(embeddings: Embedder) -> str:
    """The embedder's model name: its `model`, `model_name` or `model_id`.

    The first non-empty string among those attributes, else the class name.

    Args:
        embeddings: Any LangChain `Embeddings`.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> embedding_model_name(DeterministicFakeEmbedding(size=8))
        'DeterministicFakeEmbedding'
    """
    for attribute in ("model", "model_name", "model_id"):
        value = getattr(embeddings, attribute, None)
        if isinstance(value, str) and value.strip():
            return value
    return type(embeddings).__name__
