"""The ``semantic-recall`` command line on real stores (SQLite and embedded Chroma).

The commands run in this process on temporary stores; most tests use the fake embedder
(the commands, not the model, are under test); the ``slow`` ones run the real local model
through the default path and the console script. tests/unit/test_cli.py has the parser,
help and output checks that need no store.
"""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, message_to_dict

from langchain_semantic_recall.cli import admin, main
from langchain_semantic_recall.records import ScopeFilter
from tests.unit import test_cli as unit
from tests.unit.test_cli import Cli, Embedder, Result, Tty
from tests.unit.test_importers import chatgpt_conversation, sample_export

# The fixtures of tests/unit/test_cli.py, the same here.
cli = unit.cli
embedder = unit.embedder
plain_terminal = unit.plain_terminal


@pytest.fixture
def export_file(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(sample_export()), encoding="utf-8")
    return path


@pytest.fixture
def loaded(cli: Cli, export_file: Path) -> Cli:
    assert cli("ingest", str(export_file), "--resource", "alice").code == 0
    return cli


# --- the parser --------------------------------------------------------------------------


def test_the_store_comes_from_the_environment_or_after_the_subcommand(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEMANTIC_RECALL_PATH", str(loaded.store))
    assert main(["threads"]) == 0
    assert "conv-trip" in capsys.readouterr().out
    monkeypatch.delenv("SEMANTIC_RECALL_PATH")
    assert main(["threads", "--path", str(loaded.store)]) == 0
    assert "conv-trip" in capsys.readouterr().out


def test_servers_by_url_instead_of_a_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, export_file: Path, embedder: Embedder
) -> None:
    urls = [
        "--storage",
        f"sqlite:///{tmp_path}/urls/messages.sqlite3",
        "--vector",
        f"chroma:///{tmp_path}/urls/chroma",
    ]

    def run(*argv: str) -> Result:
        code = main([*urls, *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    assert run("ingest", str(export_file), "--resource", "alice").code == 0
    stats = run("stats")
    assert f"Store sqlite:///{tmp_path}/urls/messages.sqlite3 + chroma:///" in stats.out
    assert "messages   6 in 2 thread(s)" in stats.out
    assert "disk" not in stats.out  # a server store's size is the server's business
    assert run("stats", "--json").json()["disk_bytes"] is None
    half = main(["--storage", "memory://", "stats"])
    assert half == 2
    assert "--storage and --vector go together" in capsys.readouterr().err


def test_ingest_leaves_big_resources_a_snapshot_for_the_next_first_search(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, embedder: Embedder
) -> None:
    """A resource of `snapshots_from` vectors or more gets a current snapshot before the
    command ends (here 20; 20,000 by default), so the next command's first search of it
    does not wait for Chroma's load; a smaller one gets none."""
    store = tmp_path / "snap"
    urls = ["--storage", f"sqlite:///{store}/messages.sqlite3"]
    urls += ["--vector", f"chroma:///{store}/chroma?snapshots_from=20"]
    path = tmp_path / "history.jsonl"
    rows = [
        {"resource": resource, "thread": f"{resource}-t", "role": "user", "content": f"note {n}"}
        for resource, count in (("alice", 30), ("bob", 5))
        for n in range(count)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert main([*urls, "ingest", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["snapshots_ready"] == 1
    files = sorted(p.name for p in (store / "chroma" / "semantic-recall-snapshots").iterdir())
    assert len(files) == 1
    assert main([*urls, "ingest", str(path)]) == 0  # nothing new: nothing to settle
    assert "snapshots" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["show", "t"],
        ["stats"],
        ["search", "x", "--resource", "a"],
        ["export", "--resource", "a"],
        ["forget", "--resource", "a", "--yes"],
    ],
)
def test_a_sqlite_url_naming_no_file_is_not_found_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, embedder: Embedder, command: list[str]
) -> None:
    """A mistyped URL once created an empty store there and answered "nothing stored"."""
    typo = tmp_path / "typo"
    urls = ["--storage", f"sqlite:///{typo}/messages.sqlite3", "--vector", f"chroma:///{typo}/c"]
    assert main([*urls, *command]) == 3
    assert f"no SQLite store at {typo}/messages.sqlite3" in capsys.readouterr().err
    assert not typo.exists()
    source = ["--from-storage", urls[1], "--from-vector", urls[3]]
    assert main(["migrate", *source, "--to-storage", "memory://", "--to-vector", "memory://"]) == 3
    assert not typo.exists()


# --- ingest ------------------------------------------------------------------------------


def test_a_store_with_an_index_of_its_own_name_asks_for_index_name(cli: Cli) -> None:
    """Opened without --index-name, it was refused as "not embedded by the command line's
    model" (the same model), with the advice to embed it all again."""
    history = unit.jsonl(cli.store.parent / "history.jsonl", unit.LINE)
    assert cli("--index-name", "own", "ingest", str(history)).code == 0
    for argv in (["stats"], ["search", "hello", "--resource", "carol"]):
        refused = cli(*argv)
        assert refused.code == 3, refused.err
        assert "give --index-name own" in refused.err
        assert "reembed" not in refused.err
        assert cli(*argv, "--index-name", "own").code == 0


def test_ingest_a_chatgpt_export_then_again_adds_nothing(cli: Cli, export_file: Path) -> None:
    first = cli("ingest", str(export_file), "--resource", "alice")
    assert first.code == 0, first.err
    assert "(ChatGPT export)" in first.out
    assert "threads    2 new, 0 updated, 0 unchanged" in first.out
    assert "messages   6 added" in first.out
    assert "vectors    6 written" in first.out
    assert "skipped    2 (tool call: 1; tool output: 1)" in first.out
    second = cli("ingest", str(export_file), "--resource", "alice", "--json")
    assert second.code == 0
    summary = second.json()
    assert summary["threads"] == {
        "new": 0,
        "updated": 0,
        "unchanged": 2,
        "refused": 0,
        "restored": 0,
    }
    assert summary["messages_added"] == 0
    assert summary["vectors_written"] == 0
    assert summary["skipped"] == {"already stored": 6, "tool call": 1, "tool output": 1}
    stats = cli("stats", "--json").json()
    assert (stats["messages"], stats["vectors"], stats["threads"]) == (6, 6, 2)


def test_ingest_a_newer_export_adds_only_what_is_new(cli: Cli, tmp_path: Path) -> None:
    turns: list[Any] = [("user", "first"), ("assistant", "reply")]
    older = tmp_path / "old.json"
    older.write_text(json.dumps([chatgpt_conversation("c", "Chat", turns)]), encoding="utf-8")
    newer = tmp_path / "new.zip"
    grown = chatgpt_conversation("c", "Chat", [*turns, ("user", "later question")])
    with zipfile.ZipFile(newer, "w") as archive:
        archive.writestr("conversations.json", json.dumps([grown]))
    assert cli("ingest", str(older), "--resource", "u").code == 0
    result = cli("ingest", str(newer), "--resource", "u", "--json")
    assert result.code == 0
    summary = result.json()
    assert summary["threads"]["updated"] == 1
    assert summary["messages_added"] == 1
    assert summary["skipped"] == {"already stored": 2}
    shown = cli("show", "c", "--json").json()
    assert [m["text"] for m in shown] == ["first", "reply", "later question"]


def test_ingest_writes_an_edited_message_as_the_engine_does(cli: Cli, tmp_path: Path) -> None:
    """An edited line (same id, new text) was "already stored" and its thread "unchanged"."""
    line = {"resource": "u", "thread": "t", "role": "user", "id": "m1", "content": "peanuts"}
    reply = {"resource": "u", "thread": "t", "role": "assistant", "id": "m2", "content": "ok"}
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(reply), encoding="utf-8")
    assert cli("ingest", str(path)).code == 0
    edited = {**line, "content": "cashews"}
    path.write_text(json.dumps(edited) + "\n" + json.dumps(reply), encoding="utf-8")
    result = cli("ingest", str(path), "--json")
    assert result.code == 0
    summary = result.json()
    assert (summary["messages_added"], summary["messages_updated"]) == (0, 1)
    assert summary["threads"]["updated"] == 1
    assert summary["skipped"] == {"already stored": 1}
    assert [m["text"] for m in cli("show", "t", "--json").json()] == ["cashews", "ok"]
    keyword = ("--resource", "u", "--search-mode", "keyword", "--json")
    assert [h["message"]["text"] for h in cli("search", "cashews", *keyword).json()["hits"]] == [
        "cashews"
    ]
    assert cli("search", "peanuts", *keyword).json()["hits"] == []
    path.write_text(json.dumps({**line, "content": "almonds"}), encoding="utf-8")
    assert "messages   0 added, 1 updated" in cli("ingest", str(path)).out


def test_ingest_jsonl_reports_bad_lines_and_exits_1(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rows = [
        {"resource": "bob", "thread": "b1", "role": "user", "content": "hello"},
        {"resource": "bob", "thread": "b1", "role": "system", "content": "be nice"},
        {"resource": "bob", "thread": "b1", "role": "robot", "content": "beep"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n", encoding="utf-8")
    result = cli("ingest", str(path))
    assert result.code == 1
    assert "messages   2 added" in result.out
    assert "vectors    1 written (stored without a vector: system message: 1)" in result.out
    assert "line 3: 'role' must be one of user, assistant, system, tool" in result.out
    assert "line 4: not JSON" in result.out
    assert "2 line(s) of" in result.err
    assert cli("stats", "--json").json()["messages"] == 2


def test_ingest_format_and_resource_options(cli: Cli, tmp_path: Path, export_file: Path) -> None:
    no_resource = cli("ingest", str(export_file))
    assert no_resource.code == 2
    assert "pass --resource" in no_resource.err
    assert not cli.store.exists()
    assert cli("ingest", str(tmp_path / "nope.json"), "--resource", "a").code == 3
    as_jsonl = cli("ingest", str(export_file), "--format", "jsonl")
    assert as_jsonl.code == 1  # one JSON array is one bad "line"
    assert "line 1: a line must be a JSON object" in as_jsonl.out
    lines = tmp_path / "default.jsonl"
    lines.write_text(json.dumps({"thread": "t", "role": "user", "content": "x"}), "utf-8")
    assert cli("ingest", str(lines), "--resource", "dana").code == 0
    assert cli("threads", "--json").json()[0]["resource"] == "dana"
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"thread": "caf\xe9"}')
    broken = cli("ingest", str(latin), "--format", "jsonl")
    assert broken.code == 1
    assert "not UTF-8" in broken.err


def test_ingest_refuses_other_owners_and_forgotten_threads(loaded: Cli, export_file: Path) -> None:
    other = loaded("ingest", str(export_file), "--resource", "mallory", "--json")
    assert other.code == 1  # nothing was imported
    assert "nothing in" in other.err
    summary = other.json()
    assert summary["threads"]["refused"] == 2
    assert summary["threads"]["new"] == 0
    assert summary["messages_refused"] == 6
    assert summary["skipped"]["thread belongs to another resource ('alice')"] == 6
    assert [r["where"] for r in summary["refused"]] == [
        "conversation \"Lisbon trip\" (thread 'conv-trip')",
        "conversation \"Tomatoes\" (thread 'conv-garden')",
    ]
    assert loaded("forget", "--thread", "conv-trip", "--yes").code == 0
    again = loaded("ingest", str(export_file), "--resource", "alice", "--json")
    assert again.code == 1  # not everything was imported: say so
    refused = "thread was forgotten (its id is retired); pass --restore to write it again"
    assert again.json()["skipped"][refused] == 4
    assert again.json()["skipped"]["already stored"] == 2
    text = loaded("ingest", str(export_file), "--resource", "alice").out
    assert "messages   0 added, 4 refused" in text
    assert "skipped    8 (" in text  # not 4 + 8 lost: the refused are among the skipped
    assert "the 4 refused among them" in text


def test_ingest_restore_writes_a_forgotten_thread_again(loaded: Cli, export_file: Path) -> None:
    assert loaded("forget", "--thread", "conv-trip", "--yes").code == 0
    result = loaded("ingest", str(export_file), "--resource", "alice", "--restore", "--json")
    assert result.code == 0, result.err
    summary = result.json()
    assert summary["threads"] == {
        "new": 1,
        "updated": 0,
        "unchanged": 1,
        "refused": 0,
        "restored": 1,
    }
    assert summary["messages_added"] == 4
    text = loaded("ingest", str(export_file), "--resource", "alice")
    assert text.code == 0
    assert "threads    0 new, 0 updated, 2 unchanged" in text.out


def test_ingest_counts_threads_it_created_and_names_refused_lines(cli: Cli, tmp_path: Path) -> None:
    first = tmp_path / "first.jsonl"
    first.write_text(
        "\n".join(
            json.dumps({"resource": "alice", "thread": t, "role": "user", "content": c, "id": i})
            for t, c, i in [("a", "hello", "m1"), ("a", "more", "m2"), ("b", "other", "m3")]
        ),
        encoding="utf-8",
    )
    assert cli("ingest", str(first)).code == 0
    # Under a new thread id, the same message ids: refused one by one, with their lines.
    second = tmp_path / "second.jsonl"
    rows = [("new", "hello", "m1"), ("new", "fresh", "m9"), ("new", "more", "m2")]
    second.write_text(
        "\n".join(
            json.dumps({"resource": "bob", "thread": t, "role": "user", "content": c, "id": i})
            for t, c, i in rows
        ),
        encoding="utf-8",
    )
    result = cli("ingest", str(second), "--json")
    assert result.code == 1
    summary = result.json()
    assert summary["threads"]["new"] == 1
    assert summary["messages_added"] == 1
    assert summary["messages_refused"] == 2
    assert [r["where"] for r in summary["refused"]] == ["line 1", "line 3"]
    assert all("unique across threads" in r["reason"] for r in summary["refused"])
    text = cli("ingest", str(second))
    assert "refused line 1: message id 'm1'" in text.out
    assert "2 message(s) of" in text.err


def test_move_gives_a_conversation_to_another_owner(loaded: Cli) -> None:
    moved = loaded("move", "--thread", "conv-trip", "--to", "bob", "--from", "alice")
    assert moved.code == 0, moved.err
    assert moved.out == "Moved thread conv-trip from alice to bob: 4 message(s).\n"
    threads = loaded("threads", "--json").json()
    assert {t["thread"]: t["resource"] for t in threads} == {
        "conv-garden": "alice",
        "conv-trip": "bob",
    }
    assert loaded("search", "Lisbon", "--resource", "bob").code == 0
    refused = loaded("move", "--thread", "conv-trip", "--to", "carol", "--from", "alice")
    assert refused.code == 3
    assert loaded("move", "--thread", "nope", "--to", "bob").code == 3
    again = loaded("move", "--thread", "conv-trip", "--to", "bob")
    assert again.out == "Thread conv-trip already belongs to bob: nothing moved.\n"


def test_a_move_run_again_says_it_wrote_the_vectors_a_stopped_move_left_missing(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "already belongs to bob: nothing moved." while it wrote them, and the
    reindex after it "Wrote 0" (found by the operator audit)."""
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    def down(*_: object, **__: object) -> None:
        raise RuntimeError("the process was stopped here")

    with monkeypatch.context() as patched:
        patched.setattr(ChromaVectorIndex, "_upsert", down)
        stopped = loaded("move", "--thread", "conv-trip", "--to", "bob", "--from", "alice")
    assert stopped.code == 1
    assert "run the same 'semantic-recall move' again" in stopped.err
    assert loaded("stats", "--json").json()["missing_vectors"] == 4
    # The same command, --from included (it said "no thread 'conv-trip' of resource 'alice'").
    again = loaded("move", "--thread", "conv-trip", "--to", "bob", "--from", "alice")
    assert again.code == 0, again.err
    assert again.out == (
        "Thread conv-trip already belongs to bob: nothing moved; 4 missing vector(s) written.\n"
    )
    assert loaded("stats", "--json").json()["missing_vectors"] == 0


def test_ingest_when_embedding_fails_stores_messages_and_exits_1(
    cli: Cli, export_file: Path, embedder: Embedder
) -> None:
    embedder.fail = RuntimeError("embedding service down")
    result = cli("ingest", str(export_file), "--resource", "alice")
    assert result.code == 1
    assert "6 message(s) stored without vectors" in result.out
    assert "reindex --missing-only" in result.out
    embedder.fail = None
    stats = cli("stats")
    assert "missing 6" in stats.out
    assert "semantic-recall reindex --missing-only" in stats.out
    repaired = cli("reindex", "--missing-only")
    assert repaired.code == 0
    assert "Wrote 6 missing vector(s) for 6 stored message(s)" in repaired.out
    assert cli("stats", "--json").json()["missing_vectors"] == 0


# --- search, inspect, threads, show ------------------------------------------------------


def test_search_prints_scores_conversations_and_windows(loaded: Cli) -> None:
    query = "peanuts allergic sister vegetarian"
    options = ["--search-mode", "dense", "--top-k", "4", "--range", "1", "--message-budget", "none"]
    result = loaded("search", query, "--resource", "alice", *options)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == (
        f'4 hit(s) for "{query}" in every conversation of alice '
        "(dense search, top 4, window 1 before / 1 after)"
    )
    assert lines[2].startswith("#1  score ")
    assert 'conversation "Lisbon trip" (conv-trip)' in lines[2]
    hit = next(line for line in lines if line.startswith("   > "))
    assert "user       My sister is vegetarian and I'm allergic to peanuts." in hit
    assert "2024-01-15 10:33" in hit


def test_search_json_and_options(loaded: Cli) -> None:
    result = loaded(
        "search",
        "tomato seedlings",
        "--resource",
        "alice",
        "--json",
        "--top-k",
        "1",
        "--range",
        "0,1",
        "--threshold",  # silence off: the fake embedder's buckets make this look like small talk
        "0",
    )
    data = result.json()
    assert (data["query"], data["resource"], data["thread"]) == ("tomato seedlings", "alice", None)
    (hit,) = data["hits"]
    assert hit["rank"] == 1
    assert 0 < hit["score"] <= 1
    assert (hit["thread"], hit["title"]) == ("conv-garden", "Tomatoes")
    assert hit["message"]["text"] == "When can my tomato seedlings go outside near Porto?"
    assert [m["text"] for m in hit["window"]] == [
        "When can my tomato seedlings go outside near Porto?",
        "Late April, once nights stay above 10°C.",
    ]


def test_search_modes_and_budget(loaded: Cli) -> None:
    hybrid = loaded(
        "search",
        "tomato",
        "--resource",
        "alice",
        "--search-mode",
        "hybrid",
        "--message-budget",
        "3",
    )
    assert "(hybrid search, top " in hybrid.out
    assert "budget 3 messages)" in hybrid.out
    windows = loaded(
        "search",
        "tomato",
        "--resource",
        "alice",
        "--search-mode",
        "keyword",
        "--message-budget",
        "3",
        "--json",
    ).json()
    assert sum(len(h["window"]) for h in windows["hits"]) <= 3
    assert loaded("search", "x", "--resource", "alice", "--message-budget", "lots").code == 2


def test_the_summary_line_names_a_threshold(loaded: Cli) -> None:
    """A threshold changes what comes back (0 turns silence off): the summary says so."""
    argv = ("tomato", "--resource", "alice", "--threshold", "0.05")
    assert "budget 15 messages, threshold 0.05)" in loaded("search", *argv).out
    inspected = loaded("inspect", "--thread", "new", *argv)
    assert "budget 15 messages, threshold 0.05)" in inspected.out
    summary = loaded("search", "tomato", "--resource", "alice").out.splitlines()[0]
    assert "threshold" not in summary  # (a silent search's hint below may name one)


def test_search_one_thread_and_not_found(loaded: Cli) -> None:
    inside = loaded("search", "Lisbon", "--thread", "conv-trip", "--json").json()
    assert {h["thread"] for h in inside["hits"]} == {"conv-trip"}
    assert inside["resource"] == "alice"
    assert loaded("search", "tomato", "--resource", "bob").code == 3
    assert loaded("search", "tomato", "--thread", "nope").code == 3
    wrong_owner = loaded("search", "tomato", "--thread", "conv-trip", "--resource", "bob")
    assert wrong_owner.code == 3
    assert "no thread 'conv-trip' of resource 'bob'" in wrong_owner.err
    assert loaded("search", "tomato").code == 2
    assert loaded("search", "tomato", "--resource", "alice", "--top-k", "0").code == 2


def test_inspect_prints_exactly_what_recall_injects(loaded: Cli) -> None:
    question = "any peanut free snacks for my sister?"
    result = loaded("inspect", "--resource", "alice", "--thread", "new-chat", question, "--json")
    assert result.code == 0, result.err
    expected = loaded.engine().recall(
        [HumanMessage(question, id="semantic-recall-inspect")],
        thread_id="new-chat",
        resource_id="alice",
    )
    assert result.json() == json.loads(json.dumps([message_to_dict(m) for m in expected]))
    assert result.json()[0]["data"]["additional_kwargs"]["source"] == "memory"
    text = loaded("inspect", "--resource", "alice", "--thread", "new-chat", question).out
    assert "Recall in thread new-chat of alice (resource scope" in text
    assert "note: hybrid search's relevance model is not fitted for fake-bow" in text
    assert "Hits (why these messages are recalled):" in text
    assert "What the model is given: 2 message(s), 1 injected by recall (source: memory)" in text
    assert "1 · system · source: memory" in text
    assert expected[0].text in text  # the block, verbatim
    assert text.rstrip().endswith(question)


def test_inspect_with_history_thread_scope_and_errors(loaded: Cli) -> None:
    result = loaded(
        "inspect", "--thread", "conv-trip", "--history", "2", "--scope", "thread", "peanuts?"
    )
    assert result.code == 0, result.err
    assert "(thread scope" in result.out
    assert "live conversation" in result.out
    assert result.out.count("source: memory") >= 2  # the header and the recalled messages
    assert "remembered from a different conversation" not in result.out
    new = loaded("inspect", "--thread", "brand-new", "hello")
    assert new.code == 2
    assert "pass --resource" in new.err
    theft = loaded("inspect", "--thread", "conv-trip", "--resource", "bob", "hello")
    assert theft.code == 3  # as `search` says it: the owner is not named
    assert "no thread 'conv-trip' of resource 'bob'" in theft.err
    assert loaded("inspect", "--thread", "conv-trip", "--history", "-1", "x").code == 2
    nothing = loaded("inspect", "--thread", "t", "--resource", "nobody", "hello")
    assert nothing.code == 0
    assert "(none: the model gets the input unchanged)" in nothing.out


@pytest.fixture
def tagged(loaded: Cli) -> Cli:
    """The sample export, plus three launch messages with metadata (one of them bob's)."""
    engine = loaded.engine()
    try:
        for message_id, thread, resource, day, metadata in (
            ("apollo-1", "apollo", "alice", "2024-03-01", {"project": "apollo", "sprint": 3}),
            ("gemini-1", "gemini", "alice", "2024-03-05", {"project": "gemini", "urgent": True}),
            ("bob-1", "bob-apollo", "bob", "2024-03-01", {"project": "apollo", "sprint": 3}),
        ):
            said = HumanMessage(
                f"the launch review of {thread}",
                id=message_id,
                additional_kwargs={"created_at": f"{day}T09:00:00+00:00"},
            )
            engine.index([said], thread_id=thread, resource_id=resource, metadata=metadata)
    finally:
        engine.close()
    return loaded


def test_search_narrows_by_metadata_and_creation_time(tagged: Cli) -> None:
    def found(*argv: str) -> set[str]:
        options = ["--search-mode", "keyword", "--range", "0", "--json"]
        result = tagged("search", "launch review", "--resource", "alice", *options, *argv)
        assert result.code == 0, result.err
        return {hit["message"]["id"] for hit in result.json()["hits"]}

    assert found() == {"apollo-1", "gemini-1"}
    assert found("--filter", "project=apollo") == {"apollo-1"}  # never bob's apollo
    assert found("--filter", "project=apollo", "--filter", "project=gemini") == {
        "apollo-1",
        "gemini-1",
    }
    assert found("--filter", "sprint=3") == {"apollo-1"}  # the text 3 matches the number 3
    assert found("--filter", "urgent=true") == {"gemini-1"}
    assert found("--filter", "project=apollo", "--filter", "urgent=true") == set()
    assert found("--filter", "project=zeus") == set()
    assert found("--since", "2024-03-02") == {"gemini-1"}
    assert found("--until", "2024-03-02") == {"apollo-1"}
    assert found("--since", "2024-03-01T09:00Z", "--until", "2024-03-01T09:01Z") == {"apollo-1"}
    assert found("--since", "30d") == set()  # everything is older
    in_thread = tagged("search", "launch", "--thread", "apollo", "--filter", "project=gemini")
    assert in_thread.code == 0, in_thread.err
    assert in_thread.out.startswith('0 hit(s) for "launch" in conversation apollo')
    assert "project=gemini" in in_thread.out.splitlines()[0]
    summary = tagged(
        "search",
        "launch",
        "--resource",
        "alice",
        "--json",
        "--filter",
        "sprint=3",
        "--since",
        "2024-03-01",
    ).json()
    assert summary["filter"] == {"sprint": {"$in": ["3", 3]}}
    assert summary["since"] == "2024-03-01T00:00:00+00:00"
    assert summary["until"] is None
    shown = tagged("search", "launch", "--resource", "alice", "--until", "2024-03-02")
    assert "until 2024-03-02 00:00 UTC)" in shown.out.splitlines()[0]


def _hit(thread: str, message: str, window: list[str], score: float) -> tuple[Any, ...]:
    """A hit to compare: of one scoring 0, only its score.

    The fake embedder's orthogonal vectors tie at 0, and Chroma returns ties in any order.
    """
    return (score,) if score == 0 else (thread, message, window, score)


@pytest.mark.parametrize(
    ("argv", "options", "narrowing"),
    [
        ([], {}, {}),
        (
            ["--search-mode", "keyword", "--range", "0"],
            {"search_mode": "keyword", "message_range": 0},
            {},
        ),
        (
            ["--search-mode", "dense", "--top-k", "2", "--range", "1,0"],
            {"search_mode": "dense", "top_k": 2, "message_range": (1, 0)},
            {},
        ),
        (
            ["--threshold", "0", "--message-budget", "none"],
            {"threshold": 0.0, "message_budget": None},
            {},
        ),
        (
            [
                "--message-budget",
                "3",
                "--threshold",
                "0",
                "--filter",
                "project=apollo",
                "--filter",
                "project=gemini",
            ],
            {"message_budget": 3, "threshold": 0.0},
            {"filter": {"project": {"$in": ["apollo", "gemini"]}}},
        ),
        (
            [
                "--top-k",
                "5",
                "--range",
                "2",
                "--threshold",
                "0.01",
                "--since",
                "2024-01-15T10:32",
                "--until",
                "2024-03-02",
            ],
            {"top_k": 5, "message_range": 2, "threshold": 0.01},
            {
                "since": datetime(2024, 1, 15, 10, 32, tzinfo=UTC),
                "until": datetime(2024, 3, 2, tzinfo=UTC),
            },
        ),
    ],
)
def test_search_flags_give_what_the_python_search_gives(
    tagged: Cli, argv: list[str], options: dict[str, Any], narrowing: dict[str, Any]
) -> None:
    """The same question asked with flags and from Python: the same hits, windows and scores."""
    for query in ("launch review", "Lisbon in March", "tomato seedlings"):
        result = tagged("search", query, "--resource", "alice", "--json", *argv)
        assert result.code == 0, result.err
        assert result.json()["filter"] == narrowing.get("filter")
        shown = [
            _hit(h["thread"], h["message"]["id"], [m["id"] for m in h["window"]], h["score"])
            for h in result.json()["hits"]
        ]
        engine = tagged.engine()
        try:
            hits = engine.with_options(**options).search(query, resource_id="alice", **narrowing)
        finally:
            engine.close()
        expected = [
            _hit(h.thread_id, h.message.id, [m.id for m in h.window], round(h.score, 4))
            for h in hits
        ]
        assert shown == expected, (query, argv)


def test_inspect_recalls_only_what_the_filter_and_range_keep(tagged: Cli) -> None:
    question = "when is the launch review?"
    argv = ["inspect", "--resource", "alice", "--thread", "new-chat", question]
    result = tagged(*argv, "--threshold", "0", "--filter", "project=apollo", "--json")
    assert result.code == 0, result.err
    injected = "\n".join(m["data"]["content"] for m in result.json()[:-1])
    assert "the launch review of apollo" in injected
    assert "gemini" not in injected
    assert "bob" not in injected
    assert "Lisbon" not in injected  # the export's messages have no metadata
    late = tagged(*argv, "--threshold", "0", "--since", "2024-03-03", "--json")
    injected = "\n".join(m["data"]["content"] for m in late.json()[:-1])
    assert "the launch review of gemini" in injected
    assert "apollo" not in injected
    text = tagged(*argv, "--filter", "project=apollo", "--since", "2024-01-01").out
    assert "project=apollo, since 2024-01-01 00:00 UTC)" in text.splitlines()[0]
    assert tagged(*argv, "--since", "2024-03-03", "--until", "2024-03-01").code == 2


def test_threads_and_show(loaded: Cli) -> None:
    listing = loaded("threads").out.splitlines()
    header = "thread resource messages first (UTC) last (UTC) title"
    assert listing[0].split() == header.split()
    assert listing[1].split()[:3] == ["conv-garden", "alice", "2"]
    assert listing[2].split()[:3] == ["conv-trip", "alice", "4"]
    assert listing[2].endswith("Lisbon trip")
    data = loaded("threads", "--resource", "alice", "--json").json()
    assert [(t["thread"], t["messages"], t["title"]) for t in data] == [
        ("conv-garden", 2, "Tomatoes"),
        ("conv-trip", 4, "Lisbon trip"),
    ]
    assert data[1]["first_at"] == "2024-01-15T10:31:00+00:00"
    assert loaded("threads", "--resource", "bob").code == 3
    shown = loaded("show", "conv-trip").out
    assert shown.startswith('Thread conv-trip of alice · "Lisbon trip" · 4 message(s)')
    assert "2024-01-15 10:31  user\n  We're going to Lisbon in March." in shown
    assert [m["seq"] for m in loaded("show", "conv-trip", "--json").json()] == [0, 1, 2, 3]
    missing = loaded("show", "nope")
    assert missing.code == 3
    assert "no thread 'nope'" in missing.err


def test_show_says_when_a_message_has_no_text(cli: Cli, tmp_path: Path) -> None:
    """A whitespace-only message printed as an empty line, an empty one as "(no text)"."""
    rows = [{"thread": "t", "role": "user", "content": text} for text in ("", " \n ", "hi")]
    path = tmp_path / "blank.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows), encoding="utf-8")
    assert cli("ingest", str(path), "--resource", "a").code == 0
    shown = cli("show", "t").out
    assert shown.count("user\n  (no text)\n") == 2
    assert "user\n  hi\n" in shown


def test_empty_files_and_stores(cli: Cli, tmp_path: Path, export_file: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("[]", encoding="utf-8")
    nothing = cli("ingest", str(empty), "--resource", "a")
    assert nothing.code == 1
    assert "holds no conversations" in nothing.err
    assert cli("ingest", str(export_file), "--resource", "a").code == 0
    assert cli("forget", "--resource", "a", "--yes").code == 0
    assert "No conversations stored yet" in cli("threads").out
    assert cli("threads", "--json").json() == []


# --- stats, forget, reindex --------------------------------------------------------------


def test_stats_reports_counts_index_model_and_disk(loaded: Cli) -> None:
    text = loaded("stats").out
    assert f"Store {loaded.store}" in text
    assert "messages   6 in 2 thread(s) of 1 resource(s)" in text
    assert "vectors    6 of 6 embeddable message(s), missing 0, orphaned 0" in text
    assert "index      semantic-recall-fake-bow-128" in text
    assert "model      fake-bow (128 dimensions)" in text
    assert "relevance  not fitted for fake-bow" in text  # the numbers are MiniLM's
    data = loaded("stats", "--json", "--thread", "conv-garden").json()
    assert data["relevance"].startswith("not fitted for fake-bow")
    assert (data["messages"], data["vectors"], data["threads"]) == (2, 2, 1)
    assert data["disk_bytes"] > 0
    assert data["index_name"] == "semantic-recall-fake-bow-128"
    unknown = loaded("stats", "--thread", "nope")
    assert unknown.code == 3, unknown.out
    assert "no thread 'nope'" in unknown.err
    stolen = loaded("stats", "--thread", "conv-garden", "--resource", "bob")
    assert stolen.code == 3
    assert "no thread 'conv-garden' of resource 'bob'" in stolen.err


def test_forget_asks_and_refuses_without_a_terminal(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # a pipe, not a terminal
    refused = loaded("forget", "--resource", "alice")
    assert refused.code == 2
    assert "pass --yes" in refused.err
    monkeypatch.setattr(sys, "stdin", Tty("n\n"))
    declined = loaded("forget", "--resource", "alice")
    assert declined.code == 1
    assert "Delete everything of resource alice (2 thread(s), 6 message(s))" in declined.err
    assert "Nothing deleted." in declined.out
    assert loaded("stats", "--json").json()["messages"] == 6
    monkeypatch.setattr(sys, "stdin", Tty("yes\n"))
    done = loaded("forget", "--thread", "conv-garden")
    assert done.code == 0
    assert "Forgot thread conv-garden of alice: 2 message(s) and their vectors deleted." in done.out
    assert loaded("show", "conv-garden").code == 3


def test_a_forget_whose_vector_delete_failed_says_so_and_never_advises_a_backup(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chroma's error alone was read as a damaged store: "restore it from a backup", which
    after a forget brings back what was forgotten. The note says what was done instead."""
    import chromadb.errors

    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    def down(*_: object, **__: object) -> None:
        raise chromadb.errors.InternalError("Error in compaction: no space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(ChromaVectorIndex, "_delete", down)
        failed = loaded("forget", "--thread", "conv-trip", "--yes")
    assert failed.code == 1
    assert "backup" not in failed.err
    assert "message(s) were deleted from the storage, but not all of their vectors" in failed.err
    assert "'semantic-recall reindex --missing-only'" in failed.err
    repaired = loaded("reindex", "--missing-only")
    assert repaired.code == 0
    stats = loaded("stats", "--json").json()
    assert (stats["orphan_vectors"], stats["missing_vectors"]) == (0, 0)


@pytest.mark.parametrize(
    ("target", "left_of", "unknown"),
    [
        (["--thread", "conv-trip"], "thread conv-trip", "no thread 'conv-trip'"),
        (["--resource", "alice"], "resource alice", "no conversations of resource 'alice'"),
    ],
)
def test_the_same_forget_again_finishes_one_whose_vector_delete_failed(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch, target: list[str], left_of: str, unknown: str
) -> None:
    """The failed forget says "call the same forget again"; run again, it said "no such
    thread" (exit 3) while the vectors of what an erasure was asked for stayed."""
    import chromadb.errors

    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    def down(*_: object, **__: object) -> None:
        raise chromadb.errors.InternalError("Error in compaction: no space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(ChromaVectorIndex, "_delete", down)
        assert loaded("forget", *target, "--yes").code == 1
    assert loaded("stats", "--json").json()["orphan_vectors"] > 0
    again = loaded("forget", *target, "--yes")
    assert again.code == 0, again.err
    assert f"Forgot what was left of {left_of}:" in again.out
    assert loaded("stats", "--json").json()["orphan_vectors"] == 0
    gone = loaded("forget", *target, "--yes")  # nothing of it left at all: not found
    assert gone.code == 3
    assert unknown in gone.err


def test_forget_a_resource_leaves_nothing_of_it(loaded: Cli, export_file: Path) -> None:
    bob = export_file.parent / "bob.json"
    bob.write_text(
        json.dumps([chatgpt_conversation("bob-1", "Bob", [("user", "tomato sauce recipe")])]),
        encoding="utf-8",
    )
    assert loaded("ingest", str(bob), "--resource", "bob").code == 0
    done = loaded("forget", "--resource", "alice", "--yes")
    assert done.code == 0
    assert "Forgot everything of resource alice: 6 message(s)" in done.out
    alice = loaded("stats", "--resource", "alice", "--json")
    assert alice.code == 3  # no message, vector or orphaned vector of alice is left
    assert "no conversations of resource 'alice'" in alice.err
    engine = loaded.engine()
    info = engine.ensure_index()
    assert engine.vector_store.message_ids(info.name) == {"bob-1-0"}
    assert loaded("search", "tomato", "--resource", "alice").code == 3
    # --threshold 0: silence off (the 128-bucket fake makes "tomato" look like small talk)
    bob = loaded("search", "tomato", "--resource", "bob", "--json", "--threshold", "0")
    assert bob.json()["hits"]
    assert loaded("forget", "--resource", "alice", "--yes").code == 3
    assert loaded("forget", "--thread", "conv-trip", "--yes").code == 3


def test_reindex_everything_or_one_scope(loaded: Cli) -> None:
    everything = loaded("reindex")
    assert everything.code == 0
    assert "Wrote 6 vector(s) for 6 stored message(s) into index semantic-recall-fake-bow-128." in (
        everything.out
    )
    scoped = loaded("reindex", "--thread", "conv-garden")
    assert "Wrote 2 vector(s) for 2 stored message(s)" in scoped.out
    assert loaded("stats", "--json").json()["vectors"] == 6


def test_reindex_fills_a_new_chroma_folder_and_stats_then_reads_it(
    loaded: Cli, tmp_path: Path
) -> None:
    """The reading commands refuse a chroma:// folder that holds no index; `reindex`, which
    writes every vector, may create one (a lost or moved index, rebuilt from the messages)."""
    fresh = tmp_path / "rebuilt"
    urls = ["--storage", f"sqlite:///{loaded.store / 'messages.sqlite3'}"]
    urls += ["--vector", f"chroma:///{fresh}"]
    before = unit.run(loaded.capsys, *urls, "search", "garden", "--resource", "alice")
    assert before.code == 3
    assert not fresh.exists()
    assert unit.run(loaded.capsys, *urls, "reindex").code == 0
    after = unit.run(loaded.capsys, *urls, "stats", "--json")
    assert after.code == 0
    assert after.json()["vectors"] == loaded("stats", "--json").json()["vectors"] > 0


@pytest.mark.parametrize("missing_only", [["--missing-only"], []])
def test_reindex_says_what_orphaned_vectors_it_deleted(
    loaded: Cli, missing_only: list[str]
) -> None:
    """Both reindexes delete the vectors whose message is gone (the full one once left
    them) and say so; --missing-only once said only what it wrote."""
    from langchain_semantic_recall import SQLiteStorage

    storage = SQLiteStorage(loaded.store / "messages.sqlite3")
    storage.delete_thread("conv-garden", retire=False)  # the messages alone: 2 orphans
    storage.close()
    assert loaded("stats", "--json").json()["orphan_vectors"] == 2
    repaired = loaded("reindex", *missing_only)
    assert repaired.code == 0
    assert ("Wrote 0 missing vector(s)" if missing_only else "Wrote 4 vector(s)") in repaired.out
    assert "Deleted 2 vector(s) whose message is no longer stored." in repaired.out
    assert loaded("stats", "--json").json()["orphan_vectors"] == 0
    assert "Deleted" not in loaded("reindex", *missing_only).out


@pytest.mark.parametrize(
    "scope",
    [
        ["--thread", "nope"],
        ["--resource", "nobody"],
        ["--thread", "conv-garden", "--resource", "bob"],
    ],
)
def test_reindex_of_an_unknown_scope_is_not_found(loaded: Cli, scope: list[str]) -> None:
    """A misspelt thread or resource once wrote "0 vector(s)" and exited 0."""
    missing = loaded("reindex", *scope)
    assert missing.code == 3
    assert "list them with 'semantic-recall threads'" in missing.err


# --- export ------------------------------------------------------------------------------


def test_export_onto_a_file_of_the_local_store_is_refused(loaded: Cli) -> None:
    """`export -o STORE/messages.sqlite3` emptied the store (with --path, as with URLs)."""
    before = loaded("export", "--resource", "alice").out
    assert before
    for output in (loaded.store / "messages.sqlite3", loaded.store / "chroma" / "a.jsonl"):
        result = loaded("export", "--resource", "alice", "-o", str(output))
        assert (result.code, result.out) == (2, ""), output
        assert "is a file of the store being read" in result.err
    assert not (loaded.store / "chroma" / "a.jsonl").exists()
    assert loaded("export", "--resource", "alice").out == before
    beside = loaded("export", "--resource", "alice", "-o", str(loaded.store / "alice.jsonl"))
    assert beside.code == 0  # beside the store's files is allowed


def test_export_round_trips_through_ingest(loaded: Cli, tmp_path: Path) -> None:
    engine = loaded.engine()
    tool_turn = [
        HumanMessage("look this up", id="q"),
        AIMessage("", id="call", tool_calls=[{"name": "find", "args": {}, "id": "c1"}]),
        ToolMessage("found it", tool_call_id="c1", id="res"),
        AIMessage("Here it is.", id="ans"),
    ]
    engine.index(tool_turn, thread_id="tools", resource_id="alice")
    out = loaded("export", "--resource", "alice")
    assert out.code == 0
    lines = out.out.splitlines()
    assert len(lines) == 10
    assert json.loads(lines[0])["thread"] == "conv-garden"
    target = tmp_path / "alice.jsonl"
    written = loaded("export", "--resource", "alice", "--output", str(target))
    assert written.out == f"Wrote 10 message(s) of 3 thread(s) to {target}.\n"
    assert target.read_text(encoding="utf-8").splitlines() == lines
    # Into a fresh store: the same messages, ids, times and types.
    fresh = Cli(loaded.capsys, tmp_path / "fresh")
    assert fresh("ingest", str(target)).code == 0
    assert fresh("export", "--resource", "alice").out.splitlines() == lines
    restored = fresh.engine()
    stored = {m.id: m for m in restored.storage.list_messages()}
    assert isinstance(stored["call"].to_message(), AIMessage)
    assert stored["call"].to_message().tool_calls[0]["id"] == "c1"  # type: ignore[attr-defined]
    assert stored["res"].to_message().tool_call_id == "c1"  # type: ignore[attr-defined]
    # Into the same store: nothing new.
    again = loaded("ingest", str(target), "--json").json()
    assert again["messages_added"] == 0
    assert again["skipped"] == {"already stored": 10}
    one = loaded("export", "--resource", "alice", "--thread", "tools").out.splitlines()
    assert len(one) == 4
    assert loaded("export", "--resource", "bob").code == 3
    assert loaded("export", "--resource", "bob", "--thread", "tools").code == 3


# --- errors and colour -------------------------------------------------------------------


def test_unexpected_errors_and_interrupts_have_exit_codes(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(args: Any) -> int:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(admin, "run_stats", boom)
    failed = loaded("stats")
    assert failed.code == 1
    assert failed.err == (
        "semantic-recall: error: internal error (RuntimeError: disk on fire); run with -v "
        "for the details, and report it with the command you ran\n"
    )
    verbose = loaded("-v", "stats")
    assert "Traceback" in verbose.err

    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(admin, "run_stats", interrupted)
    assert loaded("stats").code == 130

    def no_disk(args: Any) -> int:
        raise PermissionError(13, "Permission denied", "/store")

    monkeypatch.setattr(admin, "run_stats", no_disk)
    denied = loaded("stats")
    assert denied.code == 1
    assert denied.err == "semantic-recall: error: Permission denied: /store\n"


# --- the real model, the default path ----------------------------------------------------


@pytest.mark.slow
def test_the_default_embedder_end_to_end(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, export_file: Path
) -> None:
    run = Cli(capsys, tmp_path / "store")
    assert run("ingest", str(export_file), "--resource", "alice").code == 0
    stats = run("stats", "--json").json()
    assert stats["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert (stats["dimension"], stats["vectors"]) == (384, 6)
    assert stats["relevance"] == "fitted for all-MiniLM-L6-v2 (384-d)"
    # no shared word: found on meaning alone (0.2.0's gate hid it in a store this small)
    hits = run("search", "food allergy", "--resource", "alice", "--json").json()["hits"]
    assert hits[0]["message"]["text"] == "My sister is vegetarian and I'm allergic to peanuts."
    shown = run("inspect", "--resource", "alice", "--thread", "next", "peanut-free snack?").out
    assert "I'm allergic to peanuts." in shown
    assert run("forget", "--resource", "alice", "--yes").code == 0
    gone = run("stats", "--resource", "alice", "--json")
    assert gone.code == 3  # nothing of alice is left: no message, no vector


@pytest.mark.slow
def test_the_console_script(tmp_path: Path) -> None:
    """The installed entry point passes exit codes and streams through to the shell."""
    script = Path(sys.executable).parent / "semantic-recall"
    missing = subprocess.run(
        [str(script), "--path", str(tmp_path / "none"), "stats"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 3
    assert missing.stdout == ""
    assert missing.stderr.startswith("semantic-recall: error: no store at")


# --- ingest that reports and continues (issue 12) ----------------------------------------


def test_ingest_skips_a_bad_id_and_loads_the_rest(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rows = [
        {"resource": "bob", "thread": "b1", "role": "user", "content": "one"},
        {"resource": "bob", "thread": "b1", "role": "user", "content": "two", "id": "x\x00y"},
        {"resource": "bob", "thread": "b1", "role": "user", "content": "three", "id": " "},
        {"resource": "bob", "thread": "b1", "role": "user", "content": "four", "created_at": "?"},
        {"resource": "bob", "thread": "b1", "role": "user", "content": "five"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    result = cli("ingest", str(path))
    assert result.code == 1
    assert "messages   2 added" in result.out
    assert "skipped    3" in result.out
    assert "line 2: " in result.out
    assert "NUL" in result.out
    assert "line 3: " in result.out
    assert "line 4: " in result.out
    assert "3 line(s) of" in result.err
    assert cli("stats", "--json").json()["messages"] == 2


def test_ingest_decodes_a_bom_and_utf16_and_names_other_encodings(cli: Cli, tmp_path: Path) -> None:
    line = json.dumps({"resource": "bob", "thread": "b1", "role": "user", "content": "hé"})
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + line.encode())
    assert cli("ingest", str(bom)).code == 0
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_bytes(line.replace("b1", "b2").encode("utf-16"))
    assert cli("ingest", str(utf16)).code == 0
    assert cli("stats", "--json").json()["messages"] == 2
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(line.replace("\\u00e9", "é").encode("latin-1"))
    result = cli("ingest", str(latin))
    assert result.code == 1
    assert result.err.count("\n") == 1
    assert "is not UTF-8 text" in result.err
    assert "convert it" in result.err


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("export.zip", b"PK\x03\x04 broken", "not a readable zip"),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ("numbers.json", b"[1, 2, 3]", "not a ChatGPT export"),
        ("empty.json", b'[{"title": "no mapping"}]', "nothing in"),
    ],
)
def test_ingest_of_a_broken_export_is_a_clear_error(
    cli: Cli, tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    result = cli("ingest", str(path), "--format", "chatgpt", "--resource", "alice")
    assert result.code == 1
    assert message in result.err
    assert "unexpected" not in result.err


@pytest.mark.parametrize("file", ["messages.sqlite3", "chroma/chroma.sqlite3"])
def test_a_damaged_store_is_named_with_a_next_step(loaded: Cli, file: str) -> None:
    # A copy: this process's open connections and Chroma clients cache the original.
    copy = loaded.store.parent / "damaged"
    shutil.copytree(loaded.store, copy)
    damaged = copy / file
    for journal in (
        damaged.with_name(damaged.name + "-wal"),
        damaged.with_name(damaged.name + "-shm"),
    ):
        journal.unlink(missing_ok=True)  # only the damaged file's: the other keeps its data
    damaged.write_bytes(b"this is not a database at all " * 400)
    result = loaded("--path", str(copy), "stats")
    assert result.code == 1
    assert "unexpected" not in result.err
    assert "damaged" in result.err or "could not be read" in result.err
    assert "backup" in result.err


def test_the_rerun_after_an_interrupted_import_reports_missing_vectors(
    loaded: Cli, export_file: Path
) -> None:
    # What a SIGKILL between the message write and the vector write leaves behind.
    engine = loaded.engine()
    ids = [m.id for m in engine.storage.list_messages(limit=2)]
    engine.vector_store.delete(engine.ensure_index().name, message_ids=ids)
    assert engine.stats().missing_vectors == 2
    engine.storage.close()
    rerun = loaded("ingest", str(export_file), "--resource", "alice")
    assert rerun.code == 1
    assert "2 stored message(s) lack a vector" in rerun.out
    assert "--repair" in rerun.err
    repaired = loaded("ingest", str(export_file), "--resource", "alice", "--repair")
    assert repaired.code == 0, repaired.err
    assert "repaired   2 missing vector(s) written" in repaired.out
    assert loaded("stats", "--json").json()["missing_vectors"] == 0


def test_forget_older_than_deletes_old_messages_of_every_resource(
    loaded: Cli, export_file: Path
) -> None:
    bob = export_file.parent / "bob.json"
    recent = chatgpt_conversation("bob-1", "Bob", [("user", "tomato sauce")], start=time.time())
    bob.write_text(json.dumps([recent]), encoding="utf-8")
    assert loaded("ingest", str(bob), "--resource", "bob").code == 0
    done = loaded("forget", "--older-than", "90d", "--yes")
    assert done.code == 0, done.err
    assert "Forgot 6 message(s) created before" in done.out
    assert "UTC of every resource, and their vectors (alice 6)." in done.out
    assert "Threads left empty: conv-garden, conv-trip." in done.out
    alice = loaded("stats", "--resource", "alice", "--json").json()
    assert (alice["messages"], alice["vectors"], alice["orphan_vectors"]) == (0, 0, 0)
    assert loaded("stats", "--resource", "bob", "--json").json()["messages"] == 1
    again = loaded("forget", "--older-than", "90d", "--yes")
    assert "Forgot 0 message(s)" in again.out


def test_forget_before_a_date_of_one_resource_asks_first(
    loaded: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # a pipe, not a terminal
    assert loaded("forget", "--before", "2024-01-15T10:33", "--resource", "alice").code == 2
    monkeypatch.setattr(sys, "stdin", Tty("y\n"))
    done = loaded("forget", "--before", "2024-01-15T10:33", "--resource", "alice")
    assert done.code == 0, done.err
    assert "Delete every message created before 2024-01-15 10:33 UTC of resource alice" in done.err
    assert "Forgot 2 message(s) created before" in done.out  # the trip's first exchange
    kept = [m.id for m in loaded.engine().storage.list_messages()]
    assert kept == ["conv-garden-0", "conv-garden-3", "conv-trip-3", "conv-trip-4"]


def test_forget_by_date_refuses_what_it_cannot_read(loaded: Cli) -> None:
    for argv in (
        ["--older-than", "3m"],
        ["--older-than", "0d"],
        ["--before", "last week"],
        ["--thread", "conv-trip", "--before", "2024-01-01"],
        [],
    ):
        result = loaded("forget", *argv, "--yes")
        assert result.code == 2, argv
    assert loaded("forget", "--older-than", "1d", "--resource", "nobody", "--yes").code == 3
    assert loaded("stats", "--json").json()["messages"] == 6


# --- the demo ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_says_what_to_run_next_and_each_command_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --path DIR` keeps its store and prints commands to look inside: each runs."""
    monkeypatch.setenv("COLUMNS", "100")
    kept = tmp_path / "demo store"
    assert main(["demo", "--path", str(kept)]) == 0
    out = capsys.readouterr().out
    assert f"The store stays in {kept}." in out
    commands = [line.strip() for line in out.splitlines() if line.startswith("  semantic-recall ")]
    assert len(commands) == 3
    assert "inspect --resource alice --thread new-chat" in commands[2]  # as docs/cli.md
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == ["semantic-recall", "--path", str(kept)]
        assert main(argv[1:]) == 0, command
        assert capsys.readouterr().out
    assert main(["demo"]) == 0
    assert "semantic-recall demo --path DIR" in capsys.readouterr().out


def test_a_store_another_embedder_made_is_refused_not_searched_empty(
    cli: Cli, export_file: Path
) -> None:
    """Every command that embeds or counts chunks would miss the vectors: a search finds
    nothing, stats calls each one missing, reindex embeds the store again beside them. It
    says so instead; the message-only commands, and forget (below), still work."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    with SemanticRecall.local(cli.store, embeddings=FakeEmbeddings(16, "another-model")) as m:
        m.index(["I keep bees on the roof."], thread_id="t1", resource_id="alice")
    for command in (
        ["stats"],
        ["search", "bees", "--resource", "alice"],
        ["reindex", "--missing-only"],
        ["ingest", str(export_file), "--resource", "alice"],
    ):
        result = cli(*command)
        assert result.code == 1, command
        assert "was not embedded by the command line's model" in result.err, command
        assert "another-model (16-d" in result.err
        assert "--vectors reembed" in result.err
    assert "t1" in cli("threads").out
    assert cli("stats", "--json").code == 1


@pytest.mark.parametrize("named", [False, True], ids=["its-only-index", "index-name"])
@pytest.mark.parametrize("what", ["thread", "resource"])
def test_forget_and_purge_work_on_a_store_another_embedder_made(
    cli: Cli, named: bool, what: str
) -> None:
    """Deleting needs no embedding: a store written from Python with another model (its
    only index, or one named by --index-name) is forgotten and purged from the command
    line. Refused before (nothing deleted), or with --index-name the messages deleted
    and the index refused after, its vectors left, text and all."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    made, name = FakeEmbeddings(16, "another-model"), "theirs" if named else None
    with SemanticRecall.local(cli.store, embeddings=made, index_name=name) as m:
        m.index(["I keep bees on the roof."], thread_id="t1", resource_id="alice")
        m.index(["bob's own words"], thread_id="t2", resource_id="bob")
    target = ["--thread", "t1"] if what == "thread" else ["--resource", "alice"]
    naming = ["--index-name", "theirs"] if named else []
    forgot = cli(*naming, "forget", *target, "--yes")
    assert forgot.code == 0, forgot.err
    assert "1 message(s) and their vectors deleted" in forgot.out
    assert "not fitted" not in forgot.err  # no search: no word on the relevance model
    assert cli("purge").code == 0
    with SemanticRecall.local(cli.store, embeddings=made, index_name=name) as m:
        assert (m.stats().messages, m.stats().vectors, m.stats().orphan_vectors) == (1, 1, 0)
        assert m.storage.list_threads("alice") == []
    searched = cli(*naming, "search", "bees", "--resource", "bob")  # it embeds: refused
    assert searched.code == 1
    assert "another-model (16-d" in searched.err


def test_stats_names_the_indexes_of_other_embedders_it_does_not_count(
    loaded: Cli,
) -> None:
    """A store indexed by the command line's model and, from Python, by another: stats
    counts the first and says the second is there (its vectors are in no count)."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    assert loaded("stats", "--json").json()["other_indexes"] == []
    with SemanticRecall.local(loaded.store, embeddings=FakeEmbeddings(16, "another-model")) as m:
        m.reindex()  # every stored message, into the other model's own index
    both = loaded("stats", "--json").json()
    assert both["vectors"] == 6
    assert both["other_indexes"] == [
        {"name": "semantic-recall-another-model-16", "model": "another-model", "dimension": 16}
    ]
    text = loaded("stats").out
    line = "  also       index semantic-recall-another-model-16 (another-model, 16 dimensions)"
    assert line + ": not counted here" in text


def _another_index(store: Path) -> tuple[Any, str, int]:
    """Index the store's every message with another model too: (embedder, index, vectors)."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    other = FakeEmbeddings(16, "another-model")
    with SemanticRecall.local(store, embeddings=other) as m:
        m.reindex()
        return other, m.ensure_index().name, m.stats().vectors


def _vectors_of(store: Path, embeddings: Any, scope: ScopeFilter | None = None) -> tuple[int, int]:
    """(the vectors of `scope` in `embeddings`' index, its orphan vectors)."""
    from langchain_semantic_recall import SemanticRecall

    with SemanticRecall.local(store, embeddings=embeddings) as m:
        held = len(m.vector_store.message_ids(m.ensure_index().name, scope))
        return held, m.stats().orphan_vectors


def test_forget_deletes_in_every_index_by_thread_and_by_date(loaded: Cli) -> None:
    """A thread or resource is forgotten in every index of the store, another embedder's
    too (opened under the model it recorded). A forget by date no longer knows which
    messages it deleted: there it deletes every vector whose message is gone. It exited
    1 saying the other index may keep them, so a retention job failed every run."""
    other, index, kept = _another_index(loaded.store)
    garden = _vectors_of(loaded.store, other, ScopeFilter(thread_id="conv-garden"))[0]
    assert garden
    forgot = loaded("forget", "--thread", "conv-garden", "--yes")
    assert forgot.code == 0, forgot.err
    assert "Forgot thread conv-garden" in forgot.out
    also = f"Also deleted the vectors of {garden} message(s) in index {index} (another-model)."
    assert also in forgot.out
    assert _vectors_of(loaded.store, other) == (kept - garden, 0)
    aged = loaded("forget", "--older-than", "1d", "--yes")
    assert aged.code == 0, aged.err
    assert f"in index {index} (another-model)" in aged.out
    assert _vectors_of(loaded.store, other) == (0, 0)  # the sample's turns are years old


def test_forget_finds_the_vectors_another_index_kept_of_what_python_forgot(
    loaded: Cli,
) -> None:
    """An app forgot alice through its own index; the command line's forget of her found
    no message and no vector in its index, said "no conversations" (exit 3) and left the
    other index's vectors, text and all (a review)."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    other, _, _ = _another_index(loaded.store)
    with SemanticRecall.local(loaded.store, embeddings=FakeEmbeddings()) as m:
        assert m.forget_resource("alice")
    alice = ScopeFilter(resource_id="alice")
    assert _vectors_of(loaded.store, other, alice)[0]
    again = loaded("forget", "--resource", "alice", "--yes")
    assert again.code == 0, again.err
    assert "Forgot what was left of resource alice" in again.out
    assert _vectors_of(loaded.store, other, alice) == (0, 0)


def test_purge_and_move_reach_the_other_indexes(loaded: Cli) -> None:
    """purge deleted the orphan vectors of its own index only, and rebuilt the folder with
    the others' copied as live rows; move left the thread's vectors in another index
    under the old owner, so a forget of that owner deleted them (a review)."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    other, index, _ = _another_index(loaded.store)
    with SemanticRecall.local(loaded.store, embeddings=FakeEmbeddings()) as m:
        assert m.forget_thread("conv-garden")  # from Python, through one index
    assert _vectors_of(loaded.store, other)[1]
    purged = loaded("purge")
    assert purged.code == 0, purged.err
    assert f"index {index} (another-model): deleted the vectors of" in purged.out
    assert _vectors_of(loaded.store, other)[1] == 0
    thread = next(t for t in loaded("threads", "--json").json() if t["resource"] == "alice")
    moved = loaded("move", "--thread", thread["thread"], "--to", "bob")
    assert moved.code == 0, moved.err
    assert f"Index {index} (another-model): its vectors of the thread deleted" in moved.out
    in_thread = ScopeFilter(thread_id=thread["thread"])
    assert _vectors_of(loaded.store, other, in_thread) == (0, 0)  # missing, not misfiled
    with SemanticRecall.local(loaded.store, embeddings=other) as m:
        m.reindex(missing_only=True)  # its own embedder writes them under bob
        bob = ScopeFilter(resource_id="bob", thread_id=thread["thread"])
        assert m.vector_store.message_ids(m.ensure_index().name, bob)


def test_forget_on_several_other_embedders_indexes_names_the_flag_to_give(cli: Cli) -> None:
    """It said to open the store from Python, though --index-name lets forget work."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    for size in (8, 16):
        with SemanticRecall.local(cli.store, embeddings=FakeEmbeddings(size, "another")) as m:
            m.index(["I keep bees."], thread_id="t1", resource_id="alice")
    refused = cli("forget", "--thread", "t1", "--yes")
    assert refused.code == 1
    names = "semantic-recall-another-16, semantic-recall-another-8"
    assert f"Give --index-name with one of {names}: this command embeds nothing" in refused.err
    named = cli("--index-name", "semantic-recall-another-8", "forget", "--thread", "t1", "--yes")
    assert named.code == 0, named.err
    assert "in index semantic-recall-another-16 (another)" in named.out


def test_every_command_closes_the_store_it_opened(loaded: Cli) -> None:
    """Commands run one after another in one process (a notebook, a script calling `main`):
    each leaves the store closed, without waiting for the garbage collector. A `purge`
    after a `forget` found the store "open elsewhere" when a collection had not run."""
    import gc

    from langchain_semantic_recall.storage.sqlite_schema import in_use

    file = loaded.store / "messages.sqlite3"
    commands = [
        ("stats",),
        ("threads",),
        ("search", "garden", "--resource", "alice"),
        ("inspect", "what about the garden?", "--resource", "alice", "--thread", "new"),
        ("reindex", "--missing-only"),
        ("forget", "--older-than", "3650d", "--yes"),
        ("forget", "--before", "2000-01-01", "--resource", "alice", "--yes"),
        ("purge",),
    ]
    gc.disable()  # a connection left in a reference cycle stays open
    try:
        for argv in commands:
            result = loaded(*argv)
            assert result.code == 0, (argv, result.err)
            assert not in_use(file), f"{argv[0]} left the store open"
    finally:
        gc.enable()


def test_a_store_path_under_a_tilde_is_one_store_in_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`local("~/memory")` split the store: SQLite in the home folder, Chroma in a folder
    named "~" of the working one, so a run from elsewhere found no vector."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    home, work, elsewhere = tmp_path / "home", tmp_path / "work", tmp_path / "elsewhere"
    for folder in (home, work, elsewhere):
        folder.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    turn = [HumanMessage("I am allergic to peanuts"), AIMessage("Noted.")]
    with SemanticRecall.local("~/memory", embeddings=FakeEmbeddings()) as memory:
        memory.index(turn, thread_id="t1", resource_id="alice")
    assert {"chroma", "messages.sqlite3"} <= {p.name for p in (home / "memory").iterdir()}
    assert list(work.iterdir()) == []
    monkeypatch.chdir(elsewhere)
    with SemanticRecall.local("~/memory", embeddings=FakeEmbeddings()) as memory:
        stats = memory.stats(resource_id="alice")
        assert (stats.messages, stats.vectors, stats.missing_vectors) == (2, 2, 0)
    assert main(["--path", "~/memory", "threads"]) == 0  # quoted: no shell expanded it
    assert "t1" in capsys.readouterr().out
    assert list(elsewhere.iterdir()) == []


def test_store_urls_and_command_paths_under_a_tilde_name_the_home_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    embedder: unit.Embedder,
) -> None:
    """`sqlite:///~/m/...` named a folder '~' of the working one (not found), so
    `migrate` onto the same store through '~' URLs copied it onto itself, and
    `demo --path '~/m'` loaded its history into the user's existing store."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with SemanticRecall.local("~/m", embeddings=FakeEmbeddings()) as memory:
        memory.index([HumanMessage("lisbon", id="h1")], thread_id="t1", resource_id="alice")
    urls = ["--storage", "sqlite:///~/m/messages.sqlite3", "--vector", "chroma:///~/m/chroma"]
    assert main([*urls, "threads"]) == 0
    assert "t1" in capsys.readouterr().out

    to = ["--to-storage", urls[1], "--to-vector", urls[3]]
    assert main(["--path", "~/m", "migrate", *to]) == 2
    assert "the target is the source" in capsys.readouterr().err

    assert main(["demo", "--path", "~/m"]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert list(work.iterdir()) == []
    with SemanticRecall.local("~/m", embeddings=FakeEmbeddings()) as memory:
        assert memory.stats().messages == 1


def test_a_store_whose_vector_index_was_never_written_says_how_to_repair(loaded: Cli) -> None:
    """An ingest killed before it made `chroma/` left the messages alone: `stats` and
    `search` then said "no Chroma index at PATH to open read-only; check the path"
    (exit 1), while the path was right and `reindex` repairs it."""
    import shutil

    shutil.rmtree(loaded.store / "chroma")
    said = loaded("search", "garden", "--resource", "alice")
    assert (said.code, said.out) == (3, ""), said.err
    assert "has no vector index" in said.err
    assert "'semantic-recall reindex' embeds them" in said.err
    # `stats` counts them: every embeddable message lacks its vector, and says the repair
    # (it exited 3 here, though with an empty `chroma/` it counted them).
    said = loaded("stats")
    assert said.code == 0, said.err
    assert "semantic-recall reindex --missing-only" in said.out
    stats = loaded("stats", "--json").json()
    assert stats["missing_vectors"] == stats["embeddable"] > 0
    assert stats["vectors"] == 0
    assert not (loaded.store / "chroma").exists()  # counting made no index
    assert loaded("reindex").code == 0
    stats = loaded("stats", "--json").json()
    assert stats["messages"] > 0
    assert (stats["missing_vectors"], stats["orphan_vectors"]) == (0, 0)


def test_forget_of_an_unknown_thread_creates_no_vector_index(loaded: Cli) -> None:
    """A mistyped forget looked for vectors left of it by opening the engine, which made
    an empty Chroma index on a store that had none (and warned of a new index)."""
    import shutil

    shutil.rmtree(loaded.store / "chroma")
    said = loaded("forget", "--thread", "typo", "--yes")
    assert (said.code, said.out) == (3, "")
    assert "no thread 'typo'" in said.err
    assert "index" not in said.err
    assert not (loaded.store / "chroma").exists()


def test_a_store_on_a_shared_vector_server_refuses_another_stores_index(
    embedder: Embedder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two stores on one Chroma, B under its own index_name. Given B's URLs without
    --index-name, every command opened the default index, A's: forget said B's vectors
    were deleted and left them, stats named a repair that deleted A's vectors as orphans,
    migrate copied A's vectors, users' text and all, into B's copy (an audit). Refused
    now, before anything changes; with --index-name it works."""
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    chroma = f"chroma:///{tmp_path / 'shared'}"
    a, b = (f"sqlite:///{tmp_path / name}.sqlite3" for name in ("a", "b"))
    with SemanticRecall.from_url(storage=a, vector=chroma, embeddings=FakeEmbeddings()) as m:
        m.index(["alice's passport is X1"], thread_id="a1", resource_id="alice")
    with SemanticRecall.from_url(
        storage=b, vector=chroma, embeddings=FakeEmbeddings(), index_name="b-index"
    ) as m:
        m.index(["carol drives a red Volvo"], thread_id="c1", resource_id="carol")
    urls = ("--storage", b, "--vector", chroma)

    def cli(*argv: str) -> Result:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    copy = tmp_path / "copy"
    to = ("--to-storage", f"sqlite:///{copy}/m.sqlite3", "--to-vector", f"chroma:///{copy}/c")
    for command in (
        ("stats",),
        ("reindex", "--missing-only"),
        ("search", "volvo", "--resource", "carol"),
        ("forget", "--resource", "carol", "--yes"),
        ("migrate", *to, "--embeddings", "tests.fakes:FakeEmbeddings"),
    ):
        refused = cli(*urls, *command)
        assert refused.code == 1, command
        assert "another store's index?" in refused.err, command
        assert "Give --index-name" in refused.err
    assert not copy.exists()
    with SemanticRecall.from_url(storage=a, vector=chroma, embeddings=FakeEmbeddings()) as m:
        assert (m.stats().messages, m.stats().vectors, m.stats().orphan_vectors) == (1, 1, 0)
        default = m.ensure_index().name
    # The check is a sample: an index named on purpose is the user's choice (a store whose
    # first messages have no vector there was refused with no way round, a review).
    assert f"if it is this one, name it: --index-name {default}" in refused.err
    assert cli(*urls, "--index-name", default, "stats").code == 0
    # A forget through an index that holds none of the user's vectors says so.
    missed = cli(*urls, "--index-name", default, "forget", "--thread", "c1", "--yes")
    assert missed.code == 0, missed.err
    assert f"1 message(s) deleted; index {default} held no vector of them" in missed.out
    with SemanticRecall.from_url(storage=a, vector=chroma, embeddings=FakeEmbeddings()) as m:
        assert (m.stats().messages, m.stats().vectors, m.stats().orphan_vectors) == (1, 1, 0)
    with SemanticRecall.from_url(
        storage=b, vector=chroma, embeddings=FakeEmbeddings(), index_name="b-index"
    ) as m:
        assert (m.stats().messages, m.stats().orphan_vectors) == (0, 1)  # carol's, left
    forgot = cli(*urls, "--index-name", "b-index", "forget", "--resource", "carol", "--yes")
    assert forgot.code == 0, forgot.err  # what was left of her: the right index
    with SemanticRecall.from_url(
        storage=b, vector=chroma, embeddings=FakeEmbeddings(), index_name="b-index"
    ) as m:
        assert (m.stats().messages, m.stats().vectors, m.stats().orphan_vectors) == (0, 0, 0)


def test_a_vector_url_says_where_the_data_is_not_how_to_reach_it() -> None:
    """`?request_timeout=5` or the default database named made another place, so a migrate
    keeping the index was refused as one into another store's index (a review)."""
    from langchain_semantic_recall.cli.places import place

    plain = place("http://chroma:8000")
    assert place("http://chroma:8000?request_timeout=5") == plain
    assert place("http://chroma:8000?tenant=default_tenant&database=default_database") == plain
    assert place("http://chroma:8000?database=staging") != plain
