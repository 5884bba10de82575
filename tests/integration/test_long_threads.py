"""A long thread's vectors in embedded Chroma are listed without offset paging."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from tests.fakes import FakeEmbeddings


def test_a_threads_vectors_are_listed_without_offset_paging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stats(thread_id=...)` lists the thread's vectors once by filter, then reads by id.

    Chroma evaluates a `where` filter again for every `offset` page and skips what came
    before, so paging a long thread that way grows with n^2 / page.
    """
    from chromadb.api.models.Collection import Collection

    vectors = ChromaVectorIndex.persistent(tmp_path / "chroma")
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"), vector_store=vectors, embeddings=FakeEmbeddings(8)
    )
    monkeypatch.setattr(vectors._collections, "max_batch", lambda: 100)  # pages of 100
    thread = [
        (HumanMessage if n % 2 == 0 else AIMessage)(f"message {n}", id=f"m{n}") for n in range(450)
    ]
    memory.index(thread, thread_id="long", resource_id="alice")
    memory.index([HumanMessage("another thread", id="x")], thread_id="other", resource_id="alice")
    gets: list[dict[str, Any]] = []
    original = Collection.get

    def recording_get(self: Collection, *args: Any, **kwargs: Any) -> Any:
        gets.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "get", recording_get)
    stats = memory.stats(thread_id="long", resource_id="alice")
    assert (stats.messages, stats.vectors, stats.missing_vectors) == (450, 450, 0)
    assert not [g for g in gets if g.get("where") is not None and g.get("offset")]
    assert sum(1 for g in gets if g.get("where") is not None) == 1
    assert [len(g["ids"]) for g in gets if "ids" in g] == [100, 100, 100, 100, 50]
