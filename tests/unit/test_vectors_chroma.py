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


def test_every_in_of_a_where_holds_one_python_type() -> None:
    """Chroma refuses `$in: [0, 1.0]` ("all values of the same type"): a filter on an int
    and a float once raised chromadb's ValueError from a filtered search."""
    from langchain_semantic_recall.vectors.chroma_layout import in_where

    def ins(where: dict[str, object]) -> list[list[object]]:
        found: list[list[object]] = []
        for key, value in where.items():
            if key in ("$or", "$and"):
                for clause in value:  # type: ignore[attr-defined]
                    found += ins(clause)
            elif isinstance(value, dict) and "$in" in value:
                found.append(value["$in"])
            else:
                found.append([value])
        return found

    where = in_where("meta_n", [0, 1.0, 2, True, "2", 2.5, "x", False])
    groups = ins(where)
    assert all(len({type(v) for v in group}) == 1 for group in groups), groups
    assert sorted(map(repr, (v for group in groups for v in group))) == sorted(
        map(repr, [0, 1.0, 2, True, "2", 2.5, "x", False])
    )
