"""Isolation is a security property: generated histories, never a foreign message.

Run against an honest vector index and one that ignores the scope entirely (as a buggy
or misconfigured backend would): storage re-checks the scope, so neither may leak.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.errors import InvalidInputError, InvalidOptionError, OwnershipError
from langchain_semantic_recall.filters import RESERVED_KEYS, metadata_conditions
from langchain_semantic_recall.messages import MEMORY_SOURCE
from langchain_semantic_recall.quoting import escape_label
from langchain_semantic_recall.records import ScopeFilter, VectorHit
from langchain_semantic_recall.vectors.langchain import LangChainVectorIndex
from langchain_semantic_recall.vectors.langchain_dialects import InMemoryDialect, Where
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

WORDS = ["lisbon", "tomato", "python", "peanut", "march", "garden", "deploy", "sister"]
# Ids that look alike on purpose: case, spaces, full-width and zero-width characters.
IDS = st.sampled_from(
    ["a", "A", "a ", " a", "ａ", "a\u200b", "b", "alice", "alice2", "é", "e\u0301"]
)


class IgnoresScope(InMemoryVectorIndex):
    """Returns the nearest vectors of every resource, whatever the scope says."""

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        with self._lock:
            everyone = {r.resource_id for r in self._get(name).records.values()}
        hits: list[VectorHit] = []
        for resource in everyone:
            hits.extend(super()._query(name, vector, k=k, scope=ScopeFilter(resource_id=resource)))
        return sorted(hits, key=lambda h: h.score, reverse=True)[:k]


history = st.lists(
    st.tuples(
        IDS,  # resource
        st.integers(0, 2),  # thread number within the resource
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    ),
    min_size=1,
    max_size=30,
)
queries = st.lists(
    st.tuples(
        IDS,
        st.integers(0, 3),
        st.sampled_from(["thread", "resource"]),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    ),
    min_size=1,
    max_size=6,
)


def thread_of(resource: str, n: int) -> str:
    return f"{resource}/t{n}"  # unique per resource, so ownership is never contested


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=history, asks=queries, leaky=st.booleans(), window=st.integers(0, 3))
@example(  # two resources whose thread ids differ by an invisible character only
    rows=[("a", 0, "lisbon"), ("a\u200b", 0, "lisbon")],
    asks=[("a\u200b", 1, "resource", "lisbon")],
    leaky=False,
    window=0,
)
def test_no_path_returns_a_message_of_another_resource(
    rows: list[tuple[str, int, str]],
    asks: list[tuple[str, int, str, str]],
    leaky: bool,
    window: int,
) -> None:
    storage = InMemoryStorage()
    vectors = IgnoresScope() if leaky else InMemoryVectorIndex()
    owner: dict[str, str] = {}
    labelled: dict[str, set[str]] = {}  # a label as the block shows it -> resources
    for n, (resource, thread_n, text) in enumerate(rows):
        thread = thread_of(resource, thread_n)
        cls = HumanMessage if n % 2 == 0 else AIMessage
        engines = SemanticRecall(
            storage=storage,
            vector_store=vectors,
            embeddings=FakeEmbeddings(),
            top_k=8,
            message_range=window,
        )
        engines.index([cls(text, id=f"m{n}")], thread_id=thread, resource_id=resource)
        owner[f"m{n}"] = resource
        labelled.setdefault(escape_label(thread), set()).add(resource)

    for resource, thread_n, scope, text in asks:
        engine = SemanticRecall(
            storage=storage,
            vector_store=vectors,
            embeddings=FakeEmbeddings(),
            top_k=8,
            message_range=window,
            scope=scope,
        )  # type: ignore[arg-type]
        thread = thread_of(resource, thread_n)
        for hit in engine.search(text, thread_id=thread, resource_id=resource):
            for message in hit.window:
                assert owner[message.id] == resource
                assert message.resource_id == resource
                if scope == "thread":
                    assert message.thread_id == thread
        result = engine.recall(
            [HumanMessage(text, id="live")], thread_id=thread, resource_id=resource
        )
        for message in result:
            if message.additional_kwargs.get("source") != MEMORY_SOURCE:
                continue
            if message.type == "system":  # the cross-thread block: check every label
                labels = re.findall(r'\[conversation "((?:[^"\\]|\\.)*)"\]', message.text)
                assert labels, message.text
                for label in labels:  # escaping may make two ids look alike: either fits
                    assert resource in labelled.get(label, set()), label
                assert scope == "resource"
            else:
                assert owner[message.id] == resource


PROJECTS = ["apollo", "gemini", "a", "A", "resource_id"]  # look-alikes and a reserved word
tagged_history = st.lists(
    st.tuples(
        IDS,  # resource
        st.integers(0, 2),  # thread number within the resource
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
        st.sampled_from([*PROJECTS, None]),  # the message's project tag (None: no metadata)
        st.integers(0, 30),  # its day
    ),
    min_size=1,
    max_size=30,
)
narrowings = st.tuples(
    st.one_of(
        st.none(),
        st.sampled_from(PROJECTS).map(lambda p: {"project": p}),
        st.lists(st.sampled_from(PROJECTS), min_size=1, max_size=3).map(
            lambda ps: {"project": {"$in": ps}}
        ),
    ),
    st.one_of(st.none(), st.integers(0, 30)),  # since: day
    st.one_of(st.none(), st.integers(0, 31)),  # until: day
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=tagged_history,
    asks=queries,
    narrowing=narrowings,
    leaky=st.booleans(),
    window=st.integers(0, 2),
)
def test_a_filter_never_widens_the_scope_and_every_hit_passes_it(
    rows: list[tuple[str, int, str, str | None, int]],
    asks: list[tuple[str, int, str, str]],
    narrowing: tuple[dict[str, object] | None, int | None, int | None],
    leaky: bool,
    window: int,
) -> None:
    """Generated tags, days and filters: never another resource's message, never a miss."""
    from datetime import UTC, datetime, timedelta

    start = datetime(2024, 1, 1, tzinfo=UTC)
    storage = InMemoryStorage()
    vectors = IgnoresScope() if leaky else InMemoryVectorIndex()  # the leak ignores filters too
    owner: dict[str, str] = {}
    tag: dict[str, str | None] = {}
    day: dict[str, int] = {}
    engine = SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=FakeEmbeddings(),
        top_k=8,
        message_range=window,
    )
    for n, (resource, thread_n, text, project, on) in enumerate(rows):
        when = (start + timedelta(days=on)).isoformat()
        said = HumanMessage(text, id=f"m{n}", additional_kwargs={"created_at": when})
        metadata = None if project is None else {"project": project}
        engine.index(
            [said],
            thread_id=thread_of(resource, thread_n),
            resource_id=resource,
            metadata=metadata,
        )
        owner[f"m{n}"], tag[f"m{n}"], day[f"m{n}"] = resource, project, on
    where, since_day, until_day = narrowing
    since = None if since_day is None else start + timedelta(days=since_day)
    until = None if until_day is None else start + timedelta(days=until_day)
    if since is not None and until is not None and since >= until:
        until = None
    wanted = None if where is None else where["project"]
    allowed = {wanted} if isinstance(wanted, str) else set((wanted or {}).get("$in", []))  # type: ignore[union-attr]

    def passes(message_id: str) -> bool:
        if where is not None and tag[message_id] not in allowed:
            return False
        if since_day is not None and day[message_id] < since_day:
            return False
        return until is None or day[message_id] < (until - start).days

    for resource, thread_n, scope, text in asks:
        scoped = engine.with_options(scope=scope)
        thread = thread_of(resource, thread_n)
        hits = scoped.search(
            text, thread_id=thread, resource_id=resource, filter=where, since=since, until=until
        )
        for hit in hits:
            assert passes(hit.message.id)  # the filter selects hits...
            for message in hit.window:  # ...and never reaches past the caller's scope
                assert owner[message.id] == resource
                if scope == "thread":
                    assert message.thread_id == thread
        # counts hold too: exactly the caller's messages that pass, whatever the filter
        narrowed = ScopeFilter(
            resource_id=resource,
            metadata=metadata_conditions(where),
            since=since,
            until=until,
        )
        expected = sum(owner[m] == resource and passes(m) for m in owner)
        assert storage.count(narrowed) == expected
        assert vectors.count(engine.ensure_index().name, narrowed) == expected
        recalled = scoped.recall(
            [HumanMessage(text, id="live")],
            thread_id=thread,
            resource_id=resource,
            filter=where,
            since=since,
            until=until,
        )
        for message in recalled:
            if (
                message.additional_kwargs.get("source") == MEMORY_SOURCE
                and message.type != "system"
            ):
                assert owner[message.id] == resource


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=tagged_history, asks=queries, narrowing=narrowings, leaky=st.booleans())
def test_the_graphs_filter_never_widens_the_scope(
    rows: list[tuple[str, int, str, str | None, int]],
    asks: list[tuple[str, int, str, str]],
    narrowing: tuple[dict[str, object] | None, int | None, int | None],
    leaky: bool,
) -> None:
    """`create_recall_graph(filter=...)`, sync and async: only the caller's passing messages."""
    import asyncio

    from langchain_semantic_recall.graph import create_recall_graph
    from tests.fakes import FakeChatModel

    storage = InMemoryStorage()
    engine = SemanticRecall(
        storage=storage,
        vector_store=IgnoresScope() if leaky else InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        top_k=8,
    )
    tag: dict[str, str | None] = {}
    for n, (resource, thread_n, text, project, _day) in enumerate(rows):
        metadata = None if project is None else {"project": project}
        said = HumanMessage(text, id=f"m{n}")
        engine.index(
            [said], thread_id=thread_of(resource, thread_n), resource_id=resource, metadata=metadata
        )
        tag[f"m{n}"] = project
    where = narrowing[0]
    wanted = None if where is None else where["project"]
    allowed = {wanted} if isinstance(wanted, str) else set((wanted or {}).get("$in", []))  # type: ignore[union-attr]
    for n, (resource, thread_n, scope, text) in enumerate(asks):
        graph = create_recall_graph(FakeChatModel(), engine.with_options(scope=scope), filter=where)
        thread = thread_of(resource, thread_n)
        config = {"configurable": {"thread_id": thread, "resource_id": resource}}
        turn = {"messages": [HumanMessage(text)]}
        if n % 2:
            updates = asyncio.run(_updates(graph, turn, config))
        else:
            updates = list(graph.stream(turn, config, stream_mode="updates"))
        (report,) = [u["recall"]["recalled_memory"].report for u in updates if "recall" in u]
        assert report.status != "failed", report.error
        for item in report.items:
            assert storage.get_thread_owner(item.thread_id) == resource
            if scope == "thread":
                assert item.thread_id == thread
            if where is not None:  # the turns the graph stored carry no metadata
                assert tag.get(item.message_id) in allowed


