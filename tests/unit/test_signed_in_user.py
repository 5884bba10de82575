"""A signed-in user touches only their own memory (issue 23, item 1).

Inside a run whose config carries `langgraph_auth_user_id` (what a node, tool or endpoint
on an authenticated LangGraph server sees), every destructive, counting and writing call
that names another resource or another resource's thread is refused with
`OwnershipError`, on every surface (engine, `for_thread` views, chat history, classic
memory), sync and async, and nothing is deleted, retired or written. The histories,
the victims' ids (look-alikes of the signed-in user's included) and the order of the
calls are generated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.chat_history import SemanticRecallChatHistory
from langchain_semantic_recall.errors import OwnershipError
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

T = TypeVar("T")
FUTURE = datetime(2100, 1, 1, tzinfo=UTC)  # a retention cutoff after every message
USER = "alice"
OWN_THREAD = "alice-own"
# Other resources, some looking like the signed-in user on purpose.
VICTIMS = st.sampled_from(["bob", "Alice", "alice ", "ａlice", "alice\u200b", "carol", "7"])
WORDS = st.sampled_from(["lisbon", "peanut", "garden", "deploy", "sister", "tomato"])


def signed_in(user: str, call: Callable[[], T]) -> T:
    """`call()` inside a run of `user`, as a node or tool of an authenticated server sees it."""
    config: RunnableConfig = {"configurable": {"langgraph_auth_user_id": user}}

    # Wrapped in a list: a runnable returned by a RunnableLambda would be invoked.
    def run(_: object) -> list[T]:
        return [call()]

    wrapped: list[T] = RunnableLambda(run).invoke(None, config)
    return wrapped[0]


def asigned_in(user: str, call: Callable[[], Awaitable[T]]) -> T:
    """Async twin of `signed_in`: the call awaited inside the run."""
    config: RunnableConfig = {"configurable": {"langgraph_auth_user_id": user}}

    async def run(_: object) -> list[T]:
        return [await call()]

    return asyncio.run(RunnableLambda(run).ainvoke(None, config))[0]


@dataclass(frozen=True)
class Target:
    """What a call names: another resource and one of its threads."""

    resource: str
    thread: str


def turn(text: str) -> list[Any]:
    return [HumanMessage(text), AIMessage(f"noted: {text}")]


def _config_of(target: Target) -> RunnableConfig:
    """A fresh run config naming another resource's thread (no signed-in user in it)."""
    return {"configurable": {"thread_id": target.thread, "resource_id": target.resource}}


def _thread_config(target: Target) -> RunnableConfig:
    return {"configurable": {"thread_id": target.thread}}


