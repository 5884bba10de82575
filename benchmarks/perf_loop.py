"""Event-loop stalls while the async API works: the longest the loop waited, measured.

A ticker coroutine sleeps 1 ms in a loop and records how late it wakes up: any sync work
done on the event loop (embedding, SQLite, Chroma, BM25...) shows up as a stall, and so
does a thread that holds the GIL. Three scenarios of the package, each on the embedded
default (SQLite + embedded Chroma + the real local model, fresh store in a temporary
folder), and two baselines with no package code, each `--rounds` times:

* ``idle``: the ticker alone (the machine's own noise);
* ``engine``: 20 ``aindex`` (one turn each: a user and an assistant message) and 20
  ``arecall`` at once;
* ``graph``: 20 ``create_recall_graph(...).ainvoke`` turns at once (recall node, a fake
  chat model, index node);
* ``middleware``: 20 ``create_agent(..., middleware=[SemanticRecallMiddleware])``
  ``ainvoke`` turns at once;
* ``agent alone``: the same agent turns without the middleware: what LangGraph and the
  agent loop stall on their own, the baseline of the two scenarios above;
* ``Chroma writes alone``: the vector writes of an ``engine`` round (20 upserts of 2
  vectors into one collection per user, in the same Chroma store) made with chromadb
  directly, one at a time in the default executor, as our write gate makes them: no
  package code runs, so this is the floor of ``engine`` (chromadb's embedded bindings
  hold the GIL through a write, chroma-core/chroma#3873).

Prints max and p99 stall (ms) per scenario, then the targets of issue 24 side by side:
the worst stall of Chroma's own writes alone, of the framework alone (the agent without
memory) and of ours (``engine``, ``graph``, ``middleware``); ours must stay within the
larger baseline + 10 ms on embedded Chroma, and within 25 ms with a Chroma server
(``--chroma-url``), where writes leave the GIL free.

The package's own share of a framework turn: in ``graph`` and ``middleware`` the ticker
also waits for LangGraph and the agent loop (the framework alone stalls it 30-140 ms), so
each scenario also times the event loop's callbacks that run package code (``_OurSteps``:
a callback stepping a task whose await chain holds a coroutine of the package, before or
after the step, counted whole, framework code and GC pauses inside it included) and
sums, per stall, those within it (several tasks' callbacks back to back stall the loop
for their sum). With a Chroma server, where the framework's own stalls exceed the 25 ms
bound, that share is ``graph``'s and ``middleware``'s figure (the whole turn's worst
stall is printed beside it); ``engine`` runs no framework code and keeps the ticker's
figure, which also counts the GIL its worker threads hold. Every figure, ours and the
baselines', embedded or server, is judged outside garbage-collection pauses, printed
beside: a pause stops every thread, whoever allocated last, for a time set by the whole
heap (mostly LangChain's and chromadb's objects; the framework alone pauses as long, when
its short run holds one). ``--only``
runs the scenarios whose names start with the given prefixes. Garbage
collection pauses every thread: the longest pause is printed, and the max stall once the
pauses are taken out of each tick. ``--gc-freeze`` calls ``gc.freeze()`` after the warm-up
(what a server may do at start-up; the package never touches the collector);
``--chroma-url`` runs on a Chroma server (``chroma run``) instead of embedded Chroma.

    python benchmarks/perf_loop.py                 # ~30 s
    python benchmarks/perf_loop.py --runs 5        # five fresh processes, then the tally
    python benchmarks/perf_loop.py --rounds 1 --concurrency 4 --out /tmp/x   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import chromadb
import numpy as np
import perf_common as pc
from chromadb.config import Settings
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

import langchain_semantic_recall
from langchain_semantic_recall import SemanticRecall, SQLiteStorage
from langchain_semantic_recall.graph import create_recall_graph
from langchain_semantic_recall.local_embeddings import LocalEmbeddings
from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
from langchain_semantic_recall.vectors.chroma_layout import DEFAULT_HNSW
from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex

TICK_S = 0.001
SCENARIOS = (
    "idle (ticker alone)",
    "engine",
    "graph",
    "middleware",
    "agent alone (no memory)",
    "Chroma writes alone (no package code)",
)
OURS = ("engine", "graph", "middleware")
FRAMEWORK, CHROMA_ALONE = SCENARIOS[4], SCENARIOS[5]
MARGIN_MS = 10.0
"""Embedded Chroma: ours may exceed the larger baseline by this much."""
SERVER_BOUND_MS = 25.0
"""With a Chroma server: ours stays under this."""
PACKAGE = str(Path(langchain_semantic_recall.__file__).resolve().parent)
"""A code object whose file lies under this folder is the package's."""
_TOPICS = ("garden", "piano", "tennis", "paris trip", "allergy", "new job", "the dog", "bread")


