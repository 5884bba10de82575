"""Dates, ages and metadata filters on the command line (`search`, `inspect`, `forget`).

`--since` / `--until` take an ISO date or date-time (a time without a zone, or a bare
date, is UTC) or an age: a number and d, w or h (`30d`, `2w`, `12h`: that long before
now), the same ages `forget --older-than` takes. `--filter KEY=VALUE` keeps the messages
whose metadata KEY is VALUE; repeat it for more keys (all must match) or for more values
of one key (any may match, a `$in`). A VALUE that spells a number or `true`/`false` also
matches that number or boolean (metadata compares by kind, and a command line has only
text). Pure parsing: nothing here opens a store.
"""

from __future__ import annotations

import argparse
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from langchain_semantic_recall.cli.common import UsageError
from langchain_semantic_recall.cli.render import when
from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError
from langchain_semantic_recall.filters import (
    MAX_IN,
    MetadataValue,
    is_reserved_key,
    metadata_conditions,
)

__all__ = [
    "AGE_FORMS",
    "DATE_FORMS",
    "add_narrowing_arguments",
    "describe_narrowing",
    "filter_item",
    "narrowing_options",
    "parse_age",
    "parse_date",
    "time_bound",
]

AGE_FORMS: Final = "a positive number and d, w or h (90d, 12w, 36h)"
DATE_FORMS: Final = "an ISO 8601 date such as 2025-01-01 or 2025-01-01T12:00+02:00"
_AGE: Final = re.compile(r"\s*(\d+)\s*([dwh])\s*")
_AGE_UNITS: Final = {"d": "days", "w": "weeks", "h": "hours"}
_INTEGER: Final = re.compile(r"[+-]?\d+")
_NUMBER: Final = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# The library's "filter: " / "filter['key']: " prefix (argparse names the flag instead).
_WHERE: Final = re.compile(r"^filter(\[[^\]]*\])?: ")


