"""The input checks of `MessageStorage`: pure functions, no I/O.

The public storage methods run them once, before any backend sees the call, so every
backend refuses the same inputs with the same `InvalidInputError` and backends do
storage work only. Ids go through `check_id` (non-blank strings without NUL or lone
surrogates: an id one backend stores, all do).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeGuard

from langchain_semantic_recall.errors import (
    ForgottenThreadError,
    InvalidInputError,
    MessageIdTakenError,
    OwnershipError,
    ThreadOwnerError,
)
from langchain_semantic_recall.filters import METADATA_KEY, MetadataValue, check_metadata
from langchain_semantic_recall.records import ROLE_ORDER, MessageRecord, ScopeFilter, ThreadPlace
from langchain_semantic_recall.storable import check_id, check_ids, check_new_id


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_record(record: object) -> MessageRecord:
    """`record` with its `created_at` in UTC, if every field is usable.

    Raises:
        InvalidInputError: not a `MessageRecord`, an unusable id, an unknown role,
            non-string text or payload, or a `created_at` without a time zone.
    """
    if not isinstance(record, MessageRecord):
        raise InvalidInputError(
            f"storage writes MessageRecord objects, got {type(record).__name__}; build "
            "records with messages.build_records(...)"
        )
    check_new_id("message id", record.id)
    check_new_id("thread_id", record.thread_id)
    check_new_id("resource_id", record.resource_id)
    if record.role not in ROLE_ORDER:
        raise InvalidInputError(
            f"message {record.id!r}: role {record.role!r} is not one of {sorted(ROLE_ORDER)}"
        )
    for name in ("text", "payload"):
        if not isinstance(getattr(record, name), str):
            raise InvalidInputError(f"message {record.id!r}: its {name} must be a string")
    created_at = record.created_at
    if not isinstance(created_at, datetime) or created_at.utcoffset() is None:
        shown = created_at.isoformat() if isinstance(created_at, datetime) else repr(created_at)
        raise InvalidInputError(
            f"message {record.id!r}: created_at {shown} has no time zone; pass an aware "
            "UTC datetime such as datetime.now(UTC)"
        )
    if created_at.tzinfo is UTC:
        return record
    return replace(record, created_at=created_at.astimezone(UTC))


def checked_records(records: object) -> list[MessageRecord]:
    """The batch as a list of checked records (`checked_record`), in order."""
    if isinstance(records, str | bytes | MessageRecord) or not isinstance(records, Iterable):
        raise InvalidInputError(
            f"records must be a list of MessageRecord, got {type(records).__name__}"
        )
    return [checked_record(record) for record in records]


def checked_message_ids(message_ids: object) -> list[str]:
    """The ids, each checked, without repeats (first occurrence kept)."""
    if isinstance(message_ids, str | bytes) or not isinstance(message_ids, Iterable):
        raise InvalidInputError(
            f"message_ids must be a list of ids, got {type(message_ids).__name__}"
        )
    return list(dict.fromkeys(check_ids("message id", message_ids)))


_MAX_WINDOW = 2**31 - 1
"""Past any thread's length (a backend's integer columns overflow at 2**63: SQLite raised
`OverflowError` for a window of that size, held windows answered it)."""


def check_window(before: object, after: object) -> None:
    """Window sizes: integers from 0 to 2**31 - 1."""
    if not all(_is_int(size) and 0 <= size <= _MAX_WINDOW for size in (before, after)):
        raise InvalidInputError(
            f"window sizes must be integers from 0 to {_MAX_WINDOW:,}, got before={before!r} "
            f"after={after!r}"
        )


def check_limit(limit: object) -> None:
    """A page or result size: an integer >= 1."""
    if not (_is_int(limit) and limit >= 1):
        raise InvalidInputError(f"limit must be an integer >= 1, got {limit!r}")


def check_scope(scope: object, *, optional: bool = False) -> None:
    """A `ScopeFilter` with usable ids (or None where `optional`)."""
    if scope is None and optional:
        return
    if not isinstance(scope, ScopeFilter):
        wanted = "a ScopeFilter or None" if optional else "a ScopeFilter"
        raise InvalidInputError(
            f"scope must be {wanted}, got {type(scope).__name__}; e.g. "
            "ScopeFilter(resource_id='user-1')"
        )
    if scope.resource_id is not None:
        check_id("scope resource_id", scope.resource_id)
    if scope.thread_id is not None:
        check_id("scope thread_id", scope.thread_id)


def checked_after(after: object) -> tuple[str, int] | None:
    """A keyset cursor: None or the (thread_id, seq) of the last message of a page."""
    if after is None:
        return None
    if not isinstance(after, Sequence) or isinstance(after, str) or len(after) != 2:
        raise InvalidInputError(
            f"after must be None or a (thread_id, seq) pair, got {after!r}; pass the "
            "thread_id and seq of the last message of the previous page"
        )
    thread_id, seq = after
    if not _is_int(seq):
        raise InvalidInputError(f"after seq must be an integer, got {seq!r}")
    return check_id("after thread_id", thread_id), seq


def check_flag(name: str, value: object) -> None:
    """A boolean option."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")


