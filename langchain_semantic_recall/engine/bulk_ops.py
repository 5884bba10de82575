"""Bulk import: many conversations stored and embedded in big batches, as steps.

It keeps `index`'s rules (the same records and ids, so importing again adds nothing;
system and tool messages stored but not embedded, recalled memory and `RemoveMessage`s
not stored; long messages chunked; forgotten threads skipped and reported) and says
what it did: messages new, updated (another text under a stored id) and unchanged, each
stored message keeping its creation time. An unchanged message is embedded again only
when its vectors are gone, so importing the same export twice costs one read per thread,
not its embedding. A message the embedder answers with an unusable vector (all zeros,
NaN, infinite) is stored without one and named in `BulkResult.unusable_vectors`; the
import goes on.
Batch *n*'s vectors are written in the background while batch *n + 1* is embedded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
from langchain_semantic_recall.engine.vector_writes import (
    embed_records,
    held_vectors,
    write_vectors,
)
from langchain_semantic_recall.errors import ForgottenThreadError, InvalidInputError
from langchain_semantic_recall.messages import (
    CREATED_AT_KEY,
    build_records,
    not_stored_reason,
    rewrites_vectors,
    skip_reason,
    stored_as_given,
    to_messages,
)
from langchain_semantic_recall.records import (
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    VectorRecord,
)

Conversation = tuple[str, str, Sequence[BaseMessage]]
"""`(thread_id, resource_id, messages)`: one thread of one resource, in order."""


@dataclass(slots=True)
class BulkResult:
    """What a bulk import did."""

    stored: int = 0
    """Messages new to the storage (their ids were not stored before)."""
    updated: int = 0
    """Messages stored before under their id with another role, text, metadata or
    content: written again (keeping their creation time unless they carry one)."""
    unchanged: int = 0
    """Messages stored before exactly as given: not written again, nor embedded again
    unless the index has no vector of theirs (a vector lost to a failure is repaired)."""
    repeated: int = 0
    """Messages skipped because a later message of their conversation has the same id
    (the last is kept, as `index` does)."""
    embedded: int = 0
    """Messages whose vectors were written (new, updated, or unchanged without vectors)."""
    forgotten_threads: list[str] = field(default_factory=list)
    """Threads skipped because they were forgotten (their ids are retired)."""
    not_stored: dict[str, int] = field(default_factory=dict)
    """Messages given but not stored, counted by reason (`not_stored_reason`: a
    `RemoveMessage`, recalled memory, a message type the storage does not keep)."""
    not_embedded: dict[str, int] = field(default_factory=dict)
    """Messages stored without a vector, counted by reason (`IndexResult.skipped`'s
    reasons: system and tool messages, tool calls only, no text, an unusable vector)."""
    unusable_vectors: dict[str, str] = field(default_factory=dict)
    """Messages stored without a vector because the embedder answered their text with
    an unusable one (all zeros, NaN, infinite): message id -> why (each also counted in
    `not_embedded`, and logged). The import goes on; `stats().missing_vectors` counts
    them and `reindex(missing_only=True)` embeds them again."""


_Batch = list[tuple[str, list[MessageRecord]]]
_Carried = set[str]
"""Ids of a batch's messages that carry their own creation time (`created_at`)."""
_Unembedded = dict[str, str]
"""Id -> why a batch's message gets no vector (`skip_reason`)."""


def as_conversations(conversations: object) -> Iterator[Conversation]:
    """Each of `conversations` as a `(thread_id, resource_id, messages)` triple.

    Checked one by one as the import reads them: a dict (or any other three-item
    iterable, such as a three-letter string) would otherwise unpack into junk ids.

    Raises:
        InvalidInputError: `conversations` is not an iterable of triples.
    """
    if isinstance(conversations, str | bytes | Mapping) or not isinstance(conversations, Iterable):
        raise InvalidInputError(
            "bulk_index takes an iterable of (thread_id, resource_id, messages) triples, "
            f"got {type(conversations).__name__}"
        )
    for position, conversation in enumerate(conversations):
        if not isinstance(conversation, tuple | list) or len(conversation) != 3:
            raise InvalidInputError(
                f"conversation {position} must be a (thread_id, resource_id, messages) "
                f"triple, got {type(conversation).__name__}: pass a list of triples, e.g. "
                "[('chat-1', 'alice', messages)]"
            )
        thread_id, resource_id, messages = conversation
        yield thread_id, resource_id, messages


