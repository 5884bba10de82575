"""`OpenAIEmbeddings` on the servers, against a loopback fake of OpenAI's `/v1/embeddings`.

Never the real network. The fake answers each request as told (a vector per input, a
429, a slow answer, vectors of another dimension, one vector short) and records them.
What is checked: every failure of the embedder is a clear error or a documented retry
(the client's own `max_retries`), and a turn is never left without vectors unsaid: its
`IndexResult.error` says why, `stats` counts the vectors missing, and
`reindex(missing_only=True)` writes them.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import EmbeddingMismatchError
from langchain_semantic_recall.storage.postgres import PostgresStorage
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex

pytestmark = pytest.mark.integration

langchain_openai = pytest.importorskip("langchain_openai")

DIMENSION = 64


def _vector(text: str, dimension: int) -> list[float]:
    values = [0.0] * dimension
    for word in text.lower().split():
        values[int(hashlib.sha1(word.encode()).hexdigest(), 16) % dimension] += 1.0
    values[0] += 0.01  # never all zero
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


class FakeOpenAIEmbeddings:
    """`POST /v1/embeddings` on 127.0.0.1; `plan` says how to answer the next requests.

    A step is "ok", an HTTP status (429: rate limited, `retry-after: 0`), "slow" (answers
    after `release` is set), ("dimension", n) or "short" (one vector fewer than inputs).
    """

    def __init__(self) -> None:
        self.plan: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                owner.requests.append(body)
                step = owner.plan.pop(0) if owner.plan else "ok"
                if step == "slow":
                    owner.release.wait(30)
                    step = "ok"
                if isinstance(step, int):
                    self._send(step, {"error": {"message": "slow down", "type": "requests"}})
                    return
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                size = step[1] if isinstance(step, tuple) else DIMENSION
                rows = [
                    {"object": "embedding", "index": i, "embedding": _vector(str(t), size)}
                    for i, t in enumerate(texts)
                ]
                if step == "short":
                    rows = rows[:-1]
                usage = {"prompt_tokens": 1, "total_tokens": 1}
                answer = {"object": "list", "data": rows, "model": body["model"], "usage": usage}
                self._send(200, answer)

            def _send(self, status: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIEmbeddings]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server = FakeOpenAIEmbeddings()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.server.shutdown()
    server.server.server_close()
    thread.join()


def openai(fake: FakeOpenAIEmbeddings, **options: Any) -> Any:
    """`OpenAIEmbeddings` on the fake (raw text: tiktoken would download its tables)."""
    settings: dict[str, Any] = {
        "model": "text-embedding-3-small",
        "api_key": "test",
        "base_url": fake.base_url,
        "check_embedding_ctx_length": False,
        "max_retries": 0,
        "timeout": 5,
        **options,
    }
    return langchain_openai.OpenAIEmbeddings(**settings)


@pytest.fixture
def servers(
    pg_url: str, chroma_url: str
) -> Iterator[tuple[PostgresStorage, ChromaServerVectorIndex]]:
    storage = PostgresStorage(pg_url, max_size=4)
    vectors = ChromaServerVectorIndex(chroma_url)
    yield storage, vectors
    vectors.close()
    storage.close()


def engine(
    servers: tuple[PostgresStorage, ChromaServerVectorIndex], embeddings: Any, **options: Any
) -> SemanticRecall:
    storage, vectors = servers
    return SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=embeddings,
        search_mode="dense",
        threshold=0.0,
        **options,
    )


def chat(n: int) -> list[HumanMessage | AIMessage]:
    return [HumanMessage(f"lisbon trip number{n}"), AIMessage(f"noted trip number{n}")]


def test_a_wrong_dimension_on_the_first_call_does_not_bind_the_process_to_it(
    fake: FakeOpenAIEmbeddings, servers: tuple[PostgresStorage, ChromaServerVectorIndex]
) -> None:
    """The engine learns an OpenAI model's dimension from its first answer (the probe).
    One answer of another dimension there (a proxy answering with another model for a
    moment) made it open an index of that dimension for the life of the process: every
    later turn raised EmbeddingMismatchError and recall found nothing until a restart.
    """
    model = f"text-embedding-{uuid.uuid4().hex[:8]}"  # the index named after it: this test's
    memory = engine(servers, openai(fake, model=model))
    fake.plan = [("dimension", 32)]  # the probe
    with pytest.raises(EmbeddingMismatchError):
        memory.index(chat(1), thread_id="t1", resource_id="alice")
    result = memory.index(chat(2), thread_id="t1", resource_id="alice")
    assert result.error is None
    assert len(result.embedded) == 2
    assert memory.ensure_index().dimension == DIMENSION
    assert memory.stats(resource_id="alice").missing_vectors == 2  # the first turn's
    assert memory.reindex(missing_only=True) == 2
    assert memory.stats(resource_id="alice").missing_vectors == 0


def test_rate_limits_timeouts_and_short_batches_are_said_and_repaired(
    fake: FakeOpenAIEmbeddings, servers: tuple[PostgresStorage, ChromaServerVectorIndex]
) -> None:
    """Checked (all hold): a 429 within the client's `max_retries` is retried by it; one
    past them, a timeout, or a batch one vector short leaves the turn stored with its
    `error` naming the failure and no message marked embedded; recall goes on without
    memory; `stats` counts the missing vectors and `reindex(missing_only=True)` writes them.
    """
    model = f"text-embedding-{uuid.uuid4().hex[:8]}"
    retrying = engine(servers, openai(fake, model=model, max_retries=2))
    fake.plan = ["ok", 429, 429]  # the probe, then two refusals of the turn's batch
    assert retrying.index(chat(0), thread_id="t1", resource_id="alice").error is None
    assert len(fake.requests) == 4

    memory = engine(servers, openai(fake, model=model, timeout=1))
    memory.ensure_index()
    for n, step in enumerate([429, "slow", "short"], start=1):
        fake.release.clear()
        fake.plan = [step]
        result = memory.index(chat(n), thread_id="t1", resource_id="alice")
        assert result.stored, step
        assert not result.embedded, step
        assert not any(fate.embedded for fate in result.fates)
        expected = {429: "RateLimitError", "slow": "APITimeoutError", "short": "1 vectors for 2"}
        assert result.error is not None
        assert expected[step] in result.error
        fake.release.set()
    fake.plan = [429]
    question = [HumanMessage("lisbon trip")]
    assert memory.recall(question, thread_id="t2", resource_id="alice") == question
    assert memory.stats(resource_id="alice").missing_vectors == 6
    assert memory.reindex(missing_only=True) == 6
    stats = memory.stats(resource_id="alice")
    assert (stats.messages, stats.vectors, stats.missing_vectors) == (8, 8, 0)


def test_another_model_on_a_named_index_fails_closed_and_says_so(
    fake: FakeOpenAIEmbeddings, servers: tuple[PostgresStorage, ChromaServerVectorIndex]
) -> None:
    """Checked (holds): a replica deployed with another model (same dimension) on the same
    `index_name` refuses to write or search it, naming both models; recall goes on without
    memory only for failures, so it raises too (a configuration error).
    """
    name = f"oai-{uuid.uuid4().hex[:8]}"
    old = engine(servers, openai(fake, model="text-embedding-3-small"), index_name=name)
    assert old.index(chat(1), thread_id="t1", resource_id="alice").error is None
    new = engine(servers, openai(fake, model="text-embedding-ada-002"), index_name=name)
    for call in (
        lambda: new.index(chat(2), thread_id="t1", resource_id="alice"),
        lambda: new.recall([HumanMessage("lisbon")], thread_id="t2", resource_id="alice"),
    ):
        with pytest.raises(EmbeddingMismatchError, match="text-embedding-3-small"):
            call()
