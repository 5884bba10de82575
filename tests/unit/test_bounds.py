"""Bounded on both sides: what one message costs to index, and what recall injects."""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InvalidOptionError
from langchain_semantic_recall.formatting import MIN_SHOWN_CHARS, fit_texts
from langchain_semantic_recall.messages import is_recalled
from langchain_semantic_recall.options import (
    DEFAULT_MAX_BLOCK_CHARS,
    DEFAULT_MAX_INDEX_CHARS,
    MAX_MESSAGE_RANGE,
    MAX_TOP_K,
)
from langchain_semantic_recall.records import ScopeFilter
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors
from tests.unit.conftest import EngineFactory

HUGE = 5_000_011
MARKER = "\u2026 [truncated "


def _stored_text(storage: RecordingStorage, message_id: str, thread_id: str) -> str:
    windows = storage.inner.get_windows(
        [message_id], before=0, after=0, scope=ScopeFilter(thread_id=thread_id)
    )
    return windows[message_id][0].text


def _injected(out: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in out if is_recalled(m)]


def _chars(messages: list[BaseMessage]) -> int:
    return sum(len(m.text) for m in messages)


# --- indexing: a per-message cap ------------------------------------------------------------


def test_the_defaults_are_bounded(make_engine: EngineFactory) -> None:
    engine = make_engine()
    assert engine.max_block_chars == DEFAULT_MAX_BLOCK_CHARS == 16_000
    assert engine.max_index_chars == DEFAULT_MAX_INDEX_CHARS == 16_000
    unbounded = engine.with_options(max_block_chars=None, max_index_chars=None)
    assert (unbounded.max_block_chars, unbounded.max_index_chars) == (None, None)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "100"])
def test_max_index_chars_is_validated(make_engine: EngineFactory, value: object) -> None:
    with pytest.raises(InvalidOptionError, match="max_index_chars"):
        make_engine(max_index_chars=value)


