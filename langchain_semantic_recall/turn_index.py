"""The index side of one user turn: what of the state is new, and where it belongs.

Shared by the LangGraph index node (`graph`) and the agent middleware (`middleware`):
each stores the messages after the newest one already stored, and the current turn.
History another thread holds is set aside here (`_set_aside_op`), so one message of another
conversation in a checkpoint never refuses every later turn of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.messages import BaseMessage, RemoveMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.call_options import CallIds
from langchain_semantic_recall.engine.core import EngineCore
from langchain_semantic_recall.engine.identity import Identity
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.errors import ForgottenThreadError, MessageIdTakenError
from langchain_semantic_recall.messages import (
    is_recalled,
    own_reply_id,
    role_of,
    stable_id,
    text_of,
)
from langchain_semantic_recall.records import NO_RESOURCE, IndexResult, ScopeFilter
from langchain_semantic_recall.resent_history import (
    PROBE,
    resent_after_op,
    resent_op,
    stored_text,
    turn_start,
)
from langchain_semantic_recall.storage.checks import thread_of_another
from langchain_semantic_recall.turns import is_summary

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

logger = logging.getLogger(__name__)


_COPIED = "copied history: stored in another thread of this owner"
_COPIED_EDITED = "copied history: stored with other text in another thread of this owner"
_FOREIGN = "its id belongs to another resource's conversation: not stored here"
_PROMPT = "a system prompt at the start of the state: not stored"


def _storable(messages: Sequence[BaseMessage], thread_id: str, prompt: int) -> list[BaseMessage]:
    """The messages the storage keeps, each with an id (positional if it had none).

    Recalled messages and summaries of the conversation are not part of it, nor are the
    `prompt` system messages the state starts with (`_leading_prompt`). A message of a
    role or type the storage does not know stays in, as it is: `index` skips it and says
    so (its fate, and a warning, since these surfaces return no fates).
    """
    kept: list[BaseMessage] = []
    for position, message in enumerate(messages):
        if isinstance(message, RemoveMessage) or is_recalled(message) or is_summary(message):
            continue
        if position < prompt:
            continue
        role = role_of(message)
        if role is None:
            kept.append(message)
            continue
        if message.id:
            kept.append(message)
        else:
            key = stable_id(thread_id, role, text_of(message, "\n"), "", position)
            kept.append(message.model_copy(update={"id": key}))
    return kept


def _leading_prompt(messages: Sequence[BaseMessage]) -> int:
    """How many system messages the state starts with: the app's prompt, kept in state.

    Instructions, not the conversation: stored, they were exported with the user's data
    and quoted in the memory block beside every recalled message next to them.
    """
    return next((n for n, m in enumerate(messages) if role_of(m) != "system"), len(messages))


def _after_last_stored(
    candidates: Sequence[BaseMessage], start: int, end: int, stored: Mapping[str, Any]
) -> int | None:
    """Index just past the newest stored message in `candidates[start:end]`, if any."""
    for position in range(end - 1, start - 1, -1):
        if candidates[position].id in stored:
            return position + 1
    return None


def _probes(count: int) -> list[tuple[int, int]]:
    """(start, end) slices of `count` candidates, newest first, `PROBE` at a time."""
    return [(max(0, end - PROBE), end) for end in range(count, 0, -PROBE)]


def _edited(
    checked: Sequence[BaseMessage], stored: Mapping[str, Any], handed: set[str | None]
) -> list[BaseMessage]:
    """The messages of `checked` stored with another text, not already in `handed`."""
    return [
        m
        for m in checked
        if m.id not in handed
        and (rows := stored.get(m.id or ""))
        and rows[0].text != stored_text(m)
    ]


def _said_in_this_thread(
    candidates: Sequence[BaseMessage], thread_id: str, who: Identity, set_aside: dict[str, str]
) -> Op[list[BaseMessage]]:
    """`candidates` without the history stored in another thread of the same owner.

    A thread copied with its checkpoint (LangGraph server's `threads.copy`, or
    `update_state` on a new thread with another's values) holds the other thread's
    messages with their ids; message ids are unique across threads, so storing them again
    would fail every turn of the copy. They stay where they were said (resource-scope recall
    finds them there); the copy's own turns are stored under the copy. A copied message is
    stored in another thread with its text; before the newest user message, one stored with
    other text is copied too when the input holds such a copy (the original corrected it
    since). Anything else whose id another thread stored (a client that numbers each
    conversation's messages from 1) is left in for the write to refuse, as is a message of
    another owner: `_set_aside_op` then decides. What is left out is said in `set_aside`
    (a copy with other text is warned of too: it may be a message of this conversation).
    """
    ids = [m.id for m in candidates if m.id]
    if not ids:
        return list(candidates)
    owner = who.resource_id or (yield steps.ThreadOwner(thread_id)) or NO_RESOURCE
    found = yield steps.ReadWindows(ids, before=0, after=0, scope=ScopeFilter(resource_id=owner))
    elsewhere = {
        key: rows[0].text for key, rows in found.items() if rows and rows[0].thread_id != thread_id
    }
    same = {m.id for m in candidates if m.id in elsewhere and elsewhere[m.id] == stored_text(m)}
    turn = turn_start(candidates)
    if turn is not None and candidates[turn].id not in same:  # the turn is not a copy's:
        same -= {m.id for m in candidates[turn:]}  # its reply is new (an LLM cache's id?)
    edited = set() if not same else {m.id for m in candidates[:turn] if m.id in elsewhere}
    set_aside |= dict.fromkeys(map(str, same), _COPIED)
    set_aside |= dict.fromkeys(map(str, edited - same), _COPIED_EDITED)
    if edited - same:  # an edited copy, or a client numbering each conversation from 1
        logger.warning(
            "thread %r: %s not stored, as copied history: stored with other text in another "
            "thread of this owner (edited there since?). If they are this conversation's "
            "own, give its messages ids of their own",
            *(thread_id, sorted(map(str, edited - same))),
        )
    return [m for m in candidates if m.id not in same | edited]


def _index_new_op(
    core: EngineCore, messages: Sequence[BaseMessage], who: Identity
) -> Op[IndexResult]:
    """Index the current turn and the messages after the newest one already stored.

    The current turn (from its user message on) is always handed to `index`, which
    leaves unchanged messages alone: a user message edited in place (the same id sent
    again with new text, as LangGraph's `add_messages` replaces it) is updated, not
    silently kept with its old text. So is an earlier message whose text the state
    changed (`update_state` with its id: a correction, a redaction) among the newest
    `PROBE` checked against the storage. When no message is found stored by its id, the
    history is known by its place (`resent_op`: a stateless server), or is a new
    thread's or a copy's (`_said_in_this_thread`). History whose ids other threads hold
    is set aside (`_set_aside_op`), and the state's leading system prompt is not stored;
    the result's `skipped` says why for each.
    """
    thread_id = who.require_thread(core.plan.keys, "the index side of a turn")
    if who.resource_id is not None:  # before any read: they are made by thread id alone
        owner = yield steps.ThreadOwner(thread_id)
        if owner not in (None, NO_RESOURCE, who.resource_id):
            # A turn with nothing new to write was accepted in another user's thread, and
            # refused when its words differed from the stored ones: an oracle on them.
            raise thread_of_another(thread_id, who.resource_id)  # as the write would
    prompt = _leading_prompt(messages)
    candidates = _storable(messages, thread_id, prompt)
    scope = ScopeFilter(thread_id=thread_id)
    turn = turn_start(candidates)
    set_aside: dict[str, str] = {}  # message id -> why it is not stored
    for start, end in _probes(len(candidates)):
        ids = [m.id for m in candidates[start:end] if m.id]
        found = yield steps.ReadWindows(ids, before=0, after=0, scope=scope)
        if (cut := _after_last_stored(candidates, start, end, found)) is not None:
            if turn is not None and cut < turn:  # history after it: resent without ids?
                anchor = found[candidates[cut - 1].id or ""][0].seq
                cut += yield from resent_after_op(candidates[cut:turn], anchor, thread_id)
            rest = candidates[cut if turn is None else min(cut, turn) :]
            edited = _edited(candidates[start:end], found, {m.id for m in rest})
            candidates = [*edited, *rest]
            break
    else:  # nothing of it stored here by id: resent history, a new thread, or a copy
        resent = yield from resent_op(candidates, thread_id)
        if resent is not None:
            candidates = candidates[resent:]
        else:
            candidates = yield from _said_in_this_thread(candidates, thread_id, who, set_aside)
    seen: set[str] = set()  # ids set aside or renamed: taken again, the write is refused
    while True:
        try:
            result: IndexResult = yield from core.index(candidates, who)
            break
        except MessageIdTakenError as taken:  # every round sets aside more, or raises
            candidates = yield from _set_aside_op(
                candidates, taken, thread_id, who=who, set_aside=set_aside, seen=seen
            )
    set_aside |= dict.fromkeys((m.id or f"@{n}" for n, m in enumerate(messages[:prompt])), _PROMPT)
    if set_aside:
        result = replace(result, skipped={**result.skipped, **set_aside})
    if result.forgotten:
        raise ForgottenThreadError(
            f"thread {thread_id!r} was forgotten, so this turn was not stored: its id is "
            "retired. Continue the conversation under a new thread id (and delete the old "
            "checkpoint, which still holds the forgotten messages)"
        )
    return result


def _set_aside_op(
    candidates: Sequence[BaseMessage],
    taken: MessageIdTakenError,
    thread_id: str,
    *,
    who: Identity,
    set_aside: dict[str, str],
    seen: set[str],
) -> Op[list[BaseMessage]]:
    """`candidates` without the history whose ids other threads hold (`taken`).

    Such a message (a message object reused as a module constant, a checkpoint copied from
    another user's thread, a client numbering each conversation's messages from 1) stays
    in the checkpoint, so it came back at every later turn, and the write refused each of
    them for good. Before the current turn it is now set aside, in `set_aside` (id ->
    why), and the rest of the turn stored:

    * another resource's: not stored here (it may hold another user's words), a warning;
    * a message of this resource's other thread with the same text: copied history, which
      stays where it was said (as `_said_in_this_thread` keeps it);
    * one with other text: stored in this thread under an id made from the thread and its
      own, the same at every retry, with a warning (nothing of this user's is lost).

    A reply of the current turn (after its user message) is stored under an id of its
    own too, whatever its text (`own_reply_id`): LangChain's LLM cache hands back a reply
    with the id of its first use, in any thread of any user.

    Raises:
        MessageIdTakenError: a taken id is the current turn's user message (refused, as
            `index` refuses it: the turn's own message is never set aside), or is one of
            `seen` (set aside or renamed by an earlier round), which `seen` is updated with.
    """
    turn = turn_start(candidates)
    history = {m.id for m in candidates[: turn or 0]}
    replies = set() if turn is None else {m.id for m in candidates[turn + 1 :]}
    asked = "" if turn is None else candidates[turn].id or ""
    ids = set(taken.message_ids)
    if not ids or not ids <= history | replies or ids & seen:
        raise taken
    seen |= ids
    owner = who.resource_id or (yield steps.ThreadOwner(thread_id)) or NO_RESOURCE
    mine = yield steps.ReadWindows(
        list(ids), before=0, after=0, scope=ScopeFilter(resource_id=owner)
    )
    kept: list[BaseMessage] = []
    renamed: list[str] = []
    cached: list[str] = []
    for message in candidates:
        key = message.id or ""
        rows = mine.get(key) if key in ids else None
        if key not in ids:
            kept.append(message)
        elif key in replies or (rows and rows[0].text != stored_text(message)):
            new_id = (
                own_reply_id(thread_id, asked, key)
                if key in replies
                else stable_id(thread_id, "", key, "", 0, kind="taken")
            )
            kept.append(message.model_copy(update={"id": new_id}))
            seen.add(new_id)
            (cached if key in replies else renamed).append(f"{key!r} as {new_id!r}")
        elif not rows:
            set_aside[key] = _FOREIGN
        else:
            set_aside[key] = _COPIED
    if cached:  # expected with a cache: said, not warned of
        logger.info(
            "thread %r: this turn's reply reuses the id of another thread's message (a "
            "cached model reply?); stored as this thread's own: %s",
            *(thread_id, ", ".join(cached)),
        )
    foreign = sorted(k for k in ids if set_aside.get(k) == _FOREIGN)
    said = [f"not stored, as another resource's: {foreign}"] if foreign else []
    said += [f"stored under new ids: {', '.join(renamed)}"] if renamed else []
    if said:
        logger.warning(
            "thread %r: message ids of its history belong to other threads (one message "
            "object used in two conversations?); %s. Build a new message for every use",
            *(thread_id, "; ".join(said)),
        )
    return kept


def index_new_messages(
    memory: SemanticRecall, messages: Sequence[BaseMessage], **ids: Unpack[CallIds]
) -> IndexResult:
    """Store (and embed) the messages after the newest one the storage already holds.

    Args:
        memory: The engine.
        messages: The whole conversation (a graph's or an agent's `messages`).
        **ids: Who is asking: `thread_id`, `resource_id`, `config` (see `CallIds`).

    Raises:
        MissingIdentityError: no thread id (or no resource id in resource scope).
        ForgottenThreadError: the thread was forgotten (nothing is stored).
        OwnershipError: the thread belongs to another resource, or a message of the
            current turn has an id another thread holds (`MessageIdTakenError`).
        StorageError: the storage could not be written.
    """
    core = memory.core
    return core.run(_index_new_op(core, messages, core.identity(ids)))


async def aindex_new_messages(
    memory: SemanticRecall, messages: Sequence[BaseMessage], **ids: Unpack[CallIds]
) -> IndexResult:
    """Async twin of `index_new_messages`."""
    core = memory.core
    return await core.arun(_index_new_op(core, messages, core.identity(ids)))
