"""The in-memory (exact numpy) vector index passes the same conformance suite."""

from __future__ import annotations

import pytest

from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.conformance.vector_suite import VectorIndexConformance


class TestInMemoryVectorIndex(VectorIndexConformance):
    @pytest.fixture
    def vectors(self) -> VectorIndex:
        return InMemoryVectorIndex()
