"""Recall latency and indexing throughput of the embedded default on N stored messages.

Real parts only: SQLite storage, embedded Chroma, the local MiniLM model. Messages are
synthetic sentences from templates (so the embedder sees realistic lengths), spread over
resources and threads. Printed side by side with the raw embedder in the same run.

    python benchmarks/embedded_default.py                 # 10,000 messages
    python benchmarks/embedded_default.py --messages 500  # a quick look
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.local_embeddings import LocalEmbeddings

TOPICS = [
    "Lisbon",
    "tomatoes",
    "the CSV loader",
    "my sister",
    "the invoice",
    "marathon training",
    "the Python service",
    "a birthday party",
    "the garden",
    "piano lessons",
    "the new job",
    "a vegetarian menu",
    "the flight to Porto",
    "the database migration",
    "my dog",
]
VERBS = ["plan", "fix", "remember", "book", "cancel", "improve", "discuss", "prepare", "test"]
WHEN = ["next week", "in March", "on Friday", "tomorrow", "before the deadline", "this summer"]


def sentence(rng: random.Random) -> str:
    topic, verb, when = rng.choice(TOPICS), rng.choice(VERBS), rng.choice(WHEN)
    extra = " ".join(rng.choice(TOPICS + VERBS + WHEN) for _ in range(rng.randint(2, 12)))
    return f"We need to {verb} {topic} {when}; notes: {extra}."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(fn: Callable[..., object], *args: object, **kwargs: object) -> float:
    started = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--resources", type=int, default=20)
    parser.add_argument("--threads-per-resource", type=int, default=10)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    threads = [
        (f"user-{r}", f"user-{r}-thread-{t}")
        for r in range(args.resources)
        for t in range(args.threads_per_resource)
    ]
    per_thread = max(2, args.messages // len(threads))
    conversations: list[tuple[str, str, list[BaseMessage]]] = []
    for resource, thread in threads:
        messages: list[BaseMessage] = [
            (HumanMessage if n % 2 == 0 else AIMessage)(sentence(rng), id=f"{thread}-{n}")
            for n in range(per_thread)
        ]
        conversations.append((resource, thread, messages))
    total = sum(len(m) for _, _, m in conversations)

    embedder = LocalEmbeddings()
    embedder.embed_documents(["warm up"])
    sample = [str(m.text) for m in conversations[0][2]] * 4
    raw_rate = len(sample) / timed(lambda: embedder.embed_documents(sample))

    with tempfile.TemporaryDirectory() as path:
        memory = SemanticRecall.local(path, embeddings=embedder)
        bulk = timed(
            lambda: [memory.index(m, thread_id=t, resource_id=r) for r, t, m in conversations]
        )
        turns = []
        for n in range(50):  # per-turn indexing: one user + one assistant message
            resource, thread, _ = rng.choice(conversations)
            turn = [
                HumanMessage(sentence(rng), id=f"turn-{n}-q"),
                AIMessage(sentence(rng), id=f"turn-{n}-a"),
            ]
            turns.append(timed(memory.index, turn, thread_id=thread, resource_id=resource))
        latency: dict[str, list[float]] = {"resource": [], "thread": []}
        embedding: dict[str, list[float]] = {"resource": [], "thread": []}
        for scope in ("resource", "thread"):
            engine = SemanticRecall.local(path, embeddings=embedder, scope=scope)
            for n in range(args.queries):
                resource, thread, _ = rng.choice(conversations)
                query = f"{sentence(rng)} #{scope}{n}"  # distinct: never served by the cache
                # the raw embedding of a text like it, just before: the same machine state
                embedding[scope].append(timed(embedder.embed_query, f"{query} raw"))
                live = [HumanMessage(query)]
                latency[scope].append(
                    timed(engine.recall, live, thread_id=thread, resource_id=resource)
                )
        embed_only = embedding["resource"] + embedding["thread"]
        stats = memory.stats()

    ms = 1000.0
    print(
        f"embedded default: {total:,} messages in {len(threads)} threads of "
        f"{args.resources} resources, then {2 * len(turns)} more one turn at a time; "
        f"{stats.vectors:,} vectors, {stats.missing_vectors} missing"
    )
    print(f"{'measure':<44}{'p50':>10}{'p95':>10}")
    for scope, values in latency.items():
        print(
            f"{'recall, ' + scope + ' scope (ms, incl. embedding)':<44}"
            f"{percentile(values, 0.5) * ms:>10.1f}{percentile(values, 0.95) * ms:>10.1f}"
        )
        # p50 minus p50: a difference of two paired samples' percentiles would mix noise in
        without = percentile(values, 0.5) - percentile(embedding[scope], 0.5)
        print(f"{'  minus its raw query embeddings, p50 (ms)':<44}{without * ms:>10.1f}")
    print(
        f"{'raw query embedding alone (ms)':<44}"
        f"{percentile(embed_only, 0.5) * ms:>10.1f}{percentile(embed_only, 0.95) * ms:>10.1f}"
    )
    print(
        f"{'index one turn (2 messages, ms)':<44}"
        f"{percentile(turns, 0.5) * ms:>10.1f}{percentile(turns, 0.95) * ms:>10.1f}"
    )
    bulk_rate = total / bulk
    print(
        f"index, one thread per call: {bulk_rate:,.0f} messages/s; raw embedder: "
        f"{raw_rate:,.0f} messages/s; ratio ours/raw {bulk_rate / raw_rate:.2f} "
        "(bulk_index: benchmarks/perf_index.py)"
    )


if __name__ == "__main__":
    main()
