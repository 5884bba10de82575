"""``semantic-recall migrate``: the embedded default to PostgreSQL + a Chroma server.

The embedded store is filled through the engine, migrated with the command (copying the
vectors, or embedding them again), and then compared: every message identical (ids,
threads, owners, roles, text, times, payloads, order) and the same recall results for the
same queries. One run uses the real local model end to end, as a user would.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.cli import main
from langchain_semantic_recall.cli.migrate import migrate
from langchain_semantic_recall.errors import (
    ForgottenThreadError,
    InvalidOptionError,
    OwnershipError,
)
from langchain_semantic_recall.records import ThreadPlace
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingVectors

pytestmark = pytest.mark.integration

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
TOPICS = ("lisbon trip", "tomato seedlings", "peanut allergy", "piano lessons", "tax forms")


def history() -> list[tuple[str, str, list[BaseMessage]]]:
    """(resource, thread, messages): 3 users x 3 conversations, a system prompt, a long one."""
    conversations = []
    for r in range(3):
        for t in range(3):
            thread = f"u{r}-chat{t}"
            messages: list[BaseMessage] = [SystemMessage("be brief", id=f"{thread}-sys")]
            for n in range(4):
                topic = TOPICS[(r + t + n) % len(TOPICS)]
                when = (START + timedelta(days=r * 10 + t, minutes=n)).isoformat()
                kwargs = {"created_at": when}
                question = HumanMessage(f"about the {topic} {n}", id=f"{thread}-q{n}")
                answer = AIMessage(f"noted the {topic}", id=f"{thread}-a{n}")
                for message in (question, answer):
                    message.additional_kwargs = dict(kwargs)
                    messages.append(message)
            conversations.append((f"user{r}", thread, messages))
    long_text = " ".join(f"chapter {i} of the lisbon travel diary" for i in range(600))
    conversations.append(("user0", "u0-diary", [HumanMessage(long_text, id="u0-diary-0")]))
    return conversations


QUERIES = [(topic, f"user{r}") for topic in TOPICS for r in range(3)]


def fill(memory: SemanticRecall) -> None:
    for resource, thread, messages in history():
        result = memory.index(messages, thread_id=thread, resource_id=resource)
        assert result.error is None
    memory.forget_thread("u2-chat2")


def results(memory: SemanticRecall) -> list[Any]:
    found = []
    for query, resource in QUERIES:
        hits = memory.search(query, thread_id="new-chat", resource_id=resource)
        found.append([(h.message.id, round(h.score, 5), [m.id for m in h.window]) for h in hits])
    return found


def messages_of(memory: SemanticRecall) -> list[tuple[Any, ...]]:
    return [
        (m.id, m.thread_id, m.resource_id, m.role, m.text, m.created_at, m.payload, m.seq)
        for m in memory.storage.list_messages(limit=10_000)
    ]


def run_migrate(
    source: Path, pg_url: str, chroma_url: str, *options: str, capsys: Any
) -> dict[str, Any]:
    argv = ["--path", str(source), "migrate", "--to-storage", pg_url]
    code = main([*argv, "--to-vector", chroma_url, "--json", *options])
    out = capsys.readouterr().out
    assert code == 0, out
    report: dict[str, Any] = json.loads(out)
    return report


@pytest.mark.parametrize("mode", ["copy", "reembed"])
def test_migration_preserves_messages_and_recall(
    mode: str, tmp_path: Path, pg_url: str, chroma_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    index = f"migrate-{uuid.uuid4().hex[:10]}"
    source = SemanticRecall.local(
        tmp_path / "embedded", embeddings=FakeEmbeddings(), index_name=index
    )
    fill(source)
    expected_messages, expected_results = messages_of(source), results(source)
    assert sum(len(r) for r in expected_results) > 0

    options = ["--vectors", mode, "--index-name", index, "--batch-size", "7"]
    options += ["--embeddings", "tests.fakes:FakeEmbeddings"]
    report = run_migrate(tmp_path / "embedded", pg_url, chroma_url, *options, capsys=capsys)
    embeddable = sum(1 for m in expected_messages if m[3] in ("user", "assistant"))
    assert report["messages"] == report["target_messages"] == len(expected_messages)
    if mode == "copy":
        assert report["vectors_copied"] > embeddable  # the long message has several chunks
        assert report["vectors_embedded"] == 0
    else:
        assert (report["vectors_copied"], report["vectors_embedded"]) == (0, embeddable)

    target = SemanticRecall.from_url(
        storage=pg_url, vector=chroma_url, embeddings=FakeEmbeddings(), index_name=index
    )
    try:
        assert messages_of(target) == expected_messages
        assert results(target) == expected_results
        stats = target.stats()
        assert (stats.missing_vectors, stats.orphan_vectors) == (0, 0)
        # Running it again is harmless: nothing new, nothing duplicated.
        again = run_migrate(tmp_path / "embedded", pg_url, chroma_url, *options, capsys=capsys)
        assert again["target_messages"] == len(expected_messages)
        assert messages_of(target) == expected_messages
    finally:
        target.storage.close()
        source.storage.close()


def test_migration_with_the_real_model(
    tmp_path: Path, pg_url: str, chroma_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    index = f"migrate-local-{uuid.uuid4().hex[:10]}"
    source = SemanticRecall.local(tmp_path / "embedded", index_name=index)
    fill(source)
    embeddings: Embeddings = source.embeddings
    expected_messages, expected_results = messages_of(source), results(source)
    report = run_migrate(
        tmp_path / "embedded", pg_url, chroma_url, "--index-name", index, capsys=capsys
    )
    assert report["vectors_embedded"] == 0
    target = SemanticRecall.from_url(
        storage=pg_url, vector=chroma_url, embeddings=embeddings, index_name=index
    )
    try:
        assert messages_of(target) == expected_messages
        assert results(target) == expected_results
    finally:
        target.storage.close()
        source.storage.close()


def test_migrate_refuses_a_missing_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--path", str(tmp_path / "nothing"), "migrate", "--to-storage", "memory://"]
    assert main([*argv, "--to-vector", "memory://"]) == 3
    assert "no store" in capsys.readouterr().err


def test_migrate_writes_nothing_into_another_applications_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its target got this package's tables beside the application's, and WAL."""
    import sqlite3

    source = SemanticRecall.local(tmp_path / "source", embeddings=FakeEmbeddings())
    fill(source)
    source.close()
    app = tmp_path / "app.db"
    with sqlite3.connect(app) as conn:
        conn.execute("CREATE TABLE invoices (total REAL)")
    conn.close()
    before = app.read_bytes()
    argv = ["--path", str(tmp_path / "source"), "migrate", "--to-storage", f"sqlite:///{app}"]
    argv += ["--to-vector", "memory://", "--embeddings", "tests.fakes:FakeEmbeddings"]
    assert main(argv) == 3
    assert "is another application's database" in capsys.readouterr().err
    assert app.read_bytes() == before


