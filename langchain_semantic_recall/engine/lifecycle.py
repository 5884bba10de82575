"""What an engine owns, and closing it: `close()` / `aclose()`, `with` / `async with`.

An engine built by `SemanticRecall.local()` or `SemanticRecall.from_url()` made its
backends itself, so it owns them: its SQLite connection (and the background builds of
keyword postings reading the same file), its Chroma client, a PostgreSQL pool it opened.
Closing the engine closes those. Backends passed to the constructor are the caller's:
closing the engine leaves them open (as `SqliteSaver.from_conn_string` owns its
connection and `SqliteSaver(conn)` does not).

An engine and its views (`with_options`, `for_thread`) share one `Lifecycle`: closing any
of them closes all, and every call after that raises `EngineClosedError`. Closing twice
is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from langchain_semantic_recall.errors import EngineClosedError

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.core import EngineCore

logger = logging.getLogger(__name__)


class Lifecycle:
    """The backends an engine built itself, and whether it was closed."""

    def __init__(self) -> None:
        self._owned: list[object] = []
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """Whether `close` / `aclose` ran."""
        return self._closed

    def own(self, *parts: object) -> None:
        """Take ownership of `parts`: they are closed with the engine (in reverse order).

        Args:
            *parts: Backends built for the engine (anything with `close`, maybe `aclose`).
        """
        with self._lock:
            self._owned.extend(parts)

    def check(self) -> None:
        """Refuse a call on a closed engine.

        Raises:
            EngineClosedError: `close` or `aclose` ran.
        """
        if self._closed:
            raise EngineClosedError(
                "this SemanticRecall was closed (close(), aclose() or the end of its with "
                "block) and its storage and vector index with it: build a new one, e.g. "
                "SemanticRecall.local(path), to go on"
            )

    def _take(self) -> list[object]:
        """Mark closed; the owned parts, last built first (nothing the second time)."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            parts, self._owned = self._owned[::-1], []
        return parts

    def close(self) -> None:
        """Close every owned part, even if one fails; then raise the first failure."""
        failures = []
        for part in self._take():
            close: Callable[[], object] | None = getattr(part, "close", None)
            try:
                if close is not None:
                    close()
            except Exception as failure:
                failures.append(failure)
        _raise_first(failures)

    async def aclose(self) -> None:
        """Async twin of `close`: a part's `aclose` if it has one, else `close` off the loop."""
        failures = []
        for part in self._take():
            try:
                if hasattr(part, "aclose"):
                    await part.aclose()
                elif hasattr(part, "close"):
                    await asyncio.get_running_loop().run_in_executor(None, part.close)
            except Exception as failure:
                failures.append(failure)
        _raise_first(failures)


def _raise_first(failures: list[Exception]) -> None:
    for later in failures[1:]:
        logger.error("closing the engine also failed: %r", later, exc_info=later)
    if failures:
        raise failures[0]


class _Engine(Protocol):
    _core: EngineCore


E = TypeVar("E", bound=_Engine)

# The facade's lifecycle methods, written once here and named in `SemanticRecall`'s body
# (`close = lifecycle.close`): composition, the engine's state stays in its core.


def close(engine: _Engine) -> None:
    """Close what the engine owns (built by `local` / `from_url`); later calls raise.

    Backends passed to the constructor are left open. Closing twice is a no-op. An
    engine and its views (`with_options`, `for_thread`) close together.
    """
    engine._core.life.close()


async def aclose(engine: _Engine) -> None:
    """Async twin of `close`."""
    await engine._core.life.aclose()


def enter(engine: E) -> E:
    """`with SemanticRecall.local(path) as memory:` (refused once the engine is closed)."""
    engine._core.life.check()
    return engine


def exit_(
    engine: _Engine,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> None:
    """The end of a `with` block: `close`."""
    engine._core.life.close()


async def aenter(engine: E) -> E:
    """`async with SemanticRecall.local(path) as memory:` (refused once closed)."""
    engine._core.life.check()
    return engine


async def aexit(
    engine: _Engine,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> None:
    """The end of an `async with` block: `aclose`."""
    await engine._core.life.aclose()


def owning(
    build: Callable[..., E],
    backends: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    embeddings_given: bool,
) -> E:
    """An engine built on `backends` made for it, which it then owns and closes.

    If the engine cannot be built, the backends are closed here (nobody else can).

    Args:
        build: The engine's class (or factory), called with `backends` and `options`.
        backends: `storage`, `vector_store` and `embeddings`, made for this engine.
        options: The engine's other options.
        embeddings_given: The caller passed the embedder: it stays the caller's.
    """
    owned = [backends["storage"], backends["vector_store"]]
    if not embeddings_given:
        owned.append(backends["embeddings"])
    try:
        engine = build(**backends, **options)
    except BaseException:
        unbuilt = Lifecycle()
        unbuilt.own(*owned)
        unbuilt.close()
        raise
    engine._core.life.own(*owned)
    return engine


__all__ = ["Lifecycle", "aclose", "aenter", "aexit", "close", "enter", "exit_", "owning"]
