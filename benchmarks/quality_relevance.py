"""Fit and measure the relevance model on three kinds of conversation (issue: recall on meaning).

Not a test: the script behind `docs/quality.md` and the shipped
`langchain_semantic_recall/data/relevance/all-MiniLM-L6-v2.json`. It loads the three
development sets through the real engine (SQLite storage with FTS5 keyword search, exact
in-memory vectors, the local MiniLM model), asks every question as `search` would
(the engine's 50 keyword and 50 vector candidates, the query's vector against the reference
sentences), then fits and measures with the package's own code (`relevance.features`,
`RelevanceModel.select`):

- **locomo**: locomo-dev, 5 long two-person conversations (each a resource);
- **lme**: longmemeval-dev, 168 LongMemEval_S questions pooled into 8 memories;
- **para**: paraphrase-dev, 80 questions sharing no word with the fact, asked of a small
  store (the facts alone) and of a busy one (the facts among >= 330 LoCoMo messages).

Every set also asks its resources the paraphrase set's small-talk and off-topic lines, and
each question of another resource (foreign: nothing there is evidence for it).

Fitting: two logistic models (candidates, messages; every question weighs the same), then
the budget rule's three numbers (`silent_below`, `full_from`, `name_penalty`; above the
chance term `SIZE_WEIGHT * sqrt(2 ln N)` of a scope of N messages) by a grid: the
best mean recall whose foreign questions (LoCoMo) and off-topic lines return at most 2
messages each and small talk at most 0.5. Printed: the 0.2.0 defaults, plain BM25 top-15
(Okapi, k1 1.2, b 0.75), the package's keyword and dense modes, the shipped model
(in-sample), **leave-one-dataset-out** (fit on two sets, measured on the third) and
**leave-one-conversation-out** (fit on everything but one resource, measured on it).

Usage::

    .venv/bin/python benchmarks/quality_relevance.py [--cache DIR] [--write] [--embedder hashing]

`--cache DIR` keeps the embeddings and candidates (the first run embeds ~4 M characters of
LongMemEval: 10-35 min on 2 cores; later runs take a few minutes). `--write` writes the
all-data fit to the package's data file.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import pickle
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage
from relevance_020 import select_020

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.eval_paraphrase import busy_sessions
from langchain_semantic_recall.evaluation import (
    Dataset,
    EvalConversation,
    EvalQuestion,
    load_dataset,
    read_eval_jsonl,
    read_locomo,
)
from langchain_semantic_recall.false_memory import foreign_pairs
from langchain_semantic_recall.fusion import best_per_message, one_per_text
from langchain_semantic_recall.messages import CREATED_AT_KEY
from langchain_semantic_recall.periods import named_period
from langchain_semantic_recall.records import ScopeFilter, StoredMessage
from langchain_semantic_recall.relevance import (
    SMALL_TALK,
    UNRELATED,
    FittedFor,
    Query,
    Reference,
    RelevanceModel,
    TermCache,
    default_model,
)
from langchain_semantic_recall.relevance.features import (
    CONTEXT,
    DIRECT,
    MATCH,
    context_rows,
    direct_rows,
)
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

DATA = Path(__file__).resolve().parents[2] / "shared/data"
POOL = 50
BUDGET = 15
SETS = {"locomo": ("locomo",), "lme": ("lme",), "para": ("para-small", "para-busy")}
LIMITS = {"foreign": 2.0, "off-topic": 2.0, "small talk": 0.5}
"""Most messages per question the budget rule may return on the training sets (LongMemEval:
3 but for small talk; foreign questions bind on LoCoMo only: LongMemEval's are reported,
and the paraphrase personas share topics by design)."""
GRID = {
    "silent_below": [x / 4 for x in range(-12, 21)],
    "full_from": [x / 4 for x in range(-4, 37)],
    "name_penalty": [0.0, 2.0, 4.0],
}
"""In spreads of z, above the chance term (`SIZE_WEIGHT`): steps of a quarter."""
SIZE_WEIGHT = 1.0
"""`Evidence.size_weight`, fixed by reasoning (the best of N roughly normal draws lies
about sqrt(2 ln N) spreads up), not fitted. 0.0 gives the rule of the round before."""


# --- loading -------------------------------------------------------------------------------


class CachedEmbeddings(Embeddings):
    """An embedder whose vectors are kept in a pickle file across runs (text -> vector)."""

    def __init__(self, inner: Embeddings, path: Path | None, name: str) -> None:
        self.inner, self.path, self.model_name = inner, path, name
        self.vectors: dict[str, list[float]] = {}
        if path is not None and path.is_file():
            self.vectors = pickle.loads(path.read_bytes())  # our own cache file
        self.dirty = False

    def __getattr__(self, name: str) -> Any:  # count_tokens, split_text, dimension
        return getattr(self.inner, name)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.inner.embed_documents(missing), strict=True))
            self.dirty = True
        return [self.vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    def save(self) -> None:
        if self.dirty and self.path is not None:
            self.path.write_bytes(pickle.dumps(self.vectors))
            self.dirty = False


class HashingEmbeddings(Embeddings):
    """Bag of hashed words and word pairs, 512-d: an embedder nothing was fitted for."""

    model_name = "hashing-512"
    dimension = 512

    def _one(self, text: str) -> list[float]:
        words = re.findall(r"\w+", text.lower())
        vector = np.zeros(self.dimension)
        for token in (*words, *(a + " " + b for a, b in itertools.pairwise(words))):
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "little") % self.dimension] += (
                1.0 if digest[4] % 2 else -1.0
            )
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm else vector).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def paraphrase_dataset(busy: bool) -> Dataset:
    """Each persona a resource, each fact + reply a thread; busy: + >= 330 LoCoMo messages."""
    rows = [json.loads(line) for line in (DATA / "paraphrase-dev/paraphrase_dev.jsonl").open()]
    start = datetime(2024, 3, 1, tzinfo=UTC)
    conversations, questions = [], []
    for i, row in enumerate(rows):
        at = start + timedelta(days=i)
        fact = HumanMessage(
            row["fact"], id=f"{row['id']}:u", additional_kwargs={CREATED_AT_KEY: at.isoformat()}
        )
        reply = AIMessage(
            row["reply"],
            id=f"{row['id']}:a",
            additional_kwargs={CREATED_AT_KEY: (at + timedelta(seconds=1)).isoformat()},
        )
        conversations.append(EvalConversation(row["persona"], f"{row['id']}-t", [fact, reply]))
        questions.append(
            EvalQuestion(row["persona"], row["question"], row["kind"], (f"{row['id']}:u",))
        )
    if busy:
        sessions = read_locomo(DATA / "locomo-dev/locomo_dev.json").conversations
        personas = sorted({row["persona"] for row in rows})
        # the sessions `eval paraphrase --busy` adds too, so its figures are these
        for persona, picked in busy_sessions(sessions, personas).items():
            for session in picked:
                copies = [
                    m.model_copy(update={"id": f"{persona}-busy:{m.id}"}) for m in session.messages
                ]
                conversations.append(
                    EvalConversation(persona, f"{persona}-busy-{session.thread_id}", copies)
                )
    return Dataset(conversations, questions)


ANSWERS: dict[str, list[str]] = {}
"""Fact id -> the words that show it was recalled (`read_probes`)."""
NOISE: dict[str, str] = {}
"""Small-talk and off-topic lines -> their kind (`read_probes`)."""


def read_probes() -> None:
    """Fill `ANSWERS` and `NOISE` from the paraphrase set under `DATA`."""
    folder = DATA / "paraphrase-dev"
    for row in map(json.loads, (folder / "paraphrase_dev.jsonl").open()):
        ANSWERS[f"{row['id']}:u"] = [t.lower() for t in row["answer_terms"]]
    for name, kind in (("smalltalk_dev.jsonl", "small talk"), ("offtopic_dev.jsonl", "off-topic")):
        NOISE.update((json.loads(line)["text"], kind) for line in (folder / name).open())


@dataclass
class Case:
    """One question asked of one resource, with the candidates the engine fetched."""

    kind: str  # own, foreign, small talk, off-topic
    resource: str
    question: str
    evidence: frozenset[str]
    dense: list[tuple[str, float]]
    keyword: list[tuple[str, float]]
    vector: np.ndarray
    size: int
    query: Query | None = None
    origin: str = ""


@dataclass
class Corpus:
    """One set's cases and every stored message, by thread."""

    name: str
    cases: list[Case]
    threads: dict[str, list[StoredMessage]]
    by_id: dict[str, StoredMessage] = field(init=False)
    at: dict[tuple[str, int], StoredMessage] = field(init=False)

    def __post_init__(self) -> None:
        self.by_id = {m.id: m for ms in self.threads.values() for m in ms}
        self.at = {(m.thread_id, m.seq): m for m in self.by_id.values()}

    def window(self, message_id: str, before: int, after: int) -> list[StoredMessage]:
        hit = self.by_id[message_id]
        near = (self.at.get((hit.thread_id, hit.seq + d)) for d in range(-before, after + 1))
        return [m for m in near if m is not None]


