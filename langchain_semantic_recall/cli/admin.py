"""Looking after the store: `stats`, `forget` and `reindex`."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli import common
from langchain_semantic_recall.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    an_id,
    confirm,
    disk_usage,
    note_if_open_elsewhere,
    open_backends,
    open_memory,
    open_storage,
    print_json,
    progress_bar,
    require_resource,
    require_thread,
    require_writable,
    store_label,
    store_options,
    store_path,
    store_urls,
)
from langchain_semantic_recall.cli.narrowing import parse_age, parse_date
from langchain_semantic_recall.cli.render import error, human_bytes, style
from langchain_semantic_recall.errors import InvalidOptionError
from langchain_semantic_recall.quoting import printable

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.maintenance_ops import RecallStats
    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.records import ScopeFilter
    from langchain_semantic_recall.relevance.model import RelevanceModel
    from langchain_semantic_recall.storage.base import MessageStorage


def register(subparsers: Any) -> None:
    """Add the `stats`, `forget` and `reindex` subcommands."""
    _register_stats(subparsers)
    _register_forget(subparsers)
    _register_reindex(subparsers)


def _scope_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--resource", metavar="R", type=an_id, help=f"only {what} of resource R")
    parser.add_argument("--thread", metavar="T", type=an_id, help=f"only {what} of thread T")


# --- stats -------------------------------------------------------------------------------


def _register_stats(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "stats",
        parents=[store_options()],
        help="count messages and vectors; show the index, model and disk use",
        description=(
            "Messages, threads and resources stored; vectors in the index and how many are "
            "missing (repair with 'reindex --missing-only'); the index name, the embedding "
            "model and its dimension; the store's size on disk. With --resource or --thread, "
            "the counts cover only that resource or thread (e.g. to check that forget left "
            "nothing behind); one with no conversation and no vector left is not found "
            "(exit 3)."
        ),
    )
    _scope_arguments(parser, "the data")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.set_defaults(func=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    """`semantic-recall stats`: counts (and, for a local store, sizes) of the store."""
    stats = _stats(args)
    local = store_urls(args) is None
    size = disk_usage(store_path(args)) if local else None
    others = _other_indexes(args, stats.index_name) if local else []
    label = store_label(args)
    scope = [f"resource {args.resource}"] if args.resource else []
    scope += [f"thread {args.thread}"] if args.thread else []
    if args.json:
        print_json(
            {
                "store": label,
                "scope": {"resource": args.resource, "thread": args.thread},
                "messages": stats.messages,
                "threads": stats.threads,
                "resources": stats.resources,
                "embeddable": stats.embeddable,
                "vectors": stats.vectors,
                "missing_vectors": stats.missing_vectors,
                "orphan_vectors": stats.orphan_vectors,
                "vectors_without_metadata": stats.vectors_without_metadata,
                "stray_vectors": stats.stray_vectors,
                "index_name": stats.index_name,
                "model": stats.model,
                "dimension": stats.dimension,
                "relevance": stats.relevance,
                "other_indexes": [
                    {"name": name, "model": model, "dimension": dimension}
                    for name, model, dimension in others
                ],
                "disk_bytes": size,
            }
        )
        return EXIT_OK
    title = f"Store {label}" + (f" ({', '.join(scope)})" if scope else "")
    print(style(title, "bold"))
    print(
        f"  messages   {stats.messages} in {stats.threads} thread(s) of "
        f"{stats.resources} resource(s)"
    )
    vectors = f"  vectors    {stats.vectors} of {stats.embeddable} embeddable message(s)"
    vectors += f", missing {stats.missing_vectors}, orphaned {stats.orphan_vectors}"
    if stats.vectors_without_metadata:  # written before 0.3: a filtered search passes them by
        vectors += f", {stats.vectors_without_metadata} without their message's metadata"
    if stats.stray_vectors:  # beyond their message's chunks: found by words it no longer holds
        vectors += f", {stats.stray_vectors} beyond their message's text"
    print(vectors)
    print(f"  index      {stats.index_name}")
    print(f"  model      {stats.model} ({stats.dimension} dimensions)")
    line = f"  relevance  {stats.relevance}"
    print(style(line, "yellow") if stats.relevance.startswith("not fitted") else line)
    for name, model, dimension in others:  # vectors these commands neither see nor count
        line = f"  also       index {name} ({model}, {dimension} dimensions): not counted here"
        print(style(line, "yellow"))
    if size is not None:
        print(f"  disk       {human_bytes(size)} (the whole store)")
    if (
        stats.missing_vectors
        or stats.orphan_vectors
        or stats.vectors_without_metadata
        or stats.stray_vectors
    ):
        print(style("  repair     semantic-recall reindex --missing-only", "yellow"))
    return EXIT_OK


def _other_indexes(args: argparse.Namespace, counted: str) -> list[tuple[str, str, int]]:
    """The embedded store's other indexes (another embedder's), as (name, model, dimension)."""
    from langchain_semantic_recall.settings import local_indexes

    found = local_indexes(store_path(args))
    return [(name, *found[name]) for name in sorted(found) if name != counted]


def _stats(args: argparse.Namespace) -> RecallStats:
    """`SemanticRecall.stats` on the store's backends, without the engine class.

    The engine class is a LangChain `Runnable`: its import alone took a third of the
    command's time. An embedded store's vectors are read from Chroma's file when it
    can tell them (`_file_stats`), without importing chromadb (most of the rest).
    """
    if store_urls(args) is None:
        stats = _file_stats(args)
        if stats is not None:
            return stats
    return _client_stats(args)


def _scope_and_relevance(
    args: argparse.Namespace, storage: MessageStorage
) -> tuple[ScopeFilter | None, RelevanceModel | None]:
    """The command's scope (an unknown thread is not found: exit 3) and relevance model."""
    from langchain_semantic_recall.engine.maintenance_ops import maintenance_scope
    from langchain_semantic_recall.options import DEFAULT_SEARCH_MODE
    from langchain_semantic_recall.search import resolve

    if args.thread is not None:
        require_thread(storage, args.thread, args.resource)
    plan = resolve(  # the command line's engines: the package's default options
        search_mode=DEFAULT_SEARCH_MODE,
        keyword_search=storage.supports_keyword_search,
        top_k=None,
        message_range=None,
        message_budget="auto",
        threshold=None,
    )
    scope = maintenance_scope(args.resource, args.thread)
    return scope, plan.relevance if plan.calibrated else None