def check_query(query: object) -> None:
    """A keyword query: a string (any text; an empty one finds nothing)."""
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {type(query).__name__}")


# --- the inputs of each public storage method -------------------------------------------


def windows_input(message_ids: object, before: object, after: object, scope: object) -> list[str]:
    """`get_windows`'s input: the ids, checked."""
    ids = checked_message_ids(message_ids)
    check_window(before, after)
    check_scope(scope)
    return ids


def page_input(scope: object, after: object, limit: object) -> tuple[str, int] | None:
    """`list_messages`'s input: the cursor, checked."""
    check_scope(scope, optional=True)
    check_limit(limit)
    return checked_after(after)


def last_input(scope: object, limit: object) -> ScopeFilter:
    """`last_messages`'s input: a scope naming one thread, and a limit >= 1."""
    check_scope(scope)
    check_limit(limit)
    if not isinstance(scope, ScopeFilter) or scope.thread_id is None:
        raise InvalidInputError(
            "last_messages reads one thread: give the scope a thread_id, e.g. "
            "ScopeFilter(resource_id='user-1', thread_id='chat-1')"
        )
    return scope


def keyword_input(query: object, scope: object, limit: object) -> None:
    """`keyword_search`'s input."""
    check_query(query)
    check_scope(scope)
    check_limit(limit)


def delete_thread_input(thread_id: object, retire: object, owner: object = None) -> None:
    """`delete_thread`'s input."""
    check_id("thread_id", thread_id)
    check_flag("retire", retire)
    if owner is not None:
        check_id("owner", owner)


def move_thread_input(thread_id: object, to_resource: object, owner: object = None) -> None:
    """`move_thread`'s input."""
    check_id("thread_id", thread_id)
    check_id("to_resource", to_resource)
    if owner is not None:
        check_id("owner", owner)


def reserve_input(places: object) -> list[ThreadPlace]:
    """`reserve_threads`' input: thread places with usable ids and a seq >= 0."""
    if not isinstance(places, Sequence) or isinstance(places, str):
        raise InvalidInputError(f"places must be a sequence of ThreadPlace, got {places!r}")
    for place in places:
        if not isinstance(place, ThreadPlace):
            raise InvalidInputError(f"expected a ThreadPlace, got {place!r}")
        check_id("thread_id", place.thread_id)
        check_id("resource_id", place.resource_id)
        if not _is_int(place.next_seq) or not 0 <= place.next_seq < 2**63:
            raise InvalidInputError(
                f"next_seq must be an int from 0 to 2**63 - 1, got {place.next_seq!r}"
            )
    return list(places)


def before_input(cutoff: object, scope: object) -> datetime:
    """The cutoff of `delete_before` in UTC, if it is an aware datetime and `scope` usable.

    Raises:
        InvalidInputError: a cutoff that is not a datetime or has no time zone.
    """
    check_scope(scope, optional=True)
    if not isinstance(cutoff, datetime) or cutoff.utcoffset() is None:
        raise InvalidInputError(
            f"cutoff must be an aware datetime (e.g. datetime.now(UTC) - timedelta(days=90)), "
            f"got {cutoff!r}"
        )
    return cutoff.astimezone(UTC)


def compact_refusal(storage: object) -> str:
    """Why `compact` is refused by a backend without `supports_compact`."""
    return (
        f"{type(storage).__name__} cannot erase the bytes of deleted messages; erase "
        "them with the backend's own tools (see docs/data-handling.md)"
    )


def count_input(scope: object, up_to: object) -> None:
    """Check `count`'s input: an optional scope, and `up_to` None or an int >= 1."""
    check_scope(scope, optional=True)
    if up_to is not None:
        check_limit(up_to)


def check_still_owned(thread_id: str, found: str | None, owner: str | None) -> None:
    """Every backend's check, inside its delete or move, that `owner` still holds a thread.

    `owner` is the owner the caller read (None: any); `found` the thread's owner now,
    read in the same transaction (None: not stored).

    Raises:
        OwnershipError: another call moved the thread since the caller read its owner.
    """
    if owner is not None and found is not None and found != owner:
        raise OwnershipError(
            f"thread {thread_id!r} no longer belongs to {owner!r} (another call moved it "
            "since this one read its owner); nothing was deleted or moved"
        )


