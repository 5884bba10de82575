"""The vectorised relevance scoring gives the results of the per-message loops it replaced.

`Old*` / `old_*` below are the 0.3 development scoring (one message at a time, terms cached
in a module-global), kept here only as the reference: on generated conversations, queries,
candidate pools and windows, the new code must build the same query facts and candidate
rows, keep the same candidates in the same order, give every message the same
probability (to 1e-9) and return the same hits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_semantic_recall.keywords import term_set
from langchain_semantic_recall.periods import Period
from langchain_semantic_recall.records import RecallHit, StoredMessage
from langchain_semantic_recall.relevance import (
    Query,
    QueryBaseline,
    RelevanceModel,
    TermCache,
    content_terms,
    default_model,
    is_question,
)
from langchain_semantic_recall.relevance.features import (
    CONVERSATIONAL,
    DIRECT,
    MATCH,
    asked_names,
    asks_about_speaker,
    context_rows,
    direct_rows,
)

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)

# --- the reference: the per-message implementation ----------------------------------------

_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")


@lru_cache(maxsize=8192)
def old_terms_of(text: str) -> frozenset[str]:
    return term_set(text)


@dataclass(frozen=True, slots=True)
class OldQuery:
    terms: tuple[str, ...]
    baseline: QueryBaseline | None
    cosines: Mapping[str, float]
    bm25: Mapping[str, float]
    period: Period | None
    query_found: float
    name_missing: float
    keyword_coverage: float = 0.0
    about_speaker: bool = False  # (not what this test compares: the same function)
    top_user_statement: float | None = None  # (the same)
    rows: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(  # noqa: PLR0917
        cls,
        query: str,
        dense: Sequence[tuple[str, float]],
        keyword: Sequence[tuple[str, float]],
        messages: Mapping[str, StoredMessage],
        baseline: QueryBaseline | None,
        period: Period | None,
    ) -> OldQuery:
        terms = tuple(content_terms(query))
        cosines = {k: v for k, v in dense if k in messages}
        bm25 = {k: v for k, v in keyword if k in messages}
        anywhere = frozenset().union(*(old_terms_of(messages[k].text) for k in {*cosines, *bm25}))
        names = asked_names(query)  # (not what this test compares)
        covered = (len(old_terms_of(messages[k].text).intersection(terms)) for k in bm25)
        return cls(
            terms=terms,
            baseline=baseline,
            cosines=cosines,
            bm25=bm25,
            period=period,
            query_found=sum(t in anywhere for t in terms) / len(terms) if terms else 0.0,
            name_missing=float(any(name not in anywhere for name in names)),
            keyword_coverage=max(covered, default=0) / len(terms) if terms else 0.0,
            about_speaker=asks_about_speaker(query),
            top_user_statement=Query.build(
                query, dense, keyword, messages, None, None
            ).top_user_statement,
        )

    @property
    def candidates(self) -> list[str]:
        return sorted({*self.cosines, *self.bm25})

    @property
    def said_nearer_than_small_talk(self) -> bool:  # (the same rule, not compared here)
        top, baseline = self.top_user_statement, self.baseline
        return baseline is not None and top is not None and top > baseline.small_talk_top

    def z(self, cosine: float) -> float:
        return float(self.baseline.z(cosine)) if self.baseline is not None else 0.0

    @property
    def floor_z(self) -> float:
        return self.z(min(self.cosines.values())) if self.cosines else 0.0

    @property
    def top_z(self) -> float:
        return self.z(max(self.cosines.values())) if self.cosines else self.floor_z


def old_direct_rows(query: OldQuery, messages: Sequence[StoredMessage]) -> np.ndarray:
    missing = [m for m in messages if m.id not in query.rows]
    if missing:
        query.rows.update(zip((m.id for m in missing), _old_rows(query, missing), strict=True))
    if not messages:
        return np.empty((0, len(DIRECT)))
    return np.stack([query.rows[m.id] for m in messages])


def _old_rows(query: OldQuery, messages: Sequence[StoredMessage]) -> np.ndarray:
    terms = query.terms
    top_bm25 = max(query.bm25.values(), default=0.0)
    top_z, floor_z = query.top_z, query.floor_z
    rows = np.empty((len(messages), len(DIRECT)))
    for i, message in enumerate(messages):
        bag = old_terms_of(message.text)
        bare = bag <= CONVERSATIONAL  # no content term: it matches nothing by itself
        cosine = None if bare else query.cosines.get(message.id)
        z = query.z(cosine) if cosine is not None else floor_z
        bm25 = 0.0 if bare else query.bm25.get(message.id, 0.0)
        log_bm25 = math.log1p(bm25)
        relative = bm25 / top_bm25 if top_bm25 > 0 else 0.0
        found = query.query_found
        rows[i] = (
            z,
            log_bm25,
            len(bag.intersection(terms)) / len(terms) if terms else 0.0,
            float(is_question(message.text)),
            float(message.role == "user"),
            math.log1p(len(bag)),
            z - top_z,
            relative,
            float(query.period is not None and message.created_at in query.period),
            found,
            query.name_missing,
            math.log1p(len(terms)),
            float(message.id in query.bm25 and not bare),
            float(cosine is not None),
            math.log1p(top_bm25),
            log_bm25 * found,
            relative * found,
            z * found,
        )
    return rows


def old_context_rows(
    query: OldQuery,
    targets: Sequence[StoredMessage],
    threads: Mapping[str, Sequence[StoredMessage]],
    match_weights: np.ndarray,
) -> np.ndarray:
    known = {m.id: m for messages in threads.values() for m in messages}
    at = {(m.thread_id, m.seq): m for m in known.values()}
    direct = dict(zip(known, old_direct_rows(query, list(known.values())), strict=True))
    nothing = np.zeros(len(DIRECT))
    nothing[DIRECT.index("z")] = query.floor_z
    nothing[DIRECT.index("z_relative")] = query.floor_z - query.top_z
    columns = list(MATCH)
    baseline = float(nothing[columns] @ match_weights)

    def neighbour(message: StoredMessage, offset: int) -> tuple[float, float]:
        other = at.get((message.thread_id, message.seq + offset))
        if other is None:
            return 0.0, 0.0
        match = float(direct[other.id][columns] @ match_weights) - baseline
        return match, match * float(is_question(other.text))

    rows = np.empty((len(targets), len(DIRECT) + 5))
    for i, message in enumerate(targets):
        prev, prev_question = neighbour(message, -1)
        prev2, prev2_question = neighbour(message, -2)
        after, _ = neighbour(message, 1)
        rows[i, : len(DIRECT)] = direct[message.id]
        rows[i, len(DIRECT) :] = (prev, prev_question, prev2, prev2_question, after)
    return rows


def _linear(x: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    return np.asarray(x @ w[1:] + w[0], dtype=np.float64)


def old_best_candidates(
    model: RelevanceModel, query: OldQuery, messages: Mapping[str, StoredMessage]
) -> list[str]:
    ids = [k for k in query.candidates if k in messages]
    if not ids:  # a query without content terms too: a threshold may answer it
        return []
    x = old_direct_rows(query, [messages[k] for k in ids])
    order = np.argsort(-_linear(x, model.direct), kind="stable")[: model.candidates]
    return [ids[i] for i in order.tolist()]


def old_probabilities(
    model: RelevanceModel,
    query: OldQuery,
    kept: Sequence[str],
    windows: Mapping[str, Sequence[StoredMessage]],
    scope_size: int,
) -> dict[str, float]:
    threads: dict[str, list[StoredMessage]] = {}
    targets: dict[str, StoredMessage] = {}
    for candidate in kept:
        window = windows.get(candidate) or ()
        hit = next((m for m in window if m.id == candidate), None)
        if hit is None:
            continue
        for message in window:
            threads.setdefault(message.thread_id, []).append(message)
            if -model.before <= message.seq - hit.seq <= model.after:
                targets.setdefault(message.id, message)
    if not targets:
        return {}
    weights = np.asarray(model.direct[1:], dtype=np.float64)[list(MATCH)]
    order = list(targets.values())
    x = old_context_rows(query, order, threads, weights)
    logits = _linear(x, model.context) - math.log(max(1, min(scope_size, model.size_cap)))
    p = 1.0 / (1.0 + np.exp(-np.clip(logits, -60.0, 60.0)))
    chances = {m.id: float(v) for m, v in zip(order, p.tolist(), strict=True)}
    for message in sorted(order, key=lambda m: m.seq):  # "yes" rides with what it answers
        if old_terms_of(message.text) <= CONVERSATIONAL:
            answered = next(
                (
                    m.id
                    for m in order
                    if (m.thread_id, m.seq) == (message.thread_id, message.seq - 1)
                ),
                None,
            )
            cap = chances[answered] * (1 - 1e-6) if answered else 0.0
            chances[message.id] = min(chances[message.id], cap)
    return chances


def old_riding(window: list[StoredMessage]) -> list[StoredMessage]:
    """An acknowledgement only right after the message it answers."""
    riding: list[StoredMessage] = []
    for m in window:
        if not old_terms_of(m.text) <= CONVERSATIONAL or (riding and riding[-1].seq == m.seq - 1):
            riding.append(m)
    return riding


def old_select(  # noqa: PLR0917
    model: RelevanceModel,
    query: OldQuery,
    kept: Sequence[str],
    windows: Mapping[str, Sequence[StoredMessage]],
    scope_size: int,
    budget: int | None,
    threshold: float | None,
) -> list[RecallHit]:
    share = (
        model.evidence.share(query, model.counted(scope_size))  # type: ignore[arg-type]
        if threshold is None
        else 1.0
    )
    if share <= 0.0:
        return []
    p = old_probabilities(model, query, kept, windows, scope_size)
    ranked = sorted(p.items(), key=lambda item: (-round(item[1], 9), item[0]))
    if threshold is not None:
        ranked = [item for item in ranked if item[1] >= threshold]
    else:
        ranked = [item for item in ranked if item[1] > 0.0]
    if budget is not None:
        ranked = ranked[: round(budget * share)]
    chosen = dict(ranked)
    placed: set[str] = set()
    hits: list[RecallHit] = []
    for candidate in kept:
        window = windows.get(candidate) or ()
        hit = next((m for m in window if m.id == candidate), None)
        if hit is None:
            continue
        mine = [
            m
            for m in window
            if m.id in chosen
            and m.id not in placed
            and -model.before <= m.seq - hit.seq <= model.after
        ]
        riding = old_riding if threshold is None else list
        mine = riding(mine)
        if not mine:
            continue
        top = min(mine, key=lambda m: (-round(chosen[m.id], 9), m.id))  # ids decide ties
        mine = riding([m for m in mine if -model.before <= m.seq - top.seq <= model.after])
        placed.update(m.id for m in mine)
        hits.append(RecallHit(message=top, score=chosen[top.id], window=tuple(mine)))
    return sorted(hits, key=lambda h: (-round(h.score, 9), h.message.id))


# --- generated conversations ----------------------------------------------------------------

VOCABULARY = (
    "dog beagle Biscuit painting watercolour lake mountain Denver kitchen budget car brakes "
    "yoga knee allergic peanuts hotel trip Paris Melanie Caroline adoption support group "
    "camping pottery guitar concert marathon promotion job interview sister wedding garden "
    "tomatoes recipe birthday cake thanks hello good great really what when where how the "
    "a my your is was it's don't"
)
WORDS = VOCABULARY.split()

_text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=14).map(" ".join)
_ending = st.sampled_from(("", "?", "!", ".", " [shared a photo]", "? [link]"))
_message_text = st.builds(lambda words, end: words + end, _text, _ending)


@dataclass
class Case:
    query: str
    threads: dict[str, list[StoredMessage]]
    dense: list[tuple[str, float]]
    keyword: list[tuple[str, float]]
    baseline: QueryBaseline | None
    period: Period | None
    size: int
    budget: int | None
    threshold: float | None
    deleted: set[str]

    @property
    def by_id(self) -> dict[str, StoredMessage]:
        return {m.id: m for t in self.threads.values() for m in t if m.id not in self.deleted}

    def windows(
        self, ids: Sequence[str], before: int, after: int
    ) -> dict[str, list[StoredMessage]]:
        """What `read_windows` returns: each id's thread neighbours, deleted ones gone."""
        by_id = self.by_id
        out: dict[str, list[StoredMessage]] = {}
        for k in ids:
            if k not in by_id:
                continue
            hit = by_id[k]
            out[k] = [
                m
                for m in self.threads[hit.thread_id]
                if m.id not in self.deleted and -before <= m.seq - hit.seq <= after
            ]
        return out


