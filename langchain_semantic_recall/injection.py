"""Turning search hits into the messages the model sees (pure, no I/O).

Recalled text is data (SPEC §10, "Authority"): a recalled message never comes back with
more authority than a user or an assistant message. Exactly one system message is
injected, the memory block this package writes (`memory_block`), which quotes the
messages of other conversations, stored system and tool messages included (labelled
`System (quoted)` and `Tool (quoted)`), between nonce-tagged delimiters.

Same-thread recall gives user and assistant messages back as themselves. Stored system
messages are **left out** of it: replaying one as a `SystemMessage` after the app's
prompt would let an ingested file or an old prompt give orders, and quoting it as a
user message would put words in the user's mouth. Tool results are left out too (a
window may cut a tool call from its result, which providers reject), and tool calls are
reduced to their text. A payload whose message type does not match a user or assistant
role (a `SystemMessage` stored under `"role": "user"`) is left out as well.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection, Sequence
from typing import TypeAlias

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_semantic_recall.formatting import (
    MIN_MAX_CHARS,
    cross_thread_block,
    fit_texts,
)
from langchain_semantic_recall.messages import (
    MEMORY_SOURCE,
    clean_text,
    role_of,
    tag_as_memory,
    text_of,
)
from langchain_semantic_recall.quoting import has_text
from langchain_semantic_recall.recall_report import RecallReport, build_report
from langchain_semantic_recall.records import RecallHit, StoredMessage, conversation_title

logger = logging.getLogger(__name__)

LiveKey: TypeAlias = tuple[str | None, str]
"""A message's (role, text), as same-thread recall compares it with the input's."""
_BY_ROLE: dict[str, type[HumanMessage | AIMessage]] = {
    "user": HumanMessage,
    "assistant": AIMessage,
}


def split_recalled(
    hits: Sequence[RecallHit], *, thread_id: str | None, present_ids: set[str]
) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """The windows' messages, deduplicated, minus those already in the input.

    Returns (same-thread messages in thread order, messages of other threads).
    """
    seen: set[str] = set(present_ids)
    same: list[StoredMessage] = []
    other: list[StoredMessage] = []
    for hit in hits:
        for message in hit.window:
            if message.id in seen:
                continue
            seen.add(message.id)
            (same if message.thread_id == thread_id else other).append(message)
    same.sort(key=lambda m: m.seq)
    return same, other


_CALL_KWARGS = ("tool_calls", "function_call")
"""Where a provider's raw calls sit in `additional_kwargs` (OpenAI's tools, and its older
function calling): a recalled message keeps neither."""


def as_recalled_message(stored: StoredMessage) -> BaseMessage | None:
    """A same-thread message, as itself, tagged `source: memory`; None if left out.

    Only user and assistant messages come back (see the module doc): stored system
    messages never regain their authority, and tool results are left out because
    providers reject tool calls without their results (and results without their calls)
    while a window may cut such a pair in half; recalled tool calls are reduced to their
    text. System and tool messages still appear, quoted, in cross-thread blocks.
    """
    if stored.role not in _BY_ROLE:
        return None
    message = _readable(stored)
    if not isinstance(message, _BY_ROLE[stored.role]):
        if message is not None:
            logger.warning(
                "stored message %r is not a %s message: left out", stored.id, stored.role
            )
        return None
    calls = isinstance(message.content, list) and any(map(_is_call_block, message.content))
    if calls or (
        isinstance(message, AIMessage)
        and (
            message.tool_calls
            or message.invalid_tool_calls
            or any(key in message.additional_kwargs for key in _CALL_KWARGS)
        )
    ):
        if not has_text(stored.text):
            return None
        kwargs = {k: v for k, v in message.additional_kwargs.items() if k not in _CALL_KWARGS}
        update: dict[str, object] = {"additional_kwargs": kwargs}
        if isinstance(message, AIMessage):
            update |= {"tool_calls": [], "invalid_tool_calls": []}
        if calls:
            update["content"] = [b for b in message.content if not _is_call_block(b)]
        message = message.model_copy(update=update)
    return tag_as_memory(message)


def _is_call_block(block: object) -> bool:
    """Whether a content block is a tool call or a tool result.

    Anthropic's `tool_use` and `tool_result`, LangChain's `tool_call` and `server_tool_*`,
    OpenAI's `function_call`, `web_search_call`, `mcp_call`, `apply_patch_call` and their
    outputs: providers keep calls in the content too; one recalled without its result (or
    a result without its call) is a call the model did not make, and a request the
    provider rejects.
    """
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str) or kind == "image_generation_call":  # an image, whole
        return False
    return "tool" in kind or kind.endswith(("_call", "_call_output")) or kind.startswith("mcp_")


def _readable(stored: StoredMessage) -> BaseMessage | None:
    """The stored LangChain message; rebuilt from role and text if its payload is unreadable.

    A payload written by another version of LangChain, or damaged in storage, must not
    break the turn: the message is recalled as plain text of its role instead (a tool
    result, which needs its call, a system message and a message without text are dropped).
    """
    try:
        return stored.to_message()
    except Exception:  # any decoding failure: json, unknown type, validation
        logger.warning(
            "stored message %r has an unreadable payload; recalled from its text only",
            stored.id,
            exc_info=True,
        )
    rebuild = _BY_ROLE.get(stored.role)
    if rebuild is None or not has_text(stored.text):
        return None
    return rebuild(content=stored.text, id=stored.id)


def memory_block(
    other: Sequence[StoredMessage],
    *,
    labels: dict[str, str] | None = None,
    max_chars: int | None = None,
) -> tuple[SystemMessage | None, list[StoredMessage]]:
    """The single system message that carries every cross-thread recalled message.

    It is the only system message recall ever injects; its text is the nonce-tagged block
    of `cross_thread_block`, where stored system and tool messages are quoted.

    Returns:
        The block (None: nothing to show) and the messages it shows: under `max_chars`
        it may drop some, and recall reports only what is shown.
    """
    if not other:
        return None, []
    if labels is None:  # conversations that carry a title are labelled with it
        labels = {}
        for message in other:
            if message.thread_id not in labels and (title := conversation_title(message)):
                labels[message.thread_id] = title
    text, ids = cross_thread_block(other, labels=labels, max_chars=max_chars)
    if not text:
        return None, []
    shown = set(ids)
    block = SystemMessage(content=text, additional_kwargs={"source": MEMORY_SOURCE})
    return block, [message for message in other if message.id in shown]


def _text(stored: StoredMessage, message: BaseMessage) -> str:
    """The text a recalled message shows: its content, or its stored plain text."""
    return message.content if isinstance(message.content, str) else stored.text


def bound_recalled(
    recalled: Sequence[tuple[StoredMessage, BaseMessage]], max_chars: int
) -> list[tuple[StoredMessage, BaseMessage]]:
    """Same-thread recalled messages whose text is at most `max_chars` in total.

    A message longer than its fair share is cut to it and ends with a visible
    `… [truncated N chars]` marker (its content becomes that plain text); messages for
    which even a short head does not fit are left out, the latest first (`fit_texts`).
    Returns the (stored, message to inject) pairs kept.
    """
    texts = [_text(stored, message) for stored, message in recalled]
    bounded: list[tuple[StoredMessage, BaseMessage]] = []
    for (stored, message), text, fitted in zip(
        recalled, texts, fit_texts(texts, max_chars), strict=True
    ):
        if fitted is None:
            logger.warning("recalled message %r left out: no room in max_block_chars", stored.id)
        elif fitted == text:
            bounded.append((stored, message))
        else:
            bounded.append((stored, message.model_copy(update={"content": fitted})))
    return bounded


def inject(
    messages: Sequence[BaseMessage],
    hits: Sequence[RecallHit],
    *,
    thread_id: str | None,
    max_block_chars: int | None = None,
    labels: dict[str, str] | None = None,
) -> list[BaseMessage]:
    """The input with recalled messages inserted before the live conversation.

    Order: the input's leading system messages (instructions stay first), the
    cross-thread memory block, the same-thread recalled messages, then the rest of the
    input. Without leading system messages this is the original's order: block,
    recalled same-thread messages, input. No recalled message other than the block is a
    system message.

    With `max_block_chars`, the block's text and the same-thread messages' text together
    are at most that long (`bound_recalled`).
    """
    injected, _ = inject_reported(
        messages, hits, thread_id=thread_id, max_block_chars=max_block_chars, labels=labels
    )
    return injected


def live_key(role: str | None, text: str) -> LiveKey:
    """(role, text) as an input message and a stored one are compared (`_live_earlier`).

    Runs of white space count as one space: a chat client trims the reply it sends back.
    """
    return role, " ".join(text.split())


def earlier_keys(messages: Sequence[BaseMessage]) -> list[tuple[str | None, LiveKey]]:
    """(id, `live_key`) of the input's messages before the newest user message."""
    roles = [role_of(m) for m in messages]
    turn = max((p for p, role in enumerate(roles) if role == "user"), default=len(messages))
    return [
        (m.id, live_key(roles[p], clean_text(text_of(m, "\n"))))
        for p, m in enumerate(messages[:turn])
    ]


