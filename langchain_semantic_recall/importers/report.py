"""What a conversation file held: its conversations, and what was skipped and why.

The plain data shared by the readers of `langchain_semantic_recall.importers`, and
`decode`, the text encodings they accept.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_semantic_recall.errors import InvalidInputError

__all__ = [
    "FORMATS",
    "ROLES",
    "Conversation",
    "Format",
    "ImportReport",
    "Skipped",
    "decode",
    "read_text",
]

Format = Literal["jsonl", "chatgpt"]
FORMATS: tuple[Format, ...] = ("jsonl", "chatgpt")

ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
    "system": SystemMessage,
}
"""The message class of each plain role a file may name (`tool` needs a full message)."""


@dataclass
class Conversation:
    """The messages of one thread, in order, ready for `SemanticRecall.index`."""

    resource_id: str
    thread_id: str
    messages: list[BaseMessage] = field(default_factory=list)
    title: str | None = None
    where: list[str] = field(default_factory=list)
    """Where each message is in the file (`line 7`, `conversation "Title"`), in order."""
    legacy_ids: dict[int, str] = field(default_factory=dict)
    """Position -> the id an earlier version derived for that message (from its line
    number), for each JSONL line without an id: `ingest` finds a message stored under it
    rather than storing it twice."""

    def __len__(self) -> int:
        return len(self.messages)

    def place(self, position: int) -> str:
        """Where the message at `position` is in the file (the thread, if not recorded).

        Args:
            position: The message's position in the conversation.
        """
        if position < len(self.where):
            return self.where[position]
        return f"thread {self.thread_id!r}"


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something in a file that was not imported, and why."""

    where: str
    """`line 7` (JSONL) or `conversation "Title"` (ChatGPT export)."""
    reason: str


@dataclass
class ImportReport:
    """What a file held: conversations, and what was skipped with the reason."""

    format: Format = "jsonl"
    conversations: list[Conversation] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        """Messages in every conversation read."""
        return sum(len(c.messages) for c in self.conversations)


def decode(data: bytes, name: str) -> str:
    """Text of a file: UTF-8 (a byte order mark dropped) or UTF-16 with its byte order mark.

    Args:
        data: The file's bytes.
        name: The file, as named in the error.

    Raises:
        InvalidInputError: Another encoding; the message says how to convert it.
    """
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise InvalidInputError(
            f"{name} is not UTF-8 text (byte {error.start} cannot be decoded as "
            f"{error.encoding}): convert it first, e.g. "
            f"'iconv -f LATIN1 -t UTF-8 {name} > converted' with its real encoding"
        ) from error


def read_text(path: Path) -> str:
    """`decode` of a file's bytes."""
    return decode(path.read_bytes(), str(path))