def _passes(
    narrowing: tuple[dict[str, object] | None, int | None, int | None],
    project: str | None,
    on: int,
) -> bool:
    """Whether a message tagged `project`, of day `on`, passes `narrowing` (a `narrowings`)."""
    where, since_day, until_day = narrowing
    if where is not None:
        wanted = where["project"]
        allowed = {wanted} if isinstance(wanted, str) else set(wanted["$in"])  # type: ignore[index]
        if project not in allowed:
            return False
    return (since_day is None or on >= since_day) and (until_day is None or on < until_day)


def _refused(
    call: tuple[dict[str, object] | None, int | None, int | None],
    run: tuple[dict[str, object] | None, int | None, int | None],
) -> str | None:
    """What error a search narrowed by both must raise (None: none), as a `match`."""
    if call[0] is not None and run[0] is not None:
        allowed = [
            {w} if isinstance(w := where["project"], str) else set(w["$in"])  # type: ignore[index]
            for where in (call[0], run[0])
        ]
        if not allowed[0] & allowed[1]:
            return "no value both allow"
    starts = [n for n in (call[1], run[1]) if n is not None]
    ends = [n for n in (call[2], run[2]) if n is not None]
    if starts and ends and max(starts) >= min(ends):
        return "together hold nothing"
    return None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=tagged_history,
    asks=queries,
    call=narrowings,
    run=narrowings,
    leaky=st.booleans(),
)
def test_a_calls_narrowing_never_widens_its_runs(
    rows: list[tuple[str, int, str, str | None, int]],
    asks: list[tuple[str, int, str, str]],
    call: tuple[dict[str, object] | None, int | None, int | None],
    run: tuple[dict[str, object] | None, int | None, int | None],
    leaky: bool,
) -> None:
    """A call's filter and range under a run's `recall_*`: every hit passes both, or an error.

    The call's once replaced the run's, so `filter=` on a call found what the run's
    `recall_filter` kept out.
    """
    from datetime import UTC, datetime, timedelta

    start = datetime(2024, 1, 1, tzinfo=UTC)
    engine = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=IgnoresScope() if leaky else InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        top_k=8,
        message_range=1,
    )
    kept: dict[str, tuple[str | None, int]] = {}
    for n, (resource, thread_n, text, project, on) in enumerate(rows):
        when = (start + timedelta(days=on)).isoformat()
        said = HumanMessage(text, id=f"m{n}", additional_kwargs={"created_at": when})
        engine.index(
            [said],
            thread_id=thread_of(resource, thread_n),
            resource_id=resource,
            metadata=None if project is None else {"project": project},
        )
        kept[f"m{n}"] = (project, on)

    def day(n: int | None) -> datetime | None:
        return None if n is None else start + timedelta(days=n)

    assume(call[1] is None or call[2] is None or call[1] < call[2])
    assume(run[1] is None or run[2] is None or run[1] < run[2])
    for resource, thread_n, scope, text in asks:
        configurable = {"thread_id": thread_of(resource, thread_n), "resource_id": resource}
        config: Any = {
            "configurable": {
                **configurable,
                "recall_filter": run[0],
                "recall_since": day(run[1]),
                "recall_until": day(run[2]),
            }
        }
        search = engine.with_options(scope=scope).search
        narrowed = {"filter": call[0], "since": day(call[1]), "until": day(call[2])}
        refused = _refused(call, run)
        if refused is not None:  # nothing could pass both: an error, never a silent []
            with pytest.raises(InvalidInputError, match=refused):
                search(text, config=config, **narrowed)
            continue
        hits = search(text, config=config, **narrowed)
        for hit in hits:
            for message in hit.window:
                assert _passes(call, *kept[message.id]), (call, kept[message.id])
                assert _passes(run, *kept[message.id]), (run, kept[message.id])


