"""Write paths with a failure injected at one step: nothing is dropped unseen or left astray.

Each test makes one backend fail (or the call be cancelled) at one step of a write that
`test_faults.py` does not reach, then checks what the caller saw, what the store holds,
and that the documented next step (call again, `reindex(missing_only=True)`, `purge`)
makes it whole.
"""

from __future__ import annotations

import asyncio
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_semantic_recall import InMemoryStorage, OwnershipError, SemanticRecall, StorageError
from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeChatModel, FakeEmbeddings
from tests.faults import MEMORY, SQLITE_MEMORY, Backend, FaultyStorage, InjectedError, open_rig

SESSION: RunnableConfig = {"configurable": {"session_id": "chat-9", "resource_id": "alice"}}


# --- the chat history under RunnableWithMessageHistory ------------------------------------


@pytest.fixture
def faulty() -> tuple[SemanticRecall, FaultyStorage, FakeChatModel]:
    storage = FaultyStorage(InMemoryStorage())
    memory = SemanticRecall(
        storage=storage,
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=32),
        search_mode="dense",
    )
    return memory, storage, FakeChatModel()


def history_chain(memory: SemanticRecall, model: FakeChatModel) -> Any:
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{q}")])
    with warnings.catch_warnings():  # langchain-core marks it deprecated; still widely used
        warnings.simplefilter("ignore", DeprecationWarning)
        return RunnableWithMessageHistory(
            prompt | memory | model,
            lambda session_id: memory.chat_history(session_id, last=20),
            input_messages_key="q",
            history_messages_key="history",
        )


def stored_texts(storage: FaultyStorage) -> list[str]:
    return [m.text for m in storage.inner.list_messages(ScopeFilter(thread_id="chat-9"))]


def ask(chain: Any, text: str, asynchronous: bool) -> BaseMessage:
    if asynchronous:
        return asyncio.run(chain.ainvoke({"q": text}, SESSION))  # type: ignore[no-any-return]
    return chain.invoke({"q": text}, SESSION)  # type: ignore[no-any-return]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_turn_the_history_could_not_store_is_stored_by_the_next_turn(
    faulty: tuple[SemanticRecall, FaultyStorage, FakeChatModel], asynchronous: bool
) -> None:
    """`RunnableWithMessageHistory` only logs what `add_messages` raises after the run:
    the turn's messages would be lost unseen. The next turn stores them first, in order."""
    memory, storage, model = faulty
    chain = history_chain(memory, model)
    storage.faults.fail("put", StorageError("disk full"))
    assert ask(chain, "I'm allergic to peanuts", asynchronous).content  # the user got an answer
    assert stored_texts(storage) == []
    ask(chain, "Snack ideas?", asynchronous)
    assert stored_texts(storage) == [
        "I'm allergic to peanuts",
        "ok: I'm allergic to peanuts",
        "Snack ideas?",
        "ok: Snack ideas?",
    ]
    stats = memory.stats()
    assert (stats.messages, stats.missing_vectors) == (4, 0)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_cached_reply_is_stored_in_every_session_it_answers(asynchronous: bool) -> None:
    """LangChain's LLM cache hands back a reply with the id of its first use. `index`
    refused it in every later session, of the same user or another, and the runnable only
    logged that: the whole turn, the user's message too, was lost."""
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=32),
    )
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{q}")])
    model = FakeChatModel(cache=InMemoryCache())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        chain = RunnableWithMessageHistory(
            prompt | model,  # the same prompt in every new session: the cache answers
            lambda session_id: memory.chat_history(session_id),  # noqa: PLW0108 - one parameter
            input_messages_key="q",
            history_messages_key="history",
        )
    sessions = (("s1", "alice"), ("s2", "alice"), ("s3", "bob"))
    replies = set()
    for session, user in sessions:
        config: RunnableConfig = {"configurable": {"session_id": session, "resource_id": user}}
        for question in ("hi", "tennis?"):
            if asynchronous:
                reply = asyncio.run(chain.ainvoke({"q": question}, config))
            else:
                reply = chain.invoke({"q": question}, config)
            if question == "hi":
                replies.add(reply.id)
        stored = memory.storage.list_messages(ScopeFilter(thread_id=session))
        assert [m.text for m in stored] == ["hi", "ok: hi", "tennis?", "ok: tennis?"]
        assert {m.resource_id for m in stored} == {user}
    assert len(replies) == 1  # the cache answered, with its first reply's id


