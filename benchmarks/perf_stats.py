"""`stats` of a 100k-message store, ours beside an older source tree, in the same run.

`stats` also counts the vectors that lack their message's metadata (written before 0.3,
`RecallStats.vectors_without_metadata`) and those beyond their message's chunks
(`stray_vectors`). This measures what that costs, on one resource of ``--size``
(``perf_common.SIZES``; 100k by default; 20k builds and runs in minutes on 2 cores)
written through our backends, in three stores:

* ``plain``: no message carries metadata (the common case);
* ``tag4``: every message carries ``project`` = one of 4 values (``perf_filter.py``'s);
* ``unique``: every message carries ``ref`` = its own value (the worst case for the
  check of 0.3.0, one index read per 100 values; today's reads each vector once).

Each fresh process opens a store and times, ``--runs`` times after one warm-up call, the
two ways `stats` counts: the engine's (`SemanticRecall.stats`, through chromadb) and the
command line's (`cli stats` on an embedded store: the vectors read from Chroma's own file,
`settings.local_file_index`, then `read_stats_op`). The processes alternate between our
tree and ``--baseline-src`` (e.g. ``git archive HEAD~1 langchain_semantic_recall | tar -x
-C DIR``) so a busy machine slows both alike.

    python benchmarks/perf_stats.py --work DIR --baseline-src OLD    # builds once (~4 min each)
    python benchmarks/perf_stats.py --size tiny --runs 1 --work /tmp/x --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import perf_common as pc

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
KINDS = ("plain", "tag4", "unique")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100k", help="tiny, 1k, 10k, 20k or 100k")
    parser.add_argument("--runs", type=int, default=5, help="timed calls per process")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree and store")
    parser.add_argument("--work", type=Path, required=True, help="stores (built if absent)")
    parser.add_argument("--baseline-src", type=Path, default=None, help="an older source tree")
    parser.add_argument("--out", type=Path, default=pc.RESULTS)
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "build":
        pc.emit(build(args.work / args.kind, args.size, args.kind))
        return
    if args.phase == "measure":
        pc.emit(measure(args.work / args.kind, args.runs))
        return
    for kind in KINDS:
        if not (args.work / kind / "built").exists():
            print(f"[{kind}] building {args.size} ...", flush=True)
            child(ROOT, ["--phase", "build", "--kind", kind, "--size", args.size], args.work)
            (args.work / kind / "built").write_text(args.size)
    sources = {"ours": ROOT}
    if args.baseline_src is not None:
        sources["before"] = args.baseline_src.resolve()
    cells: dict[str, list[float]] = {}
    lacking: dict[str, Any] = {}
    for _ in range(args.rounds):
        for kind in KINDS:
            for name, source in sources.items():
                argv = ["--phase", "measure", "--kind", kind, "--runs", str(args.runs)]
                got = child(source, argv, args.work)
                for way, values in got["ms"].items():
                    cells.setdefault(f"{kind} {way} ({name})", []).extend(values)
                lacking[f"{kind} ({name})"] = got["lacking"]
    results = {
        "size": args.size,
        "runs": args.runs,
        "rounds": args.rounds,
        "sources": {name: str(path) for name, path in sources.items()},
        "ms": {label: pc.median_spread(values) for label, values in cells.items()},
        "vectors_without_metadata": lacking,
    }
    print_table(results, sources)
    pc.write_json(args.out / "perf_stats.json", results)


def child(source: Path, argv: list[str], work: Path) -> Any:
    """Run this script's phase in a fresh interpreter importing the package from `source`."""
    env = pc.child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(source), str(SCRIPT.parent)])
    return pc.run_child(SCRIPT, [*argv, "--work", str(work)], env=env)


