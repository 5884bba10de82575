"""A `BaseChatMessageHistory` backed by the memory's own storage.

For chains built with `RunnableWithMessageHistory`: the history of a session is its
thread (`session_id` is the thread id), every message added is stored and embedded
(indexing for free), and putting the engine in the chain brings back the relevant older
messages of the session and, in resource scope, of the user's other sessions (recall for
free). `last` keeps the replayed history short; recall finds what fell out of it.

```python
from langchain_core.runnables.history import RunnableWithMessageHistory

chain = RunnableWithMessageHistory(
    prompt | memory | model,  # the engine injects recalled messages into the prompt
    lambda session_id: memory.chat_history(session_id, resource_id="alice", last=20),
    input_messages_key="question",
    history_messages_key="history",
)
config = {"configurable": {"session_id": "s1", "resource_id": "alice"}}
chain.invoke({"question": "What am I allergic to?"}, config)
```

`RunnableWithMessageHistory` adds the turn's messages after the run, in a listener whose
errors it only logs: a storage failure there would drop the turn unseen. So a failed
`add_messages` is held (in this process) and written first by the session's next read,
before the next turn runs; if that write fails too, the read raises (`StorageError`) and
the turn is refused, never run on a history that lost a turn.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.call_options import CallIds
from langchain_semantic_recall.engine.identity import Identity
from langchain_semantic_recall.engine.maintenance_ops import owned_thread
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.errors import (
    PROGRAMMING_ERRORS,
    ForgottenThreadError,
    MessageIdTakenError,
    SemanticRecallError,
    StorageError,
)
from langchain_semantic_recall.memory_contract import check_saved
from langchain_semantic_recall.messages import own_reply_id, role_of
from langchain_semantic_recall.options import check_positive
from langchain_semantic_recall.records import NO_RESOURCE, IndexResult, ScopeFilter, StoredMessage

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.core import EngineCore
    from langchain_semantic_recall.engine.vector_space import VectorSpace
    from langchain_semantic_recall.recall import SemanticRecall

logger = logging.getLogger(__name__)

_PAGE = 1000

_Key = tuple[str, "str | None"]
"""A session's thread id and resource id."""


class _Held:
    """The last failed `add_messages` of each session of one engine, until it is stored.

    One batch per session: the next read writes it first (`RunnableWithMessageHistory`
    always reads before it adds); a later `add_messages` that succeeds drops it (its
    caller saw the error and went on); a failed one replaces it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[_Key, list[BaseMessage]] = {}

    def hold(self, key: _Key, messages: list[BaseMessage]) -> None:
        with self._lock:
            self._turns[key] = messages

    def take(self, key: _Key) -> list[BaseMessage]:
        with self._lock:
            return self._turns.pop(key, [])

    def put_back(self, key: _Key, messages: list[BaseMessage]) -> None:
        with self._lock:
            self._turns.setdefault(key, messages)


_HELD: WeakKeyDictionary[VectorSpace, _Held] = WeakKeyDictionary()
_HELD_LOCK = threading.Lock()


def _held(memory: SemanticRecall) -> _Held:
    """The held turns of `memory`'s engine (shared by its views)."""
    with _HELD_LOCK:
        return _HELD.setdefault(memory.core.backends.space, _Held())


def _retryable(error: Exception) -> bool:
    """Whether writing the same messages again may work (a backend failure, not a refusal)."""
    if isinstance(error, PROGRAMMING_ERRORS):
        return False
    return isinstance(error, StorageError) or not isinstance(error, SemanticRecallError)


