"""The first search of a process on the package default, the real local model included.

`SemanticRecall.local` on a small store (the demo's size: 40 messages of two users),
in fresh processes, alternating: the reference texts' vectors read from the package (the
default, `relevance.reference.shipped`) against embedded on the first search (as any
other embedder does, and as the package did before). Each process opens the engine,
then times its first search (the model's load and the query's embedding included: what
a user waits for after a restart) and its second.

    python benchmarks/perf_first_search.py               # 5 rounds (~30 s)
    python benchmarks/perf_first_search.py --rounds 1 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import perf_common as pc

from langchain_semantic_recall import SemanticRecall

SCRIPT = Path(__file__).resolve()
KINDS = ("shipped", "embedded")
_FACTS = (
    "I'm allergic to peanuts, so I never eat satay.",
    "We are flying to Lisbon on the 14th for my sister's wedding.",
    "My new manager is called Priya and she starts on Monday.",
    "The car needs new brake pads before the winter.",
    "I've been learning the cello for three months now.",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="processes per kind")
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        pc.emit(first(args.store, shipped=args.phase == "shipped"))
        return
    root = Path(tempfile.mkdtemp(prefix="perf-first-"))
    try:
        build(root / "store")
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        for n in range(args.rounds):
            for kind in KINDS if n % 2 == 0 else KINDS[::-1]:
                runs[kind].append(
                    pc.run_child(SCRIPT, ["--phase", kind, "--store", str(root / "store")])
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results = {
        kind: {key: _stats([run[key] for run in runs[kind]]) for key in runs[kind][0]}
        for kind in KINDS
    }
    print_table(results, args.rounds)
    pc.write_json(args.out / "perf_first_search.json", results)


def build(store: Path) -> None:
    """Two users, four threads, 40 messages (the demo's size), indexed by the real model."""
    with SemanticRecall.local(store) as memory:
        for user in ("alice", "bob"):
            for thread in range(2):
                for n, fact in enumerate(_FACTS):
                    memory.index(
                        [f"{fact} ({user}, {n})", f"Noted: {fact.lower()}"],
                        thread_id=f"{user}-{thread}",
                        resource_id=user,
                    )


def first(store: Path, *, shipped: bool) -> dict[str, Any]:
    """One fresh process: open, first search, second search (seconds)."""
    if not shipped:
        import langchain_semantic_recall.engine.vector_space as space

        space.shipped = lambda embeddings: None  # the package before: embed them
    started = time.perf_counter()
    memory = SemanticRecall.local(store)
    opened = time.perf_counter()
    memory.search("What food should I avoid?", resource_id="alice")
    searched = time.perf_counter()
    memory.search("Who is my new manager?", resource_id="alice")
    again = time.perf_counter()
    memory.close()
    return {"open": opened - started, "first": searched - opened, "second": again - searched}


def _stats(values: list[float]) -> dict[str, float]:
    return {**pc.percentiles(values), "max": max(values)}


def print_table(results: dict[str, Any], rounds: int) -> None:
    """First and second search, p50 (and max) of `rounds` processes per kind, seconds."""
    print(f"\nSemanticRecall.local, fresh processes ({rounds} per kind), seconds:\n")
    print("| reference vectors | open p50 | **first search** p50 (max) | second search p50 |")
    print("|---|---|---|---|")
    for kind in KINDS:
        cell = results[kind]
        print(
            f"| {kind} | {pc.fmt(cell['open']['p50'], 3)} "
            f"| **{pc.fmt(cell['first']['p50'], 3)}** ({pc.fmt(cell['first']['max'], 3)}) "
            f"| {pc.fmt(cell['second']['p50'], 3)} |"
        )
    ratio = results["shipped"]["first"]["p50"] / results["embedded"]["first"]["p50"]
    print(f"\nfirst search, shipped / embedded: {pc.fmt(ratio)}x")


if __name__ == "__main__":
    main()
