"""Several app processes on one PostgreSQL + Chroma server, calling at once.

Each "process" is an engine with its own PostgreSQL pools and its own Chroma HTTP client
(what the servers see of two replicas), driven from its own threads, sync and async.
Hypothesis generates what each of three workers does: index turns of its users' threads
(the same turn, with the same ids, by two workers at once among them), search, forget a
thread, move a thread between users; the workers run at the same time. Afterwards:

- no search ever returned a message of another user;
- every index call said what happened: each message stored, updated or unchanged and
  embedded, or the whole turn refused because its thread was forgotten;
- a message id was reported `stored` (inserted) by one call at most;
- the storage holds exactly the messages of threads never forgotten, each once, and the
  vector index holds exactly one vector for each, under the thread's owner: nothing lost,
  nothing duplicated, nothing left under another user, nothing left of a forgotten thread.

Moves and forgets use different threads: a move racing its owner's forget of the same
thread is the known race of docs/data-handling.md ("A known race").
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import IndexResult, SemanticRecall
from langchain_semantic_recall.errors import EngineClosedError, OwnershipError
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from tests.fakes import FakeEmbeddings
from tests.faults import FaultyEmbeddings, FaultyVectors
from tests.integration.conftest import run_at_once

pytestmark = pytest.mark.integration

USERS = ["alice", "bob", "carol"]
WORDS = ["lisbon", "violin", "garden", "tomato"]

step = st.one_of(
    st.tuples(
        st.just("index"),
        st.sampled_from(USERS),
        st.integers(0, 2),  # the user's thread
        st.integers(0, 3),  # the turn: the same turn by two workers has the same ids
        st.booleans(),  # async
    ),
    st.tuples(st.just("search"), st.sampled_from(USERS), st.sampled_from(WORDS), st.booleans()),
    st.tuples(st.just("forget"), st.sampled_from(USERS), st.integers(1, 2), st.booleans()),
    st.tuples(st.just("move"), st.sampled_from(USERS)),  # the shared thread, to that user
    st.tuples(st.just("index_moving"), st.integers(0, 3), st.booleans()),
)


class Replica:
    """One app process: its own pools and HTTP client on the shared servers."""

    def __init__(self, pg_url: str, chroma_url: str, index_name: str) -> None:
        self.storage = PostgresStorage(pg_url, max_size=4)
        self.vectors = ChromaServerVectorIndex(chroma_url)
        self.memory = SemanticRecall(
            storage=self.storage,
            vector_store=self.vectors,
            embeddings=FakeEmbeddings(64),
            search_mode="dense",
            index_name=index_name,
            top_k=50,
            message_range=0,
            threshold=0.0,
        )

    def close(self) -> None:
        self.memory.close()
        self.vectors.close()
        self.storage.close()


def turn(tag: str, thread: str, n: int) -> list[HumanMessage | AIMessage]:
    word = WORDS[n % len(WORDS)]
    return [
        HumanMessage(f"{word} question {n}", id=f"{tag}{thread}-{n}-u"),
        AIMessage(f"{word} answer {n}", id=f"{tag}{thread}-{n}-a"),
    ]


class Run:
    """What the workers did, collected under a lock."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.lock = threading.Lock()
        self.indexed: list[tuple[str, IndexResult]] = []  # (thread id, result)
        self.leaks: list[str] = []
        self.forgotten: set[str] = set()

    def thread(self, user: str, n: int) -> str:
        return f"{self.tag}{user}-t{n}"

    @property
    def moving(self) -> str:
        return f"{self.tag}moving"

    def do_all(self, replica: Replica, steps: list[tuple[Any, ...]]) -> None:
        for step in steps:
            self.do(replica, step)

    def do(self, replica: Replica, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind in ("index", "index_moving"):
            self._index(replica.memory, step)
        elif kind == "search":
            self._search(replica.memory, step)
        elif kind == "forget":
            _, user, n, is_async = step
            thread, owner = self.thread(user, n), f"{self.tag}{user}"
            with self.lock:
                self.forgotten.add(thread)
            if is_async:
                asyncio.run(replica.memory.aforget_thread(thread, resource_id=owner))
            else:
                replica.memory.forget_thread(thread, resource_id=owner)
        elif replica.storage.get_thread_owner(self.moving) is not None:
            # move the shared thread (an administrator's call: no resource); another
            # replica's move landing between this one's read of the owner and its own
            # move is refused, nothing moved (the storage holds the move to that owner)
            try:
                replica.memory.move_thread(self.moving, to=f"{self.tag}{step[1]}")
            except OwnershipError as refused:
                if "no longer belongs" not in str(refused):
                    raise

    def _index(self, memory: SemanticRecall, step: tuple[Any, ...]) -> None:
        if step[0] == "index":
            _, user, n, number, is_async = step
            thread, owner = self.thread(user, n), f"{self.tag}{user}"
        else:  # the moving thread is written as its current owner's (a server's user)
            _, number, is_async = step
            thread = self.moving
            owner = memory.storage.get_thread_owner(thread) or f"{self.tag}alice"
        messages = turn(self.tag, thread, number)
        try:
            if is_async:
                call = memory.aindex(messages, thread_id=thread, resource_id=owner)
                result = asyncio.run(call)
            else:
                result = memory.index(messages, thread_id=thread, resource_id=owner)
        except OwnershipError:
            if step[0] != "index_moving":
                raise
            return  # moved to another user since its owner was read: refused, nothing written
        with self.lock:
            self.indexed.append((thread, result))

    def _search(self, memory: SemanticRecall, step: tuple[Any, ...]) -> None:
        _, user, word, is_async = step
        owner = f"{self.tag}{user}"
        hits = (
            asyncio.run(memory.asearch(word, resource_id=owner))
            if is_async
            else memory.search(word, resource_id=owner)
        )
        for hit in hits:
            found = hit.message
            if found.resource_id != owner or not found.id.startswith(self.tag):
                with self.lock:
                    self.leaks.append(f"{owner} got {found.id} of {found.resource_id}")


@pytest.fixture(scope="module")
def index_name() -> str:
    return f"conc-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def replicas(pg_url: str, chroma_url: str, index_name: str) -> Iterator[list[Replica]]:
    made = [Replica(pg_url, chroma_url, index_name) for _ in range(2)]
    yield made
    for replica in made:
        replica.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(workers=st.lists(st.lists(step, min_size=1, max_size=8), min_size=3, max_size=3))
def test_replicas_at_once_keep_users_apart_and_lose_or_duplicate_nothing(
    replicas: list[Replica], workers: list[list[tuple[Any, ...]]]
) -> None:
    run = Run(f"x{uuid.uuid4().hex[:8]}-")
    first = replicas[0].memory
    first.index(turn(run.tag, run.moving, 9), thread_id=run.moving, resource_id=f"{run.tag}alice")
    for user in USERS:  # stored before: a forget retires them (an empty id is not retired)
        for n in (1, 2):
            thread = run.thread(user, n)
            first.index(turn(run.tag, thread, 9), thread_id=thread, resource_id=f"{run.tag}{user}")
    run_at_once([partial(run.do_all, replicas[i % 2], steps) for i, steps in enumerate(workers)])
    assert run.leaks == []

    inserted: Counter[str] = Counter()
    for thread, result in run.indexed:
        assert result.error is None, result
        if result.forgotten:
            assert thread in run.forgotten
            assert {f.reason for f in result.fates} == {"thread forgotten"}
            continue
        assert {f.fate for f in result.fates} <= {"stored", "unchanged", "updated"}, result
        # every message's vectors written, or held already (an unchanged message)
        assert all(f.embedded or f.fate == "unchanged" for f in result.fates), result
        inserted.update(f.message_id for f in result.fates if f.fate == "stored" and f.message_id)
    assert [mid for mid, n in inserted.items() if n > 1] == []

    # what must be there: every turn of a thread never forgotten, once, under its owner
    expected: dict[str, set[str]] = {}
    for thread, result in run.indexed:
        if thread not in run.forgotten:
            expected.setdefault(thread, set()).update(m for m in result.stored)
            expected[thread].update(f.message_id for f in result.fates if f.message_id)
    for thread in [run.moving] + [run.thread(u, n) for u in USERS for n in (1, 2)]:
        if thread not in run.forgotten:
            expected.setdefault(thread, set()).update(
                m.id for m in turn(run.tag, thread, 9) if m.id
            )
    stored = [m for m in first.storage.list_messages(None) if m.id.startswith(run.tag)]
    assert len({m.id for m in stored}) == len(stored)
    by_thread: dict[str, set[str]] = {}
    for message in stored:
        by_thread.setdefault(message.thread_id, set()).add(message.id)
    assert by_thread == expected

    name = first.ensure_index().name
    for user in USERS:
        owner = f"{run.tag}{user}"
        owned = {m.id for m in stored if m.resource_id == owner}
        assert first.vector_store.message_ids(name, ScopeFilter(resource_id=owner)) == owned
        stats = replicas[1].memory.stats(resource_id=owner)
        assert (stats.messages, stats.vectors) == (len(owned), len(owned))
        assert (stats.missing_vectors, stats.orphan_vectors) == (0, 0)


# --- two moves of one thread at once (found by the test above) ----------------------------


@pytest.fixture
def gated(pg_url: str, chroma_url: str) -> Iterator[tuple[SemanticRecall, FaultyVectors]]:
    vectors = FaultyVectors(ChromaServerVectorIndex(chroma_url))
    storage = PostgresStorage(pg_url, max_size=4)
    memory = SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=FakeEmbeddings(64),
        search_mode="dense",
        index_name=f"moves-{uuid.uuid4().hex[:10]}",
    )
    memory.index(turn("", "t1", 1), thread_id="t1", resource_id="alice")
    yield memory, vectors
    memory.close()
    vectors.inner.close()
    storage.close()


