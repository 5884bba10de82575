"""Reading and writing conversations as files: our JSONL format and ChatGPT exports.

One module per format: `jsonl` (our JSONL format, read and written back by
`export_lines`) and `chatgpt` (a ChatGPT `conversations.json` or its `.zip`); both fill
an `ImportReport` (`report`). Every name is importable from here; `read_conversations`
reads either format, detected by `detect_format`.

The conversation title travels in `additional_kwargs["conversation_title"]` of each
message (see `TITLE_KEY`).
"""

from __future__ import annotations

import json
from os import PathLike
from pathlib import Path

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.importers.chatgpt import (
    read_chatgpt_conversations,
    read_chatgpt_export,
)
from langchain_semantic_recall.importers.jsonl import export_lines, read_jsonl, read_jsonl_lines
from langchain_semantic_recall.importers.report import (
    FORMATS,
    Conversation,
    Format,
    ImportReport,
    Skipped,
    decode,
)
from langchain_semantic_recall.records import TITLE_KEY

__all__ = [
    "FORMATS",
    "TITLE_KEY",
    "Conversation",
    "Format",
    "ImportReport",
    "Skipped",
    "demo_conversations",
    "detect_format",
    "export_lines",
    "read_chatgpt_conversations",
    "read_chatgpt_export",
    "read_conversations",
    "read_jsonl",
    "read_jsonl_lines",
]


def detect_format(path: str | PathLike[str]) -> Format:
    """`chatgpt` for a `.zip` or a JSON list / conversation object, else `jsonl`.

    Args:
        path: The file to read.
    """
    source = Path(path)
    if source.suffix.lower() == ".zip":
        return "chatgpt"
    with source.open("rb") as handle:
        raw = handle.read(1 << 16)
    head = _decode_head(raw, source)
    text = head.lstrip()
    if text.startswith("["):
        _refuse_rows_in_an_array(text, source)
        return "chatgpt"
    if text.startswith("{"):
        try:
            first, _ = json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError:  # a first object longer than the head, or a bad line
            return "chatgpt" if '"mapping"' in head else "jsonl"
        if isinstance(first, dict) and "mapping" in first:
            return "chatgpt"
    return "jsonl"


def _refuse_rows_in_an_array(text: str, source: Path) -> None:
    """Refuse a JSON array whose first item is a line of our JSONL format, with the fix.

    Read as a ChatGPT export, each row would be skipped ("no 'mapping' of messages").
    """
    try:
        first, _ = json.JSONDecoder().raw_decode(text[1:].lstrip())
    except json.JSONDecodeError:  # a first item longer than the head: a ChatGPT export
        return
    if isinstance(first, dict) and "role" in first and "mapping" not in first:
        raise InvalidInputError(
            f"{source.name} is a JSON array of messages; ingest reads our format as one "
            f"JSON object a line (JSONL): rewrite it, e.g. jq -c '.[]' {source.name} > "
            f"{source.stem}.jsonl"
        )


def _decode_head(raw: bytes, source: Path) -> str:
    """The head of a file as text: `decode`, tolerating a character cut at the end."""
    for cut in range(4):  # a multi-byte character may straddle the end of the head
        try:
            return decode(raw[: len(raw) - cut] if cut else raw, str(source))
        except InvalidInputError:
            if cut == 3:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def read_conversations(
    path: str | PathLike[str],
    *,
    file_format: Format | None = None,
    resource_id: str | None = None,
) -> ImportReport:
    """Read either format (detected when `file_format` is None).

    `resource_id` is required for a ChatGPT export, and is the resource of JSONL lines
    that have none.

    Args:
        path: Our JSONL file, a ChatGPT `conversations.json` or the export `.zip`.
        file_format: `"jsonl"` or `"chatgpt"`; None detects it (`detect_format`).
        resource_id: The owner of the conversations (required for a ChatGPT export).
    """
    chosen = file_format or detect_format(path)
    if chosen == "chatgpt":
        if resource_id is None:
            raise InvalidInputError(
                "a ChatGPT export does not say whose conversations it holds: give a resource id"
            )
        return read_chatgpt_export(path, resource_id=resource_id)
    return read_jsonl(path, default_resource=resource_id)


def demo_conversations() -> ImportReport:
    """The small multi-thread conversation shipped with the package (used by the demo)."""
    from importlib.resources import files

    text = files("langchain_semantic_recall").joinpath("data/demo_conversations.jsonl")
    return read_jsonl_lines(text.read_text(encoding="utf-8").splitlines())
