"""Tuning sweep of the previous (min-max fusion) hybrid pipeline on locomo-dev.

Superseded for the defaults by ``benchmarks/quality_cv.py`` (calibrated scores, chosen
leave-one-conversation-out); kept because it measures the levers under the fused ranking
(``SearchPlan.rank`` / ``boost`` / ``top`` / ``hits``), which keyword mode still uses and
which ``docs/quality.md`` quotes as the previous defaults.

Not a test: a script that prints tables (``docs/quality.md`` quotes them). It loads
locomo-dev once through the real engine (``SemanticRecall.index`` into SQLite storage
with FTS5 keyword search, exact in-memory vectors, the local MiniLM embedder), fetches
each question's top-100 keyword matches (for several BM25 constants, with and without
stemming) and top-100 vectors once, and then replays settings through the engine's own
ranking code (:class:`~langchain_semantic_recall.search.SearchPlan`: ``rank``, ``period``,
``boost``, ``top``, ``hits``, which is exactly what ``SemanticRecall.search`` runs over the
same candidates), so hundreds of settings take minutes, not hours. The chosen defaults are
then checked end to end with ``benchmarks/quality_locomo.py`` / ``semantic-recall eval``.

Tuning discipline: the five conversations are split in two folds (A: conv-26, conv-41,
conv-43; B: conv-30, conv-42); the grid's best settings on one fold are reported on the
other, and flat regions are preferred over the top of a grid.

Usage::

    .venv/bin/python benchmarks/quality_sweep.py [PATH_TO_locomo_dev.json] [--cache FILE]

The candidates are cached in a pickle (``--cache``, default in the temp folder) so that a
second run skips loading and embedding.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from quality_common import DEFAULT_DATA, cached, locomo_engine

from langchain_semantic_recall import SemanticRecall, keywords
from langchain_semantic_recall.evaluation import Dataset, load_dataset
from langchain_semantic_recall.fusion import NeighbourWeights, best_per_message
from langchain_semantic_recall.keywords import BM25Params
from langchain_semantic_recall.records import ScopeFilter, StoredMessage, VectorHit
from langchain_semantic_recall.search import SearchPlan, resolve
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

POOL = 100
BM25_VARIANTS = {
    "b.75": BM25Params(1.2, 0.75),
    "b.5": BM25Params(1.2, 0.5),
    "b.3": BM25Params(1.2, 0.3),
    "b.1": BM25Params(1.2, 0.1),
    "k0.9": BM25Params(0.9, 0.3),
    "k1.5": BM25Params(1.5, 0.3),
}
UNSTEMMED = {"nostem-b.75": BM25Params(1.2, 0.75), "nostem-b.3": BM25Params(1.2, 0.3)}
FOLDS = {"A": {"conv-26", "conv-41", "conv-43"}, "B": {"conv-30", "conv-42"}}


@dataclass
class Case:
    """One question and its candidates."""

    sample_id: str
    question: str
    category: str
    evidence: frozenset[str]
    dense: list[VectorHit]
    keyword: dict[str, list[tuple[str, float]]]


@dataclass
class Corpus:
    cases: list[Case]
    threads: dict[str, list[StoredMessage]]
    place: dict[str, tuple[str, int]]


@contextmanager
def unstemmed() -> Iterator[None]:
    """Index and search without the Porter stemmer (for the stemming lever)."""
    original = keywords.stem
    keywords.stem = lambda word: word  # type: ignore[assignment]
    try:
        yield
    finally:
        keywords.stem = original


def _keyword_lists(
    storage: SQLiteStorage, dataset: Dataset, variants: dict[str, BM25Params]
) -> list[dict[str, list[tuple[str, float]]]]:
    lists: list[dict[str, list[tuple[str, float]]]] = [{} for _ in dataset.questions]
    for name, params in variants.items():
        storage._bm25 = params  # the sweep varies BM25's constants on one index
        for found, question in zip(lists, dataset.questions, strict=True):
            scope = ScopeFilter(resource_id=question.sample_id)
            found[name] = storage.keyword_search(question.question, scope=scope, limit=POOL)
    return lists


def build(data: Path) -> Corpus:
    """Load locomo-dev through the engine and fetch every question's candidates."""
    memory, storage, dataset = locomo_engine(data)
    keyword = _keyword_lists(storage, dataset, BM25_VARIANTS)
    with unstemmed():
        plain = SQLiteStorage(":memory:")
        plain_memory = SemanticRecall(
            storage=plain,
            vector_store=InMemoryVectorIndex(),
            embeddings=memory.embeddings,
            cache=memory.cache,  # the vectors are computed already
            search_mode="keyword",
        )
        load_dataset(plain_memory, dataset, progress=False)
        for found, extra in zip(keyword, _keyword_lists(plain, dataset, UNSTEMMED), strict=True):
            found.update(extra)
    info = memory.ensure_index()
    vectors = memory.embeddings.embed_documents([q.question for q in dataset.questions])
    cases = []
    for question, vector, found in zip(dataset.questions, vectors, keyword, strict=True):
        scope = ScopeFilter(resource_id=question.sample_id)
        hits = memory.vector_store.query(info.name, vector, k=POOL, scope=scope)
        prefix = f"{question.sample_id}:"
        evidence = frozenset(prefix + e for e in question.evidence)
        cases.append(
            Case(question.sample_id, question.question, question.category, evidence, hits, found)
        )
    threads: dict[str, list[StoredMessage]] = {}
    for message in storage.list_messages(limit=100_000):
        threads.setdefault(message.thread_id, []).append(message)
    place = {m.id: (t, i) for t, ms in threads.items() for i, m in enumerate(ms)}
    return Corpus(cases, threads, place)


