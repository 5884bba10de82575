"""`SemanticRecallMiddleware`: semantic recall for LangChain v1 `create_agent`.

- `before_agent` (once per user turn): recall for the newest user message, into the
  per-run `recalled_memory` channel (an `UntrackedValue`: never checkpointed, empty at
  the start of every run);
- `wrap_model_call` (every model call, tool loop included): the model request gets the
  recalled messages with `request.override(messages=...)`; the `messages` channel is
  not written, so it only ever holds real turns (a run resumed after an interrupt
  recalls at its first model call and keeps that in `recalled_memory` for the others);
- `after_agent` (once, when the agent finishes): store the turn's new messages (tool
  calls and results too) and embed the user and assistant text.

Thread and resource come from the engine's one rule (explicit > `config["configurable"]`
> the agent's runtime context, e.g. `agent.invoke(..., context={"resource_id": "alice"})`
or a `context_schema` object with a `resource_id` attribute); on an authenticated
LangGraph server the resource is the signed-in user and a differing one is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, cast

from langchain.agents.middleware import types as agent_types
from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.tools import BaseTool
from langgraph.channels import UntrackedValue
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import override

from langchain_semantic_recall.engine.narrowing import narrowing_option
from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.retriever import create_memory_search_tool
from langchain_semantic_recall.turn_index import aindex_new_messages, index_new_messages
from langchain_semantic_recall.turns import (
    RECALL_KEY,
    RecalledMemory,
    arecall_turn,
    check_node_options,
    recall_turn,
    recalled_for_turn,
    require_conversation,
    turn_messages,
)

if TYPE_CHECKING:
    from langchain.agents.middleware.types import ExtendedModelResponse

    from langchain_semantic_recall.recall import SemanticRecall


TURN_START_KEY = "recall_turn_start"
"""The private channel holding the turn's messages as it began (indexed at its end)."""


class RecallAgentState(AgentState[Any]):
    """The agent state plus two private channels.

    `recalled_memory` holds this turn's recall: per run, never checkpointed.
    `recall_turn_start` holds the turn's messages as it began (its user message), indexed
    with the rest when the agent finishes. It is checkpointed (the user's own messages,
    nothing recalled), so a run resumed after an interrupt still has them when another
    middleware took them out of `messages` in the meantime.
    """

    recalled_memory: NotRequired[Annotated[RecalledMemory | None, UntrackedValue, PrivateStateAttr]]
    recall_turn_start: NotRequired[Annotated[tuple[AnyMessage, ...] | None, PrivateStateAttr]]


def _turn_messages(state: RecallAgentState) -> list[AnyMessage]:
    """The conversation to index: the state's, after the turn's messages it lost.

    Another middleware may replace the state's messages during the turn (LangChain's
    `SummarizationMiddleware` swaps them for a summary and the newest few): the user's
    message, not stored yet, would then be lost. It is put back in front of them.
    """
    now = list(state["messages"])
    present = {m.id for m in now}
    lost = [m for m in state.get("recall_turn_start") or () if m.id not in present]
    return [*lost, *now] if lost else now


_EXTENDED: type[ExtendedModelResponse[Any]] | None = getattr(
    agent_types, "ExtendedModelResponse", None
)
"""LangChain's answer-plus-state-update of `wrap_model_call`, where it has one (else None)."""


def _keeping(
    response: ModelResponse[Any], recalled: RecalledMemory
) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
    """`response`, with `recalled` written to the per-run channel for the next model calls.

    A run resumed after an interrupt starts with the channel empty and recalls at its
    first model call: kept there, the recall serves the run's other calls too (one recall
    per run, as in the graph). A LangChain without `ExtendedModelResponse` cannot write
    state from `wrap_model_call`: each model call of such a run recalls again.
    """
    if _EXTENDED is None:
        return response
    return _EXTENDED(model_response=response, command=Command(update={RECALL_KEY: recalled}))


def _with_recall(request: ModelRequest[Any], recalled: RecalledMemory) -> ModelRequest[Any]:
    """A copy of the request whose messages carry the recalled ones (state untouched)."""
    messages = cast("list[AnyMessage]", recalled.apply(request.messages))
    return request.override(messages=messages)