def test_a_session_refuses_another_users_messages_added_with_their_ids() -> None:
    """Only a reply (after the turn's user message) is stored under an id of its own: a
    user's message whose id another thread holds (an app adding one user's stored turn
    to another's session) is refused as `index` refuses it, never stored quietly."""
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=32),
    )
    turn = [HumanMessage("my PIN is 1234", id="u1"), AIMessage("noted", id="a1")]
    memory.chat_history("alice-s", resource_id="alice").add_messages(turn)
    with pytest.raises(OwnershipError, match="u1"):
        memory.chat_history("bob-s", resource_id="bob").add_messages(turn)
    assert memory.storage.list_messages(ScopeFilter(thread_id="bob-s")) == []


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_turn_still_unstored_refuses_the_next_turn_until_the_storage_is_back(
    faulty: tuple[SemanticRecall, FaultyStorage, FakeChatModel], asynchronous: bool
) -> None:
    memory, storage, model = faulty
    chain = history_chain(memory, model)
    storage.faults.fail("put", InjectedError("connection lost"), times=2)
    ask(chain, "I'm allergic to peanuts", asynchronous)
    calls = len(model.calls)
    earlier = r"2 message\(s\) of an earlier turn of session 'chat-9'"
    with pytest.raises(StorageError, match=earlier):
        ask(chain, "Snack ideas?", asynchronous)
    assert len(model.calls) == calls  # refused before the model ran
    ask(chain, "Snack ideas?", asynchronous)
    assert stored_texts(storage) == [
        "I'm allergic to peanuts",
        "ok: I'm allergic to peanuts",
        "Snack ideas?",
        "ok: Snack ideas?",
    ]


def test_a_write_whose_answer_was_lost_is_not_stored_twice(
    faulty: tuple[SemanticRecall, FaultyStorage, FakeChatModel],
) -> None:
    """Stored, then the storage's answer lost: the held copy is the same messages (ids)."""
    memory, storage, model = faulty
    chain = history_chain(memory, model)
    storage.faults.fail("put", TimeoutError("answer lost"), after=True)
    ask(chain, "I'm allergic to peanuts", False)
    ask(chain, "Snack ideas?", False)
    assert len(stored_texts(storage)) == 4


def test_a_caller_that_stores_the_turn_again_itself_gets_no_duplicate(
    faulty: tuple[SemanticRecall, FaultyStorage, FakeChatModel],
) -> None:
    memory, storage, _ = faulty
    history = memory.chat_history("chat-9", resource_id="alice")
    turn = [HumanMessage("I'm allergic to peanuts"), AIMessage("Noted.")]
    storage.faults.fail("put")
    with pytest.raises(InjectedError):
        history.add_messages(turn)
    history.add_messages(turn)  # the caller's own retry
    assert [m.text for m in history.messages] == ["I'm allergic to peanuts", "Noted."]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_clearing_the_session_drops_a_turn_it_held(
    faulty: tuple[SemanticRecall, FaultyStorage, FakeChatModel], asynchronous: bool
) -> None:
    """Else the next read would write back a turn of the conversation just emptied."""
    memory, storage, model = faulty
    chain = history_chain(memory, model)
    ask(chain, "first", asynchronous)
    storage.faults.fail("put")
    ask(chain, "I'm allergic to peanuts", asynchronous)  # held
    history = memory.chat_history("chat-9", resource_id="alice")
    if asynchronous:
        asyncio.run(history.aclear())
    else:
        history.clear()
    assert history.messages == []
    assert stored_texts(storage) == []


