"""`semantic-recall export`: a resource's conversations as JSONL, ready for `ingest`."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from langchain_semantic_recall.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    a_path,
    an_id,
    open_storage,
    require_resource,
    require_thread,
    store_options,
    store_path,
    store_urls,
    thread_messages,
)
from langchain_semantic_recall.cli.places import chroma_folder
from langchain_semantic_recall.cli.render import note
from langchain_semantic_recall.errors import UsageError


def register(subparsers: Any) -> None:
    """Add the `export` subcommand."""
    parser = subparsers.add_parser(
        "export",
        parents=[store_options()],
        help="write a resource's conversations as JSONL (our import format)",
        description=(
            "Every stored message of a resource (or of one of its threads), in order, as "
            "our JSONL import format: resource, thread, role, content, id, created_at, "
            "metadata and title, plus the full LangChain message when role and content do "
            "not describe it completely (tool calls and results). 'semantic-recall ingest' "
            "reads it back into any store as the same messages: for portability, backups "
            "and data-subject access requests."
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
        func=run,
        interrupted=(
            "the export stopped part way (an --output file is left as it was): run it again"
        ),
    )


@contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    """Standard output, or a file that is replaced only once the export is complete.

    The export goes to a temporary file beside the target and is renamed into place at
    the end: an interrupted or failed export leaves an earlier file of that name whole.
    """
    if path is None:
        yield sys.stdout
        return
    target = Path(os.path.realpath(Path(path).expanduser()))  # through a link, to its file
    if target.exists() and not target.is_file():  # /dev/null, a pipe: written in place
        with target.open("w", encoding="utf-8") as handle:
            yield handle
        return
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        handle = partial.open("x", encoding="utf-8")
    except OSError as exc:  # named by the file asked for, not by the temporary one
        raise OSError(exc.errno, exc.strerror, path) from exc
    try:
        with handle:
            if target.exists():
                shutil.copymode(target, partial)
            yield handle
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _refuse_store_file(args: argparse.Namespace, output: str) -> None:
    """Refuse an output file that is one of the store's own files (or inside its index).

    Writing it would replace the data the command is reading.

    Raises:
        UsageError: `output` resolves to the store's database, a file SQLite keeps beside
            it, or a path inside its Chroma folder.
    """
    from langchain_semantic_recall.urls import SQLITE_COMPANIONS, sqlite_file

    urls = store_urls(args)
    database: Path | None
    folder: Path | None
    if urls is None:
        root = store_path(args)
        database, folder = root / "messages.sqlite3", root / "chroma"
    else:
        database, folder = sqlite_file(urls[0]), chroma_folder(urls[1])
    target = os.path.realpath(Path(output).expanduser())
    files = [] if database is None else [f"{database}{suffix}" for suffix in SQLITE_COMPANIONS]
    if any(target == os.path.realpath(file) for file in files) or (
        folder is not None and Path(target).is_relative_to(os.path.realpath(folder))
    ):
        raise UsageError(
            f"{output} is a file of the store being read: writing it would destroy the "
            "store. Choose another output file"
        )


def _nothing(storage: Any, args: argparse.Namespace) -> bool:
    """Whether the export would hold no message (a resource emptied by retention).

    Nothing is then written, and the command exits 1: an empty file (or an empty `>`
    redirect) read as a backup made, and once replaced the resource's last backup.
    """
    from langchain_semantic_recall.records import ScopeFilter

    return not storage.count(ScopeFilter(args.resource, args.thread), up_to=1)


def run(args: argparse.Namespace) -> int:
    """`semantic-recall export`: write a resource's messages as our JSONL format."""
    from langchain_semantic_recall.importers import export_lines

    if args.output is not None:
        _refuse_store_file(args, args.output)
    with open_storage(args) as storage:  # messages only: no vector index, no engine
        if args.thread is not None:
            require_thread(storage, args.thread, args.resource)
            thread_ids = [args.thread]
        else:
            require_resource(storage, args.resource)
            thread_ids = [t.thread_id for t in storage.list_threads(args.resource)]
        if _nothing(storage, args):
            where = (
                "standard output got nothing (a `>` redirect has emptied its file already)"
                if args.output is None
                else f"nothing was written to {args.output}"
            )
            note(f"Nothing to export (0 messages in {len(thread_ids)} thread(s)): {where}.")
            return EXIT_ERROR
        count = 0
        with _output(args.output) as output:
            for thread_id in thread_ids:
                for line in export_lines(thread_messages(storage, thread_id)):
                    output.write(line + "\n")
                    count += 1
    if args.output:
        print(f"Wrote {count} message(s) of {len(thread_ids)} thread(s) to {args.output}.")
    return EXIT_OK
