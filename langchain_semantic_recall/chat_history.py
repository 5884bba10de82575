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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.call_options import CallIds
from langchain_semantic_recall.engine.identity import Identity
from langchain_semantic_recall.engine.maintenance_ops import owned_thread
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.errors import ForgottenThreadError
from langchain_semantic_recall.memory_contract import check_saved
from langchain_semantic_recall.options import check_positive
from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter, StoredMessage

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

_PAGE = 1000


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
        """The session's ids, resolved on every call; the resource is remembered.

        The bound ids come first, then the current run's config and context (a LangGraph
        server's authenticated user too). The resource is remembered because
        `RunnableWithMessageHistory` calls `add_messages` outside the run; it is still
        checked against the signed-in user of every later run, so a history object used
        by one user never reads for another (`IdentityMismatchError`).
        """
        remembered = self._who.resource_id if self._who is not None else None
        who = self.memory.core.identity({"resource_id": remembered})
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

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The stored messages of the session, in order (the `last` ones).

        Raises:
            OwnershipError: the session is a thread of another resource.
            ForgottenThreadError: the session was forgotten.
        """
        stored = self.memory.core.run(_history_op(self._scope(), self.last))
        return [m.to_message() for m in stored]

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of `messages`."""
        stored = await self.memory.core.arun(_history_op(self._scope(), self.last))
        return [m.to_message() for m in stored]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store and embed the messages (each is a new message unless it has an id)."""
        check_saved(self.memory.index(list(messages), **self._ids()))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of `add_messages`."""
        check_saved(await self.memory.aindex(list(messages), **self._ids()))

    def clear(self) -> None:
        """Empty the session (messages and vectors); it keeps working afterwards."""
        self.memory.clear_thread(self.session_id, resource_id=self._identity().resource_id)

    async def aclear(self) -> None:
        """Async twin of `clear`."""
        await self.memory.aclear_thread(self.session_id, resource_id=self._identity().resource_id)


__all__ = ["SemanticRecallChatHistory"]
