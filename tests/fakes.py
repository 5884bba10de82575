"""The one set of test fakes: a deterministic embedder and recording backend wrappers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from langchain_semantic_recall.records import (
    Deleted,
    HeldVectors,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex

_WORD = re.compile(r"[a-z0-9]+")


class FakeEmbeddings(Embeddings):
    """Bag-of-words hashed into ``dimension`` buckets, L2-normalised.

    Similarity-preserving: texts sharing words are close, texts sharing none are
    orthogonal-ish. Deterministic across processes (sha1, not ``hash``). Records calls.
    """

    def __init__(self, dimension: int = 128, model: str = "fake-bow") -> None:
        self.dimension: int | None = dimension
        self.size = dimension
        self.model = model
        self.calls: list[list[str]] = []
        self.fail: Exception | None = None
        self._lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        size = self.size
        values = [0.0] * size
        for word in _WORD.findall(text.lower()):
            digest = hashlib.sha1(word.encode()).digest()
            values[int.from_bytes(digest[:4], "big") % size] += 1.0
        norm = math.sqrt(sum(v * v for v in values))
        if norm == 0:
            values[0] = 1.0
            return values
        return [v / norm for v in values]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.calls.append(list(texts))
        if self.fail is not None:
            raise self.fail
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    @property
    def embedded_texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


class UnusableFor(FakeEmbeddings):
    """Fake vectors, but an unusable one (every value `value`) for each text holding `word`.

    A bag-of-words model given "👍" answers with zeros; a broken one with NaN or inf. Set
    `word` to None to mend it. With `split_on`, a text is cut into chunks there (an
    embedder that splits its own text, as `LocalEmbeddings` does).
    """

    def __init__(
        self,
        word: str | None,
        value: float = 0.0,
        *,
        dimension: int = 8,
        split_on: str | None = None,
    ) -> None:
        super().__init__(dimension)
        self.word = word
        self.value = value
        self.split_on = split_on

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = super().embed_documents(texts)
        word, size = self.word, len(vectors[0]) if vectors else 0
        return [
            [self.value] * size if word is not None and word in text else vector
            for text, vector in zip(texts, vectors, strict=True)
        ]

    def split_text(self, text: str) -> list[str]:
        return text.split(self.split_on) if self.split_on else [text]


class RecordingStorage(MessageStorage):
    """Wraps a storage and records every call (name, arguments); can be made to fail."""

    def __init__(self, inner: MessageStorage) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}

    def _record(self, op: str, /, **kwargs: Any) -> None:
        self.calls.append((op, kwargs))
        if op in self.fail:
            raise self.fail[op]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        self._record("put", records=list(records))
        return self.inner.put(records)

    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        self._record(
            "get_windows", message_ids=list(message_ids), before=before, after=after, scope=scope
        )
        return self.inner.get_windows(message_ids, before=before, after=after, scope=scope)

    def _ids_in_scope(self, message_ids: list[str], scope: ScopeFilter) -> set[str]:
        self._record("ids_in_scope", message_ids=list(message_ids), scope=scope)
        return self.inner.ids_in_scope(message_ids, scope)

    def _kept_share(self, scope: ScopeFilter) -> float | None:
        self._record("kept_share", scope=scope)
        return self.inner.kept_share(scope)

    def _get_thread_owner(self, thread_id: str) -> str | None:
        self._record("get_thread_owner", thread_id=thread_id)
        return self.inner.get_thread_owner(thread_id)

    def _list_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        self._record("list_messages", scope=scope, after=after, limit=limit)
        return self.inner.list_messages(scope, after=after, limit=limit)

    def _list_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        self._record("list_threads", resource_id=resource_id)
        return self.inner.list_threads(resource_id)

    def _delete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        self._record("delete_thread", thread_id=thread_id)
        return self.inner.delete_thread(thread_id, retire=retire, owner=owner)

    def _delete_resource(self, resource_id: str) -> int:
        self._record("delete_resource", resource_id=resource_id)
        return self.inner.delete_resource(resource_id)

    def _delete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        self._record("delete_before", cutoff=cutoff, scope=scope)
        return self.inner.delete_before(cutoff, scope)

    def _is_forgotten(self, thread_id: str) -> bool:
        self._record("is_forgotten", thread_id=thread_id)
        return self.inner.is_forgotten(thread_id)

    def _adopt_thread(self, thread_id: str, resource_id: str) -> int:
        self._record("adopt_thread", thread_id=thread_id, resource_id=resource_id)
        return self.inner.adopt_thread(thread_id, resource_id)


class RecordingVectors(VectorIndex):
    """Wraps a vector index and records every call; can be made to fail."""

    def __init__(self, inner: VectorIndex) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}

    def _record(self, op: str, /, **kwargs: Any) -> None:
        self.calls.append((op, kwargs))
        if op in self.fail:
            raise self.fail[op]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.calls if n == name]

    def _open(self, name: str, *, dimension: int, model: str) -> bool:
        self._record("open", name=name, dimension=dimension, model=model)
        return self.inner.open(name, dimension=dimension, model=model)

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        self._record("upsert", name=name, records=list(records))
        self.inner.upsert(name, records)

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        self._record("query", name=name, vector=list(vector), k=k, scope=scope)
        return self.inner.query(name, vector, k=k, scope=scope)

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        self._record(
            "delete",
            name=name,
            thread_id=thread_id,
            resource_id=resource_id,
            message_ids=message_ids,
        )
        self.inner.delete(
            name, thread_id=thread_id, resource_id=resource_id, message_ids=message_ids
        )

    def _message_ids(self, name: str, scope: ScopeFilter | None) -> set[str]:
        self._record("message_ids", name=name, scope=scope)
        return self.inner.message_ids(name, scope)

    def _vector_ids(self, name: str, scope: ScopeFilter | None) -> HeldVectors:
        self._record("vector_ids", name=name, scope=scope)
        return self.inner.vector_ids(name, scope)


# --- A fake chat model and a fake OpenAI server (graph, middleware, provider tests) ------


def last_user_text(messages: Sequence[BaseMessage]) -> str:
    """Text of the newest human message ('' if none)."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


