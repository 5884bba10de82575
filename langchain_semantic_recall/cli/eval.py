"""`semantic-recall eval`: measure recall on conversations with evidence labels.

`eval locomo PATH` reads LoCoMo; `eval jsonl PATH` reads our own JSONL format
(see `langchain_semantic_recall.evaluation`); `eval paraphrase DIR` reads the paraphrase
set (`langchain_semantic_recall.eval_paraphrase`). All load the conversations into a
fresh embedded store with `index` (or reuse `--store DIR`, `cli.eval_store`; the dataset
is read and checked against the options first, `cli.eval_input`) and answer
every question with the same `search` that recall uses, with the package defaults unless
options say otherwise. The defaults `--help` prints are read from the engine
(`evaluation.engine_defaults`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli import common
from langchain_semantic_recall.cli.common import NotFoundError, a_path, verbose_option
from langchain_semantic_recall.cli.render import style, table

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.search import SearchPlan

FORMATS = ("locomo", "jsonl", "paraphrase")
_MODES = ("hybrid", "keyword", "dense")


def _budget(value: str) -> int | None:
    """A number of messages (1 or more), or `none` for whole windows, as `search` takes."""
    if value.lower() == "none":
        return None
    try:
        budget = int(value)
    except ValueError:
        budget = 0
    if budget < 1:
        raise argparse.ArgumentTypeError(
            f"expected a number of messages (1 or more) or 'none' (whole windows), got {value!r}"
        )
    return budget


def _by_mode(read: Callable[[SearchPlan], object]) -> str:
    """`read` of each mode's defaults, as `--help` prints them: "hybrid 12, ..., dense 4"."""
    from langchain_semantic_recall.evaluation import engine_defaults

    shown = []
    for mode in _MODES:
        value = read(engine_defaults(mode))
        shown.append(f"{mode} {'none' if value is None else value}")
    return ", ".join(shown)


HELP = "measure recall on a dataset with evidence labels (LoCoMo, our JSONL, paraphrase)"