def _file_stats(args: argparse.Namespace) -> RecallStats | None:
    """`stats` of an embedded store, its vectors read from Chroma's file (no chromadb).

    The index (name, model, dimension) is the one the engine would open, refused as it
    would be when built with another model (`EmbeddingMismatchError`); its message ids
    are those the index gives (`settings.local_file_index`). None when the file cannot
    tell them (unreadable, another shape, an index not created yet, an embedder whose
    dimension only a probe tells): the caller asks chromadb.
    """
    from langchain_semantic_recall.embeddings import Embedder
    from langchain_semantic_recall.engine.maintenance_ops import read_stats_op
    from langchain_semantic_recall.engine.steps import Backends, drive
    from langchain_semantic_recall.engine.vector_space import named_index
    from langchain_semantic_recall.engine.vector_writes import Chunking
    from langchain_semantic_recall.local_model import LocalModel
    from langchain_semantic_recall.options import DEFAULT_MAX_INDEX_CHARS
    from langchain_semantic_recall.settings import local_file_index

    with open_storage(args) as storage:
        scope, relevance = _scope_and_relevance(args, storage)
        # The local model's name and tokenizer, not the embedder: its class is LangChain's
        # (~0.3 s to import). `create_embeddings` is looked up now: the tests replace it.
        embeddings: Embedder = common.create_embeddings() or LocalModel()
        info = named_index(embeddings, common.index_name(args))
        found = None if info is None else local_file_index(store_path(args), info, scope)
        strays = None if info is None else _unowned_in_file(args, info, scope)
        if info is None or found is None or strays is None:
            return None
        # The operation asks the storage alone: a vector step would fail loudly here
        # (`Backends.space`), never read an empty index.
        chunking = Chunking(embeddings, DEFAULT_MAX_INDEX_CHARS)  # the engines' default
        stats = drive(
            read_stats_op(info, found.held, scope, relevance, chunking=chunking, unowned=strays),
            Backends(storage),
        )
        if args.thread is None and args.resource is not None and not _anything(stats):
            require_resource(storage, args.resource)  # nothing of it: not found (exit 3)
        return stats


def _unowned_in_file(
    args: argparse.Namespace, info: IndexInfo, scope: ScopeFilter | None
) -> frozenset[str] | None:
    """The file's `vector_writes.unowned_vectors` (None: the file cannot tell)."""
    from langchain_semantic_recall.records import NO_RESOURCE, ScopeFilter
    from langchain_semantic_recall.settings import local_file_index

    if scope is not None and scope.resource_id == NO_RESOURCE:
        return frozenset()
    thread_id = None if scope is None else scope.thread_id
    found = local_file_index(store_path(args), info, ScopeFilter(NO_RESOURCE, thread_id))
    return None if found is None else found.message_ids


