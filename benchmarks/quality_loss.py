"""The relevance models fitted with another loss or weighting, measured as the shipped one is.

The shipped models are fitted by a pointwise logistic loss (`quality_relevance.fit`), each
question weighing the same: LoCoMo's 760 questions then outweigh LongMemEval's 168 and the
paraphrase set's 80. Recall only asks how a question's messages rank among themselves,
so two variations are measured here, with everything else `quality_relevance.py`'s (the
features, the budget rule's grid, leave one dataset out, leave one conversation out):

- `--loss pairwise`: a pairwise logistic loss within each question (every evidence
  message against every other message of the same question, as a ranking is judged),
  then a two-number logistic calibration of its score, so the probabilities (what a hit
  shows, and what `threshold` cuts) keep their meaning; `--models messages` (the message
  model only) or `both` (the candidate model too);
- `--balance ALPHA`: each question weighs `n ** -ALPHA`, n the questions of its set (0:
  the shipped weighting; 1: every set weighs the same);
- `--alternative NAME`: a column rewrite of `quality_alternatives.py` as well.

`docs/quality.md` (*Where LoCoMo's recall goes*) quotes the runs.

    python benchmarks/quality_loss.py --cache DIR --loss pairwise --models both --balance 0.5
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import quality_relevance as qr  # the benchmark this one varies

from langchain_semantic_recall.relevance import RelevanceModel
from langchain_semantic_recall.relevance.features import DIRECT

Rows = Callable[["qr.Corpus", "qr.Case"], "tuple[list[str], np.ndarray] | None"]
Group = tuple[np.ndarray, np.ndarray, float]
"""One question's rows, whether each is evidence, and the question's weight."""


def pairwise(groups: Sequence[Group], ridge: float = 1.0) -> np.ndarray:
    """Weights (no intercept) of a pairwise logistic loss, evidence above the rest.

    Each question's pairs share its weight; damped Newton, L2 `ridge`, as `qr.logistic`.
    """
    diffs, weights = [], []
    for x, y, weight in groups:
        good, rest = x[y > 0.5], x[y <= 0.5]
        if len(good) and len(rest):
            pairs = (good[:, None, :] - rest[None, :, :]).reshape(-1, x.shape[1])
            diffs.append(pairs)
            weights.append(np.full(len(pairs), weight / len(pairs)))
    d, w = np.vstack(diffs), np.concatenate(weights)
    w = w * len(w) / w.sum()
    penalty = ridge * np.eye(d.shape[1])

    def loss(b: np.ndarray) -> float:
        return float(np.sum(w * np.logaddexp(0, -(d @ b))) + 0.5 * b @ penalty @ b)

    def derivatives(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wrong = 1 / (1 + np.exp(np.clip(d @ b, -50, 50)))  # P(the pair is misordered)
        gradient = -(d.T @ (w * wrong)) + penalty @ b
        return gradient, (d.T * (w * wrong * (1 - wrong))) @ d + penalty

    return qr.damped_newton(loss, derivatives, d.shape[1])


def _fitted(cases: list[tuple[qr.Corpus, qr.Case]], rows: Rows, size_cap: int, pairs: bool):
    """Intercept-first weights of one model, pointwise or pairwise then calibrated."""
    xs, ys, ws, offsets, groups = [], [], [], [], []
    for corpus, case in cases:
        got = rows(corpus, case)
        if got is None or not got[0]:
            continue
        ids, x = got
        y = np.array([float(k in case.evidence) for k in ids])
        weight = qr.weight_of(corpus)
        xs.append(x)
        ys.append(y)
        ws.append(np.full(len(ids), weight / len(ids)))
        offsets.append(np.full(len(ids), -math.log(max(1, min(case.size, size_cap)))))
        groups.append((x, y, weight))
    x, y, w, offset = np.vstack(xs), np.concatenate(ys), np.concatenate(ws), np.concatenate(offsets)
    w = w * len(w) / w.sum()
    if not pairs:
        return tuple(float(v) for v in qr.logistic(x, y, w, offset))
    beta = pairwise(groups)
    intercept, slope = qr.logistic((x @ beta)[:, None], y, w, offset)  # the calibration
    return (float(intercept), *(float(v) for v in slope * beta))


def fit_with(loss: str, models: str) -> Callable[..., RelevanceModel]:
    """A `qr.fit` with the given loss for the message model (and the candidate model)."""

    def fit(
        corpora: Sequence[qr.Corpus], held: str | None = None, base: RelevanceModel | None = None
    ) -> RelevanceModel:
        base = base or qr.default_model()
        cases = qr.training(corpora, held)

        def direct(corpus: qr.Corpus, case: qr.Case) -> tuple[list[str], np.ndarray] | None:
            assert case.query is not None
            ids = case.query.candidates
            if not ids:
                return None
            x = qr.direct_rows(case.query, [corpus.by_id[k] for k in ids])
            x[:, DIRECT.index("user")] = 0.0  # as `qr.fit`: a match's role says nothing
            return ids, x

        pairs = loss == "pairwise"
        weights = _fitted(cases, direct, base.size_cap, pairs and models == "both")
        model = replace(base, direct=weights)
        rows: Rows = lambda corpus, case: qr.message_rows(model, corpus, case)  # noqa: E731
        return replace(model, context=_fitted(cases, rows, base.size_cap, pairs))

    return fit


def balanced(alpha: float) -> Callable[[qr.Corpus], float]:
    """`qr.weight_of` times `n ** -alpha`, n the own questions of the corpus."""
    shipped = qr.weight_of
    counts: dict[str, int] = {}

    def weight_of(corpus: qr.Corpus) -> float:
        if corpus.name not in counts:
            counts[corpus.name] = sum(case.kind == "own" for case in corpus.cases)
        return shipped(corpus) * counts[corpus.name] ** -alpha

    return weight_of


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--loss", choices=("pointwise", "pairwise"), default="pairwise")
    parser.add_argument("--models", choices=("messages", "both"), default="messages")
    parser.add_argument("--balance", type=float, default=0.0, help="questions weigh n^-ALPHA")
    parser.add_argument("--cache", type=Path, default=None, help="folder for cached vectors")
    parser.add_argument("--data", type=Path, default=None, help="the shared/data folder")
    parser.add_argument("--quick", action="store_true", help="no leave-one-out folds (smoke)")
    parser.add_argument(
        "--alternative", default=None, help="a column rewrite of quality_alternatives.py too"
    )
    args = parser.parse_args(argv)
    print(f"## loss {args.loss} ({args.models}), balance {args.balance}")
    qr.fit = fit_with(args.loss, args.models)  # read by qr.main and qr.report
    qr.weight_of = balanced(args.balance)
    rest = ["--cache", str(args.cache)] if args.cache else []
    rest += ["--data", str(args.data)] if args.data else []
    if args.alternative is not None:  # its rewrite, under this fit
        import quality_alternatives

        return quality_alternatives.main([*rest, "--alternative", args.alternative])
    return qr.main([*rest, *(["--quick"] if args.quick else [])])


if __name__ == "__main__":
    sys.exit(main())
