"""Chunk vectors an edit to a shorter text left behind are counted by `stats` and removed
by either `reindex`.

A long message is embedded as several chunks (`<id>`, `<id>#1`, ...). Before this release,
editing it to a shorter text overwrote its first chunk only: the later ones kept the old
text, and a search found the message by words it no longer holds. Today's edits delete the
old vectors first, but stores written before keep those leftovers. These tests build such
a store the old way: the later chunks are written straight through the vector index for
a message whose text yields one chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_semantic_recall import InMemoryStorage, RecallStats, SemanticRecall
from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.base import VectorIndex, chunk_id
from langchain_semantic_recall.vectors.langchain import LangChainVectorIndex, Where
from langchain_semantic_recall.vectors.langchain_dialects import InMemoryDialect
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

OLD_TEXT = ("the zeppelin airship hangar tour", "zeppelin airship tickets for saturday")
"""What the later chunks of the old, longer text said: words the message no longer holds."""
LONG = "Lisbon " * 1000  # 7,000 characters: two chunks of the fake embedder, both wanted


def leave_old_chunks(memory: SemanticRecall, message_id: str, thread_id: str, owner: str) -> None:
    """Write chunks 1 and 2 of an older, longer text of the message, as an edit before
    this release left them (the message's text now yields one chunk)."""
    embeddings = FakeEmbeddings()
    name = memory.ensure_index().name
    memory.vector_store.upsert(
        name,
        [
            VectorRecord(
                id=chunk_id(message_id, n),
                vector=embeddings.vector(text),
                message_id=message_id,
                thread_id=thread_id,
                resource_id=owner,
                role="user",
                content=text,
                created_at=datetime(2025, 3, 1, tzinfo=UTC),
            )
            for n, text in enumerate(OLD_TEXT, start=1)
        ],
    )


def engine() -> SemanticRecall:
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="dense",
        threshold=0.5,  # the old chunks score 0.80; one hashed word in common, 0.35
    )
    for owner in ("alice", "bob"):
        memory.index(
            [
                HumanMessage("Book the Lisbon hotel", id=f"{owner}-edited"),
                HumanMessage(LONG, id=f"{owner}-long"),
            ],
            thread_id=f"{owner}-t",
            resource_id=owner,
        )
        leave_old_chunks(memory, f"{owner}-edited", f"{owner}-t", owner)
    return memory


def found(memory: SemanticRecall, owner: str) -> list[str]:
    """The messages a search for the old text's words finds in the owner's memory."""
    return [hit.message.id for hit in memory.search("zeppelin airship", resource_id=owner)]


def held(memory: SemanticRecall, owner: str) -> dict[str, frozenset[str]]:
    name = memory.ensure_index().name
    return memory.vector_store.vector_ids(name, ScopeFilter(resource_id=owner)).by_message()


@pytest.mark.parametrize("missing_only", [True, False])
@pytest.mark.parametrize("twin", ["sync", "async"])
def test_reindex_removes_the_chunks_an_edit_left_and_search_stops_finding_them(
    twin: str, missing_only: bool
) -> None:
    memory = engine()

    def stats(owner: str | None = None) -> RecallStats:
        if twin == "sync":
            return memory.stats(resource_id=owner)
        return asyncio.run(memory.astats(resource_id=owner))

    assert found(memory, "alice") == ["alice-edited"]  # by words it no longer holds
    assert (stats().stray_vectors, stats("alice").stray_vectors) == (4, 2)
    assert (stats().missing_vectors, stats().orphan_vectors) == (0, 0)  # nothing said so
    options = {"missing_only": missing_only, "resource_id": "alice"}
    if twin == "sync":
        written = memory.reindex(**options)  # type: ignore[arg-type]
    else:
        written = asyncio.run(memory.areindex(**options))  # type: ignore[arg-type]
    # the repair embeds the edited message again (whole); a full reindex, every message
    assert written == (1 if missing_only else 2)
    assert found(memory, "alice") == []
    assert held(memory, "alice") == {
        "alice-edited": frozenset({"alice-edited"}),
        "alice-long": frozenset({"alice-long", "alice-long#1"}),  # both its chunks kept
    }
    assert (stats("alice").stray_vectors, stats("bob").stray_vectors) == (0, 2)
    assert found(memory, "bob") == ["bob-edited"]  # another resource's: left as it was
    assert held(memory, "bob")["bob-edited"] == {"bob-edited", "bob-edited#1", "bob-edited#2"}
    assert memory.reindex(missing_only=True) == 1  # bob's now, and nothing after
    assert (stats().stray_vectors, found(memory, "bob")) == (0, [])
    assert memory.reindex(missing_only=True) == 0


