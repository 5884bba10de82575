"""Hybrid search's calibrated scores: absolute, gated, silent when nothing is relevant."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, calibration
from langchain_semantic_recall.calibration import (
    DEFAULT_GATE,
    FEATURES,
    OFFSET_MODELS,
    REFERENCE_SIZE,
    STRONG_MEANING,
    STRONG_MEANING_FLOOR,
    Model,
    candidates,
    clear_term_cache,
    content_terms,
    feature_matrix,
    features,
    is_question,
    prepare,
    prior_shift,
    relevance,
)
from langchain_semantic_recall.fusion import Candidate, spend_calibrated
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.records import StoredMessage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)

HISTORY = [
    "Hi Sam! How are you doing today?",
    "Hey! Good, thanks. How about you?",
    "I adopted a dog last week",
    "That's wonderful news! What kind of dog?",
    "A beagle puppy. My dog is called Biscuit",
    "Biscuit is a lovely name for a beagle",
    "Thanks! I also started painting watercolours on weekends",
    "Painting is a great hobby, what do you paint?",
    "Mostly lakes and mountains near Denver",
    "Sounds peaceful. Bye for now!",
]


def engine(**options: Any) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=1024),
        **options,
    )


def conversation(prefix: str, texts: Sequence[str]) -> list[BaseMessage]:
    return [
        (HumanMessage if n % 2 == 0 else AIMessage)(
            text,
            id=f"{prefix}-{n}",
            additional_kwargs={"created_at": (START + timedelta(minutes=n)).isoformat()},
        )
        for n, text in enumerate(texts)
    ]


def scores(memory: SemanticRecall, query: str, **options: Any) -> dict[str, float]:
    hits = memory.search(query, resource_id="r", **options)
    return {hit.message.id: hit.score for hit in hits}


@pytest.fixture
def memory() -> SemanticRecall:
    memory = engine()
    memory.index(conversation("h", HISTORY), thread_id="t1", resource_id="r")
    return memory


# --- absolute scores -------------------------------------------------------------------------


def test_the_same_message_and_query_score_the_same_whatever_else_is_asked_or_stored(
    memory: SemanticRecall,
) -> None:
    first = scores(memory, "what is the dog called?")
    assert first
    memory.search("painting lakes near Denver", resource_id="r")  # other queries in between
    memory.index(
        conversation("o", ["my dog Rex is called Rex", "dogs everywhere"]),
        thread_id="other",
        resource_id="someone-else",
    )  # another resource's messages never move a score
    assert scores(memory, "what is the dog called?") == first


def test_scores_are_probabilities_not_rescaled_per_query(memory: SemanticRecall) -> None:
    for query in ("what is the dog called?", "painting lakes", "Denver mountains"):
        found = scores(memory, query)
        assert found
        assert all(0.0 < value < 1.0 for value in found.values())
        assert max(found.values()) < 1.0  # min-max fusion gave the best hit 1.0


def test_a_threshold_means_the_same_for_every_query(memory: SemanticRecall) -> None:
    loose = memory.with_options(threshold=0.0)
    for query in ("what is the dog called?", "painting lakes", "Denver mountains"):
        every = {
            m.id: hit.score for hit in loose.search(query, resource_id="r") for m in (hit.message,)
        }
        cut = 0.05
        kept = scores(loose, query, threshold=cut)
        assert all(value >= cut for value in kept.values())
        # the gate only removes: every kept hit scored the same without it
        assert all(every.get(key) == value for key, value in kept.items())


def test_the_default_gate_is_the_measured_probability() -> None:
    assert engine().threshold == DEFAULT_GATE
    assert 0.0 < DEFAULT_GATE < 0.05


# --- silence ------------------------------------------------------------------------------


@pytest.mark.parametrize("turn", ["hi", "Hello!", "thanks", "ok", "yes", "can you help me?"])
def test_small_talk_recalls_nothing(memory: SemanticRecall, turn: str) -> None:
    assert memory.search(turn, resource_id="r") == []
    messages = [HumanMessage(turn, id="live")]
    out = memory.recall(messages, thread_id="t2", resource_id="r")
    assert not [m for m in out if m.additional_kwargs.get("source") == MEMORY_SOURCE]
    assert [m.id for m in out] == ["live"]


def test_small_talk_has_no_content_terms_but_topics_do() -> None:
    assert content_terms("Hey there, thanks!") == []
    assert content_terms("can you help me?") == []
    assert content_terms("can you help me with my dog?") == ["dog"]


def test_an_irrelevant_query_recalls_nothing_or_little(memory: SemanticRecall) -> None:
    relevant = memory.search("what is the dog called?", resource_id="r")
    irrelevant = memory.search("quarterly invoice for the accountant", resource_id="r")
    assert relevant
    assert len({m.id for hit in irrelevant for m in hit.window}) <= 2


# --- facts over questions ---------------------------------------------------------------------


def test_a_statement_beats_a_question_that_merely_repeats_the_query() -> None:
    memory = engine(threshold=0.0)
    texts = [*HISTORY[:2], "What's my dog's name?", "You haven't told me yet.", *HISTORY[6:]]
    texts += ["My dog is called Biscuit", "Lovely!"]
    memory.index(conversation("f", texts), thread_id="t1", resource_id="r")
    hits = memory.search("dog name", resource_id="r")
    fact, question = "f-8", "f-2"
    assert fact in {m.id for hit in hits for m in hit.window}
    # the question is kept, if at all, as context of a likelier message, never as the hit
    assert question not in {hit.message.id for hit in hits}


def test_a_question_is_a_message_ending_with_a_question_mark() -> None:
    assert is_question("What's my dog's name?")
    assert is_question("Alice: where to? [shared image: a map]")
    assert is_question("where to?  [a note]  \n")
    assert not is_question("My dog is called Biscuit")
    assert not is_question("a list [1, 2]")
    assert not is_question("why? then no [note] after all")


@given(
    st.text(alphabet=st.sampled_from("ab ?[]\n"), max_size=12),
    st.sampled_from(["", " ", "\n", "[x]", " [a b] \n", "?", "? [x]"]),
)
def test_is_question_ignores_exactly_one_trailing_note(text: str, tail: str) -> None:
    """The same answer as stripping a trailing `[...]` note by regex, then the spaces."""
    written = text + tail
    expected = re.sub(r"\s*\[[^\]]*\]\s*$", "", written).rstrip().endswith("?")
    assert is_question(written) == expected


# --- the pure parts --------------------------------------------------------------------------


def message(n: int) -> StoredMessage:
    return StoredMessage(
        id=f"m{n}",
        thread_id="t",
        resource_id="r",
        role="user",
        text=f"text {n}",
        created_at=START,
        payload="{}",
        seq=n,
    )


def test_spend_calibrated_keeps_what_passes_the_threshold_within_the_budget() -> None:
    thread = [message(n) for n in range(10)]
    hits = [
        Candidate("m2", {0: 0.6, 1: 0.3, 2: 0.001}),
        Candidate("m7", {0: 0.2, 1: 0.05, 2: 0.4}),
    ]
    windows = {"m2": thread[2:5], "m7": thread[7:10]}
    out = spend_calibrated(hits, windows, threshold=0.01, budget=None)
    assert [(h.message.id, h.score) for h in out] == [("m2", 0.6), ("m9", 0.4)]
    assert [m.id for m in out[0].window] == ["m2", "m3"]  # m4 is below the threshold
    assert [m.id for m in out[1].window] == ["m7", "m8", "m9"]
    budgeted = spend_calibrated(hits, windows, threshold=0.01, budget=2)
    assert {m.id for h in budgeted for m in h.window} == {"m2", "m9"}
    assert spend_calibrated(hits, windows, threshold=0.9, budget=None) == []


def test_candidates_score_each_offset_with_its_model() -> None:
    zero = (0.0,) * 14
    models = {0: Model(0.0, zero), 1: Model(10.0, zero), -1: Model(-10.0, zero)}
    [found] = candidates([("a", [1.0] * 14)], models, before=2, after=3)
    assert found.offsets[0] == pytest.approx(0.5)
    assert found.offsets[1] == found.offsets[3] > 0.99  # beyond reach: the farthest model
    assert found.offsets[-2] == found.offsets[-1] < 0.01
    assert found.score == found.offsets[1]


def test_the_best_candidates_come_first_ties_by_id_and_a_limit_only_cuts() -> None:
    rows = [
        (f"m{n:02}", [float(n % 3), 0.0, 1.0, 0.1 * (n % 4), 1.0] + [0.0] * 9) for n in range(30)
    ]
    shuffled = random.Random(5).sample(rows, len(rows))
    found = candidates(shuffled, OFFSET_MODELS, before=2, after=3)
    assert [c.id for c in found] == [c.id for c in sorted(found, key=lambda c: (-c.score, c.id))]
    assert len({c.score for c in found}) < len(found)  # there were ties to order
    texts = {
        f"m{n:02}": f"the dog Biscuit number {n}{'?' if n % 5 == 0 else ''}" for n in range(30)
    }
    stored = {
        key: replace(message(n), id=key, text=text) for n, (key, text) in enumerate(texts.items())
    }
    dense = [(key, 0.3 + 0.01 * (n % 7)) for n, key in enumerate(texts) if n % 2]
    keyword = [(key, 1.0 + (n % 5)) for n, key in enumerate(texts) if n % 3 == 0]
    whole = relevance("where is my dog Biscuit?", dense, keyword, stored, None, before=2, after=3)
    first = relevance(
        "where is my dog Biscuit?", dense, keyword, stored, None, before=2, after=3, limit=4
    )
    assert first == whole[:4]
    assert len(whole) == len({*dict(dense), *dict(keyword)})


def test_preparing_candidates_changes_no_score_and_spares_the_search_their_terms() -> None:
    stored = {f"m{n}": replace(message(n), text=f"unique words {n} zq{n}x") for n in range(6)}
    dense, keyword = [("m1", 0.4), ("m2", 0.6)], [("m2", 3.0), ("m4", 1.5)]
    clear_term_cache()
    plain = relevance("words zq2x?", dense, keyword, stored, None, before=2, after=3)
    clear_term_cache()
    prepare(m.text for m in stored.values())
    before = term_cache_hits()
    prepared = relevance("words zq2x?", dense, keyword, stored, None, before=2, after=3)
    assert prepared == plain
    assert term_cache_hits() - before == 3  # m1, m2, m4: none tokenised again


def term_cache_hits() -> int:
    return calibration._terms.cache_info().hits


def test_the_feature_rows_are_the_feature_matrix() -> None:
    stored = {f"m{n}": message(n) for n in range(6)}
    dense, keyword = [("m1", 0.4), ("m2", 0.6), ("m5", 0.2)], [("m2", 3.0), ("m4", 1.5)]
    ids, x = feature_matrix("text 2 or 4?", dense, keyword, stored, None)
    rows = features("text 2 or 4?", dense, keyword, stored, None)
    assert ids == ["m1", "m2", "m4", "m5"] == [key for key, _ in rows]
    assert x.tolist() == [row for _, row in rows]
    assert x.shape == (4, len(FEATURES))
    column = dict(zip(FEATURES, x[1].tolist(), strict=True))  # m2: a match of both halves
    assert column["in_keyword"] == column["in_dense"] == 1.0
    assert column["bm25_relative"] == 1.0
    assert column["cosine_relative"] == 0.0
    assert column["coverage"] == pytest.approx(2 / 3)  # "text 2" holds "text" and "2", not "4"
    assert dict(zip(FEATURES, x[3].tolist(), strict=True))["in_keyword"] == 0.0
    assert feature_matrix("thanks!", dense, keyword, stored, None)[0] == []


def test_the_shipped_models_cover_the_default_window() -> None:
    assert set(OFFSET_MODELS) == set(range(-2, 4))
    assert all(len(m.weights) == 14 for m in OFFSET_MODELS.values())


# --- strong matches on meaning -----------------------------------------------------------------


def _row(cosine: float) -> list[float]:
    row = [0.0] * len(FEATURES)
    row[FEATURES.index("cosine")] = cosine
    row[FEATURES.index("in_dense")] = 1.0
    return row


def test_a_strong_meaning_match_scores_at_least_the_measured_floor_at_its_own_position() -> None:
    rows = [
        ("strong", _row(STRONG_MEANING)),
        ("weak", _row(STRONG_MEANING - 0.01)),
    ]
    found = {c.id: c for c in candidates(rows, OFFSET_MODELS, before=2, after=3)}
    assert STRONG_MEANING_FLOOR > DEFAULT_GATE  # so the default gate lets it through
    assert found["strong"].offsets[0] == STRONG_MEANING_FLOOR
    assert found["weak"].offsets[0] < DEFAULT_GATE
    # the floor is for the match itself: its neighbours keep their models' scores
    assert found["strong"].offsets[1] == pytest.approx(OFFSET_MODELS[1].probability(rows[0][1]))


SMALL_MEMORY = [
    "I'm planning a trip to Lisbon with my sister in March.",
    "Lovely! March in Lisbon is mild, pack layers.",
    "My sister is vegetarian, and I'm allergic to peanuts.",
    "Noted. Ask about nuts at pastry shops.",
    "My tomato seedlings are getting tall and leggy.",
    "Give them more light: a grow light 10 cm above the leaves.",
    "We deploy on Friday, so nothing risky please.",
    "Then keep the change small and behind a flag.",
]


@pytest.fixture(scope="module")
def small_memory() -> SemanticRecall:
    """A new user's small memory, embedded with the real local model."""
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings

    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=LocalEmbeddings()
    )
    memory.index(conversation("s", SMALL_MEMORY), thread_id="t1", resource_id="r")
    return memory


