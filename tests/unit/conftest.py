"""The unit tier: fast fakes around the real backends, offline, in this process.

What belongs here (the rule for tests/unit): in-process tests on fakes (tests/fakes.py,
tests/faults.py), the in-memory backends and SQLite files under ``tmp_path``. What does
not: embedded or server Chroma, PostgreSQL, the local ONNX model, subprocesses (the CLI
as a command, a fresh interpreter), loopback HTTP servers, notebooks, README runs; those
live in tests/integration. The hooks below enforce it on every unit test, so a test that
needs one of them fails here with a message saying where it goes:

- no sockets (pytest-socket; Unix sockets stay allowed for the asyncio event loop);
- no subprocess;
- no chromadb or onnxruntime loaded by the test (a real Chroma client or the local model);
- no ``slow`` or ``integration`` marker.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pytest_socket import disable_socket

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors

EngineFactory = Callable[..., SemanticRecall]
START = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)

HEAVY_MODULES = ("chromadb", "onnxruntime")
"""Loaded only by a real Chroma client or the local model: integration-tier work."""
WHERE = "it belongs in tests/integration (see tests/unit/conftest.py)"
_HEAVY_BEFORE = pytest.StashKey[frozenset[str]]()


def _heavy_loaded() -> frozenset[str]:
    return frozenset(name for name in HEAVY_MODULES if name in sys.modules)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = config.rootpath / "tests" / "unit"
    for item in items:
        if not item.path.is_relative_to(here):
            continue
        for marker in ("slow", "integration", "enable_socket"):
            if item.get_closest_marker(marker):
                raise pytest.UsageError(f"{item.nodeid} is marked {marker}: {WHERE}")
        if "socket_enabled" in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} asks for socket_enabled: {WHERE}")


_POPEN_INIT = subprocess.Popen.__init__


def _refuse_process(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
    raise RuntimeError(f"a unit test started a process ({args!r}): {WHERE}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of a unit test runs: no network, no process; note what is loaded."""
    item.stash[_HEAVY_BEFORE] = _heavy_loaded()
    disable_socket(allow_unix_socket=True)  # pytest-socket's teardown enables it again
    subprocess.Popen.__init__ = _refuse_process  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        yield
    finally:
        subprocess.Popen.__init__ = _POPEN_INIT  # type: ignore[method-assign]
    before: frozenset[str] = item.stash[_HEAVY_BEFORE]
    loaded = sorted(_heavy_loaded() - before)
    if loaded:
        pytest.fail(f"{item.nodeid} loaded {', '.join(loaded)}: {WHERE}", pytrace=False)


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
