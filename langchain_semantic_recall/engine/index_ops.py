"""Index (one turn), written once as a generator of steps (bulk import: `bulk_ops`).

Every message is written to storage first (all roles); user and assistant text is then
chunked, embedded in one batched call through the shared cache and upserted. A failure
after the storage write is logged and reported, never raised: the messages are kept and
`reindex(missing_only=True)` makes the vectors whole again. A text the embedder answers
with an unusable vector (all zeros, NaN, infinite) costs its own message only: its fate
says why it has no vector, `error` names it, the others' vectors are written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from langchain_core.messages import BaseMessage

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.identity import Identity, IdentityKeys
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import IndexInfo, VectorSpace
from langchain_semantic_recall.engine.vector_writes import (
    held_vectors,
    move_adopted_vectors,
    over_cap,
    write_current,
)
from langchain_semantic_recall.errors import (
    EmbeddingMismatchError,
    ForgottenThreadError,
    ThreadOwnerError,
)
from langchain_semantic_recall.filters import MetadataValue
from langchain_semantic_recall.messages import (
    CREATED_AT_KEY,
    is_recalled,
    is_removal,
    not_stored_reason,
    record_for,
    rewrites_vectors,
    skip_reason,
    stored_as_given,
    to_messages,
)
from langchain_semantic_recall.options import Scope
from langchain_semantic_recall.records import (
    NO_RESOURCE,
    REPEATED_ID,
    IndexResult,
    MessageFate,
    MessageRecord,
    ScopeFilter,
    StoredMessage,
    check_owner,
)
from langchain_semantic_recall.storable import check_id

FORGOTTEN = "thread forgotten"
READ_ONLY = "read-only engine"
NOT_EDITED = "not updated: the vectors of its stored text could not be deleted; index it again"


# --- one turn ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Turn:
    """The records of one `index` call and the fate of each input message."""

    thread_id: str
    fates: list[MessageFate]
    records: dict[int, MessageRecord] = field(default_factory=dict)
    """Input position -> record, for the messages to write."""
    carried_time: set[int] = field(default_factory=set)
    """Positions of the messages that carry their own creation time."""
    fresh_ids: set[int] = field(default_factory=set)
    """Positions of the messages given a new random id here: none can be stored yet."""

    unchanged: dict[int, MessageRecord] = field(default_factory=dict)
    """Input position -> record, for messages stored before exactly as they are."""
    rewritten: set[str] = field(default_factory=set)
    """Ids of the edits whose old vectors go before their new ones (`rewrites_vectors`)."""
    error: str | None = None
    """A failure already met (reported in the result, whatever comes after)."""

    def to_write(self) -> list[MessageRecord]:
        return list(self.records.values())

    def to_embed(self) -> list[MessageRecord]:
        """New and changed messages with text, and unchanged ones too.

        An unchanged message's vector may have been lost to a failure: those the index
        holds are left out later (`_without_vectors`), so indexing again is a repair.
        """
        both = [*self.records.values(), *self.unchanged.values()]
        return [r for r in both if skip_reason(r) is None]

    def result(
        self,
        *,
        embedded: Sequence[str] = (),
        error: str | None = None,
        forgotten: bool = False,
        max_chars: int | None = None,
        unusable: Mapping[str, str] | None = None,
    ) -> IndexResult:
        """The call's result; `unusable`: why a message has no vector (`Embedded.unusable`)."""
        done = set(embedded)
        over = {r.id: over_cap(r, max_chars) for r in self.to_embed()} if done else {}
        unusable = unusable or {}
        fates = tuple(
            replace(
                f,
                embedded=f.message_id in done,
                truncated_chars=over.get(f.message_id, 0) if f.message_id in done else 0,
                reason=unusable.get(f.message_id or "", f.reason),
            )
            if f.fate != "skipped"
            else f
            for f in self.fates
        )
        last = {f.message_id: f for f in fates if f.message_id}  # a repeated id: the kept one
        return IndexResult(
            stored=tuple(r.id for r in self.records.values()) if not forgotten else (),
            embedded=tuple(embedded),
            skipped={i: f.reason for i, f in last.items() if f.reason},
            error=error or self.error,
            fates=fates,
            forgotten=forgotten,
        )

    def keep_stored(self, ids: set[str], reason: str) -> None:
        """Leave the messages of `ids` as they are stored: not written, skipped for `reason`."""
        for position, record in list(self.records.items()):
            if record.id in ids:
                del self.records[position]
                self.fates[position] = MessageFate(position, record.id, "skipped", reason)
        self.rewritten -= ids

    def refuse_all(self, reason: str) -> IndexResult:
        self.fates = [
            f if f.fate == "skipped" else MessageFate(f.position, f.message_id, "skipped", reason)
            for f in self.fates
        ]
        self.records, self.unchanged = {}, {}
        return self.result(forgotten=reason == FORGOTTEN)


