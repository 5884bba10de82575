"""Vector writes that a failure or a concurrent move never leaves looking whole.

`index` stores messages first and reports a failed vector write; `stats` and
`reindex(missing_only=True)` find the messages without a vector. A write can land in
part, and a message of several chunks with one chunk written *has* a vector: it would
look whole to both, and the chunks not written would never be. So after a failed write
every chunk of such a message is deleted, and the repair sees it as missing
(`write_vectors`). A turn's write also follows its thread to an owner it got meanwhile
(`write_owned`).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import IndexInfo
from langchain_semantic_recall.records import VectorRecord


def write_vectors(
    info: IndexInfo, rows: Sequence[VectorRecord], logger: logging.Logger
) -> Op[None]:
    """Upsert `rows`; if that fails, drop the long messages it may have written in part.

    Raises:
        Exception: whatever the upsert raised (after the drop).
    """
    try:
        yield steps.UpsertVectors(info, rows)
    except Exception:
        yield from _drop_split(info, rows, logger)
        raise


def write_owned(
    info: IndexInfo,
    rows: Sequence[VectorRecord],
    thread_id: str,
    resource_id: str,
    logger: logging.Logger,
) -> Op[None]:
    """Write one thread's `rows` under `resource_id`, then follow a move made meanwhile.

    A `move_thread` (or an adoption) between this call's read of the owner and its write
    would leave the vectors under the old owner: the new one's search would not find
    them by meaning, and the old one's index would hold the thread's text. They are
    written again under the thread's owner now, or deleted if the thread is gone.
    """
    if not rows:
        return
    yield from write_vectors(info, rows, logger)
    owner: str | None = yield steps.ThreadOwner(thread_id)
    if owner == resource_id:
        return
    logger.warning("thread %r changed owner while it was indexed; its vectors follow", thread_id)
    ids = sorted({row.message_id for row in rows})
    yield steps.DeleteVectors(info, message_ids=ids, resource_id=resource_id)
    if owner is not None:
        yield from write_vectors(info, [replace(row, resource_id=owner) for row in rows], logger)


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