# --- purge after a forget whose vector delete failed --------------------------------------


def plain_memory() -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=32),
        search_mode="dense",
    )


def failing_deletes(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*_: object, **__: object) -> None:
        raise InjectedError("vector index unreachable")

    monkeypatch.setattr(InMemoryVectorIndex, "_delete", down)


FORGETS = {
    "forget_thread": lambda m: m.forget_thread("t1", resource_id="alice"),
    "forget_resource": lambda m: m.forget_resource("alice"),
    "forget_before": lambda m: m.forget_before(datetime.now(UTC) + timedelta(days=1)),
}


@pytest.mark.parametrize("forget", sorted(FORGETS))
@pytest.mark.parametrize("asynchronous", [False, True])
def test_purge_erases_the_vectors_a_failed_forget_left(
    monkeypatch: pytest.MonkeyPatch, forget: str, asynchronous: bool
) -> None:
    """A forget (or retention) whose vector delete failed, not called again: its messages
    are gone, their vectors (with their text) stay. `purge` erases what was forgotten,
    so it deletes them too instead of copying them into the rebuilt index."""
    memory = plain_memory()
    memory.index([HumanMessage("my secret plan", id="s1")], thread_id="t1", resource_id="alice")
    with monkeypatch.context() as patch:
        failing_deletes(patch)
        with pytest.raises(InjectedError):
            FORGETS[forget](memory)
    assert memory.stats().orphan_vectors == 1
    result = asyncio.run(memory.apurge()) if asynchronous else memory.purge()
    assert memory.vector_store.message_ids(memory.ensure_index().name) == set()
    assert memory.stats().orphan_vectors == 0
    assert any("1 vector(s) of messages no longer stored" in line for line in result.vectors.done)


# --- a thread adopted by a resource while its vectors could not follow --------------------

OLD = [HumanMessage("I sail old wooden boats on the lake", id="o1"), AIMessage("Lovely", id="o2")]
NEW = [HumanMessage("what about kayaks", id="n1")]


def _second_put() -> Any:
    calls = iter(range(1 << 30))
    return lambda _: next(calls) == 1  # the first put is refused: the thread has no owner


ADOPTION_FAULTS = {
    # the write under the new owner, after the storage adopted the thread
    "put": lambda rig: rig.storage.faults.fail("put", match=_second_put()),
    # deleting the thread's vectors stored without a resource (before writing them again)
    "delete": lambda rig: rig.vectors.faults.fail("delete"),
    # writing them again under the owner
    "embed": lambda rig: rig.embeddings.faults.fail("embed_documents"),
}


@pytest.mark.parametrize("fault", sorted(ADOPTION_FAULTS))
@pytest.mark.parametrize("backend", [MEMORY, SQLITE_MEMORY], ids=str)
def test_an_adoption_whose_vectors_failed_to_follow_is_counted_and_repaired(
    backend: Backend, fault: str
) -> None:
    """A thread written without a resource, then by alice: the storage gives it to alice,
    then its vectors are written again under her. A failure in between left them under
    no resource, where her searches never look, while `stats` counted them as present and
    `reindex(missing_only=True)` passed them by."""
    with open_rig(backend, search_mode="dense", scope="thread") as rig:
        rig.engine.index(OLD, thread_id="t1")
        ADOPTION_FAULTS[fault](rig)
        try:
            rig.engine.index(NEW, thread_id="t1", resource_id="alice")
        except InjectedError:
            rig.clear_faults()
            rig.engine.index(NEW, thread_id="t1", resource_id="alice")  # the caller retries
        rig.clear_faults()
        assert rig.storage.inner.get_thread_owner("t1") == "alice"
        unseen = {"o1", "o2", "n1"} - rig.vector_ids(ScopeFilter(resource_id="alice"))
        assert rig.engine.stats().missing_vectors == len(unseen)  # none counted as present
        assert rig.engine.reindex(missing_only=True) == len(unseen)
        assert rig.vector_ids(ScopeFilter(resource_id="alice")) == {"o1", "o2", "n1"}
        assert rig.vector_ids(ScopeFilter(resource_id=NO_RESOURCE)) == set()
        stats = rig.engine.stats()
        assert (stats.messages, stats.missing_vectors, stats.orphan_vectors) == (3, 0, 0)
        alice = rig.engine_with(search_mode="dense")
        hits = alice.search("old wooden boats", resource_id="alice", top_k=1)
        assert [h.message.id for h in hits] == ["o1"]


