"""PostgreSQL message storage (psycopg 3): pooled, with native sync and async twins.

Every operation is written once in `sql` (the schema in `schema`), as a
generator of statements; the two drivers here run it on a `psycopg_pool.ConnectionPool`
or on an `AsyncConnectionPool` (a real async connection, not a thread pool): the base
class's public methods check the input once, then call `_put` or `_aput` (and so on),
which differ only in the driver. The schema carries a version (table
`semantic_recall_schema_version`) and is created or migrated when the storage opens,
under an advisory lock, so many processes may start at once.

Concurrency: a write takes a transaction-scoped advisory lock per thread id (in a fixed
order), so writers of one thread queue up for its sequence numbers while other threads
proceed, and forgetting a thread serialises with late writes to it. Indexes keep the hot
reads to index lookups at millions of messages: windows use `UNIQUE (thread_id, seq)`,
resource-scoped reads `(resource_id, thread_id, seq)`.

Keyword search indexes the package's own terms (`langchain_semantic_recall.keywords`:
stemmed, no stop words) rather than PostgreSQL's `english` configuration, so that it
ranks exactly like the SQLite and in-memory backends; the terms are a `tsvector` with a
GIN index, and BM25 uses the scope's own statistics.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from langchain_semantic_recall.errors import InvalidInputError, StorageError
from langchain_semantic_recall.keywords import BM25Params
from langchain_semantic_recall.records import (
    CompactResult,
    Deleted,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    ThreadInfo,
    ThreadPlace,
)
from langchain_semantic_recall.storage.base import MessageStorage
from langchain_semantic_recall.storage.postgres.conninfo import (
    answers_within,
    redacted,
    sets_connect_timeout,
)
from langchain_semantic_recall.storage.postgres.lifecycle import (
    UNRETIRE_SQL,
    adopt_steps,
    delete_before_steps,
    delete_resource_steps,
    delete_thread_steps,
    move_thread_steps,
    reserve_steps,
)
from langchain_semantic_recall.storage.postgres.loops import LoopPools
from langchain_semantic_recall.storage.postgres.schema import setup_steps
from langchain_semantic_recall.storage.postgres.sql import (
    COMPACTED,
    FORGOTTEN_SQL,
    OWNER_SQL,
    Query,
    Result,
    Steps,
    compact_steps,
    count_steps,
    in_scope_steps,
    keyword_steps,
    last_steps,
    list_steps,
    one_value_steps,
    put_steps,
    threads_steps,
    windows_steps,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor, Cursor
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

logger = logging.getLogger(__name__)

T = TypeVar("T")


# --- drivers ----------------------------------------------------------------------------


def _drive(cursor: Cursor[Any], steps: Steps[T]) -> T:
    try:
        query = next(steps)
        while True:
            cursor.execute(query.sql, query.params)
            rows = cursor.fetchall() if cursor.description is not None else []
            query = steps.send(Result(rows, cursor.rowcount))
    except StopIteration as done:
        return cast("T", done.value)


async def _adrive(cursor: AsyncCursor[Any], steps: Steps[T]) -> T:
    try:
        query = next(steps)
        while True:
            await cursor.execute(query.sql, query.params)
            rows = await cursor.fetchall() if cursor.description is not None else []
            query = steps.send(Result(rows, cursor.rowcount))
    except StopIteration as done:
        return cast("T", done.value)


def _rowcount_steps(sql: str, value: str) -> Steps[int]:
    return (yield Query(sql, (value,))).rowcount


class PostgresStorage(MessageStorage):
    """Message storage in PostgreSQL, pooled, with native sync and async access.

    Setup:

    ```python
    storage = PostgresStorage("postgresql://app@db.internal/memory", max_size=20)
    memory = SemanticRecall(storage=storage, vector_store=..., embeddings=...)
    ```

    Sync use:

    ```python
    storage.put(records)
    storage.get_windows(ids, before=2, after=1, scope=ScopeFilter(resource_id="u1"))
    ```

    Async use (a psycopg `AsyncConnectionPool` per event loop, opened on first use and
    closed by `aclose()` in that loop, or when the loop shuts down, e.g. at the end of
    `asyncio.run`; a later loop gets a new one):

    ```python
    await storage.aput(records)
    await storage.aclose()
    ```

    The schema (tables `semantic_recall_*`) is created or migrated when the storage is
    built. To keep it in its own PostgreSQL schema, put it on the search path, e.g.
    `postgresql://host/db?options=-csearch_path%3Dmemory`. Behind PgBouncer in
    transaction mode, pass `prepare_threshold=None` in `connection_kwargs`.
    """

    supports_keyword_search = True
    supports_compact = True
    supports_move = True

    def __init__(
        self,
        conninfo: str = "",
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        pool: ConnectionPool | None = None,
        async_pool: AsyncConnectionPool | None = None,
        connection_kwargs: Mapping[str, Any] | None = None,
        bm25: BM25Params | None = None,
    ) -> None:
        """Connect, create or migrate the schema, and open the sync pool.

        Args:
            conninfo: A libpq URL or key/value string (`postgresql://user@host/db`).
            min_size: Connections each pool keeps open.
            max_size: Most connections each pool opens (one sync pool, one async pool
                per event loop, closed when that loop shuts down).
            timeout: Seconds to wait for a free connection before failing; also libpq's
                `connect_timeout` (at least 2 s) unless the URL or `connection_kwargs`
                set it, so a server that accepts and never answers fails instead of hanging.
            pool: A sync pool of your own (autocommit connections); not closed here.
            async_pool: An async pool of your own (autocommit connections, opened);
                used from every event loop and not closed here.
            connection_kwargs: Extra `psycopg.connect` arguments for the pools made here.
            bm25: BM25's constants for `keyword_search` (default `k1=1.2, b=0.3`).

        Raises:
            StorageError: The server cannot be reached, or its schema is newer than this
                package.
        """
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise StorageError(
                "PostgresStorage needs psycopg 3 and psycopg-pool: "
                "pip install 'langchain-semantic-recall[postgres]'"
            ) from exc
        if not conninfo and pool is None and async_pool is None:
            raise InvalidInputError("PostgresStorage needs a conninfo URL or a pool")
        self._conninfo = conninfo
        self._where = redacted(conninfo) if conninfo else "a caller's pool"
        self._sizes = (min_size, max_size, timeout)
        self._kwargs: dict[str, Any] = {"autocommit": True, **(connection_kwargs or {})}
        if "application_name=" not in conninfo and "application_name" not in self._kwargs:
            self._kwargs["application_name"] = "langchain-semantic-recall"
        if not sets_connect_timeout(conninfo, self._kwargs):
            # libpq waits forever for a server that accepts and never answers
            self._kwargs["connect_timeout"] = max(2, math.ceil(timeout))
        self._bm25 = bm25 or BM25Params()
        self._user_apool = async_pool
        self._apools = LoopPools(self._new_apool)
        self._pool: ConnectionPool | None = pool
        self._owns_pool = pool is None and bool(conninfo)
        if self._owns_pool:
            self._setup_direct()
            self._pool = ConnectionPool(
                conninfo,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                kwargs=self._kwargs,
                check=answers_within(timeout),
                name="semantic-recall",
                open=True,
            )
        elif pool is not None:
            self._run(setup_steps(), "schema set-up", write=True)
        self._ready = pool is not None or self._owns_pool
        logger.debug("opened PostgreSQL storage %s", self._where)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where!r})"

    def _setup_direct(self) -> None:
        import psycopg

        try:
            with (
                psycopg.connect(self._conninfo, **self._kwargs) as conn,
                conn.transaction(),
                conn.cursor() as cursor,
            ):
                _drive(cursor, setup_steps())
        except psycopg.Error as exc:
            raise StorageError(
                f"cannot open PostgreSQL storage {self._where} ({exc}); check the URL, "
                "that the server runs and that the user may create tables"
            ) from exc

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise StorageError(
                f"PostgreSQL storage {self._where}: {action} failed ({exc}); check that the "
                "server is reachable and the pool is large enough"
            ) from exc

    def _run(self, steps: Steps[T], action: str, *, write: bool = False) -> T:
        if self._pool is None:
            raise StorageError("this PostgresStorage has only an async pool: use the a* methods")
        with self._errors(action), self._pool.connection() as conn, conn.cursor() as cursor:
            if not write:
                return _drive(cursor, steps)
            with conn.transaction():
                return _drive(cursor, steps)

    async def _arun(self, steps: Steps[T], action: str, *, write: bool = False) -> T:
        async with self._aconnection(action) as conn:
            cursor = conn.cursor()
            async with cursor:
                if not write:
                    return await _adrive(cursor, steps)
                async with conn.transaction():
                    return await _adrive(cursor, steps)

    @asynccontextmanager
    async def _aconnection(self, action: str) -> AsyncIterator[Any]:
        pool = await self._apool()
        with self._errors(action):
            async with pool.connection() as conn:
                if not self._ready:
                    async with conn.transaction(), conn.cursor() as cursor:
                        await _adrive(cursor, setup_steps())
                    self._ready = True
                yield conn

    async def _apool(self) -> AsyncConnectionPool:
        """The async pool of the running event loop (made and opened on first use)."""
        if self._user_apool is not None:
            return self._user_apool
        pool = self._apools.current()
        with self._errors("opening the async pool"):
            await pool.open()
        return pool

    def _new_apool(
        self, configure: Callable[[AsyncConnection[Any]], Awaitable[None]]
    ) -> AsyncConnectionPool:
        from psycopg_pool import AsyncConnectionPool

        min_size, max_size, timeout = self._sizes
        return AsyncConnectionPool(
            self._conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs=self._kwargs,
            configure=configure,
            check=AsyncConnectionPool.check_connection,
            name="semantic-recall-async",
            open=False,
        )

    # --- the storage contract: each operation's steps, run sync or async -------------

    def _put(self, records: list[MessageRecord]) -> list[StoredMessage]:
        return self._run(put_steps(records), "write", write=True)

    async def _aput(self, records: list[MessageRecord]) -> list[StoredMessage]:
        return await self._arun(put_steps(records), "write", write=True)

    def _get_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        """One query for every hit."""
        return self._run(windows_steps(message_ids, before, after, scope), "read")

    async def _aget_windows(
        self, message_ids: list[str], *, before: int, after: int, scope: ScopeFilter
    ) -> dict[str, tuple[StoredMessage, ...]]:
        return await self._arun(windows_steps(message_ids, before, after, scope), "read")

    def _ids_in_scope(self, message_ids: list[str], scope: ScopeFilter) -> set[str]:
        return self._run(in_scope_steps(message_ids, scope), "read")

    async def _aids_in_scope(self, message_ids: list[str], scope: ScopeFilter) -> set[str]:
        return await self._arun(in_scope_steps(message_ids, scope), "read")

    def _get_thread_owner(self, thread_id: str) -> str | None:
        return cast("str | None", self._run(one_value_steps(OWNER_SQL, thread_id, None), "read"))

    async def _aget_thread_owner(self, thread_id: str) -> str | None:
        steps = one_value_steps(OWNER_SQL, thread_id, None)
        return cast("str | None", await self._arun(steps, "read"))

    def _list_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        return self._run(list_steps(scope, after, limit), "read")

    async def _alist_messages(
        self, scope: ScopeFilter | None, *, after: tuple[str, int] | None, limit: int
    ) -> list[StoredMessage]:
        return await self._arun(list_steps(scope, after, limit), "read")

    def _last_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        return self._run(last_steps(scope, limit), "read")

    async def _alast_messages(self, scope: ScopeFilter, *, limit: int) -> list[StoredMessage]:
        return await self._arun(last_steps(scope, limit), "read")

    def _list_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        return self._run(threads_steps(resource_id), "read")

    async def _alist_threads(self, resource_id: str | None) -> list[ThreadInfo]:
        return await self._arun(threads_steps(resource_id), "read")

    def _count(self, scope: ScopeFilter | None) -> int:
        """One query."""
        return self._run(count_steps(scope), "read")

    async def _acount(self, scope: ScopeFilter | None) -> int:
        return await self._arun(count_steps(scope), "read")

    def _count_up_to(self, scope: ScopeFilter | None, up_to: int) -> int:
        return self._run(count_steps(scope, up_to), "read")

    async def _acount_up_to(self, scope: ScopeFilter | None, up_to: int) -> int:
        return await self._arun(count_steps(scope, up_to), "read")

    def _delete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        steps = delete_thread_steps(thread_id, retire=retire, owner=owner)
        return self._run(steps, "delete", write=True)

    async def _adelete_thread(self, thread_id: str, *, retire: bool, owner: str | None) -> int:
        steps = delete_thread_steps(thread_id, retire=retire, owner=owner)
        return await self._arun(steps, "delete", write=True)

    def _delete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        return self._run(delete_before_steps(cutoff, scope), "delete", write=True)

    async def _adelete_before(self, cutoff: datetime, scope: ScopeFilter | None) -> Deleted:
        return await self._arun(delete_before_steps(cutoff, scope), "delete", write=True)

    def _reserve_threads(self, places: list[ThreadPlace]) -> int:
        return self._run(reserve_steps(places), "write", write=True)

    async def _areserve_threads(self, places: list[ThreadPlace]) -> int:
        return await self._arun(reserve_steps(places), "write", write=True)

    def _adopt_thread(self, thread_id: str, resource_id: str) -> int:
        return self._run(adopt_steps(thread_id, resource_id), "write", write=True)

    async def _aadopt_thread(self, thread_id: str, resource_id: str) -> int:
        return await self._arun(adopt_steps(thread_id, resource_id), "write", write=True)

    def _delete_resource(self, resource_id: str) -> int:
        return self._run(delete_resource_steps(resource_id), "delete", write=True)

    async def _adelete_resource(self, resource_id: str) -> int:
        return await self._arun(delete_resource_steps(resource_id), "delete", write=True)

    def _move_thread(self, thread_id: str, to_resource: str, owner: str | None) -> int:
        return self._run(move_thread_steps(thread_id, to_resource, owner), "move", write=True)

    def _unretire_thread(self, thread_id: str) -> bool:
        steps = _rowcount_steps(UNRETIRE_SQL, thread_id)
        return bool(self._run(steps, "unretire", write=True))

    def _is_forgotten(self, thread_id: str) -> bool:
        return bool(self._run(one_value_steps(FORGOTTEN_SQL, thread_id, False), "read"))

    async def _ais_forgotten(self, thread_id: str) -> bool:
        return bool(await self._arun(one_value_steps(FORGOTTEN_SQL, thread_id, False), "read"))

    def _keyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        """(message id, BM25 score) of the best keyword matches inside `scope`, best first.

        Same terms, statistics and tie-breaking as the SQLite and in-memory backends: the
        GIN index finds the scope's user and assistant messages holding any query term,
        and BM25 scores them with the scope's document count and mean length.
        """
        return self._run(keyword_steps(query, scope, limit, self._bm25), "keyword search")

    async def _akeyword_search(
        self, query: str, *, scope: ScopeFilter, limit: int
    ) -> list[tuple[str, float]]:
        steps = keyword_steps(query, scope, limit, self._bm25)
        return await self._arun(steps, "keyword search")

    # --- compacting (purge) ------------------------------------------------------------

    def _compact(self) -> CompactResult:
        """`VACUUM (FULL, ANALYZE)` of the package's tables (see `compact_steps`).

        The server's write-ahead log, replicas, base backups and archives are the
        operator's: they keep deleted rows until they are rotated.
        """
        return self._compacted(self._run(compact_steps(), "VACUUM FULL"))

    async def _acompact(self) -> CompactResult:
        return self._compacted(await self._arun(compact_steps(), "VACUUM FULL"))

    def _compacted(self, sizes: tuple[int, int]) -> CompactResult:
        done = tuple(f"VACUUM (FULL, ANALYZE) {table}" for table in COMPACTED)
        return CompactResult(type(self).__name__, done, sizes[0], sizes[1])

    # --- closing ----------------------------------------------------------------------

    def _close(self) -> None:
        """Close the pools made here (a caller's pools are left open)."""
        if self._owns_pool and self._pool is not None:
            self._pool.close()
        self._apools.close_all()

    async def _aclose(self) -> None:
        """Close the pools made here; awaits the running loop's async pool."""
        await self._apools.aclose_current()
        await asyncio.get_running_loop().run_in_executor(None, self._close)


__all__ = ["PostgresStorage"]
