"""The example's memory: one embedded engine per server process, under SEMANTIC_RECALL_PATH.

``SemanticRecall.local(path)`` keeps messages in SQLite and vectors in embedded Chroma
under ``path`` and embeds with the local ONNX model (no API key), so what the server
remembers survives a restart. The two options below are the engine's defaults, spelled
out because they are what a server with authentication relies on: recall across every
thread of a resource, and the resource bound to the signed-in user, whom the LangGraph
server puts in ``config["configurable"]["langgraph_auth_user_id"]`` of every run. The
graphs pass the run config through untouched; no code here reads the user.

The server loads each graph file by its path, once per graph; this module is imported by
name (``langgraph dev`` puts the folder it runs in on ``sys.path``), so it runs once and
both graphs share one engine.
"""

from __future__ import annotations

import os
from pathlib import Path

from langchain_semantic_recall import SemanticRecall

PATH_ENV = "SEMANTIC_RECALL_PATH"
DEFAULT_PATH = Path(__file__).resolve().parent / ".memory"


def memory_path() -> Path:
    """Where the memory lives: ``$SEMANTIC_RECALL_PATH``, else ``.memory`` beside this file."""
    configured = os.environ.get(PATH_ENV)
    return Path(configured).expanduser() if configured else DEFAULT_PATH


def open_memory() -> SemanticRecall:
    """A new engine over :func:`memory_path` (the folder is created on first use)."""
    path = memory_path()
    path.mkdir(parents=True, exist_ok=True)
    return SemanticRecall.local(
        path,
        scope="resource",  # recall across all of the user's threads
        auth_user_key="langgraph_auth_user_id",  # the signed-in user IS the resource
    )


memory = open_memory()
"""The process's engine, shared by both graphs (Python imports this module once)."""