def _client_stats(args: argparse.Namespace) -> RecallStats:
    """`stats` through the vector index's own client (chromadb for an embedded store)."""
    from langchain_semantic_recall.embeddings import EmbeddingCache
    from langchain_semantic_recall.engine.maintenance_ops import stats_op
    from langchain_semantic_recall.engine.steps import Backends, drive
    from langchain_semantic_recall.engine.vector_space import VectorSpace
    from langchain_semantic_recall.settings import as_vector_index

    backends = open_backends(args, read_only=True)
    storage = backends["storage"]
    try:
        scope, relevance = _scope_and_relevance(args, storage)
        space = VectorSpace(
            backends["embeddings"],
            as_vector_index(backends["vector_store"]),
            EmbeddingCache(1),
            common.index_name(args),
        )
        stats = drive(stats_op(space, scope, relevance), Backends(storage, space))
        if args.thread is None and args.resource is not None and not _anything(stats):
            require_resource(storage, args.resource)  # nothing of it: not found (exit 3)
        return stats
    finally:
        storage.close()


def _anything(stats: RecallStats) -> bool:
    """Whether a scope holds a message or a vector (an orphan left by a forget, say).

    `stats --resource R` of a resource with nothing is not found (exit 3), as for
    `threads`, `search` and `export`; one whose messages are gone but not all its vectors
    is counted, so a forget that left something behind shows it.
    """
    return bool(stats.messages or stats.vectors or stats.orphan_vectors)


# --- forget ------------------------------------------------------------------------------


