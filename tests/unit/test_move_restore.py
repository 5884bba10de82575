"""Moving a conversation to another owner, and restoring a forgotten one from its export."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import (
    InMemoryStorage,
    InvalidInputError,
    OwnershipError,
    ReadOnlyError,
    SemanticRecall,
    SQLiteStorage,
)
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings
from tests.faults import FaultyVectors


def engine(tmp_path: Path, **options: object) -> SemanticRecall:
    return SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(32),
        # silence off: a 32-bucket fake makes every short query look like small talk
        **{"threshold": 0.0, **options},  # type: ignore[arg-type]
    )


def chat(prefix: str) -> list[HumanMessage | AIMessage]:
    return [
        HumanMessage(f"{prefix} my violin lesson is on friday", id=f"{prefix}-u"),
        AIMessage(f"{prefix} noted, the violin lesson", id=f"{prefix}-a"),
    ]


def found(memory: SemanticRecall, resource: str) -> set[str]:
    hits = memory.search("violin lesson", resource_id=resource)
    return {m.id for hit in hits for m in hit.window}


async def test_move_thread_gives_messages_and_vectors_to_the_new_owner(tmp_path: Path) -> None:
    memory = engine(tmp_path)
    memory.index(chat("t1"), thread_id="t1", resource_id="alice")
    memory.index(chat("t2"), thread_id="t2", resource_id="alice")
    assert memory.move_thread("t1", to="bob", resource_id="alice") == 2
    assert memory.storage.get_thread_owner("t1") == "bob"
    assert found(memory, "bob") == {"t1-u", "t1-a"}
    assert found(memory, "alice") == {"t2-u", "t2-a"}
    stats = memory.stats(resource_id="bob")
    assert (stats.messages, stats.vectors, stats.missing_vectors, stats.orphan_vectors) == (
        2,
        2,
        0,
        0,
    )
    assert memory.stats(resource_id="alice").vectors == 2
    memory.index([HumanMessage("bob goes on", id="t1-b")], thread_id="t1", resource_id="bob")
    with pytest.raises(OwnershipError):  # the old owner no longer writes to it
        memory.index([HumanMessage("mine", id="t1-c")], thread_id="t1", resource_id="alice")
    assert await memory.amove_thread("t1", to="alice") == 3
    assert found(memory, "bob") == set()
    assert memory.move_thread("t1", to="alice") == 0  # already there: a repair, no move


def test_move_thread_refusals_move_nothing(tmp_path: Path) -> None:
    memory = engine(tmp_path)
    memory.index(chat("t1"), thread_id="t1", resource_id="alice")
    with pytest.raises(OwnershipError):
        memory.move_thread("t1", to="mallory", resource_id="mallory")
    with pytest.raises(InvalidInputError, match="not stored"):
        memory.move_thread("nope", to="bob")
    with pytest.raises(InvalidInputError):
        memory.move_thread("t1", to="")
    with pytest.raises(ReadOnlyError):
        memory.with_options(read_only=True).move_thread("t1", to="bob")
    assert memory.storage.get_thread_owner("t1") == "alice"
    assert found(memory, "alice") == {"t1-u", "t1-a"}
    assert found(memory, "mallory") == found(memory, "bob") == set()


async def test_restore_thread_lets_a_forgotten_export_be_written_again(tmp_path: Path) -> None:
    memory = engine(tmp_path)
    memory.index(chat("t1"), thread_id="t1", resource_id="alice")
    memory.forget_thread("t1")
    assert memory.index(chat("t1"), thread_id="t1", resource_id="alice").forgotten
    assert memory.restore_thread("t1") is True
    result = memory.index(chat("t1"), thread_id="t1", resource_id="alice")
    assert result.stored == ("t1-u", "t1-a")
    assert found(memory, "alice") == {"t1-u", "t1-a"}
    assert memory.restore_thread("t1") is False  # not retired
    memory.forget_thread("t1")
    assert await memory.arestore_thread("t1") is True
    with pytest.raises(ReadOnlyError):
        memory.with_options(read_only=True).restore_thread("t1")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    owners=st.lists(st.sampled_from(["ann", "ben", "cat"]), min_size=1, max_size=4),
    target=st.sampled_from(["ann", "ben", "cat", "dan"]),
)
def test_after_a_move_only_the_new_owner_sees_the_thread(
    tmp_path_factory: pytest.TempPathFactory, owners: list[str], target: str
) -> None:
    memory = engine(tmp_path_factory.mktemp("move"))
    for n, owner in enumerate(owners):
        memory.index(chat(f"t{n}"), thread_id=f"t{n}", resource_id=owner)
    memory.move_thread("t0", to=target, resource_id=owners[0])
    for resource in ("ann", "ben", "cat", "dan"):
        ids = {m.id for m in memory.storage.list_messages(ScopeFilter(resource))}
        expected = {
            f"t{n}-{r}"
            for n, owner in enumerate(owners)
            for r in "ua"
            if (target if n == 0 else owner) == resource
        }
        assert ids == expected
        assert found(memory, resource) == expected


def _faulty(tmp_path: Path) -> tuple[SemanticRecall, FaultyVectors]:
    """A dense engine on SQLite whose vector index fails or holds where a test says."""
    vectors = FaultyVectors(InMemoryVectorIndex())
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"),
        vector_store=vectors,
        embeddings=FakeEmbeddings(32),
        search_mode="dense",
    )
    return memory, vectors


@pytest.mark.parametrize("twin", ["sync", "async"])
async def test_vectors_written_while_the_thread_moved_follow_it(tmp_path: Path, twin: str) -> None:
    """A turn indexed for alice while the thread moves to bob: its vectors end up bob's.

    Else they stayed under alice: `index` said "embedded", bob's search did not find the
    message by meaning, and alice's index kept text of a thread that is no longer hers.
    """
    memory, vectors = _faulty(tmp_path)
    memory.index(chat("a"), thread_id="t1", resource_id="alice")
    turn = [HumanMessage("my cello lesson is on monday", id="late")]
    gate = vectors.faults.gate("upsert")  # hold the turn's vector write
    with ThreadPoolExecutor(1) as pool:
        if twin == "sync":
            pending = pool.submit(memory.index, turn, thread_id="t1", resource_id="alice")
            gate.wait_entered()
            assert memory.move_thread("t1", to="bob") == 3
            gate.release()
            result = pending.result()
        else:
            task = asyncio.create_task(memory.aindex(turn, thread_id="t1", resource_id="alice"))
            await gate.await_entered()
            assert await memory.amove_thread("t1", to="bob") == 3
            gate.release()
            result = await task
    assert result.embedded == ("late",)
    name = memory.ensure_index().name
    assert vectors.inner.message_ids(name, ScopeFilter(resource_id="alice")) == set()
    assert vectors.inner.message_ids(name, ScopeFilter(resource_id="bob")) == {
        "a-u",
        "a-a",
        "late",
    }
    bob = memory.stats(resource_id="bob")
    assert (bob.messages, bob.missing_vectors, bob.orphan_vectors) == (3, 0, 0)


async def test_a_move_that_raised_after_the_storage_moved_says_how_to_finish(
    tmp_path: Path,
) -> None:
    """The vector write fails once the thread is bob's: the same call again says what to do.

    Run again as it was, `move_thread(..., resource_id="alice")` is refused (the thread is
    bob's now); the refusal names the call that finishes the move, and that call does.
    """
    memory, vectors = _faulty(tmp_path)
    memory.index(chat("a"), thread_id="t1", resource_id="alice")
    vectors.faults.fail("upsert")
    with pytest.raises(ConnectionError):
        memory.move_thread("t1", to="bob", resource_id="alice")
    assert memory.stats(resource_id="bob").missing_vectors == 2
    with pytest.raises(OwnershipError, match="call move_thread again with resource_id='bob'"):
        memory.move_thread("t1", to="bob", resource_id="alice")
    with pytest.raises(OwnershipError, match="resource_id='bob'"):
        await memory.amove_thread("t1", to="bob", resource_id="alice")
    assert await memory.amove_thread("t1", to="bob", resource_id="bob") == 0
    assert memory.stats(resource_id="bob").missing_vectors == 0
    with pytest.raises(OwnershipError) as refused:  # a thread moved elsewhere: no such hint
        memory.move_thread("t1", to="carol", resource_id="alice")
    assert "move_thread again" not in str(refused.value)


# --- a forget racing a move ------------------------------------------------------------------


class _MovesAfterTheOwnerIsRead(InMemoryStorage):
    """Moves `thread` to `to` right after its owner is first read: a move by another
    request landing between a forget's owner check and its delete."""

    def __init__(self, thread: str, to: str) -> None:
        super().__init__()
        self.race: tuple[str, str] | None = None
        self._thread, self._to = thread, to

    def _get_thread_owner(self, thread_id: str) -> str | None:
        owner = super()._get_thread_owner(thread_id)
        if self.race == (thread_id, owner) and thread_id == self._thread:
            self.race = None
            self.move_thread(thread_id, to_resource=self._to)
        return owner


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_forget_never_deletes_a_thread_moved_to_another_user_meanwhile(twin: str) -> None:
    storage = _MovesAfterTheOwnerIsRead("chat", to="bob")
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    memory.index(
        [HumanMessage("My passport number ends in 42.")], thread_id="chat", resource_id="alice"
    )
    storage.race = ("chat", "alice")
    forget = (
        (lambda: memory.forget_thread("chat", resource_id="alice"))
        if twin == "sync"
        else (lambda: asyncio.run(memory.aforget_thread("chat", resource_id="alice")))
    )
    with pytest.raises(OwnershipError, match="no longer belongs to 'alice'"):
        forget()
    assert storage.get_thread_owner("chat") == "bob"
    assert storage.count(ScopeFilter(thread_id="chat")) == 1
    assert not storage.is_forgotten("chat")


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_a_move_never_takes_a_thread_another_move_gave_away_meanwhile(twin: str) -> None:
    storage = _MovesAfterTheOwnerIsRead("chat", to="carol")
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    memory.index([HumanMessage("The gate code is 1234.")], thread_id="chat", resource_id="alice")
    storage.race = ("chat", "alice")  # alice's other request gives it to carol meanwhile
    move = (
        (lambda: memory.move_thread("chat", to="bob", resource_id="alice"))
        if twin == "sync"
        else (lambda: asyncio.run(memory.amove_thread("chat", to="bob", resource_id="alice")))
    )
    with pytest.raises(OwnershipError, match="no longer belongs to 'alice'"):
        move()
    assert storage.get_thread_owner("chat") == "carol"
    assert storage.count(ScopeFilter(resource_id="bob")) == 0
