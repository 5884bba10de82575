"""What a search returns keeps the options a caller set, in every mode (generated).

For generated conversations and generated option sets (mode, `top_k`, `message_range`,
`message_budget`, `threshold`, `scope`, a filter and a time range), every answer holds to
docs/guide.md ("Options", "Concepts"): at most `top_k` hits; each window holds its hit,
in thread order, within the range, in the hit's thread; no more distinct messages than
the budget; no hit under the threshold; only messages of the scope that pass the filter
and the range; and the async twin gives the same answer.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import InMemoryStorage, SemanticRecall
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings

START = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ["lighthouse", "keeper", "lamp", "storm", "harbour", "ferry", "tide", "gull"]
rows = st.lists(
    st.tuples(
        st.sampled_from(["alice", "bob"]),
        st.integers(0, 2),  # thread
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
        st.sampled_from(["apollo", "gemini", None]),
        st.integers(0, 9),  # day
    ),
    min_size=1,
    max_size=24,
)
options = st.fixed_dictionaries(
    {
        "search_mode": st.sampled_from(["hybrid", "keyword", "dense"]),
        "top_k": st.integers(1, 8),
        "message_range": st.tuples(st.integers(0, 3), st.integers(0, 3)),
        "message_budget": st.one_of(st.just("auto"), st.none(), st.integers(1, 10)),
        "threshold": st.one_of(st.none(), st.floats(0, 1)),
        "scope": st.sampled_from(["thread", "resource"]),
    }
)
narrowing = st.fixed_dictionaries(
    {
        "filter": st.one_of(
            st.none(),
            st.sampled_from(["apollo", "gemini"]).map(lambda p: {"project": p}),
        ),
        "since": st.one_of(st.none(), st.integers(0, 9)),
        "until": st.one_of(st.none(), st.integers(1, 10)),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=rows, chosen=options, narrowed=narrowing, query=st.sampled_from(WORDS))
def test_every_answer_keeps_the_options(
    history: list[tuple[str, int, str, str | None, int]],
    chosen: dict[str, Any],
    narrowed: dict[str, Any],
    query: str,
) -> None:
    if chosen["search_mode"] == "keyword":
        chosen["threshold"] = None  # refused in keyword mode (tested elsewhere)
    memory = SemanticRecall(
        storage=InMemoryStorage(),
        vector_store=InMemoryVectorIndex(),
        embeddings=FakeEmbeddings(),
        **chosen,
    )
    kept: dict[str, tuple[str, str | None, int]] = {}
    for n, (owner, thread, text, project, day) in enumerate(history):
        when = (START + timedelta(days=day)).isoformat()
        said = HumanMessage(text, id=f"h{n}", additional_kwargs={"created_at": when})
        answer = AIMessage(f"noted {text}", id=f"a{n}", additional_kwargs={"created_at": when})
        metadata = None if project is None else {"project": project}
        memory.index(
            [said, answer], thread_id=f"{owner}-{thread}", resource_id=owner, metadata=metadata
        )
        kept[f"h{n}"] = kept[f"a{n}"] = (f"{owner}-{thread}", project, day)
    since, until = narrowed["since"], narrowed["until"]
    if since is not None and until is not None and since >= until:
        until = None
    call = {
        "filter": narrowed["filter"],
        "since": None if since is None else START + timedelta(days=since),
        "until": None if until is None else START + timedelta(days=until),
    }
    hits = memory.search(query, thread_id="alice-0", resource_id="alice", **call)
    again = asyncio.run(memory.asearch(query, thread_id="alice-0", resource_id="alice", **call))
    assert [(h.message.id, h.score, [m.id for m in h.window]) for h in again] == [
        (h.message.id, h.score, [m.id for m in h.window]) for h in hits
    ]
    plan = memory.message_range
    event(f"hits: {min(len(hits), 3)}")
    assert len(hits) <= memory.top_k
    shown = {m.id for hit in hits for m in hit.window}
    if memory.message_budget is not None:
        assert len(shown) <= memory.message_budget
    for hit in hits:
        if memory.threshold is not None:
            assert hit.score >= memory.threshold
        assert hit.message.id in {m.id for m in hit.window}
        seqs = [m.seq for m in hit.window]
        assert seqs == sorted(set(seqs))
        for message in hit.window:
            thread, project, day = kept[message.id]
            assert message.thread_id == hit.thread_id == thread
            assert -plan.before <= message.seq - hit.message.seq <= plan.after
            assert thread.startswith("alice-")
            if memory.scope == "thread":
                assert thread == "alice-0"
            if call["filter"] is not None:
                assert project == call["filter"]["project"]
            assert since is None or day >= since
            assert until is None or day < until
    if memory.search_mode == "dense":
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_an_engine_option_given_to_a_call_names_the_view_that_takes_it() -> None:
    """`search(scope=...)` works, so a stranger tries `recall(scope=...)`: it is refused
    (recall takes the engine's options), and the error says which view takes it."""
    import pytest

    memory = SemanticRecall(
        storage=InMemoryStorage(), vector_store=InMemoryVectorIndex(), embeddings=FakeEmbeddings()
    )
    turn = [HumanMessage("what did I say?")]
    with pytest.raises(TypeError, match=r"memory.with_options\(scope=...\)"):
        memory.recall(turn, thread_id="t", resource_id="r", scope="thread")
    with pytest.raises(TypeError) as refused:
        memory.recall(turn, thread_id="t", resource_id="r", colour="blue")
    assert "with_options" not in str(refused.value)  # not an option of anything
    view = memory.with_options(scope="thread")
    assert view.recall(turn, thread_id="t", resource_id="r") == turn  # nothing stored yet
