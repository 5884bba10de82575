r"""`semantic-recall migrate`: copy a memory from one store to another (e.g. to servers).

Messages are copied page by page in thread order, so every thread keeps its order (and
its windows); writing them again is harmless, so an interrupted migration is simply run
again. Vectors are either copied as they are (`--vectors copy`, the default: no
embedding; read with `export`, whatever the backend) or embedded again from the copied
messages (`--vectors reembed`). A source index that cannot list its vectors
(`ExportNotSupportedError`) is embedded again as if `reembed` had been asked. Either way
the target ends with a repair pass (`reindex(missing_only=True)`), so a vector the copy
could not read is embedded rather than lost, and a copied vector whose message is gone
is deleted.

Example:
    ```bash
    semantic-recall --path ./memory migrate \
        --to-storage postgresql://app@db.internal/memory --to-vector http://chroma:8000
    ```

`migrate` is the same operation for Python code, on two engines.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from langchain_semantic_recall.cli.common import (
    EXIT_OK,
    CommandError,
    UsageError,
    create_embeddings,
    index_name,
    print_json,
    progress_bar,
    store_options,
    store_path,
    store_urls,
)
from langchain_semantic_recall.cli.own_index import require_own_index
from langchain_semantic_recall.cli.places import (
    place,
    refuse_another_database,
    require_url_store,
    require_url_vectors,
)
from langchain_semantic_recall.errors import ForgottenThreadError, OwnershipError
from langchain_semantic_recall.records import StoredMessage, ThreadInfo, ThreadPlace
from langchain_semantic_recall.urls import sqlite_file

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import VectorRecord

logger = logging.getLogger(__name__)

VectorMode = Literal["copy", "reembed"]
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What a migration did."""

    messages: int
    """Messages copied (written to the target)."""
    vectors_copied: int
    """Vectors copied as they were (one per chunk: a long message has several)."""
    vectors_embedded: int
    """Messages embedded again (all of them with `reembed`)."""
    source_messages: int
    target_messages: int
    index_name: str
    vectors_listable: bool = True
    """False when `copy` found a source index that cannot list its vectors (they were
    embedded again instead)."""
    messages_new: int = 0
    """Of `messages`, those the target did not hold yet (0 when a rerun finds all there)."""
    empty_threads: int = 0
    """Threads of the source without messages (emptied by retention) kept, owned."""
    kept_numbering: bool = True
    """False when the target storage cannot reserve threads (`reserve_threads`): empty
    threads were then left out, and seqs numbered anew from 0 in each thread. (A thread
    the target already held, of the same owner, goes on from its own numbers either way.)"""


def _runs(page: Sequence[StoredMessage]) -> Iterator[tuple[list[ThreadPlace], list[StoredMessage]]]:
    """The page cut where a thread's seqs jump, each run with where its threads start.

    Reserving each thread's first seq before writing the run keeps the source's numbers:
    the target numbers new messages on from a thread's next seq.
    """
    places: dict[str, ThreadPlace] = {}
    run: list[StoredMessage] = []
    last: dict[str, int] = {}
    for message in page:
        if last.get(message.thread_id, message.seq - 1) != message.seq - 1:
            yield list(places.values()), run
            places, run = {}, []
        if message.thread_id not in places:
            places[message.thread_id] = ThreadPlace(
                message.thread_id, message.resource_id, message.seq
            )
        run.append(message)
        last[message.thread_id] = message.seq
    if run:
        yield list(places.values()), run


def _refuse_conflicts(target: SemanticRecall, threads: Sequence[ThreadInfo]) -> None:
    """Refuse, before any write, a thread the target holds for another owner or retired.

    Raises:
        OwnershipError: a thread of the source belongs to another resource in the target.
        ForgottenThreadError: a thread of the source was forgotten in the target.
    """
    held = {t.thread_id: t.resource_id for t in target.storage.list_threads()}
    for thread in threads:
        owner = held.get(thread.thread_id)
        if owner is not None and owner != thread.resource_id:
            raise OwnershipError(
                f"thread {thread.thread_id!r} belongs to {owner!r} in the target and to "
                f"{thread.resource_id!r} in the source: nothing was copied"
            )
        if owner is None and target.storage.is_forgotten(thread.thread_id):
            raise ForgottenThreadError(
                f"thread {thread.thread_id!r} was forgotten in the target, where its id "
                "stays retired: nothing was copied. Migrate into a new store, or lift the "
                "retirement there first (ingest --restore, or unretire_thread in Python)"
            )


