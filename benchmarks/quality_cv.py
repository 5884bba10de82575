"""Leave-one-conversation-out selection of hybrid search's calibrated score and gate.

Not a test: a script that prints the tables ``docs/quality.md`` quotes. It loads
locomo-dev once through the real engine (``SemanticRecall.index`` into SQLite storage with
FTS5 keyword search, exact in-memory vectors, the local MiniLM embedder) and fetches, for
every question, the 50 keyword and 50 vector candidates the engine's search would fetch:

- asked of its own conversation (label of a candidate: evidence in its window, i.e. the
  candidate or one of the two messages after it);
- asked of *another* conversation (``false_memory.foreign_pairs``: every label 0);
- plus every ``false_memory.SMALL_TALK`` turn asked of every conversation (never used to
  fit: they measure the conversational-word rule and the gate on turns the model never saw).

Features are computed by the package itself (``calibration.features``) and the model is
a logistic regression fit with numpy (IRLS, L2 1.0). For each of the 5 folds the model is
fit on the cases that do not touch the held-out conversation and the gate is chosen on
the same training cases (the highest recall whose foreign questions return <= 2 messages
on average); the held-out conversation is then replayed through the engine's own ranking
(``SearchPlan.top`` / ``SearchPlan.hits``: what ``SemanticRecall.search`` runs over the same
candidates). Finally the model is fit on all 5 conversations: those are the coefficients
shipped as ``calibration.DEFAULT_MODEL``.

Usage::

    .venv/bin/python benchmarks/quality_cv.py [PATH_TO_locomo_dev.json] [--cache FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from quality_common import DEFAULT_DATA, cached, locomo_engine

from langchain_semantic_recall.calibration import FEATURES, Model, candidates, features
from langchain_semantic_recall.false_memory import SMALL_TALK, foreign_pairs
from langchain_semantic_recall.fusion import Candidate, best_per_message, fuse
from langchain_semantic_recall.records import ScopeFilter, StoredMessage, VectorHit
from langchain_semantic_recall.search import SearchPlan, resolve

POOL = 50
GATES = (0.0, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03)
OFFSETS = range(-2, 5)
FOREIGN_LIMIT = 2.0


@dataclass
class Case:
    kind: str  # "own", "foreign" or "small talk"
    origin: str  # the conversation the question comes from
    resource: str  # the conversation it is asked of
    question: str
    category: str
    evidence: frozenset[str]
    dense: list[VectorHit]
    keyword: list[tuple[str, float]]
    rows: list[tuple[str, list[float]]] = field(default_factory=list)
    labels: dict[int, list[float]] = field(default_factory=dict)


@dataclass
class Corpus:
    cases: list[Case]
    threads: dict[str, list[StoredMessage]]

    def __post_init__(self) -> None:
        self.place = {m.id: (t, i) for t, ms in self.threads.items() for i, m in enumerate(ms)}
        self.by_id = {m.id: m for ms in self.threads.values() for m in ms}

    def window(self, message_id: str, before: int, after: int) -> tuple[StoredMessage, ...]:
        thread_id, at = self.place[message_id]
        return tuple(self.threads[thread_id][max(0, at - before) : at + after + 1])

    def at(self, message_id: str, offset: int) -> str | None:
        thread_id, at = self.place[message_id]
        messages = self.threads[thread_id]
        return messages[at + offset].id if 0 <= at + offset < len(messages) else None


def build(data: Path) -> Corpus:
    """Load locomo-dev through the engine and fetch every case's candidates."""
    memory, storage, dataset = locomo_engine(data)
    info = memory.ensure_index()
    resources = list(dict.fromkeys(q.sample_id for q in dataset.questions))
    pairs = foreign_pairs(resources)
    texts = [q.question for q in dataset.questions]
    vectors = memory.embeddings.embed_documents([*texts, *SMALL_TALK])

    def fetch(text: str, vector: list[float], resource: str) -> tuple[Any, Any]:
        scope = ScopeFilter(resource_id=resource)
        return (
            memory.vector_store.query(info.name, vector, k=POOL, scope=scope),
            storage.keyword_search(text, scope=scope, limit=POOL),
        )

    cases: list[Case] = []
    for question, vector in zip(dataset.questions, vectors, strict=False):
        evidence = frozenset(f"{question.sample_id}:{e}" for e in question.evidence)
        own, other = question.sample_id, pairs[question.sample_id]
        for kind, resource, labels in (("own", own, evidence), ("foreign", other, frozenset())):
            dense, keyword = fetch(question.question, vector, resource)
            cases.append(
                Case(
                    kind,
                    own,
                    resource,
                    question.question,
                    question.category,
                    labels,
                    dense,
                    keyword,
                )
            )
    for resource in resources:
        for text, vector in zip(SMALL_TALK, vectors[len(texts) :], strict=True):
            dense, keyword = fetch(text, vector, resource)
            cases.append(
                Case(
                    "small talk",
                    resource,
                    resource,
                    text,
                    "small talk",
                    frozenset(),
                    dense,
                    keyword,
                )
            )
    threads: dict[str, list[StoredMessage]] = {}
    for message in storage.list_messages(limit=100_000):
        threads.setdefault(message.thread_id, []).append(message)
    return Corpus(cases, threads)