def _batches(
    conversations: Iterable[Conversation], size: int, result: BulkResult
) -> Iterable[tuple[_Batch, _Carried, _Unembedded]]:
    """Records of whole conversations, grouped into batches of about `size` messages.

    Of the messages of one conversation that share an id, only the last is kept (counted
    in `result.repeated`), as `index` keeps it. Messages not stored are counted in
    `result.not_stored`.
    """
    batch: _Batch = []
    carried: _Carried = set()
    unembedded: _Unembedded = {}
    count = 0
    now = datetime.now(UTC)
    for thread_id, resource_id, messages in conversations:
        items = to_messages(messages)
        records = build_records(items, thread_id=thread_id, resource_id=resource_id, now=now)
        kept = []  # as build_records keeps them
        for message in items:
            if (reason := not_stored_reason(message)) is None:
                kept.append(message)
            else:
                result.not_stored[reason] = result.not_stored.get(reason, 0) + 1
        for record, message in zip(records, kept, strict=True):
            if _carries_time(message):
                carried.add(record.id)
            if (reason := skip_reason(record, message)) is not None:
                unembedded[record.id] = reason
        last = {r.id: n for n, r in enumerate(records)}
        result.repeated += len(records) - len(last)
        records = [r for n, r in enumerate(records) if last[r.id] == n]
        batch.append((thread_id, records))
        count += len(records)
        if count >= size:
            yield batch, carried, unembedded
            batch, carried, unembedded, count = [], set(), {}, 0
    if batch:
        yield batch, carried, unembedded


def _carries_time(message: BaseMessage) -> bool:
    return message.additional_kwargs.get(CREATED_AT_KEY) is not None


def _stored_before(batch: _Batch) -> Op[dict[str, StoredMessage]]:
    """The batch's messages stored already, by id (one read per resource)."""
    by_resource: dict[str, list[str]] = {}
    for _, records in batch:
        for record in records:
            by_resource.setdefault(record.resource_id, []).append(record.id)
    known: dict[str, StoredMessage] = {}
    for resource_id, ids in by_resource.items():
        scope = ScopeFilter(resource_id=resource_id)
        windows = yield steps.ReadWindows(ids, before=0, after=0, scope=scope)
        known.update({i: window[0] for i, window in windows.items() if window})
    return known


def _settle_batch(
    batch: _Batch, known: Mapping[str, StoredMessage], carried: _Carried
) -> tuple[_Batch, _Batch, dict[str, bool]]:
    """What to write, what is stored exactly as given, and the edits (pure).

    The edits map each edited id to whether its old vectors go before its new ones are
    written (`rewrites_vectors`).

    An edit keeps its stored creation time unless it carries one; a message stored as
    given is not written again. As for `index` (`_settle_known`), a message stored in
    another thread or under another resource is left to the write, which refuses it.
    """
    write: _Batch = []
    same: _Batch = []
    edits: dict[str, bool] = {}
    for thread_id, records in batch:
        to_write, as_stored = [], []
        for record in records:
            before = known.get(record.id)
            if before is None or (before.thread_id, before.resource_id) != (
                record.thread_id,
                record.resource_id,
            ):
                to_write.append(record)
            elif stored_as_given(before, record):
                as_stored.append(record)
            else:
                edits[record.id] = rewrites_vectors(before, record)
                kept_time = record.id in carried
                to_write.append(
                    record if kept_time else replace(record, created_at=before.created_at)
                )
        write.append((thread_id, to_write))
        same.append((thread_id, as_stored))
    return write, same, edits


