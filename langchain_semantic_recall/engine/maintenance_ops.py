"""Moving, reindexing and stats, each written once as a generator of steps.

Each operation acts for an owner: the resource the engine resolved for the call (its
argument, a `for_thread` view's, the run's config or context, and on an authenticated
LangGraph server always the signed-in user; see `engine.identity`). With an owner, a
thread of another resource is refused (`OwnershipError`) before anything is read,
counted or deleted; without one (no source gave a resource) the call covers everything.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence, Set
from dataclasses import dataclass

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op, Progress
from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
from langchain_semantic_recall.engine.vector_writes import (
    embed_records,
    strays_of,
    unowned_vectors,
    write_owned,
)
from langchain_semantic_recall.errors import InvalidInputError, OwnershipError
from langchain_semantic_recall.filters import MAX_IN, MetadataValue
from langchain_semantic_recall.messages import skip_reason
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    ScopeFilter,
    StoredMessage,
)
from langchain_semantic_recall.relevance.features import other_script
from langchain_semantic_recall.relevance.model import RelevanceModel, relevance_note
from langchain_semantic_recall.storable import check_id, check_new_id


@dataclass(frozen=True, slots=True)
class RecallStats:
    """What is stored, and whether the vectors are whole."""

    index_name: str
    model: str
    dimension: int
    messages: int
    threads: int
    """Threads holding a message: one emptied by retention is listed (`list_threads`,
    `semantic-recall threads`, with 0 messages) but not counted."""
    resources: int
    """Resources holding a message."""
    embeddable: int
    """Messages that should have a vector (user and assistant messages with text)."""
    vectors: int
    """Messages that have at least one vector."""
    missing_vectors: int
    """Embeddable messages without a vector under their owner, where its searches look
    (repair with `reindex(missing_only=True)`)."""
    orphan_vectors: int
    """Vectors whose message is no longer stored (removed by the repair too)."""
    vectors_without_metadata: int = 0
    """Messages with metadata whose vectors lack it (written before 0.3, whose migration
    gave the stored messages their metadata): a filtered vector search passes them by
    (repair with `reindex(missing_only=True)`)."""
    relevance: str = ""
    """Whether hybrid search's relevance model was fitted for this embedder (`relevance`)."""


def maintenance_scope(resource_id: str | None, thread_id: str | None) -> ScopeFilter | None:
    """The scope of a maintenance call; None (everything) when neither id is given."""
    if resource_id is None and thread_id is None:
        return None
    if resource_id is not None:
        check_id("resource_id", resource_id)
    if thread_id is not None:
        check_id("thread_id", thread_id)
    return ScopeFilter(resource_id=resource_id, thread_id=thread_id)


def owned_thread(
    thread_id: str, resource_id: str | None, *, unowned: bool = False
) -> Op[str | None]:
    """The thread's owner (None: nothing stored), refusing a thread of another resource.

    With `unowned`, a thread stored without a resource (`NO_RESOURCE`, which the
    caller's next write adopts) is accepted too.

    Raises:
        OwnershipError: `resource_id` is given and another resource owns the thread.
    """
    owner: str | None = yield steps.ThreadOwner(thread_id)
    if unowned and owner == NO_RESOURCE:
        return owner
    if resource_id is not None and owner is not None and owner != resource_id:
        raise OwnershipError(
            f"thread {thread_id!r} does not belong to resource {resource_id!r}: a call "
            "made for a resource reads, counts and deletes only that resource's threads"
        )
    return owner


