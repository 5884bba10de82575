"""The CLI in this process without a store: help, usage errors, version, colour and tables."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.cli import (
    _SUBCOMMANDS,
    admin,
    build_parser,
    common,
    main,
    narrowing,
    render,
)
from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.storage import sqlite_schema
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from tests.fakes import FakeEmbeddings, UnusableFor


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """Runs ``semantic-recall --path STORE ...`` in-process and captures its output."""

    def __init__(self, capsys: pytest.CaptureFixture[str], store: Path) -> None:
        self.capsys = capsys
        self.store = store

    def __call__(self, *argv: str) -> Result:
        code = main(["--path", str(self.store), *argv])
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def engine(self) -> SemanticRecall:
        return SemanticRecall.local(self.store, embeddings=FakeEmbeddings())


class Embedder:
    """The fake embedders the CLI creates; set ``fail`` to make the next ones fail."""

    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.unusable: str | None = None
        """A word whose texts the next ones answer with an all-zero vector."""

    def create(self) -> FakeEmbeddings:
        fake = (
            FakeEmbeddings() if self.unusable is None else UnusableFor(self.unusable, dimension=128)
        )
        fake.fail = self.fail
        return fake


@pytest.fixture
def embedder(monkeypatch: pytest.MonkeyPatch) -> Embedder:
    """The CLI's embedder becomes the fast fake (the hidden hook, no public flag)."""
    switch = Embedder()
    monkeypatch.setattr(common, "create_embeddings", switch.create)
    return switch


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEMANTIC_RECALL_PATH", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "100")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], tmp_path: Path, embedder: Embedder) -> Cli:
    return Cli(capsys, tmp_path / "store")


class Tty(io.StringIO):
    """A stdin that says it is a terminal and answers with its text."""

    def isatty(self) -> bool:
        return True


def subcommands() -> list[str]:
    parser = build_parser()
    choices = next(a.choices for a in parser._actions if isinstance(a.choices, dict))
    return sorted(choices)


def test_every_subcommand_module_registers() -> None:
    names = set(subcommands())
    assert {"ingest", "search", "inspect", "threads", "show", "stats", "forget"} <= names
    assert {"reindex", "export", "demo"} <= names
    assert len(_SUBCOMMANDS) == len(set(_SUBCOMMANDS))


@pytest.mark.parametrize("command", [[], *[[name] for name in subcommands()]])
def test_help_on_everything(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: semantic-recall")
    if not command:
        assert "exit codes:" in out
        assert "3  not found" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["search"]) == 2
    assert main(["forget", "--thread", "a", "--resource", "b"]) == 2  # one or the other
    assert main(["search", "q", "--range", "1,2,3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "expected N or BEFORE,AFTER" in captured.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("semantic-recall ")


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "q", "--resource", "alice"],
        ["inspect", "--thread", "t", "--resource", "r", "hello"],
        ["threads"],
        ["show", "t"],
        ["stats"],
        ["forget", "--resource", "alice", "--yes"],
        ["reindex"],
        ["export", "--resource", "alice"],
    ],
)
def test_a_missing_store_is_not_found_and_not_created(cli: Cli, argv: list[str]) -> None:
    result = cli(*argv)
    assert result.code == 3
    assert result.out == ""
    assert f"no store at {cli.store}" in result.err
    assert not cli.store.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "q", "--resource", "alice"],
        ["threads"],
        ["stats"],
        ["forget", "--resource", "alice", "--yes"],
        ["ingest", "history.jsonl"],
        ["purge"],
    ],
)
def test_a_file_given_as_the_store_folder_is_named_a_file(cli: Cli, argv: list[str]) -> None:
    """It said "no store at FILE (load conversations with 'semantic-recall ingest' ...)",
    and ingest then said "cannot create the folder FILE ... (File exists)"."""
    cli.store.write_text("not a folder")
    history = jsonl(cli.store.parent / "history.jsonl", LINE)
    argv = [str(history) if a == "history.jsonl" else a for a in argv]
    result = cli(*argv)
    assert (result.code, result.out) == (3, "")
    assert result.err == (
        f"semantic-recall: error: {cli.store} is a file, not a store folder: give the folder "
        "that holds the store's messages.sqlite3 (a new one for ingest)\n"
    )
    database = cli.store.parent / "messages.sqlite3"
    database.write_bytes(b"")
    meant = main(["--path", str(database), *argv])
    assert meant == 3
    assert f"give its folder, --path {cli.store.parent}" in cli.capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["threads"], ["stats"], ["show", "t"], ["search", "q", "--resource", "alice"]]
)
@pytest.mark.parametrize("content", ["empty", "another application's"])
def test_a_sqlite_url_naming_no_store_is_refused_and_left_as_it_was(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    embedder: Embedder,
    argv: list[str],
    content: str,
) -> None:
    """A reading command on another application's database wrote this package's twelve
    tables into it, then read it as an empty store: `stats` called every vector of the
    index orphaned and advised the `reindex` that deletes them. `--path` refused it."""
    import sqlite3

    file = tmp_path / "app.db"
    file.write_bytes(b"")
    if content != "empty":
        with sqlite3.connect(file) as conn:
            conn.execute("CREATE TABLE users (name TEXT)")
    before = file.read_bytes()
    vectors = f"chroma:///{tmp_path / 'chroma'}"
    result = run(capsys, "--storage", f"sqlite:///{file}", "--vector", vectors, *argv)
    assert (result.code, result.out) == (3, "")
    assert "is not a store of this package" in result.err
    assert file.read_bytes() == before
    assert not (tmp_path / "chroma").exists()


@pytest.mark.parametrize("by", ["path", "url"])
def test_ingest_writes_nothing_into_another_applications_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: Embedder, by: str
) -> None:
    """The reading commands called it "not a store of this package", but `ingest` wrote
    its twelve tables into it and switched it to WAL. An empty file still takes a store."""
    import sqlite3

    folder = tmp_path / "other-app"
    folder.mkdir()
    file = folder / "messages.sqlite3"
    with sqlite3.connect(file) as conn:
        conn.execute("CREATE TABLE orders (item TEXT)")
        conn.execute("INSERT INTO orders VALUES ('a precious row')")
    conn.close()
    before = file.read_bytes()
    lines = str(jsonl(tmp_path / "h.jsonl", LINE))
    memory = ["--vector", "memory://"]
    store = ["--path", str(folder)] if by == "path" else ["--storage", f"sqlite:///{file}", *memory]
    result = run(capsys, *store, "ingest", lines)
    assert (result.code, result.out) == (3, "")
    assert "is another application's database, not a store of this package" in result.err
    assert file.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["messages.sqlite3"]
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    done = run(capsys, "--storage", f"sqlite:///{empty}", *memory, "ingest", lines)
    assert done.code == 0, done.err


@pytest.mark.parametrize(
    ("vector", "said"),
    [
        ("chromaa:///{tmp}/c", "unknown vector URL"),
        ("chroma://", "has no path"),
        ("memory://junk", "takes no path"),
        ("chroma:///{tmp}/c?max_loaded=abc", "max_loaded"),
        ("chroma:///{tmp}/c?bogus=1", "bogus"),
    ],
)
def test_ingest_with_a_mistyped_vector_url_creates_no_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: Embedder, vector: str, said: str
) -> None:
    """A usage error (exit 2) that still left a new SQLite store behind, which the next
    command then read as a store."""
    history = jsonl(tmp_path / "history.jsonl", LINE)
    file = tmp_path / "new.sqlite3"
    urls = ["--storage", f"sqlite:///{file}", "--vector", vector.format(tmp=tmp_path)]
    result = run(capsys, *urls, "ingest", str(history))
    assert result.code == 2, result.err
    assert said in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl"]