# Every call that deletes, counts, lists or writes, by surface; each names the target.
SYNC_CALLS: dict[str, Callable[[SemanticRecall, Target], object]] = {
    "clear_thread": lambda m, t: m.clear_thread(t.thread),
    "clear_thread(resource=user)": lambda m, t: m.clear_thread(t.thread, resource_id=USER),
    "clear_thread(resource=other)": lambda m, t: m.clear_thread(t.thread, resource_id=t.resource),
    "forget_thread": lambda m, t: m.forget_thread(t.thread),
    "forget_thread(resource=other)": lambda m, t: m.forget_thread(t.thread, resource_id=t.resource),
    "forget_resource": lambda m, t: m.forget_resource(t.resource),
    "forget_before(resource=other)": lambda m, t: m.forget_before(FUTURE, resource_id=t.resource),
    "apply_retention(resource=other)": lambda m, t: m.with_options(
        retention=timedelta(days=1)
    ).apply_retention(resource_id=t.resource),
    "stats(resource)": lambda m, t: m.stats(resource_id=t.resource),
    "stats(thread)": lambda m, t: m.stats(thread_id=t.thread),
    "stats(resource, thread)": lambda m, t: m.stats(resource_id=t.resource, thread_id=t.thread),
    "reindex(resource)": lambda m, t: m.reindex(resource_id=t.resource),
    "reindex(thread)": lambda m, t: m.reindex(thread_id=t.thread, missing_only=True),
    "bulk_index": lambda m, t: m.bulk_index([("planted", t.resource, turn("planted"))]),
    "move_thread(take)": lambda m, t: m.move_thread(t.thread, to=USER),
    "move_thread(take, resource=other)": lambda m, t: m.move_thread(
        t.thread, to=USER, resource_id=t.resource
    ),
    "move_thread(give)": lambda m, t: m.move_thread(OWN_THREAD, to=t.resource),
    "own view.move_thread": lambda m, t: m.for_thread(OWN_THREAD).move_thread(t.thread, to=USER),
    "restore_thread": lambda m, t: m.restore_thread(t.thread),
    "index": lambda m, t: m.index(turn("planted"), thread_id=t.thread),
    "index(config=other)": lambda m, t: m.index(turn("planted"), config=_config_of(t)),
    "index(config=thread)": lambda m, t: m.index(turn("planted"), config=_thread_config(t)),
    "search(config=other)": lambda m, t: m.search("planted", config=_config_of(t)),
    "tool(config=other)": lambda m, t: m.as_tool().invoke({"query": "x"}, _config_of(t)),
    "view.clear": lambda m, t: m.for_thread(t.thread).clear(),
    "view(other).clear": lambda m, t: m.for_thread(t.thread, t.resource).clear(),
    "view.with_options.clear": lambda m, t: m.for_thread(t.thread).with_options(top_k=1).clear(),
    "view.forget_thread": lambda m, t: m.for_thread(t.thread).forget_thread(t.thread),
    "own view.forget_thread": lambda m, t: m.for_thread(OWN_THREAD).forget_thread(t.thread),
    "view.stats": lambda m, t: m.for_thread(t.thread).stats(thread_id=t.thread),
    "save_context": lambda m, t: m.for_thread(t.thread).save_context(
        {"input": "planted"}, {"output": "ok"}
    ),
    "chat_history.clear": lambda m, t: m.chat_history(t.thread).clear(),
    "chat_history(other).clear": lambda m, t: m.chat_history(
        t.thread, resource_id=t.resource
    ).clear(),
    "chat_history.messages": lambda m, t: m.chat_history(t.thread).messages,
    "chat_history.add_messages": lambda m, t: m.chat_history(t.thread).add_messages(
        turn("planted")
    ),
}

ASYNC_CALLS: dict[str, Callable[[SemanticRecall, Target], Awaitable[object]]] = {
    "aclear_thread": lambda m, t: m.aclear_thread(t.thread),
    "aclear_thread(resource=other)": lambda m, t: m.aclear_thread(t.thread, resource_id=t.resource),
    "aforget_thread": lambda m, t: m.aforget_thread(t.thread),
    "aforget_thread(resource=other)": lambda m, t: m.aforget_thread(
        t.thread, resource_id=t.resource
    ),
    "aforget_resource": lambda m, t: m.aforget_resource(t.resource),
    "aforget_before(resource=other)": lambda m, t: m.aforget_before(FUTURE, resource_id=t.resource),
    "aapply_retention(resource=other)": lambda m, t: m.with_options(
        retention=timedelta(days=1)
    ).aapply_retention(resource_id=t.resource),
    "astats(resource)": lambda m, t: m.astats(resource_id=t.resource),
    "astats(thread)": lambda m, t: m.astats(thread_id=t.thread),
    "areindex(resource)": lambda m, t: m.areindex(resource_id=t.resource),
    "areindex(thread)": lambda m, t: m.areindex(thread_id=t.thread, missing_only=True),
    "abulk_index": lambda m, t: m.abulk_index([("planted", t.resource, turn("planted"))]),
    "amove_thread(take)": lambda m, t: m.amove_thread(t.thread, to=USER),
    "amove_thread(give)": lambda m, t: m.amove_thread(OWN_THREAD, to=t.resource),
    "arestore_thread": lambda m, t: m.arestore_thread(t.thread),
    "aindex": lambda m, t: m.aindex(turn("planted"), thread_id=t.thread),
    "aindex(config=other)": lambda m, t: m.aindex(turn("planted"), config=_config_of(t)),
    "retriever.ainvoke(config=other)": lambda m, t: m.as_retriever().ainvoke(
        "planted", _config_of(t)
    ),
    "view.aclear": lambda m, t: m.for_thread(t.thread).aclear(),
    "view.with_options.aclear": lambda m, t: m.for_thread(t.thread).with_options(top_k=1).aclear(),
    "own view.aforget_thread": lambda m, t: m.for_thread(OWN_THREAD).aforget_thread(t.thread),
    "asave_context": lambda m, t: m.for_thread(t.thread).asave_context(
        {"input": "planted"}, {"output": "ok"}
    ),
    "chat_history.aclear": lambda m, t: m.chat_history(t.thread).aclear(),
    "chat_history.aget_messages": lambda m, t: m.chat_history(t.thread).aget_messages(),
    "chat_history.aadd_messages": lambda m, t: m.chat_history(t.thread).aadd_messages(
        turn("planted")
    ),
}

