"""ChatGPT exports: `conversations.json`, or the `.zip` that contains it.

An export is a list of conversations, each with a `title`, a `create_time`, a
`mapping` of nodes (each a `message` with `author.role`, `content.parts`,
`create_time`, and a `parent`) and a `current_node`. The main branch is the
`current_node`'s chain of parents (edits and regenerations left on other branches are not
imported). User and assistant text messages are kept; hidden, tool, code and reasoning
messages are reported as skipped, and so is each image, audio, file or attachment of a
kept message (its text is kept, a spoken turn's transcript too; the media are not
imported). The thread id is the
conversation's id and message ids are ChatGPT's own, so importing a later export of the
same account adds only what is new; an id that is missing, blank or that no storage can
hold (NUL, a lone surrogate) is derived from the conversation, the same on every import.
The export names no user: the caller gives the resource id.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, TypeGuard

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.importers.report import (
    ROLES,
    Conversation,
    ImportReport,
    Skipped,
    decode,
)
from langchain_semantic_recall.messages import CREATED_AT_KEY, parse_time, stable_id
from langchain_semantic_recall.records import TITLE_KEY
from langchain_semantic_recall.storable import storable

__all__ = ["read_chatgpt_conversations", "read_chatgpt_export"]


_SKIPPED_CONTENT = {
    "code": "code run by a tool",
    "execution_output": "tool output",
    "tether_browsing_display": "tool output",
    "tether_quote": "tool output",
    "thoughts": "model reasoning",
    "reasoning_recap": "model reasoning",
    "user_editable_context": "custom instructions",
    "system_error": "error shown by ChatGPT",
}


def _main_branch(mapping: Mapping[str, Any], current: object) -> list[Mapping[str, Any]]:
    """The nodes from the root to `current` (or to the newest leaf), in order."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [
            key
            for key, node in mapping.items()
            if isinstance(node, Mapping) and not node.get("children")
        ]
        if not leaves:
            return []
        current = max(leaves, key=lambda key: _node_time(mapping[key]))
    chain: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    key: object = current
    while isinstance(key, str) and key in mapping and key not in seen:
        seen.add(key)
        node = mapping[key]
        if not isinstance(node, Mapping):
            break
        chain.append(node)
        key = node.get("parent")
    chain.reverse()
    return chain


def _node_time(node: object) -> float:
    message = node.get("message") if isinstance(node, Mapping) else None
    when = message.get("create_time") if isinstance(message, Mapping) else None
    return float(when) if isinstance(when, int | float) else 0.0


PART_LEFT_OUT = "image, audio, file or attachment left out (its message's text is kept)"
"""The reason reported for each non-text part or attachment of a message that is kept."""


def _part_text(part: object) -> str | None:
    """A content part's text: a string, or a spoken turn's transcript; None for the rest.

    ChatGPT exports a voice turn as `multimodal_text` whose parts are an
    `audio_transcription` (`text`: what was said) and a pointer to the audio.
    """
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping) and part.get("content_type") == "audio_transcription":
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


def _parts_left_out(message: Mapping[str, Any]) -> int:
    """A kept message's parts that are not text (images, audio, files), and its attachments."""
    content = message.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    other = sum(_part_text(p) is None for p in parts) if isinstance(parts, list) else 0
    metadata = message.get("metadata")
    attached = metadata.get("attachments") if isinstance(metadata, Mapping) else None
    return other + (len(attached) if isinstance(attached, list) else 0)


def _chatgpt_text(content: Mapping[str, Any]) -> str:
    parts = content.get("parts")
    if isinstance(parts, list):
        texts = [t for t in map(_part_text, parts) if t is not None and t.strip()]
        return "\n".join(texts)
    text = content.get("text")
    return text if isinstance(text, str) else ""


def _skip_reason(message: Mapping[str, Any], role: object) -> str | None:
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("is_visually_hidden_from_conversation"):
        return "hidden message"
    if role == "tool":
        return "tool output"
    if role not in ("user", "assistant", "system"):
        return f"message from {role!r}"
    if role == "assistant" and message.get("recipient", "all") != "all":
        return "tool call"
    content = message.get("content")
    if not isinstance(content, Mapping):
        return "no content"
    kind = content.get("content_type", "text")
    if kind not in ("text", "multimodal_text"):
        return _SKIPPED_CONTENT.get(str(kind), f"{kind} content")
    if not _chatgpt_text(content).strip():
        return "no text (image, audio or file only)" if kind == "multimodal_text" else "no text"
    return None


def _usable_id(value: object) -> TypeGuard[str]:
    """Whether an export's id can be a thread or message id (`storable.check_id`)."""
    return isinstance(value, str) and bool(value.strip()) and storable(value)


