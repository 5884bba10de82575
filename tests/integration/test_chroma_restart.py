"""A Chroma server restart in the middle of a run loses nothing.

A writer indexes turns while the test stops the Chroma server and starts it again on the
same folder and port. Turns written while it is down are stored in PostgreSQL (their
vectors fail, and say so); recall meanwhile goes on without recall instead of failing;
after the restart the old vectors are still there, and ``reindex(missing_only=True)``
writes exactly the missing ones.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import IndexResult, SemanticRecall
from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from tests.fakes import FakeEmbeddings
from tests.integration import conftest
from tests.integration.conftest import ChromaServer, listens_on, wait_until
from tests.integration.conftest import free_port as real_free_port

pytestmark = pytest.mark.integration

BEFORE, DURING, AFTER = 8, 5, 7
TOTAL = BEFORE + DURING + AFTER


def turn(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"note number{n} about subject{n}", id=f"t{n}-u"),
        AIMessage(f"noted subject{n}", id=f"t{n}-a"),
    ]


@pytest.fixture
def memory(pg_url: str, chroma_server: ChromaServer) -> Iterator[SemanticRecall]:
    memory = SemanticRecall(
        storage=PostgresStorage(pg_url),
        vector_store=ChromaServerVectorIndex(chroma_server.url),
        embeddings=FakeEmbeddings(64),
        threshold=0.0,  # silence off: a 64-bucket fake makes one-word queries look like chat
        index_name=f"restart-{uuid.uuid4().hex[:10]}",
    )
    yield memory
    memory.storage.close()


def test_restart_mid_run_loses_nothing(memory: SemanticRecall, chroma_server: ChromaServer) -> None:
    name = memory.ensure_index().name
    permits = threading.Semaphore(0)
    results: list[IndexResult] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for n in range(TOTAL):
                if not permits.acquire(timeout=120):
                    raise TimeoutError("the test never let the writer go on")
                results.append(memory.index(turn(n), thread_id=f"th{n % 3}", resource_id="u"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        permits.release(BEFORE)
        wait_until(lambda: len(results) >= BEFORE, timeout=60, what="the first turns")
        before_stop = memory.vector_store.message_ids(name)
        chroma_server.stop()

        permits.release(DURING)
        wait_until(lambda: len(results) >= BEFORE + DURING, timeout=60, what="turns while down")
        down = memory.recall([HumanMessage("subject1")], thread_id="th9", resource_id="u")
        assert [m.content for m in down] == ["subject1"]  # no recall, and no failure

        chroma_server.start()
        permits.release(AFTER)
        thread.join(timeout=120)
    finally:
        permits.release(TOTAL)
        thread.join(timeout=120)
    assert errors == []
    assert [r.error is not None for r in results] == [False] * BEFORE + [True] * DURING + [
        False
    ] * AFTER

    every = {m.id for n in range(TOTAL) for m in turn(n) if m.id}
    assert {m.id for m in memory.storage.list_messages(ScopeFilter("u"))} == every
    assert memory.vector_store.message_ids(name) >= before_stop  # persisted by the server
    stats = memory.stats()
    assert (stats.messages, stats.missing_vectors) == (TOTAL * 2, DURING * 2)

    assert memory.reindex(missing_only=True) == DURING * 2
    assert memory.stats().missing_vectors == 0
    assert memory.vector_store.message_ids(name) == every
    lost = BEFORE + 1  # a turn indexed while the server was down
    hits = memory.search(f"subject{lost}", thread_id="th9", resource_id="u")
    assert f"t{lost}-u" in {m.id for hit in hits for m in hit.window}


def test_calls_while_the_server_is_down_say_so_and_a_second_forget_finishes(
    memory: SemanticRecall, chroma_server: ChromaServer
) -> None:
    memory.index(turn(1), thread_id="a1", resource_id="alice")
    memory.index(turn(2), thread_id="b1", resource_id="bob")
    memory.index(turn(3), thread_id="c1", resource_id="carol")
    chroma_server.stop()

    down = memory.index(turn(4), thread_id="a1", resource_id="alice")
    assert down.stored == ("t4-u", "t4-a")
    assert down.error is not None
    assert chroma_server.url in down.error
    calls: dict[str, Callable[[], object]] = {
        "search": lambda: memory.search("subject1", resource_id="alice"),
        "asearch": lambda: asyncio.run(memory.asearch("subject1", resource_id="alice")),
        "stats": lambda: memory.stats(resource_id="alice"),
        "reindex": lambda: memory.reindex(missing_only=True),
        "move_thread": lambda: memory.move_thread("a1", to="dan", resource_id="alice"),
        "forget_thread": lambda: memory.forget_thread("b1", resource_id="bob"),
        "aforget_resource": lambda: asyncio.run(memory.aforget_resource("carol")),
    }
    for name, call in calls.items():
        with pytest.raises(StorageError, match=re.escape(chroma_server.url)) as raised:
            call()
        assert "chroma run" in str(raised.value), name

    chroma_server.start()
    assert memory.stats(resource_id="alice").missing_vectors == 2  # the move did not happen
    assert memory.stats().orphan_vectors == 4  # bob's and carol's, their messages gone
    assert memory.forget_thread("b1", resource_id="bob") == 0  # called again: it finishes
    assert memory.forget_resource("carol") == 0
    assert memory.reindex(missing_only=True) == 2
    stats = memory.stats()
    assert (stats.messages, stats.missing_vectors, stats.orphan_vectors) == (4, 0, 0)


def _within(seconds: float, call: Callable[[], object]) -> object:
    """`call()`'s result or exception, failing the test if it is still running after `seconds`."""
    done: list[object] = []

    def run() -> None:
        try:
            done.append(call())
        except Exception as exc:
            done.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(timeout=seconds)
    assert done, f"still waiting for the stuck Chroma server after {seconds:.0f} s"
    return done[0]