CALLS = [(name, False) for name in SYNC_CALLS] + [(name, True) for name in ASYNC_CALLS]


def engine(scope: str) -> SemanticRecall:
    return SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        scope=scope,  # type: ignore[arg-type]
    )


def snapshot(memory: SemanticRecall) -> tuple[object, ...]:
    """Everything a call could change: messages, owners, vectors, retired thread ids."""
    messages = sorted((m.id, m.thread_id, m.resource_id, m.text) for m in _all(memory))
    threads = sorted((t.thread_id, t.resource_id) for t in memory.storage.list_threads())
    vectors = memory.vector_store.message_ids(memory.ensure_index().name)
    retired = sorted(t for t, _ in threads if memory.storage.is_forgotten(t))
    return messages, threads, sorted(vectors), retired


def _all(memory: SemanticRecall) -> list[Any]:
    found: list[Any] = []
    after: tuple[str, int] | None = None
    while page := memory.storage.list_messages(None, after=after, limit=100):
        found.extend(page)
        after = (page[-1].thread_id, page[-1].seq)
    return found


def attempt(memory: SemanticRecall, name: str, is_async: bool, target: Target) -> None:
    if is_async:
        acall = ASYNC_CALLS[name]
        asigned_in(USER, lambda: acall(memory, target))
    else:
        call = SYNC_CALLS[name]
        signed_in(USER, lambda: call(memory, target))


