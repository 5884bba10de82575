"""Recall latency and indexing throughput: PostgreSQL + Chroma server next to the embedded default.

One run, the same synthetic history and the same queries on both:

- embedded: SQLite storage + embedded Chroma (``SemanticRecall.local``), in a temp folder;
- servers: PostgreSQL storage + a Chroma server, started here on loopback (a throwaway
  cluster and ``chroma run``), unless ``--pg-url`` / ``--chroma-url`` name running ones.

Measured: bulk indexing (one ``index`` call per conversation), live indexing (one call
per user + assistant turn), and ``recall`` in resource scope and in thread scope, each
query a new sentence about a stored topic. The embedder is the fast fake one by default
(``--embedder local`` for the real model), so the numbers are the backends' own cost.
10,000 messages is enough to see the difference; ``--messages 200`` is a smoke run.

    python benchmarks/scale_backends.py
    python benchmarks/scale_backends.py --messages 200 --queries 20
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from langchain_semantic_recall import SemanticRecall
from tests.fakes import FakeEmbeddings
from tests.integration.conftest import (
    ChromaServer,
    PostgresCluster,
    create_database,
    drop_database,
)

TOPICS = [
    *("Lisbon", "tomatoes", "the CSV loader", "my sister", "the invoice", "marathon"),
    *("the Python service", "a birthday party", "the garden", "piano lessons", "the new job"),
    *("a vegetarian menu", "the flight to Porto", "the migration", "my dog"),
]
VERBS = ["plan", "fix", "remember", "book", "cancel", "improve", "discuss", "prepare", "test"]
WHEN = ["next week", "in March", "on Friday", "tomorrow", "before the deadline", "this summer"]

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
Conversation = tuple[str, str, list[BaseMessage]]


def sentence(rng: random.Random) -> str:
    topic, verb, when = rng.choice(TOPICS), rng.choice(VERBS), rng.choice(WHEN)
    extra = " ".join(rng.choice(TOPICS + VERBS + WHEN) for _ in range(rng.randint(2, 12)))
    return f"We need to {verb} {topic} {when}; notes: {extra}."


def at(rng: random.Random) -> str:
    """A fixed creation time, so that both setups format the same memory block."""
    return (EPOCH + timedelta(minutes=rng.randrange(500_000))).isoformat()


def history(args: argparse.Namespace, rng: random.Random) -> list[Conversation]:
    threads = [
        (f"user-{r}", f"user-{r}-thread-{t}")
        for r in range(args.resources)
        for t in range(args.threads_per_resource)
    ]
    threads = threads[: max(1, args.messages // 2)]  # a small run keeps 2+ messages a thread
    per_thread = max(2, args.messages // len(threads))
    conversations: list[Conversation] = []
    for resource, thread in threads:
        messages: list[BaseMessage] = [
            (HumanMessage if n % 2 == 0 else AIMessage)(
                sentence(rng), id=f"{thread}-{n}", additional_kwargs={"created_at": at(rng)}
            )
            for n in range(per_thread)
        ]
        conversations.append((resource, thread, messages))
    return conversations


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Measures:
    bulk_rate: float
    turn_ms: list[float]
    recall_ms: list[float]
    thread_ms: list[float]
    recalled: list[str]
    """What recall injected for each query (to compare the two setups)."""


def measure(
    memory: SemanticRecall, conversations: list[Conversation], queries: int, seed: int
) -> Measures:
    memory.ensure_index()
    total = sum(len(m) for _, _, m in conversations)
    started = time.perf_counter()
    for resource, thread, messages in conversations:
        memory.index(messages, thread_id=thread, resource_id=resource)
    bulk = time.perf_counter() - started
    rng = random.Random(seed)
    turn_ms: list[float] = []
    for n in range(min(100, max(10, queries))):
        resource, thread, _ = rng.choice(conversations)
        when = {"created_at": at(rng)}
        pair = [
            HumanMessage(sentence(rng), id=f"live-{n}-u", additional_kwargs=when),
            AIMessage("ok", id=f"live-{n}-a", additional_kwargs=when),
        ]
        started = time.perf_counter()
        memory.index(pair, thread_id=thread, resource_id=resource)
        turn_ms.append(1000 * (time.perf_counter() - started))
    thread_memory = SemanticRecall(
        storage=memory.storage,
        vector_store=memory.vector_store,
        embeddings=memory.embeddings,
        index_name=memory.ensure_index().name,
        scope="thread",
    )
    recall_ms: list[float] = []
    thread_ms: list[float] = []
    recalled: list[str] = []
    for _ in range(queries):
        resource, thread, _messages = rng.choice(conversations)
        question = [HumanMessage(sentence(rng))]
        started = time.perf_counter()
        out = memory.recall(question, thread_id=f"{thread}-new", resource_id=resource)
        recall_ms.append(1000 * (time.perf_counter() - started))
        recalled.append("\n".join(str(m.content) for m in out[:-1]))
        started = time.perf_counter()
        thread_memory.recall(question, thread_id=thread, resource_id=resource)
        thread_ms.append(1000 * (time.perf_counter() - started))
    return Measures(total / bulk, turn_ms, recall_ms, thread_ms, recalled)


@contextmanager
def servers(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        admin = args.pg_url
        if admin is None:
            cluster = PostgresCluster()
            stack.callback(cluster.stop)
            admin = cluster.start().url()
        database = create_database(admin)
        stack.callback(drop_database, admin, database)
        chroma = args.chroma_url
        if chroma is None:
            server = ChromaServer()
            stack.callback(server.stop, remove=True)
            chroma = server.start().url
        yield database, chroma


def embedder(kind: str) -> Embeddings:
    if kind == "local":
        from langchain_semantic_recall.local_embeddings import LocalEmbeddings

        local = LocalEmbeddings()
        local.embed_documents(["warm up"])
        return local
    return FakeEmbeddings(384, model="fake-bow")


def row(label: str, left: str, right: str, ratio: str = "") -> None:
    print(f"{label:<34}{left:>22}{right:>26}{ratio:>10}")


def report(args: argparse.Namespace, total: int, embedded: Measures, server: Measures) -> None:
    print(
        f"\n{total:,} messages ({args.resources} resources x {args.threads_per_resource} threads), "
        f"{args.queries} queries, embedder: {args.embedder}\n"
    )
    row("", "embedded", "PostgreSQL +", "servers /")
    row("", "(SQLite + Chroma)", "Chroma server", "embedded")
    rates = (embedded.bulk_rate, server.bulk_rate)
    row(
        "bulk indexing (messages/s)",
        f"{rates[0]:,.0f}",
        f"{rates[1]:,.0f}",
        f"{rates[1] / rates[0]:.2f}x",
    )
    for label, left, right in (
        ("live turn indexing, ms", embedded.turn_ms, server.turn_ms),
        ("recall, resource scope, ms", embedded.recall_ms, server.recall_ms),
        ("recall, thread scope, ms", embedded.thread_ms, server.thread_ms),
    ):
        for q, name in ((0.5, "p50"), (0.95, "p95")):
            a, b = percentile(left, q), percentile(right, q)
            row(f"{label} {name}", f"{a:.1f}", f"{b:.1f}", f"{b / a:.2f}x" if a else "")
    same = sum(a == b for a, b in zip(embedded.recalled, server.recalled, strict=True))
    hits = sum(bool(a) for a in embedded.recalled)
    print(
        f"\nrecall injected memory for {hits} of {args.queries} queries; the two setups "
        f"injected identical memory for {same} of {args.queries}"
    )


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--resources", type=int, default=20)
    parser.add_argument("--threads-per-resource", type=int, default=10)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--embedder", choices=("fake", "local"), default="fake")
    parser.add_argument("--pg-url", help="a running PostgreSQL (admin URL: may CREATE DATABASE)")
    parser.add_argument("--chroma-url", help="a running Chroma server")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    conversations = history(args, random.Random(args.seed))
    total = sum(len(m) for _, _, m in conversations)
    embeddings = embedder(args.embedder)
    index = f"bench-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory(prefix="scale-backends-") as path:
        local = SemanticRecall.local(path, embeddings=embeddings, index_name=index)
        embedded = measure(local, conversations, args.queries, args.seed)
        local.storage.close()
    with servers(args) as (pg_url, chroma_url):
        remote = SemanticRecall.from_url(
            storage=pg_url, vector=chroma_url, embeddings=embeddings, index_name=index
        )
        try:
            server = measure(remote, conversations, args.queries, args.seed)
        finally:
            remote.storage.close()
    report(args, total, embedded, server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
