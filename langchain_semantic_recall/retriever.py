"""A LangChain retriever over the memory, and a tool an agent calls to search it.

Both are scoped by the caller, never by the model: the thread and resource come from the
run config (``config["configurable"]["thread_id"]`` and ``["resource_id"]``, key names
from the engine), so a model that calls the tool chooses only the query and can never
reach another resource's memory.

Setup::

    from langchain_semantic_recall import SemanticRecall

    memory = SemanticRecall.local("./memory")
    config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}

Retriever (sync and async)::

    retriever = memory.as_retriever(k=3)
    docs = retriever.invoke("peanut allergy", config)
    docs = await retriever.ainvoke("peanut allergy", config)
    docs[0].metadata["score"], docs[0].metadata["thread_id"]

Tool, for an agent (LangGraph passes the graph's config to the tool)::

    tool = memory.as_tool()  # or create_memory_search_tool(memory)
    agent = create_agent(model, tools=[tool])
    agent.invoke({"messages": [("user", "What am I allergic to?")]}, config)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    AsyncCallbackManagerForToolRun,
    CallbackManagerForRetrieverRun,
    CallbackManagerForToolRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.formatting import escape_label, escape_memory_text
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.options import check_top_k
from langchain_semantic_recall.records import RecallHit, StoredMessage

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

Scope = tuple[str | None, str | None]
"""(thread id, resource id) of one call."""

DEFAULT_TOOL_NAME = "search_memory"
DEFAULT_TOOL_DESCRIPTION = (
    "Search your long-term memory of past conversations with this user. Use it when the "
    "user refers to something said before that is not in the current conversation. "
    "Input: what to look for, in a few words. Returns remembered messages with their "
    "date, conversation and surrounding context."
)


def as_id(value: object) -> str | None:
    """An id from the config: ``None`` stays ``None``, integers become text."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return value
    raise InvalidInputError(f"ids must be strings, got {type(value).__name__} {value!r}")


def config_scope(config: RunnableConfig | None, *, thread_key: str, resource_key: str) -> Scope:
    """(thread id, resource id) from ``config["configurable"]``; each may be ``None``."""
    configurable = ensure_config(config).get("configurable") or {}
    return as_id(configurable.get(thread_key)), as_id(configurable.get(resource_key))


def missing_thread_error(thread_key: str, resource_key: str, what: str) -> InvalidInputError:
    """The error raised when a run carries no conversation id."""
    return InvalidInputError(
        f"{what} needs a conversation id in config['configurable'][{thread_key!r}]; run it "
        f"with config={{'configurable': {{{thread_key!r}: 'chat-1', "
        f"{resource_key!r}: 'alice'}}}}"
    )


def hit_to_document(hit: RecallHit) -> Document:
    """A search hit as a ``Document``: the message text, its metadata, score and window."""
    message = hit.message
    return Document(
        id=message.id,
        page_content=message.text,
        metadata={
            "source": MEMORY_SOURCE,
            "message_id": message.id,
            "thread_id": message.thread_id,
            "resource_id": message.resource_id,
            "role": message.role,
            "created_at": message.created_at.isoformat(),
            "seq": message.seq,
            "score": hit.score,
            "window": [_window_entry(m) for m in hit.window],
        },
    )


def _window_entry(message: StoredMessage) -> dict[str, Any]:
    return {
        "message_id": message.id,
        "role": message.role,
        "text": message.text,
        "created_at": message.created_at.isoformat(),
    }


def format_hits(hits: Sequence[RecallHit]) -> str:
    """The tool's answer to the model: one numbered entry per hit, with its context."""
    if not hits:
        return "No memories found for this query."
    lines = [f"Found {len(hits)} remembered message(s), best first:"]
    for number, hit in enumerate(hits, start=1):
        when = hit.message.created_at.strftime("%Y-%m-%d %H:%M UTC")
        label = escape_label(hit.thread_id)  # a thread id cannot forge entries
        lines.append(f'{number}. score {hit.score:.2f}, conversation "{label}", {when}')
        for message in hit.window:
            marker = ">" if message.id == hit.message.id else " "
            text = escape_memory_text(" ".join(message.text.split())) or "(no text)"
            lines.append(f"   {marker} {message.role}: {text}")
    return "\n".join(lines)