@st.composite
def cases(draw: st.DrawFn) -> Case:
    threads: dict[str, list[StoredMessage]] = {}
    for t in range(draw(st.integers(1, 3))):
        texts = draw(st.lists(_message_text, min_size=1, max_size=25))
        threads[f"t{t}"] = [
            StoredMessage(
                id=f"t{t}-m{n:02d}",
                thread_id=f"t{t}",
                resource_id="r",
                role=draw(st.sampled_from(("user", "assistant", "system"))),
                text=text,
                created_at=START + timedelta(days=t * 20 + n),
                payload="{}",
                seq=n + draw(st.integers(0, 1)) * 100,  # a gap in the thread now and then
            )
            for n, text in enumerate(texts)
        ]
    ids = sorted(m.id for t in threads.values() for m in t)
    unit = st.floats(-0.3, 0.95, allow_nan=False)
    dense = draw(
        st.lists(st.tuples(st.sampled_from(ids), unit), max_size=20, unique_by=lambda x: x[0])
    )
    score = st.floats(0.0, 25.0, allow_nan=False)
    keyword = draw(
        st.lists(st.tuples(st.sampled_from(ids), score), max_size=20, unique_by=lambda x: x[0])
    )
    dense.sort(key=lambda x: -x[1])
    keyword.sort(key=lambda x: -x[1])
    baseline = draw(
        st.none()
        | st.builds(
            QueryBaseline,
            mean=st.floats(-0.1, 0.4),
            spread=st.floats(1e-6, 0.2),
            small_talk_margin=st.floats(-0.5, 0.2),
        )
    )
    period = draw(
        st.sampled_from(
            (
                None,
                Period(START + timedelta(days=5), START + timedelta(days=30)),
                Period(month=3),
            )
        )
    )
    return Case(
        query=draw(_message_text),
        threads=threads,
        dense=dense,
        keyword=keyword,
        baseline=baseline,
        period=period,
        size=draw(st.integers(0, 20_000)),
        budget=draw(st.sampled_from((None, 15, 5))),
        threshold=draw(st.sampled_from((None, None, 0.0, 0.01))),
        deleted=set(draw(st.lists(st.sampled_from(ids), max_size=3))),
    )