def collect(name: str, dataset: Dataset, embeddings: CachedEmbeddings) -> Corpus:
    """Load `dataset` through the engine and fetch every case's candidates."""
    storage = SQLiteStorage(":memory:")
    memory = SemanticRecall(
        storage=storage,
        vector_store=InMemoryVectorIndex(),
        embeddings=embeddings,
        cache_size=100_000,
    )
    load_dataset(memory, dataset, progress=False)
    embeddings.save()
    info = memory.ensure_index()
    prefixes = dataset.id_prefixes
    resources = list(dict.fromkeys(q.sample_id for q in dataset.questions))
    pairs = foreign_pairs(resources)
    texts = [q.question for q in dataset.questions]
    vectors = embeddings.embed_documents([*texts, *NOISE])
    embeddings.save()
    sizes = {r: storage.count(ScopeFilter(resource_id=r)) for r in resources}

    def case(kind: str, resource: str, text: str, vector: Any, evidence: frozenset[str]) -> Case:
        scope = ScopeFilter(resource_id=resource)
        dense = best_per_message(memory.vector_store.query(info.name, vector, k=POOL, scope=scope))
        keyword = storage.keyword_search(text, scope=scope, limit=POOL)
        return Case(
            kind, resource, text, evidence, dense, keyword, np.asarray(vector), sizes[resource]
        )

    cases = []
    for question, vector in zip(dataset.questions, vectors, strict=False):
        prefix = prefixes.get(question.sample_id, "")
        evidence = frozenset(prefix + e for e in question.evidence)
        cases.append(case("own", question.sample_id, question.question, vector, evidence))
        cases[-1].origin = question.sample_id
        if question.sample_id in pairs and not name.startswith("para"):
            other = pairs[question.sample_id]
            cases.append(case("foreign", other, question.question, vector, frozenset()))
            cases[-1].origin = question.sample_id
    for resource in resources:
        for (text, kind), vector in zip(NOISE.items(), vectors[len(texts) :], strict=True):
            cases.append(case(kind, resource, text, vector, frozenset()))
            cases[-1].origin = resource
    threads: dict[str, list[StoredMessage]] = {}
    for message in storage.list_messages(limit=10_000_000):
        threads.setdefault(message.thread_id, []).append(message)
    return Corpus(name, cases, threads)