def register(subparsers: Any, *, detailed: bool = True) -> None:
    """Add the `eval` subcommand (only its name and help line unless `detailed`)."""
    if not detailed:
        subparsers.add_parser("eval", help=HELP, parents=[verbose_option()])
        return
    from langchain_semantic_recall.eval_paraphrase import BUSY_MESSAGES
    from langchain_semantic_recall.evaluation import default_threshold, engine_defaults
    from langchain_semantic_recall.options import DEFAULT_SCOPE, DEFAULT_SEARCH_MODE

    hybrid, dense_threshold = engine_defaults("hybrid"), engine_defaults("dense").threshold
    fitted = default_threshold()
    hybrid_threshold = (
        "none: the evidence decides how many; 0 turns silence off" if fitted is None else fitted
    )
    parser = subparsers.add_parser(
        "eval",
        help=HELP,
        parents=[verbose_option()],
        description=(
            "Loads the conversations into a fresh embedded store (SQLite + embedded Chroma +\n"
            "the local model) with the engine's own index, asks every question with the same\n"
            "search recall uses, and prints per category and overall: recall (share of\n"
            "evidence messages returned), hit_all, hit_any, messages returned per question and\n"
            "search latency (query embedding included). Options left out take the package\n"
            "defaults. The global --path, --storage and --vector are refused (eval never\n"
            "reads or writes a store of yours): the store is temporary unless --store."
        ),
        epilog=(
            "JSONL format: the ingest format (one message a line, with an 'id' on every\n"
            "message a question cites) plus one line per question, such as\n"
            '  {"question": "When do we land?", "resource": "alice", "evidence": ["m1"],\n'
            '   "category": "temporal"}\n'
            "and any number of probe lines, turns nothing stored answers, each asked of\n"
            "every resource (or of its 'resource') and reported per 'kind' like --small-talk:\n"
            '  {"probe": "thanks!", "kind": "small talk"}\n'
            '  {"probe": "How do black holes form?", "kind": "off-topic"}\n'
            "LoCoMo: conversation = resource, session = thread, speaker A = user, speaker B =\n"
            "assistant; categories 1-4 (5 with --include-adversarial).\n"
            "paraphrase DIR: paraphrase_dev.jsonl (each persona a resource, each fact + reply\n"
            "a conversation, each question asked in a new one; found = an answer term in the\n"
            "returned text), smalltalk_dev.jsonl and offtopic_dev.jsonl (probes of every\n"
            "persona); --busy LOCOMO_JSON adds unrelated LoCoMo sessions to each persona.\n"
            "--store DIR keeps the store and a manifest; a later run with the same dataset,\n"
            "embedder and package version reuses it without embedding again. See\n"
            "docs/quality.md."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("format", choices=FORMATS, help="dataset format")
    parser.add_argument(
        "dataset",
        metavar="PATH",
        type=a_path,
        help="the dataset file (paraphrase: the set's folder)",
    )
    # The store's options, after the command too, to be refused in words (`run`), not as
    # unrecognized arguments: every other command takes them there.
    hidden = {"default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
    parser.add_argument("--path", type=a_path, **hidden)
    for flag, dest in (("--storage", "storage_url"), ("--vector", "vector_url")):
        parser.add_argument(flag, dest=dest, **hidden)
    parser.add_argument("--index-name", **hidden)
    engine = parser.add_argument_group("engine options (default: the package defaults)")
    engine.add_argument(
        "--search-mode",
        choices=("auto", "hybrid", "dense", "keyword"),
        help="'dense' is the original processor: vectors only, with its defaults "
        f"(default: {DEFAULT_SEARCH_MODE}, which is hybrid on this store)",
    )
    engine.add_argument(
        "--top-k", type=int, help=f"hits per question (default: {_by_mode(lambda p: p.top_k)})"
    )
    engine.add_argument(
        "--before",
        type=int,
        help="messages fetched before each hit "
        f"(default: {_by_mode(lambda p: p.message_range.before)})",
    )
    engine.add_argument(
        "--after",
        type=int,
        help="messages fetched after each hit "
        f"(default: {_by_mode(lambda p: p.message_range.after)})",
    )
    engine.add_argument(
        "--message-budget",
        type=_budget,
        default=argparse.SUPPRESS,
        metavar="N|none",
        help="most messages returned per question ('none': whole windows) "
        f"(default: {_by_mode(lambda p: p.message_budget)})",
    )
    engine.add_argument(
        "--time-boost",
        type=float,
        help="time-aware ranking for questions naming a period: added to keyword mode's "
        f"scores; in hybrid mode any value but 0 turns it on (default: {hybrid.time_boost})",
    )
    engine.add_argument(
        "--scope",
        choices=("resource", "thread"),
        default=DEFAULT_SCOPE,
        help="LoCoMo: 'thread' makes each conversation one thread, asked inside it "
        f"(default: {DEFAULT_SCOPE})",
    )
    engine.add_argument(
        "--threshold",
        type=float,
        help=f"minimum score: calibrated relevance in hybrid mode (default: {hybrid_threshold}"
        f"), cosine similarity in dense mode (default: {dense_threshold or 'none'}); "
        "keyword mode takes none",
    )
    probes = parser.add_argument_group("false memories and folds")
    probes.add_argument(
        "--foreign",
        action="store_true",
        help="also ask each conversation's questions of another resource (nothing there is "
        "evidence): messages returned per question and share with any; needs questions "
        "of two resources or more",
    )
    probes.add_argument(
        "--small-talk",
        action="store_true",
        help="also ask built-in small-talk turns ('hi', 'thanks', 'ok', ...) of every resource "
        "that has questions",
    )
    probes.add_argument(
        "--probes",
        metavar="PATH",
        type=a_path,
        help="also ask these probe lines of every resource that holds messages: a JSONL "
        'file of {"probe", "kind"} lines, or the paraphrase set\'s folder (its '
        "small-talk and off-topic files, as docs/quality.md asks them of every set)",
    )
    probes.add_argument(
        "--folds", action="store_true", help="also report recall per conversation (resource)"
    )
    parser.add_argument(
        "--include-adversarial", action="store_true", help="LoCoMo: also category 5"
    )
    parser.add_argument(
        "--busy",
        metavar="LOCOMO_JSON",
        type=a_path,
        help=f"paraphrase: add at least {BUSY_MESSAGES} messages of LoCoMo sessions to each "
        "persona's resource (of n personas, persona i takes sessions i, i+n, i+2n, ...: "
        "the busy store of benchmarks/quality_relevance.py)",
    )
    parser.add_argument(
        "--json-out", metavar="FILE", type=a_path, help="write settings, summary, questions"
    )
    parser.add_argument(
        "--store",
        metavar="DIR",
        type=a_path,
        help="load into DIR and keep it; a later run with the same dataset and embedder "
        "reuses it (no loading, no embedding), another dataset is refused",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (none unless on a terminal)"
    )
    parser.set_defaults(func=run)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_semantic_recall.options import (
        DEFAULT_MESSAGE_RANGE,
        HYBRID_MESSAGE_RANGE,
        KEYWORD_MESSAGE_RANGE,
        to_message_range,
    )

    options: dict[str, Any] = {
        "scope": args.scope,
        "message_budget": getattr(args, "message_budget", "auto"),
    }
    for name in ("search_mode", "top_k", "time_boost", "threshold"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    if args.before is not None or args.after is not None:  # the other side: mode default
        mode = options.get("search_mode", "hybrid")  # the local store searches keywords
        default = {
            "dense": to_message_range(DEFAULT_MESSAGE_RANGE),
            "keyword": KEYWORD_MESSAGE_RANGE,
        }.get(mode, HYBRID_MESSAGE_RANGE)
        options["message_range"] = (
            default.before if args.before is None else args.before,
            default.after if args.after is None else args.after,
        )
    return options


def _settings(memory: Any, args: argparse.Namespace, dataset_path: Path) -> dict[str, Any]:
    from langchain_semantic_recall import __version__
    from langchain_semantic_recall.embeddings import embedding_model_name

    return {
        "format": args.format,
        "dataset": str(dataset_path),
        "busy": args.busy,
        "include_adversarial": bool(args.include_adversarial),
        "search_mode": memory.search_mode,
        "top_k": memory.top_k,
        "before": memory.message_range.before,
        "after": memory.message_range.after,
        "message_budget": memory.message_budget,
        "time_boost": memory.time_boost if memory.search_mode != "dense" else None,
        "scope": memory.scope,
        "threshold": memory.threshold,
        "embeddings": embedding_model_name(memory.embeddings),
        "version": __version__,
    }


def _fmt(value: float | int, kind: str) -> str:
    if kind == "ms":
        return f"{value:.1f}"
    if kind == "n":
        return f"{value:.1f}"
    return f"{value:.3f}"


def render_summary(summary: dict[str, Any]) -> str:
    """The summary as a table: one row per category, then overall."""
    found = "found" in summary["overall"]  # questions with answer terms (paraphrase)
    headers = [
        "category",
        "questions",
        *(["found"] if found else []),
        "recall",
        "hit_all",
        "hit_any",
        "msgs/q",
        "p50 ms",
        "p95 ms",
    ]
    rows = []
    named = [*_categories(summary["by_category"]), ("overall", summary["overall"])]
    for name, scores in named:
        if not scores.get("questions"):
            continue
        rows.append(
            [
                name,
                str(scores["questions"]),
                *([_fmt(scores.get("found", 0.0), "r")] if found else []),
                _fmt(scores["recall"], "r"),
                _fmt(scores["hit_all"], "r"),
                _fmt(scores["hit_any"], "r"),
                _fmt(scores["messages_per_query"], "n"),
                _fmt(scores["latency_p50_ms"], "ms"),
                _fmt(scores["latency_p95_ms"], "ms"),
            ]
        )
    return table(headers, rows)


def _summary(results: Any, probes: dict[str, Any], dataset: Any, args: Any) -> dict[str, Any]:
    from langchain_semantic_recall import evaluation

    summary = evaluation.summarize(results)
    summary["evidence"] = evaluation.evidence_summary(dataset.evidence)
    if args.folds:
        summary["by_resource"] = {
            name: evaluation.summarize([r for r in results if r.sample_id == name])["overall"]
            for name in sorted({r.sample_id for r in results})
        }
    if probes:
        summary["false_memories"] = probes
    return summary


def _probes(memory: Any, dataset: Any, args: argparse.Namespace) -> dict[str, Any]:
    from langchain_semantic_recall import false_memory

    found: list[false_memory.Probe] = []
    if args.foreign:
        found += false_memory.probe(memory, "foreign", false_memory.foreign_questions(dataset))
    if args.small_talk:
        questions = false_memory.small_talk_questions(dataset)
        found += false_memory.probe(memory, "small talk", questions)
    for kind, asked in false_memory.dataset_probes(dataset).items():
        found += false_memory.probe(memory, kind, asked)
    return false_memory.summarize_probes(found)


def _fold_table(by_resource: dict[str, Any]) -> str:
    rows = [
        [name, str(s["questions"]), _fmt(s["recall"], "r"), _fmt(s["messages_per_query"], "n")]
        for name, s in by_resource.items()
    ]
    return "per conversation (fold):\n" + table(["resource", "questions", "recall", "msgs/q"], rows)


def _categories(by_category: dict[str, Any]) -> list[tuple[str, Any]]:
    """The categories' rows, a dataset's own "overall" told apart from the total's."""
    return [
        (f"{name} (category)" if name == "overall" else name, scores)
        for name, scores in by_category.items()
    ]


def _probe_table(kind: str, report: dict[str, Any]) -> str:
    named = [
        *_categories(report["by_category"]),
        *((f"asked of {r}", s) for r, s in report["by_resource"].items()),
        ("overall", report["overall"]),
    ]
    rows = [
        [name, str(s["questions"]), _fmt(s["messages_per_query"], "n"), _fmt(s["any"], "r")]
        for name, s in named
    ]
    title = f"false memories, {kind} (nothing stored is relevant):\n"
    return title + table(["category", "questions", "msgs/q", "share with any"], rows)


def _load(
    memory: SemanticRecall,
    dataset: Any,
    args: argparse.Namespace,
    path: Path,
    manifest: dict[str, Any] | None,
    *,
    progress: bool,
) -> float | None:
    """`eval_store.load_or_reuse`, saying how to finish if a `--store` load is stopped."""
    from langchain_semantic_recall.cli import eval_store

    if args.store:  # cli's `_next_step` reads it
        args.interrupted = (
            f"if the load into --store {args.store} did not finish, the next run refuses "
            "it: delete the folder (or give another) and run again"
        )
    loaded: float | None = eval_store.load_or_reuse(
        memory,
        dataset,
        Path(args.store) if args.store else None,
        manifest,
        source={
            "dataset": str(path),
            "format": args.format,
            "busy": args.busy,
            "scope": args.scope,
        },
        progress=progress,
    )
    args.interrupted = None  # loaded (or reused): a stop from here leaves it whole
    return loaded


def _header(questions: int, settings: dict[str, Any]) -> str:
    """The run's settings, each one that changes the scores (as `search` heads its hits)."""
    budget = settings["message_budget"]
    parts = [
        f"\n{questions} questions",
        f"{settings['search_mode']} search",
        f"top {settings['top_k']}",
        f"window {settings['before']} before / {settings['after']} after",
        f"budget {budget if budget is not None else 'none'}",
        f"scope {settings['scope']}",
    ]
    if settings["threshold"] is not None:
        parts.append(f"threshold {settings['threshold']}")
    if settings["time_boost"] is not None:
        parts.append(f"time boost {settings['time_boost']}")
    return " · ".join(parts)


def _evidence_line(report: Any) -> str:
    return (
        f"evidence ids: {report.normalised} normalised, {report.split} split, "
        f"{report.unknown_dropped} dropped (no message of its resource), "
        f"{report.unparseable_dropped} "
        f"dropped (not an id); {report.questions_without_evidence} question(s) without "
        "evidence skipped"
    )


def run(args: argparse.Namespace) -> int:
    """`semantic-recall eval`: load a labelled dataset, ask its questions, print scores."""
    from langchain_semantic_recall import evaluation
    from langchain_semantic_recall.cli import eval_input, eval_store
    from langchain_semantic_recall.recall import SemanticRecall

    eval_input.refuse_a_store(args)
    path = Path(args.dataset)
    dataset, busy = eval_input.read(args, path)
    if args.probes:
        if not Path(args.probes).exists():
            raise NotFoundError(f"no probe file or folder {args.probes} (--probes)")
        asked = set(dataset.probes)  # the paraphrase set's own lines are not asked twice
        more = evaluation.read_probes(args.probes, dataset.resources)
        dataset.probes.extend(p for p in more if p not in asked)
    eval_input.check(args, dataset, path)
    options = _options(args)
    progress = not args.no_progress and sys.stderr.isatty()  # a log file gets no bar redraws
    manifest = eval_store.read_manifest(Path(args.store)) if args.store else None
    with tempfile.TemporaryDirectory(prefix="semantic-recall-eval-") as scratch:
        store = Path(args.store) if args.store else Path(scratch)
        memory = SemanticRecall.local(store, embeddings=common.create_embeddings(), **options)
        try:
            if busy:
                print(busy)
            loaded = _load(memory, dataset, args, path, manifest, progress=progress)
            results = evaluation.evaluate(memory, dataset, progress=progress)
            probes = _probes(memory, dataset, args)
            settings = _settings(memory, args, path)
        finally:
            memory.storage.close()
            memory.vector_store.close()
    summary = _summary(results, probes, dataset, args)
    summary["load_seconds"] = None if loaded is None else round(loaded, 2)
    print(style(_header(len(results), settings), "bold"))
    print(render_summary(summary) if results else "no question to score: probe lines only")
    if args.folds:
        print(_fold_table(summary["by_resource"]))
    for kind, report in probes.items():
        print(_probe_table(kind, report))
    print(_evidence_line(dataset.evidence))
    when = "reused the stored messages" if loaded is None else f"loaded in {loaded:.1f} s"
    print(f"{when}; latency = one search, query embedding included")
    if args.json_out:
        out = {
            "settings": settings,
            "summary": summary,
            "questions": evaluation.question_rows(results),
        }
        Path(args.json_out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0
