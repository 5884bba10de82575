"""`semantic-recall purge`: erase on disk what forgotten conversations left behind."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    CommandError,
    open_memory,
    require_writable,
    store_label,
    store_options,
    store_path,
    store_urls,
)
from langchain_semantic_recall.cli.places import disk_usage
from langchain_semantic_recall.cli.render import human_bytes, style

if TYPE_CHECKING:
    from langchain_semantic_recall.records import CompactResult


def register(subparsers: Any) -> None:
    """Add the `purge` subcommand."""
    parser = subparsers.add_parser(
        "purge",
        parents=[store_options()],
        help="erase on disk what forgotten conversations left (run after forget)",
        description=(
            "After 'forget', erase the bytes the forgotten messages left in the store's "
            "files: SQLite's free pages, keyword index and write-ahead log; Chroma's "
            "collections (rebuilt from the vectors that remain), the folders of dropped "
            "collections and Chroma's log. Every other message and vector is kept. Needs "
            "the store to itself: stop the processes using it first (a local store in use "
            "is refused). What each backend guarantees: docs/data-handling.md."
        ),
        epilog="example:\n  semantic-recall forget --resource alice --yes && semantic-recall purge",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(
        func=run_purge,
        interrupted="run it again: the next purge (or open) finishes or undoes the step it was in",
    )


def run_purge(args: argparse.Namespace) -> int:
    """`semantic-recall purge`: compact the storage and the vector index, print the sizes."""
    from langchain_semantic_recall.storage.sqlite_schema import in_use, is_writable

    require_writable(args, "nothing was purged")
    local = store_urls(args) is None
    path = store_path(args)
    file = path / "messages.sqlite3"
    if local and file.exists() and is_writable(file) and in_use(file):
        raise CommandError(
            f"the store {path} is open elsewhere (another process uses it); stop the "
            "processes using it (apps, servers, other commands) and run 'semantic-recall "
            "purge' again"
        )
    before = disk_usage(path) if local else None
    memory = open_memory(args, embeds=False)
    try:
        dropped = _orphans_of_other_indexes(args, memory.ensure_index().name)
        result = memory.purge()
    finally:
        memory.storage.close()
    print(style(f"Purged {store_label(args)}", "bold"))
    for line in dropped:
        print(f"  {'vectors':<9}  {line}")
    for label, part in (("messages", result.storage), ("vectors", result.vectors)):
        print(f"  {label:<9}  {part.backend}: {'; '.join(part.done)}{_sizes(part)}")
    if before is not None:
        after = disk_usage(path)
        print(f"  {'store':<9}  {human_bytes(before)} -> {human_bytes(after)} on disk")
    return EXIT_OK


def _orphans_of_other_indexes(args: argparse.Namespace, index_name: str) -> list[str]:
    """Delete the vectors of messages no longer stored in the store's other indexes.

    The purge deletes them in its own index before it compacts; a forget through one
    index (from Python, or by date) leaves them, text and all, in the others, which the
    rebuild of an embedded store's folder would copy as live rows.
    """
    from langchain_semantic_recall.cli.other_indexes import drop_orphans, other_engines

    said = []
    for name, model, other in other_engines(args, index_name):
        if dropped := drop_orphans(other):
            said.append(
                f"index {name} ({model}): deleted the vectors of {dropped} message(s) "
                "no longer stored"
            )
    return said


def _sizes(part: CompactResult) -> str:
    if part.bytes_before is None or part.bytes_after is None:
        return ""
    return f" ({human_bytes(part.bytes_before)} -> {human_bytes(part.bytes_after)})"
