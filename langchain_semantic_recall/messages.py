"""Pure helpers over LangChain messages: roles, text, queries, ids, times, tags.

No I/O here: everything is deterministic and tested directly.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    message_to_dict,
)

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.filters import METADATA_KEY, MetadataValue, message_metadata
from langchain_semantic_recall.quoting import has_text
from langchain_semantic_recall.records import MessageRecord, Role, StoredMessage, unembedded_reason
from langchain_semantic_recall.storable import check_id, check_message_id, encodable

MEMORY_SOURCE = "memory"
"""Value of `additional_kwargs["source"]` on every message that recall injects."""

MEMORY_TOOL_SOURCE = "memory_search"
"""Value of `additional_kwargs["source"]` on the memory search tool's answers: stored with
the conversation (its tool call keeps its result), never handed back by recall."""

CREATED_AT_KEY = "created_at"
"""`additional_kwargs` key a message may carry to give its own creation time (import)."""

_ID_NAMESPACE = uuid.UUID("0b6f8d1e-5d0c-4c47-9a59-3f1d7e2f4a10")
_CHAT_ROLES: dict[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}


def clean_text(text: str) -> str:
    """`text` with lone surrogates (unencodable halves of a pair) replaced by U+FFFD."""
    if encodable(text):
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def to_messages(value: object) -> list[BaseMessage]:
    """Coerce a message list (or one string / message-like) into LangChain messages."""
    if isinstance(value, BaseMessage | str | tuple | dict):
        value = [value]
    if hasattr(value, "to_messages"):  # a PromptValue
        return list(value.to_messages())
    if not isinstance(value, Iterable):
        raise InvalidInputError(f"expected a list of messages, got {type(value).__name__}")
    try:
        messages = convert_to_messages(list(value))
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as error:
        # langchain_core raises all of these on malformed message-likes (e.g. KeyError
        # for ("tool", "text") without a tool_call_id).
        raise InvalidInputError(
            f"cannot read these messages ({type(error).__name__}: {error}); pass LangChain "
            "messages, (role, text) tuples or {'role': ..., 'content': ...} dicts"
        ) from error
    for message in messages:
        if message.id is not None and not isinstance(message.id, str):
            raise InvalidInputError(
                f"message ids must be strings, got {type(message.id).__name__} {message.id!r}"
            )
        if message.id:
            check_message_id(message.id)
    return messages


def role_of(message: BaseMessage) -> Role | None:
    """The storage role of a message, or None for messages that are not stored."""
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage | FunctionMessage):
        return "tool"
    if isinstance(message, ChatMessage):  # a role we do not know is nobody's words to store
        return _CHAT_ROLES.get(message.role.lower())  # (as "user" it became the query)
    return None  # RemoveMessage and unknown types


def text_of(message: BaseMessage, sep: str = " ") -> str:
    """Text of a message: a string content, or the text parts of a list joined by `sep`.

    Non-text parts (images, audio, tool calls) are ignored; nesting is not followed.
    """
    content: Any = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
    return sep.join(p for p in parts if p)


def query_text(messages: Sequence[BaseMessage]) -> str | None:
    """The newest human message's text, or the newest earlier one that has text.

    Lone surrogates are replaced (`clean_text`) so that any embedder can take it.
    """
    for message in reversed(messages):
        if isinstance(message, HumanMessage) or (
            isinstance(message, ChatMessage) and role_of(message) == "user"
        ):
            text = clean_text(text_of(message, " ")).strip()
            if has_text(text):
                return text
    return None


def is_recalled(message: BaseMessage) -> bool:
    """Whether the message was injected by recall (tagged `source: memory`)."""
    return message.additional_kwargs.get("source") == MEMORY_SOURCE


def echoes_memory(stored: StoredMessage) -> bool:
    """Whether a stored message is the memory search tool's answer (recalled text)."""
    if stored.role != "tool":
        return False
    data = json.loads(stored.payload).get("data", {})
    return bool(data.get("additional_kwargs", {}).get("source") == MEMORY_TOOL_SOURCE)


def tag_as_memory(message: BaseMessage) -> BaseMessage:
    """A copy of the message tagged `source: memory` (the original is untouched)."""
    kwargs = {**message.additional_kwargs, "source": MEMORY_SOURCE}
    return message.model_copy(update={"additional_kwargs": kwargs})


