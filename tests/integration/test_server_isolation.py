"""Isolation on the servers: PostgreSQL + a Chroma server behave as the in-memory reference.

Generated sequences of writes, reads, counts, forgets and moves, with thread ids and
message ids that collide across resources, run on both; every outcome (what was stored or
refused, what a search returns, what `stats` counts, what a forget deletes) must be the
same, and no search returns a message of another resource. The in-memory backends are the
reference the unit tier checks (`tests/unit/test_isolation.py`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings

pytestmark = pytest.mark.integration

WORDS = ["lisbon", "tomato", "peanut", "garden", "sister"]
RESOURCES = ["alice", "bob", "carol"]
START = datetime(2024, 1, 1, tzinfo=UTC)

op = st.one_of(
    st.tuples(
        st.just("index"),
        st.sampled_from(RESOURCES),
        st.integers(0, 3),  # thread number: shared by every resource, so ownership is contested
        st.one_of(st.none(), st.integers(0, 6)),  # message id number (None: derived)
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=2).map(" ".join),
        st.integers(0, 20),  # day
        st.booleans(),  # async
    ),
    st.tuples(st.just("search"), st.sampled_from(RESOURCES), st.sampled_from(WORDS)),
    st.tuples(st.just("search_thread"), st.sampled_from(RESOURCES), st.integers(0, 3)),
    st.tuples(
        st.just("stats"), st.sampled_from(RESOURCES), st.one_of(st.none(), st.integers(0, 3))
    ),
    st.tuples(st.just("forget_thread"), st.sampled_from(RESOURCES), st.integers(0, 3)),
    st.tuples(st.just("forget_resource"), st.sampled_from(RESOURCES), st.booleans()),
    st.tuples(
        st.just("move"), st.sampled_from(RESOURCES), st.integers(0, 3), st.sampled_from(RESOURCES)
    ),
    st.tuples(st.just("forget_before"), st.sampled_from(RESOURCES), st.integers(0, 20)),
)


def _engine(storage: str, vector: str, index_name: str) -> SemanticRecall:
    return SemanticRecall.from_url(
        storage=storage,
        vector=vector,
        embeddings=FakeEmbeddings(),
        search_mode="dense",
        index_name=index_name,
        top_k=50,
        message_range=0,
    )


def _outcome(call: Callable[[], Any]) -> object:
    try:
        result = call()
    except Exception as exc:
        return ("raised", type(exc).__name__)
    if hasattr(result, "fates"):
        return [(f.message_id, f.fate, f.reason) for f in result.fates], result.forgotten
    if hasattr(result, "orphan_vectors"):
        return (result.messages, result.threads, result.vectors, result.missing_vectors)
    if hasattr(result, "deleted"):
        return sorted(result.deleted.items())
    if isinstance(result, list):
        return sorted((h.message.id, h.message.resource_id, h.message.thread_id) for h in result)
    return result


def _run(memory: SemanticRecall, step: tuple[Any, ...], tag: str) -> object:
    """One generated step on one engine; ids carry `tag` (one example's own)."""
    kind, resource = step[0], f"{tag}{step[1]}"
    if kind == "index":
        _, _, thread, message, text, day, is_async = step
        at = (START + timedelta(days=day)).isoformat()
        cls = AIMessage if is_async else HumanMessage
        mid = None if message is None else f"{tag}m{message}"
        turn = [cls(text, id=mid, additional_kwargs={"created_at": at})]
        thread_id = f"{tag}t{thread}"
        if is_async:
            written = memory.aindex(turn, thread_id=thread_id, resource_id=resource)
            return _outcome(lambda: asyncio.run(written))
        return _outcome(lambda: memory.index(turn, thread_id=thread_id, resource_id=resource))
    if kind == "search":
        return _outcome(lambda: memory.search(step[2], resource_id=resource))
    if kind == "search_thread":
        thread = f"{tag}t{step[2]}"
        thread_scope = memory.with_options(scope="thread")
        return _outcome(
            lambda: thread_scope.search(" ".join(WORDS), thread_id=thread, resource_id=resource)
        )
    if kind == "stats":
        counted_thread = None if step[2] is None else f"{tag}t{step[2]}"
        return _outcome(lambda: memory.stats(resource_id=resource, thread_id=counted_thread))
    if kind == "forget_thread":
        return _outcome(lambda: memory.forget_thread(f"{tag}t{step[2]}", resource_id=resource))
    if kind == "forget_resource":
        if step[2]:
            return _outcome(lambda: asyncio.run(memory.aforget_resource(resource)))
        return _outcome(lambda: memory.forget_resource(resource))
    if kind == "move":
        to = f"{tag}{step[3]}"
        return _outcome(lambda: memory.move_thread(f"{tag}t{step[2]}", to=to, resource_id=resource))
    cutoff = START + timedelta(days=step[2])
    return _outcome(lambda: memory.forget_before(cutoff, resource_id=resource))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(op, min_size=1, max_size=14))
def test_servers_keep_every_resource_apart_as_the_reference_does(
    pg_url: str, chroma_url: str, steps: list[tuple[Any, ...]]
) -> None:
    tag = f"x{uuid.uuid4().hex[:8]}-"  # one database for every example: ids of its own
    index_name = f"iso-{uuid.uuid4().hex[:10]}"
    servers = _engine(pg_url, chroma_url, index_name)
    reference = _engine("memory://", "memory://", index_name)
    try:
        for step in steps:
            expected = _run(reference, step, tag)
            assert _run(servers, step, tag) == expected, step
        for resource in RESOURCES:
            owner = f"{tag}{resource}"
            for hit in servers.search(" ".join(WORDS), resource_id=owner):
                assert hit.message.resource_id == owner
            counted, expected = servers.stats(resource_id=owner), reference.stats(resource_id=owner)
            assert _outcome(lambda: counted) == _outcome(lambda: expected)  # noqa: B023
            assert (counted.missing_vectors, counted.orphan_vectors) == (0, 0)
    finally:
        servers.close()
        reference.close()
