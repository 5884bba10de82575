"""Where a store is: the folder a command is given, and the places its URLs name.

For the checks that keep a command from writing over a store (`export -o` onto the
store's own database, `migrate` onto its source), from creating one where a reading
command was given a mistyped path, and from reading another index than the store's.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from langchain_semantic_recall.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

DEFAULT_PATH = "./.semantic-recall"
"""The store without `--path` or `$SEMANTIC_RECALL_PATH`."""
PATH_ENV = "SEMANTIC_RECALL_PATH"


def a_path(value: str) -> str:
    """Argparse `type=` of a file or folder: a quoted '~/memory' is in the home folder.

    An empty one is a usage error (exit 2): `--path "$STORE"` with `STORE` unset once
    fell back to the default store, and `forget` deleted from a store not named.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "an empty path (a shell variable that is not set?): give a file or folder"
        )
    return os.path.expanduser(value)


def store_path(args: argparse.Namespace) -> Path:
    """The store folder: `--path`, else `$SEMANTIC_RECALL_PATH`, else the default.

    Raises:
        NotFoundError: it names a file (the store is the folder of `messages.sqlite3`).
        UsageError: `$SEMANTIC_RECALL_PATH` is set but empty.
    """
    given = getattr(args, "path", None)
    from_env = os.environ.get(PATH_ENV)
    if given is None and from_env is not None and not from_env.strip():
        raise UsageError(
            f"${PATH_ENV} is set but empty (a shell variable that is not set?): give the "
            f"store with --path, or unset ${PATH_ENV} for the default {DEFAULT_PATH}"
        )
    path = Path(given or from_env or DEFAULT_PATH).expanduser()
    if path.is_file():
        folder = "the folder that holds the store's messages.sqlite3 (a new one for ingest)"
        if path.name == "messages.sqlite3":  # the store's database: its folder was meant
            folder = f"its folder, --path {path.parent}"
        raise NotFoundError(f"{path} is a file, not a store folder: give {folder}")
    return path


def chroma_folder(url: str) -> Path | None:
    """The folder a `chroma://` URL names (None: another scheme, or no path)."""
    if not url.lower().startswith("chroma://"):
        return None
    rest = url.partition("?")[0][len("chroma://") :]
    rest = rest[1:] if rest.startswith("/") else rest
    return Path(rest).expanduser() if rest else None


def place(url: str) -> tuple[str, ...] | None:
    """Where a storage or vector URL keeps its data (None: in memory, a new place each time).

    Only what names one place for certain: a file or folder by its real path (relative,
    symlinked or with `..`), a server by its host, port and database or path. Two spellings
    of one server (`localhost` and `127.0.0.1`) differ here: a refusal must never stop a
    migration between two stores.
    """
    from langchain_semantic_recall.urls import sqlite_file

    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("sqlite", "chroma"):
        path = sqlite_file(url) if scheme == "sqlite" else chroma_folder(url)
        return None if path is None else ("file", os.path.realpath(path))
    if scheme in ("", "memory"):
        return None
    parts = urlsplit(url)
    query = tuple(sorted((k, v) for k, v in parse_qsl(parts.query) if not _how(k, v)))
    host = (parts.hostname or "").lower()
    return (scheme, host, str(parts.port or ""), parts.path.rstrip("/"), repr(query))


def _how(key: str, value: str) -> bool:
    """Whether a URL parameter says how to connect, not where the data is."""
    defaults = {"tenant": "default_tenant", "database": "default_database"}
    return key.startswith("pool_") or key == "request_timeout" or defaults.get(key) == value


def require_url_store(url: str) -> None:
    """Raise `NotFoundError` when a `sqlite:` URL names no store: no file, or another file.

    Opening it would create an empty store there (in another application's database, its
    tables beside theirs), and a mistyped path would read as a store with nothing in it,
    whose every vector `stats` would call orphaned (`--path` is checked the same way: by
    `require_store`, then its read-only open).
    """
    from langchain_semantic_recall.storage.sqlite_schema import holds_no_store
    from langchain_semantic_recall.urls import sqlite_file

    file = sqlite_file(url)
    if file is not None and not file.exists():
        raise NotFoundError(
            f"no SQLite store at {file.resolve()} (sqlite:///relative/path, "
            "sqlite:////absolute/path; 'semantic-recall ingest' creates one)"
        )
    if file is not None and holds_no_store(file):
        raise NotFoundError(
            f"{file.resolve()} is not a store of this package (it is empty, or another "
            "application's database): check the URL; 'semantic-recall ingest' creates a "
            "store in a new file"
        )


