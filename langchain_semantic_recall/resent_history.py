"""What of a history a client sends again is stored already, known by its words.

A stateless server (no checkpointer) gets the whole conversation from the client on
every request, each message with a new id, and some clients send back trimmed answers,
no answers, or (after a lost answer) the same request again. The index side of a turn
(`turn_index`) asks here where the stored history ends in what the client sent (the
recall side's question, which recalled messages are the input's own, is
`engine.own_history`'s).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.injection import live_key
from langchain_semantic_recall.messages import clean_text, role_of, text_of
from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.turns import is_user

__all__ = ["PROBE", "resent_after_op", "resent_op", "stored_text", "turn_start"]

PROBE = 64
"""Messages checked against the storage at a time, newest first, by the index side."""


def resent_op(candidates: Sequence[BaseMessage], thread_id: str) -> Op[int | None]:
    """Where the thread's stored history ends in `candidates`, if a client sent it again.

    A stateless server (no checkpointer; the client sends the whole conversation on
    every request) gets each message with a new id (`add_messages` gives one), so none
    is found stored by its id, and every turn stored the whole history again. Such
    history is known by its place: the words of the thread's newest stored messages (up
    to `PROBE`; all of them when it holds fewer, then from the input's start or ending
    right before the turn), in order, ending before the current turn's user message.
    Words are user messages and assistant messages with text (`_said`): a chat client
    often sends back neither the tool calls nor their results. The current turn is never
    matched: words that repeat an earlier turn's are a new message. A thread that holds
    no message but still has its owner was emptied by retention (`forget_before`), which
    keeps it: its history is the deleted one, and only the current turn is stored (stored
    again, each turn would undo the retention). A request sent again after its answer was
    lost finds the stored attempt after its history: when the whole history matches
    without it (`_ends_past_attempts`), the history is not stored again; the turn is.
    """
    turn = turn_start(candidates)
    if not turn:  # no history before the turn (or no user message at all)
        return None
    limit = min(turn, PROBE)
    scope = ScopeFilter(thread_id=thread_id)
    stored = yield steps.LastMessages(scope, limit=limit)
    if not stored and (yield steps.ThreadOwner(thread_id)) is not None:
        return turn  # a thread retention emptied: its history is not stored again
    if not any(_said(m.role, m.text) for m in stored):
        return None
    places, said = _words(candidates[:turn])
    end = _tail_end(said, stored, whole=len(stored) < limit)
    if end is None and said:  # answers left out, or attempts the client never saw?
        asked = _said("user", stored_text(candidates[turn]))
        end = yield from _resent_without_answers_op(said, thread_id, asked)
    return None if not end else places[end - 1] + 1


def _tail_end(
    said: Sequence[tuple[str, str]], stored: Sequence[StoredMessage], *, whole: bool
) -> int | None:
    """Where the words of `stored` (the thread's newest) end in `said`, if they are there.

    `whole`: `stored` is the whole thread, so its words start the input's history or end
    it right before the turn (its head deleted by retention); else they may be anywhere.
    """
    tail = [key for m in stored if (key := _said(m.role, m.text))]
    if not tail:
        return None
    n = len(tail)
    ends = dict.fromkeys(k for k in (0, len(said) - n) if k >= 0)
    starts = ends if whole else range(len(said) - n, -1, -1)
    return next((s + n for s in starts if said[s : s + n] == tail), None)


def _resent_without_answers_op(
    said: Sequence[tuple[str, str]], thread_id: str, turn: tuple[str, str] | None
) -> Op[int]:
    """How much of `said` ends the thread when its stored answers may be left out.

    A client may send back the user's messages alone. The longest head of `said` whose
    words are the thread's newest, in order, passing over stored assistant messages only
    (never a user's: a user message of the history stored nowhere is a turn whose
    storing failed, and is stored rather than matched further back), or once the stored
    attempts the client never saw are left out (`_ends_past_attempts`; `turn`: the
    current turn's words).
    """
    limit = min(4 * len(said), 4 * PROBE)
    more = yield steps.LastMessages(ScopeFilter(thread_id=thread_id), limit=limit + PROBE)
    read_all = len(more) < limit + PROBE
    found = _ends_thread(said, more[-limit:], whole=len(more) < limit)
    if found == len(said):
        return found
    return max(found, _ends_past_attempts(said, more, turn, whole=read_all))


def _ends_past_attempts(
    said: Sequence[tuple[str, str]],
    stored: Sequence[StoredMessage],
    turn: tuple[str, str] | None,
    *,
    whole: bool,
) -> int:
    """The longest head of `said` that ends `stored` once attempts it never saw are out.

    A client that lost an answer (a timeout, a dropped connection) sends the same request
    again: its history lacks the stored attempt. A stored turn (a user message and what
    follows it, up to the next user message) is taken for such an attempt only when the
    turn after it in the alignment (the next in `said`, or the current one, `turn`) says
    the same words. Answers may be missing from `said`, as in `_ends_thread`.
    """
    turns: list[list[tuple[str, str]]] = []
    for message in stored:
        key = _said(message.role, message.text)
        if message.role == "user" or not turns:
            turns.append([])
        if key:
            turns[-1].append(key)
    heads = [t[0] if t and t[0][0] == "user" else None for t in turns]

    @cache
    def fits(i: int, t: int, after: tuple[str, str] | None) -> bool:
        """Whether `said[:i]` ends `turns[:t]`, the turn after them saying `after`."""
        if i == 0:
            return True
        if t == 0:
            return not whole  # older messages were not read: taken as stored
        if heads[t - 1] is not None and heads[t - 1] == after and fits(i, t - 1, after):
            return True  # an attempt of the turn after it, which the client never saw
        at = i
        for key in reversed(turns[t - 1]):
            if at and said[at - 1] == key:
                at -= 1
            elif key[0] != "assistant":
                return False
        return fits(at, t - 1, heads[t - 1])

    for j in range(len(said), 0, -1):
        after = said[j] if j < len(said) and said[j][0] == "user" else turn
        if fits(j, len(turns), after):
            return j
    return 0


def _ends_thread(
    said: Sequence[tuple[str, str]], stored: Sequence[StoredMessage], *, whole: bool
) -> int:
    """The longest head of `said` that `stored` ends with, passing over its answers.

    `whole`: `stored` is the whole thread (else a head longer than it is taken as stored).
    """
    newest = [key for m in reversed(stored) if (key := _said(m.role, m.text))]

    def ends(head: Sequence[tuple[str, str]]) -> bool:
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

    return next((j for j in range(len(said), 0, -1) if ends(said[:j])), 0)


def resent_after_op(history: Sequence[BaseMessage], anchor: int, thread_id: str) -> Op[int]:
    """How many of `history` the thread stored after seq `anchor` under other ids.

    A client that keeps ids for its user messages only (many chat clients) sends the
    answers back with new ids on every request: the newest message found by its id is
    then the last user message, and its answer was stored again at every turn. The
    words stored after that message (`_said`), in order, are looked for at the start
    of the history that follows it in the input.
    """
    stored = yield steps.LastMessages(ScopeFilter(thread_id=thread_id), limit=PROBE)
    after = [m for m in stored if m.seq > anchor]
    words = [key for m in after if (key := _said(m.role, m.text))]
    if not words or len(after) == len(stored) == PROBE:  # none, or not all of them read
        return 0
    places, said = _words(history)
    return places[len(words) - 1] + 1 if said[: len(words)] == words else 0


def _said(role: str | None, text: str) -> tuple[str, str] | None:
    """A message's words as `resent_op` aligns them: a user's, or an assistant's text.

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
    keyed = [(p, key) for p, m in enumerate(messages) if (key := _said(role_of(m), stored_text(m)))]
    return [p for p, _ in keyed], [key for _, key in keyed]


def stored_text(message: BaseMessage) -> str:
    """The text the storage keeps of `message`."""
    return clean_text(text_of(message, "\n"))


def turn_start(messages: Sequence[BaseMessage]) -> int | None:
    """Where the current turn starts: the newest user message (None: there is none)."""
    return next((p for p in range(len(messages) - 1, -1, -1) if is_user(messages[p])), None)
