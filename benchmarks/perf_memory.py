"""Resident memory of a long-running process that searches many resources, one after another.

Builds a store of ``--resources`` x ``--messages`` (synthetic chat text, random 384-d unit
vectors, SQLite + embedded Chroma written through our own backends), then, in a fresh
process, runs one search at the package defaults (hybrid) in every resource in turn,
the way a server meets its users, and prints the resident memory (RSS) as resources
are touched: growth per touched resource, and whether it levels off.

``--chroma-cache N`` bounds embedded Chroma's cache of loaded HNSW indexes to N
collections (``ChromaWorkarounds(max_loaded=N)``); the default is the package
default (``settings.DEFAULT_MAX_LOADED``, what ``SemanticRecall.local`` opens); 0 keeps
Chroma's own default (RLIMIT_NOFILE / 5 collections: 200,000 on a typical Linux box, i.e.
never evicts).

Each resource's first search is cold (its HNSW index loads, its keyword postings build in
the background): their p50 / p95 are printed beside Chroma's own cold first query of the
same collections (chromadb alone, another fresh process, same order), the floor. Target
(issue 24): cold p95 <= 50 ms with 2,000 resources of 1,000 messages.

    python benchmarks/perf_memory.py --resources 300 --messages 1000          # ~4 min
    python benchmarks/perf_memory.py --resources 300 --chroma-cache 0 --work DIR  # unbounded
    python benchmarks/perf_memory.py --resources 6 --messages 50 --out /tmp/x  # smoke
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import perf_common as pc
from chromadb.config import Settings
from langchain_core.messages import HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import MessageRecord
from langchain_semantic_recall.settings import DEFAULT_MAX_LOADED
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_layout import resource_collection_name
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds

SCRIPT = Path(__file__).resolve()
_WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "ren", "tu", "sa") for b in ("vel", "dor", "pin")]
_WORDS += ["time", "day", "like", "today", "work", "home", "friend", "movie", "dinner", "trip"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=300)
    parser.add_argument("--messages", type=int, default=1000, help="messages per resource")
    parser.add_argument(
        "--chroma-cache",
        type=int,
        default=DEFAULT_MAX_LOADED,
        help="HNSW indexes kept loaded (0: Chroma's own cache, which never evicts)",
    )
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument("--work", type=Path, default=None, help="store folder (reused if built)")
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "build":
        pc.emit(build(args))
        return
    if args.phase == "touch":
        pc.emit(touch(args))
        return
    if args.phase == "chroma-cold":
        pc.emit(chroma_cold(args))
        return
    root = args.work or Path(tempfile.mkdtemp(prefix="perf-memory-"))
    shape = f"{args.resources}x{args.messages}"
    work = root / shape
    base = [*("--resources", str(args.resources), "--messages", str(args.messages))]
    base += ["--work", str(work), "--chroma-cache", str(args.chroma_cache)]
    try:
        if not (work / "built").exists():
            print(f"[{shape}] building ...", flush=True)
            built = pc.run_child(SCRIPT, ["--phase", "build", *base])
            (work / "built").write_text(str(built))
        print(f"[{shape}] touching every resource in a fresh process ...", flush=True)
        floor = pc.run_child(SCRIPT, ["--phase", "chroma-cold", *base])
        result = pc.run_child(SCRIPT, ["--phase", "touch", *base])
        result["chroma_cold_ms"] = floor
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)
    result["shape"] = shape
    print_table(result)
    pc.write_json(args.out / "perf_memory.json", result)


def _records(rng: np.random.Generator, resource: int, count: int) -> list[MessageRecord]:
    out = []
    for n in range(count):
        words = rng.choice(_WORDS, size=int(rng.integers(6, 30)))
        text = " ".join(words)
        out.append(
            MessageRecord(
                id=f"r{resource}-m{n}",
                thread_id=f"r{resource}-t{n // 100}",
                resource_id=f"user-{resource}",
                role="user" if n % 2 == 0 else "assistant",
                text=text,
                created_at=pc._START + timedelta(minutes=n),
                payload=MessageRecord.dump(HumanMessage(text)),
            )
        )
    return out


def build(args: argparse.Namespace) -> dict[str, Any]:
    """Every resource's messages and vectors, ~5,000 per write."""
    rng = np.random.default_rng(3)
    storage = SQLiteStorage(args.work / "messages.sqlite3")
    vectors = ChromaVectorIndex.persistent(args.work / "chroma")
    vectors.open(pc.INDEX, dimension=pc.DIMENSION, model=pc.MODEL)
    start = time.perf_counter()
    per_batch = max(1, 5000 // args.messages)
    for first in range(0, args.resources, per_batch):
        records = [
            record
            for resource in range(first, min(args.resources, first + per_batch))
            for record in _records(rng, resource, args.messages)
        ]
        storage.put(records)
        matrix = rng.standard_normal((len(records), pc.DIMENSION)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        vectors.upsert(pc.INDEX, pc.records_with_vectors(records, matrix))
    storage.close()
    return {"seconds": time.perf_counter() - start, "bytes": pc.dir_bytes(args.work)}


def touch(args: argparse.Namespace) -> dict[str, Any]:
    """One hybrid search per resource, in turn; RSS sampled along the way."""
    storage = SQLiteStorage(args.work / "messages.sqlite3")
    vectors = ChromaVectorIndex.persistent(
        args.work / "chroma",
        workarounds=ChromaWorkarounds(max_loaded=args.chroma_cache or None),
    )
    memory = SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=pc.TableEmbeddings({}),
        index_name=pc.INDEX,
    )
    memory.search("warm up", resource_id="user-0")
    gc.collect()
    baseline = pc.current_rss_mb()
    samples: list[tuple[int, float]] = [(0, baseline)]
    step = max(1, args.resources // 20)
    latencies: list[float] = []
    for resource in range(args.resources):
        ms, _ = pc.timed(
            lambda r=resource: memory.search("what about dinner time", resource_id=f"user-{r}")
        )
        latencies.append(ms)
        if (resource + 1) % step == 0 or resource + 1 == args.resources:
            samples.append((resource + 1, pc.current_rss_mb()))
    touched, final = samples[-1]
    half = samples[len(samples) // 2]
    late_slope = (final - half[1]) / max(1, touched - half[0])
    return {
        "resources": args.resources,
        "messages": args.messages,
        "chroma_cache": args.chroma_cache,
        "baseline_mb": baseline,
        "final_mb": final,
        "grown_mb": final - baseline,
        "mb_per_resource": (final - baseline) / touched,
        "late_mb_per_resource": late_slope,
        "samples": samples,
        "search_ms": pc.percentiles(latencies),
    }


def chroma_cold(args: argparse.Namespace) -> dict[str, Any]:
    """chromadb alone, a fresh process: the first query of every resource's collection."""
    client = chromadb.PersistentClient(
        str(args.work / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    vector = np.random.default_rng(4).standard_normal((1, pc.DIMENSION)).astype(np.float32)
    latencies = []
    for resource in range(args.resources):
        collection = client.get_collection(resource_collection_name(pc.INDEX, f"user-{resource}"))
        ms, _ = pc.timed(lambda c=collection: c.query(vector, n_results=50, include=[]))
        latencies.append(ms)
    return pc.percentiles(latencies)


def print_table(r: dict[str, Any]) -> None:
    """RSS as resources are touched, and the growth per resource."""
    cache = r["chroma_cache"] or "Chroma default (no eviction)"
    print(
        f"\nRSS while touching {r['shape']} (resources x messages), loaded-index cache: {cache}\n"
    )
    print("| resources touched | RSS MB |")
    print("|---|---|")
    for touched, rss in r["samples"]:
        print(f"| {touched} | {rss:.0f} |")
    print(
        f"\ngrown {r['grown_mb']:.0f} MB: {r['mb_per_resource']:.2f} MB per resource on average, "
        f"{r['late_mb_per_resource']:.2f} MB per resource over the second half; search p50 "
        f"{r['search_ms']['p50']:.1f} ms, p95 {r['search_ms']['p95']:.1f} ms (cold: each "
        "resource's first search)"
    )
    floor = r["chroma_cold_ms"]
    print(
        f"Chroma's own cold first query of the same collections: p50 {floor['p50']:.1f} ms, "
        f"p95 {floor['p95']:.1f} ms; ours / Chroma p95: "
        f"{r['search_ms']['p95'] / floor['p95']:.2f}x (target: ours p95 <= 50 ms at "
        "2,000 x 1,000)"
    )


if __name__ == "__main__":
    main()
