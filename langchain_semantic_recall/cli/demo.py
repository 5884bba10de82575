"""``semantic-recall demo``: watch recall work, turn by turn, on the embedded default."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_semantic_recall.cli.render import boxed, rule, shorten, style
from langchain_semantic_recall.importers import demo_conversations
from langchain_semantic_recall.messages import MEMORY_SOURCE

LIVE_WINDOW = 2
"""Messages of the current conversation the scripted agent keeps in its prompt."""

# (resource, thread, what the user says, what the scripted assistant answers)
SCRIPT: tuple[tuple[str, str, str, str], ...] = (
    (
        "alice",
        "new-chat",
        "We land in Lisbon next week. Which neighbourhood did you suggest?",
        "You were considering Príncipe Real or the edge of Alfama.",
    ),
    (
        "alice",
        "new-chat",
        "Any food tips? Remember what I told you about my allergy.",
        "Ask about nuts at pastry shops: you mentioned a peanut allergy.",
    ),
    (
        "alice",
        "new-chat",
        "Also, when can my tomatoes go outside?",
        "Near Porto, in late April once nights stay above 10°C.",
    ),
    (
        "alice",
        "new-chat",
        "Back to the trip: remind me which neighbourhood we picked?",
        "Príncipe Real or Alfama.",
    ),
    (
        "bob",
        "bob-chat",
        "Which neighbourhood should I stay in for Lisbon?",
        "I only know you plan to go in August; book early.",
    ),
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="load a small multi-thread history and show what recall injects, turn by turn",
        description=(
            "Loads a small shipped history (two users, four conversations) into a fresh "
            "embedded store and plays new turns, showing the hits recall finds, with their "
            "scores and conversations, and exactly what the model would be given."
        ),
    )
    parser.add_argument("--path", help="store location (default: a temporary folder)")
    parser.add_argument("--top-k", type=int, default=3, help="hits per turn (default: 3)")
    parser.set_defaults(func=run)


def _print_hits(hits: list[Any]) -> None:
    if not hits:
        print("  (nothing recalled)")
        return
    for hit in hits:
        label = style(f"[{hit.thread_id}]", "cyan")
        role = hit.message.role.capitalize()
        print(
            f"  {style(f'{hit.score:.2f}', 'green')}  {label} {role}: "
            f"{shorten(hit.message.text, 70)}"
        )


def _print_model_view(result: list[BaseMessage], live: list[BaseMessage]) -> None:
    added = [m for m in result if m.additional_kwargs.get("source") == MEMORY_SOURCE]
    print(
        style(
            f"What the model is given: {len(added)} remembered message(s), then the "
            f"live conversation ({len(live)} message(s)):",
            "bold",
        )
    )
    for message in added:
        print(style(f"  ┌ {message.type} (source: memory)", "magenta"))
        print(boxed(message.text))
    print(style(f"  ┌ {live[-1].type} (this turn)", "dim"))
    print(boxed(live[-1].text))


def run(args: argparse.Namespace) -> int:
    from langchain_semantic_recall.recall import SemanticRecall

    with tempfile.TemporaryDirectory(prefix="semantic-recall-demo-") as scratch:
        path = Path(args.path) if args.path else Path(scratch)
        print(
            style("semantic-recall demo", "bold"),
            f"- embedded default in {path} (SQLite + embedded Chroma + local MiniLM model)",
        )
        memory = SemanticRecall.local(path, top_k=args.top_k, message_range=1)
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
            f" in {time.perf_counter() - started:.1f} s.\n"
        )
        live: dict[str, list[BaseMessage]] = {}
        for number, (resource, thread, said, answer) in enumerate(SCRIPT, start=1):
            print(style(rule(f"Turn {number} · {resource} in conversation {thread!r}"), "yellow"))
            print(style("User:", "bold"), said)
            # Like an agent that keeps only its last messages: older turns of this
            # conversation come back through recall, as themselves.
            history_now = live.setdefault(thread, [])[-LIVE_WINDOW:]
            question = HumanMessage(said, id=f"{thread}-q{number}")
            started = time.perf_counter()
            hits = memory.search(said, thread_id=thread, resource_id=resource)
            result = memory.recall([*history_now, question], thread_id=thread, resource_id=resource)
            took = (time.perf_counter() - started) * 1000
            print(
                style(
                    f"\nRecall found ({memory.scope} scope, top {memory.top_k}, {took:.0f} ms):",
                    "bold",
                )
            )
            _print_hits(hits)
            print()
            _print_model_view(result, [*history_now, question])
            reply = AIMessage(answer, id=f"{thread}-a{number}")
            print(style("\nAssistant (scripted):", "bold"), answer, "\n")
            memory.index([question, reply], thread_id=thread, resource_id=resource)
            live[thread].extend([question, reply])
        stats = memory.stats()
        print(style(rule("Stored"), "yellow"))
        print(
            f"{stats.messages} messages in {stats.threads} conversations of "
            f"{stats.resources} users; {stats.vectors} vectors in index {stats.index_name!r}; "
            f"missing vectors: {stats.missing_vectors}."
        )
        print("Note: bob's turn recalled only bob's memories; alice's are never shown to him.")
    return 0
