"""What every subcommand shares: exit codes, errors, opening the store, confirmation.

Nothing here imports chromadb or the model until a store is opened.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Where the store is: defined in places.py, which must not import this module.
from langchain_semantic_recall.cli.places import DEFAULT_PATH as DEFAULT_PATH  # noqa: PLC0414
from langchain_semantic_recall.cli.places import PATH_ENV as PATH_ENV  # noqa: PLC0414
from langchain_semantic_recall.cli.places import a_path as a_path  # noqa: PLC0414
from langchain_semantic_recall.cli.places import require_own_vectors, require_store
from langchain_semantic_recall.cli.places import store_path as store_path  # noqa: PLC0414

# Defined in errors.py with every error class; re-exported: the subcommands import them here.
from langchain_semantic_recall.errors import CommandError as CommandError  # noqa: PLC0414
from langchain_semantic_recall.errors import NotFoundError as NotFoundError  # noqa: PLC0414
from langchain_semantic_recall.errors import UsageError as UsageError  # noqa: PLC0414

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.records import StoredMessage
    from langchain_semantic_recall.storage.base import MessageStorage

EXIT_OK = 0
"""The command did what it was asked."""
EXIT_ERROR = 1
"""It failed (bad input file, store error, partial failure) or the user said no."""
EXIT_USAGE = 2
"""Bad arguments or option values, or a deletion without confirmation."""
EXIT_NOT_FOUND = 3
"""No such store, thread, resource or input file."""
EXIT_INTERRUPTED = 130
"""Interrupted with Ctrl-C."""

logger = logging.getLogger(__name__)

_OPENED: ContextVar[list[Callable[[], object]] | None] = ContextVar("opened", default=None)
"""The closers of the backends the running command opened (`command_scope`)."""


@contextmanager
def command_scope() -> Iterator[None]:
    """Close every backend the command opens (`open_backends`) when it ends, however.

    A process that runs commands in turn (a notebook, a test, a script calling `main`)
    would otherwise keep their SQLite connections until the garbage collector found
    them, and a `purge` after a `forget` would find the store open elsewhere.
    """
    closers: list[Callable[[], object]] = []
    token = _OPENED.set(closers)
    try:
        yield
    finally:
        _OPENED.reset(token)
        for close in reversed(closers):  # each is safe to call twice
            try:
                close()
            except Exception:
                logger.warning("could not close a backend the command opened", exc_info=True)


EXIT_CODES_HELP = """\
servers: --storage URL --vector URL (before or after the command) instead of --path, e.g.
  semantic-recall --storage postgresql://app@db/memory --vector http://chroma:8000 stats

exit codes:
  0  ok
  1  error (bad input file, store error, partial failure) or declined at the prompt
  2  usage error (bad arguments or values; forget without --yes and without a terminal)
  3  not found (no store at --path, unknown thread or resource, missing input file)
  130 / 143  interrupted by Ctrl-C / stopped by SIGTERM (the error says how to finish)
"""

VERBOSE_HELP = "log warnings and details, and show a failure's traceback"


# --- the store ---------------------------------------------------------------------------


def an_id(value: str) -> str:
    """Argparse `type=` of a thread or resource id: a bad one is a usage error (exit 2).

    The same rule as the engine's (`messages.check_id`): text that is not blank and
    holds no NUL or lone surrogate.
    """
    from langchain_semantic_recall.errors import InvalidInputError
    from langchain_semantic_recall.storable import check_id

    try:
        return check_id("id", value)
    except InvalidInputError as bad:
        raise argparse.ArgumentTypeError(
            f"expected an id (text, not blank, without NUL characters), got {value!r}"
        ) from bad


def verbose_option() -> argparse.ArgumentParser:
    """A parent parser with `-v`, so it works after the subcommand too (errors say "-v")."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
    )
    return parent


def store_options() -> argparse.ArgumentParser:
    """A parent parser with the store's options (and `-v`): before or after the subcommand."""
    parent = argparse.ArgumentParser(add_help=False, parents=[verbose_option()])
    parent.add_argument(
        "--path",
        default=argparse.SUPPRESS,
        type=a_path,
        metavar="DIR",
        help=f"the store (default: ${PATH_ENV}, else {DEFAULT_PATH})",
    )
    for flag, dest, text in (
        ("--storage", "storage_url", STORAGE_HELP),
        ("--vector", "vector_url", VECTOR_HELP),
    ):
        parent.add_argument(flag, dest=dest, default=argparse.SUPPRESS, metavar="URL", help=text)
    parent.add_argument(
        "--index-name", default=argparse.SUPPRESS, metavar="NAME", help=INDEX_NAME_HELP
    )
    return parent


