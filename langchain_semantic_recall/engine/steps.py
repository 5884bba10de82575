"""The I/O an operation asks for, as step records, and the two drivers that perform it.

An operation is a generator: it yields a `Step` (embed these texts, read these
windows, write these records...), receives the step's result (or, if the step raised,
the exception, thrown in at the `yield`), and returns its answer. All decisions live
in the generator, written once; `drive` performs the steps with the backends'
synchronous methods and `adrive` with their async twins (LangGraph's `BaseStore.batch`
/ `abatch` is the model). For example, `drive(owner_op("t1"), backends)` or
`await adrive(owner_op("t1"), backends)` with:

```python
def owner_op(thread_id: str) -> Op[str | None]:
    return (yield thread_owner(thread_id))
```
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, TypeVar

from langchain_core.runnables.config import run_in_executor

from langchain_semantic_recall.embeddings import aembed_with_cache, embed_with_cache
from langchain_semantic_recall.records import MessageRecord, ScopeFilter, VectorRecord

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
    from langchain_semantic_recall.storage.base import MessageStorage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backends:
    """What steps run against: the message storage and the vector space."""

    storage: MessageStorage
    space: VectorSpace


class Step(ABC):
    """One unit of I/O, performed by a driver: `run` (sync) or `arun` (async)."""

    @abstractmethod
    def run(self, backends: Backends) -> Any:
        """Perform the step synchronously."""

    @abstractmethod
    async def arun(self, backends: Backends) -> Any:
        """Perform the step on the event loop (or off it, in an executor)."""


Op: TypeAlias = Generator[Step, Any, T]
"""An operation: yields steps, receives their results, returns `T`."""

Progress: TypeAlias = Callable[[int], None]
"""Called with the number of messages just handled (for progress bars)."""


@dataclass(frozen=True, slots=True)
class _Call(Step):
    """`<backend>.<method>(...)` or `await <backend>.a<method>(...)`: the twins by name."""

    backend: Literal["storage", "vectors"]
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def _on(self, backends: Backends) -> Any:
        return backends.storage if self.backend == "storage" else backends.space.vectors

    def run(self, backends: Backends) -> Any:
        return getattr(self._on(backends), self.method)(*self.args, **self.kwargs)

    async def arun(self, backends: Backends) -> Any:
        method = getattr(self._on(backends), f"a{self.method}")
        return await method(*self.args, **self.kwargs)


def _storage(
    method: str, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None
) -> Step:
    return _Call("storage", method, args, kwargs or {})


def _vectors(
    method: str, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None
) -> Step:
    return _Call("vectors", method, args, kwargs or {})


@dataclass(frozen=True, slots=True)
class _Embed(Step):
    """Embed texts through the shared cache, checked against the index's dimension."""

    info: IndexInfo
    texts: Sequence[str]

    def run(self, backends: Backends) -> list[list[float]]:
        space = backends.space
        return embed_with_cache(
            space.embeddings, space.cache, self.info.name, self.texts, dimension=self.info.dimension
        )

    async def arun(self, backends: Backends) -> list[list[float]]:
        space = backends.space
        return await aembed_with_cache(
            space.embeddings, space.cache, self.info.name, self.texts, dimension=self.info.dimension
        )


@dataclass(frozen=True, slots=True)
class _Probe(Step):
    """Embed one text with no cache: the embedder's dimension, learnt once."""

    def run(self, backends: Backends) -> Any:
        return backends.space.embeddings.embed_documents(["dimension probe"])

    async def arun(self, backends: Backends) -> Any:
        return await backends.space.embeddings.aembed_documents(["dimension probe"])


@dataclass(frozen=True, slots=True)
class _ClearCache(Step):
    def run(self, backends: Backends) -> None:
        backends.space.cache.clear()
        backends.space.texts.clear()  # its keys are message text: a forget drops them

    async def arun(self, backends: Backends) -> None:
        self.run(backends)


@dataclass(frozen=True, slots=True)
class Background(Step):
    """Start `step` and go on; the driver keeps one in flight and `Settle` waits.

    Lets bulk import write batch *n*'s vectors while batch *n + 1* is embedded.
    """

    step: Step

    def run(self, backends: Backends) -> Any:  # pragma: no cover - the drivers handle it
        """Never called: the drivers perform `Background` themselves."""
        raise TypeError("Background is performed by the driver")

    async def arun(self, backends: Backends) -> Any:  # pragma: no cover
        """Never called: the drivers perform `Background` themselves."""
        raise TypeError("Background is performed by the driver")


@dataclass(frozen=True, slots=True)
class Nested(Step):
    """A whole operation as one step (so that it can run in the `Background`)."""

    op: Op[Any]

    def run(self, backends: Backends) -> Any:
        """Run the whole operation with the sync driver."""
        return drive(self.op, backends)

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
class Both(Step):
    """Two independent steps at once; the result is the pair of their results.

    Lets a hybrid search run its keyword search while the query is embedded and the
    vector index queried (SQLite, numpy, the ONNX model and Chroma's core release the
    GIL). The sync driver runs `first` on a worker thread: make it the step that mostly
    waits outside the GIL, and `second` the one that runs Python (the other way round,
    the caller's answer waits for the worker's Python to let go of the GIL). If either
    fails, the first step's error wins, else the second's.
    """

    first: Step
    second: Step

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
class Settle(Step):
    """Wait for the step in flight (its error, if any, is raised at this `yield`)."""

    def run(self, backends: Backends) -> Any:  # pragma: no cover - the drivers handle it
        """Never called: the drivers perform `Settle` themselves."""
        raise TypeError("Settle is performed by the driver")

    async def arun(self, backends: Backends) -> Any:  # pragma: no cover
        """Never called: the drivers perform `Settle` themselves."""
        raise TypeError("Settle is performed by the driver")


