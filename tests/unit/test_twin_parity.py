"""The sync and async twins behave the same, on any sequence of calls.

A hypothesis state machine drives two engines, each over its own storage (in memory, or
SQLite in memory), in-memory vector index and fake embedder, with the same random
sequence of operations: one engine through the sync methods, the other through their
async twins (`x` / `ax`). Every step returns the same result on both, or raises the same
error type with the same message; after every step both stores hold the same messages
and the same number of vectors. Both read one frozen clock, and LangGraph's ids for
messages without one (a tool's result) come in the same order on both sides.

The operations cover every surface that reads or writes: index (repeated identical turns,
edits of a stored message, a message id of another thread, metadata), bulk import,
search, recall, the runnable, the retriever, the tool, the chat history, the classic
memory contract, the graph's recall node, forget / clear / move / restore / retention,
reindex and stats; and bad calls: a missing id, an unknown thread, empty or blank text,
a thread of another resource, wrong options (a bad `top_k`, scope, filter or time bound).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import message as langgraph_messages

from langchain_semantic_recall import (
    InMemoryStorage,
    SemanticRecall,
    SemanticRecallMiddleware,
    SQLiteStorage,
    create_recall_graph,
    memory_contract,
)
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeChatModel, FakeEmbeddings

START = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)
NOW = START + timedelta(days=30, minutes=3)
"""Both engines' clock: `retention` (30 days) forgets the first 3 messages (a minute each)."""
CLOCKS = (
    "engine.bulk_ops",
    "engine.index_ops",
    "engine.narrowing",
    "engine.retention_ops",
    "engine.search_ops",
    "engine.vector_space",
    "memory_contract",
    "periods",
)
"""The modules that read the clock: the two sides of a step read it at other instants."""
QUIET = logging.getLogger("tests.twin_parity")
QUIET.setLevel(logging.ERROR)  # the fake embedder is not the one the relevance model fits