STORAGE_HELP = "message storage URL instead of --path (sqlite:///..., postgresql://...)"
VECTOR_HELP = "vector index URL, with --storage (chroma:///..., http://host:8000)"
INDEX_NAME_HELP = (
    "the store's vector index when it has a name of its own (index_name= in Python: a "
    "store beside another on one Chroma server); default: the model's"
)


def index_name(args: argparse.Namespace) -> str | None:
    """The `--index-name` given, before or after the command (None: the model's default)."""
    return getattr(args, "index_name", None) or None


def store_urls(args: argparse.Namespace) -> tuple[str, str] | None:
    """(storage URL, vector URL) when the global `--storage` / `--vector` are given.

    `--path` with them is a usage error: it would be ignored, and a command (`forget`)
    would act on a store other than the one named. `$SEMANTIC_RECALL_PATH` is a default,
    not a choice: the URLs override it.
    """
    storage, vector = getattr(args, "storage_url", None), getattr(args, "vector_url", None)
    if storage is None and vector is None:
        return None
    if getattr(args, "path", None) is not None:
        raise UsageError(
            "--path or --storage/--vector, not both: --path names a local store, the URLs "
            "a store on servers (or files); keep the one you mean"
        )
    if storage is None or vector is None:
        raise UsageError("--storage and --vector go together (a message store and its index)")
    return storage, vector


def store_label(args: argparse.Namespace) -> str:
    """The store, as shown to people (URLs without their passwords)."""
    urls = store_urls(args)
    if urls is None:
        return str(store_path(args))
    from langchain_semantic_recall.urls import redact

    return f"{redact(urls[0])} + {redact(urls[1])}"


def create_embeddings() -> Embeddings | None:
    """The embedder of the store; None means the engine's default (the local model).

    The tests replace this function to run the commands on a fast fake embedder.
    """
    return None


def open_memory(
    args: argparse.Namespace,
    *,
    create: bool = False,
    new_vectors: bool = False,
    embeds: bool = True,
    **options: Any,
) -> SemanticRecall:
    """The engine over the store chosen by `--path` (or `--storage` and `--vector`).

    Args:
        args: Parsed arguments (`path`, `storage_url`, `vector_url`).
        create: Create a local store if it does not exist (`ingest`); otherwise a
            missing store is reported as not found rather than silently created empty.
        new_vectors: The vector index may be new (`reindex` writes every vector again).
        embeds: False for a command that embeds nothing (`forget`, `purge`): it works on
            a local store's index of another model too (`cli.recorded`).
        options: Engine options (`top_k`, `scope`, ...).
    """
    from langchain_semantic_recall.recall import SemanticRecall

    read_only = options.get("read_only")
    backends = open_backends(
        args, create=create, new_vectors=new_vectors, read_only=read_only, embeds=embeds
    )
    if (name := backends.pop("index_name")) is not None:
        options.setdefault("index_name", name)
    if not embeds:  # it never searches: no relevance model to warn of another embedder
        options.setdefault("search_mode", "dense")
    try:
        memory = SemanticRecall(**backends, **options)
        if store_urls(args) is not None and name is None:  # a shared server's other index?
            from langchain_semantic_recall.cli.own_index import require_own_index

            require_own_index(memory.storage, memory.vector_store, memory.ensure_index().name)
        return memory
    except BaseException:
        backends["storage"].close()
        raise


def note_if_open_elsewhere(args: argparse.Namespace, command: str) -> None:
    """Say on stderr that an app holding the local store open will not see these vectors.

    Embedded Chroma shows another process's new vectors to a process only when it loads
    that resource's index again (docs/data-handling.md, *Several processes on one
    embedded store*). Called before the command opens the store itself.
    """
    from langchain_semantic_recall.cli.render import note
    from langchain_semantic_recall.storage.sqlite_schema import in_use, is_writable

    if store_urls(args) is not None:
        return
    path = store_path(args)
    file = path / "messages.sqlite3"
    if file.exists() and is_writable(file) and in_use(file):
        note(
            f"note: the store {path} is open in another process (a running app?): its "
            f"searches will not see the vectors '{command}' writes into resources it has "
            "already searched, and two processes writing one resource can lose vectors; "
            "restart it after this command, or stop it first (docs/data-handling.md)"
        )


