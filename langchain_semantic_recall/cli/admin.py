"""Looking after the store: `stats` and `reindex` (`forget` is in `cli.forget`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli import common, forget
from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    an_id,
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
from langchain_semantic_recall.cli.places import disk_usage, other_indexes
from langchain_semantic_recall.cli.render import human_bytes, style

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.maintenance_ops import RecallStats
    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.records import HeldVectors, ScopeFilter
    from langchain_semantic_recall.relevance.model import RelevanceModel
    from langchain_semantic_recall.storage.base import MessageStorage


def register(subparsers: Any) -> None:
    """Add the `stats`, `forget` and `reindex` subcommands."""
    _register_stats(subparsers)
    forget.register(subparsers)  # in --help's order: stats, forget, reindex
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
    others = other_indexes(args, stats.index_name) if local else []
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
    from langchain_semantic_recall.vectors.rows import collect_held

    with open_storage(args) as storage:
        scope, relevance = _scope_and_relevance(args, storage)
        # The local model's name and tokenizer, not the embedder: its class is LangChain's
        # (~0.3 s to import). `create_embeddings` is looked up now: the tests replace it.
        embeddings: Embedder = common.create_embeddings() or LocalModel()
        info = named_index(embeddings, common.index_name(args))
        if info is None:
            return None
        held: HeldVectors | None = collect_held(())
        strays: frozenset[str] | None = frozenset()
        # An ingest stopped before its vectors leaves no `chroma/`: every message is one
        # without a vector, which the repair line names (the other commands refuse).
        if (store_path(args) / "chroma").is_dir():
            found = local_file_index(store_path(args), info, scope)
            held = None if found is None else found.held
            strays = _unowned_in_file(args, info, scope)
        if held is None or strays is None:
            return None
        # The operation asks the storage alone: a vector step would fail loudly here
        # (`Backends.space`), never read an empty index.
        chunking = Chunking(embeddings, DEFAULT_MAX_INDEX_CHARS)  # the engines' default
        stats = drive(
            read_stats_op(info, held, scope, relevance, chunking=chunking, unowned=strays),
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
    from langchain_semantic_recall.cli.own_index import require_own_index
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
        if store_urls(args) is not None and common.index_name(args) is None:
            require_own_index(storage, space.vectors, stats.index_name)
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
