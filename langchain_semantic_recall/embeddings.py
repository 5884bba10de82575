"""The embedding cache and the embedder-agnostic helpers around it.

* `EmbeddingCache`: a thread-safe LRU of vectors keyed by `(namespace, text)`;
  the namespace is the index name, so two embedders never share a vector.
* `embed_with_cache` / `aembed_with_cache`: embed a batch through the cache,
  one call for every distinct miss, with the embedder's answer validated before any of
  it is cached.
* `chunk_text` / `split_for_embedding`: cut a long message into pieces the
  embedder can take whole, so that no part of it is silently left unindexed.
* `embedding_model_name`: the model name used to derive the default index name.

The local default embedder lives in `langchain_semantic_recall.local_embeddings`.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

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
    "EmbeddingCache",
    "aembed_with_cache",
    "chunk_spans",
    "chunk_text",
    "embed_with_cache",
    "embedding_model_name",
    "split_for_embedding",
]

logger = logging.getLogger(__name__)

Embedder: TypeAlias = "Embeddings | LocalModel"
"""An embedder as far as naming its index and splitting its text go: any LangChain
`Embeddings`, or the local model's description alone (`local_model.LocalModel`, which
the command line's `stats` uses without importing LangChain)."""

DEFAULT_CACHE_SIZE = 1000
"""Entries an `EmbeddingCache` keeps by default."""

DEFAULT_MAX_CHARS = 6000
"""Characters per chunk for embedders that cannot split text themselves.

6000 characters stay well inside OpenAI's 8191-token input limit even for token-dense
text (code, non-Latin scripts), while typical chat messages are never split.
"""

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


def _lookup(
    cache: EmbeddingCache, namespace: str, texts: Sequence[str], dimension: int | None = None
) -> tuple[dict[str, list[float]], list[str]]:
    """Look every distinct text up once: (vectors found, distinct misses in first-seen order).

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
    return found, list(missing)


def _check_comparable(name: str, position: int, values: list[float]) -> None:
    """A vector the indexes can compare: finite in float32 (what they store), not zero.

    1e308 is a finite Python float but inf in float32, and so is the norm of a vector
    whose squares overflow; an all-zero vector has no direction (its cosine is undefined).
    """
    array = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        norm = float(np.linalg.norm(array.astype(np.float32)))
    if not np.isfinite(array).all() or not math.isfinite(norm):
        raise SemanticRecallError(
            f"embedder {name!r} returned a vector with NaN or infinite values at position "
            f"{position} (as float32, what the vector indexes store); nothing was cached"
        )
    if norm == 0.0:
        raise SemanticRecallError(
            f"embedder {name!r} returned an all-zero vector at position {position} (it has "
            "no direction to compare); nothing was cached or indexed. Check the embedder"
        )


def _validated(
    vectors: object, expected: int, embeddings: Embeddings, dimension: int | None = None
) -> list[list[float]]:
    """Check an embedder's answer: one finite vector per text, all of one non-zero length.

    With `dimension`, that length must be `dimension` (`EmbeddingMismatchError`).
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
        _check_comparable(name, position, values)
        result.append(values)
    return result


def _store_and_assemble(
    cache: EmbeddingCache,
    namespace: str,
    texts: Sequence[str],
    *,
    found: dict[str, list[float]],
    missing: list[str],
    vectors: list[list[float]],
) -> list[list[float]]:
    """Cache the new vectors and return one vector per input text, in input order."""
    for text, vector in zip(missing, vectors, strict=True):
        cache.put(namespace, text, vector)
        found[text] = vector
    # Fresh lists per position: duplicates in the input must not alias one list.
    return [list(found[text]) for text in texts]


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
    moment may both embed it; the result is the same.

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
    found, missing = _lookup(cache, namespace, texts, dimension)
    vectors: list[list[float]] = []
    if missing:
        logger.debug("embedding %d of %d texts (cache misses)", len(missing), len(texts))
        raw = embeddings.embed_documents(list(missing))
        vectors = _validated(raw, len(missing), embeddings, dimension)
    return _store_and_assemble(
        cache, namespace, texts, found=found, missing=missing, vectors=vectors
    )


async def aembed_with_cache(
    embeddings: Embeddings,
    cache: EmbeddingCache,
    namespace: str,
    texts: Sequence[str],
    *,
    dimension: int | None = None,
) -> list[list[float]]:
    """Async twin of `embed_with_cache` (uses `aembed_documents`)."""
    found, missing = _lookup(cache, namespace, texts, dimension)
    vectors: list[list[float]] = []
    if missing:
        logger.debug("embedding %d of %d texts (cache misses)", len(missing), len(texts))
        raw = await embeddings.aembed_documents(list(missing))
        vectors = _validated(raw, len(missing), embeddings, dimension)
    return _store_and_assemble(
        cache, namespace, texts, found=found, missing=missing, vectors=vectors
    )


