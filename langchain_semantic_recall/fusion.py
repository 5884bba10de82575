"""Fusing keyword and vector hits, and spending a message budget on windows (pure, no I/O).

Hybrid search runs two searches in the same scope and fuses them per query:

1. each list's scores are min-max normalised to [0, 1] (the best hit of a list gets 1,
   its worst 0), so BM25's unbounded scores and cosine similarities become comparable;
2. a message's fused score is `keyword_weight * keyword + (1 - keyword_weight) * dense`
   (0 for a list it is absent from).

Reciprocal rank fusion was measured too: it throws away how far apart the scores are and
lost to keyword search alone on long conversations (`docs/quality.md`).

Hybrid search does not fuse: it scores candidates and their neighbours with the relevance
model (`relevance`). Keyword mode ranks by `fuse` over its one list (scores relative to the
query's best match), and a message budget chooses which messages of the hits' windows
are returned: every message in reach of a hit is scored `hit score x weight of its
distance to the hit` (a message near several hits keeps its best score), and the best
`budget` messages are kept. Strong hits thus keep wide windows while weak hits shrink to
the hit itself, and the number of messages handed to the model is bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from langchain_semantic_recall.periods import Period
from langchain_semantic_recall.records import RecallHit, StoredMessage, VectorHit

__all__ = [
    "NeighbourWeights",
    "best_per_message",
    "best_scores",
    "boost_period",
    "fuse",
    "min_max",
    "one_per_text",
    "spend_budget",
]


def one_per_text(
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    messages: Mapping[str, StoredMessage],
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The candidates less those whose role and words a better ranked one has.

    The same words said in several conversations are one memory. A question a user had
    asked in eight earlier chats took eight hits (16 messages with their answers) and left
    the fact it asks for out of a 15-message budget (an audit). The best ranked copy
    (`dense` first, then `keyword`) stands for them, with its own window; identical texts
    score alike in both lists. A candidate missing from `messages` is kept. Not for a
    query that names a period ("in May"): there the same words said at two times are two.
    """
    first: dict[tuple[str, str], str] = {}
    for message_id, _ in [*dense, *keyword]:
        if (message := messages.get(message_id)) is not None:
            first.setdefault((message.role, " ".join(message.text.split())), message_id)
    kept = set(first.values())
    return (
        [c for c in dense if c[0] in kept or c[0] not in messages],
        [c for c in keyword if c[0] in kept or c[0] not in messages],
    )


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
