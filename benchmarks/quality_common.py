"""What the quality benchmarks share: locomo-dev loaded through the engine, once.

The store is the one `semantic-recall eval` measures, minus what would add noise to a
replay: SQLite storage in memory (FTS5 keyword search), exact in-memory vectors and the
local MiniLM model, with an embedding cache big enough for every message and question.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from langchain_semantic_recall import SemanticRecall
from langchain_semantic_recall.evaluation import Dataset, load_dataset, read_locomo
from langchain_semantic_recall.storage.sqlite import SQLiteStorage
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

T = TypeVar("T")

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/locomo-dev/locomo_dev.json"


def locomo_engine(data: Path) -> tuple[SemanticRecall, SQLiteStorage, Dataset]:
    """The engine with `data` loaded (each conversation a resource, each session a thread)."""
    from langchain_semantic_recall.local_embeddings import LocalEmbeddings

    dataset = read_locomo(data)
    storage = SQLiteStorage(":memory:")
    memory = SemanticRecall(
        storage=storage,
        vector_store=InMemoryVectorIndex(),
        embeddings=LocalEmbeddings(),
        cache_size=20_000,
    )
    load_dataset(memory, dataset)
    return memory, storage, dataset


def cached(build: Callable[[Path], T], data: Path, cache: Path) -> T:
    """`build(data)`, pickled to `cache` the first time and read back from it after."""
    if cache.is_file():
        loaded: T = pickle.loads(cache.read_bytes())  # our own cache file, written below
        return loaded
    built = build(data)
    cache.write_bytes(pickle.dumps(built))
    return built
