"""What a conversation file held: its conversations, and what was skipped and why.

The plain data shared by the readers of `langchain_semantic_recall.importers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

__all__ = ["FORMATS", "ROLES", "Conversation", "Format", "ImportReport", "Skipped"]

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
