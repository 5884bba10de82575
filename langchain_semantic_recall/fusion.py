"""Fusing keyword and vector hits, and spending a message budget on windows (pure, no I/O).

Hybrid search runs two searches in the same scope and fuses them per query:

1. each list's scores are min-max normalised to [0, 1] (the best hit of a list gets 1,
   its worst 0), so BM25's unbounded scores and cosine similarities become comparable;
2. a message's fused score is `keyword_weight * keyword + (1 - keyword_weight) * dense`
   (0 for a list it is absent from).

Reciprocal rank fusion was measured too: it throws away how far apart the scores are and
lost to keyword search alone on long conversations (`docs/quality.md`).

Hybrid search does not fuse: it scores every candidate with a calibrated model
(`calibration`), which estimates for each position of the window (2 before the candidate
to 3 after it) the probability that the message there is evidence. `spend_calibrated`
then returns the likeliest messages that pass the threshold, within the budget. Keyword
mode still uses `fuse` (scores relative to the query's best match).

Without calibration a message budget chooses which messages of the hits' windows are returned: every
message in reach of a hit is scored `hit score x weight of its distance to the hit`
(a message near several hits keeps its best score), and the best `budget` messages
are kept. Strong hits thus keep wide windows while weak hits shrink to the hit itself,
and the number of messages handed to the model is bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from langchain_semantic_recall.periods import Period
from langchain_semantic_recall.records import RecallHit, StoredMessage, VectorHit

__all__ = [
    "Candidate",
    "NeighbourWeights",
    "best_per_message",
    "best_scores",
    "boost_period",
    "fuse",
    "min_max",
    "spend_budget",
    "spend_calibrated",
]


def best_per_message(hits: Iterable[VectorHit]) -> list[tuple[str, float]]:
    """(message id, best chunk score), best first; ties by message id."""
    return best_scores((hit.message_id, hit.score) for hit in hits)


def best_scores(scored: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """(message id, its best score) once per id, best first; ties by message id."""
    best: dict[str, float] = {}
    for message_id, score in scored:
        if score > best.get(message_id, -1.0):
            best[message_id] = score
    return sorted(best.items(), key=lambda item: (-item[1], item[0]))


def min_max(scored: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Scores rescaled to [0, 1] within the list; all 1.0 when they are all equal."""
    if not scored:
        return {}
    values = [score for _, score in scored]
    low, high = min(values), max(values)
    if high - low <= 1e-12:
        return dict.fromkeys((key for key, _ in scored), 1.0)
    return {key: (score - low) / (high - low) for key, score in scored}


def fuse(
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    *,
    keyword_weight: float,
) -> list[tuple[str, float]]:
    """Min-max fusion of two (id, score) lists into one, best first; ties by id."""
    dense_norm, keyword_norm = min_max(dense), min_max(keyword)
    dense_weight = 1.0 - keyword_weight
    fused = {
        key: keyword_weight * keyword_norm.get(key, 0.0) + dense_weight * dense_norm.get(key, 0.0)
        for key in {*dense_norm, *keyword_norm}
    }
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def boost_period(
    ranked: Sequence[tuple[str, float]],
    messages: Mapping[str, Sequence[StoredMessage]],
    period: Period,
    boost: float,
) -> list[tuple[str, float]]:
    """Add `boost` to the score of every hit written within `period`; best first again.

    `messages` maps a hit's id to a window holding it (`get_windows` with no
    neighbours); a hit absent from it is left as it is.
    """
    created = {m.id: m.created_at for window in messages.values() for m in window}
    boosted = [
        (key, score + boost if created.get(key) in period else score) for key, score in ranked
    ]
    return sorted(boosted, key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True, slots=True)
class NeighbourWeights:
    """How much a neighbour is worth relative to its hit, by distance in its thread.

    `before[i]` weighs the message `i + 1` places before the hit, `after[i]` the
    message `i + 1` places after; their lengths are the window's reach. The hit itself
    weighs 1.
    """

    before: tuple[float, ...] = ()
    after: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for value in (*self.before, *self.after):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"neighbour weights must be in [0, 1], got {value!r}")

    @classmethod
    def linear(cls, before: int, after: int) -> NeighbourWeights:
        """Weights falling linearly with distance, to 0 just past the reach of each side.

        `linear(0, 2)` (the default window) weighs the next message 2/3 and the one
        after 1/3.
        """
        return cls(
            before=tuple(1 - d / (before + 1) for d in range(1, before + 1)),
            after=tuple(1 - d / (after + 1) for d in range(1, after + 1)),
        )

    def weight(self, offset: int) -> float | None:
        """The weight at `offset` (negative: before the hit); None when out of reach."""
        if offset == 0:
            return 1.0
        side, distance = (self.after, offset) if offset > 0 else (self.before, -offset)
        return side[distance - 1] if distance <= len(side) else None


def spend_budget(
    hits: Sequence[tuple[str, float]],
    windows: Mapping[str, Sequence[StoredMessage]],
    *,
    weights: NeighbourWeights,
    budget: int | None,
) -> list[RecallHit]:
    """The hits (best first) with windows cut to reach and to the best `budget` messages.

    Args:
        hits: (message id, score) of the hits, best first.
        windows: Hit id -> its window in thread order (from `get_windows`); a hit
            without a window (deleted, out of scope) is dropped.
        weights: Neighbour weights; their lengths bound the reach on each side.
        budget: Most messages in all windows together; None keeps every window whole.

    Returns:
        The hits that kept their own message. Each window holds the hit and the kept
        messages within its reach, in thread order (a neighbour may sit in the windows
        of several hits; recall injects it once).
    """
    reached: list[tuple[str, float, StoredMessage, list[StoredMessage]]] = []
    best: dict[str, tuple[float, int]] = {}  # message id -> (score, first seen)
    for hit_id, score in hits:
        window = windows.get(hit_id)
        match = next((m for m in window or () if m.id == hit_id), None)
        if match is None:
            continue
        near = [m for m in window or () if weights.weight(m.seq - match.seq) is not None]
        reached.append((hit_id, score, match, near))
        for message in near:
            value = score * (weights.weight(message.seq - match.seq) or 0.0)
            known = best.get(message.id)
            if known is None:
                best[message.id] = (value, len(best))
            elif value > known[0]:
                best[message.id] = (value, known[1])
    if budget is None:
        kept = set(best)
    else:
        ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1]))
        kept = {message_id for message_id, _ in ranked[:budget]}
    return [
        RecallHit(message=match, score=score, window=tuple(m for m in near if m.id in kept))
        for hit_id, score, match, near in reached
        if hit_id in kept
    ]


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
