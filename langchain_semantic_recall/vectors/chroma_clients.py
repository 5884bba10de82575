"""The chromadb clients an index opens for itself: opened, and closed, one at a time.

chromadb shares one `System` per folder in a process, and one client's open raced
another's close (the last reference: the system stops): engines opened and closed at once
on one folder failed to open ("'RustBindingsAPI' object has no attribute 'bindings'", a
`KeyError` of the folder). So this package opens (and sets up) and closes its embedded
clients under one lock, `SYSTEMS`. Upstream: chroma-core/chroma#7533 (open) makes
chromadb's own bookkeeping atomic.

An index closes the client it opened at its `close`, or once it is collected unclosed (an
engine per request, dropped): `own` gives it the closing call. chromadb keeps each client's
`System` (its threads, its open files) until then: a read-only engine (a private copy)
or an engine per tenant folder, dropped, kept ~8 threads and ~12 files for good.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from langchain_semantic_recall.vectors.chroma_collections import open_persistent

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

__all__ = ["SYSTEMS", "close_client", "opened_persistent", "own"]

SYSTEMS: Final = threading.RLock()
"""Held while this package opens and sets up, or closes, an embedded client."""


@contextmanager
def opened_persistent(folder: str, *, read_only: bool) -> Iterator[tuple[ClientAPI, str | None]]:
    """`open_persistent` under `SYSTEMS`, held until the caller has set the client up."""
    with SYSTEMS:
        yield open_persistent(folder, read_only=read_only)


def close_client(client: ClientAPI) -> None:
    """Close a client this package opened (chromadb >= 1.1 has `close`), under `SYSTEMS`."""
    if hasattr(client, "close"):
        with SYSTEMS:
            client.close()


def own(index: object, close: Callable[[], object]) -> Callable[[], None]:
    """The call that closes what `index` opened (`close`), at the index's own close.

    If the index is collected unclosed, `close` runs then, on a thread of its own: a
    finalizer runs inside whatever call collected the index, where waiting for `SYSTEMS`
    or chromadb's locks could deadlock. `close` must not refer to `index`.
    """
    collected = weakref.finalize(index, _on_a_thread, close)
    collected.atexit = False  # at exit, chromadb tears itself down

    def now() -> None:
        if collected.detach() is not None:  # (once: not again when collected)
            close()

    return now


def _on_a_thread(close: Callable[[], object]) -> None:
    threading.Thread(target=close, name="semantic-recall-close", daemon=True).start()
