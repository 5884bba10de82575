"""The Chroma vector index on a real Chroma server: the conformance suite, then its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from langchain_semantic_recall.errors import InvalidOptionError, StorageError
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.chroma_server import (
    ChromaServerVectorIndex,
    ChromaURL,
    wait_for_chroma,
)
from tests.conformance.vector_suite import VectorIndexConformance
from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration


class TestChromaServer(VectorIndexConformance):
    @pytest.fixture
    def vectors(self, chroma_url: str) -> Iterator[VectorIndex]:
        index = ChromaServerVectorIndex(chroma_url)
        yield index
        index.close()


def test_urls_are_parsed() -> None:
    assert ChromaURL.parse("http://127.0.0.1:8123") == ChromaURL("127.0.0.1", 8123, ssl=False)
    assert ChromaURL.parse("https://chroma.example") == ChromaURL("chroma.example", 443, True)
    assert ChromaURL.parse("http://localhost").port == 8000
    assert ChromaURL.parse("http://127.0.0.1:8123/") == ChromaURL("127.0.0.1", 8123, ssl=False)
    for bad in ("chroma:///tmp/x", "http://", "127.0.0.1:8000"):
        with pytest.raises(InvalidOptionError):
            ChromaURL.parse(bad)


def test_a_chroma_url_carries_the_tenant_database_and_request_timeout() -> None:
    """The command line and `from_url` had no way to name them (an audit of the server
    backends): a store on its own Chroma database, or a shorter wait than 60 s."""
    parsed = ChromaURL.parse("http://h:8123/?tenant=acme&database=memory&request_timeout=5")
    assert (parsed.tenant, parsed.database, parsed.request_timeout) == ("acme", "memory", 5.0)
    assert parsed.url == "http://h:8123"
    assert ChromaURL.parse("http://h:8123").database is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:8000?databse=memory", "databse"),  # ignored, it would write
        ("http://127.0.0.1:8000?database=a&database=b", "each once"),  # into the default
        ("http://127.0.0.1:8000?database=", "empty database"),
        ("http://127.0.0.1:8000?request_timeout=0", "above 0"),
        ("http://127.0.0.1:8000?request_timeout=soon", "above 0"),
        ("http://127.0.0.1:8000/chroma", "ChromaServerVectorIndex"),  # a path, unused
        ("http://token:secret@127.0.0.1:8000", "headers="),  # credentials go in headers=
        ("http://127.0.0.1:8000/#frag", "ChromaServerVectorIndex"),
    ],
)
def test_what_a_chroma_url_cannot_carry_is_refused_not_dropped(url: str, says: str) -> None:
    with pytest.raises(InvalidOptionError, match=says) as refused:
        ChromaURL.parse(url)
    assert "secret" not in str(refused.value)


def test_an_index_on_another_chroma_database_by_url(chroma_url: str) -> None:
    import chromadb

    admin = chromadb.AdminClient(
        chromadb.config.Settings(
            chroma_api_impl="chromadb.api.fastapi.FastAPI",
            chroma_server_host="127.0.0.1",
            chroma_server_http_port=int(chroma_url.rsplit(":", 1)[1]),
        )
    )
    name = f"db{free_port()}"
    admin.create_database(name)
    from langchain_semantic_recall import SemanticRecall
    from tests.fakes import FakeEmbeddings

    url = f"{chroma_url}?database={name}&request_timeout=5"
    with SemanticRecall.from_url(
        storage="memory://", vector=url, embeddings=FakeEmbeddings(), index_name="by-url"
    ) as memory:
        memory.index(["I keep bees."], thread_id="t1", resource_id="alice")
        assert memory.vector_store.count("by-url") == 1
    assert ChromaServerVectorIndex(chroma_url).count("by-url") == 0  # not the default database
    with pytest.raises(InvalidOptionError, match="differ"):
        ChromaServerVectorIndex(f"{chroma_url}?database={name}", database="other")
    with pytest.raises(InvalidOptionError, match="no-such-db"):
        ChromaServerVectorIndex(f"{chroma_url}?database=no-such-db")


def test_a_silent_server_fails_after_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(StorageError, match="did not answer"):
        wait_for_chroma(f"http://127.0.0.1:{free_port()}", timeout=0.3)
    assert "does not answer yet" not in caplog.text  # too short a wait to announce
    url = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING), pytest.raises(StorageError, match="did not answer"):
        wait_for_chroma(url, timeout=1.2)  # the command line's wait (30 s) is said, once
    assert caplog.text.count(f"the Chroma server at {url} does not answer yet") == 1


def test_heartbeat(chroma_url: str) -> None:
    index = ChromaServerVectorIndex(chroma_url)
    assert index.heartbeat()
    assert asyncio.run(index.aheartbeat())
    assert repr(index) == f"ChromaServerVectorIndex({chroma_url!r})"


@pytest.mark.parametrize(
    ("tenant", "database", "missing"),
    [("no-such-tenant", None, "no-such-tenant"), (None, "no-such-db", "no-such-db")],
)
def test_a_tenant_or_database_the_server_lacks_is_an_option_error(
    chroma_url: str, tenant: str | None, database: str | None, missing: str
) -> None:
    with pytest.raises(InvalidOptionError, match=missing) as refused:
        ChromaServerVectorIndex(chroma_url, tenant=tenant, database=database)
    assert chroma_url in str(refused.value)


def test_an_index_closed_keeps_no_connection_nor_client_of_the_server(chroma_url: str) -> None:
    """One index per request (one engine per request on servers): each closed, or
    collected unclosed, leaves nothing behind. chromadb 1.5's `HttpClient.close()` leaves
    its `httpx` sessions open and one `System` per client in its process-wide cache
    (chroma-core/chroma#2702, #7533): before the workaround, each index closed kept a
    connection to the server open (+1 file descriptor) and ~1 MB, for the process's life;
    one never closed, two descriptors."""
    import gc
    import os

    import httpx
    from chromadb.api.shared_system_client import SharedSystemClient

    def held() -> tuple[int, int, int]:
        gc.collect()
        sessions = sum(isinstance(o, httpx.Client) and not o.is_closed for o in gc.get_objects())
        systems = len(SharedSystemClient._identifier_to_system)
        return len(os.listdir("/proc/self/fd")), sessions, systems

    ChromaServerVectorIndex(chroma_url).close()  # the imports and the first connection
    before = held()
    for _ in range(5):
        index = ChromaServerVectorIndex(chroma_url)
        index.count("no-such-index")  # a request: the session holds a connection
        index.close()
    assert held() == before
    for _ in range(3):  # never closed, only dropped (and collected)
        index = ChromaServerVectorIndex(chroma_url)
        index.count("no-such-index")
        del index
    assert held() == before