@pytest.mark.parametrize(
    "query", ["Any food tips? Remember what I told you about my allergy.", "food allergy"]
)
def test_a_small_memory_recalls_a_strong_match_on_meaning_alone(
    small_memory: SemanticRecall, query: str
) -> None:
    """No shared word ("allergy" and "allergic" stem apart), only meaning: still recalled."""
    hits = small_memory.search(query, resource_id="r")
    assert "s-2" in {m.id for hit in hits for m in hit.window}


@pytest.mark.parametrize(
    "query", ["recommend a good sci-fi novel", "what is the capital of Peru?", "hi", "thanks!"]
)
def test_a_small_memory_stays_silent_when_nothing_is_relevant(
    small_memory: SemanticRecall, query: str
) -> None:
    assert small_memory.search(query, resource_id="r") == []


# --- small memories ---------------------------------------------------------------------------


def test_the_prior_shift_grows_as_the_scope_shrinks_and_vanishes_at_the_reference() -> None:
    assert prior_shift(REFERENCE_SIZE) == prior_shift(10 * REFERENCE_SIZE) == 0.0
    assert prior_shift(REFERENCE_SIZE - 1) == pytest.approx(0.0, abs=0.01)  # continuous
    shifts = [prior_shift(size) for size in (1, 10, 100, REFERENCE_SIZE - 1)]
    assert shifts == sorted(shifts, reverse=True)
    assert shifts[-1] > 0
    assert prior_shift(0) == prior_shift(1)  # an empty scope is no division by zero


