"""Filtered search beside unfiltered search, at the package defaults (hybrid), same run.

A store of ``--size`` (``perf_common.SIZES``; 100k = one resource of 100,000 synthetic
messages with MiniLM-like vectors, SQLite + embedded Chroma written through our own
backends) whose messages carry a ``project`` tag (``p0``..``p3``, a quarter each) and one
creation time a minute apart. A fresh process then measures ``SemanticRecall.search``
(query embedding excluded: a table lookup), per query and in alternating order so that a
noisy machine slows all alike:

* ``plain``: no filter (the baseline);
* ``tag``: ``filter={"project": "p1"}`` (a quarter of the messages);
* ``tags``: ``filter={"project": {"$in": ["p1", "p2"]}}`` (a half);
* ``recent``: ``since=`` the newest third of the messages;
* ``tag+recent``: both (a twelfth).

Target (issue 26): a filtered search at 100k costs no more than 1.5x an unfiltered one
(p50). Every filtered hit is checked against its filter.

    python benchmarks/perf_filter.py                               # 100k (~5 min to build)
    python benchmarks/perf_filter.py --size tiny --queries 8 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import perf_common as pc

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

SCRIPT = Path(__file__).resolve()
START = datetime(2024, 1, 1, tzinfo=UTC)  # perf_common's first message time
TARGET = 1.5


def filters(messages: int) -> dict[str, dict[str, Any]]:
    """The searches compared, by name: their `search` options."""
    recent = START + timedelta(minutes=messages * 2 // 3)
    return {
        "plain": {},
        "tag": {"filter": {"project": "p1"}},
        "tags": {"filter": {"project": {"$in": ["p1", "p2"]}}},
        "recent": {"since": recent},
        "tag+recent": {"filter": {"project": "p1"}, "since": recent},
    }


def tag_of(row: int) -> str:
    return f"p{row % 4}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100k", help="tiny, 1k, 10k or 100k")
    parser.add_argument("--queries", type=int, default=200, help="queries")
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument("--work", type=Path, default=None, help="store folder (reused if built)")
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        corpus = pc.load_corpus(args.size, args.work / "corpus.pickle")
        pc.emit({"build": build, "query": query}[args.phase](corpus, args.work, args))
        return
    root = args.work or Path(tempfile.mkdtemp(prefix="perf-filter-"))
    base = ["--size", args.size, "--work", str(root), "--queries", str(args.queries)]
    try:
        if not (root / "built").exists():
            print(f"[{args.size}] building ...", flush=True)
            built = pc.run_child(SCRIPT, ["--phase", "build", *base])
            (root / "built").write_text(str(built["messages"]))
        print(f"[{args.size}] querying ...", flush=True)
        results = pc.run_child(SCRIPT, ["--phase", "query", *base])
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)
    results["size"] = args.size
    print_table(results)
    pc.write_json(args.out / "perf_filter.json", results)


def build(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every message, tagged, through our storage and vector index (batches of 5,000)."""
    storage = SQLiteStorage(work / "store" / "messages.sqlite3")
    vectors = ChromaVectorIndex.persistent(work / "store" / "chroma")
    vectors.open(pc.INDEX, dimension=pc.DIMENSION, model=pc.MODEL)
    for rows in pc.chunks(len(corpus), 5000):
        records = [
            replace(record, metadata=(("project", tag_of(row)),))
            for row, record in zip(rows, pc.message_records(corpus, rows), strict=True)
        ]
        storage.put(records)
        vectors.upsert(pc.INDEX, pc.vector_records(corpus, records, rows))
    storage.close()
    return {"messages": len(corpus)}


