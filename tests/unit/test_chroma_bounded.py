"""Embedded Chroma with a bounded cache of loaded resource indexes."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InvalidOptionError, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.settings import DEFAULT_MAX_LOADED, create_vector_index
from langchain_semantic_recall.vectors.chroma_bounded import persistent_bounded
from tests.fakes import FakeEmbeddings


def cache_size(index: object) -> int:
    return int(index.client._server.hnsw_cache_size)  # type: ignore[attr-defined]


def test_chroma_urls_bound_the_loaded_indexes(tmp_path: Path) -> None:
    assert cache_size(create_vector_index(f"chroma:///{tmp_path}/a")) == DEFAULT_MAX_LOADED
    assert cache_size(create_vector_index(f"chroma:///{tmp_path}/b?max_loaded=5")) == 5
    unbounded = cache_size(create_vector_index(f"chroma:///{tmp_path}/c?max_loaded=0"))
    assert unbounded > DEFAULT_MAX_LOADED  # Chroma's own: the open-file limit / 5
    with pytest.raises(InvalidOptionError, match="max_loaded"):
        create_vector_index(f"chroma:///{tmp_path}/d?max_loaded=-1")
    with pytest.raises(InvalidOptionError, match="max_loaded"):
        create_vector_index(f"chroma:///{tmp_path}/e?cache=3")


def test_evicted_resources_are_searched_again_correctly(tmp_path: Path) -> None:
    """With room for 2 loaded indexes, 5 resources in turn: each still finds its own."""
    vectors = persistent_bounded(tmp_path / "chroma", max_loaded_collections=2)
    assert cache_size(vectors) == 2
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"),
        vector_store=vectors,
        embeddings=FakeEmbeddings(),
        search_mode="dense",
    )
    topics = ["tomato garden", "piano lesson", "lisbon trip", "peanut allergy", "tennis club"]
    for n, topic in enumerate(topics):
        turn = [HumanMessage(f"tell me about my {topic}"), AIMessage(f"your {topic} is great")]
        memory.index(turn, thread_id=f"t{n}", resource_id=f"user-{n}")
    for _ in range(2):  # the second round reloads indexes the first one evicted
        for n, topic in enumerate(topics):
            hits = memory.search(topic, resource_id=f"user-{n}")
            assert hits
            assert all(hit.message.resource_id == f"user-{n}" for hit in hits)
            assert topic in hits[0].message.text
    with pytest.raises(ValueError, match=">= 1"):
        persistent_bounded(tmp_path / "other", max_loaded_collections=0)
