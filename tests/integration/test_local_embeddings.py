"""The local all-MiniLM-L6-v2 embedder, on the real model (offline; marked slow)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from langchain_semantic_recall import local_embeddings, local_model
from langchain_semantic_recall.embeddings import embedding_model_name, split_for_embedding
from langchain_semantic_recall.errors import InvalidOptionError, SemanticRecallError
from langchain_semantic_recall.local_embeddings import LocalEmbeddings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local() -> LocalEmbeddings:
    return LocalEmbeddings()


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# fmt: off
_VOCABULARY = (
    "memory", "recall", "agent", "conversation", "message", "vector", "index", "hiking",
    "mountain", "invoice", "Friday", "embedding", "tokenizer", "paragraph", "sentence",
    "unbelievably", "extraordinary", "naïve", "café", "東京", "résumé", "42", "3.14", "e-mail",
    "user@example.com",
)
# fmt: on


def _long_text(words: int) -> str:
    rng = random.Random(7)
    paragraphs: list[str] = []
    count = 0
    while count < words:
        sentences = []
        for _ in range(rng.randint(2, 6)):
            size = rng.randint(4, 25)
            sentences.append(" ".join(rng.choice(_VOCABULARY) for _ in range(size)).capitalize())
            count += size
        paragraphs.append(". ".join(sentences) + ".")
    return "\n\n".join(paragraphs)


def test_construction_is_cheap_and_validated() -> None:
    embedder = LocalEmbeddings()
    assert embedder._loaded is None  # nothing loaded until first use
    assert (embedder.model, embedder.dimension, embedder.max_tokens) == (
        "sentence-transformers/all-MiniLM-L6-v2",
        384,
        256,
    )
    assert embedding_model_name(embedder) == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(InvalidOptionError, match="batch_size"):
        LocalEmbeddings(batch_size=0)


def test_vectors_are_unit_384d_and_semantic(local: LocalEmbeddings) -> None:
    hiking, trekking, invoice, empty = local.embed_documents(
        [
            "I love hiking in the mountains",
            "Mountain trekking is my passion",
            "The invoice is due Friday",
            "",
        ]
    )
    for vector in (hiking, trekking, invoice, empty):
        assert len(vector) == 384
        assert math.isclose(math.sqrt(_cosine(vector, vector)), 1.0, abs_tol=1e-5)
    assert _cosine(hiking, trekking) > _cosine(hiking, invoice) + 0.3
    assert local.embed_query("I love hiking in the mountains") == hiking


def test_padding_and_batching_do_not_change_vectors(local: LocalEmbeddings) -> None:
    short = "Mountain trekking is my passion"
    alone = local.embed_query(short)
    longer = [_long_text(30), "The invoice is due Friday", _long_text(120)]
    batched = local.embed_documents([longer[0], short, *longer[1:]])
    small_batches = LocalEmbeddings(batch_size=2).embed_documents([*longer, short])
    for vector in (batched[1], small_batches[3]):
        assert max(abs(x - y) for x, y in zip(alone, vector, strict=True)) < 1e-4


def test_split_text_fits_the_model_and_covers_the_text(local: LocalEmbeddings) -> None:
    text = _long_text(5000)
    chunks = local.split_text(text)
    assert len(chunks) > 10
    assert all(local.count_tokens(chunk) <= local.max_tokens for chunk in chunks)
    covered = 0  # each chunk occurs starting within the prefix covered so far
    for chunk in chunks:
        found = text.rfind(chunk, 0, covered + len(chunk))
        assert found != -1
        assert found <= covered
        covered = max(covered, found + len(chunk))
    assert covered == len(text)
    assert split_for_embedding(local, text) == chunks
    assert local.split_text("short text") == ["short text"]
    assert local.split_text("") == [""]


def test_the_local_models_description_names_and_splits_as_the_embedder_does(
    local: LocalEmbeddings,
) -> None:
    """`stats` (the command line's) counts a message's chunks with `LocalModel`, not the
    embedder (a LangChain class): both must cut every text the same."""
    text = _long_text(3000)
    described = local_model.LocalModel()
    assert (described.model, described.dimension) == (local.model, local.dimension)
    assert embedding_model_name(described) == embedding_model_name(local)
    assert split_for_embedding(described, text) == split_for_embedding(local, text)
    assert len(split_for_embedding(described, text)) > 5
    overlapping = local_model.LocalModel(chunk_overlap_tokens=0)
    assert overlapping.split_text(text) == LocalEmbeddings(chunk_overlap_tokens=0).split_text(text)


@pytest.mark.parametrize(
    ("module", "constant"),
    [(local_embeddings, "MODEL_SHA256"), (local_model, "TOKENIZER_SHA256")],
)
def test_corrupt_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, module: object, constant: str
) -> None:
    monkeypatch.setattr(module, constant, "0" * 64)
    embedder = LocalEmbeddings()
    with pytest.raises(SemanticRecallError, match="integrity check"):
        embedder.embed_query("anything")
    assert embedder._loaded is None


async def test_async_twins_equal_sync(local: LocalEmbeddings) -> None:
    texts = ["I love hiking in the mountains", "The invoice is due Friday"]
    assert await local.aembed_documents(texts) == local.embed_documents(texts)
    assert await local.aembed_query(texts[0]) == local.embed_query(texts[0])


def test_the_shipped_reference_vectors_are_the_local_models_own(local: LocalEmbeddings) -> None:
    """`scripts/write-reference-vectors` wrote them from these texts and this model."""
    from langchain_semantic_recall.relevance.reference import SMALL_TALK, UNRELATED, shipped

    reference = shipped(local)
    assert reference is not None
    live = local.embed_documents([*UNRELATED, *SMALL_TALK])
    for kept, fresh in zip([*reference.unrelated, *reference.small_talk], live, strict=True):
        assert _cosine(list(map(float, kept)), fresh) > 0.9999


def test_the_first_search_on_the_default_embedder_embeds_only_the_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_semantic_recall import SemanticRecall

    batches: list[int] = []
    real = LocalEmbeddings.embed_documents

    def counted(self: LocalEmbeddings, texts: list[str]) -> list[list[float]]:
        batches.append(len(texts))
        return real(self, texts)

    monkeypatch.setattr(LocalEmbeddings, "embed_documents", counted)
    with SemanticRecall.local(tmp_path / "store") as memory:
        memory.index("I am allergic to peanuts.", thread_id="t", resource_id="alice")
        batches.clear()
        assert memory.search("What food should I avoid?", resource_id="alice")
    assert batches == [1]
