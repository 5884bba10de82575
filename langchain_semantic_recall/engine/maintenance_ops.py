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
    Chunking,
    drop_vectors,
    is_partial,
    strays_of,
    unowned_vectors,
    write_current,
)
from langchain_semantic_recall.errors import InvalidInputError, OwnershipError
from langchain_semantic_recall.options import DEFAULT_MAX_INDEX_CHARS
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    HeldVectors,
    ScopeFilter,
    StoredMessage,
    check_owner,
    unembedded_reason,
)
from langchain_semantic_recall.relevance.features import other_script
from langchain_semantic_recall.relevance.model import RelevanceModel, relevance_note
from langchain_semantic_recall.storable import id_text


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
    stray_vectors: int = 0
    """Vectors of a message beyond the chunks its text yields now (left by an edit to a
    shorter text in 0.3.0 or earlier, which kept the old text's later chunks): a search
    finds the message by words it no longer holds (repair with `reindex(missing_only=True)`,
    or a full `reindex()`)."""
    relevance: str = ""
    """Whether hybrid search's relevance model was fitted for this embedder (`relevance`)."""


def maintenance_scope(resource_id: str | None, thread_id: str | None) -> ScopeFilter | None:
    """The scope of a maintenance call; None (everything) when neither id is given."""
    if resource_id is None and thread_id is None:
        return None
    if resource_id is not None:
        resource_id = id_text("resource_id", resource_id)
    if thread_id is not None:
        thread_id = id_text("thread_id", thread_id)
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
    return [m for m in page if unembedded_reason(m) is None]


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
    thread_id = id_text("thread_id", thread_id)
    to_resource = check_owner("to_resource", id_text("to_resource", to_resource))
    if resource_id is not None:
        resource_id = id_text("resource_id", resource_id)
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
    return bool((yield steps.UnretireThread(id_text("thread_id", thread_id))))


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

    With `missing_only`, only the messages that need it are embedded: those without a
    vector; those with metadata whose vectors carry none (written before 0.3, whose
    migration gave the stored messages their metadata: a filtered vector search passed
    them by); those with vectors beyond the chunks their text yields now (left by an
    edit to a shorter text in 0.3.0 or earlier: a search found the message by words it
    no longer holds), whose vectors are all deleted before their new ones are written;
    and those whose vectors an adoption left under no resource
    (`vector_writes.unowned_vectors`), embedded again under their owner and the stray
    copies deleted. Either way the scope's vectors whose message is gone (a forget whose
    vector delete failed) are removed, and so are those of a message that gets none
    (edited to no text by a version that kept the old text's vectors): a full reindex
    repairs at least what the partial one does. A thread forgotten while this runs keeps
    no vector. A message the embedder answers with an unusable vector (all zeros, NaN,
    infinite) is logged by id and left without one (not counted; `stats` still counts
    it missing); the others are written.

    Raises:
        OwnershipError: the scope names a thread of another resource than its own.
    """
    yield from _check_scope(scope)
    info = yield from space.resolve(quiet=True)
    held: HeldVectors = yield steps.VectorIds(info, scope)
    if scope is None and held.messages and not (yield from _holds_any(held.messages)):
        # Every vector of the index is of a message this store does not hold: another
        # store's index on a shared vector server (a staging database beside
        # production's Chroma, a store opened without its index_name), whose vectors this
        # repair deleted, all of them, after writing its own beside them (two audits). A
        # resource's or thread's own leftovers may be all it holds: those still go.
        logger.warning(
            "none of the %d vector(s) of the vector index %r is of a message this storage "
            "holds: nothing written or deleted, as they may be another store's (two stores "
            "on one vector server, docs/scale.md; a store opened without its index_name); "
            "if they are this store's (a forget whose vector delete failed), call that "
            "forget again",
            *(len(held.messages), info.name),
        )
        return 0
    unowned = yield from unowned_vectors(info, scope)
    chunking = Chunking(space.embeddings, max_chars)
    stored_ids: set[str] = set()
    written = 0
    after: tuple[str, int] | None = None
    while page := (yield steps.ListMessages(scope, after=after, limit=batch_size)):
        after = (page[-1].thread_id, page[-1].seq)
        stored_ids.update(m.id for m in page)
        embeddable = _embeddable(page)
        stray = {m.id for m in embeddable if _stray(held, chunking, m)}
        # Vectors of a message that gets none now, and all of one that has too many (its
        # new ones are written below): an upsert would leave those beyond its chunks.
        unwanted = {
            m.id for m in page if m.id in held.messages and unembedded_reason(m) is not None
        }
        yield from drop_vectors(info, [m for m in page if m.id in stray | unwanted])
        adopted = strays_of(page, unowned)  # vectors left under no resource
        todo = [
            m
            for m in embeddable
            if not missing_only
            or m.id in stray
            or m.id in adopted
            or m.id not in held.messages
            or _lacks(held, m)
            or is_partial(m.id, held.chunked.get(m.id))
        ]
        if todo:
            # A message of an unusable vector is logged and left out (still missing); each
            # thread's vectors follow a move, and each message's the text stored after.
            vectors = yield from write_current(
                info, space, todo, max_chars=max_chars, logger=logger
            )
            # A vector the embedder no longer gives (logged as none): not kept from before.
            old = [m for m in todo if m.id in vectors.unusable and m.id in held.messages]
            yield from drop_vectors(info, old)
            done = [m for m in todo if m.id not in vectors.unusable]
            written += len(done) - (yield from _drop_forgotten(info, done))
        if adopted:  # written again under their owner (above): the copies nobody searches go
            yield steps.DeleteVectors(info, message_ids=sorted(adopted), resource_id=NO_RESOURCE)
        if progress is not None:
            progress(len(page))
    orphans = held.messages - stored_ids
    if orphans:  # only the scope's own rows: another resource may hold a vector of that id
        yield steps.DeleteVectors(
            info,
            message_ids=sorted(orphans),
            resource_id=None if scope is None else scope.resource_id,
            thread_id=None if scope is None else scope.thread_id,
        )
    return written


def _holds_any(ids: Set[str]) -> Op[bool]:
    """Whether the storage holds a message of `ids` (the first page, mostly)."""
    after: tuple[str, int] | None = None
    while page := (yield steps.ListMessages(None, after=after, limit=_HOLDS_PAGE)):
        if any(message.id in ids for message in page):
            return True
        after = (page[-1].thread_id, page[-1].seq)
    return False


_HOLDS_PAGE = 1000


def _stray(held: HeldVectors, chunking: Chunking, message: StoredMessage) -> frozenset[str]:
    """The message's vectors beyond the chunks its text yields now (`Chunking.stray`)."""
    chunks = held.chunked.get(message.id)  # one vector of its own id: none beyond
    return frozenset() if chunks is None else chunking.stray(message, chunks)


def _lacks(held: HeldVectors, message: StoredMessage) -> bool:
    """Whether the message has metadata and vectors that carry none (written before 0.3)."""
    found = message.id in held.messages
    return found and bool(message.metadata) and message.id not in held.carrying


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
    space: VectorSpace,
    scope: ScopeFilter | None,
    relevance: RelevanceModel | None = None,
    *,
    max_chars: int | None = DEFAULT_MAX_INDEX_CHARS,
) -> Op[RecallStats]:
    """Counts of messages, threads and vectors, and how many vectors are missing.

    One read of the index (`VectorIndex.vector_ids`: each message's vector ids, and
    which carry message metadata) against the stored messages; a message's text is
    split (`max_chars`, as `index` embeds it) only where it holds more than one vector.

    Raises:
        OwnershipError: the scope names a thread of another resource than its own.
    """
    yield from _check_scope(scope)
    info = yield from space.resolve(quiet=True)  # it counts what the index lacks
    held: HeldVectors = yield steps.VectorIds(info, scope)
    unowned = yield from unowned_vectors(info, scope)
    chunking = Chunking(space.embeddings, max_chars)
    return (yield from _counted(info, held, scope, relevance, chunking, unowned=unowned))


