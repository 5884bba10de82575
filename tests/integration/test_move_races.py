"""A turn indexed while its thread moves, on embedded Chroma (one collection per resource).

`move_thread` deletes the thread's vectors under the old owner, moves the thread in
storage, then writes its vectors under the new owner; a turn's `index` writes its vectors
under the owner it read, then reads the owner again and follows a move it sees. The
interleaving where the turn writes after the move's delete but reads the owner before the
storage move left the turn's vectors in the old owner's collection: her index held text of
a thread that is no longer hers (a forget of the new owner does not reach it), and
nothing said so. The in-memory index keys a vector by id alone, so an upsert under the new
owner replaced the stray one there and the unit tests could not see it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from tests.fakes import FakeEmbeddings
from tests.faults import FaultyVectors


def chat(prefix: str) -> list[HumanMessage | AIMessage]:
    return [
        HumanMessage(f"{prefix} my violin lesson is on friday", id=f"{prefix}-u"),
        AIMessage(f"{prefix} noted, the violin lesson", id=f"{prefix}-a"),
    ]


def test_vectors_written_between_the_moves_delete_and_its_storage_move_follow_it(
    tmp_path: Path,
) -> None:
    """Seen with 3 threads indexing while one moved, on `SemanticRecall.local`: 2 vectors
    left in alice's collection in 3 of 15 rounds, `stats` showing nothing wrong.
    """
    vectors = FaultyVectors(ChromaVectorIndex.persistent(tmp_path / "chroma"))
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"),
        vector_store=vectors,
        embeddings=FakeEmbeddings(32),
        search_mode="dense",
    )
    memory.index(chat("a"), thread_id="t1", resource_id="alice")
    write = vectors.faults.gate("upsert")  # the turn's vector write waits...
    deleted = vectors.faults.gate("delete", when="after")  # ...for the move's delete
    with ThreadPoolExecutor(2) as pool:
        turn = pool.submit(memory.index, chat("late"), thread_id="t1", resource_id="alice")
        write.wait_entered()
        move = pool.submit(memory.move_thread, "t1", to="bob")
        deleted.wait_entered()  # alice's vectors deleted, the thread still hers
        write.release()
        result = turn.result(timeout=30)  # wrote under alice, read alice as the owner
        deleted.release()
        assert move.result(timeout=30) == 4
    assert result.embedded == ("late-u", "late-a")
    name = memory.ensure_index().name
    assert vectors.inner.message_ids(name, ScopeFilter(resource_id="alice")) == set()
    assert vectors.inner.message_ids(name, ScopeFilter(resource_id="bob")) == {
        "a-u",
        "a-a",
        "late-u",
        "late-a",
    }
    memory.forget_resource("bob")
    assert vectors.inner.count(name) == 0  # nothing of bob's thread is left anywhere
    vectors.inner.close()
    memory.storage.close()
