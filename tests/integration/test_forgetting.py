"""The forgetting suite of tests/unit/test_forgetting.py on embedded Chroma.

Also on what `SemanticRecall.local` builds, reopened, and the documented purge.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import (
    SemanticRecall,
)
from langchain_semantic_recall.records import ScopeFilter
from tests.faults import (
    LOCAL,
    MEMORY_EPHEMERAL_CHROMA,
    SQLITE_CHROMA,
    FaultyEmbeddings,
    InjectedError,
    open_rig,
)
from tests.unit.test_forgetting import (
    ForgettingSuite,
    assert_gone,
    exchange,
    isolation_machine,
    machine_settings,
)


class TestForgettingSQLiteChroma(ForgettingSuite):
    backend = SQLITE_CHROMA


TestIsolationChroma = isolation_machine(MEMORY_EPHEMERAL_CHROMA).TestCase
TestIsolationChroma.settings = machine_settings(25, 30)


def test_forgetting_holds_after_reopening_the_local_store(tmp_path: Path) -> None:
    """On disk (SQLite file, persistent Chroma): a reopened store has nothing of it either."""
    with open_rig(LOCAL, tmp_path, search_mode="dense") as rig:
        rig.engine.index(exchange("keep", 100), thread_id="t2", resource_id="alice")
        rig.engine.index(exchange("old", 300), thread_id="t1", resource_id="alice")
        rig.engine.index(exchange("bob", 200), thread_id="b1", resource_id="bob")
        rig.engine.forget_thread("t1")
        rig.engine.forget_resource("bob")
    with open_rig(LOCAL, tmp_path, search_mode="dense") as reopened:
        assert_gone(reopened, {"300", "301"}, thread_id="t1")
        assert_gone(reopened, {"200", "201"}, resource_id="bob")
        assert {m.id for m in reopened.stored()} == {"keep-100", "keep-101"}
        assert reopened.vector_ids() == {"keep-100", "keep-101"}
        late = reopened.engine.index(exchange("late", 1), thread_id="t1", resource_id="alice")
        assert late.stored == ()  # the retired ids stay retired on disk


def test_the_documented_purge_leaves_no_byte_of_the_content_on_disk(tmp_path: Path) -> None:
    """``docs/data-handling.md``, "Erasing the bytes too": forget, then one `purge` call.

    A small store (its index never reaches disk); `tests/integration/test_purge.py` checks the
    same on 2,800 messages with the HNSW files on disk, and the vector bytes too.
    """
    store = tmp_path / "memory"
    memory = SemanticRecall.local(store, embeddings=FaultyEmbeddings(), search_mode="dense")
    memory.index(exchange("keep", 100), thread_id="t2", resource_id="alice")
    memory.index(exchange("old", 300), thread_id="t-bob", resource_id="bob")
    memory.forget_resource("bob")
    memory.purge()
    files = [f for f in store.rglob("*") if f.is_file()]
    assert not [f for f in files if b"q300z" in f.read_bytes() or b"q301z" in f.read_bytes()]
    assert [f for f in files if b"q100z" in f.read_bytes()], "the kept messages are still there"
    found = memory.search("lisbon march", thread_id="t9", resource_id="alice")
    assert {h.message.id for h in found} == {"keep-100", "keep-101"}
    memory.storage.close()


@pytest.mark.parametrize("new", ["peanut q301z", ""])
def test_an_edited_messages_old_text_leaves_no_byte_after_the_purge(
    tmp_path: Path, new: str
) -> None:
    """A long message edited to a short one, or to none: its old text is gone from every file.

    ``docs/data-handling.md``, "One message". Its old chunks stayed in Chroma as live
    rows (the edit's upsert overwrote the first only, or none), so the purge, which
    copies the live rows, kept the old text on disk.
    """
    store = tmp_path / "memory"
    memory = SemanticRecall.local(store, embeddings=FaultyEmbeddings(), search_mode="dense")
    old = " ".join(["garden"] * 1500 + ["lisbon q300z"])
    memory.index([HumanMessage(old, id="m1")], thread_id="t1", resource_id="alice")
    edit = memory.index([HumanMessage(new, id="m1")], thread_id="t1", resource_id="alice")
    assert [f.fate for f in edit.fates] == ["updated"]
    memory.purge()
    memory.close()
    files = [f for f in store.rglob("*") if f.is_file()]
    assert not [f for f in files if b"q300z" in f.read_bytes()]
    if new:
        assert [f for f in files if b"q301z" in f.read_bytes()], "the new text is still there"


def test_a_repair_for_one_resource_never_deletes_another_resources_vector() -> None:
    """Chroma keeps a collection per resource, so two resources can hold the same vector id.

    Alice's cleared thread leaves an orphan vector (its delete failed); Bob then writes a
    message of the same id. Alice's `reindex(missing_only=True)` removes her orphan, and
    only hers: a delete made for a resource never reaches another's vectors.
    """
    with open_rig(SQLITE_CHROMA, search_mode="dense") as rig:
        engine = rig.engine
        engine.index([HumanMessage("Lisbon in March", id="m1")], thread_id="t", resource_id="alice")
        rig.vectors.faults.fail("delete")
        with pytest.raises(InjectedError):
            engine.clear_thread("t", resource_id="alice")
        assert engine.stats(resource_id="alice").orphan_vectors == 1
        engine.index([HumanMessage("Porto in May", id="m1")], thread_id="t", resource_id="bob")

        assert engine.reindex(resource_id="alice", missing_only=True) == 0

        assert engine.stats(resource_id="alice").orphan_vectors == 0
        bob = engine.stats(resource_id="bob")
        assert (bob.vectors, bob.missing_vectors) == (1, 0)
        assert rig.vector_ids(ScopeFilter(resource_id="bob")) == {"m1"}
