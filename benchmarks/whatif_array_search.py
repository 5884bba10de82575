"""What-if: a default (hybrid) search scored on arrays held per resource, beside the package.

Not the package: the evidence for what issue 24's last target (hybrid <= 1.5x dense mode
at 10k) would take. The package builds ~185 feature rows a search (its ~70 candidates,
and the ~120 messages in the windows of the best 20) from `StoredMessage` objects, in
some twenty Python steps; its profile (`perf_hybrid_phases.py`) has no step worth more
than ~0.3 ms, so no tuning of one meets the target. Here every message of each resource
is held as arrays, built once from the store before the searches (thread, seq, role,
whether it is a question or only small talk, its count of distinct terms, a hash of its
role and words, the rank of its id, and which messages hold each term). The engine's own
`search` runs as usual (scope, query checks, the query's embedding, what is never shown)
with only its hybrid step (`search_ops._calibrated_search`) replaced by this one:

* the keyword postings (the package's own), then the vector index on the same thread;
* one candidate per text (in plain Python: a hundred ids), the query's facts, the
  candidate model, the windows of the best candidates and their neighbours, the
  probabilities, the budget and the grouping, all on slot numbers. Each logit is a sum
  of the six columns a query changes (z, BM25, its share of the best, coverage, which
  half matched), each computed once, plus each message's fixed share (question, user,
  length: `ResourceArrays.fixed`) and the query's constants: the same numbers as
  `features.direct_rows(...) @ weights`, with no matrix of features built;
* then only the chosen messages are read (held windows), for the hits.

Every search must return the engine's hits (ids, windows, and scores to 1e-9): the script
stops at the first that does not. The synthetic store has no questions, acknowledgements,
copies of a text, seq gaps or system messages, so the check runs again on conversations
that hold them (`_check_varied`: three resources, word-bag vectors, a budget of 60 so
that acknowledgements are recalled, and queries of the kinds the synthetic ones lack).

Printed: p50 of dense mode (top 5, window 1, as `perf_hybrid.py` runs it), of the
package's hybrid search and of the arrays, the three alternating per query; the arrays'
phases; then what this version of hybrid search adds to dense mode's, each step timed
alone in the same run (Chroma's query for hybrid's pool of 50 and for dense mode's 5,
the keyword postings, and the arrays' work after the two halves less the reading of the
hits, which dense mode pays for its own hits), against what the target leaves for it
(half of dense mode's p50), and the arrays' work after the halves again at once (warm
caches; during the check, not while timing). `--overlap` queries Chroma on a worker
while the keyword postings run, as the package's halves do. What the arrays do not pay
and the package would: keeping them fresh as messages are written (the store is not
written while this runs), and the scope's count (the arrays know it); filters, threads,
named periods, a `threshold` and a query without a usable vector go to the package's
step.

    python benchmarks/whatif_array_search.py --work DIR            # 10k, 300 queries
    python benchmarks/whatif_array_search.py --work DIR --overlap  # the halves on two threads
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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
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
    CONVERSATIONAL,
    DIRECT,
    asked_names,
    asks_about_speaker,
    text_facts,
)
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

ROUNDS = 3
VECTORS_POOL = "Chroma's query alone, hybrid's pool"
VECTORS_DENSE = "Chroma's query alone, dense mode's k"
POSTINGS = "keyword postings alone"
SEARCHES = ("dense mode (top 5, window 1)", "hybrid, the package", "hybrid on arrays (what-if)")
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
        # One candidate per text (`fusion.one_per_text`): by a hash of the role and words
        # (the package would compare the words of equal hashes).
        self.words = [hash((row[3], " ".join(row[4].split()))) for row in rows]
        by_id = sorted(range(len(rows)), key=self.ids.__getitem__)
        self.id_rank = np.empty(len(rows), dtype=np.int64)  # ties are broken by id
        self.id_rank[by_id] = np.arange(len(rows))
        holding: dict[str, list[int]] = {}
        for slot, fact in enumerate(facts):
            for term in fact.terms:
                holding.setdefault(term, []).append(slot)
        self.holding = {term: np.asarray(slots) for term, slots in holding.items()}
        # A neighbour is a key plus an offset: threads spaced wider than any window.
        span = max(self.seq, default=0) + 64
        self.key = thread * span + np.asarray(self.seq, dtype=np.int64) + 32
        self.postings = postings
        self._fixed: dict[int, np.ndarray] = {}

    def holds(self, term: str, slots: np.ndarray) -> np.ndarray:
        """Which of `slots` hold `term`."""
        held = self.holding.get(term)
        if held is None:
            return np.zeros(len(slots), dtype=bool)
        at = np.minimum(held.searchsorted(slots), len(held) - 1)
        return np.asarray(held[at] == slots)

    def shared(self, terms: Sequence[str], slots: np.ndarray) -> np.ndarray:
        """How many of `terms` each of `slots` holds."""
        counts = np.zeros(len(slots))
        for term in terms:
            counts += self.holds(term, slots)
        return counts

    def fixed(self, weights: np.ndarray) -> np.ndarray:
        """Each slot's share of a logit that no query changes (question, user, length)."""
        part = self._fixed.get(id(weights))
        if part is None:
            w = weights[1:]
            part = w[_COLUMN["question"]] * self.question + w[_COLUMN["user"]] * self.user
            part = part + w[_COLUMN["log1p_length"]] * self.length
            self._fixed[id(weights)] = part
        return part

    def around(self, slots: np.ndarray, before: int, after: int) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's neighbours from `before` to `after` (rows) and which exist."""
        wanted = self.key[slots][:, None] + np.arange(-before, after + 1)
        at = np.minimum(self.key.searchsorted(wanted), len(self.key) - 1)
        return at, self.key[at] == wanted