def check_batch(batch_size: object, progress: object) -> int:
    """`batch_size` if it is an int >= 1 and `progress` is callable or None.

    Raises:
        InvalidInputError: either is unusable.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if progress is not None and not callable(progress):
        raise InvalidInputError(f"progress must be a callable or None, got {progress!r}")
    return batch_size


def _embeddable(page: Sequence[StoredMessage]) -> list[StoredMessage]:
    return [m for m in page if skip_reason(m) is None]


def move_thread_op(
    space: VectorSpace,
    thread_id: str,
    resource_id: str | None,
    to_resource: str,
    *,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[int]:
    """Give a thread (messages, keyword index, vectors) to `to_resource`; returns moved.

    Its vectors are deleted under the old owner, the storage moves it in one transaction,
    its vectors under the old owner are deleted again (those of a turn indexed meanwhile:
    `vector_writes.write_owned` follows a move it sees, this catches the one it did not
    see), then they are embedded again under the new one (from the cache where it can). Moving a
    thread to its owner moves nothing and writes the vectors it lacks: run it again if
    it raised (with `resource_id` the new owner, if the storage had moved it). A move
    that another call (another process) overtakes, moving the thread on before this one
    wrote its vectors, returns what it moved: the vectors follow the last owner.

    Raises:
        InvalidInputError: the thread is not stored.
        OwnershipError: `resource_id` is given and the thread belongs to another one;
            or another call moved it between this one's read and its move (nothing moved).
        NotImplementedError: the storage cannot move threads.
    """
    check_id("thread_id", thread_id)
    check_new_id("to_resource", to_resource)
    if resource_id is not None:
        check_id("resource_id", resource_id)
    owner = yield steps.ThreadOwner(thread_id)
    if owner is None:
        raise InvalidInputError(f"thread {thread_id!r} is not stored: nothing to move")
    if resource_id is not None and owner != resource_id:
        done = owner == to_resource  # a move that raised after its storage moved the thread
        raise OwnershipError(
            f"thread {thread_id!r} does not belong to resource {resource_id!r}"
            + (
                f": it was moved to {to_resource!r} already; to finish a move that raised, "
                f"call move_thread again with resource_id={to_resource!r}"
                if done
                else ""
            )
        )
    info = yield from space.resolve()
    moved = 0
    try:
        if owner != to_resource:
            yield steps.DeleteVectors(info, thread_id=thread_id, resource_id=owner)
            moved = yield steps.MoveThread(thread_id, to_resource=to_resource, owner=owner)
            yield steps.ClearCaches()  # it holds recent texts under the old owner
            # Again: a turn indexed meanwhile may have written under the old owner after the
            # first delete, and read that owner before the storage move (so it did not follow).
            yield steps.DeleteVectors(info, thread_id=thread_id, resource_id=owner)
        scope = ScopeFilter(resource_id=to_resource, thread_id=thread_id)
        try:
            yield from reindex_op(
                space,
                scope=scope,
                missing_only=not moved,
                batch_size=256,
                progress=None,
                max_chars=max_chars,
                logger=logger,
            )
        except OwnershipError:
            # Another move (another process) took the thread on from `to_resource` after
            # ours: that move writes its vectors; ours is done.
            if (yield steps.ThreadOwner(thread_id)) == to_resource:
                raise
            logger.warning(
                "thread %r was moved on by another call while it moved to %r; its vectors "
                "follow its owner",
                thread_id,
                to_resource,
            )
    except Exception as failure:
        if not isinstance(failure, OwnershipError):
            failure.add_note(
                _unfinished_move(thread_id, to_resource, bool(moved) or owner == to_resource)
            )
        raise
    return moved


def _unfinished_move(thread_id: str, to_resource: str, in_storage: bool) -> str:
    """What a move that raised did, and what to do (a note on its error)."""
    if in_storage:
        done = (
            f"is {to_resource!r}'s in the storage, but not all of its vectors were written "
            f"under it: call move_thread again with resource_id={to_resource!r}"
        )
    else:
        done = "was not moved, but some of its vectors may be deleted: call move_thread again"
    return f"thread {thread_id!r} {done}, or reindex(missing_only=True)"


def restore_thread_op(thread_id: str) -> Op[bool]:
    """Lift a forget's retirement of `thread_id`; whether it was retired."""
    check_id("thread_id", thread_id)
    return bool((yield steps.UnretireThread(thread_id)))


# --- reindex and stats -----------------------------------------------------------------------


