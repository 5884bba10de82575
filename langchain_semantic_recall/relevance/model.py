"""The relevance model: which past messages recall returns for a query, and how many.

Three steps, each with few numbers (fitted by `benchmarks/quality_relevance.py` on three
kinds of conversation, leave-one-dataset-out; stored in `data/relevance/<embedder>.json`):

1. **Candidates** (`direct`): every keyword and vector match gets a logistic score from its
   `features.DIRECT` row: how well it matches, measured against the query's similarity to
   unrelated text. The best `candidates` are kept.
2. **Messages** (`context`): every message within `before`/`after` of a kept candidate gets
   `P(it is evidence for the query)` from its own row and its neighbours' match
   (`features.CONTEXT`): a reply to a matching question scores high; a long assistant reply
   that merely sits next to a hit does not. The prior is `1 / scope size` (a question has
   about as many evidence messages in a small memory as in a big one).
3. **How many** (`evidence`): recall spends its budget in proportion to the evidence that
   something in this memory is relevant: nothing when the best vector match is no more than
   `silent_below` spreads above what unrelated text scores (or the turn is small talk), the
   whole budget from `full_from` up, in proportion between. Both are counted above what
   the best of the memory's messages would score if none were related (`size_weight`
   times `sqrt(2 ln N)` spreads for N messages: the best of N draws), so a small memory
   needs less evidence than a big one. A name the query asks about
   that no candidate mentions counts `name_penalty` spreads against; one stored message
   holding every content word of the query (two or more) is full evidence.

The fitted numbers hold for the embedder and keyword settings named in the file
(`fitted_for`). With another embedder the engine warns once and uses the same model: every
input it takes from the embedder is a z-score against the embedder's own similarity to
unrelated text, so no raw similarity (and no rescaling of one) changes what it does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from langchain_semantic_recall.records import RecallHit, StoredMessage
from langchain_semantic_recall.relevance.features import (
    CONTEXT,
    DIRECT,
    MATCH,
    Query,
    context_rows,
    direct_rows,
)

__all__ = [
    "DEFAULT_MODEL_FILE",
    "Evidence",
    "FittedFor",
    "RelevanceModel",
    "default_model",
    "relevance_note",
]

DEFAULT_MODEL_FILE = "all-MiniLM-L6-v2.json"
"""The shipped model: fitted for the local default embedder."""


@dataclass(frozen=True, slots=True)
class FittedFor:
    """What the numbers were fitted with: another embedder or keyword setting is untested."""

    embedder: str
    """The embedding model's name (as `embeddings.embedding_model_name` reports it)."""
    dimension: int
    keywords: Mapping[str, Any]
    """The keyword search the BM25 features came from (k1, b, stemming)."""

    def matches(self, model_name: str, dimension: int) -> bool:
        """Whether an embedder of this name and dimension is the one fitted for.

        The name without its owner (`sentence-transformers/`), whole: a fine-tuned
        `all-MiniLM-L6-v2-finetuned` ranks differently, and is told so.
        """
        short = model_name.rsplit("/", 1)[-1].lower()
        return dimension == self.dimension and short == self.embedder.lower()


@dataclass(frozen=True, slots=True)
class Evidence:
    """How many messages to spend, from the evidence that anything is relevant."""

    silent_below: float
    """The best vector match's z at or below which recall is silent."""
    full_from: float
    """The z from which the whole budget is spent (a share in proportion between)."""
    name_penalty: float
    """Spreads counted against a query that names someone no candidate mentions."""
    small_talk_margin: float
    """A turn of at most `small_talk_terms` content terms whose nearest small-talk example
    is this much closer than its nearest unrelated sentence is small talk."""
    small_talk_terms: int = 3
    whole_query_terms: int = 2
    """A keyword match holding every content term of a query of at least this many terms
    is full evidence, whatever the embedder says (a ticket number, a rare name)."""
    size_weight: float = 0.0
    """Spreads of `sqrt(2 ln N)` (N: messages in the scope searched, after any filter)
    counted against the best match: how the best of N unrelated messages grows, in z,
    when similarities to unrelated text are roughly normal (a little above its expected
    value; `silent_below` and `full_from` absorb the difference). 1.0 by that reasoning
    (not fitted); 0.0 in data files written before it, which keep their rule."""

    def share(self, query: Query, scope_size: int) -> float:
        """The share of the budget to spend on `query`, in [0, 1].

        Args:
            query: The query.
            scope_size: Messages in the scope searched (fewer than 2 count as 2).
        """
        if self.is_small_talk(query):
            return 0.0
        if len(query.terms) >= self.whole_query_terms and query.keyword_coverage >= 1.0:
            return 1.0  # whatever the vector half found, or if it found nothing
        if query.baseline is None or not query.cosines:
            return 0.0
        chance = self.size_weight * math.sqrt(2.0 * math.log(max(2, scope_size)))
        strength = query.top_z - self.name_penalty * query.name_missing - chance
        span = self.full_from - self.silent_below
        return min(1.0, max(0.0, (strength - self.silent_below) / span))

    def is_small_talk(self, query: Query) -> bool:
        """Whether `query` is small talk.

        It is when it has no content term, or when it is close to small-talk turns,
        unless it asks about the one asking (`features.asks_about_speaker`) and the user
        said something nearer to it than any small-talk turn
        (`Query.said_nearer_than_small_talk`): "What's my name?" sits nearer small talk
        than unrelated text, as "How's my day going?" does, but "my name is Priya" is
        nearer to it still.
        """
        if not query.terms:
            return True
        return (
            query.baseline is not None
            and len(query.terms) <= self.small_talk_terms
            and query.baseline.small_talk_margin >= self.small_talk_margin
            and not (query.about_speaker and query.said_nearer_than_small_talk)
        )