def test_a_stuck_server_fails_a_call_after_the_request_timeout(
    pg_url: str, chroma_server: ChromaServer
) -> None:
    """A server that accepts and never answers (stopped, overloaded): calls end, recall too."""
    vectors = ChromaServerVectorIndex(chroma_server.url, request_timeout=1.0)
    memory = SemanticRecall(
        storage=PostgresStorage(pg_url), vector_store=vectors, embeddings=FakeEmbeddings(64)
    )
    process = chroma_server.process
    assert process is not None
    try:
        memory.index(turn(1), thread_id="a1", resource_id="alice")
        os.killpg(process.pid, signal.SIGSTOP)
        searched = _within(30, lambda: memory.search("subject1", resource_id="alice"))
        assert isinstance(searched, StorageError)
        assert chroma_server.url in str(searched)
        question = [HumanMessage("subject1")]
        recalled = _within(30, lambda: memory.recall(question, thread_id="a2", resource_id="alice"))
        assert recalled == question  # the turn goes on without memory
    finally:
        os.killpg(process.pid, signal.SIGCONT)
        memory.close()
        vectors.close()
        memory.storage.close()


def test_a_server_started_on_a_taken_port_is_not_mistaken_for_the_one_there(
    chroma_server: ChromaServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat of another test's server on the port does not make ours "ready".

    Two tests given one free port at once: the second stopped its own server (which had
    failed to bind) and the stuck-server test above searched the first test's server.
    """
    taken = chroma_server.port
    with pytest.raises(RuntimeError, match=f"port {taken}"):  # a port fixed: no other
        ChromaServer(tmp_path / "fixed", port=taken).start()
    ports = iter([taken])
    monkeypatch.setattr(conftest, "free_port", lambda: next(ports, real_free_port()))
    second = ChromaServer(tmp_path / "moved").start()  # taken first, then another port
    try:
        assert second.port != taken
        assert second.process is not None
        assert listens_on(second.process.pid, second.port)
        assert not listens_on(second.process.pid, taken)
    finally:
        second.stop(remove=True)
