"""Message metadata and search filters: what is kept, what a filter may say (pure, no I/O).

Messages carry metadata from index time (`index(..., metadata=...)`, and a message's own
`additional_kwargs["metadata"]`): a flat mapping of keys (`KEY_PATTERN`) to scalars (str,
int, float, bool). A search filter is a mapping of such keys to a value (equality),
`{"$eq": value}` or `{"$in": [values...]}`; several keys must all match. Values compare
by kind: a bool only equals a bool, numbers compare as numbers (`1 == 1.0`), text as text.

A time range is `since` (inclusive) and `until` (exclusive) on a message's creation time:
aware datetimes, or a `timedelta` meaning "that long before the turn's own time".

The filter travels inside the search scope (`records.ScopeFilter`), which every backend
enforces; it can only narrow the scope: the keys the backends use themselves are refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, TypeAlias

from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.storable import storable

__all__ = [
    "KEY_PATTERN",
    "MAX_IN",
    "MAX_KEYS",
    "METADATA_KEY",
    "RESERVED_KEYS",
    "VECTOR_PREFIX",
    "MetadataCondition",
    "MetadataValue",
    "TimeBound",
    "check_bound",
    "check_horizon",
    "check_metadata",
    "in_utc",
    "is_reserved_key",
    "matches_metadata",
    "metadata_conditions",
    "same_value",
    "time_range",
]

MetadataValue: TypeAlias = str | int | float | bool
"""A metadata value: a scalar (nested values are refused)."""
MetadataCondition: TypeAlias = tuple[str, tuple[MetadataValue, ...]]
"""One key and the values it may have (one value: equality)."""
TimeBound: TypeAlias = datetime | timedelta | None
"""A bound of a time range: an aware datetime, a `timedelta` before the turn, or None."""

METADATA_KEY: Final = "metadata"
"""The `additional_kwargs` key of a LangChain message whose mapping is kept as metadata."""
VECTOR_PREFIX: Final = "meta_"
"""Vector backends store a metadata key `k` as `meta_k` (never a key of their own)."""
KEY_PATTERN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""A metadata key: an ASCII letter, then up to 63 ASCII letters, digits or underscores."""
MAX_KEYS: Final = 32
"""Most metadata keys on one message (and conditions in one filter)."""
_MAX_TEXT: Final = 1000
MAX_IN: Final = 100
"""Most values one `$in` may list."""
RESERVED_KEYS: Final = frozenset(
    {
        "message_id",
        "thread_id",
        "resource_id",
        "role",
        "content",
        "created_at",
        "created_ts",
        "filterable",
        "embedding_model",
        "dimension",
        "source",
        "id",
        "seq",
        "text",
        "payload",
    }
)
"""Keys the backends use themselves: never metadata, never filtered on (no widening)."""


def is_reserved_key(key: str) -> bool:
    """Whether the backends use `key` themselves (`RESERVED_KEYS`, or a vector's `meta_`)."""
    return key in RESERVED_KEYS or key.startswith(VECTOR_PREFIX)


def _check_key(key: object, where: str) -> str:
    if key in ("$and", "$or"):
        raise InvalidInputError(
            f"{where}: $and and $or are not supported: every key must match already (put "
            "them in one mapping), and {'key': {'$in': [...]}} matches any of one key's "
            "values; for any of several keys, search once per key"
        )
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise InvalidInputError(
            f"{where}: key {key!r} is not a metadata key; use an ASCII letter then up to 63 "
            "ASCII letters, digits or underscores (e.g. 'project', 'tag_2')"
        )
    if is_reserved_key(key):
        raise InvalidInputError(
            f"{where}: key {key!r} is reserved (the scope and the storage use it: a filter "
            "can only narrow the caller's scope, never choose it); pick another key name, "
            "and pass thread and resource through the call's ids or config"
        )
    return key