def featurize(corpus: Corpus, plan: SearchPlan) -> None:
    """Each case's feature rows (by the package: `calibration.features`) and labels."""
    for case in corpus.cases:
        dense = best_per_message(case.dense[: plan.dense_k])
        keyword = case.keyword[: plan.keyword_k]
        ids = {key for key, _ in fuse(dense, keyword, keyword_weight=0.8)}
        found = {key: corpus.by_id[key] for key in ids}
        case.rows = features(case.question, dense, keyword, found, plan.period(case.question))
        case.labels = {
            k: [float(corpus.at(key, k) in case.evidence) for key, _ in case.rows] for k in OFFSETS
        }


def fit(cases: Sequence[Case], offset: int, mask: frozenset[str] = frozenset()) -> Model:
    """Logistic regression by iteratively reweighted least squares (numpy, L2 1.0).

    Features named in `mask` are left out (their weight is 0).
    """
    keep = np.array([1.0] + [0.0 if name in mask else 1.0 for name in FEATURES])
    x = np.array([[1.0, *row] for case in cases for _, row in case.rows]) * keep
    y = np.array([label for case in cases for label in case.labels[offset]])
    w = np.zeros(x.shape[1])
    ridge = np.diag([0.0] + [1.0] * (x.shape[1] - 1))
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + ridge @ w
        hessian = (x.T * (p * (1 - p))) @ x + ridge
        w -= np.linalg.solve(hessian, gradient)
    return Model(intercept=float(w[0]), weights=tuple(float(v) for v in w[1:]))


@dataclass(frozen=True)
class Lever:
    """One configuration of the calibrated search."""

    name: str
    before: int = 2
    after: int = 3
    top_k: int = 12
    budget: int | None = 15
    gate: float | None = None  # None: chosen on the training folds
    mask: frozenset[str] = frozenset()

    def plan(self, base: SearchPlan, gate: float) -> SearchPlan:
        window = type(base.message_range)(self.before, self.after)
        return replace(
            base,
            top_k=self.top_k,
            message_range=window,
            message_budget=self.budget,
            threshold=gate,
        )


Scored = list[tuple[Case, list[Candidate]]]


def score_cases(cases: Sequence[Case], models: dict[int, Model], lever: Lever) -> Scored:
    """Each case's best `top_k` candidates, calibrated (`calibration.candidates`)."""
    return [
        (c, candidates(c.rows, models, before=lever.before, after=lever.after)[: lever.top_k])
        for c in cases
    ]


