"""ChromaVectorIndex's pure parts: distances, scope filters and collection names (no client)."""

from __future__ import annotations

import re

import pytest

from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.chroma import (
    resource_collection_name,
    scope_where,
    similarity_from_cosine_distance,
    thread_where,
)


@pytest.mark.parametrize(
    ("distance", "similarity"),
    [(0.0, 1.0), (0.3, 0.7), (1.0, 0.0), (1.5, 0.0), (2.0, 0.0), (-1e-7, 1.0)],
)
def test_similarity_from_cosine_distance(distance: float, similarity: float) -> None:
    assert similarity_from_cosine_distance(distance) == pytest.approx(similarity)


def test_scope_where() -> None:
    assert scope_where(ScopeFilter(thread_id="t")) == {"thread_id": "t"}
    assert scope_where(ScopeFilter(resource_id="r")) == {"resource_id": "r"}
    assert scope_where(ScopeFilter(resource_id="r", thread_id="t")) == {
        "$and": [{"resource_id": "r"}, {"thread_id": "t"}]
    }


def test_thread_where_filters_inside_a_resource_collection() -> None:
    assert thread_where(ScopeFilter(resource_id="r")) is None
    assert thread_where(ScopeFilter(resource_id="r", thread_id="t")) == {"thread_id": "t"}
    assert thread_where(ScopeFilter(thread_id="t")) == {"thread_id": "t"}


@pytest.mark.parametrize(
    ("name", "resource_id"),
    [("idx", "alice"), ("idx", ""), ("m" * 512, "bob"), ("a-b", "ünï cödé / ../ 🙂")],
)
def test_resource_collection_names_are_legal_and_distinct(name: str, resource_id: str) -> None:
    collection = resource_collection_name(name, resource_id)
    assert 3 <= len(collection) <= 512
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]", collection)
    assert collection == resource_collection_name(name, resource_id)
    assert collection != resource_collection_name(name, resource_id + "x")
    assert collection != resource_collection_name(name + "x", resource_id)
