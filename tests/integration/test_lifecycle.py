"""Closing an engine on embedded Chroma: a client it opened is closed, a passed one is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_semantic_recall import SemanticRecall, StorageError
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors import ChromaVectorIndex
from tests.fakes import FakeEmbeddings
from tests.unit.test_lifecycle import TURN


def test_local_closes_its_chroma_client_and_sqlite(tmp_path: Path) -> None:
    memory = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings())
    memory.index(TURN, thread_id="t1", resource_id="alice")
    client = memory.vector_store.client
    with memory:
        assert memory.search("peanuts", resource_id="alice")
    assert client._closed  # chromadb's own flag: its system is released
    with pytest.raises(StorageError):
        memory.storage.count(ScopeFilter(resource_id="alice"))
    with SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()) as reopened:
        assert reopened.search("peanuts", resource_id="alice")  # nothing was lost


def test_a_chroma_client_passed_in_stays_open(tmp_path: Path) -> None:
    import chromadb

    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    index = ChromaVectorIndex(client)
    index.close()
    assert not client._closed
    client.close()