class _CasesUnpickler(pickle.Unpickler):
    """Reads our own cache file, written whether this module ran as a script or was
    imported (`quality_alternatives.py`): either way its classes are this module's."""

    def find_class(self, module: str, name: str) -> Any:
        if module in {"__main__", "quality_relevance"}:
            return getattr(sys.modules[__name__], name)
        return super().find_class(module, name)


def load_all(cache: Path | None, embedder: str) -> dict[str, Corpus]:
    """Every set's corpus (from `cache` when it holds them), its queries built afresh."""
    tag = "" if embedder == "local" else f"-{embedder}"
    if embedder == "local":
        from langchain_semantic_recall.local_embeddings import LocalEmbeddings

        inner: Embeddings = LocalEmbeddings()
        model = "all-MiniLM-L6-v2"
    else:
        inner, model = HashingEmbeddings(), HashingEmbeddings.model_name
    vectors = None if cache is None else cache / f"embeddings{tag}.pkl"
    embeddings = CachedEmbeddings(inner, vectors, model)
    # The cases pickle the package's records: a change of their fields makes a new file.
    layout = ",".join(f.name for f in dataclasses.fields(StoredMessage))
    version = hashlib.sha256(layout.encode()).hexdigest()[:8]
    stored = None if cache is None else cache / f"relevance-cases{tag}-{version}.pkl"
    if stored is not None and stored.is_file():
        corpora: dict[str, Corpus] = _CasesUnpickler(stored.open("rb")).load()
    else:
        loaders: dict[str, Callable[[], Dataset]] = {
            "locomo": lambda: read_locomo(DATA / "locomo-dev/locomo_dev.json"),
            "lme": lambda: read_eval_jsonl(DATA / "longmemeval-dev/longmemeval_dev.jsonl"),
            "para-small": lambda: paraphrase_dataset(busy=False),
            "para-busy": lambda: paraphrase_dataset(busy=True),
        }
        corpora = {}
        for name, load in loaders.items():
            print(f"loading {name} ...", file=sys.stderr, flush=True)
            corpora[name] = collect(name, load(), embeddings)
        if stored is not None:
            stored.write_bytes(pickle.dumps(corpora))
    reference = Reference.from_vectors(embeddings.embed_documents([*UNRELATED, *SMALL_TALK]))
    embeddings.save()
    for corpus in corpora.values():
        attach_queries(corpus, reference)
    return corpora


