"""Forgetting a thread or a resource, written once as generators of steps.

The vector index is opened first: one that cannot be (built with another embedding
model, a server down) fails the forget before anything is deleted. Then the storage
deletes (one transaction, which retires the thread ids), then the vector index. A vector
index failing after the storage deleted raises its error with a note that says so: the
messages are gone (no search returns their vectors: every hit is read back through the
storage), the same call again deletes the vectors, as do `reindex(missing_only=True)`
and `purge`; `stats().orphan_vectors` counts them meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.maintenance_ops import owned_thread, reindex_op
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import VectorSpace
from langchain_semantic_recall.records import ScopeFilter
from langchain_semantic_recall.storable import id_text


@contextmanager
def vectors_left(deleted: str) -> Iterator[None]:
    """Note on an error of the vector index raised after the storage deleted `deleted`."""
    try:
        yield
    except Exception as failure:
        failure.add_note(
            f"{deleted} deleted from the storage, but not all of their vectors: call the "
            "same forget again, or reindex(missing_only=True) (on the command line: "
            "'semantic-recall reindex --missing-only'), to delete them; no search returns "
            "them meanwhile, and stats().orphan_vectors counts them"
        )
        raise


def forget_thread_op(
    space: VectorSpace,
    thread_id: str,
    resource_id: str | None,
    *,
    retire: bool,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[int]:
    """Delete a thread's messages and vectors; `retire` also refuses later writes to it.

    A thread id that holds nothing and was never forgotten is left as it is (returns 0).

    Raises:
        OwnershipError: `resource_id` (the call's owner) is given and the thread
            belongs to another one; nothing is deleted.
    """
    thread_id = id_text("thread_id", thread_id)
    if resource_id is not None:
        resource_id = id_text("resource_id", resource_id)
    owner = yield from owned_thread(thread_id, resource_id)
    if owner is None and retire and not (yield steps.IsForgotten(thread_id)):
        # Nothing was ever stored under it: retiring it would let any caller reserve an
        # id that another resource's conversation may start under. (A forgotten one goes
        # on: a retry after a failure still deletes its vectors.)
        return 0
    info = yield from space.resolve()  # before the delete: see the module's docstring
    # The delete holds to the owner just read: a move landing meanwhile is refused there,
    # not deleted with the thread (nor its vectors left under the new owner).
    deleted = yield steps.DeleteThread(thread_id, retire=retire, owner=owner)
    yield steps.ClearCaches()  # it holds recent texts
    # The owner lets a vector layout partitioned by resource touch one partition.
    with vectors_left(f"thread {thread_id!r}: {deleted} message(s) were"):
        yield steps.DeleteVectors(info, thread_id=thread_id, resource_id=owner)
    if not retire and owner is not None:  # a cleared thread takes new turns at once
        scope = ScopeFilter(resource_id=owner, thread_id=thread_id)
        yield from _rewrite_stored_meanwhile(space, scope, max_chars=max_chars, logger=logger)
    return int(deleted)


def forget_resource_op(
    space: VectorSpace, resource_id: str, *, max_chars: int | None, logger: logging.Logger
) -> Op[int]:
    """Delete every thread of a resource (messages and vectors), retiring their ids."""
    resource_id = id_text("resource_id", resource_id)
    info = yield from space.resolve()  # before the delete: see the module's docstring
    deleted = yield steps.DeleteResource(resource_id)
    yield steps.ClearCaches()
    with vectors_left(f"resource {resource_id!r}: {deleted} message(s) were"):
        yield steps.DeleteVectors(info, resource_id=resource_id)
    scope = ScopeFilter(resource_id=resource_id)
    yield from _rewrite_stored_meanwhile(space, scope, max_chars=max_chars, logger=logger)
    return int(deleted)


def _rewrite_stored_meanwhile(
    space: VectorSpace, scope: ScopeFilter, *, max_chars: int | None, logger: logging.Logger
) -> Op[None]:
    """Vectors again for messages stored in `scope` between its delete and its vectors'.

    A turn of the resource on a new thread (not retired) or of a cleared thread (not
    retired either) stored meanwhile had its vectors deleted with the scope's, though
    `index` reported them written (an audit): `reindex(missing_only=True)` of the scope.
    """
    where = f"thread {scope.thread_id!r}" if scope.thread_id else f"resource {scope.resource_id!r}"
    try:  # the forget is done: what follows is a repair, whose failure it only reports
        if not (yield steps.CountMessages(scope, up_to=1)):
            return
        logger.warning("messages stored in %s while it was deleted: vectors follow", where)
        yield from reindex_op(
            space,
            scope=scope,
            missing_only=True,
            batch_size=256,
            progress=None,
            max_chars=max_chars,
            logger=logger,
        )
    except Exception:
        logger.warning(
            "the forget is done, but the vectors of messages stored in %s meanwhile could not "
            "be checked or written: stats() counts them, reindex(missing_only=True) writes them",
            where,
            exc_info=True,
        )
