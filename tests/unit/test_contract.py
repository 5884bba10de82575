"""One contract on every surface (SPEC §10): each scenario runs on every surface.

A *surface* is a way a user drives the memory through whole user turns: the engine (sync
and async), the runnable (``invoke`` / ``ainvoke``), the graph nodes (``RecallState``
graph, sync and async), ``create_agent`` with the middleware, the classic memory
contract and ``RunnableWithMessageHistory`` over the chat history. Search-only surfaces
(engine search, retriever, tool, CLI) run the read scenarios. Every scenario is one that
the first release broke on at least one surface.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langchain_semantic_recall import (
    ForgottenThreadError,
    IdentityMismatchError,
    InMemoryStorage,
    MissingIdentityError,
    ReadOnlyError,
    SemanticRecall,
    SemanticRecallMiddleware,
)
from langchain_semantic_recall.graph import IndexNode, RecallNode, create_recall_graph
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeChatModel, FakeEmbeddings

# RunnableWithMessageHistory is deprecated in langchain-core but still what its users run.
pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory:DeprecationWarning")

FACT = "my dog is called Biscuit"
QUESTION = "what is my dog called?"


def make_memory(**options: Any) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(dimension=4096),
        **{"top_k": 3, "message_range": 0, **options},
    )


def stored_texts(memory: SemanticRecall, thread_id: str) -> list[str]:
    return [m.text for m in memory.storage.list_messages(ScopeFilter(thread_id=thread_id))]


@dataclass
class Who:
    """Ids as the caller gives them; ``context`` and ``auth`` only where a surface has them."""

    thread_id: str | None = None
    resource_id: str | None = None
    context: dict[str, str] | None = None
    auth: str | None = None

    def config(self) -> dict[str, Any]:
        configurable = {"thread_id": self.thread_id, "resource_id": self.resource_id}
        if self.auth is not None:
            configurable["langgraph_auth_user_id"] = self.auth
        return {"configurable": {k: v for k, v in configurable.items() if v is not None}}


# --- the surfaces -------------------------------------------------------------------------


@dataclass
class Surface:
    """Drives one user turn; returns the messages the model was given."""

    name: str
    has_context: bool = False
    """Ids can come from a LangGraph runtime context."""
    has_config: bool = True
    """Ids (and a LangGraph server's authenticated user) can come from a run config."""
    forgotten_raises: bool = True
    """A forgotten thread raises; otherwise the index result says ``forgotten``."""
    model: FakeChatModel = field(default_factory=FakeChatModel)
    results: list[Any] = field(default_factory=list)

    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        raise NotImplementedError


class EngineSurface(Surface):
    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        ids = {"thread_id": who.thread_id, "resource_id": who.resource_id, "config": who.config()}
        question = HumanMessage(text)
        seen = memory.recall([question], **ids)
        self.results.append(memory.index([question, AIMessage(f"ok: {text}")], **ids))
        return seen


class AsyncEngineSurface(Surface):
    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        ids = {"thread_id": who.thread_id, "resource_id": who.resource_id, "config": who.config()}

        async def run() -> list[BaseMessage]:
            question = HumanMessage(text)
            seen = await memory.arecall([question], **ids)
            answer = AIMessage(f"ok: {text}")
            self.results.append(await memory.aindex([question, answer], **ids))
            return seen

        return asyncio.run(run())


class RunnableSurface(Surface):
    asynchronous: bool = False

    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        config = who.config()
        question = HumanMessage(text)
        if self.asynchronous:
            seen = asyncio.run(memory.ainvoke([question], config))
        else:
            seen = memory.invoke([question], config)
        self.results.append(memory.index([question, AIMessage(f"ok: {text}")], config=config))
        return seen


class AsyncRunnableSurface(RunnableSurface):
    asynchronous = True


class GraphSurface(Surface):
    asynchronous: bool = False
    graphs: dict[int, Any]

    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        graphs = self.__dict__.setdefault("graphs", {})
        # Without a thread id a checkpointer refuses the run itself: test our nodes' error.
        saver = InMemorySaver() if who.thread_id is not None else None
        key = (id(memory), saver is None)
        graph = graphs.setdefault(key, create_recall_graph(self.model, memory, checkpointer=saver))
        state = {"messages": [("user", text)]}
        kwargs = {"context": who.context} if who.context else {}
        if self.asynchronous:
            asyncio.run(graph.ainvoke(state, who.config(), **kwargs))
        else:
            graph.invoke(state, who.config(), **kwargs)
        return self.model.calls[-1]


class AsyncGraphSurface(GraphSurface):
    asynchronous = True


class AgentSurface(Surface):
    agents: dict[int, Any]

    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        agents = self.__dict__.setdefault("agents", {})
        saver = InMemorySaver() if who.thread_id is not None else None
        agent = agents.setdefault(
            (id(memory), saver is None),
            create_agent(
                self.model, middleware=[SemanticRecallMiddleware(memory)], checkpointer=saver
            ),
        )
        kwargs = {"context": who.context} if who.context else {}
        agent.invoke({"messages": [("user", text)]}, who.config(), **kwargs)
        return self.model.calls[-1]


class ClassicSurface(Surface):
    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        view = memory.for_thread(who.thread_id, who.resource_id)  # type: ignore[arg-type]
        seen = [*view.load_memory_variables({"input": text})["history"], HumanMessage(text)]
        view.save_context({"input": text}, {"output": f"ok: {text}"})
        return seen


class ChatHistorySurface(Surface):
    """``RunnableWithMessageHistory`` over the chat history, the engine in the chain."""

    def turn(self, memory: SemanticRecall, text: str, who: Who) -> list[BaseMessage]:
        prompt = ChatPromptTemplate.from_messages(
            [MessagesPlaceholder("history"), ("human", "{question}")]
        )
        chain = RunnableWithMessageHistory(
            prompt | memory | self.model,
            lambda session_id: memory.chat_history(session_id, resource_id=who.resource_id),
            input_messages_key="question",
            history_messages_key="history",
        )
        config = who.config()
        config["configurable"]["session_id"] = config["configurable"].pop("thread_id", None)
        chain.invoke({"question": text}, config)
        return self.model.calls[-1]


SURFACES: list[Callable[[], Surface]] = [
    lambda: EngineSurface("engine", forgotten_raises=False),
    lambda: AsyncEngineSurface("engine-async", forgotten_raises=False),
    lambda: RunnableSurface("runnable", forgotten_raises=False),
    lambda: AsyncRunnableSurface("runnable-async", forgotten_raises=False),
    lambda: GraphSurface("graph", has_context=True),
    lambda: AsyncGraphSurface("graph-async", has_context=True),
    lambda: AgentSurface("agent-middleware", has_context=True),
    lambda: ClassicSurface("classic-memory", has_config=False),
    lambda: ChatHistorySurface("chat-history"),
]
NAMES = ["engine", "engine-async", "runnable", "runnable-async", "graph", "graph-async",
         "agent-middleware", "classic-memory", "chat-history"]  # fmt: skip


@pytest.fixture(params=range(len(SURFACES)), ids=NAMES)
def surface(request: pytest.FixtureRequest) -> Surface:
    return SURFACES[request.param]()


def surfaces_with(flag: str) -> Any:
    """Parametrise over the surfaces that have ``flag`` (no skips: the others lack it)."""
    chosen = [(make, name) for make, name in zip(SURFACES, NAMES, strict=True)
              if getattr(make(), flag)]  # fmt: skip
    return pytest.mark.parametrize(
        "make_surface", [make for make, _ in chosen], ids=[name for _, name in chosen]
    )


def seen_text(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)


# --- scenarios ----------------------------------------------------------------------------


def test_cross_thread_recall_reaches_the_model(surface: Surface) -> None:
    memory = make_memory()
    surface.turn(memory, FACT, Who("A", "alice"))
    assert "Biscuit" in seen_text(surface.turn(memory, QUESTION, Who("B", "alice")))
    assert "Biscuit" not in seen_text(surface.turn(memory, QUESTION, Who("C", "bob")))


def test_thread_scope_recalls_only_its_own_thread(surface: Surface) -> None:
    memory = make_memory(scope="thread")
    surface.turn(memory, FACT, Who("A", "alice"))
    assert "Biscuit" not in seen_text(surface.turn(memory, QUESTION, Who("B", "alice")))


def test_repeated_identical_turns_are_all_stored(surface: Surface) -> None:
    memory = make_memory()
    for text in ["yes", "thanks", "yes", "thanks", FACT]:
        surface.turn(memory, text, Who("A", "alice"))
    texts = stored_texts(memory, "A")
    assert len(texts) == 10, texts
    assert texts.count("yes") == 2
    assert texts.count("thanks") == 2


def test_a_missing_thread_id_is_a_clear_error(surface: Surface) -> None:
    memory = make_memory()
    # RunnableWithMessageHistory checks its own key (session_id) first.
    with pytest.raises(ValueError, match=r"thread|session_id"):
        surface.turn(memory, FACT, Who(None, "alice"))
    assert memory.stats().messages == 0


def test_a_missing_resource_is_loud_and_locks_nothing(surface: Surface) -> None:
    memory = make_memory()
    with pytest.raises(MissingIdentityError, match="resource"):
        surface.turn(memory, FACT, Who("A", None))
    assert memory.storage.get_thread_owner("A") is None
    surface.turn(memory, FACT, Who("A", "alice"))  # the real owner is not locked out
    assert memory.storage.get_thread_owner("A") == "alice"


def test_a_write_to_a_forgotten_thread_is_visible(surface: Surface) -> None:
    memory = make_memory()
    surface.turn(memory, FACT, Who("A", "alice"))
    memory.forget_thread("A")
    if surface.forgotten_raises:
        with pytest.raises(ForgottenThreadError, match="forgotten"):
            surface.turn(memory, "and my cat?", Who("A", "alice"))
    else:
        surface.turn(memory, "and my cat?", Who("A", "alice"))
        result = surface.results[-1]
        assert result.forgotten
        assert {f.reason for f in result.fates} == {"thread forgotten"}
    assert stored_texts(memory, "A") == []


def test_read_only_recalls_and_stores_nothing(surface: Surface) -> None:
    memory = make_memory()
    surface.turn(memory, FACT, Who("A", "alice"))
    reader = memory.with_options(read_only=True)
    assert "Biscuit" in seen_text(surface.turn(reader, QUESTION, Who("B", "alice")))
    assert stored_texts(memory, "B") == []
    with pytest.raises(ReadOnlyError):
        reader.forget_thread("A")


@surfaces_with("has_context")
def test_identity_from_the_runtime_context(make_surface: Callable[[], Surface]) -> None:
    surface = make_surface()
    memory = make_memory()
    surface.turn(memory, FACT, Who("A", context={"resource_id": "alice"}))
    seen = surface.turn(memory, QUESTION, Who("B", context={"resource_id": "alice"}))
    assert "Biscuit" in seen_text(seen)
    assert memory.storage.get_thread_owner("B") == "alice"


@surfaces_with("has_config")
def test_the_authenticated_user_is_the_resource_and_a_spoof_is_refused(
    make_surface: Callable[[], Surface],
) -> None:
    surface = make_surface()
    memory = make_memory()
    surface.turn(memory, FACT, Who("A", auth="alice"))
    assert memory.storage.get_thread_owner("A") == "alice"
    with pytest.raises(IdentityMismatchError):
        surface.turn(memory, QUESTION, Who("B", "alice", auth="bob"))
    assert "Biscuit" not in seen_text(surface.turn(memory, QUESTION, Who("C", auth="bob")))


def test_the_same_message_indexed_twice_is_stored_once(surface: Surface) -> None:
    memory = make_memory()
    message = HumanMessage(FACT, id="fact-1")
    first = memory.index([message], thread_id="A", resource_id="alice")
    again = memory.index([message, message], thread_id="A", resource_id="alice")
    assert [f.fate for f in first.fates] == ["stored"]
    assert [f.fate for f in again.fates] == ["skipped", "unchanged"]
    assert stored_texts(memory, "A") == [FACT]
    surface.turn(memory, QUESTION, Who("A", "alice"))  # a surface turn on top adds its own 2
    assert len(stored_texts(memory, "A")) == 3


# --- the classic contract and the chat history: clear() empties and memory goes on -------


def test_classic_clear_empties_and_the_conversation_goes_on() -> None:
    memory = make_memory()
    view = memory.for_thread("A", "alice")
    view.save_context({"input": FACT}, {"output": "noted"})
    view.clear()
    assert stored_texts(memory, "A") == []
    view.save_context({"input": "my cat is Tom"}, {"output": "noted"})
    assert stored_texts(memory, "A") == ["my cat is Tom", "noted"]
    assert "Tom" in seen_text(memory.for_thread("B", "alice").load_memory_variables(
        {"input": "what is my cat called?"})["history"])  # fmt: skip


def test_chat_history_clear_empties_and_keeps_working() -> None:
    memory = make_memory()
    history = memory.chat_history("A", resource_id="alice")
    history.add_messages([HumanMessage(FACT), AIMessage("noted")])
    assert [m.text for m in history.messages] == [FACT, "noted"]
    history.clear()
    assert history.messages == []
    history.add_messages([HumanMessage("again")])
    assert [m.text for m in memory.chat_history("A", resource_id="alice", last=1).messages] == [
        "again"
    ]


# --- graphs on a plain MessagesState fail at their first run, saying what to change ------


def test_recall_node_in_a_plain_messages_state_graph_fails_at_first_run() -> None:
    memory = make_memory()
    model = FakeChatModel()
    builder = StateGraph(MessagesState)
    builder.add_node("recall", RecallNode(memory))
    builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("index", IndexNode(memory))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "model")
    builder.add_edge("model", "index")
    graph = builder.compile()
    config = {"configurable": {"thread_id": "A", "resource_id": "alice"}}
    with pytest.raises(ValueError, match="RecallState"):
        graph.invoke({"messages": [("user", FACT)]}, config)
    assert model.calls == []  # it failed before the model ran, not after