def test_a_damaged_messages_file_is_not_sent_to_reindex(cli: Cli) -> None:
    """ingest into a store whose messages.sqlite3 is not a database advised "rebuild the
    index with 'semantic-recall reindex'", which cannot rebuild that file."""
    cli.store.mkdir()
    (cli.store / "messages.sqlite3").write_bytes(bytes(range(256)) * 20)
    history = jsonl(cli.store.parent / "history.jsonl", LINE)
    for argv in (["ingest", str(history)], ["threads"], ["stats"]):
        result = cli(*argv)
        assert result.code != 0, argv
        assert "reindex" not in result.err, (argv, result.err)
        assert "move it aside" in result.err, (argv, result.err)


def test_a_rust_panic_is_a_one_line_error_not_a_traceback(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chromadb on a damaged chroma.sqlite3 panics (pyo3's PanicException, a BaseException
    the command line did not catch): a traceback and no advice."""
    from langchain_semantic_recall.cli import threads

    panic = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})

    def run(args: argparse.Namespace) -> int:
        raise panic("called `Result::unwrap()` on an `Err` value")

    monkeypatch.setattr(threads, "run_threads", run)
    result = cli("threads")
    assert result.code == 1
    assert "a native library failed (PanicException" in result.err
    assert "Traceback" not in result.err


def test_the_v_the_error_line_asks_for_works_after_the_command_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "run with -v for the details", and `semantic-recall stats -v` said "unrecognized
    arguments: -v" (only `semantic-recall -v stats` worked)."""

    def boom(args: argparse.Namespace) -> int:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(admin, "run_stats", boom)
    plain = run(capsys, "stats")
    assert plain.code == 1
    assert "run with -v for the details" in plain.err
    for argv in (["stats", "-v"], ["-v", "stats"], ["stats", "--verbose"]):
        verbose = run(capsys, *argv)
        assert verbose.code == 1, argv
        assert "Traceback" in verbose.err
        assert "RuntimeError: disk on fire" in verbose.err
    assert build_parser().parse_args(["demo", "-v"]).verbose
    assert build_parser(["eval"]).parse_args(["eval", "jsonl", "x.jsonl", "-v"]).verbose


def test_colour_only_on_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = io.StringIO()
    assert render.style("x", "bold", stream=plain) == "x"
    terminal = Tty()
    assert render.style("x", "bold", "green", stream=terminal) == "\033[1;32mx\033[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.style("x", "bold", stream=terminal) == "x"
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: colour stays on (no-color.org)
    assert render.use_colour(terminal)
    monkeypatch.setattr(sys, "stdout", terminal)
    assert render.use_colour()


def test_tables_fit_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    text = render.table(["a", "text"], [["1", "word " * 40]])
    assert all(len(line) <= 60 for line in text.splitlines())
    assert text.splitlines()[1].endswith("…")
    assert render.table(["a"], []) == ""
    assert render.when(None) == "-"
    assert render.human_bytes(512) == "512 B"
    assert render.human_bytes(3 * 1024 * 1024) == "3.0 MB"


def test_parse_age_and_date() -> None:
    assert narrowing.parse_age("90d") == timedelta(days=90)
    assert narrowing.parse_age(" 12W ") == timedelta(weeks=12)
    assert narrowing.parse_age("36h") == timedelta(hours=36)
    assert narrowing.parse_date("2025-01-01") == datetime(2025, 1, 1, tzinfo=UTC)
    assert narrowing.parse_date("2025-01-01T12:00+02:00") == datetime(2025, 1, 1, 10, tzinfo=UTC)


def test_an_age_reaching_before_year_one_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "none")
    assert main(["--path", store, "forget", "--older-than", "99999999999d", "--yes"]) == 2
    assert "--older-than takes a positive number" in capsys.readouterr().err
    assert main(["--path", store, "forget", "--older-than", "800000d", "--yes"]) == 2