def _find(keys: np.ndarray, values: np.ndarray, slots: np.ndarray, default: float) -> Any:
    """`values` of `slots` by sorted `keys` (`default` where absent), and which were found."""
    if not len(keys):
        return np.full(len(slots), default), np.zeros(len(slots), dtype=bool)
    at = np.minimum(keys.searchsorted(slots), len(keys) - 1)
    found = keys[at] == slots
    return np.where(found, values[at], default), found


@dataclass(slots=True)
class Facts:
    """One search's query-level facts (what `Evidence.share` reads of a `Query`) and its
    candidates by slot: vector matches with their z, keyword ones with BM25, both sorted."""

    terms: tuple[str, ...]
    baseline: Any
    cosines: bool
    """Whether there is a vector match (`Evidence.share` asks only that)."""
    top_z: float
    floor_z: float
    name_missing: float
    keyword_coverage: float
    about_speaker: bool
    top_user_statement: float | None
    query_found: float
    dense: np.ndarray
    zs: np.ndarray
    keyword: np.ndarray
    bm25: np.ndarray
    top_bm25: float

    @property
    def said_nearer_than_small_talk(self) -> bool:
        """`Query.said_nearer_than_small_talk`."""
        baseline, top = self.baseline, self.top_user_statement
        return baseline is not None and top is not None and top > baseline.small_talk_top


