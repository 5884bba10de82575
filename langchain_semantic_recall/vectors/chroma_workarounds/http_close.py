"""Closing a Chroma server's HTTP client releases its connections and its cached `System`.

chromadb 1.5's `HttpClient.close()` (measured with 1.5.9) gives back the client's
reference to its `System` and stops it, but:

1. stopping a `System` does not close the `httpx.Client` of its HTTP component (`FastAPI`
   has no `stop` of its own): the session keeps its connection to the server open;
2. the client's internal admin client is made by `AdminClient.from_system`, which files
   the client's `System` in the process-wide cache (`SharedSystemClient.
   _identifier_to_system`) under one more random identifier that nothing refers to or
   releases, and builds a second `System` (a second session) for itself.

So each client closed kept two sessions, one connection and its `System` for the life of
the process: an application that builds one index (or one engine) per request on a
Chroma server grew by a file descriptor and ~1 MB per request. `HttpResources` are noted
before the close and released after it: the sessions closed, and the cache entries that
still hold those systems with no reference counted dropped. Upstream:
chroma-core/chroma#2702, #7533 (open: the same fix in chromadb). This module imports
nothing of the package.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

__all__ = ["HttpResources"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpResources:
    """The systems and HTTP sessions of one `chromadb.HttpClient` and its admin client."""

    systems: tuple[Any, ...]
    sessions: tuple[Any, ...]

    @classmethod
    def of(cls, client: Any) -> HttpResources:
        """Note what `client` holds (before its `close`, which forgets its `System`)."""
        systems, sessions = [], []
        owners: tuple[Any, ...] = (client, getattr(client, "_admin_client", None))
        for owner in owners:
            with suppress(Exception):  # (a client of another shape: nothing to release)
                systems.append(owner._system)
            session = getattr(getattr(owner, "_server", None), "_session", None)
            if session is not None and hasattr(session, "close"):
                sessions.append(session)
        return cls(tuple(systems), tuple(sessions))

    def release(self) -> None:
        """After the client's `close`: close the sessions, drop the forgotten systems."""
        from chromadb.api.shared_system_client import SharedSystemClient

        for session in self.sessions:
            try:
                session.close()
            except Exception as exc:  # the connection may be gone already: nothing held
                logger.debug("closing a Chroma HTTP session failed: %r", exc)
        cache = SharedSystemClient._identifier_to_system
        with SharedSystemClient._refcount_lock:
            counted = set(SharedSystemClient._identifier_to_refcount)
            for identifier, system in list(cache.items()):
                if identifier not in counted and any(system is s for s in self.systems):
                    cache.pop(identifier, None)
