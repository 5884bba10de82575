"""Fault injection for the reliability suites: failing, hanging and lying backends.

Three wrappers, built on the recording fakes of :mod:`tests.fakes`:

* :class:`FaultyEmbeddings`: a :class:`~tests.fakes.FakeEmbeddings` whose
  ``embed_documents`` can raise, time out, hang until released, return a short batch, or
  return NaN / infinite / wrong-dimension vectors;
* :class:`FaultyStorage`: a :class:`~tests.fakes.RecordingStorage` whose calls can raise,
  hang, apply part of a batch then fail, or apply it and then fail (a lost acknowledgement);
* :class:`FaultyVectors`: the same around a :class:`~tests.fakes.RecordingVectors`.

Each wrapper has an :class:`Injector` (``.faults``). Arm it per operation name (the
backend method name, or ``"embed_documents"``)::

    vectors.faults.fail("upsert", ConnectionError("down"))           # next upsert raises
    vectors.faults.fail("upsert", partial=1)                          # first vector only
    storage.faults.fail("put", TimeoutError(), after=True)            # written, then raises
    embeddings.faults.corrupt("embed_documents", nan_vectors)         # NaN reaches the engine
    gate = embeddings.faults.gate("embed_documents")                  # hold the next call
    ...start a call in a thread...; gate.wait_entered(); ...; gate.release()

Timeouts are simulated without sleeping: by raising :class:`TimeoutError`, or by a
:class:`Gate` that holds a call until the test releases it (optionally with an error).
A gate's own wait is bounded, so a test that forgets to release fails instead of hanging.

Every method can fail or be held *before* it runs. Acting *after* or *in the middle* of
a call (``after=True``, ``partial=n``, ``corrupt=...``, ``gate(when="after")``) needs the
real call inside the injector, which the wrappers do for the calls that matter: storage
``put``, ``get_windows``, ``delete_thread``, ``delete_resource``; vector ``upsert``,
``query``, ``delete``; and ``embed_documents``. On other methods those act before it.

Async twins of the engine reach these wrappers through the base classes' executor
defaults, so the same faults apply to ``aindex`` / ``arecall`` / ``aforget_*``.

:class:`Backend` names a pair of storage and vector factories so that every suite built on
these wrappers can run on every backend (:data:`BACKENDS` are those that exist today).
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from langchain_semantic_recall import InMemoryStorage, SemanticRecall, SQLiteStorage
from langchain_semantic_recall.records import (
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex
from tests.fakes import FakeEmbeddings, RecordingStorage, RecordingVectors
from tests.unit.test_isolation import IgnoresScope

T = TypeVar("T")
Vectors = list[list[float]]
Match = Callable[[Mapping[str, Any]], bool]
GATE_TIMEOUT_S = 20.0
"""Longest a gate holds a call, or a test waits for a call to reach a gate."""


class InjectedError(ConnectionError):
    """The default injected error: what a dropped connection looks like."""


# --- faults and gates ----------------------------------------------------------------


@dataclass
class Fault:
    """One armed fault of one operation.

    Attributes:
        error: raised by the faulty call (unless ``corrupt`` is set).
        times: how many matching calls it hits (None: every one).
        match: only calls whose arguments satisfy it (None: every call).
        partial: for batch operations: apply the first ``partial`` items, then raise.
        after: apply the whole call, then raise (the write happened, the answer was lost).
        corrupt: instead of raising, pass the call's result through this function.
    """

    error: BaseException = field(default_factory=lambda: InjectedError("injected fault"))
    times: int | None = 1
    match: Match | None = None
    partial: int | None = None
    after: bool = False
    corrupt: Callable[[Any], Any] | None = None
    hits: int = 0
    """Calls it has hit so far."""

    def applies(self, arguments: Mapping[str, Any]) -> bool:
        exhausted = self.times is not None and self.hits >= self.times
        return not exhausted and (self.match is None or self.match(arguments))


class Gate:
    """Holds one call (the first that matches) until the test releases it.

    Args:
        match: only calls whose arguments satisfy it are held.
        timeout: bound on every wait, in seconds (a forgotten release fails the test).
    """

    def __init__(self, match: Match | None = None, *, timeout: float = GATE_TIMEOUT_S) -> None:
        self.match = match
        self.timeout = timeout
        self.entered = threading.Event()
        self.released = threading.Event()
        self.passed = threading.Event()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._armed = True

    def takes(self, arguments: Mapping[str, Any]) -> bool:
        """Whether this call is the one to hold (each gate holds one call only)."""
        with self._lock:
            if not self._armed or (self.match is not None and not self.match(arguments)):
                return False
            self._armed = False
            return True

    def hold(self) -> None:
        """Called by the faulty backend: block until released, then raise if asked to."""
        self.entered.set()
        try:
            if not self.released.wait(self.timeout):
                raise TimeoutError(f"gate held a call for {self.timeout}s and was never released")
            if self._error is not None:
                raise self._error
        finally:
            self.passed.set()

    def wait_entered(self) -> None:
        """Block until a call reached the gate (fails after ``timeout``)."""
        if not self.entered.wait(self.timeout):
            raise AssertionError("no call reached the gate")

    def release(self, error: BaseException | None = None) -> None:
        """Let the held call go on, or make it raise ``error`` (a simulated timeout)."""
        self._error = error
        self.released.set()

    def wait_passed(self) -> None:
        """Block until the held call has left the gate."""
        if not self.passed.wait(self.timeout):
            raise AssertionError("the held call never left the gate")

    async def await_entered(self) -> None:
        """Async twin of :meth:`wait_entered` (the held call runs in an executor thread)."""
        await asyncio.to_thread(self.wait_entered)


When = Literal["before", "after"]


class Injector:
    """The faults and gates armed on one wrapper, by operation name. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, list[Fault]] = {}
        self._gates: dict[tuple[str, When], list[Gate]] = {}
        self.fired: list[tuple[str, Fault]] = []
        """Every fault that hit a call, in order."""

    # -- arming ---------------------------------------------------------------------------

    def fail(
        self,
        op: str,
        error: BaseException | None = None,
        *,
        times: int | None = 1,
        match: Match | None = None,
        partial: int | None = None,
        after: bool = False,
    ) -> Fault:
        """Make the next ``times`` matching calls of ``op`` fail (see :class:`Fault`)."""
        fault = Fault(times=times, match=match, partial=partial, after=after)
        if error is not None:
            fault.error = error
        return self.add(op, fault)

    def timeout(self, op: str, *, times: int | None = 1, match: Match | None = None) -> Fault:
        """Make the next calls of ``op`` raise :class:`TimeoutError` (a timed-out request)."""
        return self.fail(op, TimeoutError(f"{op} timed out (injected)"), times=times, match=match)

    def corrupt(
        self,
        op: str,
        transform: Callable[[Any], Any],
        *,
        times: int | None = 1,
        match: Match | None = None,
    ) -> Fault:
        """Pass the result of the next calls of ``op`` through ``transform``."""
        return self.add(op, Fault(times=times, match=match, corrupt=transform))

    def add(self, op: str, fault: Fault) -> Fault:
        with self._lock:
            self._faults.setdefault(op, []).append(fault)
        return fault

    def gate(self, op: str, *, when: When = "before", match: Match | None = None) -> Gate:
        """Hold the next matching call of ``op`` before (or after) it takes effect."""
        gate = Gate(match)
        with self._lock:
            self._gates.setdefault((op, when), []).append(gate)
        return gate

    def clear(self) -> None:
        """Disarm every fault and gate (gates already holding a call stay held)."""
        with self._lock:
            self._faults.clear()
            self._gates.clear()

    # -- applying -------------------------------------------------------------------------

    def _take(self, op: str, arguments: Mapping[str, Any]) -> Fault | None:
        with self._lock:
            for fault in self._faults.get(op, []):
                if fault.applies(arguments):
                    fault.hits += 1
                    self.fired.append((op, fault))
                    return fault
        return None

    def _pass_gates(self, op: str, when: When, arguments: Mapping[str, Any]) -> None:
        with self._lock:
            gates = list(self._gates.get((op, when), []))
        for gate in gates:
            if gate.takes(arguments):
                gate.hold()

    def call(
        self,
        op: str,
        arguments: Mapping[str, Any],
        run: Callable[[], T],
        *,
        run_part: Callable[[int], object] | None = None,
    ) -> T:
        """Run one call of ``op`` through the armed gates and faults."""
        self._pass_gates(op, "before", arguments)
        fault = self._take(op, arguments)
        if fault is not None and fault.corrupt is None and not fault.after:
            if fault.partial is not None and run_part is not None:
                run_part(fault.partial)
            raise fault.error
        result = run()
        self._pass_gates(op, "after", arguments)
        if fault is not None and fault.corrupt is not None:
            return fault.corrupt(result)  # type: ignore[no-any-return]
        if fault is not None:
            raise fault.error
        return result


