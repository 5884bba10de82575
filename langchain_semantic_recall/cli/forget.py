"""`semantic-recall forget`: a thread, a resource, or everything older than a date.

Run again after a failure, it finishes: a thread or resource whose messages are gone but
whose vectors an interrupted forget left is still found, and its vectors deleted.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    an_id,
    confirm,
    open_memory,
    open_storage,
    require_resource,
    require_thread,
    require_writable,
    store_options,
    store_path,
    store_urls,
)
from langchain_semantic_recall.cli.narrowing import parse_age, parse_date
from langchain_semantic_recall.cli.render import error
from langchain_semantic_recall.errors import InvalidOptionError, NotFoundError
from langchain_semantic_recall.quoting import printable

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall


def register(subparsers: Any) -> None:
    """Add `forget`."""
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
        interrupted="run it again to finish (a thread or resource: it also deletes the vectors "
        "left of it); after a forget by date, 'semantic-recall reindex --missing-only' deletes "
        "the vectors left ('stats' counts them as orphaned)",
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
    try:
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
    except NotFoundError as unknown:  # a forget whose vector delete failed: finish it
        return _forget_vectors_left(args, unknown)
    question = f"Delete {target} ({size}), with its vectors? This cannot be undone."
    if not args.yes and not confirm(question):
        print("Nothing deleted.")
        return EXIT_ERROR
    memory = open_memory(args, embeds=False)
    index = memory.ensure_index().name
    scope = ScopeFilter(thread_id=args.thread, resource_id=args.resource)
    held = memory.vector_store.count(index, scope)
    deleted = _forget_again(args)(memory)
    if held or not deleted:
        print(printable(f"Forgot {target}: {deleted} message(s) and their vectors deleted."))
    else:  # its vectors are elsewhere (another --index-name), or were never written
        said = f"{deleted} message(s) deleted; index {index} held no vector of them"
        print(printable(f"Forgot {target}: {said}."))
    # A thread's forget deletes its vectors under any owner already; a resource's, by owner.
    names = [t.thread_id for t in threads] if args.thread is None else []
    return _in_other_indexes(args, index, _forget_again(args), names)


def _forget_vectors_left(args: argparse.Namespace, unknown: NotFoundError) -> int:
    """`forget` of what holds no message: the vectors left of it, in any index of the store.

    An interrupted forget leaves them in its own index; a forget from Python through one
    index leaves them in the store's others.

    Raises:
        NotFoundError: `unknown`, when no vector of it is left either.
    """
    from langchain_semantic_recall.cli.other_indexes import other_engines
    from langchain_semantic_recall.records import ScopeFilter

    what = f"thread {args.thread}" if args.thread is not None else f"resource {args.resource}"
    if store_urls(args) is None and not (store_path(args) / "chroma").is_dir():
        raise unknown  # no vector index either (opening one would create it)
    memory = open_memory(args, embeds=False)
    index = memory.ensure_index().name
    scope = ScopeFilter(thread_id=args.thread, resource_id=args.resource)
    left = len(memory.vector_store.message_ids(index, scope))
    others = list(other_engines(args, index))  # opened once: counted here, forgotten below
    elsewhere = sum(m.vector_store.count(n, scope) for n, _, m in others)
    if not left and not elsewhere:
        raise unknown
    count = f"{left + elsewhere} vector(s) of it are left"
    if not args.yes and not confirm(f"{what} holds no message, but {count}: delete them?"):
        print("Nothing deleted.")
        return EXIT_ERROR
    _forget_again(args)(memory)
    if still := len(memory.vector_store.message_ids(index, scope)):
        error(f"{still} vector(s) of {what} are left: run 'semantic-recall reindex --missing-only'")
        return EXIT_ERROR
    print(printable(f"Forgot what was left of {what}: {left} vector(s), no message."))
    return _in_other_indexes(args, index, _forget_again(args), engines=others)


def _forget_again(args: argparse.Namespace) -> Callable[[SemanticRecall], int]:
    """The thread's or resource's forget, to run again on another index of the store."""
    if args.thread is not None:
        return lambda memory: memory.forget_thread(args.thread)
    return lambda memory: memory.forget_resource(args.resource)


def _in_other_indexes(
    args: argparse.Namespace,
    index_name: str,
    forget: Callable[[SemanticRecall], int] | None,
    threads: Sequence[str] = (),
    *,
    engines: Iterable[tuple[str, str, SemanticRecall]] | None = None,
) -> int:
    """A forget deletes the vectors of one index: the store's other indexes' too.

    Each other index of a store given by `--path` (another embedder's: `stats` names
    them) is opened under the model it recorded (`cli.recorded`). A thread's or
    resource's `forget` is run on it again: the messages are gone, so it deletes the
    vectors left there, and those of its `threads` under any owner (a thread moved from
    Python leaves another index's vectors under its old owner). A forget by date
    (`forget` None) no longer knows which messages it deleted: there, every vector whose
    message is no longer stored is deleted. `engines`: those indexes opened already.
    """
    from langchain_semantic_recall.cli.other_indexes import (
        drop_orphans,
        drop_thread_vectors,
        other_engines,
    )
    from langchain_semantic_recall.records import ScopeFilter

    for name, model, memory in other_engines(args, index_name) if engines is None else engines:
        if forget is None:
            if left := drop_orphans(memory):
                said = f"the vectors of {left} message(s) no longer stored (of any resource)"
                print(printable(f"Also deleted, in index {name} ({model}), {said}."))
            continue
        scope = ScopeFilter(thread_id=args.thread, resource_id=args.resource)
        left = len(memory.vector_store.message_ids(name, scope))
        forget(memory)
        for thread_id in threads:  # filed under any owner
            left += len(memory.vector_store.message_ids(name, ScopeFilter(thread_id=thread_id)))
            drop_thread_vectors(memory, thread_id, None)
        if left:
            said = f"Also deleted the vectors of {left} message(s) in index {name} ({model})."
            print(printable(said))
    return EXIT_OK


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
    memory = open_memory(args, embeds=False)
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
    return _in_other_indexes(args, memory.ensure_index().name, None)
