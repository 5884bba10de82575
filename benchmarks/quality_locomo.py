"""Recall quality on locomo-dev, end to end: defaults against dense-only and BM25 alone.

Not a test: a script that prints the tables of ``docs/quality.md``. It loads locomo-dev
once into the embedded default (``SemanticRecall.local`` in a temporary folder: SQLite
with FTS5, embedded Chroma, the local MiniLM model) through ``index``, then asks every
question through ``search`` under several settings, each an engine over the same storage,
vectors and embedder, exactly as ``semantic-recall eval locomo`` does for one setting:

- the package defaults (hybrid search, budget 15);
- BM25 alone at the same budget (``search_mode="keyword"``, no time boost) and with it;
- dense search at the same budget, and dense with the original's settings;
- the trade-off curve: recall against messages per query for budgets 5 to 30.

Latency is one ``search`` call, query embedding included (each setting starts with an
empty embedding cache), on whatever else the machine is doing: compare rows of one run.

Usage::

    .venv/bin/python benchmarks/quality_locomo.py [PATH_TO_locomo_dev.json] [--json-out FILE]

Each row can be reproduced on its own with the command line, e.g.
``semantic-recall eval locomo PATH --search-mode keyword --time-boost 0``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.cli.eval import render_summary
from langchain_semantic_recall.evaluation import evaluate, load_dataset, read_locomo, summarize

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/locomo-dev/locomo_dev.json"
SAME_WINDOWS: dict[str, Any] = {"top_k": 12, "message_range": (0, 2)}

MAIN: dict[str, tuple[dict[str, Any], str]] = {
    "defaults (hybrid)": ({}, ""),
    "BM25 alone, same budget": (
        {"search_mode": "keyword", "time_boost": 0.0},
        "--search-mode keyword --time-boost 0",
    ),
    "keyword mode (BM25 + time boost)": ({"search_mode": "keyword"}, "--search-mode keyword"),
    "hybrid without time boost": ({"time_boost": 0.0}, "--time-boost 0"),
    "dense, same budget": (
        {"search_mode": "dense", **SAME_WINDOWS, "message_budget": 15},
        "--search-mode dense --top-k 12 --before 0 --after 2 --message-budget 15",
    ),
    "dense, the original's settings": ({"search_mode": "dense"}, "--search-mode dense"),
}
CURVE_BUDGETS = (5, 8, 10, 12, 15, 20, 25, 30)
CURVE: dict[str, dict[str, Any]] = {
    "hybrid": {},
    "BM25 alone": {"search_mode": "keyword", "time_boost": 0.0},
    "dense": {"search_mode": "dense", **SAME_WINDOWS},
}


def run(data: Path, json_out: Path | None) -> None:
    dataset = read_locomo(data)
    with tempfile.TemporaryDirectory(prefix="quality-locomo-") as scratch:
        base = SemanticRecall.local(Path(scratch))
        started = time.perf_counter()
        load_dataset(base, dataset)
        print(f"loaded {dataset.message_count} messages in {time.perf_counter() - started:.0f} s")

        def measure(options: dict[str, Any]) -> dict[str, Any]:
            # A fresh embedding cache: every search embeds its query, as in production.
            memory = SemanticRecall(
                storage=base.storage,
                vector_store=base.vector_store,
                embeddings=base.embeddings,
                **options,
            )
            return summarize(evaluate(memory, dataset, progress=False))

        report: dict[str, Any] = {"main": {}, "curve": {}}
        for name, (options, flags) in MAIN.items():
            summary = measure(options)
            report["main"][name] = summary
            print(f"\n## {name}   (semantic-recall eval locomo PATH {flags})".rstrip())
            print(render_summary(summary))
        print("\n## trade-off curve: overall recall (messages per query)")
        print("budget  " + "  ".join(f"{name:>16}" for name in CURVE))
        for budget in CURVE_BUDGETS:
            cells = []
            for name, options in CURVE.items():
                overall = measure({**options, "message_budget": budget})["overall"]
                report["curve"].setdefault(name, {})[budget] = overall
                cells.append(f"{overall['recall']:.3f} ({overall['messages_per_query']:4.1f})")
            print(f"{budget:>6}  " + "  ".join(f"{cell:>16}" for cell in cells))
        base.storage.close()
        base.vector_store.close()
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    run(Path(args.data), args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
