"""A bulk import into ``SemanticRecall.local`` killed with SIGKILL, again and again.

A real child process imports a generated history (messages without ids, with their own
dates, so the ids are deterministic) into the embedded default store: a SQLite file and a
persistent embedded Chroma. The parent kills it with SIGKILL several times, each time at
another point: while a turn is being embedded (stored, no vectors yet), just after the
vectors of a turn were written, and at arbitrary moments of the writes. Each new child
starts the whole import again, as a person re-running an interrupted import would.

Then: the SQLite file opens and passes ``PRAGMA integrity_check``; every turn a child
reported as done is stored, each message exactly as written and never twice; ``stats``
shows the vectors the last kill left missing; one ``reindex(missing_only=True)`` repairs
them; and running the whole import again adds nothing.

The kill points are chosen by the child telling the parent where it is (a line on stdout)
and, for the precise ones, blocking on stdin until it is killed: no sleeps.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.messages import build_records
from langchain_semantic_recall.records import VectorRecord
from langchain_semantic_recall.settings import local_backends
from langchain_semantic_recall.storage import ScopeFilter
from tests.fakes import FakeEmbeddings, RecordingVectors

ROOT = Path(__file__).resolve().parents[2]
TURNS = 24
START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
TOPICS = ["lisbon trip", "peanut allergy", "python release", "garden tomatoes", "sister visit"]
WATCHDOG_S = 90.0
"""A child that neither reports nor dies within this is killed and the test fails."""


# --- the import (shared by the child and the parent's expectations) --------------------


def conversation(k: int) -> tuple[str, str, list[BaseMessage]]:
    """Turn ``k`` of the import: its thread, resource and messages (no ids, own dates)."""
    resource = f"user-{k % 3}"
    thread = f"{resource}/chat-{k % 2}"
    topic = TOPICS[k % len(TOPICS)]
    size = 30 if k % 5 == 4 else 4  # a few large turns: larger batches, longer writes
    messages: list[BaseMessage] = []
    if k % 4 == 0:
        messages.append(SystemMessage(f"turn{k} system note"))
    for n in range(size):
        cls = HumanMessage if n % 2 == 0 else AIMessage
        messages.append(cls(f"turn{k} message {n} about {topic} " + "detail " * (n % 7)))
    for position, message in enumerate(messages):
        when = START + timedelta(minutes=k, seconds=position)
        message.additional_kwargs["created_at"] = when.isoformat()
    return thread, resource, messages


def imported(turns: Iterable[int]) -> dict[str, BaseMessage]:
    """Message id -> the message, for the given turns (ids as ``index`` derives them)."""
    expected: dict[str, BaseMessage] = {}
    for k in turns:
        thread, resource, messages = conversation(k)
        now = datetime.now(UTC)  # unused: every message carries its own date
        for record in build_records(messages, thread_id=thread, resource_id=resource, now=now):
            expected[record.id] = record.to_message()
    return expected


# --- the child ------------------------------------------------------------------------


def say(line: str) -> None:
    print(line, flush=True)


def wait_for_the_kill() -> None:
    """Block until the parent kills this process (it never writes to our stdin)."""
    sys.stdin.readline()
    raise SystemExit("the parent closed stdin instead of killing the child")


class PausingEmbeddings(FakeEmbeddings):
    """Embeds as the fake does; on turn ``pause`` it reports and waits to be killed."""

    def __init__(self, pause: int | None) -> None:
        super().__init__()
        self.pause = pause

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.pause is not None and any(t.startswith(f"turn{self.pause} ") for t in texts):
            say(f"embedding {self.pause}")
            wait_for_the_kill()
        return super().embed_documents(texts)


class PausingVectors(RecordingVectors):
    """Writes as the wrapped index does; after turn ``pause`` is written it waits."""

    def __init__(self, inner: Any, pause: int) -> None:
        super().__init__(inner)
        self.pause = pause

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        super()._upsert(name, records)
        if any(r.content.startswith(f"turn{self.pause} ") for r in records):
            say(f"upserted {self.pause}")
            wait_for_the_kill()


class PausingDeletes(RecordingVectors):
    """Deletes as the wrapped index does, but first reports and waits to be killed."""

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        say(f"deleting vectors of {thread_id}")
        wait_for_the_kill()


def child_main(path: str, mode: str, pause: int) -> None:
    """Import every turn into ``SemanticRecall.local(path)``, pausing as ``mode`` says.

    ``forget``: forget the thread of turn ``pause`` instead, killed once its messages are
    deleted and before its vectors are.
    """
    backends = local_backends(path, PausingEmbeddings(pause if mode == "embedding" else None))
    if mode == "upserted":
        backends["vector_store"] = PausingVectors(backends["vector_store"], pause)
    if mode == "forget":
        backends["vector_store"] = PausingDeletes(backends["vector_store"])
    memory = SemanticRecall(**backends)
    say("ready")
    if mode == "forget":
        thread, resource, _ = conversation(pause)
        memory.forget_thread(thread, resource_id=resource)
        raise SystemExit("the forget returned before its vectors were deleted")
    for k in range(TURNS):
        thread, resource, messages = conversation(k)
        say(f"turn {k}")
        memory.index(messages, thread_id=thread, resource_id=resource)
        say(f"done {k}")
    say("finished")


# --- the parent -----------------------------------------------------------------------


class Child:
    """One child import process and the lines it reported."""

    def __init__(self, store: Path, mode: str, pause: int, log: Path) -> None:
        code = "import sys; from tests.integration.test_sigkill import child_main; " + (
            "child_main(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ANONYMIZED_TELEMETRY": "False"}
        self.log = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(store), mode, str(pause)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.watchdog = threading.Timer(WATCHDOG_S, self.process.kill)
        self.watchdog.start()
        self.done: set[int] = set()

    def lines(self) -> Iterator[str]:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.strip()
            if line.startswith("done "):
                self.done.add(int(line.split()[1]))
            yield line
        raise AssertionError(f"the child ended on its own:\n{self.stderr()}")

    def kill_on(self, wanted: str) -> None:
        """Read reports until ``wanted``, then SIGKILL the child there."""
        for line in self.lines():
            if line == wanted:
                break
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait() == -signal.SIGKILL
        self.close()

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def close(self) -> None:
        self.watchdog.cancel()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.log.close()


# Where each run is killed: (how the child pauses, on which turn, the report to kill on).
KILLS = [
    ("embedding", 3, "embedding 3"),  # turn 3 stored, its vectors never written
    ("free", 0, "turn 6"),  # somewhere inside turn 6: storage, embedding or vectors
    ("upserted", 9, "upserted 9"),  # turn 9's vectors written, index() not returned
    ("free", 0, "turn 14"),  # inside a large turn (30 messages)
    ("embedding", 17, "embedding 17"),  # the last kill leaves turn 17 without vectors
]


def test_sigkill_during_bulk_import_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    store = tmp_path / "memory"
    reported: set[int] = set()
    for run, (mode, pause, wanted) in enumerate(KILLS):
        child = Child(store, mode, pause, tmp_path / f"child-{run}.log")
        child.kill_on(wanted)
        reported |= child.done

    database = store / "messages.sqlite3"
    with sqlite3.connect(database) as raw:  # opens, recovers its WAL, and is whole
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()

    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings(), search_mode="dense")
    try:
        check_after_the_kills(memory, reported)
    finally:
        memory.storage.close()
        memory.vector_store.close()


def check_after_the_kills(memory: SemanticRecall, reported: set[int]) -> None:
    everything = imported(range(TURNS))
    stored = {m.id: m for m in memory.storage.list_messages(limit=10_000)}
    assert reported >= set(range(17)), "the kills were not where the test expects"
    # Every turn a child reported done is there, each message exactly as written.
    must = imported(sorted(reported))
    assert set(must) <= set(stored), "a message of a finished turn was lost"
    # Nothing unknown, nothing twice, nothing changed; turns in flight are whole or absent.
    assert set(stored) <= set(everything)
    for message_id, message in stored.items():
        original = everything[message_id]
        assert message.to_message().content == original.content
        assert type(message.to_message()) is type(original)
    for k in range(TURNS):
        ids = set(imported([k]))
        assert ids <= set(stored) or not ids & set(stored), f"turn {k} half stored"

    stats = memory.stats()
    assert stats.messages == len(stored)
    assert stats.orphan_vectors == 0
    assert stats.missing_vectors > 0, "the last kill left turn 17 without vectors"
    missing = stats.missing_vectors
    assert memory.reindex(missing_only=True) == missing  # one call repairs
    assert memory.stats().missing_vectors == 0

    for k in range(TURNS):  # the whole import again: only what never arrived is added
        thread, resource, messages = conversation(k)
        memory.index(messages, thread_id=thread, resource_id=resource)
    final = memory.storage.list_messages(limit=10_000)
    assert sorted(m.id for m in final) == sorted(everything)  # no duplicates
    assert memory.stats().missing_vectors == 0
    name = memory.ensure_index().name
    embeddable = {i for i, m in everything.items() if not isinstance(m, SystemMessage)}
    assert memory.vector_store.message_ids(name) == embeddable
    for thread in {m.thread_id for m in final}:
        in_thread = memory.storage.list_messages(ScopeFilter(thread_id=thread), limit=10_000)
        seqs = [m.seq for m in in_thread]
        assert len(seqs) == len(set(seqs)), "a sequence number was reused"
        assert memory.search("lisbon trip", thread_id="new", resource_id=in_thread[0].resource_id)


def test_sigkill_inside_a_forget_leaves_no_message_and_a_retired_thread(tmp_path: Path) -> None:
    """Killed between a forget's storage delete and its vector delete.

    The messages are gone and the thread retired (SQLite committed both); the vectors
    left behind are counted as orphans, never returned by a search; calling the forget
    again, as docs/data-handling.md says, deletes them.
    """
    store = tmp_path / "memory"
    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings(), search_mode="dense")
    for k in range(6):
        thread, resource, messages = conversation(k)
        memory.index(messages, thread_id=thread, resource_id=resource)
    memory.close()
    thread, resource, messages = conversation(0)  # user-0/chat-0 (turn 0 alone of the six)
    child = Child(store, "forget", 0, tmp_path / "child-forget.log")
    child.kill_on(f"deleting vectors of {thread}")

    memory = SemanticRecall.local(store, embeddings=FakeEmbeddings(), search_mode="dense")
    try:
        assert memory.storage.list_messages(ScopeFilter(thread_id=thread)) == []
        stats = memory.stats(resource_id=resource)
        assert stats.orphan_vectors > 0, "the kill was before the storage delete"
        text = str(messages[-1].content)
        for hit in memory.search(text, resource_id=resource):
            assert hit.message.thread_id != thread
        late = memory.index(messages, thread_id=thread, resource_id=resource)
        assert late.forgotten, "the thread was not retired"
        assert memory.forget_thread(thread, resource_id=resource) == 0  # again: nothing left
        after = memory.stats(resource_id=resource)
        assert (after.orphan_vectors, after.missing_vectors) == (0, 0)
    finally:
        memory.close()