def require_writable(args: argparse.Namespace, undone: str) -> None:
    """Refuse a writing command on a local store this user cannot write, before it asks.

    The engine would open it read-only by itself and refuse the write only then, after
    the confirmation, in words (`read_only=True`) the command line never offered.

    Args:
        args: Parsed arguments (`path`, `storage_url`, `vector_url`).
        undone: What did not happen, e.g. "nothing was forgotten".
    """
    from langchain_semantic_recall.errors import ReadOnlyError
    from langchain_semantic_recall.settings import store_unwritable

    root = store_path(args)
    if store_urls(args) is None and store_unwritable(root):
        raise ReadOnlyError(
            f"the store {root} is read-only for this user (its files or folder, or a "
            f"read-only mount): {undone}; the reading commands still work on it"
        )


def open_backends(
    args: argparse.Namespace,
    *,
    create: bool = False,
    new_vectors: bool = False,
    read_only: bool | None = None,
    embeds: bool = True,
) -> dict[str, Any]:
    """The storage, vector index, embedder and index name (`SemanticRecall`'s arguments).

    The index name None is the embedder's default. For a command that needs the backends
    but not the engine (`stats`): the engine class is a LangChain `Runnable`, whose
    import loads LangChain's tracers (~0.3 s). `embeds` as for `open_memory`.
    """
    from langchain_semantic_recall.settings import local_backends, url_backends

    urls = store_urls(args)
    if create:
        _refuse_another_database(args)
    if urls is not None:
        if not create:  # a mistyped path must not create a store, nor forget in one
            from langchain_semantic_recall.cli.places import require_url_store, require_url_vectors

            require_url_store(urls[0])
            if not new_vectors:
                require_url_vectors(urls[1])
        backends = url_backends(urls[0], urls[1], create_embeddings())
        return {**_closed_at_the_end(backends), "index_name": index_name(args)}
    path = store_path(args)
    if not create:
        require_store(path)
    if read_only and not (path / "chroma").is_dir():  # an ingest stopped before its vectors
        raise NotFoundError(
            f"the store at {path} has no vector index ({path / 'chroma'} is missing: an "
            "ingest stopped before its vectors?): 'semantic-recall reindex' embeds them"
        )
    if read_only:
        _migrate_older(path)
    backends = local_backends(path, create_embeddings(), read_only=read_only)
    _closed_at_the_end(backends)
    name = index_name(args)
    try:
        if not embeds:  # another model's index will do (its import: langchain_core's)
            from langchain_semantic_recall.cli.recorded import index_of_another_model

            if other := index_of_another_model(path, backends["embeddings"], name):
                backends["embeddings"], name = other
        require_own_vectors(path, backends["embeddings"], name, embeds=embeds)
    except BaseException:
        for part in ("vector_store", "storage"):
            backends[part].close()
        raise
    return {**backends, "index_name": name}


def _closed_at_the_end(backends: dict[str, Any]) -> dict[str, Any]:
    """Register the backends' `close` with the running command (`command_scope`)."""
    closers = _OPENED.get()
    if closers is not None:
        closers += [backends[part].close for part in ("storage", "vector_store")]
    return backends


@contextmanager
def open_storage(args: argparse.Namespace) -> Iterator[MessageStorage]:
    """The message storage alone, read-only, closed on exit (`threads`, `show`, `export`).

    For the commands that read messages only. Neither the engine (LangChain's runnables),
    the vector index (chromadb) nor the model is imported or opened, so such a command
    answers in a fraction of a second.
    """
    urls = store_urls(args)
    storage: MessageStorage
    if urls is not None:
        from langchain_semantic_recall.cli.places import require_url_store
        from langchain_semantic_recall.settings import create_storage

        require_url_store(urls[0])
        storage = create_storage(urls[0])
    else:
        from langchain_semantic_recall.storage.sqlite import SQLiteStorage

        path = store_path(args)
        require_store(path)
        _migrate_older(path)
        storage = SQLiteStorage(path / "messages.sqlite3", read_only=True)
    try:
        yield storage
    finally:
        storage.close()