def payload_metadata(payload: str, message_id: str) -> dict[str, MetadataValue]:
    """The metadata a stored message carries in its payload (`additional_kwargs["metadata"]`).

    What `messages.build_records` keeps as the message's metadata today; a message stored
    before the storages had a metadata column (SQLite schema 3, PostgreSQL schema 4)
    carries it in its payload alone, and their migrations copy it from here.

    Args:
        payload: The stored payload (`MessageRecord.dump`: `message_to_dict` as JSON).
        message_id: The message's id, for the error.

    Raises:
        InvalidInputError: the payload's metadata is not valid metadata
            (`filters.check_metadata`): today's `index` would refuse the message.
    """
    try:
        document = json.loads(payload)
    except ValueError:
        return {}
    data = document.get("data") if isinstance(document, dict) else None
    extra = data.get("additional_kwargs") if isinstance(data, dict) else None
    carried = extra.get(METADATA_KEY) if isinstance(extra, dict) else None
    return check_metadata(carried, f"message {message_id!r}: additional_kwargs['metadata']")


def payload_metadata_columns(
    rows: Iterable[tuple[str, str]],
) -> tuple[list[tuple[str, str]], list[str]]:
    """The metadata column (JSON text) of each `(id, payload)` row that carries metadata.

    The migrations' shared step (SQLite schema 3, PostgreSQL schema 4): returns the
    `(id, column text)` pairs to write, and the ids whose metadata today's `index` would
    refuse (they keep none; `refused_metadata_note` says so).
    """
    columns: list[tuple[str, str]] = []
    refused: list[str] = []
    for message_id, payload in rows:
        try:
            metadata = payload_metadata(payload, message_id)
        except InvalidInputError:
            refused.append(message_id)
            continue
        if metadata:
            columns.append(
                (message_id, json.dumps(dict(sorted(metadata.items())), ensure_ascii=False))
            )
    return columns, refused


def refused_metadata_note(refused: Sequence[str]) -> str:
    """What a migration tells of the messages whose payload metadata it could not keep."""
    return (
        f"{len(refused)} message(s) carry additional_kwargs['metadata'] that is not valid "
        f"metadata (docs/filtering.md); they keep none (first: {refused[0]!r})"
    )


# --- every backend's refusals of a write ---------------------------------------------


def thread_retired(thread_id: str) -> ForgottenThreadError:
    """Every backend's refusal of a write into a forgotten thread."""
    return ForgottenThreadError(
        f"thread {thread_id!r} was forgotten and its id is retired; start a new thread id"
    )


def thread_of_another(thread_id: str, resource_id: str) -> ThreadOwnerError:
    """Every backend's refusal of a write into a thread another resource owns.

    Raised only after every message id of the write was checked (`refuse_taken_ids`).
    """
    return ThreadOwnerError(
        f"thread {thread_id!r} belongs to another resource than {resource_id!r}; "
        "use a thread id of that resource"
    )


def refuse_taken_ids(
    records: Sequence[MessageRecord], place_of: Callable[[str], tuple[str, int] | None]
) -> None:
    """Every backend's first check of a write: no message id of it is another thread's.

    Args:
        records: The write.
        place_of: A stored message id's (thread id, seq), None when it is not stored.

    Raises:
        MessageIdTakenError: naming every such id (none is written).
    """
    taken = [r.id for r in records if (at := place_of(r.id)) is not None and at[0] != r.thread_id]
    if taken:
        threads = {r.thread_id for r in records}
        raise message_id_of_another(taken, threads.pop() if len(threads) == 1 else None)


def message_id_of_another(
    message_ids: str | Sequence[str], thread_id: str | None = None
) -> MessageIdTakenError:
    """Every backend's refusal of a write reusing message ids other threads hold.

    A backend names every such id of the write (`MessageIdTakenError.message_ids`), so a
    caller can set them aside in one go.
    """
    ids = (message_ids,) if isinstance(message_ids, str) else tuple(dict.fromkeys(message_ids))
    than = "" if thread_id is None else f" than {thread_id!r}"
    named = f"message id {ids[0]!r}" if len(ids) == 1 else f"message ids {list(ids)!r}"
    return MessageIdTakenError(
        f"{named} already belong{'s' if len(ids) == 1 else ''} to another thread{than}; "
        "message ids are unique across threads: to copy a conversation into a new thread, "
        "copy its messages without their ids (a model reply from LangChain's LLM cache keeps "
        "the id of its first use: store a copy with id=None)",
        ids,
    )
