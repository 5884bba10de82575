"""Build the engine from URLs, so moving to servers is a configuration change.

Storage URLs:

- `sqlite:///relative/path.sqlite3`, `sqlite:////absolute/path.sqlite3` (SQLAlchemy's
  convention), `sqlite://` or `sqlite:///:memory:` for an in-memory database (no
  query parameters: they are refused, never read as part of the file name);
- `postgresql://user:password@host:5432/db` (also `postgres://` and
  `postgresql+psycopg://`); `pool_min_size` / `pool_max_size` query parameters size
  the connection pools, `pool_timeout` is the seconds a call waits for a connection (30),
  every other parameter goes to libpq (`sslmode`, `options`...);
- `memory://`: `InMemoryStorage` (tests, notebooks).

Vector URLs:

- `chroma:///relative/path`, `chroma:////absolute/path`: embedded, persistent Chroma,
  keeping at most `DEFAULT_MAX_LOADED` resources' indexes loaded (all unloaded when one
  more is needed, losing nothing: `vectors.chroma_workarounds.unload`; `?max_loaded=N`
  sets N, `0` keeps Chroma's own capacity, the open-file limit / 5); resources of
  `?snapshots_from=N` vectors or more (20,000 by default, `0`: none) keep a snapshot of
  their vectors for their first search in a process (`vectors.chroma_snapshots`);
- `http://host:port`, `https://host`: a Chroma server (`chroma run`, or the
  front end of Chroma's distributed deployment);
- `memory://`: `InMemoryVectorIndex` (exact search in memory).

Example:
    ```python
    memory = SemanticRecall.from_url(
        storage="postgresql://app@db.internal/memory", vector="http://chroma.internal:8000"
    )
    settings = RecallSettings.from_env()  # SEMANTIC_RECALL_STORAGE_URL / _VECTOR_URL
    memory = SemanticRecall.from_url(**settings.url_options())
    ```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

from langchain_semantic_recall.cpu_gate import CpuGate
from langchain_semantic_recall.errors import InvalidOptionError, StorageError
from langchain_semantic_recall.options import URL_OPTIONS, check_option_names, store_folder
from langchain_semantic_recall.urls import (
    check_memory_url,
    file_path,
    known_scheme,
    redact,
    sqlite_file,
)
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.chroma_workarounds import ChromaWorkarounds

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.records import ScopeFilter
    from langchain_semantic_recall.storage.base import MessageStorage
    from langchain_semantic_recall.vectors.chroma_file import FileIndex

__all__ = [
    "DEFAULT_MAX_LOADED",
    "STORAGE_URL_ENV",
    "VECTOR_URL_ENV",
    "RecallSettings",
    "as_vector_index",
    "create_storage",
    "create_vector_index",
    "local_backends",
    "redact",
    "url_backends",
]

STORAGE_URL_ENV: Final = "SEMANTIC_RECALL_STORAGE_URL"
DEFAULT_MAX_LOADED: Final = 128
"""Resources whose index embedded Chroma keeps loaded, at most the open-file limit / 5."""
VECTOR_URL_ENV: Final = "SEMANTIC_RECALL_VECTOR_URL"
DEFAULT_STORAGE_URL: Final = "sqlite:///semantic-recall-data/messages.sqlite3"
DEFAULT_VECTOR_URL: Final = "chroma:///semantic-recall-data/chroma"
_POOL_PARAMS: Final = {
    "pool_min_size": "min_size",
    "pool_max_size": "max_size",
    "pool_timeout": "timeout",
}


def _chroma(url: str, cpu_gate: CpuGate | None) -> VectorIndex:
    """Embedded Chroma at a `chroma://` URL's path (`?max_loaded=N&snapshots_from=N`)."""
    path, loaded, snapshots = _chroma_options(url)
    fixes = ChromaWorkarounds(max_loaded=loaded or None, cpu_gate=cpu_gate)
    return _embedded_chroma(path, fixes, snapshots_from=snapshots)


def _chroma_options(url: str) -> tuple[str, int, int]:
    """A `chroma://` URL's (folder, max_loaded, snapshots_from), or `InvalidOptionError`."""
    from langchain_semantic_recall.vectors.chroma_snapshots import SNAPSHOTS_FROM

    base, _, query = url.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    loaded = options.pop("max_loaded", str(DEFAULT_MAX_LOADED))
    snapshots = options.pop("snapshots_from", str(SNAPSHOTS_FROM))
    if options or not loaded.isdigit() or not snapshots.isdigit():
        raise InvalidOptionError(
            f"{redact(url)!r}: the chroma:// parameters are max_loaded=N and "
            "snapshots_from=N (N >= 0)"
        )
    return file_path(base, "chroma"), int(loaded), int(snapshots)