def _without_own_conversation(
    other: list[StoredMessage], messages: Sequence[BaseMessage], beside: Sequence[StoredMessage]
) -> list[StoredMessage]:
    """`other` less the copies of the input's earlier messages in its own stored thread.

    With no thread id, nothing in the input is known to be stored: a loop resending its
    history would get it back quoted as "another conversation". A recalled thread is the
    input's own when two of its consecutive messages have the role and text of two
    consecutive earlier input messages, recalled or stored `beside` them (a window keeps
    a hit's likely messages only: the "Got it." between two may be left out); its messages
    matching earlier input messages are left out. A lone "yes" shared with another
    conversation proves nothing, and the newest user message (the turn being asked) hides
    nothing.
    """
    earlier = [key for _, key in earlier_keys(messages)]
    pairs = set(itertools.pairwise(earlier))
    if not pairs:
        return other
    place = {(m.thread_id, m.seq): live_key(m.role, m.text) for m in [*other, *beside]}
    own = {
        thread
        for (thread, seq), key in place.items()
        if (place.get((thread, seq - 1)), key) in pairs
    }
    said = set(earlier)
    return [m for m in other if m.thread_id not in own or live_key(m.role, m.text) not in said]


def _live_earlier(
    messages: Sequence[BaseMessage], unstored: Collection[LiveKey] = ()
) -> set[LiveKey]:
    """(role, text) of earlier input messages stored under other ids (no id, `unstored`).

    A loop that keeps its own history sends its messages without ids, and a stateless
    server's graph gets them with new ids on every request (`add_messages` gives each
    one; the caller finds those ids stored nowhere in the thread: `unstored`): the same
    message recalled into its own thread would sit beside itself. Such a stored message
    is known by its role and text (only to keep it out of this turn's same-thread
    recall; a stored message keeps its own id). A message stored under its own id is
    matched by id alone: a "yes" of the input never hides an earlier "yes" recalled
    with the question it answered. The newest user message is the turn being asked, a
    new message even when its words repeat an old one: the old one is still recalled.
    """
    return {key for key_id, key in earlier_keys(messages) if not key_id} | set(unstored)


