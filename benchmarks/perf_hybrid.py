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
* the cold first search of each resource in a fresh process, twice: first with no
  snapshot of its vectors (the first process after the store was written: Chroma loads
  its index; the keyword postings are built in the background while SQL answers; the
  process then waits for the snapshots it builds, as a long-running one would, and
  indexes ten turns, as an agent's session would), then in the next fresh process, which
  reads those snapshots and applies the turns written since from Chroma's log (the
  process before closes its index, as `SemanticRecall.local`'s engine does, so the
  snapshot checks its last writes queued run: one refreshes a snapshot whose log Chroma
  purged meanwhile; a process that exits without closing leaves them undone, and about
  one run in three then found no usable snapshot)
  (``vectors/chroma_snapshots.py``); beside Chroma's own cold first query of the same
  collections (``collection.query`` in another fresh process, no package code), and the
  time to read the biggest resource's vectors from a file into memory (what loading any
  index costs);
* indexing one turn (a user and an assistant message, embedding excluded: a table
  lookup) into the biggest resource, ``--turns`` times, alternating with the same
  two-vector upsert made with chromadb alone into that resource's collection (the floor);
  the turns and vectors are deleted afterwards, so the store can be reused. The call
  returns before embedded Chroma has the turn's vectors (``vectors.write_behind``): the
  time until they are written (``flush``) is printed beside, and the floor never runs
  while they are written;

Targets (issue 24): the cold first search at 100k <= 150 ms; one turn indexed into a
100k-message resource <= 10 ms p50; hybrid at 10k <= 1.5x dense mode p50.

Queries are stored messages' vectors moved to cosine 0.69; their texts mix the resource's
rare topic words with common ones (``time``, ``like``, ``day``... in ~30% of messages).

    python benchmarks/perf_hybrid.py                         # 10k and 100k (~5 min)
    python benchmarks/perf_hybrid.py --sizes tiny --queries 10 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import perf_common as pc
import perf_recall_phases as phases
from chromadb.config import Settings
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_layout import resource_collection_name
from langchain_semantic_recall.vectors.chroma_snapshots import FOLDER as SNAPSHOTS

SCRIPT = Path(__file__).resolve()
KEYS = ("brute", "dense", "hybrid", "keyword", "keyword_sql")
PREVIOUS = "previous-session-"
PREVIOUS_TURNS = 10
"""Turns the process before the measured one indexes after its snapshots are written."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10k,100k", help="comma-separated: tiny,1k,10k,100k")
    parser.add_argument("--queries", type=int, default=300, help="queries per size")
    parser.add_argument("--turns", type=int, default=60, help="turns indexed per size")
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument("--work", type=Path, default=None, help="store folder (reused if built)")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--size", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        corpus = pc.load_corpus(args.size, args.work / "corpus.pickle")
        phase = {"build": phases.build, "query": query, "chroma-cold": chroma_cold, "cold": cold}
        pc.emit(phase[args.phase](corpus, args.work, args))
        return
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    root = args.work or Path(tempfile.mkdtemp(prefix="perf-hybrid-"))
    results: dict[str, Any] = {"sizes": {}}
    try:
        for size in sizes:
            work = root / size
            base = ["--size", size, "--work", str(work), "--queries", str(args.queries)]
            base += ["--turns", str(args.turns)]
            if not (work / "built").exists():
                print(f"[{size}] building ...", flush=True)
                build = pc.run_child(SCRIPT, ["--phase", "build", *base])
                (work / "built").write_text(str(build["messages"]))
            print(f"[{size}] querying ...", flush=True)
            floor = pc.run_child(SCRIPT, ["--phase", "chroma-cold", *base])
            shutil.rmtree(work / "store" / "chroma" / SNAPSHOTS, ignore_errors=True)
            first = pc.run_child(SCRIPT, ["--phase", "cold", *base])
            results["sizes"][size] = pc.run_child(SCRIPT, ["--phase", "query", *base])
            results["sizes"][size]["cold_no_snapshot_ms"] = first["cold_ms"]
            results["sizes"][size]["chroma_cold_ms"] = floor["cold_ms"]
            results["sizes"][size]["read_vectors_ms"] = floor["read_ms"]
    finally:
        if args.work is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print_table(results)
    pc.write_json(args.out / "perf_hybrid.json", results)


def cold(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh process: each resource's first search, then wait for the snapshots it built,
    then index `PREVIOUS_TURNS` turns into the biggest resource, as an agent's session
    would (the next process's first search applies them from Chroma's log)."""
    queries = pc.make_queries(corpus, args.queries, seed=23)
    table = pc.TableEmbeddings({q.text: q.vector for q in queries})
    vectors = ChromaVectorIndex.persistent(work / "store" / "chroma")
    hybrid = SemanticRecall(
        storage=SQLiteStorage(work / "store" / "messages.sqlite3"),
        vector_store=vectors, embeddings=table, index_name=pc.INDEX,
    )  # fmt: skip
    times = [
        pc.timed(lambda q=q: hybrid.search(q.text, resource_id=q.resource_id))[0]
        for q in first_queries(queries)
    ]
    if vectors.snapshots is not None:
        vectors.snapshots.wait()
    resource = max(corpus.by_resource, key=lambda r: len(corpus.by_resource[r]))
    thread = f"{PREVIOUS}{uuid.uuid4().hex[:12]}"
    for n in range(PREVIOUS_TURNS):
        turn = [HumanMessage(f"earlier question {n} about the garden"), AIMessage(f"answer {n}")]
        hybrid.index(turn, thread_id=thread, resource_id=resource)
    hybrid.close()
    vectors.close()  # as `SemanticRecall.local`'s close does: the checks those writes queued run
    return {"cold_ms": times}


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
    for q in first_queries(queries):  # the first search of each resource in this process
        ms, _ = pc.timed(lambda q=q: hybrid.search(q.text, resource_id=q.resource_id))
        cold.append(ms)
    storage._postings.join()  # the warm loop measures the postings, not the SQL fallback
    if vectors.snapshots is not None:
        vectors.snapshots.wait()  # ... and Chroma's index, not the snapshot it loads beside
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
    turns = index_turns(corpus, hybrid, work, args.turns)
    for thread in hybrid.storage.list_threads():  # the previous session's (`cold`)
        if thread.thread_id.startswith(PREVIOUS):
            hybrid.forget_thread(thread.thread_id, resource_id=thread.resource_id)
    return {
        "messages": len(corpus),
        "resources": len(corpus.by_resource),
        "lat": summary,
        "p50_ratio": summary["hybrid"]["p50"] / summary["brute"]["p50"],
        "p95_ratio": summary["hybrid"]["p95"] / summary["brute"]["p95"],
        "keyword_same_as_sql": same / len(queries),
        "cold_ms": cold,
        "turn": turns,
        "rss_mb": pc.current_rss_mb(),
    }