def _embedded_chroma(
    path: str | PathLike[str],
    workarounds: ChromaWorkarounds,
    *,
    read_only: bool = False,
    snapshots_from: int | None = None,
) -> VectorIndex:
    """Embedded Chroma at `path` with these workarounds (snapshots: the default's)."""
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    if snapshots_from is None:
        return ChromaVectorIndex.persistent(path, read_only=read_only, workarounds=workarounds)
    return ChromaVectorIndex.persistent(
        path, read_only=read_only, workarounds=workarounds, snapshots_from=snapshots_from
    )


def local_indexes(path: str | PathLike[str]) -> dict[str, tuple[str, int]]:
    """The indexes of the embedded store at `path`: name -> (model, dimension).

    Read from Chroma's own file (`vectors.chroma_file`); empty when it cannot tell.
    """
    from langchain_semantic_recall.vectors.chroma_file import ChromaFile

    return ChromaFile(Path(path).expanduser() / "chroma").indexes() or {}


def other_embedders(found: Mapping[str, tuple[str, int]], info: IndexInfo) -> str | None:
    """Why an embedded store of indexes `found` (`local_indexes`) has none for `info`.

    None when it holds `info`'s index, holds none yet, or its file could not tell.
    """
    if not found or info.name in found:
        return None
    made = "; ".join(f"{m} ({d}-d, index {name})" for name, (m, d) in sorted(found.items()))
    return f"its vectors were made by {made}, not by {info.model} ({info.dimension}-d)"


def local_file_index(
    path: str | PathLike[str], info: IndexInfo, scope: ScopeFilter | None
) -> FileIndex | None:
    """The messages holding a vector in `scope` of index `info`, in the embedded store `path`.

    Read from Chroma's own file, read only, without importing chromadb
    (`vectors.chroma_file`): what `ChromaVectorIndex.message_ids` gives once the index
    is open, and which of them carry message metadata. None when the file cannot tell
    (unreadable, another shape, an index not created yet): open the index
    (`local_backends`) and ask it.

    Raises:
        EmbeddingMismatchError: the index was built with another model or dimension,
            as opening it would say.
    """
    from langchain_semantic_recall.vectors.chroma_file import ChromaFile
    from langchain_semantic_recall.vectors.chroma_layout import check_model

    found = ChromaFile(Path(path).expanduser() / "chroma").index(info.name, scope)
    if found is None:
        return None
    check_model(info.name, found.model, found.dimension, info.model, info.dimension)
    return found


def settle_snapshots(index: VectorIndex) -> int:
    """Leave the resources this process wrote a vector snapshot the next process can use.

    For a process ending after many writes (`semantic-recall ingest`): an embedded Chroma
    index's `ColdSnapshots.settle`. Returns how many have one (0 if another index or off).
    """
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    if not isinstance(index, ChromaVectorIndex) or index.snapshots is None:
        return 0
    index.flush()  # the last turns' vectors, written behind, are among them
    return index.snapshots.settle()


def _workarounds(value: ChromaWorkarounds | bool, cpu_gate: CpuGate | None) -> ChromaWorkarounds:
    """`True`: the defaults of the embedded store (`DEFAULT_MAX_LOADED`, the shared gate)."""
    if value is True:
        return ChromaWorkarounds(max_loaded=DEFAULT_MAX_LOADED, cpu_gate=cpu_gate)
    return ChromaWorkarounds.of(value)


def _postgres(url: str) -> MessageStorage:
    from langchain_semantic_recall.storage.postgres import PostgresStorage
    from langchain_semantic_recall.storage.postgres.conninfo import check_conninfo, pool_number

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    sizes: dict[str, float] = {}
    kept: list[tuple[str, str]] = []
    for key, value in query:
        if key in _POOL_PARAMS:
            if _POOL_PARAMS[key] in sizes:
                raise InvalidOptionError(f"{key} is given twice in {redact(url)!r}: give it once")
            sizes[_POOL_PARAMS[key]] = pool_number(key, value)
        else:
            kept.append((key, value))
    low, high = int(sizes.get("min_size", 1)), int(sizes.get("max_size", 10))
    if high < 1 or low > high:
        raise InvalidOptionError(
            f"pool_min_size={low} and pool_max_size={high}: a pool needs 0 <= min <= max "
            "and max >= 1"
        )
    # Built by hand: `urlunsplit` drops the `//` of an empty host (a Unix socket URL,
    # `postgresql:///memory?host=/run/postgresql`), which libpq then refuses.
    rest = f"?{urlencode(kept)}" if kept else ""
    conninfo = f"postgresql://{parts.netloc}{parts.path}{rest}"
    check_conninfo(conninfo, redact(url))
    timeout = sizes.get("timeout", 30.0)
    return PostgresStorage(conninfo, min_size=low, max_size=high, timeout=timeout)


