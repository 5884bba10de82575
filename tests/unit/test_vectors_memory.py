"""The in-memory vector index passes the conformance suite; the base class checks once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langchain_semantic_recall.errors import (
    InvalidInputError,
    InvalidOptionError,
    SemanticRecallError,
)
from langchain_semantic_recall.records import ScopeFilter, VectorHit, VectorRecord
from langchain_semantic_recall.vectors import ExportNotSupportedError
from langchain_semantic_recall.vectors.base import VectorIndex, record_from_metadata
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from langchain_semantic_recall.vectors.rows import collect_held
from tests.conformance.vector_suite import (
    DIMENSION,
    EPOCH,
    MODEL,
    VectorIndexConformance,
    axis,
    new_name,
    record,
)
from tests.fakes import RecordingVectors


class TestInMemoryVectorIndex(VectorIndexConformance):
    @pytest.fixture
    def vectors(self) -> VectorIndex:
        return InMemoryVectorIndex()


# -- the base class: arguments are checked once, before any hook -------------------------------


class HookSpy(InMemoryVectorIndex):
    """Records every hook call (the storage work) of the in-memory index."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[tuple[str, dict[str, Any]]] = []

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        self.hooks.append(("_upsert", {"n": len(records)}))
        super()._upsert(name, records)

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        self.hooks.append(("_query", {"k": k}))
        return super()._query(name, vector, k=k, scope=scope)

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        self.hooks.append(("_delete", {"message_ids": message_ids}))
        super()._delete(name, thread_id=thread_id, resource_id=resource_id, message_ids=message_ids)


@pytest.fixture
def spy() -> HookSpy:
    index = HookSpy()
    index.open("spied", dimension=DIMENSION, model=MODEL)
    return index


def test_bad_arguments_never_reach_a_hook(spy: HookSpy) -> None:
    scope = ScopeFilter(thread_id="t1")
    with pytest.raises(InvalidOptionError, match="index_name"):
        spy.query("no", axis(0), k=1, scope=scope)
    for k in (0, -3, True):
        with pytest.raises(InvalidInputError, match="k must be"):
            spy.query("spied", axis(0), k=k, scope=scope)
    with pytest.raises(InvalidInputError, match="ScopeFilter"):
        spy.query("spied", axis(0), k=1, scope=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="thread_id"):
        spy.delete("spied")
    with pytest.raises(InvalidInputError, match="sequence of ids"):
        spy.delete("spied", message_ids="m1")
    with pytest.raises(InvalidInputError, match="dimension"):
        spy.open("other", dimension=0, model=MODEL)
    with pytest.raises(InvalidInputError, match="model"):
        spy.open("other", dimension=DIMENSION, model="")
    spy.upsert("spied", [])
    spy.delete("spied", message_ids=[])
    assert spy.hooks == []


def test_delete_hands_the_hook_unique_sorted_ids(spy: HookSpy) -> None:
    spy.upsert("spied", [record("b", axis(0)), record("a", axis(1)), record("c", axis(2))])
    spy.delete("spied", message_ids=("b", "a", "b"))
    assert spy.hooks[-1] == ("_delete", {"message_ids": ["a", "b"]})
    assert spy.message_ids("spied") == {"c"}


def test_export_drops_whatever_a_backend_returns_outside_the_scope() -> None:
    class LeakyExport(InMemoryVectorIndex):
        def _export(
            self, name: str, scope: ScopeFilter | None, *, batch_size: int
        ) -> Iterator[VectorRecord]:
            return super()._export(name, None, batch_size=batch_size)  # ignores the scope

    index = LeakyExport()
    name = new_name()
    index.open(name, dimension=DIMENSION, model=MODEL)
    index.upsert(name, [record("mine", axis(0)), record("theirs", axis(1), resource_id="r9")])
    assert [r.id for r in index.export(name, ScopeFilter(resource_id="r1"))] == ["mine"]
    assert sorted(r.id for r in index.export(name)) == ["mine", "theirs"]


class _OnlyExports(VectorIndex):
    """A backend whose required hooks are never called by these tests."""

    def _open(self, name: str, *, dimension: int, model: str) -> None:
        raise AssertionError("not called")

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        raise AssertionError("not called")

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        raise AssertionError("not called")

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        raise AssertionError("not called")

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        raise AssertionError("not called")


def test_a_backend_must_write_the_abstract_hooks() -> None:
    class Forgetful(VectorIndex):
        def _open(self, name: str, *, dimension: int, model: str) -> None:
            pass

    with pytest.raises(TypeError, match="_upsert"):
        Forgetful()  # type: ignore[abstract]


def test_count_defaults_to_counting_the_export() -> None:
    class ExportOnly(_OnlyExports):
        def _export(
            self, name: str, scope: ScopeFilter | None, *, batch_size: int
        ) -> Iterator[VectorRecord]:
            return iter([record("a", axis(0)), record("b", axis(1), thread_id="t2")])

    index = ExportOnly()
    assert index.count("idx") == 2
    assert index.count("idx", ScopeFilter(thread_id="t2")) == 1