def _reserve(target: SemanticRecall, places: list[ThreadPlace], batch_size: int) -> bool:
    """Reserve `places` in the target by batches; False if its storage cannot."""
    try:
        for start in range(0, len(places), batch_size):
            target.storage.reserve_threads(places[start : start + batch_size])
    except NotImplementedError as exc:
        logger.warning(
            "%s: threads emptied by retention are not copied, and seqs are numbered anew",
            exc,
        )
        return False
    return True


def _copy(
    target: SemanticRecall,
    name: str,
    batch: list[VectorRecord],
    seen: set[str],
    on_vectors: Progress | None,
) -> int:
    """Upsert a batch of copied vectors into the target; empties the batch."""
    if not batch:
        return 0
    target.vector_store.upsert(name, batch)
    fresh = {r.message_id for r in batch} - seen
    seen.update(fresh)
    if on_vectors is not None and fresh:
        on_vectors(len(fresh))
    copied = len(batch)
    batch.clear()
    return copied


def _copy_vectors(
    source: SemanticRecall,
    target: SemanticRecall,
    name: str,
    *,
    batch_size: int,
    on_vectors: Progress | None,
) -> tuple[int, bool]:
    """Copy every vector of the source's index into `name`: (vectors copied, listable).

    A source that cannot list its vectors (`ExportNotSupportedError`) copies nothing,
    and the repair pass that follows embeds every message instead.
    """
    from langchain_semantic_recall.vectors.base import ExportNotSupportedError

    source_name = source.ensure_index().name
    copied = 0
    seen: set[str] = set()
    batch: list[VectorRecord] = []
    try:
        for record in source.vector_store.export(source_name, batch_size=batch_size):
            batch.append(record)
            if len(batch) >= batch_size:
                copied += _copy(target, name, batch, seen, on_vectors)
    except ExportNotSupportedError as exc:
        logger.warning("cannot copy the vectors (%s): embedding the messages again", exc)
        return copied + _copy(target, name, batch, seen, on_vectors), False
    return copied + _copy(target, name, batch, seen, on_vectors), True


def migrate(
    source: SemanticRecall,
    target: SemanticRecall,
    *,
    vectors: VectorMode = "copy",
    batch_size: int = 500,
    on_messages: Progress | None = None,
    on_vectors: Progress | None = None,
    keeps_index: bool = False,
) -> MigrationReport:
    """Copy every message of `source` into `target`, then its vectors.

    Args:
        source: The engine to read (its storage, vector index and index name).
        target: The engine to fill; its index must use the same embedder as the source's
            for `copy` (the index names then match).
        vectors: `copy` the vectors, or `reembed` them with the target's embedder.
        batch_size: Messages per page (and per write).
        on_messages: Called with the number of messages just copied.
        on_vectors: Called with the number of messages whose vectors were just handled.
        keeps_index: The target's vector index is the source's, kept in place (only the
            messages move); so is one that is the same object under the same name.

    Raises:
        InvalidOptionError: the target's storage and vector index are the source's; or
            the target's index holds vectors while its storage holds no message (another
            store's index: on a shared Chroma server, every store of one model shares one
            by default), where a forget in either store would delete the other's vectors.
        OwnershipError: a thread of the source belongs to another resource in the target
            (nothing is written).
        ForgottenThreadError: a thread of the source was forgotten in the target (nothing
            is written).
        EmbeddingMismatchError: the target index was built with another embedder.
    """
    from langchain_semantic_recall.errors import InvalidOptionError

    if source.storage is target.storage and source.vector_store is target.vector_store:
        raise InvalidOptionError("the target is the source: nothing would be migrated")
    info = target.ensure_index()  # first: the messages copied next get their vectors
    keeps_index = keeps_index or (
        target.vector_store is source.vector_store and source.ensure_index().name == info.name
    )
    if (
        not keeps_index
        and not target.storage.count(up_to=1)
        and target.vector_store.count(info.name)
    ):
        raise InvalidOptionError(
            f"the target's vector index {info.name!r} already holds vectors, and the "
            "target storage no message: it is another store's index (on a shared Chroma "
            "server, every store of one model uses the same one by default). Migrating "
            "into it would mix the two stores, and a forget in either would delete the "
            "other's vectors: give this store its own index (--to-index-name NAME on the "
            "command line, index_name= of the target engine in Python)"
        )
    # Every thread first, owned, with no message yet, so an emptied thread keeps its owner;
    # checked before anything is written: a refused migration leaves the target as it was.
    threads = source.storage.list_threads()
    _refuse_conflicts(target, threads)
    numbered = _reserve(
        target, [ThreadPlace(t.thread_id, t.resource_id) for t in threads], batch_size
    )
    copied = new = 0
    after: tuple[str, int] | None = None
    while page := source.storage.list_messages(None, after=after, limit=batch_size):
        after = (page[-1].thread_id, page[-1].seq)
        for places, run in _runs(page) if numbered else [([], page)]:
            target.storage.reserve_threads(places)
            new += sum(stored.created for stored in target.storage.put(run))
        copied += len(page)
        if on_messages is not None:
            on_messages(len(page))
    if numbered:  # a thread whose newest messages are gone still numbers on from the source's
        ahead = [ThreadPlace(t.thread_id, t.resource_id, t.next_seq) for t in threads if t.next_seq]
        _reserve(target, ahead, batch_size)
    vectors_copied, listable = 0, True
    if vectors == "copy":
        vectors_copied, listable = _copy_vectors(
            source, target, info.name, batch_size=batch_size, on_vectors=on_vectors
        )
    # The repair pass embeds whatever the copy did not bring (everything, for reembed).
    embedded = target.reindex(
        missing_only=vectors == "copy",
        batch_size=batch_size,
        progress=on_vectors if vectors == "reembed" else None,
    )
    return MigrationReport(
        messages=copied,
        vectors_copied=vectors_copied,
        vectors_embedded=embedded,
        source_messages=source.storage.count(),
        target_messages=target.storage.count(),
        index_name=info.name,
        vectors_listable=listable,
        messages_new=new,
        empty_threads=sum(not t.message_count for t in threads) if numbered else 0,
        kept_numbering=numbered,
    )


