"""Retention: `forget_before`, `apply_retention` and the policy, on the engine.

Final like a forget (storage and vectors), reported per resource, refused read-only, and
held to the signed-in user (examples and generated data). The storage side of it is in the
conformance suite (`delete_before`); purge after retention is checked on the embedded store.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.engine.retention_ops import RetentionResult
from langchain_semantic_recall.errors import (
    IdentityMismatchError,
    InvalidInputError,
    InvalidOptionError,
    ReadOnlyError,
)
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingVectors
from tests.unit.conftest import START, EngineFactory, turn
from tests.unit.test_signed_in_user import asigned_in, signed_in

OLD = START - timedelta(days=200)
CUTOFF = START - timedelta(days=90)


def seed(memory: SemanticRecall) -> None:
    """alice: an old thread, a mixed one; bob: an old thread. All with vectors."""
    memory.index(
        turn("a-old", ["peanut allergy", "noted"], start=OLD), thread_id="a1", resource_id="alice"
    )
    memory.index(
        turn("a-mix", ["lisbon trip", "ok"], start=OLD), thread_id="a2", resource_id="alice"
    )
    memory.index(
        turn("a-new", ["lisbon hotel", "booked"], start=START), thread_id="a2", resource_id="alice"
    )
    memory.index(
        turn("b-old", ["tomato garden", "nice"], start=OLD), thread_id="b1", resource_id="bob"
    )


def stored_ids(memory: SemanticRecall) -> set[str]:
    return {m.id for m in memory.storage.list_messages()}


def vector_ids(memory: SemanticRecall) -> set[str]:
    return memory.vector_store.message_ids(memory.ensure_index().name)


def test_forget_before_deletes_messages_and_vectors_and_reports_them(
    make_engine: EngineFactory,
) -> None:
    memory = make_engine()
    seed(memory)
    result = memory.forget_before(CUTOFF)
    assert result == RetentionResult(
        cutoff=CUTOFF,
        resource_id=None,
        deleted={"alice": 4, "bob": 2},
        threads_emptied=("a1", "b1"),
    )
    assert result.messages == 6
    assert stored_ids(memory) == {"a-new-0", "a-new-1"}
    assert vector_ids(memory) == {"a-new-0", "a-new-1"}
    stats = memory.stats()
    assert (stats.messages, stats.vectors, stats.orphan_vectors) == (2, 2, 0)
    found = {m.id for h in memory.search("peanut allergy", resource_id="alice") for m in h.window}
    assert found <= {"a-new-0", "a-new-1"}
    assert memory.forget_before(CUTOFF) == RetentionResult(CUTOFF, None)  # nothing left to do


def test_the_async_twins_match(make_engine: EngineFactory) -> None:
    memory = make_engine(retention=timedelta(days=30))
    seed(memory)

    async def run() -> tuple[RetentionResult, RetentionResult]:
        first = await memory.aforget_before(CUTOFF, resource_id="bob")
        second = await memory.aapply_retention(resource_id="alice")  # now - 30 days
        return first, second

    first, second = asyncio.run(run())
    assert first.deleted == {"bob": 2}
    assert first.threads_emptied == ("b1",)
    assert second.deleted == {"alice": 6}
    assert stored_ids(memory) == set()
    assert vector_ids(memory) == set()


def test_apply_retention_forgets_what_is_older_than_the_policy(make_engine: EngineFactory) -> None:
    memory = make_engine(retention=timedelta(days=90))
    now = datetime.now(UTC)
    memory.index(
        turn("old", ["x", "y"], start=now - timedelta(days=91)), thread_id="t", resource_id="r"
    )
    memory.index(
        turn("new", ["x", "y"], start=now - timedelta(days=89)), thread_id="t", resource_id="r"
    )
    result = memory.apply_retention()
    assert result.deleted == {"r": 2}
    assert abs(result.cutoff - (now - timedelta(days=90))) < timedelta(minutes=5)
    assert stored_ids(memory) == {"new-0", "new-1"}
    assert memory.retention == timedelta(days=90)


def test_a_retention_that_deletes_nothing_needs_no_index(make_engine: EngineFactory) -> None:
    """Since a forget opens the index before it deletes, a retention job with nothing old
    needed the embedder (a probe: an API call, or its error when the API is down) and
    created a mistyped index_name's index (a review): with nothing that old, neither."""
    now = datetime.now(UTC)
    make_engine().index(turn("new", ["x", "y"], start=now), thread_id="t", resource_id="r")
    probeless = FakeEmbeddings()
    probeless.dimension = None  # an API embedder: only a probe tells its index
    probeless.fail = ConnectionError("the embedding API is down")
    vectors = RecordingVectors(InMemoryVectorIndex())
    memory = make_engine(
        embeddings=probeless, vector_store=vectors, index_name="typo", retention=timedelta(days=1)
    )
    assert memory.apply_retention().deleted == {}
    hour_ago = now - timedelta(hours=1)
    assert asyncio.run(memory.aforget_before(hour_ago, resource_id="r")).deleted == {}
    assert probeless.calls == []  # not even a probe
    assert vectors.names() == []  # no index opened, so none created
    old = turn("old", ["x"], start=now - timedelta(days=2))
    make_engine().index(old, thread_id="t", resource_id="r")
    with pytest.raises(ConnectionError):  # something to delete: the index first, as before
        memory.apply_retention()
    assert stored_ids(memory) == {"old-0", "new-0", "new-1"}