def test_index_node_alone_works_in_a_plain_messages_state_graph() -> None:
    memory = make_memory()
    builder = StateGraph(MessagesState)
    builder.add_node("index", IndexNode(memory))
    builder.add_edge(START, "index")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "A", "resource_id": "alice"}}
    graph.invoke({"messages": [("user", "yes")]}, config)
    graph.invoke({"messages": [("user", "yes")]}, config)
    assert stored_texts(memory, "A") == ["yes", "yes"]


# --- reads: search with a resource alone, on every search surface ------------------------


def _engine_search(memory: SemanticRecall, query: str, **ids: Any) -> list[str]:
    return [hit.message.text for hit in memory.search(query, **ids)]


def _engine_asearch(memory: SemanticRecall, query: str, **ids: Any) -> list[str]:
    return [hit.message.text for hit in asyncio.run(memory.asearch(query, **ids))]


def _retriever(memory: SemanticRecall, query: str, **ids: Any) -> list[str]:
    docs = memory.as_retriever().invoke(query, {"configurable": ids})
    return [doc.metadata["text"] for doc in docs]


def _aretriever(memory: SemanticRecall, query: str, **ids: Any) -> list[str]:
    docs = asyncio.run(memory.as_retriever().ainvoke(query, {"configurable": ids}))
    return [doc.metadata["text"] for doc in docs]


