"""Which recalled messages are the input's own, so that none comes back beside itself.

A client that keeps its own history sends it again on every request: a stateless
server's graph gets it with new ids (`add_messages` gives each one), and a recall given
no thread id cannot know which stored conversation it is. Injection leaves those
messages out by their role and text (`injection.inject_reported`); the two reads here
tell it which ones are stored: `resent_keys_op` in the turn's thread, `beside_op` when
no thread is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.injection import LiveKey, earlier_keys, live_key
from langchain_semantic_recall.records import RecallHit, ScopeFilter, StoredMessage

__all__ = ["beside_op", "resent_keys_op"]


def resent_keys_op(
    items: Sequence[BaseMessage], hits: Sequence[RecallHit], thread_id: str | None
) -> Op[set[LiveKey]]:
    """(role, text) of input messages stored in this thread under other ids.

    A stateless server's graph gets the history with new ids on every request (the
    index side knows it by its place, `resent_history.resent_op`): those ids are stored
    nowhere in the thread. Read only when a same-thread hit has the role and text of an
    input message whose id no hit holds (an id a hit holds is stored: no read).
    """
    if thread_id is None:
        return set()
    own = [m for h in hits for m in h.window if m.thread_id == thread_id]
    if not own:  # the input's words are worked out only when a same-thread hit may match
        return set()
    recalled, known = {live_key(m.role, m.text) for m in own}, {m.id for m in own}
    suspects = {
        i: key for i, key in earlier_keys(items) if i and i not in known and key in recalled
    }
    if not suspects:
        return set()
    stored = yield steps.IdsInScope(list(suspects), ScopeFilter(thread_id=thread_id))
    return {key for i, key in suspects.items() if i not in stored}


def beside_op(
    items: Sequence[BaseMessage], hits: Sequence[RecallHit], resource_id: str | None
) -> Op[list[StoredMessage]]:
    """The stored neighbours of recalled messages that repeat an earlier input message.

    For a recall given no thread id: injection knows the input's own stored conversation
    by two consecutive messages that repeat two consecutive earlier input messages
    (`injection._without_own_conversation`), and a hit's window keeps its likely
    messages only, so the short reply between them may be missing; quoted alone, the
    rest came back as "another conversation". One read, in the resource, only when a
    recalled message repeats one of the input's.
    """
    said = {key for _, key in earlier_keys(items)}
    if resource_id is None or len(said) < 2:  # a pair needs two earlier messages
        return []
    repeated = {m.id for h in hits for m in h.window if live_key(m.role, m.text) in said}
    if not repeated:
        return []
    scope = ScopeFilter(resource_id=resource_id)
    windows = yield steps.ReadWindows(sorted(repeated), before=1, after=1, scope=scope)
    return [message for window in windows.values() for message in window]