def create_storage(url: str) -> MessageStorage:
    """The message storage a URL names (see the module docstring).

    Args:
        url: The storage URL.

    Raises:
        InvalidOptionError: an unknown scheme or a malformed URL.
        StorageError: the storage cannot be opened.
    """
    scheme = known_scheme("storage", url)
    if scheme == "memory":
        check_memory_url(url, "storage")
        from langchain_semantic_recall.storage.memory import InMemoryStorage

        return InMemoryStorage()
    if scheme == "sqlite":
        from langchain_semantic_recall.storage.sqlite import MEMORY_PATH, SQLiteStorage

        file = sqlite_file(url)
        return SQLiteStorage(MEMORY_PATH if file is None else file)
    return _postgres(url)


def create_vector_index(
    url: str, *, timeout: float = 30.0, cpu_gate: CpuGate | None = None
) -> VectorIndex:
    """The vector index a URL names (see the module docstring).

    Args:
        url: The vector URL.
        timeout: Seconds to wait for a Chroma server's heartbeat.
        cpu_gate: For embedded Chroma: the gate its async writes share with the local
            model (`ChromaWorkarounds.cpu_gate`).

    Raises:
        InvalidOptionError: an unknown scheme or a malformed URL.
        StorageError: a Chroma server did not answer in time.
    """
    scheme = known_scheme("vector", url)
    if scheme == "memory":
        check_memory_url(url, "vector index")
        from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

        return InMemoryVectorIndex()
    if scheme == "chroma":
        return _chroma(url, cpu_gate)
    from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex

    return ChromaServerVectorIndex(url, timeout=timeout)  # http:// or https://


def as_vector_index(value: object) -> VectorIndex:
    """A `VectorIndex` as it is; a LangChain `VectorStore` wrapped in the adapter.

    Args:
        value: A `VectorIndex` or a LangChain `VectorStore`.
    """
    if isinstance(value, VectorIndex):
        return value
    from langchain_core.vectorstores import VectorStore

    if isinstance(value, VectorStore):
        from langchain_semantic_recall.vectors.langchain import LangChainVectorIndex

        return LangChainVectorIndex(value)
    raise InvalidOptionError(
        "vector_store must be a VectorIndex (ChromaVectorIndex.persistent(path), "
        "ChromaVectorIndex(chromadb_client), ChromaServerVectorIndex(url)...) or a LangChain "
        f"VectorStore, got {type(value).__name__}"
    )


Backends = dict[str, Any]
"""`storage`, `vector_store` and `embeddings`: the keyword arguments of the engine."""


def store_unwritable(root: Path) -> bool:
    """Whether this user cannot write the embedded store under `root`.

    Its messages file, or Chroma's folder (Chroma writes when it opens): a read-only
    mount, or file modes.

    Args:
        root: The store's folder.
    """
    from langchain_semantic_recall.storage import sqlite_schema

    file, chroma = root / "messages.sqlite3", root / "chroma"
    return (file.exists() and not sqlite_schema.is_writable(file)) or (
        chroma.is_dir() and not os.access(chroma, os.W_OK | os.X_OK)
    )


def local_backends(
    path: str | PathLike[str],
    embeddings: Embeddings | None = None,
    *,
    read_only: bool | None = None,
    chroma_workarounds: ChromaWorkarounds | bool = True,
) -> Backends:
    """The embedded default under `path`: SQLite, embedded Chroma, the local model.

    `read_only=None` opens read-only exactly when the store cannot be written (a
    read-only mount, a backup without write permission): SQLite through a `mode=ro`
    URI, Chroma on a temporary copy (it writes on open). `True` forces it; `False`
    refuses such a store.

    Args:
        path: The store's folder (`messages.sqlite3` and `chroma/` inside).
        embeddings: The embedder (default: the local model).
        read_only: Open read-only: True forces it, None decides as above.
        chroma_workarounds: True keeps at most `DEFAULT_MAX_LOADED` resources loaded and
            shares one `CpuGate` between the local model and Chroma's async writes; False
            turns every Chroma workaround off; a `ChromaWorkarounds` is used as it is.

    Raises:
        StorageError: `read_only` is False and the store cannot be written.
    """
    from langchain_semantic_recall.storage.sqlite import SQLiteStorage

    if not isinstance(read_only, bool | None):  # "no" would read as True
        raise InvalidOptionError(f"read_only must be True, False or None, got {read_only!r}")
    root = store_folder(path)
    file = root / "messages.sqlite3"
    unwritable = store_unwritable(root)
    if read_only is False and unwritable:
        raise StorageError(
            f"the store at {root} cannot be written by this user (its files or folder, or a "
            "read-only mount): open it with read_only=True to read it, or make it writable"
        )
    if read_only is None:
        read_only = unwritable
    storage = SQLiteStorage(file, read_only=read_only)
    try:
        gate, model = _model(embeddings)
        fixes = _workarounds(chroma_workarounds, gate)
        return {
            "storage": storage,
            "vector_store": _embedded_chroma(root / "chroma", fixes, read_only=read_only),
            "embeddings": model,
        }
    except BaseException:
        storage.close()
        raise


