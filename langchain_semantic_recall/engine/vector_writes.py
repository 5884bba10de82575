"""Vector rows made from stored messages, and writes a failure never leaves looking whole.

A message's text (up to `max_index_chars`) is chunked and embedded in one batched call
(`embed_records`). `index` stores messages first and reports a failed vector write;
`stats` and `reindex(missing_only=True)` find the messages without a vector. A write can
land in part, and a message of several chunks with one chunk written *has* a vector: it
would look whole to both, and the chunks not written would never be. So after a failed
write every chunk of such a message is deleted, and the repair sees it as missing
(`write_vectors`); where no `except` runs (the process killed), its own vector, written
last, is what is missing (`is_partial`). A turn's write also follows its thread to an
owner it got meanwhile (`write_owned`), and its text: a write that lands after another
write of the same message carrying a newer text is made again from the stored text
(`write_current`).
`unowned_vectors` finds the vectors an adopted thread left behind.
`Chunking` tells a message's vectors beyond the chunks its text yields. A text the
embedder answers with an unusable vector leaves its own message without one, reported by
id (`Embedded`), and the rest of the batch is written.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence, Set
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from langchain_semantic_recall.embeddings import Embedder, split_for_embedding
from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    VectorRecord,
    unembedded_reason,
)
from langchain_semantic_recall.vectors.base import chunk_id

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings


def over_cap(record: MessageRecord, max_chars: int | None) -> int:
    """Characters of the record's text past `max_chars` (stored, never embedded)."""
    return 0 if max_chars is None else max(0, len(record.text) - max_chars)


def pending_vectors(
    embeddings: Embeddings, records: Sequence[MessageRecord], max_chars: int | None = None
) -> list[VectorRecord]:
    """One vector record per chunk of each record, vector still empty (filled once embedded).

    Only the first `max_chars` characters of a text are chunked (None: all of them). The
    first chunk's id is the message id, later ones `<message_id>#<n>`.
    """
    return [
        VectorRecord(
            id=chunk_id(record.id, n),
            vector=[],
            message_id=record.id,
            thread_id=record.thread_id,
            resource_id=record.resource_id,
            role=record.role,
            content=piece,
            created_at=record.created_at,
            metadata=record.metadata,
        )
        for record in records
        for n, piece in enumerate(split_for_embedding(embeddings, record.text[:max_chars]))
    ]


@dataclass(frozen=True, slots=True)
class Chunking:
    """The vector ids a message's text yields: chunks of its first `max_chars` characters."""

    embeddings: Embedder
    max_chars: int | None

    def stray(self, message: StoredMessage, held: frozenset[str]) -> frozenset[str]:
        """Those of `held` (an embeddable message's vector ids) beyond its text's chunks.

        An edit to a shorter text in 0.3.0 or earlier left them (it kept the old text's
        later chunks): a search found the message by words it no longer holds. Only a message
        holding an id other than its own has its text split (the common case costs none).
        """
        if not held or (len(held) == 1 and message.id in held):
            return frozenset()
        pieces = split_for_embedding(self.embeddings, message.text[: self.max_chars])
        return held - {chunk_id(message.id, n) for n in range(len(pieces))}


def is_partial(message_id: str, held: frozenset[str] | None) -> bool:
    """Whether a message's vectors (`HeldVectors.chunked`) lack its own: a write cut short.

    `write_vectors` writes a message's own vector after its other chunks.
    """
    return held is not None and message_id not in held


@dataclass(frozen=True, slots=True)
class Embedded:
    """Records' vector rows (`embed_records`), and the messages left without any."""

    rows: list[VectorRecord]
    unusable: dict[str, str] = field(default_factory=dict)
    """Message id -> why it has no vector: the embedder answered its text, or one chunk
    of it, with an unusable vector (`embeddings.unusable_reason`: zeros, NaN, inf), or
    its text kept changing while it was written (`KEPT_CHANGING`, `write_current`)."""

    def note(self, among: Set[str] | None = None) -> str | None:
        """What a caller's result says of the messages left without a vector (None: none).

        Args:
            among: Only these messages are named (None: all of them).
        """
        named = {k: v for k, v in self.unusable.items() if among is None or k in among}
        if not named:
            return None
        listed = ", ".join(f"{message_id!r} ({why})" for message_id, why in named.items())
        return (
            f"{len(named)} message(s) stored without a vector: {listed}; "
            "reindex(missing_only=True) embeds them (an unusable vector's text once the "
            "embedder gives it a direction)"
        )


