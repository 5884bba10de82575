"""What a storage or vector URL names: its scheme, its file, its text without a password.

Pure parsing, no backend imported (the command line reads URLs before it opens anything).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from langchain_semantic_recall.errors import InvalidOptionError

__all__ = [
    "POSTGRES_SCHEMES",
    "SQLITE_COMPANIONS",
    "check_memory_url",
    "file_path",
    "known_scheme",
    "redact",
    "sqlite_file",
]

POSTGRES_SCHEMES: Final = ("postgresql", "postgres", "postgresql+psycopg")
SQLITE_COMPANIONS: Final = ("", "-wal", "-shm", "-journal")
"""A SQLite database's files: the database, and what SQLite writes beside it."""
_SCHEMES: Final = {
    "storage": ("memory", "sqlite", *POSTGRES_SCHEMES),
    "vector": ("memory", "chroma", "http", "https"),
}
_EXAMPLES: Final = {
    "storage": "sqlite:///path, postgresql://... or memory://",
    "vector": "chroma:///path, http://host:port or memory://",
}


def known_scheme(kind: str, url: str) -> str:
    """The scheme of a `kind` ("storage" or "vector") URL, lower case.

    Raises:
        InvalidOptionError: a scheme no `kind` URL has.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in _SCHEMES[kind]:
        raise InvalidOptionError(f"unknown {kind} URL {redact(url)!r}: use {_EXAMPLES[kind]}")
    return scheme


_SECRET_PARAMETER = re.compile(r"(?i)([?&](?:ssl)?password=)[^&#]*")
"""A password given as a query parameter (libpq takes `password` and `sslpassword`)."""


def redact(url: str) -> str:
    """`url` without its passwords (for logs and messages).

    Both kinds: in `user:password@`, and a `password` or `sslpassword` query parameter.

    Args:
        url: Any URL.
    """
    password = urlsplit(url).password
    if password is not None:
        url = url.replace(f":{password}@", ":***@", 1)
    return _SECRET_PARAMETER.sub(r"\1***", url)


def file_path(url: str, scheme: str) -> str:
    """The path of `scheme:///relative` or `scheme:////absolute` (SQLAlchemy style)."""
    rest = url[len(scheme) + 3 :]  # after "scheme://"
    if rest.startswith("/"):
        rest = rest[1:]
    if not rest:
        raise InvalidOptionError(f"{url!r} has no path: write {scheme}:///relative/path")
    return os.path.expanduser(rest)  # "~": the home folder, as for --path


def sqlite_file(url: str) -> Path | None:
    """The file a `sqlite:` storage URL names (None: another scheme, or in memory).

    Raises:
        InvalidOptionError: a `sqlite:` URL without a path.
    """
    if not url.lower().startswith("sqlite://"):
        return None
    if "?" in url or "#" in url:
        raise InvalidOptionError(
            f"{redact(url)!r}: a sqlite:// URL takes no parameters ('?...' would be read as "
            "part of the file name); write sqlite:///relative/path or sqlite:////absolute/path"
        )
    if url[len("sqlite://") :] in ("", "/", "/:memory:"):
        return None
    return Path(file_path(url, "sqlite"))


def check_memory_url(url: str, kind: str) -> None:
    """Refuse anything after `memory://` (it names no place and takes no parameters)."""
    if url[len("memory://") :]:
        raise InvalidOptionError(
            f"{redact(url)!r}: an in-memory {kind} takes no path or parameters; write memory://"
        )
