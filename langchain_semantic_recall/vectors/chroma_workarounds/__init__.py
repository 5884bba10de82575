"""Every workaround for a Chroma behaviour, in one place, behind one setting.

`ChromaWorkarounds` is the setting (`ChromaVectorIndex(..., workarounds=...)`,
`SemanticRecall.local(path, chroma_workarounds=...)`); each module here is one workaround:

- `async_writes`: an embedded write holds the GIL from start to end (~5 ms for 2 vectors,
  ~90 ms for 200), and an event loop waiting for the GIL stalls. Async upserts go in
  small pieces, one at a time, each waiting for the local model's runs (`CpuGate`).
  Upstream: chroma-core/chroma#3873 released the GIL on reads only ("inserts are
  internally multithreaded"); #7692 (open) for metadata I/O.
- `unload`: the pool of loaded HNSW indexes evicts one index at a time, and an evicted
  index (saved only every 1,000 writes, chroma-core/chroma#6975) is read back from disk
  without replaying Chroma's log: vectors written since its last save vanish from
  searches, or the search fails. Replaced by unloading every index at once
  (`RestartingBindings`). Upstream: #4212 (the error), #7765 (open: eviction closes a
  live index's files).
- `reads`: a read can fail with "Error creating hnsw segment reader: Nothing found on
  disk" while a collection's index is neither loaded nor saved: read again after a
  pause. Upstream: chroma-core/chroma#4212.

- `http_close`: `HttpClient.close()` leaves its HTTP sessions open and its `System` in
  chromadb's process-wide cache: `ChromaServerVectorIndex.close()` releases both (an index
  built per request kept a connection and ~1 MB each). Upstream: chroma-core/chroma#2702,
  #7533 (open).

- `write_behind` (`vectors.write_behind`): an embedded upsert of a turn's 2 vectors takes
  7-23 ms in chromadb's Rust bindings (two SQLite transactions, four `fsync`s each),
  whatever the caller does. A sync `index`'s batch (up to 16 vectors) is written by a
  worker thread just after the call returns; every other call of the index waits for it
  first. The async twin writes at the call, in pieces (`async_writes`).

The first four are for the **embedded** client (`PersistentClient`, `EphemeralClient`);
over HTTP the server is Chroma's own process and only `reads` and `http_close` apply. The purge
(`chroma_purge`) is no workaround: it uses Chroma's public API only.

Turned off (`ChromaWorkarounds.off()`, or `workarounds=False`), the index is plain Chroma:
an async upsert is one write in an executor (atomic like the sync one, and stalling the
event loop while it runs), every write is made at the call, Chroma's own eviction runs,
and reads are not retried. Use it
to check whether a newer chromadb still needs them (run `tests/integration/
test_chroma_embedded_concurrency.py` and `benchmarks/perf_loop.py` with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from langchain_semantic_recall.cpu_gate import CpuGate
from langchain_semantic_recall.errors import InvalidOptionError

__all__ = ["ASYNC_PIECE", "READ_RETRY_DELAYS", "ChromaWorkarounds"]

ASYNC_PIECE: Final = 16
"""Vectors per write of an async upsert on an embedded client (~10 ms holding the GIL)."""
READ_RETRY_DELAYS: Final = (0.02, 0.1, 0.3, 1.0)
"""Pauses before reading again a collection whose index is not on disk yet."""


@dataclass(frozen=True)
class ChromaWorkarounds:
    """Which Chroma workarounds an index uses (all on by default; see the module).

    Example:
        ```python
        gate = CpuGate()  # shared with the local model: its runs and our writes alternate
        vectors = ChromaVectorIndex.persistent(
            "./memory/chroma", workarounds=ChromaWorkarounds(cpu_gate=gate, max_loaded=200)
        )
        embeddings = LocalEmbeddings(cpu_gate=gate)
        plain = ChromaVectorIndex.persistent("./other", workarounds=ChromaWorkarounds.off())
        ```

    Attributes:
        enabled: False turns every workaround off (the other fields are then ignored).
        async_piece: Vectors per write of an async upsert on an embedded client
            (chroma-core/chroma#3873). The async upsert of a batch is then several
            writes: a failure can leave the first pieces written.
        cpu_gate: The gate an embedded async write holds alone, shared with the local
            model (`LocalEmbeddings(cpu_gate=...)`); None: the writes wait for nothing.
            `SemanticRecall.local` and `from_url` pass one gate to both.
        max_loaded: Most collections (resources) embedded Chroma keeps loaded; when one
            more is needed all are unloaded, losing nothing (`unload`). None: Chroma's
            own capacity (the open-file limit / 5). The bound belongs to the folder's
            client, shared by every index on that folder in the process.
        read_retry_delays: Pauses between reads of a collection whose index is not
            ready (chroma-core/chroma#4212); empty: no retry.
        write_behind: On an embedded client, write a sync `index`'s vectors (up to 16)
            just after the call returns (`vectors.write_behind`); False: at the call.

    Raises:
        InvalidOptionError: `async_piece` or `max_loaded` below 1, or a negative delay.
    """

    enabled: bool = True
    async_piece: int = ASYNC_PIECE
    cpu_gate: CpuGate | None = field(default=None, compare=False)
    max_loaded: int | None = None
    read_retry_delays: tuple[float, ...] = READ_RETRY_DELAYS
    write_behind: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.async_piece, bool) or self.async_piece < 1:
            raise InvalidOptionError(f"async_piece must be >= 1, got {self.async_piece!r}")
        if self.max_loaded is not None and (
            isinstance(self.max_loaded, bool) or self.max_loaded < 1
        ):
            raise InvalidOptionError(
                f"max_loaded must be >= 1 (or None for Chroma's capacity), got {self.max_loaded!r}"
            )
        if any(delay < 0 for delay in self.read_retry_delays):
            raise InvalidOptionError(f"read_retry_delays must be >= 0: {self.read_retry_delays}")

    @classmethod
    def off(cls) -> ChromaWorkarounds:
        """Plain Chroma: no workaround at all."""
        return cls(enabled=False)

    @classmethod
    def of(cls, value: ChromaWorkarounds | bool | None) -> ChromaWorkarounds:
        """The setting from `True`/None (the defaults), `False` (off) or itself.

        Raises:
            InvalidOptionError: any other value.
        """
        if value is None or value is True:
            return cls()
        if value is False:
            return cls.off()
        if isinstance(value, ChromaWorkarounds):
            return value
        raise InvalidOptionError(
            f"chroma workarounds must be True, False or a ChromaWorkarounds, got {value!r}"
        )

    @property
    def piece(self) -> int | None:
        """Vectors per async write on an embedded client; None: one write (turned off)."""
        return self.async_piece if self.enabled else None

    @property
    def behind(self) -> bool:
        """Whether embedded upserts of a turn's vectors are written behind."""
        return self.enabled and self.write_behind

    @property
    def gate(self) -> CpuGate | None:
        """The gate async embedded writes hold, if any."""
        return self.cpu_gate if self.enabled else None

    @property
    def delays(self) -> tuple[float, ...]:
        """Pauses between reads of a collection not ready yet (none when turned off)."""
        return self.read_retry_delays if self.enabled else ()
