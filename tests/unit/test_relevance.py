"""Hybrid search's relevance model: probabilities, silence from evidence, any embedder."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, search
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.records import StoredMessage
from langchain_semantic_recall.relevance import (
    SMALL_TALK,
    UNRELATED,
    Evidence,
    Query,
    QueryBaseline,
    Reference,
    RelevanceModel,
    TermCache,
    content_terms,
    default_model,
    is_question,
)
from langchain_semantic_recall.relevance.features import (
    CONTEXT,
    DIRECT,
    asked_names,
    asks_about_speaker,
    context_rows,
    direct_rows,
)
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
    return {m.id: hit.score for hit in hits for m in (hit.message,)}


def returned(memory: SemanticRecall, query: str) -> set[str]:
    return {m.id for hit in memory.search(query, resource_id="r") for m in hit.window}


@pytest.fixture
def memory() -> SemanticRecall:
    memory = engine()
    memory.index(conversation("h", HISTORY), thread_id="t1", resource_id="r")
    return memory


# --- scores ----------------------------------------------------------------------------------


def test_scores_are_probabilities_that_other_resources_and_queries_never_move(
    memory: SemanticRecall,
) -> None:
    first = scores(memory, "what is the dog called?")
    assert first
    assert all(0.0 < value < 1.0 for value in first.values())
    memory.search("painting lakes near Denver", resource_id="r")  # other queries in between
    memory.index(
        conversation("o", ["my dog Rex is called Rex", "dogs everywhere"]),
        thread_id="other",
        resource_id="someone-else",
    )  # another resource's messages never move a score
    assert scores(memory, "what is the dog called?") == first


def test_the_hybrid_default_has_no_threshold_and_a_threshold_only_removes(
    memory: SemanticRecall,
) -> None:
    assert memory.threshold is None
    every = scores(memory, "what is the dog called?")
    cut = sorted(every.values())[len(every) // 2]
    kept = scores(memory, "what is the dog called?", threshold=cut)
    assert kept
    assert all(value >= cut for value in kept.values())
    assert all(every[key] == value for key, value in kept.items())


@pytest.mark.parametrize("turn", ["hello there", "yes", "ok, and then?"])
def test_a_threshold_of_zero_answers_a_turn_of_stopwords_too(
    memory: SemanticRecall, turn: str
) -> None:
    """`threshold=0` is documented to turn silence off; a turn without a content term
    stayed silent under it (the rule that stops at no terms ran before the threshold)."""
    assert memory.search(turn, resource_id="r") == []
    hits = memory.search(turn, resource_id="r", threshold=0)
    assert hits
    assert sum(len(hit.window) for hit in hits) <= 15  # the budget, as for any query
    assert memory.search(turn, resource_id="r", threshold=0.999999) == []


@pytest.mark.parametrize("turn", ["hi", "Hello!", "thanks", "ok", "yes", "can you help me?"])
def test_small_talk_recalls_nothing(memory: SemanticRecall, turn: str) -> None:
    assert memory.search(turn, resource_id="r") == []
    messages = [HumanMessage(turn, id="live")]
    out = memory.recall(messages, thread_id="t2", resource_id="r")
    assert not [m for m in out if m.additional_kwargs.get("source") == MEMORY_SOURCE]
    assert [m.id for m in out] == ["live"]


def test_a_query_no_closer_than_unrelated_text_recalls_nothing(memory: SemanticRecall) -> None:
    fake = FakeEmbeddings(dimension=1024)
    query = "zebra xylophone quantum"
    vector = np.array(fake.embed_query(query))
    # the precondition: the fake embedder puts no word of it in a bucket of the memory's
    assert all(float(vector @ np.array(fake.embed_query(text))) == 0.0 for text in HISTORY)
    assert returned(memory, "what is the dog called?")
    assert returned(memory, query) == set()


def test_the_fact_is_recalled_beside_a_question_that_repeats_the_query() -> None:
    memory = engine()
    texts = ["What's my dog's name?", "You haven't told me yet.", *HISTORY[6:]]
    memory.index(
        conversation("f", [*texts, "My dog is called Biscuit", "Lovely!"]),
        thread_id="t1",
        resource_id="r",
    )
    hits = memory.search("dog name", resource_id="r")
    assert "f-6" in {m.id for hit in hits for m in hit.window}


def test_content_terms_and_questions() -> None:
    assert content_terms("Hey there, thanks!") == []
    assert content_terms("can you help me with my dog?") == ["dog"]
    assert is_question("Alice: where to? [shared image: a map]")
    assert not is_question("a list [1, 2]")


def test_month_and_weekday_names_are_times_not_names_a_memory_must_mention() -> None:
    """ "Where do I spend the December holidays?" counted "December" as a name no stored
    message mentioned (2 spreads against the evidence): silent, with the fact first."""
    assert asked_names("Where do I spend the December holidays?") == []
    assert asked_names("What did I plan for Friday and May?") == []
    assert asked_names("Where does Caroline live in March?") == ["carolin"]
    assert asked_names("Is Jan coming?") == ["jan"]  # a short form can be a name


@pytest.mark.parametrize(
    "turn",
    [
        "谢谢!",
        "好的",
        "你好",
        "ありがとう！",
        "了解",
        "こんにちは",
        "고마워요!",
        "안녕하세요",
        "شكرا!",
        "مرحبا",
        "תודה!",
        "שלום",
        "merci !",
        "d'accord",
        "danke!",
        "hola",
        "ok 👍",
        "🙏",
    ],
)
def test_small_talk_in_other_languages_has_no_content_term(turn: str) -> None:
    """Thanks and greetings in the languages users write most are small talk too: with
    a content term left, the English-fitted gate recalled memory for a "谢谢!"."""
    assert content_terms(turn) == []


def test_other_languages_keep_their_content_terms() -> None:
    assert {"我对", "什么", "过敏", "敏"} <= set(content_terms("谢谢，我对什么过敏？"))
    assert "谢谢" not in content_terms("谢谢，我对什么过敏？")
    assert content_terms("merci, where is my passport?") == ["passport"]


@given(
    st.text(alphabet=st.sampled_from("ab ?[]\n"), max_size=12),
    st.sampled_from(["", " ", "\n", "[x]", " [a b] \n", "?", "? [x]"]),
)
def test_is_question_ignores_exactly_one_trailing_note(text: str, tail: str) -> None:
    written = text + tail
    expected = re.sub(r"\s*\[[^\]]*\]\s*$", "", written).rstrip().endswith("?")
    assert is_question(written) == expected


def test_is_question_reads_a_long_run_of_spaces_whole() -> None:
    """A regular expression for the note took quadratic time over such a run: a search
    that read this message first took 6.9 s (the engine, in-memory backends)."""
    assert not is_question(" " * 60_000 + "end]")
    assert is_question("why?" + " " * 60_000 + "[a note]")


# --- the budget rule -------------------------------------------------------------------------


def query_with(top_z: float, *, terms: int = 4, name_missing: float = 0.0) -> Query:
    baseline = QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=-0.5)
    return Query(
        terms=tuple(f"t{n}" for n in range(terms)),
        baseline=baseline,
        cosines={"m": top_z * 0.1},
        bm25={},
        period=None,
        query_found=0.0,
        name_missing=name_missing,
    )


EVIDENCE = Evidence(silent_below=2.0, full_from=6.0, name_penalty=2.0, small_talk_margin=0.1)


@pytest.mark.parametrize(
    ("top_z", "share"), [(0.0, 0.0), (2.0, 0.0), (3.0, 0.25), (4.0, 0.5), (6.0, 1.0), (9.0, 1.0)]
)
def test_the_budget_grows_with_the_evidence(top_z: float, share: float) -> None:
    assert EVIDENCE.share(query_with(top_z), 100) == pytest.approx(share)


def test_a_small_memory_needs_less_evidence_than_a_big_one() -> None:
    """The best of N unrelated messages scores about sqrt(2 ln N) spreads: that much is
    counted against the best match, so the same match earns more in a small memory."""
    sized = replace(EVIDENCE, size_weight=1.0)
    small, big = sized.share(query_with(5.0), 40), sized.share(query_with(5.0), 5000)
    assert small > big
    chance = math.sqrt(2 * math.log(40))
    assert small == pytest.approx(EVIDENCE.share(query_with(5.0 - chance), 40))
    assert sized.share(query_with(5.0), 1) == sized.share(query_with(5.0), 2)  # floor of 2
    model = replace(default_model(), evidence=sized)
    assert model.share(query_with(5.0), None, 10**9) == model.share(query_with(5.0), None, 5000)


def test_a_name_nothing_mentions_counts_against_and_small_talk_is_silent() -> None:
    assert EVIDENCE.share(query_with(5.0, name_missing=1.0), 100) == pytest.approx(
        EVIDENCE.share(query_with(3.0), 100)
    )
    chatty = replace(
        query_with(9.0, terms=2),
        baseline=QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=0.3),
    )
    assert EVIDENCE.is_small_talk(chatty)
    assert EVIDENCE.share(chatty, 100) == 0.0
    assert EVIDENCE.share(replace(query_with(9.0), terms=()), 100) == 0.0
    whole = replace(query_with(0.0), keyword_coverage=1.0)
    assert EVIDENCE.share(whole, 100) == 1.0  # every content word in one message
    assert EVIDENCE.share(replace(whole, cosines={}), 100) == 1.0  # even with no vector match
    assert EVIDENCE.share(replace(query_with(9.0), cosines={}), 100) == 0.0
    assert EVIDENCE.share(replace(whole, terms=("one",)), 100) == 0.0


@pytest.mark.parametrize(
    ("text", "about"),
    [
        ("What's my name?", True),
        ("Am I married?", True),
        ("what do I do for work", True),  # no question mark: asked all the same
        ("Which city am I from?", True),
        ("What’s my job?", True),  # a typographic apostrophe
        ("What's your name?", False),  # to the listener
        ("Am I boring you?", False),  # to the listener too
        ("Did you get my message?", False),  # chat with the listener
        ("Do you remember my name?", True),  # what the listener remembers of the asker
        ("What do you know about me?", True),
        ("I'm bored", False),  # no question
        ("Tell me a joke", False),
        ("How are you?", False),
        ("Why is the sky blue?", False),  # about nobody
        ("", False),
    ],
)
def test_a_question_about_the_one_asking(text: str, about: bool) -> None:
    assert asks_about_speaker(text) is about


@pytest.mark.parametrize(
    ("typed", "spelled"),
    [
        ("whats my name", "what's my name"),
        ("wheres my car", "where's my car"),
        ("hows it going", "how's it going"),
        ("cant sleep", "can't sleep"),
        ("u there?", "you there?"),
    ],
)
def test_a_contraction_typed_without_its_apostrophe_has_the_same_content_words(
    typed: str, spelled: str
) -> None:
    """ "whats my name" counted "what" as a word a message had to hold."""
    assert content_terms(typed) == content_terms(spelled)


def test_a_question_about_the_one_asking_is_no_small_talk_when_the_user_said_it() -> None:
    """MiniLM puts "What's my name?" nearer small talk than unrelated text: the rule
    silenced it after "my name is Priya" (a stranger's first try). A statement of the
    user's that holds a word of it and is nearer to it than any small-talk turn lets it
    through to the evidence rule; without one it stays silent."""
    chatty = replace(
        query_with(9.0, terms=1),
        baseline=QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=0.3, small_talk_top=0.5),
    )
    assert EVIDENCE.is_small_talk(chatty)
    asking = replace(chatty, about_speaker=True)
    assert not asking.said_nearer_than_small_talk  # the user said nothing of it
    assert EVIDENCE.is_small_talk(asking)
    said = replace(asking, top_user_statement=0.6)
    assert said.said_nearer_than_small_talk
    assert not EVIDENCE.is_small_talk(said)
    assert EVIDENCE.share(said, 100) == EVIDENCE.share(query_with(9.0, terms=1), 100) > 0
    assert EVIDENCE.is_small_talk(replace(said, top_user_statement=0.4))  # small talk nearer
    assert EVIDENCE.is_small_talk(replace(said, about_speaker=False))  # not about the asker
    assert EVIDENCE.share(replace(said, terms=()), 100) == 0.0  # no content term: silent


def test_only_the_users_statements_of_the_asked_word_answer_a_question_about_the_asker() -> None:
    """Stored small talk is mostly questions ("How's my day going?" said yesterday, the
    assistant's "How is your day going?"); a statement without the asked word ("my day
    is going ok") sits as near "Am I boring?" as "my name is Priya" does to its question."""
    said = [
        stored(0, "How's my day going?", "user"),
        stored(1, "My day is going fine, and yours?", "assistant"),
        stored(2, "my day is going ok, a bit tired", "user"),
        stored(3, "my name is Priya", "user"),
        stored(4, "What is my name again?", "user"),  # a question answers nothing
    ]
    messages = {m.id: m for m in said}
    dense = [("m0", 0.99), ("m1", 0.9), ("m2", 0.8), ("m4", 0.7), ("m3", 0.4)]
    baseline = QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=0.3, small_talk_top=0.5)
    query = Query.build("What's my name?", dense, [], messages, baseline, None)
    assert query.top_user_statement == 0.4  # the statement holding "name"
    query = Query.build("Am I boring?", dense, [], messages, baseline, None)
    assert query.top_user_statement is None


@given(
    st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=20),
    st.floats(0.05, 10.0),
    st.floats(-5.0, 5.0),
)
def test_rescaling_an_embedders_scores_changes_no_z(
    cosines: list[float], scale: float, shift: float
) -> None:
    """Relevance reads similarities only as z-scores, which no affine rescaling moves."""
    base = QueryBaseline(mean=0.1, spread=0.07, small_talk_margin=0.0)
    moved = QueryBaseline(mean=scale * 0.1 + shift, spread=scale * 0.07, small_talk_margin=0.0)
    values = np.array(cosines)
    assert np.allclose(base.z(values), moved.z(scale * values + shift))