def build(folder: Path, size: str, kind: str) -> dict[str, Any]:
    """One resource of `size` messages through our storage and vector index."""
    from langchain_semantic_recall import SQLiteStorage
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    corpus = pc.make_corpus(size)
    storage = SQLiteStorage(folder / "store" / "messages.sqlite3")
    vectors = ChromaVectorIndex.persistent(folder / "store" / "chroma")
    vectors.open(pc.INDEX, dimension=pc.DIMENSION, model=pc.MODEL)
    for rows in pc.chunks(len(corpus), 5000):
        records = pc.message_records(corpus, rows)
        if kind == "tag4":
            records = [
                replace(r, metadata=(("project", f"p{n % 4}"),))
                for n, r in zip(rows, records, strict=True)
            ]
        elif kind == "unique":
            records = [
                replace(r, metadata=(("ref", f"r{n}"),)) for n, r in zip(rows, records, strict=True)
            ]
        storage.put(records)
        vectors.upsert(pc.INDEX, pc.vector_records(corpus, records, rows))
    storage.close()
    return {"messages": len(corpus)}


def measure(folder: Path, runs: int) -> dict[str, Any]:
    """Time the engine's `stats` and the command line's file read, alternating."""
    from langchain_semantic_recall import SemanticRecall, SQLiteStorage
    from langchain_semantic_recall.engine import maintenance_ops
    from langchain_semantic_recall.engine.steps import Backends, drive
    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
    from langchain_semantic_recall.vectors.chroma_file import ChromaFile

    store = folder / "store"
    storage = SQLiteStorage(store / "messages.sqlite3", read_only=True)
    memory = SemanticRecall(
        storage=storage,
        vector_store=ChromaVectorIndex.persistent(store / "chroma"),
        embeddings=pc.TableEmbeddings({}),
        index_name=pc.INDEX,
        read_only=True,
    )
    info = IndexInfo(pc.INDEX, pc.MODEL, pc.DIMENSION)
    settings = importlib.import_module("langchain_semantic_recall.settings")
    newer = hasattr(settings, "local_file_index")

    def from_file() -> Any:  # what `cli stats` does on an embedded store
        found = ChromaFile(store / "chroma").index(info.name, None)
        assert found is not None
        if hasattr(found, "held"):  # each message's vector ids (the stray chunks' count)
            writes = importlib.import_module("langchain_semantic_recall.engine.vector_writes")
            chunking = writes.Chunking(memory.embeddings, None)
            # and the messages with a vector under no resource (an adoption's strays)
            records = importlib.import_module("langchain_semantic_recall.records")
            loose = ChromaFile(store / "chroma").index(
                info.name, records.ScopeFilter(records.NO_RESOURCE)
            )
            unowned = frozenset() if loose is None else loose.message_ids
            op = maintenance_ops.read_stats_op(
                info, found.held, None, None, chunking=chunking, unowned=unowned
            )
        else:
            extra = {"carrying": found.carrying} if newer else {}
            op = maintenance_ops.read_stats_op(info, found.message_ids, None, None, **extra)
        return drive(op, Backends(storage))

    ways = {"engine": memory.stats, "file": from_file}
    lacking = getattr(memory.stats(), "vectors_without_metadata", None)  # warm-up
    from_file()
    ms: dict[str, list[float]] = {way: [] for way in ways}
    for n in range(runs):
        for way, call in ways.items() if n % 2 else reversed(list(ways.items())):
            start = time.perf_counter()
            call()
            ms[way].append((time.perf_counter() - start) * 1000)
    memory.close()
    return {"ms": ms, "lacking": lacking}


def print_table(results: dict[str, Any], sources: dict[str, Path]) -> None:
    cells = results["ms"]
    print(
        f"\n`stats` of one resource of {results['size']} messages, ms: median [min-max] of "
        f"{results['rounds']} processes x {results['runs']} calls\n"
    )
    print("| store | way | ours | before |")
    print("|---|---|---|---|")
    for kind in KINDS:
        for way in ("engine", "file"):
            ours = cells[f"{kind} {way} (ours)"]
            before = cells.get(f"{kind} {way} (before)")
            old = pc.spread(before, 0) if before else "-"
            print(f"| {kind} | {way} | **{pc.spread(ours, 0)}** | {old} |")
    print(f"\nvectors_without_metadata (ours): {results['vectors_without_metadata']}")


if __name__ == "__main__":
    main()
