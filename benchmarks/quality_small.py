"""Recall and false memories in *small* memories: each LoCoMo session alone as the scope.

Not a test: a script that prints the table ``docs/quality.md`` quotes for the choice of
``calibration.prior_shift``. The calibrated models were fit on whole conversations
(369-680 messages); a new user's memory holds a few dozen. Here locomo-dev is loaded
through the engine (SQLite storage with keyword search, exact in-memory vectors, the local
MiniLM model), each session being a thread of 16-47 messages, and search runs in thread
scope, so the scope is one session:

- own: every question whose evidence lies in one session, asked of that session;
- foreign: the same question asked of a session of another conversation (nothing there is
  evidence);
- small talk: every ``false_memory.SMALL_TALK`` turn asked of every 4th session.

For each strength ``beta`` of the prior correction (the log-odds a keyword match gains in
a scope of N messages: ``beta * log(REFERENCE_SIZE / N)``) it prints recall and messages
per question. Usage::

    .venv/bin/python benchmarks/quality_small.py [PATH_TO_locomo_dev.json] [--betas 0,0.5,1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from quality_common import DEFAULT_DATA, locomo_engine

from langchain_semantic_recall import calibration
from langchain_semantic_recall.false_memory import SMALL_TALK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    parser.add_argument("--betas", default="0,0.25,0.5,0.75,1")  # shipped: SMALL_SCOPE_STRENGTH
    args = parser.parse_args(argv)
    memory, _, dataset = locomo_engine(Path(args.data))
    sessions = {c.thread_id: c.resource_id for c in dataset.conversations}
    by_resource: dict[str, list[str]] = {}
    for thread_id, resource in sessions.items():
        by_resource.setdefault(resource, []).append(thread_id)
    resources = sorted(by_resource)
    sizes = [len(c.messages) for c in dataset.conversations]
    print(
        f"{len(sessions)} sessions of {min(sizes)}-{max(sizes)} messages (median "
        f"{statistics.median(sizes):.0f})"
    )

    own: list[tuple[str, str, str, frozenset[str]]] = []  # question, resource, thread, evidence
    for q in dataset.questions:
        threads = {f"{q.sample_id}/session_{e.split(':')[0][1:]}" for e in q.evidence}
        if len(threads) == 1 and next(iter(threads)) in sessions:
            own.append((q.question, q.sample_id, next(iter(threads)), frozenset(q.evidence)))
    foreign = []
    for n, (question, resource, _, _) in enumerate(own):
        other = resources[(resources.index(resource) + 1) % len(resources)]
        threads = by_resource[other]
        foreign.append((question, other, threads[n % len(threads)]))
    talk = [(t, sessions[s], s) for s in list(sessions)[::4] for t in SMALL_TALK]

    def ask(question: str, resource: str, thread: str) -> list[str]:
        hits = memory.search(question, thread_id=thread, resource_id=resource, scope="thread")
        prefix = dataset.id_prefixes.get(resource, "")
        return list(dict.fromkeys(m.id.removeprefix(prefix) for h in hits for m in h.window))

    shipped = calibration.prior_shift
    print(f"{len(own)} own questions, {len(foreign)} foreign, {len(talk)} small-talk turns")
    if not own:
        print("no question has its evidence in one session: nothing to measure")
        return 0
    print("beta   own recall  own msgs/q  foreign msgs/q  foreign any  small talk msgs/q")
    folds: dict[float, dict[str, tuple[float, float]]] = {}
    for beta in (float(b) for b in args.betas.split(",")):

        def shift(size: int, beta: float = beta) -> float:
            reference = calibration.REFERENCE_SIZE
            return beta * math.log(reference / max(size, 1)) if size < reference else 0.0

        calibration.prior_shift = shift  # type: ignore[assignment]
        try:
            recall, own_n = [], []
            for question, resource, thread, evidence in own:
                got = ask(question, resource, thread)
                recall.append(len(evidence & set(got)) / len(evidence))
                own_n.append(len(got))
            far = [len(ask(q, r, t)) for q, r, t in foreign]
            chat = [len(ask(q, r, t)) for q, r, t in talk]
        finally:
            calibration.prior_shift = shipped
        print(
            f"{beta:<6} {statistics.fmean(recall):<11.3f} {statistics.fmean(own_n):<11.1f} "
            f"{statistics.fmean(far):<15.2f} {sum(n > 0 for n in far) / len(far):<12.3f} "
            f"{statistics.fmean(chat):.2f}",
            flush=True,
        )
        folds[beta] = {
            origin: (
                statistics.fmean(
                    r for r, (_, o, _, _) in zip(recall, own, strict=True) if o == origin
                ),
                statistics.fmean(
                    n for n, (_, o, _, _) in zip(far, own, strict=True) if o == origin
                ),
            )
            for origin in resources
            if any(o == origin for _, o, _, _ in own)
        }
    print("per conversation (recall of its questions / messages when they are asked elsewhere):")
    for beta, rows in folds.items():
        cells = "  ".join(f"{o} {r:.3f}/{n:.2f}" for o, (r, n) in rows.items())
        print(f"{beta:<6} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
