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
from langchain_semantic_recall.injection import live_key
from langchain_semantic_recall.messages import (
    clean_text,
    is_recalled,
    role_of,
    stable_id,
    text_of,
)
from langchain_semantic_recall.records import NO_RESOURCE, IndexResult, ScopeFilter
from langchain_semantic_recall.storage.checks import thread_of_another
from langchain_semantic_recall.turns import is_summary, is_user

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

logger = logging.getLogger(__name__)

_PROBE = 64
"""Messages checked against the storage at a time, newest first, by the index side."""

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
    """(start, end) slices of `count` candidates, newest first, `_PROBE` at a time."""
    return [(max(0, end - _PROBE), end) for end in range(count, 0, -_PROBE)]


def _edited(
    checked: Sequence[BaseMessage], stored: Mapping[str, Any], handed: set[str | None]
) -> list[BaseMessage]:
    """The messages of `checked` stored with another text, not already in `handed`."""
    return [
        m
        for m in checked
        if m.id not in handed and (rows := stored.get(m.id or "")) and rows[0].text != _text(m)
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
    same = {m.id for m in candidates if m.id in elsewhere and elsewhere[m.id] == _text(m)}
    turn = _turn_start(candidates)
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


def _resent_op(candidates: Sequence[BaseMessage], thread_id: str) -> Op[int | None]:
    """Where the thread's stored history ends in `candidates`, if a client sent it again.

    A stateless server (no checkpointer; the client sends the whole conversation on
    every request) gets each message with a new id (`add_messages` gives one), so none
    is found stored by its id, and every turn stored the whole history again. Such
    history is known by its place: the words of the thread's newest stored messages (up
    to `_PROBE`; all of them when it holds fewer, then from the input's start or ending
    right before the turn), in order, ending before the current turn's user message.
    Words are user messages and assistant messages with text (`_said`): a chat client
    often sends back neither the tool calls nor their results. The current turn is never
    matched: words that repeat an earlier turn's are a new message. A thread that holds
    no message but still has its owner was emptied by retention (`forget_before`), which
    keeps it: its history is the deleted one, and only the current turn is stored (stored
    again, each turn would undo the retention).
    """
    turn = _turn_start(candidates)
    if not turn:  # no history before the turn (or no user message at all)
        return None
    limit = min(turn, _PROBE)
    stored = yield steps.LastMessages(ScopeFilter(thread_id=thread_id), limit=limit)
    if not stored and (yield steps.ThreadOwner(thread_id)) is not None:
        return turn  # a thread retention emptied: its history is not stored again
    tail = [key for m in stored if (key := _said(m.role, m.text))]
    if not tail:
        return None
    places, said = _words(candidates[:turn])
    n = len(tail)
    # The whole thread when it holds fewer than asked: from the input's start, or (its
    # head deleted by retention) ending right before the turn.
    whole = dict.fromkeys(k for k in (0, len(said) - n) if k >= 0)
    starts = range(len(said) - n, -1, -1) if len(stored) == limit else whole
    end = next((s + n for s in starts if said[s : s + n] == tail), None)
    if end is None and said:  # a client that sends back the user's messages alone?
        end = yield from _resent_without_answers_op(said, thread_id)
    return None if not end else places[end - 1] + 1


def _resent_without_answers_op(said: Sequence[tuple[str, str]], thread_id: str) -> Op[int]:
    """How much of `said` ends the thread when its stored answers may be left out.

    A client may send back the user's messages alone. The longest head of `said` whose
    words are the thread's newest, in order, passing over stored assistant messages only
    (never a user's: a user message of the history stored nowhere is a turn whose
    storing failed, and is stored rather than matched further back).
    """
    limit = min(4 * len(said), 4 * _PROBE)
    stored = yield steps.LastMessages(ScopeFilter(thread_id=thread_id), limit=limit)
    newest = [key for m in reversed(stored) if (key := _said(m.role, m.text))]
    whole = len(stored) < limit  # the thread's start was read

    def ends_thread(head: Sequence[tuple[str, str]]) -> bool:
        at = 0
        for key in reversed(head):
            while at < len(newest) and newest[at] != key:
                if newest[at][0] != "assistant":
                    return False
                at += 1
            if at == len(newest):
                return not whole  # older messages were not read: taken as stored
            at += 1
        return True

    return next((j for j in range(len(said), 0, -1) if ends_thread(said[:j])), 0)


def _resent_after_op(history: Sequence[BaseMessage], anchor: int, thread_id: str) -> Op[int]:
    """How many of `history` the thread stored after seq `anchor` under other ids.

    A client that keeps ids for its user messages only (many chat clients) sends the
    answers back with new ids on every request: the newest message found by its id is
    then the last user message, and its answer was stored again at every turn. The
    words stored after that message (`_said`), in order, are looked for at the start
    of the history that follows it in the input.
    """
    stored = yield steps.LastMessages(ScopeFilter(thread_id=thread_id), limit=_PROBE)
    after = [m for m in stored if m.seq > anchor]
    words = [key for m in after if (key := _said(m.role, m.text))]
    if not words or len(after) == len(stored) == _PROBE:  # none, or not all of them read
        return 0
    places, said = _words(history)
    return places[len(words) - 1] + 1 if said[: len(words)] == words else 0


def _said(role: str | None, text: str) -> tuple[str, str] | None:
    """A message's words as `_resent_op` aligns them: a user's, or an assistant's text.

    Compared as same-thread recall compares them (`injection.live_key`: white space runs
    as one space, since chat clients trim the reply they send back).
    """
    if role not in ("user", "assistant") or not (key := live_key(role, text))[1]:
        return None
    return role, key[1]


def _words(
    messages: Sequence[BaseMessage],
) -> tuple[list[int], list[tuple[str, str]]]:
    """The positions of `messages` that hold words (`_said`), and those words, in order."""
    keyed = [(p, key) for p, m in enumerate(messages) if (key := _said(role_of(m), _text(m)))]
    return [p for p, _ in keyed], [key for _, key in keyed]


def _text(message: BaseMessage) -> str:
    """The text the storage keeps of `message`."""
    return clean_text(text_of(message, "\n"))


def _turn_start(messages: Sequence[BaseMessage]) -> int | None:
    """Where the current turn starts: the newest user message (None: there is none)."""
    return next((p for p in range(len(messages) - 1, -1, -1) if is_user(messages[p])), None)


def _index_new_op(
    core: EngineCore, messages: Sequence[BaseMessage], who: Identity
) -> Op[IndexResult]:
    """Index the current turn and the messages after the newest one already stored.

    The current turn (from its user message on) is always handed to `index`, which
    leaves unchanged messages alone: a user message edited in place (the same id sent
    again with new text, as LangGraph's `add_messages` replaces it) is updated, not
    silently kept with its old text. So is an earlier message whose text the state
    changed (`update_state` with its id: a correction, a redaction) among the newest
    `_PROBE` checked against the storage. When no message is found stored by its id, the
    history is known by its place (`_resent_op`: a stateless server), or is a new
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
    turn = _turn_start(candidates)
    set_aside: dict[str, str] = {}  # message id -> why it is not stored
    for start, end in _probes(len(candidates)):
        ids = [m.id for m in candidates[start:end] if m.id]
        found = yield steps.ReadWindows(ids, before=0, after=0, scope=scope)
        if (cut := _after_last_stored(candidates, start, end, found)) is not None:
            if turn is not None and cut < turn:  # history after it: resent without ids?
                anchor = found[candidates[cut - 1].id or ""][0].seq
                cut += yield from _resent_after_op(candidates[cut:turn], anchor, thread_id)
            rest = candidates[cut if turn is None else min(cut, turn) :]
            edited = _edited(candidates[start:end], found, {m.id for m in rest})
            candidates = [*edited, *rest]
            break
    else:  # nothing of it stored here by id: resent history, a new thread, or a copy
        resent = yield from _resent_op(candidates, thread_id)
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

    A reply of the current turn (after its user message) is renamed so too, whatever its
    text: LangChain's LLM cache hands back a reply with the id of its first use, in any
    thread of any user.

    Raises:
        MessageIdTakenError: a taken id is the current turn's user message (refused, as
            `index` refuses it: the turn's own message is never set aside), or is one of
            `seen` (set aside or renamed by an earlier round), which `seen` is updated with.
    """
    turn = _turn_start(candidates)
    history = {m.id for m in candidates[: turn or 0]}
    replies = set() if turn is None else {m.id for m in candidates[turn + 1 :]}
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
        elif key in replies or (rows and rows[0].text != _text(message)):
            new_id = stable_id(thread_id, "", key, "", 0, kind="taken")
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