# --- vector corruptions (for FaultyEmbeddings) ----------------------------------------


def nan_vectors(vectors: Vectors) -> Vectors:
    """Every vector gets a NaN in its first component."""
    return [[math.nan, *v[1:]] for v in vectors]


def inf_vectors(vectors: Vectors) -> Vectors:
    """Every vector gets +inf in its last component."""
    return [[*v[:-1], math.inf] for v in vectors]


def one_bad_vector(vectors: Vectors) -> Vectors:
    """Only the last vector of the batch is poisoned (-inf): a partially bad batch."""
    return [*vectors[:-1], [-math.inf, *vectors[-1][1:]]] if vectors else vectors


def short_batch(vectors: Vectors) -> Vectors:
    """One vector fewer than texts: a batch the embedder silently truncated."""
    return vectors[:-1]


def wrong_dimension(dimension: int) -> Callable[[Vectors], Vectors]:
    """Vectors cut or padded to ``dimension`` (another model answered)."""

    def transform(vectors: Vectors) -> Vectors:
        return [(v + [0.0] * dimension)[:dimension] for v in vectors]

    return transform


# --- the wrappers --------------------------------------------------------------------


class FaultyEmbeddings(FakeEmbeddings):
    """The fake embedder with an :class:`Injector` on ``embed_documents``."""

    def __init__(self, dimension: int = 128, model: str = "fake-bow") -> None:
        super().__init__(dimension=dimension, model=model)
        self.faults = Injector()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.faults.call(
            "embed_documents",
            {"texts": texts},
            lambda: super(FaultyEmbeddings, self).embed_documents(texts),
        )


