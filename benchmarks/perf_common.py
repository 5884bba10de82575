"""Shared parts of the ``perf_*`` benchmarks: synthetic corpora, stores, timing and output.

Data: *synthetic text with precomputed vectors*. Every message gets a text (pseudo-words of
its topic mixed with common words, so keyword search and storage sizes are realistic) and
a 384-d unit vector drawn to look like MiniLM's: a shared direction (unrelated sentences
still score ~0.1), a topic direction (same topic ~0.4) and noise. A query is a stored
message's vector moved to cosine 0.69 from it (MiniLM's typical top-1 for a paraphrase),
so every query has real neighbours: its source, then near-tie topic mates. The embedder
that would dominate index time at 1M messages is replaced by a table lookup
(:class:`TableEmbeddings`); the real model is timed separately, in the same loops.

Run the scripts, not this module. Heavy phases run in child processes with BLAS pinned
to one thread (:func:`child_env`), so each phase's memory and first-query costs are its own.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall.records import MessageRecord, VectorRecord

DIMENSION = 384
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
INDEX = "bench-minilm-384"
RESULTS = Path(__file__).resolve().parent / "results"
HYBRID_SCRIPT = Path(__file__).resolve().parent / "perf_hybrid.py"
QUERY_COSINE = 0.69
_START = datetime(2024, 1, 1, tzinfo=UTC)
_COMMON = (
    *("the", "a", "to", "of", "and", "in", "I", "you", "we", "it", "is", "was", "for", "on"),
    *("that", "with", "my", "your", "this", "have", "be", "do", "at", "are", "not", "can"),
    *("so", "just", "but", "what", "like", "about", "how", "get", "go", "time", "day"),
)
_SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "pin", "qua", "ze", "bri")

SIZES: dict[str, tuple[int, int, int]] = {
    # name: (messages, resources, messages per thread)
    "tiny": (300, 3, 20),
    "1k": (1_000, 10, 50),
    "10k": (10_000, 10, 100),
    "20k": (20_000, 1, 100),
    "100k": (100_000, 1, 100),
    "1m": (1_000_000, 1_000, 100),
}
"""The stores: 100k messages in ONE resource and 1M over 1,000 resources are the targets."""


def child_env() -> dict[str, str]:
    """The environment of a benchmark child: BLAS and OpenMP pinned to one thread."""
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[key] = "1"
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def run_child(
    script: Path,
    args: Sequence[str],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> Any:
    """Run ``script`` with ``args`` in a child process; its last stdout line is JSON.

    ``env``: the child's environment (default ``child_env()``).
    """
    done = subprocess.run(
        [sys.executable, str(script), *args],
        env=child_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- corpus ---------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Messages in storage order (resource, thread, position), with their vectors."""

    ids: list[str]
    resources: list[str]
    threads: list[str]
    texts: list[str]
    vectors: np.ndarray
    by_resource: dict[str, np.ndarray] = field(default_factory=dict)
    by_thread: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


def _word(rng: np.random.Generator) -> str:
    return "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), 3))


def make_corpus(size: str, *, seed: int = 7) -> Corpus:
    """The deterministic corpus of a size name (see :data:`SIZES`)."""
    messages, resources, per_thread = SIZES[size]
    rng = np.random.default_rng(seed)
    topics = 2_000
    shared = _unit(rng.standard_normal(DIMENSION))
    centres = _unit(rng.standard_normal((topics, DIMENSION)))
    vocab = [[_word(rng) for _ in range(12)] for _ in range(topics)]
    per_resource = messages // resources
    ids = [f"m{row}" for row in range(messages)]
    owners: list[str] = []
    threads: list[str] = []
    labels = np.empty(messages, dtype=np.int64)
    row = 0
    for r in range(resources):
        interests = rng.choice(topics, size=30, replace=False)
        for t in range(math.ceil(per_resource / per_thread)):
            focus = rng.choice(interests, size=3, replace=False)
            count = min(per_thread, per_resource - t * per_thread)
            labels[row : row + count] = focus[rng.integers(0, 3, count)]
            owners.extend([f"user-{r}"] * count)
            threads.extend([f"user-{r}-t{t}"] * count)
            row += count
    lengths = rng.integers(6, 40, messages)
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    from_topic = rng.random(total) < 0.4
    topic_words = rng.integers(0, 12, total)
    common_words = rng.integers(0, len(_COMMON), total)
    owner_of_word = np.repeat(labels, lengths)
    texts = []
    for n in range(messages):
        start = int(ends[n] - lengths[n])
        words = [
            vocab[owner_of_word[i]][topic_words[i]] if from_topic[i] else _COMMON[common_words[i]]
            for i in range(start, int(ends[n]))
        ]
        texts.append(f"{n % 7} " + " ".join(words))
    vectors = np.empty((messages, DIMENSION), dtype=np.float32)
    for start in range(0, messages, 100_000):
        stop = min(messages, start + 100_000)
        noise = _unit(rng.standard_normal((stop - start, DIMENSION)))
        mixed = 0.1**0.5 * shared + 0.3**0.5 * centres[labels[start:stop]] + 0.6**0.5 * noise
        vectors[start:stop] = _unit(mixed)
    corpus = Corpus(ids, owners, threads, texts, vectors)
    corpus.by_resource = _groups(owners)
    corpus.by_thread = _groups(threads)
    return corpus


