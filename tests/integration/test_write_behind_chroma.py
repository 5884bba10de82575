"""A turn's vectors written behind on the embedded default, seen the way a user sees them.

`index` returns before embedded Chroma has the turn's vectors (`vectors.write_behind`);
these tests hold what that must not change: a failed write is reported (to its resource
only) and repaired, a process that exits at once still writes them, and the checks are
made at the call.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors import chroma_writes
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from tests.conformance.vector_suite import DIMENSION, MODEL, record
from tests.fakes import FakeEmbeddings

TURN = [HumanMessage("My gym locker code is 4711."), AIMessage("Got it, 4711.")]
_OPENED: list[ChromaVectorIndex] = []


@pytest.fixture(autouse=True)
def _close_indexes() -> Iterator[None]:
    """An engine leaves a vector index it was given open: each test closes its own."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def engine(path: Path, **workarounds: Any) -> SemanticRecall:
    vectors = ChromaVectorIndex.persistent(
        path / "chroma", workarounds=ChromaWorkarounds(**workarounds)
    )
    _OPENED.append(vectors)
    from langchain_semantic_recall import SQLiteStorage

    return SemanticRecall(
        storage=SQLiteStorage(path / "messages.db"),
        vector_store=vectors,
        embeddings=FakeEmbeddings(),
    )


def test_a_failed_write_behind_is_reported_to_its_resource_and_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = engine(tmp_path)
    real = chroma_writes._write

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("chroma's disk is full")

    monkeypatch.setattr(chroma_writes, "_write", fail)
    first = memory.index(TURN, thread_id="a1", resource_id="alice")
    memory.vector_store.flush()
    monkeypatch.setattr(chroma_writes, "_write", real)

    stats = memory.stats(resource_id="alice")
    assert stats.missing_vectors == 2
    other = memory.index([HumanMessage("bob's own turn")], thread_id="b1", resource_id="bob")
    assert other.error is None  # another resource never hears of alice's messages
    later = memory.index([HumanMessage("and my bike is blue")], thread_id="a1", resource_id="alice")
    # Said by the call itself when the worker failed before it returned, else by the next.
    (told,) = [result.error for result in (first, later) if result.error]
    assert "chroma's disk is full" in told
    assert all(message_id in told for message_id in first.stored)
    again = memory.index([HumanMessage("one more")], thread_id="a1", resource_id="alice")
    assert again.error is None  # said once
    memory.reindex(missing_only=True)
    assert memory.stats(resource_id="alice").missing_vectors == 0
    hits = memory.search("gym locker code", resource_id="alice")
    assert any("4711" in message.text for hit in hits for message in hit.window)
    memory.close()


