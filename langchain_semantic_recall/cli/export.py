"""`semantic-recall export`: a resource's conversations as JSONL, ready for `ingest`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    a_path,
    an_id,
    open_storage,
    require_resource,
    require_thread,
    store_options,
    thread_messages,
)


def register(subparsers: Any) -> None:
    """Add the `export` subcommand."""
    parser = subparsers.add_parser(
        "export",
        parents=[store_options()],
        help="write a resource's conversations as JSONL (our import format)",
        description=(
            "Every stored message of a resource (or of one of its threads), in order, as "
            "our JSONL import format: resource, thread, role, content, id, created_at and "
            "title, plus the full LangChain message when role and content do not describe "
            "it completely (tool calls and results). 'semantic-recall ingest' reads it back "
            "into any store as the same messages: for portability, backups and data-subject "
            "access requests."
        ),
        epilog=(
            "examples:\n"
            "  semantic-recall export --resource alice > alice.jsonl\n"
            "  semantic-recall export --resource alice --output alice.jsonl"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--resource", metavar="R", type=an_id, required=True, help="whose data to export"
    )
    parser.add_argument(
        "--thread", metavar="T", type=an_id, help="only conversation T of the resource"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=a_path,
        help="write to FILE (default: standard output)",
    )
    parser.set_defaults(
        func=run, interrupted="the output holds part of the export only: run it again"
    )


@contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    with Path(path).open("w", encoding="utf-8") as handle:
        yield handle


def run(args: argparse.Namespace) -> int:
    """`semantic-recall export`: write a resource's messages as our JSONL format."""
    from langchain_semantic_recall.importers import export_lines

    with open_storage(args) as storage:  # messages only: no vector index, no engine
        if args.thread is not None:
            require_thread(storage, args.thread, args.resource)
            thread_ids = [args.thread]
        else:
            require_resource(storage, args.resource)
            thread_ids = [t.thread_id for t in storage.list_threads(args.resource)]
        count = 0
        with _output(args.output) as output:
            for thread_id in thread_ids:
                for line in export_lines(thread_messages(storage, thread_id)):
                    output.write(line + "\n")
                    count += 1
    if args.output:
        print(f"Wrote {count} message(s) of {len(thread_ids)} thread(s) to {args.output}.")
    return EXIT_OK