def _milliseconds_hint(value: float) -> str:
    """What an epoch in milliseconds (JavaScript's `Date.now()`) would mean in seconds."""
    try:
        seconds = datetime.fromtimestamp(float(value) / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return f" (milliseconds? divide by 1000: {seconds.isoformat().replace('+00:00', 'Z')})"


def parse_time(value: object) -> datetime:
    """A timezone-aware UTC datetime from a datetime, ISO 8601 text or epoch seconds.

    Naive datetimes and ISO texts without an offset are taken as UTC.
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError) as error:
            raise InvalidInputError(
                f"created_at {value!r} is not a valid time: epoch seconds are expected"
                + _milliseconds_hint(value)
            ) from error
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as error:
            raise InvalidInputError(
                f"created_at {value!r} is not ISO 8601 (e.g. '2024-01-15T10:30:00Z')"
            ) from error
    else:
        raise InvalidInputError(
            f"created_at must be a datetime, ISO 8601 text or epoch seconds, got {value!r}"
        )
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError as error:  # e.g. 0001-01-01T00:00+01:00 lies before year 1 in UTC
        raise InvalidInputError(
            f"created_at {value!r} lies outside the range of dates (years 1-9999 in UTC)"
        ) from error


def stable_id(
    thread_id: str, role: str, text: str, created_at: str, position: int, *, kind: str = ""
) -> str:
    """A deterministic id from a message's place in its conversation (imports, graph state).

    Never from the text alone: `position` is the message's place in the whole imported
    conversation or graph state, so two equal texts are two messages. `kind` names
    another meaning of `position` (a JSONL line's: how many lines of its thread before
    it hold the same text, `"jsonl"`), so ids of two derivations never meet.
    """
    parts = (thread_id, role, created_at, str(position), text)
    key = "\x1f".join((kind, *parts) if kind else parts)
    # uuid5 itself, but a lone surrogate (a JSON "\\ud800" escape) keeps its bytes
    # instead of failing to encode: the same id as uuid5 for every other text.
    name = key.encode("utf-8", "surrogatepass")
    digest = hashlib.sha1(_ID_NAMESPACE.bytes + name, usedforsecurity=False).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def own_reply_id(thread_id: str, asked_id: str, reply_id: str) -> str:
    """The id a turn's reply is stored under when another thread holds its own.

    LangChain's LLM cache hands back a reply with the id of its first use, in any thread
    of any user. Made from the thread, the id of the user message the reply answers and
    the reply's own id: the same at every retry of the turn, another at each turn (a
    cache hands back one id at every hit), and out of another user's reach (they never
    see this thread's user message ids), so no one can take it first.

    Args:
        thread_id: The thread the reply is stored in.
        asked_id: The id of the turn's user message.
        reply_id: The reply's id, which another thread holds.
    """
    return stable_id(thread_id, asked_id, reply_id, "", 0, kind="reply")


def _not_json(value: object) -> object:
    """`json.dumps`' hook for values JSON cannot hold: refuse them (never `str()` them)."""
    raise TypeError(f"a {type(value).__name__} value is not JSON data")


def _dumps(message: BaseMessage, *, ascii_only: bool) -> str:
    return str(json.dumps(message_to_dict(message), ensure_ascii=ascii_only, default=_not_json))


def _unstorable_key(message: BaseMessage) -> str:
    """The first `additional_kwargs` key whose value JSON cannot hold ('' if none)."""
    for key, value in message.additional_kwargs.items():
        try:
            json.dumps(value, default=_not_json)
        except (RecursionError, ValueError, TypeError):
            return str(key)
    return ""


def serialise(message: BaseMessage) -> str:
    """The storage payload of a message: its full LangChain form as JSON text.

    It reads back as the same message: a value JSON cannot hold (an object, a set,
    bytes, a datetime other than `created_at`) is refused rather than stored as its
    `str()`, which would come back changed. A `datetime` `created_at` is stored as ISO
    8601 text (the record keeps the instant). Text that UTF-8 cannot hold (lone
    surrogates) is written as JSON escapes, so the message still comes back as it was
    (a pair of surrogate code points comes back as the one character it encodes, as
    JSON reads it).

    Raises:
        InvalidInputError: the message cannot be written as JSON (a value JSON cannot
            hold, content nested too deeply, or containing itself).
    """
    carried = message.additional_kwargs.get(CREATED_AT_KEY)
    if isinstance(carried, datetime):
        kwargs = {**message.additional_kwargs, CREATED_AT_KEY: carried.isoformat()}
        message = message.model_copy(update={"additional_kwargs": kwargs})
    try:
        payload = _dumps(message, ascii_only=False)
        if not encodable(payload):
            payload = _dumps(message, ascii_only=True)
    except (RecursionError, ValueError, TypeError) as error:
        key = _unstorable_key(message)
        where = f"additional_kwargs[{key!r}]" if key else "its content or additional_kwargs"
        raise InvalidInputError(
            f"message {message.id!r} cannot be stored: {where} cannot be written as JSON "
            f"({type(error).__name__}: {error}), so it would not come back as it was; pass "
            "plain JSON data (str, numbers, bools, None, lists, dicts), e.g. convert it first"
        ) from error
    return payload


def is_removal(message: BaseMessage) -> bool:
    """A LangGraph `RemoveMessage`: a state instruction, never stored."""
    return isinstance(message, RemoveMessage)


