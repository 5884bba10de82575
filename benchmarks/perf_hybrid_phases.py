"""Where a default (hybrid) search spends its time, beside dense mode in the same process.

Not a test: the profile behind ``docs/performance.md`` (*Where the time goes*). On
``perf_hybrid.py``'s store (built here when ``--work`` does not hold one; synthetic text,
MiniLM-like vectors, SQLite + embedded Chroma, query embedding a table lookup), one fresh
process runs every query in dense mode and in hybrid mode, alternating, and times each
phase of hybrid search (``engine/search_ops.py`` ``_calibrated_search``) by wrapping the
engine's steps and the relevance model's methods with ``time.perf_counter``:

* the storage and vector-index steps (``NearestMessages`` runs on a worker thread beside the
  keyword half, so the phases overlap and do not add up to the total);
* the relevance scoring: ``Query.build`` (timed through ``SearchPlan.query``), ``best_candidates``
  and ``select`` (``probabilities`` inside it), on the caller's thread after the reads.

Printed: p50 and mean per search of each phase, the scoring's share, and hybrid / dense
p50 with and without the scoring (what the ratio would be if scoring cost nothing).

``--sql-windows`` reads every context window in SQL (``window_cache_bytes=0``), as the
package did before it held the windows searches read (``storage/held_windows.py``).

``--bound`` measures what a faster hot path could give, not the package: ``rows`` reads
every window from messages held in memory (loaded once, never refreshed: no freshness
check, which a real cache would pay), ``terms`` keeps every text's terms (a term cache
that never evicts); ``rows,terms`` both. Run it beside a run without it.

    python benchmarks/perf_hybrid_phases.py --work DIR        # 10k, 300 queries
    python benchmarks/perf_hybrid_phases.py --work DIR --bound rows,terms
    python benchmarks/perf_hybrid_phases.py --size tiny --queries 8 --work /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import bisect
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import perf_common as pc

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.relevance import features
from langchain_semantic_recall.relevance.model import RelevanceModel
from langchain_semantic_recall.search import SearchPlan
from langchain_semantic_recall.storage import sqlite_sql

SCORING = ("Query.build", "best_candidates", "select")

Timings = dict[str, list[float]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="10k", help="a perf_common size: tiny, 1k, 10k, 100k")
    parser.add_argument("--queries", type=int, default=300, help="queries (each in both modes)")
    parser.add_argument("--work", type=Path, required=True, help="store folder (reused if built)")
    parser.add_argument(
        "--bound", default="", help="what-if, not the package: rows, terms or rows,terms"
    )
    parser.add_argument(
        "--sql-windows",
        action="store_true",
        help="every window read in SQL (window_cache_bytes=0: the package before held windows)",
    )
    args = parser.parse_args()
    bounds = {b for b in args.bound.split(",") if b}
    if unknown := bounds - {"rows", "terms"}:
        parser.error(f"--bound takes rows, terms or both, not {sorted(unknown)}")
    work = args.work / args.size
    pc.hybrid_store(args.size, work, args.queries)
    if "terms" in bounds:
        features.TermCache.__init__.__defaults__ = (10**7,)  # every engine's, never evicting
    if "rows" in bounds:
        SQLiteStorage._get_windows = _windows_held  # type: ignore[method-assign]
    print(f"bound: {args.bound or 'none (the package as it is)'}")
    print(f"windows: {'in SQL' if args.sql_windows else 'held windows (the default)'}")
    timings = measure(args.size, work, args.queries, sql_windows=args.sql_windows)
    print_table(timings, args.size, args.queries)


_HELD: dict[str, dict[str, Any]] = {}


def _windows_held(
    self: SQLiteStorage, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
) -> dict[str, tuple[StoredMessage, ...]]:
    """`--bound rows`: windows sliced from every message, read once into memory."""
    held = _HELD.get("store")
    if held is None:
        with self._read() as conn:
            query = f"SELECT {sqlite_sql.COLUMNS} FROM messages ORDER BY thread_id, seq"
            rows = [sqlite_sql.to_message(row) for row in conn.execute(query)]
        threads: dict[str, list[StoredMessage]] = {}
        for message in rows:
            threads.setdefault(message.thread_id, []).append(message)
        seqs = {t: [m.seq for m in thread] for t, thread in threads.items()}
        held = _HELD["store"] = {"id": {m.id: m for m in rows}, "threads": threads, "seqs": seqs}
    windows: dict[str, tuple[StoredMessage, ...]] = {}
    for message_id in message_ids:
        hit = held["id"].get(message_id)
        if hit is None or not scope.admits_message(hit):
            continue
        thread, seqs = held["threads"][hit.thread_id], held["seqs"][hit.thread_id]
        low = bisect.bisect_left(seqs, hit.seq - before)
        high = bisect.bisect_right(seqs, hit.seq + after)
        windows[message_id] = tuple(m for m in thread[low:high] if scope.admits_message(m))
    return windows


def measure(size: str, work: Path, count: int, *, sql_windows: bool) -> tuple[Timings, Timings]:
    """(phases of hybrid search, whole searches by mode), ms per call."""
    corpus = pc.load_corpus(size, work / "corpus.pickle")
    queries = pc.make_queries(corpus, count, seed=23)
    table = pc.TableEmbeddings({q.text: q.vector for q in queries})
    held: dict[str, Any] = {"window_cache_bytes": 0} if sql_windows else {}  # else the default
    storage = SQLiteStorage(work / "store" / "messages.sqlite3", **held)
    hybrid, dense = pc.hybrid_and_dense(storage, work, table)
    for q in queries[:20]:  # warm: the resources' indexes, the keyword postings
        hybrid.search(q.text, resource_id=q.resource_id)
    storage._postings.join()
    phases: Timings = defaultdict(list)
    restore = _instrument(phases)
    whole: Timings = {"dense": [], "hybrid": []}
    try:
        for n, q in enumerate(queries):
            modes = [("dense", dense), ("hybrid", hybrid)]
            for mode, engine in modes if n % 2 else modes[::-1]:
                ms, _ = pc.timed(lambda e=engine, q=q: e.search(q.text, resource_id=q.resource_id))
                whole[mode].append(ms)
    finally:
        restore()
        storage.close()
    return dict(phases), whole


def _instrument(phases: Timings) -> Callable[[], None]:
    """Time the steps and scoring methods into `phases` (hybrid searches only); undo."""
    caller = threading.current_thread()
    active = {"hybrid": False}  # one search at a time: the worker thread's steps count too
    originals: list[tuple[type, str, Any]] = []

    def wrap(owner: type, name: str, label: Callable[[tuple[Any, ...]], str | None]) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                key = label(args)
                if key is not None and active["hybrid"]:
                    phases[key].append((time.perf_counter() - start) * 1e3)

        setattr(owner, name, timed)

    def step_label(args: tuple[Any, ...]) -> str | None:
        step = args[0]
        name = type(step).__name__
        if isinstance(step, steps.ReadWindows):
            name += " (hits only)" if step.before == 0 else " (context)"
        return name + ("" if threading.current_thread() is caller else " [worker]")

    for record in (  # a profile of the engine's own backend calls
        steps.ReadWindows,
        steps.KeywordSearch,
        steps.CountMessages,
        steps.NearestMessages,
        steps.Embed,
    ):
        wrap(record, "run", step_label)
    wrap(steps.Both, "run", lambda _: "vector half beside keyword half (wall)")
    wrap(SearchPlan, "query", lambda _: "Query.build")
    wrap(RelevanceModel, "best_candidates", lambda _: "best_candidates")
    wrap(RelevanceModel, "select", lambda _: "select")
    wrap(RelevanceModel, "probabilities", lambda _: "  probabilities (in select)")

    search = SemanticRecall.search

    def flagged(self: SemanticRecall, *args: Any, **kwargs: Any) -> Any:
        active["hybrid"] = self.search_mode == "hybrid"
        try:
            return search(self, *args, **kwargs)
        finally:
            active["hybrid"] = False

    setattr(SemanticRecall, "search", flagged)  # noqa: B010 - undone below
    originals.append((SemanticRecall, "search", search))

    def restore() -> None:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)

    return restore


def print_table(result: tuple[Timings, Timings], size: str, count: int) -> None:
    phases, whole = result
    hybrid, dense = np.median(whole["hybrid"]), np.median(whole["dense"])
    print(f"\nHybrid search at {size}, {count} queries, ms (query embedding excluded):\n")
    print("| phase | calls / search | p50 | mean per search |")
    print("|---|---|---|---|")
    for key, values in sorted(phases.items(), key=lambda kv: -sum(kv[1])):
        print(
            f"| {key} | {pc.fmt(len(values) / count, 1)} | {pc.fmt(float(np.median(values)))} "
            f"| {pc.fmt(sum(values) / count)} |"
        )
    scoring = sum(sum(phases.get(key, [])) for key in SCORING) / count
    print(f"\n| what | p50 ms |\n|---|---|\n| dense mode (baseline) | {pc.fmt(float(dense))} |")
    print(f"| **hybrid (defaults)** | **{pc.fmt(float(hybrid))}** |")
    print(f"| relevance scoring (mean per search) | {pc.fmt(scoring)} |")
    print(f"| hybrid / dense | {pc.fmt(float(hybrid / dense))}x |")
    print(f"| hybrid less scoring / dense | {pc.fmt(float((hybrid - scoring) / dense))}x |")


if __name__ == "__main__":
    main()
