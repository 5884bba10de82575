"""Processes opening one new store at once: each opens it, none is told it is damaged.

Two processes started together (workers of one app, a notebook beside the command line)
both create the store's files. SQLite does not wait for a new file's lock when switching
it to WAL, and Chroma's migrations race on a new folder. Each child is released by one
barrier after its imports, so that the opens themselves race.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.vectors import ChromaVectorIndex
from tests.fakes import FakeEmbeddings
from tests.unit.test_lifecycle import TURN

ROUNDS = 20
"""New stores each pair of processes creates, one after another."""


def _sqlite(folder: str) -> None:
    SQLiteStorage(f"{folder}/messages.sqlite3").close()


def _chroma(folder: str) -> None:
    ChromaVectorIndex.persistent(f"{folder}/chroma").close()


def _engine(folder: str) -> None:
    with SemanticRecall(
        storage=SQLiteStorage(f"{folder}/messages.sqlite3"),
        vector_store=ChromaVectorIndex.persistent(f"{folder}/chroma"),
        embeddings=FakeEmbeddings(),
    ) as memory:
        thread = f"t-{multiprocessing.current_process().pid}"
        done = memory.index(TURN, thread_id=thread, resource_id="alice")
        assert done.error is None, done.error


def _child(
    open_store: Callable[[str], None], folders: list[str], ready: Any, failures: Any
) -> None:
    """Open each folder in turn, released with the other child by `ready` each time."""
    import chromadb  # noqa: F401  (imported before the first round: the opens race)

    for folder in folders:
        ready.wait(60)
        try:
            open_store(folder)
        except BaseException as failure:  # reported by the parent, every one
            failures.put(f"{type(failure).__name__}: {failure}")


@pytest.mark.parametrize(
    "open_store", [_sqlite, _chroma, _engine], ids=["sqlite", "chroma", "engine"]
)
def test_processes_creating_one_store_at_once_all_open_it(
    tmp_path: Path, open_store: Callable[[str], None]
) -> None:
    """Before: 3-7 of 120 SQLite opens failed "database is locked" (at `PRAGMA
    journal_mode = WAL`), and 3-5 of 60 Chroma opens "table collections already exists"
    or "database is locked", both called a file that might be damaged (measured, pairs
    of processes released by one barrier).

    The children are spawned, not forked: a fork of this process (its Chroma and model
    threads) can copy a lock another thread holds, and both children hung on one in CI.
    """
    context = multiprocessing.get_context("spawn")
    failures, ready = context.Queue(), context.Barrier(2)
    folders = [str(tmp_path / f"store-{n}") for n in range(ROUNDS)]
    children = [
        context.Process(target=_child, args=(open_store, folders, ready, failures)) for _ in "ab"
    ]
    try:
        for child in children:
            child.start()
        for child in children:
            child.join(180)
        assert [child.exitcode for child in children] == [0, 0]
    finally:  # a hung child must not outlive the test (the worker's exit would wait on it)
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
    assert failures.empty(), failures.get()
