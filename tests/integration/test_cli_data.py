"""How data gets into a store and is kept there, through the command line.

Imports run twice, hostile text and ids, maintenance commands on the results. The
commands run in this process on temporary stores (SQLite + embedded Chroma) with the
fake embedder, as tests/integration/test_cli.py does.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from langchain_semantic_recall.messages import stable_id
from tests.unit import test_cli as unit
from tests.unit.test_cli import Cli
from tests.unit.test_cli_stored_text import RAW
from tests.unit.test_importers import JAN_15, Turn, chatgpt_conversation

ROOT = Path(__file__).resolve().parents[2]

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


def test_a_later_export_whose_branch_was_edited_says_what_it_left_stored(
    cli: Cli, tmp_path: Path
) -> None:
    """A conversation edited in ChatGPT after an import follows another branch in the
    next export: its new messages are added, and the stored ones of the abandoned
    branch (no longer in the file) are named in the summary, with the way to drop them,
    instead of sitting beside the new ones unseen (two contradicting facts)."""
    turns: list[Turn] = [("user", "Where to stay?"), ("assistant", "Alfama")]
    turns += [("user", "I am allergic to peanuts"), ("assistant", "Noted: peanuts")]
    first = chatgpt_conversation("conv", "Trip", turns)
    edited = copy.deepcopy(first)
    mapping = edited["mapping"]
    for node, parent, role, text in [
        ("conv-2b", "conv-1", "user", "I am allergic to shellfish"),
        ("conv-3b", "conv-2b", "assistant", "Noted: shellfish"),
    ]:
        message = {"id": node, "author": {"role": role}, "create_time": JAN_15 + 900}
        message["content"] = {"content_type": "text", "parts": [text]}
        mapping[node] = {"id": node, "parent": parent, "children": [], "message": message}
        mapping[parent]["children"].append(node)
    edited["current_node"] = "conv-3b"
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps([first]), encoding="utf-8")
    new.write_text(json.dumps([edited]), encoding="utf-8")
    assert cli("ingest", str(old), "--resource", "alice").code == 0
    again = cli("ingest", str(new), "--resource", "alice")
    assert again.code == 0, again.err
    assert (
        "2 stored message(s) of conversation \"Trip\" (thread 'conv') are not on its "
        "branch in this file" in again.out
    )
    summary = cli("ingest", str(new), "--resource", "alice", "--json").json()
    assert summary["off_branch"] == [
        {"where": "conversation \"Trip\" (thread 'conv')", "messages": 2}
    ]
    assert cli("forget", "--thread", "conv", "--yes").code == 0  # the way the summary gives
    assert cli("ingest", str(new), "--resource", "alice", "--restore").code == 0
    shown = cli("show", "conv").out
    assert "shellfish" in shown
    assert "peanuts" not in shown


def test_ingest_names_a_hostile_title_without_running_it(cli: Cli, tmp_path: Path) -> None:
    """The summary names conversations by their title (refusals, branches left): a
    title is the file's text, printed through `quoting.printable` as stored text is."""
    title = "Trip\x1b[2J\x1b]52;c;ZXZpbA==\x07"
    export = tmp_path / "conversations.json"
    conversation = chatgpt_conversation("conv", title, [("user", "hi"), ("assistant", "hello")])
    export.write_text(json.dumps([conversation]), encoding="utf-8")
    assert cli("ingest", str(export), "--resource", "alice").code == 0
    refused = cli("ingest", str(export), "--resource", "bob")
    assert refused.code == 1
    assert 'refused conversation "Trip␛[2J' in refused.out
    assert not RAW.findall(refused.out + refused.err)


_STOPPING_CLI = """
import sys
from langchain_semantic_recall.cli import common, main
from tests.fakes import FakeEmbeddings

class Stopping(FakeEmbeddings):
    def embed_documents(self, texts):
        if len(self.calls) == 3:  # batches before it stored and embedded; this one stored
            print("stopped", flush=True)
            sys.stdin.readline()  # until the parent kills this process
        return super().embed_documents(texts)

common.create_embeddings = Stopping
sys.exit(main(sys.argv[1:]))
"""


def test_an_ingest_killed_half_way_finishes_on_a_rerun_and_stats_and_repair_agree(
    cli: Cli, tmp_path: Path
) -> None:
    """SIGKILL while a batch is stored but not embedded: the store opens, holds whole
    batches only; the rerun adds the rest once and says which vectors are missing (exit
    1); `stats` counts exactly the vectors `reindex --missing-only` then writes, and the
    store ends with every line once, each with its vector."""
    rows = [
        {"resource": f"r{t % 2}", "thread": f"t{t}", "role": "user", "content": f"note {t} {n}"}
        for t in range(6)
        for n in range(50)
    ]
    path = _jsonl(tmp_path / "history.jsonl", rows)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ANONYMIZED_TELEMETRY": "False"}
    argv = ["--path", str(cli.store), "ingest", str(path)]
    child = subprocess.Popen(
        [sys.executable, "-c", _STOPPING_CLI, *argv],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "stopped"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    killed = cli("stats", "--json").json()
    assert 0 < killed["messages"] < len(rows)
    assert killed["messages"] % 50 == 0  # whole index calls (a thread of 50 is one), none cut
    assert killed["missing_vectors"] > 0
    rerun = cli("ingest", str(path), "--json")
    assert rerun.code == 1  # missing vectors: said, with the fix
    summary = rerun.json()
    assert summary["messages_added"] == len(rows) - killed["messages"]
    assert summary["skipped"] == {"already stored": killed["messages"]}
    missing = cli("stats", "--json").json()["missing_vectors"]
    assert missing == summary["vectors_missing"] == killed["missing_vectors"]
    repaired = cli("reindex", "--missing-only")
    assert f"Wrote {missing} missing vector(s)" in repaired.out
    final = cli("stats", "--json").json()
    assert (final["messages"], final["vectors"], final["missing_vectors"]) == (300, 300, 0)
    assert final["orphan_vectors"] == 0
    assert cli("ingest", str(path), "--json").json()["messages_added"] == 0
