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

A close waits for the calls in flight (on other threads, or other tasks for `aclose`) to
finish (`CLOSE_WAIT_S` at most, then it closes under them and logs it), then closes the
backends: a call is never cut off half way, its storage or vector
index closed under it. A call begun once the close began is refused. A `close()` that
cannot wait, because calls in flight run on its own thread (async calls on the event loop
that calls it), returns at once and the last of those calls closes the backends as it
leaves (a failure to close is then logged: no caller is left to raise it to).

An engine belongs to the process that opened it. In a process forked from that one (a
worker of `gunicorn --preload`, a `multiprocessing` fork), its connections and threads
are copies that do not work (embedded Chroma hung): every call there raises
`ForkedEngineError` before it touches a lock (the fork may have copied one held), and a
close there closes nothing, the parent's backends being the parent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from langchain_semantic_recall.errors import EngineClosedError, ForkedEngineError

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.core import EngineCore

logger = logging.getLogger(__name__)

CLOSE_WAIT_S: float = 60.0
"""How long a close waits for the calls in flight before it closes the backends anyway
(a hung embedder, a task of an event loop that was abandoned mid-call)."""

_INSIDE: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "semantic_recall_inside", default=frozenset()
)
"""The engines (their `Lifecycle`'s id) whose call the current context is inside."""


class Lifecycle:
    """The backends an engine built itself, and whether it was closed."""

    def __init__(self) -> None:
        self._pid = os.getpid()  # the process whose backends these are
        self._owned: list[object] = []
        self._closed = False
        self._lock = threading.Lock()
        self._left = threading.Condition(self._lock)  # notified as each call leaves
        self._calls: Counter[int] = Counter()  # calls in flight, by the thread entering them
        self._last_call_closes = False

    @property
    def closed(self) -> bool:
        """Whether `close` / `aclose` ran (or began: it may be waiting for calls)."""
        return self._closed

    def own(self, *parts: object) -> None:
        """Take ownership of `parts`: they are closed with the engine (in reverse order).

        Args:
            *parts: Backends built for the engine (anything with `close`, maybe `aclose`).
        """
        with self._lock:
            self._owned.extend(parts)

    def check(self) -> None:
        """Refuse a call on a closed engine, or in a forked process.

        Raises:
            EngineClosedError: `close` or `aclose` ran.
            ForkedEngineError: this process is a fork of the one that opened the engine.
        """
        self._check_process()
        if self._closed:
            raise EngineClosedError(
                "this SemanticRecall was closed (close(), aclose() or the end of its with "
                "block) and its storage and vector index with it: build a new one, e.g. "
                "SemanticRecall.local(path), to go on"
            )

    def _check_process(self) -> None:
        if (pid := os.getpid()) != self._pid:
            raise ForkedEngineError(
                f"this SemanticRecall was opened in process {self._pid}, and this is "
                f"process {pid}, a fork of it: its connections and threads do not cross a "
                "fork. Open one engine in each process when it starts (gunicorn's "
                "post_fork hook, Celery's worker_process_init), not at import time under "
                "gunicorn --preload; with embedded Chroma, open none before the fork"
            )

    def _forked(self) -> bool:
        """Whether this is a forked copy (a close here closes nothing: see the module)."""
        if os.getpid() == self._pid:
            return False
        self._closed = True  # (no lock: the fork may have copied it held)
        return True

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """A call in flight: a close waits for it to leave.

        Raises:
            EngineClosedError: `close` or `aclose` ran or began.
            ForkedEngineError: this process is a fork of the one that opened the engine.
        """
        self._check_process()  # before the lock, which a fork may have copied held
        me = threading.get_ident()
        with self._lock:
            self.check()
            self._calls[me] += 1
        inside = _INSIDE.set(_INSIDE.get() | {id(self)})
        try:
            yield
        finally:
            self._leave(me)
            with contextlib.suppress(ValueError):  # an abandoned task's coroutine, collected
                _INSIDE.reset(inside)  # outside its context (whose value goes with it)

    @contextlib.asynccontextmanager
    async def acall(self) -> AsyncIterator[None]:
        """Async twin of `call` (counted on the event loop's thread)."""
        with self.call():
            yield

    def _leave(self, thread: int) -> None:
        with self._lock:
            self._calls[thread] -= 1
            if self._calls[thread] <= 0:
                del self._calls[thread]
            self._left.notify_all()
            last = self._last_call_closes and not self._calls
        if last:  # a close() on this loop's thread left the closing to the last call
            try:
                self._close_parts()
            except Exception as failure:
                logger.error("closing the engine failed: %r", failure, exc_info=failure)

    def _take(self) -> list[object]:
        """The owned parts, last built first (nothing the second time)."""
        with self._lock:
            parts, self._owned = self._owned[::-1], []
        return parts

    def _begin(self) -> None:
        with self._lock:
            self._closed = True

    def _wait_for_calls(self) -> bool:
        """Wait for the calls of other threads; False if this thread's own are in flight."""
        me = threading.get_ident()
        with self._lock:
            if id(self) in _INSIDE.get():
                self._last_call_closes = True
                return False
            if not self._wait_while(lambda: bool(set(self._calls) - {me})):
                return True  # waited long enough: close under the calls (logged)
            if self._calls:
                self._last_call_closes = True
                return False
        return True

    def _wait_while(self, busy: Callable[[], bool]) -> bool:
        """Wait (holding the lock) while `busy()`, `CLOSE_WAIT_S` at most; False if cut off."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        while busy():
            left = deadline - time.monotonic()
            if left <= 0:
                logger.warning(
                    "closing the engine with %d call(s) still in flight after %.0f s: they "
                    "will fail as they go on",
                    sum(self._calls.values()),
                    CLOSE_WAIT_S,
                )
                return False
            self._left.wait(left)
        return True

    def close(self) -> None:
        """Wait for the calls in flight, then close every owned part, even if one fails.

        Raises the first failure.
        """
        if self._forked():
            return
        self._begin()
        if self._wait_for_calls():
            self._close_parts()

    def _close_parts(self) -> None:
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
        """Async twin of `close`: a part's `aclose` if it has one, else `close` off the loop.

        Waits for the calls in flight, this loop's tasks included (off the loop).
        """
        if self._forked():
            return
        self._begin()
        loop = asyncio.get_running_loop()
        if id(self) in _INSIDE.get():  # closed from inside a call: it cannot be waited for
            with self._lock:
                self._last_call_closes = True
            return
        try:
            await loop.run_in_executor(None, self._wait_all_calls)
        except asyncio.CancelledError:  # e.g. a wait_for timeout: the last call closes
            with self._lock:
                self._last_call_closes = True
                idle = not self._calls
            if idle:  # (the last one left meanwhile)
                self._close_parts()
            raise
        failures = []
        for part in self._take():
            try:
                if hasattr(part, "aclose"):
                    await part.aclose()
                elif hasattr(part, "close"):
                    await loop.run_in_executor(None, part.close)
            except Exception as failure:
                failures.append(failure)
        _raise_first(failures)

    def _wait_all_calls(self) -> None:
        with self._lock:
            self._wait_while(lambda: bool(self._calls))


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
