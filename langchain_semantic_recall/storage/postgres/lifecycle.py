"""The PostgreSQL storage's SQL for a thread's life: forget, empty, adopt, move, restore, reserve.

Statement generators like those of `sql` (no I/O), each under the thread's advisory lock
(`sql._lock_steps`), so a write of the same thread waits for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from langchain_semantic_recall.errors import OwnershipError
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    Deleted,
    DeletedMessage,
    ScopeFilter,
    ThreadPlace,
)
from langchain_semantic_recall.storage.checks import (
    check_still_owned,
    thread_of_another,
    thread_retired,
)
from langchain_semantic_recall.storage.postgres.sql import (
    FORGOTTEN,
    MESSAGES,
    THREADS,
    Query,
    Steps,
    _lock_steps,
    _scope_sql,
    _scope_token,
)

__all__ = [
    "UNRETIRE_SQL",
    "adopt_steps",
    "delete_before_steps",
    "delete_resource_steps",
    "delete_thread_steps",
    "move_thread_steps",
    "reserve_steps",
]

_M, _T, _F = MESSAGES, THREADS, FORGOTTEN


def delete_thread_steps(thread_id: str, *, retire: bool, owner: str | None = None) -> Steps[int]:
    """Delete the thread's messages (their keyword terms with them) and its row.

    With `retire`, also retire its id, under the thread's lock (late writers queue
    behind). With `owner`, only while the thread (if stored) still belongs to it.

    Raises:
        OwnershipError: the thread now belongs to another resource than `owner`.
    """
    yield from _lock_steps([thread_id])
    found = yield Query(f"SELECT resource_id FROM {_T} WHERE thread_id = %s", (thread_id,))
    check_still_owned(thread_id, found.rows[0][0] if found.rows else None, owner)
    deleted = (yield Query(f"DELETE FROM {_M} WHERE thread_id = %s", (thread_id,))).rowcount
    yield Query(f"DELETE FROM {_T} WHERE thread_id = %s", (thread_id,))
    if not retire:
        return deleted
    yield Query(
        f"INSERT INTO {_F} (thread_id, resource_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (thread_id, found.rows[0][0] if found.rows else None),
    )
    return deleted


def adopt_steps(thread_id: str, resource_id: str) -> Steps[int]:
    """Give an unowned thread (`NO_RESOURCE`) its owner, under the thread's lock.

    Raises:
        OwnershipError: the thread is owned by another resource.
    """
    yield from _lock_steps([thread_id])
    owner = (yield Query(f"SELECT resource_id FROM {_T} WHERE thread_id = %s", (thread_id,))).rows
    if not owner or owner[0][0] == resource_id:
        return 0
    if owner[0][0] != NO_RESOURCE:
        raise OwnershipError(
            f"thread {thread_id!r} belongs to another resource than {resource_id!r}"
        )
    return (yield from _reassign_steps(thread_id, owner[0][0], resource_id))


def reserve_steps(places: Sequence[ThreadPlace]) -> Steps[int]:
    """Create the threads missing and raise next seqs, under the threads' locks.

    Raises:
        ForgottenThreadError: a thread id is retired.
        OwnershipError: a thread belongs to another resource.
    """
    thread_ids = list(dict.fromkeys(p.thread_id for p in places))
    yield from _lock_steps(thread_ids)
    sql = f"SELECT thread_id FROM {_F} WHERE thread_id = ANY(%s)"
    if retired := (yield Query(sql, (thread_ids,))).rows:
        raise thread_retired(retired[0][0])
    sql = f"SELECT thread_id, resource_id FROM {_T} WHERE thread_id = ANY(%s)"
    owners = dict((yield Query(sql, (thread_ids,))).rows)
    known = set(owners)
    seqs: dict[str, int] = {}
    for place in places:
        if owners.setdefault(place.thread_id, place.resource_id) != place.resource_id:
            raise thread_of_another(place.thread_id, place.resource_id)
        seqs[place.thread_id] = max(seqs.get(place.thread_id, 0), place.next_seq)
    new = [t for t in seqs if t not in known]
    if new:
        yield Query(
            f"INSERT INTO {_T} (thread_id, resource_id) SELECT * FROM unnest(%s::text[], "
            "%s::text[])",
            (new, [owners[t] for t in new]),
        )
    yield Query(
        f"UPDATE {_T} AS t SET next_seq = u.n FROM unnest(%s::text[], %s::bigint[]) "
        "AS u(t, n) WHERE t.thread_id = u.t AND t.next_seq < u.n",
        (list(seqs), list(seqs.values())),
    )
    return len(new)


def move_thread_steps(thread_id: str, to_resource: str, owner: str | None = None) -> Steps[int]:
    """Give the thread to `to_resource`: its row, its messages and their scope lexeme.

    Raises:
        OwnershipError: `owner` is given and the thread now belongs to another resource.
    """
    yield from _lock_steps([thread_id])
    found = (yield Query(f"SELECT resource_id FROM {_T} WHERE thread_id = %s", (thread_id,))).rows
    if not found:
        return 0
    check_still_owned(thread_id, found[0][0], owner)
    return (yield from _reassign_steps(thread_id, found[0][0], to_resource))


def _reassign_steps(thread_id: str, old: str, new: str) -> Steps[int]:
    """The thread's row and messages to `new`, their scope lexeme with them (locked)."""
    yield Query(f"UPDATE {_T} SET resource_id = %s WHERE thread_id = %s", (new, thread_id))
    tokens = (_scope_token("r", old), _scope_token("r", new))
    moved = yield Query(
        f"UPDATE {_M} SET resource_id = %s, tsv = array_to_tsvector(array_replace("
        "tsvector_to_array(tsv), %s, %s)) WHERE thread_id = %s",
        (new, *tokens, thread_id),
    )
    return moved.rowcount


