"""Wall time of the `semantic-recall` command line, beside the interpreter's own start.

Each command runs ``--runs`` times in a fresh interpreter (``python -c "from
langchain_semantic_recall.cli import main; ..."``, what the console script does), on the
demo store (``semantic-recall demo --path``: two users, six conversations, built once with
the real model), in turn with the baselines so a busy machine slows all alike:

* ``python -c pass``: the interpreter alone;
* ``import chromadb``: what ``stats`` imported to count the vectors, before it read an
  embedded store's from Chroma's own file (``vectors/chroma_file.py``; it still does when
  that file cannot tell, or for a store on servers);
* with ``--baseline-src DIR`` (e.g. ``git archive f8ddf1b langchain_semantic_recall | tar
  -x -C DIR``): every command again from that source tree, the "before" column.

Targets (issue 24): ``--help`` <= 0.5 s; ``threads``, ``stats``, ``show`` <= 1 s (median).

    python benchmarks/perf_cli.py                    # 7 runs of each
    python benchmarks/perf_cli.py --runs 1 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import perf_common as pc

ROOT = Path(__file__).resolve().parents[1]
RUN_CLI = "import sys; from langchain_semantic_recall.cli import main; sys.exit(main(sys.argv[1:]))"
COMMANDS: dict[str, tuple[list[str], float]] = {
    # label: (arguments after --path STORE, target seconds)
    "--help": (["--help"], 0.5),
    "threads": (["threads"], 1.0),
    "show": (["show", "new-chat"], 1.0),
    "stats": (["stats"], 1.0),
}
BASELINES: dict[str, str] = {
    "python -c pass (interpreter)": "pass",
    "import chromadb": "import chromadb",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per command")
    parser.add_argument("--store", type=Path, default=None, help="a demo store (built if absent)")
    parser.add_argument("--baseline-src", type=Path, default=None, help="an older source tree")
    parser.add_argument("--out", type=Path, default=pc.RESULTS)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="perf-cli-"))
    try:
        store = args.store or scratch / "demo"
        if not (store / "messages.sqlite3").exists():
            print(f"building the demo store in {store} ...", flush=True)
            run(ROOT, ["demo", "--path", str(store)])
        results = measure(store, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_table(results)
    pc.write_json(args.out / "perf_cli.json", results)
    print(f"\nwrote {args.out / 'perf_cli.json'}")


def run(source: Path, argv: list[str], *, code: str = RUN_CLI) -> float:
    """Seconds of wall time of one fresh interpreter running `code` with `argv`."""
    env = dict(os.environ, PYTHONPATH=str(source), NO_COLOR="1")
    start = time.perf_counter()
    done = subprocess.run(  # cwd: `-c` puts it first on sys.path, before PYTHONPATH
        [sys.executable, "-c", code, *argv],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def measure(store: Path, args: argparse.Namespace) -> dict[str, Any]:
    sources = {"ours": ROOT}
    if args.baseline_src is not None:
        sources["before"] = args.baseline_src.resolve()
    seconds: dict[str, list[float]] = {}
    for _ in range(args.runs):  # one round: every row once, so load hits all rows alike
        for label, code in BASELINES.items():
            seconds.setdefault(label, []).append(run(ROOT, [], code=code))
        for name, source in sources.items():
            for label, (argv, _target) in COMMANDS.items():
                full = argv if label == "--help" else ["--path", str(store), *argv]
                seconds.setdefault(f"{label} ({name})", []).append(run(source, full))
    return {
        "runs": args.runs,
        "sources": {name: str(path) for name, path in sources.items()},
        "seconds": {label: pc.median_spread(values) for label, values in seconds.items()},
        "targets": {label: target for label, (_argv, target) in COMMANDS.items()},
    }


def print_table(results: dict[str, Any]) -> None:
    runs, cells = results["runs"], results["seconds"]
    print(f"\nWall time, s: median [min-max] of {runs} fresh processes each\n")
    print("| command | ours | before | target | met |")
    print("|---|---|---|---|---|")
    for label, target in results["targets"].items():
        ours = cells[f"{label} (ours)"]
        before = cells.get(f"{label} (before)")
        met = "yes" if ours["median"] <= target else "**no**"
        old = pc.spread(before) if before else "-"
        print(f"| `{label}` | **{pc.spread(ours)}** | {old} | <= {target} | {met} |")
    for label in BASELINES:
        print(f"| {label} | {pc.spread(cells[label])} | | | |")
    floor = cells["python -c pass (interpreter)"]["median"]
    print(f"\n(the interpreter alone: {floor:.2f} s of each row)")


if __name__ == "__main__":
    main()