def reindex_op(
    space: VectorSpace,
    *,
    scope: ScopeFilter | None,
    missing_only: bool,
    batch_size: int,
    progress: Progress | None,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[int]:
    """Embed stored messages again into the index; returns the vectors written.

    As `index` does, only the first `max_chars` characters of a text are embedded.

    With `missing_only`, only messages without a vector are embedded, and those with
    metadata whose vectors lack it (written before 0.3, whose migration gave the stored
    messages their metadata: a filtered vector search passed them by). Either way the
    scope's vectors whose message is gone (a forget whose vector delete failed) are
    removed, and so are those of a message that gets none (edited to no text by a
    version that kept the old text's vectors): a full reindex repairs at least what the
    partial one does. A thread forgotten while this runs keeps no vector. Messages whose
    vectors an adoption left under no resource (`vector_writes.unowned_vectors`) are
    embedded again under their owner, and the stray copies deleted.

    Raises:
        OwnershipError: the scope names a thread of another resource than its own.
    """
    yield from _check_scope(scope)
    info = yield from space.resolve()
    have: set[str] = yield steps.VectorMessageIds(info, scope)
    unowned = yield from unowned_vectors(info, scope)
    stored_ids: set[str] = set()
    carried: list[tuple[str, str, str, MetadataValue]] = []  # (resource, id, first item)
    written = 0
    after: tuple[str, int] | None = None
    while page := (yield steps.ListMessages(scope, after=after, limit=batch_size)):
        after = (page[-1].thread_id, page[-1].seq)
        stored_ids.update(m.id for m in page)
        yield from _drop_unembeddable(info, page, have)
        strays = strays_of(page, unowned)
        todo = [
            m for m in _embeddable(page) if not missing_only or m.id not in have or m.id in strays
        ]
        if missing_only:  # the messages with metadata that have vectors: do these carry it?
            carried += _carried(page, have)
        if todo:
            rows = yield from embed_records(info, space, todo, max_chars=max_chars, logger=logger)
            yield from write_owned(info, rows, logger)  # each thread's follows a move
            written += len(todo) - (yield from _drop_forgotten(info, todo))
        if strays:  # written again under their owner (above): the copies nobody searches go
            yield steps.DeleteVectors(info, message_ids=sorted(strays), resource_id=NO_RESOURCE)
        if progress is not None:
            progress(len(page))
    for resource_id, ids in (yield from _without_metadata(info, carried, scope)).items():
        for start in range(0, len(ids), batch_size):
            windows = yield steps.ReadWindows(
                ids[start : start + batch_size], before=0, after=0, scope=ScopeFilter(resource_id)
            )
            todo = [window[0] for window in windows.values() if window]
            rows = yield from embed_records(info, space, todo, max_chars=max_chars, logger=logger)
            yield from write_owned(info, rows, logger)
            written += len(todo) - (yield from _drop_forgotten(info, todo))
    orphans = have - stored_ids
    if orphans:  # only the scope's own rows: another resource may hold a vector of that id
        yield steps.DeleteVectors(
            info,
            message_ids=sorted(orphans),
            resource_id=None if scope is None else scope.resource_id,
            thread_id=None if scope is None else scope.thread_id,
        )
    return written


def _drop_unembeddable(info: IndexInfo, page: Sequence[StoredMessage], have: Set[str]) -> Op[None]:
    """Delete the vectors of the page's messages that get none (each under its resource)."""
    stray: dict[str, list[str]] = {}
    for message in page:
        if message.id in have and skip_reason(message) is not None:
            stray.setdefault(message.resource_id, []).append(message.id)
    for resource_id, ids in sorted(stray.items()):
        yield steps.DeleteVectors(info, message_ids=ids, resource_id=resource_id)


def _carried(
    page: Sequence[StoredMessage], have: Set[str]
) -> list[tuple[str, str, str, MetadataValue]]:
    """The page's messages whose vectors may lack their metadata (`_without_metadata`).

    (resource, id, first metadata key, its value) of each embeddable message with
    metadata and a vector.
    """
    return [
        (m.resource_id, m.id, *m.metadata[0])
        for m in _embeddable(page)
        if m.metadata and m.id in have and m.resource_id != NO_RESOURCE
    ]


def _without_metadata(
    info: IndexInfo,
    carried: Sequence[tuple[str, str, str, MetadataValue]],
    scope: ScopeFilter | None,
) -> Op[dict[str, list[str]]]:
    """Resource -> its messages (of `carried`) whose vectors lack their metadata.

    `carried`: (resource, message id, first metadata key, its value) of messages with a
    vector in `scope` (the reads stay in its thread, if any). Per resource and
    key, the index says which vectors a filter on those values finds: one written with
    its message's metadata carries every key, one written before 0.3 none. A few reads
    per resource, not one per message or thread.
    """
    thread_id = None if scope is None else scope.thread_id
    groups: dict[tuple[str, str], list[tuple[str, MetadataValue]]] = {}
    for resource_id, message_id, key, value in carried:
        groups.setdefault((resource_id, key), []).append((message_id, value))
    lacking: dict[str, list[str]] = {}
    for (resource_id, key), members in groups.items():
        values = list({(type(v), v): v for _, v in members}.values())
        found: set[str] = set()
        for start in range(0, len(values), MAX_IN):
            condition = ((key, tuple(values[start : start + MAX_IN])),)
            found |= yield steps.VectorMessageIds(
                info, ScopeFilter(resource_id, thread_id, metadata=condition)
            )
        missed = [message_id for message_id, _ in members if message_id not in found]
        if missed:
            lacking.setdefault(resource_id, []).extend(missed)
    return lacking


def _check_scope(scope: ScopeFilter | None) -> Op[None]:
    """Refuse a scope whose thread belongs to another resource than the scope's."""
    if scope is not None and scope.thread_id is not None and scope.resource_id is not None:
        yield from owned_thread(scope.thread_id, scope.resource_id)


def _drop_forgotten(info: IndexInfo, written: Sequence[StoredMessage]) -> Op[int]:
    """Delete the vectors just written for threads forgotten meanwhile; returns how many.

    The forget may have deleted the thread's vectors before ours landed (as for index).
    """
    gone: set[str] = set()
    for thread_id in {m.thread_id for m in written}:
        if (yield steps.IsForgotten(thread_id)):
            gone.add(thread_id)
    ids = [m.id for m in written if m.thread_id in gone]
    if ids:
        yield steps.DeleteVectors(info, message_ids=ids)
    return len(ids)


def stats_op(
    space: VectorSpace, scope: ScopeFilter | None, relevance: RelevanceModel | None = None
) -> Op[RecallStats]:
    """Counts of messages, threads and vectors, and how many vectors are missing.

    Where messages carry metadata, whether their vectors carry it too: the few reads per
    resource and key that `reindex(missing_only=True)` makes (`_without_metadata`); none
    where no message carries metadata.

    Raises:
        OwnershipError: the scope names a thread of another resource than its own.
    """
    yield from _check_scope(scope)
    info = yield from space.resolve()
    have: set[str] = yield steps.VectorMessageIds(info, scope)
    unowned = yield from unowned_vectors(info, scope)
    return (yield from _counted(info, have, scope, relevance, unowned=unowned))


def read_stats_op(
    info: IndexInfo,
    have: Set[str],
    scope: ScopeFilter | None,
    relevance: RelevanceModel | None = None,
    *,
    carrying: Set[str],
    unowned: Set[str],
) -> Op[RecallStats]:
    """`stats_op` with the index and its message ids in `scope` read beforehand.

    For a reader that tells them without the vector index's client (`cli stats` reads
    an embedded store's from Chroma's file: `vectors.chroma_file`); the storage side is
    counted as `stats_op` counts it. `carrying`: the messages of `have` whose vectors
    carry message metadata (a vector written before 0.3 carries none); `unowned`: those
    with a vector under `NO_RESOURCE` in the scope's thread (`vector_writes.unowned_vectors`).

    Raises:
        OwnershipError: the scope names a thread of another resource than its own.
    """
    yield from _check_scope(scope)
    return (yield from _counted(info, have, scope, relevance, carrying, unowned=unowned))


def _counted(
    info: IndexInfo,
    have: Set[str],
    scope: ScopeFilter | None,
    relevance: RelevanceModel | None,
    carrying: Set[str] | None = None,
    *,
    unowned: Set[str],
) -> Op[RecallStats]:
    """The stored messages in `scope` counted against the message ids holding a vector.

    `carrying`: the message ids whose vectors carry metadata, when read beforehand; None
    asks the index, as `reindex` does. A message of a resource whose vector is under
    `NO_RESOURCE` (`unowned`: an adoption's strays) counts as missing: none of its
    owner's searches finds it.
    """
    messages = 0
    threads: set[str] = set()
    resources: set[str] = set()
    stored: set[str] = set()
    embeddable: set[str] = set()
    foreign = 0  # embeddable messages mostly in another script than the fit's (Latin)
    carried: list[tuple[str, str, str, MetadataValue]] = []
    strays: set[str] = set()
    after: tuple[str, int] | None = None
    while page := (yield steps.ListMessages(scope, after=after, limit=1000)):
        after = (page[-1].thread_id, page[-1].seq)
        messages += len(page)
        threads.update(m.thread_id for m in page)
        resources.update(m.resource_id for m in page)
        stored.update(m.id for m in page)
        if scope is None or scope.resource_id is None:  # `have` holds the strays too
            strays |= strays_of(page, unowned)
        for message in _embeddable(page):
            embeddable.add(message.id)
            foreign += relevance is not None and other_script(message.text)
        carried += [item for item in _carried(page, have) if item[1] not in strays]
    held = have - strays if strays else have
    if carrying is not None:
        lacking = sum(message_id not in carrying for _, message_id, _, _ in carried)
    else:
        lacking = sum(map(len, (yield from _without_metadata(info, carried, scope)).values()))
    return RecallStats(
        index_name=info.name,
        model=info.model,
        dimension=info.dimension,
        messages=messages,
        threads=len(threads),
        resources=len(resources),
        embeddable=len(embeddable),
        vectors=len(held & stored),
        missing_vectors=len(embeddable - held),
        orphan_vectors=len(have - stored),
        vectors_without_metadata=lacking,
        relevance=relevance_note(
            relevance, info.model, info.dimension, other_script=(foreign, len(embeddable))
        ),
    )
