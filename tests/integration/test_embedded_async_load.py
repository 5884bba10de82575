"""Many async calls at once on `SemanticRecall.local`, some cancelled: nothing crosses users.

Hypothesis generates a schedule: turns of several users in several threads each, thread
forgets, and timeouts that cancel some `aindex` and `arecall` calls part way (via
`asyncio.wait_for`). The whole schedule runs at once (`asyncio.gather`) on the embedded
default (SQLite + embedded Chroma; the fake embedder keeps it fast). Checked: every
search hit and every recalled message is the asking user's; a cancelled `aindex` left its
turn whole or absent; one retry of every turn stores each exactly once with its vectors
(the retry reports `unchanged` for what had arrived); a forgotten thread keeps nothing,
and a write racing its forget says `forgotten`; `stats` shows no missing or orphan vector.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.storage import ScopeFilter
from tests.fakes import FakeEmbeddings

OWNER = re.compile(r"owner(\d+)x")
TIMEOUTS = [None, None, None, 0.0, 0.001, 0.005, 0.02]
"""A call's timeout: most run to the end, some are cancelled at once or part way."""


@dataclass(frozen=True)
class Turn:
    user: int
    thread: int
    n: int
    timeout: float | None

    @property
    def thread_id(self) -> str:
        return f"u{self.user}-t{self.thread}"

    def messages(self) -> list[BaseMessage]:
        words = f"owner{self.user}x topic{self.thread}y{self.n}"
        key = f"{self.thread_id}-n{self.n}"
        return [
            HumanMessage(f"note {words} about lisbon", id=f"{key}-q"),
            AIMessage(f"noted {words} lisbon", id=f"{key}-a"),
        ]


@dataclass(frozen=True)
class Plan:
    turns: list[Turn]
    forgets: set[tuple[int, int]]
    recalls: list[tuple[int, float | None]]


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    users = draw(st.integers(2, 4))
    turns = [
        Turn(user, thread, n, draw(st.sampled_from(TIMEOUTS)))
        for user in range(users)
        for thread in range(draw(st.integers(1, 3)))
        for n in range(draw(st.integers(1, 3)))
    ]
    threads = sorted({(t.user, t.thread) for t in turns})
    forgets = set(draw(st.lists(st.sampled_from(threads), max_size=2)))
    recalls = draw(
        st.lists(st.tuples(st.integers(0, users - 1), st.sampled_from(TIMEOUTS)), max_size=8)
    )
    return Plan(turns, forgets, recalls)


def owners(text: str) -> set[int]:
    return {int(n) for n in OWNER.findall(text)}


async def timed(call: Awaitable[Any], limit: float | None) -> Any:
    """The call's result, or None if its time `limit` cancelled it."""
    try:
        return await asyncio.wait_for(call, limit)
    except TimeoutError:
        return None


async def run_plan(memory: SemanticRecall, plan: Plan) -> set[tuple[int, int]]:
    """Run the plan at once; the threads a forget deleted something of (so retired).

    A forget that finds nothing stored yet returns 0 and retires nothing (an id nobody
    wrote is not reserved): a turn that arrives after it is kept.
    """
    forgotten: set[tuple[int, int]] = set()

    async def index(turn: Turn) -> None:
        call = memory.aindex(turn.messages(), thread_id=turn.thread_id, resource_id=f"u{turn.user}")
        result = await timed(call, turn.timeout)
        assert result is None or result.error is None, result.error

    async def recall(user: int, limit: float | None) -> None:
        question = HumanMessage(f"what did owner{user}x say about lisbon")
        call = memory.arecall([question], thread_id=f"u{user}-ask", resource_id=f"u{user}")
        recalled = await timed(call, limit)
        for message in recalled or []:
            assert owners(str(message.content)) <= {user}, message.content

    async def search(user: int) -> None:
        for hit in await memory.asearch(f"owner{user}x lisbon", resource_id=f"u{user}"):
            assert hit.message.resource_id == f"u{user}"
            assert owners(hit.message.text) == {user}

    async def forget(user: int, thread: int) -> None:
        if await memory.aforget_thread(f"u{user}-t{thread}", resource_id=f"u{user}"):
            forgotten.add((user, thread))

    calls = [index(t) for t in plan.turns]
    calls += [recall(user, timeout) for user, timeout in plan.recalls]
    calls += [search(user) for user, _ in plan.recalls]
    calls += [forget(user, thread) for user, thread in plan.forgets]
    await asyncio.gather(*calls)
    return forgotten


async def retry_and_check(
    memory: SemanticRecall, plan: Plan, forgotten: set[tuple[int, int]]
) -> None:
    stored_before = {m.id for m in await memory.storage.alist_messages(limit=10_000)}
    for turn in plan.turns:  # a cancelled turn is whole or absent
        ids = {m.id for m in turn.messages()}
        assert ids <= stored_before or not ids & stored_before, f"{turn} half stored"
    for turn in plan.turns:  # one retry of everything
        result = await memory.aindex(
            turn.messages(), thread_id=turn.thread_id, resource_id=f"u{turn.user}"
        )
        assert result.forgotten == ((turn.user, turn.thread) in forgotten)
        assert result.error is None
    stored = await memory.storage.alist_messages(limit=10_000)
    assert len(stored) == len({m.id for m in stored}), "a message stored twice"
    expected = {
        m.id for t in plan.turns if (t.user, t.thread) not in forgotten for m in t.messages()
    }
    assert {m.id for m in stored} == expected
    for message in stored:
        assert owners(message.text) == {int(message.resource_id[1:])}
    name = (await memory.aensure_index()).name
    for user in {t.user for t in plan.turns}:
        scope = ScopeFilter(resource_id=f"u{user}")
        mine = {m.id for m in stored if m.resource_id == f"u{user}"}
        assert await memory.vector_store.amessage_ids(name, scope) == mine
    stats = await memory.astats()
    assert (stats.missing_vectors, stats.orphan_vectors) == (0, 0)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plan=plans())
def test_concurrent_and_cancelled_calls_keep_users_apart(plan: Plan) -> None:
    with tempfile.TemporaryDirectory() as folder:
        memory = SemanticRecall.local(folder, embeddings=FakeEmbeddings(64))

        async def main() -> None:
            forgotten = await run_plan(memory, plan)
            await retry_and_check(memory, plan, forgotten)
            await memory.aclose()

        asyncio.run(main())
