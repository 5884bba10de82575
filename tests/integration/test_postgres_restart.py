"""PostgreSQL stopped and started again while an app runs on it (with a Chroma server).

The cluster is this module's own (the test stops it). While it is down every call that
needs it fails with `StorageError` after `pool_timeout`, recall goes on without memory;
once it is back, the same engine's sync and async pools serve again (psycopg's pool
checks each connection it hands out; after an outage, when its backed-off reconnection
comes round: docs/scale.md), and nothing written before is lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import PostgresCluster, create_database

pytestmark = pytest.mark.integration


class Restartable(PostgresCluster):
    """The conftest's cluster, stopped and started again on the same port."""

    def pg_ctl(self, *argv: str) -> None:
        data = str(self.root / "data")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        command = [str(self.bindir / "pg_ctl"), "-D", data, "-o", options]
        command += ["-l", str(self.root / "server.log"), "-m", "fast", "-w", *argv]
        subprocess.run(self._as_user(*command), check=True, stdout=subprocess.DEVNULL)


@pytest.fixture
def cluster() -> Iterator[Restartable]:
    made = Restartable()
    try:
        yield made.start()  # type: ignore[misc]
    finally:
        made.stop()


def chat(n: int) -> list[HumanMessage | AIMessage]:
    return [
        HumanMessage(f"lisbon trip number{n}", id=f"m{n}-u"),
        AIMessage(f"noted trip number{n}", id=f"m{n}-a"),
    ]


async def back(storage: PostgresStorage, within: float = 120.0) -> None:
    """Wait until both pools serve again (each failed call waits `pool_timeout`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within

    async def sync_pool() -> int:
        return await asyncio.to_thread(storage.count, None)

    for call in (sync_pool, lambda: storage.acount(None)):
        while True:
            try:
                await call()
                break
            except StorageError:
                if loop.time() > deadline:
                    raise


def test_a_restart_and_an_outage_lose_nothing_and_the_pools_recover(
    cluster: Restartable, chroma_url: str
) -> None:
    storage = PostgresStorage(create_database(cluster.url()), timeout=2.0, max_size=3)
    memory = SemanticRecall(
        storage=storage,
        vector_store=ChromaServerVectorIndex(chroma_url),
        embeddings=FakeEmbeddings(64),
        search_mode="dense",
        threshold=0.0,
        index_name=f"pg-restart-{uuid.uuid4().hex[:8]}",
    )

    async def run() -> None:
        assert (await memory.aindex(chat(1), thread_id="t1", resource_id="alice")).error is None
        assert memory.index(chat(2), thread_id="t1", resource_id="alice").error is None

        cluster.pg_ctl("restart")  # every pooled connection is cut
        assert (await memory.aindex(chat(3), thread_id="t1", resource_id="alice")).error is None
        assert memory.index(chat(4), thread_id="t1", resource_id="alice").error is None

        cluster.pg_ctl("stop")
        with pytest.raises(StorageError, match="PostgreSQL"):
            await memory.aindex(chat(5), thread_id="t1", resource_id="alice")
        with pytest.raises(StorageError, match="PostgreSQL"):
            memory.index(chat(5), thread_id="t1", resource_id="alice")
        question = [HumanMessage("lisbon trip")]
        assert await memory.arecall(question, thread_id="t2", resource_id="alice") == question
        with pytest.raises(StorageError):
            memory.stats()

        cluster.pg_ctl("start")
        await back(storage)  # the pools' reconnection backs off while the server is down
        assert (await memory.aindex(chat(6), thread_id="t1", resource_id="alice")).error is None
        assert memory.index(chat(7), thread_id="t1", resource_id="alice").error is None
        hits = await memory.asearch("number1", resource_id="alice")
        assert "m1-u" in {hit.message.id for hit in hits}

    try:
        asyncio.run(run())
        stats = memory.stats(resource_id="alice")
        assert (stats.messages, stats.vectors, stats.missing_vectors) == (12, 12, 0)
    finally:
        memory.close()
        memory.vector_store.close()
        storage.close()


def _frozen(cluster: Restartable, signal_number: int) -> None:
    """Send the cluster's postmaster and its backends `signal_number` (stop / continue)."""
    postmaster = int((cluster.root / "data" / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # "pid (name) state ppid ...": the name may hold spaces
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
        if ppid == postmaster:
            children.append(int(stat.parent.name))
    for pid in [postmaster, *children]:
        os.kill(pid, signal_number)


def test_a_server_that_freezes_while_connections_are_pooled_fails_sync_calls_in_time(
    cluster: Restartable, chroma_url: str
) -> None:
    """A server that stops answering while the pool holds connections (a frozen process;
    a partition that drops nothing): psycopg's check of a pooled connection waited for
    it, and every sync call hung until the server came back (the async pool gave up after
    `pool_timeout`). The check now gives up after it too."""
    storage = PostgresStorage(create_database(cluster.url()), timeout=2.0, max_size=2)
    memory = SemanticRecall(
        storage=storage,
        vector_store=ChromaServerVectorIndex(chroma_url),
        embeddings=FakeEmbeddings(64),
        index_name=f"pg-freeze-{uuid.uuid4().hex[:8]}",
    )
    outcome: dict[str, object] = {}

    def calls() -> None:
        try:
            memory.index(chat(2), thread_id="t1", resource_id="alice")
        except StorageError as error:
            outcome["index"] = error
        question = [HumanMessage("lisbon trip")]
        outcome["recall"] = memory.recall(question, thread_id="t2", resource_id="alice")

    try:
        assert memory.index(chat(1), thread_id="t1", resource_id="alice").error is None
        _frozen(cluster, signal.SIGSTOP)
        try:
            worker = threading.Thread(target=calls, daemon=True)
            worker.start()
            worker.join(timeout=30)  # pool_timeout 2 s per call; hung: until SIGCONT
            assert not worker.is_alive(), "a sync call hung on a frozen server"
        finally:
            _frozen(cluster, signal.SIGCONT)
        assert isinstance(outcome["index"], StorageError)
        assert outcome["recall"] == [HumanMessage("lisbon trip")]  # no memory, no hang
        assert memory.index(chat(3), thread_id="t1", resource_id="alice").error is None
        assert storage.count(None) == 4
    finally:
        memory.close()
        memory.vector_store.close()
        storage.close()


def test_a_pooled_connection_the_server_ended_is_replaced_not_handed_out(
    cluster: Restartable,
) -> None:
    """pg_terminate_backend, idle_session_timeout or a failover end a pooled connection;
    the pool's check must see it and open another, so the next call works (a check that
    read the server's error as an answer handed the dead connection to the call)."""
    import psycopg

    url = create_database(cluster.url())
    storage = PostgresStorage(url, timeout=2.0, min_size=1, max_size=1)
    try:
        assert storage.count(None) == 0
        with psycopg.connect(url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'langchain-semantic-recall' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert ended
        assert all(row[0] for row in ended)
        assert storage.count(None) == 0  # on a new connection, not an error
    finally:
        storage.close()