def attach_queries(corpus: Corpus, reference: Reference, rescale: float = 1.0) -> None:
    """Each case's `Query` (what search knows before scoring), as the engine builds it."""
    texts = TermCache()  # one cache for the corpus, as an engine has one for its searches
    for case in corpus.cases:
        dense = [(k, rescale * v + (1 - rescale) * 0.5) for k, v in case.dense]
        keyword = case.keyword
        if named_period(case.question) is None:  # as the engine does (`fusion.one_per_text`)
            dense, keyword = one_per_text(dense, keyword, corpus.by_id)
        baseline = reference.baseline(case.vector)
        if rescale != 1.0:  # an embedder whose scores are `rescale * cosine + ...`
            baseline = replace(
                baseline,
                mean=rescale * baseline.mean + (1 - rescale) * 0.5,
                spread=rescale * baseline.spread,
                small_talk_top=rescale * baseline.small_talk_top + (1 - rescale) * 0.5,
            )
        found = {k: corpus.by_id[k] for k, _ in (*dense, *keyword) if k in corpus.by_id}
        case.query = Query.build(
            case.question,
            dense,
            keyword,
            found,
            baseline,
            named_period(case.question),
            texts,
        )


# --- fitting -------------------------------------------------------------------------------


def damped_newton(
    loss: Callable[[np.ndarray], float],
    derivatives: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    size: int,
) -> np.ndarray:
    """The minimum of a convex `loss` from zero: Newton steps halved until the loss falls.

    `derivatives(b)` gives the gradient and the Hessian at `b`.
    """
    beta = np.zeros(size)
    current = loss(beta)
    for _ in range(60):
        gradient, hessian = derivatives(beta)
        step, t = np.linalg.solve(hessian + 1e-9 * np.eye(size), gradient), 1.0
        while t > 1e-4 and loss(beta - t * step) > current:
            t /= 2
        beta = beta - t * step
        new = loss(beta)
        if abs(current - new) < 1e-7 * max(1.0, abs(current)):
            break
        current = new
    return beta


def logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Weighted logistic regression (damped Newton, L2 1.0 on the weights): intercept first."""
    xb = np.hstack([np.ones((len(x), 1)), x])
    ridge = np.diag([0.0] + [1.0] * x.shape[1])

    def loss(b: np.ndarray) -> float:
        z = xb @ b + offset
        return float(np.sum(w * (np.logaddexp(0, z) - y * z)) + 0.5 * b @ ridge @ b)

    def derivatives(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = 1 / (1 + np.exp(-np.clip(xb @ b + offset, -50, 50)))
        return xb.T @ (w * (p - y)) + ridge @ b, (xb.T * (w * p * (1 - p))) @ xb + ridge

    return damped_newton(loss, derivatives, xb.shape[1])


def weight_of(corpus: Corpus) -> float:
    """Each question weighs 1; the paraphrase set's two stores share its questions."""
    return 0.5 if corpus.name.startswith("para") else 1.0


def training(corpora: Sequence[Corpus], held: str | None = None) -> list[tuple[Corpus, Case]]:
    return [
        (c, case)
        for c in corpora
        for case in c.cases
        if case.kind in {"own", "foreign"} and case.query and case.query.terms
        if held is None or held not in {case.resource, case.origin}
    ]


def fit(
    corpora: Sequence[Corpus], held: str | None = None, base: RelevanceModel | None = None
) -> RelevanceModel:
    """The candidate and message models fit on `corpora` (less resource `held`)."""
    base = base or default_model()
    cases = training(corpora, held)
    xs, ys, ws, os_ = [], [], [], []
    for corpus, case in cases:
        ids = case.query.candidates  # type: ignore[union-attr]
        if not ids:
            continue
        xs.append(direct_rows(case.query, [corpus.by_id[k] for k in ids]))  # type: ignore[arg-type]
        ys.append([float(k in case.evidence) for k in ids])
        ws.append(np.full(len(ids), weight_of(corpus) / len(ids)))
        os_.append(np.full(len(ids), -math.log(max(1, min(case.size, base.size_cap)))))
    x = np.vstack(xs)
    x[:, DIRECT.index("user")] = 0.0  # a match's role says nothing on its own (see docs)
    w = np.concatenate(ws)
    direct = logistic(x, np.concatenate(ys), w * len(w) / w.sum(), np.concatenate(os_))
    model = replace(base, direct=tuple(float(v) for v in direct))
    xs, ys, ws, os_ = [], [], [], []
    for corpus, case in cases:
        ids, x2 = message_rows(model, corpus, case)
        if not ids:
            continue
        xs.append(x2)
        ys.append([float(k in case.evidence) for k in ids])
        ws.append(np.full(len(ids), weight_of(corpus) / len(ids)))
        os_.append(np.full(len(ids), -math.log(max(1, min(case.size, base.size_cap)))))
    w = np.concatenate(ws)
    context = logistic(np.vstack(xs), np.concatenate(ys), w * len(w) / w.sum(), np.concatenate(os_))
    return replace(model, context=tuple(float(v) for v in context))


def message_rows(model: RelevanceModel, corpus: Corpus, case: Case) -> tuple[list[str], np.ndarray]:
    """The context rows the engine would score for `case` under `model`."""
    query = case.query
    assert query is not None
    kept = model.best_candidates(query, corpus.by_id)
    windows = {k: corpus.window(k, model.reads_before, model.reads_after) for k in kept}
    targets: dict[str, StoredMessage] = {}
    threads: dict[str, list[StoredMessage]] = {}
    for k in kept:
        hit = corpus.by_id[k]
        for m in windows[k]:
            threads.setdefault(m.thread_id, []).append(m)
            if -model.before <= m.seq - hit.seq <= model.after:
                targets.setdefault(m.id, m)
    if not targets:
        return [], np.empty((0, len(CONTEXT)))
    weights = np.asarray(model.direct[1:])[list(MATCH)]
    order = list(targets.values())
    return [m.id for m in order], context_rows(query, order, threads, weights)


