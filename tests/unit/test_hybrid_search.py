"""Hybrid search through the engine: modes, defaults, scope, budget, time, backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import (
    InMemoryStorage,
    InvalidOptionError,
    MessageRange,
    OwnershipError,
    RecallHit,
    SemanticRecall,
    SQLiteStorage,
)
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.records import MessageRecord
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.sqlite import _MIGRATIONS
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors

START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


class CountingStorage(InMemoryStorage):
    """In-memory storage that counts its keyword searches."""

    def __init__(self) -> None:
        super().__init__()
        self.keyword_calls = 0

    def keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        self.keyword_calls += 1
        return super().keyword_search(query, scope=scope, limit=limit)


def engine(storage: MessageStorage | None = None, **options: Any) -> SemanticRecall:
    if options.get("search_mode", "auto") in {"auto", "hybrid"}:
        # Fake vectors: hybrid's evidence rule is fit for a real embedder, so these tests
        # of ranking, scope and windows turn silence off (threshold 0: the whole budget).
        options.setdefault("threshold", 0.0)
    return SemanticRecall(
        storage=storage if storage is not None else InMemoryStorage(),
        vector_store=options.pop("vector_store", None) or InMemoryVectorIndex(),
        embeddings=options.pop("embeddings", None) or FakeEmbeddings(),
        **options,
    )


def conversation(
    prefix: str, texts: Sequence[str], *, start: datetime = START
) -> list[BaseMessage]:
    return [
        (HumanMessage if n % 2 == 0 else AIMessage)(
            text,
            id=f"{prefix}-{n}",
            additional_kwargs={"created_at": (start + timedelta(seconds=n)).isoformat()},
        )
        for n, text in enumerate(texts)
    ]


FILLER = [f"small talk number {n} about nothing much" for n in range(12)]


def returned(hits: Sequence[RecallHit]) -> list[str]:
    return list(dict.fromkeys(m.id for hit in hits for m in hit.window))


# --- options -------------------------------------------------------------------------------


def test_auto_is_hybrid_with_the_measured_defaults_when_the_storage_searches_keywords() -> None:
    memory = engine(threshold=None)
    assert memory.search_mode == "hybrid"
    assert memory.top_k == 20  # the relevance model's candidates
    assert memory.message_range == MessageRange(2, 3)
    assert memory.message_budget == 15
    assert memory.threshold is None  # the evidence decides how many; a threshold is a floor
    assert memory.time_boost == 0.5
    keyword = engine(search_mode="keyword")
    assert (keyword.top_k, keyword.message_range, keyword.threshold) == (
        12,
        MessageRange(0, 2),
        None,
    )


def test_auto_is_dense_with_the_originals_defaults_otherwise() -> None:
    memory = engine(RecordingStorage(InMemoryStorage()))  # declares no keyword search
    assert memory.search_mode == "dense"
    assert (memory.top_k, memory.message_range, memory.message_budget) == (
        4,
        MessageRange(1, 1),
        None,
    )


def test_dense_mode_is_the_original_one_option_away() -> None:
    memory = engine(search_mode="dense")
    assert (memory.search_mode, memory.top_k, memory.message_range, memory.message_budget) == (
        "dense",
        4,
        MessageRange(1, 1),
        None,
    )
    tuned = engine(search_mode="dense", top_k=7, message_range=(0, 3), message_budget=9)
    assert (tuned.top_k, tuned.message_range, tuned.message_budget) == (7, MessageRange(0, 3), 9)
    assert engine(message_budget=None).message_budget is None
    assert engine(search_mode="dense", time_boost=0).time_boost == 0  # off, and the default
    assert engine(search_mode="dense").time_boost == 0.5


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"search_mode": "fuzzy"}, "search_mode"),
        ({"message_budget": 0}, "message_budget"),
        ({"message_budget": "lots"}, "message_budget"),
        ({"time_boost": -0.1}, "time_boost"),
        ({"search_mode": "keyword", "threshold": 0.5}, "threshold"),
        ({"top_k": 0}, "top_k"),
        # dense mode never reads the period: a boost there was silently unused
        ({"search_mode": "dense", "time_boost": 0.9}, "no effect in dense mode"),
    ],
)
def test_bad_search_options_fail_at_construction(options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        engine(**options)


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_keyword_modes_need_a_storage_that_searches_keywords(mode: str) -> None:
    with pytest.raises(ValueError, match="search_mode='dense'"):
        engine(RecordingStorage(InMemoryStorage()), search_mode=mode)


# --- what each mode searches ---------------------------------------------------------------


def test_hybrid_finds_word_forms_the_vectors_miss() -> None:
    memory = engine(top_k=1, message_range=0)
    memory.index(
        conversation("a", [*FILLER, "I painted a sunrise over the lake"]),
        thread_id="t1",
        resource_id="r",
    )
    [hit] = memory.search("any paintings of sunrises?", thread_id="t2", resource_id="r")
    assert hit.message.id == "a-12"
    assert 0 < hit.score <= 1


def test_keyword_mode_embeds_no_query_and_dense_mode_searches_no_keywords() -> None:
    storage, vectors, embeddings = (
        CountingStorage(),
        RecordingVectors(InMemoryVectorIndex()),
        FakeEmbeddings(),
    )
    memory = engine(storage, vector_store=vectors, embeddings=embeddings, search_mode="keyword")
    memory.index(conversation("a", ["the blue boat", "nice"]), thread_id="t", resource_id="r")
    embeddings.calls.clear()
    vectors.calls.clear()
    hits = memory.search("blue boat", thread_id="t", resource_id="r")
    assert [h.message.id for h in hits] == ["a-0"]
    assert embeddings.calls == []
    assert vectors.calls == []
    assert storage.keyword_calls == 1

    dense = engine(storage, vector_store=vectors, embeddings=embeddings, search_mode="dense")
    dense.search("blue boat", thread_id="t", resource_id="r")
    assert storage.keyword_calls == 1
    assert [kw["k"] for name, kw in vectors.calls if name == "query"] == [4]


def test_hybrid_asks_each_search_for_a_candidate_pool() -> None:
    storage, vectors = CountingStorage(), RecordingVectors(InMemoryVectorIndex())
    memory = engine(storage, vector_store=vectors, top_k=3)
    memory.index(conversation("a", ["blue boat"]), thread_id="t", resource_id="r")
    memory.search("blue boat", thread_id="t", resource_id="r")
    assert [kw["k"] for name, kw in vectors.calls if name == "query"] == [50]
    assert storage.keyword_calls == 1


def test_a_threshold_in_hybrid_mode_is_a_calibrated_score() -> None:
    memory = engine(message_range=0)
    memory.index(
        conversation("a", ["painted sunrise", "the lake is calm", "painting"]),
        thread_id="t",
        resource_id="r",
    )
    every = memory.search("painting", thread_id="t", resource_id="r")
    assert {"a-0", "a-2"} <= set(returned(every))  # keyword-only matches count too
    assert all(0.0 < h.score < 1.0 for h in every)  # probabilities, not min-max (top != 1)
    cut = sorted(h.score for h in every)[len(every) // 2]
    gated = memory.search("painting", thread_id="t", resource_id="r", threshold=cut)
    assert gated
    assert all(h.score >= cut for h in gated)
    assert {h.message.id: h.score for h in gated}.items() <= {
        h.message.id: h.score for h in every
    }.items()  # the same scores: the gate only drops hits


# --- scope ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_keyword_hits_never_leave_the_scope(mode: str) -> None:
    memory = engine(search_mode=mode, message_range=(1, 1))
    memory.index(
        conversation("alice", ["my secret garden plan"]), thread_id="a1", resource_id="alice"
    )
    memory.index(conversation("alice2", ["garden chat"]), thread_id="a2", resource_id="alice")
    memory.index(
        conversation("bob", ["secret garden plan", "bob says hi"]),
        thread_id="b1",
        resource_id="bob",
    )
    hits = memory.search("secret garden plan", thread_id="a3", resource_id="alice")
    assert set(returned(hits)) == {"alice-0", "alice2-0"}
    thread = engine(
        memory.storage, vector_store=memory.vector_store, search_mode=mode, scope="thread"
    )
    assert returned(thread.search("secret garden plan", thread_id="a2", resource_id="alice")) == [
        "alice2-0"
    ]
    assert thread.search("secret garden plan", thread_id="nobody-thread") == []


# --- the budget: search and recall agree ---------------------------------------------------


def test_the_budget_bounds_search_and_recall_alike() -> None:
    memory = engine(message_budget=7)
    texts = [f"{'boat trip' if n % 3 == 0 else 'weather'} note {n}" for n in range(40)]
    memory.index(conversation("a", texts), thread_id="t1", resource_id="r")
    hits = memory.search("boat trip", thread_id="t1", resource_id="r")
    ids = returned(hits)
    assert len(ids) == 7
    out = memory.recall([HumanMessage("boat trip", id="live")], thread_id="t1", resource_id="r")
    recalled = [m.id for m in out if m.additional_kwargs.get("source") == MEMORY_SOURCE]
    assert sorted(recalled) == sorted(ids)

    elsewhere = memory.recall([HumanMessage("boat trip", id="q")], thread_id="t2", resource_id="r")
    [block] = [m for m in elsewhere if m.additional_kwargs.get("source") == MEMORY_SOURCE]
    assert str(block.content).count("Message from previous conversation") == 7


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "dense"])
@pytest.mark.parametrize("query", ["red kites", "red kites in May 2023", "the kite in June"])
async def test_async_search_matches_sync(mode: str, query: str) -> None:
    memory = engine(search_mode=mode)
    memory.index(
        conversation("a", [*FILLER, "the red kite flew", "kites are fun", "bye"]),
        thread_id="t",
        resource_id="r",
    )
    sync = memory.search(query, thread_id="x", resource_id="r")
    assert sync
    assert await memory.asearch(query, thread_id="x", resource_id="r") == sync


# --- time-aware ranking --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_a_named_month_favours_messages_of_that_month(mode: str) -> None:
    june, may = datetime(2023, 6, 2, tzinfo=UTC), datetime(2023, 5, 2, tzinfo=UTC)
    options: dict[str, Any] = {"search_mode": mode, "top_k": 1, "message_range": 0}
    memory = engine(**options)
    memory.index(
        conversation("a-june", ["we sailed the boat"], start=june), thread_id="t1", resource_id="r"
    )
    memory.index(
        conversation("b-may", ["we sailed the boat"], start=may), thread_id="t2", resource_id="r"
    )
    [hit] = memory.search("when did we sail the boat in May 2023?", thread_id="x", resource_id="r")
    assert hit.message.id == "b-may-0"
    [plain] = memory.search("when did we sail the boat?", thread_id="x", resource_id="r")
    assert plain.message.id == "a-june-0"  # equal scores: ties go by id
    off = engine(memory.storage, vector_store=memory.vector_store, time_boost=0, **options)
    [unboosted] = off.search(
        "when did we sail the boat in May 2023?", thread_id="x", resource_id="r"
    )
    assert unboosted.message.id == "a-june-0"


# --- backends ------------------------------------------------------------------------------


def test_sqlite_and_in_memory_storages_rank_alike(tmp_path: Path) -> None:
    texts = [
        "Caroline: I went to a support group yesterday",
        "Melanie: that sounds powerful, what did they say?",
        "Caroline: they talked about transgender stories",
        "Melanie: I painted a lake sunrise last week",
        "Caroline: lovely! painting is so calming",
        *FILLER,
    ]
    results = []
    for storage in (InMemoryStorage(), SQLiteStorage(tmp_path / "m.db")):
        memory = engine(storage)
        memory.index(conversation("c", texts), thread_id="s1", resource_id="conv")
        hits = memory.search("When did Melanie paint a sunrise?", thread_id="q", resource_id="conv")
        results.append([(h.message.id, round(h.score, 9), [m.id for m in h.window]) for h in hits])
    assert results[0] == results[1]
    assert results[0][0][0] == "c-3"


def test_a_version_1_sqlite_file_is_migrated_and_searchable(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    for statement in _MIGRATIONS[1]:
        assert isinstance(statement, str)
        raw.execute(statement)
    raw.execute("CREATE TABLE schema_version (version INTEGER)")
    raw.execute("INSERT INTO schema_version VALUES (1)")
    raw.execute("INSERT INTO threads VALUES ('t1', 'r1', 3, '2024-01-15T10:30:00.000000+00:00')")
    rows = [
        ("m0", "user", "the old lighthouse"),
        ("m1", "assistant", "lighthouses are tall"),
        ("m2", "system", "lighthouse policy"),
    ]
    for seq, (message_id, role, text) in enumerate(rows):
        raw.execute(
            "INSERT INTO messages VALUES (?, 't1', 'r1', ?, ?, ?, ?, '{}')",
            (message_id, seq, role, text, f"2024-01-15T10:3{seq}:00.000000+00:00"),
        )
    raw.commit()
    raw.close()

    storage = SQLiteStorage(path)
    try:
        hits = storage.keyword_search("lighthouse", scope=ScopeFilter("r1"), limit=5)
        assert {i for i, _ in hits} == {"m0", "m1"}
        storage.delete_thread("t1")
        assert storage.keyword_search("lighthouse", scope=ScopeFilter("r1"), limit=5) == []
    finally:
        storage.close()
    check = sqlite3.connect(path)
    assert check.execute("SELECT version FROM schema_version").fetchall() == [
        (4,)
    ]  # (v3: metadata, v4: CJK pairs)
    assert check.execute("SELECT COUNT(*) FROM message_terms").fetchone() == (0,)
    check.close()


def record(message_id: str, thread_id: str, resource_id: str, text: str) -> MessageRecord:
    message = HumanMessage(text, id=message_id)
    return MessageRecord(
        message_id, thread_id, resource_id, "user", text, START, MessageRecord.dump(message)
    )


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
def test_a_failed_write_indexes_no_keywords(backend: str, tmp_path: Path) -> None:
    storage: MessageStorage = (
        SQLiteStorage(tmp_path / "x.db") if backend == "sqlite" else InMemoryStorage()
    )
    storage.put([record("owned", "t1", "alice", "hello")])
    with pytest.raises(OwnershipError):
        storage.put([record("new", "t9", "alice", "zeppelin"), record("bad", "t1", "bob", "x")])
    assert storage.keyword_search("zeppelin", scope=ScopeFilter("alice"), limit=5) == []
    storage.close()


def test_a_question_asked_in_many_chats_leaves_room_for_the_fact() -> None:
    """The same words in several conversations are one memory (`fusion.one_per_text`).

    Before: a question asked in eight or more earlier chats (each with its reply) filled
    the 15-message budget with its copies, and the fact it asks for was never recalled.
    """
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    fact = [HumanMessage("I am allergic to peanuts."), AIMessage("Noted.")]
    memory.index(fact, thread_id="seed", resource_id="alice")
    question = "Which snack is safe for my allergy?"
    for n in range(11):
        turn = [HumanMessage(question), AIMessage(f"Reply to: {question}")]
        memory.index(turn, thread_id=f"t{n}", resource_id="alice")
    hits = memory.search(question, resource_id="alice")
    texts = [m.text for hit in hits for m in hit.window]
    assert "I am allergic to peanuts." in texts
    assert texts.count(question) <= 2  # its copies: one candidate (and one beside its reply)
