"""Build the engine from URLs, so moving to servers is a configuration change.

Storage URLs:

- ``sqlite:///relative/path.sqlite3``, ``sqlite:////absolute/path.sqlite3`` (SQLAlchemy's
  convention), ``sqlite://`` or ``sqlite:///:memory:`` for an in-memory database;
- ``postgresql://user:password@host:5432/db`` (also ``postgres://`` and
  ``postgresql+psycopg://``); ``pool_min_size`` / ``pool_max_size`` query parameters size
  the connection pools, every other parameter goes to libpq (``sslmode``, ``options``...);
- ``memory://``: :class:`InMemoryStorage` (tests, notebooks).

Vector URLs:

- ``chroma:///relative/path``, ``chroma:////absolute/path``: embedded, persistent Chroma;
- ``http://host:port``, ``https://host``: a Chroma server (``chroma run``, or the
  front end of Chroma's distributed deployment);
- ``memory://``: :class:`InMemoryVectorIndex` (exact search in memory).

Example::

    memory = SemanticRecall.from_url(
        storage="postgresql://app@db.internal/memory", vector="http://chroma.internal:8000"
    )
    settings = RecallSettings.from_env()  # SEMANTIC_RECALL_STORAGE_URL / _VECTOR_URL
    memory = settings.create()
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from langchain_core.embeddings import Embeddings

from langchain_semantic_recall.errors import InvalidOptionError

if TYPE_CHECKING:
    from langchain_semantic_recall.recall import SemanticRecall
    from langchain_semantic_recall.storage.base import MessageStorage
    from langchain_semantic_recall.vectors.base import VectorIndex

__all__ = [
    "STORAGE_URL_ENV",
    "VECTOR_URL_ENV",
    "RecallSettings",
    "create_from_url",
    "create_storage",
    "create_vector_index",
    "redact",
]

STORAGE_URL_ENV: Final = "SEMANTIC_RECALL_STORAGE_URL"
VECTOR_URL_ENV: Final = "SEMANTIC_RECALL_VECTOR_URL"
DEFAULT_STORAGE_URL: Final = "sqlite:///semantic-recall-data/messages.sqlite3"
DEFAULT_VECTOR_URL: Final = "chroma:///semantic-recall-data/chroma"
_POSTGRES_SCHEMES: Final = ("postgresql", "postgres", "postgresql+psycopg")
_POOL_PARAMS: Final = {"pool_min_size": "min_size", "pool_max_size": "max_size"}

E = TypeVar("E", bound="SemanticRecall")


def redact(url: str) -> str:
    """``url`` without its password (for logs and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _file_path(url: str, scheme: str) -> str:
    """The path of ``scheme:///relative`` or ``scheme:////absolute`` (SQLAlchemy style)."""
    rest = url[len(scheme) + 3 :]  # after "scheme://"
    if rest.startswith("/"):
        rest = rest[1:]
    if not rest:
        raise InvalidOptionError(f"{url!r} has no path: write {scheme}:///relative/path")
    return rest


def _postgres(url: str) -> MessageStorage:
    from langchain_semantic_recall.storage.postgres import PostgresStorage

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    sizes: dict[str, int] = {}
    kept: list[tuple[str, str]] = []
    for key, value in query:
        if key in _POOL_PARAMS:
            try:
                sizes[_POOL_PARAMS[key]] = int(value)
            except ValueError as exc:
                raise InvalidOptionError(f"{key} must be an integer, got {value!r}") from exc
        else:
            kept.append((key, value))
    conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(kept)))
    return PostgresStorage(
        conninfo, min_size=sizes.get("min_size", 1), max_size=sizes.get("max_size", 10)
    )


