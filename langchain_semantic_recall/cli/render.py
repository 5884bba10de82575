"""Terminal output helpers: colour only on a terminal (and never with NO_COLOR)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from langchain_semantic_recall.quoting import printable
from langchain_semantic_recall.records import MessageRecord

_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "cyan": "36",
    "magenta": "35",
}


def use_colour(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, and never when `NO_COLOR` is set (https://no-color.org)."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def style(text: str, *names: str, stream: TextIO | None = None) -> str:
    """`text` with the ANSI styles `names` (`bold`, `red`, ...), on a terminal only."""
    if not names or not use_colour(stream):
        return text
    codes = ";".join(_CODES[n] for n in names)
    return f"\033[{codes}m{text}\033[0m"


def width() -> int:
    """The terminal's width, kept between 60 and 110 columns."""
    return max(60, min(110, shutil.get_terminal_size((100, 24)).columns))


def rule(title: str = "") -> str:
    """A horizontal rule across the terminal, with an optional title."""
    line = f"── {title} " if title else ""
    return line + "─" * max(3, width() - len(line))


def shown_text(message: MessageRecord) -> str:
    """A message's text, or what it holds instead: its tool calls, its kinds of content.

    Read from the stored payload (JSON), so the command loads none of LangChain.
    """
    if message.text.strip():
        return message.text
    try:
        data = json.loads(message.payload).get("data", {})
    except (ValueError, AttributeError):
        return "(no text)"
    data = data if isinstance(data, dict) else {}
    calls = [c.get("name") for c in data.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        return f"(no text; tool call: {', '.join(str(name) for name in calls)})"
    content = data.get("content")
    kinds = (
        sorted({str(p.get("type")) for p in content if isinstance(p, dict)})
        if isinstance(content, list)
        else []
    )
    return f"(no text; {', '.join(kinds)})" if kinds else "(no text)"


def shown_id(value: str) -> str:
    """An id on one line as it is stored, through a table's folding of whitespace.

    Single spaces between words stay; a line break or tab shows as its Control Picture,
    other whitespace as its code point (`<U+00A0>`), and a space next to another, or at
    either end, as `␠`: shown folded, "a  b" (or one with a line break) named another,
    valid, id.
    """
    shown = _ODD_SPACE.sub(lambda m: _SPACE_PICTURES.get(m[0], f"<U+{ord(m[0]):04X}>"), value)
    shown = _LONE_SPACE.sub(lambda m: m[0].replace(" ", "\u2420"), shown)
    return printable(shown)


_ODD_SPACE = re.compile(r"[^\S ]")
_LONE_SPACE = re.compile(r"^ +| +$| {2,}")
_SPACE_PICTURES = {"\n": "\u240a", "\t": "\u2409", "\r": "\u240d"}


def shorten(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters (ending with `…`); `printable`."""
    text = " ".join(printable(text).split())
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def boxed(text: str, indent: str = "  │ ") -> str:
    """`text` wrapped to the terminal, each line behind `indent`; `printable`."""
    lines = []
    for raw in printable(text).splitlines() or [""]:
        lines.extend(textwrap.wrap(raw, width() - len(indent)) or [""])
    return "\n".join(indent + line for line in lines)


def when(moment: datetime | None) -> str:
    """A time as `2024-01-15 10:30` (UTC), or `-`."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "") -> str:
    """Left-aligned columns; the last column is shortened to fit the terminal; `printable`."""
    if not rows:
        return ""
    cells = [list(headers), *[[" ".join(printable(c).split()) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]
    used = len(indent) + sum(w + 2 for w in widths)
    last = max(20, width() - used)
    lines = []
    for n, row in enumerate(cells):
        parts = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
        parts.append(shorten(row[-1], last))
        line = indent + "  ".join(parts).rstrip()
        lines.append(style(line, "bold") if n == 0 else line)
    return "\n".join(lines)


def error(message: str) -> None:
    """An error line on stderr (red on a terminal)."""
    label = style("semantic-recall: error:", "red", "bold", stream=sys.stderr)
    print(f"{label} {message}", file=sys.stderr)


def note(message: str) -> None:
    """A side remark on stderr (keeps stdout clean for pipes)."""
    print(style(message, "dim", stream=sys.stderr), file=sys.stderr)


def with_notes(failure: BaseException) -> str:
    """The failure's message and its notes (what a write did before it failed, and what to do)."""
    return "; ".join([str(failure), *getattr(failure, "__notes__", ())])


def failure_message(failure: BaseException, *, verbose: bool = False) -> str:
    """One line for a failure no command turned into a `CommandError`, with a next step.

    The traceback stays behind `-v` (`main` prints it); the line names the kind of
    problem (undecodable text, a damaged zip or store, input nested too deeply).
    """
    hint = "" if verbose else "; run with -v for the details"
    kind = type(failure).__name__
    module = type(failure).__module__
    if getattr(failure, "__notes__", None):  # the package said what was done and what to do
        return f"{kind}: {with_notes(failure)}{hint}"
    if isinstance(failure, UnicodeError):
        return f"a file is not UTF-8 text ({failure}); convert it to UTF-8 and try again"
    if isinstance(failure, RecursionError):
        return "the input is nested too deeply to read; check that it is the right file"
    if kind == "BadZipFile":
        return f"a zip archive is damaged ({failure}); download or create it again"
    if kind == "PanicException":  # Rust code of chromadb or of the tokenizer gave up
        return (
            f"a native library failed ({kind}: {failure}); a damaged store can cause it: "
            "restore the store from a backup, or rebuild its vector index with "
            f"'semantic-recall reindex'{hint}"
        )
    if module.startswith("sqlite3"):  # the messages' file: reindex cannot rebuild it
        return (
            f"the store's messages could not be read ({kind}: {failure}): the file may be "
            f"damaged; restore it from a backup, or move it aside to start an empty store{hint}"
        )
    if module.startswith("chromadb"):
        return (
            f"the store's vector index could not be read ({kind}: {failure}): it may be "
            f"damaged; restore it from a backup, or rebuild it with 'semantic-recall "
            f"reindex'{hint}"
        )
    return f"internal error ({kind}: {failure}){hint}, and report it with the command you ran"


def human_bytes(size: float) -> str:
    """A byte count for people: `512 B`, `1.5 KB`, ... up to GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