def test_the_policy_is_checked_and_needed(make_engine: EngineFactory) -> None:
    for bad in (timedelta(0), timedelta(days=-1), 90, "90d"):
        with pytest.raises(InvalidOptionError, match="retention"):
            make_engine(retention=bad)
    memory = make_engine()
    with pytest.raises(InvalidOptionError, match="no retention policy"):
        memory.apply_retention()
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        memory.forget_before(datetime(2024, 1, 1))
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        memory.forget_before("2024-01-01")  # type: ignore[arg-type]


def test_cutoffs_at_the_ends_of_the_calendar_are_errors_or_no_ops(
    make_engine: EngineFactory,
) -> None:
    """They once raised a bare OverflowError (an aware year 1, a policy of 3,000 years)."""
    memory = make_engine()
    seed(memory)
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    with pytest.raises(InvalidInputError, match="years 1-9999 in UTC"):
        memory.forget_before(early)
    with pytest.raises(InvalidInputError, match="years 1-9999 in UTC"):
        asyncio.run(memory.aforget_before(early))
    ages = memory.with_options(retention=timedelta(days=10**6))  # nothing is that old
    assert ages.apply_retention().deleted == {}
    assert asyncio.run(ages.aapply_retention()).deleted == {}
    assert len(stored_ids(memory)) == 8


def test_a_read_only_engine_refuses_and_deletes_nothing(make_engine: EngineFactory) -> None:
    seed(make_engine())
    memory = make_engine(read_only=True, retention=timedelta(days=1))
    with pytest.raises(ReadOnlyError):
        memory.forget_before(CUTOFF)
    with pytest.raises(ReadOnlyError):
        memory.apply_retention()
    with pytest.raises(ReadOnlyError):
        asyncio.run(memory.aforget_before(CUTOFF))
    assert len(stored_ids(memory)) == 8


def test_a_vector_failure_is_raised_with_the_repair(
    make_engine: EngineFactory, vectors: RecordingVectors
) -> None:
    memory = make_engine()
    seed(memory)
    vectors.fail["delete"] = RuntimeError("index down")
    with pytest.raises(RuntimeError, match="index down") as raised:
        memory.forget_before(CUTOFF)
    assert "reindex(missing_only=True)" in "".join(raised.value.__notes__)
    assert memory.stats().orphan_vectors == 6  # visible, and repaired:
    del vectors.fail["delete"]
    memory.reindex(missing_only=True)
    assert vector_ids(memory) == stored_ids(memory) == {"a-new-0", "a-new-1"}


def test_windows_after_retention_start_at_the_oldest_kept_message(
    make_engine: EngineFactory,
) -> None:
    memory = make_engine(search_mode="dense", message_range=(3, 0))
    memory.index(
        turn("old", ["peanut allergy", "noted"], start=OLD), thread_id="t", resource_id="r"
    )
    memory.index(
        turn("new", ["allergy to peanut again", "ok"], start=START), thread_id="t", resource_id="r"
    )
    memory.forget_before(CUTOFF)
    hits = memory.search("allergy to peanut again", resource_id="r", top_k=1)
    assert [m.id for m in hits[0].window] == ["new-0"]
    assert [m.seq for m in memory.storage.list_messages()] == [2, 3]


# --- who may: the signed-in user forgets only their own -------------------------------------


def test_a_signed_in_user_forgets_only_their_own(make_engine: EngineFactory) -> None:
    memory = make_engine(retention=timedelta(days=90))
    seed(memory)
    result = signed_in("alice", lambda: memory.forget_before(CUTOFF))
    assert result.resource_id == "alice"
    assert result.deleted == {"alice": 4}
    assert {m.resource_id for m in memory.storage.list_messages()} == {"alice", "bob"}
    with pytest.raises(IdentityMismatchError):
        signed_in("alice", lambda: memory.forget_before(CUTOFF, resource_id="bob"))
    with pytest.raises(IdentityMismatchError):
        asigned_in("alice", lambda: memory.aapply_retention(resource_id="bob"))
    assert memory.storage.count(ScopeFilter("bob")) == 2


def _history(draw: Any) -> list[tuple[str, str, int]]:
    """(resource, thread, age in days) rows: a few resources, threads and ages."""
    row = st.tuples(
        st.sampled_from(["alice", "bob", "Alice", "alice ", "carol"]),
        st.integers(0, 3),
        st.integers(0, 400),
    )
    return [(r, f"{r}-t{t}", age) for r, t, age in draw(st.lists(row, min_size=1, max_size=25))]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), is_async=st.booleans())
def test_retention_never_deletes_another_resources_messages(
    data: st.DataObject, is_async: bool
) -> None:
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    rows = _history(data.draw)
    now = START
    for n, (resource, thread, age) in enumerate(rows):
        when = (now - timedelta(days=age)).isoformat()
        message: BaseMessage = (HumanMessage if n % 2 == 0 else AIMessage)(
            f"note {n}", id=f"m{n}", additional_kwargs={"created_at": when}
        )
        memory.index([message], thread_id=thread, resource_id=resource)
    days = data.draw(st.integers(0, 400), label="retention days")
    cutoff = now - timedelta(days=days)
    before = {m.id: m for m in memory.storage.list_messages()}
    if is_async:
        result = asigned_in("alice", lambda: memory.aforget_before(cutoff))
    else:
        result = signed_in("alice", lambda: memory.forget_before(cutoff))
    after = {m.id: m for m in memory.storage.list_messages()}
    gone = set(before) - set(after)
    assert {before[i].resource_id for i in gone} <= {"alice"}
    assert gone == {
        i for i, m in before.items() if m.resource_id == "alice" and m.created_at < cutoff
    }
    assert result.deleted == ({"alice": len(gone)} if gone else {})
    assert memory.vector_store.message_ids(memory.ensure_index().name) == set(after)


# --- purge after retention: nothing of the old messages is left in the files --------------------
