"""A read-only store can be inspected: SQLite through `mode=ro`, Chroma on a copy.

The tests run as root, which ignores file modes, so `chmod -R a-w` alone proves nothing.
The store is therefore also bind-mounted read-only in a private mount namespace
(`unshare -m`, as root): writes fail there with EROFS for root too, exactly as on a
read-only backup disk. Where that is not possible (no `unshare`, no CAP_SYS_ADMIN) and
we run as root, those tests fail (CI runs as root where it can); as any other user,
`chmod -R a-w` is real.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CLI = """
import sys
from langchain_semantic_recall.cli import common, main
from tests.fakes import FakeEmbeddings
common.create_embeddings = FakeEmbeddings
raise SystemExit(main(sys.argv[1:]))
"""

_LIBRARY = """
import sys
from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings
# threshold 0: silence off (the fake embedder's buckets make short queries look like small talk)
memory = SemanticRecall.local(
    sys.argv[1], read_only=True, embeddings=FakeEmbeddings(), threshold=0.0
)
hits = memory.search("lighthouse keeper", resource_id="alice")
print(hits[0].message.text)
print(memory.stats().messages)
"""


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _can_mount_read_only(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && ! touch "$0/x"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(probe)], capture_output=True, check=False
    )
    return done.returncode == 0 and not (probe / "x").exists()


Rows = list[dict[str, str]]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Rows], Path]:
    """The store `semantic-recall ingest` makes of some rows, made once per module and rows.

    Each test works on its own copy of it (a command a process takes ~4 s to run).
    """
    made: dict[str, Path] = {}

    def store_of(rows: Rows) -> Path:
        key = json.dumps(rows)
        if key not in made:
            folder = tmp_path_factory.mktemp("ingested")
            history = folder / "history.jsonl"
            history.write_text("\n".join(json.dumps(row) for row in rows), encoding="utf-8")
            loaded = _run(_CLI, "--path", str(folder / "store"), "ingest", str(history), store=None)
            assert loaded.returncode == 0, loaded.stderr
            made[key] = folder / "store"
        return made[key]

    return store_of


@pytest.fixture
def read_only_store(tmp_path: Path, ingested: Callable[[Rows], Path]) -> Iterator[Path]:
    """A store of two conversations, copied, then made read-only (`chmod -R a-w`)."""
    lines = [
        {"resource": "alice", "thread": "sea", "role": "user", "content": "the lighthouse keeper"},
        {"resource": "alice", "thread": "sea", "role": "assistant", "content": "keeps the lamp"},
        {"resource": "alice", "thread": "cake", "role": "user", "content": "a lemon cake recipe"},
    ]
    store = tmp_path / "backup"
    shutil.copytree(ingested(lines), store)
    subprocess.run(["chmod", "-R", "a-w", str(store)], check=True)
    yield store
    subprocess.run(["chmod", "-R", "u+w", str(store)], check=True)


def _run(code: str, *argv: str, store: Path | None) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter; with `store`, on a read-only mount of it."""
    command = [sys.executable, "-c", code, *argv]
    if store is not None and os.geteuid() == 0:
        script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
        command = ["unshare", "-m", "sh", "-c", script, str(store), *command]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )


@pytest.fixture
def mounted(tmp_path: Path) -> None:
    # CI runs as root on a machine where `unshare -m` works: fail, never skip, without it.
    if os.geteuid() == 0 and not _can_mount_read_only(tmp_path):
        pytest.fail("root ignores file modes, and no read-only mount can be made here")


@pytest.mark.usefixtures("mounted")
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["stats", "--json"], '"messages": 3'),
        # --threshold 0: silence off (the fake embedder makes short queries look like chat)
        (
            ["search", "lighthouse keeper", "--resource", "alice", "--threshold", "0"],
            "the lighthouse keeper",
        ),
        (
            ["inspect", "lighthouse keeper", "--thread", "cake", "--threshold", "0"],
            "the lighthouse keeper",
        ),
        (["threads"], "cake"),
        (["show", "sea"], "keeps the lamp"),
        (["export", "--resource", "alice"], '"content": "a lemon cake recipe"'),
    ],
)
def test_inspection_commands_work_on_a_read_only_store(
    read_only_store: Path, argv: list[str], expected: str
) -> None:
    before = _digest(read_only_store)
    done = _run(_CLI, "--path", str(read_only_store), *argv, store=read_only_store)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    assert _digest(read_only_store) == before


