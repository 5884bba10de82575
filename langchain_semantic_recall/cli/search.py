"""Looking for memories: `search` (the hits) and `inspect` (what the model is given)."""

from __future__ import annotations

import argparse
import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    UsageError,
    an_id,
    message_json,
    open_memory,
    print_json,
    require_resource,
    require_thread,
    store_options,
    thread_messages,
    thread_titles,
)
from langchain_semantic_recall.cli.narrowing import (
    add_narrowing_arguments,
    describe_narrowing,
    narrowing_options,
)
from langchain_semantic_recall.cli.render import (
    rule,
    shorten,
    shown_text,
    style,
    table,
    when,
    width,
)
from langchain_semantic_recall.quoting import printable

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import RecallHit, StoredMessage


def register(subparsers: Any) -> None:
    """Add the `search` and `inspect` subcommands."""
    _register_search(subparsers)
    _register_inspect(subparsers)


# --- shared options ----------------------------------------------------------------------


def _window(value: str) -> int | tuple[int, int]:
    """`N` (N before and after) or `B,A`."""
    try:
        parts = [int(p) for p in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or BEFORE,AFTER, got {value!r}") from None
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return (parts[0], parts[1])
    raise argparse.ArgumentTypeError(f"expected N or BEFORE,AFTER, got {value!r}")


def _score(value: str) -> float:
    """A score between 0 and 1 (`--threshold`)."""
    try:
        score = float(value)
    except ValueError:
        score = math.nan
    if not 0.0 <= score <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a score between 0 and 1, got {value!r}")
    return score


def _budget(value: str) -> int | str:
    """A number of messages, or `none` for whole windows."""
    if value.lower() == "none":
        return "none"
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {value!r}") from None


def _recall_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("recall options (default: the engine's defaults)")
    group.add_argument(
        "--search-mode",
        choices=("auto", "hybrid", "dense", "keyword"),
        help="hybrid (keywords + vectors), dense (vectors only: the original), keyword",
    )
    group.add_argument("--top-k", type=int, metavar="K", help="most similar messages to find")
    group.add_argument(
        "--range",
        type=_window,
        metavar="N|B,A",
        dest="message_range",
        help="neighbours fetched around each hit: N before and after, or B before, A after",
    )
    group.add_argument(
        "--message-budget",
        type=_budget,
        metavar="N|none",
        help="most messages all windows together return; none: whole windows",
    )
    group.add_argument(
        "--threshold",
        type=_score,
        metavar="S",
        help=(
            "keep messages scoring S or more (0-1) instead of letting the evidence decide "
            "how many (hybrid): 0 turns silence off, so weak matches come back too; dense: "
            "a minimum cosine similarity; keyword mode refuses it"
        ),
    )
    add_narrowing_arguments(
        parent.add_argument_group("only some messages (metadata and creation time)")
    )
    return parent


_RECALL_OPTIONS = ("search_mode", "top_k", "message_range", "message_budget", "threshold")


def _options(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    chosen = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if chosen.get("search_mode") == "keyword" and "threshold" in chosen:
        raise UsageError(
            "--threshold means nothing with --search-mode keyword (its scores are relative "
            "to the query's best match): drop it, or use --search-mode hybrid or dense"
        )
    if chosen.get("message_budget") == "none":
        chosen["message_budget"] = None
    return chosen


def _settings(memory: SemanticRecall) -> dict[str, Any]:
    window = memory.message_range
    return {
        "search_mode": memory.search_mode,
        "top_k": memory.top_k,
        "window": {"before": window.before, "after": window.after},
        "message_budget": memory.message_budget,
        "threshold": memory.threshold,
    }


def _describe(memory: SemanticRecall, narrowing: dict[str, Any]) -> str:
    window = memory.message_range
    parts = [
        f"{getattr(memory, 'search_mode', 'dense')} search",
        f"top {memory.top_k}",
        f"window {window.before} before / {window.after} after",
    ]
    budget = getattr(memory, "message_budget", None)
    if budget is not None:
        parts.append(f"budget {budget} messages")
    threshold = getattr(memory, "threshold", None)
    if threshold is not None:
        parts.append(f"threshold {threshold:g}")
    return ", ".join([*parts, *describe_narrowing(narrowing)])


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _label(thread_id: str, titles: dict[str, str]) -> str:
    title = titles.get(thread_id)
    return f'"{title}" ({thread_id})' if title else thread_id


def _line(message: StoredMessage, marker: str, indent: str) -> str:
    head = f"{indent}{marker} {when(message.created_at)}  {message.role:<9}  "
    return head + shorten(shown_text(message), max(20, width() - len(head)))


# --- search ------------------------------------------------------------------------------


def _register_search(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "search",
        parents=[store_options(), _recall_options()],
        help="find past messages similar to a query, with scores and context",
        description=(
            "The hits recall would use for QUERY: similarity score, the conversation, and "
            "each hit's context window (the hit is marked with >). Searches every "
            "conversation of --resource, or only --thread."
        ),
        epilog=(
            "examples:\n"
            '  semantic-recall search "peanut allergy" --resource alice\n'
            '  semantic-recall search "hotel" --resource alice --thread trip --json\n'
            '  semantic-recall search "launch" --resource alice --filter project=apollo '
            "--since 30d"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("query", metavar="QUERY", help="what to look for")
    parser.add_argument(
        "--resource", metavar="R", type=an_id, help="search every conversation of R"
    )
    parser.add_argument("--thread", metavar="T", type=an_id, help="search only conversation T")
    parser.add_argument("--json", action="store_true", help="print the hits as JSON")
    parser.set_defaults(func=run_search)


def _print_hits(hits: list[RecallHit], titles: dict[str, str]) -> None:
    for rank, hit in enumerate(hits, start=1):
        score = style(f"{hit.score:.2f}", "green")
        label = style(_label(hit.thread_id, titles), "cyan")
        print(f"#{rank}  score {score}  conversation {label}")
        previous: int | None = None
        for message in hit.window:
            if previous is not None and message.seq > previous + 1:  # a window keeps its
                left = message.seq - previous - 1  # likeliest messages: it can have gaps
                print(style(f"     ... {left} message(s) of the conversation left out", "dim"))
            previous = message.seq
            mark = ">" if message.id == hit.message.id else " "
            line = _line(message, mark, "   ")
            print(style(line, "bold") if mark == ">" else line)
        print()


def run_search(args: argparse.Namespace) -> int:
    """`semantic-recall search`: the hits for a query, with their windows."""
    if args.resource is None and args.thread is None:
        raise UsageError("pass --resource R (every conversation of R) or --thread T (one)")
    if not args.query.strip():  # e.g. an unset shell variable: no hit could ever match it
        raise UsageError("QUERY is empty: give the words to look for")
    narrowing = narrowing_options(args)
    options = _options(args, *_RECALL_OPTIONS)
    if args.thread is not None:
        options["scope"] = "thread"
    memory = open_memory(args, read_only=True, **options)
    resource = args.resource
    if args.thread is not None:
        resource = require_thread(memory.storage, args.thread, args.resource)
    else:
        require_resource(memory.storage, resource)
    hits = memory.search(args.query, thread_id=args.thread, resource_id=resource, **narrowing)
    titles = thread_titles(memory.storage, {m.thread_id for h in hits for m in h.window})
    where = f"conversation {args.thread}" if args.thread else f"every conversation of {resource}"
    if args.json:
        print_json(
            {
                "query": args.query,
                "resource": resource,
                "thread": args.thread,
                "filter": narrowing.get("filter"),
                "since": _iso(narrowing.get("since")),
                "until": _iso(narrowing.get("until")),
                "hits": [
                    {
                        "rank": rank,
                        "score": round(hit.score, 4),
                        "thread": hit.thread_id,
                        "title": titles.get(hit.thread_id),
                        "message": message_json(hit.message),
                        "window": [message_json(m) for m in hit.window],
                    }
                    for rank, hit in enumerate(hits, start=1)
                ],
                "settings": _settings(memory),  # the text's summary line, as JSON
            }
        )
        return EXIT_OK
    asked = shorten(args.query, 200)  # a pasted page is searched, not echoed whole
    print(style(f'{len(hits)} hit(s) for "{asked}" in {where}', "bold"), end="")
    print(f" ({_describe(memory, narrowing)})\n")
    _print_hits(hits, titles)
    if not hits and memory.search_mode == "hybrid" and memory.threshold is None:
        held = memory.with_options(threshold=0).search(  # silence by the rule, or nothing?
            args.query, thread_id=args.thread, resource_id=resource, **narrowing
        )
        if held:
            print(
                f"{len(held)} candidate(s) held back: none was strong enough evidence, and "
                "search stays silent when nothing looks relevant (docs/quality.md). "
                "--threshold 0 lists them."
            )
    return EXIT_OK


# --- inspect -----------------------------------------------------------------------------


def _register_inspect(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "inspect",
        parents=[store_options(), _recall_options()],
        help="show exactly what recall would inject before the model sees MESSAGE",
        description=(
            "Runs recall for MESSAGE as the next user turn of thread --thread (new or "
            "existing) and prints the hits that explain it, then every message the model "
            "would be given, verbatim, in order."
        ),
        epilog=(
            "example:\n"
            '  semantic-recall inspect --resource alice --thread new-chat "any snack ideas?"'
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("message", metavar="MESSAGE", help="the user's next message")
    parser.add_argument(
        "--thread", metavar="T", type=an_id, required=True, help="the conversation it is sent in"
    )
    parser.add_argument(
        "--resource",
        metavar="R",
        type=an_id,
        help="whose conversation (default: the thread's owner)",
    )
    parser.add_argument(
        "--scope",
        choices=("thread", "resource"),
        help="search only --thread, or every conversation of the resource (default: resource)",
    )
    parser.add_argument(
        "--max-block-chars",
        type=int,
        metavar="N",
        help="bound on everything recall injects (default 16000)",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="N",
        help="treat the thread's last N stored messages as the live conversation "
        "(the agent already has them, so recall leaves them out); default 0",
    )
    parser.add_argument("--json", action="store_true", help="print the messages as JSON")
    parser.set_defaults(func=run_inspect)


def _print_model_view(result: list[BaseMessage], live_ids: set[str | None]) -> None:
    from langchain_semantic_recall.messages import is_recalled

    injected = sum(1 for m in result if is_recalled(m))
    print(
        style(f"What the model is given: {len(result)} message(s), {injected} ", "bold")
        + style("injected by recall (source: memory)", "bold")
    )
    for n, message in enumerate(result, start=1):
        if is_recalled(message):
            origin = style("source: memory", "magenta")
        elif message.id in live_ids:
            origin = "live conversation"
        else:
            origin = "this turn"
        print()
        print(style(rule(f"{n} · {message.type} · {origin}"), "dim"))
        print(printable(message.text) or "(no text)")


def run_inspect(args: argparse.Namespace) -> int:
    """`semantic-recall inspect`: what recall would give the model for a message."""
    from langchain_core.messages import HumanMessage, message_to_dict

    if args.history < 0:
        raise UsageError("--history must be 0 or more")
    narrowing = narrowing_options(args)
    options = _options(args, *_RECALL_OPTIONS, "scope", "max_block_chars")
    memory = open_memory(args, read_only=True, **options)
    owner = memory.storage.get_thread_owner(args.thread)
    resource = args.resource or owner
    if resource is None:
        raise UsageError(f"thread {args.thread!r} is new: pass --resource (whose is it?)")
    if owner is not None:  # another resource's thread is not found, as `search` says
        require_thread(memory.storage, args.thread, resource)
    stored = list(thread_messages(memory.storage, args.thread)) if args.history else []
    live = [m.to_message() for m in stored[-args.history :]] if args.history else []
    question = HumanMessage(args.message, id="semantic-recall-inspect")
    hits = memory.search(args.message, thread_id=args.thread, resource_id=resource, **narrowing)
    result = memory.recall(
        [*live, question], thread_id=args.thread, resource_id=resource, **narrowing
    )
    if args.json:
        print_json([message_to_dict(m) for m in result])
        return EXIT_OK
    print(
        style(f"Recall in thread {args.thread} of {resource}", "bold"),
        f"({memory.scope} scope, {_describe(memory, narrowing)})",
    )
    _note_unfitted(memory)
    titles = thread_titles(memory.storage, {h.thread_id for h in hits})
    print(style("\nHits (why these messages are recalled):", "bold"))
    rows = [
        [
            f"{hit.score:.2f}",
            shorten(titles.get(hit.thread_id, hit.thread_id), 30),
            hit.message.role,
            hit.message.text,
        ]
        for hit in hits
    ]
    print(table(["score", "conversation", "role", "text"], rows, indent="  "))
    if not hits:
        print("  (none: the model gets the input unchanged)")
    print()
    _print_model_view(result, {m.id for m in live})
    return EXIT_OK


def _note_unfitted(memory: Any) -> None:
    """Say when hybrid search's numbers were not fitted for this store's embedder."""
    plan = memory.search_plan
    if not plan.calibrated:
        return
    info = memory.ensure_index()
    note = plan.relevance.unfitted_note(info.model, info.dimension)
    if note is not None:
        print(style(f"note: hybrid search's relevance model is {note}", "yellow"))
