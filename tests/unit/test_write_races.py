"""Two writes of one message that overlap: the vector follows the text stored last.

An edit (the same id indexed again with new text) beside another edit, or beside a
`reindex` that read the old text, embeds in parallel; the vector write that lands last
won, even with the older text. The message was then found by words it no longer held
(a redacted card number among them), and `stats` saw nothing amiss (an audit).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.engine.vector_writes import KEPT_CHANGING, TEXT_CHECKS
from langchain_semantic_recall.messages import serialise
from langchain_semantic_recall.records import NO_RESOURCE, MessageRecord
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

IDS: dict[str, Any] = {"thread_id": "t", "resource_id": "alice"}


class HeldEmbeddings(FakeEmbeddings):
    """Holds every batch holding `word` until `release` is set (after `entered`)."""

    def __init__(self, word: str = "HOLD") -> None:
        super().__init__(dimension=256)
        self.word = word
        self.entered = threading.Event()
        self.release = threading.Event()
        self.on_hold: Callable[[], None] | None = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if any(self.word in text for text in texts):
            if self.on_hold is not None:
                self.on_hold()
            else:
                self.entered.set()
                assert self.release.wait(10), "never released"
        return super().embed_documents(texts)


def _engine(embeddings: HeldEmbeddings) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=embeddings
    )


def _vector_texts(memory: SemanticRecall, message_id: str) -> list[str]:
    """What the index holds for the message: each of its rows' text."""
    rows = memory.vector_store.export(memory.ensure_index().name)
    return [row.content for row in rows if row.message_id == message_id]


def _held_call(target: Callable[[], object], embeddings: HeldEmbeddings) -> threading.Thread:
    """`target` started on a thread, returned once it waits in the embedder."""
    thread = threading.Thread(target=target)
    thread.start()
    assert embeddings.entered.wait(10), "the held call never reached the embedder"
    return thread


def test_an_edit_that_lands_its_vector_last_with_the_older_text_is_written_again() -> None:
    embeddings = HeldEmbeddings()
    memory = _engine(embeddings)
    first = _held_call(
        lambda: memory.index([HumanMessage("HOLD pineapples", id="m1")], **IDS), embeddings
    )
    result = memory.index([HumanMessage("zebras at the zoo", id="m1")], **IDS)
    assert result.embedded == ("m1",)
    embeddings.release.set()  # the first edit writes its older text's vector last
    first.join(10)
    assert [m.text for m in memory.storage.list_messages()] == ["zebras at the zoo"]
    assert _vector_texts(memory, "m1") == ["zebras at the zoo"]
    stats = memory.stats()
    assert (stats.missing_vectors, stats.orphan_vectors) == (0, 0)


def test_a_redaction_beside_a_reindex_keeps_the_old_words_out_of_the_index() -> None:
    """`reindex` read the card number, the redaction stored and embedded "[redacted]",
    then `reindex` wrote the card number's vector back over it."""
    embeddings = HeldEmbeddings(word="4111")
    memory = _engine(embeddings)
    embeddings.on_hold = lambda: None  # the first write passes, through another process's
    other = SemanticRecall(  # engine (its embedding cache is not this one's)
        storage=memory.storage, vector_store=memory.vector_store, embeddings=embeddings
    )
    other.index([HumanMessage("my card is 4111 1111 1111 1111", id="m1")], **IDS)
    embeddings.on_hold = None
    reindexing = _held_call(memory.reindex, embeddings)
    result = memory.index([HumanMessage("[redacted]", id="m1")], **IDS)
    assert [fate.fate for fate in result.fates] == ["updated"]
    embeddings.release.set()
    reindexing.join(10)
    assert _vector_texts(memory, "m1") == ["[redacted]"]
    assert memory.stats().missing_vectors == 0


