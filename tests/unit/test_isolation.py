"""Isolation is a security property: generated histories, never a foreign message.

Run against an honest vector index and one that ignores the scope entirely (as a buggy
or misconfigured backend would): storage re-checks the scope, so neither may leak.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.quoting import escape_label
from langchain_semantic_recall.records import VectorHit
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

WORDS = ["lisbon", "tomato", "python", "peanut", "march", "garden", "deploy", "sister"]
# Ids that look alike on purpose: case, spaces, full-width and zero-width characters.
IDS = st.sampled_from(
    ["a", "A", "a ", " a", "ａ", "a\u200b", "b", "alice", "alice2", "é", "e\u0301"]
)


class IgnoresScope(InMemoryVectorIndex):
    """Returns the nearest vectors of every resource, whatever the scope says."""

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        with self._lock:
            everyone = {r.resource_id for r in self._get(name).records.values()}
        hits: list[VectorHit] = []
        for resource in everyone:
            hits.extend(super()._query(name, vector, k=k, scope=ScopeFilter(resource_id=resource)))
        return sorted(hits, key=lambda h: h.score, reverse=True)[:k]


history = st.lists(
    st.tuples(
        IDS,  # resource
        st.integers(0, 2),  # thread number within the resource
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    ),
    min_size=1,
    max_size=30,
)
queries = st.lists(
    st.tuples(
        IDS,
        st.integers(0, 3),
        st.sampled_from(["thread", "resource"]),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    ),
    min_size=1,
    max_size=6,
)


def thread_of(resource: str, n: int) -> str:
    return f"{resource}/t{n}"  # unique per resource, so ownership is never contested


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=history, asks=queries, leaky=st.booleans(), window=st.integers(0, 3))
@example(  # two resources whose thread ids differ by an invisible character only
    rows=[("a", 0, "lisbon"), ("a\u200b", 0, "lisbon")],
    asks=[("a\u200b", 1, "resource", "lisbon")],
    leaky=False,
    window=0,
)
def test_no_path_returns_a_message_of_another_resource(
    rows: list[tuple[str, int, str]],
    asks: list[tuple[str, int, str, str]],
    leaky: bool,
    window: int,
) -> None:
    storage = InMemoryStorage()
    vectors = IgnoresScope() if leaky else InMemoryVectorIndex()
    owner: dict[str, str] = {}
    labelled: dict[str, set[str]] = {}  # a label as the block shows it -> resources
    for n, (resource, thread_n, text) in enumerate(rows):
        thread = thread_of(resource, thread_n)
        cls = HumanMessage if n % 2 == 0 else AIMessage
        engines = SemanticRecall(
            storage=storage,
            vector_store=vectors,
            embeddings=FakeEmbeddings(),
            top_k=8,
            message_range=window,
        )
        engines.index([cls(text, id=f"m{n}")], thread_id=thread, resource_id=resource)
        owner[f"m{n}"] = resource
        labelled.setdefault(escape_label(thread), set()).add(resource)

    for resource, thread_n, scope, text in asks:
        engine = SemanticRecall(
            storage=storage,
            vector_store=vectors,
            embeddings=FakeEmbeddings(),
            top_k=8,
            message_range=window,
            scope=scope,
        )  # type: ignore[arg-type]
        thread = thread_of(resource, thread_n)
        for hit in engine.search(text, thread_id=thread, resource_id=resource):
            for message in hit.window:
                assert owner[message.id] == resource
                assert message.resource_id == resource
                if scope == "thread":
                    assert message.thread_id == thread
        result = engine.recall(
            [HumanMessage(text, id="live")], thread_id=thread, resource_id=resource
        )
        for message in result:
            if message.additional_kwargs.get("source") != MEMORY_SOURCE:
                continue
            if message.type == "system":  # the cross-thread block: check every label
                labels = re.findall(r'\[conversation "((?:[^"\\]|\\.)*)"\]', message.text)
                assert labels, message.text
                for label in labels:  # escaping may make two ids look alike: either fits
                    assert resource in labelled.get(label, set()), label
                assert scope == "resource"
            else:
                assert owner[message.id] == resource