histories = st.lists(
    st.tuples(VICTIMS, st.integers(0, 2), st.lists(WORDS, min_size=1, max_size=3).map(" ".join)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=histories,
    own=st.lists(WORDS, min_size=1, max_size=3).map(" ".join),
    order=st.permutations(CALLS),
    pick=st.integers(0, 100),
    scope=st.sampled_from(["resource", "thread"]),
)
def test_a_signed_in_user_cannot_delete_count_or_write_another_resources_memory(
    rows: list[tuple[str, int, str]],
    own: str,
    order: list[tuple[str, bool]],
    pick: int,
    scope: str,
) -> None:
    memory = engine(scope)
    memory.index(turn(own), thread_id=OWN_THREAD, resource_id=USER)
    for resource, n, text in rows:
        memory.index(turn(text), thread_id=f"{resource}/t{n}", resource_id=resource)
    resource, n, _ = rows[pick % len(rows)]
    target = Target(resource=resource, thread=f"{resource}/t{n}")
    before = snapshot(memory)
    for name, is_async in order:
        with pytest.raises(OwnershipError):
            attempt(memory, name, is_async, target)
        assert snapshot(memory) == before, name


def test_the_signed_in_user_still_manages_their_own_memory() -> None:
    """The refusals are about the target: the same calls on the user's own thread work."""
    memory = engine("resource")
    memory.index(turn("peanut"), thread_id=OWN_THREAD, resource_id=USER)
    memory.index(turn("garden"), thread_id="bob/t0", resource_id="bob")
    assert signed_in(USER, lambda: memory.move_thread(OWN_THREAD, to=USER)) == 0  # a repair
    assert signed_in(USER, memory.stats).messages == 2  # only alice's, not bob's
    history = signed_in(USER, lambda: memory.chat_history(OWN_THREAD).messages)
    assert [m.text for m in history] == ["peanut", "noted: peanut"]
    assert signed_in(USER, lambda: memory.move_thread(OWN_THREAD, to=USER)) == 0  # a repair
    assert signed_in(USER, lambda: memory.for_thread(OWN_THREAD).clear_thread(OWN_THREAD)) == 2
    assert asigned_in(USER, lambda: memory.aforget_resource(USER)) == 0
    assert memory.stats(resource_id="bob").messages == 2  # bob's untouched


def test_a_chat_history_kept_across_runs_reads_as_each_runs_user() -> None:
    """A history kept per session (LangChain's examples keep a dict of them) once read
    every later run as its first run's user: bob's run read alice's session."""
    memory = engine("resource")
    history = memory.chat_history("alice/s1")
    signed_in(USER, lambda: history.add_messages(turn("my pin is 1234")))
    assert [m.text for m in signed_in(USER, lambda: history.messages)] == [
        "my pin is 1234",
        "noted: my pin is 1234",
    ]
    with pytest.raises(OwnershipError):
        signed_in("bob", lambda: history.messages)
    with pytest.raises(OwnershipError):
        asigned_in("bob", history.aget_messages)
    with pytest.raises(OwnershipError):  # outside any run: the last run's user, bob
        history.add_messages(turn("late"))
    signed_in(USER, lambda: history.messages)
    history.add_messages(turn("later"))  # after alice's run: alice
    assert memory.stats(resource_id=USER, thread_id="alice/s1").messages == 4


def test_a_signed_in_user_cannot_revive_another_users_forgotten_thread() -> None:
    """Restoring once lifted bob's retirement, so a late write brought his thread back."""
    memory = engine("resource")
    memory.index(turn("garden"), thread_id="bob/t0", resource_id="bob")
    memory.forget_thread("bob/t0")
    with pytest.raises(OwnershipError, match="administrator"):
        signed_in(USER, lambda: memory.restore_thread("bob/t0"))
    with pytest.raises(OwnershipError, match="administrator"):
        asigned_in(USER, lambda: memory.arestore_thread("bob/t0"))
    assert memory.storage.is_forgotten("bob/t0")
    assert memory.index(turn("late"), thread_id="bob/t0", resource_id="bob").forgotten
    assert memory.restore_thread("bob/t0")  # an administrator's process may


def test_without_a_signed_in_user_an_explicit_resource_holds_the_call_to_it() -> None:
    """The same rule outside a server: a call made for a resource stays in it."""
    memory = engine("resource")
    memory.index(turn("garden"), thread_id="bob/t0", resource_id="bob")
    with pytest.raises(OwnershipError):
        memory.stats(resource_id="alice", thread_id="bob/t0")
    with pytest.raises(OwnershipError):
        memory.for_thread("alice/t0", "alice").forget_thread("bob/t0")
    with pytest.raises(OwnershipError):
        memory.for_thread("alice/t0", "alice").move_thread("bob/t0", to="alice")
    with pytest.raises(OwnershipError):
        memory.chat_history("bob/t0", resource_id="alice").messages  # noqa: B018
    assert memory.stats(thread_id="bob/t0").messages == 2  # an admin call: no resource
    assert memory.forget_thread("bob/t0") == 2


def test_with_options_keeps_a_views_ids() -> None:
    """A `for_thread` view changed with `with_options` stays bound to its conversation."""
    memory = engine("resource")
    view = memory.for_thread("alice/t0", "alice").with_options(top_k=1, scope="thread")
    assert (view.top_k, view.scope) == (1, "thread")
    view.save_context({"input": "my sister lives in Lisbon"}, {"output": "noted"})
    assert memory.stats(resource_id="alice", thread_id="alice/t0").messages == 2
    recalled = view.load_memory_variables({"input": "where does my sister live?"})["history"]
    assert [m.text for m in recalled] == ["my sister lives in Lisbon", "noted"]
    view.clear()
    assert memory.stats(thread_id="alice/t0").messages == 0


# A history object kept and reused (e.g. a module-level one): its first user's resource is
# remembered for `add_messages`, but every later call is checked against the run's user.
HISTORY_CALLS: dict[str, Callable[[Any], object]] = {
    "messages": lambda h: h.messages,
    "add_messages": lambda h: h.add_messages(turn("planted")),
    "clear": lambda h: h.clear(),
}
AHISTORY_CALLS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "aget_messages": lambda h: h.aget_messages(),
    "aadd_messages": lambda h: h.aadd_messages(turn("planted")),
    "aclear": lambda h: h.aclear(),
}
HISTORY_ORDER = [(n, False) for n in HISTORY_CALLS] + [(n, True) for n in AHISTORY_CALLS]


def use_history(history: SemanticRecallChatHistory, name: str, is_async: bool) -> None:
    """Call `name` on the history inside a run of the signed-in user."""
    if is_async:
        acall = AHISTORY_CALLS[name]
        asigned_in(USER, lambda: acall(history))
    else:
        call = HISTORY_CALLS[name]
        signed_in(USER, lambda: call(history))


