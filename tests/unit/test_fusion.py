"""Fusion, the message budget and time-aware ranking (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langchain_semantic_recall.fusion import (
    NeighbourWeights,
    best_per_message,
    boost_period,
    fuse,
    min_max,
    spend_budget,
)
from langchain_semantic_recall.periods import Period, named_period
from langchain_semantic_recall.records import StoredMessage, VectorHit

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def thread(name: str, count: int, *, start: datetime = T0) -> list[StoredMessage]:
    return [
        StoredMessage(
            id=f"{name}{n}",
            thread_id=name,
            resource_id="r",
            role="user" if n % 2 == 0 else "assistant",
            text=f"message {n}",
            created_at=start + timedelta(seconds=n),
            payload="{}",
            seq=n,
        )
        for n in range(count)
    ]


def windows_of(
    messages: list[StoredMessage], ids: list[str], before: int, after: int
) -> dict[str, tuple[StoredMessage, ...]]:
    at = {m.id: m.seq for m in messages}
    return {i: tuple(messages[max(0, at[i] - before) : at[i] + after + 1]) for i in ids}


# --- fusion --------------------------------------------------------------------------------


def test_min_max_rescales_to_unit_range() -> None:
    assert min_max([("a", 10.0), ("b", 6.0), ("c", 2.0)]) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert min_max([("a", 3.0), ("b", 3.0)]) == {"a": 1.0, "b": 1.0}
    assert min_max([]) == {}


def test_fuse_weights_the_two_lists_and_counts_absence_as_zero() -> None:
    dense = [("both", 0.9), ("dense", 0.8), ("low", 0.1)]
    keyword = [("kw", 12.0), ("both", 7.0), ("low2", 2.0)]
    fused = dict(fuse(dense, keyword, keyword_weight=0.8))
    assert fused["both"] == pytest.approx(0.8 * 0.5 + 0.2 * 1.0)
    assert fused["kw"] == pytest.approx(0.8)
    assert fused["dense"] == pytest.approx(0.2 * 0.875)
    assert fused["low"] == fused["low2"] == 0.0
    assert [k for k, _ in fuse(dense, keyword, keyword_weight=0.0)][:2] == ["both", "dense"]
    assert [k for k, _ in fuse(dense, keyword, keyword_weight=1.0)][:2] == ["kw", "both"]


def test_fuse_orders_ties_by_id() -> None:
    assert fuse([("b", 1.0), ("a", 1.0)], [], keyword_weight=0.5) == [("a", 0.5), ("b", 0.5)]


def test_best_per_message_keeps_the_best_chunk() -> None:
    hits = [
        VectorHit("m1#1", "m1", "t", "r", 0.4),
        VectorHit("m2", "m2", "t", "r", 0.5),
        VectorHit("m1", "m1", "t", "r", 0.7),
    ]
    assert best_per_message(hits) == [("m1", 0.7), ("m2", 0.5)]


# --- the message budget --------------------------------------------------------------------


def test_linear_weights_fall_with_distance() -> None:
    weights = NeighbourWeights.linear(1, 2)
    assert weights.before == (0.5,)
    assert weights.after == pytest.approx((2 / 3, 1 / 3))
    assert weights.weight(0) == 1.0
    assert weights.weight(-1) == 0.5
    assert weights.weight(-2) is None
    assert weights.weight(3) is None
    with pytest.raises(ValueError, match="weights"):
        NeighbourWeights(after=(1.5,))


def test_without_a_budget_windows_stay_whole() -> None:
    messages = thread("t", 10)
    ranked = [("t2", 1.0), ("t7", 0.3)]
    hits = spend_budget(
        ranked,
        windows_of(messages, ["t2", "t7"], 1, 2),
        weights=NeighbourWeights.linear(1, 2),
        budget=None,
    )
    assert [[m.id for m in h.window] for h in hits] == [
        ["t1", "t2", "t3", "t4"],
        ["t6", "t7", "t8", "t9"],
    ]
    assert [h.message.id for h in hits] == ["t2", "t7"]
    assert [h.score for h in hits] == [1.0, 0.3]


def test_the_budget_keeps_the_best_scored_messages() -> None:
    messages = thread("t", 20)
    ranked = [("t2", 1.0), ("t10", 0.9), ("t16", 0.2)]
    hits = spend_budget(
        ranked,
        windows_of(messages, ["t2", "t10", "t16"], 0, 2),
        weights=NeighbourWeights.linear(0, 2),
        budget=5,
    )
    # t2 1.0, t10 0.9, t3 0.667, t11 0.6, t4 0.333 | t12 0.3, t16 0.2 ...
    returned = {m.id for h in hits for m in h.window}
    assert returned == {"t2", "t3", "t4", "t10", "t11"}
    assert [h.message.id for h in hits] == ["t2", "t10"]  # t16 lost its own place
    assert [[m.id for m in h.window] for h in hits] == [["t2", "t3", "t4"], ["t10", "t11"]]


def test_a_shared_neighbour_counts_once_and_keeps_its_best_score() -> None:
    messages = thread("t", 6)
    ranked = [("t1", 1.0), ("t2", 0.2)]
    hits = spend_budget(
        ranked,
        windows_of(messages, ["t1", "t2"], 0, 2),
        weights=NeighbourWeights.linear(0, 2),
        budget=3,
    )
    assert {m.id for h in hits for m in h.window} == {"t1", "t2", "t3"}
    assert [h.message.id for h in hits] == ["t1", "t2"]


def test_hits_without_a_window_are_dropped_and_reach_cuts_windows() -> None:
    messages = thread("t", 6)
    wide = windows_of(messages, ["t3"], 3, 3)
    hits = spend_budget(
        [("gone", 1.0), ("t3", 0.5)], wide, weights=NeighbourWeights.linear(0, 1), budget=None
    )
    assert [[m.id for m in h.window] for h in hits] == [["t3", "t4"]]


def test_budget_windows_never_exceed_the_budget() -> None:
    messages = thread("a", 30) + thread("b", 30)
    ranked = [(f"{t}{n}", 1.0 - n / 40) for n in range(0, 30, 3) for t in "ab"]
    windows = {
        **windows_of(messages[:30], [i for i, _ in ranked if i.startswith("a")], 1, 3),
        **windows_of(messages[30:], [i for i, _ in ranked if i.startswith("b")], 1, 3),
    }
    for budget in (1, 2, 7, 15, 40):
        hits = spend_budget(ranked, windows, weights=NeighbourWeights.linear(1, 3), budget=budget)
        returned = {m.id for h in hits for m in h.window}
        assert len(returned) == min(budget, len(returned))
        assert len(returned) <= budget
        for hit in hits:
            assert hit.message in hit.window
            assert [m.seq for m in hit.window] == sorted(m.seq for m in hit.window)
            assert {m.thread_id for m in hit.window} == {hit.thread_id}


# --- time-aware ranking ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did Maria do on 7 July, 2023?", datetime(2023, 7, 7), datetime(2023, 7, 8)),
        ("What happened on July 7th, 2023", datetime(2023, 7, 7), datetime(2023, 7, 8)),
        ("the 2023-07-07 meeting", datetime(2023, 7, 7), datetime(2023, 7, 8)),
        (
            "What setback did Melanie face in October 2023?",
            datetime(2023, 10, 1),
            datetime(2023, 11, 1),
        ),
        ("plans for Dec 2023", datetime(2023, 12, 1), datetime(2024, 1, 1)),
        ("How many times at the beach in 2023?", datetime(2023, 1, 1), datetime(2024, 1, 1)),
    ],
)
def test_named_absolute_periods(query: str, start: datetime, end: datetime) -> None:
    assert named_period(query) == Period(start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))


def test_a_month_without_a_year_is_that_month_of_any_year() -> None:
    period = named_period("When did Melanie go camping in June?")
    assert period == Period(month=6)
    assert datetime(2021, 6, 30, tzinfo=UTC) in period
    assert datetime(2021, 7, 1, tzinfo=UTC) not in period
    assert "not a time" not in period


@pytest.mark.parametrize(
    "query",
    [
        "What may Caroline do next?",
        "We march on",
        "Tell me about the project",
        "I have 2023 reasons",
    ],
)
def test_no_period_is_read_into_ordinary_words(query: str) -> None:
    assert named_period(query) is None


def test_an_impossible_day_falls_back_to_its_month() -> None:
    assert named_period("on 31 February, 2023") == Period(
        datetime(2023, 2, 1, tzinfo=UTC), datetime(2023, 3, 1, tzinfo=UTC)
    )


@pytest.mark.parametrize(
    "now",
    [
        datetime.min.replace(tzinfo=UTC),  # what a client's unset clock may send
        datetime(1, 1, 3, tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
        datetime(9999, 12, 28, tzinfo=UTC),
    ],
)
@pytest.mark.parametrize(
    "query",
    [
        *("yesterday", "today", "last week", "this week"),
        *("last month", "this month", "last year", "this year"),
    ],
)
def test_a_relative_period_past_the_ends_of_the_calendar_is_none(now: datetime, query: str) -> None:
    """A turn dated at the edge of what `datetime` holds (year 1, year 9999): a period
    that cannot be written is no period. Before: `OverflowError` / `ValueError`, and
    recall logged "recall failed" and went on without memory for that turn."""
    period = named_period(f"what did we say {query}?", now)
    assert period is None or now in period or period.end is None or period.end <= now


def test_relative_periods_count_from_now() -> None:
    now = datetime(2024, 3, 13, 15, 0, tzinfo=UTC)  # a Wednesday
    assert named_period("what did I say yesterday", now) == Period(
        datetime(2024, 3, 12, tzinfo=UTC), datetime(2024, 3, 13, tzinfo=UTC)
    )
    assert named_period("plans from last week", now) == Period(
        datetime(2024, 3, 4, tzinfo=UTC), datetime(2024, 3, 11, tzinfo=UTC)
    )
    assert named_period("this month", now) == Period(
        datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC)
    )
    assert named_period("last month", now) == Period(
        datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 1, tzinfo=UTC)
    )
    assert named_period("last year", now) == Period(
        datetime(2023, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)
    )
    assert named_period("today", now) == Period(
        datetime(2024, 3, 13, tzinfo=UTC), datetime(2024, 3, 14, tzinfo=UTC)
    )


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [  # the table of docs/filtering.md ("Periods named in a query"), with now on Wednesday
        ("7th of July, 2023", datetime(2023, 7, 7), datetime(2023, 7, 8)),
        ("July 7, 2023", datetime(2023, 7, 7), datetime(2023, 7, 8)),
        ("Sept. 2023", datetime(2023, 9, 1), datetime(2023, 10, 1)),
        ("since 2023", datetime(2023, 1, 1), datetime(2024, 1, 1)),
        ("this week", datetime(2026, 11, 30), datetime(2026, 12, 7)),
        ("the previous week", datetime(2026, 11, 23), datetime(2026, 11, 30)),
        ("last month", datetime(2026, 11, 1), datetime(2026, 12, 1)),
    ],
)
def test_the_documented_periods(query: str, start: datetime, end: datetime) -> None:
    now = datetime(2026, 12, 2, 23, 30, tzinfo=UTC)
    assert named_period(query, now) == Period(start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))
    for month in ("during March", "last May", "on July 7th", "since March", "before March"):
        assert named_period(month, now) == Period(month=_MONTHS[month.split()[1][:3].lower()])


@pytest.mark.parametrize(
    "query",
    [
        "07/07/2023",
        "7.7.2023",
        "two days ago",
        "a week ago",
        "last Tuesday",
        "this morning",
        "last night",
        "last summer",
        "ayer",
        "la semaine dernière",
        "im März 2023",
    ],
)
def test_the_documented_forms_that_name_no_period(query: str) -> None:
    assert named_period(query, datetime(2026, 12, 2, tzinfo=UTC)) is None


@given(
    now=st.datetimes(
        min_value=datetime(1990, 1, 2),
        max_value=datetime(2099, 12, 30),
        timezones=st.sampled_from([UTC, ZoneInfo("America/New_York"), ZoneInfo("Pacific/Chatham")]),
    )
)
def test_relative_periods_tile_time_at_every_clock(now: datetime) -> None:
    """Any turn time (year ends, DST changes, odd offsets): "this" holds it, "last" ends
    where "this" starts, and each is one whole UTC day, week, month or year."""
    utc = now.astimezone(UTC)
    for unit, this_word in (
        ("day", "today"),
        ("week", "this week"),
        ("month", "this month"),
        ("year", "this year"),
    ):
        this = named_period(this_word, now)
        last = named_period("yesterday" if unit == "day" else f"last {unit}", now)
        assert this is not None
        assert last is not None
        assert utc in this
        assert last.end == this.start
        for period in (this, last):
            assert period.start is not None
            assert period.end is not None
            assert period.start.tzinfo is UTC
            assert period.start.time() == datetime.min.time()
            days = (period.end - period.start).days
            assert (
                days
                in {"day": {1}, "week": {7}, "month": {28, 29, 30, 31}, "year": {365, 366}}[unit]
            )
        if unit == "week":
            assert this.start.weekday() == 0


_MONTHS = {"mar": 3, "may": 5, "jul": 7}


def test_boost_period_lifts_the_messages_of_the_period() -> None:
    may = thread("may", 2, start=datetime(2023, 5, 3, tzinfo=UTC))
    june = thread("june", 2, start=datetime(2023, 6, 3, tzinfo=UTC))
    ranked = [("june0", 1.0), ("may1", 0.6), ("june1", 0.5), ("unknown", 0.4)]
    times = {m.id: (m,) for m in may + june}
    boosted = boost_period(ranked, times, Period(month=5), 0.5)
    assert boosted == [
        ("may1", pytest.approx(1.1)),
        ("june0", 1.0),
        ("june1", 0.5),
        ("unknown", 0.4),
    ]
