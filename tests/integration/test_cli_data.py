"""How data gets into a store and is kept there, through the command line.

Imports run twice, hostile text and ids, maintenance commands on the results. The
commands run in this process on temporary stores (SQLite + embedded Chroma) with the
fake embedder, as tests/integration/test_cli.py does.
"""

from __future__ import annotations

import json
from pathlib import Path

from langchain_semantic_recall.messages import stable_id
from tests.unit import test_cli as unit
from tests.unit.test_cli import Cli
from tests.unit.test_cli_stored_text import RAW

cli = unit.cli
embedder = unit.embedder
plain_terminal = unit.plain_terminal


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_move_and_forget_print_no_terminal_control_of_stored_ids(cli: Cli, tmp_path: Path) -> None:
    """Ids are whatever an import named (only NUL and lone surrogates are refused)."""
    thread, owner = "t\x1b[2J", "r\x1b]0;owned\x07"
    row = {"resource": owner, "thread": thread, "role": "user", "content": "hi"}
    row["created_at"] = "2020-01-01T00:00:00Z"
    assert cli("ingest", str(_jsonl(tmp_path / "h.jsonl", [row]))).code == 0
    moved = cli("move", "--thread", thread, "--to", "bob")
    assert moved.code == 0, moved.err
    assert "␛[2J" in moved.out
    assert not RAW.findall(moved.out)
    aged = cli("forget", "--older-than", "30d", "--yes")
    assert aged.code == 0, aged.err
    assert "Threads left empty: t␛[2J." in aged.out
    assert not RAW.findall(aged.out)
    gone = cli("forget", "--thread", thread, "--yes")
    assert gone.code == 0, gone.err
    assert not RAW.findall(gone.out)


def test_lines_without_ids_are_imported_once_whatever_else_the_file_gained(
    cli: Cli, tmp_path: Path
) -> None:
    """The same conversation in a file that gained another thread's lines before it (a
    merged or re-sorted history) adds only those lines; so does a store holding it under
    the ids 0.3 derived from line numbers."""
    chat = [
        {"resource": "alice", "thread": "t1", "role": "user", "content": "I like tea"},
        {"resource": "alice", "thread": "t1", "role": "assistant", "content": "noted"},
    ]
    other = {"resource": "alice", "thread": "t0", "role": "user", "content": "other chat"}
    assert cli("ingest", str(_jsonl(tmp_path / "a.jsonl", chat))).code == 0
    again = cli("ingest", str(_jsonl(tmp_path / "b.jsonl", [other, *chat])), "--json").json()
    assert (again["messages_added"], again["skipped"]) == (1, {"already stored": 2})
    assert cli("stats", "--json").json()["messages"] == 3
    legacy = [
        {**row, "thread": "t2", "id": stable_id("t2", row["role"], row["content"], "", n)}
        for n, row in enumerate(chat, start=1)
    ]
    assert cli("ingest", str(_jsonl(tmp_path / "old.jsonl", legacy))).code == 0
    plain = [{k: v for k, v in row.items() if k != "id"} for row in legacy]
    once = cli("ingest", str(_jsonl(tmp_path / "plain.jsonl", plain)), "--json").json()
    assert (once["messages_added"], once["skipped"]) == (0, {"already stored": 2})
    assert cli("stats", "--json").json()["messages"] == 5
