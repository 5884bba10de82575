"""The root collection of each index of a chromadb client: its embedding model and dimension.

`ChromaVectorIndex` records, per index name, a vector-less *root* collection whose
metadata names the embedding model, the dimension and the layout version; a mismatched
embedder fails closed (`chroma_layout.check_model`). This module creates, checks and
caches them. chromadb is imported inside functions only.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from langchain_semantic_recall.vectors.chroma_layout import LAYOUT, check_model, read_root

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.collection_configuration import CreateCollectionConfiguration

__all__ = ["ChromaRoots"]

logger = logging.getLogger(__name__)


class ChromaRoots:
    """(model, dimension) of each index of one client, read once and cached; thread-safe."""

    def __init__(self, client: ClientAPI, configuration: CreateCollectionConfiguration) -> None:
        """Wrap `client`; a root created here gets `configuration` (cosine HNSW)."""
        self._client = client
        self._configuration = configuration
        self._lock = threading.Lock()
        self._roots: dict[str, tuple[str, int]] = {}

    def open(self, name: str, *, dimension: int, model: str) -> bool:
        """Create the root collection if missing, or check an existing one.

        Returns:
            True when this call created it.

        Raises:
            EmbeddingMismatchError: the index was built with another model or dimension,
                not in cosine space, or holds vectors of an earlier layout.
        """
        from chromadb.errors import NotFoundError

        with self._lock:
            known = self._roots.get(name)
        if known is not None:
            check_model(name, *known, model, dimension)
            return False
        created = False
        try:
            root = self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            root = self._client.get_or_create_collection(
                name,
                embedding_function=None,
                configuration=self._configuration,
                metadata={"embedding_model": model, "dimension": dimension, "layout": LAYOUT},
            )
            logger.info("created vector index %r (%s, %d-d)", name, model, dimension)
            created = True
        entry = read_root(name, root, model)
        if entry is None:  # an empty collection made elsewhere or by an earlier version: adopt
            stored = dict(root.metadata or {})
            entry = (
                str(stored.get("embedding_model") or model),
                int(stored.get("dimension") or dimension),
            )
            layout = {"embedding_model": entry[0], "dimension": entry[1], "layout": LAYOUT}
            root.modify(metadata={**stored, **layout})
        check_model(name, *entry, model, dimension)
        with self._lock:
            self._roots[name] = entry
        return created

    def get(self, name: str) -> tuple[str, int] | None:
        """(model, dimension) of an opened or existing index; None if it does not exist."""
        from chromadb.errors import NotFoundError

        with self._lock:
            known = self._roots.get(name)
        if known is not None:
            return known
        try:
            root = self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None
        entry = read_root(name, root)
        if entry is None:
            return None  # not opened by us yet: nothing stored
        with self._lock:
            self._roots[name] = entry
        return entry

    def forget(self, name: str) -> None:
        """Forget index `name` (dropped)."""
        with self._lock:
            self._roots.pop(name, None)

    def clear(self) -> None:
        """Forget every index."""
        with self._lock:
            self._roots.clear()