# --- the command -------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add the `migrate` subcommand."""
    parser = subparsers.add_parser(
        "migrate",
        parents=[store_options()],
        help="copy a store to another one (e.g. the embedded store to PostgreSQL + Chroma)",
        description=(
            "Copy every message of the source (the embedded store at --path, or "
            "--from-storage/--from-vector URLs, or the global --storage/--vector) into the "
            "target URLs, then copy its vectors "
            "or embed them again. Storage URLs: sqlite:///relative/path (sqlite:////abs/path "
            "from the root), postgresql://..., memory://. Vector URLs: chroma:///relative "
            "(chroma:////abs), http://host:port (a Chroma server), memory://. "
            "Running it again is harmless: it finishes an interrupted migration. Threads "
            "keep their owners and message numbers, empty ones (emptied by retention) "
            "too; retired (forgotten) thread ids are not carried over."
        ),
    )
    parser.add_argument("--from-storage", metavar="URL", help="source storage URL")
    parser.add_argument("--from-vector", metavar="URL", help="source vector URL")
    parser.add_argument("--to-storage", metavar="URL", required=True, help="target storage URL")
    parser.add_argument("--to-vector", metavar="URL", required=True, help="target vector URL")
    parser.add_argument(
        "--vectors",
        choices=("copy", "reembed"),
        default="copy",
        help="copy the vectors (default) or embed the messages again",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=500,
        metavar="N",
        help="messages read and written at a time (default: 500)",
    )
    parser.add_argument(
        "--to-index-name",
        metavar="NAME",
        help="the target's index (default: the source's name), e.g. for a Chroma server "
        "that another store's index of the same model already uses",
    )
    parser.add_argument(
        "--embeddings",
        metavar="MODULE:NAME",
        help="an Embeddings class or factory to import (default: the local model)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(
        func=run, interrupted="run the same migrate again: it finishes an interrupted migration"
    )


def _embeddings(spec: str | None) -> Embeddings | None:
    if spec is None:
        return create_embeddings()
    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        raise UsageError(f"--embeddings takes MODULE:NAME, got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import {spec!r}: {exc}") from exc
    return factory()  # type: ignore[no-any-return]


