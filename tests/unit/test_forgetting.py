"""Forgetting that holds, and isolation between resources, under generated histories.

The rule (also in ``docs/data-handling.md``): when ``forget_thread`` / ``forget_resource``
returns, nothing of what it deleted can be recalled, searched, retrieved or listed, and its
thread ids are retired. An ``index`` or ``reindex`` call for such a thread that is in
flight (it started before the forget) or arrives late leaves nothing behind: a write that
reaches storage after the forget is refused, and vectors written by a call that was in
flight are deleted by that call when it sees the thread was forgotten.

:class:`ForgettingSuite` forces every interleaving of an in-flight call with a forget
deterministically (gates hold the call at each step; no sleeps). ``IsolationMachine`` runs
random histories over look-alike resources and threads, in random order, and checks after
every step that no surface returns a message of another resource (or, in thread scope,
of another thread), that nothing forgotten comes back, and that nothing is lost.
Both run on every embedded backend; another backend joins by subclassing the suite and
calling :func:`isolation_machine` with its :class:`~tests.faults.Backend`.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig

from langchain_semantic_recall import (
    InvalidInputError,
    MissingIdentityError,
    OwnershipError,
    SemanticRecall,
)
from langchain_semantic_recall.embeddings import split_for_embedding
from langchain_semantic_recall.engine import index_ops
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.records import NO_RESOURCE
from langchain_semantic_recall.storage import ScopeFilter
from tests.faults import (
    FAST_BACKENDS,
    LYING_VECTORS,
    MEMORY,
    Backend,
    InjectedError,
    Rig,
    open_rig,
)

MARK = re.compile(r"q(\d+)z")
WORDS = ("lisbon", "march", "garden", "python", "peanut", "sister")


def text(n: int, *words: str) -> str:
    """Message text with a unique marker ``q<n>z`` that every surface shows verbatim."""
    return " ".join((*words, f"q{n}z")) if words else f"lisbon march garden q{n}z"


def exchange(prefix: str, first: int, count: int = 2) -> list[BaseMessage]:
    return [
        (HumanMessage if n % 2 == 0 else AIMessage)(text(first + n), id=f"{prefix}-{first + n}")
        for n in range(count)
    ]


def markers(value: object) -> set[str]:
    return set(MARK.findall(str(value)))


def search_modes(rig: Rig) -> tuple[str, ...]:
    return ("dense", "hybrid", "keyword") if rig.storage.supports_keyword_search else ("dense",)


def visible(rig: Rig, *, thread_id: str, resource_id: str | None, query: str) -> set[str]:
    """Markers that any surface shows to this caller, in every scope and search mode."""
    seen: set[str] = set()
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "resource_id": resource_id}}
    for mode in search_modes(rig):
        for scope in ("thread", "resource"):
            engine = rig.engine_with(search_mode=mode, scope=scope, top_k=50, message_range=2)
            if scope == "resource" and resource_id is None:  # refused, never guessed
                with pytest.raises(MissingIdentityError):
                    engine.search(query, thread_id=thread_id)
                continue
            for hit in engine.search(query, thread_id=thread_id, resource_id=resource_id):
                seen |= markers([m.text for m in hit.window])
            out = engine.recall([HumanMessage(query)], thread_id=thread_id, resource_id=resource_id)
            seen |= markers([m.content for m in out if m.additional_kwargs.get("source")])
            docs = engine.as_retriever().invoke(query, config)
            seen |= markers([(d.page_content, d.metadata) for d in docs])
            call = {
                "name": "search_memory",
                "args": {"query": query},
                "id": "c1",
                "type": "tool_call",
            }
            answer = engine.as_tool().invoke(call, config)
            assert isinstance(answer, ToolMessage)
            seen |= markers((answer.content, answer.artifact))
    return seen


def assert_gone(
    rig: Rig, gone: set[str], *, thread_id: str | None = None, resource_id: str | None = None
) -> None:
    """Nothing of ``gone`` (markers) is stored, indexed, listed or shown anywhere."""
    scope = ScopeFilter(resource_id=resource_id, thread_id=thread_id)
    assert rig.stored(scope) == []
    assert rig.vector_ids(scope) == set()
    assert not markers([m.text for m in rig.stored()]) & gone
    threads = rig.storage.inner.list_threads(resource_id)
    if thread_id is not None:
        assert thread_id not in {t.thread_id for t in threads}
        assert rig.storage.inner.is_forgotten(thread_id)
    else:
        assert threads == []
    stats = rig.engine.stats()
    assert stats.orphan_vectors == 0
    assert rig.vector_ids() <= {m.id for m in rig.stored()}
    for asker, owner in ((thread_id or "t-ask", resource_id or "alice"), ("t-ask", "alice")):
        assert not visible(rig, thread_id=asker, resource_id=owner, query="lisbon march") & gone
    if thread_id is not None:  # thread scope without a resource: the thread has no owner now
        assert not visible(rig, thread_id=thread_id, resource_id=None, query="lisbon") & gone


class ForgettingSuite:
    """Deterministic interleavings of a forget with calls in flight. Subclass with ``backend``."""

    backend: ClassVar[Backend]

    @pytest.fixture
    def rig(self, tmp_path: Path) -> Iterator[Rig]:
        with open_rig(self.backend, tmp_path, search_mode="dense") as rig:
            rig.engine.index(exchange("keep", 100), thread_id="t2", resource_id="alice")
            rig.engine.index(exchange("bob", 200), thread_id="b1", resource_id="bob")
            rig.engine.index(exchange("old", 300), thread_id="t1", resource_id="alice")
            yield rig

    GONE: ClassVar[set[str]] = {"300", "301", "1", "2"}

    # --- one call in flight, held at each step, while the thread is forgotten ------------

    @pytest.mark.parametrize(
        ("part", "op", "when"),
        [
            ("storage", "put", "before"),  # the write reaches storage after the forget
            ("storage", "put", "after"),  # stored, then forgotten before embedding
            ("embeddings", "embed_documents", "before"),  # forgotten while embedding
            ("vectors", "upsert", "before"),  # forgotten just before the vectors land
            ("vectors", "upsert", "after"),  # vectors landed, then the thread forgotten
            ("storage", "is_forgotten", "before"),  # forgotten just before the final check
        ],
    )
    @pytest.mark.parametrize("forget", ["thread", "resource"])
    def test_an_index_call_in_flight_does_not_bring_it_back(
        self, rig: Rig, part: str, op: str, when: str, forget: str
    ) -> None:
        faults = {"storage": rig.storage, "vectors": rig.vectors, "embeddings": rig.embeddings}
        gate = faults[part].faults.gate(op, when=when)  # type: ignore[attr-defined]
        late = exchange("new", 1)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                lambda: rig.engine.index(late, thread_id="t1", resource_id="alice")
            )
            gate.wait_entered()
            if forget == "thread":
                assert rig.engine.forget_thread("t1", resource_id="alice") >= 2
            else:
                assert rig.engine.forget_resource("alice") >= 2
            gate.release()
            result = pending.result()
        assert result.embedded == ()
        if forget == "thread":
            assert_gone(rig, self.GONE, thread_id="t1")
            assert {m.id for m in rig.stored(ScopeFilter(thread_id="t2"))} == {
                "keep-100",
                "keep-101",
            }
        else:
            assert_gone(rig, self.GONE | {"100", "101"}, resource_id="alice")
        assert {m.id for m in rig.stored(ScopeFilter(resource_id="bob"))} == {"bob-200", "bob-201"}

    def test_a_late_index_call_stores_nothing(self, rig: Rig) -> None:
        rig.engine.forget_thread("t1")
        result = rig.engine.index(exchange("new", 1), thread_id="t1", resource_id="alice")
        assert (result.stored, result.embedded) == ((), ())
        assert result.forgotten  # visible in the result, never a silent drop
        assert [(f.fate, f.reason) for f in result.fates] == [("skipped", "thread forgotten")] * 2
        assert_gone(rig, self.GONE, thread_id="t1")

    def test_forgetting_an_id_that_holds_nothing_reserves_it_for_no_one(self, rig: Rig) -> None:
        assert rig.engine.forget_thread("shared", resource_id="alice") == 0
        result = rig.engine.index(exchange("bobs", 500), thread_id="shared", resource_id="bob")
        assert not result.forgotten
        assert len(result.stored) == 2
        assert visible(rig, thread_id="b-ask", resource_id="bob", query="lisbon") >= {"500"}
        with pytest.raises(OwnershipError):  # and now it is bob's
            rig.engine.forget_thread("shared", resource_id="alice")

    def test_after_forget_resource_a_new_thread_starts_from_nothing(self, rig: Rig) -> None:
        rig.engine.forget_resource("alice")
        rig.engine.index(exchange("back", 400), thread_id="t9", resource_id="alice")
        assert visible(rig, thread_id="t10", resource_id="alice", query="lisbon") == {
            "400",
            "401",
        }
        assert rig.engine.index(exchange("x", 1), thread_id="t2", resource_id="alice").stored == ()

    @pytest.mark.parametrize("forget", ["thread", "resource"])
    def test_a_reindex_in_flight_does_not_bring_it_back(self, rig: Rig, forget: str) -> None:
        gate = rig.embeddings.faults.gate("embed_documents")
        rig.engine.cache.clear()  # make the reindex embed (and so reach the gate)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(lambda: rig.engine.reindex(batch_size=100))
            gate.wait_entered()
            if forget == "thread":
                rig.engine.forget_thread("t1")
            else:
                rig.engine.forget_resource("alice")
            gate.release()
            pending.result()
        if forget == "thread":
            assert_gone(rig, self.GONE, thread_id="t1")
            assert rig.vector_ids(ScopeFilter(thread_id="t2")) == {"keep-100", "keep-101"}
        else:
            assert_gone(rig, self.GONE | {"100", "101"}, resource_id="alice")
        assert rig.vector_ids(ScopeFilter(resource_id="bob")) == {"bob-200", "bob-201"}

    async def test_an_async_reindex_in_flight_does_not_bring_it_back(self, rig: Rig) -> None:
        gate = rig.embeddings.faults.gate("embed_documents")
        rig.engine.cache.clear()
        pending = asyncio.create_task(rig.engine.areindex(batch_size=100))
        await gate.await_entered()
        await rig.engine.aforget_thread("t1")
        gate.release()
        await pending
        assert_gone(rig, self.GONE, thread_id="t1")

    def test_a_recall_in_flight_returns_nothing_read_after_the_forget(self, rig: Rig) -> None:
        """The vector search saw the thread; the storage read after the forget does not."""
        gate = rig.storage.faults.gate("get_windows")
        question = [HumanMessage("lisbon march garden")]
        engine = rig.engine_with(search_mode="dense", top_k=10)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                lambda: engine.recall(question, thread_id="t-ask", resource_id="alice")
            )
            gate.wait_entered()
            rig.engine.forget_thread("t1")
            gate.release()
            out = pending.result()
        shown = markers([m.content for m in out if m.additional_kwargs.get("source")])
        assert shown == {"100", "101"}

    # --- many writers at once ------------------------------------------------------------

    def test_concurrent_writers_never_resurrect_a_forgotten_thread(self, rig: Rig) -> None:
        writers, turns = 4, 6
        start = threading.Barrier(writers + 1)
        halfway = threading.Event()
        written: list[int] = []
        lock = threading.Lock()

        def write(w: int) -> None:
            start.wait()
            for n in range(turns):
                base = 1000 + 100 * w + 10 * n
                rig.engine.index(exchange(f"w{w}", base), thread_id="t1", resource_id="alice")
                rig.engine.index(
                    exchange(f"k{w}", base + 50_000), thread_id=f"keep-{w}", resource_id="alice"
                )
                with lock:
                    written.append(w)
                    if len(written) == writers:
                        halfway.set()

        with ThreadPoolExecutor(writers) as pool:
            futures = [pool.submit(write, w) for w in range(writers)]
            start.wait()
            assert halfway.wait(20)
            rig.engine.forget_thread("t1")
            for future in futures:
                future.result()
        gone = {
            str(1000 + 100 * w + 10 * n + k)
            for w in range(writers)
            for n in range(turns)
            for k in (0, 1)
        }
        assert_gone(rig, gone | self.GONE, thread_id="t1")
        for w in range(writers):  # every write to the other threads is whole
            assert len(rig.stored(ScopeFilter(thread_id=f"keep-{w}"))) == 2 * turns
            assert len(rig.vector_ids(ScopeFilter(thread_id=f"keep-{w}"))) == 2 * turns
        assert rig.engine.stats().missing_vectors == 0

    async def test_concurrent_async_writers_and_a_forget(self, rig: Rig) -> None:
        writers = 4
        start = asyncio.Barrier(writers + 1)
        gate = rig.embeddings.faults.gate(
            "embed_documents", match=lambda args: any("q5001z" in t for t in args["texts"])
        )

        async def write(w: int) -> None:
            await start.wait()
            for n in range(3):
                base = 5000 + 100 * w + 10 * n + 1
                await rig.engine.aindex(
                    exchange(f"a{w}", base), thread_id="t1", resource_id="alice"
                )

        tasks = [asyncio.create_task(write(w)) for w in range(writers)]
        await start.wait()
        await gate.await_entered()  # writer 0's first turn is held while embedding
        await rig.engine.aforget_thread("t1", resource_id="alice")
        gate.release()
        await asyncio.gather(*tasks)
        gone = {
            str(5000 + 100 * w + 10 * n + k)
            for w in range(writers)
            for n in range(3)
            for k in (1, 2)
        }
        assert_gone(rig, gone | self.GONE, thread_id="t1")

    # --- forgetting with failing backends ----------------------------------------------

    def test_a_forget_that_fails_on_the_vectors_can_be_repeated(self, rig: Rig) -> None:
        rig.vectors.faults.fail("delete")
        with pytest.raises(InjectedError):
            rig.engine.forget_thread("t1")
        # The messages are gone already: their orphan vectors are never shown...
        assert not visible(rig, thread_id="t-ask", resource_id="alice", query="lisbon") & self.GONE
        assert rig.engine.stats().orphan_vectors == 2
        # ...and the same call again finishes the job.
        assert rig.engine.forget_thread("t1") == 0
        assert_gone(rig, self.GONE, thread_id="t1")

    @pytest.mark.parametrize("missing_only", [True, False])
    def test_orphans_of_a_failed_forget_are_removed_by_the_repair(
        self, rig: Rig, missing_only: bool
    ) -> None:
        """Either repair removes them: a full reindex does at least what the partial
        one does (it left the forgotten messages' vectors, their text, on disk)."""
        rig.vectors.faults.fail("delete", partial=0)
        with pytest.raises(InjectedError):
            rig.engine.forget_resource("alice")
        assert rig.engine.stats().orphan_vectors == 4
        rig.engine.reindex(missing_only=missing_only)
        assert rig.engine.stats().orphan_vectors == 0
        assert_gone(rig, self.GONE | {"100", "101"}, resource_id="alice")

    def test_a_forget_that_fails_on_the_storage_deletes_nothing(self, rig: Rig) -> None:
        rig.storage.faults.fail("delete_thread")
        with pytest.raises(InjectedError):
            rig.engine.forget_thread("t1")
        assert len(rig.stored(ScopeFilter(thread_id="t1"))) == 2
        assert visible(rig, thread_id="t-ask", resource_id="alice", query="lisbon") >= {"300"}
        rig.engine.forget_thread("t1")
        assert_gone(rig, self.GONE, thread_id="t1")

    def test_forget_empties_the_embedding_cache(self, rig: Rig) -> None:
        assert len(rig.engine.cache) > 0
        rig.engine.forget_thread("t1")
        assert len(rig.engine.cache) == 0

    # --- an edited message keeps no vector of its old text -------------------------------

    def _vector_texts(self, rig: Rig, message_id: str) -> list[str]:
        scope = ScopeFilter(resource_id="alice")
        found = rig.vectors.inner.export(rig.index_name, scope)
        return sorted(v.content for v in found if v.message_id == message_id)

    @pytest.mark.parametrize(
        "edited",
        [
            HumanMessage("peanut sister q401z", id="long"),  # shorter: fewer chunks
            HumanMessage("", id="long"),  # emptied: no vector at all
            AIMessage("", id="long", tool_calls=[{"name": "f", "args": {}, "id": "c"}]),
        ],
        ids=["shorter", "emptied", "tool-calls-only"],
    )
    @pytest.mark.parametrize("how", ["index", "bulk_index"])
    def test_an_edit_leaves_no_vector_of_the_old_text(
        self, rig: Rig, edited: BaseMessage, how: str
    ) -> None:
        """A message edited (same id, new text) is found by its new text only, and the
        embedding cache no longer holds its old text.

        A long message is embedded as several chunks: the edit's upsert overwrote the
        first ones only, and an edit to a message with no text wrote none, so the old
        text stayed in the index (and in every purge's copy of it), and search found
        the message by words it no longer holds.
        """
        role = HumanMessage if isinstance(edited, HumanMessage) else AIMessage
        long = role(" ".join(["garden"] * 1500 + [text(400, "lisbon")]), id="long")
        rig.engine.index([long], thread_id="t2", resource_id="alice")
        assert any("q400z" in t for t in self._vector_texts(rig, "long"))
        pieces = split_for_embedding(rig.embeddings, str(long.content))
        assert all(rig.engine.cache.get(rig.index_name, p) for p in pieces)
        if how == "index":
            result = rig.engine.index([edited], thread_id="t2", resource_id="alice")
            assert [f.fate for f in result.fates] == ["updated"]
        else:
            assert rig.engine.bulk_index([("t2", "alice", [edited])]).updated == 1
        left = self._vector_texts(rig, "long")
        assert not [t for t in left if "q400z" in t or "garden" in t]
        assert left == ([str(edited.content)] if edited.content else [])
        assert not [p for p in pieces if rig.engine.cache.get(rig.index_name, p)]  # (memory)
        for mode in search_modes(rig):
            hits = rig.engine_with(search_mode=mode).search("lisbon q400z", resource_id="alice")
            assert "long" not in {h.message.id for h in hits}
        stats = rig.engine.stats(resource_id="alice")
        assert (stats.missing_vectors, stats.orphan_vectors) == (0, 0)

    @pytest.mark.parametrize(
        ("first", "then"),
        [
            (SystemMessage("be brief", id="s"), SystemMessage("be long", id="s")),
            (HumanMessage("lisbon q402z", id="s"), HumanMessage("lisbon q402z", id="s", name="x")),
        ],
        ids=["no-vector-before", "same-text"],
    )
    def test_an_edit_that_leaves_no_old_text_deletes_nothing(
        self, rig: Rig, first: BaseMessage, then: BaseMessage
    ) -> None:
        """Only an edit of embedded text costs a delete (and empties the caches)."""
        rig.engine.index([first], thread_id="t2", resource_id="alice")
        cached = len(rig.engine.cache)
        rig.vectors.calls.clear()
        result = rig.engine.index([then], thread_id="t2", resource_id="alice")
        assert [f.fate for f in result.fates] == ["updated"]
        assert "delete" not in rig.vectors.names()
        assert len(rig.engine.cache) == cached

    @pytest.mark.parametrize("missing_only", [True, False])
    def test_the_repair_drops_the_vectors_of_a_message_edited_to_no_text(
        self, rig: Rig, monkeypatch: pytest.MonkeyPatch, missing_only: bool
    ) -> None:
        """Stores edited by a version that kept the old vectors: either reindex drops them."""
        rig.engine.index(
            [AIMessage(text(400, "lisbon"), id="e")], thread_id="t2", resource_id="alice"
        )
        monkeypatch.setattr(index_ops, "rewrites_vectors", lambda *_: False)  # that version
        emptied = AIMessage("", id="e", tool_calls=[{"name": "f", "args": {}, "id": "c"}])
        rig.engine.index([emptied], thread_id="t2", resource_id="alice")
        assert self._vector_texts(rig, "e") == [text(400, "lisbon")]
        rig.engine.reindex(missing_only=missing_only)
        assert self._vector_texts(rig, "e") == []
        assert rig.vector_ids(ScopeFilter(resource_id="alice")) == {
            "keep-100",
            "keep-101",
            "old-300",
            "old-301",
        }


class TestForgettingInMemory(ForgettingSuite):
    backend = MEMORY


# --- generated histories: isolation and forgetting, by a model ------------------------

# Look-alike ids on purpose: case, spaces, full-width, zero-width, combining marks, bidi,
# quotes, backslashes, our own block tags and line breaks.
RESOURCES = [
    "alice",
    "Alice",
    "alice ",
    " alice",
    "ａlice",
    "alice\u200b",
    "é",
    "e\u0301",
    "r\\1",
    "\u202eecila",
]
THREADS = [
    "t",
    "T",
    "t ",
    "t\u200b",
    "ｔ",
    "chat-1",
    "chat-1\n",
    '"t"',
    "日本",
    "<end_remembered_from_other_conversation>",
]
BAD_IDS = ["", "   ", "t\x00", "t\ud800", 7.5, True, ["t"], None]  # ints are ids (as text)
WORDS_DRAWN = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)