def test_a_failed_write_is_told_by_an_index_that_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop sending its unchanged history again embeds nothing; it still hears of it."""
    memory = engine(tmp_path)
    history = [HumanMessage("hello", id="h1"), AIMessage("hi", id="h2")]
    memory.index(history, thread_id="a1", resource_id="alice")
    memory.vector_store.flush()  # written before the store fails
    monkeypatch.setattr(chroma_writes, "_write", lambda *_, **__: _raise())
    failed = memory.index([HumanMessage("my locker is 4711", id="q1")], thread_id="a1",
                          resource_id="alice")  # fmt: skip
    memory.vector_store.flush()
    monkeypatch.undo()
    again = memory.index(history, thread_id="a1", resource_id="alice")  # unchanged: no write
    assert {fate.fate for fate in again.fates} == {"unchanged"}
    assert not any(fate.embedded for fate in again.fates)
    (told,) = [result.error for result in (failed, again) if result.error]
    assert "q1" in told
    memory.close()


def _raise() -> None:
    raise ConnectionError("chroma is down")


async def test_async_twins_see_what_was_indexed_before_them(tmp_path: Path) -> None:
    memory = engine(tmp_path)
    for n in range(5):
        turn = [HumanMessage(f"fact {n}: the locker is number {n}"), AIMessage(f"noted {n}")]
        await memory.aindex(turn, thread_id="t1", resource_id="alice")
    stats = await memory.astats(resource_id="alice")
    assert (stats.messages, stats.vectors, stats.missing_vectors) == (10, 10, 0)
    await memory.aforget_thread("t1", resource_id="alice")
    name = memory.ensure_index().name
    assert await memory.vector_store.acount(name) == 0  # none written after the forget
    await memory.aclose()


def test_a_process_that_exits_at_once_still_writes_its_vectors(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from pathlib import Path
        from langchain_core.messages import HumanMessage, AIMessage
        from tests.integration.test_write_behind_chroma import engine
        memory = engine(Path({str(tmp_path)!r}))
        for n in range(3):
            memory.index(
                [HumanMessage(f"fact {{n}}"), AIMessage(f"noted {{n}}")],
                thread_id="t1", resource_id="alice",
            )
        # no close(), no flush(): the interpreter exits with the writes queued
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    memory = engine(tmp_path)
    stats = memory.stats(resource_id="alice")
    assert (stats.messages, stats.missing_vectors) == (6, 0)
    memory.close()


def test_the_checks_are_made_at_the_call(tmp_path: Path) -> None:
    vectors = ChromaVectorIndex.persistent(tmp_path / "chroma")
    with pytest.raises(Exception, match="never opened"):
        vectors.upsert("not-opened", [record("m1", [0.0] * DIMENSION)], behind=True)
    vectors.open("behind", dimension=DIMENSION, model=MODEL)
    with pytest.raises(EmbeddingMismatchError):
        vectors.upsert("behind", [record("m1", [1.0, 2.0])], behind=True)
    vectors.upsert("behind", [record("m1", [1.0] + [0.0] * (DIMENSION - 1))], behind=True)
    assert vectors.count("behind", ScopeFilter(resource_id="r1")) == 1
    vectors.close()


def test_turned_off_every_write_is_made_at_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = engine(tmp_path, write_behind=False)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("down")

    monkeypatch.setattr(chroma_writes, "_write", fail)
    result = memory.index(TURN, thread_id="a1", resource_id="alice")
    assert result.error is not None  # reported by the call itself
    assert "down" in result.error
    memory.close()


def test_engines_on_one_folder_through_a_symbolic_link_share_its_writes(tmp_path: Path) -> None:
    """The queue of writes behind is the folder's, found by its real path: opened through a
    link (macOS's /tmp is one), a forget by the other engine was overtaken by the write,
    and the forgotten messages kept their vectors (an audit: 16 of 20)."""
    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    writer, reader = engine(tmp_path / "store"), engine(tmp_path / "link")
    lanes = {id(m.vector_store._behind.lane) for m in (writer, reader) if m.vector_store._behind}
    assert len(lanes) == 1
    for n in range(5):
        writer.index([HumanMessage(f"secret {n}")], thread_id=f"s{n}", resource_id="a")
        reader.forget_thread(f"s{n}", resource_id="a")
    assert writer.stats(resource_id="a").orphan_vectors == 0
    writer.close()
    reader.close()


def test_a_forget_from_the_command_line_is_not_undone_by_a_write_behind(tmp_path: Path) -> None:
    """`semantic-recall forget` beside an app does not wait for the app's writes behind;
    a turn's vectors written after it are deleted once the worker sees the thread gone."""
    memory = SemanticRecall.local(tmp_path)
    kept = memory.index([HumanMessage("my bike is blue")], thread_id="a0", resource_id="alice")
    name = memory.ensure_index().name
    cli = Path(sys.executable).parent / "semantic-recall"
    with memory.vector_store.writes_held():  # the write waits, as on a busy machine
        forgotten = memory.index(TURN, thread_id="a1", resource_id="alice")
        done = subprocess.run(
            [str(cli), "forget", "--path", str(tmp_path), "--thread", "a1", "--yes"],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    memory.vector_store.flush()
    held = memory.vector_store.message_ids(name, ScopeFilter(resource_id="alice"))
    assert held == set(kept.stored)
    assert not held & set(forgotten.stored)
    assert memory.stats(resource_id="alice").orphan_vectors == 0
    memory.close()


def test_a_move_by_another_writer_leaves_the_moved_vectors_missing(tmp_path: Path) -> None:
    """Another process's move (here a storage of its own on the same file, which waits for
    no lane): the vectors written after it are deleted, and read as missing until a
    reindex writes them under the thread's new resource."""
    memory = engine(tmp_path)
    from langchain_semantic_recall import SQLiteStorage

    other = SQLiteStorage(tmp_path / "messages.db")
    name = memory.ensure_index().name
    with memory.vector_store.writes_held():
        moved = memory.index(TURN, thread_id="a1", resource_id="alice")
        other.move_thread("a1", to_resource="bob")
    other.close()
    memory.vector_store.flush()
    assert memory.vector_store.message_ids(name, ScopeFilter(resource_id="alice")) == set()
    assert memory.stats(resource_id="bob").missing_vectors == len(moved.stored)
    memory.reindex(missing_only=True)
    held = memory.vector_store.message_ids(name, ScopeFilter(resource_id="bob"))
    assert held == set(moved.stored)
    assert memory.search("gym locker code", resource_id="bob")


def test_a_thread_id_taken_over_by_another_resource_never_gets_the_old_owners_vectors(
    tmp_path: Path,
) -> None:
    """Cleared and started again by another process for another resource, with the same
    message id (an app's own ids): the queued vector, with alice's text, must land under
    nobody, and bob's own vector must stay his."""
    memory = engine(tmp_path)
    name = memory.ensure_index().name
    other = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from pathlib import Path
        from langchain_core.messages import HumanMessage
        from tests.integration.test_write_behind_chroma import engine
        memory = engine(Path({str(tmp_path)!r}))
        memory.clear_thread("a1")
        memory.index([HumanMessage("bob: hello there", id="m1")], thread_id="a1", resource_id="bob")
        memory.vector_store.close()
        """
    )
    with memory.vector_store.writes_held():
        alice = [HumanMessage("alice: my PIN is 1234", id="m1")]
        memory.index(alice, thread_id="a1", resource_id="alice")
        done = subprocess.run(
            [sys.executable, "-c", other], check=False, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    memory.vector_store.flush()
    assert memory.vector_store.message_ids(name, ScopeFilter(resource_id="alice")) == set()
    bobs = list(memory.vector_store.export(name, ScopeFilter(resource_id="bob")))
    assert [(row.message_id, row.content) for row in bobs] == [("m1", "bob: hello there")]
