"""`purge`: after a forget, no byte of the forgotten messages is left under the store's path.

The store is big enough for Chroma to write its HNSW index to disk (2,800 messages over
four resources, one of 1,200: Chroma persists a collection's graph every 1,000 writes).
Every file under the path is read and searched for each forgotten message's marker and
each forgotten vector, before the purge (the search finds them: it works) and after it
(it finds none); the other resources stay whole and searchable.

The embedder gives each text 64 signs of 1/8 (unit length exactly), so the vector bytes
Chroma keeps are the bytes embedded: HNSW normalizes vectors in cosine space, which leaves
these unchanged. `_vectors_in` finds every run of 64 such values in a file, as float16,
float32 or float64, at any byte offset.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import ReadOnlyError, SemanticRecall
from langchain_semantic_recall.cli import main
from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storage.sqlite_schema import in_use
from langchain_semantic_recall.vectors import chroma_rebuild
from tests.unit.test_purge import DIM, SignEmbeddings

SIZES = {"alice": 1200, "bob": 1200, "carol": 300, "dave": 100}
"""Messages per resource (2,800): alice's and bob's collections reach Chroma's 1,000."""
PER_THREAD = 50
_TAIL = re.compile(rb"[a-z]{5}7")


def sign_key(vector: object) -> bytes:
    """The sign pattern of a vector (what `_vectors_in` finds on disk)."""
    return np.packbits(np.asarray(vector, dtype=np.float64) < 0).tobytes()


# --- searching every file under the store ----------------------------------------------------

_PATTERNS = (  # (unsigned view, bits of +1/8, bits of -1/8) for float16, float32, float64
    (np.dtype("<u2"), 0x3000, 0xB000),
    (np.dtype("<u4"), 0x3E000000, 0xBE000000),
    (np.dtype("<u8"), 0x3FC0000000000000, 0xBFC0000000000000),
)


def _vectors_in(data: bytes) -> set[bytes]:
    """Sign keys of every run of 64 values of +-1/8 in `data` (any width, any offset)."""
    found: set[bytes] = set()
    for dtype, plus, minus in _PATTERNS:
        width = dtype.itemsize
        for offset in range(width):
            usable = (len(data) - offset) // width
            if usable < DIM:
                continue
            values = np.frombuffer(data, dtype=dtype, count=usable, offset=offset)
            ok = (values == plus) | (values == minus)
            runs = np.convolve(ok.astype(np.int32), np.ones(DIM, dtype=np.int32), "valid")
            for start in np.flatnonzero(runs == DIM):
                found.add(np.packbits(values[start : start + DIM] == minus).tobytes())
    return found


def _files(root: Path) -> Iterator[Path]:
    for folder, _, names in os.walk(root):
        for name in names:
            yield Path(folder) / name


def leftovers(root: Path, tails: set[bytes], vectors: set[bytes]) -> dict[str, tuple[int, int]]:
    """File -> (forgotten markers, forgotten vectors) found in it, for every file under `root`.

    A marker is matched by its last six bytes (five letters and "7"), so that the keyword
    index's prefix-compressed terms are found too.
    """
    found: dict[str, tuple[int, int]] = {}
    for file in _files(root):
        data = file.read_bytes()
        texts = len(set(_TAIL.findall(data)) & tails)
        vecs = len(_vectors_in(data) & vectors)
        if texts or vecs:
            found[str(file.relative_to(root))] = (texts, vecs)
    return found


# --- the store ---------------------------------------------------------------------------------


def _markers(rng: random.Random, count: int) -> list[str]:
    """Distinct markers whose six-byte tails are distinct too."""
    tails: set[str] = set()
    markers: list[str] = []
    while len(markers) < count:
        marker = "zq" + "".join(rng.choices(string.ascii_lowercase, k=8)) + "7"
        if marker[-6:] not in tails:
            tails.add(marker[-6:])
            markers.append(marker)
    return markers


def marker_of(message: BaseMessage) -> str:
    """The marker of a message of `conversations` (its second word)."""
    return str(message.content).split()[1]


