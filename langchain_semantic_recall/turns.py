"""One user turn of memory, for any agent runtime: recall it, then index what it added.

Shared by the LangGraph nodes (:mod:`.graph`) and the agent middleware
(:mod:`.middleware`), so both recall once per user turn and store each message once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)

from langchain_semantic_recall.errors import InvalidInputError, OwnershipError
from langchain_semantic_recall.messages import is_recalled, role_of, stable_id, text_of, to_messages
from langchain_semantic_recall.records import IndexResult, ScopeFilter

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

_LOG = logging.getLogger(__name__)

RECALL_KEY = "recalled_memory"
"""Default name of the per-run channel holding this turn's :class:`RecalledMemory`."""

_PROBE = 64
"""Messages checked against the storage at a time, newest first, by the index side."""


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """What recall found for one user turn: the messages to show the model.

    Attributes:
        turn: id of the user message this recall answers (``None``: no user message).
        messages: the recalled messages, each tagged ``source: memory``: the
            cross-thread block (a system message) first, then same-thread messages.
    """

    turn: str | None = None
    messages: tuple[BaseMessage, ...] = ()

    @property
    def block(self) -> SystemMessage | None:
        """The cross-thread memory block, if any."""
        return next((m for m in self.messages if isinstance(m, SystemMessage)), None)

    def apply(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """``messages`` with the recalled ones inserted (see :func:`inject_recalled`)."""
        return inject_recalled(messages, self.messages)


# --- pure helpers -----------------------------------------------------------------------


def state_messages(state: Any, key: str = "messages") -> list[BaseMessage]:
    """The conversation held in ``state[key]`` (a mapping or an object with that field)."""
    if isinstance(state, Mapping) and key in state:
        value = state[key]
    elif not isinstance(state, Mapping) and hasattr(state, key):
        value = getattr(state, key)
    else:
        raise InvalidInputError(
            f"the graph state has no {key!r} channel: semantic recall reads the "
            f"conversation from state[{key!r}]. Use RecallState (or MessagesState) as the "
            "state schema, or pass messages_key= with the name of your messages channel"
        )
    return to_messages(value)


def _is_user(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and role_of(message) == "user"
    )


def current_turn(messages: Sequence[BaseMessage]) -> str | None:
    """Identity of the current user turn: the newest user message's id (or position)."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if _is_user(message):
            return message.id or f"@{position}"
    return None


def inject_recalled(
    messages: Sequence[BaseMessage], recalled: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """``messages`` with ``recalled`` after the leading system messages.

    The same order as the engine's recall: instructions first, then the memory block and
    same-thread recalled messages, then the live conversation. Recalled messages whose id
    is already in ``messages`` are left out.
    """
    present = {m.id for m in messages if m.id}
    extra = [m for m in recalled if not (m.id and m.id in present)]
    if not extra:
        return list(messages)
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], SystemMessage):
        lead += 1
    return [*messages[:lead], *extra, *messages[lead:]]


def recalled_for_turn(
    state: Any, messages: Sequence[BaseMessage], key: str = RECALL_KEY
) -> RecalledMemory | None:
    """The state's recall if it answers the current turn, else ``None``."""
    value = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if isinstance(value, RecalledMemory) and value.turn == current_turn(messages):
        return value
    return None


def with_recall(
    state: Any, *, messages_key: str = "messages", recall_key: str = RECALL_KEY
) -> list[BaseMessage]:
    """The messages to send to the model: the conversation plus this turn's recall.

    Use it in the model node of a hand-built graph whose state has a ``recalled_memory``
    channel filled by :class:`RecallNode` (e.g. :class:`RecallState`). Without a recall for
    the current turn the conversation is returned unchanged.
    """
    messages = state_messages(state, messages_key)
    recalled = recalled_for_turn(state, messages, recall_key)
    return messages if recalled is None else recalled.apply(messages)


def _added(before: Sequence[BaseMessage], after: Sequence[BaseMessage]) -> tuple[BaseMessage, ...]:
    present = {id(m) for m in before}
    return tuple(m for m in after if id(m) not in present)


def _storable(messages: Sequence[BaseMessage], thread_id: str) -> list[BaseMessage]:
    """The messages the storage keeps, each with an id (positional if it had none)."""
    kept: list[BaseMessage] = []
    for position, message in enumerate(messages):
        role = role_of(message)
        if role is None or isinstance(message, RemoveMessage) or is_recalled(message):
            continue
        if message.id:
            kept.append(message)
        else:
            key = stable_id(thread_id, role, text_of(message, "\n"), "", position)
            kept.append(message.model_copy(update={"id": key}))
    return kept


def _after_last_stored(
    candidates: Sequence[BaseMessage], start: int, end: int, stored: Mapping[str, Any]
) -> int | None:
    """Index just past the newest stored message in ``candidates[start:end]``, if any."""
    for position in range(end - 1, start - 1, -1):
        if candidates[position].id in stored:
            return position + 1
    return None


def _refuse_other_owner(owner: str | None, thread_id: str, resource_id: str | None) -> None:
    if owner is not None and resource_id is not None and owner != resource_id:
        raise OwnershipError(
            f"thread {thread_id!r} belongs to resource {owner!r}, not {resource_id!r}: a "
            f"conversation keeps one owner. Start a new thread id for {resource_id!r}"
        )


# --- the two halves, for one turn ---------------------------------------------------------


def recall_turn(
    memory: SemanticRecall,
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    resource_id: str | None,
) -> RecalledMemory:
    """Recall for the current turn of ``messages`` (no state is written).

    Raises:
        OwnershipError: the thread belongs to another resource.
    """
    try:
        owner = memory.storage.get_thread_owner(thread_id)
    except Exception:  # the storage is down: recall degrades, the turn goes on
        _LOG.warning("could not read the owner of thread %r", thread_id, exc_info=True)
        owner = None
    _refuse_other_owner(owner, thread_id, resource_id)
    items = list(messages)
    result = memory.recall(items, thread_id=thread_id, resource_id=resource_id)
    return RecalledMemory(turn=current_turn(items), messages=_added(items, result))


async def arecall_turn(
    memory: SemanticRecall,
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    resource_id: str | None,
) -> RecalledMemory:
    """Async twin of :func:`recall_turn`."""
    try:
        owner = await memory.storage.aget_thread_owner(thread_id)
    except Exception:
        _LOG.warning("could not read the owner of thread %r", thread_id, exc_info=True)
        owner = None
    _refuse_other_owner(owner, thread_id, resource_id)
    items = list(messages)
    result = await memory.arecall(items, thread_id=thread_id, resource_id=resource_id)
    return RecalledMemory(turn=current_turn(items), messages=_added(items, result))


def _probes(count: int) -> list[tuple[int, int]]:
    """(start, end) slices of ``count`` candidates, newest first, ``_PROBE`` at a time."""
    return [(max(0, end - _PROBE), end) for end in range(count, 0, -_PROBE)]


def _ids(candidates: Sequence[BaseMessage], start: int, end: int) -> list[str]:
    return [m.id for m in candidates[start:end] if m.id]


def index_new_messages(
    memory: SemanticRecall,
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    resource_id: str | None,
) -> IndexResult:
    """Store (and embed) the messages after the newest one the storage already holds.

    Raises:
        OwnershipError: the thread (or a message id) belongs to another owner.
        StorageError: the storage could not be written.
    """
    if memory.read_only:
        return IndexResult()
    candidates = _storable(messages, thread_id)
    scope = ScopeFilter(thread_id=thread_id)
    for start, end in _probes(len(candidates)):
        ids = _ids(candidates, start, end)
        found = memory.storage.get_windows(ids, before=0, after=0, scope=scope)
        if (cut := _after_last_stored(candidates, start, end, found)) is not None:
            candidates = candidates[cut:]
            break
    if not candidates:
        return IndexResult()
    return memory.index(candidates, thread_id=thread_id, resource_id=resource_id)


async def aindex_new_messages(
    memory: SemanticRecall,
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    resource_id: str | None,
) -> IndexResult:
    """Async twin of :func:`index_new_messages`."""
    if memory.read_only:
        return IndexResult()
    candidates = _storable(messages, thread_id)
    scope = ScopeFilter(thread_id=thread_id)
    for start, end in _probes(len(candidates)):
        ids = _ids(candidates, start, end)
        found = await memory.storage.aget_windows(ids, before=0, after=0, scope=scope)
        if (cut := _after_last_stored(candidates, start, end, found)) is not None:
            candidates = candidates[cut:]
            break
    if not candidates:
        return IndexResult()
    return await memory.aindex(candidates, thread_id=thread_id, resource_id=resource_id)


# --- nodes ------------------------------------------------------------------------------
