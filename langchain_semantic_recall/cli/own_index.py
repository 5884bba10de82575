"""Which index of a shared vector server is this store's.

On a Chroma server several stores share, each under its own `index_name`, a command
given no `--index-name` opened the model's default index, which may be another store's:
a forget then deleted nothing of this store's and said it had, a repair deleted the
other store's vectors as orphans, and a migration copied them, other users' text and all
(an audit). A store now records the indexes its vectors are written to
(`storage.index_records`), and a command given no `--index-name` opens the one it
records for the embedder (`store_index`). A store written before that records none: before
a command given URLs acts on it, `require_own_index` checks that the index holds a vector
of this store's messages when it holds any vector at all. That check is a sample: a copy
of the store (`migrate` keeps the message ids) passes it on the original's index. (A
store given by `--path` owns its Chroma folder, whose indexes
`places.require_own_vectors` reads from its file.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from langchain_semantic_recall.errors import CommandError
from langchain_semantic_recall.records import ScopeFilter, unembedded_reason

if TYPE_CHECKING:
    import argparse
    from typing import Any

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
        f"messages of {what} checked: another store's index? ({what.capitalize()} records "
        "no index of its own (written before stores recorded them), so without "
        "--index-name a command opens the model's default index.) Give --index-name with "
        f"the index_name= of this store's app; if it is this one, name it: --index-name "
        f"{index}. Nothing was changed"
    )


def store_index(args: argparse.Namespace, backends: dict[str, Any]) -> str | None:
    """`--index-name`, else the store's recorded index for the embedder, if not its default.

    None: the default, or an embedder only a probe tells (the engine then decides).

    Args:
        args: Parsed arguments (`index_name`).
        backends: The opened `storage` and `embeddings`.
    """
    from langchain_semantic_recall.engine.vector_space import named_index
    from langchain_semantic_recall.storage.index_records import RecordedIndex, own_index

    if (name := getattr(args, "index_name", None) or None) is not None:
        return str(name)
    info = named_index(backends["embeddings"], None)
    if info is None:
        return None
    default = RecordedIndex(info.name, info.model, info.dimension)
    own = own_index(default, backends["storage"].recorded_indexes())
    return None if own == info.name else own