def _vector_owners(memory: SemanticRecall, vectors: FaultyVectors) -> dict[str, set[str]]:
    name = memory.ensure_index().name
    return {
        user: vectors.inner.message_ids(name, ScopeFilter(resource_id=user))
        for user in ("alice", "bob", "carol")
    }


def test_a_move_overtaken_by_another_leaves_no_vectors_under_its_target(
    gated: tuple[SemanticRecall, FaultyVectors],
) -> None:
    """alice's thread moved to bob by one replica and to carol by another at once: the
    first wrote bob's vectors after the second had moved the thread on (and deleted bob's),
    so bob's collection kept the text of carol's thread; a forget of carol left it there.
    """
    memory, vectors = gated
    write = vectors.faults.gate("upsert", match=lambda a: a["records"][0].resource_id == "bob")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(memory.move_thread, "t1", to="bob")
        write.wait_entered()  # stored under bob, its vectors not yet written
        assert memory.move_thread("t1", to="carol") == 2
        write.release()
        assert first.result(timeout=60) == 2
    ids = {"t1-1-u", "t1-1-a"}
    assert _vector_owners(memory, vectors) == {"alice": set(), "bob": set(), "carol": ids}
    memory.forget_resource("carol")
    assert _vector_owners(memory, vectors) == {"alice": set(), "bob": set(), "carol": set()}


