"""The text every backend keeps, one rule for ids, metadata values and payloads.

No NUL (PostgreSQL refuses it in text) and no lone surrogate (the unencodable half of a
pair: no UTF-8 store holds one). Pure functions that import only `errors`, so the lowest
modules (`filters`, `messages`, the storages) share them without loading LangChain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from langchain_semantic_recall.errors import InvalidInputError

__all__ = [
    "MAX_ID_BYTES",
    "check_id",
    "check_ids",
    "check_message_id",
    "check_new_id",
    "encodable",
    "storable",
]


MAX_ID_BYTES = 1024
"""Longest id a write takes, in UTF-8 bytes: PostgreSQL indexes a thread's resource and
thread ids in one B-tree entry, which holds at most 2,704 bytes."""


def encodable(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> bool:
    """Whether every backend keeps `text` as it is: no NUL, no lone surrogate."""
    return "\x00" not in text and encodable(text)


def check_id(name: str, value: object) -> str:
    """`value` if it is a usable id: a non-blank string every backend can store.

    Lone surrogates (text no UTF-8 store can hold) and NUL characters (refused by
    PostgreSQL) are rejected here, so an id that works on one backend works on all.

    Raises:
        InvalidInputError: not a string, blank, or holding one of those characters.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
    if not storable(value):
        raise InvalidInputError(
            f"{name} {value!r} contains a NUL character or a lone surrogate, which storage "
            "backends cannot hold; use ids of ordinary text"
        )
    return value


def id_text(name: str, value: object) -> str:
    """`check_id` of `value`, an int taken as its text, as every write takes it.

    So an app that writes with `thread_id=5` can count, move and forget with it too.

    Raises:
        InvalidInputError: as `check_id`.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return check_id(name, value)


def check_new_id(name: str, value: object) -> str:
    """`value` if it is a usable id to write: `check_id`, and at most `MAX_ID_BYTES` long.

    Longer ids once stored on SQLite and in memory but not on PostgreSQL (a `StorageError`
    about the server's index row size). Only writes are held to it: an id stored before
    this check stays readable, searchable and forgettable.

    Raises:
        InvalidInputError: as `check_id`, or longer than `MAX_ID_BYTES` in UTF-8.
    """
    text = check_id(name, value)
    if len(text) * 4 > MAX_ID_BYTES and (size := len(text.encode("utf-8"))) > MAX_ID_BYTES:
        raise InvalidInputError(
            f"{name} {text[:40]!r}... is {size:,} bytes in UTF-8; ids are at most "
            f"{MAX_ID_BYTES:,} (every backend indexes them): use a shorter id, or a hash "
            "of this one"
        )
    return text


_CHUNK_SUFFIX = re.compile(r"#[1-9][0-9]*")


def check_message_id(value: object, name: str = "message id") -> str:
    """`value` if it is a usable id for a new message: `check_new_id`, and no chunk's name.

    A message's later chunks are stored as `<id>#<n>` (`vectors.rows.chunk_id`), so a
    message called `m#1` would be the vector of chunk 1 of message `m`: writing one
    overwrote the other, in the resource's own index or, in an index shared by resources,
    another resource's. Such ids are refused where messages come in; one stored before
    this check stays readable and forgettable.

    Raises:
        InvalidInputError: as `check_new_id`, or the id ends in `#` and a number above 0.
    """
    message_id = check_new_id(name, value)
    head, mark, tail = message_id.rpartition("#")
    if mark and head and _CHUNK_SUFFIX.fullmatch(mark + tail):
        raise InvalidInputError(
            f"{name} {message_id!r} ends like the vector of chunk {tail} of message "
            f"{head!r} ('<id>#<n>'), which would overwrite it; use another id (such as "
            f"{head + '-' + tail!r})"
        )
    return message_id


def check_ids(name: str, values: Iterable[object]) -> list[str]:
    """`values` as a list if every one is a usable id (`check_id`), in order.

    Checked at once (a thousand ids in ~0.1 ms, one by one ~0.2): the text of them all
    has no NUL and encodes. Otherwise each is checked, and the first unusable one raises.

    Raises:
        InvalidInputError: as `check_id`, for the first unusable id.
    """
    ids = list(values)
    texts = [i for i in ids if isinstance(i, str) and i.strip()]
    if len(texts) == len(ids) and storable("".join(texts)):
        return texts
    return [check_id(name, i) for i in ids]