def first_queries(queries: list[pc.Query]) -> list[pc.Query]:
    """The first query of each resource, in order."""
    first: dict[str, pc.Query] = {}
    for q in queries:
        first.setdefault(q.resource_id, q)
    return list(first.values())


def _raw_client(work: Path) -> chromadb.ClientAPI:
    settings = Settings(anonymized_telemetry=False)
    return chromadb.PersistentClient(str(work / "store" / "chroma"), settings=settings)


def chroma_cold(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh process, chromadb alone: the first query of each resource's collection."""
    client = _raw_client(work)
    cold = []
    for q in first_queries(pc.make_queries(corpus, args.queries, seed=23)):
        collection = client.get_collection(resource_collection_name(pc.INDEX, q.resource_id))
        vector = np.asarray([q.vector], dtype=np.float32)
        ms, _ = pc.timed(lambda c=collection, v=vector: c.query(v, n_results=50, include=[]))
        cold.append(ms)
    return {"cold_ms": cold, "read_ms": read_vectors_ms(corpus, work)}


def read_vectors_ms(corpus: pc.Corpus, work: Path) -> float:
    """Reading the biggest resource's float32 vectors from a file (in the page cache) into
    fresh memory, in ms: what loading any index of them costs at least on this machine
    (Chroma's file also holds the graph's links: 180 MB for 100k vectors, against 154)."""
    biggest = max(corpus.by_resource.values(), key=len)
    path = work / "vectors.f32"
    corpus.vectors[biggest].astype(np.float32).tofile(path)
    try:
        ms, _ = pc.timed(lambda: np.fromfile(path, dtype=np.float32))
    finally:
        path.unlink()
    return ms


def index_turns(
    corpus: pc.Corpus, memory: SemanticRecall, work: Path, count: int
) -> dict[str, Any]:
    """One turn indexed into the biggest resource, beside chromadb's own 2-vector upsert.

    Alternating (ours first on even turns); afterwards the turns' threads are forgotten
    and the raw vectors deleted.
    """
    resource = max(corpus.by_resource, key=lambda r: len(corpus.by_resource[r]))
    collection = _raw_client(work).get_collection(resource_collection_name(pc.INDEX, resource))
    rng = np.random.default_rng(3)
    tag = f"turn-{uuid.uuid4().hex[:12]}"  # forgotten thread ids are retired: new ones
    threads = [f"{tag}-t{n}" for n in range(4)]
    lat: dict[str, list[float]] = {"ours": [], "written": [], "chroma": []}
    raw_ids: list[str] = []

    def ours(n: int) -> None:
        turn = [HumanMessage(f"{tag} question {n} about the garden"), AIMessage(f"answer {n}")]
        done = memory.index(turn, thread_id=threads[n % len(threads)], resource_id=resource)
        if done.error is not None or len(done.embedded) != 2:
            raise RuntimeError(f"the turn was not indexed: {done}")

    def chroma(n: int) -> None:
        vectors = rng.standard_normal((2, pc.DIMENSION)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        ids = [f"{tag}-raw-{n}-{side}" for side in ("q", "a")]
        raw_ids.extend(ids)
        metadata = [{"thread_id": threads[n % len(threads)], "role": r} for r in ("user", "ai")]
        collection.upsert(ids=ids, embeddings=vectors, metadatas=metadata)  # type: ignore[arg-type]

    try:
        for n in range(count):
            steps = [("ours", ours), ("chroma", chroma)]
            for key, fn in steps if n % 2 == 0 else steps[::-1]:
                lat[key].append(pc.timed(lambda fn=fn, n=n: fn(n))[0])
                if key == "ours":  # the call returns before Chroma has the turn's vectors
                    # (written behind): until they are, timed apart, before anything else
                    flushed = pc.timed(memory.vector_store.flush)[0]
                    lat["written"].append(lat["ours"][-1] + flushed)
    finally:
        for thread_id in threads:
            if memory.storage.get_thread_owner(thread_id) is not None:
                memory.forget_thread(thread_id, resource_id=resource)
        if raw_ids:
            collection.delete(ids=raw_ids)
    return {
        "resource_messages": len(corpus.by_resource[resource]),
        "lat": {key: pc.percentiles(values) for key, values in lat.items()},
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
    print("\nIssue 24's targets, each beside its floor or baseline in the same run, ms:\n")
    print("| size | what | ours p50 / p95 | baseline p50 / p95 | ours / baseline p50 | target |")
    print("|---|---|---|---|---|---|")
    for size, r in results["sizes"].items():
        lat = r["lat"]
        ratio = lat["hybrid"]["p50"] / lat["dense"]["p50"]
        print(
            f"| {size} | search, defaults (hybrid) vs dense mode | {_pair(lat['hybrid'])} "
            f"| {_pair(lat['dense'])} | {pc.fmt(ratio)}x "
            f"| {'<= 1.5x' if size == '10k' else '- (the target is at 10k)'} |"
        )
        floor = list(r.get("chroma_cold_ms") or [np.nan])
        cases = (
            ("no snapshot yet", "cold_no_snapshot_ms"),
            (f"snapshot + {2 * PREVIOUS_TURNS} messages written since", "cold_ms"),
        )
        for what, key in cases:
            ours = list(r.get(key) or [np.nan])
            print(
                f"| {size} | cold first search, {what}, vs Chroma's own cold query "
                f"({len(ours)} resources) | {_pair(pc.percentiles(ours))} "
                f"| {_pair(pc.percentiles(floor))} "
                f"| {pc.fmt(float(np.median(ours) / np.median(floor)))}x "
                f"| {'<= 150' if size == '100k' else '- (<= 150 at 100k)'}; the 2,000 x "
                "1,000 target is perf_memory.py's |"
            )
        read = r.get("read_vectors_ms")
        print(
            f"| {size} | reading the biggest resource's vectors from a file into memory "
            f"(any index's load) | | {pc.fmt(read)} | | the floor under both |"
        )
        turn = r["turn"]["lat"]
        if not turn["ours"]:  # --turns 0: no turn indexed
            continue
        messages = f"{r['turn']['resource_messages']:,}-message resource"
        for what, key in (
            ("the call returns", "ours"),
            ("until its vectors are written", "written"),
        ):
            print(
                f"| {size} | index one turn ({messages}), {what}, vs chromadb's own 2-vector "
                f"upsert | {_pair(turn[key])} | {_pair(turn['chroma'])} "
                f"| {pc.fmt(turn[key]['p50'] / turn['chroma']['p50'])}x "
                f"| {'p50 <= 10 at 100k' if key == 'ours' else 'none: the turn is stored'} |"
            )


def _pair(cell: dict[str, float]) -> str:
    return f"{pc.fmt(cell.get('p50'))} / {pc.fmt(cell.get('p95'))}"


if __name__ == "__main__":
    main()