def test_the_reference_measures_a_query_against_unrelated_text() -> None:
    fake = FakeEmbeddings(dimension=256)
    reference = Reference.from_vectors(fake.embed_documents([*UNRELATED, *SMALL_TALK]))
    chat = reference.baseline(fake.embed_query("thanks a lot, that helps"))
    topic = reference.baseline(fake.embed_query("beagle puppy biscuit"))
    assert chat.small_talk_margin > topic.small_talk_margin
    assert topic.spread > 0
    with pytest.raises(ValueError, match="reference vectors"):
        Reference.from_vectors(fake.embed_documents(["one"]))


# --- windows by evidence ---------------------------------------------------------------------


def stored(n: int, text: str, role: str) -> StoredMessage:
    return StoredMessage(
        id=f"m{n}",
        thread_id="t",
        resource_id="r",
        role=role,
        text=text,
        created_at=START,
        payload="{}",
        seq=n,
    )


def test_a_memory_smaller_than_the_floor_is_held_to_the_floors_bar() -> None:
    model = default_model()
    query = query_with(3.0)
    floor = model.size_floor
    assert model.share(query, None, 2) == model.share(query, None, floor)
    assert model.share(query, None, floor * 10) < model.share(query, None, floor)
    assert RelevanceModel.from_json(model.to_json()).size_floor == floor