def plan_turn(
    messages: Sequence[BaseMessage],
    thread_id: str,
    resource_id: str,
    now: datetime,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> _Turn:
    """Records for the messages the storage keeps and a fate for each message (pure)."""
    turn = _Turn(thread_id=thread_id, fates=[])
    last_of: dict[str, int] = {}
    for position, message in enumerate(messages):
        reason = not_stored_reason(message)
        if reason is not None:
            turn.fates.append(MessageFate(position, message.id, "skipped", reason))
            continue
        record = record_for(
            message,
            position=position,
            thread_id=thread_id,
            resource_id=resource_id,
            now=now,
            fresh_id=True,
            metadata=metadata,
        )
        if (earlier := last_of.get(record.id)) is not None:  # the last of equal ids wins
            del turn.records[earlier]
            turn.fates[earlier] = MessageFate(earlier, record.id, "skipped", REPEATED_ID)
        last_of[record.id] = position
        turn.records[position] = record
        if CREATED_AT_KEY in message.additional_kwargs:
            turn.carried_time.add(position)
        elif not message.id:
            turn.fresh_ids.add(position)  # `record_for`'s uuid4, with `fresh_id`
        turn.fates.append(MessageFate(position, record.id, "stored", skip_reason(record, message)))
    return turn


def _warn_of_unexpected_skips(
    items: Sequence[BaseMessage], turn: _Turn, logger: logging.Logger
) -> None:
    """Log the messages not stored for a reason a caller may not expect.

    The chat history, the graph's store node and the middleware return no fates, so a
    `ChatMessage` of an unknown role, another type, or a repeated id would otherwise be
    dropped without a word. Recalled memory and `RemoveMessage`s are never stored, by
    design, and are not logged.
    """
    for fate in turn.fates:
        message = items[fate.position]
        if fate.fate == "skipped" and not (is_recalled(message) or is_removal(message)):
            logger.warning(
                "message %d (id %r) of thread %r was not stored: %s",
                *(fate.position, fate.message_id, turn.thread_id, fate.reason),
            )


def _settle_known(turn: _Turn, known: dict[str, tuple[StoredMessage, ...]]) -> None:
    """Mark messages stored before: unchanged ones are not written again (pure).

    The fate's `reason` keeps saying why a message gets no vector (a system message...).
    A message stored under another resource (or none) is left to the write, which checks
    the thread's owner: "unchanged" would skip that check, tell the caller what another
    resource's message says, and write its vector again under the caller's resource.
    """
    for position, record in list(turn.records.items()):
        window = known.get(record.id)
        if not window or window[0].resource_id != record.resource_id:
            continue
        before = window[0]
        if stored_as_given(before, record):
            turn.unchanged[position] = turn.records.pop(position)
            turn.fates[position] = replace(turn.fates[position], fate="unchanged")
        else:  # new content, same message: it keeps its time unless it carries one
            if position not in turn.carried_time:
                turn.records[position] = replace(record, created_at=before.created_at)
            turn.fates[position] = replace(turn.fates[position], fate="updated")
            if rewrites_vectors(before, record):
                turn.rewritten.add(record.id)


def _settle_written(turn: _Turn, written: Sequence[StoredMessage]) -> None:
    """A "stored" message the storage did not insert was stored meanwhile (pure).

    Another process (or call) wrote the same id between our read and our write: the
    storage's insert result, not the earlier read, says which call stored it first.
    """
    for position, stored in zip(list(turn.records), written, strict=True):
        if turn.fates[position].fate == "stored" and not stored.created:
            turn.unchanged[position] = turn.records.pop(position)
            turn.fates[position] = replace(turn.fates[position], fate="unchanged")


def index_op(
    space: VectorSpace,
    keys: IdentityKeys,
    messages: Sequence[BaseMessage],
    identity: Identity,
    *,
    scope: Scope,
    read_only: bool,
    max_chars: int | None,
    logger: logging.Logger,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> Op[IndexResult]:
    """Store a turn's messages and embed their user and assistant text.

    `metadata` (checked, `filters.check_metadata`) is kept on every message of the
    turn, under each message's own `additional_kwargs["metadata"]`.

    Only the first `max_chars` characters of a text are embedded; a message's fate
    gives the characters left out (`truncated_chars`).

    Raises:
        MissingIdentityError: no thread id; or no resource id in resource scope.
        OwnershipError: the thread (or a message id) belongs to another owner.
        StorageError: the storage could not be written (nothing was stored).
    """
    items = to_messages(messages)
    thread_id = identity.require_thread(keys, "index")
    resource_id = yield from _writer(identity, keys, scope, thread_id)

    def attempt(writer: str) -> Op[IndexResult]:
        return _index_as(
            space, items, thread_id, writer, metadata,
            read_only=read_only, max_chars=max_chars, logger=logger,
        )  # fmt: skip

    try:
        return (yield from attempt(resource_id))
    except ThreadOwnerError:
        if identity.resource_id is not None or resource_id != NO_RESOURCE:
            raise
        # A write naming no resource, to a thread a write naming one adopted since its
        # owner was read: stored under the adopter, as it is a moment later (an audit:
        # 15-47 of 200 such writes refused, told to use another thread id).
        owner = yield steps.ThreadOwner(thread_id)
        if owner in (None, NO_RESOURCE):
            raise
        return (yield from attempt(owner))


def _index_as(
    space: VectorSpace,
    items: Sequence[BaseMessage],
    thread_id: str,
    resource_id: str,
    metadata: Mapping[str, MetadataValue] | None,
    *,
    read_only: bool,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[IndexResult]:
    """`index_op` for a known writer (`resource_id`)."""
    turn = plan_turn(items, thread_id, resource_id, datetime.now(UTC), metadata)
    _warn_of_unexpected_skips(items, turn, logger)
    if read_only:
        return turn.refuse_all(READ_ONLY)
    if not turn.records:
        return turn.result()
    ids = [r.id for position, r in turn.records.items() if position not in turn.fresh_ids]
    try:  # which are stored already: only to skip unchanged ones and report their fate
        known = (
            (
                yield steps.ReadWindows(
                    ids, before=0, after=0, scope=ScopeFilter(thread_id=thread_id)
                )
            )
            if ids
            else {}
        )
    except Exception:
        logger.warning("could not read which messages are stored; writing all", exc_info=True)
        known = {}
    _settle_known(turn, known)
    yield from _drop_edited_first(space, turn, resource_id, logger)
    adopted = False
    try:
        if turn.records:
            adopted, written = yield from _put_adopting(turn.to_write(), thread_id, resource_id)
            space.note_stored(sum(row.created for row in written))
            _settle_written(turn, written)
    except ForgottenThreadError:
        logger.warning("thread %r was forgotten; nothing of this call was stored", thread_id)
        return turn.refuse_all(FORGOTTEN)
    to_embed = turn.to_embed()
    rewritten = sorted(turn.rewritten & {r.id for r in turn.to_write()})
    if not to_embed and not adopted and not rewritten:  # (a history sent again, unchanged)
        return turn.result(error=(yield from _told(turn, resource_id)))
    try:
        info = yield from space.resolve()
        yield from _drop_old_text(info, rewritten, resource_id)
        to_embed = yield from _vectors_to_write(
            info, space, turn, to_embed, adopted=adopted, max_chars=max_chars, logger=logger
        )
        if not to_embed and not adopted:  # (each held its vectors already)
            return turn.result(error=(yield from _told(turn, resource_id)))
        fresh = {r.id for position, r in turn.records.items() if position in turn.fresh_ids}
        vectors = yield from write_current(  # a turn's vectors: written behind if small
            info, space, to_embed, max_chars=max_chars, logger=logger, fresh=fresh, behind=True
        )
        if (yield steps.IsForgotten(thread_id)):  # forgotten while we embedded
            embedded = [r.id for r in to_embed]
            yield steps.DeleteVectors(info, message_ids=embedded, resource_id=resource_id)
            logger.warning("thread %r was forgotten while it was indexed", thread_id)
            return turn.refuse_all(FORGOTTEN)
    except EmbeddingMismatchError as error:
        stored = len(turn.to_write())
        if stored:  # the caller sees a failed turn: it must know what the storage holds
            error.add_note(
                f"{stored} message(s) of this call were stored without vectors; "
                "stats() counts them, reindex(missing_only=True) embeds them with this index's "
                "model"
            )
        raise
    except Exception as error:
        logger.warning(
            "indexing vectors failed; %d message(s) stored without vectors "
            "(repair with reindex(missing_only=True))",
            len(to_embed),
            exc_info=True,
        )
        return turn.result(error=repr(error))
    # Each such message's fate says why; `error` names those this call wrote (an
    # unchanged one, sent again by a loop keeping its history, was named when written).
    # Vectors written after an earlier `index` returned that failed: said once, here.
    unusable = vectors.unusable
    this_call = {r.id for r in turn.to_write()}
    return turn.result(
        embedded=[r.id for r in to_embed if r.id not in unusable],
        max_chars=max_chars,
        unusable=unusable,
        error=(yield from _told(turn, resource_id, vectors.note(this_call))),
    )


def _told(turn: _Turn, resource_id: str, *notes: str | None) -> Op[str | None]:
    """The call's `error`: the turn's, `notes`, its resource's failed writes behind."""
    late = yield steps.WriteFailures(resource_id)
    return "; ".join(e for e in (turn.error, *notes, *late) if e) or None


def _vectors_to_write(
    info: IndexInfo,
    space: VectorSpace,
    turn: _Turn,
    to_embed: list[MessageRecord],
    *,
    adopted: bool,
    max_chars: int | None,
    logger: logging.Logger,
) -> Op[list[MessageRecord]]:
    """The turn's messages to embed now.

    A thread just adopted by a resource has its earlier vectors written again under it
    (`vector_writes.move_adopted_vectors`). Otherwise the unchanged messages whose vectors
    the index holds are left out: a loop that sends its whole history each turn would
    write every earlier vector again on every turn (and embed it again after a restart).
    An unchanged message without vectors (lost to a failure) is still embedded: a repair.
    """
    if adopted:
        thread_id = turn.thread_id
        yield from move_adopted_vectors(
            info, space, thread_id, to_embed, max_chars=max_chars, logger=logger
        )
        return to_embed
    unchanged = {r.id for r in turn.unchanged.values()}
    held = yield from held_vectors(info, [r for r in to_embed if r.id in unchanged])
    return [r for r in to_embed if r.id not in held]


def _drop_edited_first(
    space: VectorSpace, turn: _Turn, resource_id: str, logger: logging.Logger
) -> Op[None]:
    """Delete the old vectors of the turn's edits before their new text is stored.

    If the vector index fails, those edits are not stored (their fate says why, and the
    result's error): stored, their old text's vectors would stay with nothing to tell, as
    the message would look unchanged to a retry, to `stats` and to the repair. The
    vectors are deleted again after the write (`_drop_old_text`), in case a `reindex`
    wrote the old text's back in between.
    """
    if not turn.rewritten:
        return
    try:
        info = yield from space.resolve()
        yield steps.DeleteVectors(info, message_ids=sorted(turn.rewritten), resource_id=resource_id)
    except EmbeddingMismatchError:
        raise
    except Exception as error:
        logger.warning(
            "could not delete the old vectors of %d edited message(s); they keep their "
            "stored text (index them again)",
            len(turn.rewritten),
            exc_info=True,
        )
        turn.keep_stored(set(turn.rewritten), NOT_EDITED)
        turn.error = repr(error)


def _drop_old_text(info: IndexInfo, rewritten: Sequence[str], resource_id: str) -> Op[None]:
    """Delete the vectors of edits whose new text would not overwrite them all.

    A long text's later chunks, or every chunk when the new text gets no vector
    (`messages.rewrites_vectors`): left, they kept the old text searchable and on disk.
    The caches keyed by text are emptied too.
    """
    if rewritten:
        yield steps.DeleteVectors(info, message_ids=rewritten, resource_id=resource_id)
        yield steps.ClearCaches()  # they hold the old text, as after a forget


def _writer(identity: Identity, keys: IdentityKeys, scope: Scope, thread_id: str) -> Op[str]:
    """The resource an `index` call stores for.

    Raises:
        MissingIdentityError: no resource id in resource scope.
        InvalidInputError: the resource id is the mark of threads without one.
    """
    if identity.resource_id is not None:
        return check_owner("resource_id", identity.resource_id)
    if scope == "resource":
        identity.require_resource(keys, "index")
    # Thread scope without users: the thread's owner, or none yet (`NO_RESOURCE`,
    # until a write that names a resource adopts the thread).
    owner = (yield steps.ThreadOwner(thread_id)) or NO_RESOURCE
    return check_id("resource_id", owner)


def _put_adopting(
    records: Sequence[MessageRecord], thread_id: str, resource_id: str
) -> Op[tuple[bool, list[StoredMessage]]]:
    """Store the records; a thread stored without a resource is first adopted by this one.

    Returns whether the thread was adopted, and the stored rows (each says whether this
    write inserted it).

    Only a refusal of the thread itself adopts it (the backends check every message id
    first): a write that reuses another thread's message id changes no owner.

    Raises:
        OwnershipError: the thread (or a message id) belongs to another owner.
    """
    try:
        return False, (yield steps.PutMessages(records))
    except ThreadOwnerError:
        if resource_id == NO_RESOURCE or (yield steps.ThreadOwner(thread_id)) != NO_RESOURCE:
            raise
    yield steps.AdoptThread(thread_id, resource_id)
    return True, (yield steps.PutMessages(records))