def test_since_and_until_take_a_date_or_an_age() -> None:
    assert narrowing.time_bound("30d") == timedelta(days=30)
    assert narrowing.time_bound(" 12h") == timedelta(hours=12)
    assert narrowing.time_bound("2W") == timedelta(weeks=2)
    assert narrowing.time_bound("2025-01-01") == datetime(2025, 1, 1, tzinfo=UTC)
    assert narrowing.time_bound("2025-01-01T12:00+02:00") == datetime(2025, 1, 1, 10, tzinfo=UTC)
    for bad in ("yesterday", "0d", "3m", "-2d", "", "99999999999d"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected an ISO 8601 date"):
            narrowing.time_bound(bad)
    # outside years 1-9999 in UTC: once an OverflowError at the search (exit 1, a traceback)
    for bad in ("0001-01-01T00:00+01:00", "9999-12-31T23:00-05:00"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected an ISO 8601 date"):
            narrowing.time_bound(bad)
        with pytest.raises(InvalidOptionError, match="--before takes"):
            narrowing.parse_date(bad)


def test_a_filter_value_matches_its_text_and_the_number_or_boolean_it_spells() -> None:
    assert narrowing.filter_item("project=apollo") == ("project", ("apollo",))
    assert narrowing.filter_item("sprint=3") == ("sprint", ("3", 3))
    assert narrowing.filter_item("ratio=-0.5") == ("ratio", ("-0.5", -0.5))
    assert narrowing.filter_item("urgent=true") == ("urgent", ("true", True))
    assert narrowing.filter_item("urgent=True") == ("urgent", ("True",))  # JSON's spelling only
    assert narrowing.filter_item("note=a=b, c") == ("note", ("a=b, c",))  # commas stay text
    assert narrowing.filter_item("empty=") == ("empty", ("",))
    assert narrowing.filter_item("big=1e999") == ("big", ("1e999",))
    assert narrowing.filter_item(f"huge={2**60}") == ("huge", (str(2**60),))
    for bad, message in (
        ("project", "expected KEY=VALUE"),
        ("=apollo", "expected KEY=VALUE"),
        ("thread_id=t1", "the store uses it itself"),
        ("resource_id=bob", "the store uses it itself"),
        ("meta_project=x", "the store uses it itself"),
        ("9lives=x", "is not a metadata key"),
        ("$or=x", "repeat --filter: for other keys every one must match"),  # not Python's $in
        ("note=" + "x" * 1001, "at most 1000 characters"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            narrowing.filter_item(bad)


def test_repeated_filters_and_bounds_become_a_search_filter_and_range() -> None:
    now = datetime(2025, 6, 1, tzinfo=UTC)
    args = build_parser().parse_args(
        [
            "search",
            "q",
            "--filter",
            "project=apollo",
            "--filter",
            "project=gemini",
            "--filter",
            "sprint=3",
            "--since",
            "30d",
            "--until",
            "2025-05-31",
        ]
    )
    options = narrowing.narrowing_options(args, now)
    assert options == {
        "filter": {"project": {"$in": ["apollo", "gemini"]}, "sprint": {"$in": ["3", 3]}},
        "since": datetime(2025, 5, 2, tzinfo=UTC),
        "until": datetime(2025, 5, 31, tzinfo=UTC),
    }
    assert narrowing.describe_narrowing(options) == [
        "project=apollo|gemini",
        "sprint=3",
        "since 2025-05-02 00:00 UTC",
        "until 2025-05-31 00:00 UTC",
    ]
    plain = build_parser().parse_args(["search", "q"])
    assert narrowing.narrowing_options(plain, now) == {}
    empty = build_parser().parse_args(["search", "q", "--since", "1d", "--until", "2d"])
    with pytest.raises(common.UsageError, match=r"--since .* must be before --until"):
        narrowing.narrowing_options(empty, now)
    many = [part for n in range(101) for part in ("--filter", f"tag=t{n}")]
    with pytest.raises(common.UsageError, match="--filter: tag has 101 values"):
        narrowing.narrowing_options(build_parser().parse_args(["search", "q", *many]), now)


@pytest.mark.parametrize(
    "command",
    [
        ["search", "q", "--resource", "alice"],
        ["inspect", "--thread", "t", "--resource", "alice", "hi"],
    ],
)
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--filter", "project"], "argument --filter: expected KEY=VALUE"),
        (["--filter", "thread_id=other"], "argument --filter: 'thread_id' is not a metadata key"),
        (["--since", "last week"], "argument --since: expected an ISO 8601 date"),
        (["--until", "2025-13-01"], "argument --until: expected an ISO 8601 date"),
        (
            ["--since", "2025-02-01", "--until", "2025-01-01"],
            "--since (2025-02-01T00:00:00+00:00) must be before --until",
        ),
    ],
)
def test_bad_filters_and_bounds_exit_2_naming_the_flag_before_opening_the_store(
    cli: Cli, command: list[str], argv: list[str], message: str
) -> None:
    result = cli(*command, *argv)
    assert result.code == 2
    assert result.out == ""
    assert message in result.err
    assert not cli.store.exists()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["search", "q", "--resource", ""], "--resource"),
        (["search", "q", "--thread", " "], "--thread"),
        (["inspect", "--thread", "", "hello"], "--thread"),
        (["inspect", "--thread", "t", "--resource", "", "hello"], "--resource"),
        (["threads", "--resource", ""], "--resource"),
        (["show", ""], "THREAD"),
        (["move", "--thread", "t", "--to", ""], "--to"),
        (["move", "--thread", "t", "--to", "b", "--from", " "], "--from"),
        (["stats", "--thread", ""], "--thread"),
        (["forget", "--thread", "", "--yes"], "--thread"),
        (["forget", "--resource", "a\x00b", "--yes"], "--resource"),
        (["reindex", "--resource", ""], "--resource"),
        (["export", "--resource", ""], "--resource"),
        (["ingest", "history.jsonl", "--resource", ""], "--resource"),
    ],
)
def test_a_blank_id_is_a_usage_error_naming_its_option(
    cli: Cli, argv: list[str], flag: str
) -> None:
    """These exited 1 naming the Python argument (resource_id, to_resource), or, for
    ingest, dropped the blank --resource and refused every line without one."""
    result = cli(*argv)
    assert result.code == 2
    assert f"argument {flag}: expected an id (text, not blank, without NUL" in result.err
    assert not cli.store.exists()


def test_demo_refuses_a_store_it_would_not_load_into_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second `demo --path DIR` would recall the first run's turns and miscount: refused."""
    used = tmp_path / "used"
    used.mkdir()
    (used / "messages.sqlite3").write_bytes(b"")
    assert main(["demo", "--path", str(used)]) == 2
    err = capsys.readouterr().err
    assert f"{used} is not an empty folder" in err
    assert "pass a new folder to --path" in err
    assert [p.name for p in used.iterdir()] == ["messages.sqlite3"]  # nothing written
    urls = ["--storage", f"sqlite:///{tmp_path / 'm.db'}", "--vector", "memory://", "demo"]
    assert main(urls) == 2  # not silently ignored for a temporary folder
    assert "does not use --storage / --vector" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()


