"""Two engines on one embedded store: what one forgets, the other reads as gone.

An app keeps `SemanticRecall.local(path)` open while `semantic-recall forget` (another
process, another engine) deletes a resource: the forget drops the resource's Chroma
collection, which the app's engine had cached. Reads through the stale handle raised
chromadb's own `NotFoundError` ("Collection [...] does not exist.") from `stats`,
`message_ids`, `export` and a thread-scoped search, until the app restarted. They must
read the resource as it now is: gone, or written anew in another collection. The two
engines here share one process (chromadb shares its system per path); the same holds
with the command line in another process (checked by hand with `semantic-recall forget`
while an app searched and counted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.storage import ScopeFilter
from tests.fakes import FakeEmbeddings
from tests.unit import test_cli as unit
from tests.unit.test_cli import Cli
from tests.unit.test_importers import sample_export

ALICE = ScopeFilter(resource_id="alice")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[SemanticRecall, SemanticRecall]]:
    app = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings(64), search_mode="dense")
    other = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings(64), search_mode="dense")
    yield app, other
    app.close()
    other.close()


def test_a_resource_forgotten_by_another_engine_reads_as_gone(
    engines: tuple[SemanticRecall, SemanticRecall],
) -> None:
    app, other = engines
    app.index(
        [HumanMessage("we fly to lisbon in may"), AIMessage("lisbon in may, noted")],
        thread_id="t1",
        resource_id="alice",
    )
    app.index([HumanMessage("bob likes lisbon too")], thread_id="b1", resource_id="bob")
    assert app.search("lisbon", thread_id="t1", resource_id="alice", scope="thread")
    assert app.stats(resource_id="alice").vectors == 2  # the app caches alice's collection

    assert other.forget_resource("alice") == 2

    name = app.ensure_index().name
    stats = app.stats(resource_id="alice")
    assert (stats.messages, stats.vectors, stats.missing_vectors, stats.orphan_vectors) == (
        0,
        0,
        0,
        0,
    )
    assert app.search("lisbon", thread_id="t1", resource_id="alice", scope="thread") == []
    assert app.vector_store.message_ids(name, ALICE) == set()
    assert list(app.vector_store.export(name, ALICE)) == []
    assert app.stats().vectors == 1  # bob's

    other.index([HumanMessage("alice moved to porto")], thread_id="t2", resource_id="alice")
    assert app.stats(resource_id="alice").vectors == 1  # the new collection, not the old
    assert len(app.vector_store.message_ids(name, ALICE)) == 1
    hits = app.search("porto", thread_id="t2", resource_id="alice", scope="thread")
    assert [h.message.text for h in hits] == ["alice moved to porto"]


# --- the command line while an app holds the store open ---------------------------------

cli = unit.cli
embedder = unit.embedder
plain_terminal = unit.plain_terminal

SHARED_NOTE = "is open in another process"


@pytest.fixture
def export_file(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(sample_export()), encoding="utf-8")
    return path


def test_vector_writing_commands_say_a_running_app_will_not_see_their_vectors(
    cli: Cli, export_file: Path
) -> None:
    """`ingest`, `reindex`, `move` on a store an app holds open: the app's searches miss
    what they write (embedded Chroma; docs/data-handling.md), so each says so on stderr.
    """
    assert cli("ingest", str(export_file), "--resource", "alice").code == 0
    app = cli.engine()  # the app: its SQLite connection holds the file open
    try:
        assert app.search("Lisbon", resource_id="alice") is not None
        ingest = cli("ingest", str(export_file), "--resource", "alice")
        reindex = cli("reindex", "--missing-only")
        move = cli("move", "--thread", "conv-trip", "--to", "bob")
        reading = [cli("stats"), cli("threads"), cli("forget", "--thread", "conv-garden", "--yes")]
    finally:
        app.close()
    for result in (ingest, reindex, move):
        assert result.code == 0, result.err
        assert SHARED_NOTE in result.err
        assert "restart" in result.err
    for result in reading:  # reading and forgetting are safe: no note
        assert SHARED_NOTE not in result.err
    alone = cli("reindex", "--missing-only")  # the app closed: nothing to say
    assert alone.code == 0
    assert SHARED_NOTE not in alone.err


# --- a forget in another process, of vectors this process has loaded ---------------------

FORGET_IN_A_CHILD = """
import sys
from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings
memory = SemanticRecall.local(sys.argv[1], embeddings=FakeEmbeddings(64))
print(memory.forget_thread(sys.argv[2], resource_id=sys.argv[3]))
memory.close()
"""


def test_vectors_another_process_deleted_are_not_hits(tmp_path: Path) -> None:
    """`semantic-recall forget --thread` while the app runs: the app's loaded index still
    holds the deleted vectors (embedded Chroma reads another process's writes only when it
    loads an index), and Chroma returns them with no metadata. A query that reads the
    hits' metadata (resource scope through `query`, and the wide first query of a
    thread-scoped or filtered search in a resource of over 5,000 vectors) raised
    `AttributeError` ('NoneType' object has no attribute 'get'), which recall raises as a
    bug: such a user's thread-scoped recall failed on every turn until the app restarted
    (checked by hand with 5,100 vectors: `search(scope="thread")` and a thread-scope
    engine's `recall`). They are gone: no hit.
    """
    app = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings(64), search_mode="dense")
    try:
        for thread in ("t1", "t2"):
            app.index(
                [HumanMessage(f"{thread} we fly to lisbon in may"), AIMessage(f"{thread} noted")],
                thread_id=thread,
                resource_id="alice",
            )
        name = app.ensure_index().name
        vector = app.embeddings.embed_query("lisbon in may")
        assert len(app.vector_store.query(name, vector, k=10, scope=ALICE)) == 4  # loaded
        child = subprocess.run(
            [sys.executable, "-c", FORGET_IN_A_CHILD, str(tmp_path), "t1", "alice"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "ANONYMIZED_TELEMETRY": "False"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == "2"
        hits = app.vector_store.query(name, vector, k=10, scope=ALICE)
        assert {h.thread_id for h in hits} == {"t2"}
        question = HumanMessage("when do we fly to lisbon?")
        recalled = app.recall([question], thread_id="t3", resource_id="alice")
        assert "t1 we fly" not in str([m.content for m in recalled])
    finally:
        app.close()
