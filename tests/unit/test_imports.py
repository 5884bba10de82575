"""The public API: `__all__` is exactly the expected list, and importing it stays light.

As in LangChain's partner packages, a name added to or removed from `__all__` must also
be added here: the public surface changes on purpose only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import langchain_semantic_recall

ROOT = Path(__file__).resolve().parents[2]

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
    "RecallReport",
    "RecallStats",
    "RetentionResult",
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


def _loaded_after(code: str) -> list[str]:
    """Modules of chromadb loaded after running `code` in a fresh interpreter."""
    script = textwrap.dedent(
        f"""
        import json, sys
        {code}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "chromadb")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_package_does_not_import_chromadb() -> None:
    assert _loaded_after("import langchain_semantic_recall") == []


def test_resolving_every_public_name_does_not_import_chromadb() -> None:
    """The lazy LangGraph and agent surfaces stay free of chromadb too."""
    code = "import langchain_semantic_recall as p; [getattr(p, name) for name in p.__all__]"
    assert _loaded_after(code) == []
