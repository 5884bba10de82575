"""The records that flow between the engine and its backends (plain, immutable data)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from langchain_semantic_recall.errors import InvalidInputError
from langchain_semantic_recall.filters import (
    MetadataCondition,
    MetadataValue,
    matches_metadata,
)
from langchain_semantic_recall.quoting import has_text
from langchain_semantic_recall.storable import check_new_id

if TYPE_CHECKING:  # loaded to (de)serialise a payload: the CLI's `threads` never needs it
    from langchain_core.messages import BaseMessage

TITLE_KEY = "conversation_title"
"""`additional_kwargs` key a message may carry to name its conversation (its label in
memory blocks; set by `ingest` from a ChatGPT export's titles)."""

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
MetadataItems: TypeAlias = tuple[tuple[str, MetadataValue], ...]
"""Message metadata as sorted (key, value) pairs (hashable; `dict(...)` gives a mapping)."""
ROLE_ORDER: dict[str, int] = {"system": 0, "user": 1, "assistant": 2, "tool": 3}

NO_RESOURCE = "(no resource)"
"""The owner recorded for a thread first written without a resource (thread scope).

Reserved: never accepted as a caller's resource id. The first write that names a
resource gives such a thread that owner (`MessageStorage.adopt_thread`).
"""


def check_owner(name: str, value: object) -> str:
    """`value` if a write may store messages for it: `check_new_id`, and not `NO_RESOURCE`.

    The mark is the owner of threads stored without a resource, which the next write that
    names a resource adopts: written on purpose, it would plant messages in another
    resource's thread.

    Raises:
        InvalidInputError: as `check_new_id`, or the mark.
    """
    owner = check_new_id(name, value)
    if owner == NO_RESOURCE:
        raise InvalidInputError(
            f"{name} {NO_RESOURCE!r} is the mark of threads stored without a resource, which "
            "the next write naming a resource adopts: store for a real resource id, or give "
            "none (thread scope)"
        )
    return owner


_TOKEN_COUNTS = ("input_tokens", "output_tokens", "total_tokens")


def load_message(data: Any) -> BaseMessage:
    """A LangChain message from the form `message_to_dict` gives it.

    On a cache hit, LangChain's LLM cache copies `"total_cost": 0` into the reply's
    `usage_metadata` without validating it, so a reply that had no usage comes back with
    `{"total_cost": 0}`: a message LangChain itself then refuses to load, which broke the
    session (`chat_history`) and the export holding it. Usage without the token counts
    `UsageMetadata` requires is left out on reading; the message is as it was otherwise.

    Args:
        data: `message_to_dict`'s form of a message (`{"type": ..., "data": {...}}`).

    Raises:
        ValueError: `data` is not a message (a pydantic `ValidationError` among them).
        KeyError: `data` lacks `type` or `data`.
    """
    from langchain_core.messages import messages_from_dict
    from pydantic import ValidationError

    try:
        return messages_from_dict([data])[0]
    except ValidationError:
        if not isinstance(data, dict) or not isinstance(inner := data.get("data"), dict):
            raise
        usage = inner.get("usage_metadata")
        if not isinstance(usage, dict) or all(key in usage for key in _TOKEN_COUNTS):
            raise
        kept = {key: value for key, value in inner.items() if key != "usage_metadata"}
        return messages_from_dict([{**data, "data": kept}])[0]


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One message as written to storage (the storage assigns its sequence number)."""

    id: str
    thread_id: str
    resource_id: str
    role: Role
    text: str
    """Plain text of the message (list content joined with newlines); empty if none."""
    created_at: datetime
    """Timezone-aware UTC creation time."""
    payload: str
    """The full LangChain message, serialised with `message_to_dict` as JSON."""
    metadata: MetadataItems = field(default=(), kw_only=True)
    """The message's metadata (`filters`), as sorted (key, value) pairs."""

    def to_message(self) -> BaseMessage:
        """The LangChain message, of the same type it was stored as (`load_message`)."""
        return load_message(json.loads(self.payload))

    @staticmethod
    def dump(message: BaseMessage) -> str:
        """`message` serialised as `payload` holds it (`message_to_dict` as JSON).

        Args:
            message: The LangChain message to store.
        """
        from langchain_core.messages import message_to_dict

        return json.dumps(message_to_dict(message), ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True)
class StoredMessage(MessageRecord):
    """A message read back from storage, with its per-thread sequence number."""

    seq: int = 0
    """Position in its thread (stable order; assigned on first write, never changed)."""
    created: bool = field(default=False, compare=False)
    """In what `put` returns: whether that put inserted the id (False: it was stored
    already, perhaps by another process a moment before). False on reads."""


_READ_FIELDS = (
    *("id", "thread_id", "resource_id", "role", "text", "created_at", "payload", "metadata"),
    *("seq", "created"),
)
if tuple(f.name for f in fields(StoredMessage)) != _READ_FIELDS:  # pragma: no cover
    raise TypeError("StoredMessage's fields changed: update `read_message` to set them all")
(
    _set_id,
    _set_thread,
    _set_resource,
    _set_role,
    _set_text,
    _set_created_at,
    _set_payload,
    _set_metadata,
    _set_seq,
    _set_created,
) = (getattr(StoredMessage, name).__set__ for name in _READ_FIELDS)


def read_message(  # noqa: PLR0917 - one argument per column read
    id: str,
    thread_id: str,
    resource_id: str,
    role: Role,
    text: str,
    created_at: datetime,
    payload: str,
    seq: int,
    metadata: MetadataItems = (),
) -> StoredMessage:
    """`StoredMessage(...)` as a read builds it, the same message at half the cost.

    A frozen dataclass's `__init__` sets each field through `object.__setattr__` (~1.3 µs
    a message); a search reads ~300 messages, so this sets the slots directly (~0.6 µs).
    `StoredMessage` has no `__post_init__` to skip; `created` is False, as on every read.
    """
    message: StoredMessage = object.__new__(StoredMessage)
    _set_id(message, id)
    _set_thread(message, thread_id)
    _set_resource(message, resource_id)
    _set_role(message, role)
    _set_text(message, text)
    _set_created_at(message, created_at)
    _set_payload(message, payload)
    _set_metadata(message, metadata)
    _set_seq(message, seq)
    _set_created(message, False)
    return message


@dataclass(frozen=True, slots=True)
class ScopeFilter:
    """Which messages a search may see. Every backend enforces it on every read.

    `thread_id` set: only that thread (thread scope). Otherwise `resource_id`: every
    thread of that resource (resource scope). `resource_id` may also be set in thread
    scope, narrowing further.

    `metadata`, `since` and `until` narrow it again (docs/filtering.md): every message
    a read returns passes them (a window's neighbours too), counts and pages count only
    those, and vector searches return only those. They never widen it: the ids decide
    whose messages these are (`filters.RESERVED_KEYS` keeps a filter off them).
    """

    resource_id: str | None = None
    thread_id: str | None = None
    metadata: tuple[MetadataCondition, ...] = ()
    """Metadata conditions (`filters.metadata_conditions`): every one must hold."""
    since: datetime | None = None
    """Only messages created at or after this (aware) time."""
    until: datetime | None = None
    """Only messages created before this (aware) time."""

    def __post_init__(self) -> None:
        if self.resource_id is None and self.thread_id is None:
            raise ValueError("a scope needs a thread_id or a resource_id")
        for bound in (self.since, self.until):
            if bound is not None and bound.utcoffset() is None:
                raise ValueError("a scope's since/until must be aware datetimes")

    @property
    def narrowed(self) -> bool:
        """Whether a metadata filter or a time range narrows the scope."""
        return bool(self.metadata) or self.since is not None or self.until is not None

    def admits(self, resource_id: str, thread_id: str) -> bool:
        """Whether a message of this resource and thread is inside the scope's ids.

        The filter (`matches`) is checked apart, by the backends that hold it.

        Args:
            resource_id: The message's resource.
            thread_id: The message's thread.
        """
        if self.thread_id is not None and thread_id != self.thread_id:
            return False
        return self.resource_id is None or resource_id == self.resource_id

    def matches(self, metadata: MetadataItems | dict[str, object], created_at: datetime) -> bool:
        """Whether a message with this metadata and creation time passes the filter.

        Args:
            metadata: The message's metadata (its items, or a dict).
            created_at: When the message was created (timezone-aware).
        """
        if self.since is not None and created_at < self.since:
            return False
        if self.until is not None and created_at >= self.until:
            return False
        if not self.metadata:
            return True
        return matches_metadata(dict(metadata), self.metadata)

    def admits_message(self, message: MessageRecord | VectorRecord) -> bool:
        """Whether a stored message (or vector) is inside the scope, filter included.

        Args:
            message: A stored message, or a vector record.
        """
        return self.admits(message.resource_id, message.thread_id) and self.matches(
            message.metadata, message.created_at
        )

    def ids_only(self) -> ScopeFilter:
        """The scope without its filter (the thread and resource alone)."""
        return ScopeFilter(resource_id=self.resource_id, thread_id=self.thread_id)

    def as_where(self) -> dict[str, str]:
        """The scope as an equality metadata filter (one or two keys)."""
        where: dict[str, str] = {}
        if self.resource_id is not None:
            where["resource_id"] = self.resource_id
        if self.thread_id is not None:
            where["thread_id"] = self.thread_id
        return where


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A summary of one thread."""

    thread_id: str
    resource_id: str
    message_count: int
    first_at: datetime | None
    last_at: datetime | None
    next_seq: int | None = None
    """The seq the thread's next new message gets (None: the backend does not say)."""


@dataclass(frozen=True, slots=True)
class ThreadPlace:
    """A thread a copy keeps (`MessageStorage.reserve_threads`): its owner and numbering.

    A thread emptied by retention keeps its owner this way, and one whose oldest messages
    retention deleted keeps its numbers: seqs are never renumbered nor reused.
    """

    thread_id: str
    resource_id: str
    next_seq: int = 0
    """The least seq the thread's next new message gets (a higher one stays)."""


@dataclass(frozen=True, slots=True)
class DeletedMessage:
    """A message `MessageStorage.delete_before` deleted: where it was, for the vector index."""

    id: str
    thread_id: str
    resource_id: str


Deleted: TypeAlias = list[DeletedMessage]
"""What `MessageStorage.delete_before` returns."""


@dataclass(frozen=True, slots=True)
class VectorRecord:
    """One vector: a message, or one chunk of a long message (id `<message_id>#<n>`)."""

    id: str
    vector: list[float]
    message_id: str
    thread_id: str
    resource_id: str
    role: Role
    content: str
    created_at: datetime
    metadata: MetadataItems = field(default=(), kw_only=True)
    """Its message's metadata (`MessageRecord.metadata`)."""


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A vector search result: cosine similarity, negatives clipped to 0, so in [0, 1]."""

    id: str
    message_id: str
    thread_id: str
    resource_id: str
    score: float


@dataclass(frozen=True, slots=True)
class HeldVectors:
    """The vectors an index holds inside a scope, by message (`VectorIndex.vector_ids`).

    Most messages hold one vector, whose id is their own: `chunked` lists the others.
    """

    messages: frozenset[str] = frozenset()
    """The messages holding at least one vector."""
    carrying: frozenset[str] = frozenset()
    """The messages with a vector that carries message metadata (a `meta_<key>` on the
    row): one written before 0.3 carries none, and a filtered search passes it by."""
    chunked: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The vector ids of each message holding any other vector than one with its own id
    (a long text's chunks: `<message_id>`, `<message_id>#<n>`...)."""

    def ids(self, message_id: str) -> frozenset[str]:
        """The ids of a message's vectors (none if it holds no vector).

        Args:
            message_id: The message.
        """
        chunks = self.chunked.get(message_id)
        if chunks is not None:
            return chunks
        return frozenset((message_id,)) if message_id in self.messages else frozenset()

    def by_message(self) -> dict[str, frozenset[str]]:
        """Message id -> the ids of its vectors."""
        return {message_id: self.ids(message_id) for message_id in self.messages}


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One search result: the matching message, its score and its context window."""

    message: StoredMessage
    score: float
    window: tuple[StoredMessage, ...] = field(default=())
    """The hit with its neighbours, in thread order (always includes the hit)."""

    @property
    def thread_id(self) -> str:
        """The thread of the hit."""
        return self.message.thread_id


Fate: TypeAlias = Literal["stored", "updated", "unchanged", "skipped"]
"""What became of one message handed to `index`:

- `"stored"`: a new message, written (and embedded if it has user or assistant text);
- `"updated"`: its id was stored with other content, now replaced (keeps its place);
- `"unchanged"`: the same message (same id and content) was already stored: nothing
  written or embedded again (unless the index lost its vectors: then they are written);
- `"skipped"`: not written; `reason` says why (recalled memory, not a message type
  the storage keeps, a read-only engine, a forgotten thread, repeated later in the call).
"""


REPEATED_ID = "the same id appears later in this call"
"""Why a message was not stored: a later message of the same call has its id (it wins)."""


@dataclass(frozen=True, slots=True)
class MessageFate:
    """The fate of one input message of an `index` call."""

    position: int
    """Its position in the input."""
    message_id: str | None
    """Its id (the one given, or the one assigned to a message that had none)."""
    fate: Fate
    reason: str | None = None
    """Why it was skipped, or why a stored message got no vector (e.g. "system message",
    or the embedder's vector of its text was unusable: `embeddings.UNUSABLE_ZERO`)."""
    embedded: bool = False
    """Whether this call embedded it and wrote its vectors, or queued them to be written
    just after it returns (an unchanged message's only when the index had lost them)."""
    truncated_chars: int = 0
    """Characters past `max_index_chars`: stored, but not embedded (0: all of its text)."""


@dataclass(frozen=True, slots=True)
class IndexResult:
    """What one `index` call did, message by message."""

    stored: tuple[str, ...] = ()
    """Ids of the messages written to storage (new or updated)."""
    embedded: tuple[str, ...] = ()
    """Ids of the messages whose vectors were written (or queued: `MessageFate.embedded`)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Message id -> why it got no vector (system, no text, tool call only, an unusable
    vector from the embedder...)."""
    error: str | None = None
    """Set when embedding or the vector upsert failed, or when the embedder answered a
    message's text with an unusable vector (all zeros, NaN, infinite: that message alone
    has no vector, and is named); the messages are still stored. Also names the messages
    of this resource whose vectors, written after an earlier call returned, failed."""
    fates: tuple[MessageFate, ...] = ()
    """One entry per input message, in input order."""
    forgotten: bool = False
    """The thread was forgotten: its id is retired and nothing of this call was stored."""

    @property
    def unchanged(self) -> tuple[str, ...]:
        """Ids of the messages that were already stored as they are."""
        return tuple(f.message_id for f in self.fates if f.fate == "unchanged" and f.message_id)


@dataclass(frozen=True, slots=True)
class CompactResult:
    """What one backend's `compact` did to erase the bytes of deleted data."""

    backend: str
    """The backend (its class name)."""
    done: tuple[str, ...] = ()
    """What was done, one short line each (e.g. "VACUUM messages.sqlite3")."""
    bytes_before: int | None = None
    """Size on disk before (files under its path, or the server's tables); None: unknown."""
    bytes_after: int | None = None
    """Size on disk after; None: unknown."""
    vectors_rebuilt: int = 0
    """Vectors copied into rebuilt collections (the vector index only)."""


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """What `SemanticRecall.purge` did: the storage's and the vector index's compaction."""

    storage: CompactResult
    vectors: CompactResult


def conversation_title(record: MessageRecord) -> str | None:
    """The conversation title a stored message carries (`TITLE_KEY`), if any."""
    try:
        data = json.loads(record.payload).get("data", {})
        kwargs = data.get("additional_kwargs", {}) if isinstance(data, dict) else {}
    except (ValueError, AttributeError):
        return None
    title = kwargs.get(TITLE_KEY) if isinstance(kwargs, dict) else None
    return title if isinstance(title, str) and title.strip() else None


def unembedded_reason(record: MessageRecord) -> str | None:
    """Why a stored message gets no vector, or None if it is embedded.

    Only user and assistant messages with text are embedded (`messages.skip_reason` also
    names an assistant turn of tool calls alone).
    """
    if record.role == "system":
        return "system message"
    if record.role == "tool":
        return "tool message"
    return None if has_text(record.text) else "no text"
