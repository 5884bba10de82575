"""Commands that embed nothing work on any embedder's index of a local store.

A store written from Python with another embedder (OpenAI's, say) holds an index the
command line's model did not make. `search`, `inspect`, `reindex`, `ingest` and `move`
embed, and `stats` counts chunks by the model's tokenizer, so they refuse such a store
(`places.require_own_vectors`). `forget` and `purge` only delete vectors: they open that
index under a stand-in named as the model that made it (`RecordedModel`), which refuses
to embed (and so reach the store's other indexes too: `cli.other_indexes`).
"""

from __future__ import annotations

from pathlib import Path

from langchain_core.embeddings import Embeddings

from langchain_semantic_recall.errors import EmbeddingMismatchError


class RecordedModel(Embeddings):
    """The model an index was made by, named and sized as recorded; it never embeds.

    Args:
        model: The model name the index recorded.
        dimension: Its vectors' dimension.
        index: The index's name (for the error).
    """

    def __init__(self, model: str, dimension: int, index: str) -> None:
        self.model = model
        self.dimension = dimension
        self._index = index

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Refuse: this command line cannot embed with the index's model.

        Raises:
            EmbeddingMismatchError: always.
        """
        raise EmbeddingMismatchError(
            f"index {self._index} was made by {self.model} ({self.dimension}-d), which the "
            "command line cannot embed with: open the store from Python with that embedder "
            "(SemanticRecall.local(path, embeddings=...))"
        )

    def embed_query(self, text: str) -> list[float]:
        """Refuse, as `embed_documents`."""
        return self.embed_documents([text])[0]


def index_of_another_model(
    path: Path, embeddings: Embeddings, name: str | None
) -> tuple[RecordedModel, str] | None:
    """Another model's index of the store, for a command that embeds nothing, and its stand-in.

    That index is `name` (`--index-name`) when given, else the store's only index when
    none is the command line model's. None: the command line's model is the store's own,
    or the store holds no index, or several of other models and no `name` to choose
    (`places.require_own_vectors` then says so).

    Args:
        path: The local store's folder.
        embeddings: The command line's embedder.
        name: The `--index-name` given, or None.
    """
    from langchain_semantic_recall.engine.vector_space import named_index
    from langchain_semantic_recall.settings import local_indexes

    own = named_index(embeddings, name)
    if own is None:  # its index is known only by embedding a probe: nothing to compare
        return None
    found = local_indexes(path)
    if name is None and own.name not in found and len(found) == 1:
        name = next(iter(found))
    made = found.get(name) if name is not None else None
    if name is None or made is None or made == (own.model, own.dimension):
        return None
    return RecordedModel(made[0], made[1], name), name