def refuse_another_database(file: Path | None) -> None:
    """A store is never created in another application's SQLite database (None: no file).

    `ingest` wrote twelve tables into it and switched it to WAL (the reading commands
    call it "not a store of this package"); so did `migrate` with it as the target.

    Raises:
        NotFoundError: `file` holds tables, and no store of this package.
    """
    from langchain_semantic_recall.storage.sqlite_schema import holds_another_database

    if file is not None and holds_another_database(file):
        raise NotFoundError(
            f"{file.resolve()} is another application's database, not a store of this "
            "package: nothing was written; choose another path for the store"
        )


def require_url_vectors(url: str) -> None:
    """Raise `NotFoundError` when a `chroma:` URL names a folder that holds no index.

    Opening it would create an empty index there, and a reading command would answer
    "0 hits" for a mistyped path (`require_url_store` checks the storage URL the same way).
    """
    folder = chroma_folder(url)
    if folder is not None and not (folder / "chroma.sqlite3").exists():
        raise NotFoundError(
            f"no Chroma index at {folder.resolve()} (chroma:///relative/path, "
            "chroma:////absolute/path; 'semantic-recall ingest' creates one)"
        )


def require_own_vectors(
    path: Path, embeddings: Embeddings, name: str | None = None, *, embeds: bool = True
) -> None:
    """Refuse a store whose vectors another embedder made: every command would miss them.

    `embeds` False: the command embeds nothing (`forget`, `purge`), and works on any of
    them that `--index-name` names (`cli.recorded`): the refusal says so.

    A search would find nothing, `stats` would call every vector missing, `reindex` would
    embed the store again beside them, and `forget` would leave them behind.

    Raises:
        NotFoundError: the store's index of this model has another name (`--index-name`).
        EmbeddingMismatchError: the store holds indexes of other embedders only.
    """
    from langchain_semantic_recall.engine.vector_space import named_index
    from langchain_semantic_recall.errors import EmbeddingMismatchError
    from langchain_semantic_recall.settings import local_indexes, other_embedders

    info = named_index(embeddings, name)
    if info is None:  # only a probe embedding would tell the index: nothing to compare
        return
    found = local_indexes(path)
    mine = sorted(n for n, made in found.items() if made == (info.model, info.dimension))
    if mine and info.name not in found:
        raise NotFoundError(
            f"the store at {path} has no index {info.name!r}; its vectors of this model "
            f"are in index {mine[0]!r}: give --index-name {mine[0]}"
        )
    why = other_embedders(found, info)
    made = found.get(info.name)
    if made is not None and made != (info.model, info.dimension):  # --index-name of another
        why = f"index {info.name} was made by {made[0]} ({made[1]}-d), not by {info.model}"
    if why is not None and not embeds:
        raise EmbeddingMismatchError(
            f"the store at {path} was not embedded by the command line's model: {why}. "
            f"Give --index-name with one of {', '.join(sorted(found))}: this command "
            "embeds nothing, and works on every index of the store"
        )
    if why is not None:
        raise EmbeddingMismatchError(
            f"the store at {path} was not embedded by the command line's model: {why}. "
            "Open it from Python with the embedder that made it "
            "(SemanticRecall.local(path, embeddings=...)), or copy it with its messages "
            f"embedded again by the local model: semantic-recall migrate --path {path} "
            "--to-storage sqlite:///NEW/messages.sqlite3 --to-vector chroma:///NEW/chroma "
            "--vectors reembed"
        )


def other_indexes(args: argparse.Namespace, counted: str) -> list[tuple[str, str, int]]:
    """The embedded store's other indexes (another embedder's), as (name, model, dimension)."""
    from langchain_semantic_recall.settings import local_indexes

    found = local_indexes(store_path(args))
    return [(name, *found[name]) for name in sorted(found) if name != counted]


def require_store(path: Path) -> None:
    """Raise `NotFoundError` when `path` holds no store (a reading command never makes one)."""
    if not (path / "messages.sqlite3").exists():
        raise NotFoundError(
            f"no store at {path} (load conversations with 'semantic-recall ingest', "
            f"or choose the store with --path or ${PATH_ENV})"
        )


def disk_usage(path: Path) -> int:
    """Bytes of every file under `path`."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:  # removed while we walked
                continue
    return total
