"""A resource's first search in a process answers from its snapshot, exactly, or asks Chroma.

Embedded Chroma, real files (`vectors/chroma_snapshots.py`): the snapshot is built in the
background, read by the next process (here: the next index on the folder), brought up to
date from Chroma's own log, dropped when that log cannot vouch for it, and deleted with
the vectors it holds. The snapshot's own rules (scan, replay, file) are unit-tested in
tests/unit/test_chroma_snapshot.py.
"""

from __future__ import annotations

import gc
import shutil
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors import chroma as chroma_module
from langchain_semantic_recall.vectors import chroma_snapshot_reads as reads_module
from langchain_semantic_recall.vectors import chroma_snapshots as snapshots_module
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex, resource_collection_name
from langchain_semantic_recall.vectors.chroma_log import ChromaLog
from langchain_semantic_recall.vectors.chroma_snapshot import Snapshot, strings_of
from langchain_semantic_recall.vectors.chroma_snapshots import FOLDER, ColdSnapshots
from tests.conformance.vector_suite import DIMENSION, MODEL, record
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import wait_until

NAME = "snap-idx"
SCOPE = ScopeFilter(resource_id="r1")
ROWS = 120


def vectors_of(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIMENSION)).astype(np.float32)


def exact(rows: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The exact top `k` (message id, clipped cosine) over `rows`."""
    q = query / np.linalg.norm(query)
    scored = [(m, float(np.clip(v @ q / np.linalg.norm(v), 0, 1))) for m, v in rows.items()]
    return sorted(scored, key=lambda item: -item[1])[:k]


def opened(folder: Path, snapshots_from: int = 50, **options: Any) -> ChromaVectorIndex:
    index = ChromaVectorIndex.persistent(folder, snapshots_from=snapshots_from, **options)
    index.open(NAME, dimension=DIMENSION, model=MODEL)
    return index


def snapshot_file(folder: Path, resource_id: str = "r1") -> Path:
    return folder / FOLDER / f"{resource_collection_name(NAME, resource_id)}.vectors"


@pytest.fixture
def chroma_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The collections Chroma itself was asked for nearest vectors (not the snapshot)."""
    asked: list[str] = []
    real: Callable[..., Any] = chroma_module.nearest_in_collection

    def spy(collection: Any, embedding: list[float], *, k: int) -> Any:
        asked.append(collection.name)
        return real(collection, embedding, k=k)

    monkeypatch.setattr(chroma_module, "nearest_in_collection", spy)
    return asked


@pytest.fixture
def built(tmp_path: Path) -> Iterator[tuple[Path, dict[str, np.ndarray]]]:
    """A folder whose r1 collection has a snapshot of ROWS vectors (and one chunk)."""
    folder = tmp_path / "chroma"
    index = opened(folder)
    rows = dict(zip([f"m{i}" for i in range(ROWS)], vectors_of(1, ROWS), strict=True))
    index.upsert(NAME, [record(m, list(map(float, v))) for m, v in rows.items()])
    chunk = vectors_of(2, 1)[0]
    index.upsert(NAME, [record("m0", list(map(float, chunk)), n=1)])
    index.nearest(NAME, list(map(float, chunk)), k=3, scope=SCOPE)  # Chroma loads it: build
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    assert snapshot_file(folder).is_file()
    return folder, {**rows, "m0#1": chunk}


def best(rows: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """`exact` with chunks resolved to their message and each message once."""
    found: dict[str, float] = {}
    for vector_id, score in exact(rows, query, len(rows)):
        message = vector_id.split("#")[0]
        found[message] = max(score, found.get(message, 0.0))
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))[:k]