class SemanticRecallMiddleware(AgentMiddleware[RecallAgentState, Any, Any]):
    """Semantic recall for `langchain.agents.create_agent`.

    Recall runs once per user turn (`before_agent`), the recalled messages reach every
    model call of the turn (`wrap_model_call`) without being written to the state, and
    the turn is stored when the agent finishes (`after_agent`). Sync and async agents
    are supported.

    Example:
        ```python
        from langchain.agents import create_agent
        from langgraph.checkpoint.memory import InMemorySaver

        agent = create_agent(
            model,
            tools=[...],
            middleware=[SemanticRecallMiddleware(memory)],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "chat-2"}}
        agent.invoke(
            {"messages": [("user", "What am I allergic to?")]},
            config,
            context={"resource_id": "alice"},
        )
        ```

    Args:
        memory: the engine.
        search_tool: also give the agent the memory search tool, scoped like recall, so
            the model searches on purpose in the same index (with the same filter,
            since and until).
        filter: metadata filter of every recall (docs/filtering.md); a run may give
            one in `config["configurable"]["recall_filter"]` too (both hold).
        since: only messages created at or after this (a timedelta: back from the
            turn's own time); `until`: only before it (`recall_since`, `recall_until`).
        horizon: recall only this recent (over the engine's `horizon`; `recall_horizon`).

    Raises:
        InvalidOptionError: a bad filter, time bound or horizon; memory not a
            `SemanticRecall`; `search_tool` not a bool.

    Raises (at run time):
        MissingIdentityError: no thread id (or no resource id in resource scope).
        IdentityMismatchError: a resource other than the authenticated user.
        ForgottenThreadError: the thread was forgotten.
        OwnershipError: the thread belongs to another resource.
    """

    state_schema = RecallAgentState

    def __init__(
        self,
        memory: SemanticRecall,
        *,
        search_tool: bool = False,
        filter: Mapping[str, Any] | None = None,
        since: datetime | timedelta | None = None,
        until: datetime | timedelta | None = None,
        horizon: timedelta | None = None,
    ) -> None:
        super().__init__()
        check_node_options("SemanticRecallMiddleware", memory)
        if not isinstance(search_tool, bool):  # "no" would read as True
            raise InvalidOptionError(f"search_tool must be True or False, got {search_tool!r}")
        self.memory = memory
        self.narrowing = narrowing_option(filter, since, until, horizon)
        tool = partial(create_memory_search_tool, filter=filter, since=since, until=until)
        self.tools: list[BaseTool] = [tool(memory)] if search_tool else []

    # --- before the agent: recall once per user turn ------------------------------------

    @override
    def before_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """Recall for this turn into the per-run channel."""
        said = require_conversation(list(state["messages"]), "messages", "the recall middleware")
        recalled = recall_turn(self.memory, said, self.narrowing)
        return {RECALL_KEY: recalled, TURN_START_KEY: turn_messages(said)}

    @override
    async def abefore_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """Async twin of `before_agent`."""
        said = require_conversation(list(state["messages"]), "messages", "the recall middleware")
        recalled = await arecall_turn(self.memory, said, self.narrowing)
        return {RECALL_KEY: recalled, TURN_START_KEY: turn_messages(said)}

    # --- every model call: inject, write nothing ----------------------------------------

    def _turn_recall(self, request: ModelRequest[Any]) -> RecalledMemory | None:
        state = cast("RecallAgentState", request.state)
        messages: list[BaseMessage] = (
            list(_turn_messages(state)) if state.get("messages") else list(request.messages)
        )
        return recalled_for_turn(state, messages)

    @override
    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Call the model with this turn's recalled messages added to the request."""
        recalled = self._turn_recall(request)
        if recalled is not None:
            return handler(_with_recall(request, recalled))
        # Resumed after an interrupt: the per-run channel is empty. Recall, and keep it.
        recalled = recall_turn(self.memory, list(request.state["messages"]), self.narrowing)
        return _keeping(handler(_with_recall(request, recalled)), recalled)

    @override
    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Async twin of `wrap_model_call`."""
        recalled = self._turn_recall(request)
        if recalled is not None:
            return await handler(_with_recall(request, recalled))
        messages = list(request.state["messages"])
        recalled = await arecall_turn(self.memory, messages, self.narrowing)
        response = await handler(_with_recall(request, recalled))
        return _keeping(response, recalled)

    # --- after the agent: index the turn ------------------------------------------------

    @override
    def after_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> None:
        """Store the turn's new messages and embed their text."""
        index_new_messages(self.memory, _turn_messages(state))

    @override
    async def aafter_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> None:
        """Async twin of `after_agent`."""
        await aindex_new_messages(self.memory, _turn_messages(state))


__all__ = ["TURN_START_KEY", "RecallAgentState", "SemanticRecallMiddleware"]
