"""Search latency at the package defaults (hybrid) beside an exact numpy scan and dense mode.

For each store size (``perf_common.SIZES``: 10k = 10 resources x 1,000, 100k = one
resource of 100,000; synthetic text, MiniLM-like vectors, SQLite + embedded Chroma written
through our own backends) a fresh process measures, query embedding excluded (a table
lookup), in one loop so a noisy machine slows all alike:

* ``brute``: an exact brute-force scan of the resource's vectors with numpy (BLAS pinned
  to one thread), top 10 -- the yardstick of the targets;
* ``dense``: ``SemanticRecall.search`` in dense mode (top 5, window 1);
* ``hybrid``: ``SemanticRecall.search`` with the package defaults (hybrid search);
* its keyword half alone (in-memory postings, the default) and the same search in SQL
  only (``keyword_cache_docs=0``), which must return the same ids and scores;
* the cold first search of each resource (Chroma loads its index, the postings are built).

Queries are stored messages' vectors moved to cosine 0.69; their texts mix the resource's
rare topic words with common ones (``time``, ``like``, ``day``... in ~30% of messages).

    python benchmarks/perf_hybrid.py                         # 10k and 100k (~5 min)
    python benchmarks/perf_hybrid.py --sizes tiny --queries 10 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import perf_common as pc
import perf_recall_phases as phases

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

SCRIPT = Path(__file__).resolve()
KEYS = ("brute", "dense", "hybrid", "keyword", "keyword_sql")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10k,100k", help="comma-separated: tiny,1k,10k,100k")
    parser.add_argument("--queries", type=int, default=300, help="queries per size")
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument("--work", type=Path, default=None, help="store folder (reused if built)")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--size", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        corpus = pc.load_corpus(args.size, args.work / "corpus.pickle")
        pc.emit((phases.build if args.phase == "build" else query)(corpus, args.work, args))
        return
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    root = args.work or Path(tempfile.mkdtemp(prefix="perf-hybrid-"))
    results: dict[str, Any] = {"sizes": {}}
    try:
        for size in sizes:
            work = root / size
            base = ["--size", size, "--work", str(work), "--queries", str(args.queries)]
            if not (work / "built").exists():
                print(f"[{size}] building ...", flush=True)
                build = pc.run_child(SCRIPT, ["--phase", "build", *base])
                (work / "built").write_text(str(build["messages"]))
            print(f"[{size}] querying ...", flush=True)
            results["sizes"][size] = pc.run_child(SCRIPT, ["--phase", "query", *base])
    finally:
        if args.work is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print_table(results)
    pc.write_json(args.out / "perf_hybrid.json", results)


def query(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process: cold first searches, then every mode per query, alternating."""
    queries = pc.make_queries(corpus, args.queries, seed=23)
    table = pc.TableEmbeddings({q.text: q.vector for q in queries})
    path = work / "store" / "messages.sqlite3"
    storage, sql = SQLiteStorage(path), SQLiteStorage(path, keyword_cache_docs=0)
    vectors = ChromaVectorIndex.persistent(work / "store" / "chroma")
    common: dict[str, Any] = {"embeddings": table, "index_name": pc.INDEX}
    hybrid = SemanticRecall(storage=storage, vector_store=vectors, **common)
    dense = SemanticRecall(
        storage=storage, vector_store=vectors, search_mode="dense", top_k=5, message_range=1,
        **common,
    )  # fmt: skip
    arrays = {r: corpus.vectors[rows] for r, rows in corpus.by_resource.items()}

    def brute(q: pc.Query) -> list[int]:
        scores = arrays[q.resource_id] @ q.vector
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])].tolist()

    cold: list[float] = []
    searched: set[str] = set()
    for q in queries:  # the first search of each resource in this process
        if q.resource_id not in searched:
            searched.add(q.resource_id)
            ms, _ = pc.timed(lambda q=q: hybrid.search(q.text, resource_id=q.resource_id))
            cold.append(ms)
    lat: dict[str, list[float]] = {key: [] for key in KEYS}
    same = 0
    for n, q in enumerate(queries):
        scope = ScopeFilter(resource_id=q.resource_id)
        steps = [
            ("brute", lambda q=q: brute(q)),
            ("dense", lambda q=q: dense.search(q.text, resource_id=q.resource_id)),
            ("hybrid", lambda q=q: hybrid.search(q.text, resource_id=q.resource_id)),
            ("keyword", lambda q=q, s=scope: storage.keyword_search(q.text, scope=s, limit=50)),
            ("keyword_sql", lambda q=q, s=scope: sql.keyword_search(q.text, scope=s, limit=50)),
        ]  # fmt: skip
        out = {key: pc.timed(fn) for key, fn in (steps if n % 2 else steps[::-1])}
        for key in KEYS:
            lat[key].append(out[key][0])
        same += out["keyword"][1] == out["keyword_sql"][1]
    summary = {key: pc.percentiles(values) for key, values in lat.items()}
    return {
        "messages": len(corpus),
        "resources": len(corpus.by_resource),
        "lat": summary,
        "p50_ratio": summary["hybrid"]["p50"] / summary["brute"]["p50"],
        "p95_ratio": summary["hybrid"]["p95"] / summary["brute"]["p95"],
        "keyword_same_as_sql": same / len(queries),
        "cold_ms": cold,
        "rss_mb": pc.current_rss_mb(),
    }


def print_table(results: dict[str, Any]) -> None:
    """The side-by-side table: p50 / p95 ms per mode and the hybrid / brute ratios."""
    head = (
        "| size | brute numpy p50/p95 | dense p50/p95 | **hybrid (defaults)** p50/p95 "
        "| hybrid/brute p50 | p95 | keyword half (memory) | keyword in SQL | same | cold first |"
    )
    print("\nSearch latency, query embedding excluded, ms (warm unless cold):\n")
    print(head)
    print("|" + "---|" * 10)
    for size, r in results["sizes"].items():
        lat = r["lat"]

        def cell(key: str, lat: dict[str, Any] = lat) -> str:
            return f"{pc.fmt(lat[key]['p50'])} / {pc.fmt(lat[key]['p95'])}"

        cold = r["cold_ms"]
        print(
            f"| {size} | {cell('brute')} | {cell('dense')} | **{cell('hybrid')}** "
            f"| {pc.fmt(r['p50_ratio'])}x | {pc.fmt(r['p95_ratio'])}x | {cell('keyword')} "
            f"| {cell('keyword_sql')} | {pc.fmt(r['keyword_same_as_sql'])} "
            f"| {pc.fmt(float(np.median(cold)), 0)} (max {pc.fmt(max(cold), 0)}) |"
        )


if __name__ == "__main__":
    main()