def _models() -> list[RelevanceModel]:
    from dataclasses import replace

    shipped = default_model()
    return [shipped, replace(shipped, candidates=5, before=1, after=1)]


def _compare(case: Case, model: RelevanceModel, texts: TermCache) -> None:
    found = case.by_id
    old = OldQuery.build(case.query, case.dense, case.keyword, found, case.baseline, case.period)
    new = Query.build(
        case.query, case.dense, case.keyword, found, case.baseline, case.period, texts
    )
    for name in ("terms", "query_found", "name_missing", "keyword_coverage", "top_z", "floor_z"):
        assert getattr(new, name) == getattr(old, name), name
    assert new.candidates == old.candidates
    pool = [found[k] for k in old.candidates]
    assert np.array_equal(direct_rows(new, pool), old_direct_rows(old, pool))

    kept = model.best_candidates(new, found)
    assert kept == old_best_candidates(model, old, found)
    windows = case.windows(kept, model.reads_before, model.reads_after)
    p_new = model.probabilities(new, kept, windows, case.size)
    p_old = old_probabilities(model, old, kept, windows, case.size)
    assert p_new.keys() == p_old.keys()
    for k, v in p_old.items():
        assert p_new[k] == pytest.approx(v, rel=0, abs=1e-9)

    options: dict[str, Any] = {"budget": case.budget, "threshold": case.threshold}
    hits = model.select(new, kept, windows, case.size, **options)
    expected = old_select(model, old, kept, windows, case.size, **options)
    assert [(h.message.id, [m.id for m in h.window]) for h in hits] == [
        (h.message.id, [m.id for m in h.window]) for h in expected
    ]
    for got, want in zip(hits, expected, strict=True):
        assert got.score == pytest.approx(want.score, rel=0, abs=1e-9)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_generated_searches_score_as_the_per_message_loops_did(case: Case) -> None:
    for model in _models():
        _compare(case, model, TermCache())


