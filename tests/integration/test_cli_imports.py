"""The command-line modules never import chromadb or the Chroma backend themselves.

The CLI reaches every vector backend through ``VectorIndex`` (``migrate`` copies vectors
with ``export``), so a command that needs no vectors starts fast and a new backend needs no
CLI change. Two checks: importing every ``cli`` module in a fresh interpreter leaves
chromadb unloaded, and no ``cli`` module names chromadb or ``vectors.chroma*`` in any
import statement, even one inside a function (which the first check cannot see).

Then what each command loads, run in a fresh interpreter (issue 24: ``--help`` in 0.5 s,
``threads`` / ``show`` / ``stats`` in 1 s): ``--help`` loads none of LangChain, numpy or
chromadb; ``threads`` and ``show`` read the SQLite file alone (none of chromadb,
LangChain or numpy: ~0.2 s in all, where those imports took 0.5-1.4 s more); ``stats``
reads an embedded store's vectors from Chroma's file (no chromadb: ~0.6-0.9 s to import)
and loads neither LangChain (the engine class, a ``Runnable``, loads its tracers; an
embedder class its callbacks: ~0.3 s each) nor the model, and says what it said through
chromadb.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.embeddings import embedding_model_name
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from tests.fakes import FakeEmbeddings
from tests.unit.test_cli_imports import FORBIDDEN, MODULES

ROOT = Path(__file__).resolve().parents[2]


def test_importing_every_cli_module_leaves_chromadb_unloaded() -> None:
    script = textwrap.dedent(
        f"""
        import importlib, json, sys
        for name in {["langchain_semantic_recall.cli", *MODULES]!r}:
            importlib.import_module(name)
        loaded = sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r}))
        print(json.dumps(loaded))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


# --- what each command loads ---------------------------------------------------------------

HEAVY = ("langchain_core", "langsmith", "langgraph", "pydantic", "numpy", "chromadb")
"""Packages `--help` must not load (each costs 0.05-0.5 s to import)."""
ENGINE = (
    "langchain_core.tracers",
    "langsmith.run_trees",
    "langchain_semantic_recall.recall",
    "onnxruntime",
    "tokenizers",
)
"""The engine class (LangChain's tracers) and the local model's runtime."""


def loaded_by(argv: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """Top-level names of the modules under `prefixes` that running the CLI with `argv`
    loads in a fresh interpreter (the command must succeed)."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from langchain_semantic_recall.cli import main
        code = main({argv!r})
        prefixes = {prefixes!r}
        loaded = {{p for p in prefixes for m in sys.modules if m == p or m.startswith(p + ".")}}
        print(json.dumps([code, sorted(loaded)]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    code, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0, done.stdout
    return list(loaded)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded store (SQLite + Chroma) holding one two-message thread.

    Its index is the local model's (name, model and dimension; the vectors are the fake
    embedder's), as the commands run here open it with the default embedder.
    """
    path = tmp_path_factory.mktemp("store")
    local = LocalEmbeddings()
    fake = FakeEmbeddings(dimension=local.dimension, model=embedding_model_name(local))
    memory = SemanticRecall.local(path, embeddings=fake)
    memory.index(
        [HumanMessage("I water the tomatoes at dawn"), AIMessage("Noted: tomatoes at dawn.")],
        thread_id="garden",
        resource_id="alice",
    )
    memory.storage.close()
    return path


def test_the_check_sees_a_heavy_import() -> None:
    assert loaded_by(["--version"], ("json", "no_such_package")) == ["json"]


@pytest.mark.parametrize("argv", [["--help"], ["threads", "--help"], ["stats", "--help"]])
def test_help_loads_no_heavy_package(argv: list[str]) -> None:
    assert loaded_by(argv, HEAVY) == []


@pytest.mark.parametrize("command", [["threads"], ["show", "garden"], ["threads", "--json"]])
def test_storage_commands_load_no_heavy_package(store: Path, command: list[str]) -> None:
    assert loaded_by(["--path", str(store), *command], (*HEAVY, *ENGINE)) == []


def test_export_reads_the_messages_alone(store: Path, tmp_path: Path) -> None:
    """Messages as JSONL: LangChain's message classes, but no chromadb and no engine."""
    argv = ["--path", str(store), "export", "--resource", "alice"]
    assert loaded_by([*argv, "--output", str(tmp_path / "x.jsonl")], ("chromadb", *ENGINE)) == []
    assert "tomatoes at dawn" in (tmp_path / "x.jsonl").read_text()


def test_stats_loads_neither_chromadb_nor_langchain_nor_the_model(store: Path) -> None:
    """It counts an embedded store's vectors from Chroma's file (`vectors.chroma_file`),
    and names the index from the local model's description (`local_model.LocalModel`):
    the embedder class is LangChain's, whose import loads its callbacks (~0.3 s)."""
    heavy = ("chromadb", "langchain_core", "pydantic", *ENGINE)
    assert loaded_by(["--path", str(store), "stats"], heavy) == []


def stats_output(argv: list[str], *, through_chromadb: bool) -> tuple[str, list[str]]:
    """`stats` in a fresh interpreter: its output, and whether it loaded chromadb."""
    ask_chromadb = "admin._file_stats = lambda args: None" if through_chromadb else ""
    script = textwrap.dedent(
        f"""
        import json, sys
        from langchain_semantic_recall.cli import admin, main
        {ask_chromadb}
        code = main({argv!r})
        print(json.dumps([code, sorted(m for m in sys.modules if m == "chromadb")]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    *lines, last = done.stdout.strip().splitlines()
    code, loaded = json.loads(last)
    assert code == 0, done.stdout
    return "\n".join(lines), list(loaded)


@pytest.mark.parametrize(
    "scope",
    [
        [],
        ["--resource", "alice"],
        ["--thread", "garden"],
        ["--thread", "garden", "--resource", "alice"],
    ],
)
@pytest.mark.parametrize("output", [[], ["--json"]])
def test_stats_says_what_it_said_through_chromadb(
    store: Path, scope: list[str], output: list[str]
) -> None:
    argv = ["--path", str(store), "stats", *scope, *output]
    fast, loaded = stats_output(argv, through_chromadb=False)
    slow, through = stats_output(argv, through_chromadb=True)
    assert (loaded, through) == ([], ["chromadb"])
    assert fast == slow
    assert "vectors    2 of 2" in fast or '"vectors": 2' in fast