def _register_forget(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "forget",
        parents=[store_options()],
        help="delete a conversation, a resource, or everything older than a date (asks first)",
        description=(
            "Delete a thread, or every thread of a resource: messages and vectors, before "
            "the command returns. Forgotten thread ids are retired (a late write cannot bring "
            "them back); a forgotten resource may start new threads later. With --before or "
            "--older-than (retention), delete every message created before that time, of "
            "--resource only or of every resource; threads stay (their newer messages "
            "too). Asks for confirmation unless --yes; without a terminal to ask on, refuses "
            "(exit 2). Run 'purge' afterwards to erase the bytes left on disk."
        ),
        epilog=(
            "examples:\n"
            "  semantic-recall forget --thread trip-planning\n"
            "  semantic-recall forget --resource alice --yes\n"
            "  semantic-recall forget --older-than 90d --yes   # a retention job (cron)\n"
            "  semantic-recall forget --before 2025-01-01 --resource alice"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--thread", metavar="T", type=an_id, help="delete conversation T")
    target.add_argument(
        "--before", metavar="DATE", help="delete messages created before DATE (ISO, UTC)"
    )
    target.add_argument(
        "--older-than",
        metavar="AGE",
        help="delete messages older than AGE: a number and d, w or h (90d, 12w, 36h)",
    )
    parser.add_argument(
        "--resource",
        metavar="R",
        type=an_id,
        help="delete every conversation of R (or, by date, only R's)",
    )
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(
        func=run_forget,
        interrupted="run it again to finish; if it says there is no such thread or resource "
        "now, its messages are gone, and 'semantic-recall reindex --missing-only' deletes any "
        "vector left behind ('stats' counts them as orphaned)",
    )


def run_forget(args: argparse.Namespace) -> int:
    """`semantic-recall forget`: delete a thread, a resource, or by date (asks first)."""
    from langchain_semantic_recall.records import ScopeFilter

    require_writable(args, "nothing was forgotten")
    if args.before is not None or args.older_than is not None:
        return _forget_by_date(args)
    if args.thread is not None and args.resource is not None:
        raise InvalidOptionError("forget takes --thread or --resource, not both")
    if args.thread is None and args.resource is None:
        raise InvalidOptionError(
            "forget needs --thread, --resource, --before or --older-than (see --help)"
        )
    with open_storage(args) as storage:  # what is asked about: no vector index opened yet
        if args.thread is not None:
            owner = require_thread(storage, args.thread, None)
            count = storage.count(ScopeFilter(thread_id=args.thread))
            target, size = f"thread {args.thread} of {owner}", f"{count} message(s)"
        else:
            require_resource(storage, args.resource)
            threads = storage.list_threads(args.resource)
            count = sum(t.message_count for t in threads)
            target = f"everything of resource {args.resource}"
            size = f"{len(threads)} thread(s), {count} message(s)"
    question = f"Delete {target} ({size}), with its vectors? This cannot be undone."
    if not args.yes and not confirm(question):
        print("Nothing deleted.")
        return EXIT_ERROR
    memory = open_memory(args)
    if args.thread is not None:
        deleted = memory.forget_thread(args.thread)
    else:
        deleted = memory.forget_resource(args.resource)
    print(printable(f"Forgot {target}: {deleted} message(s) and their vectors deleted."))
    return _left_in_other_indexes(args, memory.ensure_index().name)


def _left_in_other_indexes(args: argparse.Namespace, index_name: str) -> int:
    """A forget deletes vectors of the command line's index only: say what others keep.

    The exit code: 1 when another embedder's index may still hold the forgotten
    messages' vectors (docs/data-handling.md, *Other indexes*), else 0.
    """
    others = _other_indexes(args, index_name) if store_urls(args) is None else []
    for name, model, _ in others:
        error(
            f"index {name} ({model}) of this store may still hold the vectors of what was "
            "forgotten: forget it again through an engine on that index "
            "(SemanticRecall.local(path, embeddings=...)), or drop the index"
        )
    return EXIT_ERROR if others else EXIT_OK


def _forget_by_date(args: argparse.Namespace) -> int:
    """`forget --before DATE` / `--older-than AGE`: retention, of one resource or all."""
    age = parse_age(args.older_than) if args.older_than is not None else None
    cutoff = parse_date(args.before) if age is None else datetime.now(UTC) - age
    if args.resource is not None:
        with open_storage(args) as storage:
            require_resource(storage, args.resource)
    whose = f"of resource {args.resource}" if args.resource else "of every resource"
    question = (
        f"Delete every message created before {cutoff:%Y-%m-%d %H:%M} UTC {whose}, with its "
        "vectors? This cannot be undone."
    )
    if not args.yes and not confirm(question):
        print("Nothing deleted.")
        return EXIT_ERROR
    memory = open_memory(args)
    if age is not None:
        result = memory.with_options(retention=age).apply_retention(resource_id=args.resource)
    else:
        result = memory.forget_before(cutoff, resource_id=args.resource)
    per = ", ".join(f"{resource} {count}" for resource, count in result.deleted.items())
    said = (
        f"Forgot {result.messages} message(s) created before "
        f"{result.cutoff:%Y-%m-%d %H:%M} UTC {whose}, and their vectors"
        + (f" ({per})." if per else ".")
    )
    print(printable(said))
    if result.threads_emptied:
        print(printable(f"Threads left empty: {', '.join(result.threads_emptied)}."))
    return _left_in_other_indexes(args, memory.ensure_index().name)


# --- reindex -----------------------------------------------------------------------------


def _register_reindex(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "reindex",
        parents=[store_options()],
        help="embed stored messages again (repair missing vectors, or after a model change)",
        description=(
            "Embed stored user and assistant messages into the index again. With "
            "--missing-only, only messages without a vector (after an embedding failure). "
            "Either way, vectors whose message is gone (a forget that failed half way) are "
            "deleted. Idempotent: vector ids are message ids."
        ),
    )
    parser.add_argument(
        "--missing-only", action="store_true", help="only messages that have no vector"
    )
    _scope_arguments(parser, "the messages")
    parser.set_defaults(
        func=run_reindex, interrupted="the vectors written so far stay: run it again to finish"
    )


def run_reindex(args: argparse.Namespace) -> int:
    """`semantic-recall reindex`: embed again the messages in scope (or missing ones)."""
    from langchain_semantic_recall.records import ScopeFilter

    require_writable(args, "nothing was embedded")
    note_if_open_elsewhere(args, "reindex")
    memory = open_memory(args, new_vectors=True)
    if args.thread is not None:  # a misspelt id is not found, never "0 vectors written"
        require_thread(memory.storage, args.thread, args.resource)
    elif args.resource is not None:
        require_resource(memory.storage, args.resource)
    scope = (
        ScopeFilter(resource_id=args.resource, thread_id=args.thread)
        if args.resource or args.thread
        else None
    )
    total = memory.storage.count(scope)
    # reindex also deletes the vectors whose message is gone, and those beyond a message's
    # chunks: count them to say so
    before = memory.stats(resource_id=args.resource, thread_id=args.thread)
    with progress_bar(total, "msg", "reindex") as bar:
        written = memory.reindex(
            resource_id=args.resource,
            thread_id=args.thread,
            missing_only=args.missing_only,
            progress=bar.update,
        )
    index = memory.ensure_index().name
    kind = "missing vector(s)" if args.missing_only else "vector(s)"
    print(f"Wrote {written} {kind} for {total} stored message(s) into index {index}.")
    if before.orphan_vectors:
        print(f"Deleted {before.orphan_vectors} vector(s) whose message is no longer stored.")
    if before.stray_vectors:
        print(f"Deleted {before.stray_vectors} vector(s) beyond their message's text.")
    return EXIT_OK
