"""0.2.0's hybrid scoring, kept only as the baseline `quality_relevance.py` prints beside the
shipped model (the package no longer uses it). What follows is its original description.

Calibrated relevance for hybrid search: absolute scores, the same for every query.

Hybrid search scores each candidate (a keyword or vector match) with logistic models over
features known at search time (`FEATURES`: raw BM25 and BM25 relative to the query's best,
cosine similarity, query length, whether the candidate is a question, whether it was
written in a period the query names, how many of the query's terms it and the other
candidates hold, whether a name in the query appears anywhere). There is one model per
position of the window (`OFFSET_MODELS`, from 2 messages before the candidate to 3 after
it), so every message that recall may return gets **the estimated probability that this
message is evidence for the query** (a message reachable from several candidates keeps
its best). A score of 0.5 means an even chance; 0.1 one in ten. Most messages score far
below 0.5, since a question usually has one to three evidence messages among hundreds.

Per position is what makes facts beat questions: a question that repeats the query is
rarely evidence itself (the `question` weight is negative at offset 0) but its reply
often is (positive at offset 1), so the reply is spent, not the question.

The default gate (`DEFAULT_GATE`, 0.008) drops the messages whose chance is below 0.8%:
chosen leave-one-conversation-out so that questions about another conversation recall
fewer than 2 messages on average (`docs/quality.md`). A query made only of conversational
words (`"hi"`, `"thanks"`, `"ok"`, `"can you help me?"`: `CONVERSATIONAL`) has no content
term, so nothing is scored and recall stays silent.

The coefficients were fit by `benchmarks/quality_cv.py` (logistic regression by
iteratively reweighted least squares, L2 1.0, numpy) on the candidates of the 5
conversations of locomo-dev: each question asked of its own conversation (label: the
message at that offset is evidence) and of another conversation (all labels 0). The
leave-one-conversation-out numbers are in `docs/quality.md`. Pure, no I/O; numpy
(already a dependency) evaluates the models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from langchain_semantic_recall.keywords import index_terms, term_set
from langchain_semantic_recall.periods import Period
from langchain_semantic_recall.records import RecallHit, StoredMessage
from langchain_semantic_recall.relevance.features import (  # the same rules as 0.2.0's
    _NAME,
    CONVERSATIONAL,
    content_terms,
    is_question,
)

__all__ = [
    "CONVERSATIONAL",
    "DEFAULT_GATE",
    "FEATURES",
    "OFFSET_MODELS",
    "REFERENCE_SIZE",
    "SMALL_SCOPE_STRENGTH",
    "STRONG_MEANING",
    "STRONG_MEANING_FLOOR",
    "Model",
    "candidates",
    "clear_term_cache",
    "content_terms",
    "feature_matrix",
    "features",
    "is_question",
    "prepare",
    "prior_shift",
    "relevance",
]

REFERENCE_SIZE = 369
"""Messages of the smallest conversation the models were fit on (locomo-dev's conv-30)."""

SMALL_SCOPE_STRENGTH = 0.5
"""Strength of `prior_shift`, measured by `benchmarks/quality_small.py` (each LoCoMo session
alone as the memory, 13-43 messages): 0 / 0.25 / 0.5 / 0.75 / 1 gave recall 0.949 /
0.967 / 0.980 / 0.987 / 0.988 and 0.05 / 0.17 / 0.52 / 1.18 / 2.54 messages per question
asked of another conversation's session; 0.5 is the knee."""

DEFAULT_GATE = 0.008
"""Hybrid `threshold` default (a probability): chosen leave-one-conversation-out."""

FEATURES: tuple[str, ...] = (
    "log1p_bm25",  # raw BM25 of the candidate (0 when not a keyword match)
    "bm25_relative",  # its BM25 over the query's best BM25
    "in_keyword",  # 1 when a keyword match
    "cosine",  # cosine similarity (the pool's lowest when not a vector match)
    "in_dense",  # 1 when a vector match
    "cosine_relative",  # cosine minus the query's best cosine
    "log1p_terms",  # content terms of the query
    "question",  # the candidate is a question
    "in_period",  # written in a period the query names
    "coverage",  # share of the query's content terms in the candidate
    "query_found",  # share of the query's content terms found in any candidate
    "log1p_top_bm25",  # the query's best BM25
    "log1p_length",  # terms of the candidate
    "name_missing",  # a capitalised name of the query is in no candidate
)

STRONG_MEANING = 0.55
"""Cosine similarity from which a vector match counts as a strong match on meaning."""

STRONG_MEANING_FLOOR = 0.011
"""Least score of a strong match on meaning (at its own position).

The models are linear in the cosine and fit on 400-700-message conversations, where a
match on meaning alone is rarely evidence: they gave a 20-message memory's "I'm allergic
to peanuts" 0.002 for "remember my allergy?", and the gate hid it. Measured on
locomo-dev (`benchmarks/quality_cv.py` candidates), 30 of 2,743 vector-only candidates of
cosine >= 0.55 were evidence (0.011; 0.003-0.042 per conversation), and questions asked
of another conversation met 0.011 such candidates each: the floor is that measured rate,
above the default gate, so strong meaning matches pass it and weak ones do not.
"""


_IN_KEYWORD, _IN_DENSE = FEATURES.index("in_keyword"), FEATURES.index("in_dense")
_COSINE = FEATURES.index("cosine")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A calibrated candidate: for each offset in its thread, the chance evidence is there.

    `offsets[k]` estimates the probability that the message `k` places after the
    candidate (before it when negative; 0 is the candidate itself) is evidence for the
    query; `score` is the best of them.
    """

    id: str
    offsets: Mapping[int, float]

    @property
    def score(self) -> float:
        """The best probability of any position of its window."""
        return max(self.offsets.values(), default=0.0)


def spend_calibrated(
    hits: Sequence[Candidate],
    windows: Mapping[str, Sequence[StoredMessage]],
    *,
    threshold: float,
    budget: int | None,
) -> list[RecallHit]:
    """The messages likeliest to be evidence, at least `threshold`, at most `budget`.

    Every message within reach of a hit (an offset the hit has a probability for) scores
    that probability; a message near several hits keeps its best. Messages below
    `threshold` are dropped, then the best `budget` are kept (ties: first seen).

    Returns:
        One hit per likeliest message, best first: its `message` is the best-scoring kept
        message of a candidate's window (the candidate itself, or the reply after a
        question), its `score` that message's probability, its `window` the kept
        messages of the candidate's window in thread order (windows of candidates
        whose best message is the same are merged).
    """
    reached: list[list[tuple[StoredMessage, float]]] = []
    best: dict[str, tuple[float, int]] = {}  # message id -> (score, first seen)
    for hit in hits:
        window = windows.get(hit.id) or ()
        match = next((m for m in window if m.id == hit.id), None)
        if match is None:
            continue
        near = [
            (m, hit.offsets[m.seq - match.seq]) for m in window if m.seq - match.seq in hit.offsets
        ]
        reached.append(near)
        for message, value in near:
            known = best.get(message.id)
            if value >= threshold and (known is None or value > known[0]):
                best[message.id] = (value, known[1] if known else len(best))
    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1]))
    kept = {message_id: value for message_id, (value, _) in ranked[:budget]}
    merged: dict[str, tuple[StoredMessage, dict[str, StoredMessage]]] = {}
    for near in reached:
        window = [m for m, _ in near if m.id in kept]
        if not window:
            continue
        top = min(window, key=lambda m: (-kept[m.id], best[m.id][1]))
        _, members = merged.setdefault(top.id, (top, {}))
        members.update((m.id, m) for m in window)
    out = [
        RecallHit(
            message=top,
            score=kept[top.id],
            window=tuple(sorted(members.values(), key=lambda m: m.seq)),
        )
        for top, members in merged.values()
    ]
    return sorted(out, key=lambda hit: (-hit.score, best[hit.message.id][1]))


@dataclass(frozen=True, slots=True)
class Model:
    """A logistic model over `FEATURES`: `1 / (1 + exp(-(intercept + weights . x)))`."""

    intercept: float
    weights: tuple[float, ...]

    def probability(self, row: Sequence[float]) -> float:
        """The calibrated score of one feature row."""
        z = self.intercept + sum(w * x for w, x in zip(self.weights, row, strict=True))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


# Fit by benchmarks/quality_cv.py on all 5 conversations of locomo-dev (see the docstring):
# offset -> model of "the message that many places after the candidate is evidence".
OFFSET_MODELS: Mapping[int, Model] = {
    -2: Model(-8.938, (0.354, 0.495, -0.193, 3.318, 0.984, 0.445, -0.452, -0.305, 2.720, 0.446, 1.430, 0.144, 0.249, -1.420)),  # noqa: E501
    -1: Model(-6.694, (1.956, 0.782, -1.253, 2.792, 0.842, -2.187, -1.517, 0.967, 2.911, -3.014, 1.888, -0.188, 0.035, -1.691)),  # noqa: E501
    0: Model(-8.755, (1.384, 2.301, -2.406, 2.854, 0.821, 3.161, -0.973, -0.740, 2.995, 1.638, 0.021, 0.070, 1.121, -1.725)),  # noqa: E501
    1: Model(-6.373, (2.368, 1.867, -2.186, 3.674, 0.608, -1.285, -1.396, 2.072, 2.509, -2.694, 1.352, -0.238, -0.446, -1.908)),  # noqa: E501
    2: Model(-10.399, (0.841, 0.332, -0.597, 3.299, 0.879, 0.622, -0.310, -0.194, 2.316, 0.939, 0.904, 0.046, 0.818, -1.647)),  # noqa: E501
    3: Model(-7.814, (0.964, 1.399, -0.731, 3.381, 0.196, -1.661, -0.407, 0.915, 2.097, -1.910, 1.716, -0.315, -0.232, -1.585)),  # noqa: E501
}  # fmt: skip


def features(
    query: str,
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    messages: Mapping[str, StoredMessage],
    period: Period | None,
) -> list[tuple[str, list[float]]]:
    """Every candidate of `dense` and `keyword` with its feature row (`FEATURES` order).

    Args:
        query: The query text.
        dense: (message id, cosine) of the vector matches (one per message).
        keyword: (message id, raw BM25) of the keyword matches.
        messages: Candidate id -> its stored message; candidates missing here are dropped
            (deleted, or out of scope).
        period: The period the query names, if time-aware ranking applies.

    Returns:
        (message id, row) sorted by id; empty when the query has no content term.
    """
    ids, x = feature_matrix(query, dense, keyword, messages, period)
    return list(zip(ids, x.tolist(), strict=True))


def feature_matrix(
    query: str,
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    messages: Mapping[str, StoredMessage],
    period: Period | None,
) -> tuple[list[str], np.ndarray]:
    """`features` as the candidate ids (sorted) and one matrix row each (what search uses)."""
    terms = content_terms(query)
    cosines, bm25 = dict(dense), dict(keyword)
    ids = sorted(key for key in {*cosines, *bm25} if key in messages) if terms else []
    if not ids:
        return [], np.empty((0, len(FEATURES)))
    texts = [messages[key].text for key in ids]
    bags = [_terms(text) for text in texts]
    anywhere = frozenset().union(*bags)
    names = [term for word in _NAME.findall(query) for term in index_terms(word)]
    floor = min(cosines.values(), default=0.0)
    top_cosine = max(cosines.values(), default=0.0)
    top_bm25 = max(bm25.values(), default=0.0)
    score = np.array([bm25.get(key, 0.0) for key in ids])
    cosine = np.array([cosines.get(key, floor) for key in ids])
    columns: dict[str, float | list[float] | np.ndarray] = {
        "log1p_bm25": [math.log1p(value) for value in score.tolist()],
        "bm25_relative": score / top_bm25 if top_bm25 > 0 else np.zeros(len(ids)),
        "in_keyword": np.array([key in bm25 for key in ids], dtype=np.float64),
        "cosine": cosine,
        "in_dense": np.array([key in cosines for key in ids], dtype=np.float64),
        "cosine_relative": cosine - top_cosine,
        "log1p_terms": math.log1p(len(terms)),
        "question": np.array([is_question(text) for text in texts], dtype=np.float64),
        "in_period": np.array(
            [period is not None and messages[key].created_at in period for key in ids],
            dtype=np.float64,
        ),
        "coverage": np.array([len(bag.intersection(terms)) for bag in bags]) / len(terms),
        "query_found": sum(term in anywhere for term in terms) / len(terms),
        "log1p_top_bm25": math.log1p(top_bm25),
        "log1p_length": [math.log1p(len(bag)) for bag in bags],
        "name_missing": float(any(name not in anywhere for name in names)),
    }
    x = np.empty((len(ids), len(FEATURES)))  # math.log1p above: bit for bit as fit
    for column, name in enumerate(FEATURES):
        x[:, column] = columns[name]
    return ids, x


def relevance(
    query: str,
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    messages: Mapping[str, StoredMessage],
    period: Period | None,
    *,
    before: int,
    after: int,
    models: Mapping[int, Model] = OFFSET_MODELS,
    scope_size: int | None = None,
    limit: int | None = None,
) -> list[Candidate]:
    """The best `limit` candidates (all by default) with their calibrated probabilities.

    Best first, ties by id. Offsets from `-before` to `after` are scored; one beyond the
    models' reach uses the farthest model on its side. `scope_size` (messages searched)
    corrects the models' prior for scopes smaller than those they were fit on
    (`prior_shift`).
    """
    ids, x = feature_matrix(query, dense, keyword, messages, period)
    shift = 0.0 if scope_size is None else prior_shift(scope_size)
    return _ranked(ids, x, models, before=before, after=after, shift=shift, limit=limit)


def prior_shift(scope_size: int) -> float:
    """Log-odds a keyword match gains in a scope of `scope_size` messages.

    A question has about as many evidence messages in a small memory as in a big one, so
    the chance that a given match is evidence grows as the memory shrinks. The models
    learned the base rate of conversations of `REFERENCE_SIZE` messages or more; for a
    smaller scope the log-odds of a keyword match gain `SMALL_SCOPE_STRENGTH` times
    `log(REFERENCE_SIZE / scope_size)` (the usual prior correction of a logistic model,
    damped: a question asked of a memory that holds no answer gains too; 0 from
    `REFERENCE_SIZE` up, so nothing measured on whole conversations moves). Without it,
    a new user's 6-message memory hid "I'm allergic to peanuts" from "any peanut-free
    snack ideas?". Vector-only
    matches gain nothing: in a small memory every message is someone's nearest
    neighbour, and those are what would make recall speak when nothing is relevant.
    """
    if scope_size >= REFERENCE_SIZE:
        return 0.0
    return SMALL_SCOPE_STRENGTH * math.log(REFERENCE_SIZE / max(scope_size, 1))


def candidates(
    rows: Sequence[tuple[str, Sequence[float]]],
    models: Mapping[int, Model],
    *,
    before: int,
    after: int,
    shift: float = 0.0,
) -> list[Candidate]:
    """Feature rows (`features`) scored at each offset in reach, best first (ties by id).

    `shift` is added to the log-odds of keyword matches (`prior_shift`).

    A vector match of cosine `STRONG_MEANING` or more scores at least
    `STRONG_MEANING_FLOOR` itself (see there).
    """
    ordered = sorted(rows, key=lambda row: row[0])
    x = np.asarray([row for _, row in ordered], dtype=np.float64)
    ids = [key for key, _ in ordered]
    return _ranked(ids, x, models, before=before, after=after, shift=shift, limit=None)


def _ranked(
    ids: Sequence[str],
    x: np.ndarray,
    models: Mapping[int, Model],
    *,
    before: int,
    after: int,
    shift: float,
    limit: int | None,
) -> list[Candidate]:
    """`candidates` of feature matrix `x` (rows in the order of `ids`, which is sorted)."""
    if not ids:
        return []
    offsets = list(range(-before, after + 1))
    chosen = [models[_nearest(k, models)] for k in offsets]
    weights = np.array([m.weights for m in chosen], dtype=np.float64).T  # features x offsets
    intercepts = np.array([m.intercept for m in chosen], dtype=np.float64)
    z = x @ weights + intercepts + shift * x[:, [_IN_KEYWORD]]
    p = 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))
    strong = (x[:, _IN_DENSE] > 0) & (x[:, _COSINE] >= STRONG_MEANING)
    p[:, before] = np.where(strong, np.maximum(p[:, before], STRONG_MEANING_FLOOR), p[:, before])
    order = np.argsort(-p.max(axis=1), kind="stable")[:limit]  # stable: ties keep id order
    return [
        Candidate(ids[row], dict(zip(offsets, values, strict=True)))
        for row, values in zip(order.tolist(), p[order].tolist(), strict=True)
    ]


def prepare(texts: Iterable[str]) -> None:
    """Work out (and cache) what `relevance` will need of these candidates' texts.

    Hybrid search calls it on its keyword candidates while the vector index is queried,
    which takes that work off the search's critical path.
    """
    for text in texts:
        _terms(text)


@lru_cache(maxsize=8192)
def _terms(text: str) -> frozenset[str]:
    """A message's distinct index terms (cached: the same messages come back often)."""
    return term_set(text)


def clear_term_cache() -> None:
    """Forget what is cached of recent messages (a forget calls it: the keys are text)."""
    _terms.cache_clear()


def _nearest(offset: int, models: Mapping[int, Model]) -> int:
    side = [k for k in models if (k < 0) == (offset < 0)] or list(models)
    return min(side, key=lambda k: (abs(k - offset), k))


def select_020(  # noqa: PLR0917 - mirrors the old call's arguments
    query: str,
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    messages: Mapping[str, StoredMessage],
    period: Period | None,
    scope_size: int,
    window: Callable[[str, int, int], Sequence[StoredMessage]],
) -> list[str]:
    """The message ids 0.2.0's defaults returned (top 12, 2 before / 3 after, gate, 15)."""
    best = relevance(
        query,
        dense,
        keyword,
        messages,
        period,
        before=2,
        after=3,
        scope_size=min(scope_size, REFERENCE_SIZE),
        limit=12,
    )
    context = {c.id: window(c.id, 2, 3) for c in best}
    hits = spend_calibrated(best, context, threshold=DEFAULT_GATE, budget=15)
    return list(dict.fromkeys(m.id for hit in hits for m in hit.window))
