"""Recall latency of the embedded default from 1k to 1M messages, beside the raw parts.

For each store size (``perf_common.SIZES``; synthetic text, precomputed MiniLM-like
vectors, SQLite storage + embedded Chroma, written through our own backends) it prints, in
one run, side by side:

* recall (``SemanticRecall.search``, dense mode, top K, window 1) p50/p95/p99 excluding
  the query embedding (a table lookup) and including it (the real local model, a fresh
  text each time), warm, plus the first query of each resource in a new process (cold);
* the same operation done with the raw parts (one Chroma query on the resource's
  collection, one SQL read of the windows, one ``embed_query``) and ours/raw;
* agreement of our top K with exact brute force within the scope (resource and thread);
* the shipped default (hybrid: keyword + vector) for reference;
* LangGraph's semantic store search (``InMemoryStore`` and ``SqliteStore`` with an index)
  on the same vectors, as the peer;
* forget-thread / forget-resource latency, peak RSS, bytes per message;

then writes ``results/perf_recall.json`` and ``results/perf_recall.png``.

    python benchmarks/perf_recall.py                        # 1k, 10k, 100k (~15 min)
    python benchmarks/perf_recall.py --sizes 1k,10k,100k,1m # plus 1M (~1 h more)
    python benchmarks/perf_recall.py --sizes tiny --queries 10 --runs 1 --out /tmp/x  # smoke
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import perf_common as pc
import perf_recall_phases as phases

SCRIPT = Path(__file__).resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1k,10k,100k", help="comma-separated: tiny,1k,..,1m")
    parser.add_argument("--queries", type=int, default=200, help="queries per run")
    parser.add_argument("--runs", type=int, default=3, help="query runs (fresh processes)")
    parser.add_argument("--k", type=int, default=5, help="top K")
    parser.add_argument("--peers-up-to", default="100k", help="largest size for the peers")
    parser.add_argument("--peer-queries", type=int, default=50)
    parser.add_argument("--out", type=Path, default=pc.RESULTS, help="results folder")
    parser.add_argument("--work", type=Path, default=None, help="store folder (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument(
        "--merge", nargs="+", type=Path, default=None, help="only print and plot these results"
    )
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--size", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is not None:
        phases.run_phase(args)
        return
    if args.merge:
        merged: dict[str, Any] = {"sizes": {}}
        for path in args.merge:
            loaded = json.loads(path.read_text())
            merged["k"] = loaded["k"]
            merged["sizes"].update(loaded["sizes"])
        order = list(pc.SIZES)
        merged["sizes"] = dict(sorted(merged["sizes"].items(), key=lambda i: order.index(i[0])))
        print_tables(merged)
        pc.write_json(args.out / "perf_recall.json", merged)
        plot(merged, args.out / "perf_recall.png")
        return
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    order = list(pc.SIZES)
    peer_limit = order.index(args.peers_up_to)
    work_root = args.work or Path(tempfile.mkdtemp(prefix="perf-recall-"))
    results: dict[str, Any] = {"k": args.k, "sizes": {}}
    try:
        for size in sizes:
            results["sizes"][size] = measure_size(
                size, work_root / size, args, with_peers=order.index(size) <= peer_limit
            )
            print_tables(results)
    finally:
        if not args.keep:
            shutil.rmtree(work_root, ignore_errors=True)
    pc.write_json(args.out / "perf_recall.json", results)
    plot(results, args.out / "perf_recall.png")
    print(f"\nwrote {args.out / 'perf_recall.json'} and {args.out / 'perf_recall.png'}")


def measure_size(size: str, work: Path, args: argparse.Namespace, *, with_peers: bool) -> Any:
    common = ["--size", size, "--work", str(work), "--k", str(args.k)]
    print(f"[{size}] building the store ...", flush=True)
    build = pc.run_child(SCRIPT, ["--phase", "build", *common])
    runs = []
    for run in range(args.runs):
        print(f"[{size}] query run {run + 1}/{args.runs} ...", flush=True)
        extra = ["--queries", str(args.queries), "--run", str(run)]
        runs.append(pc.run_child(SCRIPT, ["--phase", "query", *common, *extra]))
    print(f"[{size}] memory of loaded indexes ...", flush=True)
    memory = pc.run_child(SCRIPT, ["--phase", "memory", *common])
    peers = None
    if with_peers:
        print(f"[{size}] LangGraph peers ...", flush=True)
        extra = ["--queries", str(args.peer_queries)]
        peers = pc.run_child(SCRIPT, ["--phase", "peers", *common, *extra])
    print(f"[{size}] forgetting ...", flush=True)
    forget = pc.run_child(SCRIPT, ["--phase", "forget", *common])
    summary = summarise(runs)
    return {
        "build": build,
        "runs": runs,
        "summary": summary,
        "memory": memory,
        "peers": peers,
        **forget,
    }


# Keys of a query run that get a median and spread over runs.
_LATENCIES = (
    "ours",
    "ours_incl",
    "raw",
    "raw_incl",
    "embed",
    "raw_vector",
    "raw_sql",
    "thread_ours",
    "thread_raw",
    "hybrid",
    "hybrid_keyword",
    "hybrid_vectors",
)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _LATENCIES:
        for stat in ("p50", "p95", "p99"):
            out[f"{key}.{stat}"] = pc.median_spread([r["lat"][key][stat] for r in runs])
    for key in ("agree", "thread_agree", "cold_p50", "cold_max", "rss_mb", "ratio", "ratio_incl"):
        out[key] = pc.median_spread([r[key] for r in runs])
    out["thread_ratio"] = pc.median_spread(
        [r["lat"]["thread_ours"]["p50"] / r["lat"]["thread_raw"]["p50"] for r in runs]
    )
    return out


def print_tables(results: dict[str, Any]) -> None:
    k = results["k"]
    print(f"\n== recall latency, ms (warm; median of runs [min-max]); top {k}, window 1 ==")
    head = f"{'size':>5} | {'p50 excl':>18} | {'p95 excl':>18} | {'p99 excl':>18} | "
    head += f"{'p50 incl':>18} | {'raw p50':>18} | {'raw p95':>18} | {'ours/raw':>16} | "
    head += f"{'incl ratio':>16}"
    print(head)
    for size, data in results["sizes"].items():
        s = data["summary"]
        print(
            f"{size:>5} | {pc.spread(s['ours.p50']):>18} | {pc.spread(s['ours.p95']):>18} | "
            f"{pc.spread(s['ours.p99']):>18} | {pc.spread(s['ours_incl.p50']):>18} | "
            f"{pc.spread(s['raw.p50']):>18} | {pc.spread(s['raw.p95']):>18} | "
            f"{pc.spread(s['ratio']):>16} | "
            f"{pc.spread(s['ratio_incl']):>16}"
        )
    print(f"\n== parts and scopes, ms p50 (median [min-max]); agreement with exact top {k} ==")
    print(
        f"{'size':>5} | {'embed':>16} | {'raw chroma':>16} | {'raw sql':>16} | "
        f"{'agree res':>16} | {'thread ours':>16} | {'thread raw':>16} | {'agree thr':>16} | "
        f"{'hybrid':>16} | {'cold p50':>16}"
    )
    for size, data in results["sizes"].items():
        s = data["summary"]
        print(
            f"{size:>5} | {pc.spread(s['embed.p50']):>16} | {pc.spread(s['raw_vector.p50']):>16}"
            f" | {pc.spread(s['raw_sql.p50']):>16} | {pc.spread(s['agree'], 3):>16} | "
            f"{pc.spread(s['thread_ours.p50']):>16} | {pc.spread(s['thread_raw.p50']):>16} | "
            f"{pc.spread(s['thread_agree'], 3):>16} | {pc.spread(s['hybrid.p50']):>16} | "
            f"{pc.spread(s['cold_p50'], 1):>16}"
        )
    print("\n== the shipped default (hybrid: keyword + vectors, top 10), ms, p50 / p95 ==")
    print(f"{'size':>5} | {'hybrid':>24} | {'keyword search':>24} | {'vector pool of 50':>24}")
    for size, data in results["sizes"].items():
        s = data["summary"]
        cells = [
            f"{pc.spread(s[key + '.p50'])} / {pc.fmt(s[key + '.p95']['median'])}"
            for key in ("hybrid", "hybrid_keyword", "hybrid_vectors")
        ]
        print(f"{size:>5} | {cells[0]:>24} | {cells[1]:>24} | {cells[2]:>24}")
    print("\n== LangGraph semantic store search (peer), same vectors, ms ==")
    print(
        f"{'size':>5} | {'store':>13} | {'res p50':>9} | {'res p95':>9} | {'thr p50':>9} | "
        f"{'agree':>6} | {'put/s':>8} | {'ours p50':>9} | {'peer/ours':>9}"
    )
    for size, data in results["sizes"].items():
        peers = data.get("peers") or {}
        ours = data["summary"]["ours.p50"]["median"]
        for name, peer in peers.items():
            if "error" in peer:
                print(f"{size:>5} | {name:>13} | {peer['error']}")
                continue
            print(
                f"{size:>5} | {name:>13} | {pc.fmt(peer['res']['p50']):>9} | "
                f"{pc.fmt(peer['res']['p95']):>9} | {pc.fmt(peer['thread']['p50']):>9} | "
                f"{pc.fmt(peer['agree'], 3):>6} | {pc.fmt(peer['put_per_s'], 0):>8} | "
                f"{pc.fmt(ours):>9} | {pc.fmt(peer['res']['p50'] / ours, 1):>9}"
            )
    print("\n== store: build, memory, disk, forgetting ==")
    print(
        f"{'size':>5} | {'msgs':>8} | {'build s':>8} | {'vec/s':>7} | {'sql/s':>7} | "
        f"{'B/msg disk':>10} | {'RSS MB':>8} | {'B/msg loaded':>12} | {'forget thr ms':>13} | "
        f"{'vec del thr':>11} | {'forget res ms':>13}"
    )
    for size, data in results["sizes"].items():
        b = data["build"]
        f = data["forget"]
        print(
            f"{size:>5} | {b['messages']:>8} | {pc.fmt(b['seconds'], 1):>8} | "
            f"{pc.fmt(b['vectors_per_s'], 0):>7} | {pc.fmt(b['storage_per_s'], 0):>7} | "
            f"{pc.fmt(b['bytes_per_message'], 0):>10} | "
            f"{pc.spread(data['summary']['rss_mb'], 0):>8} | "
            f"{pc.fmt(data['memory']['bytes_per_loaded_message'], 0):>12} | "
            f"{pc.fmt(f['thread_ms']['p50'], 1):>13} | "
            f"{pc.fmt(f['vector_thread_ms']['p50'], 1):>11} | "
            f"{pc.fmt(f['resource_ms']['p50'], 1):>13}"
        )


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results["sizes"])
    messages = [pc.SIZES[s][0] for s in sizes]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    series = [
        ("ours.p50", "ours, p50 (excl. embedding)", "o-"),
        ("ours.p95", "ours, p95 (excl. embedding)", "o--"),
        ("ours_incl.p50", "ours, p50 (incl. embedding)", "s-"),
        ("raw.p50", "raw parts, p50 (excl.)", "x:"),
    ]
    for key, label, style in series:
        values = [results["sizes"][s]["summary"][key]["median"] for s in sizes]
        ax.plot(messages, values, style, label=label)
    for peer in ("InMemoryStore", "SqliteStore"):
        points = [
            (n, results["sizes"][s]["peers"][peer]["res"]["p50"])
            for s, n in zip(sizes, messages, strict=True)
            if (results["sizes"][s].get("peers") or {}).get(peer, {}).get("res")
        ]
        if points:
            ax.plot(*zip(*points, strict=True), "^-.", label=f"LangGraph {peer}, p50")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("stored messages")
    ax.set_ylabel("recall latency, ms")
    ax.set_title("Recall latency against store size (resource scope, warm)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