# --- measuring -----------------------------------------------------------------------------


Selector = Callable[[Corpus, Case], list[str]]


def engine(model: RelevanceModel) -> Selector:
    """What `search` returns for a case under `model` (`RelevanceModel.select`)."""

    def select(corpus: Corpus, case: Case) -> list[str]:
        query = case.query
        if query is None or model.share(query, None, case.size) <= 0:
            return []
        kept = model.best_candidates(query, corpus.by_id)
        windows = {k: corpus.window(k, model.reads_before, model.reads_after) for k in kept}
        hits = model.select(query, kept, windows, case.size, budget=BUDGET, threshold=None)
        return [m.id for hit in hits for m in hit.window]

    return select


def by_probability(model: RelevanceModel, corpus: Corpus, case: Case) -> list[str]:
    """The `BUDGET` likeliest messages of `case` under `model`, best first (what `select`
    keeps at full evidence, before grouping them into hits)."""
    if case.query is None or not case.query.terms:
        return []
    kept = model.best_candidates(case.query, corpus.by_id)
    windows = {k: corpus.window(k, model.reads_before, model.reads_after) for k in kept}
    p = model.probabilities(case.query, kept, windows, case.size)
    ranked = sorted(p.items(), key=lambda item: (-item[1], item[0]))
    return [k for k, chance in ranked if chance > 0.0][:BUDGET]  # as `select`


def old_defaults(corpus: Corpus, case: Case) -> list[str]:
    messages = {k: corpus.by_id[k] for k, _ in (*case.dense, *case.keyword) if k in corpus.by_id}
    return select_020(
        case.question, case.dense, case.keyword, messages, named_period(case.question),
        case.size, corpus.window,
    )  # fmt: skip


def plain_bm25(corpora: dict[str, Corpus]) -> Selector:
    """Okapi BM25 (k1 1.2, b 0.75, lower-cased words, no stemming) top 15 in the resource."""
    index: dict[tuple[str, str], Any] = {}

    def build(corpus: Corpus, resource: str) -> Any:
        docs = [m for ms in corpus.threads.values() for m in ms if m.resource_id == resource]
        tokens = [re.findall(r"\w+", m.text.lower()) for m in docs]
        lengths = np.array([len(t) for t in tokens], dtype=float)
        df: dict[str, int] = {}
        for t in tokens:
            for word in set(t):
                df[word] = df.get(word, 0) + 1
        return docs, tokens, lengths, df

    def select(corpus: Corpus, case: Case) -> list[str]:
        key = (corpus.name, case.resource)
        if key not in index:
            index[key] = build(corpus, case.resource)
        docs, tokens, lengths, df = index[key]
        n, mean = len(docs), float(lengths.mean()) if len(docs) else 1.0
        query = set(re.findall(r"\w+", case.question.lower()))
        scores = np.zeros(n)
        for i, t in enumerate(tokens):
            counts: dict[str, int] = {}
            for word in t:
                if word in query:
                    counts[word] = counts.get(word, 0) + 1
            for word, tf in counts.items():
                idf = math.log((n - df[word] + 0.5) / (df[word] + 0.5) + 1)
                scores[i] += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths[i] / mean))
        order = [i for i in np.argsort(-scores, kind="stable")[:BUDGET] if scores[i] > 0]
        return [docs[i].id for i in order]

    return select


def top(name: str) -> Selector:
    def select(corpus: Corpus, case: Case) -> list[str]:
        return [k for k, _ in (case.keyword if name == "keyword" else case.dense)[:BUDGET]]

    return select


