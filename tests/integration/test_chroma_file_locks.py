"""Reading Chroma's file from Python leaves chromadb's locks alone (`vectors.chroma_sqlite`).

An app process writes embedded Chroma while it reads Chroma's own file (what the
snapshots' checks do), and a second process writes another resource of the same store
(a `forget` from the command line, say). When Python's SQLite took and dropped locks on
the file, it changed the locks chromadb's SQLite held in the same process: both writers
hung in chromadb's busy wait, every run.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from langchain_semantic_recall.vectors.chroma_sqlite import read_chroma_file

WRITER = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path

    import chromadb
    import numpy as np
    from chromadb.config import Settings

    from langchain_semantic_recall.vectors.chroma_sqlite import read_chroma_file

    folder, name, seconds, reads = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    client = chromadb.PersistentClient(folder, settings=Settings(anonymized_telemetry=False))
    collection = client.get_or_create_collection(name)
    print("ready", flush=True)
    sys.stdin.readline()  # both processes start writing together
    stop = time.monotonic() + seconds
    done = {"read": 0}

    def count(cursor):
        return cursor.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    def reader():
        while time.monotonic() < stop:
            if read_chroma_file(Path(folder) / "chroma.sqlite3", count) is not None:
                done["read"] += 1

    thread = threading.Thread(target=reader)
    if reads == "1":
        thread.start()
    rng = np.random.default_rng(len(name))
    written = 0
    while time.monotonic() < stop:
        vectors = rng.standard_normal((2, 8)).astype(np.float32)
        collection.upsert(ids=[f"{written}-a", f"{written}-b"], embeddings=vectors)
        written += 2
    if reads == "1":
        thread.join()
    print(json.dumps({"written": written, "read": done["read"]}), flush=True)
    """
)


def _writer(folder: Path, name: str, *, reads: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder), name, "4", "1" if reads else "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(180)
def test_a_process_reading_chromas_file_never_stalls_another_processes_writes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "chroma"
    app = _writer(folder, "app-resource", reads=True)
    processes = [app]
    results = {}
    try:
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "ready"
        other = _writer(folder, "other-resource", reads=False)  # once the folder exists
        processes.append(other)
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "ready"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for name, process in zip(("app", "other"), processes, strict=True):
            out, _ = process.communicate(timeout=60)  # each writes for 4 s
            assert process.returncode == 0, f"{name} failed"
            results[name] = json.loads(out.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        pytest.fail("a writer stalled: the lock state of Chroma's file was changed under it")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert results["app"]["read"] > 0  # the app did read the file while both wrote
    with sqlite3.connect(folder / "chroma.sqlite3") as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = connection.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    assert rows == results["app"]["written"] + results["other"]["written"]


def test_a_read_waits_out_a_write_in_progress_and_gives_up_on_one_that_stays(
    tmp_path: Path,
) -> None:
    """A journal beside the file is a write under way: the read is not made over it."""
    path = tmp_path / "chroma.sqlite3"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE embeddings (id INTEGER)")
        connection.execute("INSERT INTO embeddings VALUES (1)")
    connection.close()

    def count(cursor: sqlite3.Cursor) -> int:
        return int(cursor.execute("SELECT count(*) FROM embeddings").fetchone()[0])

    assert read_chroma_file(path, count) == 1
    journal = Path(f"{path}-journal")
    journal.write_bytes(b"\x00" * 512)  # a writer's journal that never goes away
    assert read_chroma_file(path, count) is None
    journal.unlink()
    with sqlite3.connect(path) as connection:  # a write after the reader opened the file
        connection.execute("INSERT INTO embeddings VALUES (2)")
    connection.close()
    assert read_chroma_file(path, count) == 2


def test_the_file_stays_open_while_chromadb_has_it_and_is_closed_after(tmp_path: Path) -> None:
    """Closing it while chromadb has the folder open would drop chromadb's locks."""
    from langchain_semantic_recall.vectors import chroma_sqlite
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    folder = tmp_path / "chroma"
    index = ChromaVectorIndex.persistent(folder)
    index.open("index-name", dimension=3, model="m")
    path = folder / "chroma.sqlite3"
    key = str(path.resolve())

    def tables(cursor: sqlite3.Cursor) -> int:
        return int(cursor.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])

    assert (read_chroma_file(path, tables) or 0) > 0
    assert key in chroma_sqlite._READERS  # kept: chromadb has the folder open here
    index.close()
    assert key not in chroma_sqlite._READERS  # closed with the last client of the folder
    assert (read_chroma_file(path, tables) or 0) > 0  # and read (then closed) without one
    assert key not in chroma_sqlite._READERS


def test_a_copy_of_the_file_is_whole_or_refused(tmp_path: Path) -> None:
    """A read-only open copies Chroma's file through the reader: never mid-write."""
    from langchain_semantic_recall.vectors.chroma_sqlite import copy_chroma_file

    path = tmp_path / "chroma.sqlite3"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE embeddings (id INTEGER, text TEXT)")
        connection.executemany(
            "INSERT INTO embeddings VALUES (?, ?)", [(n, "x" * 500) for n in range(2000)]
        )
    connection.close()
    assert copy_chroma_file(path, tmp_path / "copy.sqlite3")
    assert (tmp_path / "copy.sqlite3").read_bytes() == path.read_bytes()
    Path(f"{path}-journal").write_bytes(b"\x00" * 512)  # a write under way, or stopped
    assert not copy_chroma_file(path, tmp_path / "again.sqlite3")
