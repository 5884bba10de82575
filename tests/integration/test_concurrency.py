"""8 writers and 8 readers on one resource at once, on PostgreSQL + a Chroma server.

Each writer indexes its turns (a user message and its answer, written together) into a
thread it shares with another writer; each reader searches the resource meanwhile, both
through the engine and straight in the vector index. Checked: no message lost or
duplicated, sequence numbers dense and in each writer's order, one vector per message,
and no vector ever visible before its whole turn is readable from storage.
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.integration

RESOURCE = "shared-user"
WRITERS, READERS, TURNS = 8, 8, 6
SCOPE = ScopeFilter(resource_id=RESOURCE)


def thread_of(writer: int) -> str:
    return f"thread-{writer % 4}"  # two writers per thread: they race for its seq numbers


def turn(writer: int, n: int) -> list[BaseMessage]:
    words = f"writer{writer} turn{n} topic{writer}x{n}"
    return [
        HumanMessage(f"question on {words}", id=f"w{writer}-t{n}-u"),
        AIMessage(f"answer on {words}", id=f"w{writer}-t{n}-a"),
    ]


def partner(message_id: str) -> str:
    return message_id[:-1] + ("a" if message_id.endswith("u") else "u")


def expected_ids() -> set[str]:
    return {m.id for w in range(WRITERS) for n in range(TURNS) for m in turn(w, n) if m.id}


def engine(pg_url: str, chroma_url: str) -> SemanticRecall:
    return SemanticRecall(
        storage=PostgresStorage(pg_url, max_size=WRITERS + READERS),
        vector_store=ChromaServerVectorIndex(chroma_url),
        embeddings=FakeEmbeddings(64),
        index_name=f"concurrency-{uuid.uuid4().hex[:10]}",
        top_k=6,
    )


@pytest.fixture
def memory(pg_url: str, chroma_url: str) -> Iterator[SemanticRecall]:
    memory = engine(pg_url, chroma_url)
    yield memory
    memory.storage.close()


@pytest.fixture
async def amemory(pg_url: str, chroma_url: str) -> AsyncIterator[SemanticRecall]:
    memory = engine(pg_url, chroma_url)
    yield memory
    await memory.storage.aclose()


def check_visible_turns(memory: SemanticRecall, message_ids: list[str]) -> int:
    """Every message a reader saw must be stored, next to its turn partner."""
    windows = memory.storage.get_windows(message_ids, before=1, after=1, scope=SCOPE)
    for message_id in message_ids:
        assert message_id in windows, f"{message_id} is searchable but not stored"
        assert partner(message_id) in {m.id for m in windows[message_id]}, "half a turn"
    return len(message_ids)


def check_final_state(memory: SemanticRecall) -> None:
    stored = memory.storage.list_messages(SCOPE, limit=10_000)
    assert len(stored) == len({m.id for m in stored}) == WRITERS * TURNS * 2
    assert {m.id for m in stored} == expected_ids()
    for thread in {thread_of(w) for w in range(WRITERS)}:
        seqs = [m.seq for m in stored if m.thread_id == thread]
        assert seqs == list(range(len(seqs))), f"gaps or repeats in {thread}"
    for writer in range(WRITERS):
        mine = [m.id for m in stored if m.id.startswith(f"w{writer}-")]
        assert mine == [m.id for n in range(TURNS) for m in turn(writer, n)]
    name = memory.ensure_index().name
    assert memory.vector_store.message_ids(name, SCOPE) == expected_ids()
    vectors = memory.vector_store.count(name, SCOPE)  # type: ignore[attr-defined]
    assert vectors == WRITERS * TURNS * 2, "a message has more than one vector"
    stats = memory.stats(resource_id=RESOURCE)
    assert (stats.missing_vectors, stats.orphan_vectors) == (0, 0)


def test_sync_writers_and_readers(memory: SemanticRecall) -> None:
    info = memory.ensure_index()
    start = threading.Barrier(WRITERS + READERS)
    writing = threading.Event()
    writing.set()
    errors: list[BaseException] = []
    seen = [0] * READERS

    def write(writer: int) -> None:
        try:
            start.wait()
            for n in range(TURNS):
                result = memory.index(
                    turn(writer, n), thread_id=thread_of(writer), resource_id=RESOURCE
                )
                assert result.error is None, result.error
        except BaseException as exc:
            errors.append(exc)

    def read(reader: int) -> None:
        rng = random.Random(reader)
        try:
            start.wait()
            while writing.is_set():
                writer, n = rng.randrange(WRITERS), rng.randrange(TURNS)
                query = f"writer{writer} turn{n} topic{writer}x{n}"
                hits = memory.search(query, thread_id=f"reader-{reader}", resource_id=RESOURCE)
                vector = memory.embeddings.embed_query(query)
                raw = memory.vector_store.query(info.name, vector, k=6, scope=SCOPE)
                ids = [h.message.id for h in hits] + [h.message_id for h in raw]
                seen[reader] += check_visible_turns(memory, list(dict.fromkeys(ids)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    readers = [threading.Thread(target=read, args=(r,)) for r in range(READERS)]
    for thread in threads + readers:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    writing.clear()
    for thread in readers:
        thread.join(timeout=60)
    assert errors == []
    assert sum(seen) > 0, "the readers never saw a message while the writers ran"
    check_final_state(memory)


async def test_async_writers_and_readers(amemory: SemanticRecall) -> None:
    info = await amemory.aensure_index()
    writing = asyncio.Event()
    writing.set()
    seen = [0] * READERS

    async def write(writer: int) -> None:
        for n in range(TURNS):
            result = await amemory.aindex(
                turn(writer, n), thread_id=thread_of(writer), resource_id=RESOURCE
            )
            assert result.error is None, result.error

    async def read(reader: int) -> None:
        rng = random.Random(reader)
        while writing.is_set():
            writer, n = rng.randrange(WRITERS), rng.randrange(TURNS)
            query = f"writer{writer} turn{n} topic{writer}x{n}"
            hits = await amemory.asearch(query, thread_id=f"r{reader}", resource_id=RESOURCE)
            vector = await amemory.embeddings.aembed_query(query)
            raw = await amemory.vector_store.aquery(info.name, vector, k=6, scope=SCOPE)
            ids = list(dict.fromkeys([h.message.id for h in hits] + [h.message_id for h in raw]))
            windows = await amemory.storage.aget_windows(ids, before=1, after=1, scope=SCOPE)
            for message_id in ids:
                assert message_id in windows, f"{message_id} is searchable but not stored"
                assert partner(message_id) in {m.id for m in windows[message_id]}, "half a turn"
            seen[reader] += len(ids)

    async def writers() -> None:
        try:
            await asyncio.gather(*(write(w) for w in range(WRITERS)))
        finally:
            writing.clear()

    await asyncio.wait_for(
        asyncio.gather(writers(), *(read(r) for r in range(READERS))), timeout=180
    )
    assert sum(seen) > 0
    await asyncio.to_thread(check_final_state, amemory)
