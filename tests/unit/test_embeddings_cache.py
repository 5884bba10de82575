"""The embedding cache, embedding through it, chunking and model names (no real model)."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

from langchain_semantic_recall.embeddings import (
    DEFAULT_MAX_CHARS,
    EmbeddingCache,
    aembed_with_cache,
    chunk_spans,
    chunk_text,
    embed_with_cache,
    embedding_model_name,
    split_for_embedding,
)
from langchain_semantic_recall.errors import InvalidOptionError, SemanticRecallError


class CountingEmbeddings(Embeddings):
    """Deterministic 3-d vectors from a text; records every batch it is asked to embed.

    ``corrupt`` post-processes each answer, to play a misbehaving embedder.
    """

    def __init__(
        self, corrupt: Callable[[list[list[float]]], list[list[float]]] | None = None
    ) -> None:
        self.calls: list[list[str]] = []
        self.corrupt = corrupt
        self._lock = threading.Lock()

    @staticmethod
    def vector(text: str) -> list[float]:
        return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.calls.append(list(texts))
        vectors = [self.vector(t) for t in texts]
        return self.corrupt(vectors) if self.corrupt else vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


# --- EmbeddingCache -----------------------------------------------------------------------


def test_cache_evicts_least_recently_used() -> None:
    cache = EmbeddingCache(maxsize=2)
    cache.put("ns", "a", [1.0])
    cache.put("ns", "b", [2.0])
    assert cache.get("ns", "a") == [1.0]  # a is now the most recent
    cache.put("ns", "c", [3.0])
    assert len(cache) == 2
    assert cache.get("ns", "b") is None
    assert cache.get("ns", "a") == [1.0]
    assert cache.get("ns", "c") == [3.0]


def test_cache_counts_hits_and_misses_and_keys_by_namespace() -> None:
    cache = EmbeddingCache()
    assert cache.maxsize == 1000
    cache.put("one", "text", [1.0, 2.0])
    assert cache.get("two", "text") is None
    assert cache.get("one", "text") == [1.0, 2.0]
    assert cache.get("one", "text") == [1.0, 2.0]
    assert (cache.hits, cache.misses) == (2, 1)
    cache.clear()
    assert len(cache) == 0
    assert cache.get("one", "text") is None
    assert (cache.hits, cache.misses) == (2, 2)


def test_cache_hands_out_copies() -> None:
    cache = EmbeddingCache()
    vector = [1.0, 2.0]
    cache.put("ns", "t", vector)
    vector.append(3.0)
    got = cache.get("ns", "t")
    assert got == [1.0, 2.0]
    assert got is not None
    got[0] = 99.0
    assert cache.get("ns", "t") == [1.0, 2.0]


def test_a_full_cache_holds_its_vectors_as_packed_doubles() -> None:
    """The cache of a long-running process is full: its 1,000 default entries of a 384-d
    model held ~12 MB as tuples of Python floats (~12.3 KB a vector, ~49 MB at 1,536-d).
    Packed doubles (8 bytes a value) keep the same values in a quarter of that."""
    import tracemalloc

    def vector(n: int) -> list[float]:  # as an embedder answers: new floats each time
        return [math.sin(n + i / 7) for i in range(384)]

    cache = EmbeddingCache(maxsize=50)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(50):
            cache.put("index", f"text {n}", vector(n))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / 50 < 384 * 8 + 600  # bytes an entry: the doubles, the key and the slot
    assert [cache.get("index", f"text {n}") for n in range(50)] == [vector(n) for n in range(50)]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_cache_rejects_bad_maxsize(bad: object) -> None:
    with pytest.raises(InvalidOptionError, match="maxsize"):
        EmbeddingCache(maxsize=bad)  # type: ignore[arg-type]


def test_cache_is_thread_safe() -> None:
    cache = EmbeddingCache(maxsize=50)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(2000):
                text = f"t{(i * 7 + worker) % 120}"
                cache.put("ns", text, [float(i)])
                cache.get("ns", text)
                cache.get("ns", f"t{i % 120}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(cache) == 50
    assert cache.hits + cache.misses == 8 * 2000 * 2


# --- embed_with_cache ---------------------------------------------------------------------


def test_embed_dedupes_and_embeds_only_misses_in_one_call() -> None:
    embedder = CountingEmbeddings()
    cache = EmbeddingCache()
    first = embed_with_cache(embedder, cache, "ns", ["a", "bb", "a", "ccc"])
    assert embedder.calls == [["a", "bb", "ccc"]]
    assert first == [embedder.vector(t) for t in ["a", "bb", "a", "ccc"]]
    assert first[0] is not first[2]  # duplicates do not alias one list

    second = embed_with_cache(embedder, cache, "ns", ["ccc", "dddd", "a", "dddd"])
    assert embedder.calls[1:] == [["dddd"]]
    assert second == [embedder.vector(t) for t in ["ccc", "dddd", "a", "dddd"]]

    embed_with_cache(embedder, cache, "ns", ["a", "bb"])
    assert len(embedder.calls) == 2  # all hits: no call at all
    embed_with_cache(embedder, cache, "other", ["a"])
    assert embedder.calls[-1] == ["a"]  # another namespace is another key


def test_embed_of_nothing_calls_nothing() -> None:
    embedder = CountingEmbeddings()
    assert embed_with_cache(embedder, EmbeddingCache(), "ns", []) == []
    assert embedder.calls == []


def _nan_second(vectors: list[list[float]]) -> list[list[float]]:
    return [vectors[0], [math.nan, *vectors[1][1:]], *vectors[2:]]


def _inf_first(vectors: list[list[float]]) -> list[list[float]]:
    return [[math.inf, *vectors[0][1:]], *vectors[1:]]


def _drop_last(vectors: list[list[float]]) -> list[list[float]]:
    return vectors[:-1]


def _ragged(vectors: list[list[float]]) -> list[list[float]]:
    return [vectors[0], vectors[1][:-1], *vectors[2:]]


def _empty(vectors: list[list[float]]) -> list[list[float]]:
    return [[] for _ in vectors]


def _zero_second(vectors: list[list[float]]) -> list[list[float]]:
    return [vectors[0], [0.0] * len(vectors[1]), *vectors[2:]]


def _underflow_first(vectors: list[list[float]]) -> list[list[float]]:
    return [[1e-50] * len(vectors[0]), *vectors[1:]]  # all zero once in float32


def _huge_first(vectors: list[list[float]]) -> list[list[float]]:
    return [[1e308, *vectors[0][1:]], *vectors[1:]]  # finite in Python, inf in float32


def _norm_overflow_first(vectors: list[list[float]]) -> list[list[float]]:
    return [[3e38] * len(vectors[0]), *vectors[1:]]  # each fits float32, the norm does not


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_nan_second, "NaN or infinite"),
        (_inf_first, "NaN or infinite"),
        (_drop_last, "returned 1 vectors for 2 texts"),
        (_ragged, "different lengths"),
        (_empty, "empty vector"),
        (_zero_second, "all-zero vector at position 1"),
        (_underflow_first, "all-zero vector at position 0"),
        (_huge_first, "NaN or infinite .*float32"),
        (_norm_overflow_first, "NaN or infinite .*float32"),
    ],
)
def test_bad_vectors_are_rejected_and_not_cached(
    corrupt: Callable[[list[list[float]]], list[list[float]]], message: str
) -> None:
    cache = EmbeddingCache()
    embedder = CountingEmbeddings(corrupt=corrupt)
    with pytest.raises(SemanticRecallError, match=message):
        embed_with_cache(embedder, cache, "ns", ["x", "yy"])
    assert len(cache) == 0
    embedder.corrupt = None
    assert embed_with_cache(embedder, cache, "ns", ["x", "yy"]) == [
        embedder.vector("x"),
        embedder.vector("yy"),
    ]


def test_numpy_answers_are_accepted_and_garbage_refused() -> None:
    import numpy as np

    embedder = CountingEmbeddings(corrupt=np.asarray)  # type: ignore[arg-type]
    assert embed_with_cache(embedder, EmbeddingCache(), "ns", ["ab"]) == [embedder.vector("ab")]
    embedder.corrupt = lambda vectors: "not vectors"  # type: ignore[assignment,return-value]
    with pytest.raises(SemanticRecallError, match="not a list of vectors"):
        embed_with_cache(embedder, EmbeddingCache(), "ns", ["ab"])
    embedder.corrupt = lambda vectors: [["x", 1.0, 2.0]]  # type: ignore[list-item]
    with pytest.raises(SemanticRecallError, match="non-numeric"):
        embed_with_cache(embedder, EmbeddingCache(), "ns", ["ab"])


def test_embed_with_cache_from_many_threads() -> None:
    embedder = CountingEmbeddings()
    cache = EmbeddingCache(maxsize=30)
    texts = [f"message {i}" for i in range(40)]
    failures: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(200):
                batch = [texts[(i + offset + k) % 40] for k in range(5)]
                got = embed_with_cache(embedder, cache, "ns", batch)
                assert got == [embedder.vector(t) for t in batch]
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n * 3,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert len(cache) == 30


async def test_async_twin_matches_sync() -> None:
    embedder = CountingEmbeddings()
    cache = EmbeddingCache()
    got = await aembed_with_cache(embedder, cache, "ns", ["a", "b", "a"])
    assert got == [embedder.vector(t) for t in ["a", "b", "a"]]
    assert embedder.calls == [["a", "b"]]
    assert await aembed_with_cache(embedder, cache, "ns", ["b"]) == [embedder.vector("b")]
    assert len(embedder.calls) == 1
    embedder.corrupt = _drop_last
    with pytest.raises(SemanticRecallError):
        await aembed_with_cache(embedder, cache, "ns", ["c", "d"])
    assert len(cache) == 2


# --- chunking -----------------------------------------------------------------------------


def test_short_text_is_one_chunk() -> None:
    assert chunk_text("", 10) == [""]
    assert chunk_text("exactly10!", 10) == ["exactly10!"]


def test_chunks_prefer_paragraphs_then_sentences() -> None:
    paragraph = "First paragraph sentence one. Sentence two here.\n\n"
    text = paragraph + "Second paragraph that goes on. And on and on and on and on."
    chunks = chunk_text(text, 80, overlap=0)
    assert chunks[0] == paragraph
    text = "Alpha beta gamma delta. Epsilon zeta eta theta iota kappa."
    assert chunk_text(text, 40, overlap=0)[0] == "Alpha beta gamma delta. "


def test_chunks_overlap_on_word_boundaries() -> None:
    text = " ".join(f"word{i}" for i in range(400))
    chunks = chunk_text(text, 300, overlap=60)
    assert len(chunks) > 1
    for left, right in itertools.pairwise(chunks):
        head = right.split(" ")[0]
        assert head in left.split(" ")  # the next chunk starts on a word of the previous


@pytest.mark.parametrize(("max_chars", "overlap"), [(0, 0), (10, -1)])
def test_chunk_rejects_bad_options(max_chars: int, overlap: int) -> None:
    with pytest.raises(InvalidOptionError):
        chunk_text("some text", max_chars, overlap)


# Arbitrary text, mixed with runs of prose-like pieces so that every kind of boundary
# (paragraph, sentence, whitespace, none at all) shows up.
_TEXT = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from([" ", "\n", "\n\n", ". ", "! ", "word", "\t", "x" * 120]),
    ),
    max_size=150,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, max_chars=st.integers(50, 500), overlap=st.integers(0, 300))
def test_chunks_fit_and_cover_the_text(text: str, max_chars: int, overlap: int) -> None:
    spans = chunk_spans(text, max_chars, overlap)
    chunks = chunk_text(text, max_chars, overlap)
    assert chunks == [text[start:end] for start, end in spans]
    assert all(len(chunk) <= max_chars for chunk in chunks)
    assert spans[0][0] == 0
    assert spans[-1][1] == len(text)
    for (start, end), (next_start, next_end) in itertools.pairwise(spans):
        assert start < next_start <= end < next_end
    # Dropping each chunk's overlap with the previous one rebuilds the text exactly.
    rebuilt = chunks[0] + "".join(
        text[prev_end:end] for (_, prev_end), (_, end) in itertools.pairwise(spans)
    )
    assert rebuilt == text
    if len(text) <= max_chars:
        assert chunks == [text]


@given(text=_TEXT)
def test_default_overlap_coverage(text: str) -> None:
    chunks = chunk_text(text, 60)
    assert all(len(chunk) <= 60 for chunk in chunks)
    covered = 0  # each chunk occurs starting within the prefix covered so far
    for chunk in chunks:
        found = text.rfind(chunk, 0, covered + len(chunk))
        assert found != -1
        covered = max(covered, found + len(chunk))
    assert covered == len(text)


# --- split_for_embedding and model names --------------------------------------------------


class _Splitting(CountingEmbeddings):
    def split_text(self, text: str) -> list[str]:
        return text.split("|")


def test_split_uses_the_embedders_own_splitter() -> None:
    assert split_for_embedding(_Splitting(), "a|b|c") == ["a", "b", "c"]


def test_split_falls_back_to_characters() -> None:
    text = "x" * (DEFAULT_MAX_CHARS + 10)
    pieces = split_for_embedding(CountingEmbeddings(), text)
    assert len(pieces) == 2
    assert all(len(piece) <= DEFAULT_MAX_CHARS for piece in pieces)
    assert split_for_embedding(CountingEmbeddings(), "short") == ["short"]


def test_model_name_from_attributes_or_class() -> None:
    embedder = CountingEmbeddings()
    assert embedding_model_name(embedder) == "CountingEmbeddings"
    embedder.model_id = "by-id"  # type: ignore[attr-defined]
    assert embedding_model_name(embedder) == "by-id"
    embedder.model_name = "by-name"  # type: ignore[attr-defined]
    assert embedding_model_name(embedder) == "by-name"
    embedder.model = "  "  # type: ignore[attr-defined]
    assert embedding_model_name(embedder) == "by-name"
    embedder.model = "text-embedding-3-small"  # type: ignore[attr-defined]
    assert embedding_model_name(embedder) == "text-embedding-3-small"
