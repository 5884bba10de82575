"""Embedded Chroma under 60 concurrent async users: every recall finds its user's memory.

And a resource unloaded between two searches loses none of its vectors.

Each round, every user indexes a turn naming a new code word and recalls it at once,
all users together; later rounds recall the first round's word too (a read of a
collection that may have been unloaded and loaded again meanwhile). Runs with the
package's default bound on loaded indexes (128) and with a bound far below the number of
users (8), so that unloading happens all through the run. Before the fix, with the
default bound, Chroma's loaded-index pool evicted indexes it had never written to disk,
and a later search of such a resource raised "Error creating hnsw segment reader:
Nothing found on disk": the turn silently recalled nothing (1-2 of 60 users in round 0,
every run). Nothing here is mocked but the embedder
(`FakeEmbeddings`: fast, similarity-preserving).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from langchain_semantic_recall.vectors.chroma_workarounds.unload import RestartingBindings
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.slow

USERS, ROUNDS = 60, 3


def word(user: int, round_: int) -> str:
    return f"cw{user}x{round_}z"


def turn(user: int, round_: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"remember my code word {word(user, round_)} please"),
        AIMessage(f"noted: your code word is {word(user, round_)}"),
    ]


@pytest.fixture(params=["", "?max_loaded=8"], ids=["default-bound", "bound-8"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SemanticRecall]:
    memory = SemanticRecall.from_url(
        storage=f"sqlite:///{tmp_path}/messages.sqlite3",
        vector=f"chroma:///{tmp_path}/chroma{request.param}",
        embeddings=FakeEmbeddings(64),
        search_mode="dense",
        threshold=0.3,
    )
    yield memory
    memory.storage.close()


async def user_round(memory: SemanticRecall, user: int, round_: int) -> list[str]:
    """Index the round's turn, then recall its word and the first round's; the misses."""
    resource = f"user-{user}"
    result = await memory.aindex(
        turn(user, round_), thread_id=f"{resource}-t{round_}", resource_id=resource
    )
    assert result.error is None, result.error
    missed = []
    for asked in {word(user, round_), word(user, 0)}:
        question = HumanMessage(f"what was my code word {asked}")
        recalled = await memory.arecall(
            [question], thread_id=f"{resource}-ask", resource_id=resource
        )
        remembered = [m for m in recalled if m is not question]
        if not any(asked in str(m.content) for m in remembered):
            missed.append(f"{resource} round {round_}: {asked}")
        if any(f"cw{user}x" not in str(m.content) for m in remembered):
            missed.append(f"{resource} round {round_}: another user's memory {remembered}")
    return missed


async def test_every_concurrent_recall_finds_its_own_memory(
    memory: SemanticRecall, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="langchain_semantic_recall")
    for round_ in range(ROUNDS):
        rounds = [user_round(memory, u, round_) for u in range(USERS)]
        missed = [m for misses in await asyncio.gather(*rounds) for m in misses]
        problems = [r.getMessage() for r in caplog.records]
        assert not missed, f"{len(missed)} recalls missed: {missed[:5]}; logged: {problems[:3]}"
    assert not caplog.records, [r.getMessage() for r in caplog.records][:3]


def record(resource: str, n: int, vector: list[float]) -> VectorRecord:
    return VectorRecord(
        id=f"{resource}-{n}",
        vector=vector,
        message_id=f"{resource}-{n}",
        thread_id=f"{resource}-t",
        resource_id=resource,
        role="user",
        content=f"message {n}",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


@pytest.mark.parametrize(("bound", "others"), [(1, 2), (64, 100)])
def test_unloading_loses_no_vector_written_since_the_index_was_last_on_disk(
    tmp_path: Path, bound: int, others: int
) -> None:
    """Chroma writes an index to disk every 1,000 vectors; the ones since must survive.

    Before the fix (with 64: one index per shard of Chroma's pool, 102 resources), the
    pool evicted "big" with its last vector in memory only, and a search after the
    second eviction read the copy on disk: "big-2000" was silently gone (found:
    "big-386"); "late", never on disk, raised "Nothing found on disk".
    """
    rng = random.Random(7)
    vectors = ChromaVectorIndex.persistent(
        tmp_path / "chroma", workarounds=ChromaWorkarounds(max_loaded=bound)
    )
    vectors.open("idx", dimension=8, model="m")

    def vector() -> list[float]:
        return [rng.random() for _ in range(8)]

    vectors.upsert("idx", [record("big", n, vector()) for n in range(1005)])  # on disk
    late = vector()
    vectors.upsert("idx", [record("late", 0, late)])  # in memory only: under 1,000
    vectors.upsert("idx", [record("big", 2000, late)])
    smalls = [f"small-{n}" for n in range(others)]
    for resource in smalls:
        vectors.upsert("idx", [record(resource, 0, vector())])
    for _ in range(2):
        for resource in ("big", "late", *smalls):
            hits = vectors.query("idx", late, k=1, scope=ScopeFilter(resource_id=resource))
            assert len(hits) == 1, resource
            if resource == "big":
                assert hits[0].id == "big-2000"
            if resource == "late":
                assert hits[0].id == "late-0"
    restarting = vectors.client._server.bindings  # type: ignore[attr-defined]
    assert isinstance(restarting, RestartingBindings)
    assert restarting.restarts > 2