class FaultyStorage(RecordingStorage):
    """A recording storage with an :class:`Injector` on every method.

    ``partial`` on ``put`` writes the first records (as a non-transactional backend
    would) before raising; ``after`` writes everything, then raises.
    """

    def __init__(self, inner: MessageStorage) -> None:
        super().__init__(inner)
        self.faults = Injector()
        # Keyword search (hybrid mode) is used when the wrapped storage has it.
        self.supports_keyword_search = inner.supports_keyword_search  # type: ignore[misc]

    def _record(self, op: str, /, **kwargs: Any) -> None:
        super()._record(op, **kwargs)
        if op not in _STORAGE_WRAPPED:
            self.faults.call(op, kwargs, lambda: None)

    def _keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        self._record("keyword_search", query=query, scope=scope, limit=limit)
        return self.inner.keyword_search(query, scope=scope, limit=limit)

    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        batch = list(records)
        self._record("put", records=batch)
        return self.faults.call(
            "put",
            {"records": batch},
            lambda: self.inner.put(batch),
            run_part=lambda n: self.inner.put(batch[:n]),
        )

    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        ids = list(message_ids)
        self._record("get_windows", message_ids=ids, before=before, after=after, scope=scope)
        return self.faults.call(
            "get_windows",
            {"message_ids": ids, "scope": scope},
            lambda: self.inner.get_windows(ids, before=before, after=after, scope=scope),
        )

    def _delete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        self._record("delete_thread", thread_id=thread_id)
        return self.faults.call(
            "delete_thread",
            {"thread_id": thread_id},
            lambda: self.inner.delete_thread(thread_id, retire=retire, owner=owner),
        )

    def _delete_resource(self, resource_id: str) -> int:
        self._record("delete_resource", resource_id=resource_id)
        return self.faults.call(
            "delete_resource",
            {"resource_id": resource_id},
            lambda: self.inner.delete_resource(resource_id),
        )

    def close(self) -> None:
        self.inner.close()