class FakeChatModel(BaseChatModel):
    """A deterministic chat model that records every call and answers by rule.

    For each user turn it first makes ``tool_rounds`` tool calls, one per model call, to
    the first bound tool with the user's text as ``query`` (``tool_rounds`` may be a
    function of that text), then answers ``"ok: <user text>"`` (or ``reply(messages)``).
    ``force_tool`` makes every answer a tool call to that name, bound or not. An async
    call first waits on ``barrier`` (an ``asyncio.Barrier``) when one is set, so that
    two runs are provably in flight at once.
    """

    tool_rounds: int | Callable[[str], int] = 0
    reply: Callable[[list[BaseMessage]], str] | None = None
    force_tool: str | None = None
    barrier: Any = None
    calls: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "fake-recall-chat"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _answer(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        self.calls.append(list(messages))
        question = last_user_text(messages)
        done = 0
        for message in reversed(messages):
            if isinstance(message, HumanMessage):
                break
            done += isinstance(message, ToolMessage)
        rounds = self.tool_rounds(question) if callable(self.tool_rounds) else self.tool_rounds
        name = self.force_tool or (tools[0]["function"]["name"] if tools else None)
        if name is not None and (self.force_tool or done < rounds):
            key = hashlib.sha1(f"{len(messages)}\x1f{question}\x1f{done}".encode()).hexdigest()
            call = {"name": name, "args": {"query": question}, "id": f"call_{key[:16]}"}
            return AIMessage("", tool_calls=[call])
        return AIMessage(self.reply(messages) if self.reply else f"ok: {question}")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = self._answer(messages, kwargs.get("tools") or [])
        return ChatResult(generations=[ChatGeneration(message=answer)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.barrier is not None:
            await asyncio.wait_for(self.barrier.wait(), timeout=10)
        answer = self._answer(messages, kwargs.get("tools") or [])
        return ChatResult(generations=[ChatGeneration(message=answer)])


class FakeOpenAIServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint on 127.0.0.1 (a thread).

    Records every request body (``requests``) and answers with ``reply``. Use
    :func:`fake_openai_server`; point ``ChatOpenAI(base_url=server.base_url)`` at it.
    """

    def __init__(self, reply: str = "ok from the fake OpenAI server") -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                owner.paths.append(self.path)
                owner.requests.append(body)
                answer = {
                    "id": f"chatcmpl-fake-{len(owner.requests)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": owner.reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output clean

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"


@contextmanager
def fake_openai_server(reply: str = "ok from the fake OpenAI server") -> Iterator[FakeOpenAIServer]:
    """Start a :class:`FakeOpenAIServer` (already listening on return), stop it after."""
    fake = FakeOpenAIServer(reply)
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
        thread.join()


# --- A scenario: one fact per topic for two users, over the fakes above ------------------

from langchain_core.tools import tool  # noqa: E402

from langchain_semantic_recall import InMemoryStorage, SemanticRecall  # noqa: E402
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex  # noqa: E402

BLOCK_MARKER = "remembered_from_other_conversation"
"""Text found only in the cross-thread memory block."""
TOPICS = [
    "garden", "piano", "tennis", "bakery", "violin", "kayak", "chess", "pottery",
    "cycling", "sailing", "origami", "karate", "fishing", "painting", "juggling",
    "skiing", "archery", "knitting", "climbing", "surfing",
]  # fmt: skip
SECRETS = [f"alpha{n}x" for n in range(len(TOPICS))]
"""Alice's fact about ``TOPICS[n]`` is ``f"{TOPICS[n]} {SECRETS[n]}"``."""
BOB_SECRETS = [f"bravo{n}y" for n in range(len(TOPICS))]
"""Bob's fact about ``TOPICS[n]`` is ``f"{TOPICS[n]} {BOB_SECRETS[n]}"``."""


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"looked up {query}"


class FactsMemory:
    """An engine over fakes holding one fact per topic for alice and for bob.

    A question ``"<topic>?"`` shares one word with that topic's fact and none with any
    other message, so recall (``top_k=3``, no neighbours, ``threshold=0.3``) finds
    exactly the asker's fact for that topic. ``options`` override those engine options.
    """

    def __init__(self, **options: Any) -> None:
        self.embeddings = FakeEmbeddings(dimension=4096)
        self.storage = RecordingStorage(InMemoryStorage())
        self.vectors = RecordingVectors(InMemoryVectorIndex())
        self.engine = SemanticRecall(
            storage=self.storage,
            vector_store=self.vectors,
            embeddings=self.embeddings,
            **{"top_k": 3, "message_range": 0, "threshold": 0.3, **options},
        )
        for resource, secrets in (("alice", SECRETS), ("bob", BOB_SECRETS)):
            facts = [
                HumanMessage(f"{topic} {secret}", id=f"{resource}-{topic}")
                for topic, secret in zip(TOPICS, secrets, strict=True)
            ]
            self.engine.index(facts, thread_id=f"{resource}-notes", resource_id=resource)
        self.storage.calls.clear()
        self.vectors.calls.clear()

    def puts(self, thread_id: str) -> list[list[str]]:
        """Ids written by each ``put`` call for that thread."""
        return [
            [r.id for r in kwargs["records"]]
            for name, kwargs in self.storage.calls
            if name == "put" and kwargs["records"] and kwargs["records"][0].thread_id == thread_id
        ]

    def stored(self, thread_id: str) -> list[StoredMessage]:
        return self.storage.inner.list_messages(ScopeFilter(thread_id=thread_id))

    def vector_ids(self, thread_id: str) -> set[str]:
        name = self.engine.ensure_index().name
        return self.vectors.inner.message_ids(name, ScopeFilter(thread_id=thread_id))

    def searches(self) -> int:
        """Vector searches so far (one per recall or search)."""
        return len(self.vectors.of("query"))
