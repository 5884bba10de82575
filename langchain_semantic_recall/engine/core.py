"""The engine's state and its operations, behind the `SemanticRecall` facade.

`EngineCore` owns the resolved options (`EnginePlan`), the backends (the
storage and the `VectorSpace`) and, for a `for_thread` view, the bound ids. Its
methods build operations (generators of steps) that `EngineCore.run` and
`EngineCore.arun` perform; the facade's `x` / `ax` pairs call one or the other.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine.bulk_ops import (
    BulkResult,
    Conversation,
    as_conversations,
    bulk_index_op,
)
from langchain_semantic_recall.engine.call_options import (
    CALL_ID_KEYS,
    BulkOptions,
    CallIds,
    IndexOptions,
    Narrowed,
    ReindexOptions,
    SearchOptions,
    checked,
    split_narrowing,
)
from langchain_semantic_recall.engine.forget_ops import forget_resource_op, forget_thread_op
from langchain_semantic_recall.engine.identity import (
    Identity,
    IdentityKeys,
    held_to,
    resolve_identity,
)
from langchain_semantic_recall.engine.index_ops import index_op
from langchain_semantic_recall.engine.lifecycle import Lifecycle
from langchain_semantic_recall.engine.maintenance_ops import (
    RecallStats,
    check_batch,
    maintenance_scope,
    move_thread_op,
    reindex_op,
    restore_thread_op,
    stats_op,
)
from langchain_semantic_recall.engine.narrowing import Narrowing
from langchain_semantic_recall.engine.purge_ops import purge_op
from langchain_semantic_recall.engine.retention_ops import (
    RetentionResult,
    check_cutoff,
    check_retention,
    forget_before_op,
    retention_cutoff,
)
from langchain_semantic_recall.engine.search_ops import (
    SearchRequest,
    recall_op,
    search_op,
    turn_recall_op,
)
from langchain_semantic_recall.engine.steps import Backends, Op, adrive, drive
from langchain_semantic_recall.errors import (
    InvalidInputError,
    InvalidOptionError,
    OwnershipError,
    ReadOnlyError,
)
from langchain_semantic_recall.filters import check_horizon, check_metadata
from langchain_semantic_recall.formatting import MIN_MAX_CHARS
from langchain_semantic_recall.messages import to_messages
from langchain_semantic_recall.options import (
    DEFAULT_CACHE_SIZE,
    Scope,
    check_positive,
    check_scope,
    check_top_k,
)
from langchain_semantic_recall.recall_report import RecallReport
from langchain_semantic_recall.records import IndexResult, PurgeResult, RecallHit
from langchain_semantic_recall.search import SearchPlan, check_mode_threshold, resolve
from langchain_semantic_recall.storable import id_text
from langchain_semantic_recall.storage.base import MessageStorage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """The engine's options, validated and resolved once (read-only)."""

    search: SearchPlan
    scope: Scope
    read_only: bool
    max_block_chars: int | None
    """Bound on all the text one recall injects (None: no bound)."""
    max_index_chars: int | None
    """Characters of one message that are embedded (None: all of them)."""
    keys: IdentityKeys
    memory_key: str
    input_key: str | None
    output_key: str | None
    logger: logging.Logger
    retention: timedelta | None = None
    """Age past which `apply_retention` forgets a message (None: no policy)."""
    horizon: timedelta | None = None
    """Default recall horizon: recall sees only messages this recent (None: all)."""


