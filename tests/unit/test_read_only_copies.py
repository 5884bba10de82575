"""`sweep_copies` deletes a read-only copy only when no process holds its lock.

The process id in a copy's name cannot tell: another PID namespace (a container sharing
the temporary folder) sees a live process as gone, and ids are reused. The lock its
process holds on a file inside the copy can: the system drops it when the process ends,
however it ends. The killed-process cases, with real processes, are in
`tests/integration/test_read_only_copies.py`.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from langchain_semantic_recall.vectors import chroma_collections
from langchain_semantic_recall.vectors.chroma_collections import COPY_PREFIX, sweep_copies


def _copy(root: Path, name: str, *, lock: bool = True) -> Path:
    folder = root / f"{COPY_PREFIX}{name}"
    folder.mkdir()
    (folder / "chroma.sqlite3").write_bytes(b"lisbon q1z")
    if lock:
        (folder / chroma_collections._COPY_LOCK).touch()
    return folder


def test_a_copy_whose_lock_is_held_is_kept_whatever_its_name_says(tmp_path: Path) -> None:
    held = _copy(tmp_path, "999999999-abc")  # no such process here: a namespace elsewhere
    fd = os.open(held / chroma_collections._COPY_LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (a lock of its own: this descriptor holds it)
        assert sweep_copies(str(tmp_path)) == []
        assert held.exists()
    finally:
        os.close(fd)  # its process ends
    assert sweep_copies(str(tmp_path)) == [str(held)]
    assert not held.exists()


def test_a_copy_without_a_lock_file_and_other_folders_are_left_alone(tmp_path: Path) -> None:
    unlocked = _copy(tmp_path, "1-made-by-an-earlier-version", lock=False)
    other = tmp_path / "semantic-recall-demo-x"
    other.mkdir()
    assert sweep_copies(str(tmp_path)) == []
    assert unlocked.exists()
    assert other.exists()


def test_this_process_keeps_its_own_copies(tmp_path: Path) -> None:
    mine = _copy(tmp_path, f"{os.getpid()}-x")
    chroma_collections._hold(str(mine))
    try:
        assert sweep_copies(str(tmp_path)) == []
    finally:
        chroma_collections.remove_copy(str(mine))
    assert not mine.exists()