@dataclass(frozen=True)
class Setting:
    """One configuration: the engine's options plus the sweep's own levers."""

    mode: str = "hybrid"
    bm25: str = "b.3"
    keyword_weight: float = 0.8
    top_k: int = 12
    before: int = 0
    after: int = 2
    budget: int | None = 15
    pool: int = 50
    time_boost: float = 0.5
    flat: bool = False
    """Every neighbour weighs 1: windows taken whole in hit order until the budget."""

    def plan(self) -> SearchPlan:
        plan = resolve(
            search_mode=self.mode,
            keyword_search=True,
            top_k=self.top_k,
            message_range=(self.before, self.after),
            message_budget=self.budget,
            keyword_weight=self.keyword_weight,
            threshold=None,
            time_boost=self.time_boost,
            candidates=self.pool,
        )
        if self.flat:
            flat = NeighbourWeights((1.0,) * self.before, (1.0,) * self.after)
            plan = replace(plan, weights=flat)
        return plan

    def label(self) -> str:
        window = f"{self.before}/{self.after}{' flat' if self.flat else ''}"
        return (
            f"{self.mode:7} {self.bm25:11} w{self.keyword_weight:.2f} k{self.top_k:<2} "
            f"win {window:8} B{self.budget} pool{self.pool} time{self.time_boost:.1f}"
        )


def returned(corpus: Corpus, case: Case, setting: Setting, plan: SearchPlan) -> set[str]:
    """What ``SemanticRecall.search`` returns for this case under ``plan``."""
    dense = best_per_message(case.dense[: plan.dense_k]) if plan.uses_vectors else []
    keyword = case.keyword[setting.bm25][: plan.keyword_k] if plan.uses_keywords else []
    ranked = plan.rank(dense, keyword)
    period = plan.period(case.question)
    if period is not None:
        times = {i: (corpus.threads[corpus.place[i][0]][corpus.place[i][1]],) for i, _ in ranked}
        ranked = plan.boost(ranked, times, period)
    kept = plan.top(ranked)
    windows = {}
    for message_id, _ in kept:
        thread_id, at = corpus.place[message_id]
        messages = corpus.threads[thread_id]
        windows[message_id] = tuple(messages[max(0, at - setting.before) : at + setting.after + 1])
    return {m.id for hit in plan.hits(kept, windows) for m in hit.window}


