"""Long threads: the cost of reading the end of, counting and forgetting one huge thread.

One resource holds one thread of ``--messages`` messages (default 100,000) and a short
thread beside it, in the embedded default (SQLite + embedded Chroma, 384-d vectors from
a seeded hash: the embedder is not what is measured). In the same run it times:

* ``chat_history(last=20)``: the 20 newest messages, one backwards read of the thread's
  key; baseline: reading the whole thread and keeping its tail (how 0.2.0 did it);
* ``stats(thread_id=...)``: the thread's vectors listed once by filter, then read by
  id; baseline: the same call with 0.2.0's paging patched back in (``offset`` pages
  under a ``where`` filter: Chroma evaluates the filter again for every page);
* ``forget_thread``: the thread's rows and vectors deleted; beside it, Chroma's own
  ``delete(where=...)`` of a copy of the thread's vectors, in a collection configured
  like the package's (the floor this call pays for the vectors).

    python benchmarks/perf_long_thread.py                       # 100k messages: ~10 min
    python benchmarks/perf_long_thread.py --messages 300 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import perf_common as pc
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.storage import ScopeFilter
from langchain_semantic_recall.vectors.chroma_layout import resource_collection_name

RESULTS = Path(__file__).resolve().parent / "results"
THREAD, OTHER, RESOURCE = "long", "short", "owner"
LAST = 20


def messages(count: int, prefix: str) -> Iterator[BaseMessage]:
    for n in range(count):
        cls = HumanMessage if n % 2 == 0 else AIMessage
        yield cls(f"{prefix} message {n} about topic{n % 97} and item{n % 13}", id=f"{prefix}{n}")


def timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """Seconds of each of `runs` calls, and the last call's answer."""
    seconds, answer = [], None
    for _ in range(runs):
        start = time.perf_counter()
        answer = fn()
        seconds.append(time.perf_counter() - start)
    return seconds, answer


def whole_thread_tail(memory: SemanticRecall) -> list[Any]:
    """Baseline: page through the whole thread, keep the newest `LAST` (0.2.0's history)."""
    scope = ScopeFilter(RESOURCE, THREAD)
    kept: list[Any] = []
    after: tuple[str, int] | None = None
    while page := memory.storage.list_messages(scope, after=after, limit=1000):
        after = (page[-1].thread_id, page[-1].seq)
        kept = [*kept, *page][-LAST:]
    return kept


def collection(memory: SemanticRecall) -> Any:
    """The resource's Chroma collection (for the baselines made with chromadb directly)."""
    name = memory.stats(thread_id=OTHER, resource_id=RESOURCE).index_name
    client = memory.vector_store._client  # type: ignore[attr-defined]
    return client.get_collection(resource_collection_name(name, RESOURCE))


def offset_pages(
    collection: Any, where: Any, include: Any, size: int, delays: Any = ()
) -> Iterator[Any]:
    """0.2.0's paging of a filtered listing: by `offset`, the filter evaluated per page."""
    offset = 0
    while True:
        got = collection.get(where=where, limit=size, offset=offset, include=include)
        yield got
        if len(got["ids"]) < size:
            return
        offset += size


def stats_with_offset_paging(memory: SemanticRecall) -> Any:
    """Baseline: the same `stats` call with 0.2.0's offset paging patched back in."""
    from langchain_semantic_recall.vectors import chroma_collections

    ours = chroma_collections._pages  # type: ignore[attr-defined]
    chroma_collections._pages = offset_pages  # type: ignore[attr-defined]
    try:
        return memory.stats(thread_id=THREAD, resource_id=RESOURCE)
    finally:
        chroma_collections._pages = ours  # type: ignore[attr-defined]


def chroma_delete_floor(memory: SemanticRecall, count: int) -> float:
    """Seconds of Chroma's own delete(where) of `count` vectors in a collection of that size."""
    client = memory.vector_store._client  # type: ignore[attr-defined]
    configuration = memory.vector_store._collections._configuration  # type: ignore[attr-defined]
    copy = client.create_collection("bench-delete-floor", configuration=configuration)
    source = collection(memory)
    size = client.get_max_batch_size()
    try:
        for start in range(0, count, size):
            got = source.get(
                where={"thread_id": THREAD},
                limit=size,
                offset=start,
                include=["embeddings", "metadatas"],
            )
            copy.add(ids=got["ids"], embeddings=got["embeddings"], metadatas=got["metadatas"])
        start_time = time.perf_counter()
        copy.delete(where={"thread_id": THREAD})
        return time.perf_counter() - start_time
    finally:
        client.delete_collection("bench-delete-floor")


def run(count: int, runs: int, work: Path) -> dict[str, Any]:
    memory = SemanticRecall.local(work, embeddings=pc.HashEmbeddings())
    start = time.perf_counter()
    built = memory.bulk_index(
        [(THREAD, RESOURCE, list(messages(count, "m"))), (OTHER, RESOURCE, list(messages(50, "s")))]
    )
    build_s = time.perf_counter() - start
    print(f"built {built.stored:,} messages in {build_s:.0f} s", file=sys.stderr)
    history = memory.chat_history(THREAD, resource_id=RESOURCE, last=LAST)
    ours_history, newest = timed(lambda: history.messages, runs)
    base_history, tail = timed(lambda: whole_thread_tail(memory), runs)
    assert [m.id for m in newest] == [m.id for m in tail], "the two reads disagree"
    ours_stats, stats = timed(lambda: memory.stats(thread_id=THREAD, resource_id=RESOURCE), runs)
    base_stats, listed = timed(lambda: stats_with_offset_paging(memory), runs)
    assert stats == listed, (stats, listed)
    assert stats.vectors == count, stats
    floor = chroma_delete_floor(memory, count)
    start = time.perf_counter()
    forgotten = memory.forget_thread(THREAD, resource_id=RESOURCE)
    forget_s = time.perf_counter() - start
    assert forgotten == count
    left = memory.stats(resource_id=RESOURCE)
    assert (left.messages, left.vectors) == (50, 50), left
    memory.storage.close()
    return {
        "messages": count,
        "build_s": build_s,
        "history_last_s": {"ours": ours_history, "whole_thread": base_history},
        "stats_thread_s": {"ours": ours_stats, "offset_paging": base_stats},
        "forget_thread_s": {"ours": [forget_s], "chroma_delete_where": [floor]},
    }


def report(result: dict[str, Any]) -> str:
    lines = [f"one thread of {result['messages']:,} messages (median seconds)"]
    for key, label in (
        ("history_last_s", f"chat_history(last={LAST})"),
        ("stats_thread_s", "stats(thread_id=...)"),
        ("forget_thread_s", "forget_thread"),
    ):
        (ours_name, ours), (base_name, base) = result[key].items()
        ours_m, base_m = statistics.median(ours), statistics.median(base)
        lines.append(
            f"  {label:<26} {ours_name} {ours_m:9.4f}   {base_name} {base_m:9.4f}"
            f"   ratio {base_m / max(ours_m, 1e-9):7.1f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="timed calls of each read")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=None, help="store folder (kept)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="perf-long-thread-"))
    try:
        result = run(args.messages, args.runs, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "perf_long_thread.json").write_text(json.dumps(result, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
