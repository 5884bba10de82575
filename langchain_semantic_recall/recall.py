"""SemanticRecall: the engine's one door, a LangChain runnable with the classic memory contract.

Every public method resolves who is asking (`engine.identity`), builds one operation
(`engine.core`) and performs it with the sync or async driver (`engine.steps`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta
from os import PathLike
from typing import TYPE_CHECKING, Any, NoReturn, Unpack

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig

from langchain_semantic_recall import maintenance, memory_contract, visible
from langchain_semantic_recall import options as defaults
from langchain_semantic_recall.embeddings import EmbeddingCache
from langchain_semantic_recall.engine import lifecycle
from langchain_semantic_recall.engine.bulk_ops import BulkResult, Conversation
from langchain_semantic_recall.engine.call_options import (
    BulkOptions,
    IndexOptions,
    Narrowed,
    NarrowingOptions,
    SearchOptions,
)
from langchain_semantic_recall.engine.core import (
    EngineCore,
    EnginePlan,
    Option,
    Part,
    build_plan,
)
from langchain_semantic_recall.engine.identity import IdentityKeys
from langchain_semantic_recall.engine.maintenance_ops import RecallStats
from langchain_semantic_recall.engine.steps import Backends
from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.options import Budget, MessageRangeLike, Scope, SearchMode
from langchain_semantic_recall.records import IndexResult, RecallHit
from langchain_semantic_recall.search import SearchPlan, warn_if_unfitted
from langchain_semantic_recall.settings import as_vector_index, local_backends, url_backends
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex

if TYPE_CHECKING:
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool
    from pydantic import BaseModel

    from langchain_semantic_recall.chat_history import SemanticRecallChatHistory


class SemanticRecall(Runnable[Any, list[BaseMessage]]):
    """Semantic recall over a conversation history.

    Setup (the embedded default: SQLite, embedded Chroma, a local model):

    ```python
    memory = SemanticRecall.local("./memory")  # close(), or `with`, releases what it built
    ```

    Sync, async (every method has an `a` twin), as a runnable and in LangGraph:

    ```python
    memory.index(turn_messages, thread_id="t1", resource_id="alice")
    hits = await memory.asearch("peanut allergy", resource_id="alice")
    config = {"configurable": {"thread_id": "t2", "resource_id": "alice"}}
    messages = memory.invoke(messages, config)
    graph = create_recall_graph(model, memory, checkpointer=InMemorySaver())
    ```

    Who is asking, on every surface: explicit arguments, then `config["configurable"]`,
    then the LangGraph runtime context; on a LangGraph server the signed-in user is the
    resource (`engine.identity`). `with_options` returns an engine with options changed.

    Args:
        storage: message storage (`SQLiteStorage`, `PostgresStorage`, ...).
        vector_store: a `VectorIndex` (`ChromaVectorIndex.persistent(path)`) or a
            LangChain `VectorStore` with metadata filters.
        embeddings: any LangChain `Embeddings`.
        top_k: candidates scored with their windows (hybrid: 20), or hits (keyword 12, dense 4).
        message_range: neighbours around each hit: `n`, `(before, after)`, a mapping
            or a `MessageRange` (hybrid: 2 before, 3 after; keyword: 0 and 2; dense: 1 and 1).
        scope: `"resource"` (every conversation of the resource) or `"thread"`.
        threshold: minimum score in [0, 1] (hybrid: probability of relevance, none by
            default; dense: cosine; keyword: refused).
        search_mode: `"hybrid"`, `"dense"` (the original), `"keyword"` or `"auto"`.
        message_budget: most messages recalled per turn (`"auto"`: 15; None in dense mode).
        time_boost: time-aware ranking for queries naming a period (0.5; 0 is off;
            hybrid mode only turns it on or off, see `options.DEFAULT_TIME_BOOST`).
        horizon: recall sees only messages this recent (`timedelta`; None: all).
        index_name: vector index name (default: from the embedding model and dimension).
        logger: logger for warnings (default `langchain_semantic_recall`).
        read_only: search and recall only: `index` stores nothing (each message's fate
            says so); imports, reindex, forgets and purge raise `ReadOnlyError`.
        retention: age past which `apply_retention()` forgets messages (docs/retention.md).
        max_block_chars: bound on all the text one recall injects (16,000; None: none).
        max_index_chars: characters of a message embedded, the rest stored only (16,000).
        cache: an `EmbeddingCache` to share (default: a new one of `cache_size`).
        cache_size: entries of the default embedding cache.
        thread_key: config and context key of the thread id (`session_id` is read next).
        resource_key: config and context key of the resource id.
        auth_user_key: config key of a LangGraph server's signed-in user, bound as resource.
        memory_key: variable name for the classic memory contract.
        input_key: input variable holding the user's text (classic memory contract).
        output_key: output variable holding the answer (classic memory contract).
    """

    _core: EngineCore
    _options: dict[str, Any]

    def __init__(
        self,
        *,
        storage: MessageStorage,
        vector_store: VectorIndex | Any,
        embeddings: Embeddings,
        top_k: int | None = None,
        message_range: MessageRangeLike | None = None,
        scope: Scope = defaults.DEFAULT_SCOPE,
        threshold: float | None = None,
        search_mode: SearchMode = defaults.DEFAULT_SEARCH_MODE,
        message_budget: Budget = "auto",
        time_boost: float = defaults.DEFAULT_TIME_BOOST,
        horizon: timedelta | None = None,
        index_name: str | None = None,
        logger: logging.Logger | None = None,
        read_only: bool = False,
        retention: timedelta | None = None,
        max_block_chars: int | None = defaults.DEFAULT_MAX_BLOCK_CHARS,
        max_index_chars: int | None = defaults.DEFAULT_MAX_INDEX_CHARS,
        cache: EmbeddingCache | None = None,
        cache_size: int = defaults.DEFAULT_CACHE_SIZE,
        thread_key: str = "thread_id",
        resource_key: str = "resource_id",
        auth_user_key: str | None = "langgraph_auth_user_id",
        memory_key: str = "history",
        input_key: str | None = None,
        output_key: str | None = None,
    ) -> None:
        options = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if not isinstance(storage, MessageStorage):
            raise InvalidOptionError(
                f"storage must be a MessageStorage (e.g. SQLiteStorage), got {storage!r}"
            )
        plan = build_plan(options, storage)
        warn_if_unfitted(plan.search, embeddings, plan.logger)
        cache = cache if cache is not None else EmbeddingCache(cache_size)
        space = VectorSpace(embeddings, as_vector_index(vector_store), cache, index_name)
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_core", EngineCore(plan, Backends(storage, space)))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(
            f"SemanticRecall options are read-only after construction (setting {name!r}); "
            f"use memory.with_options({name}=...) for an engine with it changed"
        )

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def local(cls, path: str | PathLike[str], **options: Any) -> SemanticRecall:
        """The embedded default under `path`: `messages.sqlite3`, `chroma/`, the local model.

        `chroma_workarounds`, `read_only` (False: a store this user cannot write raises
        `StorageError`; None: read-only if it cannot be written): `settings.local_backends`.

        Args:
            path: The store's folder (created if missing; `~` is the home folder).
            **options: The constructor's options, plus `embeddings`, `read_only` and
                `chroma_workarounds`.
        """
        defaults.check_option_names(options, defaults.LOCAL_OPTIONS, "SemanticRecall.local")
        embeddings, read_only = options.pop("embeddings", None), options.get("read_only", False)
        fixes = options.pop("chroma_workarounds", True)
        backends = local_backends(path, embeddings, read_only=read_only, chroma_workarounds=fixes)
        options["read_only"] = backends["storage"].read_only  # None: found read-only or not
        return lifecycle.owning(cls, backends, options, embeddings_given=embeddings is not None)

    @classmethod
    def from_url(
        cls, *, storage: str, vector: str, embeddings: Embeddings | None = None, **options: Any
    ) -> SemanticRecall:
        """From URLs: `sqlite:///...` or `postgresql://...`; `chroma:///...` or `http://host:port`.

        Args:
            storage: `sqlite:///path` or `postgresql://...`.
            vector: `chroma:///path` (embedded) or `http://host:port` (a Chroma server).
            embeddings: The embedder (default: the local model).
            **options: The constructor's options (`top_k`, `scope`, `retention`...).
        """
        defaults.check_option_names(options, defaults.URL_OPTIONS, "SemanticRecall.from_url")
        backends = url_backends(storage, vector, embeddings)
        return lifecycle.owning(cls, backends, options, embeddings_given=embeddings is not None)

    close, aclose = lifecycle.close, lifecycle.aclose  # what local() / from_url() built
    __enter__, __exit__ = lifecycle.enter, lifecycle.exit_
    __aenter__, __aexit__ = lifecycle.aenter, lifecycle.aexit

    def with_options(self, **changes: Any) -> SemanticRecall:
        """An engine on the same backends and caches, some options changed (a view keeps its ids).

        ```python
        precise = memory.with_options(top_k=1, scope="thread")
        ```

        Args:
            **changes: Constructor options to change (`top_k`, `scope`, `threshold`...).
        """
        defaults.check_changes(changes, self.storage)
        options = {**self._options, **changes, "cache": self.cache}
        options["cache_size"] = defaults.DEFAULT_CACHE_SIZE  # the shared cache has its size
        options["vector_store"] = self.vector_store
        changed = type(self)(**options)
        object.__setattr__(changed, "_core", changed._core.view_of(self._core))
        return changed

    def for_thread(self, thread_id: str, resource_id: str | None = None) -> SemanticRecall:
        """A view bound to one conversation, its ids every call's (classic memory contract).

        Args:
            thread_id: The conversation the view reads and writes.
            resource_id: Its owner (needed in resource scope); calls naming another fail.
        """
        bound = self._core.identity({"thread_id": thread_id, "resource_id": resource_id})
        bound.require_thread(self.keys, "for_thread")
        view = copy.copy(self)
        object.__setattr__(view, "_core", dataclasses.replace(self._core, bound=bound))
        return view

    # --- read-only views of the options -----------------------------------------------------

    storage = Part[MessageStorage](lambda core: core.backends.storage)
    vector_store = Part[VectorIndex](lambda core: core.backends.space.vectors)
    embeddings = Part[Embeddings](lambda core: core.backends.space.embeddings)
    cache = Part[EmbeddingCache](lambda core: core.backends.space.cache)
    index_name = Part["str | None"](lambda core: core.backends.space.index_name)
    closed = Part[bool](lambda core: core.life.closed)  # by close(), aclose() or `with`
    core = Part[EngineCore](lambda core: core)
    """The engine's state and operations (for surfaces built on the engine)."""
    search_plan = Option[SearchPlan](lambda plan: plan.search)
    top_k = Option[int](lambda plan: plan.search.top_k)
    message_range = Option[defaults.MessageRange](lambda plan: plan.search.message_range)
    message_budget = Option["int | None"](lambda plan: plan.search.message_budget)
    time_boost = Option[float](lambda plan: plan.search.time_boost)
    threshold = Option["float | None"](lambda plan: plan.search.threshold)
    search_mode = Option[str](lambda plan: plan.search.mode)
    scope = Option[Scope](lambda plan: plan.scope)
    read_only = Option[bool](lambda plan: plan.read_only)
    retention = Option["timedelta | None"](lambda plan: plan.retention)
    max_block_chars = Option["int | None"](lambda plan: plan.max_block_chars)
    max_index_chars = Option["int | None"](lambda plan: plan.max_index_chars)
    logger = Option[logging.Logger](lambda plan: plan.logger)
    keys = Option[IdentityKeys](lambda plan: plan.keys)
    thread_key = Option[str](lambda plan: plan.keys.thread)
    resource_key = Option[str](lambda plan: plan.keys.resource)
    memory_key = Option[str](lambda plan: plan.memory_key)
    input_key = Option["str | None"](lambda plan: plan.input_key)
    output_key = Option["str | None"](lambda plan: plan.output_key)

    # --- search and recall ----------------------------------------------------------------

    def search(self, query: str, **options: Unpack[SearchOptions]) -> list[RecallHit]:
        """The hits recall would use for `query`: score, message, context window.

        Resource scope needs only a resource id; thread scope a thread id. `top_k`,
        `scope` and `threshold` override the engine's for this call; `filter`, `since`
        and `until` narrow it (docs/filtering.md). A blank query finds nothing (`[]`,
        once the ids and the thread's owner are checked). Failures raise.

        Args:
            query: The text to search for.
            **options: who is asking (`thread_id`, `resource_id`, `config`), `top_k`, `scope`,
                `threshold`, `filter`, `since`, `until`.

        Raises:
            MissingIdentityError: the scope's id was given by no source.
        """
        return self._core.run(self._core.search(query, options))

    async def asearch(self, query: str, **options: Unpack[SearchOptions]) -> list[RecallHit]:
        """Async twin of `search`."""
        return await self._core.arun(self._core.search(query, options))

    def recall(
        self, messages: Sequence[BaseMessage] | Any, **options: Unpack[Narrowed]
    ) -> list[BaseMessage]:
        """The input with recalled messages injected, each tagged `source: memory`.

        Traced as the `semantic_recall` child run (outputs: what was injected). No human
        text or no hit: the input unchanged. A failure of the embedder, vector index or
        storage is logged and recalls nothing; configuration errors (missing ids,
        dimension mismatch, a bad `filter`/`since`/`until`) are raised, and so is
        `OwnershipError` in a thread another resource owns (its turn could not be stored),
        with or without human text.

        Args:
            messages: The conversation so far; its newest human message is the query.
            **options: `thread_id`, `resource_id`, `config` (who is asking), `filter`, `since`,
                `until` (docs/filtering.md).
        """
        return visible.recall_messages(self._core, messages, options)

    async def arecall(
        self, messages: Sequence[BaseMessage] | Any, **options: Unpack[Narrowed]
    ) -> list[BaseMessage]:
        """Async twin of `recall`."""
        return await visible.arecall_messages(self._core, messages, options)

    # --- index ------------------------------------------------------------------------------

    def index(
        self, messages: Sequence[BaseMessage] | Any, **options: Unpack[IndexOptions]
    ) -> IndexResult:
        """Persist a turn's messages and embed their user and assistant text.

        Every input message gets a fate in `result.fates`: stored, updated, unchanged
        (stored before as given: not written, nor embedded unless its vectors are gone) or
        skipped with a reason (recalled memory, a read-only engine, a forgotten thread:
        `result.forgotten`); each fate's `truncated_chars` counts its text past
        `max_index_chars`. A message without an id is new. Dates to import go in
        `additional_kwargs["created_at"]`; metadata in `metadata=` or
        `additional_kwargs["metadata"]` (docs/filtering.md). Embedding failures are
        logged (`result.error`); the messages stay stored, `reindex(missing_only=True)`.

        Args:
            messages: The turn's messages (or one message, or a string).
            **options: `thread_id`, `resource_id`, `config` (who is asking) and `metadata` (kept
                on every message of the call).

        Raises:
            MissingIdentityError: no thread id; or no resource id in resource scope.
            OwnershipError: the thread (or a message id) belongs to another owner.
            StorageError: the storage could not be written (nothing was stored).
        """
        return self._core.run(self._core.index_call(messages, options))

    async def aindex(
        self, messages: Sequence[BaseMessage] | Any, **options: Unpack[IndexOptions]
    ) -> IndexResult:
        """Async twin of `index`."""
        return await self._core.arun(self._core.index_call(messages, options))

    def bulk_index(
        self, conversations: Iterable[Conversation], **options: Unpack[BulkOptions]
    ) -> BulkResult:
        """Store and embed many `(thread_id, resource_id, messages)` conversations.

        Vector writes of one batch overlap the embedding of the next. Importing the same
        conversations again adds and embeds nothing (only a message whose vectors are gone
        is embedded again). Raises `ReadOnlyError` on a read-only engine.

        Args:
            conversations: `(thread_id, resource_id, messages)` triples.
            **options: `batch_size` and `progress` (see `BulkOptions`).
        """
        return self._core.run(self._core.bulk_index(conversations, options))

    async def abulk_index(
        self, conversations: Iterable[Conversation], **options: Unpack[BulkOptions]
    ) -> BulkResult:
        """Async twin of `bulk_index`."""
        return await self._core.arun(self._core.bulk_index(conversations, options))

    # --- forgetting and maintenance (written in `maintenance`, bound here) ------------------

    forget_thread, aforget_thread = maintenance.forget_thread, maintenance.aforget_thread
    clear_thread, aclear_thread = maintenance.clear_thread, maintenance.aclear_thread
    forget_resource, aforget_resource = maintenance.forget_resource, maintenance.aforget_resource
    forget_before, aforget_before = maintenance.forget_before, maintenance.aforget_before
    apply_retention, aapply_retention = maintenance.apply_retention, maintenance.aapply_retention
    move_thread, amove_thread = maintenance.move_thread, maintenance.amove_thread
    restore_thread, arestore_thread = maintenance.restore_thread, maintenance.arestore_thread
    reindex, areindex = maintenance.reindex, maintenance.areindex
    purge, apurge = maintenance.purge, maintenance.apurge
    stats, astats = maintenance.stats, maintenance.astats
    ensure_index, aensure_index = maintenance.ensure_index, maintenance.aensure_index

    # --- the classic memory contract (on a for_thread view) ----------------------------------

    @property
    def memory_variables(self) -> list[str]:
        """The variables `load_memory_variables` returns."""
        return [self.memory_key]

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """`{memory_key: [recalled messages]}` for the user's text in `inputs`.

        Args:
            inputs: The chain's inputs; `input_key` (or the only key) is the query.
        """
        return memory_contract.recalled_only(self, self.recall(memory_contract.query(self, inputs)))

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Async twin of `load_memory_variables`."""
        recalled = await self.arecall(memory_contract.query(self, inputs))
        return memory_contract.recalled_only(self, recalled)

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Store and embed one exchange (each call is a new turn).

        Args:
            inputs: The chain's inputs (the user's message).
            outputs: The chain's outputs (the assistant's message).
        """
        memory_contract.check_saved(self.index(memory_contract.turn(self, inputs, outputs)))

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Async twin of `save_context`."""
        memory_contract.check_saved(await self.aindex(memory_contract.turn(self, inputs, outputs)))

    def clear(self) -> None:
        """Empty the bound conversation (messages and vectors); memory keeps working."""
        self.clear_thread(memory_contract.bound_thread(self))

    async def aclear(self) -> None:
        """Async twin of `clear`."""
        await self.aclear_thread(memory_contract.bound_thread(self))

    # --- other surfaces ---------------------------------------------------------------------

    def as_retriever(self, **kwargs: Any) -> BaseRetriever:
        """A LangChain retriever over this memory (`k`, `scope`, `search_kwargs`).

        Args:
            **kwargs: `SemanticRecallRetriever` fields: `k`, `scope`, `thread_id`, `resource_id`,
                `filter`, `since`, `until`, `search_kwargs`.
        """
        from langchain_semantic_recall.retriever import SemanticRecallRetriever

        return SemanticRecallRetriever(memory=self, **kwargs)

    def as_tool(
        self,
        args_schema: type[BaseModel] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        arg_types: dict[str, type] | None = None,
        **narrowing: Unpack[NarrowingOptions],
    ) -> BaseTool:
        """A tool an agent calls to search its memory on purpose, scoped to its caller.

        Args:
            args_schema: Must be None: the tool's arguments are fixed (a query).
            name: The tool's name (default `search_memory`).
            description: What the model reads about the tool.
            arg_types: Must be None, likewise.
            **narrowing: `filter`, `since`, `until` of every search (docs/filtering.md).
        """
        from langchain_semantic_recall.retriever import create_memory_search_tool

        return create_memory_search_tool(
            self,
            name=name,
            description=description,
            args_schema=args_schema,
            arg_types=arg_types,
            **narrowing,
        )

    def chat_history(
        self, session_id: str, *, resource_id: str | None = None, last: int | None = None
    ) -> SemanticRecallChatHistory:
        """A `BaseChatMessageHistory` of one conversation (for `RunnableWithMessageHistory`).

        Args:
            session_id: The thread the history reads and writes.
            resource_id: Its owner (else the run config's, or the signed-in user).
            last: Only the newest `last` messages (None: every one).
        """
        from langchain_semantic_recall.chat_history import SemanticRecallChatHistory

        return SemanticRecallChatHistory(self, session_id, resource_id=resource_id, last=last)

    # --- Runnable ---------------------------------------------------------------------------

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Recall on `input`; ids, filter and range from `config` (or the runtime context)."""
        run = visible.runner(self._core, config, kwargs)
        return self._call_with_config(run, input, config, run_type="retriever")

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Async twin of `invoke`."""
        run = visible.arunner(self._core, config, kwargs)
        return await self._acall_with_config(run, input, config, run_type="retriever")


__all__ = ["EnginePlan", "IndexInfo", "RecallStats", "SemanticRecall"]