def test_float_noise_never_picks_the_message_a_hit_shows() -> None:
    """Two messages of one window tied in probability up to the last bit of a float (the
    same store on PostgreSQL and a Chroma server: 0.07337538484349274 and ...76) showed
    the second as the hit on one backend and the first on the other; ids decide a tie."""
    from langchain_semantic_recall.relevance.model import _group

    window = (stored(2, "q two", "user"), stored(3, "q three", "user"))
    for noise in (0.0, 2e-17, -2e-17):
        chosen = {"m2": 0.07337538484349274, "m3": 0.07337538484349274 + noise}
        (hit,) = _group(["m2"], {"m2": window}, chosen, 2, 3)
        assert hit.message.id == "m2"


def test_a_message_carries_how_well_its_neighbours_match() -> None:
    thread = [
        stored(0, "what is your dog called?", "assistant"),
        stored(1, "Biscuit, a beagle", "user"),
        stored(2, "lovely", "assistant"),
    ]
    query = Query.build(
        "dog called",
        [("m0", 0.8)],
        [("m0", 3.0)],
        {m.id: m for m in thread},
        QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=-1.0),
        None,
    )
    weights = np.ones(6)
    rows = context_rows(query, thread, {"t": thread}, weights)
    prev, prev_question = CONTEXT.index("match_prev"), CONTEXT.index("match_prev_question")
    nxt = CONTEXT.index("match_next")
    assert rows[1, prev] > 0  # the answer follows the matching question
    assert rows[1, prev_question] == rows[1, prev]
    assert rows[0, nxt] == 0.0  # "Biscuit" matches nothing of the query
    assert rows[0, prev] == 0.0  # nothing before the first message
    assert rows[1, DIRECT.index("user")] == 1.0