def test_a_move_overtaken_before_its_vectors_says_it_moved_the_thread(
    gated: tuple[SemanticRecall, FaultyVectors],
) -> None:
    """The same race a step earlier: the first move raised OwnershipError ("does not
    belong to resource 'bob'") once its storage move was done and the thread moved on.
    """
    memory, vectors = gated
    seen: list[object] = []

    def second_delete(arguments: Mapping[str, Any]) -> bool:
        seen.append(arguments)
        return len(seen) == 2  # the move's delete after its storage move

    deleted = vectors.faults.gate("delete", match=second_delete)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(memory.move_thread, "t1", to="bob")
        deleted.wait_entered()
        assert memory.move_thread("t1", to="carol") == 2
        deleted.release()
        assert first.result(timeout=60) == 2
    ids = {"t1-1-u", "t1-1-a"}
    assert _vector_owners(memory, vectors) == {"alice": set(), "bob": set(), "carol": ids}


# --- closing while calls run ---------------------------------------------------------------


def test_aclose_waits_for_the_calls_in_flight_on_the_servers(pg_url: str, chroma_url: str) -> None:
    """Checked (holds): an engine of `from_url` (it owns its PostgreSQL pools and Chroma
    client) closed while turns are being indexed and recalled, from its event loop and
    from another thread: the close waits, every call finishes whole, later calls raise
    `EngineClosedError`, and the pools are closed.
    """
    embedder = FaultyEmbeddings(64)
    memory = SemanticRecall.from_url(
        storage=pg_url,
        vector=chroma_url,
        embeddings=embedder,
        search_mode="dense",
        index_name=f"close-{uuid.uuid4().hex[:10]}",
    )
    memory.index(turn("", "t0", 0), thread_id="t0", resource_id="alice")
    storage = memory.storage
    assert isinstance(storage, PostgresStorage)

    async def main() -> list[object]:
        held = embedder.faults.gate("embed_documents")
        calls = [
            asyncio.create_task(
                memory.aindex(turn("", "t1", 1), thread_id="t1", resource_id="alice")
            ),
            asyncio.create_task(
                memory.arecall([HumanMessage("lisbon")], thread_id="t2", resource_id="alice")
            ),
        ]
        await held.await_entered()
        sync_turn = asyncio.create_task(
            asyncio.to_thread(memory.index, turn("", "t3", 3), thread_id="t3", resource_id="alice")
        )
        closing = asyncio.create_task(memory.aclose())
        await asyncio.sleep(0)
        assert not closing.done()
        held.release()
        done = await asyncio.gather(*calls, sync_turn, return_exceptions=True)
        await closing
        return done

    indexed, recalled, sync_indexed = asyncio.run(main())
    assert isinstance(indexed, IndexResult)
    assert len(indexed.embedded) == 2
    assert isinstance(recalled, list)
    assert isinstance(sync_indexed, (IndexResult, EngineClosedError))
    with pytest.raises(EngineClosedError):
        memory.index(turn("", "t4", 4), thread_id="t4", resource_id="alice")
    assert storage._pool is not None
    assert storage._pool.closed
    assert len(storage._apools) == 0