def measure(
    corpus: Corpus, select: Selector, resources: set[str] | None = None
) -> dict[str, float]:
    """Recall (paraphrases: an answer word returned) and messages per case of each kind."""
    recall: list[float] = []
    sizes: dict[str, list[int]] = {}
    users: list[float] = []
    for case in corpus.cases:
        if resources is not None and case.resource not in resources:
            continue
        got = list(dict.fromkeys(select(corpus, case)))[:BUDGET]
        sizes.setdefault(case.kind, []).append(len(got))
        if case.kind != "own":
            continue
        users.extend(float(corpus.by_id[k].role == "user") for k in got)
        if corpus.name.startswith("para"):
            (fact,) = case.evidence
            text = " ".join(corpus.by_id[k].text.lower() for k in got)
            recall.append(
                float(any(re.search(rf"\b{re.escape(t)}\b", text) for t in ANSWERS[fact]))
            )
        else:
            recall.append(len(set(got) & case.evidence) / len(case.evidence))
    out = {"recall": statistics.fmean(recall) if recall else 0.0}
    out["user share"] = statistics.fmean(users) if users else float("nan")
    out.update({kind: statistics.fmean(v) for kind, v in sizes.items()})
    return out


def acceptable(results: dict[str, dict[str, float]]) -> bool:
    """Within the issue's targets: <= 2 messages (LongMemEval: 3), small talk <= 0.5."""
    return all(
        r.get(kind, 0.0) <= (3.0 if name == "lme" and kind != "small talk" else limit)
        for name, r in results.items()
        for kind, limit in LIMITS.items()
        if not (kind == "foreign" and name != "locomo")
    )


def choose_evidence(model: RelevanceModel, corpora: Sequence[Corpus]) -> RelevanceModel:
    """The grid point with the best mean recall (per set) that keeps to `LIMITS`.

    A case's ranking does not depend on the budget rule, so each case is ranked once (the
    engine's own `select` at full budget) and each grid point only cuts the rankings.
    """
    ranked = {id(case): by_probability(model, c, case) for c in corpora for case in c.cases}
    best: tuple[float, RelevanceModel] | None = None
    for low, high, penalty in itertools.product(*GRID.values()):
        if high <= low:
            continue
        evidence = replace(
            model.evidence,
            silent_below=low,
            full_from=high,
            name_penalty=penalty,
            size_weight=SIZE_WEIGHT,
        )
        candidate = replace(model, evidence=evidence)

        def cut(corpus: Corpus, case: Case, candidate: RelevanceModel = candidate) -> list[str]:
            share = candidate.share(case.query, None, case.size) if case.query else 0.0
            return ranked[id(case)][: round(BUDGET * share)]

        results = {c.name: measure(c, cut) for c in corpora}
        if not acceptable(results):
            continue
        by_set: dict[str, list[float]] = {}
        for c in corpora:
            by_set.setdefault(c.name.split("-")[0], []).append(results[c.name]["recall"])
        score = statistics.fmean(statistics.fmean(v) for v in by_set.values())
        if best is None or score > best[0] + 1e-9:
            best = (score, candidate)
    if best is None:
        raise SystemExit("no point of the grid keeps to the limits")
    return best[1]


# --- the report ----------------------------------------------------------------------------


KINDS = ("recall", "own", "foreign", "small talk", "off-topic", "user share")
"""Columns: recall, messages per case of each kind, and the share of the messages returned
for own questions that are user turns (windows by evidence: LongMemEval's evidence is 94 %
user turns)."""


def row(label: str, result: dict[str, float]) -> str:
    cells = " ".join(f"{result.get(k, float('nan')):>10.3f}" for k in KINDS)
    return f"| {label:44} | {cells} |"


