"""One long message of one fragment repeated: index, search, recall and the block's check.

Not a test: a scan that backtracks shows on text like this. 0.3.0's relevance features
took 6.9 s on the first search that read a message of 60,000 spaces, and the block
checker 87 s on 60,000 `<` (both linear since). For each fragment (runs of the characters
that regular expressions and the quoting treat specially, then the hostile-text test's
fragments), a fresh engine at the package defaults (hybrid search; SQLite storage in a
temporary folder, in-memory vectors, a hashing embedder: the text's scans are what is
measured, not a model) stores a turn (the text, and a reply quoting its first half),
searches twice (a short question; the text's first 2,000 characters), recalls, and checks
the injected block (`formatting.check_cross_thread_block`). Printed: the slowest inputs,
beside the same steps on ordinary prose of the same length (the baseline) in the same run.

    python benchmarks/perf_long_text.py                      # 60,000 characters
    python benchmarks/perf_long_text.py --length 2000 --fragments '<' ' '   # smoke
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import perf_common as pc
from langchain_core.messages import AIMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.formatting import check_cross_thread_block
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

ROOT = Path(__file__).resolve().parents[1]
RUNS = [" ", "\t", "\n", "\r\n", "[", "]", "<", ">", "|", ".", ")", "(", "-", "_", "'", '"']
RUNS += ["\\", "?", "*", "`", "@", "#", "1", "a", "é", "中", "\u200b", "\u2028", "a b", "x]"]
RUNS += [" [", "Jan ", "of ", "2024 ", "last week ", "&lt;", "A. ", "Alice ", "www.a.b/?q=1&"]
PROSE = "We walked to the harbour after lunch and talked about the trip. "
STEPS = ("index", "search", "long query", "recall", "check")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=60_000, help="characters of each text")
    parser.add_argument("--fragments", nargs="*", default=None, help="fragments to repeat")
    parser.add_argument("--top", type=int, default=10, help="slowest inputs printed")
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    args = parser.parse_args()
    fragments = args.fragments if args.fragments is not None else [*RUNS, *_hostile()]
    baseline = measure(PROSE, args.length)
    rows = [(repr(fragment)[:40], measure(fragment, args.length)) for fragment in fragments]
    rows.sort(key=lambda row: -sum(row[1].values()))
    print_table(baseline, rows[: args.top], args.length, len(rows))
    pc.write_json(
        args.out / "perf_long_text.json",
        {"length": args.length, "baseline": baseline, "fragments": dict(rows)},
    )


def _hostile() -> list[str]:
    """The hostile-text test's fragments (the empty one left out)."""
    sys.path.insert(0, str(ROOT))
    from tests.unit.test_hostile_text import FRAGMENTS

    return [fragment for fragment in FRAGMENTS if fragment]


def measure(fragment: str, length: int) -> dict[str, float]:
    """Seconds of each step for one message of `fragment` repeated to `length` characters."""
    text = (fragment * (length // len(fragment) + 1))[:length] + " the end]"
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        storage = SQLiteStorage(Path(folder) / "messages.sqlite3")
        memory = SemanticRecall(
            storage=storage, vector_store=InMemoryVectorIndex(), embeddings=pc.HashEmbeddings()
        )
        turn = [HumanMessage(text), AIMessage("you said: " + text[: length // 2])]
        question = [HumanMessage("the end?")]
        steps: list[tuple[str, Any]] = [
            ("index", lambda: memory.index(turn, thread_id="t", resource_id="r")),
            ("search", lambda: memory.search("what did I paste?", resource_id="r")),
            ("long query", lambda: memory.search(text[:2000] + "?", resource_id="r")),
            ("recall", lambda: memory.recall(question, thread_id="u", resource_id="r")),
        ]
        recalled: Any = None
        for name, step in steps:
            start = time.perf_counter()
            recalled = step()
            seconds[name] = time.perf_counter() - start
        blocks = [str(m.content) for m in recalled if m.additional_kwargs.get("source") == "memory"]
        start = time.perf_counter()
        problems = [check_cross_thread_block(block) for block in blocks]
        seconds["check"] = time.perf_counter() - start
        if any(problems):
            raise SystemExit(f"a block of {fragment!r} is malformed: {problems}")
        storage.close()
    return seconds


def print_table(
    baseline: dict[str, float], rows: list[tuple[str, dict[str, float]]], length: int, of: int
) -> None:
    print(
        f"\nOne message of {length:,} characters, seconds per step (slowest {len(rows)} of {of}):\n"
    )
    print("| text | " + " | ".join(STEPS) + " | total | / prose |")
    print("|---" * (len(STEPS) + 3) + "|")
    prose = sum(baseline.values())
    for label, seconds in [("prose (the baseline)", baseline), *rows]:
        total = sum(seconds.values())
        cells = " | ".join(f"{seconds[step]:.3f}" for step in STEPS)
        print(f"| {label} | {cells} | {total:.3f} | {total / prose:.1f}x |")


if __name__ == "__main__":
    main()
