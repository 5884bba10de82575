"""A PostgreSQL connection: its string checked and shown without password, its pool's check."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from langchain_semantic_recall.errors import InvalidOptionError

__all__ = ["answers_within", "check_conninfo", "pool_number", "redacted", "sets_connect_timeout"]


def check_conninfo(conninfo: str, shown: str) -> None:
    """Refuse a parameter libpq does not know (a typo) before anything connects.

    Raises:
        InvalidOptionError: naming the parameter; `shown` is the URL without password.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise InvalidOptionError(
            f"{shown!r}: {str(exc).strip()}; its parameters are pool_min_size, pool_max_size, "
            "pool_timeout and libpq's (sslmode, options, connect_timeout...: https://www.postgresql.org/"
            "docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS)"
        ) from exc


def sets_connect_timeout(conninfo: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether the caller chose libpq's `connect_timeout` (in the URL or the kwargs)."""
    from psycopg.conninfo import conninfo_to_dict

    if "connect_timeout" in kwargs:
        return True
    try:
        return "connect_timeout" in conninfo_to_dict(conninfo)
    except Exception:  # an unparsable conninfo: connecting says what is wrong with it
        return False


def redacted(conninfo: str) -> str:
    """`conninfo` without its passwords (for messages and logs)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(conninfo)
    except Exception:
        return "<unparsable conninfo>"
    for secret in ("password", "sslpassword"):  # the latter unlocks the client's key
        parts.pop(secret, None)
    return make_conninfo("", **parts)


def pool_number(key: str, value: str) -> float:
    """A pool parameter of a URL's value, checked.

    `pool_min_size` / `pool_max_size` are integers >= 0, `pool_timeout` seconds > 0.

    Raises:
        InvalidOptionError: another value.
    """
    if key != "pool_timeout":
        if not value.isdigit():
            raise InvalidOptionError(f"{key} must be an integer >= 0, got {value!r}")
        return int(value)
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds < math.inf):
        raise InvalidOptionError(f"pool_timeout must be a number of seconds > 0, got {value!r}")
    return seconds


def answers_within(seconds: float) -> Callable[[Any], None]:
    """The sync pool's check of a pooled connection, given up after `seconds`.

    psycopg's own check (an empty query) waits as long as the server takes: a server
    that stalls while connections are pooled (a frozen process, a failover in progress)
    blocked every sync call for good, where the async pool gives up after its timeout.
    A connection that does not answer in time is closed, and the pool makes a new one
    (libpq's `connect_timeout` bounds that) or fails after its own timeout. A query that
    stalls after the check still waits: psycopg has no deadline for one.
    """
    import psycopg
    from psycopg import generators, pq

    late = getattr(psycopg.errors, "_WaitTimeout", None)  # psycopg 3.3.6 and later
    if late is None:  # a psycopg without deadlines: its own check
        from psycopg_pool import ConnectionPool

        return ConnectionPool.check_connection

    def check(conn: Any) -> None:
        pgconn = conn.pgconn
        if pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("the pooled connection is closed")
        pgconn.send_query(b"")
        try:
            results = conn.wait(generators.fetch_many(pgconn), timeout=seconds)
        except late:
            pgconn.finish()
            raise psycopg.OperationalError(
                f"the server did not answer a pooled connection's check in {seconds:g} s"
            ) from None
        # A connection the server ended (pg_terminate_backend, idle_session_timeout, a
        # failover) answers with an error result, which fetch_many returns, not raises.
        if pgconn.status != pq.ConnStatus.OK or any(
            result.status != pq.ExecStatus.EMPTY_QUERY for result in results
        ):
            raise psycopg.OperationalError("the pooled connection no longer works")

    return check
