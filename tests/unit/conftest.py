"""Shared fixtures for the engine's unit tests: fast fakes around the real backends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors

EngineFactory = Callable[..., SemanticRecall]
START = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


@pytest.fixture
def embeddings() -> FakeEmbeddings:
    return FakeEmbeddings()


@pytest.fixture
def storage() -> RecordingStorage:
    return RecordingStorage(InMemoryStorage())


@pytest.fixture
def vectors() -> RecordingVectors:
    return RecordingVectors(InMemoryVectorIndex())


@pytest.fixture
def make_engine(
    embeddings: FakeEmbeddings, storage: RecordingStorage, vectors: RecordingVectors
) -> EngineFactory:
    def factory(**options: Any) -> SemanticRecall:
        options.setdefault("storage", storage)
        options.setdefault("vector_store", vectors)
        options.setdefault("embeddings", embeddings)
        return SemanticRecall(**options)

    return factory


def turn(
    prefix: str, texts: Sequence[str], *, start: datetime = START, step_minutes: int = 1
) -> list[BaseMessage]:
    """Alternating user / assistant messages with ids ``<prefix>-<n>`` and real times."""
    messages: list[BaseMessage] = []
    for n, text in enumerate(texts):
        cls = HumanMessage if n % 2 == 0 else AIMessage
        when = (start + timedelta(minutes=n * step_minutes)).isoformat()
        messages.append(cls(text, id=f"{prefix}-{n}", additional_kwargs={"created_at": when}))
    return messages


def reset(*recorders: Any) -> None:
    for recorder in recorders:
        recorder.calls.clear()