@pytest.mark.parametrize(
    ("budget", "threshold", "seqs"),
    [(5, None, [0, 1, 2, 3, 5]), (None, 0.45, [0, 2, 3])],
)
def test_a_window_keeps_its_likeliest_messages_so_it_can_have_gaps(
    monkeypatch: pytest.MonkeyPatch, budget: int | None, threshold: float | None, seqs: list[int]
) -> None:
    """docs/guide.md: a hit at seq 2 may come back with seqs 0, 1, 2, 3 and 5."""
    thread = [stored(n, f"message {n}", ("user", "assistant")[n % 2]) for n in range(6)]
    chances = {"m0": 0.5, "m1": 0.4, "m2": 0.9, "m3": 0.6, "m4": 0.01, "m5": 0.3}
    monkeypatch.setattr(RelevanceModel, "probabilities", lambda *_: chances)
    monkeypatch.setattr(RelevanceModel, "share", lambda *_: 1.0)
    model = default_model()
    assert (model.before, model.after) == (2, 3)  # every message of the thread is in reach
    query = Query.build(
        "message",
        [("m2", 0.8)],
        [],
        {m.id: m for m in thread},
        QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=-1.0),
        None,
    )
    hits = model.select(query, ["m2"], {"m2": thread}, 6, budget=budget, threshold=threshold)
    assert [[m.seq for m in hit.window] for hit in hits] == [seqs]
    assert hits[0].message.id == "m2"