def test_eval_refuses_the_global_server_urls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eval always loads a fresh embedded store: servers named for it are refused, not ignored."""
    dataset = tmp_path / "set.jsonl"
    dataset.write_text('{"probe": "thanks!", "kind": "small talk"}\n', encoding="utf-8")
    urls = ["--storage", f"sqlite:///{tmp_path / 'm.db'}", "--vector", "memory://"]
    for argv in (
        [*urls, "eval", "jsonl", str(dataset)],
        ["eval", "jsonl", str(dataset), *urls],
        ["eval", "jsonl", str(dataset), *urls[:2]],  # it was told to add --vector
    ):
        assert main(argv) == 2
        assert "does not use --storage / --vector" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()
    # --index-name was ignored before the command, "unrecognized" after it.
    named = ["--index-name", "n"]
    for argv in ([*named, "eval", "jsonl", str(dataset)], ["eval", "jsonl", str(dataset), *named]):
        assert main(argv) == 2
        assert "leave --index-name out" in capsys.readouterr().err


def test_eval_refuses_a_global_path_rather_than_measure_another_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--path mystore eval ...` measured a temporary store and said nothing: a user
    reading the numbers as their store's was misled. --store is eval's folder; the
    environment's default path is no choice, so it is still ignored."""
    dataset = tmp_path / "set.jsonl"
    dataset.write_text('{"probe": "thanks!", "kind": "small talk"}\n', encoding="utf-8")
    mine = tmp_path / "mine"
    path = ["--path", str(mine)]  # after the command it was "unrecognized arguments"
    for argv in ([*path, "eval", "jsonl", str(dataset)], ["eval", "jsonl", str(dataset), *path]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "eval does not read the store at --path" in err
        assert "--store DIR" in err
    assert not mine.exists()
    monkeypatch.setenv(common.PATH_ENV, str(mine))
    parser = build_parser()
    args = parser.parse_args(["eval", "jsonl", str(dataset)])
    assert getattr(args, "path", None) is None  # the environment's default: not refused


def test_demo_openai_without_a_key_is_refused_not_answered_offline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --openai` without a key printed the offline model's answers as ChatOpenAI's."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--openai"]) == 2
    err = capsys.readouterr().err
    assert "needs OPENAI_API_KEY" in err
    assert "leave --openai out" in err


# --- on a SQLite file and the in-memory index (--storage / --vector) ---------------------

LINE = {"resource": "carol", "thread": "t1", "role": "user", "content": "hello there"}


@pytest.fixture
def on_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Embedder) -> list[str]:
    """A store of this tier: a SQLite file, and one in-memory index for every command."""
    from langchain_semantic_recall import settings
    from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

    index = InMemoryVectorIndex()
    monkeypatch.setattr(settings, "create_vector_index", lambda url, **_: index)
    return ["--storage", f"sqlite:///{tmp_path / 'messages.sqlite3'}", "--vector", "memory://"]


def jsonl(path: Path, *rows: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    code = main(list(argv))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def test_two_stores_on_one_vector_server_each_keep_to_their_own_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """docs/scale.md gives a store beside another on one Chroma server its own index_name,
    but the command line could open only the model's default index: on store B, stats
    called store A's vectors orphaned, and forget and the reindex it advised deleted
    them (forget left B's own)."""
    a = on_urls  # both stores' commands share the fixture's one vector index
    b = ["--storage", f"sqlite:///{tmp_path / 'b.sqlite3'}", "--vector", "memory://"]
    history = str(jsonl(tmp_path / "h.jsonl", LINE, LINE | {"id": "x2", "content": "bye"}))
    assert run(capsys, *a, "ingest", history).code == 0
    assert run(capsys, *b, "--index-name", "b-own", "ingest", history).code == 0

    def stats(store: list[str], *name: str) -> dict[str, Any]:
        result = run(capsys, *store, *name, "stats", "--json")
        assert result.code == 0, result.err
        return dict(result.json())

    own = stats(b, "--index-name", "b-own")
    assert (own["index_name"], own["vectors"], own["missing_vectors"]) == ("b-own", 2, 0)
    forget = ["forget", "--resource", "carol", "--yes", "--index-name", "b-own"]
    assert run(capsys, *b, *forget).code == 0  # the option after the command too
    assert stats(a)["vectors"] == 2  # store A's vectors untouched
    assert stats(b, "--index-name", "b-own")["vectors"] == 0


def test_the_store_urls_work_after_the_command_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`semantic-recall threads --storage URL --vector URL` was refused ("unrecognized
    arguments") where `--path` and `--index-name` worked after the command."""
    store = on_urls
    history = str(jsonl(tmp_path / "h.jsonl", LINE))
    assert run(capsys, "ingest", history, *store).code == 0
    after = run(capsys, "threads", *store, "--json")
    assert after.code == 0, after.err
    assert after.out == run(capsys, *store, "threads", "--json").out
    assert LINE["thread"] in after.out
    assert "go together" in run(capsys, "threads", store[0], store[1]).err


def test_ingest_reports_a_misspelt_key_instead_of_dropping_its_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """The line loaded (exit 0) dated today and untitled; the corrected file then said
    `unchanged`, and the wrong date stayed."""
    store = on_urls
    typo = {"resource": "carol", "thread": "typo", "role": "user", "content": "old", "id": "ty1"}
    misspelt = typo | {"create_at": "2020-01-01T00:00:00Z", "titel": "Old"}
    result = run(capsys, *store, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE, misspelt)))
    assert result.code == 1
    assert "messages   1 added" in result.out
    assert (
        "line 2: unknown keys 'create_at' (did you mean 'created_at'?), "
        "'titel' (did you mean 'title'?)"
    ) in result.out
    assert "1 line(s) of" in result.err
    fixed = typo | {"created_at": "2020-01-01T00:00:00Z", "title": "Old"}
    again = run(capsys, *store, "ingest", str(jsonl(tmp_path / "fixed.jsonl", LINE, fixed)))
    assert again.code == 0, again.err
    assert "messages   1 added" in again.out
    shown = run(capsys, *store, "show", "typo")
    assert 'of carol · "Old"' in shown.out
    assert "2020-01-01" in shown.out


def test_a_title_given_on_a_later_line_names_the_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`threads` and `show` read the first message's title only: a conversation titled on
    its third line, or on its 100th, showed none."""
    store = on_urls
    late = [LINE | {"id": "a1"}, LINE | {"id": "a2"}, LINE | {"id": "a3", "title": "Late"}]
    later = [LINE | {"thread": "t2", "id": f"b{n}", "content": f"turn {n}"} for n in range(150)]
    later[99]["title"] = "Much later"
    untitled = [LINE | {"thread": "t3", "id": "c1"}]
    path = jsonl(tmp_path / "h.jsonl", *late, *later, *untitled)
    assert run(capsys, *store, "ingest", str(path)).code == 0
    listed = run(capsys, *store, "threads", "--resource", "carol").out
    assert "Late" in listed
    assert "Much later" in listed
    assert 'of carol · "Late"' in run(capsys, *store, "show", "t1").out
    assert ' · "' not in run(capsys, *store, "show", "t3").out


def test_show_prints_a_title_of_several_lines_on_its_header_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`threads` printed a line break of a title as a space; `show` split its header over
    two lines, the second looking like its own header (an audit)."""
    fake = "Trip\nIGNORE: 42 message(s)"
    path = jsonl(tmp_path / "h.jsonl", LINE | {"id": "a1", "title": fake})
    assert run(capsys, *on_urls, "ingest", str(path)).code == 0
    header = run(capsys, *on_urls, "show", "t1").out.splitlines()[0]
    assert header.endswith('· "Trip IGNORE: 42 message(s)" · 1 message(s)')


def test_threads_reads_no_further_than_a_first_message_that_has_the_title(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_urls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`threads` read a page of 100 messages of every thread for its title, also when the
    first one had it (every message of a ChatGPT export does): 16 times the reading."""
    store = on_urls
    titled = [LINE | {"id": f"a{n}", "title": "Trip"} for n in range(150)]
    late = [LINE | {"thread": "t2", "id": "b1"}, LINE | {"thread": "t2", "title": "Late"}]
    assert run(capsys, *store, "ingest", str(jsonl(tmp_path / "h.jsonl", *titled, *late))).code == 0
    read: dict[str, int] = {}
    list_messages = SQLiteStorage.list_messages

    def counted(self: SQLiteStorage, *args: Any, **kwargs: Any) -> Any:
        page = list_messages(self, *args, **kwargs)
        for message in page:
            read[message.thread_id] = read.get(message.thread_id, 0) + 1
        return page

    monkeypatch.setattr(SQLiteStorage, "list_messages", counted)
    listed = run(capsys, *store, "threads", "--json").json()
    assert {t["thread"]: t["title"] for t in listed} == {"t1": "Trip", "t2": "Late"}
    assert read == {"t1": 1, "t2": 1 + 2}  # its first message alone, then the page


def test_path_and_server_urls_together_are_a_usage_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_urls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--path A --storage B --vector B` listed B's threads (exit 0), and `forget` would
    have deleted from a store the user did not name."""
    store = on_urls
    assert run(capsys, *store, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    other = str(tmp_path / "a")
    for argv in (
        ["--path", other, *store, "threads"],
        [*store, "threads", "--path", other],
        ["--path", other, *store[:2], "stats"],
        [*store, "forget", "--resource", "carol", "--yes", "--path", other],
    ):
        result = run(capsys, *argv)
        assert result.code == 2, argv
        assert "--path or --storage/--vector, not both" in result.err
        assert result.out == ""
    monkeypatch.setenv("SEMANTIC_RECALL_PATH", other)  # a default, not a flag: no conflict
    listed = run(capsys, *store, "threads")
    assert listed.code == 0
    assert "carol" in listed.out


def test_stats_of_a_resource_with_no_conversation_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """It printed zeros and exited 0, where threads, search and export exit 3."""
    store = on_urls
    assert run(capsys, *store, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    nobody = run(capsys, *store, "stats", "--resource", "nobody")
    assert nobody.code == 3
    assert nobody.out == ""
    assert "no conversations of resource 'nobody'" in nobody.err
    assert run(capsys, *store, "threads", "--resource", "nobody").code == 3
    carol = run(capsys, *store, "stats", "--resource", "carol", "--json")
    assert carol.code == 0
    assert carol.json()["messages"] == 1
    from langchain_semantic_recall.storage.sqlite import SQLiteStorage

    storage = SQLiteStorage(tmp_path / "messages.sqlite3")  # gone, but not its vector
    storage.delete_resource("carol")
    storage.close()
    left = run(capsys, *store, "stats", "--resource", "carol", "--json")
    assert left.code == 0  # what a forget left behind is counted, not "not found"
    assert (left.json()["messages"], left.json()["orphan_vectors"]) == (0, 1)


def test_ingest_of_a_directory_says_it_is_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """It said "no file '/some/directory'" of a folder that is there."""
    store = on_urls
    folder = tmp_path / "exports"
    folder.mkdir()
    result = run(capsys, *store, "ingest", str(folder))
    assert result.code == 3
    assert f"{str(folder)!r} is a directory, not a file" in result.err
    assert "no file" not in result.err
    missing = run(capsys, *store, "ingest", str(tmp_path / "nothing.jsonl"))
    assert missing.code == 3
    assert "no file" in missing.err
    assert not (tmp_path / "messages.sqlite3").exists()


def test_search_marks_where_a_window_leaves_messages_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A hybrid window keeps its likeliest messages, so it can skip some: shown, not hidden."""
    from langchain_semantic_recall.cli.search import _print_hits
    from langchain_semantic_recall.records import RecallHit, StoredMessage
    from tests.conformance.storage_suite import make_record

    def stored(seq: int) -> StoredMessage:
        record = make_record(f"m{seq}", text=f"line {seq}", minute=seq)
        fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        return StoredMessage(**fields, seq=seq)

    window = tuple(stored(seq) for seq in (0, 1, 4, 5))
    _print_hits([RecallHit(window[1], 0.9, window)], {})
    lines = capsys.readouterr().out.splitlines()
    texts = [line.split("  ")[-1].strip() for line in lines[1:-1]]
    assert texts == [
        "line 0",
        "line 1",
        "... 2 message(s) of the conversation left out",
        "line 4",
        "line 5",
    ]


def test_a_message_without_text_is_shown_by_what_it_holds() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_semantic_recall.cli.render import shown_text
    from langchain_semantic_recall.messages import build_records

    call = AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "c"}])
    image = HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:,x"}}])
    records = build_records(
        [HumanMessage("hi"), call, image, HumanMessage("")],
        thread_id="t",
        resource_id="r",
        now=datetime.now(UTC),
    )
    assert [shown_text(r) for r in records] == [
        "hi",
        "(no text; tool call: weather)",
        "(no text; image_url)",
        "(no text)",
    ]


