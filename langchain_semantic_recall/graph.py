"""LangGraph nodes for semantic recall, and a one-call agent graph.

Two nodes give any `StateGraph` over `messages` a long-term memory:

- `RecallNode`, before the model: searches the memory for the newest user message
  and writes what it found to `recalled_memory`;
- `IndexNode`, after the model: stores the turn's new messages (every role) and
  embeds the user and assistant text.

Recalled messages never enter the `messages` channel. That channel is checkpointed and
merged by `add_messages`: whatever is written there is replayed on every later turn, so
recalled context would pile up turn after turn and old memories would read as
conversation. `recalled_memory` is instead an `UntrackedValue` channel: it lives for
the current run only, is never checkpointed (not even as a pending write), starts empty on
every run and is replaced by the next turn's recall. The model node combines both at call
time (`with_recall`) and writes back only the model's answer. Recall runs once per
user turn however many times a tool loop calls the model (a run resumed after an
interrupt does not pass the recall node: `with_recall` given the node recalls itself).

The index node asks the storage which of the newest messages it already holds and stores
only those after the last stored one, so it stores each message once whether it runs once
per turn, after every model call, or in two concurrent runs of one thread. An earlier
message whose text the state changed (`update_state` with its id) is updated; a copied
thread's history stays stored under the thread it was said in. Memory is a log of each
thread, not a tree of checkpoints: a run resumed from an earlier checkpoint leaves the
abandoned turns stored (docs/surfaces.md, "With checkpoints").

Thread and resource come from the engine's one rule: `config["configurable"]`
(`thread_id`, `resource_id`), then the runtime context (`graph.invoke(...,
context={"resource_id": ...})`); on an authenticated LangGraph server the resource is
the signed-in user. A run without a thread id (or, in resource scope, a resource id)
fails with `MissingIdentityError`; a thread used under another resource with
`OwnershipError`; a forgotten thread with `ForgottenThreadError`. A graph
whose state lacks the `recalled_memory` channel (plain `MessagesState`) fails at its
first run with a message that says what to change.

The common graph, in one call (sync and async):

```python
from langgraph.checkpoint.memory import InMemorySaver

graph = create_recall_graph(model, memory, tools=[...], checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}
graph.invoke({"messages": [("user", "What am I allergic to?")]}, config)
await graph.ainvoke({"messages": [("user", "And my sister?")]}, config)
```

The two nodes in a hand-built graph:

```python
recall = RecallNode(memory)
builder = StateGraph(RecallState)
builder.add_node("recall", recall)
builder.add_node("model", lambda state: {"messages": [model.invoke(with_recall(state, recall))]})
builder.add_node("index", IndexNode(memory))
builder.add_edge(START, "recall")
builder.add_edge("recall", "model")
builder.add_edge("model", "index")
builder.add_edge("index", END)
graph = builder.compile(checkpointer=InMemorySaver())
```
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.config import get_config
from langgraph.graph import END, START, MessagesState, StateGraph

from langchain_semantic_recall.engine.narrowing import narrowing_option
from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.turn_index import aindex_new_messages, index_new_messages
from langchain_semantic_recall.turns import (
    RECALL_KEY,
    RecallChannel,
    RecalledMemory,
    arecall_turn,
    check_node_options,
    current_turn,
    inject_recalled,
    recall_turn,
    recalled_for_turn,
    require_conversation,
    require_recall_channel,
    state_messages,
)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel, LanguageModelInput
    from langchain_core.tools import BaseTool
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.types import Checkpointer

    from langchain_semantic_recall.recall import SemanticRecall

_LOG = logging.getLogger(__name__)


class RecallState(MessagesState):
    """`MessagesState` plus the per-run `recalled_memory` channel (never checkpointed)."""

    recalled_memory: NotRequired[Annotated[RecalledMemory | None, RecallChannel]]


class RecallNode(Runnable[Any, dict[str, Any]]):
    """Graph node: recall for the newest user message into `recalled_memory`.

    Writes `{recall_key: RecalledMemory}` and nothing else; the model node reads it
    with `with_recall`. Put it between `START` and the model, not inside a tool
    loop, so it runs once per user turn. Works under `invoke` and `ainvoke`. Thread
    and resource come from the run config or the runtime context (the engine's rule).

    Example:
        ```python
        builder = StateGraph(RecallState)
        builder.add_node("recall", RecallNode(memory))
        ```

    Args:
        memory: the engine.
        messages_key: the state channel holding the conversation.
        recall_key: the channel to write (declare it as in `RecallState`).
        filter: metadata filter of every recall (docs/filtering.md); a run may give
            one in `config["configurable"]["recall_filter"]` too (both hold).
        since: only messages created at or after this (a timedelta: back from the
            turn's own time); `until`: only before it (`recall_since`, `recall_until`).
        horizon: recall only this recent (over the engine's `horizon`; `recall_horizon`).

    Raises:
        InvalidOptionError: a bad filter, time bound or horizon; memory not a
            `SemanticRecall`; a channel name of the wrong type.
        InvalidInputError: the state has no `recall_key` channel (a plain
            `MessagesState` graph: memory could never reach the model) or no
            `messages_key` channel (an empty conversation recalls nothing).
        MissingIdentityError: no thread id (or no resource id in resource scope).
        ForgottenThreadError: the thread was forgotten.
        OwnershipError: the thread belongs to another resource.
    """

    def __init__(
        self,
        memory: SemanticRecall,
        *,
        messages_key: str = "messages",
        recall_key: str = RECALL_KEY,
        filter: Mapping[str, Any] | None = None,
        since: datetime | timedelta | None = None,
        until: datetime | timedelta | None = None,
        horizon: timedelta | None = None,
    ) -> None:
        check_node_options("RecallNode", memory, messages_key=messages_key, recall_key=recall_key)
        self.memory = memory
        self.messages_key = messages_key
        self.recall_key = recall_key
        self.narrowing = narrowing_option(filter, since, until, horizon)

    def _messages(self, state: Any) -> list[BaseMessage]:
        messages = state_messages(state, self.messages_key)
        require_recall_channel(state, self.recall_key, "RecallNode")
        return require_conversation(messages, self.messages_key, "RecallNode")

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Recall for the newest user message: `{recall_key: RecalledMemory}`."""
        recalled = recall_turn(self.memory, self._messages(input), self.narrowing, config=config)
        return {self.recall_key: recalled}

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Async twin of `invoke`."""
        messages = self._messages(input)
        recalled = await arecall_turn(self.memory, messages, self.narrowing, config=config)
        return {self.recall_key: recalled}


class IndexNode(Runnable[Any, dict[str, Any]]):
    """Graph node: store the turn's new messages and embed their text; writes no state.

    Every new message is stored (tool calls and results too, for context windows); only
    user and assistant text is embedded. Messages already stored are skipped, so the node
    may run once per turn or after every model call. Works under `invoke` and
    `ainvoke`, in any graph over messages (`MessagesState` too).

    Example:
        ```python
        builder.add_node("index", IndexNode(memory))
        builder.add_edge("model", "index")
        ```

    Args:
        memory: the engine.
        messages_key: the state channel holding the conversation.

    Raises:
        InvalidInputError: the state has no `messages_key` channel.
        MissingIdentityError: no thread id (or no resource id in resource scope).
        ForgottenThreadError: the thread was forgotten (nothing of the turn is stored).
        OwnershipError: the thread belongs to another resource.
    """

    def __init__(self, memory: SemanticRecall, *, messages_key: str = "messages") -> None:
        check_node_options("IndexNode", memory, messages_key=messages_key)
        self.memory = memory
        self.messages_key = messages_key

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Store and embed the turn's new messages; returns no state update."""
        messages = state_messages(input, self.messages_key)
        index_new_messages(self.memory, messages, config=config)
        return {}

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Async twin of `invoke`."""
        messages = state_messages(input, self.messages_key)
        await aindex_new_messages(self.memory, messages, config=config)
        return {}


def with_recall(
    state: Any,
    recall: RecallNode | None = None,
    *,
    messages_key: str | None = None,
    recall_key: str | None = None,
) -> list[BaseMessage]:
    """The messages to send to the model: the conversation plus this turn's recall.

    Use it in the model node of a hand-built graph whose state has a `recalled_memory`
    channel filled by `RecallNode` (e.g. `RecallState`). A run resumed after an
    interrupt starts at the interrupted node, so the recall node did not run in it and
    the channel is empty: given the graph's `recall` node, `with_recall` recalls for the
    turn itself (with the node's options and the run's config, at each model call of
    that run); without it, it raises rather than send the model no memory.

    Args:
        state: The graph's state (a mapping or an object with the two keys).
        recall: The graph's `RecallNode` (its keys are the defaults of the next two).
        messages_key: The state key of the conversation ("messages").
        recall_key: The state key the recall node writes this turn's recall to.

    Raises:
        InvalidInputError: the state has no recall channel, or it holds no recall for
            the newest user message and no `recall` node was given.
    """
    messages, recalled, config = _recalled(state, recall, messages_key, recall_key)
    if recalled is None and recall is not None:
        recalled = recall.invoke(state, config)[recall.recall_key]
    return messages if recalled is None else recalled.apply(messages)


async def awith_recall(
    state: Any,
    recall: RecallNode | None = None,
    *,
    messages_key: str | None = None,
    recall_key: str | None = None,
) -> list[BaseMessage]:
    """Async twin of `with_recall` (recalls without blocking the event loop)."""
    messages, recalled, config = _recalled(state, recall, messages_key, recall_key)
    if recalled is None and recall is not None:
        recalled = (await recall.ainvoke(state, config))[recall.recall_key]
    return messages if recalled is None else recalled.apply(messages)


def _recalled(
    state: Any, recall: RecallNode | None, messages_key: str | None, recall_key: str | None
) -> tuple[list[BaseMessage], RecalledMemory | None, RunnableConfig | None]:
    """The conversation, this run's recall, and the run's config when it must recall.

    The channel lives for one run: whatever it holds was recalled in this run, for its
    user message or (a node added one since: a critique, a tool's image) an earlier one.
    Empty, the recall node did not run (a run resumed after an interrupt): `recall`
    recalls, or it is raised (no user message: nothing to recall, nothing raised).
    """
    if recall is not None:
        if not isinstance(recall, RecallNode):
            raise InvalidOptionError(
                f"with_recall's recall must be the graph's RecallNode, got {type(recall).__name__}"
            )
        given = {"messages_key": messages_key, "recall_key": recall_key}
        own = {"messages_key": recall.messages_key, "recall_key": recall.recall_key}
        if clash := [k for k, v in given.items() if v is not None and v != own[k]]:
            raise InvalidOptionError(
                f"with_recall: {', '.join(f'{k}={given[k]!r}' for k in clash)} differs from "
                f"the recall node's ({', '.join(f'{own[k]!r}' for k in clash)}); leave it out"
            )
    messages_key = messages_key or (recall.messages_key if recall else "messages")
    recall_key = recall_key or (recall.recall_key if recall else RECALL_KEY)
    messages = state_messages(state, messages_key)
    require_recall_channel(state, recall_key, "with_recall")
    value = state.get(recall_key) if isinstance(state, Mapping) else getattr(state, recall_key)
    if isinstance(value, RecalledMemory) or current_turn(messages) is None:
        return messages, value if isinstance(value, RecalledMemory) else None, None
    if recall is None:
        raise InvalidInputError(
            f"with_recall: state[{recall_key!r}] is empty, so the model would get no memory: "
            "the recall node did not run in this run (a run resumed after an interrupt "
            "starts at the interrupted node). Pass the graph's RecallNode, "
            "with_recall(state, recall_node), so it recalls itself, or route the run "
            "through the recall node first"
        )
    config = _run_config()
    if config is None:
        raise InvalidInputError(
            "with_recall recalls with the run's config (its thread and resource ids): call "
            "it in a graph node, where LangGraph gives it, or call the recall node yourself"
        )
    return messages, None, config


def _run_config() -> RunnableConfig | None:
    """The config of the LangGraph run calling, if any (None: called outside a run)."""
    try:
        return get_config()
    except RuntimeError:
        return None


class _ModelNode(Runnable[Any, dict[str, Any]]):
    """Calls the model on the conversation plus this turn's recall."""

    def __init__(
        self,
        model: Runnable[LanguageModelInput, BaseMessage],
        recall: RecallNode,
        system_prompt: str | None,
    ) -> None:
        self.model = model
        self.recall = recall
        self.system_prompt = system_prompt

    def _prompt(self, messages: list[BaseMessage], recalled: RecalledMemory) -> list[BaseMessage]:
        if self.system_prompt:
            messages = [SystemMessage(self.system_prompt), *messages]
        return recalled.apply(messages)

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        messages = state_messages(input, self.recall.messages_key)
        update: dict[str, Any] = {}
        recalled = recalled_for_turn(input, messages, self.recall.recall_key)
        if recalled is None:  # the run resumed after an interrupt: the channel is empty
            update = self.recall.invoke(input, config)
            recalled = update[self.recall.recall_key]
        answer = self.model.invoke(self._prompt(messages, recalled), config)
        return {**update, self.recall.messages_key: [answer]}

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        messages = state_messages(input, self.recall.messages_key)
        update: dict[str, Any] = {}
        recalled = recalled_for_turn(input, messages, self.recall.recall_key)
        if recalled is None:
            update = await self.recall.ainvoke(input, config)
            recalled = update[self.recall.recall_key]
        answer = await self.model.ainvoke(self._prompt(messages, recalled), config)
        return {**update, self.recall.messages_key: [answer]}


def _route_after_model(state: Mapping[str, Any]) -> str:
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else "index"


def create_recall_graph(
    model: BaseChatModel,
    memory: SemanticRecall,
    tools: Sequence[BaseTool | Callable[..., Any]] | None = None,
    *,
    system_prompt: str | None = None,
    checkpointer: Checkpointer = None,
    name: str | None = None,
    filter: Mapping[str, Any] | None = None,
    since: datetime | timedelta | None = None,
    until: datetime | timedelta | None = None,
    horizon: timedelta | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The common agent graph: recall -> model -> (tools -> model)* -> index.

    State: `RecallState` (its input and output are plain `{"messages": [...]}`).
    Recall runs once per user turn; the model sees the system prompt, this turn's
    recalled messages and the conversation; only real turns are checkpointed; the index
    node stores the turn once, tool calls and results included. Stream with
    `stream_mode="updates"` to see what the `recall` node found (on a LangGraph server,
    which streams only output channels, use `stream_mode="tasks"`).

    Example:
        ```python
        graph = create_recall_graph(model, memory, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}
        graph.invoke({"messages": [("user", "Any snack ideas?")]}, config)
        ```

    Args:
        model: a chat model (bound to `tools` when given).
        memory: the engine.
        tools: tools the model may call (run by a LangGraph `ToolNode`).
        system_prompt: instructions placed before the recalled messages (not stored).
        checkpointer: a LangGraph checkpointer (`InMemorySaver`, `SqliteSaver`, ...).
        name: name of the compiled graph.
        filter: metadata filter of every recall (docs/filtering.md). This and the next
            three are the recall node's options (`RecallNode`): the run's
            `config["configurable"]` (`recall_filter`, `recall_since`, `recall_until`)
            narrows further (both hold), and gives the horizon if not set here.
        since: only messages created at or after this (a timedelta: back from the
            turn's own time).
        until: only messages created before this.
        horizon: recall only this recent (over the engine's `horizon`).

    Raises:
        InvalidOptionError: a bad filter, time bound or horizon (at construction).
    """
    recall = RecallNode(memory, filter=filter, since=since, until=until, horizon=horizon)
    tool_list = list(tools or [])
    bound: Runnable[LanguageModelInput, BaseMessage] = (
        model.bind_tools(tool_list) if tool_list else model
    )
    builder = StateGraph(RecallState, input_schema=MessagesState, output_schema=MessagesState)
    builder.add_node("recall", recall)
    builder.add_node("model", _ModelNode(bound, recall, system_prompt))
    builder.add_node("index", IndexNode(memory))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    if tool_list:
        from langgraph.prebuilt import ToolNode

        builder.add_node("tools", ToolNode(tool_list))
        builder.add_conditional_edges("model", _route_after_model, ["tools", "index"])
        builder.add_edge("tools", "model")
    else:
        builder.add_edge("model", "index")
    builder.add_edge("index", END)
    return builder.compile(checkpointer=checkpointer, name=name)


__all__ = [
    "RECALL_KEY",
    "IndexNode",
    "RecallChannel",
    "RecallNode",
    "RecallState",
    "RecalledMemory",
    "aindex_new_messages",
    "arecall_turn",
    "awith_recall",
    "create_recall_graph",
    "current_turn",
    "index_new_messages",
    "inject_recalled",
    "recall_turn",
    "with_recall",
]