def _migrate_older(path: Path) -> None:
    """Migrate a writable store an earlier release wrote, before a read-only open.

    The inspection commands open the store read-only, which refuses an older schema:
    after an upgrade, `stats`, `threads` or `search` would fail until a command that
    writes had run. A store that cannot be written is left to that error.
    """
    from langchain_semantic_recall.cli.render import note
    from langchain_semantic_recall.storage.sqlite_schema import SCHEMA_VERSION, migrate_older

    old = migrate_older(path / "messages.sqlite3")
    if old is not None:
        note(
            f"note: the store {path} was written by an earlier release (schema {old}); "
            f"migrated it to schema {SCHEMA_VERSION}, which releases before 0.3 cannot "
            "open (docs/migration-0.3.md)"
        )


def _refuse_another_database(args: argparse.Namespace) -> None:
    """`places.refuse_another_database` for the store `args` name."""
    from langchain_semantic_recall.cli.places import refuse_another_database
    from langchain_semantic_recall.urls import sqlite_file

    urls = store_urls(args)
    refuse_another_database(
        store_path(args) / "messages.sqlite3" if urls is None else sqlite_file(urls[0])
    )


# --- reading the store -------------------------------------------------------------------


def thread_messages(storage: MessageStorage, thread_id: str) -> Iterator[StoredMessage]:
    """Every message of a thread, in order."""
    from langchain_semantic_recall.records import ScopeFilter

    scope = ScopeFilter(thread_id=thread_id)
    after: tuple[str, int] | None = None
    while page := storage.list_messages(scope, after=after, limit=500):
        yield from page
        after = (page[-1].thread_id, page[-1].seq)


TITLE_READ_LIMIT = 100  # a title comes early; listing threads must not read every message


def thread_titles(storage: MessageStorage, thread_ids: set[str]) -> dict[str, str]:
    """Titles by thread id: the first one among a thread's first `TITLE_READ_LIMIT` messages.

    A JSONL file may give it on any line; most give it on the first (a ChatGPT export, on all).
    """
    from langchain_semantic_recall.records import TITLE_KEY, ScopeFilter, conversation_title

    titles: dict[str, str] = {}
    for thread_id in sorted(thread_ids):
        scope = ScopeFilter(thread_id=thread_id)
        for limit in (1, TITLE_READ_LIMIT):  # the first message alone, then the page
            page = storage.list_messages(scope, limit=limit)
            found = (conversation_title(m) for m in page if TITLE_KEY in m.payload)
            if title := next((t for t in found if t), None):
                titles[thread_id] = title
            if title or len(page) < limit:
                break
    return titles


def require_thread(storage: MessageStorage, thread_id: str, resource_id: str | None) -> str:
    """The thread's owner; not found if unknown (or owned by another resource)."""
    owner = storage.get_thread_owner(thread_id)
    if owner is None or (resource_id is not None and owner != resource_id):
        of = f" of resource {resource_id!r}" if resource_id is not None else ""
        raise NotFoundError(
            f"no thread {thread_id!r}{of} (list them with 'semantic-recall threads')"
        )
    return owner


def require_resource(storage: MessageStorage, resource_id: str) -> None:
    """Raise `NotFoundError` unless `resource_id` has a stored conversation."""
    if not storage.list_threads(resource_id):
        raise NotFoundError(
            f"no conversations of resource {resource_id!r} "
            "(list them with 'semantic-recall threads')"
        )


def message_json(message: StoredMessage) -> dict[str, Any]:
    """A stored message as plain JSON data (the CLI's `--json` outputs)."""
    return {
        "id": message.id,
        "thread": message.thread_id,
        "resource": message.resource_id,
        "role": message.role,
        "text": message.text,
        "created_at": message.created_at.isoformat(),
        "seq": message.seq,
    }


# --- output and confirmation -------------------------------------------------------------


def print_json(value: object) -> None:
    """Print `value` as indented JSON (non-ASCII kept, unknown types as text).

    Text UTF-8 cannot hold (a lone surrogate, stored from an import's JSON escape) is
    written as JSON escapes, which read back the same.
    """
    text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, indent=2, default=str)
    print(text)


def confirm(question: str) -> bool:
    """Ask on the terminal; refuse (usage error) when there is no terminal to ask on."""
    if not sys.stdin.isatty():
        raise UsageError(
            "refusing to delete without confirmation: no terminal to ask on; pass --yes"
        )
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def progress_bar(total: int, unit: str, description: str) -> Any:
    """A tqdm bar on stderr, shown only when stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=description, disable=None, leave=False)
