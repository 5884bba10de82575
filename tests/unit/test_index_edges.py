"""Edge cases of embedding and indexing: what the embedder, the caller or a race hands us.

Each case is refused clearly, reported, or round-trips faithfully; none is stored or
recalled changed.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage

from langchain_semantic_recall import (
    EmbeddingMismatchError,
    InMemoryStorage,
    InvalidInputError,
    SemanticRecall,
    SemanticRecallError,
    SQLiteStorage,
)
from langchain_semantic_recall.messages import query_text
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, UnusableFor

IDS = {"thread_id": "t1", "resource_id": "alice"}


class AnswersWith(Embeddings):
    """An embedder whose first answer is `first` (then FakeEmbeddings' vectors)."""

    def __init__(self, first: Any) -> None:
        self.first = first
        self.inner = FakeEmbeddings(8)
        self.inner.dimension = None  # no declared dimension: the engine probes
        self.answered = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.answered += 1
        if self.answered == 1:
            return self.first  # type: ignore[no-any-return]
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.mark.parametrize("first", [[[]], [None], [], None])
async def test_no_vector_on_the_first_embed_is_an_embedder_failure(first: Any) -> None:
    for asynchronous in (False, True):
        memory = SemanticRecall(
            storage=InMemoryStorage(),
            vector_store=InMemoryVectorIndex(),
            embeddings=AnswersWith(first),
        )
        turn = [HumanMessage("what did I say about the garden?")]
        # Recall degrades to no memory, as when the embedder raises: not a mismatch.
        if asynchronous:
            assert await memory.arecall(turn, **IDS) == turn
        else:
            assert memory.recall(turn, **IDS) == turn
        memory = SemanticRecall(
            storage=InMemoryStorage(),
            vector_store=InMemoryVectorIndex(),
            embeddings=AnswersWith(first),
        )
        with pytest.raises(SemanticRecallError, match="no usable vector") as raised:
            memory.search("garden", **IDS)
        assert not isinstance(raised.value, EmbeddingMismatchError)


def test_an_all_zero_vector_is_refused_with_a_reason() -> None:
    vectors = InMemoryVectorIndex()
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=vectors, embeddings=UnusableFor("blank")
    )
    result = memory.index([HumanMessage("blank answer", id="z1")], **IDS)
    assert result.embedded == ()
    assert result.error is not None
    assert "all-zero vector" in result.error
    assert vectors.message_ids(memory.stats().index_name) == set()
    assert memory.index([HumanMessage("a garden", id="g1")], **IDS).embedded == ("g1",)
    # The query gets zeros too: hybrid search answers from its words (the message without
    # a vector is found by them).
    assert [hit.message.id for hit in memory.search("blank answer", **IDS)] == ["z1"]


@pytest.mark.parametrize(
    ("value", "kind"),
    [(object(), "object"), ({"a", "b"}, "set"), (b"raw", "bytes"), (Decimal("1.5"), "Decimal")],
)
def test_additional_kwargs_that_are_not_json_are_refused_not_changed(
    value: object, kind: str
) -> None:
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings(8)
    )
    message = HumanMessage("hello", id="h1", additional_kwargs={"ok": 1, "extra": value})
    with pytest.raises(InvalidInputError, match=rf"additional_kwargs\['extra'\].*{kind}"):
        memory.index([message], **IDS)
    assert memory.storage.count() == 0


def test_json_additional_kwargs_and_a_datetime_created_at_round_trip() -> None:
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings(8)
    )
    extra = {"nested": {"list": [1, 2.5, None, True, "é"]}, "n": -3}
    when = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    sent = HumanMessage("hello", id="h1", additional_kwargs={**extra, "created_at": when})
    memory.index([sent], **IDS)
    (stored,) = memory.storage.list_messages()
    back = stored.to_message()
    assert back.additional_kwargs == {**extra, "created_at": when.isoformat()}
    assert stored.created_at == when


class RacedStorage(SQLiteStorage):
    """Another engine on the same file stores the same turn right after our read."""

    other: SemanticRecall | None = None

    def _get_windows(self, *args: Any, **kwargs: Any) -> Any:
        found = super()._get_windows(*args, **kwargs)
        other, self.other = self.other, None
        if other is not None:  # between this engine's read and its write
            assert other.index(turn_of_two(), **IDS).stored == ("u1", "a1")
        return found


