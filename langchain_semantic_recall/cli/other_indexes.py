"""The store's other indexes, reached by the commands that delete.

A forget or a move through one index leaves the vectors of another embedder's index of
the same store as they were: that index's messages gone or moved, its vectors kept, text
and all. The command line opens each other index under the model it recorded
(`cli.recorded`, no embedding) and deletes there too: a forget of a thread or resource
deletes the same vectors; a forget by date, or `purge`, the vectors whose message is no
longer stored (`drop_orphans`); a `move`, the moved thread's vectors, filed under the
old owner (that embedder's `reindex(missing_only=True)` writes them under the new one).

Only a store given by `--path` lists its indexes (from Chroma's file); with URLs, a
command works on the one index it opens.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import TYPE_CHECKING

from langchain_semantic_recall.cli.common import open_memory, store_urls
from langchain_semantic_recall.cli.places import other_indexes

if TYPE_CHECKING:
    from langchain_semantic_recall.engine.steps import Op
    from langchain_semantic_recall.engine.vector_space import IndexInfo
    from langchain_semantic_recall.recall import SemanticRecall


def other_engines(
    args: argparse.Namespace, index_name: str
) -> Iterator[tuple[str, str, SemanticRecall]]:
    """The store's indexes but `index_name`, each as an engine that embeds nothing.

    Yields (index name, its model, the engine); nothing for a store given by URLs.
    """
    if store_urls(args) is not None:
        return
    for name, model, _ in other_indexes(args, index_name):
        named = argparse.Namespace(**{**vars(args), "index_name": name})
        yield name, model, open_memory(named, embeds=False)


def drop_orphans(memory: SemanticRecall) -> int:
    """Delete the vectors of `memory`'s index whose message is not stored; how many messages.

    What a forget by date, or through another index, leaves in this one (`purge` deletes
    them in its own index before it compacts).
    """
    from langchain_semantic_recall.engine.purge_ops import drop_orphans as dropped

    return memory._core.run(dropped(memory.ensure_index()))


def drop_thread_vectors(memory: SemanticRecall, thread_id: str, resource_id: str | None) -> None:
    """Delete a thread's vectors filed under `resource_id` (None: any) in `memory`'s index."""
    memory._core.run(_deleted(memory.ensure_index(), thread_id, resource_id))


def _deleted(info: IndexInfo, thread_id: str, resource_id: str | None) -> Op[None]:
    from langchain_semantic_recall.engine import steps

    yield steps.DeleteVectors(info, thread_id=thread_id, resource_id=resource_id)
