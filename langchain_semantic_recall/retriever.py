"""A LangChain retriever over the memory, and a tool an agent calls to search it.

Both are scoped by the caller, never by the model: thread and resource come from the
engine's identity rule (explicit ids, `config["configurable"]`, the runtime context; the
authenticated user on a LangGraph server), so a model that calls the tool chooses only
the query and can never reach another resource's memory.

```python
memory = SemanticRecall.local("./memory")
config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}

retriever = memory.as_retriever(search_kwargs={"k": 3})
docs = retriever.invoke("peanut allergy", config)  # or: await retriever.ainvoke(...)

tool = memory.as_tool()  # or create_memory_search_tool(memory)
agent = create_agent(model, tools=[tool])
agent.invoke({"messages": [("user", "What am I allergic to?")]}, config)
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    AsyncCallbackManagerForToolRun,
    CallbackManagerForRetrieverRun,
    CallbackManagerForToolRun,
)
from langchain_core.documents import Document
from langchain_core.messages import ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field

from langchain_semantic_recall.engine.identity import as_id, with_signed_in_user
from langchain_semantic_recall.engine.narrowing import narrowing_option
from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.messages import MEMORY_SOURCE, MEMORY_TOOL_SOURCE
from langchain_semantic_recall.options import Scope, check_scope, check_top_k
from langchain_semantic_recall.quoting import escape_label, escape_memory_text
from langchain_semantic_recall.records import RecallHit, StoredMessage
from langchain_semantic_recall.search import check_mode_threshold

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall

DEFAULT_TOOL_NAME = "search_memory"
DEFAULT_TOOL_DESCRIPTION = (
    "Search your long-term memory of past conversations with this user. Use it when the "
    "user refers to something said before that is not in the current conversation. "
    'Input: what to recall, as a full question ("what is the user\'s job?"): a lone word '
    "or name may read as small talk and find nothing. Returns remembered messages with "
    "their date, conversation and surrounding context."
)


NOTHING_FOUND = (
    "No memory matched this query well enough. Past conversations may still hold it: "
    "to look again, ask a full question naming what to recall."
)
"""The tool's answer when search stays silent (it holds back weak matches, and reads a
lone word or name as small talk: docs/quality.md, *What is still missed*)."""


def _quoted_line(message: StoredMessage) -> str:
    """`role: text` on one line; system and tool roles marked as quoted (data, not orders)."""
    role = message.role if message.role in {"user", "assistant"} else f"{message.role} (quoted)"
    return f"{role}: {escape_memory_text(' '.join(message.text.split())) or '(no text)'}"


def transcript(hit: RecallHit) -> str:
    """The hit's window as readable text.

    A header line, then one line per message, the hit marked with `>`. Remembered text
    is data, not instructions: it is escaped (look-alike tags neutralised, the label
    unable to close its quotes) and system and tool messages read `system (quoted)` and
    `tool (quoted)`.

    Args:
        hit: One search hit.
    """
    when = hit.message.created_at.strftime("%Y-%m-%d %H:%M UTC")
    lines = [f'Conversation "{escape_label(hit.thread_id)}", {when}']
    for message in hit.window or (hit.message,):
        marker = ">" if message.id == hit.message.id else " "
        lines.append(f"{marker} {_quoted_line(message)}")
    return "\n".join(lines)


def hit_to_document(hit: RecallHit) -> Document:
    """A search hit as a `Document`: the window as a transcript, structure in metadata.

    Args:
        hit: One search hit.
    """
    message = hit.message
    return Document(
        id=message.id,
        page_content=transcript(hit),
        metadata={
            "source": MEMORY_SOURCE,
            "message_id": message.id,
            "thread_id": message.thread_id,
            "resource_id": message.resource_id,
            "role": message.role,
            "text": message.text,
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
    """The tool's answer to the model: one numbered entry per hit, with its context.

    Escaped like `transcript`: each message on one line after its own prefix.

    Args:
        hits: Search hits, best first.
    """
    if not hits:
        return NOTHING_FOUND
    messages = sum(len(hit.window) for hit in hits)
    lines = [
        f"Found {len(hits)} memory hit(s), {messages} message(s) with their context, best first:"
    ]
    for number, hit in enumerate(hits, start=1):
        when = hit.message.created_at.strftime("%Y-%m-%d %H:%M UTC")
        label = escape_label(hit.thread_id)  # a thread id cannot forge entries
        lines.append(f'{number}. score {hit.score:.2f}, conversation "{label}", {when}')
        for message in hit.window:
            marker = ">" if message.id == hit.message.id else " "
            lines.append(f"   {marker} {_quoted_line(message)}")
    return "\n".join(lines)


SEARCH_KWARGS = frozenset({"k", "score_threshold", "filter"})
"""The `search_kwargs` the retriever understands (LangChain's names)."""


class SemanticRecallRetriever(BaseRetriever):
    """A retriever over the memory: one `Document` per hit, best first.

    Each document's `page_content` is the hit's window as a transcript (the hit
    marked `>`), so a standard RAG `format_docs` shows the answer that follows a
    question; `metadata` keeps the structure: `message_id`, `thread_id`,
    `resource_id`, `role`, `text` (the hit alone), `created_at`, `seq`,
    `score`, `source` (`"memory"`) and `window` (`message_id`, `role`,
    `text`, `created_at` of each message).

    Who is asking follows the engine's rule: `thread_id` / `resource_id` given here
    are explicit ids (they win); otherwise `config["configurable"]`, then the runtime
    context. Resource scope needs only a resource id.

    Example:
        ```python
        retriever = memory.as_retriever(search_kwargs={"k": 2})
        config = {"configurable": {"resource_id": "alice"}}
        docs = retriever.invoke("peanuts", config)          # or: await ainvoke(...)
        docs = retriever.invoke("peanuts", config, k=1)     # per-call number of results
        ```

    Args:
        memory: the `SemanticRecall` engine to search.
        k: documents per query, best first (default: every hit the search returns).
        scope: `"thread"` or `"resource"` (default: the engine's).
        search_kwargs: LangChain's option bundle: `k`, `score_threshold`, `filter`.
            Unknown keys raise.
        thread_id: explicit thread id for every call.
        resource_id: explicit resource id for every call.
        filter: metadata filter of every search (docs/filtering.md), e.g.
            `{"project": "apollo"}`; `search_kwargs["filter"]` says the same.
        since: only messages created at or after this (datetime, or a timedelta back
            from now); `until`: only before it.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    memory: Any
    k: int | None = None
    scope: Scope | None = None
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    thread_id: str | None = None
    resource_id: str | None = None
    filter: dict[str, Any] | None = None
    since: datetime | timedelta | None = None
    until: datetime | timedelta | None = None

    def __init__(self, **data: Any) -> None:
        unknown = set(data) - set(type(self).model_fields)
        if unknown:
            raise InvalidOptionError(
                f"unknown retriever option(s) {sorted(unknown)}: use k, scope, search_kwargs, "
                "thread_id, resource_id, filter, since or until"
            )
        extra = set(data.get("search_kwargs") or {}) - SEARCH_KWARGS
        if extra:
            raise InvalidOptionError(
                f"unknown search_kwargs {sorted(extra)}: this retriever understands "
                f"{sorted(SEARCH_KWARGS)}"
            )
        kwargs = data.get("search_kwargs") or {}
        if data.get("k") is not None and kwargs.get("k") is not None:
            raise InvalidOptionError("give k once: k= or search_kwargs['k']")
        if data.get("k") is not None or kwargs.get("k") is not None:
            check_top_k(data["k"] if data.get("k") is not None else kwargs["k"])
        mode = getattr(data.get("memory"), "search_mode", None)
        if kwargs.get("score_threshold") is not None and isinstance(mode, str):
            check_mode_threshold(mode, kwargs["score_threshold"])
        if data.get("scope") is not None:
            check_scope(data["scope"])
        for key in ("thread_id", "resource_id"):  # as every call takes them: an int is text
            if key in data:
                data[key] = as_id(key, data[key])
        if data.get("filter") is not None and kwargs.get("filter") is not None:
            raise InvalidOptionError("give the filter once: filter= or search_kwargs['filter']")
        given = data.get("filter", kwargs.get("filter"))
        narrowing_option(given, data.get("since"), data.get("until"))
        super().__init__(**data)

    def _options(self, config: RunnableConfig | None, k: object) -> dict[str, Any]:
        """The search options of one call; a bad per-call `k` is refused, never ignored."""
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise InvalidInputError(f"k (documents to return) must be an int >= 1, got {k!r}")
        chosen = next((v for v in (k, self.k, self.search_kwargs.get("k")) if v is not None), None)
        return {
            "config": config,
            "thread_id": self.thread_id,
            "resource_id": self.resource_id,
            "k": chosen,
            "scope": self.scope,
            "threshold": self.search_kwargs.get("score_threshold"),
            "filter": self.filter if self.filter is not None else self.search_kwargs.get("filter"),
            "since": self.since,
            "until": self.until,
        }

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Search the memory (`k` may be given per call).

        Raises:
            InvalidInputError: a per-call `k` that is not an int >= 1; another keyword.
        """
        _refuse_keywords(kwargs)
        kwargs["options"] = self._options(config, kwargs.pop("k", None))
        return super().invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async twin of `invoke`."""
        _refuse_keywords(kwargs)
        kwargs["options"] = self._options(config, kwargs.pop("k", None))
        return await super().ainvoke(input, config, **kwargs)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        options: dict[str, Any] | None = None,
    ) -> list[Document]:
        options = dict(options or self._options(None, None))
        k = _wider(options, self.memory.top_k)
        hits = self.memory.search(query, **options)
        return [hit_to_document(hit) for hit in hits[:k]]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        options: dict[str, Any] | None = None,
    ) -> list[Document]:
        options = dict(options or self._options(None, None))
        k = _wider(options, self.memory.top_k)
        hits = await self.memory.asearch(query, **options)
        return [hit_to_document(hit) for hit in hits[:k]]


_CALL_KEYWORDS = frozenset({"k", "run_id"})
"""What a retriever call takes besides the query and config (`run_id`: LangChain's)."""


def _refuse_keywords(kwargs: Mapping[str, Any]) -> None:
    """A retriever call's other keywords would reach LangChain as a bare `TypeError`."""
    unknown = sorted(set(kwargs) - _CALL_KEYWORDS)
    if unknown:
        raise InvalidInputError(
            f"a retriever call takes only k (documents to return), got {unknown}: give "
            "thread_id, resource_id and scope to as_retriever(...), or the ids in "
            "config['configurable']"
        )


def _tagged(output: Any) -> Any:
    """A tool call's `ToolMessage` tagged `source: memory_search` (other outputs unchanged).

    Indexing stores it with the conversation (the tool call keeps its result); recall and
    search never hand it back, so what memory said is not recalled as if it were said.
    """
    if not isinstance(output, ToolMessage):
        return output
    kwargs = {**output.additional_kwargs, "source": MEMORY_TOOL_SOURCE}
    return output.model_copy(update={"additional_kwargs": kwargs})


def _wider(options: dict[str, Any], top_k: int) -> int | None:
    """Turn the retriever's `k` (documents) into a search at least as wide; returns `k`.

    A hybrid hit is a message with its window, and the engine's `top_k` is its candidate
    pool: asking the search for `k` candidates could return fewer than `k` documents.
    """
    k: int | None = options.pop("k", None)
    options["top_k"] = None if k is None else max(k, top_k)
    return k


class MemorySearchInput(BaseModel):
    """The only argument the model gives: what to look for.

    Anything else the model adds (a `resource_id`, a `thread_id`, options) is refused
    (`Extra inputs are not permitted`, under its name), never dropped: the scope is the
    caller's, and a `ToolNode` shows the model which argument to leave out.
    """

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="What to recall from past conversations, as a full question ("
        '"what is the user\'s job?").'
    )


class MemorySearchTool(BaseTool):
    """Searches the memory of the caller's resource; returns text and documents.

    The model passes only `query`; thread and resource come from the run (config,
    then runtime context, by the engine's rule), so the search stays inside the
    caller's scope whatever the model writes. The tool answers with text for the model
    and the hits as `Document` artifacts. Its `ToolMessage` is tagged
    `source: memory_search`: indexing stores it with the conversation, and recall never
    hands it back, so what memory said is not recalled later as if it had been said.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = DEFAULT_TOOL_NAME
    description: str = DEFAULT_TOOL_DESCRIPTION
    args_schema: type[BaseModel] = MemorySearchInput
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    memory: Any
    narrowing: dict[str, Any] = Field(default_factory=dict)
    """The `filter`, `since` and `until` of every search (`create_memory_search_tool`)."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """`BaseTool.run`; its `ToolMessage` is tagged as the memory tool's answer.

        The tool's own run starts from the config it is given: the signed-in user of the
        run it is called in is carried into it, so that config cannot name another user.
        """
        kwargs["config"] = with_signed_in_user(self.memory.keys, kwargs.get("config"))
        return _tagged(super().run(*args, **kwargs))

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        """Async twin of `run`."""
        kwargs["config"] = with_signed_in_user(self.memory.keys, kwargs.get("config"))
        return _tagged(await super().arun(*args, **kwargs))

    def _run(
        self,
        query: str,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[Document]]:
        hits = self.memory.search(query, config=config, **self.narrowing)
        return format_hits(hits), [hit_to_document(hit) for hit in hits]

    async def _arun(
        self,
        query: str,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, list[Document]]:
        hits = await self.memory.asearch(query, config=config, **self.narrowing)
        return format_hits(hits), [hit_to_document(hit) for hit in hits]


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def create_memory_search_tool(
    memory: SemanticRecall,
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: object = None,
    arg_types: object = None,
    filter: Mapping[str, Any] | None = None,
    since: datetime | timedelta | None = None,
    until: datetime | timedelta | None = None,
) -> BaseTool:
    """A tool an agent calls to search its memory on purpose.

    The model gives only a query; the scope is the caller's (thread and resource from the
    run config), so the model can never read another resource's memory. `filter`,
    `since` and `until` narrow every search (docs/filtering.md); a run's
    `config["configurable"]["recall_filter"]` (and `recall_since`/`recall_until`) too.

    Example:
        ```python
        tool = create_memory_search_tool(memory)
        config = {"configurable": {"thread_id": "chat-2", "resource_id": "alice"}}
        print(tool.invoke({"query": "allergy"}, config))  # or: await tool.ainvoke(...)
        ```

    Args:
        memory: the engine to search.
        name: tool name (default `"search_memory"`).
        description: what the model is told about the tool.
        args_schema: must be None (`Runnable.as_tool`'s; the tool's arguments are fixed).
        arg_types: must be None, likewise.
        filter: metadata filter of every search.
        since: only messages created at or after this (a timedelta: back from now).
        until: only messages created before this.

    Raises:
        InvalidOptionError: `args_schema` or `arg_types` was given; a name chat models
            refuse, a blank description; a bad filter or time bound.
    """
    if args_schema is not None or arg_types is not None:
        raise InvalidOptionError("the memory tool's arguments are fixed: pass name/description")
    if name is not None and (not isinstance(name, str) or not _TOOL_NAME.fullmatch(name)):
        raise InvalidOptionError(
            "the tool's name must be 1-64 letters, digits, '_' or '-' (what chat models "
            f"accept), or None for {DEFAULT_TOOL_NAME!r}; got {name!r}"
        )
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise InvalidOptionError(
            f"the tool's description must be text, or None for the default; got {description!r}"
        )
    narrowing_option(filter, since, until)
    given = {"filter": filter, "since": since, "until": until}
    return MemorySearchTool(
        memory=memory,
        name=name or DEFAULT_TOOL_NAME,
        description=description or DEFAULT_TOOL_DESCRIPTION,
        narrowing={key: value for key, value in given.items() if value is not None},
    )


__all__ = [
    "MemorySearchInput",
    "MemorySearchTool",
    "SemanticRecallRetriever",
    "create_memory_search_tool",
    "format_hits",
    "hit_to_document",
    "transcript",
]
