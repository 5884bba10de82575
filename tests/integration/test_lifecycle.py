"""Closing an engine on embedded Chroma: a client it opened is closed, a passed one is not."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import IndexNode, RecallNode, SemanticRecall, StorageError
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors import ChromaVectorIndex
from tests.fakes import FakeEmbeddings
from tests.unit.test_lifecycle import TURN


def test_local_closes_its_chroma_client_and_sqlite(tmp_path: Path) -> None:
    memory = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings())
    memory.index(TURN, thread_id="t1", resource_id="alice")
    client = memory.vector_store.client
    with memory:
        assert memory.search("peanuts", resource_id="alice")
    assert client._closed  # chromadb's own flag: its system is released
    with pytest.raises(StorageError):
        memory.storage.count(ScopeFilter(resource_id="alice"))
    with SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()) as reopened:
        assert reopened.search("peanuts", resource_id="alice")  # nothing was lost


def test_a_chroma_client_passed_in_stays_open(tmp_path: Path) -> None:
    import chromadb

    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    index = ChromaVectorIndex(client)
    index.close()
    assert not client._closed
    client.close()


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_engines_built_and_closed_in_a_loop_leave_no_thread_or_file(tmp_path: Path) -> None:
    """A notebook re-running its cell, a test suite: each engine's threads and files go.

    Measured (30 more engines after 5 to warm up, each indexing and searching): threads
    and open files stay where they were; resident memory settles (+3 MB over 200 engines,
    chromadb's per-path system and the model's caches are shared).
    """

    def one(n: int) -> None:
        with SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()) as memory:
            memory.index(TURN, thread_id=f"t{n}", resource_id=f"user{n % 3}")
            assert memory.search("peanuts", resource_id=f"user{n % 3}")

    import gc

    for n in range(5):
        one(n)
    # An engine an earlier test of this process dropped unclosed releases its client when
    # collected: collect first, or that release lands in the loop (175 files after, 185
    # before, on a fresh clone's run).
    gc.collect()
    threads, files = threading.active_count(), _open_files()
    for n in range(5, 35):
        one(n)
    gc.collect()
    assert threading.active_count() == threads, [t.name for t in threading.enumerate()]
    assert _open_files() == files


def test_engines_dropped_unclosed_release_their_chroma_once_collected(tmp_path: Path) -> None:
    """An engine per request that is never closed, only dropped: once collected, its
    embedded Chroma client is closed too. A read-only engine opens Chroma on a private
    copy, and an engine per tenant on a folder of its own: each is a Chroma client of its
    own, with its threads and open files.

    Before: each such engine dropped kept its Chroma client for the process's life (~8
    threads and ~12 open files each; 10 read-only engines: +76 threads, +125 files).
    """
    import gc

    def threads_and_files() -> tuple[int, int]:
        gc.collect()
        return len(os.listdir("/proc/self/task")), _open_files()

    with SemanticRecall.local(tmp_path / "store", embeddings=FakeEmbeddings()) as memory:
        memory.index(TURN, thread_id="t1", resource_id="alice")

    def dropped(folder: Path, **options: bool) -> None:
        memory = SemanticRecall.local(folder, embeddings=FakeEmbeddings(), **options)
        assert memory.search("peanuts", resource_id="alice") or folder.name != "store"

    dropped(tmp_path / "store", read_only=True)  # the imports, and Chroma's first threads
    before = threads_and_files()
    for n in range(4):
        dropped(tmp_path / "store", read_only=True)
        dropped(tmp_path / f"tenant{n}")
    assert threads_and_files() == before


def test_engines_opened_and_closed_at_once_on_one_folder_all_work(tmp_path: Path) -> None:
    """One engine per request, requests on several threads: engines on one folder open
    and close at the same moments. Nothing fails and nothing is lost.

    chromadb shares one `System` per folder in a process; a client's open (create the
    system, count a reference) and another's close (the last reference: stop it) are not
    atomic together. Before: most such engines failed to open, `StorageError` "cannot
    open the Chroma index ... (AttributeError: 'RustBindingsAPI' object has no attribute
    'bindings')" or a `KeyError` of the folder, and called the index damaged (measured:
    128 of 150 engines, 6 threads).
    """
    SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()).close()
    failures: list[BaseException] = []

    def requests(worker: int) -> None:
        for n in range(8):
            try:
                with SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()) as memory:
                    done = memory.index(TURN, thread_id=f"w{worker}-{n}", resource_id="alice")
                    assert done.error is None, done.error
            except BaseException as failure:  # reported below, every one
                failures.append(failure)

    workers = [threading.Thread(target=requests, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert failures == []
    with SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()) as memory:
        stats = memory.stats(resource_id="alice")
        assert (stats.messages, stats.vectors) == (2 * 4 * 8, 2 * 4 * 8)


def test_a_folder_that_failed_to_open_opens_in_the_same_process_once_repaired(
    tmp_path: Path,
) -> None:
    """A failed start stayed in chromadb's cache: every later open failed until a restart.

    Before: once the damaged file was moved aside (as the error advises), the next open
    still failed, with "'RustBindingsAPI' object has no attribute 'bindings'".
    """
    chroma = tmp_path / "chroma"
    chroma.mkdir()
    (chroma / "chroma.sqlite3").write_bytes(b"not a database " * 500)
    with pytest.raises(StorageError, match="not a database"):
        SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings())
    (chroma / "chroma.sqlite3").rename(tmp_path / "damaged.sqlite3")
    with SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings()) as memory:
        assert memory.index(TURN, thread_id="t1", resource_id="alice").error is None
        assert memory.search("peanuts", resource_id="alice")


def test_an_engine_used_in_a_forked_process_raises_and_the_parent_keeps_it(
    tmp_path: Path,
) -> None:
    """A worker forked after the engine was opened (`gunicorn --preload`): clear errors.

    Before: the child's first call hung for good (embedded Chroma's threads are not
    forked), and a close there would have closed the parent's connections.
    """
    import asyncio
    import json
    import select

    memory = SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings())
    memory.index(TURN, thread_id="t1", resource_id="alice")
    retriever = memory.as_retriever(resource_id="alice")  # built here: no import after fork
    recall, index = RecallNode(memory), IndexNode(memory)
    state = {"messages": [*TURN, HumanMessage("What am I allergic to?")], "recalled_memory": None}
    run = {"configurable": {"thread_id": "t1", "resource_id": "alice"}}
    calls = {
        "search": lambda: memory.search("peanuts", resource_id="alice"),
        "asearch": lambda: asyncio.run(memory.asearch("peanuts", resource_id="alice")),
        "index": lambda: memory.index(TURN, thread_id="t2", resource_id="alice"),
        "retriever": lambda: retriever.invoke("peanuts"),
        "with": memory.__enter__,
        "recall node": lambda: recall.invoke(state, run),
        "index node": lambda: index.invoke(state, run),
    }
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what each call raised, then close (a no-op here)
        seen = {}
        for name, call in calls.items():
            try:
                call()
                seen[name] = "returned"
            except BaseException as error:
                seen[name] = type(error).__name__
        try:
            memory.close()
            seen["close"] = "returned"
        except BaseException as error:
            seen["close"] = type(error).__name__
        os.write(write, json.dumps(seen).encode())
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)  # its answer, or the end as it exits
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    with os.fdopen(read) as reader:
        seen = json.loads(reader.read())
    os.waitpid(pid, 0)
    assert seen == {**dict.fromkeys(calls, "ForkedEngineError"), "close": "returned"}
    with memory:  # the parent's engine was not closed by the child
        assert memory.index(TURN, thread_id="t3", resource_id="alice").error is None
        assert memory.search("peanuts", resource_id="alice")


def test_a_folder_another_client_holds_with_other_settings_fails_at_once_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own `chromadb.PersistentClient(path)` on the folder (other settings).

    Before: chromadb's "already exists ... with different settings" read as another
    process creating the folder: opened again after 1.5 s of pauses, then the error
    advised restoring a damaged index from a backup.
    """
    import chromadb

    from langchain_semantic_recall.vectors import chroma_clients

    pauses: list[float] = []
    monkeypatch.setattr(chroma_clients.time, "sleep", pauses.append)
    from chromadb.config import Settings

    # Settings unlike ours whatever the environment (ANONYMIZED_TELEMETRY=False made
    # chromadb's defaults equal to ours: it then shares one system, and nothing fails).
    own = chromadb.PersistentClient(
        path=str(tmp_path / "chroma"), settings=Settings(allow_reset=True)
    )
    try:
        with pytest.raises(StorageError, match="opened the folder with other settings") as err:
            SemanticRecall.local(tmp_path, embeddings=FakeEmbeddings())
        assert "backup" not in str(err.value)
        assert pauses == []
    finally:
        own.close()