def url_backends(storage: str, vector: str, embeddings: Embeddings | None = None) -> Backends:
    """The backends two URLs name (see the module docstring); the local model by default.

    Args:
        storage: The storage URL.
        vector: The vector index URL.
        embeddings: The embedder (default: the local model).

    Raises:
        InvalidOptionError: a bad URL.
        StorageError: a storage or server cannot be reached.
    """
    if not isinstance(storage, str) or not isinstance(vector, str):
        raise InvalidOptionError("storage and vector must be URL strings")
    # The vector URL is read whole before the storage is opened (and perhaps created): a
    # mistyped one left a new store behind. Nothing is deleted after a failed open: another
    # process may have opened the new store meanwhile.
    _check_vector_url(vector)
    message_storage = create_storage(storage)
    try:
        gate, model = _model(embeddings)
        return {
            "storage": message_storage,
            "vector_store": create_vector_index(vector, cpu_gate=gate),
            "embeddings": model,
        }
    except BaseException:
        message_storage.close()
        raise


def _check_vector_url(url: str) -> None:
    """Raise `InvalidOptionError` for a vector URL `create_vector_index` would refuse (no I/O)."""
    scheme = known_scheme("vector", url)
    if scheme == "memory":
        check_memory_url(url, "vector index")
    elif scheme == "chroma":
        _chroma_options(url)
    else:
        from langchain_semantic_recall.vectors.chroma_server import ChromaURL

        ChromaURL.parse(url)


def _model(embeddings: Embeddings | None) -> tuple[CpuGate | None, Embeddings]:
    """The embedder (the local model by default) and the `CpuGate` its runs share, if any.

    The engine owns the gate: a new local model gets a new one, passed to embedded Chroma
    too; a given embedder brings its own (`LocalEmbeddings(cpu_gate=...)`) or none.
    """
    if embeddings is not None:
        return getattr(embeddings, "cpu_gate", None), embeddings
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings

    gate = CpuGate()
    return gate, LocalEmbeddings(cpu_gate=gate)


@dataclass(frozen=True)
class RecallSettings:
    """Where the memory lives, as data: read it from the environment or a config file.

    Attributes:
        storage_url: The message storage URL.
        vector_url: The vector index URL.
        options: Engine options (`top_k`, `scope`, `index_name`...).

    Example:
        ```python
        settings = RecallSettings.from_env()
        memory = SemanticRecall.from_url(
            **settings.url_options(), embeddings=OpenAIEmbeddings(model="text-embedding-3-small")
        )
        ```
    """

    storage_url: str = DEFAULT_STORAGE_URL
    vector_url: str = DEFAULT_VECTOR_URL
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("storage_url", "vector_url"):
            if not isinstance(getattr(self, name), str):
                raise InvalidOptionError(
                    f"{name} must be a URL string, got {getattr(self, name)!r}"
                )
        check_option_names(self.options, URL_OPTIONS, "SemanticRecall.from_url")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> RecallSettings:
        """Settings from `SEMANTIC_RECALL_STORAGE_URL` and `SEMANTIC_RECALL_VECTOR_URL`.

        Neither set: the embedded defaults (under `./semantic-recall-data`); one set
        without the other is refused (a server beside a local store would split them).

        Args:
            environ: The variables to read (default: `os.environ`).
            **options: Engine options kept in `options` (`top_k`, `scope`...).
        """
        env = os.environ if environ is None else environ
        storage, vector = env.get(STORAGE_URL_ENV), env.get(VECTOR_URL_ENV)
        if bool(storage) != bool(vector):  # one server beside an embedded store
            given, unset = (
                (STORAGE_URL_ENV, VECTOR_URL_ENV) if storage else (VECTOR_URL_ENV, STORAGE_URL_ENV)
            )
            raise InvalidOptionError(
                f"{given} is set but {unset} is not: set both (a message store and its "
                "index go together), or neither for the embedded store"
            )
        return cls(
            storage_url=storage or DEFAULT_STORAGE_URL,
            vector_url=vector or DEFAULT_VECTOR_URL,
            options=options,
        )

    def url_options(self) -> dict[str, Any]:
        """Keyword arguments for `SemanticRecall.from_url(**settings.url_options())`."""
        return {"storage": self.storage_url, "vector": self.vector_url, **self.options}

    def __repr__(self) -> str:
        return (
            f"RecallSettings(storage_url={redact(self.storage_url)!r}, "
            f"vector_url={redact(self.vector_url)!r}, options={dict(self.options)!r})"
        )