def _age(text: str) -> timedelta | None:
    """`90d`, `12w`, `36h` as a timedelta; None for another form, zero, or before year 1."""
    match = _AGE.fullmatch(text.lower())
    if match is None or int(match.group(1)) == 0:
        return None
    try:
        age = timedelta(**{_AGE_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:
        return None
    return age if age < datetime.now(UTC) - datetime.min.replace(tzinfo=UTC) else None


def _date(text: str) -> datetime | None:
    """An ISO date or date-time in UTC (none given: UTC); None if it is not one.

    None too for one outside years 1-9999 in UTC (`0001-01-01T00:00+01:00`).
    """
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return None


def parse_age(text: str, flag: str = "--older-than") -> timedelta:
    """`90d`, `12w`, `36h` as a timedelta.

    Raises:
        InvalidOptionError: another form (months and years are refused: their length
            varies), zero, or an age reaching before year 1; the message names `flag`.
    """
    age = _age(text)
    if age is None:
        raise InvalidOptionError(f"{flag} takes {AGE_FORMS}, got {text!r}")
    return age


def parse_date(text: str, flag: str = "--before") -> datetime:
    """An ISO date or date-time; a time without zone (or a bare date) is read as UTC.

    Raises:
        InvalidOptionError: not an ISO 8601 date; the message names `flag`.
    """
    moment = _date(text)
    if moment is None:
        raise InvalidOptionError(f"{flag} takes {DATE_FORMS}, got {text!r}")
    return moment


def time_bound(text: str) -> datetime | timedelta:
    """The argparse type of `--since` / `--until`: an ISO date, or an age before now.

    Raises:
        argparse.ArgumentTypeError: neither (argparse names the flag, exit code 2).
    """
    found = _age(text) or _date(text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"expected {DATE_FORMS} (UTC unless it says otherwise), or an age before now: "
            f"{AGE_FORMS}; got {text!r}"
        )
    return found


def _spelled(value: str) -> tuple[MetadataValue, ...]:
    """`value` as text, and as the number or boolean it spells, if any."""
    if value in ("true", "false"):
        return (value, value == "true")
    if _INTEGER.fullmatch(value):
        return (value, int(value)) if abs(int(value)) <= 2**53 else (value,)
    if _NUMBER.fullmatch(value):
        number = float(value)
        return (value, number) if math.isfinite(number) else (value,)
    return (value,)


def filter_item(text: str) -> tuple[str, tuple[MetadataValue, ...]]:
    """The argparse type of `--filter KEY=VALUE`: the key and the values it matches.

    Raises:
        argparse.ArgumentTypeError: not KEY=VALUE, or a key or value metadata cannot
            have (argparse names the flag, exit code 2).
    """
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not key:
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE, e.g. project=apollo (repeat the flag for more), got {text!r}"
        )
    if key.startswith("$"):  # the library's $in/$and/$or name Python's syntax
        raise argparse.ArgumentTypeError(
            f"{key!r} is not a metadata key; operators are not written here: repeat --filter: "
            "for other keys every one must match, for the same key any of its values may"
        )
    if is_reserved_key(key):
        raise argparse.ArgumentTypeError(
            f"{key!r} is not a metadata key the command can filter on: the store uses it "
            "itself (choose whose messages with --resource and --thread)"
        )
    try:
        metadata_conditions({key: value})  # the spelled number or boolean is always valid
    except InvalidInputError as error:
        raise argparse.ArgumentTypeError(_WHERE.sub("", str(error))) from None
    return key, _spelled(value)


def add_narrowing_arguments(parser: argparse.ArgumentParser | Any) -> None:
    """Add `--filter`, `--since` and `--until` to a command (or an argument group)."""
    parser.add_argument(
        "--filter",
        type=filter_item,
        action="append",
        metavar="KEY=VALUE",
        help="only messages whose metadata KEY is VALUE; repeat for more keys (all must "
        "match) or more values of one key (any may match)",
    )
    parser.add_argument(
        "--since",
        type=time_bound,
        metavar="DATE|AGE",
        help="only messages created at or after DATE (ISO, UTC unless it says) or AGE ago "
        "(30d, 2w, 12h)",
    )
    parser.add_argument(
        "--until",
        type=time_bound,
        metavar="DATE|AGE",
        help="only messages created before DATE or AGE ago",
    )


def narrowing_options(args: argparse.Namespace, now: datetime | None = None) -> dict[str, Any]:
    """The `filter`, `since` and `until` of a search, from the parsed flags (ages: now).

    Raises:
        UsageError: too many values for one key, or `--since` not before `--until`.
    """
    options: dict[str, Any] = {}
    values: dict[str, list[MetadataValue]] = {}
    for key, matched in getattr(args, "filter", None) or ():
        values.setdefault(key, []).extend(matched)
    if values:
        for key, matched in values.items():
            if len(matched) > MAX_IN:
                raise UsageError(
                    f"--filter: {key} has {len(matched)} values to match; at most "
                    f"{MAX_IN} (a value that spells a number or true/false counts twice)"
                )
        options["filter"] = {
            key: matched[0] if len(matched) == 1 else {"$in": matched}
            for key, matched in values.items()
        }
        try:
            metadata_conditions(options["filter"])
        except InvalidInputError as error:
            raise UsageError(f"--filter: {error}") from None
    moment = now or datetime.now(UTC)
    for name in ("since", "until"):
        bound = getattr(args, name, None)
        if bound is not None:
            options[name] = moment - bound if isinstance(bound, timedelta) else bound
    since, until = options.get("since"), options.get("until")
    if since is not None and until is not None and since >= until:
        raise UsageError(
            f"--since ({since.isoformat(timespec='seconds')}) must be before --until "
            f"({until.isoformat(timespec='seconds')}): no message could match"
        )
    return options


def describe_narrowing(options: dict[str, Any]) -> list[str]:
    """The filter and range of `narrowing_options`, for a command's summary line."""
    parts: list[str] = []
    for key, wanted in (options.get("filter") or {}).items():
        matched = wanted["$in"] if isinstance(wanted, dict) else [wanted]
        texts = dict.fromkeys(value for value in matched if isinstance(value, str))  # as typed
        parts.append(f"{key}={'|'.join(texts)}")
    if "since" in options:
        parts.append(f"since {when(options['since'])} UTC")
    if "until" in options:
        parts.append(f"until {when(options['until'])} UTC")
    return parts