def test_the_global_storage_and_vector_urls_are_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`semantic-recall --storage URL --vector URL migrate ...` copies from those URLs.

    They were ignored: the embedded store of the working folder was migrated instead.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SEMANTIC_RECALL_PATH", raising=False)
    servers = SemanticRecall.local(tmp_path / "servers", embeddings=FakeEmbeddings())
    fill(servers)
    expected = servers.storage.count()
    servers.close()
    bystander = SemanticRecall.local(tmp_path / ".semantic-recall", embeddings=FakeEmbeddings())
    bystander.index([HumanMessage("not this one")], thread_id="other", resource_id="someone")
    bystander.close()
    source = [
        "--storage",
        f"sqlite:///{tmp_path / 'servers' / 'messages.sqlite3'}",
        "--vector",
        f"chroma:///{tmp_path / 'servers' / 'chroma'}",
    ]
    argv = [*source, "migrate", "--to-storage", f"sqlite:///{tmp_path / 'target.sqlite3'}"]
    argv += ["--to-vector", "memory://", "--embeddings", "tests.fakes:FakeEmbeddings", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source_messages"] == report["target_messages"] == expected
    assert report["messages_new"] == expected
    assert main(argv) == 0  # a rerun writes nothing new, and says so
    assert json.loads(capsys.readouterr().out)["messages_new"] == 0
    elsewhere = [*source, "migrate", "--to-storage", f"sqlite:///{tmp_path / 'own.sqlite3'}"]
    elsewhere += ["--to-vector", "memory://", "--to-index-name", "own-index"]
    assert main([*elsewhere, "--embeddings", "tests.fakes:FakeEmbeddings", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["index_name"] == "own-index"
    twice = [*argv, "--from-storage", "memory://", "--from-vector", "memory://"]
    assert main(twice) == 2
    assert "the source is given twice" in capsys.readouterr().err


def in_memory(vectors: VectorIndex) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(), vector_store=vectors, embeddings=FakeEmbeddings()
    )


def test_vectors_are_copied_through_export_from_any_backend() -> None:
    """No server: an in-memory source copies its vectors (chunks included) unchanged."""
    source, target = in_memory(InMemoryVectorIndex()), in_memory(InMemoryVectorIndex())
    fill(source)
    name = source.ensure_index().name
    report = migrate(source, target, batch_size=7)
    assert report.vectors_listable
    assert report.vectors_copied == source.vector_store.count(name) > 0
    assert report.vectors_embedded == 0
    assert target.ensure_index().name == name
    copied = {r.id: r for r in target.vector_store.export(name)}
    assert copied == {r.id: r for r in source.vector_store.export(name)}
    assert any("#" in vector_id for vector_id in copied)  # the long message's chunks
    assert results(target) == results(source)


def test_a_source_that_cannot_list_its_vectors_is_embedded_again() -> None:
    """A backend without ``export`` (here a forwarding wrapper) is re-embedded, not lost."""
    source = in_memory(RecordingVectors(InMemoryVectorIndex()))
    target = in_memory(InMemoryVectorIndex())
    fill(source)
    report = migrate(source, target, batch_size=7)
    embeddable = sum(1 for m in messages_of(source) if m[3] in ("user", "assistant"))
    assert not report.vectors_listable
    assert (report.vectors_copied, report.vectors_embedded) == (0, embeddable)
    assert messages_of(target) == messages_of(source)
    assert results(target) == results(source)


def test_migrate_says_its_copied_vectors_are_not_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`migrate` printed "vectors ...: 31 copied, 0 embedded" for 8 messages, where stats
    and ingest count 8 vectors: a long message has several (one per chunk), and "embedded"
    counts messages."""
    monkeypatch.delenv("SEMANTIC_RECALL_PATH", raising=False)
    source = SemanticRecall.local(tmp_path / "embedded", embeddings=FakeEmbeddings())
    fill(source)
    stored = source.storage.count()
    source.close()
    argv = ["--path", str(tmp_path / "embedded"), "migrate", "--to-storage"]
    argv += [f"sqlite:///{tmp_path / 'target.sqlite3'}", "--to-vector", "memory://"]
    assert main([*argv, "--embeddings", "tests.fakes:FakeEmbeddings"]) == 0
    out = capsys.readouterr().out
    assert f"migrated {stored} messages" in out
    assert "vector(s) copied (one per chunk of a message's text)" in out
    assert "0 message(s) embedded again" in out


def test_migrate_refuses_a_target_that_is_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Named again, however it is spelled, the source is refused before anything is written.

    It used to report "migrated 2 messages" having copied the store onto itself.
    """
    store = tmp_path / "store"
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings())
    fill(memory)
    held = memory.storage.count()
    memory.close()
    (tmp_path / "alias").symlink_to(store)
    monkeypatch.chdir(tmp_path)
    spellings = [
        (f"sqlite:///{store / 'messages.sqlite3'}", f"chroma:///{store / 'chroma'}"),
        ("sqlite:///alias/../store/messages.sqlite3", "chroma:///alias/chroma/?max_loaded=4"),
    ]
    for storage, vector in spellings:
        argv = ["--path", str(store), "migrate", "--to-storage", storage, "--to-vector", vector]
        assert main([*argv, "--embeddings", "tests.fakes:FakeEmbeddings"]) == 2
        assert "the target is the source" in capsys.readouterr().err
    # One half kept is a migration of the other (the vectors to a server, say): allowed.
    kept = ["--path", str(store), "migrate", "--to-storage", spellings[0][0]]
    kept += ["--to-vector", "memory://", "--embeddings", "tests.fakes:FakeEmbeddings", "--json"]
    assert main(kept) == 0
    assert json.loads(capsys.readouterr().out)["target_messages"] == held
    engine = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    with pytest.raises(InvalidOptionError, match="the target is the source"):
        migrate(engine, engine)


def test_migrating_into_another_stores_index_is_refused() -> None:
    """On one Chroma server every store of one model shares an index by default: migrate
    wrote into one that held another store's vectors, exit 0, and a forget in either then
    deleted the other's (a stranger's audit). An empty target storage over an index
    holding vectors is refused; a target index of its own (`index_name`) migrates."""
    shared = InMemoryVectorIndex()  # one server
    other = in_memory(shared)  # another store already on it
    fill(other)
    source = in_memory(InMemoryVectorIndex())
    fill(source)
    name = source.ensure_index().name
    before = {r.id for r in shared.export(name)}
    target = in_memory(shared)
    with pytest.raises(InvalidOptionError, match="another store's index"):
        migrate(source, target, batch_size=7)
    assert target.storage.count() == 0
    assert {r.id for r in shared.export(name)} == before
    own = SemanticRecall(
        storage=target.storage,
        vector_store=shared,
        embeddings=target.embeddings,
        index_name="target-own",
    )
    report = migrate(source, own, batch_size=7)
    assert report.index_name == "target-own"
    assert report.vectors_copied == source.vector_store.count(name)
    assert {r.id for r in shared.export(name)} == before  # the other store's, untouched


def test_a_migration_that_keeps_the_source_index_in_place_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moving only the messages (SQLite to another store) and keeping the vector index
    is fine (docs/cli.md): the refusal of another store's index refused it too."""
    shared = InMemoryVectorIndex()
    source = in_memory(shared)
    fill(source)
    report = migrate(source, in_memory(shared), batch_size=7)  # one index object, one name
    assert report.target_messages == report.source_messages > 0
    monkeypatch.delenv("SEMANTIC_RECALL_PATH", raising=False)
    store = SemanticRecall.local(tmp_path / "store", embeddings=FakeEmbeddings())
    fill(store)
    store.close()
    argv = ["--path", str(tmp_path / "store"), "migrate"]
    argv += ["--to-storage", f"sqlite:///{tmp_path / 'moved.sqlite3'}"]
    argv += ["--to-vector", f"chroma:///{tmp_path / 'store' / 'chroma'}"]  # kept in place
    assert main([*argv, "--embeddings", "tests.fakes:FakeEmbeddings", "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert moved["target_messages"] == moved["source_messages"] > 0


def dated(text: str, message_id: str, days: int) -> HumanMessage:
    when = (START + timedelta(days=days)).isoformat()
    return HumanMessage(text, id=message_id, additional_kwargs={"created_at": when})


def retained() -> SemanticRecall:
    """A source whose retention emptied one thread and left gaps in the seqs of two."""
    source = in_memory(InMemoryVectorIndex())
    for thread, resource, days in (
        ("emptied", "alice", (0,)),
        ("thinned", "alice", (0, 0, 9, 9)),  # seqs 2, 3 remain
        ("gapped", "bob", (9, 0, 9, 0, 9)),  # seqs 0, 2, 4 remain
    ):
        messages = [dated(f"{thread} {n}", f"{thread}-{n}", d) for n, d in enumerate(days)]
        assert source.index(messages, thread_id=thread, resource_id=resource).error is None
    source.forget_before(START + timedelta(days=1))
    return source


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_threads_emptied_or_thinned_by_retention_keep_owner_and_numbers(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """docs/retention.md: an emptied thread stays owned, and nothing is renumbered."""
    source = retained()
    url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 'm.sqlite3'}"}.get(kind)
    target = SemanticRecall.from_url(
        storage=url or request.getfixturevalue("pg_url"),
        vector="memory://",
        embeddings=FakeEmbeddings(),
    )
    report = migrate(source, target, batch_size=2)  # runs cut across pages and gaps
    assert (report.empty_threads, report.kept_numbering) == (1, True)
    assert messages_of(target) == messages_of(source)  # seqs with their gaps
    assert target.storage.list_threads() == source.storage.list_threads()  # next seqs too
    assert [t.next_seq for t in target.storage.list_threads()] == [1, 5, 4]
    with pytest.raises(OwnershipError):  # bob cannot take alice's emptied thread
        target.index([HumanMessage("mine now")], thread_id="emptied", resource_id="bob")
    for memory in (source, target):  # numbering goes on as in the source
        memory.index([dated("later", "thinned-4", 20)], thread_id="thinned", resource_id="alice")
    assert messages_of(target) == messages_of(source)
    assert migrate(source, target, batch_size=3).messages_new == 0  # a rerun adds nothing
    assert messages_of(target) == messages_of(source)


def test_a_target_that_cannot_reserve_threads_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """A storage without `_reserve_threads` still gets every message, with a warning."""

    class Plain(InMemoryStorage):
        def _reserve_threads(self, places: list[ThreadPlace]) -> int:
            raise NotImplementedError("Plain cannot reserve threads")

    target = SemanticRecall(
        storage=Plain(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    source = retained()
    with caplog.at_level(logging.WARNING, "langchain_semantic_recall.cli.migrate"):
        report = migrate(source, target, batch_size=2)
    assert (report.empty_threads, report.kept_numbering) == (0, False)
    assert "threads emptied by retention are not copied" in caplog.text
    assert [m[0] for m in messages_of(target)] == [m[0] for m in messages_of(source)]
    assert [t.thread_id for t in target.storage.list_threads()] == ["gapped", "thinned"]


@pytest.mark.parametrize("conflict", ["owner", "retired"])
def test_a_refused_migration_leaves_the_target_as_it_was(
    conflict: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The threads were reserved by batches: a conflict on a later thread left the earlier
    ones in the target, empty and owned (a claim on those ids there)."""
    source = in_memory(InMemoryVectorIndex())
    for n in range(5):
        source.index([HumanMessage(f"note {n}")], thread_id=f"s{n}", resource_id="alice")
    url = f"sqlite:///{tmp_path / 'target.sqlite3'}"
    target = SemanticRecall.from_url(storage=url, vector="memory://", embeddings=FakeEmbeddings())
    if conflict == "owner":
        target.index([HumanMessage("mine")], thread_id="s4", resource_id="bob")
    else:
        target.storage.delete_thread("s4")  # retired in the target
    before = target.storage.list_threads()
    error = OwnershipError if conflict == "owner" else ForgottenThreadError
    with pytest.raises(error, match="nothing was copied"):
        migrate(source, target, batch_size=2)
    assert target.storage.list_threads() == before
    assert target.storage.count() == len(before)