def not_stored_reason(message: BaseMessage) -> str | None:
    """Why the storage does not keep this message, or None if it does."""
    if is_removal(message):
        return "a RemoveMessage (a state instruction, not a message)"
    if is_recalled(message):
        return "recalled memory (source: memory)"
    if role_of(message) is None:
        if isinstance(message, ChatMessage):
            return (
                f"a ChatMessage of role {message.role[:40]!r}, which the storage does not "
                f"know (it keeps {', '.join(sorted(_CHAT_ROLES))})"
            )
        return f"{type(message).__name__} is not a message type the storage keeps"
    return None


def stored_as_given(before: StoredMessage, record: MessageRecord) -> bool:
    """Whether writing `record` over `before` (same id) would change nothing stored.

    `index` and `bulk_index` leave such a message unwritten ("unchanged"); any other
    difference is an edit, which keeps `before`'s creation time unless it carries one.
    """
    return (before.role, before.text, before.payload, before.metadata) == (
        record.role,
        record.text,
        record.payload,
        record.metadata,
    )


def rewrites_vectors(before: StoredMessage, record: MessageRecord) -> bool:
    """Whether an edit (`record` over `before`, same id) leaves vectors of the old text.

    A new text may be embedded as fewer chunks than the old one, or not at all (no text,
    a system message): the upsert overwrites only the chunks it writes, so the message's
    old vectors, and the text they carry, are deleted before its new ones are written.
    A message that had none (a system or tool message, no text) has none to delete.
    """
    return skip_reason(before) is None and (before.role, before.text) != (
        record.role,
        record.text,
    )


def record_for(
    message: BaseMessage,
    *,
    position: int,
    thread_id: str,
    resource_id: str,
    now: datetime,
    fresh_id: bool,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> MessageRecord:
    """The storage record of one message that the storage keeps (see `not_stored_reason`).

    A message may carry its creation time in `additional_kwargs["created_at"]`;
    otherwise it is `now` plus `position` microseconds, so a turn keeps its order. A
    message without an id gets one: with `fresh_id` (one turn of a live conversation)
    a new random id, so two equal texts ("yes", "thanks") are two messages; otherwise
    (an import of whole conversations) or when it carries its creation time, an id
    derived from its thread, position, role, time and text, so importing again adds
    nothing. Identity never comes from the text alone.

    Its metadata is `metadata` (checked by the caller, `filters.check_metadata`) with
    the message's own `additional_kwargs["metadata"]` over it (`filters.message_metadata`).

    Raises:
        InvalidInputError: a bad `created_at` or metadata, or a message that cannot be
            serialised.
    """
    role = role_of(message)
    if role is None:
        raise InvalidInputError(f"{type(message).__name__} messages are not stored")
    carried = message.additional_kwargs.get(CREATED_AT_KEY)
    created_at = (
        parse_time(carried) if carried is not None else now + timedelta(microseconds=position)
    )
    text = clean_text(text_of(message, "\n"))
    message_id = message.id
    if not message_id:
        if fresh_id and carried is None:
            message_id = str(uuid.uuid4())
        else:
            when = "" if carried is None else created_at.isoformat()
            message_id = stable_id(thread_id, role, text, when, position)
    stored = message if message.id == message_id else message.model_copy(update={"id": message_id})
    kept = message_metadata(
        message.additional_kwargs.get(METADATA_KEY), metadata, message_id=message_id
    )
    return MessageRecord(
        id=message_id,
        thread_id=thread_id,
        resource_id=resource_id,
        role=role,
        text=text,
        created_at=created_at,
        payload=serialise(stored),
        metadata=kept,
    )


def build_records(
    messages: Sequence[BaseMessage],
    *,
    thread_id: str,
    resource_id: str,
    now: datetime,
    fresh_ids: bool = False,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> list[MessageRecord]:
    """Storage records of the messages the storage keeps (see `record_for`).

    Raises:
        InvalidInputError: an unusable thread or resource id (`check_id`), a bad
            `created_at`, or a message that cannot be serialised.
    """
    check_id("thread_id", thread_id)
    check_id("resource_id", resource_id)
    return [
        record_for(
            message,
            position=position,
            thread_id=thread_id,
            resource_id=resource_id,
            now=now,
            fresh_id=fresh_ids,
            metadata=metadata,
        )
        for position, message in enumerate(messages)
        if not_stored_reason(message) is None
    ]


def skip_reason(record: MessageRecord, message: BaseMessage | None = None) -> str | None:
    """Why a stored message gets no vector, or None if it is embedded (`unembedded_reason`).

    With the message it was stored from, an assistant turn of tool calls alone says so.
    """
    reason = unembedded_reason(record)
    if reason == "no text" and isinstance(message, AIMessage) and message.tool_calls:
        return "tool calls only"
    return reason
