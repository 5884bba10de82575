"""What one recall injected, as one record (pure, no I/O).

`RecallReport` is built once per recall, where the injected messages are decided
(`injection.inject_reported`), and shown unchanged on every surface: as the outputs of
the `semantic_recall` child run in the callback tree (LangSmith or any callback
handler, see `visible`), in the graph's `recalled_memory` channel and in the agent
middleware's state update (`RecalledMemory.report`).

```python
report = graph.invoke(inputs, config)  # or the middleware's / a callback's view
recalled = state["recalled_memory"].report
recalled.message_ids  # ("m-12", "m-13")
recalled.as_dict()  # JSON-ready: what a tracer shows
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.records import RecallHit, StoredMessage

RUN_NAME: Final = "semantic_recall"
"""Name of the child run each recall adds to the callback tree."""


@dataclass(frozen=True, slots=True)
class RecalledItem:
    """One stored message that recall put in front of the model."""

    message_id: str
    thread_id: str
    role: str
    created_at: datetime
    score: float
    """Score of the search hit whose window brought it (in [0, 1])."""
    hit: bool
    """True for the hit itself; False for a neighbour from its context window."""
    chars: int
    """Characters of the message's stored text (the block may show fewer: `max_block_chars`)."""
    placed: Literal["thread", "block"]
    """`"thread"`: injected as itself (same thread); `"block"`: quoted in the memory block."""

    def as_dict(self) -> dict[str, Any]:
        """The item as JSON-ready values (the time in ISO 8601)."""
        return {
            "message_id": self.message_id,
            "thread_id": self.thread_id,
            "role": self.role,
            "created_at": self.created_at.isoformat(),
            "score": round(self.score, 6),
            "hit": self.hit,
            "chars": self.chars,
            "placed": self.placed,
        }


@dataclass(frozen=True, slots=True)
class RecallReport:
    """What one recall injected (nothing: `items` is empty and `status` says why)."""

    status: Literal["injected", "nothing relevant", "no query", "failed"]
    """`"failed"`: the embedder, index or storage failed (logged); the turn went on."""
    query: str | None = None
    """The text searched (the newest human message's), if any."""
    thread_id: str | None = None
    resource_id: str | None = None
    items: tuple[RecalledItem, ...] = ()
    """The injected messages, in the order the model sees them."""
    injected_chars: int = 0
    """Characters injected in all: the memory block's text plus same-thread messages."""
    error: str | None = None
    """The failure, when `status` is `"failed"`."""

    @property
    def message_ids(self) -> tuple[str, ...]:
        """Ids of the injected messages."""
        return tuple(item.message_id for item in self.items)

    @property
    def threads(self) -> tuple[str, ...]:
        """Threads the injected messages come from, in first-seen order."""
        return tuple(dict.fromkeys(item.thread_id for item in self.items))

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (a callback's outputs, a log line)."""
        return {
            "status": self.status,
            "query": self.query,
            "thread_id": self.thread_id,
            "resource_id": self.resource_id,
            "message_ids": list(self.message_ids),
            "threads": list(self.threads),
            "injected_chars": self.injected_chars,
            "items": [item.as_dict() for item in self.items],
            "error": self.error,
        }


def _text_chars(message: BaseMessage) -> int:
    content = message.content
    if isinstance(content, str):
        return len(content)
    return len(message.text)


def build_report(
    query: str,
    hits: Sequence[RecallHit],
    *,
    thread_id: str | None,
    resource_id: str | None,
    same: Sequence[tuple[StoredMessage, BaseMessage]],
    block: tuple[Sequence[StoredMessage], BaseMessage] | None,
) -> RecallReport:
    """The report of one injection: `same` (stored, injected) pairs, the `block`'s messages.

    Scores come from the hits whose windows brought each message (the best, if several).
    """
    scores: dict[str, float] = {}
    hit_ids = {hit.message.id for hit in hits}
    for hit in hits:
        for message in hit.window:
            scores[message.id] = max(scores.get(message.id, 0.0), hit.score)
    items: list[RecalledItem] = []
    chars = 0
    if block is not None:
        quoted, shown = block
        chars += _text_chars(shown)
        items.extend(_item(m, scores, hit_ids, "block") for m in quoted)
    for stored, injected in same:
        chars += _text_chars(injected)
        items.append(_item(stored, scores, hit_ids, "thread"))
    return RecallReport(
        status="injected" if items else "nothing relevant",
        query=query,
        thread_id=thread_id,
        resource_id=resource_id,
        items=tuple(items),
        injected_chars=chars,
    )


def _item(
    stored: StoredMessage,
    scores: Mapping[str, float],
    hit_ids: set[str],
    placed: Literal["thread", "block"],
) -> RecalledItem:
    return RecalledItem(
        message_id=stored.id,
        thread_id=stored.thread_id,
        role=stored.role,
        created_at=stored.created_at,
        score=scores.get(stored.id, 0.0),
        hit=stored.id in hit_ids,
        chars=len(stored.text),
        placed=placed,
    )