def inject_reported(
    messages: Sequence[BaseMessage],
    hits: Sequence[RecallHit],
    *,
    thread_id: str | None,
    resource_id: str | None = None,
    query: str = "",
    max_block_chars: int | None = None,
    labels: dict[str, str] | None = None,
    unstored: Collection[LiveKey] = (),
    beside: Sequence[StoredMessage] = (),
) -> tuple[list[BaseMessage], RecallReport]:
    """`inject`, and the report of what it injected (`recall_report.RecallReport`).

    A same-thread message already in the input is left out: by id, or, for an input
    message before the newest user message without an id, or whose (role, text) is in
    `unstored` (its id is stored nowhere in the thread), by role and text
    (`_live_earlier`). Without a thread, a stored conversation that holds the input's own
    earlier messages is recognised by them (`_without_own_conversation`), in the recalled
    windows and the stored neighbours read `beside` them (`engine.own_history.beside_op`).
    """
    present = {m.id for m in messages if m.id}
    same, other = split_recalled(hits, thread_id=thread_id, present_ids=present)
    if thread_id is None:  # no thread: the input's own conversation may be recalled
        other = _without_own_conversation(other, messages, beside)
    live = _live_earlier(messages, unstored)
    own = [
        (s, m)
        for s in same
        if live_key(s.role, s.text) not in live and (m := as_recalled_message(s)) is not None
    ]
    block_cap = None
    if max_block_chars is not None:  # same-thread text may take up to half the budget
        need = sum(len(_text(stored, message)) for stored, message in own)
        block_cap = max(MIN_MAX_CHARS, max_block_chars - min(need, max_block_chars // 2))
    block, quoted = memory_block(other, labels=labels, max_chars=block_cap)
    if max_block_chars is not None:
        own = bound_recalled(own, max_block_chars - (len(block.text) if block else 0))
    report = build_report(
        query,
        hits,
        thread_id=thread_id,
        resource_id=resource_id,
        same=own,
        block=None if block is None else (quoted, block),
    )
    recalled: list[BaseMessage] = [] if block is None else [block]
    recalled.extend(message for _, message in own)
    if not recalled:
        return list(messages), report
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], SystemMessage):
        lead += 1
    return [*messages[:lead], *recalled, *messages[lead:]], report