def test_ingest_counts_a_repeated_line_as_skipped_not_as_stored_without_a_vector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """A line given twice (same id) said `vectors 1 written (stored without a vector: the
    same id appears later in this call: 1)` and `skipped 0`: one line vanished uncounted,
    and a message said to lack a vector had one (stats: missing 0)."""
    store = on_urls
    line = LINE | {"id": "m1"}
    path = jsonl(tmp_path / "h.jsonl", line, line)
    result = run(capsys, *store, "ingest", str(path))
    assert result.code == 0, result.err
    assert "messages   1 added" in result.out
    assert "stored without a vector" not in result.out
    assert "  skipped    1 (the same line appears later in this file: 1)" in result.out
    again = line | {"id": "m2"}
    path = jsonl(tmp_path / "j.jsonl", again, again)
    as_json = run(capsys, *store, "ingest", str(path), "--json").json()
    assert as_json["stored_without_vector"] == {}
    assert as_json["skipped"] == {"the same line appears later in this file": 1}


def test_ingest_json_says_which_lines_could_not_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """With --json the bad lines' numbers were nowhere (the JSON counted reasons only),
    and standard error still said they were "listed above"."""
    store = on_urls
    path = jsonl(tmp_path / "h.jsonl", LINE, LINE | {"text": "typo"}, {"role": "user"})
    result = run(capsys, *store, "ingest", str(path), "--json")
    assert result.code == 1
    bad = result.json()["unreadable_lines"]
    assert [item["where"] for item in bad] == ["line 2", "line 3"]
    assert bad[0]["reason"].startswith("unknown key 'text'")
    assert "listed above" not in result.err
    assert "2 line(s) of" in result.err
    assert "'unreadable_lines'" in result.err
    plain = run(capsys, *store, "ingest", str(path))
    assert "(listed above)" in plain.err