def test_only_keyword_matches_gain_from_a_small_scope() -> None:
    keyword = [0.0] * len(FEATURES)
    keyword[FEATURES.index("in_keyword")] = 1.0
    vector = _row(0.3)
    rows = [("keyword", keyword), ("vector", vector)]
    plain = {c.id: c for c in candidates(rows, OFFSET_MODELS, before=0, after=0)}
    small = {c.id: c for c in candidates(rows, OFFSET_MODELS, before=0, after=0, shift=2.0)}
    assert small["keyword"].offsets[0] > plain["keyword"].offsets[0]
    assert small["vector"].offsets[0] == plain["vector"].offsets[0]


def test_a_keyword_match_in_a_small_memory_is_recalled(small_memory: SemanticRecall) -> None:
    """Among 8 messages one shared word is worth more than among 500: it passes the gate."""
    hits = small_memory.search("Any peanut-free snack ideas for the flight?", resource_id="r")
    assert "s-2" in {m.id for hit in hits for m in hit.window}


def test_a_small_memory_recalls_the_fact_not_only_the_question() -> None:
    memory = engine()
    texts = ["What's my dog's name?", "You haven't told me yet.", *HISTORY[6:]]
    memory.index(
        conversation("f", [*texts, "My dog is called Biscuit", "Lovely!"]),
        thread_id="t1",
        resource_id="r",
    )
    hits = memory.search("dog name", resource_id="r")
    assert "f-6" in {m.id for hit in hits for m in hit.window}
    assert "f-0" not in {hit.message.id for hit in hits}  # the question is never the hit
