"""Generated filters give the same messages on the in-memory and SQLite storages as the rule.

The conformance suite checks examples on each backend; here hypothesis draws metadata and
filters near the edges of "values compare by kind" (`tests/conformance/generated_filters.py`);
PostgreSQL runs the same check in `tests/integration/test_postgres_storage.py`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_semantic_recall import InMemoryStorage, SQLiteStorage
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.langchain import LangChainVectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.conformance.generated_filters import FILTERS, ROWS, Row, check_reads, check_vector_reads
from tests.fakes import FakeEmbeddings

RUNS = itertools.count()


@pytest.fixture(params=["memory", "sqlite"])
def storage(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MessageStorage]:
    if request.param == "memory":
        opened: MessageStorage = InMemoryStorage()
    else:
        opened = SQLiteStorage(tmp_path_factory.mktemp("filters") / "messages.sqlite3")
    yield opened
    opened.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=ROWS,
    filter=FILTERS,
    since=st.none() | st.integers(0, 5),
    span=st.integers(1, 6),
)
def test_every_read_keeps_what_the_rule_keeps(
    storage: MessageStorage,
    rows: list[Row],
    filter: dict[str, Any],
    since: int | None,
    span: int,
) -> None:
    owner = f"alice{next(RUNS)}"  # one storage, many examples: a resource each
    check_reads(storage, owner, rows, filter=filter, since=since, span=span)


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, filter=FILTERS, since=st.none() | st.integers(0, 5), span=st.integers(1, 6))
def test_the_in_memory_vector_indexes_keep_what_the_rule_keeps(
    rows: list[Row], filter: dict[str, Any], since: int | None, span: int
) -> None:
    """Ours, and LangChain's `InMemoryVectorStore` through the adapter."""
    store = InMemoryVectorStore(embedding=FakeEmbeddings(8))
    for vectors in (InMemoryVectorIndex(), LangChainVectorIndex(store)):
        check_vector_reads(vectors, "alice", rows, filter=filter, since=since, span=span)
