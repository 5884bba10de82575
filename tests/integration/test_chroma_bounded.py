"""Embedded Chroma with a bounded cache of loaded resource indexes, unloaded safely."""

from __future__ import annotations

import platform
from pathlib import Path

import chromadb
import pytest
from chromadb.config import Settings
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InvalidOptionError, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.settings import DEFAULT_MAX_LOADED, create_vector_index
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds, unload
from langchain_semantic_recall.vectors.chroma_workarounds.unload import RestartingBindings
from tests.fakes import FakeEmbeddings


def bindings(index: ChromaVectorIndex) -> RestartingBindings:
    found = index.client._server.bindings  # type: ignore[attr-defined]
    assert isinstance(found, RestartingBindings)
    return found


def cache_size(index: ChromaVectorIndex) -> int:
    return bindings(index).limit


def test_chroma_urls_bound_the_loaded_indexes(tmp_path: Path) -> None:
    default, five = (
        create_vector_index(f"chroma:///{tmp_path}/{p}") for p in ("a", "b?max_loaded=5")
    )
    assert isinstance(default, ChromaVectorIndex)
    assert isinstance(five, ChromaVectorIndex)
    assert cache_size(default) == DEFAULT_MAX_LOADED
    assert cache_size(five) == 5
    unbounded = create_vector_index(f"chroma:///{tmp_path}/c?max_loaded=0")
    assert isinstance(unbounded, ChromaVectorIndex)
    assert cache_size(unbounded) > DEFAULT_MAX_LOADED  # Chroma's own: the open-file limit / 5
    with pytest.raises(InvalidOptionError, match="max_loaded"):
        create_vector_index(f"chroma:///{tmp_path}/d?max_loaded=-1")
    with pytest.raises(InvalidOptionError, match="max_loaded"):
        create_vector_index(f"chroma:///{tmp_path}/e?cache=3")


def test_evicted_resources_are_searched_again_correctly(tmp_path: Path) -> None:
    """With room for 2 loaded indexes, 5 resources in turn: each still finds its own."""
    vectors = ChromaVectorIndex.persistent(
        tmp_path / "chroma", workarounds=ChromaWorkarounds(max_loaded=2)
    )
    assert cache_size(vectors) == 2
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"),
        vector_store=vectors,
        embeddings=FakeEmbeddings(),
        search_mode="dense",
    )
    topics = ["tomato garden", "piano lesson", "lisbon trip", "peanut allergy", "tennis club"]
    for n, topic in enumerate(topics):
        turn = [HumanMessage(f"tell me about my {topic}"), AIMessage(f"your {topic} is great")]
        memory.index(turn, thread_id=f"t{n}", resource_id=f"user-{n}")
    for _ in range(2):  # the second round reloads indexes the first one evicted
        for n, topic in enumerate(topics):
            hits = memory.search(topic, resource_id=f"user-{n}")
            assert hits
            assert all(hit.message.resource_id == f"user-{n}" for hit in hits)
            assert topic in hits[0].message.text
    with pytest.raises(InvalidOptionError, match=">= 1"):
        ChromaWorkarounds(max_loaded=0)


def test_only_persistent_embedded_clients_are_wrapped(tmp_path: Path) -> None:
    """An in-memory client would lose everything on a restart: Chroma's pool is kept."""
    ephemeral = ChromaVectorIndex.ephemeral()
    assert not isinstance(ephemeral.client._server.bindings, RestartingBindings)  # type: ignore[attr-defined]
    client = chromadb.PersistentClient(
        path=str(tmp_path / "own"), settings=Settings(anonymized_telemetry=False)
    )
    assert isinstance(ChromaVectorIndex(client).client, type(client))
    assert bindings(ChromaVectorIndex(client)).limit >= 1  # a client of the user's own too


def test_with_the_workarounds_off_chroma_is_left_as_it_is(tmp_path: Path) -> None:
    """`ChromaWorkarounds.off()`: Chroma's own bindings (and eviction), one async write."""
    plain = ChromaVectorIndex.persistent(tmp_path / "plain", workarounds=ChromaWorkarounds.off())
    assert not isinstance(plain.client._server.bindings, RestartingBindings)  # type: ignore[attr-defined]
    assert plain.workarounds.piece is None
    assert plain.workarounds.delays == ()
    local = SemanticRecall.local(
        tmp_path / "local", embeddings=FakeEmbeddings(), chroma_workarounds=False
    )
    vectors = local.vector_store
    assert isinstance(vectors, ChromaVectorIndex)
    assert not vectors.workarounds.enabled
    local.storage.close()
    with pytest.raises(InvalidOptionError, match="ChromaWorkarounds"):
        ChromaVectorIndex.ephemeral(workarounds="yes")  # type: ignore[arg-type]


def test_every_unload_hands_the_freed_memory_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Freed indexes stayed in glibc's arenas: a process grew with every resource it had
    touched (perf_memory.py: 2,151 MB at 600 resources, ~720 MB with this)."""
    if platform.libc_ver()[0] == "glibc":
        assert unload.release_freed_memory() is True  # malloc_trim is found and called
    released: list[int] = []
    real = unload.release_freed_memory
    monkeypatch.setattr(unload, "release_freed_memory", lambda: released.append(1) or real())
    vectors = ChromaVectorIndex.persistent(
        tmp_path / "chroma", workarounds=ChromaWorkarounds(max_loaded=2)
    )
    memory = SemanticRecall(
        storage=SQLiteStorage(tmp_path / "m.db"),
        vector_store=vectors,
        embeddings=FakeEmbeddings(),
        search_mode="dense",
    )
    for n in range(5):
        memory.index([HumanMessage(f"note {n}")], thread_id=f"t{n}", resource_id=f"user-{n}")
        memory.search(f"note {n}", resource_id=f"user-{n}")
    restarts = bindings(vectors).restarts
    memory.close()
    assert restarts >= 3
    assert len(released) == restarts  # each start of the bindings, the first one too


_LOW_LIMIT = """
import resource, sys
from langchain_core.messages import AIMessage, HumanMessage
from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings

resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
memory = SemanticRecall.local(sys.argv[1], embeddings=FakeEmbeddings(), search_mode="dense")
print("bound", memory.vector_store.client._server.bindings.limit)
failed = 0
for n in range(90):
    turn = [HumanMessage(f"note {n} about the lisbon trip"), AIMessage(f"noted {n}")]
    done = memory.index(turn, thread_id=f"t{n}", resource_id=f"user{n}")
    found = memory.search(f"note {n}", resource_id=f"user{n}")
    failed += done.error is not None or not found
print("failed", failed)
memory.close()
"""


def test_the_default_bound_fits_a_low_open_file_limit(tmp_path: Path) -> None:
    """A process allowed 256 open files (macOS's default `ulimit -n`, some containers):
    each loaded index holds 4 files open, so the default bound of 128 loaded indexes is
    more than the process can hold; the bound is then Chroma's own capacity, the limit / 5.

    Before: past ~55 resources every write failed ("unable to open database file", the
    messages stored without vectors) and then any file the process opened ("Too many
    open files").
    """
    from tests.processes import run_python

    out = run_python("-c", _LOW_LIMIT, str(tmp_path / "memory"))
    assert "bound 51\n" in out
    assert "failed 0\n" in out
