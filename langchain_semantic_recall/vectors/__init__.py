"""Vector index backends, and the records a vector backend reads and writes.

`ChromaVectorIndex` and `ChromaServerVectorIndex` are imported on first use: importing
this package stays cheap (no chromadb until a Chroma index is asked for).
"""

from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.errors import ExportNotSupportedError
from langchain_semantic_recall.records import (
    CompactResult,
    HeldVectors,
    ScopeFilter,
    VectorHit,
    VectorRecord,
)
from langchain_semantic_recall.vectors.base import VectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

if TYPE_CHECKING:
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
    from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex

_LAZY = {"ChromaVectorIndex": "chroma", "ChromaServerVectorIndex": "chroma_server"}


def __getattr__(name: str) -> Any:
    """`ChromaVectorIndex` / `ChromaServerVectorIndex`, imported when first used."""
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ChromaServerVectorIndex",
    "ChromaVectorIndex",
    "CompactResult",
    "ExportNotSupportedError",
    "HeldVectors",
    "InMemoryVectorIndex",
    "ScopeFilter",
    "VectorHit",
    "VectorIndex",
    "VectorRecord",
]
