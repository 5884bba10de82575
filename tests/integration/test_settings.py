"""``SemanticRecall.from_url`` and ``RecallSettings``: servers are a configuration change."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.errors import InvalidOptionError, StorageError
from langchain_semantic_recall.settings import (
    RecallSettings,
    create_storage,
    create_vector_index,
    redact,
)
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration


def roundtrip(memory: SemanticRecall) -> list[str]:
    memory.index(
        [HumanMessage("the spare key is under the blue pot", id="k1"), AIMessage("ok", id="k2")],
        thread_id="t1",
        resource_id="alice",
    )
    hits = memory.search("where is the spare key", thread_id="t2", resource_id="alice")
    return [hit.message.id for hit in hits]


def test_servers_from_urls(pg_url: str, chroma_url: str) -> None:
    memory = SemanticRecall.from_url(
        storage=pg_url.replace("postgresql://", "postgres://") + "?pool_max_size=3",
        vector=chroma_url,
        embeddings=FakeEmbeddings(),
        top_k=2,
    )
    try:
        assert isinstance(memory.storage, PostgresStorage)
        assert isinstance(memory.vector_store, ChromaServerVectorIndex)
        assert memory.top_k == 2
        assert roundtrip(memory)[0] == "k1"
    finally:
        memory.storage.close()


def test_embedded_from_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    memory = SemanticRecall.from_url(
        storage="sqlite:///data/messages.sqlite3",
        vector=f"chroma:///{tmp_path / 'chroma'}",
        embeddings=FakeEmbeddings(),
    )
    assert isinstance(memory.storage, SQLiteStorage)
    assert memory.storage.path == "data/messages.sqlite3"
    assert isinstance(memory.vector_store, ChromaVectorIndex)
    assert roundtrip(memory)[0] == "k1"
    assert (tmp_path / "chroma").is_dir()
    memory.storage.close()


def test_in_memory_urls() -> None:
    assert isinstance(create_storage("memory://"), InMemoryStorage)
    assert isinstance(create_vector_index("memory://"), InMemoryVectorIndex)
    assert create_storage("sqlite://").path == ":memory:"  # type: ignore[attr-defined]
    memory = SemanticRecall.from_url(
        storage="memory://", vector="memory://", embeddings=FakeEmbeddings()
    )
    assert roundtrip(memory)[0] == "k1"


@pytest.mark.parametrize(
    ("storage", "vector"),
    [
        ("mysql://db/x", "memory://"),
        ("memory://", "redis://localhost"),
        ("sqlite://", "chroma://"),
        ("postgresql://h/db?pool_max_size=many", "memory://"),
        ("postgresql://h/db?pool_size=5", "memory://"),  # not a pool or libpq parameter
        ("postgresql://h/db?pool_max_size=5&sslmod=require", "memory://"),
        ("memory", "memory://"),
    ],
)
def test_bad_urls_are_option_errors(storage: str, vector: str) -> None:
    with pytest.raises(InvalidOptionError):
        SemanticRecall.from_url(storage=storage, vector=vector, embeddings=FakeEmbeddings())


def test_unreachable_servers_are_storage_errors() -> None:
    port = free_port()
    with pytest.raises(StorageError, match="did not answer"):
        create_vector_index(f"http://127.0.0.1:{port}", timeout=0.2)
    with pytest.raises(StorageError, match="cannot open PostgreSQL"):
        create_storage(f"postgresql://u:secret@127.0.0.1:{port}/db")


def test_settings_from_the_environment(pg_url: str, chroma_url: str) -> None:
    env = {"SEMANTIC_RECALL_STORAGE_URL": pg_url, "SEMANTIC_RECALL_VECTOR_URL": chroma_url}
    settings = RecallSettings.from_env(env, scope="thread")
    memory = SemanticRecall.from_url(**settings.url_options(), embeddings=FakeEmbeddings())
    try:
        assert memory.scope == "thread"
        assert isinstance(memory.storage, PostgresStorage)
    finally:
        memory.storage.close()
    defaults = RecallSettings.from_env({})
    assert defaults.storage_url.startswith("sqlite:///")
    assert defaults.vector_url.startswith("chroma:///")


def test_passwords_are_redacted() -> None:
    assert redact("postgresql://app:s3cret@db/x") == "postgresql://app:***@db/x"
    assert "s3cret" not in repr(RecallSettings("postgresql://app:s3cret@db/x", "memory://"))
    assert redact("memory://") == "memory://"


def test_a_postgres_server_that_never_answers_fails_after_the_timeout() -> None:
    """A port that accepts connections and says nothing (a stuck server, a wrong service)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/db"
        raised: list[BaseException] = []

        def open_storage() -> None:
            try:
                PostgresStorage(url, timeout=2).close()
            except BaseException as exc:
                raised.append(exc)

        opener = threading.Thread(target=open_storage, daemon=True)
        opener.start()
        opener.join(timeout=60)
        assert not opener.is_alive(), "PostgresStorage waited for a silent server for 60 s"
    assert len(raised) == 1
    assert isinstance(raised[0], StorageError)
    assert "cannot open PostgreSQL" in str(raised[0])


def test_the_pool_timeout_is_a_url_parameter(pg_url: str) -> None:
    """A storage server gone away fails each call after pool_timeout, not 30 s."""
    storage = create_storage(f"{pg_url}?pool_max_size=1&pool_timeout=1.5")
    assert isinstance(storage, PostgresStorage)
    try:
        pool = storage._pool  # the one connection is taken: the next call must wait
        assert pool is not None
        with pool.connection(), pytest.raises(StorageError, match=r"after 1\.50 sec"):
            storage.count(None)
    finally:
        storage.close()
    for bad in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(InvalidOptionError, match="pool_timeout"):
            create_storage(f"{pg_url}?pool_timeout={bad}")
