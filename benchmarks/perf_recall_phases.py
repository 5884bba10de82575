"""The child-process phases of ``perf_recall.py``: build, query, peers, forget.

Each phase runs in a fresh process (BLAS pinned to one thread) and prints one JSON line.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import perf_common as pc

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storage.sqlite_sql import windows_sql
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex, resource_collection_name


def run_phase(args: argparse.Namespace) -> None:
    work: Path = args.work
    if args.phase == "memory":  # without the corpus in memory: only the store's own
        pc.emit(memory(work, args))
        return
    corpus = pc.load_corpus(args.size, work / "corpus.pkl")
    phase = {"build": build, "query": query, "peers": peers, "forget": forget}[args.phase]
    pc.emit(phase(corpus, work, args))


def _open(work: Path) -> tuple[SQLiteStorage, ChromaVectorIndex]:
    storage = SQLiteStorage(work / "store" / "messages.sqlite3")
    return storage, ChromaVectorIndex.persistent(work / "store" / "chroma")


# --- build ----------------------------------------------------------------------------------


def build(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write every message through our storage and vector index, in batches of 5,000."""
    storage, vectors = _open(work)
    vectors.open(pc.INDEX, dimension=pc.DIMENSION, model=pc.MODEL)
    rss_before = pc.current_rss_mb()
    storage_ms = vectors_ms = 0.0
    for rows in pc.chunks(len(corpus), 5000):
        records = pc.message_records(corpus, rows)
        ms, _ = pc.timed(lambda records=records: storage.put(records))
        storage_ms += ms
        pending = pc.vector_records(corpus, records, rows)
        ms, _ = pc.timed(lambda pending=pending: vectors.upsert(pc.INDEX, pending))
        vectors_ms += ms
    storage.close()
    total_bytes = pc.dir_bytes(work / "store")
    chroma_bytes = pc.dir_bytes(work / "store" / "chroma")
    n = len(corpus)
    return {
        "messages": n,
        "resources": len(corpus.by_resource),
        "threads": len(corpus.by_thread),
        "seconds": (storage_ms + vectors_ms) / 1000,
        "storage_per_s": n / (storage_ms / 1000),
        "vectors_per_s": n / (vectors_ms / 1000),
        "bytes": total_bytes,
        "chroma_bytes": chroma_bytes,
        "bytes_per_message": total_bytes / n,
        "chroma_bytes_per_message": chroma_bytes / n,
        "rss_bytes_per_message": max(0.0, pc.current_rss_mb() - rss_before) * 2**20 / n,
        "peak_rss_mb": pc.peak_rss_mb(),
    }


# --- query ----------------------------------------------------------------------------------


