"""Faults: failing, hanging and lying backends never break a turn nor lose a message.

Every test of :class:`FaultSuite` runs on each embedded backend; another backend joins by
subclassing it with its :class:`~tests.faults.Backend`. The wrappers and the faults they
inject are in :mod:`tests.faults`.

The rules checked here (SPEC §3.9, §4.6):

* a failure of the embedder, the vector index or the storage during recall is logged and
  recall injects nothing: the turn goes on with its own messages;
* during ``index``, messages are stored first; an embedding or vector failure is logged
  and reported in the result, ``stats`` counts the missing vectors and one
  ``reindex(missing_only=True)`` makes them whole; a storage failure is raised, and a
  retry of the same call adds no duplicate;
* NaN / infinite / short batches of vectors are refused before they reach the index;
  vectors of another dimension fail closed (an error is raised, nothing is mixed).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from langchain_semantic_recall import EmbeddingCache, EmbeddingMismatchError, SemanticRecall
from langchain_semantic_recall.embeddings import (
    aembed_with_cache,
    embed_with_cache,
    split_for_embedding,
)
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.records import ScopeFilter
from tests.faults import (
    MEMORY,
    Backend,
    FaultyEmbeddings,
    InjectedError,
    Injector,
    Rig,
    inf_vectors,
    nan_vectors,
    one_bad_vector,
    open_rig,
    short_batch,
    wrong_dimension,
)
from tests.unit.conftest import turn

LOG = "langchain_semantic_recall"
TRIP = [
    "We are planning a trip to Lisbon in March",
    "Lisbon in March is mild and sunny",
    "Which neighbourhood should we stay in",
    "Alfama is charming and central",
]
PETS = ["My cat Miso hates the vet", "Miso could get a calming collar"]


def memories(messages: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if m.additional_kwargs.get("source") == MEMORY_SOURCE]


def ask(text: str) -> list[BaseMessage]:
    return [HumanMessage(text, id="live")]


def seed(rig: Rig) -> None:
    rig.engine.index(turn("a", TRIP), thread_id="t1", resource_id="alice")
    rig.engine.index(turn("b", PETS), thread_id="t2", resource_id="alice")


def injector(rig: Rig, target: str) -> Injector:
    return {
        "embeddings": rig.embeddings.faults,
        "vectors": rig.vectors.faults,
        "storage": rig.storage.faults,
    }[target]


def arm(rig: Rig, target: str, op: str, kind: str, *, times: int | None = None) -> None:
    faults = injector(rig, target)
    if kind == "error":
        faults.fail(op, times=times)
    elif kind == "timeout":
        faults.timeout(op, times=times)
    elif kind == "runtime":
        faults.fail(op, RuntimeError("backend bug"), times=times)
    elif kind == "nan":
        faults.corrupt(op, nan_vectors, times=times)
    elif kind == "inf":
        faults.corrupt(op, inf_vectors, times=times)
    elif kind == "one-bad":
        faults.corrupt(op, one_bad_vector, times=times)
    elif kind == "short":
        faults.corrupt(op, short_batch, times=times)
    elif kind.startswith("partial-"):
        faults.fail(op, partial=int(kind.removeprefix("partial-")), times=times)
    elif kind == "after":
        faults.fail(op, TimeoutError("answer lost"), after=True, times=times)
    else:
        raise AssertionError(kind)


def warned(caplog: pytest.LogCaptureFixture, words: str) -> bool:
    return any(r.levelno == logging.WARNING and words in r.getMessage() for r in caplog.records)


def upserted_values(rig: Rig) -> list[float]:
    return [x for call in rig.vectors.of("upsert") for r in call["records"] for x in r.vector]


# Recall reads through these; each may fail in each of these ways.
READ_FAULTS = [
    ("embeddings", "embed_documents", kind) for kind in ("error", "timeout", "runtime", "nan")
] + [
    ("embeddings", "embed_documents", "short"),
    ("vectors", "query", "error"),
    ("vectors", "query", "timeout"),
    ("vectors", "query", "runtime"),
    ("vectors", "open", "error"),
    ("storage", "get_windows", "error"),
    ("storage", "get_windows", "timeout"),
    ("storage", "get_thread_owner", "error"),
]
# Index writes vectors through these; each failure leaves the messages stored.
VECTOR_WRITE_FAULTS = [
    ("embeddings", "embed_documents", kind) for kind in ("error", "timeout", "short")
] + [
    ("vectors", "upsert", "error"),
    ("vectors", "upsert", "timeout"),
    ("vectors", "upsert", "partial-2"),
    ("vectors", "upsert", "after"),
    ("vectors", "open", "error"),
]


class FaultSuite:
    """Fault tests for one backend. Subclass with ``backend`` (and ``examples``)."""

    backend: ClassVar[Backend]
    examples: ClassVar[int] = 25
    """Generated fault schedules of the property test."""

    @pytest.fixture
    def rig(self, tmp_path: Path) -> Iterator[Rig]:
        with open_rig(self.backend, tmp_path, search_mode="dense", top_k=4, message_range=1) as r:
            yield r

    # --- recall -----------------------------------------------------------------------

    @pytest.mark.parametrize(("target", "op", "kind"), READ_FAULTS)
    def test_recall_degrades_to_no_recall(
        self, rig: Rig, caplog: pytest.LogCaptureFixture, target: str, op: str, kind: str
    ) -> None:
        seed(rig)
        # A fresh engine over the same parts opens the index again (so "open" is read).
        engine = rig.engine_with(search_mode="dense", scope="thread", top_k=4)
        thread_scope = op == "get_thread_owner"
        resource = None if thread_scope else "alice"
        thread = "t1" if thread_scope else "t3"
        arm(rig, target, op, kind)
        caplog.set_level(logging.WARNING, logger=LOG)
        engine = engine if thread_scope else rig.engine_with(search_mode="dense", top_k=4)
        question = ask(f"Lisbon in March {kind} {op}")  # not cached: the embedder is asked
        config: RunnableConfig = {"configurable": {"thread_id": thread, "resource_id": resource}}

        assert engine.recall(question, thread_id=thread, resource_id=resource) == question
        assert engine.invoke(question, config) == question
        assert warned(caplog, "recall failed")
        assert injector(rig, target).fired, "the fault never hit: the test proves nothing"

        rig.clear_faults()
        assert memories(engine.recall(question, thread_id=thread, resource_id=resource))

    async def test_async_recall_degrades_to_no_recall(
        self, rig: Rig, caplog: pytest.LogCaptureFixture
    ) -> None:
        seed(rig)
        caplog.set_level(logging.WARNING, logger=LOG)
        for target, op in (("embeddings", "embed_documents"), ("vectors", "query")):
            arm(rig, target, op, "timeout")
            question = ask(f"Lisbon trip {op}")
            out = await rig.engine.arecall(question, thread_id="t3", resource_id="alice")
            assert out == question
            config: RunnableConfig = {"configurable": {"thread_id": "t3", "resource_id": "alice"}}
            assert await rig.engine.ainvoke(question, config) == question
            rig.clear_faults()
        assert warned(caplog, "recall failed")
        question = ask("Lisbon trip again")
        assert memories(await rig.engine.arecall(question, thread_id="t3", resource_id="alice"))

    @pytest.mark.parametrize(
        "op", ["embed_documents", "query", "keyword_search", "get_windows", "open"]
    )
    def test_hybrid_recall_never_breaks_the_turn(
        self, rig: Rig, caplog: pytest.LogCaptureFixture, op: str
    ) -> None:
        """Hybrid mode may fall back to one half, but never raises nor leaks."""
        seed(rig)
        rig.engine.index(turn("x", TRIP), thread_id="bob-1", resource_id="bob")
        if not rig.storage.supports_keyword_search:
            op = "embed_documents"  # no keyword half on this backend: hybrid is dense
        engine = rig.engine_with(search_mode="auto")
        target = {"embed_documents": "embeddings", "query": "vectors", "open": "vectors"}
        arm(rig, target.get(op, "storage"), op, "error")
        caplog.set_level(logging.WARNING, logger=LOG)
        question = ask(f"Lisbon March Alfama {op}")
        out = engine.recall(question, thread_id="t3", resource_id="alice")
        assert out[-1] == question[-1]
        assert caplog.records, "a failure must be logged"
        for message in memories(out):
            assert "bob" not in str(message.content)
            assert message.id is None or not message.id.startswith("x-")

    def test_a_hanging_backend_released_with_a_timeout(
        self, rig: Rig, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A vector query that hangs holds up only its own recall; its timeout is logged."""
        seed(rig)
        caplog.set_level(logging.WARNING, logger=LOG)
        gate = rig.vectors.faults.gate("query")
        question = ask("Lisbon neighbourhood")
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(rig.engine.recall, question, thread_id="t3", resource_id="alice")
            gate.wait_entered()
            # Writers and other maintenance are not blocked by the hung read.
            result = rig.engine.index(
                turn("c", ["Porto next?"]), thread_id="t4", resource_id="alice"
            )
            assert result.embedded == ("c-0",)
            assert rig.engine.stats().missing_vectors == 0
            gate.release(TimeoutError("vector query timed out"))
            assert pending.result() == question
        assert warned(caplog, "recall failed")

    @pytest.mark.parametrize(
        "payload",
        ['{"type": "martian", "data": {}}', "{not json", '{"type": "human", "data": 7}'],
    )
    def test_an_unreadable_stored_payload_is_recalled_from_its_text(
        self, rig: Rig, caplog: pytest.LogCaptureFixture, payload: str
    ) -> None:
        """A payload of another LangChain version, or damaged, must not break the turn."""
        seed(rig)
        rig.storage.faults.corrupt(
            "get_windows",
            lambda windows: {
                hit: tuple(replace(m, payload=payload) for m in window)
                for hit, window in windows.items()
            },
            times=None,
        )
        caplog.set_level(logging.WARNING, logger=LOG)
        engine = rig.engine_with(search_mode="dense", scope="thread", top_k=4)
        out = engine.recall(ask("Lisbon in March"), thread_id="t1", resource_id="alice")
        recalled = memories(out)
        assert recalled, "the messages are still recalled, from their text"
        assert {type(m) for m in recalled} <= {HumanMessage, AIMessage}
        assert {str(m.content) for m in recalled} <= set(TRIP)
        assert warned(caplog, "unreadable payload")

    # --- index ------------------------------------------------------------------------

    @pytest.mark.parametrize(("target", "op", "kind"), VECTOR_WRITE_FAULTS)
    def test_index_keeps_every_message_when_vectors_fail(
        self, rig: Rig, caplog: pytest.LogCaptureFixture, target: str, op: str, kind: str
    ) -> None:
        caplog.set_level(logging.WARNING, logger=LOG)
        engine = rig.engine
        if op != "open":
            engine.ensure_index()
        arm(rig, target, op, kind, times=1)
        messages = turn("a", TRIP)
        ids = tuple(m.id for m in messages)

        result = engine.index(messages, thread_id="t1", resource_id="alice")

        assert injector(rig, target).fired, "the fault never hit: the test proves nothing"
        assert result.stored == ids
        assert result.embedded == ()
        assert result.error
        assert warned(caplog, "indexing vectors failed")
        assert [m.id for m in rig.stored()] == list(ids)
        assert all(math.isfinite(x) for x in upserted_values(rig)), "NaN reached the index"
        written = len(rig.vector_ids())
        if kind == "short":
            assert "upsert" not in rig.vectors.names(), "a bad batch reached the index"
        stats = engine.stats()
        assert (stats.messages, stats.embeddable) == (4, 4)
        assert stats.missing_vectors == 4 - written
        assert written == (4 if kind == "after" else 2 if kind == "partial-2" else 0)

        assert engine.reindex(missing_only=True) == 4 - written  # one call repairs
        assert engine.stats().missing_vectors == 0
        assert rig.vector_ids() == set(ids)
        assert engine.reindex(missing_only=True) == 0
        assert memories(engine.recall(ask("Lisbon"), thread_id="t9", resource_id="alice"))

    @pytest.mark.parametrize(("kind", "bad"), [("nan", 4), ("inf", 4), ("one-bad", 1)])
    def test_an_unusable_vector_costs_its_own_message_only(
        self, rig: Rig, caplog: pytest.LogCaptureFixture, kind: str, bad: int
    ) -> None:
        """NaN or infinite vectors never reach the index; the turn's others are written."""
        caplog.set_level(logging.WARNING, logger=LOG)
        engine = rig.engine
        engine.ensure_index()
        arm(rig, "embeddings", "embed_documents", kind, times=1)
        messages = turn("a", TRIP)
        ids = tuple(m.id for m in messages)

        result = engine.index(messages, thread_id="t1", resource_id="alice")

        assert rig.embeddings.faults.fired, "the fault never hit: the test proves nothing"
        assert result.stored == ids
        assert result.embedded == ids[: 4 - bad]
        assert set(result.skipped) == set(ids[4 - bad :])
        assert result.error is not None
        assert "reindex(missing_only=True)" in result.error
        assert warned(caplog, "is stored without a vector: NaN or infinite vector")
        assert all(math.isfinite(x) for x in upserted_values(rig)), "NaN reached the index"
        assert rig.vector_ids() == set(ids[: 4 - bad])
        assert engine.stats().missing_vectors == bad
        assert engine.reindex(missing_only=True) == bad  # the embedder answers now
        assert rig.vector_ids() == set(ids)

    @pytest.mark.parametrize("twin", ["sync", "async"])
    async def test_a_long_message_written_in_part_is_repaired_by_missing_only(
        self, rig: Rig, twin: str
    ) -> None:
        """A message of several chunks whose vector write failed part-way counts as missing.

        Otherwise its first chunk makes it look whole: `stats` says nothing is missing and
        `reindex(missing_only=True)`, the repair the result's error points to, never writes
        the rest, so the words past the first chunk are never found by meaning.
        """
        engine = rig.engine
        engine.ensure_index()
        long = " ".join(f"word{n}" for n in range(1500))  # three chunks of 6000 characters
        messages = [HumanMessage(long, id="long"), AIMessage("Noted", id="short")]
        rig.vectors.faults.fail("upsert", partial=1)  # the first chunk lands, then it fails
        if twin == "sync":
            result = engine.index(messages, thread_id="t1", resource_id="alice")
        else:
            result = await engine.aindex(messages, thread_id="t1", resource_id="alice")
        assert rig.vectors.faults.fired, "the fault never hit: the test proves nothing"
        assert result.error
        assert result.embedded == ()
        assert engine.stats().missing_vectors == 2  # both, as the result says
        if twin == "sync":
            assert engine.reindex(missing_only=True) == 2
        else:
            assert await engine.areindex(missing_only=True) == 2
        assert engine.stats().missing_vectors == 0
        chunks = len(split_for_embedding(rig.embeddings, long))
        assert chunks == 3
        assert rig.vectors.inner.count(rig.index_name) == chunks + 1  # every chunk of both

    @pytest.mark.parametrize("twin", ["sync", "async"])
    async def test_a_long_message_cut_where_nothing_can_drop_it_is_still_seen_and_repaired(
        self, rig: Rig, twin: str
    ) -> None:
        """The process killed between two pieces of a write (SIGKILL, an OOM kill): no
        `except` runs, so nothing drops what landed. Its own vector went first, so the
        message looked whole to `stats` and the repair, and its later chunks were never
        written (the cancellation audit, with the real store and a killed child). Its own
        vector goes last now: a message without it is counted missing and written whole.
        """
        engine = rig.engine
        engine.ensure_index()
        long = " ".join(f"word{n}" for n in range(1500))  # three chunks
        messages = [HumanMessage(long, id="long"), AIMessage("Noted", id="short")]
        killed = SystemExit("killed (injected): no except Exception runs")
        rig.vectors.faults.fail("upsert", killed, partial=2)  # two vectors land, then death
        ids = {"thread_id": "t1", "resource_id": "alice"}
        with pytest.raises(SystemExit):
            await engine.aindex(messages, **ids) if twin == "async" else engine.index(
                messages, **ids
            )  # type: ignore[arg-type]
        assert rig.vectors.faults.fired
        assert rig.vectors.inner.count(rig.index_name) == 2  # what landed stays
        assert engine.stats().missing_vectors == 2  # the long one in part, the short one not
        if twin == "sync":
            assert engine.reindex(missing_only=True) == 2
        else:
            assert await engine.areindex(missing_only=True) == 2
        assert engine.stats().missing_vectors == 0
        assert rig.vectors.inner.count(rig.index_name) == 3 + 1

    @pytest.mark.parametrize("twin", ["sync", "async"])
    @pytest.mark.parametrize("write", ["bulk_index", "reindex"])
    async def test_a_bulk_or_repair_write_failed_part_way_leaves_no_long_message_half_whole(
        self, rig: Rig, twin: str, write: str
    ) -> None:
        """Bulk import and reindex raise on a failed vector write; the next repair is whole."""
        engine = rig.engine
        engine.ensure_index()
        long = " ".join(f"word{n}" for n in range(1500))
        messages = [HumanMessage(long, id="long"), AIMessage("Noted", id="short")]
        if write == "reindex":  # stored without vectors first (the embedder was down)
            rig.embeddings.faults.fail("embed_documents")
            assert engine.index(messages, thread_id="t1", resource_id="alice").error

        async def attempt() -> None:
            if write == "bulk_index" and twin == "sync":
                engine.bulk_index([("t1", "alice", messages)])
            elif write == "bulk_index":
                await engine.abulk_index([("t1", "alice", messages)])
            elif twin == "sync":
                engine.reindex(missing_only=True)
            else:
                await engine.areindex(missing_only=True)

        rig.vectors.faults.fail("upsert", partial=1)
        with pytest.raises(InjectedError):
            await attempt()
        assert rig.vectors.faults.fired
        assert engine.stats().missing_vectors == 2
        assert engine.reindex(missing_only=True) == 2
        assert rig.vectors.inner.count(rig.index_name) == 4  # the three chunks and "Noted"

    @pytest.mark.parametrize("kind", ["error", "timeout", "partial-1", "partial-3", "after"])
    def test_a_failed_storage_write_is_raised_and_a_retry_adds_no_duplicate(
        self, rig: Rig, kind: str
    ) -> None:
        messages = turn("a", TRIP)
        ids = [m.id for m in messages]
        arm(rig, "storage", "put", kind, times=1)
        with pytest.raises((InjectedError, TimeoutError)):
            rig.engine.index(messages, thread_id="t1", resource_id="alice")
        kept = {"error": 0, "timeout": 0, "partial-1": 1, "partial-3": 3, "after": 4}[kind]
        assert [m.id for m in rig.stored()] == ids[:kept]
        assert "upsert" not in rig.vectors.names(), "vectors of unstored messages"
        if kept:
            assert rig.engine.stats().missing_vectors == kept

        result = rig.engine.index(messages, thread_id="t1", resource_id="alice")
        assert result.stored == tuple(ids[kept:])  # the retry writes what was missing...
        assert result.unchanged == tuple(ids[:kept])  # ...and says what was there already
        assert result.embedded == tuple(ids[kept:] + ids[:kept])  # every vector made whole
        assert rig.engine.index(messages, thread_id="t1", resource_id="alice").error is None
        stored = rig.stored()
        assert [m.id for m in stored] == ids  # once each, in order
        assert [m.seq for m in stored] == sorted(m.seq for m in stored)
        assert rig.vector_ids() == set(ids)
        assert rig.engine.stats().missing_vectors == 0

    def test_messages_without_ids_are_imported_once_whatever_the_retries(self, rig: Rig) -> None:
        """Deterministic ids: a repeated import (after a crash or not) adds nothing."""
        dated = [
            (HumanMessage if n % 2 == 0 else AIMessage)(
                text, additional_kwargs={"created_at": f"2024-01-15T10:{n:02d}:00Z"}
            )
            for n, text in enumerate(TRIP)
        ]
        rig.vectors.faults.fail("upsert", partial=1)
        first = rig.engine.index(dated, thread_id="t1", resource_id="alice")
        assert first.error
        again = rig.engine.index(dated, thread_id="t1", resource_id="alice")
        assert again.unchanged == first.stored  # the same ids: already stored
        assert again.error is None  # and the retry made the vectors whole
        assert len(set(first.stored)) == 4
        assert [m.id for m in rig.stored()] == list(first.stored)
        assert rig.vector_ids() == set(first.stored)

    # --- embedder that lies -------------------------------------------------------------

    def test_an_embedder_of_another_dimension_fails_closed(self, rig: Rig) -> None:
        seed(rig)
        name = rig.index_name
        before = rig.vector_ids()
        other = SemanticRecall(
            storage=rig.storage,
            vector_store=rig.vectors,
            embeddings=FaultyEmbeddings(dimension=32),
            index_name=name,
            search_mode="dense",
        )
        with pytest.raises(EmbeddingMismatchError, match="reindex"):
            other.recall(ask("Lisbon"), thread_id="t3", resource_id="alice")
        with pytest.raises(EmbeddingMismatchError) as raised:
            other.index([HumanMessage("Porto next", id="p")], thread_id="t3", resource_id="alice")
        assert "p" in {m.id for m in rig.stored()}  # the message itself is kept, and said so
        assert "1 message(s) of this call were stored without vectors" in str(
            raised.value.__notes__
        )
        assert rig.vector_ids() == before  # nothing mixed into the index
        assert memories(rig.engine.recall(ask("Lisbon"), thread_id="t4", resource_id="alice"))

    def test_another_dimension_without_an_index_name_gets_its_own_index(
        self, rig: Rig, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        seed(rig)  # a store's first messages make its index: nothing to warn of
        assert not warned(caplog, "already holds messages")
        other = SemanticRecall(
            storage=rig.storage,
            vector_store=rig.vectors,
            embeddings=FaultyEmbeddings(dimension=32),
            index_name=None if not self.backend.shared_vectors else "dim32-" + rig.index_name,
            search_mode="dense",
        )
        assert other.ensure_index().name != rig.index_name
        # Its index has none of the history: said, not left for recall to be silent about.
        assert warned(caplog, "already holds messages")
        caplog.clear()
        question = ask("Lisbon")
        assert other.recall(question, thread_id="t3", resource_id="alice") == question
        assert other.reindex() == 6  # filled from storage, the old index untouched
        assert memories(other.recall(question, thread_id="t3", resource_id="alice"))
        assert len(rig.vector_ids()) == 6
        assert not warned(caplog, "already holds messages")  # said once, when it was made

    def test_vectors_of_the_wrong_dimension_fail_closed(self, rig: Rig) -> None:
        seed(rig)
        rig.embeddings.faults.corrupt("embed_documents", wrong_dimension(32), times=None)
        with pytest.raises(EmbeddingMismatchError):
            rig.engine.recall(ask("Lisbon again"), thread_id="t3", resource_id="alice")
        with pytest.raises(EmbeddingMismatchError):
            rig.engine.index([HumanMessage("Porto", id="p")], thread_id="t3", resource_id="alice")
        assert "p" in {m.id for m in rig.stored()}
        assert "p" not in rig.vector_ids()  # refused by the index, nothing mixed in
        rig.clear_faults()
        # No cache clearing: the engine passes its index dimension to the cache, which
        # refuses and replaces the wrong vectors once the embedder recovers.
        assert rig.engine.stats().missing_vectors == 1
        assert rig.engine.reindex(missing_only=True) == 1

    # --- async ------------------------------------------------------------------------

    async def test_async_index_degrades_and_one_call_repairs(
        self, rig: Rig, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING, logger=LOG)
        await rig.engine.aensure_index()
        rig.vectors.faults.fail("upsert", partial=1)
        result = await rig.engine.aindex(turn("a", TRIP), thread_id="t1", resource_id="alice")
        assert len(result.stored) == 4
        assert result.error
        rig.embeddings.faults.corrupt("embed_documents", nan_vectors)
        result = await rig.engine.aindex(turn("b", PETS), thread_id="t2", resource_id="alice")
        assert result.error
        assert (await rig.engine.astats()).missing_vectors == 5
        assert await rig.engine.areindex(missing_only=True) == 5
        assert (await rig.engine.astats()).missing_vectors == 0
        assert warned(caplog, "indexing vectors failed")

    async def test_a_cancelled_index_loses_no_message(self, rig: Rig) -> None:
        """An ``aindex`` cancelled while embedding (a caller's timeout) keeps its messages."""
        await rig.engine.aensure_index()
        gate = rig.embeddings.faults.gate("embed_documents")
        task = asyncio.create_task(
            rig.engine.aindex(turn("a", TRIP), thread_id="t1", resource_id="alice")
        )
        await gate.await_entered()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.release()
        await asyncio.to_thread(gate.wait_passed)
        assert [m.id for m in rig.stored()] == [f"a-{n}" for n in range(4)]
        stats = await rig.engine.astats()
        assert (stats.messages, stats.missing_vectors) == (4, 4)
        assert await rig.engine.areindex(missing_only=True) == 4
        assert rig.vector_ids() == {f"a-{n}" for n in range(4)}

    # --- generated fault schedules -------------------------------------------------------

    def test_random_fault_schedules_lose_and_duplicate_nothing(self) -> None:
        @settings(
            max_examples=self.examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(schedule=st.lists(STEP, min_size=1, max_size=8))
        def run(schedule: list[tuple[int, str | None, int]]) -> None:
            with open_rig(self.backend, search_mode="dense", top_k=3) as rig:
                check_fault_schedule(rig, schedule)

        run()


def test_the_cache_never_keeps_vectors_of_another_dimension() -> None:
    """With the index dimension given, a wrong answer is refused and never cached."""
    embeddings = FaultyEmbeddings(dimension=8)
    cache = EmbeddingCache()
    embeddings.faults.corrupt("embed_documents", wrong_dimension(4))
    with pytest.raises(EmbeddingMismatchError, match="nothing was cached"):
        embed_with_cache(embeddings, cache, "idx", ["hello"], dimension=8)
    assert len(cache) == 0
    cache.put("idx", "hello", [1.0, 0.0])  # poisoned by an earlier answer
    assert len(embed_with_cache(embeddings, cache, "idx", ["hello"], dimension=8)[0]) == 8
    assert len(cache.get("idx", "hello") or []) == 8


async def test_the_async_cache_never_keeps_vectors_of_another_dimension() -> None:
    embeddings = FaultyEmbeddings(dimension=8)
    cache = EmbeddingCache()
    embeddings.faults.corrupt("embed_documents", wrong_dimension(4))
    with pytest.raises(EmbeddingMismatchError):
        await aembed_with_cache(embeddings, cache, "idx", ["hello"], dimension=8)
    assert len(cache) == 0


WRITE_KINDS: list[str | None] = [
    None,
    "embed:error",
    "embed:timeout",
    "embed:nan",
    "embed:one-bad",
    "embed:short",
    "upsert:error",
    "upsert:partial-1",
    "upsert:after",
    "put:error",
    "put:partial-1",
    "put:after",
    "read:query",
    "read:embed",
    "read:get_windows",
]
STEP = st.tuples(st.integers(0, 5), st.sampled_from(WRITE_KINDS), st.integers(0, 2))
_TARGET = {"embed": "embeddings", "upsert": "vectors", "put": "storage"}
_OP = {"embed": "embed_documents", "upsert": "upsert", "put": "put"}


def _turn_of(k: int, repeat: int) -> tuple[str, list[BaseMessage]]:
    """Turn ``k`` of the generated history: its thread and its messages (stable ids)."""
    words = ["lisbon", "tomato", "python", "peanut", "garden", "sister"]
    texts = [f"{words[k]} question {k}", f"{words[k]} answer {k}", f"{words[(k + 1) % 6]} {k}"]
    messages: list[BaseMessage] = [
        (HumanMessage if n % 2 == 0 else AIMessage)(text, id=f"k{k}-{n}")
        for n, text in enumerate(texts)
    ]
    return f"thread-{k % 3}", messages[: 2 + repeat % 2]


def check_fault_schedule(rig: Rig, schedule: list[tuple[int, str | None, int]]) -> None:
    """Apply a schedule of turns and faults; then nothing is lost, duplicated or missing."""
    engine = rig.engine
    expected: dict[str, str] = {}  # message id -> thread
    for step, (k, fault, repeat) in enumerate(schedule):
        thread, messages = _turn_of(k, repeat)
        rig.clear_faults()
        if fault is not None and fault.startswith("read:"):
            what = fault.removeprefix("read:")
            target = {"query": "vectors", "embed": "embeddings", "get_windows": "storage"}[what]
            op = "embed_documents" if what == "embed" else what
            arm(rig, target, op, "error", times=None)
            question = ask(f"{messages[0].content} read {step}")  # never cached
            assert engine.recall(question, thread_id="other", resource_id="r") == question
            continue
        if fault is not None:
            where, kind = fault.split(":")
            arm(rig, _TARGET[where], _OP[where], kind, times=1)
        # Messages stored before are not written again: the batch is what is not stored yet.
        pending = [m for m in messages if str(m.id) not in expected]
        try:
            engine.index(messages, thread_id=thread, resource_id="r")
        except (InjectedError, TimeoutError):
            assert fault is not None
            assert fault.startswith("put:")
            kept = {"error": 0, "partial-1": 1, "after": len(pending)}[fault.split(":")[1]]
        else:
            kept = len(pending)
        for message in pending[:kept]:
            expected.setdefault(str(message.id), thread)
        stored = rig.stored()
        assert sorted(m.id for m in stored) == sorted(expected), "a message was lost or doubled"
        question = ask(str(messages[-1].content))
        engine.recall(question, thread_id="other", resource_id="r")  # never raises

    rig.clear_faults()
    stats = engine.stats()
    assert stats.messages == len(expected)
    assert stats.orphan_vectors == 0
    assert engine.reindex(missing_only=True) == stats.missing_vectors
    assert engine.stats().missing_vectors == 0
    assert rig.vector_ids() == set(expected)
    for k, fault, repeat in schedule:  # the whole import again: only what failed is added
        thread, messages = _turn_of(k, repeat)
        if fault is None or not fault.startswith("read:"):
            engine.index(messages, thread_id=thread, resource_id="r")
            for message in messages:
                expected.setdefault(str(message.id), thread)
    assert sorted(m.id for m in rig.stored()) == sorted(expected)
    assert rig.vector_ids() == set(expected)
    for thread in {m.thread_id for m in rig.stored()}:
        seqs = [m.seq for m in rig.stored(ScopeFilter(thread_id=thread))]
        assert seqs == sorted(set(seqs)), "sequence numbers repeated"


class TestFaultsInMemory(FaultSuite):
    backend = MEMORY
    examples = 60
