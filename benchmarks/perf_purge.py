"""`purge` on the embedded store: its time beside indexing the kept messages from scratch.

Builds ``SemanticRecall.local`` stores of ``--messages`` messages (``--dimension``-d
vectors from a hash of each text: no model) over ``--resources`` resources, forgets one
resource and one thread, then times ``purge()``. The baseline, in the same run: indexing
the messages that are kept into a new store (what a purge has to write again at least).

    python benchmarks/perf_purge.py                          # ~1-2 min
    python benchmarks/perf_purge.py --messages 400 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import perf_common as pc
from langchain_core.messages import BaseMessage, HumanMessage

from langchain_semantic_recall import SemanticRecall

PER_THREAD = 50


def threads(messages: int, resources: int) -> list[tuple[str, str, list[BaseMessage]]]:
    out: list[tuple[str, str, list[BaseMessage]]] = []
    for t in range(messages // PER_THREAD):
        resource = f"r{t % resources}"
        thread = f"{resource}-t{t}"
        texts = [f"note {t}-{n} about the trip to lisbon" for n in range(PER_THREAD)]
        out.append(
            (thread, resource, [HumanMessage(x, id=f"{thread}-{n}") for n, x in enumerate(texts)])
        )
    return out


def timed_purge(path: Path, args: argparse.Namespace) -> tuple[float, int]:
    embeddings = pc.HashEmbeddings(args.dimension)
    memory = SemanticRecall.local(path, embeddings=embeddings, search_mode="dense")
    try:
        data = threads(args.messages, args.resources)
        memory.bulk_index(data)
        memory.forget_resource("r0")
        memory.forget_thread(data[1][0])
        start = time.perf_counter()
        result = memory.purge()
        return time.perf_counter() - start, result.vectors.vectors_rebuilt
    finally:
        memory.storage.close()


def timed_index(path: Path, args: argparse.Namespace) -> float:
    embeddings = pc.HashEmbeddings(args.dimension)
    data = threads(args.messages, args.resources)
    kept = [d for d in data if d[1] != "r0" and d[0] != data[1][0]]
    memory = SemanticRecall.local(path, embeddings=embeddings, search_mode="dense")
    try:
        embeddings.embed_documents([str(m.content) for _, _, ms in kept for m in ms])  # warm
        start = time.perf_counter()
        memory.bulk_index(kept)
        return time.perf_counter() - start
    finally:
        memory.storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--resources", type=int, default=10)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=pc.RESULTS)
    args = parser.parse_args()
    purges: list[float] = []
    indexes: list[float] = []
    rebuilt = 0
    for n in range(args.repeats):
        work = Path(tempfile.mkdtemp(prefix="perf-purge-"))
        try:
            seconds, rebuilt = timed_purge(work / f"purge-{n}", args)
            purges.append(seconds)
            indexes.append(timed_index(work / f"index-{n}", args))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    purge_s, index_s = statistics.median(purges), statistics.median(indexes)
    print(f"{args.messages} messages ({args.dimension}-d) over {args.resources} resources;")
    print(f"  after forgetting one resource and one thread, {rebuilt} vectors kept:")
    runs = [round(x, 2) for x in purges], [round(x, 2) for x in indexes]
    print(f"  purge():                           median {purge_s:.2f} s  {runs[0]}")
    print(f"  bulk_index of the kept (baseline): median {index_s:.2f} s  {runs[1]}")
    pc.write_json(
        args.out / "perf_purge.json",
        {"args": {k: str(v) for k, v in vars(args).items()}, "purge_s": purges, "index_s": indexes},
    )


if __name__ == "__main__":
    main()