@dataclass
class _Stored:
    resource: str
    thread: str
    marker: str


@dataclass
class _Model:
    messages: dict[str, _Stored] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)
    ghosts: dict[str, _Stored] = field(default_factory=dict)
    """Markers of forgotten messages: must never be shown again."""

    def marker_owner(self, marker: str) -> _Stored:
        for stored in (*self.messages.values(), *self.ghosts.values()):
            if stored.marker == marker:
                return stored
        raise AssertionError(f"marker q{marker}z was never written")

    def forget(self, thread: str) -> None:
        self.forgotten.add(thread)
        self.owners.pop(thread, None)
        for message_id in [i for i, m in self.messages.items() if m.thread == thread]:
            self.ghosts[message_id] = self.messages.pop(message_id)


class IsolationMachine(RuleBasedStateMachine):
    """Random histories and calls; after every step no surface leaks and nothing is lost."""

    BACKEND: ClassVar[Backend] = MEMORY

    def __init__(self) -> None:
        super().__init__()
        self._stack = ExitStack()
        self.rig = self._stack.enter_context(open_rig(self.BACKEND, search_mode="dense"))
        self.model = _Model()
        self.counter = 0
        self.vectors_may_be_missing = False
        self.fault_armed = False
        self.resources: list[str] = []
        self.threads: list[str] = []

    def teardown(self) -> None:
        self._stack.close()

    # -- helpers --------------------------------------------------------------------------

    def some_resource(self, data: st.DataObject, *, or_none: bool = False) -> str | None:
        """Mostly one of this history's resources, sometimes any look-alike (or none)."""
        pool: list[str | None] = [*self.resources * 3, *RESOURCES]
        return data.draw(st.sampled_from([*pool, None] if or_none else pool), "resource")

    def some_thread(self, data: st.DataObject) -> str:
        """Mostly a thread of this history (written ones first), sometimes any look-alike."""
        written = sorted(self.model.owners) * 4
        return data.draw(st.sampled_from([*written, *self.threads * 2, *THREADS]), "thread")

    def engine(self, mode: str, scope: str) -> SemanticRecall:
        modes = search_modes(self.rig)
        return self.rig.engine_with(
            search_mode=mode if mode in modes else "dense", scope=scope, top_k=6, message_range=1
        )

    def check_shown(
        self, shown: set[str], *, thread: str, resource: str | None, scope: str
    ) -> None:
        owner = resource if resource is not None else self.model.owners.get(thread, thread)
        for marker in shown:
            stored = self.model.marker_owner(marker)
            assert stored.resource == owner, f"q{marker}z of {stored.resource!r} shown to {owner!r}"
            assert stored.thread not in self.model.forgotten, f"forgotten q{marker}z came back"
            if scope == "thread":
                assert stored.thread == thread, f"q{marker}z of thread {stored.thread!r} leaked"

    # -- writes ---------------------------------------------------------------------------

    @initialize(
        resources=st.lists(st.sampled_from(RESOURCES), min_size=2, max_size=4, unique=True),
        threads=st.lists(st.sampled_from(THREADS), min_size=3, max_size=6, unique=True),
        data=st.data(),
    )
    def start_with_a_history(
        self, resources: list[str], threads: list[str], data: st.DataObject
    ) -> None:
        """A few resources and threads (look-alikes of each other) and their first turns."""
        self.resources, self.threads = resources, threads
        self.rig.engine.ensure_index()
        for _ in range(data.draw(st.integers(2, 8), "turns")):
            self.index_turn(data, data.draw(WORDS_DRAWN), data.draw(st.integers(1, 3)), True)

    @rule(data=st.data(), words=WORDS_DRAWN, count=st.integers(1, 3), give_resource=st.booleans())
    def index_turn(
        self, data: st.DataObject, words: list[str], count: int, give_resource: bool
    ) -> None:
        resource = self.some_resource(data)
        assert resource is not None
        self.index(resource, self.some_thread(data), words, count, give_resource)

    def index(
        self, resource: str, thread: str, words: list[str], count: int, give_resource: bool
    ) -> None:
        messages: list[BaseMessage] = []
        for n in range(count):
            self.counter += 1
            cls = HumanMessage if n % 2 == 0 else AIMessage
            messages.append(cls(text(self.counter, *words), id=f"m{self.counter}"))
        claimed = resource if give_resource else None
        owner = self.model.owners.get(thread)
        if claimed is not None and owner is not None and owner != claimed:
            before = self.rig.stored()
            with pytest.raises(OwnershipError):
                self.rig.engine.index(messages, thread_id=thread, resource_id=claimed)
            assert self.rig.stored() == before  # refused whole
            return
        before = self.rig.stored()
        if claimed is None:  # resource scope: a missing owner is refused, never guessed
            with pytest.raises(MissingIdentityError):
                self.rig.engine.index(messages, thread_id=thread, resource_id=claimed)
            assert self.rig.stored() == before
            return
        result = self.rig.engine.index(messages, thread_id=thread, resource_id=claimed)
        if thread in self.model.forgotten:
            assert result.stored == ()
            return
        effective = claimed if claimed is not None else owner if owner is not None else thread
        self.model.owners[thread] = effective
        for message in messages:
            marker = MARK.findall(str(message.content))[0]
            self.model.messages[str(message.id)] = _Stored(effective, thread, marker)
        if result.error is not None:
            self.vectors_may_be_missing = True

    @precondition(lambda self: len(self.model.messages) > 0)
    @rule(data=st.data())
    def steal_a_message_id(self, data: st.DataObject) -> None:
        """Writing a known message id under another thread is refused; the original stays."""
        thread = self.some_thread(data)
        message_id = data.draw(st.sampled_from(sorted(self.model.messages)))
        original = self.model.messages[message_id]
        if thread == original.thread or thread in self.model.forgotten:
            return
        resource = self.model.owners.get(thread, original.resource)
        with pytest.raises(OwnershipError):
            self.rig.engine.index(
                [HumanMessage("stolen lisbon", id=message_id)],
                thread_id=thread,
                resource_id=resource,
            )

    @rule(bad=st.sampled_from(BAD_IDS), where=st.sampled_from(["thread", "resource"]))
    def invalid_ids_are_refused(self, bad: Any, where: str) -> None:
        before = self.rig.stored()
        ids = {"thread_id": "t", "resource_id": "alice", f"{where}_id": bad}
        if bad is None:
            return  # None is "not given", a documented default
        with pytest.raises(InvalidInputError):
            self.rig.engine.index([HumanMessage("lisbon")], **ids)
        with pytest.raises(InvalidInputError):
            self.rig.engine.forget_thread(ids["thread_id"], resource_id=ids["resource_id"])
        assert self.rig.stored() == before

    # -- reads ----------------------------------------------------------------------------

    @rule(
        data=st.data(),
        scope=st.sampled_from(["thread", "resource"]),
        mode=st.sampled_from(["dense", "hybrid", "keyword"]),
        words=WORDS_DRAWN,
    )
    def read(self, data: st.DataObject, scope: str, mode: str, words: list[str]) -> None:
        """A caller asks: mostly the owner of a known thread, else any look-alike or none."""
        thread = self.some_thread(data)
        owner = self.model.owners.get(thread)
        resource = (
            owner if owner and data.draw(st.booleans()) else self.some_resource(data, or_none=True)
        )
        engine = self.engine(mode, scope)
        query = " ".join(words)
        if scope == "resource" and resource is None:  # refused on every surface, never guessed
            config_without: RunnableConfig = {"configurable": {"thread_id": thread}}
            with pytest.raises(MissingIdentityError):
                engine.recall([HumanMessage(query)], thread_id=thread)
            with pytest.raises(MissingIdentityError):
                engine.search(query, thread_id=thread)
            with pytest.raises(MissingIdentityError):
                engine.as_retriever().invoke(query, config_without)
            return
        effective_scope = scope
        shown: set[str] = set()
        # Recall raises for another resource's thread only, never for a backend failing
        # (it then recalls nothing).
        refused = resource is not None and owner not in (None, NO_RESOURCE, resource)
        try:
            out = engine.recall(
                [HumanMessage(query, id="live")], thread_id=thread, resource_id=resource
            )
            assert not refused, "a recall in another resource's thread was not refused"
        except OwnershipError:
            assert refused, "a recall in the caller's own thread was refused"
            out = []
        for message in out:
            if message.additional_kwargs.get("source") == MEMORY_SOURCE:
                shown |= markers(message.content)
                if message.type != "system":
                    assert self.model.messages[str(message.id)].thread == thread
        config: RunnableConfig = {"configurable": {"thread_id": thread, "resource_id": resource}}
        call = {"name": "search_memory", "args": {"query": query}, "id": "c", "type": "tool_call"}
        # A search for a resource naming a thread it does not own is refused (either scope).
        foreign = refused
        try:  # search and the surfaces built on it raise a backend's failure
            for hit in engine.search(query, thread_id=thread, resource_id=resource):
                shown |= markers([m.text for m in hit.window])
                for neighbour in hit.window:
                    assert neighbour.id in self.model.messages, "a forgotten or unknown message"
            assert not foreign, "a search of another resource's thread was not refused"
            for doc in engine.as_retriever().invoke(query, config):
                shown |= markers((doc.page_content, doc.metadata))
            answer = engine.as_tool().invoke(call, config)
            shown |= markers((answer.content, answer.artifact))
        except OwnershipError:
            assert foreign, "a search of the caller's own thread was refused"
        except InjectedError:
            assert self.fault_armed, "a failure nobody injected"
        self.check_shown(shown, thread=thread, resource=resource, scope=effective_scope)

    # -- forgetting -----------------------------------------------------------------------

    @rule(data=st.data())
    def forget_thread(self, data: st.DataObject) -> None:
        thread = self.some_thread(data)
        claim = self.some_resource(data, or_none=True)
        owner = self.model.owners.get(thread)
        if claim is not None and owner is not None and owner != claim:
            before = self.rig.stored()
            with pytest.raises(OwnershipError):
                self.rig.engine.forget_thread(thread, resource_id=claim)
            assert self.rig.stored() == before
            return
        expected = sum(1 for m in self.model.messages.values() if m.thread == thread)
        assert self.rig.engine.forget_thread(thread, resource_id=claim) == expected
        if owner is not None or thread in self.model.forgotten:
            self.model.forget(thread)  # an id that never held anything is not retired

    @rule(data=st.data())
    def forget_resource(self, data: st.DataObject) -> None:
        resource = self.some_resource(data)
        assert resource is not None
        threads = [t for t, owner in self.model.owners.items() if owner == resource]
        expected = sum(1 for m in self.model.messages.values() if m.resource == resource)
        assert self.rig.engine.forget_resource(resource) == expected
        for thread in threads:
            self.model.forget(thread)

    # -- maintenance and faults -------------------------------------------------------------

    @rule(kind=st.sampled_from(["embed", "upsert", "upsert-partial", "query", "windows"]))
    def a_backend_fails_once(self, kind: str) -> None:
        faults = self.rig
        if kind == "embed":
            faults.embeddings.faults.fail("embed_documents")
        elif kind == "upsert":
            faults.vectors.faults.fail("upsert")
        elif kind == "upsert-partial":
            faults.vectors.faults.fail("upsert", partial=1)
        elif kind == "query":
            faults.vectors.faults.fail("query")
        else:
            faults.storage.faults.fail("get_windows")
        self.rig.engine.cache.clear()  # so that the next write does embed
        self.fault_armed = True

    @rule(
        data=st.data(),
        missing_only=st.booleans(),
        scope=st.sampled_from(["all", "resource", "thread"]),
    )
    def reindex(self, data: st.DataObject, missing_only: bool, scope: str) -> None:
        self.rig.clear_faults()
        self.fault_armed = False
        resource = self.some_resource(data) if scope == "resource" else None
        thread = self.some_thread(data) if scope == "thread" else None
        self.rig.engine.reindex(
            missing_only=missing_only, batch_size=3, resource_id=resource, thread_id=thread
        )
        if scope == "all":
            assert self.rig.engine.stats().missing_vectors == 0
            self.vectors_may_be_missing = False

    @rule(data=st.data())
    def stats(self, data: st.DataObject) -> None:
        resource = self.some_resource(data, or_none=True)
        self.rig.clear_faults()
        self.fault_armed = False
        stats = self.rig.engine.stats(resource_id=resource)
        mine = [m for m in self.model.messages.values() if resource in (None, m.resource)]
        assert stats.messages == len(mine)
        assert stats.threads == len({m.thread for m in mine})
        assert stats.orphan_vectors == 0
        if not self.vectors_may_be_missing:
            assert stats.missing_vectors == 0

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def nothing_lost_nothing_resurrected(self) -> None:
        stored = self.rig.stored()
        assert {m.id: (m.resource_id, m.thread_id) for m in stored} == {
            i: (m.resource, m.thread) for i, m in self.model.messages.items()
        }
        assert self.rig.vector_ids() <= set(self.model.messages)


