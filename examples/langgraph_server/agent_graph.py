"""A LangGraph server agent: ``create_agent`` with ``SemanticRecallMiddleware``.

The middleware recalls once per user turn (``before_agent``), adds what it found to
every model call of the turn (``wrap_model_call``) and stores the turn when the agent
finishes (``after_agent``). ``search_tool=True`` also gives the agent a
``search_memory`` tool over the same memory, scoped to the signed-in user like recall.
"""

from __future__ import annotations

from langchain.agents import create_agent
from semantic_memory import memory

from langchain_semantic_recall.middleware import SemanticRecallMiddleware
from langchain_semantic_recall.offline import default_chat_model

agent = create_agent(
    default_chat_model(),
    system_prompt="You are a helpful assistant with a long-term memory of past conversations.",
    middleware=[SemanticRecallMiddleware(memory, search_tool=True)],
    name="recall_agent",
)