def first_use(memory: SemanticRecall, owner: str, text: str, how: str) -> SemanticRecallChatHistory:
    """A history of one of `owner`'s sessions, used once by `owner` as `how` says."""
    session = f"{owner}/shared"
    if how == "explicit":  # bound to its owner, used outside any run
        history = memory.chat_history(session, resource_id=owner)
        history.add_messages(turn(text))
        return history
    history = memory.chat_history(session)  # its owner comes from the first run

    def add(_: object = None) -> list[int]:
        history.add_messages(turn(text))
        return []

    if how == "signed in":
        signed_in(owner, add)
    else:
        config: RunnableConfig = {"configurable": {"resource_id": owner}}
        RunnableLambda(add).invoke(None, config)
    return history


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    victim=VICTIMS,
    text=st.lists(WORDS, min_size=1, max_size=3).map(" ".join),
    how=st.sampled_from(["signed in", "explicit", "config"]),
    order=st.permutations(HISTORY_ORDER),
    scope=st.sampled_from(["resource", "thread"]),
)
def test_a_reused_chat_history_never_reads_another_users_session(
    victim: str, text: str, how: str, order: list[tuple[str, bool]], scope: str
) -> None:
    memory = engine(scope)
    history = first_use(memory, victim, text, how)
    before = snapshot(memory)
    for name, is_async in order:
        with pytest.raises(OwnershipError):
            use_history(history, name, is_async)
        assert snapshot(memory) == before, name
    owners = memory.chat_history(history.session_id, resource_id=victim)
    assert [m.text for m in owners.messages] == [text, f"noted: {text}"]  # still its owner's


# A call given its own `config=` inside a signed-in run: LangChain's `ensure_config`
# lets that config's `configurable` replace the run's, signed-in user included.
CONFIG_CALLS: dict[str, Callable[[SemanticRecall, Target], Awaitable[object] | object]] = {
    "index(config=other)": lambda m, t: m.index(turn("planted"), config=_config_of(t)),
    "index(config=thread)": lambda m, t: m.index(turn("planted"), config=_thread_config(t)),
    "aindex(config=other)": lambda m, t: m.aindex(turn("planted"), config=_config_of(t)),
    "search(config=other)": lambda m, t: m.search("garden", config=_config_of(t)),
    "asearch(config=other)": lambda m, t: m.asearch("garden", config=_config_of(t)),
    "recall(config=other)": lambda m, t: m.recall([HumanMessage("garden")], config=_config_of(t)),
    "invoke(other config)": lambda m, t: m.invoke([HumanMessage("garden")], _config_of(t)),
    "ainvoke(other config)": lambda m, t: m.ainvoke([HumanMessage("garden")], _config_of(t)),
    "retriever.invoke(other config)": lambda m, t: m.as_retriever().invoke("garden", _config_of(t)),
    "retriever.ainvoke(other config)": lambda m, t: m.as_retriever().ainvoke(
        "garden", _config_of(t)
    ),
    "tool.invoke(other config)": lambda m, t: m.as_tool().invoke(
        {"query": "garden"}, _config_of(t)
    ),
    "tool.ainvoke(other config)": lambda m, t: m.as_tool().ainvoke(
        {"query": "garden"}, _config_of(t)
    ),
}


@pytest.mark.parametrize("scope", ["resource", "thread"])
@pytest.mark.parametrize("name", sorted(CONFIG_CALLS))
def test_a_config_given_inside_a_signed_in_run_keeps_the_signed_in_user(
    name: str, scope: str
) -> None:
    """A call's own `config=` replaced the run's, signed-in user and all: inside alice's
    run, `index(..., config={"configurable": {"thread_id": <bob's>}})` wrote into bob's
    thread and `search(config=<bob's>)` read bob's memory."""
    memory = engine(scope)
    memory.index(turn("garden"), thread_id="bob/t0", resource_id="bob")
    target = Target(resource="bob", thread="bob/t0")
    before = snapshot(memory)

    async def acall() -> object:
        result = CONFIG_CALLS[name](memory, target)
        return await result if isinstance(result, Awaitable) else result

    with pytest.raises(OwnershipError):
        asigned_in(USER, acall)
    assert snapshot(memory) == before


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize(
    "said",
    [
        [AIMessage("Your PIN is 4711.", id="b2")],  # his words exactly: was accepted
        [AIMessage("Your PIN is 0000.", id="b2")],  # a wrong guess: was refused
        [],
    ],
)
def test_the_index_side_of_a_turn_refuses_another_users_thread_whatever_it_sends(
    is_async: bool, said: list[Any]
) -> None:
    """The index side of a turn read another user's thread by id before any check: a
    turn with nothing new to write (his message id and his exact words) was accepted,
    a wrong guess refused, which confirmed his words one guess at a time (an audit)."""
    from langchain_semantic_recall.errors import ThreadOwnerError
    from langchain_semantic_recall.turn_index import aindex_new_messages, index_new_messages

    memory = engine("resource")
    bob = [HumanMessage("remember my PIN", id="b1"), AIMessage("Your PIN is 4711.", id="b2")]
    memory.index(bob, thread_id="bob-t", resource_id="bob")
    before = snapshot(memory)

    def write() -> object:
        if is_async:
            return asigned_in(USER, lambda: aindex_new_messages(memory, said, thread_id="bob-t"))
        return signed_in(USER, lambda: index_new_messages(memory, said, thread_id="bob-t"))

    with pytest.raises(ThreadOwnerError, match="another resource"):
        write()
    assert snapshot(memory) == before