def acknowledged() -> tuple[list[StoredMessage], Query]:
    """A thread with acknowledgements ("yes"), which a short query's vector sits near."""
    texts = ["ok", "Do you have a dog?", "yes", "My dog is called Biscuit", "great thanks"]
    thread = [stored(n, text, ("user", "assistant")[n % 2 == 1]) for n, text in enumerate(texts)]
    query = Query.build(
        "dog name",
        [("m0", 0.95), ("m2", 0.9), ("m4", 0.9), ("m3", 0.5), ("m1", 0.4)],
        [("m2", 4.0), ("m3", 2.0)],
        {m.id: m for m in thread},
        QueryBaseline(mean=0.0, spread=0.1, small_talk_margin=-1.0),
        None,
    )
    return thread, query


def test_a_message_without_a_content_term_is_never_a_match_by_itself() -> None:
    """A bare "yes" scored 0.82 for "dog" in a small store, above the facts (it is near
    any short query): it holds no fact, so it matches nothing, and comes last as a
    candidate."""
    thread, query = acknowledged()
    assert [TermCache().of(m.text).bare for m in thread] == [True, False, True, False, True]
    rows = direct_rows(query, thread)
    z, dense, keyword = (DIRECT.index(n) for n in ("z", "in_dense", "in_keyword"))
    for n in (0, 2, 4):
        assert (rows[n, z], rows[n, dense], rows[n, keyword]) == (query.floor_z, 0.0, 0.0)
    assert (rows[3, dense], rows[3, keyword]) == (1.0, 1.0)
    kept = default_model().best_candidates(query, {m.id: m for m in thread})
    assert kept[:2] == ["m3", "m1"]
    assert sorted(kept[2:]) == ["m0", "m2", "m4"]