def turn_of_two() -> list[HumanMessage | AIMessage]:
    return [HumanMessage("the same turn", id="u1"), AIMessage("twice", id="a1")]


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_two_writers_of_the_same_ids_do_not_both_report_stored(
    tmp_path: Path, asynchronous: bool
) -> None:
    path = tmp_path / "m.db"
    raced = RacedStorage(path)
    vectors = InMemoryVectorIndex()
    first = SemanticRecall(storage=raced, vector_store=vectors, embeddings=FakeEmbeddings(8))
    raced.other = SemanticRecall(
        storage=SQLiteStorage(path), vector_store=vectors, embeddings=FakeEmbeddings(8)
    )
    if asynchronous:
        result = await first.aindex(turn_of_two(), **IDS)
    else:
        result = first.index(turn_of_two(), **IDS)
    assert raced.other is None  # the other engine did write in between
    assert result.stored == ()
    assert [f.fate for f in result.fates] == ["unchanged", "unchanged"]
    assert first.storage.count() == 2


async def test_a_repeated_id_is_not_reported_as_left_without_a_vector() -> None:
    """`skipped` said the kept (and embedded) message got no vector, since its dropped
    earlier copy's reason was keyed by the same id."""
    for asynchronous in (False, True):
        memory = SemanticRecall(
            storage=InMemoryStorage(),
            vector_store=InMemoryVectorIndex(),
            embeddings=FakeEmbeddings(),
        )
        turn = [HumanMessage("first", id="m1"), HumanMessage("kept", id="m1")]
        result = await memory.aindex(turn, **IDS) if asynchronous else memory.index(turn, **IDS)
        assert result.embedded == ("m1",)
        assert result.skipped == {}
        assert [f.fate for f in result.fates] == ["skipped", "stored"]
        assert result.fates[0].reason == "the same id appears later in this call"


