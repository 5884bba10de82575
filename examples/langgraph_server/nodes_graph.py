"""A LangGraph server graph built from the package's nodes: recall -> model -> index.

``create_recall_graph`` wires ``RecallNode`` (before the model), the model and
``IndexNode`` (after it). No checkpointer here: the LangGraph server brings its own.
On the server, stream a run with ``stream_mode="tasks"`` to see what the ``recall`` node
found (``"updates"`` carries only the graph's output channel, ``messages``).

The model is ``default_chat_model()``: ``ChatOpenAI`` when ``OPENAI_API_KEY`` is set, else
the package's offline model, which answers by quoting what recall gave it.
"""

from __future__ import annotations

from semantic_memory import memory

from langchain_semantic_recall.graph import create_recall_graph
from langchain_semantic_recall.offline import default_chat_model

graph = create_recall_graph(
    default_chat_model(),
    memory,
    system_prompt="You are a helpful assistant with a long-term memory of past conversations.",
    name="recall_graph",
)