def embed_records(
    info: IndexInfo,
    space: VectorSpace,
    records: Sequence[MessageRecord | StoredMessage],
    *,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[Embedded]:
    """The records' vector rows, embedded in one batched call through the cache.

    A text longer than `max_chars` is embedded up to it only (logged: the message is
    stored whole, but words past the cap are found by keyword search alone).

    A text the embedder answers with an unusable vector (all zeros, NaN, infinite as
    float32: a bag-of-words model given "👍") costs its own message only: it gets no row
    (logged, and named in `Embedded.unusable`), nor is that vector cached; the others
    get theirs. A long message with one unusable chunk gets no row at all: its other
    chunks written, it would look whole to `stats` and to the repair while a part of its
    text is never found by meaning. A failure of the whole answer (the embedder raised,
    a short batch, another dimension) still raises.
    """
    for record in records:
        if over := over_cap(record, max_chars):
            logger.warning(
                "message %r (%s, thread %r) has %d characters; only the first %d are "
                "embedded (max_index_chars), the other %d are stored but not embedded",
                *(record.id, record.role, record.thread_id, len(record.text), max_chars, over),
            )
    pending = pending_vectors(space.embeddings, records, max_chars)
    got = yield steps.EmbedEach(info, [p.content for p in pending])
    unusable: dict[str, str] = {}
    for position, why in sorted(got.unusable.items()):
        unusable.setdefault(pending[position].message_id, why)
    for record in records:
        if record.id in unusable:
            logger.warning(
                "message %r (%s, thread %r) is stored without a vector: %s; "
                "reindex(missing_only=True) embeds it once the embedder gives it a direction",
                *(record.id, record.role, record.thread_id, unusable[record.id]),
            )
    rows = [
        replace(p, vector=v)
        for p, v in zip(pending, got.vectors, strict=True)
        if v is not None and p.message_id not in unusable
    ]
    return Embedded(rows, unusable)


def held_vectors(info: IndexInfo, records: Sequence[MessageRecord]) -> Op[set[str]]:
    """Ids of `records` (messages of one thread) whose vectors the index already holds.

    One read of the thread's vector ids: `index` and `bulk_index` embed an unchanged
    message again only when this leaves it out (its vectors were lost).
    """
    if not records:
        return set()
    first = records[0]
    scope = ScopeFilter(resource_id=first.resource_id, thread_id=first.thread_id)
    held: set[str] = yield steps.VectorMessageIds(info, scope)
    return held & {record.id for record in records}


def unowned_vectors(info: IndexInfo, scope: ScopeFilter | None) -> Op[set[str]]:
    """Ids of the messages with a vector under `NO_RESOURCE` (in `scope`'s thread, if any).

    A thread stored without a resource is adopted by the first write naming one: the
    storage gives it its owner, then its vectors are written again under the owner
    (`move_adopted_vectors`). A failure or an interruption in between leaves them under
    `NO_RESOURCE`, where no search of the owner's looks: those of messages stored under a
    resource now are strays, which `stats` counts as missing and `reindex` writes again.
    """
    if scope is not None and scope.resource_id == NO_RESOURCE:
        return set()
    thread_id = None if scope is None else scope.thread_id
    found: set[str] = yield steps.VectorMessageIds(info, ScopeFilter(NO_RESOURCE, thread_id))
    return found


def strays_of(messages: Sequence[StoredMessage], unowned: Set[str]) -> set[str]:
    """Ids of `messages` stored under a resource with a vector of `unowned` (pure)."""
    return {m.id for m in messages if m.id in unowned and m.resource_id != NO_RESOURCE}


def write_vectors(
    info: IndexInfo, rows: Sequence[VectorRecord], logger: logging.Logger, *, behind: bool = False
) -> Op[None]:
    """Upsert `rows`; if that fails, drop the long messages it may have written in part.

    Each message's own vector (its first chunk, under its id) goes last: a write cut
    short where nothing can drop (the process killed between two pieces of an async
    write) leaves a message without it, which `stats` and the repair see (`is_partial`).

    `behind`: the index may write them after the call (a turn's: `vectors.write_behind`,
    whose worker drops what a failed write left, and reports it to the next `index`).

    Raises:
        Exception: whatever the upsert raised (after the drop).
    """
    rows = sorted(rows, key=lambda row: row.id == row.message_id)  # stable: chunks first
    try:
        yield steps.UpsertVectors(info, rows, behind=behind)
    except Exception:
        yield from _drop_split(info, rows, logger)
        raise


def write_owned(
    info: IndexInfo, rows: Sequence[VectorRecord], logger: logging.Logger, *, behind: bool = False
) -> Op[None]:
    """Write `rows` in one upsert, then make each thread's follow a move made meanwhile.

    A `move_thread` (or an adoption) between the caller's read of a thread's owner and
    this write would leave its vectors under the old owner: the new one's search would
    not find them by meaning, and the old one's index would hold the thread's text. They
    are written again under the thread's owner now, or deleted if the thread is gone, as
    often as it moves meanwhile (several processes may move it in turn).
    """
    if not rows:
        return
    yield from write_vectors(info, rows, logger, behind=behind)
    groups: dict[tuple[str, str], list[VectorRecord]] = {}
    for row in rows:
        groups.setdefault((row.thread_id, row.resource_id), []).append(row)
    for (thread_id, resource_id), group in groups.items():
        yield from _follow_owner(info, group, thread_id, resource_id, logger)


TEXT_CHECKS = 3
"""Times `write_current` writes a message's vectors again while its text keeps changing."""
KEPT_CHANGING = "its text kept changing while it was embedded"
"""Why `write_current` left a message without a vector."""


def write_current(
    info: IndexInfo,
    space: VectorSpace,
    records: Sequence[MessageRecord | StoredMessage],
    *,
    max_chars: int | None,
    logger: logging.Logger,
    fresh: Set[str] = frozenset(),
    behind: bool = False,
) -> Op[Embedded]:
    """Embed `records` and write their rows (`write_owned`), for the text stored now.

    Two writes of one message (an edit beside another, an edit beside a `reindex` that
    read the old text) embed in parallel and land in either order: the later vector
    write wins, even when it carries the older text, and the message is then found by
    words it no longer holds (a redacted card number among them) while `stats` sees
    nothing amiss. So after writing, the messages are read again; one whose stored text
    is no longer the text embedded has its vectors written again from the stored text,
    up to `TEXT_CHECKS` times. One still changing after that is left without a vector
    (logged): missing, which `stats` counts and `reindex(missing_only=True)` repairs.
    Ids in `fresh` (random ids this call made) are not read again: no other writer
    knows them yet, so no other text can have been stored under them. `behind`: the first
    write may be made after the call (`write_vectors`).
    """
    vectors = yield from embed_records(info, space, records, max_chars=max_chars, logger=logger)
    yield from write_owned(info, vectors.rows, logger, behind=behind)
    rows, unusable = list(vectors.rows), dict(vectors.unusable)
    written = {row.message_id for row in vectors.rows}
    embedded = [r for r in records if r.id in written and r.id not in fresh]
    for check in range(TEXT_CHECKS + 1):
        try:
            changed = yield from _changed_since(embedded)
        except Exception:  # the vectors are written: a failed check is no failed write
            logger.warning(
                "could not read %d message(s) back after writing their vectors; an edit "
                "made meanwhile may have lost to them (reindex() writes them from the text)",
                len(embedded),
                exc_info=True,
            )
            break
        yield from drop_vectors(info, changed)  # all of them: a shorter text has fewer chunks
        # One turned into a message that gets no vector (a system message, no text) keeps
        # none: its text is never embedded.
        changed = [m for m in changed if unembedded_reason(m) is None]
        if not changed:
            break
        if check == TEXT_CHECKS:
            logger.warning(
                "the text of %d message(s) kept changing while it was embedded (%s): "
                "stored without a vector; reindex(missing_only=True) embeds them",
                len(changed),
                ", ".join(sorted(m.id for m in changed)),
            )
            unusable.update(dict.fromkeys((m.id for m in changed), KEPT_CHANGING))
            break
        logger.info("%d message(s) changed while embedded: written again", len(changed))
        again = yield from embed_records(info, space, changed, max_chars=max_chars, logger=logger)
        yield from write_owned(info, again.rows, logger)
        rows += again.rows
        unusable.update(again.unusable)
        embedded = [m for m in changed if m.id not in again.unusable]
    return Embedded(rows, unusable)


def drop_vectors(info: IndexInfo, messages: Sequence[MessageRecord | StoredMessage]) -> Op[None]:
    """Delete every vector of `messages`, each under its resource."""
    by_resource: dict[str, list[str]] = {}
    for message in messages:
        by_resource.setdefault(message.resource_id, []).append(message.id)
    for resource_id, ids in sorted(by_resource.items()):
        yield steps.DeleteVectors(info, message_ids=ids, resource_id=resource_id)


def _changed_since(
    records: Sequence[MessageRecord | StoredMessage],
) -> Op[list[StoredMessage]]:
    """The stored messages of `records` whose text or metadata are no longer the record's.

    One read per resource (a `reindex` page spans many threads), per thread for threads
    of no resource; a message whose thread moved meanwhile is not found there, and its
    vectors follow the move (`write_owned`).
    """
    given = {record.id: record for record in records}
    scopes: dict[ScopeFilter, list[str]] = {}
    for record in records:
        owned = record.resource_id != NO_RESOURCE
        scope = ScopeFilter(record.resource_id) if owned else ScopeFilter(None, record.thread_id)
        scopes.setdefault(scope, []).append(record.id)
    changed: list[StoredMessage] = []
    for scope, ids in scopes.items():
        stored = yield steps.ReadWindows(ids, before=0, after=0, scope=scope)
        for message, *_ in filter(None, stored.values()):
            record = given[message.id]
            if message.text != record.text or dict(message.metadata) != dict(record.metadata):
                changed.append(message)
    return changed


def _follow_owner(
    info: IndexInfo,
    rows: Sequence[VectorRecord],
    thread_id: str,
    written: str,
    logger: logging.Logger,
) -> Op[None]:
    """Until the owner read after a write is the one `rows` were written under, move them."""
    ids = sorted({row.message_id for row in rows})
    while (owner := (yield steps.ThreadOwner(thread_id))) != written:
        logger.warning(
            "thread %r changed owner while it was indexed; its vectors follow", thread_id
        )
        yield steps.DeleteVectors(info, message_ids=ids, resource_id=written)
        if owner is None:
            return
        yield from write_vectors(info, [replace(row, resource_id=owner) for row in rows], logger)
        written = owner


def _drop_split(info: IndexInfo, rows: Sequence[VectorRecord], logger: logging.Logger) -> Op[None]:
    """Delete every chunk of the messages of several chunks among `rows` (best effort)."""
    chunks = Counter(row.message_id for row in rows)
    split: defaultdict[str, set[str]] = defaultdict(set)  # resource id -> message ids
    for row in rows:
        if chunks[row.message_id] > 1:
            split[row.resource_id].add(row.message_id)
    for resource_id, ids in sorted(split.items()):
        try:
            yield steps.DeleteVectors(info, message_ids=sorted(ids), resource_id=resource_id)
        except Exception:
            logger.warning(
                "could not delete the vectors of %d long message(s) written in part (%s): "
                "reindex() without missing_only writes them whole",
                len(ids),
                ", ".join(sorted(ids)),
                exc_info=True,
            )


def move_adopted_vectors(
    info: IndexInfo,
    space: VectorSpace,
    thread_id: str,
    written: Sequence[MessageRecord],
    *,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[None]:
    """Write an adopted thread's earlier vectors again under its owner, drop the old ones."""
    yield steps.DeleteVectors(info, thread_id=thread_id, resource_id=NO_RESOURCE)
    skip = {r.id for r in written}
    after: tuple[str, int] | None = None
    scope = ScopeFilter(thread_id=thread_id)
    while page := (yield steps.ListMessages(scope, after=after, limit=256)):
        after = (page[-1].thread_id, page[-1].seq)
        todo = [m for m in page if m.id not in skip and unembedded_reason(m) is None]
        if todo:
            vectors = yield from embed_records(
                info, space, todo, max_chars=max_chars, logger=logger
            )
            yield from write_vectors(info, vectors.rows, logger)