@dataclass(frozen=True, slots=True)
class RelevanceModel:
    """The fitted numbers: candidate and message weights (intercept first), the budget rule.

    Load with `default_model()` or `from_json`.
    """

    fitted_for: FittedFor
    direct: tuple[float, ...]
    context: tuple[float, ...]
    evidence: Evidence
    candidates: int = 20
    before: int = 2
    after: int = 3
    size_cap: int = 5000
    """Scopes are counted up to this many messages (the prior's `1 / size` stops there)."""
    size_floor: int = 40
    """The bar for silence counts smaller scopes as this many messages: the smallest
    memory the development sets hold, below which its chance term is not extrapolated
    (counted as 2 messages, a memory of two recalled them for "Tell me a joke.")."""

    def __post_init__(self) -> None:
        if len(self.direct) != len(DIRECT) + 1 or len(self.context) != len(CONTEXT) + 1:
            raise ValueError(
                f"a relevance model needs {len(DIRECT) + 1} direct and {len(CONTEXT) + 1} "
                f"context weights, got {len(self.direct)} and {len(self.context)}"
            )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RelevanceModel:
        """Read the data file's content (see `to_json`)."""
        fitted = data["fitted_for"]
        return cls(
            fitted_for=FittedFor(
                embedder=str(fitted["embedder"]),
                dimension=int(fitted["dimension"]),
                keywords=dict(fitted["keywords"]),
            ),
            direct=tuple(_weights(data["direct"], DIRECT)),
            context=tuple(_weights(data["context"], CONTEXT)),
            evidence=Evidence(**data["evidence"]),
            **{k: int(data[k]) for k in _SIZES if k in data},
        )

    def to_json(self) -> dict[str, Any]:
        """The data file's content: weights by feature name, so a reader can check them."""
        return {
            "fitted_for": {
                "embedder": self.fitted_for.embedder,
                "dimension": self.fitted_for.dimension,
                "keywords": dict(self.fitted_for.keywords),
            },
            "direct": dict(zip(("intercept", *DIRECT), self.direct, strict=True)),
            "context": dict(zip(("intercept", *CONTEXT), self.context, strict=True)),
            "evidence": {
                "silent_below": self.evidence.silent_below,
                "full_from": self.evidence.full_from,
                "name_penalty": self.evidence.name_penalty,
                "small_talk_margin": self.evidence.small_talk_margin,
                "small_talk_terms": self.evidence.small_talk_terms,
                "whole_query_terms": self.evidence.whole_query_terms,
                "size_weight": self.evidence.size_weight,
            },
            "candidates": self.candidates,
            "before": self.before,
            "after": self.after,
            "size_cap": self.size_cap,
            "size_floor": self.size_floor,
        }

    @property
    def reads_before(self) -> int:
        """Messages to read before a kept candidate: its window plus two for context."""
        return self.before + 2

    @property
    def reads_after(self) -> int:
        """Messages to read after a kept candidate: its window plus one for context."""
        return self.after + 1

    def best_candidates(self, query: Query, messages: Mapping[str, StoredMessage]) -> list[str]:
        """The `candidates` best matches by the candidate model, best first (ties by id)."""
        ids = [k for k in query.candidates if k in messages]
        if not ids:
            return []
        x = direct_rows(query, [messages[k] for k in ids])
        logits = _linear(x, self.direct)
        order = np.argsort(-logits, kind="stable")[: self.candidates]
        return [ids[i] for i in order.tolist()]

    def probabilities(
        self,
        query: Query,
        kept: Sequence[str],
        windows: Mapping[str, Sequence[StoredMessage]],
        scope_size: int,
    ) -> dict[str, float]:
        """P(evidence) of every message within reach of a kept candidate.

        Args:
            query: The query.
            kept: The kept candidates (`best_candidates`).
            windows: Candidate id -> the messages read around it (`reads_before` before,
                `reads_after` after), in thread order.
            scope_size: Messages in the scope searched (counted up to `size_cap`).
        """
        threads: dict[str, list[StoredMessage]] = {}
        targets: dict[str, StoredMessage] = {}
        for candidate in kept:
            window = windows.get(candidate) or ()
            hit = next((m for m in window if m.id == candidate), None)
            if hit is None:
                continue
            low, high = hit.seq - self.before, hit.seq + self.after
            for message in window:
                threads.setdefault(message.thread_id, []).append(message)
                if low <= message.seq <= high:
                    targets.setdefault(message.id, message)
        if not targets:
            return {}
        weights = np.asarray(self.direct[1:], dtype=np.float64)[list(MATCH)]
        x = context_rows(query, list(targets.values()), threads, weights)
        logits = _linear(x, self.context) + math.log(self.prior(scope_size))
        p = 1.0 / (1.0 + np.exp(-np.clip(logits, -60.0, 60.0)))
        return _answers(dict(zip(targets, p.tolist(), strict=True)), targets, query)

    def select(
        self,
        query: Query,
        kept: Sequence[str],
        windows: Mapping[str, Sequence[StoredMessage]],
        scope_size: int,
        *,
        budget: int | None,
        threshold: float | None,
    ) -> list[RecallHit]:
        """The likeliest messages, as many as the evidence earns, grouped into hits.

        Args:
            query: The query.
            kept: The kept candidates, best first.
            windows: As for `probabilities`.
            scope_size: As for `probabilities`.
            budget: Most messages at full evidence (None: every message in reach).
            threshold: Least probability of a returned message. None (the default): the
                evidence decides how many (`Evidence.share`); a number replaces that rule
                (0 turns silence off: the whole budget, best first).

        Returns:
            One hit per kept candidate that keeps a message, best first: its `message` is
            the likeliest kept message of its window, its `score` that message's
            probability, its `window` the kept messages within `before` / `after` of that
            message (and of the candidate), in thread order.
        """
        share = self.share(query, threshold, scope_size)
        if share <= 0.0:
            return []
        p = self.probabilities(query, kept, windows, scope_size)
        # Likeliest first (`_tie`), then by id, on keys made in one pass rather than by a
        # key function called per message; ids are distinct, so the keys decide alone.
        order = sorted([(-round(chance, 9), message_id) for message_id, chance in p.items()])
        ranked = [(message_id, p[message_id]) for _, message_id in order]
        if threshold is not None:
            ranked = [item for item in ranked if item[1] >= threshold]
        else:  # an acknowledgement without what it answers (`_answers`): never
            ranked = [item for item in ranked if item[1] > 0.0]
        if budget is not None:
            ranked = ranked[: round(budget * share)]
        chosen = dict(ranked)
        riders: set[str] = set()  # acknowledgements (`_answers`); a threshold lists all
        if threshold is None:
            of = query.texts.of
            riders = {
                m.id for w in windows.values() for m in w if m.id in chosen and of(m.text).bare
            }
        return _group(kept, windows, chosen, self.before, self.after, riders=riders)

    def share(self, query: Query, threshold: float | None, scope_size: int) -> float:
        """The share of the budget to spend: the evidence's, or all of it under a threshold.

        A threshold replaces the evidence rule whole, small talk included: a query of
        stopwords only ("yes") is silent by the rule, and answered under `threshold=0`.
        `scope_size`: messages in the scope searched (counted up to `size_cap`).
        """
        if threshold is not None:
            return 1.0
        return self.evidence.share(query, self.counted(scope_size))

    def prior(self, scope_size: int) -> float:
        """P(evidence) of a message drawn at random: 1 / scope size (counted to `size_cap`)."""
        return 1.0 / max(1, min(scope_size, self.size_cap))

    def counted(self, scope_size: int) -> int:
        """`scope_size` as the bar for silence counts it: within `size_floor`, `size_cap`."""
        return max(self.size_floor, min(scope_size, self.size_cap))

    def describe(self) -> str:
        """One line naming what the numbers were fitted for."""
        fitted = self.fitted_for
        return f"fitted for {fitted.embedder} ({fitted.dimension}-d)"

    def unfitted_note(self, embedder: str, dimension: int | None) -> str | None:
        """What to tell a user of another embedder than the fitted one (None: the same).

        `dimension` None (not known yet) compares the name alone.
        """
        fitted = self.fitted_for
        if fitted.matches(embedder, fitted.dimension if dimension is None else dimension):
            return None
        sized = f"{embedder} ({dimension}-d)" if dimension is not None else embedder
        return (
            f"not fitted for {sized}: its numbers were {self.describe()}; similarities are "
            "read as z-scores against unrelated text, so the embedder's scale does not "
            "matter, but its ranking was not measured"
        )