PHASES = {
    "halves": "keyword postings, then the vector index",
    "candidates": "candidates by slot, one per text",
    "facts": "the query's facts (its terms, its baseline, the budget's share)",
    "direct": "the candidate model, the best candidates",
    "context": "the message model: windows, neighbours, probabilities",
    "rank": "ranking and the budget",
    "group": "grouping the chosen messages into hits",
    "read": "reading them for the hits (dense mode reads its hits too)",
}


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
        self.phases: dict[str, list[float]] = {name: [] for name in PHASES}
        self.after_halves: list[float] = []
        """Per search that returns hits: everything after the two halves."""
        self.warm: list[float] = []
        """The same, less the reading of the hits, done again at once (warm caches)."""
        self.repeat = False
        """Whether searches do their work after the halves twice (to fill `warm`)."""
        self.side: ThreadPoolExecutor | None = None
        """`--overlap`: the worker that queries Chroma while the keyword postings run."""
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
            if embedded.vectors[0] is None:  # unusable: the engine answers from keywords
                return (yield from package(space, query, scope, plan, now))
            self.served += 1
            vector = np.asarray(embedded.vectors[0], dtype=np.float64)
            return self.search(query, vector, scope.resource_id)

        search_ops._calibrated_search = routed
        try:
            yield
        finally:
            search_ops._calibrated_search = package

    def search(self, text: str, vector: np.ndarray, resource_id: str) -> list[RecallHit]:
        """The hits of a search in `resource_id` (unfiltered, no period named)."""
        marks = [time.perf_counter()]
        table, plan = self.arrays[resource_id], self.plan
        scope = ScopeFilter(resource_id=resource_id)
        terms, bm25 = query_terms(text), self.storage._bm25
        k, name = plan.dense_k, self.info.name
        if self.side is not None:  # `--overlap`: Chroma's query on a worker meanwhile
            near = self.side.submit(self.vectors.nearest, name, vector, k=k, scope=scope)
            keyword = table.postings.search(terms, None, plan.keyword_k, bm25)
            dense = near.result()
        else:
            keyword = table.postings.search(terms, None, plan.keyword_k, bm25)
            dense = self.vectors.nearest(name, vector, k=k, scope=scope)
        marks.append(time.perf_counter())
        halves = (dense, keyword)
        query = (text, tuple(t for t in terms if t not in CONVERSATIONAL), vector)
        hits = self._after_halves(table, query, halves, scope, marks)
        if hits:  # every phase timed
            for name, (start, end) in zip(PHASES, pairwise(marks), strict=True):
                self.phases[name].append(end - start)
            self.after_halves.append(marks[-1] - marks[1])
        if hits and self.repeat:  # the same work again at once (not while timing searches)
            again = [time.perf_counter()]
            self._after_halves(table, query, halves, scope, again)
            self.warm.append(again[-2] - again[0])  # its reading of the hits left out
        return hits

    def _after_halves(
        self,
        table: ResourceArrays,
        query: tuple[str, tuple[str, ...], np.ndarray],
        halves: tuple[list[Any], list[Any]],
        scope: ScopeFilter,
        marks: list[float],
    ) -> list[RecallHit]:
        """From the two halves' matches to the hits, each phase's end added to `marks`.

        `query`: its text, its content terms, its vector.
        """
        model, plan = self.model, self.plan
        candidates = self._candidates(table, *halves)
        marks.append(time.perf_counter())
        if candidates is None:
            return []
        facts, pool = self._facts(table, query, *candidates)
        size = len(table.ids)
        share = model.share(facts, None, size)  # type: ignore[arg-type]
        marks.append(time.perf_counter())
        if share <= 0.0:
            return []
        logits = self._logits(table, self.direct, pool, facts)
        kept = pool[np.argsort(-logits, kind="stable")[: model.candidates]]
        marks.append(time.perf_counter())
        chances = self._probabilities(table, facts, kept, size)
        marks.append(time.perf_counter())
        slots = list(chances)
        values = list(chances.values())
        rounded = np.asarray([round(p, 9) for p in values])  # as `model._tie` rounds
        order = np.lexsort((table.id_rank[np.asarray(slots)], -rounded))
        best = [slots[i] for i in order.tolist() if values[i] > 0.0]
        if plan.message_budget is not None:
            best = best[: round(plan.message_budget * share)]
        chosen = {slot: chances[slot] for slot in best}
        marks.append(time.perf_counter())
        groups = self._group(table, kept, chosen)
        marks.append(time.perf_counter())
        hits = self._hits(table, groups, chosen, scope)
        marks.append(time.perf_counter())
        return hits

    def _candidates(
        self, table: ResourceArrays, dense: list[Any], keyword: list[Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Vector and keyword matches by slot, one per text (None: no candidate)."""
        slot_of, words = table.slot_of, table.words
        near = [(slot_of[k], c) for k, c in dense if k in slot_of]  # deleted messages' vectors
        matched = [(slot_of[k], b) for k, b in keyword]
        first: dict[int, int] = {}
        for slot, _ in (*near, *matched):
            first.setdefault(words[slot], slot)
        if len(first) < len(near) + len(matched):  # copies, or a message in both lists
            kept = set(first.values())
            near = [c for c in near if c[0] in kept]
            matched = [c for c in matched if c[0] in kept]
        if not near and not matched:
            return None
        return (
            np.fromiter((slot for slot, _ in near), np.int64, len(near)),
            np.fromiter((cosine for _, cosine in near), np.float64, len(near)),
            np.fromiter((slot for slot, _ in matched), np.int64, len(matched)),
            np.fromiter((score for _, score in matched), np.float64, len(matched)),
        )

    def _facts(  # noqa: PLR0917 - one argument per array
        self,
        table: ResourceArrays,
        query: tuple[str, tuple[str, ...], np.ndarray],
        dense: np.ndarray,
        cosines: np.ndarray,
        keyword: np.ndarray,
        bm25: np.ndarray,
    ) -> tuple[Facts, np.ndarray]:
        """`Query.build` on slots, and the candidates in `Query.candidates`' order (by id)."""
        text, terms, vector = query
        names = asked_names(text)
        pool = np.union1d(dense, keyword)  # sorted by slot
        shared = np.zeros(len(pool))
        anywhere: set[str] = set()
        for term in dict.fromkeys((*terms, *names)):
            held = table.holds(term, pool)
            if term in terms:
                shared += held
            if held.any():
                anywhere.add(term)
        baseline = self.reference.baseline(vector) if len(vector) else None
        if len(cosines) and baseline is not None:
            z = np.asarray(baseline.z(cosines))
            floor, top = float(z.min()), float(z.max())
        else:
            z, floor, top = np.zeros(len(cosines)), 0.0, 0.0
        said = shared[pool.searchsorted(dense)] > 0
        said &= table.user[dense] & (table.question[dense] == 0)
        covered = shared[pool.searchsorted(keyword)].max() if len(keyword) else 0.0
        by_dense, by_keyword = np.argsort(dense), np.argsort(keyword)
        facts = Facts(
            terms=terms,
            baseline=baseline,
            cosines=bool(len(cosines)),
            top_z=top,
            floor_z=floor,
            name_missing=float(any(name not in anywhere for name in names)),
            keyword_coverage=float(covered) / len(terms) if terms else 0.0,
            about_speaker=asks_about_speaker(text),
            top_user_statement=float(cosines[said].max()) if said.any() else None,
            query_found=sum(t in anywhere for t in terms) / len(terms) if terms else 0.0,
            dense=dense[by_dense],
            zs=z[by_dense],
            keyword=keyword[by_keyword],
            bm25=bm25[by_keyword],
            top_bm25=float(bm25.max()) if len(bm25) else 0.0,
        )
        return facts, pool[np.argsort(table.id_rank[pool])]

    def _columns(self, table: ResourceArrays, slots: np.ndarray, facts: Facts) -> tuple[Any, ...]:
        """The `DIRECT` columns of `slots` that the query changes: z, in_dense, log1p BM25,
        relative BM25, in_keyword, coverage (a message without a content term matches
        nothing by itself, as in `features.direct_rows`)."""
        own = ~table.bare[slots]
        z, in_dense = _find(facts.dense, facts.zs, slots, facts.floor_z)
        score, in_keyword = _find(facts.keyword, facts.bm25, slots, 0.0)
        score = np.where(own, score, 0.0)
        terms = facts.terms
        coverage = table.shared(terms, slots) / len(terms) if terms else np.zeros(len(slots))
        top = facts.top_bm25
        relative = score / top if top > 0 else np.zeros(len(slots))
        z = np.where(own, z, facts.floor_z)
        return z, in_dense & own, np.log1p(score), relative, in_keyword & own, coverage

    def _logits(
        self,
        table: ResourceArrays,
        weights: np.ndarray,
        slots: np.ndarray,
        facts: Facts,
        columns: tuple[Any, ...] | None = None,
    ) -> np.ndarray:
        """`direct_rows(...) @ weights[1:] + weights[0]`, as a sum of the columns the query
        changes, each once, and the rest folded (`ResourceArrays.fixed`, the constants)."""
        z, in_dense, log_score, relative, in_keyword, coverage = (
            self._columns(table, slots, facts) if columns is None else columns
        )
        w, c, found = weights[1:], _COLUMN, facts.query_found
        constant = (
            weights[0]
            - w[c["z_relative"]] * facts.top_z
            + w[c["query_found"]] * found
            + w[c["name_missing"]] * facts.name_missing
            + w[c["log1p_terms"]] * math.log1p(len(facts.terms))
            + w[c["log1p_top_bm25"]] * math.log1p(facts.top_bm25)
        )
        return np.asarray(
            table.fixed(weights)[slots]
            + constant
            + z * (w[c["z"]] + w[c["z_relative"]] + w[c["z_found"]] * found)
            + log_score * (w[c["log1p_bm25"]] + w[c["bm25_found"]] * found)
            + relative * (w[c["bm25_relative"]] + w[c["bm25_relative_found"]] * found)
            + coverage * w[c["coverage"]]
            + in_keyword * w[c["in_keyword"]]
            + in_dense * w[c["in_dense"]]
        )

    def _probabilities(
        self, table: ResourceArrays, facts: Facts, kept: np.ndarray, size: int
    ) -> dict[int, float]:
        """`model.probabilities` on slots: each target's own row, its neighbours' match."""
        model = self.model
        at, exists = table.around(kept, model.reads_before, model.reads_after)
        known = np.unique(at[exists])
        at, exists = table.around(kept, model.before, model.after)
        targets = np.asarray(list(dict.fromkeys(at[exists].tolist())), dtype=np.int64)
        columns = self._columns(table, known, facts)
        z, _, log_score, relative, _, coverage = columns
        w, c = self.direct[1:], _COLUMN
        match = np.zeros(len(known) + 1)  # relative to a message that matches nothing
        match[:-1] = (
            (z - facts.floor_z) * (w[c["z"]] + w[c["z_relative"]])
            + log_score * w[c["log1p_bm25"]]
            + coverage * w[c["coverage"]]
            + relative * w[c["bm25_relative"]]
        )
        asks = match * np.append(table.question[known], 0.0)
        own = self._logits(table, self.context, known, facts, columns)
        wanted = table.key[targets][:, None] + _OFFSETS
        keys = table.key[known]
        at = np.minimum(keys.searchsorted(wanted), len(known) - 1)
        near = np.where(keys[at] == wanted, at, len(known))
        v = self.context[1 + len(DIRECT) :]
        logits = (
            own[known.searchsorted(targets)]
            + v[0] * match[near[:, 0]]
            + v[1] * asks[near[:, 0]]
            + v[2] * match[near[:, 1]]
            + v[3] * asks[near[:, 1]]
            + v[4] * match[near[:, 2]]
            + math.log(model.prior(size))
        )
        p = 1.0 / (1.0 + np.exp(-np.clip(logits, -60.0, 60.0)))
        chances = dict(zip(targets.tolist(), p.tolist(), strict=True))
        for slot in sorted(targets[table.bare[targets]].tolist(), key=table.seq.__getitem__):
            before = slot - 1  # slots run in thread order: the message before, if read
            answered = before in chances and table.key[before] == table.key[slot] - 1
            chances[slot] = min(chances[slot], chances[before] * (1 - 1e-6) if answered else 0.0)
        return chances

    def _group(
        self, table: ResourceArrays, kept: np.ndarray, chosen: dict[int, float]
    ) -> list[tuple[int, list[int]]]:
        """`model._group` on slots: each hit's best message and its window."""
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
        return groups

    def _hits(
        self,
        table: ResourceArrays,
        groups: list[tuple[int, list[int]]],
        chosen: dict[int, float],
        scope: ScopeFilter,
    ) -> list[RecallHit]:
        """The grouped messages read (held windows), as the engine's hits."""
        ids = [table.ids[s] for _, mine in groups for s in mine]
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

    fast.repeat = True
    for q in queries:  # warm, and the check: the same hits as the engine's
        theirs, ours = hybrid(q, on_arrays=False), hybrid(q, on_arrays=True)
        dense.search(q.text, resource_id=q.resource_id)
        if not _same(ours, theirs):
            raise SystemExit(f"the arrays' hits differ from the engine's for {q.text!r}")
    fast.repeat = False
    if fast.served != len(queries):
        raise SystemExit(f"the arrays answered {fast.served} of {len(queries)} searches")
    for phases in fast.phases.values():
        phases.clear()
    fast.after_halves.clear()
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
    return {**times, **_parts(fast, queries, dense.search_plan.dense_k)}


def _parts(fast: ArraySearch, queries: list[Any], dense_k: int) -> dict[str, list[float]]:
    """The steps a hybrid search takes beyond dense mode's, each alone (alternating)."""
    name, k = fast.info.name, fast.plan.dense_k

    def nearest(q: Any, wide: int) -> object:
        scope = ScopeFilter(resource_id=q.resource_id)
        return fast.vectors.nearest(name, list(q.vector), k=wide, scope=scope)

    def postings(q: Any) -> object:
        found = fast.arrays[q.resource_id].postings
        return found.search(query_terms(q.text), None, fast.plan.keyword_k, fast.storage._bm25)

    parts: dict[str, Callable[[Any], object]] = {
        VECTORS_POOL: lambda q: nearest(q, k),
        VECTORS_DENSE: lambda q: nearest(q, dense_k),
        POSTINGS: postings,
    }
    times: dict[str, list[float]] = {part: [] for part in parts}
    for r in range(ROUNDS):
        for i, q in enumerate(queries):
            for part in list(parts) if (i + r) % 2 == 0 else list(reversed(parts)):
                t = time.perf_counter()
                parts[part](q)
                times[part].append(time.perf_counter() - t)
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
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="the arrays query Chroma on a worker while the keyword postings run",
    )
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
    if args.overlap:
        fast.side = ThreadPoolExecutor(1, thread_name_prefix="whatif-vectors")
        print("halves: Chroma's query on a worker beside the keyword postings (--overlap)")
    with fast.installed():
        times = _compare(fast, engine, dense, queries)
    print(f"{len(queries)} searches: the arrays return the engine's hits")
    compared, with_hits = _check_varied(args.work / "varied")
    print(
        f"{compared} searches of varied conversations ({with_hits} with hits): the arrays "
        "return the engine's hits"
    )
    _report(args.size, len(queries), times, fast, dense.search_plan.dense_k)


def _report(
    size: str, count: int, times: dict[str, list[float]], fast: ArraySearch, dense_k: int
) -> None:
    p50 = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    base = p50[SEARCHES[0]]
    print(f"\nHybrid search at {size}, {count} queries x {ROUNDS}, alternating, ms:\n")
    print("| search | p50 | mean | p50 / dense |")
    print("|---|---|---|---|")
    for name in SEARCHES:
        mean = statistics.mean(times[name]) * 1e3
        print(f"| {name} | {pc.fmt(p50[name])} | {pc.fmt(mean)} | {pc.fmt(p50[name] / base)}x |")
    print("\n| arrays' phase (searches with hits) | p50 |\n|---|---|")
    for key, label in PHASES.items():
        print(f"| {label} | {pc.fmt(statistics.median(fast.phases[key]) * 1e3)} |")
    # What a hybrid search must add to dense mode's, measured alone, against what the
    # target (hybrid <= 1.5x dense) leaves for it.
    pool = fast.plan.dense_k
    read = statistics.median(fast.phases["read"]) * 1e3
    after = statistics.median(fast.after_halves) * 1e3 - read
    wider = p50[VECTORS_POOL] - p50[VECTORS_DENSE]
    leanest = wider + p50[POSTINGS] + after
    print("\n| what hybrid adds to dense mode | p50 ms |\n|---|---|")
    print(f"| {VECTORS_POOL} (k={pool}) | {pc.fmt(p50[VECTORS_POOL])} |")
    print(f"| {VECTORS_DENSE} (k={dense_k}) | {pc.fmt(p50[VECTORS_DENSE])} |")
    print(f"| the vectors' wider pool (the difference) | {pc.fmt(wider)} |")
    print(f"| {POSTINGS} | {pc.fmt(p50[POSTINGS])} |")
    print(f"| on arrays, everything after the two halves but the reading | {pc.fmt(after)} |")
    print(f"| **what the leanest version adds (sum)** | **{pc.fmt(leanest)}** |")
    print(f"| what hybrid <= 1.5x dense leaves (half of dense mode's p50) | {pc.fmt(base / 2)} |")
    warm = statistics.median(fast.warm) * 1e3
    print(f"| the same arrays' work again at once (warm caches) | {pc.fmt(warm)} |")
    print(f"\nleanest version / dense: {pc.fmt((base + leanest) / base)}x")


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


def _check_varied(work: Path, seed: int = 5) -> tuple[int, int]:
    """The arrays against the engine on what the synthetic corpus lacks.

    Three resources of four threads: questions, acknowledgements ("ok thanks": no content
    term), copies of one text (some with other spacing), system messages, and seq gaps (a
    few messages deleted behind the storage). Queries of two to four content words, and
    short ones beside small talk: an acknowledgement word with four content words (bare
    messages among the matches), "what is my ...?" (a question about the one asking);
    and capitalised names, held by the conversations ("the Garden") or by none ("Priya").
    Raises on the first search that differs; returns how many were compared, and how
    many of them had hits.
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
    # Short ones beside small talk: acknowledgements among the vector matches, and
    # questions about the one asking (`Query.top_user_statement`).
    queries += [
        f"{asking.choice(_ACKS)} " + " ".join(asking.choice(_WORDS) for _ in range(4))
        for _ in range(10)
    ]
    queries += [f"what is my {asking.choice(_WORDS)}?" for _ in range(10)]
    # Names (`Query.name_missing`): of words the conversations hold, and of nobody there.
    queries += [
        f"Tell me about the {asking.choice(_WORDS).title()} and the {asking.choice(_WORDS)}"
        for _ in range(10)
    ]
    queries += [
        f"What did {asking.choice(('Priya', 'Tomas'))} say about the {asking.choice(_WORDS)}?"
        for _ in range(10)
    ]
    engine = opened()
    storage = engine._core.backends.storage
    arrays = _arrays(storage, file, set(resources), engine)
    fast = ArraySearch(engine, arrays)
    with_hits = 0
    with fast.installed():
        for query in queries:
            for resource_id in resources:
                fast.on = False
                theirs = engine.search(query, resource_id=resource_id)
                fast.on = True
                ours = engine.search(query, resource_id=resource_id)
                if not _same(ours, theirs):
                    raise SystemExit(f"the arrays' hits differ from the engine's for {query!r}")
                with_hits += bool(theirs)
    if fast.served != len(queries) * len(resources):
        raise SystemExit(f"the arrays answered {fast.served} of the varied searches")
    return fast.served, with_hits


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