_FORKED_AFTER_OPEN = """
import faulthandler, gc, glob, json, os, sys, weakref
from langchain_semantic_recall import SemanticRecall, StorageError
from tests.fakes import FakeEmbeddings
from tests.unit.test_lifecycle import TURN

store, other, read_only = sys.argv[1], sys.argv[2], sys.argv[3] == "read-only"
engines = [SemanticRecall.local(store, embeddings=FakeEmbeddings(), read_only=read_only)]
assert engines[0].search("peanuts", resource_id="alice")
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # a worker that drops the engine it inherited, ends, and opens one of its own
    faulthandler.dump_traceback_later(30, exit=True)  # a hang: its stacks, and no answer
    engines.clear()
    gc.collect()
    weakref.finalize._exitfunc()  # what its exit runs (os._exit: chromadb's teardown hangs)
    try:
        SemanticRecall.local(other, embeddings=FakeEmbeddings())
        opened = "opened"
    except StorageError as error:
        opened = str(error)
    os.write(write, json.dumps(opened).encode())
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
with os.fdopen(read) as reader:
    opened = json.loads(reader.read() or '"hung"')
copies = len(glob.glob(os.path.join(os.environ["TMPDIR"], "semantic-recall-read-only-*")))
found = len(engines[0].search("peanuts", resource_id="alice"))
wrote = None if read_only else engines[0].index(TURN, thread_id="t2", resource_id="alice").error
engines[0].close()
print(json.dumps({"child": opened, "copies": copies, "found": found, "wrote": wrote}))
"""


