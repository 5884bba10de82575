"""Importing the package in a fresh interpreter loads neither chromadb nor langgraph."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_loads_neither_chromadb_nor_langgraph() -> None:
    code = (
        "import sys, langchain_semantic_recall as p\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('chromadb', 'langgraph')"
        " or m.startswith('langchain.agents')]\n"
        "assert not heavy, heavy\n"
        "assert p.create_recall_graph.__module__ == 'langchain_semantic_recall.graph'\n"
        "assert p.SemanticRecallMiddleware.__module__ == 'langchain_semantic_recall.middleware'\n"
        "assert all(hasattr(p, name) for name in p.__all__)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
