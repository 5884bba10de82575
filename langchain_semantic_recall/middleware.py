"""``SemanticRecallMiddleware``: semantic recall for LangChain v1 ``create_agent``.

- ``before_agent`` (once per user turn): recall for the newest user message, into the
  per-run ``recalled_memory`` channel (an ``UntrackedValue``: never checkpointed, empty at
  the start of every run);
- ``wrap_model_call`` (every model call, tool loop included): the model request gets the
  recalled messages with ``request.override(messages=...)``; the agent state is not
  written, so the ``messages`` channel only ever holds real turns;
- ``after_agent`` (once, when the agent finishes): store the turn's new messages (tool
  calls and results too) and embed the user and assistant text.

Where the ids come from:

- thread: ``config["configurable"]["thread_id"]`` (LangGraph's own key; the engine's
  ``thread_key``), required;
- resource: the agent's runtime context first (``agent.invoke(..., context=...)``: a
  mapping with a ``"resource_id"`` key or an object with a ``resource_id`` attribute, e.g.
  a ``context_schema`` dataclass), else ``config["configurable"]["resource_id"]``. The
  runtime context is LangChain v1's place for per-run values that the application sets and
  the model cannot change. When both are given they must agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.channels import UntrackedValue
from langgraph.config import get_config
from langgraph.runtime import Runtime, get_runtime

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.retriever import (
    as_id,
    config_scope,
    create_memory_search_tool,
    missing_thread_error,
)
from langchain_semantic_recall.turns import (
    RECALL_KEY,
    RecalledMemory,
    aindex_new_messages,
    arecall_turn,
    index_new_messages,
    recall_turn,
    recalled_for_turn,
)

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall


class RecallAgentState(AgentState[Any]):
    """The agent state plus the per-run ``recalled_memory`` channel (private, untracked)."""

    recalled_memory: NotRequired[Annotated[RecalledMemory | None, UntrackedValue, PrivateStateAttr]]


def _with_recall(request: ModelRequest[Any], recalled: RecalledMemory) -> ModelRequest[Any]:
    """A copy of the request whose messages carry the recalled ones (state untouched)."""
    messages = cast("list[AnyMessage]", recalled.apply(request.messages))
    return request.override(messages=messages)


def context_resource(context: Any, key: str) -> str | None:
    """The resource id carried by a runtime context (mapping key or attribute), if any."""
    if context is None:
        return None
    value = context.get(key) if isinstance(context, Mapping) else getattr(context, key, None)
    return as_id(value)


class SemanticRecallMiddleware(AgentMiddleware[RecallAgentState, Any, Any]):
    """Semantic recall for ``langchain.agents.create_agent``.

    Recall runs once per user turn (``before_agent``), the recalled messages reach every
    model call of the turn (``wrap_model_call``) without being written to the state, and
    the turn is stored when the agent finishes (``after_agent``). Sync and async agents
    are supported.

    Example::

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
        await agent.ainvoke({"messages": [("user", "Thanks!")]}, config, context=...)

    Args:
        memory: the engine.
        search_tool: also give the agent the memory search tool
            (:func:`create_memory_search_tool`), scoped like recall (runtime context or
            config), so the model searches on purpose in the same index.
        thread_key: config key of the thread id (default: the engine's).
        resource_key: context and config key of the resource id (default: the engine's).

    Raises (at run time):
        InvalidInputError: no thread id, or context and config disagree on the resource.
        OwnershipError: the thread belongs to another resource.
    """

    state_schema = RecallAgentState

    def __init__(
        self,
        memory: SemanticRecall,
        *,
        search_tool: bool = False,
        thread_key: str | None = None,
        resource_key: str | None = None,
    ) -> None:
        self.memory = memory
        self.thread_key = thread_key or memory.thread_key
        self.resource_key = resource_key or memory.resource_key
        self.tools: list[BaseTool] = (
            [create_memory_search_tool(memory, scope_of=self._tool_scope)] if search_tool else []
        )

    # --- scope --------------------------------------------------------------------------

    def _scope(self, runtime: Runtime[Any] | None) -> tuple[str, str | None]:
        return self._ids(get_config(), runtime)

    def _tool_scope(self, config: RunnableConfig) -> tuple[str, str | None]:
        """The search tool's scope: the same as recall's, read inside the tool call."""
        try:
            runtime: Runtime[Any] | None = get_runtime()
        except RuntimeError:  # called outside a graph run: the config alone
            runtime = None
        return self._ids(config, runtime)

    def _ids(self, config: RunnableConfig, runtime: Runtime[Any] | None) -> tuple[str, str | None]:
        thread_id, from_config = config_scope(
            config, thread_key=self.thread_key, resource_key=self.resource_key
        )
        if thread_id is None:
            raise missing_thread_error(self.thread_key, self.resource_key, "the agent's memory")
        context = runtime.context if runtime is not None else None
        from_context = context_resource(context, self.resource_key)
        if from_context is not None and from_config is not None and from_context != from_config:
            raise InvalidInputError(
                f"the runtime context says {self.resource_key}={from_context!r} but the config "
                f"says {from_config!r}: give the resource id in one place"
            )
        return thread_id, from_context if from_context is not None else from_config

    # --- before the agent: recall once per user turn ------------------------------------

    def before_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """Recall for this turn into the per-run channel."""
        thread_id, resource_id = self._scope(runtime)
        recalled = recall_turn(
            self.memory, state["messages"], thread_id=thread_id, resource_id=resource_id
        )
        return {RECALL_KEY: recalled}

    async def abefore_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """Async twin of :meth:`before_agent`."""
        thread_id, resource_id = self._scope(runtime)
        recalled = await arecall_turn(
            self.memory, state["messages"], thread_id=thread_id, resource_id=resource_id
        )
        return {RECALL_KEY: recalled}

    # --- every model call: inject, write nothing ----------------------------------------

    def _turn_recall(self, request: ModelRequest[Any]) -> RecalledMemory | None:
        messages: list[BaseMessage] = list(request.state.get("messages") or request.messages)
        return recalled_for_turn(request.state, messages)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with this turn's recalled messages added to the request."""
        recalled = self._turn_recall(request)
        if recalled is None:  # resumed after an interrupt: the per-run channel is empty
            thread_id, resource_id = self._scope(request.runtime)
            recalled = recall_turn(
                self.memory,
                list(request.state["messages"]),
                thread_id=thread_id,
                resource_id=resource_id,
            )
        return handler(_with_recall(request, recalled))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Async twin of :meth:`wrap_model_call`."""
        recalled = self._turn_recall(request)
        if recalled is None:
            thread_id, resource_id = self._scope(request.runtime)
            recalled = await arecall_turn(
                self.memory,
                list(request.state["messages"]),
                thread_id=thread_id,
                resource_id=resource_id,
            )
        return await handler(_with_recall(request, recalled))

    # --- after the agent: index the turn ------------------------------------------------

    def after_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> None:
        """Store the turn's new messages and embed their text."""
        thread_id, resource_id = self._scope(runtime)
        index_new_messages(
            self.memory, state["messages"], thread_id=thread_id, resource_id=resource_id
        )

    async def aafter_agent(self, state: RecallAgentState, runtime: Runtime[Any]) -> None:
        """Async twin of :meth:`after_agent`."""
        thread_id, resource_id = self._scope(runtime)
        await aindex_new_messages(
            self.memory, state["messages"], thread_id=thread_id, resource_id=resource_id
        )


__all__ = ["RecallAgentState", "SemanticRecallMiddleware", "context_resource"]