# The same calls with nothing to search for: an empty or blank query, a turn without
# human text. They answered "nothing" for another user's thread where a query got
# `OwnershipError`: refused now whatever the input, as the index side refuses.
BLANK_CALLS: dict[str, Callable[[SemanticRecall, str], Awaitable[object] | object]] = {
    "search('')": lambda m, t: m.search("", thread_id=t),
    "search('  ')": lambda m, t: m.search("  \n", thread_id=t),
    "asearch('')": lambda m, t: m.asearch("", thread_id=t),
    "recall([])": lambda m, t: m.recall([], thread_id=t),
    "recall(ai only)": lambda m, t: m.recall([AIMessage("ok")], thread_id=t),
    "arecall(blank human)": lambda m, t: m.arecall([HumanMessage(" ")], thread_id=t),
    "invoke(ai only)": lambda m, t: m.invoke([AIMessage("ok")], {"configurable": {"thread_id": t}}),
    "retriever.invoke('')": lambda m, t: m.as_retriever().invoke(
        "", {"configurable": {"thread_id": t}}
    ),
    "tool.ainvoke('')": lambda m, t: m.as_tool().ainvoke(
        {"query": ""}, {"configurable": {"thread_id": t}}
    ),
}


@pytest.mark.parametrize("scope", ["resource", "thread"])
@pytest.mark.parametrize("name", sorted(BLANK_CALLS))
def test_a_blank_query_naming_another_users_thread_is_refused_too(name: str, scope: str) -> None:
    memory = engine(scope)
    memory.index(turn("garden"), thread_id="bob/t0", resource_id="bob")
    memory.index(turn("garden"), thread_id=OWN_THREAD, resource_id=USER)

    async def acall(thread: str) -> object:
        result = BLANK_CALLS[name](memory, thread)
        return await result if isinstance(result, Awaitable) else result

    with pytest.raises(OwnershipError):
        asigned_in(USER, lambda: acall("bob/t0"))
    own = asigned_in(USER, lambda: acall(OWN_THREAD))  # the user's own: no error, no memory
    assert "garden" not in str(own)


@pytest.mark.parametrize("is_async", [False, True])
def test_purge_is_refused_to_a_signed_in_user_and_a_view_and_changes_nothing(
    is_async: bool,
) -> None:
    """A signed-in user's purge rebuilt every resource's files inside a live server (whose
    other calls it is not safe beside) and returned the whole store's sizes."""
    memory = engine("resource")
    memory.index(turn("garden"), thread_id="bob/t0", resource_id="bob")
    memory.index(turn("garden"), thread_id=OWN_THREAD, resource_id=USER)
    memory.forget_thread("bob/t0")  # something for a purge to erase
    before = snapshot(memory)
    view = memory.for_thread(OWN_THREAD, USER)
    with pytest.raises(OwnershipError, match="purge rewrites the whole store"):
        asigned_in(USER, memory.apurge) if is_async else signed_in(USER, memory.purge)
    with pytest.raises(OwnershipError, match="for_thread view"):
        asyncio.run(view.apurge()) if is_async else view.purge()
    assert snapshot(memory) == before
    result = asyncio.run(memory.apurge()) if is_async else memory.purge()  # an admin's: runs
    assert result.storage.backend == "InMemoryStorage"