def test_a_text_that_keeps_changing_is_left_without_a_vector_and_said_so() -> None:
    """Each time its vector is written, another writer has stored a newer text: after
    `TEXT_CHECKS` writes again the message is left missing (the repair embeds it), and
    the call's result says why instead of reporting it embedded."""
    embeddings = HeldEmbeddings()
    memory = _engine(embeddings)
    edits = iter(range(1, 100))

    def edit_behind() -> None:  # another writer, straight to the storage
        text = f"HOLD edit {next(edits)}"
        payload = serialise(HumanMessage(text, id="m1"))
        memory.storage.put([MessageRecord("m1", "t", "alice", "user", text, NOW, payload)])

    embeddings.on_hold = edit_behind
    result = memory.index([HumanMessage("HOLD first", id="m1")], **IDS)
    assert result.embedded == ()
    assert result.fates[0].reason == KEPT_CHANGING
    assert result.error is not None
    assert KEPT_CHANGING in result.error
    assert _vector_texts(memory, "m1") == []
    assert next(edits) == TEXT_CHECKS + 2  # the first embedding, then one per write again
    assert memory.stats().missing_vectors == 1
    embeddings.on_hold = lambda: None
    assert memory.reindex(missing_only=True) == 1
    assert _vector_texts(memory, "m1") == [memory.storage.list_messages()[0].text]


NOW = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def _stored_behind(memory: SemanticRecall, **changes: object) -> Callable[[], None]:
    """Another writer that stores m1 again, with `changes`, while its vectors are made."""

    def store() -> None:
        fields = {"role": "user", "text": "HOLD first", "metadata": (), **changes}
        text, role, items = fields["text"], fields["role"], fields["metadata"]
        payload = serialise(HumanMessage(str(text), id="m1"))
        record = MessageRecord("m1", "t", "alice", role, text, NOW, payload, metadata=items)  # type: ignore[arg-type]
        memory.storage.put([record])

    return store


def test_a_message_turned_into_one_without_a_vector_meanwhile_keeps_none() -> None:
    """A review: the check wrote vectors again for any text stored meanwhile, a system
    message's or a tool output's too (a tool output's SSN was then found by search)."""
    embeddings = HeldEmbeddings()
    memory = _engine(embeddings)
    embeddings.on_hold = _stored_behind(memory, role="system", text="HOLD system prompt")
    memory.index([HumanMessage("HOLD first", id="m1")], **IDS)
    assert [m.role for m in memory.storage.list_messages()] == ["system"]
    assert _vector_texts(memory, "m1") == []
    assert memory.stats().missing_vectors == 0  # a system message is not missing one


def test_metadata_stored_meanwhile_reaches_the_vectors_too() -> None:
    """Filters read a vector's metadata: the older write's would hide the message from a
    search filtered on the new one."""
    embeddings = HeldEmbeddings()
    memory = _engine(embeddings)
    embeddings.on_hold = _stored_behind(memory, metadata=(("topic", "garden"),))
    memory.index([HumanMessage("HOLD first", id="m1")], **IDS)
    rows = memory.vector_store.export(memory.ensure_index().name)
    assert [dict(row.metadata) for row in rows if row.message_id == "m1"] == [{"topic": "garden"}]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_write_naming_no_resource_to_a_thread_adopted_meanwhile_is_stored(
    asynchronous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread scope without users: a write naming no resource read the thread's owner
    (none yet), then a write naming one adopted the thread. The first was refused,
    "belongs to another resource than '(no resource)'; use a thread id of that
    resource" (an audit: 15-47 of 200 such writes), though a moment later it is stored
    under the adopter. Now it is stored so at once."""
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=64),
        scope="thread",
    )
    memory.index([HumanMessage("first", id="m1")], thread_id="t")
    memory.index([HumanMessage("named", id="m2")], thread_id="t", resource_id="alice")
    storage = memory.storage
    owner_of = type(storage)._get_thread_owner
    reads: list[str] = []

    def read_before_the_adoption(self: InMemoryStorage, thread_id: str) -> str | None:
        reads.append(thread_id)
        return NO_RESOURCE if len(reads) == 1 else owner_of(self, thread_id)

    monkeypatch.setattr(type(storage), "_get_thread_owner", read_before_the_adoption)
    turn = [HumanMessage("anonymous", id="m3")]
    result = (
        asyncio.run(memory.aindex(turn, thread_id="t"))
        if asynchronous
        else memory.index(turn, thread_id="t")
    )
    assert [fate.fate for fate in result.fates] == ["stored"]
    stored = storage.list_messages()
    assert [(m.text, m.resource_id) for m in stored] == [
        ("first", "alice"),
        ("named", "alice"),
        ("anonymous", "alice"),
    ]
    assert _vector_texts(memory, "m3") == ["anonymous"]


@pytest.mark.parametrize("forget", ["resource", "clear thread"])
def test_a_turn_stored_while_its_scope_is_deleted_keeps_its_vectors(
    forget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`forget_resource` deletes the messages, then every vector of the resource; a turn
    on a new thread of it (or in a cleared thread) stored between the two lost its
    vectors though `index` had reported them written (an audit). They are written again."""
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=64),
    )
    memory.index([HumanMessage("old words", id="m1")], **IDS)
    index = memory.vector_store
    delete = type(index)._delete
    turn_thread = "new" if forget == "resource" else "t"

    def turn_then_delete(self: InMemoryVectorIndex, name: str, **selectors: object) -> None:
        monkeypatch.setattr(type(index), "_delete", delete)  # once
        done = memory.index(
            [HumanMessage("a new turn", id="m2")], thread_id=turn_thread, resource_id="alice"
        )
        assert done.embedded == ("m2",)
        delete(self, name, **selectors)  # type: ignore[arg-type]

    monkeypatch.setattr(type(index), "_delete", turn_then_delete)
    if forget == "resource":
        assert memory.forget_resource("alice") == 1
    else:
        assert memory.clear_thread("t", resource_id="alice") == 1
    assert [m.text for m in memory.storage.list_messages()] == ["a new turn"]
    assert _vector_texts(memory, "m2") == ["a new turn"]
    assert _vector_texts(memory, "m1") == []
    assert memory.stats(resource_id="alice").missing_vectors == 0


