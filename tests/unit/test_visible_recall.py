"""Visible recall: what each recall injected, where LangChain users look.

A capturing callback handler (no network) sees a `semantic_recall` child run whose
outputs are the report; the graph's `recalled_memory` channel and the middleware's state
update carry the same report. Sync and async on every surface.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_semantic_recall.graph import RECALL_KEY, create_recall_graph
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from langchain_semantic_recall.recall_report import RUN_NAME, RecallReport
from langchain_semantic_recall.turns import RecalledMemory
from tests.fakes import SECRETS, TOPICS, FactsMemory, FakeChatModel

ALICE = {"configurable": {"thread_id": "chat-1", "resource_id": "alice"}}


class Capture(BaseCallbackHandler):
    """Every chain run: name, parent, inputs, outputs, error (what a tracer records)."""

    def __init__(self) -> None:
        self.runs: dict[UUID, dict[str, Any]] = {}

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = {"name": kwargs.get("name"), "parent": parent_run_id, "inputs": inputs}

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.runs[run_id]["outputs"] = outputs

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.runs[run_id]["error"] = error

    def on_retriever_start(
        self,
        serialized: Any,
        query: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = {"name": kwargs.get("name"), "parent": parent_run_id, "inputs": query}

    def recalls(self) -> list[dict[str, Any]]:
        return [run for run in self.runs.values() if run["name"] == RUN_NAME]

    def name_of(self, run_id: UUID | None) -> str | None:
        return None if run_id is None else self.runs[run_id]["name"]


def question(topic: str, message_id: str = "q1") -> list[HumanMessage]:
    return [HumanMessage(f"{topic}?", id=message_id)]


def check_report(outputs: dict[str, Any], topic: str = TOPICS[0]) -> None:
    assert outputs["status"] == "injected"
    assert outputs["message_ids"] == [f"alice-{topic}"]
    assert outputs["threads"] == ["alice-notes"]
    assert outputs["query"] == f"{topic}?"
    (item,) = outputs["items"]
    assert item["placed"] == "block"
    assert item["hit"] is True
    assert 0.3 <= item["score"] <= 1.0
    assert item["created_at"].endswith("+00:00")
    assert item["chars"] == len(f"{topic} {SECRETS[0]}")
    assert outputs["injected_chars"] > item["chars"]  # the block's frame around it


def test_invoke_reports_as_a_named_child_run() -> None:
    facts, capture = FactsMemory(), Capture()
    injected = facts.engine.invoke(question(TOPICS[0]), {**ALICE, "callbacks": [capture]})
    (run,) = capture.recalls()
    assert capture.name_of(run["parent"]) == "SemanticRecall"  # under the runnable's own run
    assert run["inputs"]["resource_id"] == "alice"
    check_report(run["outputs"])
    block = next(m for m in injected if isinstance(m, SystemMessage))
    assert len(block.text) == run["outputs"]["injected_chars"]


def test_ainvoke_reports_as_a_named_child_run() -> None:
    facts, capture = FactsMemory(), Capture()
    asyncio.run(facts.engine.ainvoke(question(TOPICS[0]), {**ALICE, "callbacks": [capture]}))
    (run,) = capture.recalls()
    assert capture.name_of(run["parent"]) == "SemanticRecall"
    check_report(run["outputs"])


def test_recall_and_arecall_report_under_the_given_config() -> None:
    facts, capture = FactsMemory(), Capture()
    config = {"callbacks": [capture]}
    facts.engine.recall(question(TOPICS[0]), thread_id="c", resource_id="alice", config=config)
    asyncio.run(
        facts.engine.arecall(question(TOPICS[0]), thread_id="c", resource_id="alice", config=config)
    )
    runs = capture.recalls()
    assert len(runs) == 2
    for run in runs:
        check_report(run["outputs"])


def test_nothing_recalled_and_failures_are_reported_too() -> None:
    facts, capture = FactsMemory(), Capture()
    config = {**ALICE, "callbacks": [capture]}
    facts.engine.invoke([SystemMessage("no user text")], config)
    facts.embeddings.fail = RuntimeError("embedder down")
    facts.engine.invoke(question(TOPICS[1]), config)
    no_query, failed = (run["outputs"] for run in capture.recalls())
    assert no_query["status"] == "no query"
    assert no_query["message_ids"] == []
    assert failed["status"] == "failed"
    assert "embedder down" in failed["error"]


def test_the_graph_channel_and_the_callback_tree_show_the_report() -> None:
    for is_async in (False, True):  # each on a fresh memory (the first turn is stored)
        facts = FactsMemory()
        graph = create_recall_graph(FakeChatModel(), facts.engine, checkpointer=InMemorySaver())
        capture = Capture()
        config = {"configurable": {"thread_id": f"g-{is_async}", "resource_id": "alice"}}
        config["callbacks"] = [capture]  # type: ignore[assignment]
        inputs = {"messages": question(TOPICS[0], f"q-{is_async}")}
        if is_async:

            async def collect(
                config: Any = config, inputs: Any = inputs, graph: Any = graph
            ) -> list[Any]:
                return [u async for u in graph.astream(inputs, config, stream_mode="updates")]

            updates = asyncio.run(collect())
        else:
            updates = list(graph.stream(inputs, config, stream_mode="updates"))
        recalled = [
            u[node][RECALL_KEY] for u in updates for node in u if RECALL_KEY in (u[node] or {})
        ]
        (memory,) = recalled
        assert isinstance(memory, RecalledMemory)
        assert isinstance(memory.report, RecallReport)
        check_report(memory.report.as_dict())
        (run,) = capture.recalls()
        assert run["outputs"] == memory.report.as_dict()  # one report, two views
        assert capture.name_of(run["parent"]) == "recall"  # the graph's recall node


def test_the_middleware_state_update_and_the_callback_tree_show_the_report() -> None:
    for is_async in (False, True):
        facts = FactsMemory()
        agent = create_agent(
            FakeChatModel(),
            middleware=[SemanticRecallMiddleware(facts.engine)],
            checkpointer=InMemorySaver(),
        )
        capture = Capture()
        config = {"configurable": {"thread_id": f"m-{is_async}", "resource_id": "alice"}}
        config["callbacks"] = [capture]  # type: ignore[assignment]
        inputs = {"messages": question(TOPICS[0], f"q-{is_async}")}
        if is_async:

            async def collect(
                config: Any = config, inputs: Any = inputs, agent: Any = agent
            ) -> list[Any]:
                return [u async for u in agent.astream(inputs, config, stream_mode="updates")]

            updates = asyncio.run(collect())
        else:
            updates = list(agent.stream(inputs, config, stream_mode="updates"))
        recalled = [
            u[node][RECALL_KEY] for u in updates for node in u if RECALL_KEY in (u[node] or {})
        ]
        (memory,) = recalled
        check_report(memory.report.as_dict())
        (run,) = capture.recalls()
        assert run["outputs"] == memory.report.as_dict()
        assert capture.name_of(run["parent"]) == "SemanticRecallMiddleware.before_agent"


def test_the_report_names_only_what_the_capped_block_shows() -> None:
    """Under `max_block_chars` the block drops messages: the report must drop them too."""
    from datetime import UTC, datetime, timedelta

    from langchain_semantic_recall.injection import inject_reported
    from langchain_semantic_recall.records import RecallHit, StoredMessage

    start = datetime(2025, 1, 1, tzinfo=UTC)
    hits = []
    for i in range(40):
        stored = StoredMessage(
            id=f"o{i}",
            thread_id=f"other{i}",
            resource_id="u",
            role="user",
            text=f"fact number {i} " + "x" * 200,
            created_at=start + timedelta(minutes=i),
            payload="{}",
        )
        hits.append(RecallHit(stored, 0.9 - i / 100, (stored,)))
    out, report = inject_reported(
        [HumanMessage("q")], hits, thread_id="t", resource_id="u", query="q", max_block_chars=600
    )
    block = out[0].content
    assert isinstance(block, str)
    assert 0 < len(report.message_ids) < 40
    assert all(f"fact number {mid[1:]} " in block for mid in report.message_ids)
    assert report.injected_chars >= len(block)
