"""Alternatives to the message model's length and role columns, measured as the shipped
model is.

The shipped message model (`relevance.features.CONTEXT`) learns one weight for a message's
length and one for its role, over all three development sets. They disagree: on LoCoMo
(two people) a longer message is more often evidence; on LongMemEval (a user and an
assistant) the long messages are the assistant's replies, which rarely are. Fitted on
LoCoMo alone, the same columns reach 0.806 there; fitted on all three, 0.750.

Each alternative below rewrites columns of the message rows before the models are fit
and replayed; everything else is `quality_relevance.py`'s (the candidate model, the
budget rule's grid, leave one dataset out, leave one conversation out), so the tables
compare with its own. `docs/quality.md` (*Where LoCoMo's recall goes*) quotes the runs.

    python benchmarks/quality_alternatives.py --cache DIR --alternative reply-length
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from unittest import mock

import numpy as np
import quality_relevance as qr  # the benchmark this one varies

from langchain_semantic_recall.records import StoredMessage
from langchain_semantic_recall.relevance import features
from langchain_semantic_recall.relevance import model as relevance_model
from langchain_semantic_recall.relevance.features import DIRECT, Query

USER, LENGTH = DIRECT.index("user"), DIRECT.index("log1p_length")
SPARE = DIRECT.index("log1p_terms")
"""The query's term count: the same for every message of a query, so in the message model
it moves no message past another. The alternatives that need a new column use its place."""

Threads = Mapping[str, Sequence[StoredMessage]]
Rewrite = Callable[[np.ndarray, Sequence[StoredMessage], Threads], None]


def _length(message: StoredMessage) -> float:
    return features.text_facts(message.text).log1p_length


def reply_asymmetry(threads: Threads) -> float:
    """How much longer the assistant writes than the user among the messages read (in
    `log1p` terms, at least 0): large for an assistant's replies, ~0 between two people."""
    known = [m for messages in threads.values() for m in messages]
    user = [_length(m) for m in known if m.role == "user"]
    other = [_length(m) for m in known if m.role != "user"]
    return max(0.0, float(np.mean(other) - np.mean(user))) if user and other else 0.0


def _no_length(rows: np.ndarray, targets: Sequence[StoredMessage], threads: Threads) -> None:
    rows[:, LENGTH] = 0.0


def _no_length_no_role(
    rows: np.ndarray, targets: Sequence[StoredMessage], threads: Threads
) -> None:
    rows[:, LENGTH] = 0.0
    rows[:, USER] = 0.0


def _role_by_reply_length(
    rows: np.ndarray, targets: Sequence[StoredMessage], threads: Threads
) -> None:
    asymmetry = reply_asymmetry(threads)
    rows[:, SPARE] = (1.0 - rows[:, USER]) * rows[:, LENGTH] * asymmetry
    rows[:, USER] *= asymmetry


def _reply_length(rows: np.ndarray, targets: Sequence[StoredMessage], threads: Threads) -> None:
    mean = {t: float(np.mean([_length(m) for m in ms])) for t, ms in threads.items()}
    absolute = rows[:, LENGTH].copy()
    rows[:, LENGTH] = absolute - np.array([mean[m.thread_id] for m in targets])
    rows[:, SPARE] = (1.0 - rows[:, USER]) * absolute * reply_asymmetry(threads)


def _length_within_role(
    rows: np.ndarray, targets: Sequence[StoredMessage], threads: Threads
) -> None:
    known = [m for messages in threads.values() for m in messages]
    mean = {
        role: float(np.mean([_length(m) for m in known if m.role == role]))
        for role in {m.role for m in known}
    }
    rows[:, LENGTH] -= np.array([mean[m.role] for m in targets])


def _role_by_gap_length_within_role(
    rows: np.ndarray, targets: Sequence[StoredMessage], threads: Threads
) -> None:
    _length_within_role(rows, targets, threads)
    rows[:, USER] *= reply_asymmetry(threads)


def _direct_length_within_role(rows: np.ndarray, messages: Sequence[StoredMessage]) -> None:
    """Length against the mean of its role's messages in the same call: the candidates for
    the candidate model, every message read for the message model."""
    if not len(messages):
        return
    roles = np.array([m.role == "user" for m in messages])
    for mask in (roles, ~roles):
        if mask.any():
            rows[mask, LENGTH] -= rows[mask, LENGTH].mean()


DIRECT_ALTERNATIVES: dict[str, Callable[[np.ndarray, Sequence[StoredMessage]], None]] = {
    "length-within-role-everywhere": _direct_length_within_role,
}
"""Rewrites of every `DIRECT` row, the candidate model's and (inside) the message model's."""

ALTERNATIVES: dict[str, Rewrite] = {
    "length-within-role": _length_within_role,
    "role-by-gap-length-within-role": _role_by_gap_length_within_role,
    "no-length": _no_length,
    "no-length-no-role": _no_length_no_role,
    "role-by-reply-length": _role_by_reply_length,
    "reply-length": _reply_length,
}
"""`role-by-reply-length`: the role counts in proportion to `reply_asymmetry`, and so does
an assistant message's length. `reply-length`: a message's length relative to its
thread's messages read, and an assistant message's length times `reply_asymmetry`."""


def rewritten(rewrite: Rewrite) -> Callable[..., np.ndarray]:
    """`features.context_rows`, then `rewrite` on its rows."""
    original = features.context_rows

    def context_rows(
        query: Query,
        targets: Sequence[StoredMessage],
        threads: Threads,
        match_weights: np.ndarray,
    ) -> np.ndarray:
        rows = original(query, targets, threads, match_weights)
        rewrite(rows, targets, threads)
        return rows

    return context_rows


def rewritten_direct(
    rewrite: Callable[[np.ndarray, Sequence[StoredMessage]], None],
) -> Callable[..., np.ndarray]:
    """`features.direct_rows`, then `rewrite` on its rows."""
    original = features.direct_rows

    def direct_rows(query: Query, messages: Sequence[StoredMessage]) -> np.ndarray:
        rows = original(query, messages)
        rewrite(rows, messages)
        return rows

    return direct_rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    names = sorted([*ALTERNATIVES, *DIRECT_ALTERNATIVES])
    parser.add_argument("--alternative", choices=names, required=True)
    parser.add_argument("--cache", type=Path, default=None, help="folder for cached vectors")
    parser.add_argument("--data", type=Path, default=None, help="the shared/data folder")
    args = parser.parse_args(argv)
    print(f"## alternative: {args.alternative}\n")
    passed = [*(["--cache", str(args.cache)] if args.cache else [])]
    passed += ["--data", str(args.data)] if args.data else []
    # The benchmark and the package's model call the rows' functions by name.
    if args.alternative in ALTERNATIVES:
        name, rows = "context_rows", rewritten(ALTERNATIVES[args.alternative])
        where = [qr, relevance_model]
    else:
        name, rows = "direct_rows", rewritten_direct(DIRECT_ALTERNATIVES[args.alternative])
        where = [qr, relevance_model, features]  # `context_rows` reads it from features
    with contextlib.ExitStack() as stack:
        for module in where:
            stack.enter_context(mock.patch.object(module, name, rows))
        return qr.main(passed)


if __name__ == "__main__":
    sys.exit(main())