def _source_urls(args: argparse.Namespace) -> tuple[str, str]:
    if bool(args.from_storage) != bool(args.from_vector):
        raise UsageError("give both --from-storage and --from-vector, or neither (--path)")
    servers = store_urls(args)  # `semantic-recall --storage URL --vector URL migrate ...`
    if servers is not None:
        if args.from_storage:
            raise UsageError(
                "the source is given twice: --storage/--vector (before the command) and "
                "--from-storage/--from-vector; keep one"
            )
        require_url_store(servers[0])
        require_url_vectors(servers[1])
        return servers
    if args.from_storage:
        require_url_store(args.from_storage)  # else an empty source, and nothing copied
        require_url_vectors(args.from_vector)
        return args.from_storage, args.from_vector
    root = store_path(args).resolve()
    if not (root / "messages.sqlite3").exists():
        raise CommandError(f"no store at {root} to migrate (choose it with --path)", code=3)
    return f"sqlite:///{root / 'messages.sqlite3'}", f"chroma:///{root / 'chroma'}"


def _refuse_itself(source: tuple[str, str], target: tuple[str, str]) -> None:
    """A target whose messages and vectors are the source's would copy nothing onto itself.

    Raises:
        UsageError: both URLs of the target name the source's places.
    """
    from langchain_semantic_recall.urls import redact

    places = [(place(a), place(b)) for a, b in zip(source, target, strict=True)]
    if all(here is not None and here == there for here, there in places):
        raise UsageError(
            f"the target is the source ({redact(source[0])} and {redact(source[1])}): "
            "nothing would be migrated. Name the new store with --to-storage and --to-vector"
        )


def _keeps_index(from_vector: str, args: argparse.Namespace) -> bool:
    """Whether the target keeps the source's vector index (one place, one name).

    Only the messages move then, as docs/cli.md allows.
    """
    here = place(from_vector)
    return here is not None and here == place(args.to_vector) and not args.to_index_name


def _advance(bar: Any, n: int, total: int) -> None:
    bar.update(n)
    if bar.n >= total:  # show the finished bar while the next phase runs
        bar.refresh()


def run(args: argparse.Namespace) -> int:
    """`semantic-recall migrate`: copy the store to other backends (see `migrate`)."""
    from langchain_semantic_recall.recall import SemanticRecall

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    from_storage, from_vector = _source_urls(args)
    _refuse_itself((from_storage, from_vector), (args.to_storage, args.to_vector))
    refuse_another_database(sqlite_file(args.to_storage))
    embeddings = _embeddings(args.embeddings)
    options: dict[str, Any] = {"read_only": True}
    if (name := index_name(args)) is not None:
        options["index_name"] = name
    source = SemanticRecall.from_url(
        storage=from_storage, vector=from_vector, embeddings=embeddings, **options
    )
    try:
        if index_name(args) is None:  # named: the user's choice
            name = source.ensure_index().name
            require_own_index(source.storage, source.vector_store, name, "the source store")
    except BaseException:
        source.storage.close()
        raise
    target_options = {k: v for k, v in options.items() if k != "read_only"}
    if args.to_index_name:
        target_options["index_name"] = args.to_index_name
    target = SemanticRecall.from_url(
        storage=args.to_storage,
        vector=args.to_vector,
        embeddings=source.embeddings,
        **target_options,
    )
    total = source.storage.count()
    try:
        with (
            progress_bar(total, "msg", "messages") as messages,
            progress_bar(total, "msg", "vectors") as vectors,
        ):
            report = migrate(
                source,
                target,
                vectors=args.vectors,
                batch_size=args.batch_size,
                on_messages=lambda n: _advance(messages, n, total),
                on_vectors=vectors.update,
                keeps_index=_keeps_index(from_vector, args),
            )
            vectors.update(max(0, total - vectors.n))  # copy mode counts embeddable only
    except (OwnershipError, ForgottenThreadError) as exc:
        raise CommandError(f"the target already holds conflicting data: {exc}") from exc
    finally:
        source.storage.close()
        target.storage.close()
    if args.json:
        print_json(asdict(report))
    else:
        print(
            f"migrated {report.messages} messages ({report.messages_new} new, "
            f"{report.target_messages} now in the target); vectors of index "
            f"{report.index_name!r}: {report.vectors_copied} vector(s) copied (one per chunk "
            f"of a message's text), {report.vectors_embedded} message(s) embedded again"
            + ("" if report.vectors_listable else " (the source cannot list its vectors)")
            + (f"; {report.empty_threads} empty thread(s) kept, owned" * bool(report.empty_threads))
            + ("" if report.kept_numbering else "; empty threads NOT kept (see the warning)")
        )
    return EXIT_OK
