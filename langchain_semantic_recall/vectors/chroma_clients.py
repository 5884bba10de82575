"""The chromadb clients an index opens for itself: opened, and closed, one at a time.

chromadb shares one `System` per folder in a process, and one client's open raced
another's close (the last reference: the system stops): engines opened and closed at once
on one folder failed to open ("'RustBindingsAPI' object has no attribute 'bindings'", a
`KeyError` of the folder). So this package opens (and sets up) and closes its embedded
clients under one lock, `SYSTEMS`. Upstream: chroma-core/chroma#7533 (open) makes
chromadb's own bookkeeping atomic.

chromadb also caches a folder's `System` before starting it, and keeps it when the start
fails (a damaged `chroma.sqlite3`): every later client of that folder in the process
failed ("... no attribute 'bindings'"), even once the folder was repaired as the error
said, so a notebook had to restart. `open_persistent` drops such a system again. And two
processes creating one fresh folder at once race in Chroma's migrations ("table
collections already exists", or "database is locked" while the other makes them), so
the open is tried again after a pause (`RACE_DELAYS`). Upstream: chroma-core/chroma#6499
(open; the cache keeps a client of a removed folder).

An index closes the client it opened at its `close`, or once it is collected unclosed (an
engine per request, dropped): `own` gives it the closing call. chromadb keeps each client's
`System` (its threads, its open files) until then: a read-only engine (a private copy)
or an engine per tenant folder, dropped, kept ~8 threads and ~12 files for good.

Embedded Chroma does not survive a fork: its runtime's threads are not copied, and a
process forked after its parent wrote an embedded folder hung in chromadb's first call
on any folder (most runs). So a fork never closes or deletes what its parent opened
(`in_this_process`), and refuses to open embedded Chroma once its parent had.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from langchain_semantic_recall.errors import StorageError
from langchain_semantic_recall.vectors.chroma_collections import remove_copy, temporary_copy

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

__all__ = [
    "RACE_DELAYS",
    "SYSTEMS",
    "close_client",
    "embedded_here",
    "in_this_process",
    "open_ephemeral",
    "open_persistent",
    "opened_persistent",
    "own",
    "refuse_in_a_fork",
]

logger = logging.getLogger(__name__)

SYSTEMS: Final = threading.RLock()
"""Held while this package opens and sets up, or closes, an embedded client."""
RACE_DELAYS: Final = (0.1, 0.4, 1.0)
"""Pauses before opening again a fresh folder that another process was creating."""
_STARTED_IN: list[int] = []
"""The process that started embedded Chroma here, if any (a fork inherits the list)."""


@contextmanager
def opened_persistent(folder: str, *, read_only: bool) -> Iterator[tuple[ClientAPI, str | None]]:
    """`open_persistent` under `SYSTEMS`, held until the caller has set the client up.

    Raises:
        StorageError: The folder cannot be opened, or this process is a fork of one that
            ran embedded Chroma (checked first: the fork may have copied `SYSTEMS` held).
    """
    refuse_in_a_fork()
    with SYSTEMS:
        yield open_persistent(folder, read_only=read_only)


def open_persistent(folder: str, *, read_only: bool) -> tuple[ClientAPI, str | None]:
    """A `PersistentClient` on `folder` (telemetry off), and its temporary copy if any.

    `read_only` opens a private temporary copy (`temporary_copy`); otherwise a purge a
    crash cut short is finished first (`chroma_rebuild.recover_swap`).

    Raises:
        StorageError: The folder holds a damaged index, or cannot be opened.
    """
    from langchain_semantic_recall.vectors.chroma_rebuild import recover_swap

    # Chroma caches one client system per path string in a process: a relative path read
    # from another working directory would reach the first store's files. "~" is the
    # home folder, as for SQLite (Chroma made a folder named "~" in the working one).
    folder = os.path.abspath(os.path.expanduser(folder))
    refuse_in_a_fork()
    copy: str | None = None
    if read_only:
        copy = temporary_copy(folder)
    elif recovered := recover_swap(folder):
        logger.warning("Chroma folder %s: finished an interrupted purge: %s", folder, recovered)
    delays = iter(RACE_DELAYS)
    while True:
        try:
            return _started_client(copy or folder), copy
        except Exception as exc:  # chromadb raises its own InternalError, or ValueError
            delay = next(delays, None) if _racing(exc) else None
            if delay is None:
                if copy is not None:
                    remove_copy(copy)
                raise StorageError(
                    f"cannot open the Chroma index {folder} ({type(exc).__name__}: {exc}); "
                    + _remedy(exc)
                ) from exc
            logger.info("Chroma folder %s is being created elsewhere; opening again", folder)
        time.sleep(delay)


def _racing(error: Exception) -> bool:
    """Whether a failed open is another process creating the folder (it may work soon).

    Not chromadb's "An instance of Chroma already exists for PATH with different
    settings": a client of this process holds the folder, and will until it is closed.
    """
    signs = ("already exists", "database is locked")
    return not _other_settings(error) and any(sign in str(error) for sign in signs)


def _other_settings(error: Exception) -> bool:
    return "with different settings" in str(error)


def _remedy(error: Exception) -> str:
    """What the user can do about a failed open."""
    if _other_settings(error):
        return (
            "a chromadb client of this process opened the folder with other settings: "
            "close it first, or wrap it, ChromaVectorIndex(client)"
        )
    return (
        "if it is damaged, restore it from a backup, or move it aside and rebuild it from "
        "the messages with 'semantic-recall reindex'"
    )


def _started_client(path: str) -> ClientAPI:
    """`chromadb.PersistentClient(path)`; a system that fails to start leaves its cache."""
    import chromadb
    from chromadb.api.shared_system_client import SharedSystemClient
    from chromadb.config import Settings

    cache = getattr(SharedSystemClient, "_identifier_to_system", None)
    cached = not isinstance(cache, dict) or path in cache  # a live system: never dropped
    try:
        client = chromadb.PersistentClient(path=path, settings=Settings(anonymized_telemetry=False))
    except Exception:
        if not cached:
            cache.pop(path, None)  # type: ignore[union-attr]
        raise
    embedded_here()
    return client


def embedded_here() -> None:
    """Record that this process runs embedded Chroma (a client of ours, or the user's).

    Raises:
        StorageError: this process is a fork of one that ran it (`refuse_in_a_fork`).
    """
    refuse_in_a_fork()
    _STARTED_IN[:] = _STARTED_IN or [os.getpid()]


def refuse_in_a_fork() -> None:
    """Refuse to start embedded Chroma in a process forked from one that had started it.

    Raises:
        StorageError: this process is such a fork (its first chromadb call would hang).
    """
    if _STARTED_IN and _STARTED_IN[0] != os.getpid():
        raise StorageError(
            f"embedded Chroma cannot run in this process: it was forked from process "
            f"{_STARTED_IN[0]} after that one had opened embedded Chroma, whose threads do "
            "not cross a fork (chromadb's calls here hang). Open embedded stores only in "
            "the processes that use them, after any fork (multiprocessing's 'spawn' start "
            "method; gunicorn without --preload), or use a Chroma server"
        )


def open_ephemeral() -> ClientAPI:
    """An `EphemeralClient` (telemetry off).

    Raises:
        StorageError: this process is a fork of one that ran embedded Chroma.
    """
    import chromadb
    from chromadb.config import Settings

    refuse_in_a_fork()
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    embedded_here()
    return client


def close_client(client: ClientAPI) -> None:
    """Close a client this package opened (chromadb >= 1.1 has `close`), under `SYSTEMS`."""
    if hasattr(client, "close"):
        with SYSTEMS:
            client.close()


def own(
    index: object, close: Callable[[], object], *, copy: str | None = None
) -> Callable[[], None]:
    """The call that closes what `index` opened (`close`), at the index's own close.

    Its read-only `copy` (`open_persistent`) is removed once the index is collected, or
    at exit.

    If the index is collected unclosed, `close` runs then, on a thread of its own: a
    finalizer runs inside whatever call collected the index, where waiting for `SYSTEMS`
    or chromadb's locks could deadlock. `close` must not refer to `index`. Neither runs
    in a forked copy of the process (`in_this_process`).
    """
    close = in_this_process(close)
    collected = weakref.finalize(index, in_this_process(_on_a_thread), close)
    collected.atexit = False  # at exit, chromadb tears itself down
    if copy is not None:
        weakref.finalize(index, in_this_process(remove_copy), copy)

    def now() -> None:
        if collected.detach() is not None:  # (once: not again when collected)
            close()

    return now


def _on_a_thread(close: Callable[[], object]) -> None:
    threading.Thread(target=close, name="semantic-recall-close", daemon=True).start()


def in_this_process(call: Callable[..., object]) -> Callable[..., None]:
    """`call`, done only in this process, never in a forked copy of it.

    A fork must not close or delete what its parent still uses: a collected index closed
    the parent's client (or hung, on a thread that never started), and a read-only
    copy's cleanup at the fork's exit deleted the copy the parent was reading.
    """
    pid = os.getpid()

    def here(*args: object) -> None:
        if os.getpid() == pid:
            call(*args)

    return here
