"""Chroma's own file tells `stats` what chromadb tells: the same vector ids, or None.

`vectors/chroma_file.py` reads an embedded store's `chroma.sqlite3` without chromadb, for
`semantic-recall stats`. Histories generated and written through the package (turns,
long messages cut into chunks, forgotten threads and resources, retention) give, in every
scope, exactly what `ChromaVectorIndex.vector_ids` gives (each message's vector ids, and
which carry message metadata), and a resource's scope
holds only that resource's messages. A file in another shape gives None, and `stats`
then answers through chromadb, with the same output.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.cli import admin, common, main
from langchain_semantic_recall.engine.maintenance_ops import RecallStats
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_file import ChromaFile
from tests.fakes import FakeEmbeddings
from tests.unit import test_cli as unit

# The CLI's embedder becomes the fake one (tests/unit/test_cli.py's fixtures).
embedder = unit.embedder
plain_terminal = unit.plain_terminal

RESOURCES = ["alice", "bob", "a b", "é"]
"""Resource ids, one with a space and one not ASCII (their collections' names hash them)."""
WORDS = ["lisbon", "tomato", "python", "peanut", "march", "garden"]
LONG = 7000
"""Characters of a long message: more than one chunk (`DEFAULT_MAX_CHARS`, 6,000)."""
START = datetime(2024, 1, 1, tzinfo=UTC)

turn = st.tuples(
    st.just("turn"),
    st.sampled_from(RESOURCES),
    st.integers(0, 2),  # thread number within the resource
    st.integers(0, 9),  # day of the turn (retention cuts by day)
    st.sampled_from(WORDS),
    st.booleans(),  # a long message (chunked vectors)
)
forget_thread = st.tuples(st.just("forget_thread"), st.sampled_from(RESOURCES), st.integers(0, 2))
forget_resource = st.tuples(st.just("forget_resource"), st.sampled_from(RESOURCES))
retention = st.tuples(st.just("forget_before"), st.integers(0, 9))
histories = st.lists(
    st.one_of(turn, turn, turn, forget_thread, forget_resource, retention), min_size=1, max_size=10
)


def thread_of(resource: str, number: int) -> str:
    return f"{resource}-t{number}"


def index_of(memory: SemanticRecall) -> tuple[ChromaVectorIndex, str]:
    index = memory.vector_store
    assert isinstance(index, ChromaVectorIndex)
    return index, memory.ensure_index().name


def play(memory: SemanticRecall, history: list[tuple[Any, ...]]) -> dict[str, str]:
    """Apply the history; returns the resource of every message id ever written."""
    owners: dict[str, str] = {}
    for step, action in enumerate(history):
        if action[0] == "turn":
            _, resource, number, day, word, long = action
            created = {"created_at": (START + timedelta(days=day)).isoformat()}
            text = f"{word} " * (LONG // (len(word) + 1)) if long else f"about {word}"
            ids = [f"m{step}-{resource}-q", f"m{step}-{resource}-a"]
            tagged = {**created, "metadata": {"topic": word}} if day % 2 else created
            messages = [
                HumanMessage(text, id=ids[0], additional_kwargs=tagged),
                AIMessage(f"noted: {word}", id=ids[1], additional_kwargs=created),
            ]
            result = memory.index(
                messages, thread_id=thread_of(resource, number), resource_id=resource
            )
            assert result.error is None
            owners.update(dict.fromkeys(ids, resource))
        elif action[0] == "forget_thread":
            memory.forget_thread(thread_of(action[1], action[2]), resource_id=action[1])
        elif action[0] == "forget_resource":
            memory.forget_resource(action[1])
        else:
            memory.forget_before(START + timedelta(days=action[1]))
    memory.vector_store.flush()  # Chroma's file has a turn's vectors once written behind
    return owners


def scopes() -> Iterator[ScopeFilter | None]:
    """Every scope `stats` may ask: all, each resource, each thread, with or without owner."""
    yield None
    yield ScopeFilter(resource_id="nobody")
    for resource in RESOURCES:
        yield ScopeFilter(resource_id=resource)
        for number in range(3):
            thread = thread_of(resource, number)
            yield ScopeFilter(thread_id=thread)
            yield ScopeFilter(resource_id=resource, thread_id=thread)
            yield ScopeFilter(resource_id="bob", thread_id=thread)


def assert_file_agrees(folder: Path, memory: SemanticRecall, owners: dict[str, str]) -> None:
    index, name = index_of(memory)
    info = memory.ensure_index()
    reader = ChromaFile(folder / "chroma")
    for scope in scopes():
        found = reader.index(name, scope)
        assert found is not None, scope
        assert (found.model, found.dimension) == (info.model, info.dimension)
        assert found.held == index.vector_ids(name, scope), scope  # each vector id, too
        assert set(found.message_ids) == index.message_ids(name, scope), scope
        carrying = {r.message_id for r in index.export(name, scope) if r.metadata}
        assert found.held.carrying == carrying, scope  # stats: vectors lacking metadata
        if scope is not None and scope.resource_id is not None:  # isolation
            assert {owners[m] for m in found.message_ids} <= {scope.resource_id}, scope


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=histories)
def test_the_file_gives_the_message_ids_chromadb_gives(history: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory(prefix="chroma-file-") as scratch:
        folder = Path(scratch)
        memory = SemanticRecall.local(folder, embeddings=FakeEmbeddings(dimension=16))
        try:
            owners = play(memory, history)
            assert_file_agrees(folder, memory, owners)
        finally:
            memory.close()


def test_long_messages_forgets_and_retention_in_one_store(tmp_path: Path) -> None:
    """One fixed history with all of it, so each kind of write is covered every run."""
    memory = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings(dimension=16))
    history: list[tuple[Any, ...]] = [
        ("turn", "alice", 0, 1, "lisbon", True),
        ("turn", "alice", 1, 5, "tomato", False),
        ("turn", "bob", 0, 2, "peanut", True),
        ("turn", "a b", 0, 3, "garden", False),
        ("turn", "é", 2, 8, "march", False),
        ("forget_thread", "alice", 1),
        ("turn", "alice", 2, 6, "python", False),
        ("forget_resource", "a b"),
        ("forget_before", 2),
    ]
    try:
        owners = play(memory, history)
        index, name = index_of(memory)
        assert any("#" in vector_id for vector_id, _, _ in index._rows(name, None, metadata=False))
        assert index.message_ids(name, ScopeFilter(resource_id="bob")) == {
            "m2-bob-q",
            "m2-bob-a",
        }
        assert_file_agrees(tmp_path, memory, owners)
    finally:
        memory.close()


@pytest.mark.parametrize("index_name", [None, "i" * 500])  # 500: the prefix is shortened
def test_many_resources_and_two_indexes(tmp_path: Path, index_name: str | None) -> None:
    """30 resources' collections; a second index in the same folder is never counted."""
    memory = SemanticRecall.local(
        tmp_path, embeddings=FakeEmbeddings(dimension=16), index_name=index_name
    )
    other = SemanticRecall.local(
        tmp_path, embeddings=FakeEmbeddings(dimension=8, model="other"), index_name="other-index"
    )
    owners: dict[str, str] = {}
    try:
        for n in range(30):
            resource = f"user-{n}"
            for engine in (memory, other):
                engine.index(
                    [HumanMessage(f"note {n}", id=f"{resource}-{engine is other}")],
                    thread_id=f"{resource}-t",
                    resource_id=resource,
                )
            owners[f"{resource}-False"] = resource
        memory.forget_resource("user-7")
        index, name = index_of(memory)
        reader = ChromaFile(tmp_path / "chroma")
        for scope in (None, ScopeFilter(resource_id="user-3"), ScopeFilter(resource_id="user-7")):
            found = reader.index(name, scope)
            assert found is not None
            assert set(found.message_ids) == index.message_ids(name, scope)
        everything = reader.index(name, None)
        assert everything is not None
        assert len(everything.message_ids) == 29
        assert all(owners[m] != "user-7" for m in everything.message_ids)
    finally:
        memory.close()
        other.close()


# --- a vector outside its collection's resource, and files of another shape -----------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """alice's and bob's turns, and a row in alice's collection that says it is bob's."""
    memory = SemanticRecall.local(tmp_path / "store", embeddings=FakeEmbeddings())
    for resource in ("alice", "bob"):
        memory.index(
            [HumanMessage(f"{resource} waters the tomatoes"), AIMessage("Noted.")],
            thread_id=f"{resource}-garden",
            resource_id=resource,
        )
    index, name = index_of(memory)
    index.flush()  # (a turn's vectors are written just after `index` returns)
    alice = index._collections.get(name, "alice", create=False)
    assert alice is not None
    alice.add(  # as a bug elsewhere could write it: the scope's checks must leave it out
        ids=["bob-secret"],
        embeddings=np.eye(1, 128, dtype=np.float32),
        metadatas=[{"message_id": "bob-secret", "resource_id": "bob", "thread_id": "bob-x"}],
    )
    memory.close()
    return tmp_path / "store"


def stats_json(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> dict[str, Any]:
    assert main(["--path", str(store), "stats", "--json", *argv]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def through_chromadb(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], store: Path, *argv: str
) -> dict[str, Any]:
    with monkeypatch.context() as patched:
        patched.setattr(admin, "_file_stats", lambda _args: None)
        return stats_json(capsys, store, *argv)


@pytest.mark.usefixtures("embedder")
def test_stats_of_a_resource_never_counts_another_resources_vector(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings())
    name = memory.ensure_index().name
    memory.close()
    found = ChromaFile(store / "chroma").index(name, ScopeFilter(resource_id="alice"))
    assert found is not None
    assert "bob-secret" not in found.message_ids
    assert len(found.message_ids) == 2
    for argv in [("--resource", "alice"), ("--resource", "bob"), ()]:
        assert stats_json(capsys, store, *argv) == through_chromadb(
            monkeypatch, capsys, store, *argv
        )
    alice = stats_json(capsys, store, "--resource", "alice")
    assert (alice["vectors"], alice["orphan_vectors"]) == (2, 0)


@pytest.mark.usefixtures("embedder")
def test_stats_count_an_adopted_threads_vectors_left_under_no_resource_as_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thread written without a resource, adopted by alice while Chroma failed: its
    earlier vectors stay in the collection of no resource, where her searches never look.
    Both ways of counting say they are missing; `reindex --missing-only` moves them."""
    store = tmp_path / "store"
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings(), scope="thread")
    memory.index([HumanMessage("old tomatoes", id="o1"), AIMessage("ok", id="o2")], thread_id="t")
    with monkeypatch.context() as patched:

        def down(*_: object, **__: object) -> None:
            raise ConnectionError("chroma unreachable")

        patched.setattr(ChromaVectorIndex, "_delete", down)
        result = memory.index([HumanMessage("new", id="n1")], thread_id="t", resource_id="alice")
    assert result.error is not None
    memory.close()
    for argv in [(), ("--thread", "t"), ("--resource", "alice")]:
        counted = stats_json(capsys, store, *argv)
        assert counted == through_chromadb(monkeypatch, capsys, store, *argv)
        assert counted["missing_vectors"] == 3, argv  # o1, o2 astray; n1 never written
    assert main(["--path", str(store), "reindex", "--missing-only"]) == 0
    capsys.readouterr()
    counted = stats_json(capsys, store)
    assert (counted["vectors"], counted["missing_vectors"], counted["orphan_vectors"]) == (3, 0, 0)
    with SemanticRecall.local(store, embeddings=FakeEmbeddings(), search_mode="dense") as again:
        hits = again.search("old tomatoes", resource_id="alice", top_k=1)
        assert [h.message.id for h in hits] == ["o1"]
        name = again.ensure_index().name
        assert again.vector_store.message_ids(name, ScopeFilter("(no resource)")) == set()


def renamed_table(folder: Path) -> None:
    with sqlite3.connect(folder / "chroma.sqlite3") as connection:
        connection.execute("ALTER TABLE embedding_metadata RENAME TO embedding_metadata_v2")


def message_id_as_number(folder: Path) -> None:
    """One record's `message_id` an integer: chromadb reads it, this module does not."""
    with sqlite3.connect(folder / "chroma.sqlite3") as connection:
        connection.execute(
            "UPDATE embedding_metadata SET string_value = NULL, int_value = 7 "
            "WHERE key = 'message_id' AND id = (SELECT min(id) FROM embeddings)"
        )


def index_in_l2_space(folder: Path) -> None:
    with sqlite3.connect(folder / "chroma.sqlite3") as connection:
        connection.execute(
            "UPDATE collections SET schema_str = replace(schema_str, 'cosine', 'l2')"
        )


@pytest.mark.parametrize("change", [renamed_table, message_id_as_number, index_in_l2_space])
def test_a_file_of_another_shape_gives_none(store: Path, tmp_path: Path, change: Any) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    change(copy / "chroma")
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings())
    name = memory.ensure_index().name
    memory.close()
    for scope in (None, ScopeFilter(resource_id="alice"), ScopeFilter(thread_id="bob-garden")):
        assert ChromaFile(store / "chroma").index(name, scope) is not None
        assert ChromaFile(copy / "chroma").index(name, scope) is None


@pytest.mark.usefixtures("embedder")
def test_stats_on_a_file_of_another_shape_answers_through_chromadb(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    message_id_as_number(copy / "chroma")
    before, after = stats_json(capsys, store), stats_json(capsys, copy)
    assert before["orphan_vectors"] == 1  # bob-secret
    # chromadb reads the number as the message id "7": one vector less, one orphan more
    assert (after["vectors"], after["orphan_vectors"]) == (before["vectors"] - 1, 2)
    assert after["missing_vectors"] == before["missing_vectors"] + 1


def test_an_embedder_whose_dimension_needs_a_probe_is_counted_through_chromadb(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only embedding a text would name its index: the file is not read, chromadb answers."""
    asked: list[object] = []
    client_stats = admin._client_stats

    def through_client(args: argparse.Namespace) -> RecallStats:
        asked.append(args)
        return client_stats(args)

    monkeypatch.setattr(admin, "_client_stats", through_client)
    monkeypatch.setattr(common, "create_embeddings", FakeEmbeddings)
    assert stats_json(capsys, store)["vectors"] == 4
    assert asked == []  # read from the file

    def probed() -> FakeEmbeddings:
        fake = FakeEmbeddings()
        fake.dimension = None
        return fake

    monkeypatch.setattr(common, "create_embeddings", probed)
    assert stats_json(capsys, store)["vectors"] == 4
    assert len(asked) == 1


# --- what chromadb would apply first, and records without a thread -------------------------


def last_writes_unapplied(folder: Path, after: int) -> None:
    """Chroma's state between its two transactions of a write: the records written after
    write `after` are in the log, not yet in the metadata segment (a writer stopped there,
    or a read taken meanwhile: a reader polling during 1,500 adds saw it in 25 % of reads)."""
    with sqlite3.connect(folder / "chroma.sqlite3") as connection:
        rows = connection.execute("SELECT id FROM embeddings WHERE seq_id > ?", (after,))
        for (row,) in rows.fetchall():
            for table in ("embedding_metadata", "embedding_fulltext_search"):
                column = "rowid" if table == "embedding_fulltext_search" else "id"
                connection.execute(f"DELETE FROM {table} WHERE {column} = ?", (row,))
            connection.execute("DELETE FROM embeddings WHERE id = ?", (row,))
        connection.execute("UPDATE max_seq_id SET seq_id = ? WHERE seq_id > ?", (after, after))


def last_write(folder: Path) -> int:
    with sqlite3.connect(f"file:{folder / 'chroma.sqlite3'}?mode=ro", uri=True) as connection:
        return int(connection.execute("SELECT max(seq_id) FROM embeddings_queue").fetchone()[0])


def test_a_write_in_the_log_but_not_applied_is_never_left_out(tmp_path: Path) -> None:
    """chromadb applies the log's newer records before it reads: the file must not answer
    without them (it gives None, and `stats` asks chromadb)."""
    memory = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings(dimension=16))
    try:
        play(memory, [("turn", "alice", 0, 1, "lisbon", False)])
        before = last_write(tmp_path / "chroma")
        play(memory, [("forget_before", 0), ("turn", "alice", 1, 2, "tomato", False)])
        name = memory.ensure_index().name
    finally:
        memory.close()
    last_writes_unapplied(tmp_path / "chroma", before)
    scopes = [None, ScopeFilter(resource_id="alice"), ScopeFilter(thread_id="alice-t1")]
    read = [ChromaFile(tmp_path / "chroma").index(name, scope) for scope in scopes]
    memory = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings(dimension=16))
    try:
        index, _ = index_of(memory)
        for scope, found in zip(scopes, read, strict=True):
            expected = index.message_ids(name, scope)
            assert {"m1-alice-a", "m1-alice-q"} <= expected  # chromadb applied the log
            assert found is None or set(found.message_ids) == expected, scope
    finally:
        memory.close()


def test_a_record_without_a_thread_is_in_no_threads_scope(store: Path) -> None:
    """A thread's `where` leaves out a record without `thread_id`, also for a thread
    named "None" (what `str` makes of a missing value)."""
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings())
    try:
        index, name = index_of(memory)
        alice = index._collections.get(name, "alice", create=False)
        assert alice is not None
        alice.add(
            ids=["stray"],
            embeddings=np.eye(1, 128, dtype=np.float32),
            metadatas=[{"message_id": "stray", "resource_id": "alice"}],
        )
        for scope in (ScopeFilter(thread_id="None"), ScopeFilter(resource_id="alice")):
            found = ChromaFile(store / "chroma").index(name, scope)
            assert found is not None
            assert set(found.message_ids) == index.message_ids(name, scope), scope
        assert "stray" in index.message_ids(name, ScopeFilter(resource_id="alice"))
    finally:
        memory.close()