def test_python_dash_m_runs_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m langchain_semantic_recall.cli --version` said the package "cannot be
    directly executed": a venv without its scripts on PATH had no way in."""
    import runpy

    monkeypatch.setattr(sys, "argv", ["semantic-recall", "--version"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("langchain_semantic_recall.cli", run_name="__main__")
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("semantic-recall ")


def test_ingest_says_when_resource_was_given_to_no_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`ingest bob.jsonl --resource alice`, every line naming bob, loaded bob's lines and
    said nothing of the option it ignored: the user believed alice's memory filled."""
    store = on_urls
    path = jsonl(tmp_path / "h.jsonl", LINE)
    result = run(capsys, *store, "ingest", str(path), "--resource", "alice")
    assert result.code == 0, result.err
    assert (
        "  note       --resource alice was used by no line: every line names its own "
        "resource (carol)"
    ) in result.out
    again = run(capsys, *store, "ingest", str(path), "--resource", "alice", "--json")
    assert again.json()["resource_unused"] == "alice"
    unnamed = {k: v for k, v in LINE.items() if k != "resource"} | {"thread": "t2"}
    used = jsonl(tmp_path / "u.jsonl", unnamed)
    fills = run(capsys, *store, "ingest", str(used), "--resource", "alice", "--json")
    assert fills.json()["resource_unused"] is None
    assert run(capsys, *store, "threads", "--resource", "alice").code == 0


def test_search_for_an_empty_query_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`search "" --resource alice` (an unset shell variable) printed `0 hit(s)` and exit 0,
    as if the memory held nothing relevant."""
    for query in ("", "   "):
        result = run(capsys, "search", query, "--resource", "alice")
        assert result.code == 2
        assert "QUERY is empty" in result.err
        assert result.out == ""


def test_ingest_counts_a_line_repeated_in_a_later_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """A line repeated 64+ lines later (another `index` call) was counted nowhere:
    `messages 65 added`, `skipped 0`, for 66 lines."""
    store = on_urls
    first = LINE | {"id": "m1"}
    others = [LINE | {"id": f"o{n}", "content": f"other {n}"} for n in range(64)]
    result = run(capsys, *store, "ingest", str(jsonl(tmp_path / "h.jsonl", first, *others, first)))
    assert result.code == 0, result.err
    assert "messages   65 added" in result.out
    assert "  skipped    1 (the same line appears later in this file: 1)" in result.out


def test_a_file_that_repeats_an_id_with_another_text_settles_on_the_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """Two lines with one id and two texts: the last is stored, ingesting the file again
    changes nothing, and the dropped line is refused where it is, exit 1. The second run
    wrote the first line over the stored last one ('1 updated'), the third the last again:
    the store flipped on every run; then the first line was dropped with a count, exit 0."""
    store = on_urls
    first = LINE | {"id": "m1", "content": "first"}
    path = jsonl(tmp_path / "h.jsonl", first, LINE | {"id": "m2"}, LINE | {"id": "m1"})
    for _ in range(3):
        result = run(capsys, *store, "ingest", str(path), "--json")
        assert result.code == 1, result.err
        summary = result.json()
        assert (summary["messages_added"] + summary["messages_updated"]) in (0, 2)
        assert summary["refused"] == [
            {
                "where": "line 1",
                "reason": "its id 'm1' is given again, with another message, at line 3, "
                "which was imported instead: give each message its own id",
            }
        ]
        assert "1 message(s) of" in result.err
        shown = run(capsys, *store, "show", "t1", "--json").json()
        assert [m["text"] for m in shown] == ["hello there", "hello there"]
    assert summary["messages_updated"] == 0
    text = run(capsys, *store, "ingest", str(path))
    assert "refused line 1: its id 'm1' is given again" in text.out


def test_a_repeated_id_whose_later_line_is_refused_too_is_not_said_to_be_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """The earlier line's refusal named the later line as 'imported instead' before it
    was written: when the later line was refused too (its id is another thread's), the
    report said a message was imported that no run stored."""
    store = on_urls
    elsewhere = LINE | {"thread": "t0", "id": "m1", "content": "stored elsewhere"}
    assert run(capsys, *store, "ingest", str(jsonl(tmp_path / "a.jsonl", elsewhere))).code == 0
    first, second = LINE | {"id": "m1", "content": "first"}, LINE | {"id": "m1"}
    path = jsonl(tmp_path / "b.jsonl", first, LINE | {"id": "m2"}, second)
    result = run(capsys, *store, "ingest", str(path), "--json")
    assert result.code == 1, result.err
    refused = {r["where"]: r["reason"] for r in result.json()["refused"]}
    assert sorted(refused) == ["line 1", "line 3"]
    assert refused["line 1"] == (
        "its id 'm1' is given again, with another message, at line 3, which was not "
        "stored either: give each message its own id"
    )
    assert "already belongs to another thread" in refused["line 3"]
    assert [m["text"] for m in run(capsys, *store, "show", "t0", "--json").json()] == [
        "stored elsewhere"
    ]
    assert [m["text"] for m in run(capsys, *store, "show", "t1", "--json").json()] == [
        "hello there"
    ]


def test_search_json_says_with_which_settings_it_searched_as_the_text_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """The text's summary line (mode, top, window, budget, threshold) had no JSON field."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    argv = ["search", "hello", "--resource", "carol", "--search-mode", "dense", "--range", "0,2"]
    text = run(capsys, *on_urls, *argv, "--threshold", "0.1")
    assert "(dense search, top 4, window 0 before / 2 after, threshold 0.1)" in text.out
    settings = run(capsys, *on_urls, *argv, "--threshold", "0.1", "--json").json()["settings"]
    assert settings == {
        "search_mode": "dense",
        "top_k": 4,
        "window": {"before": 0, "after": 2},
        "message_budget": None,
        "threshold": 0.1,
    }


def test_export_onto_the_stores_own_files_is_refused_and_the_store_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`export -o` the store's own database emptied it: the file was opened for writing
    before the export read it."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    database = tmp_path / "messages.sqlite3"
    (tmp_path / "link.jsonl").symlink_to(database)
    for output in (database, Path(f"{database}-wal"), tmp_path / "." / "link.jsonl"):
        result = run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(output))
        assert result.code == 2, output
        assert "is a file of the store being read" in result.err
    kept = run(capsys, *on_urls, "export", "--resource", "carol")
    assert [json.loads(line)["content"] for line in kept.out.splitlines()] == ["hello there"]


def test_an_export_that_stops_part_way_leaves_the_earlier_file_whole(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_urls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The output file was truncated first, so an interrupted export lost the last one."""
    from langchain_semantic_recall import importers

    second = {**LINE, "content": "and again"}
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE, second))).code == 0
    target = tmp_path / "out" / "carol.jsonl"
    target.parent.mkdir()
    target.write_text("yesterday's export\n", encoding="utf-8")
    target.chmod(0o640)
    real = importers.export_lines

    def one_then_interrupted(messages: Any) -> Any:
        yield next(iter(real(messages)))
        raise KeyboardInterrupt

    monkeypatch.setattr(importers, "export_lines", one_then_interrupted)
    stopped = run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(target))
    assert stopped.code == 130
    assert "an --output file is left as it was" in stopped.err
    assert target.read_text(encoding="utf-8") == "yesterday's export\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["carol.jsonl"]
    monkeypatch.setattr(importers, "export_lines", real)
    done = run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(target))
    assert done.code == 0
    assert len(target.read_text(encoding="utf-8").splitlines()) == 2
    assert target.stat().st_mode & 0o777 == 0o640  # replaced, with the file's permissions
    assert sorted(p.name for p in target.parent.iterdir()) == ["carol.jsonl"]
    nowhere = tmp_path / "nowhere" / "carol.jsonl"  # named as given, not the temporary file
    missing = run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(nowhere))
    assert missing.code == 1
    assert missing.err == f"semantic-recall: error: No such file or directory: {nowhere}\n"


@pytest.mark.parametrize(
    "command",
    [
        ["search", "hello", "--resource", "carol"],
        ["inspect", "hello", "--resource", "carol", "--thread", "t1"],
        ["stats"],
        ["forget", "--resource", "carol", "--yes"],
    ],
)
def test_a_mistyped_chroma_path_is_not_found_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str], command: list[str]
) -> None:
    """A reading command created an empty index at the mistyped path and answered "0
    hit(s)", exit 0; `forget` deleted the messages and left their vectors in the real
    index."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    typo = tmp_path / "chorma"
    urls = [on_urls[0], on_urls[1], "--vector", f"chroma:///{typo}"]
    result = run(capsys, *urls, *command)
    assert result.code == 3
    assert f"no Chroma index at {typo}" in result.err
    assert not typo.exists()
    assert run(capsys, *on_urls, "threads", "--resource", "carol").code == 0  # nothing forgotten


# --- a store this user cannot write ---------------------------------------------------------


@pytest.fixture
def unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local store whose file this user cannot write (root ignores modes: patched)."""
    store = tmp_path / "store"
    SQLiteStorage(store / "messages.sqlite3").close()
    monkeypatch.setattr(sqlite_schema, "is_writable", lambda path: False)
    monkeypatch.setattr(
        common, "create_embeddings", lambda: pytest.fail("the store was opened: too late")
    )
    return store


@pytest.mark.parametrize(
    ("argv", "undone"),
    [
        (["forget", "--thread", "t1", "--yes"], "nothing was forgotten"),
        (["forget", "--resource", "carol"], "nothing was forgotten"),  # before it asks
        (["forget", "--older-than", "30d"], "nothing was forgotten"),
        (["reindex"], "nothing was embedded"),
        (["move", "--thread", "t1", "--to", "dave"], "nothing was moved"),
        (["purge"], "nothing was purged"),
        (["ingest", "LINES"], "nothing was ingested"),
    ],
)
def test_a_store_this_user_cannot_write_is_refused_in_plain_words(
    unwritable: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    undone: str,
) -> None:
    """It said "reindex writes, and this engine was built with read_only=True" (an option
    nobody passed), and `forget` asked for confirmation first (the reading commands on
    such a store: tests/integration/test_read_only.py)."""
    argv = [str(jsonl(tmp_path / "h.jsonl", LINE)) if a == "LINES" else a for a in argv]
    result = run(capsys, "--path", str(unwritable), *argv)
    assert result.code == 1
    assert result.out == ""
    assert result.err == (
        f"semantic-recall: error: the store {unwritable} is read-only for this user (its "
        f"files or folder, or a read-only mount): {undone}; the reading commands still work "
        "on it\n"
    )


# --- interrupted: what it left, and how to finish -------------------------------------------

WRITING = ["ingest", "forget", "reindex", "move", "purge", "migrate", "export"]
"""The commands that write (export: a file): each says how to finish when interrupted."""


def _interrupt(capsys: pytest.CaptureFixture[str], embedder: Embedder, *argv: str) -> Result:
    embedder.fail = KeyboardInterrupt()  # raised by the embedder, mid-command
    return run(capsys, *argv)


def test_an_interrupted_ingest_says_how_to_finish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str], embedder: Embedder
) -> None:
    """It said "interrupted" alone: the store held the messages without their vectors,
    and running the same ingest again does not embed them (it says so, and asks for
    --repair, only then)."""
    lines = jsonl(tmp_path / "h.jsonl", LINE)
    result = _interrupt(capsys, embedder, *on_urls, "ingest", str(lines))
    assert result.code == 130
    assert result.err == (
        "semantic-recall: error: interrupted: what was stored stays; run the same ingest "
        "again with --repair: it adds the rest and embeds the messages stored without a "
        "vector\n"
    )
    embedder.fail = None
    again = run(capsys, *on_urls, "ingest", str(lines), "--repair")
    assert again.code == 0, again.err
    stats = run(capsys, *on_urls, "stats", "--json").json()
    assert (stats["messages"], stats["missing_vectors"]) == (1, 0)


def test_a_backend_failing_part_way_says_how_to_finish_and_warns_a_few_times_of_each_kind(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_urls: list[str],
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vector server gone mid-ingest (an audit): one warning per conversation (75 lines
    for 4,000 messages), then the bare error, with no word of what to do next."""
    from langchain_semantic_recall import SemanticRecall, StorageError

    rows = [{**LINE, "thread": f"t{n}", "content": f"hello {n}"} for n in range(6)]
    embedder.fail = RuntimeError("the embedding server is gone")
    gone = "the Chroma server at http://db:8000 could not be reached"

    def unreachable(*_: Any, **__: Any) -> Any:
        raise StorageError(gone)

    monkeypatch.setattr(SemanticRecall, "stats", unreachable)
    result = run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", *rows)))
    assert result.code == 1
    lines = result.err.splitlines()
    told = "semantic-recall: warning: indexing vectors failed"
    assert sum(line.startswith(told) for line in lines) == 3
    assert any("3 more warning(s) like 'indexing vectors failed" in line for line in lines)
    assert lines[-1] == (
        f"semantic-recall: error: {gone}; what was stored stays; run the same ingest again "
        "with --repair: it adds the rest and embeds the messages stored without a vector"
    )


def test_a_reading_command_interrupted_says_only_that(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str], embedder: Embedder
) -> None:
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    result = _interrupt(capsys, embedder, *on_urls, "search", "hello", "--resource", "carol")
    assert result.code == 130
    assert result.err == "semantic-recall: error: interrupted\n"


def test_a_command_stopped_by_sigterm_says_so(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_urls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It exited 143 without a word: `timeout 60 semantic-recall reindex` looked like a
    crash."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0

    def terminated() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # handled on the main thread, at once

    monkeypatch.setattr(common, "create_embeddings", terminated)
    result = run(capsys, *on_urls, "reindex")
    assert result.code == 143
    assert result.err == (
        "semantic-recall: error: stopped by SIGTERM: the vectors written so far stay: run it "
        "again to finish\n"
    )


def test_every_writing_command_says_how_to_finish_when_interrupted() -> None:
    parser = build_parser()
    commands = next(a.choices for a in parser._actions if isinstance(a.choices, dict))
    hints = {name: commands[name].get_default("interrupted") for name in commands}
    assert [name for name in WRITING if not hints[name]] == []
    assert sorted(name for name, hint in hints.items() if hint) == sorted(WRITING)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--path", "~/m", "stats"], "path"),
        (["stats", "--path", "~/m"], "path"),
        (["ingest", "~/chats.json"], "file"),
        (["export", "--resource", "a", "-o", "~/out.jsonl"], "output"),
        (["demo", "--path", "~/m"], "path"),
        (["eval", "locomo", "~/d.json", "--store", "~/m"], "dataset"),
        (["eval", "locomo", "~/d.json", "--store", "~/m"], "store"),
        (["eval", "locomo", "~/d.json", "--json-out", "~/r.json"], "json_out"),
        (["eval", "paraphrase", "~/d", "--probes", "~/p"], "probes"),
        (["eval", "paraphrase", "~/d", "--busy", "~/l.json"], "busy"),
    ],
)
def test_a_quoted_tilde_in_a_path_argument_is_the_home_folder(
    argv: list[str], field: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No shell expands a quoted '~/m' (or --path=~/m): the command must, as SQLite does.

    `demo --path '~/m'` checked a folder named '~' for being new, then loaded its demo
    into the existing home store; `eval --store '~/m'` split its store in two.
    """
    monkeypatch.setenv("HOME", str(tmp_path))
    args = build_parser(argv).parse_args(argv)
    assert getattr(args, field).startswith(f"{tmp_path}/")


def test_every_path_argument_reads_a_tilde() -> None:
    """A new file or folder option gets the same `type` (the test above names each)."""
    paths = {"DIR", "FILE", "PATH", "LOCOMO_JSON"}
    parser = build_parser(["eval"])
    sub = next(a for a in parser._actions if isinstance(a.choices, dict))
    found = []
    for command in (parser, *sub.choices.values()):
        for action in command._actions:
            if action.metavar in paths or (action.dest == "path" and action.metavar is None):
                found.append((command.prog, action.dest, action.type))
    assert len(found) >= 10
    assert all(kind is common.a_path for _prog, _dest, kind in found), found


@pytest.mark.parametrize("where", ["--path", "env"])
def test_an_empty_store_path_is_a_usage_error_not_the_default_store(
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--path "$STORE"` with STORE unset (or `SEMANTIC_RECALL_PATH=` empty) ran on the
    default store: `forget` deleted from a store the user did not name, exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".semantic-recall").mkdir()  # the default store's folder, to be left alone
    argv = ["forget", "--thread", "trip", "--yes"]
    if where == "--path":
        argv = ["--path", "", *argv]
    else:
        monkeypatch.setenv(common.PATH_ENV, "")
    result = run(capsys, *argv)
    assert result.code == 2
    assert "empty" in result.err
    assert "not set?" in result.err
    assert list((tmp_path / ".semantic-recall").iterdir()) == []