def _check_value(value: object, where: str) -> MetadataValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInputError(f"{where}: {value!r} is not a finite number")
        if isinstance(value, int) and abs(value) > 2**53:
            raise InvalidInputError(f"{where}: {value} is too large (at most 2**53 in size)")
        return value
    if isinstance(value, str):
        if len(value) > _MAX_TEXT:
            raise InvalidInputError(f"{where}: text values are at most {_MAX_TEXT} characters")
        if not storable(value):
            raise InvalidInputError(
                f"{where}: {value!r} holds a NUL character or a lone surrogate, which not every "
                "storage keeps (nor matches); remove it (e.g. value.replace('\\x00', ''))"
            )
        return value
    raise InvalidInputError(
        f"{where}: {type(value).__name__} values are not kept; metadata values are str, "
        "int, float or bool (store a list as several keys, or as one joined string)"
    )


def check_metadata(value: object, what: str = "metadata") -> dict[str, MetadataValue]:
    """`value` as message metadata: a flat mapping of keys to scalars.

    Raises:
        InvalidInputError: not a mapping, a bad or reserved key, a value that is not a
            scalar, or more than `MAX_KEYS` keys.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"{what} must be a mapping of keys to str/int/float/bool, got {type(value).__name__}"
        )
    if len(value) > MAX_KEYS:
        raise InvalidInputError(f"{what} has {len(value)} keys; at most {MAX_KEYS} are kept")
    return {
        _check_key(key, what): _check_value(item, f"{what}[{key!r}]") for key, item in value.items()
    }


def metadata_conditions(filter: object) -> tuple[MetadataCondition, ...]:
    """A search filter as sorted conditions (key, allowed values); () for None or {}.

    Accepts `{"key": value}`, `{"key": {"$eq": value}}` and `{"key": {"$in": [...]}}`.

    Raises:
        InvalidInputError: not a mapping, a bad or reserved key, an unknown operator,
            a value that is not a scalar, or an empty `$in`.
    """
    if filter is None:
        return ()
    if not isinstance(filter, Mapping):
        raise InvalidInputError(
            f"filter must be a mapping such as {{'project': 'apollo'}} or "
            f"{{'tag': {{'$in': ['a', 'b']}}}}, got {type(filter).__name__}"
        )
    if len(filter) > MAX_KEYS:
        raise InvalidInputError(f"filter has {len(filter)} keys; at most {MAX_KEYS}")
    conditions: list[MetadataCondition] = []
    for key, wanted in filter.items():
        where = f"filter[{key!r}]"
        _check_key(key, "filter")
        if isinstance(wanted, Mapping):
            conditions.append((key, _operator(wanted, where)))
        else:
            conditions.append((key, (_check_value(wanted, where),)))
    return tuple(sorted(conditions, key=lambda condition: condition[0]))


def _operator(wanted: Mapping[object, object], where: str) -> tuple[MetadataValue, ...]:
    if len(wanted) != 1:
        raise InvalidInputError(f"{where}: one operator per key ($eq or $in), got {dict(wanted)}")
    ((operator, operand),) = wanted.items()
    if operator == "$eq":
        return (_check_value(operand, where),)
    if operator != "$in":
        raise InvalidInputError(
            f"{where}: operator {operator!r} is not supported; use a value, $eq or $in"
        )
    if isinstance(operand, str | bytes) or not isinstance(operand, Sequence | set | frozenset):
        raise InvalidInputError(f"{where}: $in takes a list of values, got {operand!r}")
    values = [_check_value(item, f"{where}['$in']") for item in operand]
    if not values:
        raise InvalidInputError(
            f"{where}: $in needs at least one value (an empty list matches nothing)"
        )
    if len(values) > MAX_IN:
        raise InvalidInputError(f"{where}: $in takes at most {MAX_IN} values")
    unique: list[MetadataValue] = []
    for value in values:
        if not any(same_value(value, seen) for seen in unique):
            unique.append(value)
    return tuple(unique)


def same_value(stored: object, wanted: MetadataValue) -> bool:
    """Whether a stored value equals a wanted one: bools only bools, numbers as numbers."""
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return isinstance(wanted, bool) and isinstance(stored, bool) and stored is wanted
    if isinstance(wanted, str) or isinstance(stored, str):
        return isinstance(wanted, str) and isinstance(stored, str) and stored == wanted
    return isinstance(stored, int | float) and stored == wanted


def matches_metadata(
    metadata: Mapping[str, object] | None, conditions: Sequence[MetadataCondition]
) -> bool:
    """Whether `metadata` meets every condition (a missing key meets none)."""
    if not conditions:
        return True
    if not metadata:
        return False
    for key, values in conditions:
        if key not in metadata:
            return False
        stored = metadata[key]
        if not any(same_value(stored, value) for value in values):
            return False
    return True


def check_bound(name: str, value: object, now: datetime) -> datetime | None:
    """A bound in UTC (a `timedelta` counts back from `now`); None stays None.

    A `timedelta` reaching before year 1 is no bound as `since` (every message is newer).

    Raises:
        InvalidInputError: a naive datetime, a negative timedelta, another type, an
            `until` reaching before year 1 (no message is older), or a datetime outside
            years 1-9999 in UTC.
    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise InvalidInputError(
                f"{name}={value!r} is negative; pass how long ago, e.g. timedelta(days=7)"
            )
        try:
            return now - value
        except OverflowError:
            if name == "since":
                return None
            raise InvalidInputError(
                f"{name}={value!r} reaches before year 1: no message is that old"
            ) from None
    if not isinstance(value, datetime):
        raise InvalidInputError(
            f"{name} must be an aware datetime or a timedelta (that long before the turn), "
            f"got {type(value).__name__}"
        )
    if value.utcoffset() is None:
        raise InvalidInputError(
            f"{name}={value.isoformat()} has no time zone; pass an aware datetime such as "
            "datetime(2024, 1, 1, tzinfo=UTC)"
        )
    return in_utc(value, name)