def _with_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages, each with an id (a copy given a new one): a retry stores each once."""
    return [m if m.id else m.model_copy(update={"id": str(uuid.uuid4())}) for m in messages]


def _add_op(core: EngineCore, messages: list[BaseMessage], who: Identity) -> Op[IndexResult]:
    """Index a turn's messages; a reply whose id another thread holds, under one of its own.

    `RunnableWithMessageHistory` adds the turn's messages with their ids, and a reply of
    LangChain's LLM cache keeps the id of its first use, in any session of any user:
    `index` refused it, the runnable only logged that, and the whole turn was lost. A
    reply (after the turn's user message) is stored under `own_reply_id`, as the graph's
    replies are; any other taken id is refused, as `index` refuses it.
    """
    users = [n for n, m in enumerate(messages) if role_of(m) == "user"]
    asked = users[-1] if users else None
    replies = set() if asked is None else {m.id for m in messages[asked + 1 :]}
    try:
        return (yield from core.index(messages, who))
    except MessageIdTakenError as taken:
        ids = set(taken.message_ids)
        if asked is None or not ids or not ids <= replies:
            raise
        thread_id, asked_id = who.thread_id or "", messages[asked].id or ""
        messages = [
            m.model_copy(update={"id": own_reply_id(thread_id, asked_id, m.id)})
            if m.id in ids
            else m
            for m in messages
        ]
        logger.info(
            "session %r: the reply's id %s belongs to another thread (a cached model "
            "reply?); stored as this session's own under a new id",
            *(thread_id, sorted(ids)),
        )
        return (yield from core.index(messages, who))


def _not_stored(error: Exception, count: int, session: str) -> Exception:
    """The error a read raises when a held turn could not be written again."""
    if not _retryable(error):  # refused for good (forgotten, another owner): say what it lost
        error.add_note(
            f"{count} message(s) of an earlier turn of session {session!r} were not stored"
        )
        return error
    return StorageError(
        f"{count} message(s) of an earlier turn of session {session!r} could not be stored "
        f"when that turn ended, nor now ({error!r}); they are held in this process and "
        "written before the session's next turn: retry when the storage is back"
    )


def _history_op(scope: ScopeFilter, last: int | None) -> Op[list[StoredMessage]]:
    """Every message of the thread in order (or its `last` ones).

    A forgotten thread, or one of another resource, is an error here, before the model
    runs (`RunnableWithMessageHistory` swallows errors raised when it adds the turn's
    messages afterwards).
    """
    thread_id = scope.thread_id or ""
    if (yield from owned_thread(thread_id, scope.resource_id, unowned=True)) == NO_RESOURCE:
        scope = ScopeFilter(thread_id=thread_id)  # stored without a resource: adopted next
    if (yield steps.IsForgotten(thread_id)):
        raise ForgottenThreadError(
            f"session {thread_id!r} was forgotten, so its id is retired and new messages "
            "would not be stored: start a new session id"
        )
    if last is not None:  # the newest `last` only, however long the thread
        return list((yield steps.LastMessages(scope, limit=last)))
    kept: list[StoredMessage] = []
    after: tuple[str, int] | None = None
    while page := (yield steps.ListMessages(scope, after=after, limit=_PAGE)):
        after = (page[-1].thread_id, page[-1].seq)
        kept.extend(page)
    return kept


class SemanticRecallChatHistory(BaseChatMessageHistory):
    """The history of one conversation, stored and embedded by the memory.

    Args:
        memory: the engine (its storage, embedder and vector index).
        session_id: the conversation: its thread id.
        resource_id: its owner (required in resource scope, the default).
        last: how many of the newest messages `messages` returns (None: all).
    """

    def __init__(
        self,
        memory: SemanticRecall,
        session_id: str,
        *,
        resource_id: str | None = None,
        last: int | None = None,
    ) -> None:
        self.memory = memory.for_thread(session_id, resource_id)
        self.session_id = session_id
        self.last = check_positive("last", last, allow_none=True)
        self._who: Identity | None = None

    def _identity(self) -> Identity:
        """The session's ids: resolved on every call, remembered for `add_messages`.

        The bound ids come first, then the current run's config and context (a LangGraph
        server's authenticated user too). `RunnableWithMessageHistory` calls
        `add_messages` outside the run, so a call that finds no resource reuses the
        last one found. A history kept across runs (a dict of histories per session, as
        LangChain's examples keep them) is read as each run's user, never as the first
        run's: a signed-in user always resolves to themselves.
        """
        who = self.memory.core.identity({})
        if who.resource_id is None and self._who is not None:
            return self._who
        if self.memory.scope == "resource":
            who.require_resource(self.memory.keys, "the chat history")
        self._who = who
        return who

    def _scope(self) -> ScopeFilter:
        who = self._identity()
        return ScopeFilter(thread_id=who.thread_id, resource_id=who.resource_id)

    def _ids(self) -> CallIds:
        who = self._identity()
        return {"thread_id": who.thread_id, "resource_id": who.resource_id}

    def _key(self) -> _Key:
        who = self._identity()
        return (who.thread_id or self.session_id, who.resource_id)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The stored messages of the session, in order (the `last` ones).

        A turn whose `add_messages` failed is written first.

        Raises:
            OwnershipError: the session is a thread of another resource.
            ForgottenThreadError: the session was forgotten.
            StorageError: a turn whose `add_messages` failed could not be written now.
        """
        key = self._key()
        if held := _held(self.memory).take(key):
            try:
                self._saved(key, self._add(held))
            except Exception as error:
                raise self._still_held(key, held, error) from error
        stored = self.memory.core.run(_history_op(self._scope(), self.last))
        return [m.to_message() for m in stored]

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of `messages`."""
        key = self._key()
        if held := _held(self.memory).take(key):
            try:
                self._saved(key, await self._aadd(held))
            except Exception as error:
                raise self._still_held(key, held, error) from error
        stored = await self.memory.core.arun(_history_op(self._scope(), self.last))
        return [m.to_message() for m in stored]

    def _add(self, messages: list[BaseMessage]) -> IndexResult:
        core = self.memory.core
        return core.run(_add_op(core, messages, core.identity(self._ids())))

    async def _aadd(self, messages: list[BaseMessage]) -> IndexResult:
        core = self.memory.core
        return await core.arun(_add_op(core, messages, core.identity(self._ids())))

    def _saved(self, key: _Key, result: IndexResult) -> None:
        """Check a write's result (forgotten: raise); nothing of the session stays held."""
        check_saved(result)
        _held(self.memory).take(key)

    def _still_held(self, key: _Key, held: list[BaseMessage], error: Exception) -> Exception:
        """The error of a read whose held turn failed again (kept held if it may work later)."""
        if _retryable(error):
            _held(self.memory).put_back(key, held)
        return _not_stored(error, len(held), self.session_id)

    def _failed(self, key: _Key, messages: list[BaseMessage], error: Exception) -> None:
        """Hold the messages of a failed write that may work later (`_Held`)."""
        if _retryable(error):
            logger.warning(
                "could not store %d message(s) of session %r (%r); held in this process "
                "and written at the session's next read",
                len(messages),
                self.session_id,
                error,
            )
            _held(self.memory).hold(key, messages)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store and embed the messages (each is a new message unless it has an id).

        If the storage fails, the error is raised and the messages are also held and
        written by the session's next read (see the module's docstring).
        """
        key, items = self._key(), _with_ids(messages)
        try:
            self._saved(key, self._add(items))
        except Exception as error:
            self._failed(key, items, error)
            raise

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of `add_messages`."""
        key, items = self._key(), _with_ids(messages)
        try:
            self._saved(key, await self._aadd(items))
        except Exception as error:
            self._failed(key, items, error)
            raise

    def clear(self) -> None:
        """Empty the session (messages and vectors, a held turn too); it keeps working."""
        self.memory.clear_thread(self.session_id, resource_id=self._identity().resource_id)
        _held(self.memory).take(self._key())

    async def aclear(self) -> None:
        """Async twin of `clear`."""
        await self.memory.aclear_thread(self.session_id, resource_id=self._identity().resource_id)
        _held(self.memory).take(self._key())


__all__ = ["SemanticRecallChatHistory"]
