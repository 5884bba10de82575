"""The period of time a query names, for time-aware recall (pure, no I/O).

`"What did I do in May 2023?"` names May 2023; `"on 7 July, 2023"` a day; `"last
week"` the calendar week (Monday to Sunday) before the one of `now`. Every period is in
UTC; docs/filtering.md ("Periods named in a query") lists the forms for users. Hybrid
search favours messages written in the named period (`docs/quality.md`: +0.02 recall
on locomo-dev, whose questions often name a month or a day).

Recognised (English, case-insensitive):

- a day: `7 July 2023`, `July 7, 2023`, `2023-07-07`;
- a month: `July 2023`, or `in July` (`in`/`during`/`since`/`until`/`by`/
  `of`/`early`/`late`/`mid` and the like before the month name): without a year,
  that month of any year (a conversation may span years; the recent one is among them);
- a year: `in 2023`, `during 2023`;
- relative: `today`, `yesterday`, `this` / `last` (or `past`, `previous`) `week` /
  `month` / `year`: calendar weeks (from Monday), months and years.

A bare `may` or `march` without such context is never read as a month.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["CALENDAR_WORDS", "Period", "named_period"]

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_NUMBER = {name: n for n, name in enumerate(_MONTHS, start=1)}
_MONTH_NUMBER.update({name[:3]: n for n, name in enumerate(_MONTHS, start=1) if name != "may"})
_MONTH_NUMBER["sept"] = 9
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
CALENDAR_WORDS: frozenset[str] = frozenset((*_MONTHS, *_WEEKDAYS))
"""Month and weekday names, lower case: capitalised, they name a time, not someone or
something a memory must mention (`relevance.features`). Short forms are left out: "Jan"
and "Jun" are names too."""
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_LEAD = r"(?:in|during|since|until|till|by|of|from|before|after|early|late|mid|last|this|on)"

_PATTERNS = (
    ("day", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b")),
    ("day", re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b")),
    ("iso", re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b")),
    ("month", re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b")),
    ("month", re.compile(rf"\b{_LEAD}\s+{_MONTH}\b")),
    ("year", re.compile(rf"\b(?:in|during|since|of|from)\s+{_YEAR}\b")),
)
_RELATIVE = re.compile(r"\b(?P<which>this|last|past|previous)\s+(?P<unit>week|month|year)\b")
_DAYS = re.compile(r"\b(?P<which>today|yesterday)\b")


@dataclass(frozen=True, slots=True)
class Period:
    """A half-open interval `[start, end)` in UTC, or one month of every year."""

    start: datetime | None = None
    end: datetime | None = None
    month: int | None = None
    """Set (1-12) for a month named without a year: that month of any year."""

    def __contains__(self, moment: object) -> bool:
        if not isinstance(moment, datetime):
            return False
        if self.month is not None:
            return moment.astimezone(UTC).month == self.month
        return self.start is not None and self.end is not None and self.start <= moment < self.end


def _month(year: int, month: int) -> Period:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end)


def _absolute(kind: str, match: re.Match[str]) -> Period | None:
    groups = match.groupdict()
    year = int(groups["year"]) if groups.get("year") else None
    month_text = groups.get("month")
    month = None
    if month_text is not None:
        month = int(month_text) if month_text.isdigit() else _MONTH_NUMBER[month_text]
    try:
        if kind in {"day", "iso"} and year and month:
            start = datetime(year, month, int(groups["day"]), tzinfo=UTC)
            return Period(start, start + timedelta(days=1))
        if kind == "month" and month:
            return Period(month=month) if year is None else _month(year, month)
        if kind == "year" and year:
            return Period(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
    except ValueError:  # 31 February and the like
        return None
    return None


def _relative(text: str, now: datetime) -> Period | None:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    days = _DAYS.search(text)
    if days is not None:
        start = today if days["which"] == "today" else today - timedelta(days=1)
        return Period(start, start + timedelta(days=1))
    match = _RELATIVE.search(text)
    if match is None:
        return None
    this = match["which"] == "this"
    if match["unit"] == "week":
        monday = today - timedelta(days=today.weekday())
        start = monday if this else monday - timedelta(days=7)
        return Period(start, start + timedelta(days=7))
    if match["unit"] == "month":
        if this:
            return _month(today.year, today.month)
        previous = today.replace(day=1) - timedelta(days=1)
        return _month(previous.year, previous.month)
    year = today.year if this else today.year - 1
    return Period(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))


def named_period(query: str, now: datetime | None = None) -> Period | None:
    """The first period `query` names (see the module docstring), or None.

    Args:
        query: The user's text.
        now: The reference time of relative expressions (default: the current time).
    """
    reference = (now or datetime.now(UTC)).astimezone(UTC)
    text = query.casefold()
    for kind, pattern in _PATTERNS:
        match = pattern.search(text)
        if match is not None:
            period = _absolute(kind, match)
            if period is not None:
                return period
    try:
        return _relative(text, reference)
    except (OverflowError, ValueError):  # before year 1 or after 9999: no period to name
        return None
