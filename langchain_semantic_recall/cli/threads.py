"""Listing what is stored, and re-owning it: `threads`, `show` and `move`."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    an_id,
    message_json,
    note_if_open_elsewhere,
    open_memory,
    open_storage,
    print_json,
    require_resource,
    require_thread,
    require_writable,
    store_options,
    thread_messages,
    thread_titles,
)
from langchain_semantic_recall.cli.render import shown_id, shown_text, style, table, when, width
from langchain_semantic_recall.quoting import printable


def register(subparsers: Any) -> None:
    """Add the `threads`, `show` and `move` subcommands."""
    _register_threads(subparsers)
    _register_show(subparsers)
    _register_move(subparsers)


def _register_threads(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "threads",
        parents=[store_options()],
        help="list conversations (of one resource, or all)",
        description="Every stored conversation: thread id, owner, size, dates and title.",
    )
    parser.add_argument("--resource", metavar="R", type=an_id, help="only the conversations of R")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    parser.set_defaults(func=run_threads)


def run_threads(args: argparse.Namespace) -> int:
    """`semantic-recall threads`: every stored conversation, one row each."""
    with open_storage(args) as storage:
        threads = storage.list_threads(args.resource)
        if args.resource is not None and not threads:
            require_resource(storage, args.resource)
        titles = thread_titles(storage, {t.thread_id for t in threads})
    if args.json:
        print_json(
            [
                {
                    "thread": t.thread_id,
                    "resource": t.resource_id,
                    "messages": t.message_count,
                    "first_at": t.first_at.isoformat() if t.first_at else None,
                    "last_at": t.last_at.isoformat() if t.last_at else None,
                    "title": titles.get(t.thread_id),
                }
                for t in threads
            ]
        )
        return EXIT_OK
    if not threads:
        print("No conversations stored yet (load some with 'semantic-recall ingest').")
        return EXIT_OK
    rows = [
        [
            shown_id(t.thread_id),
            shown_id(t.resource_id),
            str(t.message_count),
            when(t.first_at),
            when(t.last_at),
            titles.get(t.thread_id, ""),
        ]
        for t in threads
    ]
    print(table(["thread", "resource", "messages", "first (UTC)", "last (UTC)", "title"], rows))
    return EXIT_OK


def _register_show(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "show",
        parents=[store_options()],
        help="print one conversation, message by message",
        description="Every stored message of THREAD, in order, with times (UTC) and roles.",
    )
    parser.add_argument("thread", metavar="THREAD", type=an_id, help="the thread id")
    parser.add_argument("--json", action="store_true", help="print the messages as JSON")
    parser.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    """`semantic-recall show`: every message of one thread, in order."""
    from langchain_semantic_recall.records import conversation_title

    with open_storage(args) as storage:
        owner = require_thread(storage, args.thread, None)
        messages = list(thread_messages(storage, args.thread))
    if args.json:
        print_json([message_json(m) for m in messages])
        return EXIT_OK
    title = next((t for m in messages if (t := conversation_title(m))), None)
    header = f"Thread {shown_id(args.thread)} of {shown_id(owner)}"
    header += f' · "{" ".join(title.split())}"' if title else ""  # one line, as `threads`
    print(style(printable(f"{header} · {len(messages)} message(s)"), "bold"))
    for message in messages:
        print()
        print(style(f"{when(message.created_at)}  {message.role}", "cyan"))
        text = printable(shown_text(message))  # blank: say what it holds instead
        for paragraph in text.splitlines():
            print(textwrap.fill(paragraph, width(), initial_indent="  ", subsequent_indent="  "))
    return EXIT_OK


# --- move ------------------------------------------------------------------------------


def _register_move(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "move",
        parents=[store_options()],
        help="give a conversation to another resource (messages and vectors)",
        description=(
            "Give thread T to resource R: same thread id, message ids and order; its "
            "messages, keyword index and vectors move, and only R sees it afterwards. "
            "--from refuses a thread that belongs to someone else. If it fails halfway, run "
            "it again (it writes the vectors still missing)."
        ),
        epilog="example:\n  semantic-recall move --thread trip --to alice --from legacy-user",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--thread", metavar="T", type=an_id, required=True, help="the conversation")
    parser.add_argument("--to", metavar="R", type=an_id, required=True, help="its new owner")
    parser.add_argument(
        "--from", dest="owner", metavar="O", type=an_id, help="its current owner (checked)"
    )
    parser.set_defaults(
        func=run_move,
        interrupted="run the same move again: it finishes, writing the vectors still missing",
    )


def run_move(args: argparse.Namespace) -> int:
    """`semantic-recall move`: give a conversation to another resource."""
    require_writable(args, "nothing was moved")
    note_if_open_elsewhere(args, "move")
    memory = open_memory(args)
    found = memory.storage.get_thread_owner(args.thread)
    # Owned by --to already: a move that stopped after the storage moved it, run again.
    owner = require_thread(memory.storage, args.thread, None if found == args.to else args.owner)
    # Moved already (a move that stopped is run again): it writes the vectors missing.
    missing = memory.stats(thread_id=args.thread).missing_vectors if owner == args.to else 0
    try:
        moved = memory.move_thread(args.thread, to=args.to, resource_id=owner)
    except Exception as failure:  # a move that stopped half way: its note names move_thread
        if any("move_thread again" in note for note in getattr(failure, "__notes__", ())):
            failure.add_note("on the command line: run the same 'semantic-recall move' again")
        raise
    if owner == args.to:
        wrote = f"; {missing} missing vector(s) written" if missing else ""
        said = f"Thread {args.thread} already belongs to {args.to}: nothing moved{wrote}."
    else:
        said = f"Moved thread {args.thread} from {owner} to {args.to}: {moved} message(s)."
    print(printable(said))
    if owner != args.to:
        _moved_out_of_other_indexes(args, memory.ensure_index().name, owner)
    return EXIT_OK


def _moved_out_of_other_indexes(args: argparse.Namespace, index_name: str, owner: str) -> None:
    """Delete the moved thread's vectors from the store's other indexes, filed under `owner`.

    Writing them under the new owner needs each index's own embedder: from Python,
    `reindex(missing_only=True)` on that index (its `stats` counts them missing); left
    there, a forget of the old owner would delete them, and that owner's searches read
    them (to drop them, not show them).
    """
    from langchain_semantic_recall.cli.other_indexes import drop_thread_vectors, other_engines

    for name, model, other in other_engines(args, index_name):
        drop_thread_vectors(other, args.thread, owner)
        print(
            printable(
                f"Index {name} ({model}): its vectors of the thread deleted; "
                "reindex(missing_only=True) with that embedder writes them under "
                f"{args.to}."
            )
        )