def conversations() -> list[tuple[str, str, list[BaseMessage]]]:
    """Threads of 50 messages per resource; every text holds its own marker."""
    markers = iter(_markers(random.Random(2026), sum(SIZES.values())))
    result = []
    for resource, size in SIZES.items():
        for t in range(size // PER_THREAD):
            thread = f"{resource}-{t}"
            messages: list[BaseMessage] = []
            for n in range(PER_THREAD):
                text = f"note {next(markers)} about the trip to lisbon"
                kind = HumanMessage if n % 2 == 0 else AIMessage
                messages.append(kind(text, id=f"{thread}-m{n}"))
            result.append((thread, resource, messages))
    return result


def test_purge_leaves_no_byte_of_forgotten_messages_under_the_store(tmp_path: Path) -> None:
    store = tmp_path / "memory"
    memory = SemanticRecall.local(store, embeddings=SignEmbeddings(), search_mode="dense")
    threads = conversations()
    memory.bulk_index(threads)
    index = memory.ensure_index().name
    hnsw = [f for f in store.rglob("data_level0.bin") if f.stat().st_size > 0]
    assert hnsw, "the vector index must be on disk for this test to mean anything"
    gone = [m for t, r, ms in threads if r == "alice" or t == "bob-3" for m in ms]
    kept = [(t, r, m) for t, r, ms in threads if r != "alice" and t != "bob-3" for m in ms]
    tails = {marker_of(m)[-6:].encode() for m in gone}
    exported = list(memory.vector_store.export(index, ScopeFilter(resource_id="alice")))
    exported += memory.vector_store.export(index, ScopeFilter(thread_id="bob-3"))
    vectors = {sign_key(record.vector) for record in exported}
    assert len(vectors) == len(gone) == 1250

    memory.forget_resource("alice")
    memory.forget_thread("bob-3")
    before = memory.stats()
    found = leftovers(store, tails, vectors)
    assert sum(texts for texts, _ in found.values()) > 0, found  # the search works...
    assert sum(vecs for _, vecs in found.values()) > 0, found  # ...for vectors too
    dropped = [n for n in found if n.endswith("data_level0.bin") and found[n][1] >= 1000]
    assert dropped, found  # alice's dropped collection left its HNSW file (Chroma 1.5)

    result = memory.purge()

    assert leftovers(store, tails, vectors) == {}
    assert result.vectors.vectors_rebuilt == len(kept)
    assert result.storage.bytes_after is not None
    assert result.storage.bytes_before is not None
    assert result.storage.bytes_after < result.storage.bytes_before
    after = memory.stats()
    assert after == before
    assert (after.messages, after.vectors, after.resources) == (len(kept), len(kept), 3)
    assert (after.missing_vectors, after.orphan_vectors) == (0, 0)
    for thread, resource, message in kept[::37]:
        hits = memory.search(str(message.content), resource_id=resource, top_k=1)
        assert [h.message.id for h in hits] == [message.id], thread
    reopened = SemanticRecall.local(store, embeddings=SignEmbeddings(), search_mode="dense")
    try:
        assert reopened.stats() == before
    finally:
        reopened.storage.close()
        memory.storage.close()


def test_nothing_comes_back_when_the_purging_process_exits(tmp_path: Path) -> None:
    """Forget and purge in a child process; once it has exited, nothing is left either."""
    store = tmp_path / "memory"
    script = (
        "from tests.integration.test_purge import SemanticRecall, SignEmbeddings, conversations\n"
        f"m = SemanticRecall.local({str(store)!r}, embeddings=SignEmbeddings())\n"
        "m.bulk_index(conversations())\n"
        "m.forget_resource('alice')\n"
        "m.forget_thread('bob-3')\n"
        "print(m.purge().vectors.vectors_rebuilt)\n"
    )
    root = Path(__file__).parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["1550"]
    threads = conversations()
    gone = [m for t, r, ms in threads if r == "alice" or t == "bob-3" for m in ms]
    kept = [m for t, r, ms in threads if r != "alice" and t != "bob-3" for m in ms]
    tails = {marker_of(m)[-6:].encode() for m in gone}
    vectors = {sign_key(SignEmbeddings.vector(str(m.content))) for m in gone}
    assert leftovers(store, tails, vectors) == {}
    kept_vectors = {sign_key(SignEmbeddings.vector(str(m.content))) for m in kept}
    assert leftovers(store, set(), kept_vectors)  # the survivors are on disk, found


def small_store(path: Path, *, forget: bool = True) -> SemanticRecall:
    memory = SemanticRecall.local(path, embeddings=SignEmbeddings(), search_mode="dense")
    memory.bulk_index(conversations()[:3] + conversations()[-2:])  # alice's and dave's
    if forget:
        memory.forget_thread("alice-0")
    return memory


def test_a_forget_whose_vector_delete_failed_leaves_nothing_after_the_purge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget raised after the storage delete (Chroma failed) and was not called
    again: the purge still erases the forgotten vectors and their text."""
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    memory = small_store(tmp_path / "memory", forget=False)
    forgotten = conversations()[0][2]  # alice-0
    with monkeypatch.context() as patch:

        def down(*_: object, **__: object) -> None:
            raise ConnectionError("chroma unreachable")

        patch.setattr(ChromaVectorIndex, "_delete", down)
        with pytest.raises(ConnectionError):
            memory.forget_thread("alice-0")
    assert memory.stats().orphan_vectors == PER_THREAD
    memory.purge()
    memory.close()
    tails = {marker_of(m)[-6:].encode() for m in forgotten}
    vectors = {sign_key(SignEmbeddings.vector(str(m.content))) for m in forgotten}
    assert leftovers(tmp_path / "memory", tails, vectors) == {}
    with SemanticRecall.local(tmp_path / "memory", embeddings=SignEmbeddings()) as again:
        stats = again.stats()
        assert (stats.messages, stats.orphan_vectors, stats.missing_vectors) == (200, 0, 0)


def test_apurge_is_the_async_twin(tmp_path: Path) -> None:
    memory = small_store(tmp_path / "memory")
    before = memory.stats()
    result = asyncio.run(memory.apurge())
    assert result.vectors.vectors_rebuilt == before.vectors == 200
    assert memory.stats() == before
    assert [h.message.id for h in memory.search("note", resource_id="dave", top_k=3)]
    memory.storage.close()


def test_the_purge_counts_the_index_own_collection_as_its_own(tmp_path: Path) -> None:
    """The index's root collection (no vector) was reported as "1 other collection", which
    reads as another index whose vectors the purge kept (docs/data-handling.md, "Scope")."""
    memory = small_store(tmp_path / "memory")
    done = memory.purge().vectors.done
    assert "copied 0 other collection(s) into the new folder" in done
    memory.storage.close()


def test_purge_of_an_empty_store_does_nothing_wrong(tmp_path: Path) -> None:
    memory = SemanticRecall.local(tmp_path / "memory", embeddings=SignEmbeddings())
    result = memory.purge()
    assert result.vectors.vectors_rebuilt == 0
    assert memory.stats().messages == 0
    memory.storage.close()


def test_a_read_only_engine_refuses_to_purge(tmp_path: Path) -> None:
    small_store(tmp_path / "memory").storage.close()
    memory = SemanticRecall.local(tmp_path / "memory", embeddings=SignEmbeddings(), read_only=True)
    with pytest.raises(ReadOnlyError):
        memory.purge()
    with pytest.raises(ReadOnlyError):
        asyncio.run(memory.apurge())
    memory.storage.close()


def test_the_cli_purges_and_prints_the_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_semantic_recall.cli import common

    store = tmp_path / "memory"
    small_store(store).storage.close()
    monkeypatch.setattr(common, "create_embeddings", SignEmbeddings)
    assert main(["purge", "--path", str(store)]) == 0
    out = capsys.readouterr().out
    assert "replaced the Chroma folder by its rebuilt copy" in out
    assert "rebuilt 3 collection(s)" in out  # two resources and the index's own root
    assert " -> " in out
    engine = SemanticRecall.local(store, embeddings=SignEmbeddings())
    try:
        assert engine.stats().messages == 200
        assert in_use(store / "messages.sqlite3")
        assert main(["purge", "--path", str(store)]) == 1  # the store is open: refused
        err = capsys.readouterr().err
        assert "is open elsewhere" in err
        assert "run 'semantic-recall purge' again" in err
        assert len(err.strip().splitlines()) == 1
    finally:
        engine.storage.close()
    assert not in_use(store / "messages.sqlite3")


def test_an_incomplete_copy_raises_and_keeps_the_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = small_store(tmp_path / "memory")
    before = memory.stats()
    pages = chroma_rebuild.copy_pages

    def short(old: Any, size: int) -> Iterator[dict[str, Any]]:
        for page in pages(old, size):
            yield {key: value[:-1] for key, value in page.items()}  # one row lost per page

    monkeypatch.setattr(chroma_rebuild, "copy_pages", short)
    with pytest.raises(StorageError, match="the folder is kept as it was"):
        memory.purge()
    assert memory.stats() == before
    assert not [p.name for p in (tmp_path / "memory").iterdir() if "purge" in p.name]
    memory.storage.close()


# --- the unused slots hnswlib writes from uninitialized memory ---------------------------------


def _hnsw_folders(store: Path) -> list[Path]:
    return sorted(header.parent for header in store.rglob("header.bin"))


@pytest.mark.parametrize("replaced", [2, 3])  # 0 and 1: see the next test
def test_a_purge_killed_during_the_swap_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replaced: int
) -> None:
    """An error in the swap: the second rename (the old folder is put back), or the old
    folder's deletion (deleted on the next open). Errors before those leave the folder
    where it was, and a copy the next open deletes (the next test)."""
    store = tmp_path / "memory"
    memory = small_store(store)
    before = memory.stats()
    steps = 0
    move, remove = os.replace, shutil.rmtree

    def step(do: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> None:
            nonlocal steps
            steps += 1
            if steps == replaced + 1:
                raise RuntimeError("killed")
            do(*args, **kwargs)

        return counted

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", step(move))
        patch.setattr(shutil, "rmtree", step(remove))
        with pytest.raises(RuntimeError, match="killed"):
            memory.purge()
    memory.storage.close()
    reopened = SemanticRecall.local(store, embeddings=SignEmbeddings(), search_mode="dense")
    try:
        assert reopened.stats() == before
        assert not [p.name for p in store.iterdir() if "purge" in p.name]
        result = reopened.purge()
        assert result.vectors.vectors_rebuilt == before.vectors
        hits = reopened.search("note", resource_id="alice", top_k=2)
        assert len(hits) == 2
    finally:
        reopened.storage.close()


def test_a_forgotten_vector_in_an_unused_hnsw_slot_is_gone_after_the_purge(
    tmp_path: Path,
) -> None:
    """hnswlib writes new indexes from uninitialized memory: a forgotten vector can land in
    their unused slots. The purge writes the new folder in a fresh process and deletes the
    old one, so a vector planted in the old files' slack is gone with them."""
    store = tmp_path / "memory"
    memory = small_store(store)
    forgotten = SignEmbeddings.vector(str(conversations()[0][2][0].content))  # alice-0
    for segment in _hnsw_folders(store):
        with (segment / "data_level0.bin").open("ab") as file:
            file.write(np.asarray(forgotten, dtype="<f4").tobytes() + bytes(8))
    assert leftovers(store, set(), {sign_key(forgotten)})

    memory.purge()

    assert leftovers(store, set(), {sign_key(forgotten)}) == {}
    assert [h.message.id for h in memory.search("note", resource_id="dave", top_k=2)]
    memory.storage.close()


def test_the_purge_opens_no_file_of_chromas_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chroma's files are read and written by Chroma alone: the purge goes through its API
    (and moves or deletes whole folders), so it does not depend on their layout."""
    import builtins
    import sqlite3

    store = tmp_path / "memory"
    memory = small_store(store)
    before = memory.stats()
    chroma = str(store / "chroma")
    opened: list[str] = []
    connect, open_file = sqlite3.connect, builtins.open

    def watched(do: Any) -> Any:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if str(path).startswith(chroma):
                opened.append(str(path))
            return do(path, *args, **kwargs)

        return call

    monkeypatch.setattr(sqlite3, "connect", watched(connect))
    monkeypatch.setattr(builtins, "open", watched(open_file))
    result = memory.purge()
    monkeypatch.undo()

    assert opened == []
    assert result.vectors.vectors_rebuilt == before.vectors
    assert memory.stats() == before
    assert [h.message.id for h in memory.search("note", resource_id="alice", top_k=2)]
    memory.storage.close()
