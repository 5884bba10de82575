"""Users stay apart on the embedded default while its caches churn and calls overlap.

The embedded store keeps state per resource that a server deployment does not: SQLite's
in-memory keyword postings of the busiest resources (`storage/keyword_index.py`), embedded
Chroma's bound on loaded indexes (`chroma_workarounds.unload`), the vector snapshots of big
resources (`vectors/chroma_snapshots.py`) and the cached collection handles. Here every one
of them is held tiny so that it evicts, rebuilds or unloads all the time, three users
store the very same sentences (a cache keyed by text must not carry a user's message to
another), and threads index, search (sync and async) and forget at once. No search may
return, and no count or index listing of a user may hold, another user's message.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors import chroma_collections
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import run_at_once

USERS = ("ann", "ben", "cat")
SAID = (  # every user says the same things
    "I'm allergic to peanuts and shellfish.",
    "My sister moved to Lisbon last spring.",
    "We adopted a dog named Rex from the shelter.",
    "I switched to night shifts at the hospital.",
)
ASKED = ("peanuts", "Lisbon sister", "dog shelter", "hospital night shifts", "Rex")

step = st.one_of(
    st.tuples(
        st.just("index"),
        st.sampled_from(USERS),
        st.integers(0, 1),
        st.integers(0, len(SAID) - 1),
        st.booleans(),
    ),
    st.tuples(st.just("search"), st.sampled_from(USERS), st.sampled_from(ASKED), st.booleans()),
    st.tuples(st.just("forget"), st.sampled_from(USERS), st.integers(0, 1), st.booleans()),
)


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SemanticRecall]:
    folder: Path = tmp_path_factory.mktemp("pressure")
    patch = pytest.MonkeyPatch()
    patch.setattr(chroma_collections, "CACHED_COLLECTIONS", 1)  # one handle cached
    storage = SQLiteStorage(
        folder / "messages.sqlite3", keyword_cache_docs=12, keyword_cache_min_docs=2
    )
    vectors = ChromaVectorIndex.persistent(
        folder / "chroma", workarounds=ChromaWorkarounds(max_loaded=2), snapshots_from=4
    )
    engine = SemanticRecall(storage=storage, vector_store=vectors, embeddings=FakeEmbeddings(64))
    yield engine
    engine.close()
    vectors.close()
    storage.close()
    patch.undo()


class Run:
    """One example: its id prefix, and what the threads saw."""

    def __init__(self) -> None:
        self.tag = f"p{uuid.uuid4().hex[:8]}-"
        self.lock = threading.Lock()
        self.leaks: list[str] = []

    def owner(self, user: str) -> str:
        return f"{self.tag}{user}"

    def do_all(self, memory: SemanticRecall, steps: list[tuple[Any, ...]]) -> None:
        for step in steps:
            self.do(memory, step)

    def do(self, memory: SemanticRecall, one: tuple[Any, ...]) -> None:
        kind, user = one[0], one[1]
        owner = self.owner(user)
        if kind == "index":
            _, _, n, said, is_async = one
            turn = [
                HumanMessage(SAID[said], id=f"{owner}-{uuid.uuid4().hex[:8]}"),
                AIMessage(f"Noted: {SAID[said]}", id=f"{owner}-{uuid.uuid4().hex[:8]}"),
            ]
            thread = f"{owner}-t{n}"
            result = (
                asyncio.run(memory.aindex(turn, thread_id=thread, resource_id=owner))
                if is_async
                else memory.index(turn, thread_id=thread, resource_id=owner)
            )
            assert result.error is None, result
        elif kind == "search":
            _, _, query, is_async = one
            hits = (
                asyncio.run(memory.asearch(query, resource_id=owner))
                if is_async
                else memory.search(query, resource_id=owner)
            )
            for hit in hits:
                for message in (hit.message, *hit.window):
                    if message.resource_id != owner or not message.id.startswith(f"{owner}-"):
                        with self.lock:
                            self.leaks.append(f"{owner} got {message.id} ({message.resource_id})")
        else:
            _, _, n, is_async = one
            thread = f"{owner}-t{n}"
            if memory.storage.get_thread_owner(thread) is None:
                return
            if is_async:
                asyncio.run(memory.aforget_thread(thread, resource_id=owner))
            else:
                memory.forget_thread(thread, resource_id=owner)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(workers=st.lists(st.lists(step, min_size=2, max_size=8), min_size=3, max_size=3))
def test_users_stay_apart_while_every_cache_churns(
    memory: SemanticRecall, workers: list[list[tuple[Any, ...]]]
) -> None:
    run = Run()
    for user in USERS:  # each user starts with a few messages, the same words as the others'
        for said in SAID:
            run.do(memory, ("index", user, 0, SAID.index(said), False))
    run_at_once([partial(run.do_all, memory, steps) for steps in workers])
    assert run.leaks == []
    name = memory.ensure_index().name
    for user in USERS:
        owner = run.owner(user)
        stored = {m.id for m in memory.storage.list_messages(ScopeFilter(resource_id=owner))}
        assert all(message_id.startswith(f"{owner}-") for message_id in stored)
        held = memory.vector_store.message_ids(name, ScopeFilter(resource_id=owner))
        assert held == stored  # nobody else's vector in the user's index, none of theirs lost
        stats = memory.stats(resource_id=owner)
        assert (stats.messages, stats.vectors, stats.missing_vectors) == (
            len(stored),
            len(stored),
            0,
        )
        for query in ASKED:  # and afterwards, one by one, each finds only their own
            for hit in memory.search(query, resource_id=owner):
                assert hit.message.id in stored