_SIZES = ("candidates", "before", "after", "size_cap", "size_floor")
"""The data file's whole-number settings."""


def _group(
    kept: Sequence[str],
    windows: Mapping[str, Sequence[StoredMessage]],
    chosen: Mapping[str, float],
    before: int,
    after: int,
    *,
    riders: Set[str] = frozenset(),
) -> list[RecallHit]:
    """Chosen messages as hits: each message joins the first kept candidate in reach.

    A rider (an acknowledgement, `_answers`) joins only the hit that holds the message it
    answers, right before it: it never comes alone.
    """
    placed: set[str] = set()
    hits: list[RecallHit] = []
    for candidate in kept:
        if len(placed) == len(chosen):
            break  # every chosen message has its hit: the later candidates get none
        window = windows.get(candidate) or ()
        hit = next((m for m in window if m.id == candidate), None)
        if hit is None:
            continue
        mine = [
            m
            for m in window
            if m.id in chosen and m.id not in placed and -before <= m.seq - hit.seq <= after
        ]
        if riders:
            mine = _with_what_they_answer(mine, riders)
        if not mine:
            continue
        top = min(mine, key=lambda m: (-_tie(chosen[m.id]), m.id))
        # The hit is its likeliest message: its window keeps the range around it (the rest
        # may join a later candidate's window).
        mine = [m for m in mine if -before <= m.seq - top.seq <= after]
        if riders:  # again: the range may have cut off what one answers
            mine = _with_what_they_answer(mine, riders)
        placed.update(m.id for m in mine)
        hits.append(RecallHit(message=top, score=chosen[top.id], window=tuple(mine)))
    return sorted(hits, key=lambda h: (-_tie(h.score), h.message.id))


