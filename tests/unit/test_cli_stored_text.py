"""What the commands print of a store's own text runs nothing on the terminal.

A stored message, title or id is whatever an import or a conversation wrote: an escape
sequence in it (`\\x1b[2J` clears the screen, OSC 52 writes the clipboard, a bidi
override reverses what follows) must show as visible characters
(`quoting.printable`), never reach the terminal raw. The store is written through
`SQLiteStorage` (no vector index: these commands open none).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_semantic_recall.cli import main
from langchain_semantic_recall.records import TITLE_KEY, MessageRecord
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from tests.unit.test_cli import plain_terminal

__all__ = ["plain_terminal"]

HOSTILE = "\x1b[2J\x1b]52;c;ZXZpbA==\x07 bell \x00 nul \x9b31m \u202e reversed"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What a terminal would act on (line breaks and tabs excepted)."""


def _payload(text: str, title: str) -> str:
    data = {"content": text, "additional_kwargs": {TITLE_KEY: title}, "type": "human"}
    return json.dumps({"type": "human", "data": data})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    storage = SQLiteStorage(tmp_path / "store" / "messages.sqlite3")
    record = MessageRecord(
        id="m1",
        thread_id="t\x1b[31m",
        resource_id="r\x1b]0;owned\x07",
        role="user",
        text=HOSTILE,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        payload=_payload(HOSTILE, f"title {HOSTILE}"),
    )
    storage.put([record])
    storage.close()
    return tmp_path / "store"


def test_show_prints_no_terminal_control_of_the_stored_text(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--path", str(store), "show", "t\x1b[31m"]) == 0
    out = capsys.readouterr().out
    assert not RAW.findall(out)
    assert "␛[2J" in out
    assert "<U+202E>" in out
    assert "title ␛[2J" in out
    assert "r␛]0;owned␇" in out


def test_threads_prints_no_terminal_control_either(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--path", str(store), "threads"]) == 0
    assert not RAW.findall(capsys.readouterr().out)


def test_json_output_carries_a_lone_surrogate_as_an_escape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A title may hold a lone surrogate (a ChatGPT export's JSON escape, stored as is):
    `--json` writes it as `\\ud800`, which reads back the same, instead of failing on
    standard output with 'a file is not UTF-8 text'."""
    storage = SQLiteStorage(tmp_path / "store" / "messages.sqlite3")
    title = "bad \ud800 title"
    payload = json.dumps(json.loads(_payload("hi", title)))  # ASCII: the escape, as stored
    record = MessageRecord(
        id="m1",
        thread_id="t",
        resource_id="alice",
        role="user",
        text="hi",
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        payload=payload,
    )
    storage.put([record])
    storage.close()
    assert main(["--path", str(tmp_path / "store"), "threads", "--json"]) == 0
    out = capsys.readouterr().out
    out.encode("utf-8")
    assert title in json.dumps(json.loads(out), ensure_ascii=False)