class _Clock(type):
    """`isinstance(x, datetime)` still holds in the modules whose `datetime` is frozen."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, datetime)


class _Frozen(datetime, metaclass=_Clock):
    """`datetime` whose `now()` is `NOW`."""

    @classmethod
    def now(cls, tz: Any = None) -> _Frozen:  # type: ignore[override]
        return cls.fromtimestamp(NOW.timestamp(), tz)


class _Ids:
    """The `uuid` module as LangGraph's `add_messages` and `save_context` see it.

    They give a new message (a tool's result, a saved exchange) a random id; here ids
    come in order from `start`, and both sides of a step start from the same number, so
    the same messages get the same ids.
    """

    def __init__(self) -> None:
        self.next = 0

    def start(self, at: int) -> None:
        self.next = at

    def uuid4(self) -> uuid.UUID:
        self.next += 1
        return uuid.UUID(int=self.next)


THREADS = st.sampled_from(["t1", "t2", "t3", "t4"])
RESOURCES = st.sampled_from(["alice", "bob"])
# Mostly ids that hold data, now and then a missing, unknown or blank one.
MAYBE_THREAD = st.sampled_from(["t1", "t2", "t3", "t4"] * 3 + [None, "never-seen", ""])
MAYBE_RESOURCE = st.sampled_from(["alice", "bob"] * 5 + [None, "nobody", " "])
WORDS = [
    "I'm allergic to peanuts",
    "We plan a trip to Lisbon in March",
    "my tomato seedlings are leggy",
    "the deploy is on Friday",
    "peanut free snacks for the flight",
    "yes",
    "thanks!",
]
TEXTS = st.one_of(st.sampled_from(WORDS), st.sampled_from(["", "   "]))
SEED = (
    ("t1", "alice", WORDS[:4]),
    ("t2", "alice", WORDS[4:6]),
    ("t3", "bob", [WORDS[0], WORDS[6]]),
)
"""The conversations both engines hold before the first step."""
QUERIES = st.one_of(st.sampled_from(WORDS), st.sampled_from(["", "Lisbon peanuts", "hi"]))
# Mostly good options, now and then a bad one (a bad call must fail alike on both sides).
TOP_K = st.sampled_from([None, None, None, 1, 2, 6, 0, -1])
SCOPES = st.sampled_from([None, None, None, "thread", "resource", "everything"])
FILTERS = st.sampled_from(
    [
        None,
        None,
        None,
        {"project": "apollo"},
        {"project": {"$in": ["apollo", "zeus"]}},
        {"project": {"$gt": 1}},  # not an operator the filters know
        {"": "x"},
    ]
)
SINCE = st.sampled_from(
    [
        None,
        None,
        None,
        START + timedelta(minutes=5),
        timedelta(days=10_000),
        datetime(2024, 1, 15, 10, 35),  # naive: refused
    ]
)

Outcome = tuple[str, Any]


class StableIdModel(FakeChatModel):
    """`FakeChatModel` whose answers have ids from what it was given, not from the run."""

    def _answer(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        answer = super()._answer(messages, tools)
        seen = "\x1f".join(f"{m.type}:{m.id}:{m.text}" for m in messages)
        answer.id = "ai-" + hashlib.sha1(seen.encode()).hexdigest()[:16]
        return answer


def _plain(value: Any) -> Any:
    """A value both engines can be compared on (messages and documents by their fields)."""
    if isinstance(value, BaseMessage):
        return (type(value).__name__, value.content, value.id, _plain(value.additional_kwargs))
    if isinstance(value, Document):
        return ("Document", value.page_content, _plain(value.metadata))
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, value)
    return value


class TwinEngines(RuleBasedStateMachine):
    """Two engines, one driven by the sync methods and one by their async twins."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.next_id = 0
        self.turns: list[tuple[str, str | None, list[BaseMessage]]] = []
        self.steps: list[str] = []
        self.clock = ExitStack()
        for name in CLOCKS:
            module = importlib.import_module(f"langchain_semantic_recall.{name}")
            self.clock.enter_context(mock.patch.object(module, "datetime", _Frozen))
        self.ids = _Ids()
        for module in (langgraph_messages, memory_contract):  # ids of new messages
            self.clock.enter_context(mock.patch.object(module, "uuid", self.ids))

    @initialize(
        mode=st.sampled_from(["hybrid", "dense", "keyword"]),
        scope=st.sampled_from(["resource", "thread"]),
        budget=st.sampled_from(["auto", None, 3]),
        sqlite=st.booleans(),
    )
    def build(self, mode: str, scope: str, budget: Any, sqlite: bool) -> None:
        def engine() -> SemanticRecall:
            return SemanticRecall(
                storage=SQLiteStorage(":memory:") if sqlite else InMemoryStorage(),
                vector_store=InMemoryVectorIndex(),
                embeddings=FakeEmbeddings(dimension=64),
                search_mode=mode,
                scope=scope,
                message_budget=budget,
                retention=timedelta(days=30),
                logger=QUIET,
            )

        self.sync, self.twin = engine(), engine()
        for thread, resource, texts in SEED:  # every read has something to find
            self.index_turn(thread, resource, texts, system=False, metadata=None)

    def teardown(self) -> None:
        """Closed, by `close` on one side and `aclose` on the other: calls fail alike."""
        try:
            if hasattr(self, "sync"):
                self.both("close", lambda e: e.close(), lambda e: e.aclose())
                self.both(
                    "search when closed",
                    lambda e: e.search("peanuts", resource_id="alice"),
                    lambda e: e.asearch("peanuts", resource_id="alice"),
                )
        finally:
            self.loop.close()
            self.clock.close()

    # --- running one step on both -------------------------------------------------------

    def _outcome(self, call: Callable[[], Any]) -> Outcome:
        try:
            return "ok", _plain(call())
        except Exception as error:  # the same type and message on both sides
            return "error", (type(error).__name__, str(error))

    def both(
        self,
        what: str,
        sync: Callable[[SemanticRecall], Any],
        twin: Callable[[SemanticRecall], Awaitable[Any]],
    ) -> Outcome:
        """Run `sync` on one engine and `twin` on the other; the outcomes must be equal."""
        self.steps.append(what)
        self.ids.start(len(self.steps) << 20)
        left = self._outcome(lambda: sync(self.sync))
        self.ids.start(len(self.steps) << 20)
        right = self._outcome(lambda: self.loop.run_until_complete(twin(self.twin)))
        assert left == right, f"{what}: sync {left!r} != async {right!r}"
        return left

    def message(self, role: str, text: str, *, message_id: str | None = None) -> BaseMessage:
        if message_id is None:
            message_id, self.next_id = f"m{self.next_id}", self.next_id + 1
        when = (START + timedelta(minutes=int(message_id[1:]))).isoformat()
        kinds = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}
        return kinds[role](text, id=message_id, additional_kwargs={"created_at": when})

    # --- writes ---------------------------------------------------------------------------

    @rule(
        thread=MAYBE_THREAD,
        resource=MAYBE_RESOURCE,
        texts=st.lists(TEXTS, min_size=0, max_size=3),
        system=st.booleans(),
        metadata=st.one_of(st.none(), st.just({"project": "apollo"})),
    )
    def index_turn(
        self,
        thread: str | None,
        resource: str | None,
        texts: list[str],
        system: bool,
        metadata: dict[str, str] | None,
    ) -> None:
        roles = ["user", "assistant"] * 2
        turn = [self.message(role, text) for role, text in zip(roles, texts, strict=False)]
        if system:
            turn.insert(0, self.message("system", "You are terse."))
        options = {"thread_id": thread, "resource_id": resource, "metadata": metadata}
        outcome = self.both(
            f"index {thread}/{resource} {texts}",
            lambda e: e.index(turn, **options),
            lambda e: e.aindex(turn, **options),
        )
        if outcome[0] == "ok" and thread and turn:
            self.turns.append((thread, resource, turn))

    @precondition(lambda self: bool(self.turns))
    @rule(data=st.data(), other_resource=st.booleans())
    def repeat_turn(self, data: st.DataObject, other_resource: bool) -> None:
        """The same turn again (same ids): unchanged; under another resource: refused."""
        thread, resource, turn = data.draw(st.sampled_from(self.turns), "turn")
        if other_resource:
            resource = "bob" if resource == "alice" else "alice"
        self.both(
            f"repeat {thread}/{resource}",
            lambda e: e.index(turn, thread_id=thread, resource_id=resource),
            lambda e: e.aindex(turn, thread_id=thread, resource_id=resource),
        )

    @precondition(lambda self: bool(self.turns))
    @rule(data=st.data(), text=TEXTS, elsewhere=st.booleans())
    def edit_message(self, data: st.DataObject, text: str, elsewhere: bool) -> None:
        """A stored message's id with new text: updated; in another thread: refused."""
        thread, resource, turn = data.draw(st.sampled_from(self.turns), "turn")
        old = data.draw(st.sampled_from(turn), "message")
        role = {"human": "user", "ai": "assistant"}.get(old.type, "system")
        edited = [self.message(role, text, message_id=str(old.id))]
        target = "t-elsewhere" if elsewhere else thread
        self.both(
            f"edit {old.id} in {target}",
            lambda e: e.index(edited, thread_id=target, resource_id=resource),
            lambda e: e.aindex(edited, thread_id=target, resource_id=resource),
        )

    @rule(
        conversations=st.lists(
            st.tuples(THREADS, RESOURCES, st.lists(TEXTS, min_size=1, max_size=2)), max_size=3
        ),
        batch_size=st.sampled_from([1, 2, 100, 0]),
    )
    def bulk_index(self, conversations: list[tuple[str, str, list[str]]], batch_size: int) -> None:
        triples = [
            (thread, resource, [self.message("user", text) for text in texts])
            for thread, resource, texts in conversations
        ]
        self.both(
            "bulk_index",
            lambda e: e.bulk_index(triples, batch_size=batch_size),
            lambda e: e.abulk_index(triples, batch_size=batch_size),
        )

    @rule(session=MAYBE_THREAD, resource=MAYBE_RESOURCE, text=TEXTS)
    def chat_history_add(self, session: str | None, resource: str | None, text: str) -> None:
        added = [self.message("user", text)]
        self.both(
            f"chat_history({session}).add_messages",
            lambda e: e.chat_history(session, resource_id=resource).add_messages(added),
            lambda e: e.chat_history(session, resource_id=resource).aadd_messages(added),
        )

    # --- reads ------------------------------------------------------------------------------

    @rule(
        query=QUERIES,
        thread=MAYBE_THREAD,
        resource=MAYBE_RESOURCE,
        top_k=TOP_K,
        scope=SCOPES,
        filter=FILTERS,
        since=SINCE,
    )
    def search(self, query: str, **options: Any) -> None:
        given = {"thread_id": options.pop("thread"), "resource_id": options.pop("resource")}
        given |= {key: value for key, value in options.items() if value is not None}
        self.both(
            f"search {query!r} {given}",
            lambda e: e.search(query, **given),
            lambda e: e.asearch(query, **given),
        )

    @rule(query=QUERIES, thread=MAYBE_THREAD, resource=MAYBE_RESOURCE, filter=FILTERS)
    def recall(self, query: str, thread: str | None, resource: str | None, filter: Any) -> None:
        messages = [HumanMessage(query, id="live")]
        options = {"thread_id": thread, "resource_id": resource, "filter": filter}
        self.both(
            f"recall {query!r} {thread}/{resource}",
            lambda e: e.recall(messages, **options),
            lambda e: e.arecall(messages, **options),
        )

    @rule(query=QUERIES, thread=MAYBE_THREAD, resource=MAYBE_RESOURCE)
    def invoke(self, query: str, thread: str | None, resource: str | None) -> None:
        config = {"configurable": {"thread_id": thread, "resource_id": resource}}
        messages = [HumanMessage(query, id="live")]
        self.both(
            "invoke",
            lambda e: e.invoke(messages, config),
            lambda e: e.ainvoke(messages, config),
        )

    @rule(query=QUERIES, resource=MAYBE_RESOURCE, k=st.one_of(st.none(), st.integers(0, 3)))
    def retriever(self, query: str, resource: str | None, k: int | None) -> None:
        config = {"configurable": {"resource_id": resource}}
        self.both(
            "retriever",
            lambda e: e.as_retriever(k=k).invoke(query, config),
            lambda e: e.as_retriever(k=k).ainvoke(query, config),
        )

    @rule(query=QUERIES, thread=MAYBE_THREAD, resource=MAYBE_RESOURCE)
    def tool(self, query: str, thread: str | None, resource: str | None) -> None:
        config = {"configurable": {"thread_id": thread, "resource_id": resource}}
        self.both(
            "tool",
            lambda e: e.as_tool().invoke({"query": query}, config),
            lambda e: e.as_tool().ainvoke({"query": query}, config),
        )

    @rule(session=MAYBE_THREAD, resource=MAYBE_RESOURCE, last=st.sampled_from([None, 2, 1, 0]))
    def chat_history_read(self, session: str | None, resource: str | None, last: Any) -> None:
        async def read(engine: SemanticRecall) -> list[BaseMessage]:
            return await engine.chat_history(
                session, resource_id=resource, last=last
            ).aget_messages()

        self.both(
            f"chat_history({session}).messages",
            lambda e: e.chat_history(session, resource_id=resource, last=last).messages,
            read,
        )

    @rule(thread=MAYBE_THREAD, resource=MAYBE_RESOURCE, query=QUERIES)
    def load_memory_variables(self, thread: str | None, resource: str | None, query: str) -> None:
        inputs = {"input": query}
        self.both(
            "load_memory_variables",
            lambda e: e.for_thread(thread, resource).load_memory_variables(inputs),
            lambda e: e.for_thread(thread, resource).aload_memory_variables(inputs),
        )

    @rule(
        thread=MAYBE_THREAD,
        resource=MAYBE_RESOURCE,
        query=QUERIES,
        tool_rounds=st.integers(0, 1),
        middleware=st.booleans(),
    )
    def agent_turn(
        self,
        thread: str | None,
        resource: str | None,
        query: str,
        tool_rounds: int,
        middleware: bool,
    ) -> None:
        """A turn of `create_recall_graph` or of `create_agent` with the middleware."""
        turn = {"messages": [self.message("user", query)]}
        config = {"configurable": {"thread_id": thread, "resource_id": resource}}
        models: list[StableIdModel] = []

        def agent(engine: SemanticRecall) -> Any:
            model = StableIdModel(tool_rounds=tool_rounds)
            models.append(model)
            tool = engine.as_tool()
            if middleware:
                recall = SemanticRecallMiddleware(engine)
                return create_agent(model, tools=[tool], middleware=[recall])
            return create_recall_graph(model, engine, [tool])

        self.both(
            f"{'middleware' if middleware else 'graph'} turn {thread}/{resource} {query!r}",
            lambda e: agent(e).invoke(turn, config),
            lambda e: agent(e).ainvoke(turn, config),
        )
        given = [[_plain(call) for call in model.calls] for model in models]
        assert given[0] == given[1], "the model was given other messages"

    @rule(thread=MAYBE_THREAD, resource=MAYBE_RESOURCE, text=TEXTS, forget=st.booleans())
    def read_only_view(
        self, thread: str | None, resource: str | None, text: str, forget: bool
    ) -> None:
        """A read-only view: each message's fate says so; a forget is refused."""
        turn = [self.message("user", text)]
        if forget:
            self.both(
                "read-only forget",
                lambda e: e.with_options(read_only=True).forget_thread(
                    thread, resource_id=resource
                ),
                lambda e: e.with_options(read_only=True).aforget_thread(
                    thread, resource_id=resource
                ),
            )
            return
        self.both(
            "read-only index",
            lambda e: e.with_options(read_only=True).index(
                turn, thread_id=thread, resource_id=resource
            ),
            lambda e: e.with_options(read_only=True).aindex(
                turn, thread_id=thread, resource_id=resource
            ),
        )

    @rule()
    def purge_and_ensure_index(self) -> None:
        self.both("purge", lambda e: e.purge(), lambda e: e.apurge())
        self.both("ensure_index", lambda e: e.ensure_index(), lambda e: e.aensure_index())

    @rule(session=MAYBE_THREAD, resource=MAYBE_RESOURCE)
    def chat_history_clear(self, session: str | None, resource: str | None) -> None:
        self.both(
            f"chat_history({session}).clear",
            lambda e: e.chat_history(session, resource_id=resource).clear(),
            lambda e: e.chat_history(session, resource_id=resource).aclear(),
        )

    @rule(resource=MAYBE_RESOURCE, thread=MAYBE_THREAD)
    def stats(self, resource: str | None, thread: str | None) -> None:
        self.both(
            "stats",
            lambda e: e.stats(resource_id=resource, thread_id=thread),
            lambda e: e.astats(resource_id=resource, thread_id=thread),
        )

    # --- forgetting and maintenance ------------------------------------------------------

    @rule(thread=MAYBE_THREAD, resource=MAYBE_RESOURCE, retire=st.booleans())
    def forget_thread(self, thread: str | None, resource: str | None, retire: bool) -> None:
        if retire:
            self.both(
                f"forget_thread {thread}/{resource}",
                lambda e: e.forget_thread(thread, resource_id=resource),
                lambda e: e.aforget_thread(thread, resource_id=resource),
            )
        else:
            self.both(
                f"clear_thread {thread}/{resource}",
                lambda e: e.clear_thread(thread, resource_id=resource),
                lambda e: e.aclear_thread(thread, resource_id=resource),
            )

    @rule(thread=MAYBE_THREAD, resource=MAYBE_RESOURCE, said=TEXTS, answer=TEXTS)
    def save_context(
        self, thread: str | None, resource: str | None, said: str, answer: str
    ) -> None:
        inputs, outputs = {"input": said}, {"output": answer}
        self.both(
            "save_context",
            lambda e: e.for_thread(thread, resource).save_context(inputs, outputs),
            lambda e: e.for_thread(thread, resource).asave_context(inputs, outputs),
        )

    @rule(thread=MAYBE_THREAD, resource=MAYBE_RESOURCE)
    def classic_clear(self, thread: str | None, resource: str | None) -> None:
        self.both(
            f"for_thread({thread}).clear",
            lambda e: e.for_thread(thread, resource).clear(),
            lambda e: e.for_thread(thread, resource).aclear(),
        )

    @rule(resource=MAYBE_RESOURCE)
    def forget_resource(self, resource: str | None) -> None:
        self.both(
            f"forget_resource {resource}",
            lambda e: e.forget_resource(resource),
            lambda e: e.aforget_resource(resource),
        )

    @rule(thread=MAYBE_THREAD, to=MAYBE_RESOURCE, owner=MAYBE_RESOURCE)
    def move_thread(self, thread: str | None, to: str | None, owner: str | None) -> None:
        self.both(
            f"move_thread {thread} {owner}->{to}",
            lambda e: e.move_thread(thread, to=to, resource_id=owner),
            lambda e: e.amove_thread(thread, to=to, resource_id=owner),
        )

    @rule(thread=MAYBE_THREAD)
    def restore_thread(self, thread: str | None) -> None:
        self.both(
            f"restore_thread {thread}",
            lambda e: e.restore_thread(thread),
            lambda e: e.arestore_thread(thread),
        )

    @rule(minutes=st.integers(-1, 6), resource=MAYBE_RESOURCE, naive=st.booleans())
    def forget_before(self, minutes: int, resource: str | None, naive: bool) -> None:
        cutoff = START + timedelta(minutes=minutes)
        if naive:
            cutoff = cutoff.replace(tzinfo=None)
        self.both(
            f"forget_before {cutoff}",
            lambda e: e.forget_before(cutoff, resource_id=resource),
            lambda e: e.aforget_before(cutoff, resource_id=resource),
        )

    @rule(resource=MAYBE_RESOURCE)
    def apply_retention(self, resource: str | None) -> None:
        self.both(
            "apply_retention",
            lambda e: e.apply_retention(resource_id=resource),
            lambda e: e.aapply_retention(resource_id=resource),
        )

    @rule(
        missing_only=st.booleans(),
        resource=st.one_of(st.none(), RESOURCES),
        thread=st.one_of(st.none(), THREADS),
        batch_size=st.sampled_from([1, 256, 0]),
    )
    def reindex(
        self, missing_only: bool, resource: str | None, thread: str | None, batch_size: int
    ) -> None:
        options = {
            "missing_only": missing_only,
            "resource_id": resource,
            "thread_id": thread,
            "batch_size": batch_size,
        }
        self.both(
            "reindex",
            lambda e: e.reindex(**options),
            lambda e: e.areindex(**options),
        )

    @rule(option=st.sampled_from(["top_k", "scope", "nonsense"]))
    def unknown_or_wrong_option(self, option: str) -> None:
        bad = {"top_k": "four", "scope": 3, "nonsense": True}[option]
        self.both(
            f"search with {option}={bad!r}",
            lambda e: e.search("peanuts", resource_id="alice", **{option: bad}),
            lambda e: e.asearch("peanuts", resource_id="alice", **{option: bad}),
        )

    # --- both stores hold the same -------------------------------------------------------

    @invariant()
    def same_stores(self) -> None:
        if not hasattr(self, "sync"):
            return
        left, right = self.sync, self.twin
        assert left.storage.list_threads() == right.storage.list_threads(), self.steps[-1:]
        assert left.storage.list_messages(limit=10_000) == (
            right.storage.list_messages(limit=10_000)
        ), self.steps[-1:]
        name = left.ensure_index().name
        assert left.vector_store.count(name) == right.vector_store.count(name), self.steps[-1:]


TwinEngines.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_sync_and_async_twins_agree_on_any_sequence = TwinEngines.TestCase


def test_every_module_that_reads_the_clock_is_frozen() -> None:
    """A module reading `datetime.now()` and left out of `CLOCKS` would make the test flaky.

    The storage's own clock (SQLite's write times) is not in what the test compares.
    """
    package = Path(importlib.import_module("langchain_semantic_recall").__file__ or "").parent
    engine_side = [
        path
        for path in package.rglob("*.py")
        if not path.relative_to(package).parts[0].startswith(("cli", "storage", "eval"))
    ]
    reading = {
        ".".join(path.relative_to(package).with_suffix("").parts)
        for path in engine_side
        if "datetime.now(" in path.read_text(encoding="utf-8")
    }
    assert reading == set(CLOCKS)