def test_a_new_store_on_another_stores_vector_server_keeps_its_vectors_on_repair(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A staging database pointed at production's vector server: every vector looked
    orphaned to it, and its `reindex(missing_only=True)` deleted all of production's (an
    audit). A store that holds no message deletes none, and says why."""
    shared = InMemoryVectorIndex()
    production = SemanticRecall(
        storage=InMemoryStorage(), vector_store=shared, embeddings=FakeEmbeddings(dimension=64)
    )
    production.index([HumanMessage("I'm allergic to peanuts.", id="p1")], **IDS)
    staging = SemanticRecall(
        storage=InMemoryStorage(), vector_store=shared, embeddings=FakeEmbeddings(dimension=64)
    )
    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        assert staging.reindex(missing_only=True) == 0
        assert staging.reindex() == 0
    assert _vector_texts(production, "p1") == ["I'm allergic to peanuts."]
    assert sum("may be another store's" in r.getMessage() for r in caplog.records) == 2
    production.forget_thread("t", resource_id="alice")  # this store's own orphans still go
    assert _vector_texts(production, "p1") == []


def test_a_store_on_another_stores_index_deletes_none_of_its_vectors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same with a store that holds messages of its own (a store opened without its
    index_name): none of the index's vectors is of its messages, and its repair wrote its
    own beside them, then deleted every one of the other store's (an audit of the server
    backends)."""
    shared = InMemoryVectorIndex()
    production = SemanticRecall(
        storage=InMemoryStorage(), vector_store=shared, embeddings=FakeEmbeddings(dimension=64)
    )
    production.index([HumanMessage("I'm allergic to peanuts.", id="p1")], **IDS)
    storage = InMemoryStorage()
    own = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings(dimension=64)
    )
    own.index([HumanMessage("Staging's own words.", id="s1")], **IDS)
    wrong = SemanticRecall(
        storage=storage, vector_store=shared, embeddings=FakeEmbeddings(dimension=64)
    )
    with caplog.at_level(logging.WARNING, logger="langchain_semantic_recall"):
        assert wrong.reindex(missing_only=True) == 0
        assert wrong.reindex() == 0
    assert _vector_texts(production, "p1") == ["I'm allergic to peanuts."]
    assert wrong.vector_store.message_ids(wrong.ensure_index().name) == {"p1"}  # none written
    assert sum("may be another store's" in r.getMessage() for r in caplog.records) == 2
    production.index([HumanMessage("More of mine.", id="p2")], **IDS)
    production.storage.delete_thread("t", retire=False)  # its own orphans, beside kept ones
    production.index([HumanMessage("kept", id="p3")], thread_id="t2", resource_id="alice")
    production.reindex(missing_only=True)  # a vector of a stored message: the others go
    assert _vector_texts(production, "p1") == []
