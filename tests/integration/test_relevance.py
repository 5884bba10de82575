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


def local_memory() -> SemanticRecall:
    """An empty memory in the process, with the real local model."""
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings

    return SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=LocalEmbeddings()
    )


@pytest.fixture(scope="module")
def new_user() -> SemanticRecall:
    memory = local_memory()
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


ACKNOWLEDGED = [
    ("I work as a nurse on night shifts.", "Night shifts are tough; sleep hygiene matters."),
    ("Can you recommend a sci-fi novel?", "Try 'The Left Hand of Darkness' by Le Guin."),
    ("How do I make cold brew coffee?", "Steep coarse grounds in cold water for 12-18 hours."),
    ("My car squeaks when braking.", "Worn brake pads are a common cause; have them checked."),
]


@pytest.mark.slow
@pytest.mark.parametrize("question", ["dog", "beagle", "What is my dog's name?"])
def test_acknowledgements_never_lead_a_search(question: str) -> None:
    """A stranger's small store: bare "yes" turns scored 0.82 for "dog", above the facts."""
    from langchain_semantic_recall.relevance import TermCache

    memory = local_memory()
    fact = HumanMessage("My dog is called Biscuit and he is a beagle.", id="fact")
    memory.index([fact, AIMessage("What a lovely name!")], thread_id="dog", resource_id="r")
    for n, (said, reply) in enumerate(ACKNOWLEDGED):
        chat = [HumanMessage(said), AIMessage(reply), HumanMessage("yes"), HumanMessage("ok")]
        memory.index(chat, thread_id=f"t{n}", resource_id="r")
    hits = memory.search(question, resource_id="r")
    assert hits[0].message.id == "fact"
    bare = TermCache()
    assert not [h.message.text for h in hits if bare.of(h.message.text).bare]
    for hit in hits:  # an acknowledgement comes only after the message it answers
        seqs = {m.seq for m in hit.window}
        assert all(m.seq - 1 in seqs for m in hit.window if bare.of(m.text).bare)


ABOUT_ME = [
    ("Hi, my name is Priya and I work as a nurse.", "Nice to meet you, Priya!"),
    ("I got married last spring to Tom.", "Congratulations to you both!"),
    ("I live in Lisbon with my two cats.", "Lisbon is a lovely city."),
    ("Can you recommend a book for my flight?", "Try 'Project Hail Mary'."),
]


def remembering(turns: list[tuple[str, str]]) -> SemanticRecall:
    """Priya's memory of `turns` (said, reply), each a conversation, the local model."""
    memory = local_memory()
    for n, (said, reply) in enumerate(turns):
        chat = [HumanMessage(said, id=f"u{n}"), AIMessage(reply, id=f"a{n}")]
        memory.index(chat, thread_id=f"t{n}", resource_id="priya")
    return memory


@pytest.fixture(scope="module")
def priya() -> SemanticRecall:
    return remembering(ABOUT_ME)


@pytest.mark.slow
@pytest.mark.parametrize(("question", "fact"), [("What's my name?", 0), ("Am I married?", 1)])
async def test_short_questions_about_the_user_are_not_small_talk(
    priya: SemanticRecall, question: str, fact: int
) -> None:
    """MiniLM puts them nearer "how are you doing?" than unrelated text: the small-talk
    rule silenced "What's my name?" after "my name is Priya" (a stranger's first try)."""
    for hits in (
        priya.search(question, resource_id="priya"),
        await priya.asearch(question, resource_id="priya"),
    ):
        assert hits, question
        assert f"u{fact}" in [hit.message.id for hit in hits[:2]], question
    recalled = priya.recall([HumanMessage(question)], thread_id="new", resource_id="priya")
    assert ABOUT_ME[fact][0] in " ".join(str(m.content) for m in recalled)


@pytest.mark.slow
@pytest.mark.parametrize(
    "turn", ["What's your name?", "How are you?", "Am I boring you?", "How's my day going?"]
)
def test_small_talk_to_the_assistant_stays_silent(priya: SemanticRecall, turn: str) -> None:
    assert priya.search(turn, resource_id="priya") == []


CHIT_CHAT = [
    ("hey, how's it going?", "All good! How is your day going?"),
    ("my day is going ok, a bit tired", "Sorry to hear that, rest well."),
    ("am I boring?", "Not at all!"),
    ("Am I talking too much?", "Sure, no worries!"),
    ("I had a long day at work", "That sounds exhausting."),
]


@pytest.mark.slow
def test_small_talk_about_the_user_stays_silent_beside_stored_chit_chat() -> None:
    """Every history holds chit-chat, and small talk asked again finds itself: only the
    user's statements holding the asked word count (a review found "Am I boring?" and
    "How's my day going?" recalling 10 messages, the marriage among them)."""
    memory = remembering([*ABOUT_ME, *CHIT_CHAT])
    for turn in ("How's my day going?", "Am I boring?", "Am I talking too much?", "Is it my turn?"):
        assert memory.search(turn, resource_id="priya") == [], turn
    hits = memory.search("What's my name?", resource_id="priya")
    assert "u0" in [hit.message.id for hit in hits[:2]]


@pytest.mark.slow
@pytest.mark.parametrize(
    "question", ["what is my name?", "whats my name", "Do you remember my name?"]
)
def test_the_cross_thread_memory_tutorial(question: str) -> None:
    """LangGraph's cross-thread memory example, asked as people type it."""
    memory = remembering([("Hi! Remember: my name is Bob", "Hi Bob! I'll remember that.")])
    recalled = memory.recall([HumanMessage(question)], thread_id="2", resource_id="priya")
    assert "my name is Bob" in " ".join(str(m.content) for m in recalled[:-1])
