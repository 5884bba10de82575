"""Hybrid search's reads: what the keyword half reads early changes no hit, and is not reread.

The keyword half reads the context windows of its best matches while the vector index is
queried (`search_ops._keyword_half`); the kept candidates among them are not read again
after the scoring. `reference_keyword_half` below is the half as it was before (every
match read alone, every kept candidate's window read after the scoring): on generated
conversations, both must return the same hits, windows and scores.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, RecallHit, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.engine import search_ops, steps
from langchain_semantic_recall.engine.vector_space import VectorSpace
from langchain_semantic_recall.records import ScopeFilter, StoredMessage, read_message
from langchain_semantic_recall.relevance import RelevanceModel
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage

START = datetime(2024, 2, 1, 8, 0, tzinfo=UTC)
WORDS = (  # noqa: SIM905 - a word list reads best as text
    "garden tomato recipe trip lisbon guitar lesson invoice budget dentist appointment "
    "marathon training puppy vet birthday cake ticket concert kayak river"
).split()


def conversations(seed: int, threads: int = 4, length: int = 40) -> Iterator[list[BaseMessage]]:
    """Threads of short messages over a small vocabulary: many keyword matches overlap."""
    rng = random.Random(seed)
    for t in range(threads):
        messages: list[BaseMessage] = []
        for n in range(length):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7)))
            text = f"{words}?" if rng.random() < 0.3 else words
            kind = HumanMessage if n % 2 == 0 else AIMessage
            at = (START + timedelta(days=t, minutes=n)).isoformat()
            messages.append(kind(text, id=f"t{t}-{n}", additional_kwargs={"created_at": at}))
        yield messages


def reference_keyword_half(
    space: VectorSpace, query: str, scope: ScopeFilter, k: int, model: RelevanceModel
) -> search_ops.Op[Any]:
    """The keyword half before early windows: every match read alone, no window."""
    keyword: list[tuple[str, float]] = yield steps.KeywordSearch(query, scope=scope, limit=k)
    ids = [message_id for message_id, _ in keyword]
    found = (yield steps.ReadWindows(ids, before=0, after=0, scope=scope)) if ids else {}
    size: int = yield steps.CountMessages(scope, up_to=model.size_cap)
    return keyword, found, {}, size


def same_hits(got: Sequence[RecallHit], want: Sequence[RecallHit]) -> None:
    assert [(h.message, h.window) for h in got] == [(h.message, h.window) for h in want]
    for a, b in zip(got, want, strict=True):
        assert a.score == pytest.approx(b.score, rel=0, abs=1e-9)


def engine(storage: MessageStorage, **options: Any) -> SemanticRecall:
    return SemanticRecall(
        storage=storage,
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        **options,
    )


OPTIONS: list[dict[str, Any]] = [
    {},  # the defaults (silent when the fake vectors carry no evidence)
    {"threshold": 0.0},
    {"threshold": 0.0, "top_k": 5, "message_range": 1},
    {"threshold": 0.0, "message_range": (0, 3), "message_budget": None},
]
QUERIES = [
    "what about the garden tomato recipe?",
    "lisbon trip ticket",
    "guitar lesson budget and invoice",
    "puppy vet appointment on Monday",
    "kayak river marathon training in February",
]


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
@pytest.mark.parametrize("seed", [1, 2])
def test_early_windows_give_the_hits_of_reading_them_after(
    backend: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage: MessageStorage = (
        SQLiteStorage(tmp_path / "m.db") if backend == "sqlite" else InMemoryStorage()
    )
    loader = engine(storage)
    for n, messages in enumerate(conversations(seed)):
        loader.index(messages, thread_id=f"thread-{n}", resource_id="r")
    searches = [
        (query, options, narrowing)
        for query in QUERIES
        for options in OPTIONS
        for narrowing in ({}, {"thread_id": "thread-1"}, {"since": START + timedelta(days=2)})
    ]
    new = []
    for query, options, narrowing in searches:
        new.append(engine(storage, **options).search(query, resource_id="r", **narrowing))
    monkeypatch.setattr(search_ops, "_keyword_half", reference_keyword_half)
    for (query, options, narrowing), got in zip(searches, new, strict=True):
        want = engine(storage, **options).search(query, resource_id="r", **narrowing)
        same_hits(got, want)
    assert sum(bool(hits) for hits in new) > len(searches) // 2  # the cases found something


def test_kept_keyword_matches_are_read_once() -> None:
    storage = RecordingStorage(InMemoryStorage())
    memory = engine(storage, threshold=0.0, top_k=5)
    for n, messages in enumerate(conversations(3)):
        memory.index(messages, thread_id=f"thread-{n}", resource_id="r")
    storage.calls.clear()
    hits = memory.search("garden tomato recipe for the birthday cake", resource_id="r")
    assert hits
    windows = [args for name, args in storage.calls if name == "get_windows" and args["before"]]
    early, *late = windows
    assert len(early["message_ids"]) == 5  # the best keyword matches, as many as `top_k`
    for later in late:  # kept candidates whose windows were not read early, if any
        assert not set(later["message_ids"]) & set(early["message_ids"])


def test_read_message_is_the_constructors_message() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    args = ("m1", "t1", "r1", "user", "hello there", at, '{"type": "human"}', 7)
    for metadata in ((), (("kind", "note"), ("n", 2))):
        built = StoredMessage(*args, metadata=metadata)
        read = read_message(*args, metadata)
        assert read == built
        assert hash(read) == hash(built)
        for field in dataclasses.fields(StoredMessage):
            assert getattr(read, field.name) == getattr(built, field.name), field.name
        assert read.created is False
        with pytest.raises(dataclasses.FrozenInstanceError):
            read.text = "changed"  # type: ignore[misc]
