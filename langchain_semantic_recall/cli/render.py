"""Terminal output helpers: colour only on a terminal (and never with NO_COLOR)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import TextIO

_CODES = {"bold": "1", "dim": "2", "green": "32", "yellow": "33", "cyan": "36", "magenta": "35"}


def use_colour(stream: TextIO = sys.stdout) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def style(text: str, *names: str, stream: TextIO = sys.stdout) -> str:
    if not names or not use_colour(stream):
        return text
    codes = ";".join(_CODES[n] for n in names)
    return f"\033[{codes}m{text}\033[0m"


def width() -> int:
    return max(60, min(110, shutil.get_terminal_size((100, 24)).columns))


def rule(title: str = "") -> str:
    line = f"── {title} " if title else ""
    return line + "─" * max(3, width() - len(line))


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def boxed(text: str, indent: str = "  │ ") -> str:
    lines = []
    for raw in text.splitlines() or [""]:
        lines.extend(textwrap.wrap(raw, width() - len(indent)) or [""])
    return "\n".join(indent + line for line in lines)