def _turn(n: int) -> tuple[str, str]:
    topic = _TOPICS[n % len(_TOPICS)]
    return (
        f"Message {n}: let me tell you more about {topic}, it has been on my mind all week "
        f"and I keep coming back to it when I think about what to do next.",
        f"Thanks for sharing about {topic} (turn {n}). What part of it matters most to you?",
    )


class _Replies:
    """A fresh answer per call (a stored message keeps its id), safe across threads."""

    def __init__(self) -> None:
        self._count = itertools.count()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[AIMessage]:
        return self

    def __next__(self) -> AIMessage:
        with self._lock:
            return AIMessage(f"noted ({next(self._count)})")


class _GcPauses:
    """The garbage collector's pauses (they stop every thread, the loop included)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            end = time.perf_counter()
            self.pauses.append((end - self._start) * 1000)
            self.spans.append((self._start, end))

    def overlap_ms(self, start: float, end: float) -> float:
        """How long pauses overlapped the interval [start, end] (ms)."""
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.spans) * 1000


def _awaits_ours(handle: asyncio.Handle) -> bool:
    """Whether `handle` steps a task whose chain of awaited coroutines holds package code."""
    task = getattr(handle._callback, "__self__", None)  # a task's step: its bound method
    if not isinstance(task, asyncio.Task):
        return False
    awaited: Any = task.get_coro()
    while awaited is not None:
        code = getattr(awaited, "cr_code", None) or getattr(awaited, "gi_code", None)
        if code is not None and code.co_filename.startswith(PACKAGE):
            return True
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return False


class _OurSteps:
    """The loop's callbacks that ran package code, as (start, end): how long it held the loop.

    `Handle._run` is wrapped while the context is entered (this benchmark's process only).
    A callback counts when the task it steps awaits package code before the step (it
    resumes inside the package) or after it (it entered the package and waits there).
    """

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def __enter__(self) -> _OurSteps:
        self._original = run = asyncio.events.Handle._run
        spans = self.spans

        def timed(handle: asyncio.Handle) -> None:
            ours = _awaits_ours(handle)
            start = time.perf_counter()
            try:
                run(handle)
            finally:
                end = time.perf_counter()
                if ours or _awaits_ours(handle):
                    spans.append((start, end))

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._original  # type: ignore[method-assign]


Tick = tuple[float, float, float]
"""(start, end, stall ms) of one tick of the ticker."""


async def _measure(work: Callable[[], Awaitable[Any]]) -> list[Tick]:
    """Run `work` while a ticker records how late each 1 ms sleep wakes up (ms)."""
    stalls: list[Tick] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            stalls.append((last, now, max(0.0, (now - last - TICK_S) * 1000)))
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    try:
        await work()
    finally:
        done.set()
        await tick
    return stalls


def _summary(
    ticks: list[Tick], pauses: _GcPauses, ours: _OurSteps, seconds: float
) -> dict[str, float]:
    data = np.asarray([stall for _, _, stall in ticks] or [0.0])
    outside = [max(0.0, stall - pauses.overlap_ms(start, end)) for start, end, stall in ticks]
    shares = _shares(ticks, ours.spans, pauses)
    return {
        "ours_on_loop_ms": max((share for share, _ in shares), default=0.0),
        "ours_on_loop_outside_gc_ms": max((outside for _, outside in shares), default=0.0),
        "ours_callbacks": len(ours.spans),
        "max_ms": float(data.max()),
        "p99_ms": float(np.percentile(data, 99)),
        "over_25ms": int((data > 25).sum()),
        "max_outside_gc_ms": max(outside, default=0.0),
        "ticks": len(ticks),
        "seconds": seconds,
        "gc_max_ms": max(pauses.pauses, default=0.0),
    }


def _shares(
    ticks: list[Tick], spans: list[tuple[float, float]], pauses: _GcPauses
) -> list[tuple[float, float]]:
    """Per tick: how long package code held the loop within it, and that outside GC (ms).

    Callbacks of several tasks of the package, back to back, stall the ticker for their
    sum: each tick counts every callback span that overlaps it. Both lists are in time
    order (the loop runs one callback at a time).
    """
    shares = []
    first = 0
    for start, end, stall in ticks:
        while first < len(spans) and spans[first][1] <= start:
            first += 1
        held = paused = 0.0
        for n in range(first, len(spans)):  # no copy of the list per tick
            span_start, span_end = spans[n]
            if span_start >= end:
                break
            a, b = max(span_start, start), min(span_end, end)
            held += (b - a) * 1000
            paused += pauses.overlap_ms(a, b)
        held = min(held, stall)  # package code run while the ticker slept is no stall
        shares.append((held, max(0.0, held - paused)))
    return shares


def _chosen(name: str, only: list[str] | None) -> bool:
    return only is None or any(name.startswith(prefix) for prefix in only)


class _RawChromaWrites:
    """One turn's 2 random vectors upserted with chromadb alone (no package code)."""

    def __init__(self, args: argparse.Namespace, root: Path, users: list[str]) -> None:
        """One collection per user: in the run's embedded store, or on `--chroma-url`."""
        if args.chroma_url:
            url = urlsplit(args.chroma_url)
            self._client = chromadb.HttpClient(host=url.hostname or "", port=url.port or 8000)
        else:  # the engine's own store (the same embedded client)
            settings = Settings(anonymized_telemetry=False)
            self._client = chromadb.PersistentClient(str(root / "chroma"), settings=settings)
        self._collections = {
            user: self._client.get_or_create_collection(
                f"alone-{os.getpid()}-{user}", configuration={"hnsw": dict(DEFAULT_HNSW)}
            )
            for user in users
        }
        self._rng = np.random.default_rng(0)
        self._lock = threading.Lock()  # numpy's Generator is not thread-safe

    def write(self, user: str, n: int) -> None:
        """Upsert turn `n` of `user` (two unit vectors)."""
        with self._lock:
            vectors = self._rng.standard_normal((2, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        self._collections[user].upsert(
            ids=[f"{n}-user", f"{n}-assistant"],
            embeddings=vectors,
            metadatas=[{"thread_id": f"t-{n % 20}", "role": role} for role in ("user", "ai")],
        )

    def close(self) -> None:
        """Drop the collections (a Chroma server keeps them otherwise)."""
        for collection in self._collections.values():
            self._client.delete_collection(collection.name)


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Every scenario on one store; returns the stall summaries."""
    if args.default_executor:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(args.default_executor))
    storage = SQLiteStorage(root / "messages.sqlite3")
    memory = SemanticRecall(
        storage=storage,
        vector_store=(
            ChromaServerVectorIndex(args.chroma_url)
            if args.chroma_url
            else ChromaVectorIndex.persistent(root / "chroma")
        ),
        embeddings=LocalEmbeddings(),
    )
    n = args.concurrency
    users = [f"user-{i % 4}" for i in range(n)]
    counter = itertools.count()
    for i in range(n):  # warm: the model, the collections, some history to recall
        user, assistant = _turn(next(counter))
        messages = [HumanMessage(user), AIMessage(assistant)]
        await memory.aindex(messages, thread_id=f"warm-{i}", resource_id=users[i])

    async def engine_round() -> None:
        jobs = []
        for i in range(n):
            user, assistant = _turn(next(counter))
            ids = {"thread_id": f"t-{i}", "resource_id": users[i]}
            turn = [HumanMessage(user), AIMessage(assistant)]
            jobs.append(memory.aindex(turn, **ids))
            jobs.append(memory.arecall([HumanMessage(f"what did I say about {user[-40:]}")], **ids))
        await asyncio.gather(*jobs)

    model = GenericFakeChatModel(messages=_Replies())
    graph = create_recall_graph(model, memory, checkpointer=InMemorySaver())
    agent = create_agent(
        GenericFakeChatModel(messages=_Replies()),
        middleware=[SemanticRecallMiddleware(memory)],
        checkpointer=InMemorySaver(),
    )
    bare = create_agent(GenericFakeChatModel(messages=_Replies()), checkpointer=InMemorySaver())

    async def graph_round() -> None:
        await asyncio.gather(
            *(
                graph.ainvoke(
                    {"messages": [("user", _turn(next(counter))[0])]},
                    {"configurable": {"thread_id": f"g-{i}", "resource_id": users[i]}},
                )
                for i in range(n)
            )
        )

    async def agent_round() -> None:
        await asyncio.gather(
            *(
                agent.ainvoke(
                    {"messages": [HumanMessage(_turn(next(counter))[0])]},
                    {"configurable": {"thread_id": f"a-{i}"}},
                    context={"resource_id": users[i]},
                )
                for i in range(n)
            )
        )

    async def bare_round() -> None:  # the agent without memory: the framework's own share
        await asyncio.gather(
            *(
                bare.ainvoke(
                    {"messages": [HumanMessage(_turn(next(counter))[0])]},
                    {"configurable": {"thread_id": f"b-{i}"}},
                )
                for i in range(n)
            )
        )

    raw = (
        _RawChromaWrites(args, root, sorted(set(users)))
        if _chosen(SCENARIOS[-1], args.only)
        else None
    )

    async def chroma_round() -> None:  # chromadb alone, one write at a time: engine's floor
        assert raw is not None
        loop = asyncio.get_running_loop()
        for i in range(n):
            await loop.run_in_executor(None, raw.write, users[i], next(counter))

    async def idle_round() -> None:  # the machine's own noise: the ticker alone
        await asyncio.sleep(0.5)

    if args.gc_freeze:  # what a server may do once started (not a package setting)
        gc.collect()
        gc.freeze()
    results: dict[str, Any] = {}
    rounds = (idle_round, engine_round, graph_round, agent_round, bare_round, chroma_round)
    try:
        for name, work in zip(SCENARIOS, rounds, strict=True):
            if _chosen(name, args.only):
                results[name] = await _scenario(work, args.rounds)
    finally:
        if raw is not None:
            raw.close()
        await storage.aclose()
    return results


async def _scenario(work: Callable[[], Awaitable[Any]], rounds: int) -> dict[str, float]:
    """`rounds` rounds of `work` under the ticker, summarised."""
    stalls: list[Tick] = []
    start = time.perf_counter()
    pauses = _GcPauses()
    gc.callbacks.append(pauses)
    try:
        with _OurSteps() as ours:
            for _ in range(rounds):
                stalls += await _measure(work)
    finally:
        gc.callbacks.remove(pauses)
    return _summary(stalls, pauses, ours, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per scenario")
    parser.add_argument("--concurrency", type=int, default=20, help="calls of each kind at once")
    parser.add_argument(
        "--default-executor", type=int, default=0, help="threads of the loop's default executor"
    )
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.freeze() after the warm-up, as a server may"
    )
    parser.add_argument(
        "--chroma-url", default=None, help="a Chroma server (chroma run) instead of embedded"
    )
    parser.add_argument(
        "--only", nargs="+", default=None, metavar="SCENARIO", help="run only these (by prefix)"
    )
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument(
        "--runs", type=int, default=1, help="runs, each in a fresh process, then the tally"
    )
    args = parser.parse_args()
    for prefix in args.only or ():
        if not any(_chosen(name, [prefix]) for name in SCENARIOS):
            parser.error(f"--only {prefix!r}: no scenario starts with it; scenarios: {SCENARIOS}")
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.runs > 1:
        _runs(args)
        return
    root = Path(tempfile.mkdtemp(prefix="perf-loop-"))
    try:
        results = asyncio.run(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    where = (args.chroma_url or "embedded Chroma") + (", gc.freeze()" if args.gc_freeze else "")
    print(
        f"\nEvent-loop stalls, {args.concurrency} concurrent calls, {args.rounds} rounds, "
        f"{where} (machine load average {load}):\n"
    )
    print(
        "| scenario | max stall ms | p99 stall ms | stalls > 25 ms | max stall outside GC "
        "| longest GC | package code on the loop, most within one stall (outside GC) "
        "| ticks | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {pc.fmt(r['max_ms'])} | {pc.fmt(r['p99_ms'])} | {r['over_25ms']} "
            f"| {pc.fmt(r['max_outside_gc_ms'])} | {pc.fmt(r['gc_max_ms'])} "
            f"| {pc.fmt(r['ours_on_loop_ms'])} ({pc.fmt(r['ours_on_loop_outside_gc_ms'])}) "
            f"| {r['ticks']} | {pc.fmt(r['seconds'], 1)} |"
        )
    verdict = targets(results, server=bool(args.chroma_url))
    print_targets(verdict)
    pc.write_json(
        args.out / "perf_loop.json",
        {"args": vars(args) | {"out": str(args.out)}, "targets": verdict, **results},
    )


def _runs(args: argparse.Namespace) -> None:
    """`--runs N`: N runs of this script, each in a fresh process, then how many met.

    One run's bound is one run of the baselines, which move by 10 ms and more from run to
    run on a small machine: the tally shows each run's verdict and the medians side by side.
    """
    same = [f"--rounds={args.rounds}", f"--concurrency={args.concurrency}"]
    same += [f"--default-executor={args.default_executor}"]
    same += ["--gc-freeze"] * args.gc_freeze
    same += [f"--chroma-url={args.chroma_url}"] if args.chroma_url else []
    same += ["--only", *args.only] if args.only else []
    verdicts = []
    for n in range(args.runs):
        out = args.out / f"perf_loop_run{n + 1}"
        print(f"\n=== run {n + 1} of {args.runs}", flush=True)
        command = [sys.executable, __file__, *same, "--out", str(out)]
        subprocess.run(command, check=True, env=dict(os.environ))  # its tables, as it goes
        verdicts.append(json.loads((out / "perf_loop.json").read_text())["targets"])
    bounds = [v["bound_ms"] for v in verdicts]
    print(f"\nOver {args.runs} runs, each in a fresh process ({verdicts[0]['rule']}):\n")
    print("| scenario | ours by run, ms | bound by run, ms | met | median ours | median bound |")
    print("|---|---|---|---|---|---|")
    known = [b for b in bounds if b is not None]
    tally: dict[str, Any] = {}
    for name in verdicts[0]["ours"]:
        ours = [v["ours"][name]["max_ms"] for v in verdicts]
        met = [v["ours"][name]["met"] for v in verdicts]
        tally[name] = {"ours_ms": ours, "met": met, "median_ms": statistics.median(ours)}
        print(
            f"| {name} | {', '.join(pc.fmt(x, 1) for x in ours)} "
            f"| {', '.join(pc.fmt(b, 1) for b in bounds)} | {sum(m is True for m in met)} of "
            f"{len(met)} | {pc.fmt(statistics.median(ours), 1)} "
            f"| {pc.fmt(statistics.median(known) if known else None, 1)} |"
        )
    if all(b is not None for b in bounds):
        every = sum(all(v["ours"][name]["met"] for name in v["ours"]) for v in verdicts)
        print(f"\nruns in which every scenario met its bound: {every} of {args.runs}")
    pc.write_json(
        args.out / "perf_loop_runs.json",
        {"args": vars(args) | {"out": str(args.out)}, "bounds_ms": bounds, "ours": tally},
    )


def targets(results: dict[str, Any], *, server: bool) -> dict[str, Any]:
    """Issue 24's targets from one run: each of ours against the bound of the baselines.

    Every figure is taken outside garbage-collection pauses (printed beside): a pause stops
    every thread for a time set by the whole heap, and lands in whichever scenario
    allocates past the collector's threshold. The framework alone runs ~0.3 s and seldom
    holds one, ours 4-6 s: ours with its pauses against a baseline without any was the
    one-sided comparison an audit found (graph and middleware failed in every run on a
    pause of 80-130 ms, the code before them too).

    Embedded Chroma: the bound is the larger of the two baselines' worst stalls (Chroma's
    own writes, the framework alone) + 10 ms; a missing baseline (``--only``) leaves no
    bound; each of ours is its worst stall. A Chroma server: 25 ms, for the package's own
    share: ``engine``'s worst stall, and in ``graph`` and ``middleware`` the most package
    code held the loop within one stall (the framework's turn around it is a baseline).
    """
    worst = {
        name: results[name]["max_outside_gc_ms"]
        for name in (CHROMA_ALONE, FRAMEWORK)
        if name in results
    }
    bound: float | None
    if server:
        bound, rule = SERVER_BOUND_MS, f"<= {SERVER_BOUND_MS:.0f} ms (Chroma server)"
    elif len(worst) == 2:
        bound = max(worst.values()) + MARGIN_MS
        rule = f"<= the larger baseline + {MARGIN_MS:.0f} ms (embedded Chroma)"
    else:
        bound, rule = None, "no bound: run both baselines (Chroma writes alone, agent alone)"
    ours = {}
    for name in OURS:
        if name not in results:
            continue
        share = server and name != "engine"
        key = "ours_on_loop" if share else "max"
        figure = results[name][f"{key}_outside_gc_ms"]
        measure = "package code on the loop" if share else "worst stall"
        ours[name] = {
            "max_ms": figure,
            "with_gc_ms": results[name][f"{key}_ms"],
            "measure": measure + ", outside GC",
            "whole_turn_max_ms": results[name]["max_ms"],
            "met": None if bound is None else figure <= bound,
        }
    return {"baselines_max_ms": worst, "bound_ms": bound, "rule": rule, "ours": ours}


def print_targets(verdict: dict[str, Any]) -> None:
    """The worst stalls side by side, with each of ours passed or failed."""
    bound = verdict["bound_ms"]
    print(f"\nTarget: ours {verdict['rule']}, every figure outside GC pauses\n")
    print(
        "| worst stall, ms | Chroma writes alone | framework alone | ours | measured as "
        "| with GC pauses | whole turn's worst stall | bound | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    chroma = pc.fmt(verdict["baselines_max_ms"].get(CHROMA_ALONE))
    framework = pc.fmt(verdict["baselines_max_ms"].get(FRAMEWORK))
    for name, cell in verdict["ours"].items():
        met = {True: "yes", False: "**no**", None: "-"}[cell["met"]]
        print(
            f"| {name} | {chroma} | {framework} | **{pc.fmt(cell['max_ms'])}** "
            f"| {cell['measure']} | {pc.fmt(cell['with_gc_ms'])} "
            f"| {pc.fmt(cell['whole_turn_max_ms'])} | {pc.fmt(bound)} | {met} |"
        )


if __name__ == "__main__":
    main()