def test_an_acknowledgement_is_never_likelier_than_what_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread, query = acknowledged()
    model = default_model()
    windows = {"m3": thread, "m1": thread}
    p = model.probabilities(query, ["m3", "m1"], windows, 300)
    assert p["m2"] < p["m1"]  # "yes" rides with the question it answers, after it
    assert p["m4"] < p["m3"]
    assert p["m0"] == 0.0  # nothing before it: it answers nothing in reach
    monkeypatch.setattr(RelevanceModel, "share", lambda *_: 1.0)
    hits = model.select(query, ["m3", "m1"], windows, 300, budget=15, threshold=None)
    assert hits
    assert all(not TermCache().of(hit.message.text).bare for hit in hits)
    assert "m0" not in {m.id for hit in hits for m in hit.window}


def test_an_acknowledgement_never_comes_without_what_it_answers() -> None:
    """ "ok thanks" came back as a hit of its own, its "Anything else?" in another hit."""
    from langchain_semantic_recall.relevance.model import _group

    texts = ["my car squeaks", "brake pads", "have them checked", "Anything else?", "ok thanks"]
    thread = [stored(n, text, ("user", "assistant")[n % 2]) for n, text in enumerate(texts)]
    windows = {"m0": thread, "m4": thread}
    chosen = {"m0": 0.9, "m3": 0.5, "m4": 0.49}
    alone = _group(["m0", "m4"], windows, chosen, 2, 3)
    assert [[m.id for m in h.window] for h in alone] == [["m0", "m3"], ["m4"]]
    hits = _group(["m0", "m4"], windows, chosen, 2, 3, riders={"m4"})
    assert [[m.id for m in h.window] for h in hits] == [["m0", "m3"]]


# --- the data file and other embedders -------------------------------------------------------


def test_the_shipped_numbers_name_what_they_were_fitted_for() -> None:
    model = default_model()
    assert model.fitted_for.embedder == "all-MiniLM-L6-v2"
    assert model.fitted_for.dimension == 384
    assert model.fitted_for.keywords["b"] == 0.3
    assert model.fitted_for.matches("sentence-transformers/all-MiniLM-L6-v2", 384)
    assert not model.fitted_for.matches("text-embedding-3-small", 1536)
    assert RelevanceModel.from_json(model.to_json()) == model


def test_a_data_file_missing_a_weight_is_refused() -> None:
    data = default_model().to_json()
    del data["direct"]["z"]
    with pytest.raises(ValueError, match="lacks weights"):
        RelevanceModel.from_json(data)


def test_stats_say_when_memory_holds_text_the_model_was_not_fitted_on() -> None:
    """Measured (docs/quality.md, "Other languages"): for text outside the Latin script
    recall is rarely silent, since every sentence of that script looks related to the
    English-fitted numbers. The engine says so where the fit is described."""
    memory = engine()
    memory.index(
        [
            HumanMessage("我对花生过敏，请记住。"),
            AIMessage("好的，我记住了。"),
            HumanMessage("أنا أعاني من حساسية الفول السوداني"),
            HumanMessage("I'm allergic to peanuts, 花生."),
            HumanMessage("Je suis allergique aux cacahuètes."),
        ],
        thread_id="t1",
        resource_id="r",
    )
    note = memory.stats(resource_id="r").relevance
    assert "3 of 5 messages are mostly in another script than Latin" in note
    memory.forget_thread("t1", resource_id="r")
    memory.index([HumanMessage("Je suis allergique.")], thread_id="t2", resource_id="r")
    assert "script" not in memory.stats(resource_id="r").relevance


def test_another_embedder_is_named_once_at_construction_and_in_stats(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "_NAMED", set())  # (other tests named fake-bow before)
    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        memory = engine()
        memory.with_options(top_k=3)
    warned = [r for r in caplog.records if "relevance model" in r.getMessage()]
    assert len(warned) == 1
    assert "fake-bow" in warned[0].getMessage()
    memory.index(conversation("h", HISTORY), thread_id="t1", resource_id="r")
    assert memory.stats(resource_id="r").relevance.startswith("not fitted for fake-bow")


