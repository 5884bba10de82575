"""Which index of a shared vector server is this store's.

A store does not record the name of its vector index. On a Chroma server several stores
share, each under its own `index_name`, a command given no `--index-name` opens the
model's default index, which may be another store's: a forget then deleted nothing of
this store's and said it had, a repair deleted the other store's vectors as orphans, and
a migration copied them, other users' text and all (an audit). Before a command given
URLs acts, `require_own_index` checks that the index holds a vector of this store's
messages when it holds any vector at all, unless `--index-name` names it. The check is a
sample: a copy of the store (`migrate` keeps the message ids) passes it on the
original's index. (A store given by `--path` owns its Chroma folder, whose indexes
`places.require_own_vectors` reads from its file.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from langchain_semantic_recall.errors import CommandError
from langchain_semantic_recall.records import ScopeFilter, unembedded_reason

if TYPE_CHECKING:
    from langchain_semantic_recall.storage.base import MessageStorage
    from langchain_semantic_recall.vectors.base import VectorIndex

SAMPLE: Final = 200
"""Stored messages checked (the first, in thread order)."""
THREADS: Final = 5
"""Threads of the sample whose vectors are read (a thread's ids, not a resource's all)."""


def require_own_index(
    storage: MessageStorage, vectors: VectorIndex, index: str, what: str = "this store"
) -> None:
    """Refuse an index that holds vectors, none of them of the store's messages checked.

    Args:
        storage: The store's messages.
        vectors: The vector index host the command opened.
        index: The index's name.
        what: How the message names the store ("the source store").

    Raises:
        CommandError: the index is another store's (give `--index-name`).
    """
    sample = [m for m in storage.list_messages(None, limit=SAMPLE) if unembedded_reason(m) is None]
    if not sample:
        return  # nothing of this store to find there
    held = vectors.count(index)
    if not held:
        return  # a new index, or one whose writes all failed: `stats` counts them missing
    by_thread: dict[tuple[str, str], set[str]] = {}
    for message in sample:
        by_thread.setdefault((message.resource_id, message.thread_id), set()).add(message.id)
    for (resource, thread), ids in list(by_thread.items())[:THREADS]:
        if vectors.message_ids(index, ScopeFilter(resource_id=resource, thread_id=thread)) & ids:
            return
    raise CommandError(
        f"the vector index {index!r} holds {held} vector(s), but none of the {len(sample)} "
        f"messages of {what} checked: another store's index? (A store does not record "
        "its index name, and without --index-name every command opens the model's "
        "default index.) Give --index-name with the index_name= of this store's app; if "
        f"it is this one, name it: --index-name {index}. Nothing was changed"
    )