def score(
    corpus: Corpus, setting: Setting, keep: Callable[[Case], bool] = lambda case: True
) -> dict[str, float]:
    plan = setting.plan()
    by_category: dict[str, list[float]] = {}
    sizes: list[int] = []
    for case in corpus.cases:
        if keep(case):
            got = returned(corpus, case, setting, plan)
            found = len(got & case.evidence) / len(case.evidence)
            by_category.setdefault(case.category, []).append(found)
            sizes.append(len(got))
    every = [v for values in by_category.values() for v in values]
    out = {c: sum(v) / len(v) for c, v in sorted(by_category.items())}
    out["overall"] = sum(every) / max(1, len(every))  # an empty fold (other data) scores 0
    out["msgs"] = sum(sizes) / max(1, len(sizes))
    return out


def in_fold(name: str) -> Callable[[Case], bool]:
    return lambda case: case.sample_id in FOLDS[name]


def table(corpus: Corpus, settings: Iterable[Setting], title: str) -> None:
    print(f"\n## {title}")
    print(f"{'setting':82} {'all':>5} {'A':>5} {'B':>5} {'msgs':>5}  categories 1-4")
    for setting in settings:
        whole = score(corpus, setting)
        fold_a = score(corpus, setting, in_fold("A"))["overall"]
        fold_b = score(corpus, setting, in_fold("B"))["overall"]
        cats = " ".join(f"{v:.3f}" for k, v in whole.items() if k not in {"overall", "msgs"})
        print(
            f"{setting.label():82} {whole['overall']:.3f} {fold_a:.3f} {fold_b:.3f} "
            f"{whole['msgs']:5.1f}  {cats}"
        )


def best(corpus: Corpus, grid: Sequence[Setting], fold: str, top: int = 5) -> list[Setting]:
    return sorted(grid, key=lambda s: -score(corpus, s, in_fold(fold))["overall"])[:top]


def sweeps(corpus: Corpus) -> None:
    bm25 = Setting(mode="keyword", time_boost=0.0)
    table(
        corpus,
        [
            replace(bm25, bm25="nostem-b.75", before=1, after=1, flat=True),
            replace(bm25, bm25="nostem-b.75", before=0, after=2, flat=True),
            replace(bm25, bm25="b.75", before=0, after=2, flat=True),
            replace(bm25, before=0, after=2, flat=True),
            bm25,
            replace(bm25, mode="hybrid"),
            Setting(),
            Setting(mode="dense", time_boost=0.0),
            Setting(mode="dense", top_k=4, before=1, after=1, budget=None),
        ],
        "levers, one at a time: plain BM25 -> +shifted windows -> +stemming -> +b 0.3 -> "
        "+budgeted windows -> +dense fusion -> +time boost (defaults); dense rows last",
    )
    table(corpus, [Setting(bm25=name) for name in BM25_VARIANTS], "BM25 constants")
    table(corpus, [Setting(keyword_weight=w) for w in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)], "weight")
    table(corpus, [Setting(top_k=k) for k in (5, 8, 10, 12, 15, 20)], "top_k")
    reaches = ((0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (2, 2))
    table(corpus, [Setting(before=b, after=a) for b, a in reaches], "window reach")
    table(corpus, [Setting(pool=p) for p in (20, 30, 40, 50, 60, 80, 100)], "candidate pool")
    table(corpus, [Setting(time_boost=t) for t in (0.0, 0.2, 0.5, 1.0)], "time boost")
    grid = [
        Setting(keyword_weight=w, top_k=k, before=b, after=a, pool=p)
        for w, k, (b, a), p in itertools.product(
            (0.6, 0.7, 0.8, 0.9), (10, 12, 15), ((0, 2), (0, 3), (1, 2), (1, 3)), (30, 50)
        )
    ]
    for fold, other in (("A", "B"), ("B", "A")):
        table(corpus, best(corpus, grid, fold), f"best 5 of {len(grid)} on fold {fold} ({other})")
    curve: list[Setting] = []
    for budget in (5, 8, 10, 12, 13, 15, 18, 20, 25, 30):
        curve += [
            Setting(budget=budget),
            Setting(mode="keyword", time_boost=0.0, budget=budget),
            Setting(mode="dense", time_boost=0.0, budget=budget),
        ]
    table(corpus, curve, "trade-off curve: recall against messages per query")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "locomo-sweep.pkl"))
    args = parser.parse_args(argv)
    corpus = cached(build, Path(args.data), Path(args.cache))
    sweeps(corpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