def test_an_export_of_nothing_leaves_an_earlier_export_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """A resource emptied by retention (its threads kept, no message left) replaced its
    last backup with an empty file, exit 0."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    backup = tmp_path / "carol.jsonl"
    assert run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(backup)).code == 0
    before = backup.read_text(encoding="utf-8")
    assert "hello there" in before
    forget = ["forget", "--before", "2100-01-01", "--resource", "carol", "--yes"]
    assert run(capsys, *on_urls, *forget).code == 0
    again = run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(backup))
    assert (again.code, again.out) == (1, "")  # errors go to standard error
    assert "Nothing to export (0 messages in 1 thread(s))" in again.err
    assert f"nothing was written to {backup}" in again.err
    assert backup.read_text(encoding="utf-8") == before
    fresh = tmp_path / "fresh.jsonl"  # a dated nightly backup: no empty file either
    new = run(capsys, *on_urls, "export", "--resource", "carol", "-o", str(fresh))
    assert new.code == 1
    assert not fresh.exists()
    # To standard output (`> backup.jsonl`, which the shell empties first): exit 0 and
    # nothing on either stream read as a backup made.
    piped = run(capsys, *on_urls, "export", "--resource", "carol")
    assert (piped.code, piped.out) == (1, "")
    assert "Nothing to export (0 messages in 1 thread(s)): standard output got" in piped.err


def test_a_silent_search_says_when_candidates_were_held_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`0 hit(s)` read as "nothing stored", where the evidence rule held back candidates
    (a stranger's exact-text search found nothing, and nothing said --threshold 0)."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    silent = run(capsys, *on_urls, "search", "quantum chromodynamics", "--resource", "carol")
    assert silent.code == 0
    assert silent.out.startswith('0 hit(s) for "quantum chromodynamics"')
    assert "1 candidate(s) held back" in silent.out
    assert "--threshold 0 lists them" in silent.out
    shown = run(
        capsys,
        *on_urls,
        "search",
        "quantum chromodynamics",
        "--resource",
        "carol",
        "--threshold",
        "0",
    )
    assert shown.out.startswith('1 hit(s) for "quantum chromodynamics"')
    assert "held back" not in shown.out
    none = run(capsys, *on_urls, "search", "hello", "--resource", "carol", "--filter", "x=y")
    assert "held back" not in none.out  # nothing to hold back: no hint
    pasted = run(capsys, *on_urls, "search", "peanut " * 5000, "--resource", "carol")
    assert pasted.code == 0
    header = pasted.out.splitlines()[0]  # the query is searched, not echoed whole (an audit)
    assert header.startswith('0 hit(s) for "peanut peanut')
    assert "…" in header
    assert len(header) < 500


def test_an_id_with_a_line_break_shows_the_same_in_threads_and_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """`threads` showed "esc\\nthread" as "esc thread" (another, valid id) and `show`'s
    header broke the line there."""
    odd = {**LINE, "thread": "esc\nthread"}
    spaced = {**LINE, "thread": "two  spaces", "id": "s1"}
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", odd, spaced))).code == 0
    listed = run(capsys, *on_urls, "threads")
    assert "esc\u240athread" in listed.out
    assert "esc thread" not in listed.out
    assert "two\u2420\u2420spaces" in listed.out
    shown = run(capsys, *on_urls, "show", "esc\nthread")
    assert shown.code == 0
    assert shown.out.splitlines()[0].startswith("Thread esc\u240athread of carol")


def test_an_export_of_an_unowned_thread_ingests_unowned_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """An export says `"(no resource)"` for a thread written without one; ingest wrote it
    through `index`, which now refuses the mark as a live write's resource: exit 1."""
    from langchain_semantic_recall.records import NO_RESOURCE

    unowned = {**LINE, "resource": NO_RESOURCE, "thread": "anon", "id": "u1"}
    result = run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "u.jsonl", unowned)))
    assert result.code == 0, result.err
    shown = run(capsys, *on_urls, "threads", "--json")
    assert [(t["thread"], t["resource"]) for t in json.loads(shown.out)] == [("anon", NO_RESOURCE)]
    owned = {**LINE, "thread": "mine", "id": "c1"}  # carol's: an unowned line may not join it
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "c.jsonl", owned))).code == 0
    taken = {**unowned, "thread": "mine", "id": "u2"}
    refused = run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "t.jsonl", taken)))
    assert refused.code == 1
    assert "belongs to another resource" in refused.out


