"""Indexing throughput of the embedded default, beside the raw embedder's own.

Real parts only: the local MiniLM model, SQLite storage, embedded Chroma. Messages are
English chat sentences from templates (5-60 words, so the model sees realistic lengths),
in threads of ``--thread`` messages over a few resources. In alternating rounds (so that a
busy machine slows every mode alike) it measures messages per second of:

* ``embedder``: ``LocalEmbeddings.embed_documents`` on all the round's texts at once;
* ``bulk_index``: :func:`langchain_semantic_recall.bulk.bulk_index` (one storage
  transaction and one embedding call per batch, vector writes overlapped);
* ``index per thread``: ``SemanticRecall.index`` with a whole thread per call;
* ``index per turn``: ``SemanticRecall.index`` with one user + assistant pair per call;

and where the time of ``index per thread`` goes (storage, embedding, vector write).

    python benchmarks/perf_index.py                     # 3 rounds of 1,200 messages
    python benchmarks/perf_index.py --messages 60 --rounds 1 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import perf_common as pc
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.bulk import bulk_index
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

_PEOPLE = ["my sister", "Tom", "the kids", "my manager", "Ana", "our neighbours", "Grandma"]
_PLACES = ["Lisbon", "the lake", "Porto", "the office", "the new gym", "Kyoto", "the farm"]
_THINGS = [
    "the budget spreadsheet",
    "a vegetarian lasagna",
    "the flight tickets",
    "my knee injury",
    "the database migration",
    "piano lessons",
    "the birthday party",
    "a used bike",
]
_VERBS = ["plan", "fix", "book", "cancel", "discuss", "prepare", "finish", "remember"]
_WHEN = ["next week", "on Friday", "in March", "tomorrow morning", "after the holidays"]
_FILL = (
    *("honestly", "I", "am", "not", "sure", "it", "is", "worth", "it", "but", "we", "should"),
    *("try", "anyway", "because", "last", "time", "it", "went", "better", "than", "expected"),
    *("and", "everyone", "enjoyed", "it", "a", "lot", "so", "maybe", "this", "time", "too"),
)


def sentence(rng: random.Random) -> str:
    """One chat message of 5-60 words."""
    head = (
        f"Can you help me {rng.choice(_VERBS)} {rng.choice(_THINGS)} with "
        f"{rng.choice(_PEOPLE)} in {rng.choice(_PLACES)} {rng.choice(_WHEN)}?"
    )
    tail = " ".join(rng.choice(_FILL) for _ in range(rng.choice([0, 0, 3, 8, 15, 30, 45])))
    return f"{head} {tail}".strip()


def conversations(
    tag: str, messages: int, per_thread: int, rng: random.Random
) -> list[tuple[str, str, list[BaseMessage]]]:
    """``(thread, resource, messages)`` triples; ids unique to ``tag`` (no cache hits)."""
    out = []
    for t in range(max(1, messages // per_thread)):
        thread = f"{tag}-t{t}"
        items: list[BaseMessage] = []
        for n in range(per_thread):
            cls = HumanMessage if n % 2 == 0 else AIMessage
            items.append(cls(f"[{tag} {t}.{n}] {sentence(rng)}", id=f"{thread}-{n}"))
        out.append((thread, f"user-{t % 5}", items))
    return out


class _Timed:
    """Wraps a method of an object, adding its wall time (ms) to ``total``."""

    def __init__(self, owner: Any, method: str) -> None:
        self.total = 0.0
        inner = getattr(owner, method)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.total += (time.perf_counter() - start) * 1000

        setattr(owner, method, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1200, help="messages per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--thread", type=int, default=40, help="messages per thread")
    parser.add_argument("--out", type=Path, default=pc.RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perf-index-"))
    try:
        results = measure(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results)
    pc.write_json(args.out / "perf_index.json", results)
    print(f"\nwrote {args.out / 'perf_index.json'}")


def measure(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    embedder = LocalEmbeddings()
    storage = SQLiteStorage(work / "messages.sqlite3")
    vectors = ChromaVectorIndex.persistent(work / "chroma")
    memory = SemanticRecall(storage=storage, vector_store=vectors, embeddings=embedder)
    embedder.embed_documents(["warm the model up"] * 8)
    memory.ensure_index()
    put, upsert = _Timed(storage, "put"), _Timed(vectors, "upsert")
    embed = _Timed(embedder, "embed_documents")
    rng = random.Random(5)
    rates: dict[str, list[float]] = {}
    parts: dict[str, list[float]] = {"storage": [], "embedding": [], "vector write": []}

    def run(mode: str, fn: Callable[[], int]) -> None:
        start = time.perf_counter()
        count = fn()
        rates.setdefault(mode, []).append(count / (time.perf_counter() - start))

    for r in range(args.rounds):
        n, size = args.messages, args.thread
        texts = [sentence(rng) + f" (round {r} {i})" for i in range(n)]
        run("embedder", lambda texts=texts: len(embed_raw(embedder, texts)))
        bulk = conversations(f"b{r}", n, size, rng)
        run("bulk_index", lambda bulk=bulk: bulk_index(memory, bulk).embedded)
        threads = conversations(f"i{r}", n, size, rng)
        before = (put.total, embed.total, upsert.total)
        run("index per thread", lambda threads=threads: index_all(memory, threads))
        spent = [put.total - before[0], embed.total - before[1], upsert.total - before[2]]
        for key, value in zip(parts, spent, strict=True):
            parts[key].append(value / n)
        turns = conversations(f"p{r}", min(n, 400), 2, rng)
        run("index per turn", lambda turns=turns: index_all(memory, turns))
    base = rates["embedder"]
    return {
        "messages_per_round": args.messages,
        "rounds": args.rounds,
        "per_s": {mode: pc.median_spread(values) for mode, values in rates.items()},
        "ratio": {
            mode: pc.median_spread([v / b for v, b in zip(values, base, strict=True)])
            for mode, values in rates.items()
        },
        "ms_per_message": {key: pc.median_spread(values) for key, values in parts.items()},
        "peak_rss_mb": pc.peak_rss_mb(),
    }


def embed_raw(embedder: LocalEmbeddings, texts: list[str]) -> list[list[float]]:
    return embedder.embed_documents(texts)


def index_all(memory: SemanticRecall, items: list[tuple[str, str, list[BaseMessage]]]) -> int:
    embedded = 0
    for thread, resource, messages in items:
        embedded += len(memory.index(messages, thread_id=thread, resource_id=resource).embedded)
    return embedded


def print_table(results: dict[str, Any]) -> None:
    print(
        f"\n== indexing throughput, messages/s (median of {results['rounds']} rounds "
        f"[min-max], {results['messages_per_round']} messages per round) =="
    )
    print(f"{'mode':>18} | {'msgs/s':>22} | {'/ embedder':>20}")
    for mode, cell in results["per_s"].items():
        ratio = pc.spread(results["ratio"][mode])
        print(f"{mode:>18} | {pc.spread(cell, 0):>22} | {ratio:>20}")
    print("\n== index per thread: where the time goes, ms per message ==")
    for key, cell in results["ms_per_message"].items():
        print(f"{key:>18} | {pc.spread(cell, 3):>22}")


if __name__ == "__main__":
    main()