def read_stats_op(
    info: IndexInfo,
    held: HeldVectors,
    scope: ScopeFilter | None,
    relevance: RelevanceModel | None = None,
    *,
    chunking: Chunking,
    unowned: Set[str],
) -> Op[RecallStats]:
    """`stats_op` with the index and its vectors in `scope` read beforehand.

    For a reader that tells them without the vector index's client (`cli stats` reads
    an embedded store's from Chroma's file: `vectors.chroma_file`); the storage side is
    counted as `stats_op` counts it. `unowned`: the messages with a vector under
    `NO_RESOURCE` in the scope's thread (`vector_writes.unowned_vectors`).

    Raises:
        OwnershipError: the scope names a thread of another resource than its own.
    """
    yield from _check_scope(scope)
    return (yield from _counted(info, held, scope, relevance, chunking, unowned=unowned))


def _counted(
    info: IndexInfo,
    held: HeldVectors,
    scope: ScopeFilter | None,
    relevance: RelevanceModel | None,
    chunking: Chunking,
    *,
    unowned: Set[str],
) -> Op[RecallStats]:
    """The stored messages in `scope` counted against the vectors the index holds.

    A message of a resource whose vector is under `NO_RESOURCE` (`unowned`: an
    adoption's strays) counts as missing: none of its owner's searches finds it.
    """
    have, carrying, chunked = held.messages, held.carrying, held.chunked
    messages = lacking = stray = 0
    threads: set[str] = set()
    resources: set[str] = set()
    stored: set[str] = set()
    embeddable: set[str] = set()
    foreign = 0  # embeddable messages mostly in another script than the fit's (Latin)
    strays: set[str] = set()  # and the messages written in part (`is_partial`)
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
            if message.metadata and message.id in have and message.id not in carrying:
                lacking += 1  # (`_lacks`, inline: 100,000 messages a call)
            if message.id in chunked:
                stray += len(chunking.stray(message, chunked[message.id]))
                if is_partial(message.id, chunked[message.id]):
                    strays.add(message.id)  # counted missing: the repair writes it whole
    owned = have - strays if strays else have
    return RecallStats(
        index_name=info.name,
        model=info.model,
        dimension=info.dimension,
        messages=messages,
        threads=len(threads),
        resources=len(resources),
        embeddable=len(embeddable),
        vectors=len(owned & stored),
        missing_vectors=len(embeddable - owned),
        orphan_vectors=len(have - stored),
        vectors_without_metadata=lacking,
        stray_vectors=stray,
        relevance=relevance_note(
            relevance, info.model, info.dimension, other_script=(foreign, len(embeddable))
        ),
    )