@pytest.mark.usefixtures("mounted")
def test_the_library_opens_a_read_only_store(read_only_store: Path) -> None:
    done = _run(_LIBRARY, str(read_only_store), store=read_only_store)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["the lighthouse keeper", "3"]


@pytest.mark.usefixtures("mounted")
def test_writing_to_a_read_only_store_says_so(read_only_store: Path, tmp_path: Path) -> None:
    more = tmp_path / "more.jsonl"
    row = {"resource": "alice", "thread": "new", "role": "user", "content": "hi"}
    more.write_text(json.dumps(row), encoding="utf-8")
    done = _run(_CLI, "--path", str(read_only_store), "ingest", str(more), store=read_only_store)
    assert done.returncode == 1
    assert "read-only" in done.stderr
    assert "chmod" not in done.stderr
    assert "unexpected" not in done.stderr


@pytest.fixture
def unwritable_store(ingested: Callable[[Rows], Path]) -> Iterator[Path]:
    """A store whose files and folder this user may not write (`chmod -R a-w`), no mount.

    SQLite names that case differently from a read-only mount (SQLITE_READONLY_DIRECTORY,
    not SQLITE_CANTOPEN: no `-shm` can be made). Root ignores file modes, so a test run
    as root runs the commands as `nobody`: the folder is made outside pytest's own
    temporary folder, which only its owner can enter.
    """
    folder = Path(tempfile.mkdtemp(prefix="semantic-recall-unwritable-"))
    folder.chmod(0o755)
    rows = [
        {"resource": "alice", "thread": "sea", "role": "user", "content": "the lighthouse keeper"},
        {"resource": "alice", "thread": "cake", "role": "user", "content": "a lemon cake recipe"},
    ]
    store = folder / "store"
    shutil.copytree(ingested(rows), store)
    subprocess.run(["chmod", "-R", "a-w,a+rX", str(store)], check=True)
    yield store
    subprocess.run(["chmod", "-R", "u+w", str(store)], check=True)
    shutil.rmtree(folder)


