"""A `for_thread` view acts for its own resource only, as a signed-in user does.

A view bound to alice (`memory.for_thread(t, "alice")`) refused every call that named
bob's thread, but obeyed one that named bob himself: `search(resource_id="bob")`
returned bob's memory, `forget_resource("bob")` deleted it, `bulk_index` imported into
his; and a run config naming bob's conversation was ignored unsaid (a message meant for
him was filed in alice's). Every such call of a view is now refused with
`IdentityMismatchError` and changes nothing; the victims (look-alikes of the view's
resource among them) and histories are generated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.errors import IdentityMismatchError, OwnershipError
from tests.unit.test_signed_in_user import (
    FUTURE,
    OWN_THREAD,
    USER,
    VICTIMS,
    WORDS,
    engine,
    snapshot,
    turn,
)

Call = Callable[[SemanticRecall, str], object]
ACall = Callable[[SemanticRecall, str], Awaitable[object]]

# Each call of a view bound to USER that names another resource `r` explicitly.
SYNC_CALLS: dict[str, Call] = {
    "search": lambda v, r: v.search("lisbon", resource_id=r),
    "search(scope=resource)": lambda v, r: v.search("lisbon", resource_id=r, scope="resource"),
    "index": lambda v, r: v.index(turn("planted"), thread_id="new", resource_id=r),
    "stats": lambda v, r: v.stats(resource_id=r),
    "reindex": lambda v, r: v.reindex(resource_id=r),
    "forget_resource": lambda v, r: v.forget_resource(r),
    "forget_before": lambda v, r: v.forget_before(FUTURE, resource_id=r),
    "clear_thread": lambda v, r: v.clear_thread(f"{r}/t0", resource_id=r),
    "forget_thread": lambda v, r: v.forget_thread(f"{r}/t0", resource_id=r),
    "move_thread(give)": lambda v, r: v.move_thread(OWN_THREAD, to=r),
    "chat_history.messages": lambda v, r: v.chat_history(f"{r}/t0", resource_id=r).messages,
    "for_thread(other).clear": lambda v, r: v.for_thread(f"{r}/t0", r).clear(),
    "bulk_index": lambda v, r: v.bulk_index([(f"{r}/t0", r, turn("planted"))]),
    "index(config)": lambda v, r: v.index(turn("planted"), config=other_run(r)),
    "recall(config)": lambda v, r: v.recall(turn("lisbon")[:1], config=other_run(r)),
    "search(config)": lambda v, r: v.search("lisbon", config=other_run(r)),
    "invoke(config)": lambda v, r: v.invoke(turn("lisbon")[:1], other_run(r)),
    "retriever(config)": lambda v, r: v.as_retriever().invoke("lisbon", other_run(r)),
    "tool(config)": lambda v, r: v.as_tool().invoke({"query": "lisbon"}, other_run(r)),
    "index(top-level config)": lambda v, r: v.index(turn("planted"), config=top_level(r)),
    "recall(top-level config)": lambda v, r: v.recall(turn("lisbon")[:1], config=top_level(r)),
    "invoke(top-level config)": lambda v, r: v.invoke(turn("lisbon")[:1], top_level(r)),
}
ASYNC_CALLS: dict[str, ACall] = {
    "asearch": lambda v, r: v.asearch("lisbon", resource_id=r),
    "aindex": lambda v, r: v.aindex(turn("planted"), thread_id="new", resource_id=r),
    "astats": lambda v, r: v.astats(resource_id=r),
    "aforget_resource": lambda v, r: v.aforget_resource(r),
    "aforget_before": lambda v, r: v.aforget_before(FUTURE, resource_id=r),
    "aclear_thread": lambda v, r: v.aclear_thread(f"{r}/t0", resource_id=r),
    "abulk_index": lambda v, r: v.abulk_index([(f"{r}/t0", r, turn("planted"))]),
    "aindex(config)": lambda v, r: v.aindex(turn("planted"), config=other_run(r)),
}


def other_run(resource: str) -> RunnableConfig:
    """A run config naming another resource's conversation (the view's ids won, unsaid)."""
    return {"configurable": {"thread_id": f"{resource}/t0", "resource_id": resource}}


def top_level(resource: str) -> RunnableConfig:
    """The same, at the config's top level, where LangChain reads ids too (`ensure_config`)."""
    return {"thread_id": f"{resource}/t0", "resource_id": resource}  # type: ignore[typeddict-unknown-key]