def test_a_huge_message_embeds_a_bounded_prefix_and_is_stored_whole(
    make_engine: EngineFactory,
    embeddings: FakeEmbeddings,
    storage: RecordingStorage,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = make_engine(max_index_chars=10_000)
    text = "word " * 40_000  # 200,000 characters
    with caplog.at_level(logging.WARNING):
        result = engine.index([HumanMessage(text, id="big")], thread_id="t", resource_id="r")
    assert result.embedded == ("big",)
    (fate,) = result.fates
    assert fate.embedded
    assert fate.truncated_chars == 190_000
    assert result.skipped == {}  # a truncated message is not a skipped one
    # two chunks of the first 10,000 characters (6,000-character chunks that overlap)
    assert len(embeddings.embedded_texts) == 2  # 34 without the cap
    assert sum(len(t) for t in embeddings.embedded_texts) <= 10_000 + 500
    assert _stored_text(storage, "big", "t") == text
    assert "max_index_chars" in caplog.text
    assert "'big' (user, thread 't')" in caplog.text  # an id the caller may never have seen


def test_a_short_message_reports_nothing_truncated(make_engine: EngineFactory) -> None:
    result = make_engine().index([HumanMessage("hi", id="m")], thread_id="t", resource_id="r")
    assert result.fates[0].truncated_chars == 0


def test_a_word_past_the_cap_is_not_found_by_vector_search(
    make_engine: EngineFactory, vectors: RecordingVectors, storage: RecordingStorage
) -> None:
    text = "filler " * 3_000 + "the zebra password is ostrich"  # the zebra at 21,004
    ids = {"thread_id": "t", "resource_id": "r"}
    # the fake embedder is a bag of words: a chunk of "filler" alone scores 0
    capped = make_engine(search_mode="dense", threshold=0.001, max_index_chars=20_000)
    capped.index([HumanMessage(text, id="long")], **ids)
    rows = [r for call in vectors.of("upsert") for r in call["records"]]
    assert rows
    assert not any("zebra" in r.content for r in rows)
    assert capped.search("zebra password ostrich", **ids) == []
    assert _stored_text(storage, "long", "t") == text  # stored whole
    whole = capped.with_options(max_index_chars=None)
    assert whole.reindex() == 1  # reindex follows the engine's cap: now all of it
    assert [h.message.id for h in whole.search("zebra password ostrich", **ids)] == ["long"]


def test_bulk_import_and_reindex_embed_the_capped_prefix(
    make_engine: EngineFactory, embeddings: FakeEmbeddings
) -> None:
    engine = make_engine(max_index_chars=7_000)
    messages = [HumanMessage("x " * 50_000, id="a"), AIMessage("short answer", id="b")]
    result = engine.bulk_index([("t", "r", messages)])
    assert (result.stored, result.embedded) == (2, 2)
    assert len(embeddings.embedded_texts) == 3  # two chunks of 7,000 characters, one answer
    embeddings.calls.clear()
    engine.cache.clear()
    assert engine.reindex() == 2
    assert len(embeddings.embedded_texts) == 3


# --- recall: one budget for everything it injects -------------------------------------------


def test_a_huge_message_from_another_thread_is_recalled_within_the_default_budget(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine()  # the defaults
    huge = "my peanut allergy " + "y" * (HUGE - 18)
    engine.index([HumanMessage(huge, id="huge")], thread_id="t1", resource_id="alice")
    question = HumanMessage("peanut allergy?", id="q")
    out = engine.recall([question], thread_id="t2", resource_id="alice")
    injected = _injected(out)
    assert len(injected) == 1
    assert "peanut allergy" in injected[0].text
    assert _chars(injected) <= DEFAULT_MAX_BLOCK_CHARS
    assert MARKER in injected[0].text
    assert out[-1] is question


def test_a_huge_message_of_the_same_thread_is_recalled_within_the_default_budget(
    make_engine: EngineFactory,
) -> None:
    engine = make_engine()
    huge = "my peanut allergy " + "y" * (HUGE - 18)
    engine.index(
        [HumanMessage(huge, id="huge"), AIMessage("noted", id="ok")],
        thread_id="t1",
        resource_id="alice",
    )
    out = engine.recall(
        [HumanMessage("peanut allergy?", id="q")], thread_id="t1", resource_id="alice"
    )
    injected = _injected(out)
    (recalled,) = [m for m in injected if m.id == "huge"]
    assert isinstance(recalled, HumanMessage)  # same thread: as itself, not a block
    assert recalled.text.startswith("my peanut allergy")
    assert MARKER in recalled.text
    assert _chars(injected) <= DEFAULT_MAX_BLOCK_CHARS
    assert any(m.id == "ok" and m.text == "noted" for m in injected)  # short: whole


@pytest.mark.parametrize("budget", [600, 1_000, 5_000, 16_000])
def test_the_block_and_same_thread_messages_share_one_budget(
    make_engine: EngineFactory, budget: int
) -> None:
    engine = make_engine(max_block_chars=budget)
    long = "Lisbon trip " + "plans " * 5_000
    for thread in ("t1", "t2"):
        engine.index(
            [HumanMessage(long, id=f"{thread}-u"), AIMessage(long, id=f"{thread}-a")],
            thread_id=thread,
            resource_id="r",
        )
    out = engine.recall(
        [HumanMessage("Lisbon trip plans?", id="q")], thread_id="t2", resource_id="r"
    )
    injected = _injected(out)
    assert injected
    assert _chars(injected) <= budget
    if budget >= 5_000:  # room for both kinds
        assert isinstance(injected[0].content, str)
        assert "remembered" in injected[0].content
        assert any(m.id in ("t2-u", "t2-a") and MARKER in m.text for m in injected)


def test_without_a_budget_recall_injects_messages_whole(make_engine: EngineFactory) -> None:
    engine = make_engine(max_block_chars=None)
    long = "Lisbon " + "data " * 10_000
    engine.index([HumanMessage(long, id="big")], thread_id="t1", resource_id="r")
    out = engine.recall([HumanMessage("Lisbon data", id="q")], thread_id="t1", resource_id="r")
    (recalled,) = _injected(out)
    assert recalled.text == long


# --- fit_texts ------------------------------------------------------------------------------


def test_fit_texts_keeps_short_texts_whole_and_shares_the_rest() -> None:
    texts = ["short", "a" * 10_000, "b" * 10_000]
    fitted = fit_texts(texts, 2_005)
    assert fitted[0] == "short"
    assert all(f is not None for f in fitted)
    assert sum(len(f or "") for f in fitted) <= 2_005
    assert fitted[1] is not None
    assert fitted[1].startswith("a" * 900)
    assert MARKER in fitted[1]
    assert fit_texts(texts, 100_000) == texts


def test_fit_texts_drops_what_cannot_show_a_head() -> None:
    fitted = fit_texts(["a" * 1_000, "b" * 1_000], MIN_SHOWN_CHARS + 30)
    assert fitted[1] is None
    assert fitted[0] is not None
    assert fit_texts(["a" * 1_000], 0) == [None]
    assert fit_texts(["", "x"], 0) == ["", None]


async def test_a_huge_query_is_searched_by_its_first_max_index_chars(
    make_engine: EngineFactory, embeddings: FakeEmbeddings, caplog: pytest.LogCaptureFixture
) -> None:
    """A pasted document as the question: its start is searched, and the log says so."""
    engine = make_engine(max_index_chars=200)
    engine.index(
        [HumanMessage("I am allergic to peanuts."), AIMessage("Noted.")],
        thread_id="t1",
        resource_id="r",
    )
    tail = " ".join(f"word{n}" for n in range(50_000))
    for call in ("search", "asearch", "recall", "arecall"):
        huge = f"{call}: am I allergic to peanuts? {tail}"  # no embedding cached for it
        embeddings.calls.clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            if call in ("search", "asearch"):
                run = getattr(engine, call)(huge, resource_id="r")
                hits = await run if call == "asearch" else run
                assert any("peanuts" in h.message.text for h in hits)
            else:
                turn = [HumanMessage(huge)]
                run = getattr(engine, call)(turn, thread_id="t2", resource_id="r")
                out = await run if call == "arecall" else run
                assert "allergic to peanuts" in _injected(out)[0].text
                assert out[-1].text == huge  # the input itself is never cut
        assert embeddings.embedded_texts  # the query was embedded ...
        assert max(len(t) for t in embeddings.embedded_texts) <= 200  # ... by its start
        assert f"has {len(huge)} characters; it is searched by its first 200" in caplog.text


# --- windows: a reach that fits in memory ---------------------------------------------------


@pytest.mark.parametrize(
    "value", [MAX_MESSAGE_RANGE + 1, 10**12, (0, 2**70), {"before": 10**9, "after": 1}]
)
def test_a_window_past_its_bound_is_refused_at_construction(
    make_engine: EngineFactory, value: object
) -> None:
    """`message_range=10**12` once built a weight per position and exhausted memory."""
    with pytest.raises(InvalidOptionError, match="from 0 to 10,000"):
        make_engine(message_range=value)


def test_a_window_past_its_bound_is_refused_by_with_options(make_engine: EngineFactory) -> None:
    engine = make_engine()
    with pytest.raises(InvalidOptionError, match="from 0 to 10,000"):
        engine.with_options(message_range=10**12)
    with pytest.raises(InvalidOptionError, match="from 0 to 10,000"):
        engine.with_options(message_range=(2**70, 0))


def test_the_widest_window_allowed_still_recalls(make_engine: EngineFactory) -> None:
    engine = make_engine(message_range=MAX_MESSAGE_RANGE)
    engine.index([HumanMessage("Lisbon in May", id="m1")], thread_id="t", resource_id="r")
    out = engine.recall([HumanMessage("Lisbon in May?")], thread_id="t2", resource_id="r")
    assert any("Lisbon" in m.text for m in _injected(out))


@pytest.mark.parametrize("value", [MAX_TOP_K + 1, 2**70])
def test_a_top_k_past_its_bound_is_refused(make_engine: EngineFactory, value: int) -> None:
    """`top_k=2**70` reached the vector index and raised a bare OverflowError there."""
    with pytest.raises(InvalidOptionError, match="from 1 to 10,000"):
        make_engine(top_k=value)
    engine = make_engine()
    engine.index([HumanMessage("Lisbon in May", id="m1")], thread_id="t", resource_id="r")
    with pytest.raises(InvalidOptionError, match="from 1 to 10,000"):
        engine.search("Lisbon", resource_id="r", top_k=value)
    assert engine.search("Lisbon", resource_id="r", top_k=MAX_TOP_K)