# --- what a caller is told when a write fails half way ------------------------------------

NOTED_FORGETS = {
    "forget_thread": lambda m: m.forget_thread("t1", resource_id="alice"),
    "clear_thread": lambda m: m.clear_thread("t1", resource_id="alice"),
    "forget_resource": lambda m: m.forget_resource("alice"),
}
ASYNC_FORGETS = {
    "forget_thread": lambda m: m.aforget_thread("t1", resource_id="alice"),
    "clear_thread": lambda m: m.aclear_thread("t1", resource_id="alice"),
    "forget_resource": lambda m: m.aforget_resource("alice"),
}


def forget_now(memory: SemanticRecall, forget: str, asynchronous: bool) -> None:
    if asynchronous:
        asyncio.run(ASYNC_FORGETS[forget](memory))
    else:
        NOTED_FORGETS[forget](memory)


@pytest.mark.parametrize("forget", sorted(NOTED_FORGETS))
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_forget_whose_vectors_failed_says_what_was_deleted_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch, forget: str, asynchronous: bool
) -> None:
    """The vector index's own error said nothing of the messages already deleted, nor that
    the same call again finishes (the command line even advised restoring a backup)."""
    memory = plain_memory()
    memory.index([HumanMessage("my secret plan", id="s1")], thread_id="t1", resource_id="alice")
    with monkeypatch.context() as patch:
        failing_deletes(patch)
        with pytest.raises(InjectedError) as raised:
            forget_now(memory, forget, asynchronous)
    note = " ".join(raised.value.__notes__)
    assert "1 message(s) were deleted from the storage, but not all of their vectors" in note
    assert "call the same forget again" in note
    assert memory.stats().orphan_vectors == 1
    forget_now(memory, forget, asynchronous)  # as the note says
    assert memory.stats().orphan_vectors == 0


def test_a_bulk_import_that_failed_says_what_it_stored_and_how_to_finish() -> None:
    with open_rig(MEMORY, search_mode="dense") as rig:
        conversations = [
            (f"t{n}", "alice", [HumanMessage(f"kites {n}", id=f"k{n}")]) for n in range(6)
        ]
        rig.embeddings.faults.fail("embed_documents", match=lambda a: "kites 4" in a["texts"])
        with pytest.raises(InjectedError) as raised:
            rig.engine.bulk_index(conversations, batch_size=2)
        note = " ".join(raised.value.__notes__)
        stats = rig.engine.stats()  # the last batch stored, not embedded
        assert (stats.messages, stats.missing_vectors) == (6, 2)
        assert "this import stored 6 message(s) before it failed" in note
        assert "run the same import again" in note
        rig.clear_faults()
        rig.engine.bulk_index(conversations, batch_size=2)  # as the note says
        stats = rig.engine.stats()
        assert (stats.messages, stats.missing_vectors) == (6, 0)