@pytest.mark.parametrize("mode", ["writable", "read-only"])
def test_a_fork_leaves_its_parents_engine_alone_and_refuses_embedded_chroma(
    tmp_path: Path, mode: str
) -> None:
    """A fork of a process that had opened embedded Chroma (`multiprocessing` with fork).

    Before: collecting the inherited engine hung the fork (a closing thread that never
    started), a read-only engine's cleanup at the fork's exit deleted the parent's copy
    (its next search failed in chromadb), and the fork's own new store hung in
    chromadb's first call (its runtime does not survive a fork).
    """
    import json

    from tests.processes import run_python

    store, scratch = tmp_path / "store", tmp_path / "tmp"
    scratch.mkdir()
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
        memory.index(TURN, thread_id="t1", resource_id="alice")
    argv = [str(store), str(tmp_path / "other"), mode]
    out = run_python("-c", _FORKED_AFTER_OPEN, *argv, env={"TMPDIR": str(scratch)})
    seen = json.loads(out.splitlines()[-1])
    assert "was forked from process" in seen["child"], seen
    assert seen["copies"] == (1 if mode == "read-only" else 0)  # the child left it
    assert seen["found"] >= 1
    assert seen["wrote"] is None
    assert list(scratch.glob("semantic-recall-read-only-*")) == []  # removed by the parent


_FORKED_AFTER_CHROMA = """
import faulthandler, os, sys, threading
import chromadb
from chromadb.config import Settings
from langchain_semantic_recall import StorageError
from langchain_semantic_recall.vectors import ChromaVectorIndex, chroma_clients

client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
ChromaVectorIndex(client).client.get_or_create_collection("notes").add(
    ids=["a"], embeddings=[[0.1, 0.2]]
)
if sys.argv[2] == "while another thread opens one":  # it holds SYSTEMS at the fork
    held, done = threading.Event(), threading.Event()
    def opening():
        with chroma_clients.SYSTEMS:
            held.set()
            done.wait()
    threading.Thread(target=opening, daemon=True).start()
    held.wait()
pid = os.fork()
if pid == 0:
    faulthandler.dump_traceback_later(30, exit=True)
    try:
        ChromaVectorIndex.persistent(sys.argv[1])
        os._exit(1)
    except StorageError:
        os._exit(7)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.parametrize("when", ["after a wrapped client", "while another thread opens one"])
def test_a_fork_is_refused_after_any_embedded_chroma(tmp_path: Path, when: str) -> None:
    """Embedded Chroma the parent ran through `ChromaVectorIndex(client)` (or `ephemeral`).

    Before: only `persistent` opens were recorded, so such a fork was not refused, and
    hung in its first bulk chromadb call (review: 5 of 5 runs, 3,000 vectors); and the
    refusal came after taking the lock of opens, which a fork may copy held: it hung.
    """
    from tests.processes import run_python

    out = run_python("-c", _FORKED_AFTER_CHROMA, str(tmp_path / "chroma"), when)
    assert out.split() == ["7"], out