async def _updates(graph: Any, turn: Any, config: Any) -> list[Any]:
    return [update async for update in graph.astream(turn, config, stream_mode="updates")]


@pytest.mark.parametrize("key", sorted(RESERVED_KEYS))
def test_a_filter_on_a_reserved_key_is_refused_everywhere(key: str) -> None:
    engine = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    engine.index([HumanMessage("hello lisbon")], thread_id="t", resource_id="alice")
    for call in (
        lambda: engine.search("lisbon", resource_id="alice", filter={key: "bob"}),
        lambda: engine.recall([HumanMessage("lisbon")], resource_id="alice", filter={key: "x"}),
        lambda: engine.index(
            [HumanMessage("x")], thread_id="t", resource_id="alice", metadata={key: 1}
        ),
    ):
        with pytest.raises(InvalidInputError, match="reserved"):
            call()
    from langchain_semantic_recall.graph import RecallNode, create_recall_graph
    from tests.fakes import FakeChatModel

    for build in (
        lambda: RecallNode(engine, filter={key: "bob"}),
        lambda: create_recall_graph(FakeChatModel(), engine, filter={key: "bob"}),
    ):
        with pytest.raises(InvalidOptionError, match="reserved"):
            build()


class _CarelessDialect(InMemoryDialect):
    """A custom dialect whose `select` ignores its conditions (a bug in user code)."""

    def select(
        self, store: Any, where: Where, *, limit: int | None = None
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        return super().select(store, {}, limit=limit)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=history, pick=st.integers(0, 100), whole_resource=st.booleans())
def test_a_langchain_store_never_deletes_or_counts_past_the_selection(
    rows: list[tuple[str, int, str]], pick: int, whole_resource: bool
) -> None:
    """A dialect whose select returned every document once made a forget delete them all."""
    from langchain_core.vectorstores import InMemoryVectorStore

    embeddings = FakeEmbeddings()
    vectors = LangChainVectorIndex(
        InMemoryVectorStore(embedding=embeddings), dialect=_CarelessDialect()
    )
    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=vectors, embeddings=embeddings, search_mode="dense"
    )
    for resource, n, text in rows:
        memory.index([HumanMessage(text)], thread_id=thread_of(resource, n), resource_id=resource)
    resource, n, _ = rows[pick % len(rows)]
    name = memory.ensure_index().name
    others = {r for r, _, _ in rows} - {resource}
    kept = {r: vectors.count(name, ScopeFilter(resource_id=r)) for r in others}
    assert kept == {r: memory.stats(resource_id=r).messages for r in others}
    if whole_resource:
        memory.forget_resource(resource)
    else:
        memory.forget_thread(thread_of(resource, n))
    assert {r: vectors.count(name, ScopeFilter(resource_id=r)) for r in others} == kept
    assert memory.stats(resource_id=resource).missing_vectors == 0