async def test_vector_ids_default_to_grouping_the_export() -> None:
    """A backend that lists its vectors needs no `_vector_ids` of its own."""

    class ExportOnly(_OnlyExports):
        def _export(
            self, name: str, scope: ScopeFilter | None, *, batch_size: int
        ) -> Iterator[VectorRecord]:
            tagged = replace(record("a", axis(1), n=1), metadata=(("project", "apollo"),))
            rows = [record("a", axis(0)), tagged, record("b", axis(2), thread_id="t2")]
            return iter([*rows, record("c", axis(3), resource_id="r9")])  # ignores the scope

    index = ExportOnly()
    held = index.vector_ids("idx", ScopeFilter(resource_id="r1"))
    assert held.by_message() == {"a": frozenset({"a", "a#1"}), "b": frozenset({"b"})}
    assert held.carrying == {"a"}
    threaded = await index.avector_ids("idx", ScopeFilter(thread_id="t2"))
    assert threaded.by_message() == {"b": frozenset({"b"})}
    with pytest.raises(ExportNotSupportedError, match="_vector_ids"):
        _OnlyExports().vector_ids("idx")  # cannot list: says which hook to write


async def test_a_backend_that_cannot_list_raises_a_documented_error_at_the_call() -> None:
    wrapper = RecordingVectors(InMemoryVectorIndex())  # no _export hook of its own
    name = new_name()
    wrapper.open(name, dimension=DIMENSION, model=MODEL)
    with pytest.raises(ExportNotSupportedError, match="reembed") as caught:
        wrapper.export(name)
    assert isinstance(caught.value, NotImplementedError)
    assert isinstance(caught.value, SemanticRecallError)
    with pytest.raises(ExportNotSupportedError):
        wrapper.aexport(name)
    with pytest.raises(ExportNotSupportedError):
        await wrapper.acount(name)


async def test_aexport_reads_a_batch_at_a_time_and_closes_early() -> None:
    pulled: list[int] = []
    closed: list[bool] = []

    class Counting(_OnlyExports):
        def _export(
            self, name: str, scope: ScopeFilter | None, *, batch_size: int
        ) -> Iterator[VectorRecord]:
            def rows() -> Iterator[VectorRecord]:
                try:
                    for i in range(10):
                        pulled.append(i)
                        yield record(f"m{i}", axis(i % DIMENSION))
                finally:
                    closed.append(True)

            return rows()

    stream = Counting().aexport("idx", batch_size=3)
    assert pulled == []  # nothing read before the iteration starts
    seen = []
    async for rec in stream:
        seen.append(rec.id)
        if len(seen) == 4:
            break
    assert seen == ["m0", "m1", "m2", "m3"]
    assert len(pulled) == 6  # two batches of 3, not the whole index
    await stream.aclose()  # type: ignore[attr-defined]
    assert closed == [True]


def test_record_from_metadata() -> None:
    meta = {
        "message_id": "m",
        "thread_id": "t",
        "resource_id": "r",
        "role": "assistant",
        "created_at": "2024-01-15T10:30:00",
    }
    got = record_from_metadata("m#1", (1, 2), meta, "hi")
    assert got == VectorRecord("m#1", [1.0, 2.0], "m", "t", "r", "assistant", "hi", EPOCH)
    assert record_from_metadata("x", [1.0], {"thread_id": "t"}, "") is None
    assert record_from_metadata("x", [1.0], {**meta, "created_at": "yesterday"}, "") is None


@given(
    st.lists(
        st.tuples(st.sampled_from(["m", "m#1", "m#2", "n", "n#1", "x#1"]), st.booleans()),
        max_size=12,
    )
)
def test_collect_held_groups_any_rows_in_one_form(rows: list[tuple[str, bool]]) -> None:
    """Any order, repeats (a vector under two resources), ids holding `#`: the same
    `HeldVectors` as grouping each row by its message, `chunked` only where a message
    holds any other vector than one of its own id."""
    owner = {"m": "m", "m#1": "m", "m#2": "m", "n": "n", "n#1": "n", "x#1": "x#1"}
    triples = [(vector_id, owner[vector_id], carries) for vector_id, carries in rows]
    held = collect_held(triples)
    grouped: dict[str, set[str]] = {}
    for vector_id, message_id, _ in triples:
        grouped.setdefault(message_id, set()).add(vector_id)
    assert held.by_message() == grouped
    assert held.carrying == {message_id for _, message_id, carries in triples if carries}
    assert set(held.chunked) == {m for m, ids in grouped.items() if ids != {m}}
    assert held == collect_held(list(reversed(triples)))
    assert held.ids("absent") == frozenset()