class SemanticRecallRetriever(BaseRetriever):
    """A retriever over the memory: one ``Document`` per hit, best first.

    The thread and resource come from the run config (``config["configurable"]``, key
    names from the engine); ``thread_id`` / ``resource_id`` given here are defaults for
    calls whose config has none. The memory's ``scope`` decides whether the search covers
    the thread or every thread of the resource.

    Each document's ``page_content`` is the message text; ``metadata`` holds
    ``message_id``, ``thread_id``, ``resource_id``, ``role``, ``created_at`` (ISO 8601),
    ``seq``, ``score`` (the engine's search score in [0, 1]), ``source`` (``"memory"``) and
    ``window`` (the hit with its neighbours: ``message_id``, ``role``, ``text``,
    ``created_at``).

    Example::

        retriever = SemanticRecallRetriever(memory=memory, k=2)
        config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}
        docs = retriever.invoke("peanuts", config)          # or: await ainvoke(...)
        docs = retriever.invoke("peanuts", config, k=1)     # per-call number of results

    Args:
        memory: the :class:`SemanticRecall` engine to search.
        k: hits per query (default: the engine's ``top_k``).
        thread_id: thread used when the config has none.
        resource_id: resource used when the config has none.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any
    k: int | None = None
    thread_id: str | None = None
    resource_id: str | None = None

    def __init__(self, **data: Any) -> None:
        if data.get("k") is not None:
            check_top_k(data["k"])  # our InvalidOptionError, not a wrapped pydantic error
        super().__init__(**data)

    def _scope(self, config: RunnableConfig | None) -> Scope:
        memory: SemanticRecall = self.memory
        thread_id, resource_id = config_scope(
            config, thread_key=memory.thread_key, resource_key=memory.resource_key
        )
        thread_id = thread_id if thread_id is not None else self.thread_id
        resource_id = resource_id if resource_id is not None else self.resource_id
        # A view bound with memory.for_thread(...) supplies the last defaults.
        thread_id, resource_id = memory.resolve_ids(thread_id, resource_id)
        if thread_id is None:
            raise missing_thread_error(memory.thread_key, memory.resource_key, "the retriever")
        return thread_id, resource_id

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Search the memory; scope from ``config``, ``k`` optional."""
        kwargs["scope"] = self._scope(config)
        return super().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async twin of :meth:`invoke`."""
        kwargs["scope"] = self._scope(config)
        return await super().ainvoke(input, config, **kwargs)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        scope: Scope | None = None,
        k: int | None = None,
    ) -> list[Document]:
        thread_id, resource_id = scope or self._scope(None)
        hits = self.memory.search(
            query, thread_id=thread_id, resource_id=resource_id, top_k=k or self.k
        )
        return [hit_to_document(hit) for hit in hits]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        scope: Scope | None = None,
        k: int | None = None,
    ) -> list[Document]:
        thread_id, resource_id = scope or self._scope(None)
        hits = await self.memory.asearch(
            query, thread_id=thread_id, resource_id=resource_id, top_k=k or self.k
        )
        return [hit_to_document(hit) for hit in hits]


class MemorySearchInput(BaseModel):
    """The only argument the model gives: what to look for."""

    query: str = Field(description="What to look for in past conversations, in a few words.")


class MemorySearchTool(BaseTool):
    """Searches the memory of the conversation's resource; returns text and documents.

    The model passes only ``query``; thread and resource are read from the run config,
    so the search stays inside the caller's scope whatever the model writes. The tool
    answers with text for the model and the hits as ``Document`` artifacts.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = DEFAULT_TOOL_NAME
    description: str = DEFAULT_TOOL_DESCRIPTION
    args_schema: type[BaseModel] = MemorySearchInput
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    memory: Any
    scope_of: Callable[[RunnableConfig], Scope] | None = None
    """Reads (thread, resource) from the run; default: ``config["configurable"]``."""

    def _scope(self, config: RunnableConfig) -> tuple[str, str | None]:
        memory: SemanticRecall = self.memory
        if self.scope_of is not None:
            thread_id, resource_id = self.scope_of(config)
        else:
            thread_id, resource_id = config_scope(
                config, thread_key=memory.thread_key, resource_key=memory.resource_key
            )
        if thread_id is None:
            raise missing_thread_error(
                memory.thread_key, memory.resource_key, f"the {self.name!r} tool"
            )
        return thread_id, resource_id

    def _run(
        self,
        query: str,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[Document]]:
        thread_id, resource_id = self._scope(config)
        memory: SemanticRecall = self.memory
        hits = memory.search(query, thread_id=thread_id, resource_id=resource_id)
        return format_hits(hits), [hit_to_document(hit) for hit in hits]

    async def _arun(
        self,
        query: str,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[Document]]:
        thread_id, resource_id = self._scope(config)
        memory: SemanticRecall = self.memory
        hits = await memory.asearch(query, thread_id=thread_id, resource_id=resource_id)
        return format_hits(hits), [hit_to_document(hit) for hit in hits]


def create_memory_search_tool(
    memory: SemanticRecall,
    *,
    name: str | None = None,
    description: str | None = None,
    scope_of: Callable[[RunnableConfig], Scope] | None = None,
) -> BaseTool:
    """A tool an agent calls to search its memory on purpose.

    The model gives only a query; the scope is the caller's (thread and resource from the
    run config), so the model can never read another resource's memory.

    Example::

        tool = create_memory_search_tool(memory)
        config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}
        print(tool.invoke({"query": "allergy"}, config))  # or: await tool.ainvoke(...)

    Args:
        memory: the engine to search.
        name: tool name (default ``"search_memory"``).
        description: what the model is told about the tool.
        scope_of: reads (thread id, resource id) from the run config, for applications
            that keep them elsewhere (the middleware passes one that also reads the
            agent's runtime context). Default: ``config["configurable"]``.
    """
    return MemorySearchTool(
        memory=memory,
        name=name or DEFAULT_TOOL_NAME,
        description=description or DEFAULT_TOOL_DESCRIPTION,
        scope_of=scope_of,
    )


__all__ = [
    "MemorySearchInput",
    "MemorySearchTool",
    "SemanticRecallRetriever",
    "config_scope",
    "create_memory_search_tool",
    "format_hits",
    "hit_to_document",
]