@pytest.mark.parametrize("step", ["first delete", "move", "write under the new owner"])
def test_a_move_that_failed_says_where_the_thread_is_and_how_to_finish(step: str) -> None:
    memory = plain_memory()
    memory.index([HumanMessage("sailing boats", id="s1")], thread_id="t1", resource_id="alice")
    storage = memory.storage
    vectors = memory.vector_store
    failure = InjectedError(step)

    def fail(*_: object, **__: object) -> Any:
        raise failure

    original = {
        "first delete": (type(vectors), "_delete"),
        "move": (type(storage), "_move_thread"),
        "write under the new owner": (type(vectors), "_upsert"),
    }[step]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(*original, fail)
        with pytest.raises(InjectedError) as raised:
            memory.move_thread("t1", to="bob", resource_id="alice")
    note = " ".join(raised.value.__notes__)
    if step == "write under the new owner":
        assert "is 'bob''s in the storage" in note
        assert "call move_thread again with resource_id='bob'" in note
        memory.move_thread("t1", to="bob", resource_id="bob")
    else:
        assert "was not moved" in note
        memory.move_thread("t1", to="bob", resource_id="alice")
    assert storage.get_thread_owner("t1") == "bob"
    assert vectors.message_ids(memory.ensure_index().name, ScopeFilter("bob")) == {"s1"}
    assert memory.stats().missing_vectors == 0


def test_the_command_line_prints_a_writes_note_instead_of_guessing() -> None:
    """A chromadb error was read as a damaged store ("restore it from a backup"): after a
    forget, restoring a backup brings back what was forgotten."""
    from langchain_semantic_recall.cli.render import failure_message

    chromadb_error = type("InternalError", (Exception,), {"__module__": "chromadb.errors"})
    failure = chromadb_error("Error in compaction")
    assert "restore it from a backup" in failure_message(failure)
    failure.add_note("thread 't1': 1 message(s) were deleted from the storage, but ...")
    said = failure_message(failure)
    assert "backup" not in said
    assert said.startswith("InternalError: Error in compaction; thread 't1': 1 message(s)")


# --- an edit whose old text's vectors could not be deleted --------------------------------

SECRET = [HumanMessage("my password is hunter2", id="p")]
REDACTED = [HumanMessage("my password is redacted", id="p")]


def vector_texts(rig: Any) -> list[str]:
    return [row.content for row in rig.vectors.inner.export(rig.index_name)]


EDITS = {
    "index": lambda m, msgs: m.index(msgs, thread_id="t", resource_id="alice"),
    "aindex": lambda m, msgs: asyncio.run(m.aindex(msgs, thread_id="t", resource_id="alice")),
    "bulk_index": lambda m, msgs: m.bulk_index([("t", "alice", msgs)]),
    "abulk_index": lambda m, msgs: asyncio.run(m.abulk_index([("t", "alice", msgs)])),
}


@pytest.mark.parametrize("write", sorted(EDITS))
def test_an_edit_whose_old_vectors_could_not_be_deleted_is_not_stored(write: str) -> None:
    """Indexing a message again with new text takes its old words out of memory. With the
    old vectors' delete failing, the new text was stored all the same: the old text stayed
    in the vector index while the message looked unchanged to a retry (`unchanged`), to
    `stats` and to `reindex(missing_only=True)`, so nothing ever removed it. Now the edit is
    not stored (reported), and doing it again finishes it."""
    with open_rig(MEMORY, search_mode="dense") as rig:
        rig.engine.index(SECRET, thread_id="t", resource_id="alice")
        rig.vectors.faults.fail("delete")
        try:
            result = EDITS[write](rig.engine, REDACTED)
        except InjectedError:
            assert write.endswith("bulk_index")  # an import raises (with a note)
        else:
            assert result.error is not None
            assert result.fates[0].fate == "skipped"
            assert "index it again" in (result.fates[0].reason or "")
        assert [m.text for m in rig.stored()] == ["my password is hunter2"]
        rig.clear_faults()
        EDITS[write](rig.engine, REDACTED)  # the same call again
        assert [m.text for m in rig.stored()] == ["my password is redacted"]
        assert vector_texts(rig) == ["my password is redacted"]