_STORAGE_WRAPPED = frozenset({"put", "get_windows", "delete_thread", "delete_resource"})


class FaultyVectors(RecordingVectors):
    """A recording vector index with an :class:`Injector` on every method.

    ``partial`` on ``upsert`` writes the first vectors before raising (a batch cut by a
    dropped connection), and on ``delete`` deletes the first message ids only.
    """

    def __init__(self, inner: VectorIndex) -> None:
        super().__init__(inner)
        self.faults = Injector()

    def _record(self, op: str, /, **kwargs: Any) -> None:
        super()._record(op, **kwargs)
        if op not in _VECTORS_WRAPPED:
            self.faults.call(op, kwargs, lambda: None)

    def _upsert(self, name: str, records: Sequence[VectorRecord]) -> None:
        batch = list(records)
        self._record("upsert", name=name, records=batch)
        self.faults.call(
            "upsert",
            {"name": name, "records": batch},
            lambda: self.inner.upsert(name, batch),
            run_part=lambda n: self.inner.upsert(name, batch[:n]),
        )

    def _query(
        self, name: str, vector: Sequence[float], *, k: int, scope: ScopeFilter
    ) -> list[VectorHit]:
        self._record("query", name=name, vector=list(vector), k=k, scope=scope)
        return self.faults.call(
            "query",
            {"name": name, "scope": scope},
            lambda: self.inner.query(name, vector, k=k, scope=scope),
        )

    def _delete(
        self,
        name: str,
        *,
        thread_id: str | None,
        resource_id: str | None,
        message_ids: list[str] | None,
    ) -> None:
        ids = None if message_ids is None else list(message_ids)
        arguments = {
            "name": name,
            "thread_id": thread_id,
            "resource_id": resource_id,
            "message_ids": ids,
        }
        self._record("delete", **arguments)

        def run_part(n: int) -> None:
            if ids is not None:
                self.inner.delete(
                    name, thread_id=thread_id, resource_id=resource_id, message_ids=ids[:n]
                )

        self.faults.call(
            "delete",
            arguments,
            lambda: self.inner.delete(
                name, thread_id=thread_id, resource_id=resource_id, message_ids=ids
            ),
            run_part=run_part,
        )

    def close(self) -> None:
        self.inner.close()


_VECTORS_WRAPPED = frozenset({"upsert", "query", "delete"})


