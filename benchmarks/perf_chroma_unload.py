"""Embedded Chroma's loaded-index bound: lost searches and costs, ours beside Chroma's eviction.

Writes ``--resources`` collections of ``--vectors`` random unit vectors each (one vector
of every resource in memory only: written after the index's last copy on disk), then
searches every resource for that vector, ``--rounds`` times round-robin, and counts the
searches that fail or miss it:

* **Chroma's eviction** (the baseline): a plain ``PersistentClient`` whose pool capacity
  is lowered to ``--bound`` (what the package did before issue 23);
* **ours**: ``ChromaVectorIndex`` with the same bound (``RestartingBindings``: every index
  unloaded at once, rebuilt from disk and log on its next use).

Then, on ours: a search's time with every index loaded (through the wrapper, and through
Chroma's own bindings in the same process), the time of an unload (a restart of the
bindings), and of the first search after it.

    python benchmarks/perf_chroma_unload.py                      # ~1 min
    python benchmarks/perf_chroma_unload.py --resources 20 --vectors 50 --rounds 2  # smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import perf_common as pc

from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds
from langchain_semantic_recall.vectors.chroma_workarounds.unload import RestartingBindings

DIMENSION = 64
NAME = "unload"


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    values = rng.standard_normal((n, DIMENSION)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def records(resource: str, vectors: np.ndarray, start: int) -> list[VectorRecord]:
    return [
        VectorRecord(
            id=f"{resource}-{start + n}",
            vector=[float(x) for x in vector],
            message_id=f"{resource}-{start + n}",
            thread_id=f"{resource}-t",
            resource_id=resource,
            role="user",
            content="x",
            created_at=datetime(2024, 1, 1, tzinfo=UTC),
        )
        for n, vector in enumerate(vectors)
    ]


def baseline(folder: Path, args: argparse.Namespace, late: dict[str, np.ndarray]) -> int:
    """Lost searches with Chroma's own eviction at capacity `--bound`."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        path=str(folder), settings=Settings(anonymized_telemetry=False)
    )
    server: Any = client._server  # type: ignore[attr-defined]
    server.hnsw_cache_size = args.bound
    server.start()
    rng = np.random.default_rng(7)
    collections = {}
    for resource in late:
        collection = client.get_or_create_collection(
            f"r-{resource}", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
        collection.count()  # as the package's handle lookup does
        collection.upsert(
            ids=[f"{resource}-{n}" for n in range(args.vectors)], embeddings=unit(rng, args.vectors)
        )
        collection.upsert(ids=[f"{resource}-late"], embeddings=late[resource][None, :])
        collections[resource] = collection
    lost = 0
    for _ in range(args.rounds):
        for resource, collection in collections.items():
            try:
                found = collection.query(query_embeddings=late[resource][None, :], n_results=1)
                lost += found["ids"][0] != [f"{resource}-late"]
            except Exception:  # "Nothing found on disk"
                lost += 1
    return lost


def ours(folder: Path, args: argparse.Namespace, late: dict[str, np.ndarray]) -> dict[str, Any]:
    """Lost searches and costs with `RestartingBindings` at the same bound."""
    index = ChromaVectorIndex.persistent(
        folder, workarounds=ChromaWorkarounds(max_loaded=args.bound)
    )
    server: Any = index.client._server  # type: ignore[attr-defined]
    wrapper: RestartingBindings = server.bindings
    index.open(NAME, dimension=DIMENSION, model="random")
    rng = np.random.default_rng(7)
    for resource in late:
        index.upsert(NAME, records(resource, unit(rng, args.vectors), 0))
        index.upsert(NAME, [*records(resource, late[resource][None, :], args.vectors)])
    lost = 0
    restarts = wrapper.restarts
    for _ in range(args.rounds):
        for resource, vector in late.items():
            hits = index.query(NAME, vector.tolist(), k=1, scope=ScopeFilter(resource_id=resource))
            lost += [h.id for h in hits] != [f"{resource}-{args.vectors}"]
    restarts = wrapper.restarts - restarts

    few = list(late)[: max(1, min(args.bound, len(late)) - 1)]

    def search_all() -> None:
        for resource in few:
            index.query(NAME, late[resource].tolist(), k=4, scope=ScopeFilter(resource_id=resource))

    search_all()  # load them
    inner = wrapper._inner
    wrapped, plain = [], []
    for _ in range(args.repeats):  # interleaved: the same indexes, through either bindings
        wrapped.append(pc.timed(search_all)[0] / len(few))  # ms
        server.bindings = inner  # Chroma's own bindings
        try:
            plain.append(pc.timed(search_all)[0] / len(few))
        finally:
            server.bindings = wrapper
    unload, cold = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        wrapper.limit = wrapper.limit  # starts the bindings again
        unload.append((time.perf_counter() - started) * 1000)
        cold.append(pc.timed(search_all)[0] / len(few))
    return {
        "lost": lost,
        "restarts": restarts,
        "search_ms": pc.percentiles(wrapped),
        "search_plain_ms": pc.percentiles(plain),
        "unload_ms": pc.percentiles(unload),
        "cold_search_ms": pc.percentiles(cold),
    }


def show(cell: dict[str, float]) -> str:
    return f"p50 {pc.fmt(cell['p50'])} ms, p95 {pc.fmt(cell['p95'])} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--resources", type=int, default=120)
    parser.add_argument("--vectors", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bound", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=pc.RESULTS)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    late = {f"u{n}": vector for n, vector in enumerate(unit(rng, args.resources))}
    work = Path(tempfile.mkdtemp(prefix="perf-chroma-unload-"))
    try:
        lost_baseline = baseline(work / "baseline", args, late)
        result = ours(work / "ours", args, late)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    searches = args.resources * args.rounds
    lost, unloads = result["lost"], result["restarts"]
    print(f"{args.resources} resources x {args.vectors} vectors, bound {args.bound}")
    print(f"  of {searches} searches, failed or missed the resource's latest vector:")
    print(f"    Chroma's eviction (baseline): {lost_baseline}")
    print(f"    ours (RestartingBindings):    {lost} ({unloads} unloads)")
    print(f"  a search, every index loaded:   ours {show(result['search_ms'])}")
    print(f"                                  Chroma's bindings {show(result['search_plain_ms'])}")
    print(f"  an unload (bindings restarted): {show(result['unload_ms'])}")
    print(f"  a search right after an unload: {show(result['cold_search_ms'])}")
    pc.write_json(
        args.out / "perf_chroma_unload.json",
        {
            "args": {k: str(v) for k, v in vars(args).items()},
            "baseline_lost": lost_baseline,
            **result,
        },
    )


if __name__ == "__main__":
    main()
