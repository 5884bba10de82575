"""The two drivers that perform an operation's steps, and the steps that compose others.

`drive` performs each step with the backends' synchronous methods, `adrive` with their
async twins. `Background`, `Settle`, `Nested` and `Both` are performed by the drivers
themselves: they start, wait for, nest or pair other steps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from typing_extensions import override

from langchain_semantic_recall.engine.steps.base import Backends, Op, Step
from langchain_semantic_recall.executor import run_in_executor

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Background(Step[Any]):
    """Start `step` and go on; the driver keeps one in flight and `Settle` waits.

    Lets bulk import write batch *n*'s vectors while batch *n + 1* is embedded.
    """

    step: Step[Any]

    @override
    def run(self, backends: Backends) -> Any:  # pragma: no cover - the drivers handle it
        """Never called: the drivers perform `Background` themselves."""
        raise TypeError("Background is performed by the driver")

    @override
    async def arun(self, backends: Backends) -> Any:  # pragma: no cover
        """Never called: the drivers perform `Background` themselves."""
        raise TypeError("Background is performed by the driver")


@dataclass(frozen=True, slots=True)
class Nested(Step[Any]):
    """A whole operation as one step (so that it can run in the `Background`)."""

    op: Op[Any]

    @override
    def run(self, backends: Backends) -> Any:
        """Run the whole operation with the sync driver."""
        return drive(self.op, backends)

    @override
    async def arun(self, backends: Backends) -> Any:
        """Run the whole operation with the async driver."""
        return await adrive(self.op, backends)


class _SidePool:
    """Threads for the first step of a `Both` in the sync driver, never queued behind.

    When every worker is busy (many caller threads searching at once), both steps run on
    the caller's thread, one after the other: no worse than running them in turn.
    """

    def __init__(self, workers: int = 8) -> None:
        self._workers = workers
        self._busy = 0
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[[], Any]) -> Future[Any] | None:
        """`fn` started on a worker, or None if all are busy."""
        with self._lock:
            if self._busy >= self._workers:
                return None
            self._busy += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, "semantic-recall-both")
            future = self._pool.submit(fn)
        future.add_done_callback(self._done)
        return future

    def _done(self, _: Future[Any]) -> None:
        with self._lock:
            self._busy -= 1


_SIDE = _SidePool()


@dataclass(frozen=True, slots=True)
class Both(Step[tuple[Any, Any]]):
    """Two independent steps at once; the result is the pair of their results.

    Lets a hybrid search run its keyword search while the query is embedded and the
    vector index queried (SQLite, numpy, the ONNX model and Chroma's core release the
    GIL). The sync driver runs `first` on a worker thread: make it the step that mostly
    waits outside the GIL, and `second` the one that runs Python (the other way round,
    the caller's answer waits for the worker's Python to let go of the GIL). If either
    fails, the first step's error wins, else the second's.
    """

    first: Step[Any]
    second: Step[Any]

    @override
    def run(self, backends: Backends) -> tuple[Any, Any]:
        """Run `first` on a worker thread while `second` runs here."""
        pending = _SIDE.submit(lambda: self.first.run(backends))
        if pending is None:  # every worker busy: one after the other
            return self.first.run(backends), self.second.run(backends)
        try:
            second = self.second.run(backends)
        except Exception:
            pending.result()  # the first step's error wins (raised here), else this one
            raise
        return pending.result(), second

    @override
    async def arun(self, backends: Backends) -> tuple[Any, Any]:
        """Await both twins concurrently."""
        outcomes: tuple[Any, Any] = await asyncio.gather(
            self.first.arun(backends), self.second.arun(backends), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes[0], outcomes[1]


@dataclass(frozen=True, slots=True)
class Settle(Step[Any]):
    """Wait for the step in flight (its error, if any, is raised at this `yield`)."""

    @override
    def run(self, backends: Backends) -> Any:  # pragma: no cover - the drivers handle it
        """Never called: the drivers perform `Settle` themselves."""
        raise TypeError("Settle is performed by the driver")

    @override
    async def arun(self, backends: Backends) -> Any:  # pragma: no cover
        """Never called: the drivers perform `Settle` themselves."""
        raise TypeError("Settle is performed by the driver")


# --- the drivers --------------------------------------------------------------------------


def _attach(failure: BaseException, background: BaseException | None) -> None:
    """Keep a failed background write visible on the error the operation raised."""
    if background is not None and background is not failure:
        failure.add_note(f"a background vector write of this operation failed too: {background!r}")
        failure.__context__ = failure.__context__ or background


def drive(op: Op[T], backends: Backends) -> T:
    """Run an operation with the backends' synchronous methods."""
    in_flight: Future[Any] | None = None
    writer: ThreadPoolExecutor | None = None
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(result)
            except StopIteration as done:
                if in_flight is not None:  # an operation must not outlive its writes
                    in_flight.result()
                return done.value  # type: ignore[no-any-return]
            except BaseException as failure:  # the operation raised: wait for its write
                pending, in_flight = in_flight, None
                _attach(failure, pending.exception() if pending is not None else None)
                raise
            result, error = None, None
            try:
                if isinstance(step, Background | Settle) and in_flight is not None:
                    pending, in_flight = in_flight, None
                    pending.result()
                if isinstance(step, Background):
                    writer = writer or ThreadPoolExecutor(1, thread_name_prefix="semantic-recall")
                    in_flight = writer.submit(step.step.run, backends)
                elif not isinstance(step, Settle):
                    result = step.run(backends)
            except Exception as failure:
                error = failure
    finally:
        if writer is not None:
            writer.shutdown(wait=True)


def _advance(op: Op[Any], result: Any, error: Exception | None) -> tuple[bool, Any]:
    """Resume `op`: (True, its return value) or (False, its next step)."""
    try:
        return False, op.throw(error) if error is not None else op.send(result)
    except StopIteration as done:
        return True, done.value


async def _failure_of(task: asyncio.Task[Any] | None) -> BaseException | None:
    """What a background write raised, once it is done (None: no write, or it worked)."""
    if task is None:
        return None
    done: object = (await asyncio.gather(task, return_exceptions=True))[0]
    return done if isinstance(done, BaseException) else None


async def adrive(op: Op[T], backends: Backends) -> T:
    """Run an operation with the backends' async twins.

    The operation's own Python work after a step marked `heavy_after` (ranking, formatting,
    chunking: milliseconds per call, times the calls in flight) runs in the default
    executor, so many concurrent calls do not stall the event loop one after another.
    """
    in_flight: asyncio.Task[Any] | None = None
    result: Any = None
    error: Exception | None = None
    heavy = False
    try:
        while True:
            try:
                if heavy:
                    finished, value = await run_in_executor(None, _advance, op, result, error)
                else:
                    finished, value = _advance(op, result, error)
            except BaseException as failure:  # the operation raised: wait for its write
                pending, in_flight = in_flight, None
                _attach(failure, await _failure_of(pending))
                raise
            if finished:
                if in_flight is not None:
                    await in_flight
                return value  # type: ignore[no-any-return]
            step = value
            heavy = step.heavy_after
            result, error = None, None
            try:
                if isinstance(step, Background | Settle) and in_flight is not None:
                    pending, in_flight = in_flight, None
                    await pending
                if isinstance(step, Background):
                    in_flight = asyncio.ensure_future(step.step.arun(backends))
                elif not isinstance(step, Settle):
                    result = await step.arun(backends)
            except Exception as failure:
                error = failure
    finally:
        if in_flight is not None:
            await asyncio.gather(in_flight, return_exceptions=True)
