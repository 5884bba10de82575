"""Listing what is stored: `threads` and `show`."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    message_json,
    open_storage,
    print_json,
    require_resource,
    require_thread,
    store_options,
    thread_messages,
    thread_titles,
)
from langchain_semantic_recall.cli.render import style, table, when, width


def register(subparsers: Any) -> None:
    """Add the `threads` and `show` subcommands."""
    _register_threads(subparsers)
    _register_show(subparsers)


def _register_threads(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "threads",
        parents=[store_options()],
        help="list conversations (of one resource, or all)",
        description="Every stored conversation: thread id, owner, size, dates and title.",
    )
    parser.add_argument("--resource", metavar="R", help="only the conversations of R")
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
            t.thread_id,
            t.resource_id,
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
    parser.add_argument("thread", metavar="THREAD", help="the thread id")
    parser.add_argument("--json", action="store_true", help="print the messages as JSON")
    parser.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    """`semantic-recall show`: every message of one thread, in order."""
    from langchain_semantic_recall.messages import conversation_title

    with open_storage(args) as storage:
        owner = require_thread(storage, args.thread, None)
        messages = list(thread_messages(storage, args.thread))
    if args.json:
        print_json([message_json(m) for m in messages])
        return EXIT_OK
    title = conversation_title(messages[0]) if messages else None
    header = f"Thread {args.thread} of {owner}" + (f' · "{title}"' if title else "")
    print(style(f"{header} · {len(messages)} message(s)", "bold"))
    for message in messages:
        print()
        print(style(f"{when(message.created_at)}  {message.role}", "cyan"))
        for paragraph in (message.text or "(no text)").splitlines() or [""]:
            print(textwrap.fill(paragraph, width(), initial_indent="  ", subsequent_indent="  "))
    return EXIT_OK