def in_utc(moment: datetime, what: str) -> datetime:
    """An aware `moment` in UTC.

    Raises:
        InvalidInputError: it lies outside years 1-9999 in UTC (year 1 at +01:00 is in
            year 0 in UTC; Python's datetime holds neither end).
    """
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise InvalidInputError(
            f"{what}={moment.isoformat()} lies outside the range of dates (years 1-9999 in "
            "UTC); pass a date inside it, or no bound"
        ) from None


def time_range(
    since: object, until: object, *, now: datetime, horizon: timedelta | None = None
) -> tuple[datetime | None, datetime | None]:
    """The (since, until) of a search, in UTC; a `timedelta` counts back from `now`.

    Without an explicit `since`, `horizon` (the engine's default recall horizon) gives
    one: `now - horizon`.

    Raises:
        InvalidInputError: a naive datetime, a negative timedelta, another type, or an
            empty range (`since` not before `until`).
    """
    start = check_bound("since", since, now)
    end = check_bound("until", until, now)
    if start is None and horizon is not None:
        start = check_bound("since", horizon, now)  # before year 1: no limit
    if start is not None and end is not None and start >= end:
        raise InvalidInputError(
            f"since ({start.isoformat()}) must be before until ({end.isoformat()}): the "
            "range would hold nothing"
        )
    return start, end


def check_horizon(value: object) -> timedelta | None:
    """The default recall horizon option: None (no limit) or a positive `timedelta`.

    Raises:
        InvalidOptionError: another type, or zero/negative.
    """
    if value is None:
        return None
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidOptionError(
            f"horizon must be a positive timedelta such as timedelta(days=180), or None "
            f"for no limit; got {value!r}"
        )
    return value


def metadata_items(metadata: Mapping[str, MetadataValue]) -> tuple[tuple[str, MetadataValue], ...]:
    """Checked metadata as sorted (key, value) pairs (`records.MessageRecord.metadata`)."""
    return tuple(sorted(metadata.items()))


def message_metadata(
    carried: object, given: Mapping[str, MetadataValue] | None, *, message_id: str | None
) -> tuple[tuple[str, MetadataValue], ...]:
    """The metadata kept for one message: the call's, under the message's own.

    `given` is the call's (`index(metadata=...)`); `carried` the message's own
    `additional_kwargs["metadata"]`, whose keys win.

    Raises:
        InvalidInputError: the message's own metadata is not valid (`check_metadata`).
    """
    own = check_metadata(carried, f"message {message_id!r}: additional_kwargs['metadata']")
    merged = {**(given or {}), **own}
    if len(merged) > MAX_KEYS:
        raise InvalidInputError(
            f"message {message_id!r}: {len(merged)} metadata keys; at most {MAX_KEYS} are kept"
        )
    return metadata_items(merged)