def query(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Recall latency (ours, raw parts, real embedding), agreement, cold first queries."""
    k = args.k
    queries = pc.make_queries(corpus, args.queries, seed=11 + args.run)
    table = pc.TableEmbeddings({q.text: q.vector for q in queries})
    storage, vectors = _open(work)
    real = LocalEmbeddings()
    real.embed_query("warm the model up")

    def engine(scope: str, embeddings: Any = table, mode: str = "dense") -> SemanticRecall:
        options: dict[str, Any] = {"top_k": k, "message_range": 1} if mode == "dense" else {}
        return SemanticRecall(
            storage=storage,
            vector_store=vectors,
            embeddings=embeddings,
            index_name=pc.INDEX,
            search_mode=mode,
            scope=scope,
            **options,
        )

    ours, ours_thread = engine("resource"), engine("thread")
    with_model, hybrid = engine("resource", real), engine("resource", mode="auto")
    conn = sqlite3.connect(work / "store" / "messages.sqlite3", check_same_thread=False)
    collections: dict[str, Any] = {}

    def raw_vector(q: pc.Query, where: dict[str, str] | None) -> list[str]:
        if q.resource_id not in collections:
            name = resource_collection_name(pc.INDEX, q.resource_id)
            collections[q.resource_id] = vectors.client.get_collection(name)
        result = collections[q.resource_id].query(
            query_embeddings=[q.vector.tolist()],
            n_results=k,
            where=where,
            include=["metadatas", "distances"],
        )
        return [str(meta["message_id"]) for meta in result["metadatas"][0]]

    def raw_sql(ids: list[str], scope: ScopeFilter) -> list[Any]:
        return conn.execute(*windows_sql(ids, 1, 1, scope)).fetchall()

    cold: list[float] = []
    seen: set[str] = set()
    for q in queries:  # the first query of each resource in this process: loads its index
        if q.resource_id not in seen:
            seen.add(q.resource_id)
            ms, _ = pc.timed(
                lambda q=q: ours.search(q.text, thread_id=q.thread_id, resource_id=q.resource_id)
            )
            cold.append(ms)
    lat: dict[str, list[float]] = {key: [] for key in _KEYS}
    agree: list[float] = []
    thread_agree: list[float] = []
    for n, q in enumerate(queries):
        ids = {"thread_id": q.thread_id, "resource_id": q.resource_id}
        fresh = f"{q.text} (run {args.run})"  # a cache miss: the model really embeds it
        scope = ScopeFilter(resource_id=q.resource_id)

        def raw_chain(text: str, q: pc.Query = q, scope: ScopeFilter = scope) -> float:
            ms, _ = pc.timed(lambda: real.embed_query(text))
            raw_sql(raw_vector(q, None), scope)
            return ms

        # Each pair runs in alternating order: the first call after other work pays for
        # cold CPU caches and sleeping model threads.
        incl = [
            ("ours_incl", lambda fresh=fresh, ids=ids: with_model.search(fresh, **ids)),
            ("raw_incl", lambda fresh=fresh: raw_chain(fresh + " again")),
        ]
        timed_incl = {key: pc.timed(fn) for key, fn in (incl if n % 2 else incl[::-1])}
        ms_incl = timed_incl["ours_incl"][0]
        ms_raw_incl, ms_embed = timed_incl["raw_incl"]
        thread_scope = ScopeFilter(resource_id=q.resource_id, thread_id=q.thread_id)
        # Ours and raw alternate which goes first: the first one after the model's run
        # pays for cold CPU caches.
        pair = [
            ("ours", lambda q=q, ids=ids: ours.search(q.text, **ids)),
            ("raw", lambda q=q, s=scope: raw_sql(raw_vector(q, None), s)),
            ("thread_ours", lambda q=q, ids=ids: ours_thread.search(q.text, **ids)),
            (
                "thread_raw",
                lambda q=q, s=thread_scope: raw_sql(raw_vector(q, {"thread_id": q.thread_id}), s),
            ),
        ]
        if n % 2:
            pair = [pair[1], pair[0], pair[3], pair[2]]
        out = {key: pc.timed(fn) for key, fn in pair}
        ms_vec, found = pc.timed(lambda q=q: raw_vector(q, None))
        ms_sql, _ = pc.timed(lambda found=found, scope=scope: raw_sql(found, scope))
        if n % 2 == 0 or len(corpus) <= 100_000:
            ms_hybrid, _ = pc.timed(lambda q=q, ids=ids: hybrid.search(q.text, **ids))
            lat["hybrid"].append(ms_hybrid)
            # Its two searches alone: the keyword search in SQLite, the vector pool of 50.
            ms_kw, _ = pc.timed(
                lambda q=q, s=scope: storage.keyword_search(q.text, scope=s, limit=50)
            )
            lat["hybrid_keyword"].append(ms_kw)
            ms_pool, _ = pc.timed(
                lambda q=q, s=scope: vectors.query(pc.INDEX, q.vector.tolist(), k=50, scope=s)
            )
            lat["hybrid_vectors"].append(ms_pool)
        ms_ours, hits = out["ours"]
        ms_raw = out["raw"][0]
        for key, value in (
            ("ours", ms_ours),
            ("ours_incl", ms_incl),
            ("raw", ms_raw),
            ("raw_incl", ms_raw_incl),
            ("embed", ms_embed),
            ("raw_vector", ms_vec),
            ("raw_sql", ms_sql),
            ("thread_ours", out["thread_ours"][0]),
            ("thread_raw", out["thread_raw"][0]),
        ):
            lat[key].append(value)
        agree.append(_agreement(corpus, corpus.by_resource[q.resource_id], q, hits, k))
        rows = corpus.by_thread[q.thread_id]
        thread_agree.append(_agreement(corpus, rows, q, out["thread_ours"][1], k))
    summary = {key: pc.percentiles(values) for key, values in lat.items()}
    return {
        "lat": summary,
        "ratio": summary["ours"]["p50"] / summary["raw"]["p50"],
        "ratio_incl": summary["ours_incl"]["p50"] / summary["raw_incl"]["p50"],
        "agree": float(np.mean(agree)),
        "agree_min": float(np.min(agree)),
        "thread_agree": float(np.mean(thread_agree)),
        "cold_p50": float(np.median(cold)),
        "cold_max": float(np.max(cold)),
        "cold_n": len(cold),
        "rss_mb": pc.current_rss_mb(),
        "peak_rss_mb": pc.peak_rss_mb(),
    }


_KEYS = (
    "ours",
    "ours_incl",
    "raw",
    "raw_incl",
    "embed",
    "raw_vector",
    "raw_sql",
    "thread_ours",
    "thread_raw",
    "hybrid",
    "hybrid_keyword",
    "hybrid_vectors",
)


def _agreement(corpus: pc.Corpus, rows: np.ndarray, q: pc.Query, hits: Any, k: int) -> float:
    exact = pc.exact_top(corpus, rows, q.vector, k)
    found = [hit.message.id for hit in hits]
    scores = {m: float(corpus.vectors[int(m[1:])] @ q.vector) for m in found}
    return pc.agreement(found, exact, scores)


# --- memory ---------------------------------------------------------------------------------


def memory(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """RSS grown by opening the store and searching up to 200 resources (their indexes load)."""
    storage, vectors = _open(work)
    table = pc.TableEmbeddings({})
    engine = SemanticRecall(
        storage=storage,
        vector_store=vectors,
        embeddings=table,
        index_name=pc.INDEX,
        search_mode="dense",
        top_k=args.k,
    )
    threads = storage.list_threads()
    owners: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for info in threads:
        owners.setdefault(info.resource_id, info.thread_id)
        sizes[info.resource_id] = sizes.get(info.resource_id, 0) + info.message_count
    rng = np.random.default_rng(5)
    picked = sorted(owners)
    picked = [picked[int(i)] for i in rng.permutation(len(picked))[:200]]
    before = pc.current_rss_mb()
    for resource_id in picked:
        engine.search("memory probe", thread_id=owners[resource_id], resource_id=resource_id)
    loaded = sum(sizes[r] for r in picked)
    grown = max(0.0, pc.current_rss_mb() - before)
    return {
        "resources_loaded": len(picked),
        "messages_loaded": loaded,
        "rss_grown_mb": grown,
        "bytes_per_loaded_message": grown * 2**20 / max(1, loaded),
        "rss_mb": pc.current_rss_mb(),
    }


# --- peers ----------------------------------------------------------------------------------


def peers(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """LangGraph's semantic store search on the same vectors: InMemoryStore, SqliteStore."""
    queries = pc.make_queries(corpus, args.queries, seed=11)
    table = {corpus.ids[row]: corpus.vectors[row] for row in range(len(corpus))}
    table.update({q.text: q.vector for q in queries})
    embeddings = pc.TableEmbeddings(table)
    out: dict[str, Any] = {}
    from langgraph.store.memory import InMemoryStore

    index = {"dims": pc.DIMENSION, "embed": embeddings, "fields": ["id"]}
    out["InMemoryStore"] = _peer(InMemoryStore(index=index), corpus, queries, args.k)  # type: ignore[arg-type]
    try:
        import pysqlite3  # type: ignore[import-not-found]
        from langgraph.store.sqlite import SqliteStore
    except ImportError as exc:
        out["SqliteStore"] = {"error": f"skipped: {exc} (pip install pysqlite3-binary)"}
        return out
    conn = pysqlite3.connect(str(work / "peer.sqlite3"), check_same_thread=False)
    conn.isolation_level = None
    store = SqliteStore(conn, index={**index, "text_fields": ["id"]})  # type: ignore[typeddict-unknown-key]
    store.setup()
    out["SqliteStore"] = _peer(store, corpus, queries, args.k)
    return out


def _peer(store: Any, corpus: pc.Corpus, queries: list[pc.Query], k: int) -> dict[str, Any]:
    from langgraph.store.base import PutOp

    put_ms = 0.0
    for rows in pc.chunks(len(corpus), 2000):
        ops = [
            PutOp(
                ("mem", corpus.resources[row], corpus.threads[row]),
                corpus.ids[row],
                {"id": corpus.ids[row], "text": corpus.texts[row]},
            )
            for row in rows
        ]
        ms, _ = pc.timed(lambda ops=ops: store.batch(ops))
        put_ms += ms
    res: list[float] = []
    thread: list[float] = []
    agree: list[float] = []
    for q in queries:
        ms, items = pc.timed(
            lambda q=q: store.search(("mem", q.resource_id), query=q.text, limit=k)
        )
        res.append(ms)
        ms, _ = pc.timed(
            lambda q=q: store.search(("mem", q.resource_id, q.thread_id), query=q.text, limit=k)
        )
        thread.append(ms)
        exact = pc.exact_top(corpus, corpus.by_resource[q.resource_id], q.vector, k)
        found = [item.key for item in items]
        scores = {m: float(corpus.vectors[int(m[1:])] @ q.vector) for m in found}
        agree.append(pc.agreement(found, exact, scores))
    return {
        "res": pc.percentiles(res),
        "thread": pc.percentiles(thread),
        "agree": float(np.mean(agree)),
        "put_per_s": len(corpus) / (put_ms / 1000),
        "rss_mb": pc.current_rss_mb(),
    }


# --- forget ---------------------------------------------------------------------------------


def forget(corpus: pc.Corpus, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Forget threads and resources through the engine (and the vector delete alone)."""
    storage, vectors = _open(work)
    table = pc.TableEmbeddings({})
    memory = SemanticRecall(
        storage=storage, vector_store=vectors, embeddings=table, index_name=pc.INDEX
    )
    resources = sorted(corpus.by_resource)
    threads = sorted(corpus.by_thread)
    rng = np.random.default_rng(3)
    picked = [threads[int(i)] for i in rng.choice(len(threads), size=min(10, len(threads)))]
    thread_ms = []
    vector_ms = []
    for n, thread_id in enumerate(dict.fromkeys(picked)):
        owner = corpus.resources[int(corpus.by_thread[thread_id][0])]
        if n % 2 == 0:
            ms, _ = pc.timed(lambda t=thread_id, o=owner: memory.forget_thread(t, resource_id=o))
            thread_ms.append(ms)
        else:  # what forget_thread costs once it passes the owner to the vector delete
            ms, _ = pc.timed(
                lambda t=thread_id, o=owner: vectors.delete(pc.INDEX, thread_id=t, resource_id=o)
            )
            vector_ms.append(ms)
    resource_ms = []
    for resource_id in resources[-3:]:
        ms, _ = pc.timed(lambda r=resource_id: memory.forget_resource(r))
        resource_ms.append(ms)
    return {
        "forget": {
            "thread_ms": pc.percentiles(thread_ms),
            "vector_thread_ms": pc.percentiles(vector_ms),
            "resource_ms": pc.percentiles(resource_ms),
        }
    }
