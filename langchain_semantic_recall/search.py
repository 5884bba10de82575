"""The search settings of one engine: mode, defaults per mode, ranking and windows (pure).

`SemanticRecall` resolves its search options once, into a `SearchPlan`; its `search` /
`asearch` do the I/O (embed, vector query, keyword query, windows) and hand the results
to the plan's pure `rank` and `hits`, so that sync and async share every decision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeAlias

from langchain_semantic_recall.embeddings import embedding_model_name
from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.fusion import NeighbourWeights, boost_period, fuse, spend_budget
from langchain_semantic_recall.options import (
    DEFAULT_CANDIDATES,
    DEFAULT_MESSAGE_BUDGET,
    DEFAULT_MESSAGE_RANGE,
    DEFAULT_TIME_BOOST,
    DEFAULT_TOP_K,
    HYBRID_MESSAGE_RANGE,
    HYBRID_TOP_K,
    KEYWORD_MESSAGE_RANGE,
    Budget,
    MessageRange,
    MessageRangeLike,
    SearchMode,
    check_count,
    check_search_mode,
    check_threshold,
    check_top_k,
    check_weight,
    to_message_range,
)
from langchain_semantic_recall.periods import Period, named_period
from langchain_semantic_recall.records import RecallHit, StoredMessage
from langchain_semantic_recall.relevance import (
    Query,
    QueryBaseline,
    RelevanceModel,
    TermCache,
    default_model,
)

ResolvedMode: TypeAlias = Literal["hybrid", "dense", "keyword"]


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """Resolved search settings (see `resolve`)."""

    mode: ResolvedMode
    top_k: int
    message_range: MessageRange
    message_budget: int | None
    threshold: float | None
    time_boost: float
    candidates: int
    weights: NeighbourWeights
    relevance: RelevanceModel
    """Hybrid mode's fitted relevance model (`relevance.model`); see `scorer`."""

    @property
    def scorer(self) -> RelevanceModel:
        """The relevance model with this plan's candidates (`top_k`) and window."""
        window = self.message_range
        return replace(
            self.relevance, candidates=self.top_k, before=window.before, after=window.after
        )

    @property
    def uses_vectors(self) -> bool:
        """Whether this mode queries the vector index (all but keyword)."""
        return self.mode != "keyword"

    @property
    def uses_keywords(self) -> bool:
        """Whether this mode runs keyword search (all but dense)."""
        return self.mode != "dense"

    @property
    def calibrated(self) -> bool:
        """Whether scores are probabilities of relevance (hybrid mode; `relevance`)."""
        return self.mode == "hybrid"

    @property
    def dense_k(self) -> int:
        """Vectors to ask for: `top_k` alone in dense mode, a candidate pool in hybrid."""
        return self.top_k if self.mode == "dense" else max(self.top_k, self.candidates)

    @property
    def keyword_k(self) -> int:
        """Keyword matches to ask for: a candidate pool (normalised over, then cut)."""
        return max(self.top_k, self.candidates)

    def rank(
        self, dense: Sequence[tuple[str, float]], keyword: Sequence[tuple[str, float]]
    ) -> list[tuple[str, float]]:
        """Every candidate as (message id, score), best first (cut with `top`).

        Dense mode: cosine similarity, below-threshold hits dropped (the original's).
        Keyword mode: BM25 scores min-max rescaled to [0, 1] over the candidates (relative
        to the query's best). Hybrid mode does not rank here (`relevance`).
        """
        if self.mode == "dense":
            return [hit for hit in dense if self.threshold is None or hit[1] >= self.threshold]
        return fuse([], keyword, keyword_weight=1.0)

    def query(
        self,
        query: str,
        dense: Sequence[tuple[str, float]],
        keyword: Sequence[tuple[str, float]],
        messages: Mapping[str, Sequence[StoredMessage]],
        baseline: QueryBaseline | None,
        *,
        period: Period | None,
        texts: TermCache | None = None,
    ) -> Query:
        """What hybrid search knows of `query` and its candidates before scoring them.

        `messages` maps candidate ids to windows holding them (`get_windows` with no
        neighbours); a candidate absent from it is dropped (deleted, or out of scope).
        `period`: the one the query names (`period`, worked out once per search).
        `texts` is the engine's cache of the messages' terms (None: this query's own).
        """
        found = {m.id: m for window in messages.values() for m in window}
        return Query.build(query, dense, keyword, found, baseline, period, texts)

    def relevant(
        self,
        query: Query,
        kept: Sequence[str],
        windows: Mapping[str, Sequence[StoredMessage]],
        scope_size: int,
    ) -> list[RecallHit]:
        """The hybrid hits: as many of the likeliest messages as the evidence earns."""
        return self.scorer.select(
            query,
            kept,
            windows,
            scope_size,
            budget=self.message_budget,
            threshold=self.threshold,
        )

    def period(self, query: str, now: datetime | None = None) -> Period | None:
        """The period the query names, when time-aware ranking applies (not in dense mode)."""
        if self.mode == "dense" or not self.time_boost:
            return None
        return named_period(query, now)

    def boost(
        self,
        ranked: Sequence[tuple[str, float]],
        messages: Mapping[str, Sequence[StoredMessage]],
        period: Period,
    ) -> list[tuple[str, float]]:
        """Candidates written within `period` gain `time_boost`; best first again."""
        return boost_period(ranked, messages, period, self.time_boost)

    def top(self, ranked: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
        """The first `top_k` of `ranked` (sorted best first)."""
        return list(ranked[: self.top_k])

    def hits(
        self,
        ranked: Sequence[tuple[str, float]],
        windows: Mapping[str, Sequence[StoredMessage]],
    ) -> list[RecallHit]:
        """Hits with their windows, cut to the message budget."""
        return spend_budget(ranked, windows, weights=self.weights, budget=self.message_budget)


def resolve(
    *,
    search_mode: SearchMode | str,
    keyword_search: bool,
    top_k: int | None,
    message_range: MessageRangeLike | None,
    message_budget: Budget,
    threshold: float | None,
    time_boost: float = DEFAULT_TIME_BOOST,
    candidates: int = DEFAULT_CANDIDATES,
) -> SearchPlan:
    """Validate the search options and fill in the defaults of the chosen mode.

    `"auto"` becomes `"hybrid"` when the storage has keyword search, else `"dense"`.
    Unset options (`top_k` / `message_range` None, `message_budget="auto"`) take
    the mode's defaults: in dense mode the original's (top 4, one message either side,
    no budget); in hybrid mode the relevance model's (20 candidates, windows of 2 before
    to 3 after, 15 messages at full evidence); in keyword mode 12 hits, the hit and 2
    after, 15 messages.
    """
    mode = check_search_mode(search_mode)
    if mode == "auto":
        mode = "hybrid" if keyword_search else "dense"
    if mode != "dense" and not keyword_search:
        raise InvalidOptionError(
            f"search_mode={mode!r} needs a storage with keyword search (SQLite, in-memory or "
            "PostgreSQL); use search_mode='dense' (or 'auto') with this storage"
        )
    checked_threshold = check_mode_threshold(mode, threshold)
    boost = check_weight("time_boost", time_boost)
    if mode == "dense" and boost not in (0.0, DEFAULT_TIME_BOOST):
        raise InvalidOptionError(
            f"time_boost={time_boost!r} has no effect in dense mode (vector similarity only): "
            "drop it, or use search_mode='hybrid' or search_mode='keyword', where it ranks "
            "by period"
        )
    dense = mode == "dense"
    default_range = {
        "dense": to_message_range(DEFAULT_MESSAGE_RANGE),
        "hybrid": HYBRID_MESSAGE_RANGE,
    }
    window = to_message_range(
        message_range
        if message_range is not None
        else default_range.get(mode, KEYWORD_MESSAGE_RANGE)
    )
    if message_budget == "auto":
        budget = None if dense else DEFAULT_MESSAGE_BUDGET
    else:
        budget = None if message_budget is None else check_count("message_budget", message_budget)
    return SearchPlan(
        mode=mode,
        top_k=check_top_k(top_k if top_k is not None else _default_top_k(mode)),
        message_range=window,
        message_budget=budget,
        threshold=checked_threshold,
        time_boost=boost,
        candidates=check_count("candidates", candidates),
        weights=NeighbourWeights.linear(window.before, window.after),
        relevance=default_model(),
    )


def check_mode_threshold(mode: str, threshold: object) -> float | None:
    """`threshold` checked (`check_threshold`), and refused in keyword mode.

    Raises:
        InvalidOptionError: not a score in [0, 1], or any threshold in keyword mode.
    """
    checked = check_threshold(threshold)
    if mode == "keyword" and checked is not None:
        raise InvalidOptionError(
            "keyword mode's scores are relative to the query's best match, so a threshold "
            "means nothing there; drop the threshold or use search_mode='hybrid' (calibrated "
            "relevance) or search_mode='dense' (cosine similarity)"
        )
    return checked


def _default_top_k(mode: str) -> int:
    """Dense: the original's 4; hybrid: the relevance model's candidates; keyword: 12."""
    if mode == "hybrid":
        return default_model().candidates
    return DEFAULT_TOP_K if mode == "dense" else HYBRID_TOP_K


_NAMED: set[str] = set()
"""The notes already logged: one per embedding model (not per embedder, which an engine
built per request makes anew)."""


def warn_if_unfitted(plan: SearchPlan, embeddings: Any, logger: logging.Logger) -> None:
    """Say once per embedding model when hybrid search's numbers were not fitted for it."""
    if not plan.calibrated:
        return
    dimension = getattr(embeddings, "dimension", None)
    note = plan.relevance.unfitted_note(
        embedding_model_name(embeddings), dimension if isinstance(dimension, int) else None
    )
    if note is None or note in _NAMED:
        return
    _NAMED.add(note)
    logger.warning(
        "hybrid search's relevance model is %s (docs/quality.md, 'Other embedders'); "
        "stats() says so too",
        note,
    )
