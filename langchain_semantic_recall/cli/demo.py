"""`semantic-recall demo`: a LangGraph agent with semantic recall, turn by turn.

The demo loads a small shipped history (two users, four past conversations) into a fresh
embedded store, builds the agent of notebook `02_langgraph_agent` with
`create_recall_graph`, and plays new turns. For each turn it prints what the user said,
what recall found (score, conversation, text), the memory the model was given (never
saved into the conversation) and the answer.

The answers come from `OfflineChatModel`, a small deterministic model that quotes
the remembered line best matching the question, so the demo (and the notebooks) run with
no network and no API key. `--openai` uses `ChatOpenAI` instead (`OPENAI_API_KEY`;
model from `OPENAI_MODEL`, default `gpt-4o-mini`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_semantic_recall.cli.common import UsageError, a_path, store_urls, verbose_option
from langchain_semantic_recall.cli.render import boxed, rule, shorten, style

if TYPE_CHECKING:  # LangChain loads slowly: imported by `run`, not by `--help`
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig

SYSTEM_PROMPT = "You are a helpful assistant. Use what you remember about the user."

# (user, conversation, what the user says): new turns after the shipped history.
SCRIPT: tuple[tuple[str, str, str], ...] = (
    ("alice", "new-chat", "We land in Lisbon next week. Where did you say we should book?"),
    ("alice", "new-chat", "Any food tips? Remember what I told you about my allergy."),
    ("alice", "new-chat", "Also, when can I plant my tomatoes outside?"),
    ("bob", "bob-chat", "Which neighbourhood should I stay in for Lisbon?"),
)

# --- the command ------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add the `demo` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        parents=[verbose_option()],
        help="watch a LangGraph agent with semantic recall, turn by turn",
        description=(
            "Loads a small shipped history (two users, four conversations) into a fresh "
            "embedded store, then runs a LangGraph agent with semantic recall on new turns, "
            "showing what recall found, what the model was given and its answer."
        ),
    )
    parser.add_argument(
        "--path",
        default=argparse.SUPPRESS,
        type=a_path,
        help="a new or empty folder to keep the demo's store in (default: a temporary folder)",
    )
    parser.add_argument("--top-k", type=int, default=3, help="hits per turn (default: 3)")
    parser.add_argument(
        "--openai",
        action="store_true",
        help="answer with ChatOpenAI (needs OPENAI_API_KEY) instead of the offline model",
    )
    parser.set_defaults(func=run)


def _print_hits(hits: Sequence[Any]) -> None:
    if not hits:
        print("  (nothing recalled)")
        return
    for hit in hits:
        label = style(f"[{hit.thread_id}]", "cyan")
        role = hit.message.role.capitalize()
        score = style(f"{hit.score:.2f}", "green")
        print(f"  {score}  {label} {role}: {shorten(hit.message.text, 70)}")


def _print_injected(recalled: Sequence[BaseMessage]) -> None:
    if not recalled:
        print(style("Nothing was added to the model's input.", "dim"))
        return
    print(style("Given to the model (tagged source: memory, never saved in the chat):", "bold"))
    for message in recalled:
        print(style(f"  ┌ {message.type}", "magenta"))
        print(boxed(message.text))


def _fresh_path(args: argparse.Namespace) -> Path | None:
    """The folder `--path` names, checked to be new or empty; None without `--path`.

    The demo loads its history into a fresh store: in one that already holds a store (a
    previous demo's), recall would find the earlier runs' turns and the counts printed
    would be wrong. `--storage` / `--vector` are refused rather than ignored.
    """
    if store_urls(args) is not None:
        raise UsageError(
            "demo runs on a fresh embedded store and does not use --storage / --vector: "
            "leave them out (or give demo --path DIR, a new folder)"
        )
    given = getattr(args, "path", None)
    if not given:
        return None
    path = Path(given)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a folder: pass a new folder to demo --path")
    if path.exists() and any(path.iterdir()):
        raise UsageError(
            f"demo loads its history into a fresh store, and {path} is not an empty folder: "
            "pass a new folder to --path, or leave --path out (a temporary folder)"
        )
    return path


def run(args: argparse.Namespace) -> int:
    """`semantic-recall demo`: load the shipped history and play new turns, printed."""
    given = _fresh_path(args)
    if args.openai and not os.environ.get("OPENAI_API_KEY"):
        raise UsageError(
            "demo --openai answers with ChatOpenAI, which needs OPENAI_API_KEY: set it, or "
            "leave --openai out for the offline model"
        )
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_semantic_recall.graph import RECALL_KEY, create_recall_graph
    from langchain_semantic_recall.importers import demo_conversations
    from langchain_semantic_recall.messages import is_recalled
    from langchain_semantic_recall.offline import OfflineChatModel, default_chat_model
    from langchain_semantic_recall.recall import SemanticRecall

    with (
        tempfile.TemporaryDirectory(prefix="semantic-recall-demo-") as scratch,
        contextlib.ExitStack() as owned,  # closed first: the engine, then the folder
    ):
        path = given or Path(scratch)
        print(
            style("semantic-recall demo", "bold"),
            f"- embedded default in {path} (SQLite + embedded Chroma + local MiniLM model)",
        )
        memory = owned.enter_context(SemanticRecall.local(path, top_k=args.top_k))
        history = demo_conversations()
        started = time.perf_counter()
        for conversation in history.conversations:
            memory.index(
                conversation.messages,
                thread_id=conversation.thread_id,
                resource_id=conversation.resource_id,
            )
        print(
            f"Loaded {history.message_count} past messages in "
            f"{len(history.conversations)} conversations "
            f"({', '.join(c.thread_id + ' of ' + c.resource_id for c in history.conversations)})"
            f" in {time.perf_counter() - started:.1f} s."
        )
        model = default_chat_model() if args.openai else OfflineChatModel()
        name = "offline model" if isinstance(model, OfflineChatModel) else type(model).__name__
        graph = create_recall_graph(
            model, memory, system_prompt=SYSTEM_PROMPT, checkpointer=InMemorySaver()
        )
        print("Agent: recall -> model -> index (LangGraph, in-memory checkpointer).\n")
        for number, (resource, thread, said) in enumerate(SCRIPT, start=1):
            print(style(rule(f"Turn {number} · {resource} in conversation {thread!r}"), "yellow"))
            print(style("User:", "bold"), said)
            config: RunnableConfig = {
                "configurable": {"thread_id": thread, "resource_id": resource}
            }
            hits = memory.search(said, thread_id=thread, resource_id=resource)  # for display
            started = time.perf_counter()
            recalled: Sequence[BaseMessage] = ()
            answer = ""
            turn = {"messages": [HumanMessage(said)]}
            for update in graph.stream(turn, config, stream_mode="updates"):
                if "recall" in update:
                    recalled = update["recall"][RECALL_KEY].messages
                if "model" in update:
                    answer = update["model"]["messages"][-1].text
            took = (time.perf_counter() - started) * 1000
            print(style(f"\nRecall found ({memory.scope} scope, turn took {took:.0f} ms):", "bold"))
            _print_hits(hits)
            print()
            _print_injected(recalled)
            print(style(f"\nAssistant ({name}):", "bold"), answer, "\n")
        kept = graph.get_state({"configurable": {"thread_id": "new-chat"}}).values["messages"]
        stats = memory.stats()
        print(style(rule("Afterwards"), "yellow"))
        print(
            f"The checkpointed conversation 'new-chat' holds {len(kept)} messages: only the "
            f"real turns, none of them recalled ({sum(map(is_recalled, kept))})."
        )
        print(
            f"Memory: {stats.messages} messages in {stats.threads} conversations of "
            f"{stats.resources} users; {stats.vectors} vectors in index {stats.index_name!r}."
        )
        print("bob's turn recalled only bob's memories; alice's are never shown to him.")
        print(_next_steps(given))
    return 0


def _next_steps(kept: Path | None) -> str:
    """What to run next: look inside the store the demo kept, or keep one."""
    if kept is None:
        return (
            "\nThe store was temporary and is deleted now. To keep one and look inside it:\n"
            "  semantic-recall demo --path DIR\n"
            "  semantic-recall --path DIR threads"
        )
    where = shlex.quote(str(kept))
    return (
        f"\nThe store stays in {kept}. Look inside it:\n"
        f"  semantic-recall --path {where} threads\n"
        f'  semantic-recall --path {where} search "peanut allergy" --resource alice\n'
        f"  semantic-recall --path {where} inspect --resource alice --thread new-chat "
        '"any snack ideas?"'
    )