def _store_batch(
    info: IndexInfo,
    batch: _Batch,
    carried: _Carried,
    result: BulkResult,
    logger: logging.Logger,
) -> Op[tuple[_Batch, _Batch, dict[str, list[str]]]]:
    """Store a batch in one transaction (thread by thread if one was forgotten).

    Returns the records of the threads kept (written, or stored already as they are), of
    those the records stored before exactly as given, and the edits written whose old
    vectors must go (resource id -> message ids). Those are deleted before the write
    too: if that fails, nothing of the batch is written, and importing it again redoes
    the edits (stored first, an edit whose old vectors stayed would look unchanged).
    """
    known = yield from _stored_before(batch)
    write, same, edits = _settle_batch(batch, known, carried)
    stale: dict[str, list[str]] = {}
    for record in (r for _, records in write for r in records if edits.get(r.id)):
        stale.setdefault(record.resource_id, []).append(record.id)
    for resource_id, ids in sorted(stale.items()):
        yield steps.DeleteVectors(info, message_ids=sorted(ids), resource_id=resource_id)
    rows: list[StoredMessage] = []
    try:
        rows = yield steps.PutMessages([r for _, records in write for r in records])
        kept = batch
    except ForgottenThreadError:
        kept = []
        for (thread_id, records), (_, to_write) in zip(batch, write, strict=True):
            try:
                rows += yield steps.PutMessages(to_write)
            except ForgottenThreadError:
                logger.warning("thread %r was forgotten; not imported again", thread_id)
                result.forgotten_threads.append(thread_id)
                continue
            kept.append((thread_id, records))
    kept_threads = {thread_id for thread_id, _ in kept}
    same = [(thread_id, records) for thread_id, records in same if thread_id in kept_threads]
    result.unchanged += sum(len(records) for _, records in same)
    rewritten: dict[str, list[str]] = {}
    for row in rows:  # stored meanwhile by another writer: as index counts it, unchanged
        if row.created:
            result.stored += 1
        elif row.id in edits:
            result.updated += 1
            if edits[row.id]:
                rewritten.setdefault(row.resource_id, []).append(row.id)
        else:
            result.unchanged += 1
    return kept, same, rewritten


def _write_and_recheck(
    info: IndexInfo,
    rows: Sequence[VectorRecord],
    rewritten: Mapping[str, Sequence[str]],
    logger: logging.Logger,
) -> Op[None]:
    """Upsert, then drop the vectors of any thread forgotten meanwhile (as `index` does).

    The edits' old vectors (`rewritten`: resource id -> message ids) are deleted first,
    and the caches keyed by text emptied.
    """
    for resource_id, ids in sorted(rewritten.items()):
        yield steps.DeleteVectors(info, message_ids=sorted(ids), resource_id=resource_id)
    if rewritten:
        yield steps.ClearCaches()  # they hold the old text, as after a forget
    yield from write_vectors(info, rows, logger)
    owners = {row.thread_id: row.resource_id for row in rows}
    for thread_id, resource_id in owners.items():
        if (yield steps.IsForgotten(thread_id)):
            yield steps.DeleteVectors(info, thread_id=thread_id, resource_id=resource_id)


def bulk_index_op(
    space: VectorSpace,
    conversations: Iterable[Conversation],
    *,
    batch_size: int,
    progress: steps.Progress | None,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[BulkResult]:
    """Store and embed many conversations.

    Batch *n*'s vectors are written in the background while batch *n + 1* is embedded.
    An error is raised with a note on what was stored before it, and what to do.
    """
    info = yield from space.resolve()
    result = BulkResult()
    try:
        for batch, carried, unembedded in _batches(conversations, batch_size, result):
            kept, same, rewritten = yield from _store_batch(info, batch, carried, result, logger)
            if progress is not None:
                progress(sum(len(records) for _, records in batch))
            held: set[str] = set()  # of the messages stored as given (a read a thread)
            for _, records in same:
                held |= yield from held_vectors(info, records)
            to_embed = []
            for record in (r for _, records in kept for r in records):
                if (reason := unembedded.get(record.id)) is not None:
                    result.not_embedded[reason] = result.not_embedded.get(reason, 0) + 1
                elif record.id not in held:  # an unchanged message whose vectors are held: done
                    to_embed.append(record)
            vectors = yield from embed_records(
                info, space, to_embed, max_chars=max_chars, logger=logger
            )
            yield steps.Background(
                steps.Nested(_write_and_recheck(info, vectors.rows, rewritten, logger))
            )
            result.embedded += len(to_embed) - len(vectors.unusable)
            for message_id, reason in vectors.unusable.items():
                result.unusable_vectors[message_id] = reason
                result.not_embedded[reason] = result.not_embedded.get(reason, 0) + 1
        yield steps.Settle()
    except Exception as failure:
        if written := result.stored + result.updated:
            failure.add_note(
                f"this import stored {written} message(s) before it failed, the last ones "
                "perhaps without vectors: once the cause is fixed (a conversation it "
                "refused: fix it or leave it out), run the same import again: it stores "
                "nothing twice and embeds what has no vector"
            )
        raise
    return result
