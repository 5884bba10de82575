"""What-if: a default (hybrid) search scored on arrays held per resource, beside the package.

Not the package: the evidence for the design that issue 24's last target (hybrid <= 1.5x
dense mode at 10k) needs. The package builds ~185 feature rows a search (its ~70
candidates, and the ~120 messages in the windows of the best 20) from `StoredMessage`
objects, in some twenty Python steps; its profile (`perf_hybrid_phases.py`) has no step
worth more than ~0.3 ms, so no tuning of one meets the target. Here every message of
each resource is held as arrays, built once from the store before the searches (thread,
seq, role, whether it is a question or only small talk, its count of distinct terms, a
hash of its words, and which messages hold each term). The engine's own `search` runs
as usual (scope, query checks, the query's embedding, what is never shown) with only its
hybrid step (`search_ops._calibrated_search`) replaced by this one:

* the keyword postings (the package's own), then the vector index on the same thread
  (the keyword half takes ~0.15 ms here);
* one candidate per text, the query's facts, the candidate model, the windows of the
  best candidates and their context rows, the probabilities, the budget and the grouping,
  all on slot numbers;
* then only the chosen messages are read (held windows), for the hits.

Every search must return the engine's hits (ids, windows, and scores to 1e-9): the script
stops at the first that does not. The synthetic store has no questions, acknowledgements,
copies of a text, seq gaps or system messages, so the check runs again on conversations
that hold them (`_check_varied`: three resources, word-bag vectors, a budget of 60 so
that acknowledgements are recalled). Printed: p50 of dense mode (top 5, window 1, as
`perf_hybrid.py` runs it), of the package's hybrid search and of the arrays, the three
alternating per query, and the arrays' phases. What the arrays do not pay and the package
would: keeping them fresh as messages are written (the store is not written while this
runs), and the scope's count (the arrays know it); filters, threads, named periods and
a `threshold` go to the package's step.

    python benchmarks/whatif_array_search.py --work DIR            # 10k, 300 queries
    python benchmarks/whatif_array_search.py --size tiny --queries 8 --work /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import re
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import perf_common as pc
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.engine import search_ops, steps
from langchain_semantic_recall.keywords import query_terms
from langchain_semantic_recall.periods import named_period
from langchain_semantic_recall.records import RecallHit, ScopeFilter
from langchain_semantic_recall.relevance.features import (
    _COLUMN,
    CONTEXT,
    DIRECT,
    MATCH,
    Query,
    asked_names,
    asks_about_speaker,
    content_terms,
    text_facts,
)
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

ROUNDS = 3
_OFFSETS = np.array([-1, -2, 1])  # the neighbours a context row reads (`features.CONTEXT`)


class ResourceArrays:
    """Every message of one resource as arrays, by slot (thread order, then seq)."""

    def __init__(self, conn: sqlite3.Connection, resource_id: str, postings: Any) -> None:
        rows = conn.execute(
            "SELECT id, thread_id, seq, role, text FROM messages WHERE resource_id = ? "
            "ORDER BY thread_id, seq",
            (resource_id,),
        ).fetchall()
        facts = [text_facts(row[4]) for row in rows]
        threads: dict[str, int] = {}
        self.ids: list[str] = [row[0] for row in rows]
        self.slot_of = {message_id: slot for slot, message_id in enumerate(self.ids)}
        thread = np.asarray([threads.setdefault(row[1], len(threads)) for row in rows])
        self.seq = [int(row[2]) for row in rows]
        self.user = np.asarray([row[3] == "user" for row in rows])
        self.question = np.asarray([f.question for f in facts])
        self.bare = np.asarray([f.bare for f in facts])
        self.length = np.asarray([f.log1p_length for f in facts])
        self.words = [(row[3], hash(" ".join(row[4].split()))) for row in rows]
        holding: dict[str, list[int]] = {}
        for slot, fact in enumerate(facts):
            for term in fact.terms:
                holding.setdefault(term, []).append(slot)
        self.holding = {term: np.asarray(slots) for term, slots in holding.items()}
        # A neighbour is a key plus an offset: threads spaced wider than any window.
        span = max(self.seq, default=0) + 64
        self.key = thread * span + np.asarray(self.seq, dtype=np.int64) + 32
        self.postings = postings

    def holds(self, term: str, slots: np.ndarray) -> np.ndarray:
        """Which of `slots` hold `term`."""
        held = self.holding.get(term)
        if held is None:
            return np.zeros(len(slots), dtype=bool)
        at = np.minimum(held.searchsorted(slots), len(held) - 1)
        return np.asarray(held[at] == slots)

    def term_counts(self, terms: Sequence[str]) -> np.ndarray:
        """How many of `terms` each slot holds."""
        counts = np.zeros(len(self.ids))
        for term in terms:
            held = self.holding.get(term)
            if held is not None:
                counts[held] += 1.0
        return counts

    def around(self, slots: np.ndarray, before: int, after: int) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's neighbours from `before` to `after` (rows) and which exist."""
        wanted = self.key[slots][:, None] + np.arange(-before, after + 1)
        at = np.minimum(self.key.searchsorted(wanted), len(self.key) - 1)
        return at, self.key[at] == wanted