def query(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process: warm every path once, then each search per query, alternating."""
    queries = pc.make_queries(corpus, args.queries, seed=29)
    table = pc.TableEmbeddings({q.text: q.vector for q in queries})
    storage = SQLiteStorage(work / "store" / "messages.sqlite3")
    vectors = ChromaVectorIndex.persistent(work / "store" / "chroma")
    memory = SemanticRecall(
        storage=storage, vector_store=vectors, embeddings=table, index_name=pc.INDEX
    )
    searches = filters(len(corpus))
    for options in searches.values():  # cold paths (Chroma's load, sizes, postings) first
        for q in queries[:3]:
            memory.search(q.text, resource_id=q.resource_id, **options)
    storage._postings.join()  # measure the postings, not the SQL fallback of a first search
    lat: dict[str, list[float]] = {name: [] for name in searches}
    hits: dict[str, int] = dict.fromkeys(searches, 0)
    row_of = {message_id: row for row, message_id in enumerate(corpus.ids)}
    for n, q in enumerate(queries):
        order = list(searches.items())
        for name, options in order if n % 2 else order[::-1]:
            ms, found = pc.timed(
                lambda q=q, o=options: memory.search(q.text, resource_id=q.resource_id, **o)
            )
            lat[name].append(ms)
            hits[name] += len(found)
            for hit in found:  # every hit passes its filter
                row = row_of[hit.message.id]
                wanted = options.get("filter", {}).get("project")
                allowed = wanted["$in"] if isinstance(wanted, dict) else [wanted]
                assert wanted is None or tag_of(row) in allowed, (name, hit.message.id)
                assert "since" not in options or hit.message.created_at >= options["since"]
    summary = {name: pc.percentiles(values) for name, values in lat.items()}
    plain = summary["plain"]
    return {
        "parts": parts(memory, queries, searches["tag+recent"]),
        "messages": len(corpus),
        "queries": len(queries),
        "lat": summary,
        "hits_per_query": {name: hits[name] / len(queries) for name in searches},
        "p50_ratio": {name: summary[name]["p50"] / plain["p50"] for name in searches},
        "p95_ratio": {name: summary[name]["p95"] / plain["p95"] for name in searches},
    }


def parts(memory: SemanticRecall, queries: list[Any], options: dict[str, Any]) -> dict[str, float]:
    """p50 ms of what a filtered search's vector half costs, each part alone (same store).

    Chroma's unfiltered query of the resource's nearest `n` (ids and scores), then the
    storage's answers for the narrowest filter: which of 1,024 ids pass, and its share.
    """
    from langchain_semantic_recall.engine.narrowing import narrowing_of

    storage, vectors = memory.storage, memory.vector_store
    times: dict[str, list[float]] = {}
    for q in queries:
        scope = ScopeFilter(resource_id=q.resource_id)
        for n in (50, 256, 512, 768, 1024):
            ms, near = pc.timed(
                lambda n=n, v=q.vector, s=scope: vectors.nearest(pc.INDEX, v, k=n, scope=s)
            )
            times.setdefault(f"Chroma's nearest {n}, unfiltered", []).append(ms)
        narrowed = narrowing_of(options["filter"], options["since"]).applied(scope, START)
        ids = [message_id for message_id, _ in near]
        ms, _ = pc.timed(lambda i=ids, s=narrowed: storage.ids_in_scope(i, s))
        times.setdefault("ids_in_scope, 1,024 ids (tag+recent)", []).append(ms)
        ms, _ = pc.timed(lambda s=narrowed: storage.kept_share(s))
        times.setdefault("kept_share (tag+recent)", []).append(ms)
    return {name: pc.percentiles(values)["p50"] for name, values in times.items()}


def print_table(results: dict[str, Any]) -> None:
    """Each search beside the unfiltered one: p50 / p95 ms, ratios, hits per query."""
    print(
        f"\nSearch at {results['size']} ({results['messages']} messages), "
        f"package defaults (hybrid), {results['queries']} queries, query embedding "
        "excluded, ms:\n"
    )
    print("| search | p50 / p95 | p50 / plain | p95 / plain | hits per query | target |")
    print("|---|---|---|---|---|---|")
    for name, lat in results["lat"].items():
        ratio = results["p50_ratio"][name]
        verdict = "baseline" if name == "plain" else ("met" if ratio <= TARGET else "MISSED")
        hits = results["hits_per_query"][name]
        print(
            f"| {name} | {pc.fmt(lat['p50'])} / {pc.fmt(lat['p95'])} | {pc.fmt(ratio)}x "
            f"| {pc.fmt(results['p95_ratio'][name])}x | {pc.fmt(hits, 1)} "
            f"| {verdict if name == 'plain' else f'<= {TARGET}x: {verdict}'} |"
        )
    print("\nThe target is on p50. The parts of a filtered search's vector half, p50 ms:\n")
    for name, ms in results.get("parts", {}).items():
        print(f"- {name}: {pc.fmt(ms)}")


if __name__ == "__main__":
    main()