async def test_a_turn_without_ids_skips_the_read_for_stored_ids_but_one_with_ids_makes_it() -> None:
    """Messages without ids get new random ones: nothing can be stored under them yet."""
    from tests.fakes import RecordingStorage

    storage = RecordingStorage(InMemoryStorage())
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings(8)
    )
    for asynchronous in (False, True):
        storage.calls.clear()
        turn = [HumanMessage("the garden"), AIMessage("the tomatoes")]
        done = await memory.aindex(turn, **IDS) if asynchronous else memory.index(turn, **IDS)
        assert [f.fate for f in done.fates] == ["stored", "stored"]
        assert "get_windows" not in storage.names()
    # With ids, the read is made: the same turn again is unchanged, not stored twice.
    turn = [HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")]
    assert [f.fate for f in memory.index(turn, **IDS).fates] == ["stored", "stored"]
    storage.calls.clear()
    assert [f.fate for f in memory.index(turn, **IDS).fates] == ["unchanged", "unchanged"]
    assert "get_windows" in storage.names()
    # One message with an id and one without: each read names the one with an id only,
    # before the write (is it stored?) and after it (is its text still the one embedded?).
    storage.calls.clear()
    memory.index([HumanMessage("again", id="h2"), AIMessage("no id")], **IDS)
    reads = [kwargs for name, kwargs in storage.calls if name == "get_windows"]
    assert [read["message_ids"] for read in reads] == [["h2"], ["h2"]]


def test_a_chat_message_of_an_unknown_role_is_skipped_and_never_the_query() -> None:
    """`ChatMessage(role="moderator")` was stored as the user's words, recalled as
    "User:", and, last in the input, searched as the user's question."""
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    memory.index([HumanMessage("we went to Lisbon in March", id="m1")], **IDS)
    said = [
        HumanMessage("where did we go in March?", id="q"),
        ChatMessage(role="moderator", content="reminder: tomato garden rules", id="mod"),
        ChatMessage(role="Human", content="and in May?", id="h2"),
    ]
    result = memory.index(said, **IDS)
    assert [f.fate for f in result.fates] == ["stored", "skipped", "stored"]
    reason = result.fates[1].reason or ""
    assert "'moderator'" in reason
    assert "does not know" in reason
    assert [m.id for m in memory.chat_history("t1", resource_id="alice").messages] == [
        "m1",
        "q",
        "h2",
    ]
    assert query_text(said[:2]) == "where did we go in March?"  # not the moderator's
    assert query_text(said) == "and in May?"  # a known role's user is still the user


def test_surfaces_without_fates_log_every_message_they_do_not_store(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The chat history and the graph's store node return no fates: a moderator's
    `ChatMessage` or a message whose id comes again later in the call was dropped there
    without a word. Recalled memory and `RemoveMessage`s, never stored by design, stay
    quiet."""
    from langchain_core.messages import RemoveMessage

    from langchain_semantic_recall.graph import IndexNode

    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        search_mode="dense",
        threshold=0.0,
    )
    moderator = ChatMessage(role="moderator", content="tomato garden rules", id="mod")
    memory.index([HumanMessage("we went to Lisbon in March", id="m1")], **IDS)
    recalled = memory.recall([HumanMessage("where did we go?", id="q")], **IDS)[0]
    assert recalled.id != "q"  # the memory block, as a graph state would hold it
    quiet = [recalled, RemoveMessage(id="m1"), HumanMessage("fine", id="f")]

    def warned(call: Any) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
            call()
        return [r.getMessage() for r in caplog.records if "was not stored" in r.getMessage()]

    history = memory.chat_history("t2", resource_id="alice")
    (said,) = warned(lambda: history.add_messages([HumanMessage("hi", id="h"), moderator]))
    assert all(part in said for part in ("'mod'", "'moderator'", "'t2'"))
    twice = [HumanMessage("a", id="x"), AIMessage("b", id="x")]
    (said,) = warned(lambda: history.add_messages(twice))
    assert all(part in said for part in ("'x'", "appears later"))
    config = {"configurable": {"thread_id": "t3", "resource_id": "alice"}}
    (said,) = warned(lambda: IndexNode(memory).invoke({"messages": [moderator]}, config))
    assert "'moderator'" in said
    assert warned(lambda: memory.index(quiet, **IDS)) == []


def test_a_new_index_warns_of_history_only_from_before_the_engine_was_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Messages another engine (another worker, a concurrent first call) stores once this
    one is built get their vectors: no warning. History from before does: it has none."""
    storage = InMemoryStorage()
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    beside = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    beside.index([HumanMessage("bob's first words", id="b1")], thread_id="tb", resource_id="bob")
    with caplog.at_level(logging.WARNING):
        memory.index([HumanMessage("alice's first words", id="a1")], **IDS)
    assert not [r for r in caplog.records if "already holds messages" in r.getMessage()]
    later = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    with caplog.at_level(logging.WARNING):
        later.search("first words", resource_id="alice")
    assert [r for r in caplog.records if "already holds messages" in r.getMessage()]


def test_no_new_index_warning_for_an_engines_own_dated_messages_nor_for_stats(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A first import whose first conversation has nothing to embed (a system message,
    dated) left it uncounted: the next conversation's index warned of "history"; and the
    command line's reindex warned "until reindex" from the stats it reads first."""
    from langchain_core.messages import SystemMessage

    old = {"created_at": "2020-01-01T00:00:00+00:00"}
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    with caplog.at_level(logging.WARNING):
        memory.index([SystemMessage("be kind", additional_kwargs=old)], **IDS)
        memory.index(
            [HumanMessage("lisbon", additional_kwargs=old)], thread_id="t2", resource_id="alice"
        )
        other = SemanticRecall(
            storage=memory.storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings(8)
        )
        assert other.stats().missing_vectors == 1  # said there, not warned of
        assert other.reindex() == 1
    assert not [r for r in caplog.records if "already holds messages" in r.getMessage()]


class _StrictEmbeddings(FakeEmbeddings):
    """Refuses text no UTF-8 encoder takes, as the local model's tokenizer does."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        for text in texts:
            text.encode("utf-8")
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        text.encode("utf-8")
        return super().embed_query(text)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_a_query_with_a_lone_surrogate_is_searched_on_every_surface(mode: str) -> None:
    """Half of an emoji a client split: `index` and `recall` replace it, but `search`, the
    retriever and the tool handed it on, and the local model's tokenizer raised a bare
    TypeError (the CLI's `search` and `inspect`: "internal error")."""
    import asyncio

    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=_StrictEmbeddings(),
        search_mode=mode,  # type: ignore[arg-type]
        threshold=None if mode == "keyword" else 0.0,
    )
    memory.index([HumanMessage("I love pizza \ud83d so much", id="x1")], **IDS)
    query = "pizza \ud83d"
    config = {"configurable": IDS}
    assert [h.message.id for h in memory.search(query, **IDS)] == ["x1"]
    assert [h.message.id for h in asyncio.run(memory.asearch(query, **IDS))] == ["x1"]
    assert [d.id for d in memory.as_retriever().invoke(query, config)] == ["x1"]
    assert "pizza" in memory.as_tool().invoke({"query": query}, config)