def report(corpora: dict[str, Corpus], shipped: RelevanceModel, *, folds: bool = True) -> None:
    print(f"| {'setting (budget 15)':44} | " + " ".join(f"{k:>10}" for k in KINDS) + " |")
    bm25 = plain_bm25(corpora)
    for name, corpus in corpora.items():
        print(f"\n### {name}")
        print(row("0.2.0 defaults", measure(corpus, old_defaults)))
        print(row("plain BM25 top 15 (Okapi, b 0.75)", measure(corpus, bm25)))
        print(row("keyword mode's BM25 top 15", measure(corpus, top("keyword"))))
        print(row("dense top 15", measure(corpus, top("dense"))))
        print(row("**the defaults (shipped, in-sample)**", measure(corpus, engine(shipped))))
    if not folds:
        return
    print("\n## leave one dataset out: fit and budget rule chosen on the other two sets")
    for held, names in SETS.items():
        train = [c for n, c in corpora.items() if n not in names]
        model = choose_evidence(fit(train), train)
        e = model.evidence
        print(
            f"held out {held}: budget rule {e.silent_below} -> {e.full_from}, name {e.name_penalty}"
        )
        for name in names:
            print(row(f"LODO {name}", measure(corpora[name], engine(model))))
    print("\n## leave one conversation out: fit on everything but one resource (shipped rule)")
    for name in [n for n in ("locomo", "lme", "para-busy") if n in corpora]:
        corpus = corpora[name]
        folds = []
        for resource in sorted({c.resource for c in corpus.cases if c.kind == "own"}):
            model = replace(fit(list(corpora.values()), held=resource), evidence=shipped.evidence)
            result = measure(corpus, engine(model), {resource})
            folds.append(result)
            print(row(f"LOCO {name} {resource}", result))
        mean = {k: statistics.fmean(f.get(k, 0.0) for f in folds) for k in KINDS}
        print(row(f"LOCO {name} mean of folds", mean))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cache", type=Path, default=None, help="folder for cached vectors")
    parser.add_argument("--write", action="store_true", help="write the shipped data file")
    parser.add_argument("--embedder", choices=("local", "hashing"), default="local")
    parser.add_argument("--sets", default="locomo,lme,para-small,para-busy")
    parser.add_argument("--data", type=Path, default=None, help="the shared/data folder")
    parser.add_argument("--quick", action="store_true", help="no leave-one-out folds (smoke)")
    args = parser.parse_args(argv)
    global DATA  # noqa: PLW0603 - the sets' folder, read by the loaders
    DATA = args.data or DATA
    read_probes()
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
    wanted = args.sets.split(",")
    corpora = {n: c for n, c in load_all(args.cache, args.embedder).items() if n in wanted}
    if args.embedder != "local":  # nothing is fitted for it: measure the shipped model
        print(f"## {args.embedder}: the shipped model, not fitted for this embedder")
        for name, corpus in corpora.items():
            print(row(f"{name}: the defaults", measure(corpus, engine(default_model()))))
            print(row(f"{name}: dense top 15", measure(corpus, top("dense"))))
        return 0
    shipped = fit(list(corpora.values()))
    if not args.quick:  # the budget rule's grid needs every set's questions
        shipped = choose_evidence(shipped, list(corpora.values()))
    shipped = replace(
        shipped,
        fitted_for=FittedFor("all-MiniLM-L6-v2", 384, default_model().fitted_for.keywords),
    )
    report(corpora, shipped, folds=not args.quick)
    print("\n## dense scores rescaled (0.5 * cosine + 0.25): the shipped model, same cases")
    reference = None
    for name, corpus in corpora.items():
        before = measure(corpus, engine(shipped))
        saved = [c.query for c in corpus.cases]
        for case in corpus.cases:  # z-scores are unchanged by any affine rescaling
            assert case.query is not None
            scaled = {k: 0.5 * v + 0.25 for k, v in case.query.cosines.items()}
            base = case.query.baseline
            assert base is not None
            case.query = replace(
                case.query,
                cosines=scaled,
                baseline=replace(base, mean=0.5 * base.mean + 0.25, spread=0.5 * base.spread),
            )
        print(
            row(f"{name}: rescaled", measure(corpus, engine(shipped))),
            "same" if measure(corpus, engine(shipped)) == before else "DIFFERENT",
        )
        for case, query in zip(corpus.cases, saved, strict=True):
            case.query = query
    del reference
    if args.write:
        path = (
            Path(__file__).resolve().parents[1]
            / "langchain_semantic_recall/data/relevance/all-MiniLM-L6-v2.json"
        )
        data = shipped.to_json()
        for part in ("direct", "context"):
            data[part] = {k: round(v, 4) for k, v in data[part].items()}
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