def _resource_state(memory: SemanticRecall) -> tuple[object, ...]:
    """Every stored message with its owner, and the vector ids of each resource."""
    name = memory.ensure_index().name
    stored = sorted(
        (m.id, m.thread_id, m.resource_id, m.text)
        for m in memory.storage.list_messages(None, limit=1000)
    )
    owners = sorted({owner for _, _, owner, _ in stored})
    vectors = {r: memory.vector_store.message_ids(name, ScopeFilter(resource_id=r)) for r in owners}
    return stored, vectors


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    owner=IDS,
    other=IDS,
    texts=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True),
    pick=st.integers(0, 3),
    signed_in=st.booleans(),
    asynchronous=st.booleans(),
    sqlite=st.booleans(),
)
def test_another_resource_replaying_a_stored_message_is_refused(
    *,
    owner: str,
    other: str,
    texts: list[str],
    pick: int,
    signed_in: bool,
    asynchronous: bool,
    sqlite: bool,
) -> None:
    """The same id and text indexed again for another resource once came back "unchanged":
    the thread's owner went unchecked, the fate confirmed a guess of the text, and the
    message's vector was written again under the other resource (lost to its owner)."""
    assume(owner != other)
    storage = SQLiteStorage(":memory:") if sqlite else InMemoryStorage()
    memory = SemanticRecall(
        storage=storage, vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    messages = [HumanMessage(f"{text} {n}", id=f"m{n}") for n, text in enumerate(texts)]
    memory.index(messages, thread_id="t", resource_id=owner)
    replay = [messages[pick % len(messages)]]  # the same id, the same text
    before = _resource_state(memory)

    def index() -> list[object]:
        ids = {"thread_id": "t"} if signed_in else {"thread_id": "t", "resource_id": other}
        if asynchronous:
            return [asyncio.run(memory.aindex(replay, **ids))]  # type: ignore[arg-type]
        return [memory.index(replay, **ids)]  # type: ignore[arg-type]

    config: RunnableConfig = {"configurable": {"langgraph_auth_user_id": other}}
    as_other = RunnableLambda(lambda _: index()) if signed_in else None
    with pytest.raises(OwnershipError):
        as_other.invoke(None, config) if as_other else index()
    assert _resource_state(memory) == before
