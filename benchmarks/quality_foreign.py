"""Another LongMemEval user's questions, split by how close the asked memory is to their topic.

Not a test: the figures behind *Questions of another LongMemEval user* in
`docs/quality.md`. `quality_relevance.py` asks each LongMemEval question of another pooled
memory and counts every message returned as a false memory (target: at most 3 per
question). But the pooled memories are real users' chats about everyday life, so the
memory asked often holds a conversation on the question's very topic ("How much time do
I dedicate to practicing guitar?" asked of a memory whose user says "I've also started
practicing guitar"), and showing it to the model is what recall is for.

This script measures how much of the figure is that. For each such question it takes its
own evidence turns (in its own memory; the user's turns when it has any) and finds the
closest user turn of the memory asked (cosine, the local model, the benchmark's cached
vectors). The questions are then grouped by that closeness and the package defaults'
messages per question printed for each group: if recall followed topic alone, the groups
far from the topic would get nothing.

    .venv/bin/python benchmarks/quality_foreign.py --cache DIR   # DIR: quality_relevance's cache

(With no cache yet, the first run loads the three sets as `quality_relevance.py` does.)
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import quality_relevance as q

from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.records import StoredMessage
from langchain_semantic_recall.relevance import default_model

BANDS = ((-1.0, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 1.01))
"""Closeness bands (cosine of the asked memory's nearest user turn to the own evidence)."""
EXCERPT = 2_000
"""Characters of a turn embedded for this comparison (user turns are rarely longer)."""


def unit_rows(embeddings: q.CachedEmbeddings, messages: Sequence[StoredMessage]) -> np.ndarray:
    """The messages' vectors (their first `EXCERPT` characters), one unit row each."""
    rows = np.asarray(embeddings.embed_documents([m.text[:EXCERPT] for m in messages]))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cache", type=Path, required=True, help="quality_relevance's cache")
    parser.add_argument("--data", type=Path, default=None, help="the shared/data folder")
    args = parser.parse_args()
    q.DATA = args.data or q.DATA
    q.read_probes()
    args.cache.mkdir(parents=True, exist_ok=True)
    corpus = q.load_all(args.cache, "local")["lme"]
    embeddings = q.CachedEmbeddings(
        LocalEmbeddings(), args.cache / "embeddings.pkl", "all-MiniLM-L6-v2"
    )
    select = q.engine(default_model())
    own = {c.question: c for c in corpus.cases if c.kind == "own"}
    owner = {  # a thread's memory: the memory whose questions' candidates come from it
        corpus.by_id[k].thread_id: case.resource
        for case in corpus.cases
        for k, _ in (*case.dense, *case.keyword)
    }
    users: dict[str, list[StoredMessage]] = {}
    for thread_id, messages in corpus.threads.items():
        if thread_id in owner:
            users.setdefault(owner[thread_id], []).extend(m for m in messages if m.role == "user")
    memory = {resource: unit_rows(embeddings, turns) for resource, turns in users.items()}
    closeness: list[tuple[float, int]] = []
    for case in corpus.cases:
        if case.kind != "foreign":
            continue
        evidence = [corpus.by_id[e] for e in sorted(own[case.question].evidence)]
        turns = [m for m in evidence if m.role == "user"] or evidence
        best = float((unit_rows(embeddings, turns) @ memory[case.resource].T).max())
        closeness.append((best, len(select(corpus, case))))
    embeddings.save()
    print(
        f"another user's questions: {len(closeness)}, "
        f"{statistics.fmean(n for _, n in closeness):.2f} messages each at the defaults"
    )
    print("| nearest user turn of the memory asked, cosine to the own evidence | questions "
          "| messages per question | silent |")  # fmt: skip
    print("|---|---|---|---|")
    for low, high in BANDS:
        counts = [n for c, n in closeness if low <= c < high]
        if not counts:
            continue
        label = f"< {high}" if low < 0 else (f">= {low}" if high > 1 else f"{low} to {high}")
        print(
            f"| {label} | {len(counts)} | {statistics.fmean(counts):.2f} "
            f"| {sum(n == 0 for n in counts) / len(counts):.0%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