def measure(corpus: Corpus, scored: Scored, plan: SearchPlan) -> dict[str, Any]:
    """Recall and false memories of `scored` under `plan` (`SearchPlan.calibrated_hits`)."""
    recall: dict[str, list[float]] = {}
    sizes: dict[str, list[int]] = {"own": [], "foreign": [], "small talk": []}
    window = plan.message_range
    for case, best in scored:
        near = {c.id: corpus.window(c.id, window.before, window.after) for c in best}
        got = {m.id for hit in plan.calibrated_hits(best, near) for m in hit.window}
        sizes[case.kind].append(len(got))
        if case.kind == "own":
            found = len(got & case.evidence) / len(case.evidence)
            recall.setdefault(case.category, []).append(found)
    every = [v for values in recall.values() for v in values]
    out: dict[str, Any] = {"recall": statistics.fmean(every) if every else 0.0}
    out["questions"] = len(every)
    out["categories"] = {c: statistics.fmean(v) for c, v in sorted(recall.items())}
    for kind, values in sizes.items():
        out[kind] = statistics.fmean(values) if values else 0.0
        out[kind + " any"] = statistics.fmean(v > 0 for v in values) if values else 0.0
    return out


def choose_gate(corpus: Corpus, scored: Scored, plan: SearchPlan) -> float:
    """The gate with the best training recall whose foreign questions return at most
    `FOREIGN_LIMIT` messages on average (the highest gate if none does)."""
    scores = {g: measure(corpus, scored, replace(plan, threshold=g)) for g in GATES}
    fine = [g for g, s in scores.items() if s["foreign"] <= FOREIGN_LIMIT]
    return max(fine, key=lambda g: (scores[g]["recall"], -g)) if fine else GATES[-1]


def old_defaults(corpus: Corpus, case: Case) -> set[str]:
    """What the previous defaults returned (min-max fusion 0.8/0.2, time boost 0.5, top
    12, the hit and 2 after with linear weights, 15 messages, no gate)."""
    plan = resolve(
        search_mode="keyword",
        keyword_search=True,
        top_k=12,
        message_range=(0, 2),
        message_budget=15,
        keyword_weight=0.8,
        threshold=None,
    )
    ranked = fuse(best_per_message(case.dense[:50]), case.keyword[:50], keyword_weight=0.8)
    period = plan.period(case.question)
    if period is not None:
        ranked = plan.boost(ranked, {k: (corpus.by_id[k],) for k, _ in ranked}, period)
    kept = plan.top(ranked)
    windows = {k: corpus.window(k, 0, 2) for k, _ in kept}
    return {m.id for hit in plan.hits(kept, windows) for m in hit.window}


LEVERS = (
    Lever("calibrated, window 0/2, top 12, no gate", before=0, after=2, top_k=12, gate=0.0),
    Lever("calibrated, window 0/2, top 12, gate", before=0, after=2, top_k=12),
    Lever("calibrated, window 1/2, top 12, gate", before=1, after=2, top_k=12),
    Lever("calibrated, window 2/3, top 20, gate", top_k=20),
    Lever("calibrated, window 2/3, top 12, no gate", gate=0.0),
    Lever("calibrated, window 2/3, top 12, gate (the defaults)"),
    Lever("calibrated, window 2/4, top 12, gate", after=4),
    Lever("  - without the question feature", mask=frozenset({"question"})),
    Lever("  - without the period feature", mask=frozenset({"in_period"})),
    Lever(
        "  - without coverage / found / name features",
        mask=frozenset({"coverage", "query_found", "name_missing"}),
    ),
    Lever(
        "  - dense features only",
        mask=frozenset(
            f
            for f in FEATURES
            if "bm25" in f or f in {"in_keyword", "coverage", "query_found", "name_missing"}
        ),
    ),
)