# --- chunking ----------------------------------------------------------------------------

_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*")
_SENTENCE = re.compile(r"(?:[.!?\u3002\uff01\uff1f\u2026][\"'\u201d\u2019)\]]*\s+|\n\s*)")
_SPACE = re.compile(r"\s+")


def _last_cut(pattern: re.Pattern[str], text: str, lo: int, hi: int) -> int | None:
    """The end of the last match of `pattern` within `text[:hi]` that ends in [lo, hi]."""
    cut: int | None = None
    # Start a little before lo so that a boundary straddling lo is still seen.
    for match in pattern.finditer(text, max(0, lo - 64), hi):
        if match.end() >= lo:
            cut = match.end()
    return cut


def chunk_spans(text: str, max_chars: int, overlap: int = 200) -> list[tuple[int, int]]:
    """The `(start, end)` character spans of `chunk_text`, in order.

    Spans start at 0, end at `len(text)`, each is at most `max_chars` long, each
    starts after the previous one starts and no later than it ends (so together they
    cover the text). See `chunk_text` for how the cuts are chosen.

    Args:
        text: The text to cut.
        max_chars: Most characters of one span.
        overlap: Characters a span repeats from the end of the one before (at most a
            quarter of `max_chars`).
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InvalidOptionError(f"max_chars must be an integer >= 1, got {max_chars!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise InvalidOptionError(f"overlap must be an integer >= 0, got {overlap!r}")
    size = len(text)
    if size <= max_chars:
        return [(0, size)]
    # Cuts fall in the second half of a window and the overlap is at most a quarter of
    # it, so every chunk starts strictly after the previous one: the loop terminates.
    overlap = min(overlap, max_chars // 4)
    spans: list[tuple[int, int]] = []
    start = 0
    while size - start > max_chars:
        hi = start + max_chars
        lo = start + max(1, max_chars // 2)
        end = (
            _last_cut(_PARAGRAPH, text, lo, hi)
            or _last_cut(_SENTENCE, text, lo, hi)
            or _last_cut(_SPACE, text, lo, hi)
            or hi
        )
        spans.append((start, end))
        next_start = end - overlap
        if overlap:
            # Begin the overlap on a word: just after the first space in it, if any.
            space = _SPACE.search(text, next_start, end)
            if space is not None:
                next_start = space.end()
        start = next_start
    spans.append((start, size))
    return spans


def chunk_text(text: str, max_chars: int, overlap: int = 200) -> list[str]:
    """Split `text` into pieces of at most `max_chars` characters.

    Each cut is placed in the second half of the window, preferring (in this order) a
    paragraph break, the end of a sentence, any whitespace, and only then the hard limit.
    Consecutive pieces overlap by up to `overlap` characters (at most a quarter of
    `max_chars`), starting on a word where possible, so no content is lost and a fact
    straddling a cut is still whole in one piece. Pure function.

    Example:
        >>> chunk_text("short", 100)
        ['short']
        >>> chunk_text("One. Two. Three.", 10, overlap=0)
        ['One. Two. ', 'Three.']

    Args:
        text: the text to split.
        max_chars: the most characters per piece (>= 1).
        overlap: the characters repeated from the end of one piece at the start of the
            next (>= 0).

    Returns:
        `[text]` if it fits, else the pieces in order; every character of `text`
        appears in some piece.

    Raises:
        InvalidOptionError: `max_chars < 1` or `overlap < 0`.
    """
    return [text[start:end] for start, end in chunk_spans(text, max_chars, overlap)]


def split_for_embedding(embeddings: Embedder, text: str) -> list[str]:
    """Split `text` into pieces that `embeddings` can embed whole.

    An embedder that knows its own limit exposes a callable `split_text` (as
    `LocalEmbeddings` does, by tokens); any other gets `chunk_text` with
    `DEFAULT_MAX_CHARS`.

    Args:
        embeddings: The embedder that will embed the pieces.
        text: The text of one message.
    """
    splitter = getattr(embeddings, "split_text", None)
    if callable(splitter):
        pieces = splitter(text)
        return [str(piece) for piece in pieces] or [text]
    return chunk_text(text, DEFAULT_MAX_CHARS)


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