def _run_as_another_user(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The command line as `nobody` when we are root (file modes bind it), else as we are."""
    command = [sys.executable, "-c", _CLI, *argv]
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "HOME": str(home)}
    return subprocess.run(
        command, capture_output=True, text=True, cwd=home, env=env, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["stats", "--json"], '"messages": 2'),
        (["search", "lighthouse", "--resource", "alice", "--threshold", "0"], "lighthouse"),
        (["threads"], "cake"),
        (["show", "sea"], "the lighthouse keeper"),
        (["export", "--resource", "alice"], "a lemon cake recipe"),
    ],
)
def test_inspection_commands_work_in_a_folder_this_user_cannot_write(
    unwritable_store: Path, argv: list[str], expected: str
) -> None:
    """Each of them failed: "cannot use SQLite storage ... (attempt to write a readonly
    database); check that it is a SQLite database in a folder you can write"."""
    before = _digest(unwritable_store)
    done = _run_as_another_user(
        "--path", str(unwritable_store), *argv, home=unwritable_store.parent
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    assert _digest(unwritable_store) == before


@pytest.mark.parametrize(
    ("argv", "undone"),
    [
        (["forget", "--thread", "sea", "--yes"], "nothing was forgotten"),
        (["forget", "--older-than", "1d"], "nothing was forgotten"),  # refused before it asks
        (["reindex"], "nothing was embedded"),
        (["move", "--thread", "sea", "--to", "bob"], "nothing was moved"),
        (["purge"], "nothing was purged"),
    ],
)
def test_writing_commands_say_the_store_is_read_only_for_this_user(
    unwritable_store: Path, argv: list[str], undone: str
) -> None:
    """They said "... writes, and this engine was built with read_only=True"."""
    done = _run_as_another_user(
        "--path", str(unwritable_store), *argv, home=unwritable_store.parent
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert f"is read-only for this user (its files or folder, or a read-only mount): {undone}" in (
        done.stderr
    )


def test_a_store_found_read_only_gives_a_read_only_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # local(path, read_only=None) opens an unwritable store read-only by itself; the
    # engine said read_only=False, so index raised "opened read-only" instead of giving
    # each message a fate that says so.
    from langchain_core.messages import HumanMessage

    from langchain_semantic_recall import SemanticRecall
    from langchain_semantic_recall.storage import sqlite_schema
    from tests.fakes import FakeEmbeddings

    store = tmp_path / "store"
    with SemanticRecall.local(store, embeddings=FakeEmbeddings()) as writer:
        writer.index(
            [HumanMessage("the key is under the pot", id="k1")], thread_id="t", resource_id="r"
        )
    monkeypatch.setattr(sqlite_schema, "is_writable", lambda path: False)
    with SemanticRecall.local(store, embeddings=FakeEmbeddings(), read_only=None) as reader:
        assert reader.storage.read_only
        assert reader.read_only
        result = reader.index([HumanMessage("a new fact", id="k2")], thread_id="t", resource_id="r")
        assert [fate.fate for fate in result.fates] == ["skipped"]


_WRITER = """
import sys
from langchain_core.messages import HumanMessage
from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings
memory = SemanticRecall.local(sys.argv[1], embeddings=FakeEmbeddings())  # an app: no read_only
memory.index([HumanMessage("a new fact", id="n1")], thread_id="sea", resource_id="alice")
print("indexed")
"""


@pytest.mark.usefixtures("mounted")
def test_an_app_that_writes_is_refused_an_unwritable_store_not_made_a_reader(
    read_only_store: Path,
) -> None:
    # It became a read-only engine by itself: every turn a graph or middleware indexed was
    # "skipped: read-only engine", with no error, no warning and the answers carrying on.
    before = _digest(read_only_store)
    done = _run(_WRITER, str(read_only_store), store=read_only_store)
    assert done.returncode == 1
    assert "indexed" not in done.stdout
    assert "StorageError" in done.stderr
    assert "cannot be written by this user" in done.stderr
    assert "read_only=True" in done.stderr
    assert _digest(read_only_store) == before


@pytest.fixture
def read_only_vectors(read_only_store: Path) -> Iterator[Path]:
    """The store, writable but for its `chroma/` folder (mounted read-only by `_run`)."""
    subprocess.run(["chmod", "-R", "u+w", str(read_only_store)], check=True)
    subprocess.run(["chmod", "-R", "a-w", str(read_only_store / "chroma")], check=True)
    yield read_only_store
    subprocess.run(["chmod", "-R", "a-w", str(read_only_store)], check=True)


@pytest.mark.usefixtures("mounted")
def test_a_store_whose_vector_folder_alone_is_read_only_is_refused_the_same_way(
    read_only_vectors: Path,
) -> None:
    # Only messages.sqlite3 was checked: Chroma then failed to open and advised moving
    # its folder aside and rebuilding it, for a permission problem.
    before = _digest(read_only_vectors)
    done = _run(_WRITER, str(read_only_vectors), store=read_only_vectors / "chroma")
    assert done.returncode == 1
    assert "cannot be written by this user" in done.stderr
    assert "move it aside" not in done.stderr
    assert _digest(read_only_vectors) == before


@pytest.mark.usefixtures("mounted")
def test_a_writing_command_refuses_a_store_whose_vector_folder_alone_is_read_only(
    read_only_vectors: Path,
) -> None:
    # The command line checked messages.sqlite3 only: forget opened the store read-only
    # and failed at the write, in the library's read_only=True words.
    before = _digest(read_only_vectors)
    argv = ["--path", str(read_only_vectors), "forget", "--thread", "sea", "--yes"]
    done = _run(_CLI, *argv, store=read_only_vectors / "chroma")
    assert done.returncode == 1
    assert "is read-only for this user" in done.stderr
    assert "nothing was forgotten" in done.stderr
    assert "read_only=True" not in done.stderr
    assert _digest(read_only_vectors) == before
