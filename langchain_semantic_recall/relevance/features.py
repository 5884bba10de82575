"""What relevance knows of a query and its candidates (pure, no I/O).

Two kinds of row:

- **direct** (`DIRECT`): one per candidate (a keyword or vector match): how well the message
  itself matches the query. Every similarity is measured against the query's baseline
  (`reference.QueryBaseline`), so nothing here depends on the embedder's scale.
- **context** (`CONTEXT`): one per message in reach of the best candidates: its own direct
  row plus how well its neighbours match (`match`), so a message earns its place by what it
  and its neighbours hold, not by sitting next to a hit. The reply to a matching question
  (`match_prev_question`) is the classic case.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from langchain_semantic_recall.keywords import index_terms, query_terms, term_set
from langchain_semantic_recall.periods import Period
from langchain_semantic_recall.records import StoredMessage
from langchain_semantic_recall.relevance.reference import QueryBaseline

__all__ = [
    "CONTEXT",
    "CONVERSATIONAL",
    "DIRECT",
    "MATCH",
    "Query",
    "content_terms",
    "context_rows",
    "direct_rows",
    "is_question",
    "terms_of",
]

DIRECT: tuple[str, ...] = (
    "z",  # cosine in spreads above unrelated text (the pool's lowest when not a vector match)
    "log1p_bm25",  # raw BM25 (0 when not a keyword match)
    "coverage",  # share of the query's content terms in the message
    "question",  # the message is a question
    "user",  # written by the user (used only to choose among neighbours, see the model)
    "log1p_length",  # terms of the message
    "z_relative",  # z minus the query's best z
    "bm25_relative",  # BM25 over the query's best BM25
    "in_period",  # written in a period the query names
    "query_found",  # share of the query's content terms found in any candidate
    "name_missing",  # a capitalised name of the query is in no candidate
    "log1p_terms",  # content terms of the query
    "in_keyword",  # a keyword match
    "in_dense",  # a vector match
    "log1p_top_bm25",  # the query's best BM25
    "bm25_found",  # log1p_bm25 x query_found: keywords count when the query's words are here
    "bm25_relative_found",  # bm25_relative x query_found
    "z_found",  # z x query_found
)

MATCH: tuple[int, ...] = tuple(
    DIRECT.index(name)
    for name in ("z", "log1p_bm25", "coverage", "z_relative", "bm25_relative", "in_period")
)
"""The columns that say how well a message matches (not what kind of message it is)."""

CONTEXT: tuple[str, ...] = (
    *DIRECT,
    "match_prev",  # how well the message before matches
    "match_prev_question",  # ... when it is a question (this message may be its answer)
    "match_prev2",  # two before
    "match_prev2_question",
    "match_next",  # the message after
)

CONVERSATIONAL: frozenset[str] = frozenset(
    index_terms(
        "hi hello hey hiya howdy yo greetings morning afternoon evening night good goodbye "
        "bye see later soon cheers thanks thank thx ty appreciate welcome please sorry "
        "pardon excuse ok okay alright right sure yes yeah yep yup no nope nah maybe fine "
        "great cool nice awesome perfect wow lol haha hmm um uh oh ah well so anyway got it "
        "sounds understood agreed indeed exactly true really how going doing what up you me "
        "i can could would will help question continue go on tell more think mind never "
        "again there here that this something anything"
    )
)
"""Stems of greetings, thanks, acknowledgements and the like: not content terms."""

_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_TRAILING_NOTE = re.compile(r"\s*\[[^\]]*\]\s*$")


def content_terms(query: str) -> list[str]:
    """The query's distinct terms that are not `CONVERSATIONAL`."""
    return [term for term in query_terms(query) if term not in CONVERSATIONAL]


def is_question(text: str) -> bool:
    """Whether `text` ends with a question mark (a trailing `[...]` note ignored)."""
    text = text.rstrip()
    if text.endswith("]"):
        text = _TRAILING_NOTE.sub("", text).rstrip()
    return text.endswith("?")


@lru_cache(maxsize=8192)
def terms_of(text: str) -> frozenset[str]:
    """A message's distinct index terms (cached: the same messages come back often)."""
    return term_set(text)