@given(case=cases())
@settings(max_examples=50, deadline=None)
def test_a_shared_term_cache_changes_nothing(case: Case) -> None:
    shared = TermCache(size=4)  # far fewer texts than the case: most are evicted
    for model in _models():
        _compare(case, model, shared)
        _compare(case, model, shared)


def test_context_rows_match_the_loop_on_a_conversation() -> None:
    thread = [
        StoredMessage("a", "t", "r", "assistant", "what is your dog called?", START, "{}", seq=0),
        StoredMessage("b", "t", "r", "user", "Biscuit, a beagle", START, "{}", seq=1),
        StoredMessage("c", "t", "r", "assistant", "lovely dog", START, "{}", seq=2),
        StoredMessage("d", "t", "r", "user", "the beagle loves walks?", START, "{}", seq=3),
    ]
    args: tuple[Any, ...] = (
        "dog called Biscuit",
        [("a", 0.8), ("c", 0.3)],
        [("a", 3.0), ("b", 1.5)],
        {m.id: m for m in thread},
        QueryBaseline(mean=0.05, spread=0.1, small_talk_margin=-1.0),
        None,
    )
    weights = np.arange(1.0, 7.0)
    new = context_rows(Query.build(*args), thread, {"t": thread}, weights)
    old = old_context_rows(OldQuery.build(*args), thread, {"t": thread}, weights)
    assert np.allclose(new, old, rtol=0, atol=1e-12)
    assert new[1, len(DIRECT) + 1] == new[1, len(DIRECT)] != 0.0  # "a" is a question


@given(
    places=st.lists(
        st.tuples(st.sampled_from(["t1", "t2", "t3"]), st.integers(0, 40)),
        min_size=1,
        max_size=60,
        unique=True,
    ),
    data=st.data(),
)
def test_neighbours_are_found_as_a_lookup_by_thread_and_seq(
    places: list[tuple[str, int]], data: st.DataObject
) -> None:
    from langchain_semantic_recall.relevance.features import _OFFSETS, _neighbours

    order = [
        StoredMessage(f"m{n}", thread, "r", "user", "x", START, "{}", seq=seq)
        for n, (thread, seq) in enumerate(places)
    ]
    own = data.draw(st.lists(st.integers(0, len(order) - 1), max_size=len(order)))
    at = {(m.thread_id, m.seq): i for i, m in enumerate(order)}
    expected = [
        [at.get((order[i].thread_id, order[i].seq + offset), len(order)) for offset in (-1, -2, 1)]
        for i in own
    ]
    got = _neighbours(order, np.asarray(own, dtype=np.intp), _OFFSETS)
    assert got.shape == (len(own), 3)
    assert got.tolist() == expected