def _tool(memory: SemanticRecall, query: str, **ids: Any) -> list[str]:
    message = memory.as_tool().invoke(
        {"type": "tool_call", "name": "search_memory", "id": "c1", "args": {"query": query}},
        {"configurable": ids},
    )
    return [doc.metadata["text"] for doc in message.artifact]


SEARCHES = [_engine_search, _engine_asearch, _retriever, _aretriever, _tool]


@pytest.mark.parametrize("search", SEARCHES, ids=lambda f: f.__name__.strip("_"))
def test_search_with_a_resource_alone(search: Callable[..., list[str]]) -> None:
    memory = make_memory()
    memory.index([HumanMessage(FACT)], thread_id="A", resource_id="alice")
    memory.index([HumanMessage("my dog is called Rex")], thread_id="Z", resource_id="bob")
    assert search(memory, "dog Biscuit", resource_id="alice") == [FACT]
    with pytest.raises(MissingIdentityError, match="resource"):
        search(memory, "dog", thread_id="A")
    assert "my dog is called Rex" not in search(memory, "dog Rex", resource_id="alice")


# --- review findings: one rule, whichever door ----------------------------------------


def test_options_are_read_only_and_with_options_changes_them() -> None:
    memory = make_memory()
    with pytest.raises(AttributeError, match="with_options"):
        memory.top_k = 1  # type: ignore[misc]
    assert memory.with_options(top_k=1).top_k == 1
    assert memory.top_k == 3