CALLS = [(name, False) for name in SYNC_CALLS] + [(name, True) for name in ASYNC_CALLS]


def attempt(view: SemanticRecall, name: str, is_async: bool, victim: str) -> None:
    if is_async:
        asyncio.run(ASYNC_CALLS[name](view, victim))  # type: ignore[arg-type]
    else:
        SYNC_CALLS[name](view, victim)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    victims=st.lists(VICTIMS, min_size=1, max_size=4, unique=True),
    words=st.lists(WORDS, min_size=1, max_size=3).map(" ".join),
    order=st.permutations(CALLS),
    pick=st.integers(0, 100),
    view_options=st.sampled_from([{}, {"top_k": 1}]),
)
def test_a_view_refuses_every_call_that_names_another_resource(
    victims: list[str],
    words: str,
    order: list[tuple[str, bool]],
    pick: int,
    view_options: dict[str, int],
) -> None:
    memory = engine("resource")
    memory.index(turn(f"lisbon {words}"), thread_id=OWN_THREAD, resource_id=USER)
    for victim in victims:
        memory.index(turn(f"lisbon {words}"), thread_id=f"{victim}/t0", resource_id=victim)
    view = memory.for_thread(OWN_THREAD, USER)
    view = view.with_options(**view_options) if view_options else view  # keeps the ids
    victim = victims[pick % len(victims)]
    before = snapshot(memory)
    for name, is_async in order:
        with pytest.raises(IdentityMismatchError, match="bound to"):
            attempt(view, name, is_async, victim)
        assert snapshot(memory) == before, name


def test_a_view_still_acts_for_its_own_resource_and_the_engine_for_any() -> None:
    memory = engine("resource")
    memory.index(turn("lisbon trip"), thread_id=OWN_THREAD, resource_id=USER)
    memory.index(turn("lisbon flat"), thread_id="bob/t0", resource_id="bob")
    view = memory.for_thread(OWN_THREAD, USER)
    assert {hit.thread_id for hit in view.search("lisbon", resource_id=USER)} == {OWN_THREAD}
    assert view.stats(resource_id=USER).messages == 2
    assert {hit.thread_id for hit in memory.search("lisbon", resource_id="bob")} == {"bob/t0"}
    assert memory.forget_resource("bob") == 2  # the engine itself is no view


def test_integer_ids_name_the_same_resource_and_thread_as_their_text() -> None:
    """`for_thread(42, 7)` then `search(resource_id=7)` was refused: 7 is not "7"."""
    memory = engine("resource")
    memory.index(turn("lisbon trip"), thread_id="42", resource_id="7")
    view = memory.for_thread(42, 7)  # type: ignore[arg-type]
    assert view.search("lisbon", resource_id=7)  # type: ignore[arg-type]
    assert view.for_thread(43, 7).stats().messages == 2  # type: ignore[arg-type]
    view.index(turn("porto"), config={"configurable": {"thread_id": 42}})
    view.index(turn("porto"), config={"thread_id": 42})  # type: ignore[typeddict-unknown-key]


def test_a_view_may_not_restore_a_thread_nor_take_one_from_a_session_key() -> None:
    """A view restored any forgotten thread (a signed-in user may not: a retired id keeps
    no owner), and a config naming another thread under `session_id` was ignored."""
    memory = engine("resource")
    memory.index(turn("bob's plan"), thread_id="bob/t0", resource_id="bob")
    memory.forget_thread("bob/t0")
    view = memory.for_thread(OWN_THREAD, USER)
    with pytest.raises(OwnershipError, match="for_thread view"):
        view.restore_thread("bob/t0")
    assert memory.storage.is_forgotten("bob/t0")
    other_session: RunnableConfig = {"configurable": {"session_id": "s2"}}
    with pytest.raises(IdentityMismatchError, match="bound to"):
        view.search("lisbon", config=other_session)


def test_the_engine_imports_for_anyone_inside_a_run_that_names_a_resource() -> None:
    """Only a view or a signed-in user is held to one resource: an engine's bulk_index
    inside a run whose config names alice still imports bob's conversation."""
    memory = engine("resource")

    def run(_: object) -> list[object]:
        return [memory.bulk_index([("bob/t0", "bob", turn("bob's plan"))])]

    RunnableLambda(run).invoke(None, {"configurable": {"resource_id": USER}})
    assert memory.stats(resource_id="bob").messages == 2
