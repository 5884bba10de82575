"""Vector index backends. `chroma` is imported lazily: importing this package is cheap."""

from langchain_semantic_recall.vectors.base import ExportNotSupportedError, VectorIndex
from langchain_semantic_recall.vectors.memory import InMemoryVectorIndex

__all__ = ["ExportNotSupportedError", "InMemoryVectorIndex", "VectorIndex"]