def test_a_cache_size_that_cannot_apply_is_refused_not_ignored() -> None:
    from langchain_semantic_recall import EmbeddingCache, InvalidOptionError

    memory = make_memory(cache_size=50)
    with pytest.raises(InvalidOptionError, match="cache_size"):
        memory.with_options(cache_size=5)  # the views share one cache: it kept 50
    with pytest.raises(InvalidOptionError, match="cache_size"):
        make_memory(cache=EmbeddingCache(10), cache_size=500)  # 500 was ignored
    changed = memory.with_options(top_k=1)  # an engine built with cache_size still changes
    assert changed.cache is memory.cache
    assert memory.cache.maxsize == 50


def test_ensure_index_twins_raise_the_same_error() -> None:
    from langchain_semantic_recall import EmbeddingMismatchError, SemanticRecallError

    vectors = InMemoryVectorIndex()
    make = lambda dim: SemanticRecall(  # noqa: E731
        storage=InMemoryStorage(), vector_store=vectors, embeddings=FakeEmbeddings(dim),
        index_name="shared-index",
    )  # fmt: skip
    make(64).ensure_index()
    with pytest.raises(EmbeddingMismatchError):
        make(32).ensure_index()
    with pytest.raises(EmbeddingMismatchError):
        asyncio.run(make(32).aensure_index())

    class NoVectors(Embeddings):
        """Answers the dimension probe with no vector at all."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return []

        def embed_query(self, text: str) -> list[float]:
            return []

    broken = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=NoVectors()
    )
    # No vector at all is the embedder failing, not a mismatch (there is no index yet).
    with pytest.raises(SemanticRecallError, match="probing") as raised:
        broken.ensure_index()
    assert not isinstance(raised.value, EmbeddingMismatchError)
    with pytest.raises(SemanticRecallError, match="probing") as araised:
        asyncio.run(broken.aensure_index())
    assert not isinstance(araised.value, EmbeddingMismatchError)


_FORGETS: dict[str, Callable[[SemanticRecall], Any]] = {
    "forget_thread": lambda m: m.forget_thread("t1"),
    "aforget_thread": lambda m: asyncio.run(m.aforget_thread("t1")),
    "forget_resource": lambda m: m.forget_resource("alice"),
    "aforget_resource": lambda m: asyncio.run(m.aforget_resource("alice")),
    "forget_before": lambda m: m.forget_before(datetime.now(UTC)),
    "aforget_before": lambda m: asyncio.run(m.aforget_before(datetime.now(UTC))),
    "apply_retention": lambda m: m.apply_retention(),
    "aapply_retention": lambda m: asyncio.run(m.aapply_retention()),
}


@pytest.mark.parametrize("forget", sorted(_FORGETS))
def test_a_forget_on_another_models_index_deletes_nothing(forget: str) -> None:
    """An engine given another embedder's index (`index_name`) cannot delete its vectors.
    Every forget deleted the messages first and failed on the index after, so the
    vectors stayed, text and all, under an error that did not say the messages were gone."""
    from langchain_semantic_recall import EmbeddingMismatchError

    storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
    build = lambda dim: SemanticRecall(  # noqa: E731
        storage=storage, vector_store=vectors, embeddings=FakeEmbeddings(dim),
        index_name="shared-index", retention=timedelta(days=1),
    )  # fmt: skip
    owner = build(64)
    old = (datetime.now(UTC) - timedelta(days=2)).isoformat()  # apply_retention would delete it
    fact = HumanMessage("I keep bees on the roof.", additional_kwargs={"created_at": old})
    owner.index([fact], thread_id="t1", resource_id="alice")
    with pytest.raises(EmbeddingMismatchError, match="shared-index"):
        _FORGETS[forget](build(32))
    assert storage.count(ScopeFilter(resource_id="alice")) == 1
    assert (owner.stats().vectors, owner.stats().orphan_vectors) == (1, 0)
    assert owner.forget_thread("t1") == 1  # the right embedder still forgets it all
    assert owner.stats().vectors == 0


def test_read_only_is_honoured_by_every_write_path() -> None:
    memory = make_memory().with_options(read_only=True)
    conversation = ("A", "alice", [HumanMessage(FACT)])
    for write in (
        lambda: memory.bulk_index([conversation]),
        lambda: asyncio.run(memory.abulk_index([conversation])),
        memory.reindex,
        lambda: asyncio.run(memory.areindex()),
        lambda: memory.forget_resource("alice"),
        lambda: memory.clear_thread("A"),
    ):
        with pytest.raises(ReadOnlyError):
            write()
    assert memory.stats().messages == 0


def test_integer_ids_mean_the_same_on_every_surface() -> None:
    memory = make_memory(threshold=0.0)  # fake vectors: no calibrated gate (hybrid's default)
    memory.index([HumanMessage(FACT)], thread_id=42, resource_id=7)  # type: ignore[arg-type]
    config = {"configurable": {"thread_id": 42, "resource_id": 7}}
    assert "Biscuit" in seen_text(memory.invoke([HumanMessage("dog?")], config))
    assert memory.as_retriever().invoke("dog", config)[0].metadata["thread_id"] == "42"
    for bad in (4.2, ["t"]):
        bad_config = {"configurable": {"thread_id": bad, "resource_id": "7"}}
        with pytest.raises(ValueError, match="thread_id"):
            memory.invoke([HumanMessage("dog?")], bad_config)
        with pytest.raises(ValueError, match="thread_id"):
            memory.as_retriever().invoke("dog", bad_config)
