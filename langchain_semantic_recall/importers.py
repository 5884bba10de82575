"""Reading conversations from files: our JSONL format (one message a line).

Each line is a JSON object::

    {"resource": "alice", "thread": "trip", "role": "user", "content": "Hi!",
     "id": "optional-stable-id", "created_at": "2024-01-15T10:30:00Z"}

``role`` is one of ``user``, ``assistant``, ``system``, ``tool``; ``id`` and
``created_at`` are optional (without an id, one is derived from the line's content and
position, so importing the same file twice adds nothing). Lines keep their order within
a thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_semantic_recall.messages import CREATED_AT_KEY, parse_time, stable_id

_ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
    "system": SystemMessage,
}


@dataclass
class Conversation:
    """The messages of one thread, in order, ready for ``SemanticRecall.index``."""

    resource_id: str
    thread_id: str
    messages: list[BaseMessage] = field(default_factory=list)


@dataclass
class ImportReport:
    """What a file held: conversations, and lines skipped with the reason."""

    conversations: list[Conversation] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return sum(len(c.messages) for c in self.conversations)


def _message(row: dict[str, object], line_no: int) -> tuple[str, str, BaseMessage]:
    resource, thread = row.get("resource"), row.get("thread")
    role, content = row.get("role"), row.get("content")
    if not isinstance(resource, str) or not resource.strip():
        raise ValueError("'resource' must be a non-empty string")
    if not isinstance(thread, str) or not thread.strip():
        raise ValueError("'thread' must be a non-empty string")
    if not isinstance(role, str) or role.lower() not in _ROLES:
        raise ValueError(f"'role' must be one of user, assistant, system; got {role!r}")
    if not isinstance(content, str):
        raise ValueError("'content' must be a string")
    kwargs: dict[str, object] = {}
    created = row.get("created_at")
    if created is not None:
        kwargs[CREATED_AT_KEY] = parse_time(created).isoformat()
    message_id = row.get("id")
    if message_id is None:
        message_id = stable_id(thread, role, content, str(created or ""), line_no)
    if not isinstance(message_id, str) or not message_id:
        raise ValueError("'id' must be a non-empty string when given")
    cls = _ROLES[role.lower()]
    return resource, thread, cls(content=content, id=message_id, additional_kwargs=kwargs)


def read_jsonl_lines(lines: Iterable[str]) -> ImportReport:
    """Parse JSONL lines into conversations; bad lines are reported, not fatal."""
    report = ImportReport()
    by_thread: dict[str, Conversation] = {}
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("a line must be a JSON object")
            resource, thread, message = _message(row, line_no)
        except (ValueError, TypeError) as error:
            report.skipped.append((line_no, str(error)))
            continue
        conversation = by_thread.get(thread)
        if conversation is None:
            conversation = by_thread[thread] = Conversation(resource, thread)
            report.conversations.append(conversation)
        elif conversation.resource_id != resource:
            report.skipped.append(
                (line_no, f"thread {thread!r} already belongs to {conversation.resource_id!r}")
            )
            continue
        conversation.messages.append(message)
    return report


def read_jsonl(path: str | PathLike[str]) -> ImportReport:
    """Read a JSONL file of messages (see the module docstring for the format)."""
    with Path(path).open(encoding="utf-8") as handle:
        return read_jsonl_lines(handle)


def demo_conversations() -> ImportReport:
    """The small multi-thread conversation shipped with the package (used by the demo)."""
    from importlib.resources import files

    text = files("langchain_semantic_recall").joinpath("data/demo_conversations.jsonl")
    return read_jsonl_lines(text.read_text(encoding="utf-8").splitlines())
