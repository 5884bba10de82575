"""What a search or recall is narrowed to: a metadata filter and a time range (pure).

A call gives them explicitly (`filter=`, `since=`, `until=`; graph nodes and the
middleware as options, with `horizon=`), or a run gives them in
`config["configurable"]` under `recall_filter`, `recall_since`, `recall_until` and
`recall_horizon`. When both give them, both hold (`Narrowing.within`): a message must
pass the call's filter and the run's, and fall in both ranges, so a call can narrow its
run further but never widen it. The horizon is a default `since` (used when neither
gives one): the call's, else the run's, else the engine's. A `timedelta` counts back
from the turn's own time: the newest human message's `additional_kwargs["created_at"]`
when it carries one (an import, a replay), else now. Any other `recall_` key in the
config is refused: a misspelt one would otherwise recall unfiltered.

Narrowing only ever narrows: the scope's thread and resource are decided by the identity
rule alone, and a filter naming one of their keys is refused (`filters.RESERVED_KEYS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, ensure_config

from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.filters import (
    MetadataCondition,
    TimeBound,
    check_bound,
    check_horizon,
    metadata_conditions,
    same_value,
    time_range,
)
from langchain_semantic_recall.records import ScopeFilter

__all__ = [
    "FILTER_KEY",
    "HORIZON_KEY",
    "SINCE_KEY",
    "UNTIL_KEY",
    "Narrowing",
    "narrowing_of",
    "narrowing_option",
    "turn_time",
]

FILTER_KEY: Final = "recall_filter"
SINCE_KEY: Final = "recall_since"
UNTIL_KEY: Final = "recall_until"
HORIZON_KEY: Final = "recall_horizon"
_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Narrowing:
    """A checked metadata filter and time range (bounds may still be relative)."""

    metadata: tuple[MetadataCondition, ...] | None = None
    """None: not given (a later source may give it); (): no filter."""
    since: TimeBound = None
    until: TimeBound = None
    horizon: timedelta | None = None
    ranges: tuple[tuple[TimeBound, TimeBound], ...] = ()
    """Further (since, until) ranges that hold too: a run's, under a call's (`within`)."""

    def over(self, fallback: Narrowing) -> Narrowing:
        """This narrowing, each unset part taken from `fallback` (a default: the horizon)."""
        return Narrowing(
            metadata=self.metadata if self.metadata is not None else fallback.metadata,
            since=self.since if self.since is not None else fallback.since,
            until=self.until if self.until is not None else fallback.until,
            horizon=self.horizon if self.horizon is not None else fallback.horizon,
            ranges=(*self.ranges, *fallback.ranges),
        )

    def within(self, outer: Narrowing) -> Narrowing:
        """This narrowing and `outer` both (a call's within its run's): never wider than either.

        Both filters hold (on a key both name, only values both allow); both ranges hold
        (the later `since`, the earlier `until`: resolved when applied, as a bound may be
        relative); the horizon is this one's, else `outer`'s.

        Raises:
            InvalidInputError: a key both filters name with no value both allow (no
                message could match: an error, never a silent empty answer).
        """
        both = self.over(outer)
        given = self.since is not None or self.until is not None
        if given and (outer.since is not None or outer.until is not None):
            both = replace(both, ranges=(*both.ranges, (outer.since, outer.until)))
        return replace(both, metadata=_both_filters(self.metadata, outer.metadata))

    def applied(self, scope: ScopeFilter, now: datetime) -> ScopeFilter:
        """`scope` narrowed: the filter and the range (relative bounds from `now`).

        Raises:
            InvalidInputError: an empty range (`since` not before `until`, all ranges
                taken together).
        """
        if not self.ranges:
            since, until = time_range(self.since, self.until, now=now, horizon=self.horizon)
            return replace(scope, metadata=self.metadata or (), since=since, until=until)
        starts, ends = [], []
        for start, end in ((self.since, self.until), *self.ranges):
            starts.append(check_bound("since", start, now))
            ends.append(check_bound("until", end, now))
        since = max((bound for bound in starts if bound is not None), default=None)
        until = min((bound for bound in ends if bound is not None), default=None)
        if since is None and self.horizon is not None:  # the horizon: a default since
            since = check_bound("since", self.horizon, now)
        if since is not None and until is not None and since >= until:
            raise InvalidInputError(
                f"the call's time range and the run's (recall_since / recall_until) together "
                f"hold nothing: since {since.isoformat()} is not before until "
                f"{until.isoformat()}; drop or widen one of them"
            )
        return replace(scope, metadata=self.metadata or (), since=since, until=until)


def _both_filters(
    inner: tuple[MetadataCondition, ...] | None, outer: tuple[MetadataCondition, ...] | None
) -> tuple[MetadataCondition, ...] | None:
    """The conditions of both filters (a key both name: the values both allow)."""
    if inner is None or outer is None:
        return outer if inner is None else inner
    if not inner or not outer:
        return inner or outer
    merged = dict(outer)
    for key, values in inner:
        kept = values
        if key in merged:
            kept = tuple(v for v in values if any(same_value(v, w) for w in merged[key]))
            if not kept:
                raise InvalidInputError(
                    f"filter[{key!r}]: the call's filter allows {list(values)} and the run's "
                    f"recall_filter {list(merged[key])}: no value both allow, so no message "
                    "could match; drop one of them, or give values they share"
                )
        merged[key] = kept
    return tuple(sorted(merged.items(), key=lambda condition: condition[0]))


def narrowing_of(
    filter: object = None,
    since: object = None,
    until: object = None,
    horizon: object = None,
) -> Narrowing:
    """A checked `Narrowing` (types and keys; a relative range is checked when applied).

    Raises:
        InvalidInputError: a bad filter (`filters.metadata_conditions`), a bound that is
            not an aware datetime or a non-negative timedelta, an empty absolute range,
            or a horizon that is not a positive timedelta.
    """
    check_bound("since", since, _EPOCH)
    check_bound("until", until, _EPOCH)
    if isinstance(since, datetime) and isinstance(until, datetime):
        time_range(since, until, now=_EPOCH)  # an empty absolute range is an error now
    try:
        checked_horizon = check_horizon(horizon)
    except ValueError as error:
        raise InvalidInputError(str(error)) from error
    return Narrowing(
        metadata=None if filter is None else metadata_conditions(filter),
        since=since,  # type: ignore[arg-type]  # checked by time_range above
        until=until,  # type: ignore[arg-type]
        horizon=checked_horizon,
    )


def narrowing_option(
    filter: object = None,
    since: object = None,
    until: object = None,
    horizon: object = None,
) -> Narrowing:
    """`narrowing_of` for options given at construction (a node, a retriever, a tool).

    Raises:
        InvalidOptionError: what `narrowing_of` refuses.
    """
    try:
        return narrowing_of(filter, since, until, horizon)
    except InvalidInputError as error:
        raise InvalidOptionError(str(error)) from error


_CONFIG_KEYS: Final = (FILTER_KEY, SINCE_KEY, UNTIL_KEY, HORIZON_KEY)


def run_config(config: object) -> RunnableConfig:
    """`config` as LangChain's `ensure_config` makes it (the current run's if None).

    Raises:
        InvalidInputError: `config`, or its `configurable`, is not a mapping (a bare
            AttributeError, before).
    """
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if (config is not None and not isinstance(config, Mapping)) or not isinstance(
        configurable, Mapping | None
    ):
        raise InvalidInputError(
            "config must be a RunnableConfig (a dict such as {'configurable': {'thread_id': "
            f"...}}}}), got {config!r:.80}"
        )
    return ensure_config(config)  # type: ignore[arg-type]


def from_config(config: RunnableConfig | None) -> Narrowing:
    """The narrowing a run gives in `config["configurable"]` (the current run's if None).

    Raises:
        InvalidInputError: what `narrowing_of` refuses, or a `recall_` key that is none
            of the four (a misspelt `recall_filter` would recall unfiltered).
    """
    configurable: Mapping[str, Any] = run_config(config).get("configurable") or {}
    unknown = sorted(
        key
        for key in configurable
        if isinstance(key, str) and key.startswith("recall_") and key not in _CONFIG_KEYS
    )
    if unknown:
        raise InvalidInputError(
            f"unknown config key(s) {unknown}: a run narrows recall with "
            f"config['configurable'] keys {list(_CONFIG_KEYS)} only"
        )
    return narrowing_of(
        configurable.get(FILTER_KEY),
        configurable.get(SINCE_KEY),
        configurable.get(UNTIL_KEY),
        configurable.get(HORIZON_KEY),
    )


def turn_time(messages: Sequence[BaseMessage]) -> datetime:
    """The turn's own time: its newest human message's carried `created_at`, else now."""
    from langchain_semantic_recall.messages import CREATED_AT_KEY, parse_time

    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            carried = message.additional_kwargs.get(CREATED_AT_KEY)
            if carried is not None:
                return parse_time(carried)
            break
    return datetime.now(UTC)