@dataclass(frozen=True, slots=True)
class Pool:
    """One search's candidates by slot: vector matches with their z, keyword ones with BM25."""

    counts: np.ndarray
    """How many of the query's content terms each slot of the resource holds."""
    dense: np.ndarray
    zs: np.ndarray
    keyword: np.ndarray
    bm25: np.ndarray


def _lookup(keys: np.ndarray, values: np.ndarray, slots: np.ndarray, default: float) -> Any:
    """`values` of `slots` by sorted `keys` (`default` where absent), and which were found."""
    if not len(keys):
        return np.full(len(slots), default), np.zeros(len(slots), dtype=bool)
    order = np.argsort(keys)
    keys, values = keys[order], values[order]
    at = np.minimum(keys.searchsorted(slots), len(keys) - 1)
    found = keys[at] == slots
    return np.where(found, values[at], default), found


class ArraySearch:
    """The engine's hybrid search, on `ResourceArrays` (see the module docstring)."""

    def __init__(self, engine: SemanticRecall, arrays: dict[str, ResourceArrays]) -> None:
        engine.search("what did we say", resource_id=next(iter(arrays)))  # index, reference
        self.plan, space = engine.search_plan, engine._core.backends.space
        self.model = self.plan.scorer
        self.info, self.reference, self.vectors = space._info, space._reference, space.vectors
        self.storage = engine._core.backends.storage
        self.arrays = arrays
        self.direct = np.asarray(self.model.direct)
        self.context = np.asarray(self.model.context)
        self.phases: dict[str, list[float]] = {"halves": [], "scoring": [], "read": []}
        self.on = False
        self.served = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Within it, the engine's hybrid searches run here while `self.on`.

        The engine's own entry runs either way (scope, query checks, the query's
        embedding, what is never shown): only `_calibrated_search` is replaced, and put
        back on leaving.
        """
        package = search_ops._calibrated_search

        def routed(space: Any, query: str, scope: Any, plan: Any, now: Any) -> Any:
            mine = scope.resource_id in self.arrays and not scope.narrowed
            mine = mine and scope.thread_id is None and plan.threshold is None
            if not (self.on and mine) or plan.period(query, now) is not None:
                return (yield from package(space, query, scope, plan, now))
            info = yield from space.resolve()
            embedded = yield steps.EmbedEach(info, [query])
            self.served += 1
            return self.search(query, list(embedded.vectors[0]), scope.resource_id)

        search_ops._calibrated_search = routed
        try:
            yield
        finally:
            search_ops._calibrated_search = package

    def search(self, text: str, vector: list[float], resource_id: str) -> list[RecallHit]:
        """The hits of a search in `resource_id` (unfiltered, no period named)."""
        start = time.perf_counter()
        table, model = self.arrays[resource_id], self.model
        scope = ScopeFilter(resource_id=resource_id)
        terms, bm25 = query_terms(text), self.storage._bm25
        keyword = table.postings.search(terms, None, self.plan.keyword_k, bm25)
        dense = self.vectors.nearest(self.info.name, vector, k=self.plan.dense_k, scope=scope)
        halves = time.perf_counter()
        dense = [c for c in dense if c[0] in table.slot_of]  # vectors of deleted messages
        dense, keyword = self._one_per_text(table, dense, keyword)
        query, pool = self._query(table, text, vector, dense, keyword)
        size = len(table.ids)
        share = model.share(query, None, size)
        if share <= 0.0:
            return []
        kept = self._best_candidates(table, query, pool)
        chances = self._probabilities(table, query, pool, kept, size)
        ranked = sorted((-round(p, 9), table.ids[slot], slot) for slot, p in chances.items())
        best = [slot for _, _, slot in ranked if chances[slot] > 0.0]
        if self.plan.message_budget is not None:
            best = best[: round(self.plan.message_budget * share)]
        chosen = {slot: chances[slot] for slot in best}
        scoring = time.perf_counter()
        hits = self._group(table, kept, chosen, scope)
        self.phases["halves"].append(halves - start)
        self.phases["scoring"].append(scoring - halves)
        self.phases["read"].append(time.perf_counter() - scoring)
        return hits

    def _one_per_text(
        self, table: ResourceArrays, dense: list[Any], keyword: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        # By a hash of the words: the package would compare the words of equal hashes.
        first: dict[tuple[str, int], str] = {}
        for message_id, _ in [*dense, *keyword]:
            first.setdefault(table.words[table.slot_of[message_id]], message_id)
        kept = set(first.values())
        return [c for c in dense if c[0] in kept], [c for c in keyword if c[0] in kept]

    def _query(
        self, table: ResourceArrays, text: str, vector: list[float], dense: Any, keyword: Any
    ) -> tuple[Query, Pool]:
        terms, names = tuple(content_terms(text)), asked_names(text)
        cosines, scores = dict(dense), dict(keyword)
        slots = np.asarray([table.slot_of[k] for k in {*cosines, *scores}], dtype=np.int64)
        counts = table.term_counts(terms)
        shared = counts[slots]
        anywhere = {t for t in (*terms, *names) if table.holds(t, slots).any()}
        ids = [table.ids[s] for s in slots.tolist()]
        in_keyword = np.asarray([k in scores for k in ids], dtype=bool)
        said = [
            cosines[k]
            for k, s, n in zip(ids, slots.tolist(), shared.tolist(), strict=True)
            if k in cosines and table.user[s] and not table.question[s] and n > 0
        ]
        covered = int(shared[in_keyword].max()) if in_keyword.any() else 0
        query = Query(
            terms=terms,
            baseline=self.reference.baseline(vector),
            cosines=cosines,
            bm25=scores,
            period=None,
            query_found=sum(t in anywhere for t in terms) / len(terms) if terms else 0.0,
            name_missing=float(any(name not in anywhere for name in names)),
            keyword_coverage=covered / len(terms) if terms else 0.0,
            about_speaker=asks_about_speaker(text),
            top_user_statement=max(said, default=None),
        )
        pool = Pool(
            counts=counts,
            dense=np.asarray([table.slot_of[k] for k in query.zs], dtype=np.int64),
            zs=np.asarray(list(query.zs.values())),
            keyword=np.asarray([table.slot_of[k] for k in scores], dtype=np.int64),
            bm25=np.asarray(list(scores.values())),
        )
        return query, pool

    def _rows(
        self, table: ResourceArrays, query: Query, pool: Pool, slots: np.ndarray
    ) -> np.ndarray:
        """`features.direct_rows` of `slots`."""
        own = ~table.bare[slots]
        z, in_dense = _lookup(pool.dense, pool.zs, slots, query.floor_z)
        z = np.where(own, z, query.floor_z)
        score, in_keyword = _lookup(pool.keyword, pool.bm25, slots, 0.0)
        score = np.where(own, score, 0.0)
        log_score = np.log1p(score)
        terms = query.terms
        shared = pool.counts[slots]
        top = float(pool.bm25.max()) if len(pool.bm25) else 0.0
        relative = score / top if top > 0 else np.zeros(len(slots))
        found, c = query.query_found, _COLUMN
        rows = np.empty((len(slots), len(DIRECT)))
        rows[:, c["z"]] = z
        rows[:, c["log1p_bm25"]] = log_score
        rows[:, c["coverage"]] = shared / len(terms) if terms else 0.0
        rows[:, c["question"]] = table.question[slots]
        rows[:, c["user"]] = table.user[slots]
        rows[:, c["log1p_length"]] = table.length[slots]
        rows[:, c["z_relative"]] = z - query.top_z
        rows[:, c["bm25_relative"]] = relative
        rows[:, c["in_period"]] = 0.0
        rows[:, c["query_found"]] = found
        rows[:, c["name_missing"]] = query.name_missing
        rows[:, c["log1p_terms"]] = math.log1p(len(terms))
        rows[:, c["in_keyword"]] = own & in_keyword
        rows[:, c["in_dense"]] = own & in_dense
        rows[:, c["log1p_top_bm25"]] = math.log1p(top)
        rows[:, c["bm25_found"]] = log_score * found
        rows[:, c["bm25_relative_found"]] = relative * found
        rows[:, c["z_found"]] = z * found
        return rows

    def _best_candidates(self, table: ResourceArrays, query: Query, pool: Pool) -> np.ndarray:
        ids = query.candidates  # sorted: ties keep this order
        slots = np.asarray([table.slot_of[k] for k in ids], dtype=np.int64)
        logits = self._rows(table, query, pool, slots) @ self.direct[1:] + self.direct[0]
        return slots[np.argsort(-logits, kind="stable")[: self.model.candidates]]

    def _probabilities(
        self, table: ResourceArrays, query: Query, pool: Pool, kept: np.ndarray, size: int
    ) -> dict[int, float]:
        model = self.model
        at, exists = table.around(kept, model.reads_before, model.reads_after)
        known = np.unique(at[exists])
        at, exists = table.around(kept, model.before, model.after)
        targets = np.asarray(list(dict.fromkeys(at[exists].tolist())), dtype=np.int64)
        direct = self._rows(table, query, pool, known)
        columns = list(MATCH)
        weights = self.direct[1:][columns]
        nothing = np.zeros(len(DIRECT))
        nothing[_COLUMN["z"]] = query.floor_z
        nothing[_COLUMN["z_relative"]] = query.floor_z - query.top_z
        match = np.zeros(len(known) + 1)
        match[:-1] = direct[:, columns] @ weights - float(nothing[columns] @ weights)
        asks = match * np.append(direct[:, _COLUMN["question"]], 0.0)
        wanted = table.key[targets][:, None] + _OFFSETS
        known_keys = table.key[known]
        at = np.minimum(known_keys.searchsorted(wanted), len(known) - 1)
        near = np.where(known_keys[at] == wanted, at, len(known))
        rows = np.empty((len(targets), len(CONTEXT)))
        rows[:, : len(DIRECT)] = direct[known.searchsorted(targets)]
        for column, (offset, values) in enumerate(
            ((0, match), (0, asks), (1, match), (1, asks), (2, match)), start=len(DIRECT)
        ):
            rows[:, column] = values[near[:, offset]]
        logits = rows @ self.context[1:] + self.context[0] + math.log(model.prior(size))
        p = 1.0 / (1.0 + np.exp(-np.clip(logits, -60.0, 60.0)))
        chances = dict(zip(targets.tolist(), p.tolist(), strict=True))
        for slot in sorted(targets[table.bare[targets]].tolist(), key=table.seq.__getitem__):
            before = slot - 1  # slots run in thread order: the message before, if read
            answered = before in chances and table.key[before] == table.key[slot] - 1
            chances[slot] = min(chances[slot], chances[before] * (1 - 1e-6) if answered else 0.0)
        return chances

    def _group(
        self, table: ResourceArrays, kept: np.ndarray, chosen: dict[int, float], scope: ScopeFilter
    ) -> list[RecallHit]:
        """`model._group` on slots, then the chosen messages read for the hits."""
        before, after = self.model.before, self.model.after
        riders = {slot for slot in chosen if table.bare[slot]}
        placed: set[int] = set()
        groups: list[tuple[int, list[int]]] = []
        at, exists = table.around(kept, before, after)
        for row, ok in zip(at.tolist(), exists.tolist(), strict=True):
            if len(placed) == len(chosen):
                break
            mine = [
                s for s, o in zip(row, ok, strict=True) if o and s in chosen and s not in placed
            ]
            mine = _answered(table, mine, riders)
            if not mine:
                continue
            top = min(mine, key=lambda s: (-round(chosen[s], 9), table.ids[s]))
            mine = [s for s in mine if -before <= table.seq[s] - table.seq[top] <= after]
            mine = _answered(table, mine, riders)
            placed.update(mine)
            groups.append((top, mine))
        ids = [table.ids[s] for s in placed]
        read = self.storage.get_windows(ids, before=0, after=0, scope=scope)
        hits = [
            RecallHit(
                message=read[table.ids[top]][0],
                score=chosen[top],
                window=tuple(read[table.ids[s]][0] for s in mine),
            )
            for top, mine in groups
        ]
        return sorted(hits, key=lambda h: (-round(h.score, 9), h.message.id))


def _answered(table: ResourceArrays, window: list[int], riders: set[int]) -> list[int]:
    kept: list[int] = []
    for slot in window:
        if slot not in riders or (kept and table.seq[kept[-1]] == table.seq[slot] - 1):
            kept.append(slot)
    return kept


def _compare(
    fast: ArraySearch, engine: SemanticRecall, dense: SemanticRecall, queries: list[Any]
) -> dict[str, list[float]]:
    """Check every search, then time the three ways alternating (seconds per search)."""

    def hybrid(q: Any, *, on_arrays: bool) -> list[RecallHit]:
        fast.on = on_arrays
        return engine.search(q.text, resource_id=q.resource_id)

    for q in queries:  # warm, and the check: the same hits as the engine's
        theirs, ours = hybrid(q, on_arrays=False), hybrid(q, on_arrays=True)
        dense.search(q.text, resource_id=q.resource_id)
        if not _same(ours, theirs):
            raise SystemExit(f"the arrays' hits differ from the engine's for {q.text!r}")
    if fast.served != len(queries):
        raise SystemExit(f"the arrays answered {fast.served} of {len(queries)} searches")
    for phases in fast.phases.values():
        phases.clear()
    ways: dict[str, Callable[[Any], object]] = {
        "dense mode (top 5, window 1)": lambda q: dense.search(q.text, resource_id=q.resource_id),
        "hybrid, the package": lambda q: hybrid(q, on_arrays=False),
        "hybrid on arrays (what-if)": lambda q: hybrid(q, on_arrays=True),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(ROUNDS):
        for i, q in enumerate(queries):
            names = list(ways) if (i + r) % 2 == 0 else list(reversed(ways))
            for name in names:
                t = time.perf_counter()
                ways[name](q)
                times[name].append(time.perf_counter() - t)
    return times


def _same(ours: Sequence[RecallHit], theirs: Sequence[RecallHit]) -> bool:
    def shape(hits: Sequence[RecallHit]) -> list[Any]:
        return [(h.message.id, [m.id for m in h.window]) for h in hits]

    scores = all(abs(a.score - b.score) <= 1e-9 for a, b in zip(ours, theirs, strict=False))
    return shape(ours) == shape(theirs) and scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="10k", help="a perf_common size: tiny, 1k, 10k, 100k")
    parser.add_argument("--queries", type=int, default=300, help="queries (each in three ways)")
    parser.add_argument("--work", type=Path, required=True, help="store folder (reused if built)")
    args = parser.parse_args()
    work = args.work / args.size
    pc.hybrid_store(args.size, work, args.queries)
    corpus = pc.load_corpus(args.size, work / "corpus.pickle")
    queries = [
        q for q in pc.make_queries(corpus, args.queries, seed=23) if not named_period(q.text)
    ]
    table = pc.TableEmbeddings({q.text: q.vector for q in queries})
    # Postings for every resource, small ones too (the same answers as FTS5's: `sqlite.py`).
    storage = SQLiteStorage(work / "store" / "messages.sqlite3", keyword_cache_min_docs=1)
    engine, dense = pc.hybrid_and_dense(storage, work, table)
    started = time.perf_counter()
    file = work / "store" / "messages.sqlite3"
    arrays = _arrays(storage, file, {q.resource_id for q in queries}, engine)
    print(f"arrays of {len(arrays)} resources built in {time.perf_counter() - started:.2f} s")
    fast = ArraySearch(engine, arrays)
    with fast.installed():
        times = _compare(fast, engine, dense, queries)
    print(f"{len(queries)} searches: the arrays return the engine's hits")
    checked = _check_varied(args.work / "varied")
    print(f"{checked} searches of varied conversations: the arrays return the engine's hits")
    base = statistics.median(times["dense mode (top 5, window 1)"])

    base = statistics.median(times["dense mode (top 5, window 1)"])
    print(f"\nHybrid search at {args.size}, {len(queries)} queries x {ROUNDS}, alternating, ms:\n")
    print("| search | p50 | mean | p50 / dense |")
    print("|---|---|---|---|")
    for name, values in times.items():
        p50 = statistics.median(values)
        print(
            f"| {name} | {pc.fmt(p50 * 1e3)} | {pc.fmt(statistics.mean(values) * 1e3)} "
            f"| {pc.fmt(p50 / base)}x |"
        )
    print("\n| arrays' phase | p50 |\n|---|---|")
    labels = {"halves": "keyword postings, then the vector index", "scoring": "scoring"}
    labels["read"] = "grouping and reading the chosen messages"
    for key, label in labels.items():
        print(f"| {label} | {pc.fmt(statistics.median(fast.phases[key]) * 1e3)} |")


class WordEmbeddings(Embeddings):
    """A text's words as one unit vector (a sum of one random vector per word): texts
    sharing words are near, so searches of the varied check are not all silent."""

    def __init__(self) -> None:
        self.model = "bench-words-384"

    def _word(self, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        return np.random.default_rng(seed).standard_normal(pc.DIMENSION)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        rows = []
        for text in texts:
            vector = sum((self._word(w) for w in re.findall(r"\w+", text.lower())), np.ones(1))
            rows.append((vector / np.linalg.norm(vector)).tolist())
        return rows

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


_WORDS = (
    *("garden", "tomato", "river", "bike", "piano", "recipe", "flight", "hotel", "paris"),
    *("dentist", "sister", "wedding", "budget", "laptop", "coffee", "marathon", "puppy"),
    *("violin", "museum", "cactus"),
)
_ACKS = ("ok thanks", "yes", "great!", "ok", "thanks!", "sure")


def _check_varied(work: Path, seed: int = 5) -> int:
    """The arrays against the engine on what the synthetic corpus lacks.

    Three resources of four threads: questions, acknowledgements ("ok thanks": no content
    term), copies of one text (some with other spacing), system messages, and seq gaps (a
    few messages deleted behind the storage). Raises on the first search that differs;
    returns how many were compared.
    """
    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    file = work / "varied.sqlite3"

    def opened() -> SemanticRecall:  # a budget of 60 messages: acknowledgements are recalled
        return SemanticRecall(
            storage=SQLiteStorage(file, keyword_cache_min_docs=1),
            vector_store=ChromaVectorIndex.persistent(work / "chroma"),
            embeddings=WordEmbeddings(),
            index_name="varied",
            message_budget=60,
        )

    said: list[str] = []

    def text() -> str:
        if said and rng.random() < 0.1:  # a copy, sometimes spaced otherwise
            copy = rng.choice(said)
            return copy if rng.random() < 0.5 else "  " + copy.replace(" ", "   ") + " "
        if rng.random() < 0.15:
            return rng.choice(_ACKS)
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8)))
        said.append(words + ("?" if rng.random() < 0.25 else "."))
        return said[-1]

    resources = [f"varied-{r}" for r in range(3)]
    if not (work / "built").exists():
        with opened() as writer:  # closed: every vector written before the check
            for resource_id in resources:
                for t in range(4):
                    for _ in range(30):
                        asked = text()  # a question is often answered by "yes", "ok thanks"
                        yes = asked.endswith("?") and rng.random() < 0.6
                        turn: list[Any] = [
                            HumanMessage(asked),
                            AIMessage(rng.choice(_ACKS) if yes else text()),
                        ]
                        if rng.random() < 0.1:
                            turn.insert(0, SystemMessage("be brief about " + rng.choice(_WORDS)))
                        thread_id = f"{resource_id}-t{t}"
                        writer.index(turn, thread_id=thread_id, resource_id=resource_id)
        with sqlite3.connect(file) as conn:  # seq gaps, behind the storage's hooks
            conn.execute("DELETE FROM messages WHERE rowid % 23 = 0")
        (work / "built").write_text("varied")
    asking = random.Random(seed + 1)
    queries = [
        " ".join(asking.choice(_WORDS) for _ in range(asking.randint(2, 4)))
        + asking.choice(("?", ""))
        for _ in range(60)
    ]
    engine = opened()
    storage = engine._core.backends.storage
    arrays = _arrays(storage, file, set(resources), engine)
    fast = ArraySearch(engine, arrays)
    compared = 0
    with fast.installed():
        for query in queries:
            for resource_id in resources:
                fast.on = False
                theirs = engine.search(query, resource_id=resource_id)
                fast.on = True
                ours = engine.search(query, resource_id=resource_id)
                if not _same(ours, theirs):
                    raise SystemExit(f"the arrays' hits differ from the engine's for {query!r}")
                compared += bool(theirs)
    if fast.served != len(queries) * len(resources):
        raise SystemExit(f"the arrays answered {fast.served} of the varied searches")
    return compared


def _arrays(
    storage: SQLiteStorage, file: Path, resources: set[str], engine: SemanticRecall
) -> dict[str, ResourceArrays]:
    conn = sqlite3.connect(file)
    arrays: dict[str, ResourceArrays] = {}
    for resource_id in sorted(resources):
        engine.search("hello there", resource_id=resource_id)  # its postings, built
        storage._postings.join()
        with storage._read() as read:
            postings = storage._postings.get(read, resource_id)
        if postings is None:
            raise SystemExit(f"{resource_id} has no keyword postings")
        arrays[resource_id] = ResourceArrays(conn, resource_id, postings)
    conn.close()
    return arrays


if __name__ == "__main__":
    main()