# --- backends ------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    """A storage and a vector index to run a suite on, made fresh under a folder.

    Other backends join the suites by adding a ``Backend`` (e.g. PostgreSQL storage with
    a Chroma server) and subclassing the suite classes with it.
    """

    name: str
    make_storage: Callable[[Path], MessageStorage]
    make_vectors: Callable[[Path], VectorIndex]
    shared_vectors: bool = False
    """The vector host is shared across instances: give each engine its own index name."""

    def __str__(self) -> str:
        return self.name


def _ephemeral_chroma(_: Path) -> VectorIndex:
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    return ChromaVectorIndex.ephemeral()


def _persistent_chroma(root: Path) -> VectorIndex:
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex

    return ChromaVectorIndex.persistent(root / "chroma")


MEMORY = Backend("memory", lambda _: InMemoryStorage(), lambda _: InMemoryVectorIndex())
"""The in-memory reference backends."""
SQLITE_MEMORY = Backend(
    "sqlite+memory", lambda _: SQLiteStorage(":memory:"), lambda _: InMemoryVectorIndex()
)
"""SQLite (the same SQL, in RAM: fast enough for many generated examples)."""
SQLITE_CHROMA = Backend(
    "sqlite+chroma",
    lambda root: SQLiteStorage(root / "messages.db"),
    _ephemeral_chroma,
    shared_vectors=True,
)
"""A SQLite file and embedded Chroma (its in-process client: the same collection code)."""
LOCAL = Backend("local", lambda root: SQLiteStorage(root / "messages.db"), _persistent_chroma)
"""What ``SemanticRecall.local`` builds: a SQLite file and a persistent embedded Chroma."""
MEMORY_EPHEMERAL_CHROMA = Backend(
    "memory+chroma", lambda _: InMemoryStorage(), _ephemeral_chroma, shared_vectors=True
)
LYING_VECTORS = Backend(
    "memory+vectors-ignoring-scope", lambda _: InMemoryStorage(), lambda _: IgnoresScope()
)
"""A vector index that ignores the scope (a misconfigured filter): storage must still hold."""
BACKENDS = (MEMORY, SQLITE_MEMORY, SQLITE_CHROMA, LOCAL)
"""Every backend that exists today, embedded (no server needed)."""
FAST_BACKENDS = (MEMORY, SQLITE_MEMORY, MEMORY_EPHEMERAL_CHROMA)
"""Backends cheap enough for many generated examples (no disk)."""


@dataclass
class Rig:
    """An engine over faulty wrappers of a backend, plus its parts."""

    engine: SemanticRecall
    storage: FaultyStorage
    vectors: FaultyVectors
    embeddings: FaultyEmbeddings

    def engine_with(self, **options: Any) -> SemanticRecall:
        """Another engine over the same parts (e.g. another scope)."""
        options.setdefault("index_name", self.engine.index_name)
        return SemanticRecall(
            storage=self.storage,
            vector_store=self.vectors,
            embeddings=self.embeddings,
            **options,
        )

    def clear_faults(self) -> None:
        for injector in (self.storage.faults, self.vectors.faults, self.embeddings.faults):
            injector.clear()

    @property
    def index_name(self) -> str:
        return self.engine.ensure_index().name

    def vector_ids(self, scope: ScopeFilter | None = None) -> set[str]:
        """Message ids with a vector, read from the real index (no faults)."""
        return self.vectors.inner.message_ids(self.index_name, scope)

    def stored(self, scope: ScopeFilter | None = None) -> list[StoredMessage]:
        """Every stored message, read from the real storage (no faults)."""
        found: list[StoredMessage] = []
        after: tuple[str, int] | None = None
        while page := self.storage.inner.list_messages(scope, after=after, limit=500):
            found.extend(page)
            after = (page[-1].thread_id, page[-1].seq)
        return found


_names = iter(range(1 << 62))
_names_lock = threading.Lock()


def unique_index_name(prefix: str = "faults") -> str:
    with _names_lock:
        return f"{prefix}-{next(_names)}-idx"


@contextmanager
def open_rig(backend: Backend, root: Path | None = None, **options: Any) -> Iterator[Rig]:
    """A fresh engine over faulty wrappers of ``backend`` (a temporary folder if no root).

    Options go to :class:`SemanticRecall`; ``dimension`` sets the fake embedder's.
    """
    dimension = options.pop("dimension", 64)
    with _folder(root) as folder:
        storage = FaultyStorage(backend.make_storage(folder))
        vectors = FaultyVectors(backend.make_vectors(folder))
        embeddings = FaultyEmbeddings(dimension=dimension)
        if backend.shared_vectors:
            options.setdefault("index_name", unique_index_name())
        engine = SemanticRecall(
            storage=storage, vector_store=vectors, embeddings=embeddings, **options
        )
        try:
            yield Rig(engine, storage, vectors, embeddings)
        finally:
            if backend.shared_vectors and engine.index_name is not None:
                drop = getattr(vectors.inner, "drop", None)
                if callable(drop):
                    drop(engine.index_name)
            storage.close()
            vectors.close()


@contextmanager
def _folder(root: Path | None) -> Iterator[Path]:
    if root is not None:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="semantic-recall-faults-") as folder:
        yield Path(folder)