def _with_what_they_answer(window: list[StoredMessage], riders: Set[str]) -> list[StoredMessage]:
    """`window` (one thread, in order) less the riders without the message they answer."""
    kept: list[StoredMessage] = []
    for message in window:
        if message.id not in riders or (kept and kept[-1].seq == message.seq - 1):
            kept.append(message)
    return kept


def _answers(
    chances: dict[str, float], targets: Mapping[str, StoredMessage], query: Query
) -> dict[str, float]:
    """`chances`, a message without a content term ("yes") ranked after the one it answers.

    Such a message says something only of the message before it ("Are you vegan?" "yes"),
    so it is never likelier evidence than that message (a hair less: it never leads a hit
    in its place), and never comes without it.
    """
    of = query.texts.of
    bare = [m for m in targets.values() if of(m.text).bare]
    if not bare:  # most searches: nothing to do
        return chances
    place = {(m.thread_id, m.seq): m.id for m in targets.values()}
    for message in sorted(bare, key=lambda m: m.seq):  # "ok" "yes": the "yes" after the "ok"
        answered = place.get((message.thread_id, message.seq - 1))
        cap = 0.0 if answered is None else chances[answered] * _AFTER
        chances[message.id] = min(chances[message.id], cap)
    return chances


_AFTER = 1.0 - 1e-6
"""A hair under 1: after rounding (`_tie`), an acknowledgement ranks after what it answers."""


def _tie(probability: float) -> float:
    """The probability as ranking compares it (float noise never decides a tie, ids do)."""
    return round(probability, 9)


def _weights(values: Mapping[str, float], names: Sequence[str]) -> list[float]:
    missing = [n for n in ("intercept", *names) if n not in values]
    if missing:
        raise ValueError(f"the relevance model file lacks weights for {missing}")
    return [float(values[n]) for n in ("intercept", *names)]


def _linear(x: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    return np.asarray(x @ w[1:] + w[0], dtype=np.float64)


@cache
def default_model() -> RelevanceModel:
    """The shipped model (`DEFAULT_MODEL_FILE`), read once."""
    text = (
        resources.files("langchain_semantic_recall")
        .joinpath("data", "relevance", DEFAULT_MODEL_FILE)
        .read_text(encoding="utf-8")
    )
    return RelevanceModel.from_json(json.loads(text))


def relevance_note(
    model: RelevanceModel | None,
    embedder: str,
    dimension: int | None,
    *,
    other_script: tuple[int, int] = (0, 0),
) -> str:
    """One line on whether `model`'s numbers were fitted for this embedder and this text.

    `other_script`: (how many, of how many) embeddable messages are mostly in another
    script than Latin (`relevance.features.other_script`), said when there are some.
    """
    if model is None:
        return "not used (dense or keyword mode)"
    note = model.unfitted_note(embedder, dimension) or model.describe()
    foreign, of = other_script
    if foreign:
        note += (
            f"; {foreign} of {of} messages are mostly in another script than Latin, and "
            "the numbers were fitted on English: recall is rarely silent for such text "
            "(docs/quality.md, 'Other languages')"
        )
    return note
