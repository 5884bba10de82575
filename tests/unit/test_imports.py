"""The public API: `__all__` is exactly the expected list, and importing it stays light.

As in LangChain's partner packages, a name added to or removed from `__all__` must also
be added here: the public surface changes on purpose only.
"""

from __future__ import annotations

import langchain_semantic_recall

EXPECTED_ALL = [
    "MEMORY_SOURCE",
    "BulkResult",
    "EmbeddingCache",
    "EmbeddingMismatchError",
    "ForgottenThreadError",
    "Identity",
    "IdentityKeys",
    "IdentityMismatchError",
    "InMemoryStorage",
    "IndexInfo",
    "IndexNode",
    "IndexResult",
    "InvalidInputError",
    "InvalidOptionError",
    "MessageFate",
    "MessageRange",
    "MessageStorage",
    "MissingIdentityError",
    "OwnershipError",
    "ReadOnlyError",
    "RecallHit",
    "RecallNode",
    "RecallState",
    "RecallStats",
    "SQLiteStorage",
    "Scope",
    "ScopeFilter",
    "SemanticRecall",
    "SemanticRecallChatHistory",
    "SemanticRecallError",
    "SemanticRecallMiddleware",
    "SemanticRecallRetriever",
    "StorageError",
    "StoredMessage",
    "VectorIndex",
    "__version__",
    "create_memory_search_tool",
    "create_recall_graph",
]


def test_all_imports() -> None:
    assert sorted(langchain_semantic_recall.__all__) == sorted(EXPECTED_ALL)


def test_every_public_name_resolves() -> None:
    missing = [
        name
        for name in langchain_semantic_recall.__all__
        if not hasattr(langchain_semantic_recall, name)
    ]
    assert missing == []