def test_a_threads_reindex_repairs_that_thread_only() -> None:
    memory = engine()
    memory.index(
        [HumanMessage("Lisbon again", id="alice-other")], thread_id="t2", resource_id="alice"
    )
    leave_old_chunks(memory, "alice-other", "t2", "alice")
    assert memory.stats(resource_id="alice").stray_vectors == 4
    assert memory.reindex(missing_only=True, thread_id="t2", resource_id="alice") == 1
    assert memory.stats(resource_id="alice", thread_id="t2").stray_vectors == 0
    assert memory.stats(resource_id="alice").stray_vectors == 2  # alice-t's, left alone
    assert held(memory, "alice")["alice-other"] == {"alice-other"}


def test_a_longer_max_index_chars_is_no_stray_and_a_shorter_one_is() -> None:
    """Chunks are counted as `index` embeds the text now: its first `max_index_chars`."""
    memory = engine()
    assert memory.stats(resource_id="bob").stray_vectors == 2
    capped = memory.with_options(max_index_chars=100)  # the long text now yields one chunk
    assert capped.stats(resource_id="bob").stray_vectors == 3
    assert capped.reindex(missing_only=True, resource_id="bob") == 2
    assert held(capped, "bob")["bob-long"] == {"bob-long"}


class _CarelessDialect(InMemoryDialect):
    """A custom dialect whose `select` ignores its conditions (a bug in user code)."""

    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        return super().select(store, {}, limit=limit)


_LOOK_ALIKE = st.sampled_from(["a", "A", "a ", "ａ", "a\u200b", "b"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(_LOOK_ALIKE, st.integers(0, 1), st.booleans()), min_size=1, max_size=12
    ),
    pick=st.integers(0, 100),
    whole_resource=st.booleans(),
    missing_only=st.booleans(),
    careless=st.booleans(),
)
def test_a_repair_never_reaches_another_resource(
    rows: list[tuple[str, int, bool]],
    pick: int,
    whole_resource: bool,
    missing_only: bool,
    careless: bool,
) -> None:
    """Look-alike resources, some messages with old chunks left: a reindex of one resource
    (or thread) leaves every other resource's vectors exactly as they were, and none of
    its own beyond a message's chunks. `careless`: a LangChain store whose `select`
    ignores its conditions (a bug in a user's dialect)."""
    embeddings = FakeEmbeddings()
    vectors: VectorIndex = InMemoryVectorIndex()
    if careless:
        store = InMemoryVectorStore(embedding=embeddings)
        vectors = LangChainVectorIndex(store, dialect=_CarelessDialect())
    memory = SemanticRecall(storage=InMemoryStorage(), vector_store=vectors, embeddings=embeddings)
    for n, (resource, thread, stray) in enumerate(rows):
        thread_id = f"{resource}/t{thread}"
        memory.index(
            [HumanMessage(f"note {n}", id=f"m{n}")], thread_id=thread_id, resource_id=resource
        )
        if stray:
            leave_old_chunks(memory, f"m{n}", thread_id, resource)
    resource, thread, _ = rows[pick % len(rows)]
    scope = {"resource_id": resource} if whole_resource else {"thread_id": f"{resource}/t{thread}"}
    others = {r for r, _, _ in rows} - {resource}
    before = {r: held(memory, r) for r in others}
    strays = {r: memory.stats(resource_id=r).stray_vectors for r in others}
    memory.reindex(missing_only=missing_only, **scope)  # type: ignore[arg-type]
    assert {r: held(memory, r) for r in others} == before
    assert {r: memory.stats(resource_id=r).stray_vectors for r in others} == strays
    assert memory.stats(**scope).stray_vectors == 0  # type: ignore[arg-type]
    name = memory.ensure_index().name
    where = ScopeFilter(resource, None if whole_resource else f"{resource}/t{thread}")
    assert all(ids == {m} for m, ids in vectors.vector_ids(name, where).by_message().items())
