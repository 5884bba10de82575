"""Thread scope without a resource locks nobody out (issue 23, item 6).

A thread first written without a resource (thread scope) is recorded with no owner
(`NO_RESOURCE`, never the thread's own id); the first write that names a resource
adopts it: its messages and vectors move to that resource, and from then on it is that
resource's alone. Run here on the in-memory backends and a SQLite file;
tests/integration/test_thread_scope_owner.py runs the same tests on what
`SemanticRecall.local` builds (a persistent Chroma, whose vectors are partitioned by resource).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import InvalidInputError, OwnershipError
from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter
from langchain_semantic_recall.turns import recall_turn
from tests.fakes import FakeEmbeddings
from tests.faults import MEMORY, SQLITE_MEMORY, Backend

OLD = [
    HumanMessage("my sister lives in Lisbon", id="old-0"),
    AIMessage("Lisbon is lovely in spring", id="old-1"),
]
NEW = [HumanMessage("book a garden table", id="new-0"), AIMessage("booked", id="new-1")]


def engine(backend: Backend, root: Path, **options: object) -> SemanticRecall:
    return SemanticRecall(
        storage=backend.make_storage(root),
        vector_store=backend.make_vectors(root),
        embeddings=FakeEmbeddings(),
        scope="thread",
        **options,  # type: ignore[arg-type]
    )


def vector_ids(memory: SemanticRecall, scope: ScopeFilter) -> set[str]:
    return memory.vector_store.message_ids(memory.ensure_index().name, scope)


@pytest.fixture(params=[MEMORY, SQLITE_MEMORY], ids=str)
def backend(request: pytest.FixtureRequest) -> Backend:
    backend: Backend = request.param
    return backend


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_first_write_naming_a_resource_adopts_an_unowned_thread(
    backend: Backend, tmp_path: Path, asynchronous: bool
) -> None:
    memory = engine(backend, tmp_path, search_mode="dense", threshold=0.0)
    memory.index(OLD, thread_id="t1")
    assert memory.storage.get_thread_owner("t1") == NO_RESOURCE  # no owner invented

    if asynchronous:
        result = asyncio.run(memory.aindex(NEW, thread_id="t1", resource_id="alice"))
    else:
        result = memory.index(NEW, thread_id="t1", resource_id="alice")
    assert [f.fate for f in result.fates] == ["stored", "stored"]
    assert result.error is None
    assert memory.storage.get_thread_owner("t1") == "alice"
    stored = memory.storage.list_messages(ScopeFilter(thread_id="t1"))
    assert [(m.id, m.resource_id) for m in stored] == [
        ("old-0", "alice"),
        ("old-1", "alice"),
        ("new-0", "alice"),
        ("new-1", "alice"),
    ]
    alice = ScopeFilter(thread_id="t1", resource_id="alice")
    assert vector_ids(memory, alice) == {"old-0", "old-1", "new-0", "new-1"}
    assert vector_ids(memory, ScopeFilter(resource_id=NO_RESOURCE)) == set()
    hits = memory.search("where does my sister live", thread_id="t1", resource_id="alice")
    assert "old-0" in {m.id for hit in hits for m in hit.window}  # found through its vector

    with pytest.raises(OwnershipError):
        memory.index([HumanMessage("mine now?", id="b-0")], thread_id="t1", resource_id="bob")
    memory.index([HumanMessage("still mine", id="new-2")], thread_id="t1")  # its owner's
    assert memory.storage.get_thread_owner("t1") == "alice"
    assert memory.stats(resource_id="alice").messages == 5


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_same_messages_again_with_a_resource_adopt_the_thread(
    backend: Backend, tmp_path: Path, asynchronous: bool
) -> None:
    """All of them unchanged once skipped the adoption: storage kept no owner while the
    vectors moved to the resource, so neither its search nor its recall found them."""
    memory = engine(backend, tmp_path, search_mode="dense", threshold=0.0)
    memory.index(OLD, thread_id="t1")
    if asynchronous:
        result = asyncio.run(memory.aindex(OLD, thread_id="t1", resource_id="alice"))
    else:
        result = memory.index(OLD, thread_id="t1", resource_id="alice")
    assert [f.fate for f in result.fates] == ["unchanged", "unchanged"]
    assert memory.storage.get_thread_owner("t1") == "alice"
    stored = memory.storage.list_messages(ScopeFilter(thread_id="t1"))
    assert [(m.id, m.resource_id) for m in stored] == [("old-0", "alice"), ("old-1", "alice")]
    assert vector_ids(memory, ScopeFilter(resource_id="alice")) == {"old-0", "old-1"}
    hits = memory.search("where does my sister live", thread_id="t1", resource_id="alice")
    assert "old-0" in {m.id for hit in hits for m in hit.window}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_refused_write_adopts_no_thread(
    backend: Backend, tmp_path: Path, asynchronous: bool
) -> None:
    """A write reusing another thread's message id was refused, but only after it had
    adopted the unowned thread: its owner changed, its vectors stayed behind."""
    memory = engine(backend, tmp_path, search_mode="dense", threshold=0.0)
    memory.index([HumanMessage("my PIN is 4321", id="bob-0")], thread_id="tb", resource_id="bob")
    memory.index(OLD, thread_id="t1")
    reused = [HumanMessage("hello", id="new-0"), HumanMessage("hi", id="bob-0")]

    def write() -> object:
        if asynchronous:
            return asyncio.run(memory.aindex(reused, thread_id="t1", resource_id="alice"))
        return memory.index(reused, thread_id="t1", resource_id="alice")

    with pytest.raises(OwnershipError, match="'bob-0' already belongs to another thread"):
        write()
    assert memory.storage.get_thread_owner("t1") == NO_RESOURCE
    stored = memory.storage.list_messages(ScopeFilter(thread_id="t1"))
    assert [(m.id, m.resource_id) for m in stored] == [
        ("old-0", NO_RESOURCE),
        ("old-1", NO_RESOURCE),
    ]
    assert vector_ids(memory, ScopeFilter(resource_id=NO_RESOURCE)) == {"old-0", "old-1"}
    assert memory.storage.get_thread_owner("tb") == "bob"
    memory.index(NEW, thread_id="t1", resource_id="alice")  # a write that is its own adopts
    assert memory.storage.get_thread_owner("t1") == "alice"


def test_a_turn_with_a_resource_on_an_unowned_thread_is_not_refused(
    backend: Backend, tmp_path: Path
) -> None:
    memory = engine(backend, tmp_path)
    memory.index(OLD, thread_id="t1")
    turn: list[BaseMessage] = [*OLD, HumanMessage("and my sister?", id="q")]
    recall_turn(memory, turn, thread_id="t1", resource_id="alice")  # no OwnershipError
    memory.index(turn, thread_id="t1", resource_id="alice")
    assert memory.storage.get_thread_owner("t1") == "alice"


def test_a_chat_history_with_a_resource_reads_and_adopts_an_unowned_session(
    tmp_path: Path,
) -> None:
    memory = engine(MEMORY, tmp_path)
    memory.index(OLD, thread_id="s1")
    history = memory.chat_history("s1", resource_id="alice")
    assert [m.id for m in history.messages] == ["old-0", "old-1"]
    history.add_messages(NEW)
    assert memory.storage.get_thread_owner("s1") == "alice"
    assert [m.id for m in history.messages] == ["old-0", "old-1", "new-0", "new-1"]
    with pytest.raises(OwnershipError):
        memory.chat_history("s1", resource_id="bob").messages  # noqa: B018


def test_the_no_owner_mark_is_never_searched_as_one_resource(tmp_path: Path) -> None:
    """Unowned threads are read one by one (thread scope), never all at once."""
    memory = engine(MEMORY, tmp_path)
    memory.index(OLD, thread_id="t1")
    memory.index(NEW, thread_id="t2")
    with pytest.raises(InvalidInputError, match="not a resource to search"):
        memory.search("lisbon garden", resource_id=NO_RESOURCE, scope="resource")
    with pytest.raises(InvalidInputError, match="not a resource to search"):
        memory.with_options(scope="resource").recall(
            [HumanMessage("lisbon garden")], resource_id=NO_RESOURCE
        )
    hits = memory.search("lisbon", thread_id="t1")  # one thread, by its id
    assert {m.thread_id for hit in hits for m in hit.window} == {"t1"}


def test_an_export_of_an_unowned_thread_restores_unowned(tmp_path: Path) -> None:
    """What an export says (resource "(no resource)") an import writes unowned again;
    a live write naming the mark is refused (`test_adversarial_ids`)."""
    memory = engine(MEMORY, tmp_path).with_options(scope="resource")
    memory.bulk_index([("t1", NO_RESOURCE, OLD)])
    assert memory.storage.get_thread_owner("t1") == NO_RESOURCE
    memory.index(NEW, thread_id="t1", resource_id="alice")
    assert memory.storage.get_thread_owner("t1") == "alice"


@pytest.mark.parametrize("scope", ["thread", "resource"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_thread_search_for_a_resource_that_does_not_own_the_thread_is_refused(
    backend: Backend, tmp_path: Path, asynchronous: bool, scope: str
) -> None:
    """It once returned [], while stats and clear of the same thread raise OwnershipError;
    in resource scope (where the thread does not narrow the search) search, the retriever
    and the tool still answered [] for a call naming bob's conversation as alice's."""
    memory = engine(backend, tmp_path).with_options(scope=scope)
    memory.index(OLD, thread_id="t", resource_id="bob")
    alice_in_t = {"configurable": {"thread_id": "t", "resource_id": "alice"}}

    def search(resource: str) -> object:
        if asynchronous:
            return asyncio.run(memory.asearch("Lisbon", thread_id="t", resource_id=resource))
        return memory.search("Lisbon", thread_id="t", resource_id=resource)

    with pytest.raises(OwnershipError, match="belongs to another resource, not 'alice'"):
        search("alice")
    with pytest.raises(OwnershipError):
        memory.as_retriever().invoke("Lisbon", alice_in_t)
    with pytest.raises(OwnershipError):
        memory.as_tool().invoke({"query": "Lisbon"}, alice_in_t)
    assert search("bob")  # its owner finds it
    if scope == "resource":  # alice's own search, naming no thread or her own, answers
        assert memory.search("Lisbon", resource_id="alice") == []
        assert memory.search("Lisbon", thread_id="hers", resource_id="alice") == []
        return
    memory.index(NEW, thread_id="unowned")  # thread scope without a resource: nobody's yet
    assert memory.search("garden", thread_id="unowned", resource_id="alice") == []


@pytest.mark.parametrize("scope", ["thread", "resource"])
def test_a_recall_for_a_resource_in_another_resources_thread_is_refused_on_every_surface(
    backend: Backend, tmp_path: Path, scope: str
) -> None:
    """As the graph and the middleware refuse the turn (`test_graph`): the runnable did
    not, and its turn then failed only at `index`, after the model had answered."""
    memory = engine(backend, tmp_path).with_options(scope=scope)
    memory.index(OLD, thread_id="t", resource_id="bob")
    turn = [HumanMessage("where does my sister live?")]
    config = {"configurable": {"thread_id": "t", "resource_id": "alice"}}
    calls = {
        "recall": lambda: memory.recall(turn, thread_id="t", resource_id="alice"),
        "arecall": lambda: asyncio.run(memory.arecall(turn, thread_id="t", resource_id="alice")),
        "invoke": lambda: memory.invoke(turn, config),
        "ainvoke": lambda: asyncio.run(memory.ainvoke(turn, config)),
    }
    for call in calls.values():
        with pytest.raises(OwnershipError, match="belongs to another resource, not 'alice'"):
            call()
    # Its owner recalls in it, and a thread nobody owns yet is anyone's first turn.
    assert memory.recall(turn, thread_id="t", resource_id="bob")[-1] == turn[-1]
    assert memory.recall(turn, thread_id="new", resource_id="alice") == turn
    assert memory.storage.get_thread_owner("t") == "bob"
