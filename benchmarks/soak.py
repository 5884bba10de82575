"""A long-running service in miniature: does memory, files and threads stay level?

Plays the users of a service through one engine (or one engine per request) in rounds,
and prints after each round the process's resident memory (RSS), open file descriptors,
threads and live Python objects (after a collection), then the growth per user over the
second half of the rounds. With `--forget` each round's users are forgotten at its end,
so the data stays the same size: any growth left is something kept per user (a leak).
A bag-of-words embedder stands in for the model (the backends are what is measured).

    python benchmarks/soak.py                                  # one engine, embedded, ~2 min
    python benchmarks/soak.py --forget                         # data forgotten each round
    python benchmarks/soak.py --scenario per-request           # an engine per request, closed
    python benchmarks/soak.py --scenario per-request --no-close  # ... dropped unclosed
    python benchmarks/soak.py --scenario per-request --hold    # ... another engine kept open
    python benchmarks/soak.py --scenario async                 # concurrent async turns, then
                                                               # aclose while turns run
    python benchmarks/soak.py --backend memory                 # in-memory backends
    python benchmarks/soak.py --scenario per-request --storage postgresql://... \
        --vector http://127.0.0.1:8000                         # servers (URLs of from_url)
    python benchmarks/soak.py --rounds 2 --users 3 --out /tmp/x  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import math
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import perf_common as pc
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall import EngineClosedError, SemanticRecall
from langchain_semantic_recall.records import ScopeFilter

_WORD = re.compile(r"[a-z0-9]+")
_TOPICS = ["peanut", "allergy", "lisbon", "trip", "budget", "laptop", "garden", "salmon"]


class BagOfWords(Embeddings):
    """Words hashed into 64 buckets, unit length; deterministic, records nothing."""

    model = "soak-bag-of-words"

    def _one(self, text: str) -> list[float]:
        values = [0.0] * 64
        for word in _WORD.findall(text.lower()):
            values[int.from_bytes(hashlib.sha1(word.encode()).digest()[:4], "big") % 64] += 1
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        return [v / norm for v in values]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def turn(user: int, n: int) -> list[BaseMessage]:
    topic = _TOPICS[(user + n) % len(_TOPICS)]
    return [
        HumanMessage(f"User {user} talks about the {topic}, note {n}."),
        AIMessage(f"Noted about the {topic} for user {user}, item {n}."),
    ]


def probe() -> dict[str, float]:
    gc.collect()
    return {
        "rss_mb": round(pc.current_rss_mb(), 1),
        "fds": len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1,
        "threads": threading.active_count(),
        "objects": len(gc.get_objects()),
    }


class Service:
    """The engine(s) a scenario plays its users against."""

    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args, self.folder, self.embeddings = args, folder, BagOfWords()
        self.shared = self.open() if args.scenario != "per-request" else None
        self.held = self.open() if args.hold else None  # keeps embedded Chroma running

    def open(self) -> SemanticRecall:
        if self.args.storage:
            urls = {"storage": self.args.storage, "vector": self.args.vector}
            return SemanticRecall.from_url(**urls, embeddings=self.embeddings)
        if self.args.backend == "memory":
            from langchain_semantic_recall import InMemoryStorage
            from langchain_semantic_recall.vectors import InMemoryVectorIndex

            storage, vectors = InMemoryStorage(), InMemoryVectorIndex()
            return SemanticRecall(storage=storage, vector_store=vectors, embeddings=self.embeddings)
        return SemanticRecall.local(self.folder, embeddings=self.embeddings)

    def user(self, user: int, rounds: int) -> None:
        """One user's round: index a few turns, recall, search one thread."""
        memory = self.shared or self.open()
        who = f"user-{user}"
        try:
            for thread in range(self.args.threads):
                memory.index(turn(user, thread), thread_id=f"{who}-t{thread}", resource_id=who)
            ask = [HumanMessage(f"What did I say about the {_TOPICS[user % len(_TOPICS)]}?")]
            memory.recall(ask, thread_id=f"{who}-new{rounds}", resource_id=who)
            memory.search("note", resource_id=who, thread_id=f"{who}-t0", scope="thread")
        finally:
            if self.shared is None and self.args.close:
                memory.close()

    async def auser(self, user: int, rounds: int) -> Any:
        assert self.shared is not None
        who = f"user-{user}"
        ask = [HumanMessage(f"Anything about the {_TOPICS[user % len(_TOPICS)]}?")]
        await self.shared.arecall(ask, thread_id=f"{who}-r{rounds}", resource_id=who)
        return await self.shared.aindex(
            turn(user, rounds), thread_id=f"{who}-r{rounds}", resource_id=who
        )


