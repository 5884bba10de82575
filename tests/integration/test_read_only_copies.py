"""A read-only open's copy of the Chroma folder never outlives its process for long.

A read-only open (`semantic-recall stats`, `search`, `inspect`; `read_only=True`) works
on a private copy of `PATH/chroma` in the temporary folder: every message's text, and
what a forget left there until `purge`. It was removed only at a normal exit, so a
command stopped by SIGTERM (`timeout`, a service manager) or a process killed left the
copy behind for good, where no `purge` reached it. Now the command line ends on SIGTERM
as on Ctrl-C, and a copy whose process is gone is deleted by the next read-only open and
by `purge`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings

ROOT = Path(__file__).resolve().parents[2]
MARKER = b"q517z"

# The held process waits for the test in short polls, not in one blocking read: the
# kernel may hand SIGTERM to one of Chroma's threads, which does not interrupt the main
# thread's read(), and Python runs the handler only once the main thread runs again. A
# blocking read waited for good (CI; 1 run in 400 here; every run when the signal is sent
# to another thread with tgkill). The command line itself never waits on input once a
# store is open (its prompts come before the open).
_HELD = """
import select
import sys
from langchain_semantic_recall.cli import common, main
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from tests.fakes import FakeEmbeddings

common.create_embeddings = FakeEmbeddings
opened = ChromaVectorIndex.persistent.__func__


def held(cls, *args, **kwargs):  # the command's index is open: wait for the test's signal
    index = opened(cls, *args, **kwargs)
    print("open", flush=True)
    while not select.select([sys.stdin], [], [], 0.05)[0]:
        pass
    return index


ChromaVectorIndex.persistent = classmethod(held)
if sys.argv[1] == "cli":
    raise SystemExit(main(sys.argv[2:]))
from langchain_semantic_recall import SemanticRecall

SemanticRecall.local(sys.argv[2], read_only=True, embeddings=FakeEmbeddings())
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "memory"
    with SemanticRecall.local(path, embeddings=FakeEmbeddings()) as memory:
        memory.index([HumanMessage("lisbon q517z", id="m1")], thread_id="t1", resource_id="a")
    return path


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder of this test and of the processes it starts."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _copies(scratch: Path) -> list[Path]:
    return sorted(scratch.glob("semantic-recall-read-only-*"))


def _held_open(scratch: Path, *argv: str) -> subprocess.Popen[str]:
    """A process holding a read-only open of the store (its copy made), until signalled."""
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", _HELD, *argv],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:  # (a command may print a heading first)
        if line == "open\n":
            break
    else:
        pytest.fail(f"the process ended ({process.wait()}) before its index was open")
    copies = _copies(scratch)
    assert len(copies) == 1
    assert any(MARKER in f.read_bytes() for f in copies[0].rglob("*") if f.is_file())
    return process


def test_a_command_stopped_by_sigterm_deletes_its_copy(store: Path, scratch: Path) -> None:
    process = _held_open(
        scratch, "cli", "search", "lisbon", "--resource", "a", "--path", str(store)
    )
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert _copies(scratch) == []


@pytest.mark.parametrize("then", ["read-only open", "purge"])
def test_a_copy_a_killed_process_left_is_deleted_by_the_next_open_or_purge(
    store: Path, scratch: Path, then: str
) -> None:
    process = _held_open(scratch, "library", str(store))
    process.kill()
    process.wait(timeout=60)
    left = _copies(scratch)
    assert len(left) == 1, "a killed process cannot delete its copy"

    if then == "purge":
        with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as memory:
            done = memory.purge().vectors.done
        assert any("read-only copies" in step for step in done)
        assert _copies(scratch) == []
    else:
        with SemanticRecall.local(store, embeddings=FakeEmbeddings(), read_only=True) as memory:
            assert memory.stats().messages == 1
            assert [p.name for p in _copies(scratch)] != [left[0].name]  # only its own
        assert not left[0].exists()


def test_the_copy_of_a_live_process_is_kept(store: Path, scratch: Path) -> None:
    process = _held_open(scratch, "library", str(store))
    try:
        with SemanticRecall.local(store, embeddings=FakeEmbeddings(), read_only=True):
            assert len(_copies(scratch)) == 2
    finally:
        process.kill()
        process.wait(timeout=60)


_HALF_MADE = """
import os, sys
from langchain_semantic_recall.vectors import chroma_collections as cc

copy = os.path.join(sys.argv[1], cc.COPY_PREFIX + "half-made")
os.makedirs(os.path.join(copy, "segment"))
with open(os.path.join(copy, "segment", "data.bin"), "wb") as out:
    out.write(b"q517z remembered text")
os.chmod(os.path.join(copy, "segment"), 0o555)  # the store's read-only mode, as copytree
os.chmod(copy, 0o555)  # leaves it when it stops half way (a full temporary folder)
cc.remove_copy(copy)
print("gone" if not os.path.exists(copy) else "left")
"""


def test_a_copy_left_half_made_with_read_only_folders_is_still_deleted() -> None:
    """As its owner (not root, whom file modes do not bind), or it keeps the text for good."""
    scratch = Path(tempfile.mkdtemp(prefix="semantic-recall-half-"))  # outside pytest's tree
    scratch.chmod(0o777)
    command = [sys.executable, "-c", _HALF_MADE, str(scratch)]
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "gone"
    finally:
        for root, _dirs, _files in os.walk(scratch):
            os.chmod(root, 0o700)
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
