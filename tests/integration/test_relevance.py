"""Relevance with the real local model.

Questions that share no word find their fact; small talk stays silent.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

FACTS = [
    "I'm allergic to peanuts.",
    "My daughter Lena turns 7 on June 14.",
    "We booked flights to Lisbon for the first week of October.",
    "I switched to night shifts at the hospital.",
    "The car needs new brakes before winter.",
    "I started yoga because of my bad knee.",
    "Our kitchen remodel budget is twenty thousand dollars.",
    "I've been learning to play the cello.",
]


QUESTIONS = {
    "What food should I avoid?": 0,
    "When is my kid's birthday?": 1,
    "Where am I travelling this autumn?": 2,
    "What hours do I work these days?": 3,
    "What repairs does my vehicle need?": 4,
    "Why did I take up stretching classes?": 5,
    "How much can we spend on the renovation?": 6,
    "Which instrument am I practising?": 7,
}


@pytest.fixture(scope="module")
def new_user() -> SemanticRecall:
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings

    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=LocalEmbeddings()
    )
    for n, fact in enumerate(FACTS):
        memory.index(
            [HumanMessage(fact, id=f"u{n}"), AIMessage("Noted!", id=f"a{n}")],
            thread_id=f"t{n}",
            resource_id="r",
        )
    return memory


@pytest.mark.slow
def test_questions_that_share_no_word_find_their_fact(new_user: SemanticRecall) -> None:
    """0.2.0 found 2 of 10 such questions; a question found has its fact as the first hit."""
    found = 0
    for question, fact in QUESTIONS.items():
        hits = new_user.search(question, resource_id="r")
        if hits:
            assert hits[0].message.id == f"u{fact}", question
            found += 1
    assert found >= 6


@pytest.mark.slow
@pytest.mark.parametrize(
    "turn",
    ["thanks, that was really helpful", "haha nice", "How do volcanoes erupt?", "hmm"],
)
def test_small_talk_and_off_topic_questions_stay_silent(
    new_user: SemanticRecall, turn: str
) -> None:
    assert new_user.search(turn, resource_id="r") == []