@dataclass(frozen=True, slots=True)
class Query:
    """One query's candidates and what is known of it before any message is scored."""

    terms: tuple[str, ...]
    """Its content terms (empty: nothing to score)."""
    baseline: QueryBaseline | None
    """Its similarity to unrelated text (None: no vector half, e.g. no dense matches)."""
    cosines: Mapping[str, float]
    """Vector matches: message id -> cosine."""
    bm25: Mapping[str, float]
    """Keyword matches: message id -> raw BM25."""
    period: Period | None
    query_found: float
    name_missing: float
    keyword_coverage: float = 0.0
    """The largest share of the query's content terms that one keyword match holds."""
    rows: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    """Direct rows already worked out for this query (candidates, then their neighbours)."""

    @classmethod
    def build(  # noqa: PLR0917 - one argument per source of facts
        cls,
        query: str,
        dense: Sequence[tuple[str, float]],
        keyword: Sequence[tuple[str, float]],
        messages: Mapping[str, StoredMessage],
        baseline: QueryBaseline | None,
        period: Period | None,
    ) -> Query:
        """Gather the query-level facts over the candidates that `messages` holds."""
        terms = tuple(content_terms(query))
        cosines = {k: v for k, v in dense if k in messages}
        bm25 = {k: v for k, v in keyword if k in messages}
        anywhere = frozenset().union(*(terms_of(messages[k].text) for k in {*cosines, *bm25}))
        names = [term for word in _NAME.findall(query) for term in index_terms(word)]
        covered = (len(terms_of(messages[k].text).intersection(terms)) for k in bm25)
        return cls(
            terms=terms,
            baseline=baseline,
            cosines=cosines,
            bm25=bm25,
            period=period,
            query_found=sum(t in anywhere for t in terms) / len(terms) if terms else 0.0,
            name_missing=float(any(name not in anywhere for name in names)),
            keyword_coverage=max(covered, default=0) / len(terms) if terms else 0.0,
        )

    @property
    def candidates(self) -> list[str]:
        """Every candidate id, sorted (ties in scores keep this order)."""
        return sorted({*self.cosines, *self.bm25})

    def z(self, cosine: float) -> float:
        """`cosine` in this query's spreads above unrelated text (0 without a baseline)."""
        return float(self.baseline.z(cosine)) if self.baseline is not None else 0.0

    @property
    def floor_z(self) -> float:
        """The z of a message outside the vector matches: at most the pool's lowest."""
        return self.z(min(self.cosines.values())) if self.cosines else 0.0

    @property
    def top_z(self) -> float:
        """The best vector match's z (the floor when there is none)."""
        return self.z(max(self.cosines.values())) if self.cosines else self.floor_z


def direct_rows(query: Query, messages: Sequence[StoredMessage]) -> np.ndarray:
    """One `DIRECT` row per message (a candidate or a neighbour of one), worked out once."""
    missing = [m for m in messages if m.id not in query.rows]
    if missing:
        query.rows.update(zip((m.id for m in missing), _rows(query, missing), strict=True))
    if not messages:
        return np.empty((0, len(DIRECT)))
    return np.stack([query.rows[m.id] for m in messages])


def _rows(query: Query, messages: Sequence[StoredMessage]) -> np.ndarray:
    terms = query.terms
    top_bm25 = max(query.bm25.values(), default=0.0)
    top_z, floor_z = query.top_z, query.floor_z
    rows = np.empty((len(messages), len(DIRECT)))
    for i, message in enumerate(messages):
        bag = terms_of(message.text)
        cosine = query.cosines.get(message.id)
        z = query.z(cosine) if cosine is not None else floor_z
        bm25 = query.bm25.get(message.id, 0.0)
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
            float(message.id in query.bm25),
            float(cosine is not None),
            math.log1p(top_bm25),
            log_bm25 * found,
            relative * found,
            z * found,
        )
    return rows


def context_rows(
    query: Query,
    targets: Sequence[StoredMessage],
    threads: Mapping[str, Sequence[StoredMessage]],
    match_weights: np.ndarray,
) -> np.ndarray:
    """One `CONTEXT` row per target message.

    Args:
        query: The query.
        targets: The messages to score.
        threads: Thread id -> the messages read around the targets (at least two before
            and one after each target, where the thread has them).
        match_weights: Weights of the `MATCH` columns: a neighbour's match is its
            weighted sum, relative to a message that matches nothing.
    """
    known = {m.id: m for messages in threads.values() for m in messages}
    at = {(m.thread_id, m.seq): m for m in known.values()}
    direct = dict(zip(known, direct_rows(query, list(known.values())), strict=True))
    nothing = np.zeros(len(DIRECT))
    nothing[DIRECT.index("z")] = query.floor_z
    nothing[DIRECT.index("z_relative")] = query.floor_z - query.top_z
    columns = list(MATCH)
    baseline = float(nothing[columns] @ match_weights)

    def neighbour(message: StoredMessage, offset: int) -> tuple[float, float]:
        other = at.get((message.thread_id, message.seq + offset))
        if other is None:  # the thread has no message there (or it was not read)
            return 0.0, 0.0
        match = float(direct[other.id][columns] @ match_weights) - baseline
        return match, match * float(is_question(other.text))

    rows = np.empty((len(targets), len(CONTEXT)))
    for i, message in enumerate(targets):
        prev, prev_question = neighbour(message, -1)
        prev2, prev2_question = neighbour(message, -2)
        after, _ = neighbour(message, 1)
        rows[i, : len(DIRECT)] = direct[message.id]
        rows[i, len(DIRECT) :] = (prev, prev_question, prev2, prev2_question, after)
    return rows
