"""purge() on backends with nothing to compact: a no-op or a refusal before any change."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import CompactNotSupportedError
from langchain_semantic_recall.storage.memory import InMemoryStorage
from langchain_semantic_recall.vectors import chroma_rebuild
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

DIM = 64

EIGHTH = 0.125


class SignEmbeddings(Embeddings):
    """Each text -> 64 signs of 1/8 from its sha256: distinct, and of length 1 exactly."""

    dimension = DIM
    model = "sign-64"

    @staticmethod
    def vector(text: str) -> list[float]:
        bits = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        return [EIGHTH if bits >> i & 1 else -EIGHTH for i in range(DIM)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


def test_in_memory_backends_purge_as_a_no_op() -> None:
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=SignEmbeddings()
    )
    memory.index([HumanMessage("note zqabcdefgh7")], thread_id="t", resource_id="r")
    result = memory.purge()
    assert result.storage.done == result.vectors.done == ("nothing stored on disk",)
    assert memory.stats().vectors == 1


def test_a_backend_that_cannot_compact_is_refused_before_anything_changes() -> None:
    class Plain(InMemoryVectorIndex):
        supports_compact = False

    storage = InMemoryStorage()
    memory = SemanticRecall(storage=storage, vector_store=Plain(), embeddings=SignEmbeddings())
    with pytest.raises(CompactNotSupportedError, match="Plain cannot"):
        memory.purge()
    with pytest.raises(CompactNotSupportedError):
        Plain().compact("any-index")


@pytest.mark.parametrize(
    ("left", "kept"),
    [
        ({"chroma", "chroma.purge-tmp"}, "chroma"),
        ({"chroma", "chroma.purge-ready"}, "chroma"),
        ({"chroma.purge-old", "chroma.purge-ready"}, "chroma.purge-ready"),
        ({"chroma", "chroma.purge-old", "chroma.purge-ready"}, "chroma.purge-ready"),
        ({"chroma", "chroma.purge-old"}, "chroma"),
        ({"chroma.purge-old"}, "chroma.purge-old"),
    ],
)
def test_a_crash_at_any_point_of_the_swap_is_recovered(
    tmp_path: Path, left: set[str], kept: str
) -> None:
    """What a kill leaves at each point: the right copy ends up as the folder, alone."""
    for name in left:
        (tmp_path / name).mkdir()
        (tmp_path / name / "which").write_text(name)
    assert chroma_rebuild.recover_swap(str(tmp_path / "chroma"))
    assert [p.name for p in tmp_path.iterdir()] == ["chroma"]
    assert (tmp_path / "chroma" / "which").read_text() == kept


def test_a_file_removed_while_the_folder_is_measured_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background snapshot build renames its temporary file while a purge measures."""
    import os

    from langchain_semantic_recall.vectors import chroma_purge

    (tmp_path / "kept.bin").write_bytes(b"x" * 10)
    real_walk = os.walk

    def walk(folder: str) -> object:
        for root, dirs, files in real_walk(folder):
            yield root, dirs, [*files, "renamed-meanwhile.tmp"]

    monkeypatch.setattr(os, "walk", walk)
    assert chroma_purge.folder_bytes(str(tmp_path)) == 10