def test_ingest_counts_a_message_of_unusable_vector_by_reason_not_as_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str], embedder: Embedder
) -> None:
    """The embedder answers one line with zeros: that line alone has no vector, said why."""
    embedder.unusable = "blank"
    lines = jsonl(
        tmp_path / "u.jsonl",
        LINE | {"id": "a1"},
        LINE | {"id": "z1", "role": "assistant", "content": "blank"},
    )
    result = run(capsys, *on_urls, "ingest", str(lines))
    assert "1 written (stored without a vector: all-zero vector from the embedder" in result.out
    assert "stored without vectors" not in result.out  # the embedding did not fail
    assert "lack a vector (unusable vectors, above)" in result.out
    assert result.code == 1
    assert "1 stored message(s) have no vector" in result.err


def test_a_library_warning_is_one_line_without_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str], embedder: Embedder
) -> None:
    """With no handler configured, Python's last-resort handler printed the package's
    warnings with their tracebacks: an ingest whose embedder failed printed one per batch,
    against `--help`'s "-v ... show a failure's traceback"."""
    embedder.fail = RuntimeError("the model ran out of memory")
    lines = jsonl(tmp_path / "h.jsonl", LINE)
    result = run(capsys, *on_urls, "ingest", str(lines))
    warnings = [line for line in result.err.splitlines() if "warning:" in line]
    assert warnings
    assert all(line.startswith("semantic-recall: warning: ") for line in warnings)
    assert "Traceback" not in result.err
    package = logging.getLogger("langchain_semantic_recall")
    assert not package.handlers  # none left behind
    assert package.propagate
    # A root handler (an earlier -v, or the program calling main) printed each again.
    root = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(root)
    try:
        other = LINE | {"id": "x9", "content": "another line"}
        again = run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "i.jsonl", other)))
    finally:
        logging.getLogger().removeHandler(root)
    assert "Traceback" not in again.err
    said = [line for line in again.err.splitlines() if "stored without vectors" in line]
    assert said
    assert len(said) == len(set(said))
    embedder.fail = None
    assert run(capsys, *on_urls, "ingest", str(lines), "--repair").code == 0


def test_the_ingest_summary_names_the_commonest_reasons_and_counts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """Reasons that quote their own line are each their own: 6,000 such lines made a
    `skipped` line of 34,312 characters (an audit). Each line is still listed below it."""
    rows = [LINE | {"id": f"m{n}", "resource": f"r{n}"} for n in range(41)]  # one thread
    result = run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", *rows)))
    skipped = next(line for line in result.out.splitlines() if "skipped" in line)
    assert skipped.startswith("  skipped    40 (thread 't1' is named for resource ")
    assert skipped.endswith("; 35 more for 35 other reason(s))")
    assert len(skipped) < 1000


def test_option_errors_name_the_flags_a_shell_user_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_urls: list[str]
) -> None:
    """They said "threshold must be None or ..." and "use search_mode='hybrid'": Python's
    words, from the engine. The command line checks its own flags first."""
    assert run(capsys, *on_urls, "ingest", str(jsonl(tmp_path / "h.jsonl", LINE))).code == 0
    search = [*on_urls, "search", "hello", "--resource", "carol"]
    wrong = run(capsys, *search, "--threshold", "2")
    assert wrong.code == 2
    assert "argument --threshold: expected a score between 0 and 1, got '2'" in wrong.err
    keyword = run(capsys, *search, "--search-mode", "keyword", "--threshold", "0.1")
    assert keyword.code == 2
    assert "--threshold means nothing with --search-mode keyword" in keyword.err
    assert "search_mode=" not in keyword.err
    inspect = [*on_urls, "inspect", "hello", "--thread", "t1", "--search-mode", "keyword"]
    assert "--threshold means nothing" in run(capsys, *inspect, "--threshold", "0").err
    (tmp_path / "notes.jsonl").write_text("{}\n")
    demo = run(capsys, "demo", "--path", str(tmp_path / "notes.jsonl"))
    assert (demo.code, "is a file, not a folder" in demo.err) == (2, True)
