"""What a failed vector write leaves, made visible to the repair.

`index` stores messages first and reports a failed vector write; `stats` and
`reindex(missing_only=True)` find the messages without a vector. A message of several
chunks whose write landed in part has *a* vector, so it would look whole to both.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from langchain_semantic_recall.engine import steps
from langchain_semantic_recall.engine.steps import Op
from langchain_semantic_recall.engine.vector_space import IndexInfo
from langchain_semantic_recall.records import VectorRecord


def drop_split(
    info: IndexInfo | None, rows: Sequence[VectorRecord], resource_id: str, logger: logging.Logger
) -> Op[None]:
    """After a failed vector write, delete every chunk of its messages of several chunks.

    The write may have landed in part: one chunk of a long message makes it count as
    having its vectors, so `reindex(missing_only=True)` would never write the others.
    Without any, the message counts as missing and the repair writes it whole.
    """
    chunks = Counter(row.message_id for row in rows)
    split = sorted(message_id for message_id, n in chunks.items() if n > 1)
    if info is None or not split:
        return
    try:
        yield steps.DeleteVectors(info, message_ids=split, resource_id=resource_id)
    except Exception:
        logger.warning(
            "could not delete the vectors of %d long message(s) written in part (%s): "
            "reindex() without missing_only writes them whole",
            len(split),
            ", ".join(split),
            exc_info=True,
        )
