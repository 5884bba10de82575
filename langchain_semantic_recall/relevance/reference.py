"""What unrelated text and small talk look like to the embedder: the query's baseline.

Relevance never trusts a raw similarity: what a cosine of 0.4 means depends on the embedder
(MiniLM's unrelated pairs sit near 0.05, other models' near 0.7). Instead, each query is
compared with `UNRELATED`, sentences about everyday topics that no memory is about: the mean
and spread of the query's similarity to them is what this embedder gives *unrelated text* for
this query. A stored message's similarity is then measured in those units (a z-score:
`(cosine - mean) / spread`), which means the same for every embedder and every query, and is
unchanged when an embedder's scores are rescaled.

`SMALL_TALK` holds turns that ask about nothing (greetings, thanks, laughter, "brb"). A turn
with at most a few content words whose nearest neighbour among these is closer than its
nearest unrelated sentence (by a margin) is small talk, and recall stays silent for it.

Both lists are embedded once per engine, through its embedder and cache (96 short texts:
0.18 s with the local model, on the first hybrid search of a process). For the package's
own `LocalEmbeddings` their vectors ship with the package (`shipped`, written by
`scripts/write-reference-vectors`), so the first search does not embed them.
They are our own sentences, written for this purpose; none comes from an evaluation set.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Final

import numpy as np

__all__ = [
    "SHIPPED_FILE",
    "SMALL_TALK",
    "UNRELATED",
    "Z_LIMIT",
    "QueryBaseline",
    "Reference",
    "reference_digest",
    "shipped",
]

logger = logging.getLogger(__name__)

SHIPPED_FILE: Final = "data/relevance/all-MiniLM-L6-v2.reference.npz"
"""`UNRELATED + SMALL_TALK` embedded by `LocalEmbeddings` (inside the package)."""

Z_LIMIT = 20.0
"""Most spreads a similarity may stand above (or below) unrelated text."""

UNRELATED: tuple[str, ...] = (
    "The bus to the airport leaves every twenty minutes from the main square.",
    "How long should I boil an egg for a soft yolk?",
    "The museum's new wing is dedicated to medieval tapestries.",
    "My laptop keeps restarting after the latest update.",
    "Which planets in the solar system have rings?",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "The parking garage charges double after midnight.",
    "The quarterly report shows a small rise in operating costs.",
    "I need to renew my passport before the summer.",
    "How do you say good night in Portuguese?",
    "The orchestra will perform a symphony by Sibelius on Friday.",
    "Tomatoes grow best with at least six hours of sun a day.",
    "Can you explain how compound interest works?",
    "The marathon route passes along the river and through the old town.",
    "Our neighbour's dog barks whenever the mail arrives.",
    "What's a good stretch for a stiff lower back?",
    "The library closes early on public holidays.",
    "The printer on the third floor is out of toner again.",
    "Which is heavier, a litre of water or a litre of olive oil?",
    "She painted the kitchen cabinets a pale shade of green.",
    "How many players are on a volleyball team?",
    "The train was delayed because of a signal failure near the station.",
    "I'm thinking about learning to play the cello.",
    "She keeps her grandmother's recipes in a blue tin box.",
    "The hotel offers a free shuttle to the ski lifts.",
    "Remember to water the ferns on the balcony.",
    "Is it better to rent or to buy a car for a long trip?",
    "The documentary follows a family of elephants across the savanna.",
    "My sister is moving to a smaller flat across town.",
    "What temperature should a roast chicken reach inside?",
    "The software team shipped the new login page last week.",
    "How do bees make honey?",
    "The city council voted to build a new cycling lane.",
    "I spilled coffee on my notes right before the meeting.",
    "What year did the first person walk on the moon?",
    "The bakery on the corner sells sourdough only on weekends.",
    "Could you recommend a board game for four players?",
    "The storm knocked out power in half of the neighbourhood.",
    "He fixed the squeaky door hinge with a drop of oil.",
    "What is the difference between a crocodile and an alligator?",
    "The conference keynote was about renewable energy storage.",
    "My phone screen cracked when it fell off the table.",
    "How often should a bicycle chain be cleaned?",
    "The garden party was moved indoors because of the rain.",
    "Why do leaves change colour in the autumn?",
    "The accountant asked for last year's receipts.",
    "We watched a comedy about a detective who is afraid of the dark.",
    "What's the quickest way to learn basic chess openings?",
)
"""Sentences about everyday topics: what unrelated text scores against a query."""

SMALL_TALK: tuple[str, ...] = (
    "hi there",
    "hello!",
    "hey",
    "good evening",
    "how are you doing today?",
    "what's up?",
    "thank you!",
    "thanks a lot, that helps",
    "many thanks",
    "cheers",
    "ok",
    "okay sounds good",
    "alright then",
    "got it",
    "sure thing",
    "yes please",
    "no thanks",
    "haha",
    "lmao that's so funny",
    "nice one",
    "great, thanks!",
    "neat",
    "I see",
    "interesting",
    "right, understood",
    "fair point",
    "sorry about that",
    "my bad",
    "one moment please",
    "hold on a sec",
    "hello? anyone home?",
    "can you hear me?",
    "bye for now",
    "see you later",
    "talk to you tomorrow",
    "have a nice weekend",
    "good night, sleep well",
    "I'm so tired today",
    "what a day",
    "never mind",
    "forget it",
    "just testing",
    "hmm",
    "wait what?",
    "really?",
    "oh wow",
    "you're awesome",
    "love it",
)
"""Turns that ask about nothing a memory could hold."""


@dataclass(frozen=True, slots=True)
class QueryBaseline:
    """A query's similarity to unrelated text, and whether it is small talk."""

    mean: float
    """Mean cosine of the query with the `UNRELATED` sentences."""
    spread: float
    """Their standard deviation (at least 1e-6)."""
    small_talk_margin: float
    """Cosine to the nearest `SMALL_TALK` turn minus cosine to the nearest unrelated one."""
    small_talk_top: float = 1.0
    """Cosine to the nearest `SMALL_TALK` turn (1.0 when unknown: nothing is nearer)."""

    def z(self, cosine: float | np.ndarray) -> float | np.ndarray:
        """`cosine` in units of this query's spread above unrelated text, within +-`Z_LIMIT`.

        The limit only matters when a query is nearly orthogonal to every reference
        sentence (spread near 0, as with a bag-of-words embedder), where the ratio would
        explode; the best matches of all development questions (MiniLM) stay under 16.
        """
        return np.clip((cosine - self.mean) / self.spread, -Z_LIMIT, Z_LIMIT)