def load_corpus(size: str, cache: Path | None = None) -> Corpus:
    """:func:`make_corpus`, kept in ``cache`` (a pickle) so that each phase reads it once."""
    if cache is not None and cache.exists():
        with cache.open("rb") as handle:
            corpus: Corpus = pickle.load(handle)
        return corpus
    corpus = make_corpus(size)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("wb") as handle:
            pickle.dump(corpus, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return corpus


def _unit(values: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(values, axis=-1, keepdims=True)
    return (values / norms).astype(np.float32)


def _groups(keys: Sequence[str]) -> dict[str, np.ndarray]:
    groups: dict[str, list[int]] = {}
    for row, key in enumerate(keys):
        groups.setdefault(key, []).append(row)
    return {key: np.asarray(rows) for key, rows in groups.items()}


@dataclass(frozen=True)
class Query:
    text: str
    vector: np.ndarray
    resource_id: str
    thread_id: str


def make_queries(corpus: Corpus, count: int, *, seed: int = 11) -> list[Query]:
    """Queries near stored messages (cosine 0.69 to their source), spread over resources."""
    rng = np.random.default_rng(seed)
    names = sorted(corpus.by_resource)
    queries = []
    for n in range(count):
        rows = corpus.by_resource[names[n % len(names)]]
        source = int(rows[rng.integers(0, len(rows))])
        noise = _unit(rng.standard_normal(DIMENSION))
        noise = _unit(noise - (noise @ corpus.vectors[source]) * corpus.vectors[source])
        vector = _unit(QUERY_COSINE * corpus.vectors[source] + (1 - QUERY_COSINE**2) ** 0.5 * noise)
        words = corpus.texts[source].split()[1:]
        text = f"q{n}: what about " + " ".join(words[: max(3, len(words) // 3)]) + "?"
        queries.append(Query(text, vector, corpus.resources[source], corpus.threads[source]))
    return queries


def exact_top(corpus: Corpus, rows: np.ndarray, vector: np.ndarray, k: int) -> dict[str, float]:
    """Brute-force top ``k`` (id -> cosine) among ``rows``: the ground truth."""
    scores = corpus.vectors[rows] @ vector
    best = np.argsort(-scores, kind="stable")[:k]
    return {corpus.ids[int(rows[i])]: float(scores[i]) for i in best}


def agreement(found: Sequence[str], exact: dict[str, float], scores: dict[str, float]) -> float:
    """Share of the exact top-K that ``found`` holds; a found id tied with the K-th counts."""
    if not exact:
        return 1.0
    floor = min(exact.values()) - 1e-6
    good = sum(1 for message_id in found[: len(exact)] if scores.get(message_id, -2.0) >= floor)
    return min(1.0, good / len(exact))


class TableEmbeddings(Embeddings):
    """Vectors looked up by text (precomputed); unknown texts get a fixed random vector."""

    model = MODEL
    dimension = DIMENSION

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table
        self._fallback = _unit(np.random.default_rng(0).standard_normal(DIMENSION))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        rows = [self.table.get(text, self._fallback) for text in texts]
        return np.asarray(rows, dtype=np.float32).tolist() if rows else []

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class HashEmbeddings(Embeddings):
    """A unit vector per text, seeded by its hash: deterministic, no model, any text."""

    def __init__(self, dimension: int = DIMENSION) -> None:
        self.dimension = dimension
        self.model = f"bench-hash-{dimension}"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        rows = []
        for text in texts:  # (surrogatepass: a lone surrogate is text a user may send)
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8)
            rng = np.random.default_rng(int.from_bytes(digest.digest(), "big"))
            rows.append(_unit(rng.standard_normal(self.dimension)).tolist())
        return rows

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


# --- records and stores ---------------------------------------------------------------------


def message_records(corpus: Corpus, rows: range) -> list[MessageRecord]:
    records = []
    for row in rows:
        role = "user" if row % 2 == 0 else "assistant"
        text = corpus.texts[row]
        cls = HumanMessage if role == "user" else AIMessage
        records.append(
            MessageRecord(
                id=corpus.ids[row],
                thread_id=corpus.threads[row],
                resource_id=corpus.resources[row],
                role=role,
                text=text,
                created_at=_START + timedelta(minutes=row),
                payload=MessageRecord.dump(cls(text, id=corpus.ids[row])),
            )
        )
    return records


def vector_records(corpus: Corpus, records: Sequence[MessageRecord], rows: range) -> list[Any]:
    """The vector records of `records`, whose vectors are `corpus`'s `rows`."""
    return records_with_vectors(records, corpus.vectors[rows.start : rows.stop : rows.step])


def records_with_vectors(records: Sequence[MessageRecord], vectors: np.ndarray) -> list[Any]:
    """One vector record per message record, the vectors being the rows of `vectors`."""
    return [
        VectorRecord(
            id=rec.id,
            vector=row.tolist(),
            message_id=rec.id,
            thread_id=rec.thread_id,
            resource_id=rec.resource_id,
            role=rec.role,
            content=rec.text,
            created_at=rec.created_at,
            metadata=rec.metadata,
        )
        for rec, row in zip(records, vectors, strict=True)
    ]


def chunks(total: int, size: int) -> Iterator[range]:
    for start in range(0, total, size):
        yield range(start, min(total, start + size))


# --- measuring ------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(milliseconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000, result


def percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    data = np.asarray(values, dtype=np.float64)
    return {
        "p50": float(np.percentile(data, 50)),
        "p95": float(np.percentile(data, 95)),
        "p99": float(np.percentile(data, 99)),
        "n": len(values),
    }


def median_spread(values: Sequence[float]) -> dict[str, float]:
    """Median of several runs with their min and max (the spread)."""
    clean = [v for v in values if v is not None and not math.isnan(v)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "runs": 0}
    return {
        "median": statistics.median(clean),
        "min": min(clean),
        "max": max(clean),
        "runs": len(clean),
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def spread(cell: dict[str, float], digits: int = 2) -> str:
    """``median [min-max]`` of a :func:`median_spread` cell."""
    if not cell or cell.get("runs", 0) == 0:
        return "-"
    if cell["runs"] == 1:
        return fmt(cell["median"], digits)
    return f"{fmt(cell['median'], digits)} [{fmt(cell['min'], digits)}-{fmt(cell['max'], digits)}]"


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def hybrid_store(size: str, work: Path, queries: int) -> None:
    """Build `perf_hybrid.py`'s store of `size` in `work`, unless it is built there."""
    if not (work / "built").exists():
        print(f"[{size}] building ...", flush=True)
        base = ["--size", size, "--work", str(work), "--queries", str(queries)]
        build = run_child(HYBRID_SCRIPT, ["--phase", "build", *base, "--turns", "0"])
        (work / "built").write_text(str(build["messages"]))


def hybrid_and_dense(storage: Any, work: Path, embeddings: Embeddings) -> tuple[Any, Any]:
    """Engines on `hybrid_store`'s store: the defaults, and dense mode as `perf_hybrid.py`
    runs it (top 5, window 1)."""
    from langchain_semantic_recall import SemanticRecall
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    vectors = ChromaVectorIndex.persistent(work / "store" / "chroma")
    common: dict[str, Any] = {"storage": storage, "vector_store": vectors, "index_name": INDEX}
    hybrid = SemanticRecall(embeddings=embeddings, **common)
    dense = SemanticRecall(
        embeddings=embeddings, search_mode="dense", top_k=5, message_range=1, **common
    )
    return hybrid, dense


def emit(data: Any) -> None:
    """A child's answer: one JSON line on stdout."""
    print(json.dumps(data, default=float), flush=True)