UNRETIRE_SQL: Final = f"DELETE FROM {_F} WHERE thread_id = %s"


def delete_resource_steps(resource_id: str) -> Steps[int]:
    """Delete every thread of a resource and retire their ids; the messages deleted."""
    sql = f"SELECT thread_id FROM {_T} WHERE resource_id = %s"
    threads = [row[0] for row in (yield Query(sql, (resource_id,))).rows]
    if not threads:
        return 0
    yield from _lock_steps(threads)
    # Only the threads locked above: a thread created meanwhile is a new one, and stays;
    # one moved to another resource while we waited for its lock is that resource's.
    still = yield Query(f"{sql} AND thread_id = ANY(%s)", (resource_id, threads))
    threads = [row[0] for row in still.rows]
    yield Query(
        f"INSERT INTO {_F} (thread_id, resource_id) SELECT t, %s FROM unnest(%s::text[]) "
        "AS t ON CONFLICT DO NOTHING",
        (resource_id, threads),
    )
    deleted = (yield Query(f"DELETE FROM {_M} WHERE thread_id = ANY(%s)", (threads,))).rowcount
    yield Query(f"DELETE FROM {_T} WHERE thread_id = ANY(%s)", (threads,))
    return deleted


def delete_before_steps(cutoff: datetime, scope: ScopeFilter | None) -> Steps[Deleted]:
    """Delete the messages created before `cutoff` in `scope`, keyword terms with them.

    Threads keep their row, owner and next seq. Under the threads' locks, taken in key
    order before any row lock (as a writer takes them), so no deadlock with a write.
    """
    where, params = _scope_sql(scope)
    sql = f"SELECT DISTINCT thread_id FROM {_M} WHERE created_at < %(cutoff)s{where}"
    threads = (yield Query(sql, {"cutoff": cutoff, **params})).rows
    if not threads:
        return []
    yield from _lock_steps([row[0] for row in threads])
    deleted = yield Query(
        f"DELETE FROM {_M} WHERE created_at < %(cutoff)s{where} "
        "RETURNING id, thread_id, resource_id, seq",
        {"cutoff": cutoff, **params},
    )
    rows = sorted(deleted.rows, key=lambda row: (row[1], row[3]))
    return [DeletedMessage(id_, thread_id, resource_id) for id_, thread_id, resource_id, _ in rows]
