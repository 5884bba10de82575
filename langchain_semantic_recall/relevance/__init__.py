"""How recall scores past messages and when it stays silent (see `model`)."""

from langchain_semantic_recall.relevance.features import (
    Query,
    TermCache,
    content_terms,
    is_question,
)
from langchain_semantic_recall.relevance.model import (
    Evidence,
    FittedFor,
    RelevanceModel,
    default_model,
)
from langchain_semantic_recall.relevance.reference import (
    SMALL_TALK,
    UNRELATED,
    QueryBaseline,
    Reference,
)

__all__ = [
    "SMALL_TALK",
    "UNRELATED",
    "Evidence",
    "FittedFor",
    "Query",
    "QueryBaseline",
    "Reference",
    "RelevanceModel",
    "TermCache",
    "content_terms",
    "default_model",
    "is_question",
]
