"""In a fresh interpreter, importing the package loads no chromadb.

Nor does resolving every public name.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def test_importing_vectors_does_not_import_chromadb() -> None:
    assert _loaded_after("import langchain_semantic_recall.vectors") == []


def test_chroma_indexes_are_in_vectors_all() -> None:
    from langchain_semantic_recall import vectors
    from langchain_semantic_recall.vectors.chroma import ChromaVectorIndex
    from langchain_semantic_recall.vectors.chroma_server import ChromaServerVectorIndex

    assert {"ChromaVectorIndex", "ChromaServerVectorIndex"} <= set(vectors.__all__)
    assert vectors.ChromaVectorIndex is ChromaVectorIndex
    assert vectors.ChromaServerVectorIndex is ChromaServerVectorIndex
    assert all(hasattr(vectors, name) for name in vectors.__all__)