def test_the_first_search_answers_from_the_snapshot_exactly(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    folder, rows = built
    index = opened(folder)
    for n, query in enumerate(vectors_of(3, 5)):
        found = index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
        if n == 0:  # later ones: the snapshot or Chroma, whichever is ready
            assert chroma_asked == []
        assert [m for m, _ in found] == [m for m, _ in best(rows, query, 10)]
        expected = [s for _, s in best(rows, query, 10)]
        assert [s for _, s in found] == pytest.approx(expected, abs=1e-5)
    assert index.snapshots is not None
    index.snapshots.wait(60)  # Chroma loaded the index in the background: it answers now
    chroma_asked.clear()
    index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    index.close()
    assert chroma_asked == [resource_collection_name(NAME, "r1")]


def test_writes_made_since_are_read_from_chromas_log(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    folder, rows = built
    query = vectors_of(4, 1)[0]
    other = opened(folder, snapshots_from=0)  # another process, without snapshots
    other.upsert(
        NAME, [record("new", list(map(float, query))), record("m5", list(map(float, -query)))]
    )
    other.upsert(NAME, [record("m7", list(map(float, query * 0.9 + 0.01)), n=3)])  # a chunk
    other.close()
    rows = {**rows, "new": query, "m5": -query, "m7#3": query * 0.9 + 0.01}
    index = opened(folder)
    found = index.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    index.close()
    assert [m for m, _ in found] == [m for m, _ in best(rows, query, 5)]
    assert [m for m, _ in found][:2] == ["new", "m7"]
    assert "m5" not in [m for m, _ in found]  # replaced by its opposite
    assert chroma_asked == []


def test_a_damaged_snapshot_leaves_the_search_to_chroma_and_is_built_again(
    built: tuple[Path, dict[str, np.ndarray]],
    chroma_asked: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bytes of a snapshot's ids changed on disk failed every search of the resource
    (a UnicodeDecodeError); a damaged file is an optimisation lost, not an error."""
    folder, rows = built
    path = snapshot_file(folder)
    loaded = Snapshot.load(path.parent, path.stem)
    assert loaded is not None
    blob = loaded.message_ids.blob  # type: ignore[attr-defined]
    at = blob.offset  # where the message ids' bytes start in the file
    damaged = bytearray(path.read_bytes())
    damaged[at : at + 4] = b"\xff\xfe\xff\xfe"  # never UTF-8
    path.write_bytes(bytes(damaged))
    index = opened(folder)
    query = rows["m0"]  # its id is the damaged one
    found = index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    assert [m for m, _ in found][:5] == [m for m, _ in best(rows, query, 5)]
    assert chroma_asked == [resource_collection_name(NAME, "r1")]
    assert "is damaged" in caplog.text
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    rebuilt = Snapshot.load(path.parent, path.stem)
    assert rebuilt is not None
    assert sorted(strings_of(rebuilt.vector_ids)) == sorted(rows)


def test_a_delete_through_the_index_deletes_the_snapshot(
    built: tuple[Path, dict[str, np.ndarray]],
) -> None:
    folder, rows = built
    index = opened(folder)
    index.delete(NAME, message_ids=["m3"], resource_id="r1")
    assert not snapshot_file(folder).exists()  # the forgotten vector is in no file
    found = index.nearest(NAME, list(map(float, rows["m3"])), k=3, scope=SCOPE)
    assert "m3" not in [m for m, _ in found]
    index.close()


def test_a_resource_forgotten_drops_its_snapshot(built: tuple[Path, dict[str, np.ndarray]]) -> None:
    folder, _ = built
    index = opened(folder)
    index.delete(NAME, resource_id="r1")
    index.close()
    assert not snapshot_file(folder).exists()


def test_a_delete_made_elsewhere_is_replayed(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    folder, rows = built
    client = chromadb.PersistentClient(
        path=str(folder), settings=Settings(anonymized_telemetry=False)
    )
    client.get_collection(resource_collection_name(NAME, "r1")).delete(ids=["m3"])
    assert snapshot_file(folder).exists()  # plain chromadb knows nothing of it
    index = opened(folder)
    found = index.nearest(NAME, list(map(float, rows["m3"])), k=3, scope=SCOPE)
    index.close()
    assert "m3" not in [m for m, _ in found]
    assert chroma_asked == []


def test_a_log_purged_past_the_snapshot_leaves_it_to_chroma(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    folder, rows = built
    old = Snapshot.load(folder / FOLDER, resource_collection_name(NAME, "r1"))
    assert old is not None
    more = dict(zip([f"x{i}" for i in range(1100)], vectors_of(5, 1100), strict=True))
    other = opened(folder, snapshots_from=0)  # past sync_threshold (1,000): Chroma purges its log
    other.upsert(NAME, [record(m, list(map(float, v))) for m, v in more.items()])
    other.close()
    index = opened(folder)
    query = vectors_of(6, 1)[0]
    found = index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    assert chroma_asked == [resource_collection_name(NAME, "r1")]
    assert [m for m, _ in found][:3] == [m for m, _ in best({**rows, **more}, query, 3)]
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    rebuilt = Snapshot.load(folder / FOLDER, resource_collection_name(NAME, "r1"))
    assert rebuilt is not None
    assert rebuilt.seq > old.seq
    assert len(rebuilt) == len(rows) + len(more)


def test_a_recreated_collection_never_reads_the_old_ones_snapshot(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str], tmp_path: Path
) -> None:
    folder, _ = built
    shutil.copy(snapshot_file(folder), tmp_path / "old.vectors")
    index = opened(folder)
    index.delete(NAME, resource_id="r1")
    index.upsert(
        NAME, [record(f"n{i}", list(map(float, v))) for i, v in enumerate(vectors_of(7, 60))]
    )
    index.close()
    shutil.copy(tmp_path / "old.vectors", snapshot_file(folder))  # put back by hand
    index = opened(folder)
    found = index.nearest(NAME, list(map(float, vectors_of(8, 1)[0])), k=5, scope=SCOPE)
    index.close()
    assert all(m.startswith("n") for m, _ in found)
    assert chroma_asked == [resource_collection_name(NAME, "r1")]


def test_read_only_reads_snapshots_and_never_writes_one(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    folder, rows = built
    query = vectors_of(9, 1)[0]
    index = opened(folder, read_only=True)
    found = index.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    assert [m for m, _ in found] == [m for m, _ in best(rows, query, 5)]
    assert chroma_asked == []
    index.close()
    snapshot_file(folder).unlink()
    index = opened(folder, read_only=True)
    index.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    assert not snapshot_file(folder).exists()


def test_a_snapshot_naming_another_users_messages_never_reaches_the_engines_results(
    tmp_path: Path, chroma_asked: list[str]
) -> None:
    """Isolation does not rest on the snapshot: the storage reads each hit in scope."""
    embeddings = FakeEmbeddings(dimension=32)
    folder = tmp_path / "store"

    def engine() -> SemanticRecall:
        return SemanticRecall(
            storage=SQLiteStorage(folder / "messages.sqlite3"),
            vector_store=ChromaVectorIndex.persistent(folder / "chroma", snapshots_from=5),
            embeddings=embeddings,
            search_mode="dense",
        )

    memory = engine()
    for i in range(8):
        memory.index(
            [HumanMessage(f"alice secret number {i} is kiwi")], thread_id="ta", resource_id="alice"
        )
        memory.index(
            [HumanMessage(f"bob note {i} about apples")], thread_id="tb", resource_id="bob"
        )
    memory.search("apples", thread_id="tb", resource_id="bob")  # Chroma loads bob's: build
    vectors = memory.vector_store
    assert isinstance(vectors, ChromaVectorIndex)
    assert vectors.snapshots is not None
    vectors.snapshots.wait(60)
    alice = {m.id for m in memory.storage.list_messages(ScopeFilter(resource_id="alice"))}
    bob = {m.id for m in memory.storage.list_messages(ScopeFilter(resource_id="bob"))}
    memory.close()
    files = folder / "chroma" / FOLDER
    snapshots = {p.stem: Snapshot.load(files, p.stem) for p in files.glob("*.vectors")}
    bobs = next(name for name, s in snapshots.items() if s and set(s.message_ids) <= bob)
    planted = snapshots[bobs]
    assert planted is not None
    ids = sorted(alice)  # every other row now names one of alice's messages
    mixed = tuple(ids[i % len(ids)] if i % 2 else m for i, m in enumerate(planted.message_ids))
    Snapshot(planted.collection_id, planted.seq, mixed, mixed, planted.vectors).save(files, bobs)
    memory = engine()
    chroma_asked.clear()
    hits = memory.search("bob note apples", thread_id="tb", resource_id="bob", threshold=0.0)
    memory.close()
    assert chroma_asked == []  # the planted snapshot answered
    found = {hit.message.id for hit in hits}
    assert found & (set(mixed) - alice)  # bob's own rows of the planted snapshot answered
    # Never alice's. (A row of bob's outside `mixed` is his too: on a loaded machine the
    # snapshot can be built before his last writes, which then come from Chroma's log.)
    assert found <= bob


def test_chroma_urls_set_or_turn_off_the_snapshots(tmp_path: Path) -> None:
    from langchain_semantic_recall.errors import InvalidOptionError
    from langchain_semantic_recall.settings import create_vector_index
    from langchain_semantic_recall.vectors.chroma_snapshots import SNAPSHOTS_FROM

    default = create_vector_index(f"chroma:///{tmp_path}/a")
    small = create_vector_index(f"chroma:///{tmp_path}/b?snapshots_from=50&max_loaded=5")
    off = create_vector_index(f"chroma:///{tmp_path}/c?snapshots_from=0")
    assert isinstance(default, ChromaVectorIndex)
    assert isinstance(small, ChromaVectorIndex)
    assert isinstance(off, ChromaVectorIndex)
    assert default.snapshots is not None
    assert default.snapshots.snapshots_from == SNAPSHOTS_FROM
    assert small.snapshots is not None
    assert small.snapshots.snapshots_from == 50
    assert off.snapshots is None
    for index in (default, small, off):
        index.close()
    with pytest.raises(InvalidOptionError, match="snapshots_from"):
        create_vector_index(f"chroma:///{tmp_path}/d?snapshots_from=-1")
    memory = ChromaVectorIndex.ephemeral()
    assert memory.snapshots is None  # nothing to load: nothing to snapshot


def writing_between_pages(
    monkeypatch: pytest.MonkeyPatch, folder: Path, write: Callable[[ChromaVectorIndex], None]
) -> None:
    """Builds read 50 vectors a page, and `write` runs (another index) after the first.

    `monkeypatch` is a `MonkeyPatch.context()`: leaving it undoes only these two.
    """
    from langchain_semantic_recall.vectors import chroma_snapshot_reads as reads

    real = reads.read_retrying
    calls: list[int] = []

    def paged(read: Callable[[], Any], delays: tuple[float, ...]) -> Any:
        result = real(read, delays)
        calls.append(1)
        if len(calls) == 1:
            other = opened(folder, snapshots_from=0)
            write(other)
            other.close()
        return result

    monkeypatch.setattr(reads, "PAGE", 50)
    monkeypatch.setattr(reads, "read_retrying", paged)


def test_a_build_applies_what_was_written_while_it_read(
    tmp_path: Path, chroma_asked: list[str]
) -> None:
    folder = tmp_path / "chroma"
    index = opened(folder)
    rows = dict(zip([f"m{i}" for i in range(ROWS)], vectors_of(1, ROWS), strict=True))
    index.upsert(NAME, [record(m, list(map(float, v))) for m, v in rows.items()])
    query = vectors_of(10, 1)[0]
    late = {"late": query, "m100": -query}  # a new vector, and one rewritten, mid-build

    def write(other: ChromaVectorIndex) -> None:
        other.upsert(NAME, [record(m, list(map(float, v))) for m, v in late.items()])

    with pytest.MonkeyPatch.context() as patch:
        writing_between_pages(patch, folder, write)
        index.nearest(NAME, list(map(float, query)), k=3, scope=SCOPE)  # Chroma; a build
        assert index.snapshots is not None
        index.snapshots.wait(60)
        index.close()
    chroma_asked.clear()
    fresh = opened(folder)
    found = fresh.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    fresh.close()
    assert chroma_asked == []  # the snapshot answered, and holds the writes made meanwhile
    assert [m for m, _ in found] == [m for m, _ in best({**rows, **late}, query, 5)]
    assert found[0][0] == "late"


def test_a_delete_while_a_build_reads_keeps_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "chroma"
    index = opened(folder)
    vectors = vectors_of(1, ROWS)
    index.upsert(NAME, [record(f"m{i}", list(map(float, v))) for i, v in enumerate(vectors)])
    assert index.snapshots is not None
    index.snapshots.wait(60)  # the build these writes prompted (`written`)
    snapshot_file(folder).unlink()
    writing_between_pages(
        monkeypatch, folder, lambda other: other.delete(NAME, message_ids=["m3"], resource_id="r1")
    )
    index.nearest(NAME, list(map(float, vectors[0])), k=3, scope=SCOPE)
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    assert not snapshot_file(folder).exists()  # the delete shifted a row out of the pages


def test_a_forget_in_a_process_without_snapshots_deletes_the_snapshot_too(
    built: tuple[Path, dict[str, np.ndarray]],
) -> None:
    """snapshots_from=0 turns reading and building off, not the privacy of a forget."""
    folder, _ = built
    other = opened(folder, snapshots_from=0)
    other.delete(NAME, message_ids=["m3"], resource_id="r1")
    assert not snapshot_file(folder).exists()
    other.delete(NAME, resource_id="r1")
    other.close()


def test_a_build_saved_while_a_forget_runs_leaves_no_file(
    built: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build reads before the forget's delete and writes after its file delete."""
    from langchain_semantic_recall.vectors.chroma_snapshots import ColdSnapshots

    folder, rows = built
    snapshot_file(folder).unlink()  # the next first search builds one
    index = opened(folder)
    assert index.snapshots is not None
    real = ColdSnapshots.forget
    interleaved: list[bool] = []

    def forget_then_build(self: ColdSnapshots, name: str) -> None:
        real(self, name)
        if not interleaved:  # between the snapshot's delete and Chroma's
            interleaved.append(True)
            index.nearest(NAME, list(map(float, rows["m3"])), k=1, scope=SCOPE)
            self.wait(60)
            assert snapshot_file(folder).is_file()  # built with m3, nothing deleted yet

    monkeypatch.setattr(ColdSnapshots, "forget", forget_then_build)
    index.delete(NAME, message_ids=["m3"], resource_id="r1")
    assert interleaved
    assert not snapshot_file(folder).exists()
    index.close()


def test_a_build_never_puts_in_place_a_file_a_forget_elsewhere_deleted_vectors_of(
    built: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's forget lands after the build's last page, before its write."""
    import os

    folder, rows = built
    snapshot_file(folder).unlink()
    other = opened(folder, snapshots_from=0)  # the other process
    index = opened(folder)
    assert index.snapshots is not None
    real_of = Snapshot.of.__func__  # type: ignore[attr-defined]
    placed: list[str] = []
    real_replace = os.replace

    def of_after_a_forget(cls: type[Snapshot], *args: Any) -> Snapshot:
        if not placed:
            other.delete(NAME, message_ids=["m3"], resource_id="r1")
        return real_of(cls, *args)  # type: ignore[no-any-return]

    def replace(source: Any, target: Any) -> None:
        placed.append(str(target))
        real_replace(source, target)

    monkeypatch.setattr(Snapshot, "of", classmethod(of_after_a_forget))
    monkeypatch.setattr(os, "replace", replace)
    index.nearest(NAME, list(map(float, rows["m3"])), k=1, scope=SCOPE)  # no file: build
    index.snapshots.wait(60)
    index.close()
    other.close()
    # the build applies the writes made while it read (the forget's delete among them):
    # what it put in place never held the forgotten vector
    assert placed == [str(snapshot_file(folder))]
    kept = Snapshot.load(folder / FOLDER, resource_collection_name(NAME, "r1"))
    assert kept is not None
    assert "m3" not in set(kept.vector_ids)
    assert len(kept) == len(rows) - 1


def test_a_read_only_open_reads_the_snapshots_in_place_and_copies_none(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    """The private copy is Chroma's files only: snapshots (~150 MB a 100k resource) are read
    where they are, and a delete through the copy never touches them."""
    from langchain_semantic_recall.vectors.chroma_purge import persist_folder

    folder, rows = built
    before = snapshot_file(folder).read_bytes()
    query = vectors_of(10, 1)[0]
    index = opened(folder, read_only=True)
    copy = persist_folder(index.client)
    assert copy is not None
    assert Path(copy) != folder
    assert not (Path(copy) / FOLDER).exists()
    found = index.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    assert [m for m, _ in found] == [m for m, _ in best(rows, query, 5)]
    assert chroma_asked == []  # the snapshot answered, from the store's own folder
    index.delete(NAME, message_ids=["m3"], resource_id="r1")  # in the copy only
    index.close()
    assert snapshot_file(folder).read_bytes() == before


def test_a_long_replay_is_written_back_without_what_was_deleted(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    """Past REWRITE_AFTER log rows the caught-up snapshot replaces the file (in the back)."""
    from langchain_semantic_recall.vectors.chroma_snapshot import strings_of
    from langchain_semantic_recall.vectors.chroma_snapshots import REWRITE_AFTER

    folder, rows = built
    more = dict(
        zip([f"y{i}" for i in range(REWRITE_AFTER)], vectors_of(11, REWRITE_AFTER), strict=True)
    )
    client = chromadb.PersistentClient(
        path=str(folder), settings=Settings(anonymized_telemetry=False)
    )
    collection = client.get_collection(resource_collection_name(NAME, "r1"))
    collection.add(ids=list(more), embeddings=[list(map(float, v)) for v in more.values()])
    collection.delete(ids=["m3", "y7"])
    expected = {k: v for k, v in {**rows, **more}.items() if k not in ("m3", "y7")}
    index = opened(folder)
    query = rows["m3"]
    found = index.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    assert [m for m, _ in found] == [m for m, _ in best(expected, query, 5)]
    assert chroma_asked == []
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    rewritten = Snapshot.load(folder / FOLDER, resource_collection_name(NAME, "r1"))
    assert rewritten is not None
    assert sorted(strings_of(rewritten.vector_ids)) == sorted(expected)
    assert rewritten.hidden is None
    assert rewritten.since is None


def test_writes_past_chromas_log_purge_build_a_new_snapshot(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    """Chroma purges its log every 1,000 writes: the writing process rebuilds the snapshot,
    so the next process still starts from one (not from Chroma's load)."""
    folder, rows = built
    old = Snapshot.load(folder / FOLDER, resource_collection_name(NAME, "r1"))
    assert old is not None
    more = dict(zip([f"w{i}" for i in range(1100)], vectors_of(11, 1100), strict=True))
    index = opened(folder)
    items = list(more.items())
    for start in range(0, len(items), 100):  # an agent's writes, in batches
        index.upsert(NAME, [record(m, list(map(float, v))) for m, v in items[start : start + 100]])
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    chroma_asked.clear()
    fresh = opened(folder)
    query = vectors_of(12, 1)[0]
    found = fresh.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    fresh.close()
    assert chroma_asked == []  # a snapshot answered: the one the writes rebuilt
    assert [m for m, _ in found] == [m for m, _ in best({**rows, **more}, query, 5)]
    rebuilt = Snapshot.load(folder / FOLDER, resource_collection_name(NAME, "r1"))
    assert rebuilt is not None
    assert rebuilt.seq > old.seq


def _rewrite_ten_records_past_the_log_purge(index: ChromaVectorIndex) -> dict[str, np.ndarray]:
    """Write m0..m9 110 times (1,100 log rows: Chroma persists and purges its log)."""
    latest: dict[str, np.ndarray] = {}
    for turn in range(110):
        batch = dict(zip([f"m{i}" for i in range(10)], vectors_of(100 + turn, 10), strict=True))
        index.upsert(NAME, [record(m, list(map(float, v))) for m, v in batch.items()])
        latest.update(batch)
    return latest


@pytest.fixture
def full_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The collections whose snapshot was built by reading every vector."""
    builds: list[str] = []
    real = ColdSnapshots._build_one

    def spy(self: ColdSnapshots, collection: Any) -> bool:
        builds.append(collection.name)
        return real(self, collection)

    monkeypatch.setattr(ColdSnapshots, "_build_one", spy)
    return builds


def test_records_rewritten_past_chromas_log_purge_are_read_again_not_every_vector(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str], full_builds: list[str]
) -> None:
    """The log no longer vouches for the snapshot, but Chroma's live rows number each
    record's last write: the writer reads the ten it rewrote, and the next process starts
    from a snapshot holding exactly their newest vectors."""
    folder, rows = built
    name = resource_collection_name(NAME, "r1")
    old = Snapshot.load(folder / FOLDER, name)
    assert old is not None
    index = opened(folder)
    latest = {**rows, **_rewrite_ten_records_past_the_log_purge(index)}
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    assert full_builds == []
    refreshed = Snapshot.load(folder / FOLDER, name)
    assert refreshed is not None
    assert refreshed.seq > old.seq
    tail = ChromaLog(folder).tail(refreshed.collection_id, refreshed.seq)
    assert tail is not None  # the log vouches for it again (the reader replays the rest)
    current = refreshed.replayed(*tail) if tail[1] else refreshed
    assert current is not None
    flat = current.flat()
    ids = strings_of(flat.vector_ids)
    assert sorted(ids) == sorted(latest)
    for i, vector_id in enumerate(ids):
        unit = latest[vector_id] / np.linalg.norm(latest[vector_id])
        np.testing.assert_allclose(flat.vectors[i], unit, atol=1e-5)
    chroma_asked.clear()
    fresh = opened(folder)
    query = latest["m3"]
    found = fresh.nearest(NAME, list(map(float, query)), k=5, scope=SCOPE)
    fresh.close()
    assert chroma_asked == []
    assert [m for m, _ in found] == [m for m, _ in best(latest, query, 5)]


def test_a_refresh_never_keeps_a_record_deleted_elsewhere(
    built: tuple[Path, dict[str, np.ndarray]], full_builds: list[str]
) -> None:
    """A delete that left the snapshot file (plain chromadb, an older version) makes the
    count disagree: the writer reads every vector again, and the deleted one is gone."""
    folder, rows = built
    name = resource_collection_name(NAME, "r1")
    client = chromadb.PersistentClient(
        path=str(folder), settings=Settings(anonymized_telemetry=False)
    )
    client.get_collection(name).delete(ids=["m50"])
    assert snapshot_file(folder).exists()
    index = opened(folder)
    _rewrite_ten_records_past_the_log_purge(index)
    assert index.snapshots is not None
    index.snapshots.wait(60)
    index.close()
    assert full_builds == [name]
    rebuilt = Snapshot.load(folder / FOLDER, name)
    assert rebuilt is not None
    assert "m50" not in strings_of(rebuilt.flat().vector_ids)
    assert len(rebuilt) == len(rows) - 1


def test_a_writer_that_closes_at_once_leaves_a_snapshot_for_the_next_process(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    folder, rows = built
    index = opened(folder)
    latest = {**rows, **_rewrite_ten_records_past_the_log_purge(index)}
    index.close()  # no wait: what the last writes queued runs within close
    chroma_asked.clear()
    fresh = opened(folder)
    found = fresh.nearest(NAME, list(map(float, latest["m3"])), k=5, scope=SCOPE)
    fresh.close()
    assert chroma_asked == []
    assert [m for m, _ in found] == [m for m, _ in best(latest, latest["m3"], 5)]


@pytest.mark.parametrize("finish_checks", [True, False])
def test_close_runs_the_queued_checks_except_at_exit(tmp_path: Path, finish_checks: bool) -> None:
    index = opened(tmp_path / "chroma")
    snapshots = index.snapshots
    assert snapshots is not None
    release = threading.Event()
    ran: list[str] = []
    snapshots._submit(lambda: release.wait(30))  # the worker is busy: the next job waits
    snapshots._submit(lambda: ran.append("check"))
    closer = threading.Thread(target=partial(snapshots.close, finish_checks=finish_checks))
    closer.start()
    wait_until(snapshots._closing.is_set, timeout=30, what="close started")
    release.set()
    closer.join(30)
    index.close()
    assert ran == (["check"] if finish_checks else [])


def test_a_refresh_stops_reading_at_exit(
    built: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At exit (`close(finish_checks=False)`) a build stops after its page; a refresh should too."""
    folder, _ = built
    index = opened(folder)
    snapshots = index.snapshots
    assert snapshots is not None
    snapshots.building = False  # no check while writing: the test queues it
    _rewrite_ten_records_past_the_log_purge(index)
    snapshots.building = True
    collection = index._collections.get(NAME, "r1", create=False)
    assert collection is not None
    monkeypatch.setattr(reads_module, "PAGE", 1)  # ten changed records: ten reads
    real = reads_module.read_retrying
    reads: list[bool] = []  # whether close had begun at each read
    entered = threading.Event()

    def spy(read: Any, delays: Any) -> Any:
        entered.set()
        wait_until(snapshots._closing.is_set, timeout=30, what="close")
        reads.append(snapshots._dropping)
        return real(read, delays)

    monkeypatch.setattr(reads_module, "read_retrying", spy)
    snapshots._submit(partial(snapshots._check, collection))
    entered.wait(30)
    snapshots.close(finish_checks=False)  # what `_stop_all` does at interpreter exit
    index.close()
    assert len(reads) <= 2, f"{len(reads)} reads of Chroma after close(finish_checks=False)"


def test_close_at_exit_then_close_again_still_drops(tmp_path: Path) -> None:
    index = opened(tmp_path / "chroma")
    snapshots = index.snapshots
    assert snapshots is not None
    release = threading.Event()
    ran: list[str] = []
    snapshots._submit(lambda: release.wait(30))
    snapshots._submit(lambda: ran.append("check"))
    at_exit = threading.Thread(target=partial(snapshots.close, finish_checks=False))
    at_exit.start()
    wait_until(lambda: snapshots._dropping, timeout=30, what="close at exit")
    again = threading.Thread(target=snapshots.close)  # e.g. an index.close() after _stop_all
    again.start()
    wait_until(lambda: not again.is_alive() or snapshots._jobs.qsize() >= 2, timeout=30, what="2nd")
    release.set()
    at_exit.join(30)
    again.join(30)
    index.close()
    assert ran == []


@pytest.mark.parametrize("settled", [True, False])
def test_settle_leaves_the_next_process_a_snapshot_the_throttle_held_back(
    built: tuple[Path, dict[str, np.ndarray]],
    chroma_asked: list[str],
    monkeypatch: pytest.MonkeyPatch,
    settled: bool,
) -> None:
    """A bulk writer: past the log's purge, too many changes for a refresh, and a full
    build ran a moment ago (the throttle holds the next one back). Exiting as is leaves
    the next process to Chroma's load; `settle` builds the snapshot first."""
    folder, rows = built
    name = resource_collection_name(NAME, "r1")
    monkeypatch.setattr(snapshots_module, "_REFRESH_MOST", 5)  # ten changes: a full build
    index = opened(folder)
    snapshots = index.snapshots
    assert snapshots is not None
    snapshots._built_at[name] = time.monotonic()  # a build just ran: throttled
    latest = {**rows, **_rewrite_ten_records_past_the_log_purge(index)}
    snapshots.wait(60)
    assert (snapshots.settle() if settled else 0) == int(settled)
    snapshots.close(finish_checks=False)  # what interpreter exit does
    index.close()
    chroma_asked.clear()
    fresh = opened(folder)
    found = fresh.nearest(NAME, list(map(float, latest["m3"])), k=5, scope=SCOPE)
    fresh.close()
    assert chroma_asked == ([] if settled else [name])
    assert [m for m, _ in found] == [m for m, _ in best(latest, latest["m3"], 5)]


def test_settle_skips_collections_too_small_and_counts_those_ready(tmp_path: Path) -> None:
    folder = tmp_path / "chroma"
    index = opened(folder, snapshots_from=50)
    big = dict(zip([f"b{i}" for i in range(60)], vectors_of(21, 60), strict=True))
    index.upsert(NAME, [record(m, list(map(float, v)), resource_id="r1") for m, v in big.items()])
    small = [
        record(f"s{i}", list(map(float, v)), thread_id="t2", resource_id="r2")
        for i, v in enumerate(vectors_of(22, 5))
    ]
    index.upsert(NAME, small)
    assert index.snapshots is not None
    assert index.snapshots.settle() == 1  # r1's; r2 holds 5 vectors, under 50
    assert snapshot_file(folder, "r1").exists()
    assert not snapshot_file(folder, "r2").exists()
    assert index.snapshots.settle() == 0  # nothing written since
    index.close()


def test_a_write_logged_but_not_applied_is_never_missed_by_a_snapshot(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    """Chroma logs a write, then applies it in a second transaction; a writer stopped in
    between leaves the log ahead of the collection. chromadb applies the log before it
    reads, so Chroma finds the record; a snapshot at the applied state would not."""
    folder, _ = built
    name = resource_collection_name(NAME, "r1")
    snapshot = Snapshot.load(folder / FOLDER, name)
    assert snapshot is not None
    extra = vectors_of(31, 1)[0]
    index = opened(folder)
    index.upsert(NAME, [record("late", list(map(float, extra)))])
    index.close()
    with sqlite3.connect(folder / "chroma.sqlite3") as connection:  # undo the apply step
        (row,) = connection.execute("SELECT id FROM embeddings WHERE embedding_id = 'late'")
        connection.execute("DELETE FROM embedding_metadata WHERE id = ?", row)
        connection.execute("DELETE FROM embeddings WHERE id = ?", row)
        connection.execute(
            "UPDATE max_seq_id SET seq_id = ? WHERE seq_id > ?", (snapshot.seq, snapshot.seq)
        )
    assert ChromaLog(folder).ahead(snapshot.collection_id, snapshot.seq)  # not applied yet
    chroma_asked.clear()
    fresh = opened(folder)
    found = fresh.nearest(NAME, list(map(float, extra)), k=3, scope=SCOPE)
    fresh.close()
    assert chroma_asked == [name]
    assert found[0][0] == "late"


def test_what_an_index_keeps_of_the_resources_it_served_is_bounded_and_goes_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process serving many users remembers, per resource it wrote or searched, whether
    Chroma answers for it and how far it is from a snapshot: at most `KNOWN` of them, and no
    handle to the collection of a resource it no longer has."""
    monkeypatch.setattr(snapshots_module, "KNOWN", 8)
    index = opened(tmp_path / "chroma", snapshots_from=50)
    snapshots = index.snapshots
    assert snapshots is not None
    handles = []
    for n, vector in enumerate(vectors_of(41, 30)):
        scope = ScopeFilter(resource_id=f"u{n}")
        index.upsert(NAME, [record(f"m{n}", list(map(float, vector)), resource_id=f"u{n}")])
        index.nearest(NAME, list(map(float, vector)), k=1, scope=scope)
        handles.append(weakref.ref(index._collections.get(NAME, f"u{n}", create=False)))
        snapshots.wait(60)
    kept = ("_chroma", "_short", "_written_here", "_built_at")
    assert all(len(getattr(snapshots, part)) <= 8 for part in kept)
    for n in range(30):
        index.delete(NAME, resource_id=f"u{n}")
    gc.collect()
    assert [n for n, handle in enumerate(handles) if handle() is not None] == []
    assert all(len(getattr(snapshots, part)) == 0 for part in kept)
    index.close()


def test_after_chroma_unloads_every_index_the_snapshot_answers_again(
    built: tuple[Path, dict[str, np.ndarray]], chroma_asked: list[str]
) -> None:
    """The embedded default bounds the indexes loaded by starting Chroma's bindings again
    once more collections are touched (`max_loaded`): every index is unloaded, and a big
    collection's next search would wait for Chroma's load, as at a process's first."""
    from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds

    folder, rows = built
    index = opened(folder, workarounds=ChromaWorkarounds(max_loaded=1))
    name = resource_collection_name(NAME, "r1")
    query = vectors_of(3, 1)[0]
    assert index.snapshots is not None
    index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    index.snapshots.wait(60)  # Chroma loaded r1's index: it answers from now on
    index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    assert chroma_asked == [name]
    bindings: Any = index.client._server.bindings  # type: ignore[attr-defined]
    restarts = bindings.restarts
    other = record("other", list(map(float, query)), thread_id="t2", resource_id="r2")
    index.upsert(NAME, [other])  # a second collection touched: every index unloaded
    assert bindings.restarts == restarts + 1
    chroma_asked.clear()
    found = index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    assert chroma_asked == []  # r1's snapshot answered, while Chroma loads it again
    assert [m for m, _ in found] == [m for m, _ in best(rows, query, 10)]
    index.snapshots.wait(60)
    index.nearest(NAME, list(map(float, query)), k=10, scope=SCOPE)
    index.close()
    assert chroma_asked == [name]
