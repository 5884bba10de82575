"""A cancelled async write to embedded Chroma leaves no message half-written.

Embedded Chroma's async upsert goes a few vectors at a time (`async_writes`), so a
caller's timeout (`asyncio.wait_for`, a server cancelling a request) can land between two
pieces. A long message of several chunks with only its first chunks written *has* a
vector: `stats` and `reindex(missing_only=True)` took it for whole, and the words of its
other chunks were never found by meaning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.embeddings import split_for_embedding
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.integration

LONG = " ".join(f"word{n}" for n in range(1500))  # three chunks


@pytest.mark.parametrize("cancels", [1, 2])
async def test_a_write_cancelled_between_pieces_leaves_no_message_in_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cancels: int
) -> None:
    """The caller is cancelled after the first piece (and, with 2, again after the second)."""
    vectors = ChromaVectorIndex.persistent(
        # (writes behind off: a turn's batch would be written whole after the call)
        tmp_path / "chroma",
        workarounds=ChromaWorkarounds(async_piece=1, write_behind=False),
    )
    embeddings = FakeEmbeddings()
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"), vector_store=vectors, embeddings=embeddings
    )
    name = memory.ensure_index().name
    chunks = len(split_for_embedding(embeddings, LONG))
    assert chunks == 3
    gate = vectors._gate
    assert gate is not None
    loop = asyncio.get_running_loop()
    call = asyncio.create_task(
        memory.aindex([HumanMessage(LONG, id="long")], thread_id="t", resource_id="u")
    )
    alone = gate._alone
    pieces: list[int] = []

    def first_piece_then_cancel(write: Callable[[], None]) -> None:
        alone(write)
        pieces.append(1)
        if len(pieces) <= cancels:  # the caller gives up while a piece is written
            loop.call_soon_threadsafe(call.cancel)

    monkeypatch.setattr(gate, "_alone", first_piece_then_cancel)
    with pytest.raises(asyncio.CancelledError):
        await call
    written = vectors.count(name)
    assert written in (0, chunks), f"{written} of the message's {chunks} chunks written"
    memory.reindex(missing_only=True)
    assert vectors.count(name) == chunks
    assert memory.stats().missing_vectors == 0
