"""The CPU gate with embedded Chroma and the local model.

tests/unit/test_cpu_gate.py has the gate itself.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.cpu_gate import CpuGate
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex, resource_collection_name
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from tests.unit.test_cpu_gate import WAIT_S, Log, holding, in_thread, writes_waiting


@pytest.mark.parametrize("behind", [False, True], ids=["async-pieces", "written-behind"])
def test_an_async_embedded_chroma_write_waits_for_a_model_run(tmp_path: Path, behind: bool) -> None:
    """Pieces of an async write, and the worker writing a turn's vectors behind, alike."""
    gate = CpuGate()
    index = ChromaVectorIndex.persistent(
        tmp_path / "chroma", workarounds=ChromaWorkarounds(cpu_gate=gate, write_behind=behind)
    )
    index.open("gate-test", dimension=3, model="m")
    records = [
        VectorRecord(
            id=f"m{n}",
            vector=[1.0, float(n), 0.5],
            message_id=f"m{n}",
            thread_id="t",
            resource_id="alice",
            role="user",
            content=f"text {n}",
            created_at=datetime(2024, 1, 1, tzinfo=UTC),
        )
        for n in range(3)
    ]
    scope = ScopeFilter(resource_id="alice")

    def in_chroma() -> int:
        from chromadb.errors import NotFoundError

        try:
            name = resource_collection_name("gate-test", "alice")
            return int(index.client.get_collection(name).count())
        except NotFoundError:  # created inside the gate too
            return 0

    log = Log()
    release = threading.Event()
    run = in_thread(lambda: holding(gate, "run", "run", log, release))

    async def write_while_the_model_runs() -> int:
        if behind:  # (the sync twin's: `aupsert` writes at the call)
            index.upsert("gate-test", records, behind=True)
        upsert = asyncio.ensure_future(index.aupsert("gate-test", [] if behind else records))
        waited = await asyncio.to_thread(writes_waiting, gate, 1)
        assert waited, "the write never came to the gate"
        written_meanwhile = in_chroma()  # (`count` would wait for the write behind)
        release.set()
        await upsert
        return written_meanwhile

    try:
        assert log.wait_for(lambda: log == ["run in"])
        assert asyncio.run(write_while_the_model_runs()) == 0
    finally:
        release.set()
        run.join(WAIT_S)
    assert index.count("gate-test", scope) == 3
    index.close()


def test_the_local_model_does_not_run_while_a_write_holds_the_gate() -> None:
    gate = CpuGate()
    model = LocalEmbeddings(cpu_gate=gate)
    model.embed_query("load the model first")
    done = threading.Event()

    def embed() -> None:
        model.embed_query("held back")
        done.set()

    with gate.alone():
        embedding = in_thread(embed)
        # Unblocked, one short text takes ~10 ms: it must still be waiting after 300.
        assert not done.wait(0.3)
    assert done.wait(WAIT_S)
    embedding.join(WAIT_S)


def test_the_engine_gives_its_model_and_its_index_one_gate_of_their_own(tmp_path: Path) -> None:
    """`local()` owns the gate: shared by its model and index, not by another engine's."""
    first = SemanticRecall.local(tmp_path / "a")
    second = SemanticRecall.local(tmp_path / "b")
    try:
        model, index = first.embeddings, first.vector_store
        assert isinstance(model, LocalEmbeddings)
        assert isinstance(index, ChromaVectorIndex)
        assert model.cpu_gate is not None
        assert index.workarounds.cpu_gate is model.cpu_gate
        other = second.embeddings
        assert isinstance(other, LocalEmbeddings)
        assert other.cpu_gate is not model.cpu_gate
        assert LocalEmbeddings().cpu_gate is None  # built apart: no gate
    finally:
        first.storage.close()
        second.storage.close()
