"""Two processes writing one embedded Chroma folder: vectors lost, and stale searches.

The embedded default is for one process (docs/data-handling.md, *Several processes on
one embedded store*). This counts what happens otherwise, on `ChromaVectorIndex` (the
package's embedded index), with random unit vectors written two per call, as turns are:

* **lost**: ``--writes`` calls into one resource, made by one process (the baseline)
  and by two processes at once (half each); then a new process searches the resource
  for all its vectors (k = its count) and counts those no search returns, while
  Chroma's tables still list them (what `stats` counts, so none is "missing");
* **stale**: a process searches a resource (its index is now loaded), another process
  writes ``--late`` more vectors into it, the first searches again and counts the new
  ones it finds.

    python benchmarks/two_writers_embedded.py                # ~2 min on 2 cores
    python benchmarks/two_writers_embedded.py --writes 300   # smoke (loses none: < 1,000)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import perf_common as pc

from langchain_semantic_recall.records import ScopeFilter, VectorRecord
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

NAME, DIMENSION, RESOURCE = "two-writers", 32, "shared"
SCOPE = ScopeFilter(resource_id=RESOURCE)


def records(prefix: str, n: int, seed: int) -> list[VectorRecord]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIMENSION))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        VectorRecord(
            id=f"{prefix}-{i}",
            vector=vectors[i].tolist(),
            message_id=f"{prefix}-{i}",
            thread_id=f"{prefix}-t",
            resource_id=RESOURCE,
            role="user",
            content=f"{prefix} {i}",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        for i in range(n)
    ]


def open_index(folder: str) -> ChromaVectorIndex:
    index = ChromaVectorIndex.persistent(folder)
    index.open(NAME, dimension=DIMENSION, model="random")
    return index


def write(folder: str, prefix: str, calls: int, seed: int) -> None:
    """Child: `calls` upserts of 2 vectors each, waiting for the parent's go on stdin."""
    index = open_index(folder)
    print("ready", flush=True)
    sys.stdin.readline()
    batch = records(prefix, 2 * calls, seed)
    for start in range(0, len(batch), 2):
        index.upsert(NAME, batch[start : start + 2])
    index.close()
    print(json.dumps({"written": len(batch)}), flush=True)


WRITER_TIMEOUT_S = 60
"""How long a writing process may take (two embedded writers have hung each other)."""


class WriterFailedError(RuntimeError):
    """A writing process exited with an error (two writers: one outcome measured)."""


def writers(folder: str, prefixes: list[str], calls: int) -> None:
    script = str(Path(__file__).resolve())
    children = [
        subprocess.Popen(
            [sys.executable, script, "--child", folder, prefix, str(calls), str(seed)],
            env=pc.child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed, prefix in enumerate(prefixes)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                # Two processes creating one fresh folder race in Chroma's migrations
                # ("table collections already exists"): an outcome, measured.
                child.wait(timeout=WRITER_TIMEOUT_S)
                raise WriterFailedError(
                    f"a writer failed to open the folder (exit {child.returncode}, its error above)"
                )
        for child in children:  # all at once
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            child.communicate(timeout=WRITER_TIMEOUT_S)
            if child.returncode != 0:
                raise WriterFailedError(
                    f"a writer failed (exit {child.returncode}, its error above)"
                )
    except subprocess.TimeoutExpired as hung:  # two writers can also wait on each other
        raise WriterFailedError(f"a writer hung (no end in {WRITER_TIMEOUT_S} s)") from hung
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def lost(processes: int, calls: int) -> tuple[int, int]:
    """(vectors Chroma lists, vectors no search returns) after `processes` wrote."""
    with tempfile.TemporaryDirectory() as folder:
        prefixes = [f"p{n}" for n in range(processes)]
        writers(folder, prefixes, calls // processes)
        index = open_index(folder)
        listed = index.message_ids(NAME, SCOPE)
        probe = records("probe", 1, 99)[0].vector
        found = {h.message_id for h in index.query(NAME, probe, k=len(listed), scope=SCOPE)}
        index.close()
        return len(listed), len(listed - found)


def stale(late: int) -> tuple[int, int]:
    """(vectors another process wrote after our first search, of them our search finds)."""
    with tempfile.TemporaryDirectory() as folder:
        index = open_index(folder)
        index.upsert(NAME, records("first", 10, 1))
        probe = records("probe", 1, 99)[0].vector
        index.query(NAME, probe, k=10, scope=SCOPE)  # loaded in this process now
        written = 2 * (late // 2)  # two vectors a call, as turns are
        writers(folder, ["late"], late // 2)
        hits = index.query(NAME, probe, k=10 + written, scope=SCOPE)
        index.close()
        return written, sum(1 for h in hits if h.message_id.startswith("late-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2800, help="vectors into one resource")
    parser.add_argument("--late", type=int, default=20, help="vectors written by the other")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        folder, prefix, calls, seed = args.child
        write(folder, prefix, int(calls), int(seed))
        return 0
    calls = args.writes // 2
    for processes, label in ((1, "one process (baseline)"), (2, "two processes at once")):
        try:
            listed, missing = lost(processes, calls)
        except WriterFailedError as error:  # an outcome of two writers (docs/performance.md)
            print(f"{label:<24} {error}")
            continue
        print(f"{label:<24} {listed} vectors listed, {missing} never returned by a search")
    try:
        written, seen = stale(args.late)
    except WriterFailedError as error:  # the other process could not write beside ours
        print(f"a loaded resource: {error}")
        return 0
    print(f"a loaded resource: {seen} of {written} vectors another process wrote are searchable")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