def loco(corpus: Corpus, base: SearchPlan) -> None:
    """Every lever, leave-one-conversation-out: fit and gate on 4, report on the 5th."""
    conversations = sorted({case.resource for case in corpus.cases})
    print("\n## leave-one-conversation-out: model and gate chosen on the other 4")
    print(
        f"{'lever':55} {'mean':>6} "
        + " ".join(f"{c:>7}" for c in conversations)
        + f" {'gates':>24} {'foreign':>8} {'small':>6}"
    )
    old = []
    for held in conversations:
        mine = [c for c in corpus.cases if c.resource == held and c.kind == "own"]
        old.append(
            statistics.fmean(
                len(old_defaults(corpus, c) & c.evidence) / len(c.evidence) for c in mine
            )
        )
    print(
        f"{'previous defaults (min-max fusion, no gate; in-sample)':55} "
        f"{statistics.fmean(old):6.3f} "
        + " ".join(f"{v:7.3f}" for v in old)
        + f" {'-':>24} {15.0:8.2f} {15.0:6.2f}"
    )
    curve: dict[int, list[float]] = {}
    for lever in LEVERS:
        rows = []
        for held in conversations:
            train = [
                c
                for c in corpus.cases
                if c.kind != "small talk" and held not in (c.resource, c.origin)
            ]
            test = [c for c in corpus.cases if c.resource == held]
            models = {k: fit(train, k, lever.mask) for k in OFFSETS}
            plan = lever.plan(base, 0.0)
            gate = lever.gate
            if gate is None:
                gate = choose_gate(corpus, score_cases(train, models, lever), plan)
            scored = score_cases(test, models, lever)
            rows.append((gate, measure(corpus, scored, replace(plan, threshold=gate))))
            if lever.name.endswith("(the defaults)"):
                for budget in (5, 8, 10, 12, 15, 20, 25, 30):
                    got = measure(
                        corpus, scored, replace(plan, threshold=gate, message_budget=budget)
                    )
                    curve.setdefault(budget, []).append(got["recall"])
                    curve.setdefault(-budget, []).append(got["own"])
                print_fold_detail(held, gate, rows[-1][1])
        recalls = [r["recall"] for _, r in rows]
        print(
            f"{lever.name:55} {statistics.fmean(recalls):6.3f} "
            + " ".join(f"{v:7.3f}" for v in recalls)
            + f" {','.join(f'{g:g}' for g, _ in rows):>24}"
            + f" {statistics.fmean(r['foreign'] for _, r in rows):8.2f}"
            + f" {statistics.fmean(r['small talk'] for _, r in rows):6.2f}"
        )
    print("\n## recall against the budget at the defaults (LOCO, mean of folds)")
    for budget in sorted(b for b in curve if b > 0):
        print(
            f"budget {budget:3}: recall {statistics.fmean(curve[budget]):.3f}, "
            f"messages per question {statistics.fmean(curve[-budget]):.1f}"
        )


def print_fold_detail(held: str, gate: float, got: dict[str, Any]) -> None:
    cats = " ".join(f"{k} {v:.3f}" for k, v in got["categories"].items())
    print(
        f"    [defaults] {held}: gate {gate:g} recall {got['recall']:.3f} "
        f"({got['questions']} q; {cats}); msgs/q own {got['own']:.1f}, foreign "
        f"{got['foreign']:.2f} (any {got['foreign any']:.2f}), small talk "
        f"{got['small talk']:.2f} (any {got['small talk any']:.2f})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "locomo-cv.pkl"))
    args = parser.parse_args(argv)
    corpus = cached(build, Path(args.data), Path(args.cache))
    base = resolve(
        search_mode="hybrid",
        keyword_search=True,
        top_k=None,
        message_range=None,
        message_budget="auto",
        keyword_weight=0.8,
        threshold=None,
    )
    featurize(corpus, base)
    loco(corpus, base)
    train = [case for case in corpus.cases if case.kind != "small talk"]
    lever = Lever("shipped")
    models = {k: fit(train, k) for k in range(-lever.before, lever.after + 1)}
    print("\n## the shipped models (fit on all 5 conversations): calibration.OFFSET_MODELS")
    print("{")
    for k, model in models.items():
        weights = ", ".join(f"{w:.3f}" for w in model.weights)
        print(f"    {k}: Model({model.intercept:.3f}, ({weights})),")
    print("}")
    scored = score_cases(corpus.cases, models, lever)
    for gate in GATES:
        got = measure(corpus, scored, lever.plan(base, gate))
        print(
            f"in-sample gate {gate:g}: recall {got['recall']:.3f}, foreign "
            f"{got['foreign']:.2f}, small talk {got['small talk']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