@dataclass(frozen=True, slots=True)
class Reference:
    """`UNRELATED` and `SMALL_TALK` as unit vectors of one embedder (rows)."""

    unrelated: np.ndarray
    small_talk: np.ndarray

    @classmethod
    def from_vectors(cls, vectors: Sequence[Sequence[float]] | np.ndarray) -> Reference:
        """Build from the embeddings of `UNRELATED + SMALL_TALK`, in that order."""
        matrix = _unit_rows(np.asarray(vectors, dtype=np.float64))
        if matrix.shape[0] != len(UNRELATED) + len(SMALL_TALK):
            raise ValueError(
                f"expected {len(UNRELATED) + len(SMALL_TALK)} reference vectors, "
                f"got {matrix.shape[0]}"
            )
        return cls(matrix[: len(UNRELATED)], matrix[len(UNRELATED) :])

    def baseline(self, query_vector: Sequence[float]) -> QueryBaseline:
        """The query's similarity to unrelated text and to small talk."""
        query = _unit_rows(np.asarray([query_vector], dtype=np.float64))[0]
        unrelated = self.unrelated @ query
        small_talk = self.small_talk @ query
        return QueryBaseline(
            mean=float(unrelated.mean()),
            spread=max(float(unrelated.std()), 1e-6),
            small_talk_margin=float(small_talk.max() - unrelated.max()),
            small_talk_top=float(small_talk.max()),
        )


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def reference_digest() -> str:
    """SHA-256 of `UNRELATED + SMALL_TALK`: a shipped file holds the vectors of these texts."""
    return hashlib.sha256("\n".join([*UNRELATED, *SMALL_TALK]).encode()).hexdigest()


def shipped(embeddings: object) -> Reference | None:
    """The shipped vectors, for the package's own `LocalEmbeddings` only; else None.

    Another embedder (even of the same model) embeds the texts itself; so does a file
    written for other texts (the lists changed without `scripts/write-reference-vectors`).
    """
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings

    if type(embeddings) is not LocalEmbeddings:
        return None
    try:
        path = resources.files("langchain_semantic_recall").joinpath(SHIPPED_FILE)
        with path.open("rb") as file, np.load(file, allow_pickle=False) as data:
            digest, vectors = str(data["digest"]), np.asarray(data["vectors"])
    except (OSError, KeyError, ValueError) as exc:
        logger.warning("the shipped reference vectors cannot be read (%s): embedding them", exc)
        return None
    if digest != reference_digest() or vectors.shape[1:] != (LocalEmbeddings.dimension,):
        logger.warning("the shipped reference vectors are for other texts: embedding them")
        return None
    return Reference.from_vectors(vectors)