def create_storage(url: str) -> MessageStorage:
    """The message storage a URL names (see the module docstring).

    Raises:
        InvalidOptionError: an unknown scheme or a malformed URL.
        StorageError: the storage cannot be opened.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        from langchain_semantic_recall.storage.memory import InMemoryStorage

        return InMemoryStorage()
    if scheme == "sqlite":
        from langchain_semantic_recall.storage.sqlite import MEMORY_PATH, SQLiteStorage

        rest = url[len("sqlite://") :]
        if rest in ("", "/", "/:memory:"):
            return SQLiteStorage(MEMORY_PATH)
        return SQLiteStorage(_file_path(url, "sqlite"))
    if scheme in _POSTGRES_SCHEMES:
        return _postgres(url)
    raise InvalidOptionError(
        f"unknown storage URL {redact(url)!r}: use sqlite:///path, postgresql://... or memory://"
    )


def create_vector_index(url: str, *, timeout: float = 30.0) -> VectorIndex:
    """The vector index a URL names (see the module docstring).

    Args:
        url: The vector URL.
        timeout: Seconds to wait for a Chroma server's heartbeat.

    Raises:
        InvalidOptionError: an unknown scheme or a malformed URL.
        StorageError: a Chroma server did not answer in time.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

        return InMemoryVectorIndex()
    if scheme == "chroma":
        from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

        return ChromaVectorIndex.persistent(_file_path(url, "chroma"))
    if scheme in ("http", "https"):
        from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex

        return ChromaServerVectorIndex(url, timeout=timeout)
    raise InvalidOptionError(
        f"unknown vector URL {redact(url)!r}: use chroma:///path, http://host:port or memory://"
    )


def create_from_url(
    cls: type[E],
    *,
    storage: str,
    vector: str,
    embeddings: Embeddings | None = None,
    **options: Any,
) -> E:
    """Build ``cls`` (:class:`SemanticRecall`) from a storage URL and a vector URL.

    Args:
        cls: The engine class.
        storage: The storage URL.
        vector: The vector URL.
        embeddings: The embedder; the local default model when None.
        **options: Other engine options (``top_k``, ``scope``...).

    Raises:
        InvalidOptionError: a bad URL or option.
        StorageError: a storage or server cannot be reached.
    """
    if not isinstance(storage, str) or not isinstance(vector, str):
        raise InvalidOptionError("storage and vector must be URL strings")
    message_storage = create_storage(storage)
    try:
        vector_index = create_vector_index(vector)
        if embeddings is None:
            from langchain_semantic_recall.local_embeddings import LocalEmbeddings

            embeddings = LocalEmbeddings()
        return cls(
            storage=message_storage, vector_store=vector_index, embeddings=embeddings, **options
        )
    except BaseException:
        message_storage.close()
        raise


@dataclass(frozen=True)
class RecallSettings:
    """Where the memory lives, as data: read it from the environment or a config file.

    Attributes:
        storage_url: The message storage URL.
        vector_url: The vector index URL.
        options: Engine options (``top_k``, ``scope``, ``index_name``...).

    Example::

        settings = RecallSettings.from_env()
        memory = settings.create(embeddings=OpenAIEmbeddings(model="text-embedding-3-small"))
    """

    storage_url: str = DEFAULT_STORAGE_URL
    vector_url: str = DEFAULT_VECTOR_URL
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> RecallSettings:
        """Settings from ``SEMANTIC_RECALL_STORAGE_URL`` and ``SEMANTIC_RECALL_VECTOR_URL``.

        Unset variables keep the embedded defaults (under ``./semantic-recall-data``).
        """
        env = os.environ if environ is None else environ
        return cls(
            storage_url=env.get(STORAGE_URL_ENV) or DEFAULT_STORAGE_URL,
            vector_url=env.get(VECTOR_URL_ENV) or DEFAULT_VECTOR_URL,
            options=options,
        )

    def create(self, embeddings: Embeddings | None = None, **options: Any) -> SemanticRecall:
        """The engine these settings describe (``options`` override the stored ones)."""
        from langchain_semantic_recall.recall import SemanticRecall

        return create_from_url(
            SemanticRecall,
            storage=self.storage_url,
            vector=self.vector_url,
            embeddings=embeddings,
            **{**self.options, **options},
        )

    def __repr__(self) -> str:
        return (
            f"RecallSettings(storage_url={redact(self.storage_url)!r}, "
            f"vector_url={redact(self.vector_url)!r}, options={dict(self.options)!r})"
        )