def test_a_turn_indexed_while_its_thread_moves_twice_follows_it_to_the_end(
    gated: tuple[SemanticRecall, FaultyVectors],
) -> None:
    """A turn's vectors follow a move made while it was indexed (`write_owned`) by one
    hop only: moved again (another replica) while they were written under the first
    new owner, they stayed there, in bob's collection, for a thread that was carol's.
    """
    memory, vectors = gated
    late = turn("", "late", 1)
    ids = {m.id for m in late}

    def late_under(resource: str) -> Any:
        return lambda a: (
            a["records"][0].message_id in ids and a["records"][0].resource_id == resource
        )

    first = vectors.faults.gate("upsert", match=late_under("alice"))
    with ThreadPoolExecutor(1) as pool:
        indexed = pool.submit(memory.index, late, thread_id="t1", resource_id="alice")
        first.wait_entered()
        assert memory.move_thread("t1", to="bob") == 4  # the turn is stored already
        second = vectors.faults.gate("upsert", match=late_under("bob"))
        first.release()
        second.wait_entered()  # following the move: written again under bob...
        assert memory.move_thread("t1", to="carol") == 4  # ...as the thread moves on
        second.release()
        assert indexed.result(timeout=60).embedded == ("late-1-u", "late-1-a")
    every = {"t1-1-u", "t1-1-a", *ids}
    assert _vector_owners(memory, vectors) == {"alice": set(), "bob": set(), "carol": every}