def _conversation(
    raw: Mapping[str, Any], index: int, resource_id: str, report: ImportReport
) -> Conversation | None:
    title = raw.get("title") if isinstance(raw.get("title"), str) else None
    where = f'conversation "{title}"' if title else f"conversation #{index + 1}"
    mapping = raw.get("mapping")
    if not isinstance(mapping, Mapping):
        report.skipped.append(Skipped(where, "no 'mapping' of messages"))
        return None
    thread = raw.get("conversation_id") or raw.get("id")
    if not _usable_id(thread):  # missing, or no storage can hold it: derived
        thread = stable_id("chatgpt", title or "", str(raw.get("create_time")), "", index)
    conversation = Conversation(resource_id, thread, title=title)
    fallback_time = raw.get("create_time")
    for position, node in enumerate(_main_branch(mapping, raw.get("current_node"))):
        message = node.get("message")
        if not isinstance(message, Mapping):
            continue  # the root node carries no message
        author = message.get("author")
        role = author.get("role") if isinstance(author, Mapping) else None
        reason = _skip_reason(message, role)
        if reason is not None:
            if reason != "hidden message" or role != "system":  # ChatGPT's empty system root
                report.skipped.append(Skipped(where, reason))
            continue
        content = message["content"]
        report.skipped.extend([Skipped(where, PART_LEFT_OUT)] * _parts_left_out(message))
        kwargs: dict[str, Any] = {}
        when = message.get("create_time") or fallback_time
        if isinstance(when, int | float | str) and not isinstance(when, bool):
            try:
                kwargs[CREATED_AT_KEY] = parse_time(when).isoformat()
            except InvalidInputError:
                report.skipped.append(Skipped(where, f"bad create_time {when!r} ignored"))
        if title:
            kwargs[TITLE_KEY] = title
        text = _chatgpt_text(content)
        message_id = next((i for i in (message.get("id"), node.get("id")) if _usable_id(i)), None)
        if message_id is None:
            message_id = stable_id(thread, str(role), text, str(when or ""), position)
        cls = ROLES[str(role)]
        conversation.messages.append(cls(content=text, id=message_id, additional_kwargs=kwargs))
        conversation.where.append(where)
    if not conversation.messages:
        report.skipped.append(Skipped(where, "no user or assistant text"))
        return None
    return conversation


def read_chatgpt_conversations(data: object, *, resource_id: str) -> ImportReport:
    """Conversations of a parsed ChatGPT export (a list, or one conversation object).

    Args:
        data: The parsed `conversations.json`.
        resource_id: Whose conversations these are (the export does not say).
    """
    if not isinstance(resource_id, str) or not resource_id.strip():
        raise InvalidInputError("a ChatGPT export needs a resource id: whose conversations?")
    items: Sequence[Any]
    if isinstance(data, list) and data and not any(isinstance(item, Mapping) for item in data):
        raise InvalidInputError(
            "not a ChatGPT export: expected a list of conversations (JSON objects with a "
            f"'mapping'), got a list of {type(data[0]).__name__}; pass the export's "
            "conversations.json (or its .zip)"
        )
    if isinstance(data, list):
        items = data
    elif isinstance(data, Mapping) and "mapping" in data:
        items = [data]
    else:
        raise InvalidInputError(
            "not a ChatGPT export: expected a list of conversations with a 'mapping'"
        )
    report = ImportReport(format="chatgpt")
    seen: set[str] = set()
    for index, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            report.skipped.append(Skipped(f"conversation #{index + 1}", "not a JSON object"))
            continue
        conversation = _conversation(raw, index, resource_id, report)
        if conversation is None:
            continue
        if conversation.thread_id in seen:
            report.skipped.append(
                Skipped(f"conversation #{index + 1}", "repeats an earlier conversation id")
            )
            continue
        seen.add(conversation.thread_id)
        report.conversations.append(conversation)
    return report


def _read_export_text(path: Path) -> str:
    if path.suffix.lower() != ".zip":
        return decode(path.read_bytes(), str(path))
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
            if not names:
                raise InvalidInputError(f"{path} holds no conversations.json")
            name = min(names, key=len)
            return decode(archive.read(name), f"{path}:{name}")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as error:
        raise InvalidInputError(
            f"{path} is not a readable zip archive ({error}); download the export again, "
            "or unzip it and pass its conversations.json"
        ) from error


def read_chatgpt_export(path: str | PathLike[str], *, resource_id: str) -> ImportReport:
    """Read a ChatGPT `conversations.json` (or the export `.zip` that holds it).

    Args:
        path: `conversations.json`, or the export `.zip` holding it.
        resource_id: The owner of every conversation (an export does not say).

    Raises:
        InvalidInputError: Not UTF-8 / UTF-16 text, not a readable zip, not JSON (or
            JSON nested too deeply to read), or not a list of conversations.
    """
    text = _read_export_text(Path(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        # several values, one a line: our JSONL given as an export (`--format chatgpt`)
        hint = "; it looks like JSON lines (the jsonl format)" if error.msg == "Extra data" else ""
        raise InvalidInputError(f"{path} is not JSON: {error}{hint}") from error
    except RecursionError as error:
        raise InvalidInputError(
            f"{path} is JSON nested too deeply to read; it is not a ChatGPT export"
        ) from error
    try:
        return read_chatgpt_conversations(data, resource_id=resource_id)
    except RecursionError as error:
        raise InvalidInputError(
            f"{path} holds a conversation nested too deeply to read; it is not a ChatGPT export"
        ) from error