def test_the_note_on_another_dimension_of_the_fitted_models_name_says_which() -> None:
    """It read "not fitted for all-MiniLM-L6-v2: its numbers were fitted for
    all-MiniLM-L6-v2 (384-d)", a contradiction to a reader (an audit)."""
    from langchain_semantic_recall.relevance import default_model

    note = default_model().unfitted_note("all-MiniLM-L6-v2", 768)
    assert note is not None
    assert note.startswith("not fitted for all-MiniLM-L6-v2 (768-d): its numbers were fitted")
    assert default_model().unfitted_note("all-MiniLM-L6-v2", 384) is None


def test_engines_built_per_request_name_their_embedders_model_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One engine per request, each with its own embedder of one model (as a handler that
    builds `OpenAIEmbeddings()` each time): one warning, and nothing kept per embedder.

    Before: a warning per engine, and each embedder's id kept for the process's life."""
    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        for _ in range(5):
            SemanticRecall(
                storage=InMemoryStorage(),
                vector_store=InMemoryVectorIndex(),
                embeddings=FakeEmbeddings(model="per-request-model"),
            )
    warned = [r for r in caplog.records if "per-request-model" in r.getMessage()]
    assert len(warned) == 1


def test_dense_and_keyword_modes_never_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        engine(search_mode="dense")
        engine(search_mode="keyword")
    assert not [r for r in caplog.records if "relevance model" in r.getMessage()]


def texts_of(memory: SemanticRecall) -> TermCache:
    return memory._core.backends.space.texts


def test_each_engine_owns_its_term_cache_and_a_forget_empties_it(memory: SemanticRecall) -> None:
    other = engine()
    other.index(conversation("o", HISTORY), thread_id="t9", resource_id="r")
    assert memory.search("What is my dog called?", resource_id="r")
    assert len(texts_of(memory)) > 0
    assert len(texts_of(other)) == 0  # another engine's searches never fill it
    assert texts_of(memory.with_options(top_k=3)) is texts_of(memory)  # copies share it
    memory.forget_thread("t1", resource_id="r")
    assert len(texts_of(memory)) == 0  # its keys are the forgotten messages' text


def test_shipped_reference_vectors_are_only_for_the_packages_own_local_model(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings
    from langchain_semantic_recall.relevance import reference

    own = reference.shipped(LocalEmbeddings())  # the file only: the model is not loaded
    assert own is not None
    assert own.unrelated.shape == (len(reference.UNRELATED), LocalEmbeddings.dimension)
    assert own.small_talk.shape == (len(reference.SMALL_TALK), LocalEmbeddings.dimension)
    assert reference.shipped(FakeEmbeddings()) is None

    class Tuned(LocalEmbeddings):  # a subclass may embed differently: it embeds the texts
        pass

    assert reference.shipped(Tuned()) is None
    monkeypatch.setattr(reference, "UNRELATED", (*reference.UNRELATED, "A new sentence."))
    with caplog.at_level(logging.WARNING):
        assert reference.shipped(LocalEmbeddings()) is None  # the file is for other texts
    assert "other texts" in caplog.text


def test_an_engine_on_another_embedder_embeds_the_reference_once() -> None:
    embeddings = FakeEmbeddings(dimension=64)
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=embeddings
    )
    memory.index([HumanMessage("I am allergic to peanuts")], thread_id="t", resource_id="u")
    memory.search("what food should I avoid", resource_id="u")
    memory.search("and what else", resource_id="u")
    batches = [len(call) for call in embeddings.calls]
    assert batches.count(len(UNRELATED) + len(SMALL_TALK)) == 1


@pytest.mark.parametrize(
    ("name", "fitted"),
    [
        ("sentence-transformers/all-MiniLM-L6-v2", True),
        ("all-minilm-l6-v2", True),
        ("all-MiniLM-L6-v2-finetuned", False),  # it was "fitted for": a prefix matched
        ("my-org/all-MiniLM-L6-v2-onnx-int8", False),
    ],
)
def test_the_fitted_embedder_is_matched_by_its_whole_name(name: str, fitted: bool) -> None:
    model = default_model()
    assert (model.unfitted_note(name, 384) is None) is fitted
