"""Reading again a collection whose HNSW index is neither loaded nor on disk yet.

chroma-core/chroma#4212: a read can fail with "Error creating hnsw segment reader:
Nothing found on disk" while a collection's index is not loaded and was never saved (its
vectors are in Chroma's log only). A write meanwhile loads it again. In this process the
main cause, Chroma's own eviction, is replaced (`unload`); a Chroma server still evicts by
itself. chromadb is imported inside functions only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["read_retrying", "retrying"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def retrying(read: Callable[[], _T], *, delays: Sequence[float], transient: type[Exception]) -> _T:
    """`read()`, tried again while a collection's index is neither loaded nor on disk.

    After each pause of `delays`, `read` runs again on a `transient` error that says
    "segment reader" (see the module). Any other error, or the last failure, is raised.
    """
    for delay in (*delays, None):
        try:
            return read()
        except transient as error:
            if delay is None or "segment reader" not in str(error):
                raise
            logger.debug("Chroma index not ready (%s); reading again in %.2f s", error, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def read_retrying(read: Callable[[], _T], delays: Sequence[float]) -> _T:
    """`read()`, tried again after each of `delays` on chromadb's "segment reader" error."""
    from chromadb.errors import InternalError

    return retrying(read, delays=delays, transient=InternalError)
