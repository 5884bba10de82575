"""What a public call may pass: who is asking, a filter, a time range, and call options.

The options of index, search, reindex and bulk import are TypedDicts the facade `Unpack`s,
so a typo is a type error and, at run time, a `TypeError` from `checked`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from langchain_semantic_recall.engine.narrowing import Narrowing, from_config, narrowing_of

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from langchain_semantic_recall.engine.steps import Progress
    from langchain_semantic_recall.options import Scope


class CallIds(TypedDict, total=False):
    """Who is asking, as a call gives it (see `identity` for the precedence)."""

    thread_id: str | int | None
    """The conversation (explicit: wins over the config and the context)."""
    resource_id: str | int | None
    """The owner (explicit: wins, except over an authenticated user)."""
    config: RunnableConfig | None
    """A run config to read the ids from (default: the current run's, if any)."""


class NarrowingOptions(TypedDict, total=False):
    """A metadata filter and a time range (`engine.narrowing`)."""

    filter: Mapping[str, Any] | None
    """Metadata conditions: `{"key": value}` or `{"key": {"$in": [...]}}`, all must hold."""
    since: datetime | timedelta | None
    """Only messages created at or after this (a timedelta: that long before the turn)."""
    until: datetime | timedelta | None
    """Only messages created before this."""


class Narrowed(CallIds, NarrowingOptions, total=False):
    """A call's ids, metadata filter and time range."""


class IndexOptions(CallIds, total=False):
    """An index call's ids and the metadata kept on its messages."""

    metadata: Mapping[str, Any] | None
    """Kept on every message of the call (under each message's own, `filters`)."""


class SearchOptions(Narrowed, total=False):
    """A search's ids, filter and range, and its overrides of the engine's options."""

    top_k: int | None
    """Hits to retrieve for this call."""
    scope: Scope | None
    """`"thread"` or `"resource"` for this call."""
    threshold: float | None
    """Minimum score in [0, 1] for this call (hybrid: calibrated probability; dense: cosine)."""


class ReindexOptions(TypedDict, total=False):
    """What `reindex` covers and how."""

    resource_id: str | None
    """Only this resource's messages (default: every message)."""
    thread_id: str | None
    """Only this thread's messages."""
    missing_only: bool
    """Only messages that need their vectors written (a repair): those without one, whose
    vectors lack their metadata, or with vectors beyond their text's chunks. Orphan
    vectors are removed too."""
    batch_size: int
    """Messages per embedding call (default 256)."""
    progress: Progress | None
    """Called with the number of messages of each page handled."""


class BulkOptions(TypedDict, total=False):
    """How `bulk_index` batches its work."""

    batch_size: int
    """Messages per storage transaction and embedding call (default 2048)."""
    progress: Progress | None
    """Called with the number of messages of each batch once it is stored."""


CALL_ID_KEYS = frozenset(CallIds.__annotations__)
"""The keys of a call that say who is asking (the rest are its options)."""
_NARROWING = ("filter", "since", "until")


def split_narrowing(options: Mapping[str, Any]) -> tuple[dict[str, Any], Narrowing]:
    """A call's ids apart, and its narrowing within the run config's (`engine.narrowing`)."""
    ids = {k: v for k, v in options.items() if k not in _NARROWING}
    given = narrowing_of(*(options.get(k) for k in _NARROWING))
    return ids, given.within(from_config(options.get("config")))


def checked(options: Mapping[str, Any], kind: type) -> dict[str, Any]:
    """`options` if every key is one `kind` (a TypedDict) declares, else a TypeError."""
    unknown = set(options) - set(kind.__annotations__) - set(getattr(kind, "__optional_keys__", ()))
    if unknown:
        engine = sorted(unknown & _ENGINE_OPTIONS)  # `recall(scope=...)`: a view's option
        hint = (
            f"; {', '.join(engine)} {'is an option' if len(engine) == 1 else 'are options'} "
            f"of the engine: memory.with_options({engine[0]}=...) gives a view with it"
            if engine
            else ""
        )
        raise TypeError(f"unexpected keyword argument(s) {sorted(unknown)}{hint}")
    return dict(options)


_ENGINE_OPTIONS = frozenset(
    {"scope", "top_k", "message_range", "message_budget", "threshold", "search_mode"}
    | {"time_boost", "max_block_chars", "max_index_chars", "retention", "read_only"}
)
"""Options a call does not take but `with_options` does (named in the call's error)."""