def isolation_machine(backend: Backend) -> type[RuleBasedStateMachine]:
    """The machine on ``backend`` (run it with ``isolation_machine(b).TestCase``)."""
    return type(f"IsolationOn{backend.name}", (IsolationMachine,), {"BACKEND": backend})


def machine_settings(examples: int, steps: int) -> settings:
    """Bounded runs of the machine (each example is up to ``steps`` random calls)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


TestIsolationInMemory = isolation_machine(FAST_BACKENDS[0]).TestCase
TestIsolationInMemory.settings = machine_settings(100, 40)
TestIsolationSQLite = isolation_machine(FAST_BACKENDS[1]).TestCase
TestIsolationSQLite.settings = machine_settings(40, 30)
TestIsolationDespiteLyingVectors = isolation_machine(LYING_VECTORS).TestCase
TestIsolationDespiteLyingVectors.settings = machine_settings(40, 30)


def test_a_turn_indexed_while_its_thread_is_cleared_leaves_no_vector() -> None:
    """`clear_thread` between a turn's message write and its vector write: nothing stays.

    The clear deletes the messages and the vectors written so far; the turn's vectors
    land after it. They held the cleared text (an orphan no search shows, but kept);
    the turn now sees the thread gone and deletes them.
    """
    with open_rig(MEMORY, search_mode="dense") as rig:
        rig.engine.index(exchange("a", 0), thread_id="t1", resource_id="alice")
        gate = rig.vectors.faults.gate("upsert")
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                rig.engine.index, exchange("b", 2), thread_id="t1", resource_id="alice"
            )
            gate.wait_entered()
            assert rig.engine.clear_thread("t1", resource_id="alice") == 4
            gate.release()
            pending.result()
        assert rig.stored() == []
        assert rig.vector_ids() == set()
        assert rig.engine.stats().orphan_vectors == 0