def play(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    service = Service(args, folder)
    rows = [{"round": -1, "users": 0, **probe()}]
    print(rows[0], flush=True)
    for rounds in range(args.rounds):
        started = time.perf_counter()
        users = range(rounds * args.users, (rounds + 1) * args.users)
        if args.scenario == "async":

            async def together(users: range = users, rounds: int = rounds) -> None:
                await asyncio.gather(*(service.auser(u, rounds) for u in users))

            asyncio.run(together())
        else:
            took = []
            for user in users:
                begun = time.perf_counter()
                service.user(user, rounds)
                took.append(time.perf_counter() - begun)
            p50_ms = sorted(took)[len(took) // 2] * 1000
        if args.forget and service.shared is not None:
            for user in users:
                service.shared.forget_resource(f"user-{user}")
        row = {"round": rounds, "users": users.stop, "seconds": time.perf_counter() - started}
        if args.scenario != "async":
            row["user_p50_ms"] = round(p50_ms, 1)
        rows.append({**row, **probe()})
        print(rows[-1], flush=True)
    result: dict[str, Any] = {"rounds": rows, "growth_per_user": _growth(rows)}
    if args.scenario == "async":
        result["aclose_under_load"] = asyncio.run(_aclose_under_load(service, args.users))
    elif service.shared is not None:
        service.shared.close()
    if service.held is not None:
        service.held.close()
    result["after_close"] = probe()
    return result


def _growth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the second half of the rounds: live objects gained per user (a leak keeps some
    per user), and the range of the rest (embedded Chroma's loaded indexes, bounded, make
    the memory and open files rise and fall)."""
    half = rows[len(rows) // 2 :]
    users = max(1, half[-1]["users"] - half[0]["users"])
    growth: dict[str, Any] = {
        "objects_per_user": round((half[-1]["objects"] - half[0]["objects"]) / users, 2)
    }
    for key in ("rss_mb", "fds", "threads"):
        growth[key] = [min(row[key] for row in half), max(row[key] for row in half)]
    return growth


async def _aclose_under_load(service: Service, users: int) -> dict[str, Any]:
    """`aclose` while turns are in flight: each turn is whole or refused, none half kept."""
    memory = service.shared
    assert memory is not None
    calls = [asyncio.ensure_future(service.auser(u, 999)) for u in range(users)]
    await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)  # the others in flight
    started = time.perf_counter()
    await memory.aclose()
    waited = time.perf_counter() - started
    done = await asyncio.gather(*calls, return_exceptions=True)
    refused = sum(isinstance(d, EngineClosedError) for d in done)
    failed = [repr(d) for d in done if isinstance(d, BaseException) and d is not None]
    failed = [f for f in failed if "EngineClosedError" not in f]
    kept = [u for u, d in enumerate(done) if not isinstance(d, BaseException)]
    check = service.open()
    try:
        half = [
            u
            for u in kept
            if check.storage.count(ScopeFilter(thread_id=f"user-{u}-r999", resource_id=f"user-{u}"))
            != 2
        ]
    finally:
        check.close()
    return {"waited_s": round(waited, 2), "whole": len(kept), "refused": refused,
            "failed": failed[:3], "stored_in_part": half}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["serve", "per-request", "async"], default="serve")
    parser.add_argument("--backend", choices=["local", "memory"], default="local")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--users", type=int, default=100, help="new users per round")
    parser.add_argument("--threads", type=int, default=2, help="conversations per user")
    parser.add_argument("--forget", action="store_true", help="forget each round's users")
    parser.add_argument("--no-close", dest="close", action="store_false")
    parser.add_argument("--hold", action="store_true", help="keep one more engine open")
    parser.add_argument("--storage", help="a storage URL (with --vector): servers")
    parser.add_argument("--vector", help="a vector URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=None, help="folder for soak.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as work:
        result = {"args": {k: str(v) for k, v in vars(args).items()}, **play(args, Path(work))}
    print("second half:", result["growth_per_user"])
    if "aclose_under_load" in result:
        print("aclose under load:", result["aclose_under_load"])
    print("after close:", result["after_close"])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        pc.write_json(args.out / "soak.json", result)


if __name__ == "__main__":
    main()
