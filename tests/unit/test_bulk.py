"""bulk_index: the same records and vectors as ``index``, in big batches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_semantic_recall import InMemoryStorage, InvalidInputError, SemanticRecall
from langchain_semantic_recall.bulk import BulkResult, bulk_index
from langchain_semantic_recall.errors import OwnershipError
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings


def _conversation(prefix: str, n: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage("be nice", id=f"{prefix}-sys")]
    for i in range(n):
        cls = HumanMessage if i % 2 == 0 else AIMessage
        messages.append(cls(f"{prefix} message number {i} about topic{i % 3}", id=f"{prefix}-{i}"))
    return messages


def _engine(embeddings: FakeEmbeddings) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=embeddings,
        search_mode="dense",
    )


@pytest.mark.parametrize("batch_size", [1, 5, 1000])
def test_bulk_index_matches_index(batch_size: int) -> None:
    conversations = [
        ("t1", "alice", _conversation("a", 6)),
        ("t2", "alice", _conversation("b", 3)),
        ("t3", "bob", _conversation("c", 4)),
    ]
    bulk_embedder, one_embedder = FakeEmbeddings(), FakeEmbeddings()
    bulk, one = _engine(bulk_embedder), _engine(one_embedder)
    seen: list[int] = []
    result = bulk_index(bulk, conversations, batch_size=batch_size, progress=seen.append)
    for thread, resource, messages in conversations:
        one.index(messages, thread_id=thread, resource_id=resource)
    assert (result.stored, result.embedded, result.forgotten_threads) == (16, 13, [])
    assert sum(seen) == 16
    if batch_size == 1000:  # one embedding call for everything (plus the dimension probe)
        assert len([c for c in bulk_embedder.calls if c != ["dimension probe"]]) == 1
    info = bulk.ensure_index()

    def rows(memory: SemanticRecall) -> list[tuple[object, ...]]:  # times are "now": skip
        return [
            (m.id, m.thread_id, m.resource_id, m.role, m.text, m.payload, m.seq)
            for m in memory.storage.list_messages()
        ]

    assert rows(bulk) == rows(one)
    assert bulk.vector_store.message_ids(info.name) == one.vector_store.message_ids(
        one.ensure_index().name
    )
    for thread, resource in (("t2", "alice"), ("t3", "bob")):
        hits = bulk.search("b message number 2", thread_id=thread, resource_id=resource)
        expected = one.search("b message number 2", thread_id=thread, resource_id=resource)
        assert [h.message.id for h in hits] == [h.message.id for h in expected]


def test_bulk_index_is_idempotent_and_skips_forgotten_threads() -> None:
    memory = _engine(FakeEmbeddings())
    conversations = [("t1", "alice", _conversation("a", 4)), ("t2", "alice", _conversation("b", 2))]
    bulk_index(memory, conversations)
    memory.forget_thread("t1")
    again = bulk_index(memory, conversations)
    assert again.forgotten_threads == ["t1"]
    assert (again.stored, again.updated, again.unchanged) == (0, 0, 3)  # t2 as it was
    assert memory.storage.count() == 3
    info = memory.ensure_index()
    assert memory.vector_store.message_ids(info.name) == {"b-0", "b-1"}


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_importing_again_says_what_it_did_and_keeps_each_messages_time(twin: str) -> None:
    """A second import of the same conversations stores nothing new and says so; an
    edited message is counted as updated; and no message's creation time moves to the
    second import's "now" (retention counts a message's age from it)."""
    memory = _engine(FakeEmbeddings())

    def run(messages: list[BaseMessage]) -> BulkResult:
        conversations = [("t1", "alice", messages)]
        if twin == "sync":
            return memory.bulk_index(conversations)
        return asyncio.run(memory.abulk_index(conversations))

    first = run([HumanMessage("hi", id="a1"), AIMessage("hello", id="a2")])
    times = {m.id: m.created_at for m in memory.storage.list_messages()}
    again = run([HumanMessage("hi", id="a1"), AIMessage("hello", id="a2")])
    edited = run([HumanMessage("hi, edited", id="a1"), AIMessage("hello", id="a2")])
    assert (first.stored, first.updated, first.unchanged) == (2, 0, 0)
    assert (again.stored, again.updated, again.unchanged) == (0, 0, 2)
    assert (edited.stored, edited.updated, edited.unchanged) == (0, 1, 1)
    stored = memory.storage.list_messages()
    assert {m.id: m.created_at for m in stored} == times
    assert [(m.id, m.text, m.seq) for m in stored] == [("a1", "hi, edited", 0), ("a2", "hello", 1)]


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_importing_again_embeds_only_what_has_no_vector(twin: str) -> None:
    """A second import of the same conversations, by a new process, embeds nothing (it
    embedded every message again: minutes of work for a big export); an edited message
    is embedded, and so is an unchanged one whose vector was lost."""
    first_engine = _engine(FakeEmbeddings())
    conversations = [("t1", "alice", _conversation("a", 4)), ("t2", "bob", _conversation("b", 3))]
    assert first_engine.bulk_index(conversations).embedded == 7
    embedder = FakeEmbeddings()  # a new engine on the same store: no vectors cached
    memory = SemanticRecall(
        storage=first_engine.storage,
        vector_store=first_engine.vector_store,
        embeddings=embedder,
        search_mode="dense",
    )

    def run(items: list[tuple[str, str, list[BaseMessage]]]) -> tuple[BulkResult, list[str]]:
        embedder.calls.clear()
        if twin == "sync":
            result = memory.bulk_index(items)
        else:
            result = asyncio.run(memory.abulk_index(items))
        return result, [t for call in embedder.calls if call != ["dimension probe"] for t in call]

    again, texts = run(conversations)
    assert (again.unchanged, again.embedded, texts) == (9, 0, [])
    info = memory.ensure_index()
    memory.vector_store.delete(info.name, message_ids=["a-1"])  # a vector lost to a failure
    edited = [("t1", "alice", [*_conversation("a", 2), AIMessage("edited", id="a-2")])]
    repaired, texts = run([*edited, conversations[1]])
    assert sorted(texts) == ["a message number 1 about topic1", "edited"]
    assert (repaired.updated, repaired.unchanged, repaired.embedded) == (1, 7, 2)
    assert memory.vector_store.message_ids(info.name) == {
        *("a-0", "a-1", "a-2", "a-3"),
        *("b-0", "b-1", "b-2"),
    }


def test_an_id_given_twice_keeps_the_last_message_on_every_import() -> None:
    """As `index` does: the earlier message of a repeated id is skipped and counted. The
    first import stored the last text, the next wrote the first over it, the third the
    last again: the store flipped on every run of the same input."""
    memory = _engine(FakeEmbeddings())
    twice = [("t1", "alice", [HumanMessage("first", id="x"), HumanMessage("second", id="x")])]
    results = [memory.bulk_index(twice) for _ in range(3)]
    assert [(r.stored, r.updated, r.unchanged, r.repeated) for r in results] == [
        (1, 0, 0, 1),
        (0, 0, 1, 1),
        (0, 0, 1, 1),
    ]
    assert [(m.id, m.text) for m in memory.storage.list_messages()] == [("x", "second")]


def test_the_result_says_what_was_not_stored_or_not_embedded_and_why() -> None:
    """A RemoveMessage (a state instruction) was dropped without a word, and the messages
    stored without a vector were only a gap between `stored` and `embedded`."""
    from langchain_core.messages import RemoveMessage, ToolMessage

    embeddings = FakeEmbeddings()
    messages = [
        HumanMessage("What is the weather in Oslo?"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c1"}]),
        ToolMessage("rain", tool_call_id="c1"),
        AIMessage("It rains in Oslo."),
        HumanMessage("\u200b "),
        SystemMessage("be brief"),
        RemoveMessage(id="gone"),
    ]
    result = _engine(embeddings).bulk_index([("t", "r", messages)])
    assert (result.stored, result.embedded) == (6, 2)
    assert result.not_stored == {"a RemoveMessage (a state instruction, not a message)": 1}
    assert result.not_embedded == {
        "tool calls only": 1,
        "tool message": 1,
        "no text": 1,
        "system message": 1,
    }


def test_bulk_index_surfaces_vector_write_errors() -> None:
    memory = _engine(FakeEmbeddings())

    class DiskFullError(RuntimeError):
        pass

    def fail(*_: object) -> None:
        raise DiskFullError("disk full")

    memory.vector_store.upsert = fail  # type: ignore[method-assign]
    with pytest.raises(DiskFullError):
        bulk_index(memory, [("t1", "alice", _conversation("a", 2))])
    assert memory.storage.count() == 3  # stored: reindex(missing_only=True) repairs it


async def test_the_async_twin_imports_the_same() -> None:
    from langchain_semantic_recall.bulk import abulk_index

    conversations = [("t1", "alice", _conversation("a", 4)), ("t2", "bob", _conversation("b", 2))]
    engine = _engine(FakeEmbeddings())
    await abulk_index(engine, conversations)
    stats = await engine.astats()
    assert (stats.messages, stats.embeddable, stats.missing_vectors) == (8, 6, 0)
    hits = await engine.asearch("message number about topic1", thread_id="x", resource_id="bob")
    assert hits[0].message.id == "b-1"
    assert {h.message.resource_id for h in hits} == {"bob"}


class _SeenAtFirstEmbed(FakeEmbeddings):
    """Records how many conversations the input had yielded when the first batch embeds."""

    def __init__(self, consumed: list[int]) -> None:
        super().__init__()
        self.consumed = consumed
        self.at_first_embed: int | None = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.at_first_embed is None:
            self.at_first_embed = len(self.consumed)
        return super().embed_documents(texts)


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_bulk_index_streams_its_input_sync_and_async(asynchronous: bool) -> None:
    consumed: list[int] = []

    def conversations() -> Iterator[tuple[str, str, list[BaseMessage]]]:
        for n in range(50):
            consumed.append(n)
            yield f"t{n}", "alice", _conversation(f"c{n}", 4)

    embeddings = _SeenAtFirstEmbed(consumed)
    engine = _engine(embeddings)
    if asynchronous:
        result = await engine.abulk_index(conversations(), batch_size=8)
    else:
        result = engine.bulk_index(conversations(), batch_size=8)
    assert result.stored == 250
    assert embeddings.at_first_embed is not None
    assert embeddings.at_first_embed <= 2  # the first batch, not the whole input


@pytest.mark.parametrize(
    "conversations",
    [
        [{"thread_id": "t1", "resource_id": "alice", "messages": [HumanMessage("hi")]}],
        ("abc", "xyz"),  # one triple of three-letter ids, not wrapped in a list
        [("t1", "alice")],
        {"t1": ("alice", [HumanMessage("hi")])},
        "abc",
    ],
)
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_anything_but_triples_is_refused_and_nothing_is_stored(
    conversations: object, asynchronous: bool
) -> None:
    """A dict once unpacked into its keys: thread 'thread_id' of resource 'resource_id'."""
    engine = _engine(FakeEmbeddings())
    refused = pytest.raises(InvalidInputError, match=r"\(thread_id, resource_id, messages\)")
    if asynchronous:
        with refused:
            await engine.abulk_index(conversations)  # type: ignore[arg-type]
    else:
        with refused:
            engine.bulk_index(conversations)  # type: ignore[arg-type]
    assert engine.stats().messages == 0


# --- isolation, generated ------------------------------------------------------------------

_IMPORT = st.tuples(
    st.sampled_from(["alice", "bob", "ａlice"]),  # a look-alike resource among them
    st.sampled_from(["t1", "t2", "t3"]),
    st.lists(
        st.tuples(st.sampled_from(["m1", "m2", "m3", "m4"]), st.sampled_from(["x", "y", "z"])),
        min_size=1,
        max_size=4,
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(imports=st.lists(_IMPORT, min_size=1, max_size=8))
def test_an_import_never_changes_or_counts_another_resources_messages(
    imports: list[tuple[str, str, list[tuple[str, str]]]],
) -> None:
    """Imports by several resources whose thread and message ids collide: each either
    writes only its own resource's messages (another's are unchanged: text, time,
    thread, owner) and counts only its own, or is refused whole (`OwnershipError`) and
    changes nothing; and a resource's stored messages are exactly what its imports gave
    (the last text of each id)."""
    memory = _engine(FakeEmbeddings())
    expected: dict[str, tuple[str, str, str]] = {}  # id -> (thread, resource, text)
    for resource, thread, pairs in imports:
        before = {m.id: m for m in memory.storage.list_messages()}
        messages = [HumanMessage(text, id=message_id) for message_id, text in pairs]
        try:
            result = memory.bulk_index([(thread, resource, messages)])
        except OwnershipError:
            assert {m.id: m for m in memory.storage.list_messages()} == before
            continue
        after = {m.id: m for m in memory.storage.list_messages()}
        for message_id, old in before.items():
            if old.resource_id != resource:
                assert after[message_id] == old
        counted = result.stored + result.updated + result.unchanged + result.repeated
        assert counted == len(messages)
        assert result.stored == len(after.keys() - before.keys())
        for message_id, text in pairs:
            expected[message_id] = (thread, resource, text)
        assert {i: (m.thread_id, m.resource_id, m.text) for i, m in after.items()} == expected


def test_recalled_memory_is_not_stored_and_is_counted() -> None:
    """As `index` does (bulk.py's docstring said it was stored but not embedded)."""
    from langchain_semantic_recall.messages import MEMORY_SOURCE

    recalled = AIMessage("you like tea", additional_kwargs={"source": MEMORY_SOURCE})
    memory = _engine(FakeEmbeddings())
    result = memory.bulk_index([("t", "r", [HumanMessage("hi"), recalled])])
    assert (result.stored, result.embedded) == (1, 1)
    assert result.not_stored == {"recalled memory (source: memory)": 1}
    assert [m.text for m in memory.storage.list_messages()] == ["hi"]