# --- the steps, by name ------------------------------------------------------------------


def embed(info: IndexInfo, texts: Sequence[str]) -> Step:
    """Step: embed `texts` through the cache for index `info` (vectors, in order)."""
    return _Embed(info, tuple(texts))


def probe_dimension() -> Step:
    """Step: embed one probe text, uncached (the embedder's dimension)."""
    return _Probe()


def clear_cache() -> Step:
    """Step: empty the embedding cache."""
    return _ClearCache()


def compact_storage() -> Step:
    """Step: erase what deleted messages left in the storage's files."""
    return _storage("compact")


def compact_vectors(name: str) -> Step:
    """Step: erase what deleted vectors left in the files of the index `name`."""
    return _vectors("compact", (name,))


def count_messages(scope: ScopeFilter, up_to: int) -> Step:
    """Step: the number of messages in `scope`, counting no further than `up_to`."""
    return _storage("count", (scope,), {"up_to": up_to})


def thread_owner(thread_id: str) -> Step:
    """Step: the thread's resource id, or None if unknown."""
    return _storage("get_thread_owner", (thread_id,))


def is_forgotten(thread_id: str) -> Step:
    """Step: whether the thread was forgotten (its id retired)."""
    return _storage("is_forgotten", (thread_id,))


def put_messages(records: Sequence[MessageRecord]) -> Step:
    """Step: store `records` (`MessageStorage.put`)."""
    return _storage("put", (list(records),))


def read_windows(ids: Sequence[str], *, before: int, after: int, scope: ScopeFilter) -> Step:
    """Step: the windows of `ids` inside `scope` (`MessageStorage.get_windows`)."""
    return _storage("get_windows", (list(ids),), {"before": before, "after": after, "scope": scope})


def keyword_search(query: str, *, scope: ScopeFilter, limit: int) -> Step:
    """Step: the best keyword matches inside `scope` (message id, score)."""
    return _storage("keyword_search", (query,), {"scope": scope, "limit": limit})


def list_messages(scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int) -> Step:
    """Step: a page of messages after `after` (`MessageStorage.list_messages`)."""
    return _storage("list_messages", (scope,), {"after": after, "limit": limit})


def last_messages(scope: ScopeFilter, *, limit: int) -> Step:
    """Step: the newest `limit` messages of a thread (`MessageStorage.last_messages`)."""
    return _storage("last_messages", (scope,), {"limit": limit})


def move_thread(thread_id: str, to_resource: str) -> Step:
    """Step: give a thread to another resource (`MessageStorage.move_thread`)."""
    return _storage("move_thread", (thread_id,), {"to_resource": to_resource})


def unretire_thread(thread_id: str) -> Step:
    """Step: lift a forget's retirement of a thread id; whether it was retired."""
    return _storage("unretire_thread", (thread_id,))


def list_threads(resource_id: str | None) -> Step:
    """Step: the threads of a resource, or every thread (None)."""
    return _storage("list_threads", (resource_id,))


def adopt_thread(thread_id: str, resource_id: str) -> Step:
    """Step: give a thread stored without an owner its owner (`MessageStorage.adopt_thread`)."""
    return _storage("adopt_thread", (thread_id, resource_id))


def delete_thread(thread_id: str, *, retire: bool) -> Step:
    """Step: delete a thread's messages; `retire` also retires its id."""
    return _storage("delete_thread", (thread_id,), {"retire": retire})


def delete_resource(resource_id: str) -> Step:
    """Step: delete every thread of a resource."""
    return _storage("delete_resource", (resource_id,))


def open_index(info: IndexInfo) -> Step:
    """Step: open (create if needed) the vector index of `info`."""
    return _vectors("open", (info.name,), {"dimension": info.dimension, "model": info.model})


def nearest_messages(
    info: IndexInfo, vector: Sequence[float], *, k: int, scope: ScopeFilter
) -> Step:
    """Step: (message id, similarity) of the `k` nearest vectors inside `scope`."""
    return _vectors("nearest", (info.name, vector), {"k": k, "scope": scope})


def upsert_vectors(info: IndexInfo, records: Sequence[VectorRecord]) -> Step:
    """Step: write `records` into the index."""
    return _vectors("upsert", (info.name, list(records)))


def delete_vectors(
    info: IndexInfo,
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    message_ids: Sequence[str] | None = None,
) -> Step:
    """Step: delete the vectors matching every selector given."""
    ids = None if message_ids is None else list(message_ids)
    return _vectors(
        "delete",
        (info.name,),
        {"thread_id": thread_id, "resource_id": resource_id, "message_ids": ids},
    )


def vector_message_ids(info: IndexInfo, scope: ScopeFilter | None) -> Step:
    """Step: the message ids that have a vector inside `scope`."""
    return _vectors("message_ids", (info.name, scope))


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


_HEAVY_AFTER: Final = frozenset({"get_windows", "put"})
"""Storage calls after which the operation does real CPU work with the answer (ranking,
relevance scoring, formatting the recalled block; chunking and vector records after a put)."""


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

    The operation's own Python work after a windows read or a put (ranking, formatting,
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
            heavy = isinstance(step, _Call) and step.method in _HEAVY_AFTER
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