def build_plan(options: Mapping[str, Any], storage: MessageStorage) -> EnginePlan:
    """Validate the constructor's options and resolve the mode's defaults.

    A storage opened read-only makes the engine read-only, whatever `read_only` says:
    `index` then reports each message's fate instead of failing at the first write.

    Raises:
        InvalidOptionError: an option out of range or of the wrong type.
    """
    block = check_positive("max_block_chars", options["max_block_chars"], allow_none=True)
    if block is not None and block < MIN_MAX_CHARS:
        raise InvalidOptionError(
            f"max_block_chars must be at least {MIN_MAX_CHARS} (room for the block's "
            f"frame and one message), got {block}"
        )
    max_index = check_positive("max_index_chars", options["max_index_chars"], allow_none=True)
    if options["cache"] is not None and options["cache_size"] != DEFAULT_CACHE_SIZE:
        raise InvalidOptionError(
            f"cache_size={options['cache_size']!r} sizes the engine's own cache, but cache= "
            "gives one (its size is its own): drop cache_size, or build that cache with the size"
        )
    memory_key = options["memory_key"]
    if not isinstance(memory_key, str) or not memory_key:
        raise InvalidOptionError(f"memory_key must be a non-empty string, got {memory_key!r}")
    for name in ("input_key", "output_key"):
        if options[name] is not None and (not isinstance(options[name], str) or not options[name]):
            raise InvalidOptionError(
                f"{name} must be a non-empty string or None, got {options[name]!r}"
            )
    if not isinstance(options["read_only"], bool | None):  # "no" would read as True
        raise InvalidOptionError(f"read_only must be True or False, got {options['read_only']!r}")
    logger = options["logger"]
    if logger is not None and not callable(getattr(logger, "warning", None)):
        raise InvalidOptionError(f"logger must be a logging.Logger or None, got {logger!r}")
    search = resolve(
        keyword_search=storage.supports_keyword_search,
        **{
            key: options[key]
            for key in (
                "search_mode",
                "top_k",
                "message_range",
                "message_budget",
                "threshold",
                "time_boost",
            )
        },
    )
    keys = IdentityKeys(
        thread=options["thread_key"],
        resource=options["resource_key"],
        auth_user=options["auth_user_key"],
    )
    return EnginePlan(
        search=search,
        scope=check_scope(options["scope"]),
        read_only=bool(options["read_only"]) or getattr(storage, "read_only", False) is True,
        max_block_chars=block,
        max_index_chars=max_index,
        keys=keys,
        memory_key=memory_key,
        input_key=options["input_key"],
        output_key=options["output_key"],
        logger=logger or logging.getLogger("langchain_semantic_recall"),
        retention=check_retention(options.get("retention")),
        horizon=check_horizon(options.get("horizon")),
    )


@dataclass(frozen=True, slots=True)
class EngineCore:
    """Options, backends and bound ids; builds the operations and runs them."""

    plan: EnginePlan
    backends: Backends
    bound: Identity = field(default_factory=Identity)
    life: Lifecycle = field(default_factory=Lifecycle)
    """What the engine owns, and whether it was closed (shared with its views)."""

    def run(self, op: Op[T]) -> T:
        """Perform an operation with the backends' synchronous methods.

        Raises:
            EngineClosedError: the engine was closed.
        """
        with self.life.call(), self.backends.space.vectors.writes_held():
            return drive(op, self.backends)

    async def arun(self, op: Op[T]) -> T:
        """Perform an operation with the backends' async twins.

        Raises:
            EngineClosedError: the engine was closed.
        """
        async with self.life.acall():
            with self.backends.space.vectors.writes_held():  # (see `vectors.write_behind`)
                return await adrive(op, self.backends)

    def identity(self, ids: CallIds | Mapping[str, Any], context: Any = None) -> Identity:
        """Who is asking: the call's ids, then the bound view's, the config, the context."""
        checked(ids, CallIds)  # a misspelt id (thread="t") is an error, never ignored
        self.bound.check_config(self.plan.keys, ids.get("config"))
        thread_id = ids.get("thread_id")
        return resolve_identity(
            self.plan.keys,
            thread_id=thread_id if thread_id is not None else self.bound.thread_id,
            resource_id=self.bound.resource_for(ids.get("resource_id")),
            config=ids.get("config"),
            context=context,
        )

    def view_of(self, other: EngineCore) -> EngineCore:
        """This core with `other`'s bound ids, lifecycle and term cache (`with_options`)."""
        self.backends.space.texts = other.backends.space.texts  # a forget empties both
        return dataclasses.replace(self, bound=other.bound, life=other.life)

    def owner(self, resource_id: object = None) -> str | None:
        """The resource a maintenance call acts for (None: no source gave one).

        The one identity rule, for the resource only: the call's `resource_id`, then a
        `for_thread` view's, then the run's config and context; a signed-in user (on an
        authenticated LangGraph server) or a view's resource refuses another. A call's
        thread never comes from the run: maintenance names it explicitly.

        Raises:
            IdentityMismatchError: `resource_id` differs from the authenticated user or
                from the view's resource.
        """
        if resource_id is not None:  # 7 and "7" name one resource, as writes take them
            resource_id = id_text("resource_id", resource_id)
        resolved = self.bound.resource_for(resource_id)
        return resolve_identity(self.plan.keys, resource_id=resolved).resource_id

    def _held(self) -> Identity | None:
        """Who a call is held to, if anyone: the signed-in user, or the view's resource."""
        who = resolve_identity(self.plan.keys, resource_id=self.bound.resource_id)
        return who if who.authenticated or self.bound.resource_id is not None else None

    def _writable(self, what: str) -> None:
        if self.plan.read_only:
            raise ReadOnlyError(
                f"{what} writes, and this engine is read-only (read_only=True, or a store "
                "this process cannot write, which local(read_only=None) opens read-only)"
            )

    # --- operations ---------------------------------------------------------------------------

    def request(
        self,
        query: str,
        who: Identity,
        *,
        top_k: int | None = None,
        scope: Scope | None = None,
        threshold: float | None = None,
        narrowing: Narrowing | None = None,
    ) -> SearchRequest:
        """A search request with this call's overrides of the engine's options."""
        plan = self.plan.search
        if top_k is not None:
            plan = dataclasses.replace(plan, top_k=check_top_k(top_k))
        if threshold is not None:  # refused in keyword mode, as at construction
            plan = dataclasses.replace(plan, threshold=check_mode_threshold(plan.mode, threshold))
        scope = self.plan.scope if scope is None else check_scope(scope)
        limits = narrowing or Narrowing()
        block, cap = self.plan.max_block_chars, self.plan.max_index_chars
        return SearchRequest(query, who, scope, plan, block, limits, max_query_chars=cap)

    def search(self, query: str, options: SearchOptions) -> Op[list[RecallHit]]:
        """The search operation: `options` checked, identity resolved, request built."""
        checked(options, SearchOptions)
        _, narrowing = split_narrowing(options)
        who = self.identity({k: v for k, v in options.items() if k in CALL_ID_KEYS})
        request = self.request(
            query,
            who,
            top_k=options.get("top_k"),
            scope=options.get("scope"),
            threshold=options.get("threshold"),
            narrowing=narrowing,
        )
        return search_op(self.backends.space, self.plan.keys, request)

    def recall(
        self, messages: Any, who: Identity, *, turn: bool, narrowing: Narrowing | None = None
    ) -> Op[tuple[list[BaseMessage], RecallReport]]:
        """The recall operation for `messages` (`turn`: once per user turn), and its report.

        `narrowing` (the call's within the run's) falls back on the engine's `horizon`.
        """
        op = turn_recall_op if turn else recall_op
        items = to_messages(messages)
        limits = (narrowing or Narrowing()).over(Narrowing(horizon=self.plan.horizon))
        request = self.request("", who, narrowing=limits)
        return op(self.backends.space, self.plan.keys, items, request, self.plan.logger)

    def recall_request(self, options: Narrowed) -> tuple[Identity, Narrowing]:
        """Who a public recall call is for, and its filter and range (`Narrowed`), checked."""
        checked(options, Narrowed)
        ids, narrowing = split_narrowing(options)
        return self.identity(ids), narrowing

    def index_call(self, messages: Any, options: IndexOptions) -> Op[IndexResult]:
        """`index` for a public call: its ids and metadata checked."""
        checked(options, IndexOptions)
        ids = {k: v for k, v in options.items() if k != "metadata"}
        return self.index(messages, self.identity(ids), options.get("metadata"))

    def index(
        self, messages: Any, who: Identity, metadata: Mapping[str, Any] | None = None
    ) -> Op[IndexResult]:
        """The index operation: store the new messages, embed their text."""
        return index_op(
            self.backends.space,
            self.plan.keys,
            messages,
            who,
            scope=self.plan.scope,
            read_only=self.plan.read_only,
            max_chars=self.plan.max_index_chars,
            logger=self.plan.logger,
            metadata=check_metadata(metadata, "index(metadata=...)"),
        )

    def bulk_index(
        self, conversations: Iterable[Conversation], options: BulkOptions
    ) -> Op[BulkResult]:
        """The bulk import operation (refused on a read-only engine)."""
        self._writable("bulk_index")
        checked(options, BulkOptions)
        progress = options.get("progress")
        size = check_batch(options.get("batch_size", 2048), progress)
        triples: Iterable[Conversation] = as_conversations(conversations)
        if (who := self._held()) is not None:  # only into its own memory
            triples = held_to(triples, who)
        return bulk_index_op(
            self.backends.space,
            triples,
            batch_size=size,
            progress=progress,
            max_chars=self.plan.max_index_chars,
            logger=self.plan.logger,
        )

    def forget_thread(self, thread_id: str, resource_id: str | None, *, retire: bool) -> Op[int]:
        """Delete a thread of the call's owner (`owner`); `retire` also refuses later writes."""
        self._writable("forgetting" if retire else "clearing")
        owner = self.owner(resource_id)
        return forget_thread_op(
            self.backends.space,
            thread_id,
            owner,
            retire=retire,
            max_chars=self.plan.max_index_chars,
            logger=self.plan.logger,
        )

    def forget_resource(self, resource_id: str) -> Op[int]:
        """Delete every thread of a resource, and retire their ids (refused for another user)."""
        self._writable("forgetting")
        self.owner(resource_id)  # an authenticated user forgets only themselves
        return forget_resource_op(
            self.backends.space,
            resource_id,
            max_chars=self.plan.max_index_chars,
            logger=self.plan.logger,
        )

    def move_thread(self, thread_id: str, resource_id: str | None, to_resource: str) -> Op[int]:
        """Give a thread of the call's owner (`owner`) to another resource (refused read-only).

        Both ends follow the identity rule: on an authenticated LangGraph server a
        signed-in user neither takes another resource's thread nor gives one away.

        Raises:
            IdentityMismatchError: `to_resource` differs from the authenticated user.
        """
        self._writable("moving a thread")
        owner = self.owner(resource_id)
        to_resource = id_text("to_resource", to_resource)
        self.owner(to_resource)  # a signed-in user gives to no other
        plan = self.plan
        return move_thread_op(
            self.backends.space,
            thread_id,
            owner,
            to_resource,
            max_chars=plan.max_index_chars,
            logger=plan.logger,
        )

    def restore_thread(self, thread_id: str) -> Op[bool]:
        """Let a forgotten thread id be written again (refused read-only, or signed in).

        A retired id keeps no owner the engine can check, so a signed-in user could
        revive another user's forgotten conversation: on an authenticated server it is
        refused; restore from an administrator's process (`ingest --restore`).
        """
        self._writable("restoring a thread")
        if (who := self._held()) is not None:
            raise OwnershipError(
                f"restore_thread({thread_id!r}) is refused for {who.resource_id!r} (a run "
                "signed in, or a for_thread view): a forgotten thread keeps no owner to "
                "check, so only an administrator's process (the engine itself, outside a "
                "signed-in run) may restore one"
            )
        return restore_thread_op(thread_id)

    def reindex(self, options: ReindexOptions) -> Op[int]:
        """Embed the stored messages in scope again (or only missing ones)."""
        self._writable("reindex")
        checked(options, ReindexOptions)
        progress = options.get("progress")
        missing_only = options.get("missing_only", False)
        if not isinstance(missing_only, bool):  # "no" would read as True: a repair only
            raise InvalidInputError(f"missing_only must be True or False, got {missing_only!r}")
        scope = maintenance_scope(self.owner(options.get("resource_id")), options.get("thread_id"))
        return reindex_op(
            self.backends.space,
            scope=scope,
            missing_only=missing_only,
            batch_size=check_batch(options.get("batch_size", 256), progress),
            progress=progress,
            max_chars=self.plan.max_index_chars,
            logger=self.plan.logger,
        )

    def purge(self) -> Op[PurgeResult]:
        """Erase what forgotten messages left in the backends' files (refused read-only).

        Refused for a signed-in user or a view: it rewrites every resource's files, in a
        maintenance window (its result gives the whole store's sizes).
        """
        self._writable("purge")
        if (held := self._held()) is not None:
            raise OwnershipError(
                f"purge rewrites the whole store, every resource's files, and needs it to "
                f"itself; a call held to resource {held.resource_id!r} (a signed-in user, "
                "or a for_thread view) may not run it. Run `semantic-recall purge` with "
                "the service stopped (docs/data-handling.md)"
            )
        return purge_op(self.backends)

    def forget_before(self, cutoff: object, resource_id: str | None) -> Op[RetentionResult]:
        """Forget the call's owner's (or everyone's) messages created before `cutoff`."""
        self._writable("forgetting old messages")
        owner = self.owner(resource_id)  # an authenticated user forgets only their own
        return forget_before_op(self.backends.space, check_cutoff(cutoff), owner)

    def apply_retention(self, resource_id: str | None) -> Op[RetentionResult]:
        """`forget_before(now - retention)`; refused without a retention policy."""
        self._writable("applying retention")
        return self.forget_before(retention_cutoff(self.plan.retention), resource_id)

    def stats(self, resource_id: str | None, thread_id: str | None) -> Op[RecallStats]:
        """Counts of messages, threads and vectors of the call's owner (`owner`) in scope."""
        scope = maintenance_scope(self.owner(resource_id), thread_id)
        plan = self.plan
        relevance = plan.search.relevance if plan.search.calibrated else None
        return stats_op(self.backends.space, scope, relevance, max_chars=plan.max_index_chars)


class _Engine(Protocol):
    _core: EngineCore


class Part(Generic[T]):
    """A read-only engine attribute: a part of the engine's core (backends, options)."""

    def __init__(self, read: Callable[[EngineCore], T]) -> None:
        self._read = read

    def __get__(self, engine: _Engine, owner: type | None = None) -> T:
        return self._read(engine._core)


class Option(Part[T]):
    """A read-only engine attribute read from the resolved options."""

    def __init__(self, read: Callable[[EnginePlan], T]) -> None:
        super().__init__(lambda core: read(core.plan))
